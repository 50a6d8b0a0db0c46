/*
 * test_simulate.c - the ground-truth simulator: probe layouts, determinism
 * (same seed and any thread count or block size -> identical bytes; another
 * seed -> different), ground-truth consistency (sorted in-range times, no
 * refractory violations, templates that the written recording reproduces),
 * footprints and waveform shapes, noise level and spatial correlation, the
 * three kinds of drift and the movement they cause, and a short NP1 run with
 * its SpikeGLX pair. Small configurations (linear32, 10 s) keep it fast.
 */
#include "test.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdint.h>

#include "common/fileio.h"
#include "io/npy.h"
#include "mem/mem.h"
#include "sim/simulate.h"

static char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static int same_file(const char *d1, const char *d2, const char *name)
{
    size_t n1 = 0, n2 = 0;
    char *a = slurp(d1, name, &n1), *b = slurp(d2, name, &n2);
    int same = a && b && n1 == n2 && memcmp(a, b, n1) == 0;
    free(a);
    free(b);
    return same;
}

static const char *gt_files[] = {"recording.bin", "probe.json", "recording.json", "gt_spike_times.npy",
                                 "gt_spike_units.npy", "gt_unit_positions.npy", "gt_templates.npy",
                                 "gt_drift_um.npy"};

static cJSON *load_json(const char *dir)
{
    size_t n;
    char *t = slurp(dir, "recording.json", &n);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

static double jnum(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

typedef struct {
    cJSON *json;
    int C, U, nt, nb;
    int64_t n, n_spikes;
    double fs, uvpb;
    float *x;       /* [n][C] µV */
    int64_t *t;
    int32_t *u;
    float *tmpl;    /* [U][nt][C] */
    float *pos;     /* [U][3] */
    float *drift;
    int64_t drift_shape[2];
} gt_folder;

static int load_gt(const char *dir, gt_folder *g)
{
    memset(g, 0, sizeof *g);
    g->json = load_json(dir);
    if (!g->json)
        return 0;
    g->C = (int)jnum(g->json, "n_chan");
    g->n = (int64_t)jnum(g->json, "n_samples");
    g->nt = (int)jnum(g->json, "nt");
    g->nb = (int)jnum(g->json, "nt_before");
    g->fs = jnum(g->json, "fs_hz");
    g->uvpb = jnum(g->json, "uv_per_bit");
    g->U = (int)jnum(g->json, "n_units");
    size_t len;
    int16_t *raw = (int16_t *)slurp(dir, "recording.bin", &len);
    if (!raw || len != (size_t)g->n * (size_t)g->C * 2) {
        free(raw);
        return 0;
    }
    g->x = malloc((size_t)g->n * (size_t)g->C * sizeof(float));
    for (size_t i = 0; i < (size_t)g->n * (size_t)g->C; i++)
        g->x[i] = (float)(raw[i] * g->uvpb);
    free(raw);
    char path[4200];
    bs_npy_header h;
    snprintf(path, sizeof path, "%s/gt_spike_times.npy", dir);
    if (bs_npy_load_expect(path, "test/sim", BS_NPY_I64, 1, &h, (void **)&g->t) != BS_OK)
        return 0;
    g->n_spikes = h.shape[0];
    snprintf(path, sizeof path, "%s/gt_spike_units.npy", dir);
    if (bs_npy_load_expect(path, "test/sim", BS_NPY_I32, 1, &h, (void **)&g->u) != BS_OK || h.shape[0] != g->n_spikes)
        return 0;
    snprintf(path, sizeof path, "%s/gt_templates.npy", dir);
    if (bs_npy_load_expect(path, "test/sim", BS_NPY_F32, 3, &h, (void **)&g->tmpl) != BS_OK || h.shape[0] != g->U ||
        h.shape[1] != g->nt || h.shape[2] != g->C)
        return 0;
    snprintf(path, sizeof path, "%s/gt_unit_positions.npy", dir);
    if (bs_npy_load_expect(path, "test/sim", BS_NPY_F32, 2, &h, (void **)&g->pos) != BS_OK || h.shape[0] != g->U ||
        h.shape[1] != 3)
        return 0;
    snprintf(path, sizeof path, "%s/gt_drift_um.npy", dir);
    if (bs_npy_load_expect(path, "test/sim", BS_NPY_F32, 2, &h, (void **)&g->drift) != BS_OK)
        return 0;
    g->drift_shape[0] = h.shape[0];
    g->drift_shape[1] = h.shape[1];
    return 1;
}

static void free_gt(gt_folder *g)
{
    cJSON_Delete(g->json);
    free(g->x);
    bs_mem_free(g->t);
    bs_mem_free(g->u);
    bs_mem_free(g->tmpl);
    bs_mem_free(g->pos);
    bs_mem_free(g->drift);
}

static const cJSON *unit_json(const gt_folder *g, int u)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g->json, "units"), u);
}

/* Mean waveform (nt x C) of unit u over its spikes with t in [lo, hi). */
static int mean_waveform(const gt_folder *g, int u, int64_t lo, int64_t hi, double *w)
{
    memset(w, 0, sizeof(double) * (size_t)g->nt * (size_t)g->C);
    int n = 0;
    for (int64_t i = 0; i < g->n_spikes; i++) {
        if (g->u[i] != u || g->t[i] < lo || g->t[i] >= hi)
            continue;
        const float *src = g->x + (size_t)(g->t[i] - g->nb) * (size_t)g->C;
        for (int j = 0; j < g->nt * g->C; j++)
            w[j] += src[j];
        n++;
    }
    for (int j = 0; n && j < g->nt * g->C; j++)
        w[j] /= n;
    return n;
}

