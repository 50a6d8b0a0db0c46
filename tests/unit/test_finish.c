/*
 * test_finish.c - the streamed finishing stage (src/cluster/stage_finish.h) gives
 * exactly what the in-RAM composition gives: bs_merge_ccg on the whole spike
 * list, bs_spike_order, dropping spikes outside the recording,
 * bs_remove_duplicates, shadow removal (bs_shadow_test) and bs_cluster_labels.
 *
 * Matched spikes are written as the matching stage writes them: 7 templates
 * on a 16-channel toy probe; templates 0 and 1 are the same waveform and
 * share one refractory unit's spikes (they must merge); template 3 has 2's
 * waveform but an independent, non-refractory train (no merge); duplicates
 * within 0.25 ms are planted; templates 4 and 5, smaller, are one waveform
 * sharing a third refractory unit's spikes, and 4 also has shadows of
 * template 2's spikes 5 samples (±1) before them on 40 % of them: they go
 * before the merges (template shadows, the look-ahead path), and only then
 * do 4 and 5 merge; template 2, whose spikes they copy, is no collision unit
 * (docs/ALGORITHM.md §9.7: its own shadows are not its neighbours); template
 * 6 has its own Poisson train plus shadows of the merged unit's spikes (0
 * and 1) 4 samples (±1) after 40 % of them: at 20 Hz those of one template
 * are under 10 % of 6's spikes, so they go only with the unit's shadows
 * after the merges (the look-back path); at 400 Hz (with a refractory
 * train of its own at a quarter of the rate) they go before the merges, as
 * template shadows;
 * and a second run streams through many read
 * blocks (more spikes than one block) to exercise the reorder buffer. The
 * per-spike files, cluster tables and templates are compared with the
 * reference built in RAM; then, on the same trains, noise units, a noise cut
 * and an amplitude split refined by features (their planted spikes removed
 * or moved, every other spike where the reference put it), and a low-tier unit's pile of noise crossings
 * at its own threshold (the spikes under one cut in the valley removed, nothing else). Also: the
 * streamed autocorrelogram equals
 * bs_ccg_counts on random trains. And bs_finish_shadow_params: the lags in
 * samples, and a lag the shadow test cannot examine refused (not silently
 * examined as no shadow).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cluster/ccg.h"
#include "../../src/cluster/cluster.h"
#include "../../src/common/fileio.h"
#include "../../src/io/npy.h"
#include "../../src/mem/mem.h"
#include "../../src/cluster/stage_finish.h"
#include "common/lsan_options.h"
#include "match_synth.h"
#include "test.h"

enum { C = 16, K = 7, P = 4, NT = 31, NB = 12, NSUP = 8, NPC = 4 };
static const double FS = 30000.0;

/* A refractory train at rate_hz (2 ms dead time) over [0, n) samples. */
static int64_t make_train(synth_rng *r, double rate_hz, int64_t n, int64_t dead, int64_t *out, int64_t cap)
{
    int64_t m = 0, t = 0;
    while (m < cap) {
        double u = synth_uniform(r);
        t += dead + (int64_t)(-log(u) * FS / rate_hz);
        if (t >= n)
            break;
        out[m++] = t;
    }
    return m;
}

typedef struct {
    int64_t t;
    int32_t k;
} mspike;

static int mspike_cmp(const void *x, const void *y)
{
    const mspike *a = x, *b = y;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return (a->k > b->k) - (a->k < b->k);
}

static void *load(const char *dir, const char *name, bs_npy_dtype dt, int ndim, int64_t *n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    bs_npy_header h;
    void *data = NULL;
    if (bs_npy_load_expect(path, "test/load", dt, ndim, &h, &data) != BS_OK)
        return NULL;
    *n = h.shape[0];
    return data;
}

static int n_unit_shadow_cases; /* cases whose reference found a unit shadow after the merges */

/* The matched spike of template 3 at time tt (3 merges with none, so its output times are its matched
 * ones), searched from *j on in the time-ordered matched spikes t, k0 (n); -1 when none. Successive calls
 * ask for ascending times. */
static int64_t spike_of_3(const int64_t *t, const int32_t *k0, int64_t n, int64_t *j, int64_t tt)
{
    while (*j < n && (t[*j] < tt || (t[*j] == tt && k0[*j] != 3)))
        (*j)++;
    return *j < n && t[*j] == tt ? *j : -1;
}

/* bs_finish_input.splits_done: the template count after the splits, as the stage re-plans with it */
static bs_status note_k1(void *arg, int K1)
{
    *(int *)arg = K1;
    return BS_OK;
}

