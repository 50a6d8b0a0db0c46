/*
 * sim_artifacts.c - broadband transients for `simulate --artifacts RATE`:
 * what licking, chewing, movement and stimulation put on a real recording.
 *
 * Events form a Poisson process of RATE per second over the recording (its
 * own random stream, so adding artifacts never changes the units, their
 * spikes or the noise). Each event has one of three shapes, a peak amplitude
 * log-uniform in [300, 3000] µV and a spatial gain per channel:
 *   0 stimulation  a biphasic square pulse (each phase 0.1-0.5 ms) and an
 *                  exponential recovery of 30 % of the amplitude (tau 0.5-2 ms);
 *   1 chewing      a damped oscillation, 150-600 Hz, tau 1-4 ms;
 *   2 movement     a step that rises in 0.2 ms and decays (tau 2-10 ms).
 * An event lasts until its envelope falls below 1 % (at most 40 ms). The gain
 * covers a contiguous fraction 0.6-1.0 of the probe's depth (0.05 outside),
 * ramps linearly along depth between two random levels in [0.3, 1.5] and is
 * jittered +-25 % per channel, so the common median reference does not
 * cancel it. Rendering is a pure function of (seed, event, channel, sample),
 * added block by block like the spikes (simulate.c), so the files stay
 * byte-identical for any thread count and block size.
 *
 * The ground truth (gt_artifacts.tsv): one row per event, start and end
 * sample (end exclusive), kind, peak amplitude in µV and the channels whose
 * gain is at least 0.25.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "sim_internal.h"

#define ART_MAX_MS 40.0 /* longest event */

static const char *const kind_names[3] = {"stimulation", "chewing", "movement"};

/* Envelope-bounded waveform of event a at dt samples after its start. */
static double wave(const bs_sim_artifact *a, double fs, int64_t dt)
{
    double t_ms = (double)dt * 1000.0 / fs;
    switch (a->kind) {
    case 0: { /* biphasic pulse, then recovery */
        double ph = a->p1;
        if (t_ms < ph)
            return 1.0;
        if (t_ms < 2 * ph)
            return -1.0;
        return -0.3 * exp(-(t_ms - 2 * ph) / a->p2);
    }
    case 1: /* damped oscillation */
        return sin(2.0 * M_PI * a->p1 * t_ms / 1000.0) * exp(-t_ms / a->p2);
    default: /* movement: fast rise, slow decay */
        return (1.0 - exp(-t_ms / 0.2)) * exp(-t_ms / a->p2);
    }
}

/* Gain of event a on a channel at depth y (µm). */
static double gain(const bs_sim_artifact *a, uint64_t seed, int64_t e, int ch, double y)
{
    double g;
    if (y < a->y_lo || y > a->y_hi)
        g = 0.05;
    else
        g = a->g_lo + (a->g_hi - a->g_lo) * (y - a->y_lo) / (a->y_hi - a->y_lo > 1 ? a->y_hi - a->y_lo : 1);
    uint64_t h = bs_sim_mix64(bs_sim_key(seed, BS_SIM_STREAM_ARTIFACT, (uint64_t)e) ^ (uint64_t)(ch + 1));
    double jit = 0.75 + 0.5 * (double)(h >> 11) / 9007199254740992.0;
    return g * jit;
}