/* Trough depth (positive µV) of channel c of a (nt x C) waveform after removing its mean. */
static double trough(const double *w, int nt, int C, int c)
{
    double m = 0, mn = 1e300;
    for (int j = 0; j < nt; j++)
        m += w[j * C + c];
    m /= nt;
    for (int j = 0; j < nt; j++)
        if (w[j * C + c] - m < mn)
            mn = w[j * C + c] - m;
    return -mn;
}

static void test_layouts(void)
{
    bs_probe p;
    CHECK(bs_sim_make_probe(BS_SIM_PROBE_NP1, &p) == BS_OK);
    CHECK(p.n_chan == 384 && p.n_shanks == 1 && strcmp(p.model, "NP1000") == 0);
    CHECK(p.x_um[0] == 27 && p.y_um[0] == 0 && p.x_um[1] == 59 && p.x_um[2] == 11 && p.y_um[2] == 20);
    CHECK(p.x_um[3] == 43 && p.y_um[383] == 3820 && p.x_um[383] == 43);
    CHECK(bs_probe_validate(&p, 384, "np1") == BS_OK);
    bs_probe_free(&p);
    CHECK(bs_sim_make_probe(BS_SIM_PROBE_NP2, &p) == BS_OK);
    CHECK(p.n_chan == 384 && p.x_um[2] == 27 && p.x_um[3] == 59 && p.y_um[2] == 15 && p.y_um[383] == 2865);
    CHECK(bs_probe_validate(&p, 384, "np2") == BS_OK);
    bs_probe_free(&p);
    CHECK(bs_sim_make_probe(BS_SIM_PROBE_NP2_4SHANK, &p) == BS_OK);
    int per_shank[4] = {0};
    for (int c = 0; c < p.n_chan; c++)
        per_shank[p.shank[c]]++;
    CHECK(p.n_shanks == 4 && per_shank[0] == 96 && per_shank[1] == 96 && per_shank[2] == 96 && per_shank[3] == 96);
    CHECK(p.shank[48] == 1 && p.x_um[48] == 277 && p.y_um[48] == 0);
    CHECK(p.shank[96] == 0 && p.y_um[96] == 360 && p.shank[383] == 3 && p.x_um[383] == 750 + 59);
    CHECK(bs_probe_validate(&p, 384, "np2-4shank") == BS_OK);
    bs_probe_free(&p);
    CHECK(bs_sim_make_probe(BS_SIM_PROBE_LINEAR32, &p) == BS_OK);
    CHECK(p.n_chan == 32 && p.x_um[31] == 0 && p.y_um[31] == 775);
    bs_probe_free(&p);
    CHECK(bs_sim_uv_per_bit(BS_SIM_PROBE_NP1) == 2.34375);
    CHECK(bs_sim_uv_per_bit(BS_SIM_PROBE_NP2) == 3.02734375);

    bs_sim_probe_kind k;
    CHECK(bs_sim_parse_probe("np2-4shank", &k) == BS_OK && k == BS_SIM_PROBE_NP2_4SHANK);
    CHECK(bs_sim_parse_probe("np3", &k) == BS_ERR_USAGE && strstr(bs_last_error(), "np3") != NULL);
    bs_sim_drift_kind dk;
    CHECK(bs_sim_parse_drift("step", &dk) == BS_OK && dk == BS_SIM_DRIFT_STEP);
    CHECK(bs_sim_parse_drift("wobbly", &dk) == BS_ERR_USAGE);
    bs_sim_params prm;
    bs_sim_params_default(&prm);
    prm.duration_s = -1;
    CHECK(bs_sim_check_params(&prm) == BS_ERR_USAGE && strstr(bs_last_error(), "--duration") != NULL);
    bs_sim_params_default(&prm);
    prm.n_units = 0;
    CHECK(bs_sim_check_params(&prm) == BS_ERR_USAGE && strstr(bs_last_error(), "--units") != NULL);
    bs_sim_params_default(&prm);
    prm.probe = BS_SIM_PROBE_LINEAR32;
    prm.spikeglx = 1;
    CHECK(bs_sim_check_params(&prm) == BS_ERR_USAGE);
}

static void small_params(bs_sim_params *p, uint64_t seed, bs_sim_drift_kind drift)
{
    bs_sim_params_default(p);
    p->probe = BS_SIM_PROBE_LINEAR32;
    p->duration_s = 10;
    p->n_units = 10;
    p->seed = seed;
    p->drift = drift;
}