static void run_case(const char *root, double rate_hz, double seconds, uint64_t seed)
{
    char dir[3000], stage[3100], mdir[3200], out[3100], dat[3100];
    snprintf(dir, sizeof dir, "%s/case_%g", root, rate_hz);
    snprintf(stage, sizeof stage, "%s/.stages", dir);
    snprintf(mdir, sizeof mdir, "%s/match", stage);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(dat, sizeof dat, "%s/rec.bin", dir);
    CHECK(bs_mkdir_p(mdir) == BS_OK);
    FILE *f = fopen(dat, "wb");
    CHECK(f != NULL);
    if (f)
        fclose(f);

    /* templates: 0 == 1, 2 == 3, 4 == 5 (same weights), 4 and 5 beside 2, 6 beside 0 */
    int centers[K] = {4, 4, 11, 11, 12, 12, 5};
    synth_rng r = {seed};
    float basis[P * NT];
    int32_t sup[K * NSUP];
    float U[K * NSUP * P];
    synth_basis(P, NT, NB, basis);
    for (int k = 0; k < K; k++)
        synth_support(C, centers[k], NSUP, sup + k * NSUP);
    synth_weights(&r, K, P, NSUP, centers, sup, U);
    memcpy(U + 1 * NSUP * P, U, sizeof(float) * NSUP * P);
    memcpy(U + 3 * NSUP * P, U + 2 * NSUP * P, sizeof(float) * NSUP * P);
    memcpy(U + 5 * NSUP * P, U + 4 * NSUP * P, sizeof(float) * NSUP * P);
    bs_match_templates mt;
    CHECK(bs_match_templates_create("test", C, NT, NB, P, basis, K, NSUP, sup, U, &mt) == BS_OK);

    /* spikes: unit A split between 0 and 1, unit B on 2, an independent
     * high-rate train on 3, plus planted same-template duplicates */
    int64_t n_samp = (int64_t)(seconds * FS), cap = (int64_t)(seconds * rate_hz * 6) + 64;
    int64_t *ta = malloc(sizeof(int64_t) * cap), *tb = malloc(sizeof(int64_t) * cap),
            *tc = malloc(sizeof(int64_t) * cap);
    int64_t na = make_train(&r, rate_hz, n_samp, 60, ta, cap);
    int64_t nb = make_train(&r, rate_hz, n_samp, 60, tb, cap);
    int64_t nc = make_train(&r, 3 * rate_hz, n_samp, 0, tc, cap);
    int64_t *td = malloc(sizeof(int64_t) * cap), *te = malloc(sizeof(int64_t) * cap);
    int64_t nd = make_train(&r, rate_hz, n_samp, 60, td, cap);
    /* 20 Hz: Poisson at 5x unit 0 + 1's rate (its shadows of one template are under shadow.min_fraction, 5 %,
     * of 6's spikes, those of the unit over); 400 Hz: refractory at a quarter of it (they are over) */
    int64_t ne = rate_hz <= 100 ? make_train(&r, 5.0 * rate_hz, n_samp, 0, te, cap)
                                : make_train(&r, rate_hz / 4, n_samp, 60, te, cap);
    int64_t n = 0;
    mspike *sp = malloc(sizeof(mspike) * (size_t)(na + nb + nc + nd + nb + ne + na + 64));
    for (int64_t i = 0; i < na; i++)
        sp[n++] = (mspike){ta[i], synth_uniform(&r) < 0.5 ? 0 : 1};
    for (int64_t i = 0; i < nb; i++)
        sp[n++] = (mspike){tb[i], 2};
    for (int64_t i = 0; i < nc; i++)
        sp[n++] = (mspike){tc[i], 3};
    for (int i = 0; i < 20; i++) /* duplicates 3 samples after a spike of template 2 */
        if (tb[i * 7] + 3 < n_samp)
            sp[n++] = (mspike){tb[i * 7] + 3, 2};
    for (int64_t i = 0; i < nd; i++)
        sp[n++] = (mspike){td[i], synth_uniform(&r) < 0.5 ? 4 : 5};
    for (int64_t i = 0; i < nb; i++) /* shadows of template 2, 5 samples early (±1) */
        if (i % 5 < 2 && tb[i] >= 6)
            sp[n++] = (mspike){tb[i] - 5 + (i % 3 - 1), 4};
    for (int64_t i = 0; i < ne; i++)
        sp[n++] = (mspike){te[i], 6};
    for (int64_t i = 0; i < na; i++) /* shadows of unit 0 + 1, 4 samples late (±1), on 40 % of its spikes */
        if (i % 5 < 2 && ta[i] + 5 < n_samp)
            sp[n++] = (mspike){ta[i] + 4 + (i % 3 - 1), 6};
    qsort(sp, (size_t)n, sizeof *sp, mspike_cmp);
    int64_t *t = malloc(sizeof(int64_t) * n);
    int32_t *k0 = malloc(sizeof(int32_t) * n);
    float *amp = malloc(sizeof(float) * n), *feat = malloc(sizeof(float) * n * P * NPC);
    for (int64_t i = 0; i < n; i++) {
        t[i] = sp[i].t;
        k0[i] = sp[i].k;
        double u = synth_uniform(&r); /* 4-6: piled against 4 (the noise units' threshold below) */
        amp[i] = (float)(sp[i].k >= 4 ? 4 + 5 * u * u : 10 + 5 * u);
        for (int q = 0; q < P * NPC; q++)
            feat[i * P * NPC + q] = (float)synth_normal(&r);
    }
    char path[4400];
    int64_t s1[1] = {n}, s3[3] = {n, P, NPC};
    snprintf(path, sizeof path, "%s/spike_times.npy", mdir);
    CHECK(bs_npy_save(path, BS_NPY_I64, 1, s1, t) == BS_OK);
    snprintf(path, sizeof path, "%s/spike_templates.npy", mdir);
    CHECK(bs_npy_save(path, BS_NPY_I32, 1, s1, k0) == BS_OK);
    snprintf(path, sizeof path, "%s/amplitudes.npy", mdir);
    CHECK(bs_npy_save(path, BS_NPY_F32, 1, s1, amp) == BS_OK);
    snprintf(path, sizeof path, "%s/pc_features.npy", mdir);
    CHECK(bs_npy_save(path, BS_NPY_F32, 3, s3, feat) == BS_OK);

    /* recording, probe, identity whitener, pc channels */
    double x[C], y[C];
    int col[C], shank[C];
    float uv[C];
    for (int c = 0; c < C; c++) {
        synth_chan_pos(c, &x[c], &y[c]);
        col[c] = c;
        shank[c] = 0;
        uv[c] = 1.0f;
    }
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    snprintf(rec.data_path, sizeof rec.data_path, "%s", dat);
    snprintf(rec.format, sizeof rec.format, "raw");
    rec.dtype = BS_SAMPLE_I16;
    rec.n_cols = C;
    rec.n_samples = n_samp;
    rec.fs_hz = FS;
    rec.uv_per_bit = uv;
    rec.probe = (bs_probe){.n_chan = C, .column = col, .x_um = x, .y_um = y, .shank = shank, .n_shanks = 1};
    int n_nbr[C], nbr[C];
    float w[C];
    for (int c = 0; c < C; c++)
        n_nbr[c] = 1, nbr[c] = c, w[c] = 1.0f;
    bs_whitener wh = {C, 1, n_nbr, nbr, w};
    int32_t pc_chan[K * NPC];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < NPC; j++)
            pc_chan[k * NPC + j] = sup[k * NSUP + j];
    bs_finish_params fp;
    bs_finish_default_params(&fp); /* duplicates under 0.25 ms */
    fp.merge.max_rate_hz = 4 * rate_hz; /* every train here may merge (the 400-Hz case is over the default) */
    fp.split.min_low_amp = fp.split.low_amp_of_threshold * 8.0; /* as the stage sets it: the default threshold */
    fp.collision.window_ms = 0.5; /* the reference has no collision units: at ±2 ms the dense trains here (up to
                                     1.2 kHz on templates 3 and 6) coincide with their neighbours' beyond chance */
    int k1 = -1;
    bs_finish_input in = {.rec = &rec, .stage_dir = stage, .out_dir = out, .wh = &wh, .mt = &mt, .pc_chan = pc_chan,
                          .n_pc_chan = NPC, .fp = &fp, .quiet = 1, .splits_done = note_k1, .splits_arg = &k1};
    int n_units = 0;
    int64_t n_out = 0;
    bs_status st = bs_finish_run(&in, &n_units, &n_out);
    CHECK_MSG(st == BS_OK, "finish: %s", bs_last_error());
    CHECK_MSG(k1 >= K && k1 <= 2 * K, "templates after the splits: %d of %d", k1, K);

    /* the reference, in RAM: first the template shadows (4 of 2; 6 of 0 or 1, the one holding more in its
     * window, then in a second round possibly of the other, on what the first left), marked against the
     * sources' matched trains */
    bs_shadow_params spar; /* no tail shadows: every unit's mean amplitude is over 0.2 of every other's */
    bs_shadow_default_params(&spar, FS);
    uint8_t *gone = calloc((size_t)n, 1);
    int64_t *tk = malloc(sizeof(int64_t) * n), *ik = malloc(sizeof(int64_t) * n), *tsrc = malloc(sizeof(int64_t) * n);
    uint8_t *hit = malloc((size_t)n);
    const int shadow_tmpl[2] = {4, 6}, src_tmpl[2][2] = {{2, 2}, {0, 1}};
    for (int s_ = 0; s_ < 2; s_++) {
        int b = shadow_tmpl[s_], used[2] = {0, 0};
        for (int round = 0; round < 2; round++) {
            int a_best = -1, lag_best = 0, c_best = -1;
            int64_t nk = 0, cnt_best = 0;
            for (int64_t i = 0; i < n; i++) /* B's train as the rounds before left it */
                if (k0[i] == b && !gone[i])
                    tk[nk] = t[i], ik[nk++] = i;
            for (int c_ = 0; c_ < 2; c_++) {
                int a = src_tmpl[s_][c_], lag = 0;
                int64_t ns = 0, cnt = 0;
                if (used[c_])
                    continue;
                for (int64_t i = 0; i < n; i++)
                    if (k0[i] == a)
                        tsrc[ns++] = t[i];
                if (bs_shadow_test(&spar, tsrc, ns, tk, nk, n_samp, 0, &lag, &cnt) && cnt > cnt_best)
                    a_best = a, lag_best = lag, cnt_best = cnt, c_best = c_;
            }
            CHECK_MSG(a_best >= 0 || round > 0 || b == 6, "template %d is no template shadow", b);
            if (a_best < 0)
                break;
            used[c_best] = 1;
            int64_t ns = 0;
            for (int64_t i = 0; i < n; i++)
                if (k0[i] == a_best)
                    tsrc[ns++] = t[i];
            memset(hit, 0, (size_t)nk);
            bs_mark_coincident(tk, nk, tsrc, ns, lag_best, spar.half_width, hit);
            for (int64_t j = 0; j < nk; j++)
                gone[ik[j]] |= hit[j];
        }
    }
    free(tk), free(ik), free(tsrc), free(hit);
    bs_sparse_templates T;
    int nsup[K];
    for (int k = 0; k < K; k++)
        nsup[k] = NSUP;
    CHECK(bs_sparse_templates_alloc(&T, K, NT, nsup) == BS_OK);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < NSUP; i++)
            T.chans[T.off[k] + i] = sup[k * NSUP + i];
        bs_match_template_waveform(&mt, k, T.wave + T.off[k] * NT);
    }
    int64_t *tt = malloc(sizeof(int64_t) * n), *order = malloc(sizeof(int64_t) * n), n0 = 0;
    int32_t *clu = malloc(sizeof(int32_t) * n), *kk = malloc(sizeof(int32_t) * n);
    for (int64_t i = 0; i < n; i++)
        if (!gone[i])
            tt[n0] = t[i], clu[n0] = k0[i], kk[n0++] = k0[i];
    free(gone);
    bs_merge_params mp = fp.merge;
    mp.fs_hz = FS;
    mp.duration_s = (double)n_samp / FS;
    int merges = 0;
    CHECK(bs_merge_ccg(&mp, tt, clu, n0, &T, &merges) == BS_OK);
    CHECK_MSG(merges == 2 && T.K == 5, "expected templates 0 and 1, 4 and 5 to merge: %d merges, %d units", merges,
              T.K);
    CHECK(bs_spike_order(tt, n0, order) == BS_OK);
    int64_t *ts = malloc(sizeof(int64_t) * n);
    int32_t *cs = malloc(sizeof(int32_t) * n), *ks = malloc(sizeof(int32_t) * n);
    int64_t m = 0;
    for (int64_t i = 0; i < n0; i++) {
        int64_t j = order[i];
        if (tt[j] < 0 || tt[j] >= n_samp)
            continue;
        ts[m] = tt[j], cs[m] = clu[j], ks[m++] = kk[j];
    }
    uint8_t *keep = malloc((size_t)m);
    int64_t kept = 0;
    CHECK(bs_remove_duplicates(ts, cs, m, T.K, 8, keep, &kept) == BS_OK);
    CHECK(kept < m); /* the planted duplicates were removed */
    /* unit shadows: unit of template 6 (sh) against the unit of templates 0 and 1 (src), in final order; a
     * source spike before one counts if it is the last kept one, after it any (in range) */
    int32_t src = -1, sh = -1;
    for (int64_t i = 0; i < n0; i++) {
        if (kk[i] == 0)
            src = clu[i];
        if (kk[i] == 6)
            sh = clu[i];
    }
    int64_t *t_src = malloc(sizeof(int64_t) * m), *t_sh = malloc(sizeof(int64_t) * m), n_src = 0, n_sh = 0;
    for (int64_t i = 0; i < m; i++) { /* the trains as merged, before duplicate removal */
        if (cs[i] == src)
            t_src[n_src++] = ts[i];
        if (cs[i] == sh)
            t_sh[n_sh++] = ts[i];
    }
    int lag = 0;
    int64_t cnt = 0, q = 0, n_shadow = 0;
    int unit_shadow = bs_shadow_test(&spar, t_src, n_src, t_sh, n_sh, n_samp, 0, &lag, &cnt);
    CHECK_MSG(!unit_shadow || (lag >= 3 && lag <= 5), "shadow lag %d, expected a window holding 3..5", lag);
    n_unit_shadow_cases += unit_shadow;
    /* one pass: a spike is a duplicate of the last kept spike of its unit;
     * a dropped shadow does not count as kept */
    int64_t last[K];
    for (int u = 0; u < K; u++)
        last[u] = -1;
    int same_dups = 1;
    for (int64_t i = 0; i < m; i++) {
        int dup = last[cs[i]] >= 0 && ts[i] < last[cs[i]] + 8;
        if (cs[i] != sh && dup != !keep[i])
            same_dups = 0;
        if (dup)
            continue;
        int drop = 0;
        if (cs[i] == sh && unit_shadow) {
            int64_t lo = ts[i] - lag - spar.half_width, hi = ts[i] - lag + spar.half_width;
            drop = last[src] >= lo && last[src] <= hi;
            for (int64_t x = i + 1; x < m && ts[x] <= hi && !drop; x++)
                drop = cs[x] == src && ts[x] >= lo;
        }
        n_shadow += drop;
        if (!drop) {
            last[cs[i]] = ts[i];
            ts[q] = ts[i], cs[q] = cs[i], ks[q++] = ks[i];
        }
    }
    CHECK_MSG(same_dups, "the duplicates of the units without shadows differ from bs_remove_duplicates");
    CHECK_MSG(!unit_shadow || n_shadow > 0, "no unit shadow spike removed of %lld", (long long)n_sh);
    n_shadow += n - n0;
    free(t_src), free(t_sh);
    uint8_t good[K];
    double contam[K];
    CHECK(bs_cluster_labels(ts, cs, q, T.K, FS, 0.2, good, contam) == BS_OK);

    /* compare */
    int64_t n1 = 0, n2 = 0, n3 = 0;
    int64_t *ot = load(out, "spike_times.npy", BS_NPY_I64, 1, &n1);
    int32_t *oc = load(out, "spike_clusters.npy", BS_NPY_I32, 1, &n2);
    int32_t *ok = load(out, "spike_templates.npy", BS_NPY_I32, 1, &n3);
    CHECK(ot && oc && ok && n1 == q && n2 == q && n3 == q && n_out == q);
    int same = ot && oc && ok && n1 == q;
    for (int64_t i = 0; same && i < q; i++)
        same = ot[i] == ts[i] && oc[i] == cs[i] && ok[i] == ks[i];
    CHECK_MSG(same, "streamed spikes differ from the in-RAM reference (%lld vs %lld spikes)", (long long)n1,
              (long long)q);
    char *tsv = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/cluster_KSLabel.tsv", out);
    CHECK(bs_read_text_file(path, 1 << 20, &tsv, &len) == BS_OK);
    char expect[256] = "cluster_id\tKSLabel\n";
    for (int u = 0; u < T.K; u++)
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%d\t%s\n", u, good[u] ? "good" : "mua");
    CHECK_MSG(tsv && strcmp(tsv, expect) == 0, "labels: got\n%s\nexpected\n%s", tsv ? tsv : "(none)", expect);
    CHECK(n_units == T.K);

    /* a shadow with at most shadow.max_rest spikes outside its window is removed whole: with the bound at every
     * spike, the shadow templates (4 and 6) go before the merges and every other spike stays */
    int64_t rest0 = fp.shadow.max_rest;
    fp.shadow.max_rest = n;
    char out2[3200];
    snprintf(out2, sizeof out2, "%s_whole", out);
    in.out_dir = out2;
    int n_units2 = 0;
    int64_t n_out2 = 0, n4 = 0, n5 = 0;
    st = bs_finish_run(&in, &n_units2, &n_out2);
    CHECK_MSG(st == BS_OK, "finish (whole shadows): %s", bs_last_error());
    int64_t *wt = load(out2, "spike_times.npy", BS_NPY_I64, 1, &n4);
    int32_t *wk = load(out2, "spike_templates.npy", BS_NPY_I32, 1, &n5);
    int64_t q2 = 0;
    int same2 = wt && wk && n4 == n5;
    for (int64_t i = 0; same2 && i < q; i++)
        if (ks[i] != 4 && ks[i] != 6)
            same2 = q2 < n4 && wt[q2] == ts[i] && wk[q2] == ks[i], q2++;
    CHECK_MSG(same2 && q2 == n4, "removing the shadow unit whole: %lld spikes, expected %lld", (long long)n4,
              (long long)q2);
    CHECK(n_units2 == T.K - 1);
    bs_mem_free(wt), bs_mem_free(wk);

    /* noise units (docs/ALGORITHM.md §9.9): templates 4-6 have amplitudes 4 + 5 u² (u uniform: piled against
     * 4, median 5.25), the others in [10, 15); with the median's bound at 9.5 and the threshold at 4 the units
     * of 4-6 are made of noise crossings and every spike of theirs goes, every other spike stays. With the
     * threshold at 3 their amplitudes do not pile against it (none in [3, 3.375)) and every unit stays; with
     * template 6 of the low tier, its unit stays. */
    fp.shadow.max_rest = rest0;
    uint8_t low_tier[K];
    memset(low_tier, 0, sizeof low_tier);
    for (int pass = 0; pass < 3; pass++) {
        fp.noise_threshold = pass == 1 ? 3 : 4;
        fp.noise_median_of_threshold = 9.5 / fp.noise_threshold; /* the median's bound at 9.5 */
        low_tier[6] = pass == 2;
        in.low_tier = low_tier;
        snprintf(out2, sizeof out2, "%s_noise%d", out, pass);
        st = bs_finish_run(&in, &n_units2, &n_out2);
        CHECK_MSG(st == BS_OK, "finish (noise units): %s", bs_last_error());
        wt = load(out2, "spike_times.npy", BS_NPY_I64, 1, &n4);
        wk = load(out2, "spike_templates.npy", BS_NPY_I32, 1, &n5);
        q2 = 0;
        same2 = wt && wk && n4 == n5;
        for (int64_t i = 0; same2 && i < q; i++)
            if (pass == 1 || ks[i] < 4 || (pass == 2 && ks[i] == 6))
                same2 = q2 < n4 && wt[q2] == ts[i] && wk[q2] == ks[i], q2++;
        CHECK_MSG(same2 && q2 == n4, "noise units, pass %d: %lld spikes, expected %lld", pass, (long long)n4,
                  (long long)q2);
        CHECK_MSG(n_units2 == T.K - (pass == 0 ? 2 : pass == 2), "pass %d: %d units left of %d", pass, n_units2, T.K);
        bs_mem_free(wt), bs_mem_free(wk);
    }

    /* a low-tier unit's pile at its own threshold (docs/ALGORITHM.md §9.9): template 6 (low tier, its
     * threshold 4) gets a cell's amplitudes, 7 + 0.7 z, on 70 % of its spikes and crossings piled at 4,
     * 4 + exponential(0.3), on the others. Without its threshold given (threshold NULL, the run X) nothing
     * of it goes; with it (Y) Y is X less template 6's spikes under one cut, which lies in the valley
     * (4.25-6), takes most of the pile and little of the cell; with split.pile_ratio 0 Y is X again. */
    if (rate_hz <= 100) {
        float *amp0 = malloc(sizeof(float) * n), thk[K];
        memcpy(amp0, amp, sizeof(float) * n);
        int64_t n_pile = 0, n_cell = 0;
        for (int64_t i = 0; i < n; i++) {
            if (k0[i] != 6)
                continue;
            if (synth_uniform(&r) < 0.3) {
                amp[i] = (float)(4 - 0.3 * log(1 - synth_uniform(&r))), n_pile++;
            } else {
                double a;
                do
                    a = 7 + 0.7 * synth_normal(&r);
                while (a < 4);
                amp[i] = (float)a, n_cell++;
            }
        }
        snprintf(path, sizeof path, "%s/amplitudes.npy", mdir);
        CHECK(bs_npy_save(path, BS_NPY_F32, 1, s1, amp) == BS_OK);
        for (int k = 0; k < K; k++)
            thk[k] = k == 6 ? 4 : 8;
        low_tier[6] = 1;
        int64_t nx = 0, ny = 0, nxk = 0, nyk = 0, nxa = 0, nya = 0;
        int32_t *xk = NULL, *yk = NULL;
        int64_t *xt = NULL, *yt = NULL;
        float *xa = NULL, *ya = NULL;
        for (int run = 0; run < 3; run++) { /* X, Y, Y with pile_ratio 0 */
            in.threshold = run ? thk : NULL;
            fp.split.pile_ratio = run == 2 ? 0 : 1.5;
            snprintf(out2, sizeof out2, "%s_pile%d", out, run);
            st = bs_finish_run(&in, &n_units2, &n_out2);
            CHECK_MSG(st == BS_OK, "finish (pile %d): %s", run, bs_last_error());
            bs_mem_free(yt), bs_mem_free(yk), bs_mem_free(ya);
            yt = load(out2, "spike_times.npy", BS_NPY_I64, 1, &ny);
            yk = load(out2, "spike_templates.npy", BS_NPY_I32, 1, &nyk);
            ya = load(out2, "amplitudes.npy", BS_NPY_F32, 1, &nya);
            CHECK(yt && yk && ya && ny == nyk && ny == nya);
            if (run == 0) {
                xt = yt, xk = yk, xa = ya, nx = ny, nxk = nyk, nxa = nya;
                yt = NULL, yk = NULL, ya = NULL;
                continue;
            }
            /* Y walks X: every spike of X stays but template 6's under the cut */
            float cut_lo = 0, cut_hi = 1e30f; /* the highest removed, the lowest kept of template 6 */
            int64_t q3 = 0, gone = 0, gone_under5 = 0, x_under5 = 0;
            int sub = xt && yt && nx == nxk && nx == nxa;
            for (int64_t i = 0; sub && i < nx; i++) {
                int kept = q3 < ny && yt[q3] == xt[i] && yk[q3] == xk[i];
                if (xk[i] == 6)
                    x_under5 += xa[i] < 5;
                if (kept) {
                    q3++;
                    if (xk[i] == 6 && xa[i] < cut_hi)
                        cut_hi = xa[i];
                } else if (xk[i] == 6) {
                    gone++, gone_under5 += xa[i] < 5;
                    if (xa[i] > cut_lo)
                        cut_lo = xa[i];
                } else {
                    sub = 0;
                }
            }
            CHECK_MSG(sub && q3 == ny, "pile %d: a spike of another template went, or a new one came", run);
            if (run == 2) {
                CHECK_MSG(gone == 0, "pile_ratio 0: %lld spikes removed", (long long)gone);
                continue;
            }
            printf("pile %d: %lld spikes of template 6 removed (%lld of its %lld under 5), cut in (%g, %g]\n", run,
                   (long long)gone, (long long)gone_under5, (long long)x_under5, cut_lo, cut_hi);
            CHECK_MSG(cut_lo < cut_hi && cut_lo >= 4.0f && cut_hi >= 4.25f && cut_lo < 6.0f,
                      "pile: removed up to %g, kept from %g", cut_lo, cut_hi);
            CHECK_MSG(gone_under5 >= x_under5 * 9 / 10 && gone - gone_under5 <= n_cell / 10,
                      "pile: %lld of the %lld spikes under 5 removed, %lld over it (planted %lld pile, %lld cell)",
                      (long long)gone_under5, (long long)x_under5, (long long)(gone - gone_under5),
                      (long long)n_pile, (long long)n_cell);
        }
        bs_mem_free(xt), bs_mem_free(xk), bs_mem_free(xa), bs_mem_free(yt), bs_mem_free(yk), bs_mem_free(ya);
        memcpy(amp, amp0, sizeof(float) * n);
        free(amp0);
        CHECK(bs_npy_save(path, BS_NPY_F32, 1, s1, amp) == BS_OK);
        in.threshold = NULL;
        fp.split.pile_ratio = 1.5;
    }
    in.low_tier = NULL;
    fp.noise_threshold = 0;

    /* a noise cut (docs/ALGORITHM.md §9.8): about 30 % of template 3's spikes get amplitudes in [4, 4.5), the
     * threshold's noise crossings, under the low-part bound (11) and far under the others' [10, 15): the cut
     * is made and those spikes go, every other spike stays where the reference put it. The low ones are
     * chosen by blocks of time, and a spike within 10 samples of the template's previous one takes its
     * class, so that no duplicate pair straddles the classes (the others' duplicate removal is unchanged). */
    if (rate_hz <= 100) {
        uint8_t *low = calloc((size_t)n, 1);
        int64_t prev = -1, n_low = 0;
        for (int64_t i = 0; i < n; i++) {
            if (k0[i] != 3)
                continue;
            low[i] = prev >= 0 && t[i] - t[prev] <= 10 ? low[prev] : (t[i] / 1000) % 10 < 3;
            if (low[i])
                amp[i] = (float)(4 + 0.5 * synth_uniform(&r)), n_low++;
            prev = i;
        }
        snprintf(path, sizeof path, "%s/amplitudes.npy", mdir);
        CHECK(bs_npy_save(path, BS_NPY_F32, 1, s1, amp) == BS_OK);
        snprintf(out2, sizeof out2, "%s_noisecut", out);
        st = bs_finish_run(&in, &n_units2, &n_out2);
        CHECK_MSG(st == BS_OK, "finish (noise cut): %s", bs_last_error());
        wt = load(out2, "spike_times.npy", BS_NPY_I64, 1, &n4);
        wk = load(out2, "spike_templates.npy", BS_NPY_I32, 1, &n5);
        q2 = 0;
        same2 = wt && wk && n4 == n5;
        int64_t j = 0, n_gone = 0;
        for (int64_t i = 0; same2 && i < q; i++) {
            int gone_ = 0;
            if (ks[i] == 3) {
                int64_t m = spike_of_3(t, k0, n, &j, ts[i]);
                gone_ = m >= 0 && low[m];
                n_gone += gone_;
            }
            if (!gone_)
                same2 = q2 < n4 && wt[q2] == ts[i] && wk[q2] == ks[i], q2++;
        }
        CHECK_MSG(same2 && q2 == n4, "noise cut: %lld spikes, expected %lld", (long long)n4, (long long)q2);
        CHECK_MSG(n_gone > 100 && n_gone <= n_low, "noise cut: %lld of the %lld low spikes were kept ones",
                  (long long)n_gone, (long long)n_low);
        CHECK_MSG(n_units2 == T.K, "noise cut: %d units, expected %d", n_units2, T.K);
        bs_mem_free(wt), bs_mem_free(wk);

        /* an amplitude split refined by features (docs/ALGORITHM.md §9.8): template 3's spikes of a second
         * cell (the same blocks rule, about 30 %) have amplitudes in [20, 24) and their first feature 10 higher,
         * but every 8th of them has an amplitude in [12, 13), among the first cell's: the amplitude cut leaves
         * those with the first cell, the cut along the axis between the parts' mean features takes them: every
         * spike of template 3 lands in its cell's unit */
        uint8_t *second = low; /* reused */
        prev = -1;
        int64_t n_second = 0;
        for (int64_t i = 0; i < n; i++) {
            if (k0[i] != 3)
                continue;
            second[i] = prev >= 0 && t[i] - t[prev] <= 10 ? second[prev] : (t[i] / 1000) % 10 >= 7;
            prev = i;
            amp[i] = (float)(10 + 5 * synth_uniform(&r));
            if (second[i]) {
                amp[i] = (float)(n_second % 8 == 7 ? 12 + synth_uniform(&r) : 20 + 4 * synth_uniform(&r));
                feat[i * P * NPC] += 10.0f;
                n_second++;
            }
        }
        snprintf(path, sizeof path, "%s/amplitudes.npy", mdir);
        CHECK(bs_npy_save(path, BS_NPY_F32, 1, s1, amp) == BS_OK);
        snprintf(path, sizeof path, "%s/pc_features.npy", mdir);
        CHECK(bs_npy_save(path, BS_NPY_F32, 3, s3, feat) == BS_OK);
        snprintf(out2, sizeof out2, "%s_refined", out);
        st = bs_finish_run(&in, &n_units2, &n_out2);
        CHECK_MSG(st == BS_OK, "finish (refined split): %s", bs_last_error());
        wt = load(out2, "spike_times.npy", BS_NPY_I64, 1, &n4);
        wk = load(out2, "spike_templates.npy", BS_NPY_I32, 1, &n5);
        int64_t n6 = 0;
        int32_t *wc = load(out2, "spike_clusters.npy", BS_NPY_I32, 1, &n6);
        int32_t cl[2] = {-1, -1};
        int64_t wrong = 0, seen[2] = {0, 0};
        j = 0;
        for (int64_t i = 0; wt && wk && wc && n4 == n5 && n4 == n6 && i < n4; i++) {
            if (wk[i] != 3)
                continue;
            int64_t m = spike_of_3(t, k0, n, &j, wt[i]);
            if (m < 0)
                continue;
            int g = second[m];
            if (cl[g] < 0)
                cl[g] = wc[i];
            wrong += wc[i] != cl[g];
            seen[g]++;
        }
        CHECK_MSG(wrong == 0 && cl[0] >= 0 && cl[1] >= 0 && cl[0] != cl[1],
                  "refined split: %lld spikes of template 3 in another cell's unit (units %d and %d)",
                  (long long)wrong, cl[0], cl[1]);
        CHECK_MSG(seen[1] > n_second * 9 / 10 && n_second > 100, "refined split: %lld of the second cell's %lld spikes",
                  (long long)seen[1], (long long)n_second);
        CHECK_MSG(n_units2 == T.K + 1, "refined split: %d units, expected %d", n_units2, T.K + 1);
        bs_mem_free(wt), bs_mem_free(wk), bs_mem_free(wc);
        free(low);
    }
    printf("rate %g Hz: %lld matched spikes -> %lld kept (%lld shadows), %d units\n", rate_hz, (long long)n,
           (long long)q, (long long)n_shadow, n_units);

    free(tsv);
    bs_mem_free(ot), bs_mem_free(oc), bs_mem_free(ok);
    free(ta), free(tb), free(tc), free(td), free(te), free(sp), free(t), free(k0), free(amp), free(feat);
    free(tt), free(order), free(clu), free(kk), free(ts), free(cs), free(ks), free(keep);
    bs_sparse_templates_free(&T);
    bs_match_templates_free(&mt);
}