bs_status bs_sim_artifacts_draw(const bs_sim_params *p, const bs_probe *probe, int64_t n_samples,
                                bs_sim_artifact **out, int64_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!(p->artifact_rate_hz > 0))
        return BS_OK;
    double y_min = INFINITY, y_max = -INFINITY;
    for (int c = 0; c < probe->n_chan; c++) {
        y_min = fmin(y_min, probe->y_um[c]);
        y_max = fmax(y_max, probe->y_um[c]);
    }
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, BS_SIM_STREAM_ARTIFACT, 0xa7);
    double fs = p->fs_hz, t = 0;
    int64_t cap = 0, n = 0;
    bs_sim_artifact *a = NULL;
    for (;;) {
        t += bs_sim_rng_exp(&r) / p->artifact_rate_hz * fs;
        if (t >= (double)n_samples)
            break;
        if (n == cap) {
            int64_t nc = cap ? 2 * cap : 64;
            bs_sim_artifact *g = bs_mem_realloc(a, "sim/artifacts", (size_t)nc * sizeof *a);
            if (!g) {
                bs_mem_free(a);
                return BS_ERR_MEMORY;
            }
            a = g, cap = nc;
        }
        bs_sim_artifact *e = &a[n];
        memset(e, 0, sizeof *e);
        e->t0 = (int64_t)t;
        e->kind = (int)(bs_sim_rng_uniform(&r) * 3.0);
        e->amp_uv = exp(bs_sim_rng_range(&r, log(300.0), log(3000.0)));
        double dur_ms;
        switch (e->kind) {
        case 0:
            e->p1 = bs_sim_rng_range(&r, 0.1, 0.5), e->p2 = bs_sim_rng_range(&r, 0.5, 2.0);
            dur_ms = 2 * e->p1 + e->p2 * log(30.0);
            break;
        case 1:
            e->p1 = bs_sim_rng_range(&r, 150.0, 600.0), e->p2 = bs_sim_rng_range(&r, 1.0, 4.0);
            dur_ms = e->p2 * log(100.0);
            break;
        default:
            e->p1 = 0, e->p2 = bs_sim_rng_range(&r, 2.0, 10.0);
            dur_ms = e->p2 * log(100.0);
            break;
        }
        dur_ms = fmin(dur_ms, ART_MAX_MS);
        e->t1 = e->t0 + (int64_t)ceil(dur_ms * fs / 1000.0);
        if (e->t1 > n_samples)
            e->t1 = n_samples;
        double frac = bs_sim_rng_range(&r, 0.6, 1.0), span = (y_max - y_min) * frac;
        e->y_lo = y_min + bs_sim_rng_uniform(&r) * (y_max - y_min - span);
        e->y_hi = e->y_lo + span;
        e->g_lo = bs_sim_rng_range(&r, 0.3, 1.5), e->g_hi = bs_sim_rng_range(&r, 0.3, 1.5);
        n++;
    }
    for (int64_t i = 0; i < n; i++) {
        a[i].n_chan = 0;
        for (int c = 0; c < probe->n_chan; c++)
            a[i].n_chan += gain(&a[i], p->seed, i, c, probe->y_um[c]) >= 0.25;
    }
    *out = a;
    *n_out = n;
    return BS_OK;
}

int64_t bs_sim_artifacts_max_len(double fs_hz)
{
    return (int64_t)ceil(ART_MAX_MS * fs_hz / 1000.0);
}

void bs_sim_artifacts_render(const bs_sim_artifact *a, int64_t n, uint64_t seed, const bs_probe *probe, double fs_hz,
                             float *buf, int64_t B, int64_t t0, int64_t t1)
{
    int64_t reach = bs_sim_artifacts_max_len(fs_hz);
    /* the first event that can reach t0 (events are in start order) */
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid].t0 < t0 - reach)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int64_t e = lo; e < n && a[e].t0 < t1; e++) {
        int64_t s0 = a[e].t0 > t0 ? a[e].t0 : t0, s1 = a[e].t1 < t1 ? a[e].t1 : t1;
        if (s0 >= s1)
            continue;
        for (int c = 0; c < probe->n_chan; c++) {
            float g = (float)(a[e].amp_uv * gain(&a[e], seed, e, c, probe->y_um[c]));
            float *row = buf + (size_t)c * (size_t)B;
            for (int64_t s = s0; s < s1; s++)
                row[s - t0] += g * (float)wave(&a[e], fs_hz, s - a[e].t0);
        }
    }
}

bs_status bs_sim_artifacts_write(const char *out_dir, const bs_sim_artifact *a, int64_t n)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, out_dir, "gt_artifacts.tsv"));
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    int bad = fprintf(f.fp, "start_sample\tend_sample\tkind\tamplitude_uv\tn_channels\n") < 0;
    for (int64_t i = 0; i < n && !bad; i++)
        bad = fprintf(f.fp, "%lld\t%lld\t%s\t%.1f\t%d\n", (long long)a[i].t0, (long long)a[i].t1,
                      kind_names[a[i].kind], a[i].amp_uv, a[i].n_chan) < 0;
    if (bad) {
        bs_atomic_abort(&f);
        return bs_error(BS_ERR_IO, "%s: write failed", path);
    }
    return bs_atomic_commit(&f);
}