static void test_determinism(const char *root)
{
    char a[4200], b[4200], c[4200];
    snprintf(a, sizeof a, "%s/det_a", root);
    snprintf(b, sizeof b, "%s/det_b", root);
    snprintf(c, sizeof c, "%s/det_c", root);
    bs_sim_params p;
    small_params(&p, 7, BS_SIM_DRIFT_RIGID);
    p.duration_s = 2;
    omp_set_num_threads(2);
    CHECK(bs_simulate(&p, a, NULL) == BS_OK);
    omp_set_num_threads(1);
    p.block_samples = 1000; /* another block size and one thread: same bytes */
    CHECK(bs_simulate(&p, b, NULL) == BS_OK);
    omp_set_num_threads(2);
    for (size_t i = 0; i < sizeof gt_files / sizeof gt_files[0]; i++)
        CHECK_MSG(same_file(a, b, gt_files[i]), "%s differs between runs", gt_files[i]);
    small_params(&p, 8, BS_SIM_DRIFT_RIGID);
    p.duration_s = 2;
    CHECK(bs_simulate(&p, c, NULL) == BS_OK);
    CHECK(!same_file(a, c, "recording.bin"));
    CHECK(!same_file(a, c, "gt_spike_times.npy"));
    CHECK(!same_file(a, c, "gt_templates.npy"));
}