/* The streamed ACG equals the whole-train counts. */
static void check_acg_stream(void)
{
    synth_rng r = {99};
    for (int trial = 0; trial < 3; trial++) {
        int64_t cap = 4000, t[4000];
        int64_t n = make_train(&r, 40.0 + 40 * trial, (int64_t)(60 * FS), trial == 0 ? 0 : 45, t, cap);
        int64_t counts[BS_CCG_BINS];
        bs_ccg_counts(t, n, t, n, FS, counts);
        bs_acg_stream a;
        memset(&a, 0, sizeof a);
        for (int64_t i = 0; i < n; i++)
            CHECK(bs_acg_stream_add(&a, t[i], FS) == BS_OK);
        CHECK(memcmp(counts, a.counts, sizeof counts) == 0);
        bs_ccg_metrics m1, m2;
        int g1 = bs_ccg_is_good(t, n, FS, 0.2, &m1), g2 = bs_acg_stream_is_good(&a, FS, 0.2, &m2);
        CHECK(g1 == g2 && m1.R12 == m2.R12 && m1.Q12 == m2.Q12);
        bs_acg_stream_free(&a);
    }
}

static void check_shadow_lags(void)
{
    bs_finish_params fp;
    bs_finish_default_params(&fp);
    bs_shadow_params sp;
    CHECK(bs_finish_shadow_params(&fp, 30000.0, &sp) == BS_OK);
    CHECK_MSG(sp.max_lag == 15 && sp.tail_max_lag == 60 && sp.min_count == fp.shadow.min_count, "lags %d %d",
              sp.max_lag, sp.tail_max_lag);
    fp.shadow_tail_max_lag_ms = 100; /* the range's top: 3000 samples at 30 kHz, within the test's histogram */
    CHECK(bs_finish_shadow_params(&fp, 30000.0, &sp) == BS_OK && sp.tail_max_lag == 3000);
    CHECK(bs_finish_shadow_params(&fp, 50000.0, NULL) == BS_ERR_USAGE); /* 5000 samples */
    fp.shadow_tail_max_lag_ms = 2;
    fp.shadow_max_lag_ms = 5;
    CHECK(bs_finish_shadow_params(&fp, 1e6, NULL) == BS_ERR_USAGE); /* 5000 samples at 1 MHz */
    CHECK(bs_finish_shadow_params(&fp, 8e5, NULL) == BS_OK);        /* 4000 */
}

int main(void)
{
    const char *root = test_tmpdir();
    check_shadow_lags();
    check_acg_stream();
    run_case(root, 20.0, 60.0, 3);  /* one read block */
    run_case(root, 400.0, 60.0, 5); /* > 65536 spikes: several blocks through the reorder buffer */
    CHECK_MSG(n_unit_shadow_cases > 0, "no case left a unit shadow for after the merges");
    CHECK(bs_mem_current(BS_DEV_HOST) == 0);
    TEST_MAIN_END();
}