static void test_ground_truth(const char *root)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/gt", root);
    bs_sim_params p;
    small_params(&p, 11, BS_SIM_DRIFT_NONE);
    p.duration_s = 6;
    bs_sim_summary s;
    CHECK(bs_simulate(&p, dir, &s) == BS_OK);
    gt_folder g;
    int ok = load_gt(dir, &g);
    CHECK(ok);
    if (!ok)
        return;
    CHECK(g.C == 32 && g.n == 180000 && g.nt == 61 && g.nb == 20 && g.fs == 30000 && g.uvpb == 0.195);
    CHECK(g.U == 10 && g.n_spikes == s.n_spikes && g.n_spikes > 50);
    CHECK(g.drift_shape[0] == 12 && g.drift_shape[1] == 5);

    /* times sorted, within the recording with whole waveforms, units in range */
    int sorted = 1, inside = 1, ids = 1;
    for (int64_t i = 0; i < g.n_spikes; i++) {
        if (i && g.t[i] < g.t[i - 1])
            sorted = 0;
        if (g.t[i] < g.nb || g.t[i] + (g.nt - g.nb) > g.n)
            inside = 0;
        if (g.u[i] < 0 || g.u[i] >= g.U)
            ids = 0;
    }
    CHECK(sorted && inside && ids);
    /* no refractory violations (1.5 ms), every unit fires */
    int64_t last[10], counts[10] = {0}, viol = 0, min_isi = INT64_MAX;
    for (int u = 0; u < 10; u++)
        last[u] = -1000000;
    for (int64_t i = 0; i < g.n_spikes; i++) {
        int u = g.u[i];
        int64_t isi = g.t[i] - last[u];
        if (isi < (int64_t)(1.5e-3 * g.fs))
            viol++;
        if (last[u] >= 0 && isi < min_isi)
            min_isi = isi;
        last[u] = g.t[i];
        counts[u]++;
    }
    CHECK_MSG(viol == 0, "%lld refractory violations", (long long)viol);
    CHECK(min_isi >= 45 && min_isi < 300); /* bursts produce short ISIs above the refractory period */
    for (int u = 0; u < 10; u++) {
        CHECK(counts[u] > 0 && counts[u] == (int64_t)jnum(unit_json(&g, u), "n_spikes"));
        /* the count follows the configured rate (Poisson; bursts add variance) */
        double rate = jnum(unit_json(&g, u), "rate_hz"), expect = rate * 6.0;
        CHECK(rate >= 0.5 && rate <= 20.0);
        CHECK_MSG(fabs(counts[u] - expect) <= 6.0 * sqrt(expect) + 2.0, "unit %d: %lld spikes at %.2f Hz", u,
                  (long long)counts[u], rate);
    }
    /* per-spike amplitudes vary (7 % jitter plus noise) on a large non-bursting unit */
    int jit_tested = 0;
    for (int u = 0; u < g.U; u++) {
        const cJSON *uj = unit_json(&g, u);
        double amp = jnum(uj, "peak_amplitude_uv");
        int pc = (int)jnum(uj, "peak_channel");
        if (amp < 150 || counts[u] < 8 || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(uj, "bursting")))
            continue;
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < g.n_spikes; i++) {
            if (g.u[i] != u)
                continue;
            double base = 0;
            for (int j = 0; j < 5; j++)
                base += g.x[(g.t[i] - g.nb + j) * g.C + pc] / 5.0;
            double a = base - g.x[g.t[i] * g.C + pc];
            s1 += a;
            s2 += a * a;
        }
        double m = s1 / counts[u], sd = sqrt(s2 / counts[u] - m * m);
        CHECK_MSG(sd / m > 0.04 && sd / m < 0.2, "unit %d: per-spike amplitude cv %.3f", u, sd / m);
        jit_tested++;
    }
    CHECK(jit_tested >= 1);

    /* units: positions, amplitudes, waveform variety */
    double min_ratio = 1e9, max_ratio = -1e9, min_amp = 1e9, max_amp = 0;
    for (int u = 0; u < g.U; u++) {
        const cJSON *uj = unit_json(&g, u);
        int pc = (int)jnum(uj, "peak_channel");
        double amp = jnum(uj, "peak_amplitude_uv");
        CHECK(g.pos[3 * u + 2] >= 10 && g.pos[3 * u + 2] <= 80);
        CHECK(amp >= 35 && amp <= 400);
        min_amp = fmin(min_amp, amp);
        max_amp = fmax(max_amp, amp);
        /* the template's trough is at nt_before on the peak channel and equals -peak amplitude */
        const float *T = g.tmpl + (size_t)u * g.nt * g.C;
        int arg = 0;
        for (int j = 1; j < g.nt; j++)
            if (T[j * g.C + pc] < T[arg * g.C + pc])
                arg = j;
        CHECK_MSG(arg == g.nb, "unit %d trough at %d", u, arg);
        CHECK_NEAR(T[g.nb * g.C + pc], -amp, 1e-3 * amp);
        double mx = 0;
        for (int j = g.nb; j < g.nt; j++)
            mx = fmax(mx, T[j * g.C + pc]);
        min_ratio = fmin(min_ratio, mx / amp);
        max_ratio = fmax(max_ratio, mx / amp);
        /* footprint: the trough shrinks monotonically away from the peak channel (single column) and the
         * channel 100 µm away (4 contacts) has less than half the peak amplitude */
        double prev = amp;
        int mono = 1;
        for (int c = pc + 1; c < g.C && c <= pc + 8; c++) {
            double a = 0;
            for (int j = 0; j < g.nt; j++)
                a = fmax(a, -T[j * g.C + c]);
            if (a > prev + 1e-4)
                mono = 0;
            prev = a;
        }
        CHECK_MSG(mono, "unit %d footprint not decreasing", u);
        int far = pc + 4 < g.C ? pc + 4 : pc - 4;
        double afar = 0;
        int argfar = 0;
        for (int j = 0; j < g.nt; j++)
            if (-T[j * g.C + far] > afar) {
                afar = -T[j * g.C + far];
                argfar = j;
            }
        CHECK_MSG(afar < 0.5 * amp && afar > 0, "unit %d: %g at 100 µm vs %g", u, afar, amp);
        /* farther away the trough is later or equal (delay) and wider */
        CHECK(argfar >= g.nb);
        int wpk = 0, wfar = 0;
        for (int j = 0; j < g.nt; j++) {
            wpk += -T[j * g.C + pc] > 0.5 * amp;
            wfar += -T[j * g.C + far] > 0.5 * afar;
        }
        CHECK_MSG(wfar >= wpk, "unit %d: half-width %d far vs %d at the peak", u, wfar, wpk);
    }
    CHECK(max_ratio - min_ratio > 0.1); /* not one shape scaled */
    CHECK(max_amp / min_amp > 2.0);

    /* the recording reproduces the templates: mean waveform at the GT times on the peak channel */
    double *w = malloc(sizeof(double) * (size_t)g.nt * (size_t)g.C);
    for (int u = 0; u < g.U; u++) {
        const cJSON *uj = unit_json(&g, u);
        int pc = (int)jnum(uj, "peak_channel");
        double amp = jnum(uj, "peak_amplitude_uv");
        int n = mean_waveform(&g, u, 0, g.n, w);
        if (n < 5)
            continue;
        const float *T = g.tmpl + (size_t)u * g.nt * g.C;
        double mw = 0, mt = 0, maxdiff = 0;
        for (int j = 0; j < g.nt; j++) {
            mw += w[j * g.C + pc];
            mt += T[j * g.C + pc];
        }
        mw /= g.nt;
        mt /= g.nt;
        for (int j = 0; j < g.nt; j++)
            maxdiff = fmax(maxdiff, fabs((w[j * g.C + pc] - mw) - (T[j * g.C + pc] - mt)));
        int bursting = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(uj, "bursting"));
        /* tolerance: 5 % of the amplitude (sub-sample jitter), plus 4 standard errors of noise (~11 µV rms
         * with hash) and of the per-spike amplitude and timing jitter (~20 % of the amplitude); bursts
         * shrink later spikes by 0.8 per spike, so bursting units get another 30 % */
        double tol = 0.05 * amp + 4.0 * (11.0 + 0.2 * amp) / sqrt(n) + (bursting ? 0.3 * amp : 0.0);
        CHECK_MSG(maxdiff <= tol, "unit %d (n=%d, amp %.1f): mean waveform differs by %.2f µV > %.2f", u, n, amp,
                  maxdiff, tol);
        double tr = trough(w, g.nt, g.C, pc);
        if (!bursting)
            CHECK_MSG(fabs(tr - (amp + mt)) <= 0.04 * amp + 3.0 * (11.0 + 0.1 * amp) / sqrt(n),
                      "unit %d trough %.2f vs %.2f", u, tr, amp + mt);
    }
    free(w);

    /* noise on spike-free stretches: high-passed by removing a 101-sample moving average */
    char *busy = calloc((size_t)g.n, 1);
    for (int64_t i = 0; i < g.n_spikes; i++)
        for (int64_t t = g.t[i] - 60; t < g.t[i] + 60; t++)
            if (t >= 0 && t < g.n)
                busy[t] = 1;
    int64_t n_use = 150000, L = 50;
    float *hp = malloc(sizeof(float) * (size_t)n_use * (size_t)g.C);
    for (int c = 0; c < g.C; c++) {
        double acc = 0;
        for (int64_t t = 0; t < 2 * L + 1; t++)
            acc += g.x[t * g.C + c];
        for (int64_t t = L; t < n_use + L; t++) {
            hp[(t - L) * g.C + c] = (float)(g.x[t * g.C + c] - acc / (2 * L + 1));
            acc += g.x[(t + L + 1) * g.C + c] - g.x[(t - L) * g.C + c];
        }
    }
    double sd_sum = 0;
    double corr[32] = {0};
    int ncorr[32] = {0};
    for (int c = 0; c < g.C; c++) {
        double ss = 0;
        int64_t m = 0;
        for (int64_t t = 0; t < n_use; t++)
            if (!busy[t + L]) {
                ss += hp[t * g.C + c] * hp[t * g.C + c];
                m++;
            }
        double sd = sqrt(ss / m);
        sd_sum += sd;
        CHECK_MSG(fabs(sd - 10.0) <= 3.0, "channel %d noise %.2f µV, configured 10", c, sd);
    }
    for (int c = 0; c < g.C; c++)
        for (int d = 1; d < 16 && c + d < g.C; d++) {
            double sab = 0, saa = 0, sbb = 0;
            for (int64_t t = 0; t < n_use; t++) {
                double a = hp[t * g.C + c], b = hp[t * g.C + c + d];
                sab += a * b;
                saa += a * a;
                sbb += b * b;
            }
            corr[d] += sab / sqrt(saa * sbb);
            ncorr[d]++;
        }
    for (int d = 1; d < 16; d++)
        corr[d] /= ncorr[d];
    /* band-limited, not white: neighbouring samples correlate, samples 1 ms apart do not */
    double ac1 = 0, ac30 = 0, ac0 = 0;
    for (int c = 0; c < g.C; c++)
        for (int64_t t = 0; t + 30 < n_use; t++) {
            double a = hp[t * g.C + c];
            ac0 += a * a;
            ac1 += a * hp[(t + 1) * g.C + c];
            ac30 += a * hp[(t + 30) * g.C + c];
        }
    printf("noise autocorrelation: lag 1 sample %.3f, lag 1 ms %.3f\n", ac1 / ac0, ac30 / ac0);
    CHECK(ac1 / ac0 > 0.4);
    CHECK(fabs(ac30 / ac0) < 0.1);
    printf("noise: mean sd %.2f µV; correlation at 25 µm %.3f, 50 µm %.3f, 100 µm %.3f, 200 µm %.3f, 375 µm %.3f\n",
           sd_sum / g.C, corr[1], corr[2], corr[4], corr[8], corr[15]);
    CHECK(corr[1] > 0.2);
    CHECK(corr[1] > corr[2] && corr[2] > corr[4] && corr[4] > corr[8] + 0.05);
    CHECK(fabs(corr[15]) < 0.1);
    CHECK(jnum(g.json, "gt_collisions_1ms_100um") == (double)s.n_collisions);
    free(hp);
    free(busy);
    free_gt(&g);
}

static void test_drift(const char *root)
{
    char dir[4200];
    gt_folder g;
    bs_sim_params p;
    /* rigid: the same sinusoid in every block */
    snprintf(dir, sizeof dir, "%s/rigid", root);
    small_params(&p, 5, BS_SIM_DRIFT_RIGID);
    p.duration_s = 1.5;
    CHECK(bs_simulate(&p, dir, NULL) == BS_OK);
    if (load_gt(dir, &g)) {
        int same = 1;
        double mx = 0;
        for (int b = 0; b < g.drift_shape[0]; b++) {
            double expect = 15.0 * sin(2.0 * M_PI * (b + 0.5) * 0.5 / 1.5);
            for (int k = 0; k < g.drift_shape[1]; k++)
                if (fabs(g.drift[b * g.drift_shape[1] + k] - expect) > 1e-4)
                    same = 0;
            mx = fmax(mx, fabs(expect));
        }
        CHECK(same && mx > 12.0 && g.drift_shape[0] == 3);
        CHECK(jnum(g.json, "drift_bin_s") == 0.5);
        free_gt(&g);
    } else
        CHECK(0);
    /* nonrigid: blocks differ, the top block moves 1.7 / 0.3 times the bottom one */
    snprintf(dir, sizeof dir, "%s/nonrigid", root);
    small_params(&p, 5, BS_SIM_DRIFT_NONRIGID);
    p.duration_s = 1.5;
    CHECK(bs_simulate(&p, dir, NULL) == BS_OK);
    if (load_gt(dir, &g)) {
        int nb = (int)g.drift_shape[1];
        const float *row = g.drift; /* bin 0: t = 0.25 s, drift > 0 */
        CHECK(nb == 5 && row[0] != row[nb - 1]);
        CHECK_NEAR(row[nb - 1] / row[0], 1.7 / 0.3, 1e-3);
        CHECK(row[0] < row[1] && row[1] < row[2] && row[2] < row[3] && row[3] < row[4]);
        free_gt(&g);
    } else
        CHECK(0);
    /* step: a 20 µm jump at mid-recording (6 s); the centroid of large units moves by it */
    snprintf(dir, sizeof dir, "%s/step", root);
    small_params(&p, 3, BS_SIM_DRIFT_STEP);
    p.duration_s = 12;
    p.n_units = 16;
    CHECK(bs_simulate(&p, dir, NULL) == BS_OK);
    if (!load_gt(dir, &g)) {
        CHECK(0);
        return;
    }
    CHECK(jnum(g.json, "drift_step_time_s") == 6.0);
    int jump_ok = 1;
    for (int b = 0; b < g.drift_shape[0]; b++)
        for (int k = 0; k < g.drift_shape[1]; k++)
            if (g.drift[b * g.drift_shape[1] + k] != (b < 12 ? 0.0f : 20.0f))
                jump_ok = 0;
    CHECK(jump_ok);
    int64_t step = (int64_t)(6.0 * g.fs);
    double *w0 = malloc(sizeof(double) * (size_t)g.nt * (size_t)g.C);
    double *w1 = malloc(sizeof(double) * (size_t)g.nt * (size_t)g.C);
    int tested = 0;
    for (int u = 0; u < g.U; u++) {
        const cJSON *uj = unit_json(&g, u);
        double amp = jnum(uj, "peak_amplitude_uv"), y = g.pos[3 * u + 1];
        if (amp < 120 || y < 150 || y > 775 - 150)
            continue;
        int n0 = mean_waveform(&g, u, 0, step - g.nt, w0);
        int n1 = mean_waveform(&g, u, step + g.nt, g.n, w1);
        if (n0 < 8 || n1 < 8)
            continue;
        /* centroid of the trough amplitudes on the contacts within 150 µm of the unit */
        double c0 = 0, c1 = 0, s0 = 0, s1 = 0;
        for (int c = 0; c < g.C; c++) {
            double yc = 25.0 * c;
            if (fabs(yc - y) > 150)
                continue;
            double a0 = trough(w0, g.nt, g.C, c), a1 = trough(w1, g.nt, g.C, c);
            a0 *= a0;
            a1 *= a1;
            c0 += a0 * yc;
            s0 += a0;
            c1 += a1 * yc;
            s1 += a1;
        }
        double moved = c1 / s1 - c0 / s0;
        printf("step drift: unit %d (%.0f µV, y %.0f µm, %d + %d spikes): centroid moved %.2f µm (true 20)\n", u,
               amp, y, n0, n1, moved);
        CHECK_MSG(fabs(moved - 20.0) < 4.0, "unit %d centroid moved %.2f µm, expected 20", u, moved);
        tested++;
    }
    CHECK(tested >= 1);
    free(w0);
    free(w1);
    free_gt(&g);
}

static void test_np1_spikeglx(const char *root)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/np1", root);
    bs_sim_params p;
    bs_sim_params_default(&p);
    p.duration_s = 0.6;
    p.n_units = 8;
    p.seed = 2;
    p.spikeglx = 1;
    bs_sim_summary s;
    CHECK(bs_simulate(&p, dir, &s) == BS_OK);
    CHECK(s.n_chan == 384 && s.n_samples == 18000 && s.uv_per_bit == 2.34375);
    char sg[4300];
    snprintf(sg, sizeof sg, "%s/spikeglx", dir);
    size_t nr, ng, nm;
    int16_t *rec = (int16_t *)slurp(dir, "recording.bin", &nr);
    int16_t *bin = (int16_t *)slurp(sg, "sim_g0_t0.imec0.ap.bin", &ng);
    char *meta = slurp(sg, "sim_g0_t0.imec0.ap.meta", &nm);
    CHECK(rec && bin && meta);
    if (!rec || !bin || !meta)
        return;
    CHECK(nr == 18000u * 384 * 2 && ng == 18000u * 385 * 2);
    int same = 1, sync_ok = 1;
    for (int t = 0; t < 18000; t++) {
        if (memcmp(rec + t * 384, bin + t * 385, 384 * 2) != 0)
            same = 0;
        if (bin[t * 385 + 384] != (t < 15000 ? 64 : 0))
            sync_ok = 0;
    }
    CHECK(same && sync_ok);
    CHECK(strstr(meta, "imDatPrb_type=0\n") && strstr(meta, "nSavedChans=385\n"));
    CHECK(strstr(meta, "fileSizeBytes=13860000\n") && strstr(meta, "imSampRate=30000\n"));
    CHECK(strstr(meta, "~imroTbl=(0,384)(0 0 0 500 250 1)(1 0 0 500 250 1)"));
    CHECK(strstr(meta, "~snsGeomMap=(NP1000,1,0,70)(0:27:0:1)(0:59:0:1)(0:11:20:1)(0:43:20:1)"));
    /* µV per bit implied by the meta: Vmax / Imax / gain */
    double vmax = atof(strstr(meta, "imAiRangeMax=") + 13), imax = atof(strstr(meta, "imMaxInt=") + 9);
    CHECK(vmax / imax / 500.0 * 1e6 == s.uv_per_bit);

    /* footprint of the largest unit on NP1: amplitude on contacts 20, 40, 60, 100 µm from the peak */
    gt_folder g;
    if (load_gt(dir, &g)) {
        int best = 0;
        for (int u = 1; u < g.U; u++)
            if (jnum(unit_json(&g, u), "peak_amplitude_uv") > jnum(unit_json(&g, best), "peak_amplitude_uv"))
                best = u;
        int pc = (int)jnum(unit_json(&g, best), "peak_channel");
        bs_probe pr;
        CHECK(bs_sim_make_probe(BS_SIM_PROBE_NP1, &pr) == BS_OK);
        const float *T = g.tmpl + (size_t)best * g.nt * g.C;
        printf("np1 unit %d footprint: peak channel %d %.1f µV", best, pc, -T[g.nb * g.C + pc]);
        double prev = 1e9;
        for (int d = 20; d <= 100; d += 20) {
            if (d == 80)
                continue;
            /* the contact in the same column d µm above or below */
            int c = -1;
            for (int k = 0; k < 384; k++)
                if (pr.x_um[k] == pr.x_um[pc] && fabs(fabs(pr.y_um[k] - pr.y_um[pc]) - d) < 1e-9) {
                    c = k;
                    break;
                }
            if (c < 0) /* NP1 columns repeat every 40 µm; at 20 / 60 µm take the staggered neighbour row */
                for (int k = 0; k < 384; k++)
                    if (fabs(fabs(pr.y_um[k] - pr.y_um[pc]) - d) < 1e-9 && fabs(pr.x_um[k] - pr.x_um[pc]) == 16) {
                        c = k;
                        break;
                    }
            if (c < 0)
                continue;
            double a = 0;
            for (int j = 0; j < g.nt; j++)
                a = fmax(a, -T[j * g.C + c]);
            printf(", %d µm (ch %d) %.1f µV", d, c, a);
            CHECK(a < prev);
            prev = a;
        }
        printf("\n");
        bs_probe_free(&pr);
        free_gt(&g);
    } else
        CHECK(0);
    free(rec);
    free(bin);
    free(meta);
}

/* Sub-sample time at which channel c of a (nt x C) template first falls below half its trough (the steep
 * falling edge, linearly interpolated). */
static double edge_pos(const float *T, int nt, int C, int c)
{
    double mn = 0;
    for (int j = 0; j < nt; j++)
        mn = fmin(mn, T[j * C + c]);
    for (int j = 1; j < nt; j++)
        if (T[j * C + c] < 0.5 * mn) {
            double y0 = T[(j - 1) * C + c], y1 = T[j * C + c];
            return j - 1 + (0.5 * mn - y0) / (y1 - y0);
        }
    return 0;
}

/* ADC multiplexing: with it, each channel's waveform comes earlier by its sampling delay relative to the
 * peak channel's; without it, not. */
static void test_adc_mux(const char *root)
{
    char d1[4200], d2[4200];
    snprintf(d1, sizeof d1, "%s/mux", root);
    snprintf(d2, sizeof d2, "%s/nomux", root);
    bs_sim_params p;
    bs_sim_params_default(&p);
    p.duration_s = 0.2;
    p.n_units = 6;
    p.seed = 9;
    p.spikeglx = 1;
    CHECK(bs_simulate(&p, d1, NULL) == BS_OK);
    p.adc_mux = 0;
    p.spikeglx = 0;
    CHECK(bs_simulate(&p, d2, NULL) == BS_OK);
    gt_folder a, b;
    if (!load_gt(d1, &a) || !load_gt(d2, &b)) {
        CHECK(0);
        return;
    }
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(a.json, "adc_shift_samples");
    CHECK(cJSON_GetArraySize(sh) == 384);
    CHECK(jnum(a.json, "adc_mux_cycles") == 13);
    CHECK(cJSON_GetArrayItem(sh, 0)->valuedouble == 0.0 && cJSON_GetArrayItem(sh, 1)->valuedouble == 0.0);
    CHECK(cJSON_GetArrayItem(sh, 2)->valuedouble == 0.125);  /* slot 1 of 13 -> 1/8 sample */
    CHECK(cJSON_GetArrayItem(sh, 23)->valuedouble == 0.875); /* slot 11 of 13 */
    CHECK(cJSON_GetArrayItem(sh, 24)->valuedouble == 0.0);
    CHECK(cJSON_GetObjectItemCaseSensitive(b.json, "adc_shift_samples") == NULL);
    CHECK(same_file(d1, d2, "gt_spike_times.npy"));
    int checked = 0, good = 0;
    for (int u = 0; u < a.U; u++) {
        int pc = (int)jnum(unit_json(&a, u), "peak_channel");
        double amp = jnum(unit_json(&a, u), "peak_amplitude_uv");
        double dpc = cJSON_GetArrayItem(sh, pc)->valuedouble;
        const float *Ta = a.tmpl + (size_t)u * a.nt * a.C, *Tb = b.tmpl + (size_t)u * b.nt * b.C;
        CHECK_NEAR(Ta[a.nb * a.C + pc], Tb[b.nb * b.C + pc], 1e-3 * amp); /* the peak channel is the reference */
        for (int c = 0; c < a.C; c++) {
            if (-Tb[b.nb * b.C + c] < 0.3 * amp)
                continue;
            double moved = edge_pos(Ta, a.nt, a.C, c) - edge_pos(Tb, b.nt, b.C, c);
            double expect = -(cJSON_GetArrayItem(sh, c)->valuedouble - dpc);
            checked++;
            good += fabs(moved - expect) < 0.08;
            if (fabs(moved - expect) >= 0.08)
                printf("mux: unit %d ch %d moved %.3f expected %.3f\n", u, c, moved, expect);
        }
    }
    CHECK_MSG(checked > 10 && good == checked, "%d of %d channels moved by their ADC delay", good, checked);
    size_t nm;
    char sg[4300];
    snprintf(sg, sizeof sg, "%s/spikeglx", d1);
    char *meta = slurp(sg, "sim_g0_t0.imec0.ap.meta", &nm);
    CHECK(meta && strstr(meta, "~muxTbl=(32,12)(0 1 24 25 48 49 ") && strstr(meta, ")(22 23 46 47 "));
    free(meta);
    free_gt(&a);
    free_gt(&b);
    /* NP2: 16 slots; every delay stays below one sample */
    snprintf(d1, sizeof d1, "%s/mux_np2", root);
    bs_sim_params_default(&p);
    p.probe = BS_SIM_PROBE_NP2;
    p.duration_s = 0.1;
    p.n_units = 2;
    CHECK(bs_simulate(&p, d1, NULL) == BS_OK);
    cJSON *j = load_json(d1);
    sh = cJSON_GetObjectItemCaseSensitive(j, "adc_shift_samples");
    double mx = -1;
    for (int c = 0; c < cJSON_GetArraySize(sh); c++)
        mx = fmax(mx, cJSON_GetArrayItem(sh, c)->valuedouble);
    CHECK(cJSON_GetArraySize(sh) == 384 && jnum(j, "adc_mux_cycles") == 16 && mx == 0.875);
    CHECK(cJSON_GetArrayItem(sh, 2)->valuedouble == 0.125 && cJSON_GetArrayItem(sh, 30)->valuedouble == 0.875 &&
          cJSON_GetArrayItem(sh, 32)->valuedouble == 0.0); /* slots 1, 15 (7.5 / 8 -> 7 / 8) and 0 */
    cJSON_Delete(j);
}

static void test_bad_output(const char *root)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/blocker", root);
    FILE *f = fopen(dir, "w");
    if (f)
        fclose(f);
    char sub[4300];
    snprintf(sub, sizeof sub, "%s/out", dir);
    bs_sim_params p;
    small_params(&p, 1, BS_SIM_DRIFT_NONE);
    p.duration_s = 1;
    CHECK(bs_simulate(&p, sub, NULL) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "blocker") != NULL);
}

/* Share of unit a's spikes followed by a spike of unit b lag +- 1 samples later. */
static double coupled_share(const gt_folder *g, int a, int b, int64_t lag)
{
    int64_t n_a = 0, hit = 0;
    for (int64_t i = 0; i < g->n_spikes; i++) {
        if (g->u[i] != a)
            continue;
        n_a++;
        for (int64_t j = i + 1; j < g->n_spikes && g->t[j] <= g->t[i] + lag + 1; j++)
            if (g->u[j] == b && g->t[j] >= g->t[i] + lag - 1) {
                hit++;
                break;
            }
    }
    return n_a ? (double)hit / (double)n_a : NAN;
}

/* --coupled-pairs: units 0-1 and 2-3 are neighbours and 1 (3) fires 0.6 ms after half of 0's (2's)
 * spikes; the followers' trains stay refractory; other units are not coupled. */
static void test_coupled(const char *root)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/coupled", root);
    bs_sim_params p;
    small_params(&p, 5, BS_SIM_DRIFT_NONE);
    p.duration_s = 60;
    p.n_coupled = 2;
    CHECK(bs_simulate(&p, dir, NULL) == BS_OK);
    gt_folder g;
    CHECK(load_gt(dir, &g));
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(g.json, "coupled_pairs");
    CHECK(cJSON_GetArraySize(cp) == 2 && cJSON_GetArrayItem(cJSON_GetArrayItem(cp, 1), 0)->valueint == 2 &&
          cJSON_GetArrayItem(cJSON_GetArrayItem(cp, 1), 1)->valueint == 3);
    CHECK(jnum(g.json, "coupled_lag_ms") == 0.6);
    const int64_t lag = 18; /* 0.6 ms at 30 kHz */
    for (int a = 0; a < 4; a += 2) {
        /* neighbours: same x, 30 µm apart in depth */
        CHECK(fabs(g.pos[3 * a] - g.pos[3 * (a + 1)]) < 1e-3);
        CHECK(fabs(fabs(g.pos[3 * a + 1] - g.pos[3 * (a + 1) + 1]) - 30.0) < 1e-3);
        int64_t n_a = 0;
        for (int64_t i = 0; i < g.n_spikes; i++)
            n_a += g.u[i] == a;
        double share = coupled_share(&g, a, a + 1, lag), sd = sqrt(0.25 / (double)n_a);
        CHECK_MSG(n_a > 50 && fabs(share - 0.5) < 4 * sd, "pair %d: %.3f of %lld leader spikes coupled", a, share,
                  (long long)n_a);
    }
    CHECK(coupled_share(&g, 4, 5, lag) < 0.05 && coupled_share(&g, 6, 7, lag) < 0.05);
    /* followers' own spikes near a coupled one were dropped: no ISI under 1.5 ms */
    for (int b = 1; b < 4; b += 2) {
        int64_t last = -1000000, min_isi = INT64_MAX;
        for (int64_t i = 0; i < g.n_spikes; i++)
            if (g.u[i] == b) {
                if (g.t[i] - last < min_isi)
                    min_isi = g.t[i] - last;
                last = g.t[i];
            }
        CHECK_MSG(min_isi >= 45, "unit %d: ISI of %lld samples", b, (long long)min_isi);
    }
    free_gt(&g);
    small_params(&p, 5, BS_SIM_DRIFT_NONE);
    p.n_coupled = 6; /* 12 units needed */
    CHECK(bs_simulate(&p, dir, NULL) == BS_ERR_USAGE);
    p.n_coupled = 1;
    p.coupled_lag_ms = 3;
    CHECK(bs_simulate(&p, dir, NULL) == BS_ERR_USAGE);
}

int main(void)
{
    const char *root = test_tmpdir();
    test_layouts();
    test_determinism(root);
    test_ground_truth(root);
    test_drift(root);
    test_np1_spikeglx(root);
    test_adc_mux(root);
    test_bad_output(root);
    test_coupled(root);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
