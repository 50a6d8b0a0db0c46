/*
 * simulate.c - the simulator's driver: parameters, drift table, units and
 * spike trains, the block-parallel rendering of the recording, and the
 * ground-truth folder.
 *
 * Order of work:
 *   1. probe layout (sim_probes.c) and the drift table: n_bins time bins of
 *      drift_bin_s by n_drift_blocks depth blocks whose centres divide the
 *      probe's depth span evenly. Value = apparent depth shift of the units
 *      relative to the probe in µm (a unit at y0 appears at y0 + value).
 *   2. units (sim_units.c): U ground-truth units and hash_per_100um background
 *      units per 100 µm of shank, each with its own RNG stream, shape table
 *      and candidate channels; spike trains per unit, merged and sorted by
 *      (time, unit). GT troughs are kept at least nt_before samples from the
 *      start and nt - nt_before from the end so every GT waveform is whole.
 *      On Neuropixels probes channels are sampled at staggered sub-sample times
 *      (ADC multiplexing, adc_mux): each channel's delay in 1/8 samples shifts
 *      the spikes and the common-mode noise it sees.
 *   3. the recording is rendered in blocks of block_samples in parallel:
 *      noise (sim_noise.c) + every spike whose window overlaps the block, added
 *      in (time, unit) order, then rounded to int16 at uv_per_bit and written
 *      with pwrite at the block's offset into the temporary file of
 *      recording.bin (and of the SpikeGLX .bin, with the sync column). The
 *      files are committed (fsync, rename) only after every block succeeded.
 *   4. gt_*.npy, probe.json, recording.json (and the .meta).
 *
 * Memory: per thread one float block (channels x block_samples), its int16
 * copies and the noise scratch; plus the spike list (24 bytes per spike) and
 * the shape tables (~100 KB per unit). Nothing holds the whole recording.
 */
#define _POSIX_C_SOURCE 200809L
#include "simulate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../common/samples.h"
#include "../io/npy.h"
#include "../io/probe.h"
#include "../mem/mem.h"
#include "sim_internal.h"

void bs_sim_params_default(bs_sim_params *p)
{
    memset(p, 0, sizeof *p);
    p->probe = BS_SIM_PROBE_NP1;
    p->duration_s = 60.0;
    p->n_units = 50;
    p->drift = BS_SIM_DRIFT_NONE;
    p->drift_um = 0.0;
    p->step_time_s = -1.0;
    p->drift_bin_s = 0.5;
    p->n_drift_blocks = 5;
    p->seed = 1;
    p->fs_hz = 30000.0;
    p->spikeglx = 0;
    p->noise_uv = 10.0;
    p->coupled_lag_ms = 0.6;
    p->hash_per_100um = 6.0;
    p->lfp_uv = 15.0;
    p->block_samples = 8192;
    p->adc_mux = 1;
}

bs_status bs_sim_check_params(const bs_sim_params *p)
{
    if ((unsigned)p->probe > BS_SIM_PROBE_LINEAR32)
        return bs_error(BS_ERR_USAGE, "probe: unknown probe kind %d", (int)p->probe);
    if ((unsigned)p->drift > BS_SIM_DRIFT_STEP)
        return bs_error(BS_ERR_USAGE, "drift: unknown drift kind %d", (int)p->drift);
    if (!(p->fs_hz >= 1000.0 && p->fs_hz <= 200000.0))
        return bs_error(BS_ERR_USAGE, "option --fs: expected a sampling rate in 1000..200000 Hz, got %g", p->fs_hz);
    if (!(p->duration_s > 0.0 && p->duration_s <= 1e6))
        return bs_error(BS_ERR_USAGE, "option --duration: expected a positive number of seconds (at most 1e6), got %g",
                        p->duration_s);
    if (p->duration_s * p->fs_hz < 0.1 * p->fs_hz)
        return bs_error(BS_ERR_USAGE, "option --duration: expected at least 0.1 s, got %g s", p->duration_s);
    if (p->n_units < 1 || p->n_units > 2000)
        return bs_error(BS_ERR_USAGE, "option --units: expected 1..2000 units, got %d", p->n_units);
    if (p->n_noise_units < 0 || p->n_noise_units > p->n_units)
        return bs_error(BS_ERR_USAGE, "option --noise-units: expected 0..%d (at most --units), got %d", p->n_units,
                        p->n_noise_units);
    if (p->n_coupled < 0 || 2 * p->n_coupled > p->n_units - p->n_noise_units)
        return bs_error(BS_ERR_USAGE, "option --coupled-pairs: expected 0..%d (two neuron units a pair), got %d",
                        (p->n_units - p->n_noise_units) / 2, p->n_coupled);
    if (!(fabs(p->coupled_lag_ms) <= 2.0))
        return bs_error(BS_ERR_USAGE, "option --coupled-lag-ms: expected -2..2 ms, got %g", p->coupled_lag_ms);
    if (!(p->drift_bin_s > 0.0 && p->drift_bin_s <= p->duration_s + 1e9))
        return bs_error(BS_ERR_USAGE, "drift bin: expected a positive length in s, got %g", p->drift_bin_s);
    if (p->n_drift_blocks < 1 || p->n_drift_blocks > 1000)
        return bs_error(BS_ERR_USAGE, "drift blocks: expected 1..1000, got %d", p->n_drift_blocks);
    if (!(fabs(p->drift_um) <= 500.0))
        return bs_error(BS_ERR_USAGE, "option --drift-um: expected at most 500 µm, got %g", p->drift_um);
    if (!(p->noise_uv >= 0.0 && p->noise_uv <= 1000.0))
        return bs_error(BS_ERR_USAGE, "option --noise: expected 0..1000 µV rms, got %g", p->noise_uv);
    if (!(p->hash_per_100um >= 0.0 && p->hash_per_100um <= 100.0))
        return bs_error(BS_ERR_USAGE, "hash units: expected 0..100 per 100 µm, got %g", p->hash_per_100um);
    if (!(p->artifact_rate_hz >= 0.0 && p->artifact_rate_hz <= 100.0))
        return bs_error(BS_ERR_USAGE, "artifact rate: expected 0..100 per second, got %g", p->artifact_rate_hz);
    if (!(p->lfp_uv >= 0.0 && p->lfp_uv <= 1000.0))
        return bs_error(BS_ERR_USAGE, "LFP amplitude: expected 0..1000 µV, got %g", p->lfp_uv);
    if (p->block_samples < 64 || p->block_samples > (1 << 22))
        return bs_error(BS_ERR_USAGE, "block size: expected 64..4194304 samples, got %d", p->block_samples);
    if (p->spikeglx && p->probe == BS_SIM_PROBE_LINEAR32)
        return bs_error(BS_ERR_USAGE, "option --spikeglx: SpikeGLX files need a Neuropixels probe (np1, np2, "
                                      "np2-4shank), not linear32");
    return BS_OK;
}

/* ---- drift table ---- */

static double drift_default_um(const bs_sim_params *p)
{
    if (p->drift_um != 0.0)
        return p->drift_um;
    return p->drift == BS_SIM_DRIFT_STEP ? 20.0 : 15.0;
}

static bs_status make_drift(const bs_sim_params *p, int64_t n_samples, bs_sim_world *w, int64_t *step_bin)
{
    const bs_sim_layout *L = w->layout;
    w->bin_samples = bs_seconds_to_samples(p->drift_bin_s, p->fs_hz);
    if (w->bin_samples < 1)
        w->bin_samples = 1;
    int64_t nb = (n_samples + w->bin_samples - 1) / w->bin_samples;
    if (nb > 100000000)
        return bs_error(BS_ERR_USAGE, "drift bin: %g s gives too many bins", p->drift_bin_s);
    w->n_bins = (int)nb;
    w->n_blocks = p->n_drift_blocks;
    w->drift = bs_mem_calloc("sim/drift", (size_t)w->n_bins * (size_t)w->n_blocks, sizeof(float));
    w->block_depth = bs_mem_calloc("sim/drift", (size_t)w->n_blocks, sizeof(double));
    if (!w->drift || !w->block_depth)
        return BS_ERR_MEMORY;
    double span = L->y_max_um - L->y_min_um;
    for (int k = 0; k < w->n_blocks; k++)
        w->block_depth[k] = L->y_min_um + (k + 0.5) * span / w->n_blocks;
    double A = drift_default_um(p), T = (double)n_samples / p->fs_hz, bin_s = (double)w->bin_samples / p->fs_hz;
    *step_bin = p->step_time_s >= 0 ? llround(p->step_time_s / bin_s) : llround(0.5 * T / bin_s);
    w->max_abs_drift = 0;
    for (int b = 0; b < w->n_bins; b++) {
        double tc = (b + 0.5) * bin_s;
        for (int k = 0; k < w->n_blocks; k++) {
            double v = 0;
            double frac = w->n_blocks > 1 ? (double)k / (w->n_blocks - 1) : 1.0;
            switch (p->drift) {
            case BS_SIM_DRIFT_NONE: v = 0; break;
            case BS_SIM_DRIFT_RIGID: v = A * sin(2.0 * M_PI * tc / T); break;
            case BS_SIM_DRIFT_NONRIGID: v = A * sin(2.0 * M_PI * tc / T) * (0.3 + 1.4 * frac); break;
            case BS_SIM_DRIFT_STEP: v = b >= *step_bin ? A : 0.0; break;
            }
            w->drift[(size_t)b * w->n_blocks + k] = (float)v;
            if (fabs((float)v) > w->max_abs_drift)
                w->max_abs_drift = fabs((float)v);
        }
    }
    return BS_OK;
}

/* ---- spikes ---- */

static int spike_cmp(const void *a, const void *b)
{
    const bs_sim_spike *s = a, *t = b;
    if (s->t != t->t)
        return s->t < t->t ? -1 : 1;
    return (s->unit > t->unit) - (s->unit < t->unit);
}

static int64_t lower_bound(const bs_sim_spike *sp, int64_t n, int64_t t)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sp[mid].t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

typedef struct {
    const bs_sim_params *p;
    bs_sim_world *w;
    bs_sim_unit *units;
    int n_all;
    bs_sim_spike *sp;
    int64_t n_sp;
    bs_sim_noise *noise;
    int64_t n_samples;
    double uv_per_bit;
    int fd_rec, fd_sglx;
    const bs_sim_artifact *art;
    int64_t n_art;
} render_ctx;

/* The planted bad channels (p->n_out at the top of each shank, then p->n_dead and p->n_noisy drawn among
 * the others from their own stream). */
static bs_status plant_bad_channels(const bs_sim_params *p, const bs_probe *probe, bs_sim_world *w)
{
    int C = probe->n_chan;
    if (p->n_dead + p->n_noisy + p->n_out == 0)
        return BS_OK;
    w->chan_bad = bs_mem_calloc("sim/probe", (size_t)C, 1);
    if (!w->chan_bad)
        return BS_ERR_MEMORY;
    for (int sh = 0; sh < probe->n_shanks; sh++)
        for (int k = 0; k < p->n_out; k++) { /* the highest channel of the shank not planted yet */
            int best = -1;
            for (int c = 0; c < C; c++)
                if (probe->shank[c] == sh && !w->chan_bad[c] && (best < 0 || probe->y_um[c] > probe->y_um[best]))
                    best = c;
            if (best >= 0)
                w->chan_bad[best] = 3;
        }
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, BS_SIM_STREAM_BAD_CHAN, 0);
    int want[2] = {p->n_dead, p->n_noisy}, free_n = 0;
    for (int c = 0; c < C; c++)
        free_n += !w->chan_bad[c];
    if (p->n_dead + p->n_noisy > free_n / 2)
        return bs_error(BS_ERR_USAGE, "--dead-channels and --noisy-channels: %d planted, but the probe has %d "
                                      "channels left: at most half of them can be planted",
                        p->n_dead + p->n_noisy, free_n);
    for (int kind = 0; kind < 2; kind++)
        for (int k = 0; k < want[kind]; k++) {
            int c;
            do
                c = (int)(bs_sim_rng_uniform(&r) * C);
            while (w->chan_bad[c]);
            w->chan_bad[c] = (int8_t)(kind + 1);
        }
    return BS_OK;
}

/* A planted bad channel's samples of the block (t0 + [0, B)), in place of or on top of what was rendered. */
static void render_bad_channels(const bs_sim_params *p, const bs_sim_world *w, int C, float *buf, int64_t B, int64_t t0)
{
    if (!w->chan_bad)
        return;
    for (int c = 0; c < C; c++) {
        float *x = buf + (size_t)c * (size_t)B;
        uint64_t key = bs_sim_key(p->seed, BS_SIM_STREAM_BAD_CHAN, (uint64_t)c + 1);
        switch (w->chan_bad[c]) {
        case 1:
            for (int64_t i = 0; i < B; i++)
                x[i] *= 0.02f;
            break;
        case 2:
            for (int64_t i = 0; i < B; i++)
                x[i] += 50.0f * bs_sim_counter_normal(key, (uint64_t)(t0 + i));
            break;
        case 3:
            for (int64_t i = 0; i < B; i++)
                x[i] = (float)(0.8 * p->noise_uv) * bs_sim_counter_normal(key, (uint64_t)(t0 + i));
            break;
        default:
            break;
        }
    }
}

static inline int16_t quantize(float v, float inv)
{
    /* round half up: after clamping, x + 32768.5 is positive and truncation is floor */
    float x = v * inv + 32768.5f;
    x = x < 0.5f ? 0.5f : x;
    x = x > 65535.5f ? 65535.5f : x;
    return (int16_t)((int32_t)x - 32768);
}

static bs_status render(render_ctx *rc)
{
    const bs_sim_world *w = rc->w;
    int C = w->probe->n_chan;
    int64_t B = rc->p->block_samples;
    int64_t n_blocks = (rc->n_samples + B - 1) / B;
    bs_status st_all = BS_OK;
    int fail_flag = 0;
    char err_msg[1024] = "";
    float inv = (float)(1.0 / rc->uv_per_bit);
    double fs = w->fs_hz;
#pragma omp parallel
    {
        float *buf = bs_mem_alloc("sim/block", (size_t)C * (size_t)B * sizeof(float));
        float *scratch = bs_mem_alloc("sim/noise_scratch", bs_sim_noise_scratch(rc->noise, B) * sizeof(float));
        int16_t *o16 = bs_mem_alloc("sim/block_i16", (size_t)C * (size_t)B * sizeof(int16_t));
        int16_t *g16 = rc->fd_sglx >= 0 ? bs_mem_alloc("sim/block_sglx", (size_t)(C + 1) * (size_t)B * 2) : NULL;
        int ok = buf && scratch && o16 && (rc->fd_sglx < 0 || g16);
        if (!ok) {
#pragma omp critical(bs_sim_err)
            {
                if (st_all == BS_OK) {
                    st_all = BS_ERR_MEMORY;
                    snprintf(err_msg, sizeof err_msg, "%s", bs_last_error());
                }
#pragma omp atomic write
                fail_flag = 1;
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < n_blocks; blk++) {
            int failed;
#pragma omp atomic read
            failed = fail_flag;
            if (!ok || failed)
                continue;
            int64_t t0 = blk * B, t1 = t0 + B < rc->n_samples ? t0 + B : rc->n_samples;
            int64_t nb = t1 - t0;
            bs_sim_noise_block(rc->noise, fs, t0, B, buf, scratch);
            /* spikes whose window (shifted by at most one sample for ADC delays) overlaps the block */
            int64_t first = lower_bound(rc->sp, rc->n_sp, t0 + w->nt_before - w->nt);
            for (int64_t s = first; s < rc->n_sp && rc->sp[s].t < t1 + w->nt_before + 1; s++)
                bs_sim_render_spike(w, &rc->units[rc->sp[s].unit], &rc->sp[s], buf, B, t0, t1);
            bs_sim_artifacts_render(rc->art, rc->n_art, rc->p->seed, w->probe, fs, buf, B, t0, t1);
            render_bad_channels(rc->p, w, C, buf, B, t0);
            /* channel-major floats -> interleaved int16, in tiles of 64 samples to stay in cache */
            for (int64_t i0 = 0; i0 < nb; i0 += 64) {
                int64_t i1 = i0 + 64 < nb ? i0 + 64 : nb;
                int c = 0;
                for (; c + 8 <= C; c += 8) {
                    const float *src = buf + (size_t)c * (size_t)B;
                    for (int64_t i = i0; i < i1; i++) {
                        int16_t *dst = o16 + i * C + c;
                        for (int k = 0; k < 8; k++)
                            dst[k] = quantize(src[(size_t)k * (size_t)B + (size_t)i], inv);
                    }
                }
                for (; c < C; c++)
                    for (int64_t i = i0; i < i1; i++)
                        o16[i * C + c] = quantize(buf[(size_t)c * (size_t)B + (size_t)i], inv);
            }
            int bad = pwrite_all(rc->fd_rec, o16, (size_t)(nb * C) * 2, (off_t)(t0 * C * 2));
            if (!bad && g16) {
                for (int64_t i = 0; i < nb; i++) {
                    memcpy(g16 + i * (C + 1), o16 + i * C, (size_t)C * 2);
                    int64_t t = t0 + i;
                    g16[i * (C + 1) + C] = ((int64_t)floor(2.0 * (double)t / fs) % 2 == 0) ? 64 : 0;
                }
                bad = pwrite_all(rc->fd_sglx, g16, (size_t)(nb * (C + 1)) * 2, (off_t)(t0 * (C + 1) * 2));
            }
            if (bad) {
                int e = errno;
#pragma omp critical(bs_sim_err)
                {
                    if (st_all == BS_OK) {
                        st_all = BS_ERR_INPUT;
                        snprintf(err_msg, sizeof err_msg, "writing the recording: %s", strerror(e));
                    }
#pragma omp atomic write
                    fail_flag = 1;
                }
            }
        }
        bs_mem_free(buf);
        bs_mem_free(scratch);
        bs_mem_free(o16);
        bs_mem_free(g16);
    }
    if (st_all != BS_OK)
        return bs_error(st_all, "%s", err_msg);
    return BS_OK;
}

/* ---- outputs ---- */

static bs_status save_npy(const char *dir, const char *name, bs_npy_dtype dt, int ndim, const int64_t *shape,
                          const void *data)
{
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, dir, name));
    return bs_npy_save(path, dt, ndim, shape, data);
}

static bs_status write_recording_json(const char *dir, const bs_sim_params *p, const bs_sim_world *w,
                                      const bs_sim_unit *units, const bs_sim_summary *s, int n_hash,
                                      double step_time_s, const int64_t *counts)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", "boundsort ground truth 1");
    cJSON_AddNumberToObject(r, "fs_hz", p->fs_hz);
    cJSON_AddNumberToObject(r, "n_chan", s->n_chan);
    cJSON_AddNumberToObject(r, "n_samples", (double)s->n_samples);
    cJSON_AddStringToObject(r, "dtype", "int16");
    cJSON_AddNumberToObject(r, "uv_per_bit", s->uv_per_bit);
    cJSON_AddNumberToObject(r, "seed", (double)p->seed);
    cJSON_AddStringToObject(r, "drift", bs_sim_drift_name(p->drift));
    cJSON_AddStringToObject(r, "probe", bs_sim_probe_name(p->probe));
    cJSON_AddStringToObject(r, "probe_model", w->layout->part_number);
    cJSON_AddNumberToObject(r, "duration_s", (double)s->n_samples / p->fs_hz);
    cJSON_AddNumberToObject(r, "n_units", p->n_units);
    if (p->n_coupled > 0) {
        cJSON *cp = cJSON_AddArrayToObject(r, "coupled_pairs");
        for (int i = 0; i < p->n_coupled; i++) {
            const int pair[2] = {2 * i, 2 * i + 1};
            cJSON_AddItemToArray(cp, cJSON_CreateIntArray(pair, 2));
        }
        cJSON_AddNumberToObject(r, "coupled_lag_ms", p->coupled_lag_ms);
        cJSON_AddNumberToObject(r, "coupled_share", BS_SIM_COUPLE_PROB);
    }
    if (p->n_noise_units > 0) {
        cJSON *nu = cJSON_AddArrayToObject(r, "noise_units");
        for (int u = p->n_units - p->n_noise_units; u < p->n_units; u++)
            cJSON_AddItemToArray(nu, cJSON_CreateNumber(u));
    }
    cJSON_AddNumberToObject(r, "n_spikes", (double)s->n_spikes);
    cJSON_AddNumberToObject(r, "nt", s->nt);
    cJSON_AddNumberToObject(r, "nt_before", s->nt_before);
    cJSON_AddNumberToObject(r, "noise_uv_rms", p->noise_uv);
    cJSON_AddStringToObject(r, "noise_model",
                            "band-limited (15-tap 5 kHz low-pass) Gaussian: 64% independent per channel, 32% "
                            "spatially smooth (sources every 40 um, sigma 50 um), 4% common per shank; plus hash "
                            "units and an LFP-like 1-12 Hz wave");
    cJSON_AddNumberToObject(r, "lfp_uv", p->lfp_uv);
    cJSON_AddNumberToObject(r, "n_hash_units", n_hash);
    cJSON_AddNumberToObject(r, "n_hash_spikes", (double)s->n_hash_spikes);
    cJSON_AddNumberToObject(r, "gt_collisions_1ms_100um", (double)s->n_collisions);
    cJSON_AddNumberToObject(r, "artifact_rate_hz", p->artifact_rate_hz);
    cJSON_AddNumberToObject(r, "n_artifacts", (double)s->n_artifacts);
    cJSON_AddNumberToObject(r, "drift_bin_s", (double)w->bin_samples / p->fs_hz);
    cJSON_AddNumberToObject(r, "drift_bin_samples", (double)w->bin_samples);
    cJSON_AddNumberToObject(r, "drift_n_bins", w->n_bins);
    cJSON_AddNumberToObject(r, "drift_amplitude_um", p->drift == BS_SIM_DRIFT_NONE ? 0.0 : drift_default_um(p));
    if (p->drift == BS_SIM_DRIFT_STEP)
        cJSON_AddNumberToObject(r, "drift_step_time_s", step_time_s);
    cJSON_AddItemToObject(r, "drift_block_depths_um", cJSON_CreateDoubleArray(w->block_depth, w->n_blocks));
    cJSON_AddStringToObject(r, "drift_definition",
                            "gt_drift_um[bin, block] is the apparent depth shift of the tissue relative to the probe: "
                            "a unit at depth y appears at y + value (linear between block centres, constant within a "
                            "bin)");
    cJSON_AddBoolToObject(r, "adc_mux", w->chan_dq != NULL);
    if (w->chan_dq) {
        cJSON_AddNumberToObject(r, "adc_mux_cycles", w->layout->mux_cycles);
        cJSON *sh = cJSON_AddArrayToObject(r, "adc_shift_samples");
        for (int c = 0; c < s->n_chan; c++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(w->chan_dq[c] / 8.0));
        cJSON_AddStringToObject(r, "adc_mux_definition",
                                "channel c is sampled adc_shift_samples[c] samples after the nominal sample time "
                                "(slot / adc_mux_cycles of SpikeGLX's ~muxTbl, rounded to 1/8 sample); GT times are "
                                "trough samples on each unit's peak channel");
    }
    if (w->chan_bad) { /* the planted bad channels, by label */
        cJSON *bc = cJSON_AddObjectToObject(r, "bad_channels");
        const char *names[4] = {NULL, "dead", "noisy", "out"};
        for (int l = 1; l < 4; l++) {
            cJSON *a = cJSON_AddArrayToObject(bc, names[l]);
            for (int c = 0; c < s->n_chan; c++)
                if (w->chan_bad[c] == l)
                    cJSON_AddItemToArray(a, cJSON_CreateNumber(c));
        }
    }
    cJSON *ua = cJSON_AddArrayToObject(r, "units");
    for (int u = 0; u < p->n_units; u++) {
        const bs_sim_unit *un = &units[u];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", u);
        cJSON_AddNumberToObject(o, "peak_channel", un->peak_chan);
        cJSON_AddNumberToObject(o, "peak_amplitude_uv", un->peak_uv);
        cJSON_AddNumberToObject(o, "rate_hz", un->rate_hz);
        cJSON_AddNumberToObject(o, "n_spikes", (double)counts[u]);
        cJSON_AddNumberToObject(o, "refractory_ms", un->refractory_ms);
        cJSON_AddBoolToObject(o, "bursting", un->bursting);
        cJSON_AddNumberToObject(o, "footprint_d0_um", un->d0_um);
        cJSON_AddNumberToObject(o, "footprint_exponent", un->expo);
        cJSON_AddNumberToObject(o, "trough_sigma_ms", un->sig_l_ms);
        cJSON_AddNumberToObject(o, "repolarization_ms", un->rep_t_ms);
        cJSON_AddNumberToObject(o, "peak_trough_ratio", un->rep_ratio);
        cJSON_AddBoolToObject(o, "triphasic", un->pre_ratio > 0);
        cJSON_AddItemToArray(ua, o);
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "recording.json: out of memory");
    char path[4200];
    bs_status st = bs_path_join(path, sizeof path, dir, "recording.json");
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

bs_status bs_simulate(const bs_sim_params *p, const char *out_dir, bs_sim_summary *summary)
{
    BS_TRY(bs_sim_check_params(p));
    double t_start = omp_get_wtime();
    bs_status st = bs_mkdir_p(out_dir);
    if (st != BS_OK)
        return bs_error_context(BS_ERR_INPUT, "output folder");
    bs_probe probe;
    bs_sim_layout L;
    BS_TRY(bs_sim_layout_make(p->probe, &probe, &L));

    bs_sim_world w;
    memset(&w, 0, sizeof w);
    w.fs_hz = p->fs_hz;
    w.nt = (int)bs_seconds_to_samples(2.0e-3, p->fs_hz) + 1;
    w.nt_before = (int)llround(p->fs_hz / 1500.0);
    w.probe = &probe;
    w.layout = &L;
    int64_t n_samples = bs_seconds_to_samples(p->duration_s, p->fs_hz);
    int C = probe.n_chan;
    bs_sim_summary s;
    memset(&s, 0, sizeof s);
    s.n_chan = C;
    s.n_samples = n_samples;
    s.uv_per_bit = bs_sim_uv_per_bit(p->probe);
    s.nt = w.nt;
    s.nt_before = w.nt_before;

    bs_sim_unit *units = NULL;
    bs_sim_spike *sp = NULL;
    bs_sim_noise noise;
    memset(&noise, 0, sizeof noise);
    int64_t *gt_t = NULL, *counts = NULL;
    int *chan_dq = NULL;
    int32_t *gt_u = NULL;
    float *pos = NULL, *tmpl = NULL, *tbuf = NULL;
    int n_all = 0, n_hash = 0;
    int64_t n_sp = 0, cap = 0, step_bin = 0;
    bs_atomic_file frec = {0}, fsglx = {0};
    bs_sim_artifact *art = NULL;
    int rec_open = 0, sglx_open = 0;
    char sglx_dir[4200], path[4200];

    st = make_drift(p, n_samples, &w, &step_bin);
    if (st != BS_OK)
        goto done;
    if (p->adc_mux && L.mux_cycles > 0) {
        chan_dq = bs_mem_alloc("sim/probe", (size_t)C * sizeof *chan_dq);
        if (!chan_dq) {
            st = BS_ERR_MEMORY;
            goto done;
        }
        double *d = malloc((size_t)C * sizeof *d);
        if (!d) {
            st = BS_ERR_MEMORY;
            goto done;
        }
        for (int c = 0; c < C; c++) { /* delay in 1/8 samples, 0..7 (NP2's slot 15 of 16 rounds down to 7/8) */
            int dq = (int)lround(8.0 * L.mux_order[c] / L.mux_cycles);
            chan_dq[c] = dq > 7 ? 7 : dq;
            d[c] = (double)L.mux_order[c] / L.mux_cycles;
        }
        w.chan_dq = chan_dq;
        /* probe.json's contact_annotations.inter_sample_shift: the nominal delays (slot / cycles), what the
         * SpikeGLX and Open Ephys metadata of the same probe give, so every format sorts alike */
        st = bs_probe_set_adc_shift(&probe, d, "simulate");
        free(d);
        if (st != BS_OK)
            goto done;
    }

    /* units */
    double shank_len = L.y_max_um - L.y_min_um + 120.0;
    n_hash = (int)llround(p->hash_per_100um * shank_len / 100.0 * L.n_shanks);
    n_all = p->n_units + n_hash;
    units = bs_mem_calloc("sim/units", (size_t)n_all, sizeof *units);
    if (!units) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    for (int u = 0; u < n_all && st == BS_OK; u++) {
        int hash = u >= p->n_units;
        bs_sim_unit_draw(p, &w, hash, hash ? u - p->n_units : u, &units[u]);
        if (!hash && u % 2 == 1 && u < 2 * p->n_coupled)
            bs_sim_couple_place(&w, &units[u - 1], &units[u]);
        st = bs_sim_unit_build(&w, &units[u]);
    }
    if (st != BS_OK)
        goto done;

    /* spike trains */
    int64_t gt_lo = w.nt_before, gt_hi = n_samples - (w.nt - w.nt_before);
    int64_t leader0 = 0, leader1 = 0; /* the last even unit's train: sp[leader0, leader1) */
    for (int u = 0; u < n_all && st == BS_OK; u++) {
        int hash = u >= p->n_units;
        int64_t start = n_sp;
        st = bs_sim_unit_train(p, &w, &units[u], hash, hash ? u - p->n_units : u, u, hash ? 0 : gt_lo,
                               hash ? n_samples : gt_hi, &sp, &n_sp, &cap);
        if (u % 2 == 0)
            leader0 = start, leader1 = n_sp;
        else if (st == BS_OK && !hash && u < 2 * p->n_coupled)
            st = bs_sim_couple_train(p, &w, &units[u], u, u / 2, leader0, leader1, gt_lo, gt_hi, &sp, &n_sp, &cap);
    }
    if (st != BS_OK)
        goto done;
    if (n_sp > 0)
        qsort(sp, (size_t)n_sp, sizeof *sp, spike_cmp);

    /* ground truth arrays */
    for (int64_t i = 0; i < n_sp; i++)
        if (sp[i].unit < p->n_units)
            s.n_spikes++;
    s.n_hash_spikes = n_sp - s.n_spikes;
    gt_t = bs_mem_alloc("sim/gt", (size_t)(s.n_spikes ? s.n_spikes : 1) * sizeof *gt_t);
    gt_u = bs_mem_alloc("sim/gt", (size_t)(s.n_spikes ? s.n_spikes : 1) * sizeof *gt_u);
    counts = bs_mem_calloc("sim/gt", (size_t)p->n_units, sizeof *counts);
    pos = bs_mem_alloc("sim/gt", (size_t)p->n_units * 3 * sizeof *pos);
    tmpl = bs_mem_calloc("sim/gt", (size_t)p->n_units * (size_t)w.nt * (size_t)C, sizeof *tmpl);
    tbuf = bs_mem_alloc("sim/gt", (size_t)w.nt * (size_t)C * sizeof *tbuf);
    if (!gt_t || !gt_u || !counts || !pos || !tmpl || !tbuf) {
        st = BS_ERR_MEMORY;
        goto done;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n_sp; i++)
        if (sp[i].unit < p->n_units) {
            gt_t[k] = sp[i].t;
            gt_u[k] = sp[i].unit;
            counts[sp[i].unit]++;
            k++;
        }
    /* collisions: GT pairs within 1 ms whose peak channels are within 100 µm on one shank */
    int64_t win = (int64_t)floor(p->fs_hz * 1e-3);
    for (int64_t i = 0; i < s.n_spikes; i++) {
        int ci = units[gt_u[i]].peak_chan;
        for (int64_t j = i + 1; j < s.n_spikes && gt_t[j] - gt_t[i] <= win; j++) {
            if (gt_u[j] == gt_u[i])
                continue;
            int cj = units[gt_u[j]].peak_chan;
            double dx = probe.x_um[ci] - probe.x_um[cj], dy = probe.y_um[ci] - probe.y_um[cj];
            if (probe.shank[ci] == probe.shank[cj] && dx * dx + dy * dy < 100.0 * 100.0)
                s.n_collisions++;
        }
    }
    for (int u = 0; u < p->n_units; u++) {
        pos[3 * u] = (float)units[u].x;
        pos[3 * u + 1] = (float)(units[u].y + bs_sim_drift_at(&w, 0, units[u].y));
        pos[3 * u + 2] = (float)units[u].z;
        memset(tbuf, 0, (size_t)w.nt * (size_t)C * sizeof *tbuf);
        bs_sim_spike one = {.t = w.nt_before, .unit = u, .phase = (BS_SIM_NPHASE - 1) / 2, .scale = 1.0f};
        bs_sim_render_spike(&w, &units[u], &one, tbuf, w.nt, 0, w.nt);
        float *dst = tmpl + (size_t)u * (size_t)w.nt * (size_t)C;
        for (int j = 0; j < w.nt; j++)
            for (int c = 0; c < C; c++)
                dst[(size_t)j * C + c] = tbuf[(size_t)c * w.nt + j];
    }

    /* the recording */
    st = bs_sim_noise_init(&noise, p, &probe, chan_dq);
    if (st != BS_OK)
        goto done;
    if ((st = bs_path_join(path, sizeof path, out_dir, "recording.bin")) != BS_OK)
        goto done;
    if ((st = bs_atomic_open(&frec, path)) != BS_OK)
        goto done;
    rec_open = 1;
    char sglx_bin[4300];
    if (p->spikeglx) {
        if ((st = bs_path_join(sglx_dir, sizeof sglx_dir, out_dir, "spikeglx")) != BS_OK)
            goto done;
        if ((st = bs_mkdir_p(sglx_dir)) != BS_OK)
            goto done;
        if ((st = bs_path_join(sglx_bin, sizeof sglx_bin, sglx_dir, "sim_g0_t0.imec0.ap.bin")) != BS_OK)
            goto done;
        if ((st = bs_atomic_open(&fsglx, sglx_bin)) != BS_OK)
            goto done;
        sglx_open = 1;
    }
    if ((st = plant_bad_channels(p, &probe, &w)) != BS_OK)
        goto done;
    if ((st = bs_sim_artifacts_draw(p, &probe, n_samples, &art, &s.n_artifacts)) != BS_OK)
        goto done;
    render_ctx rc = {p, &w, units, n_all, sp, n_sp, &noise, n_samples, s.uv_per_bit, fileno(frec.fp),
                     p->spikeglx ? fileno(fsglx.fp) : -1, art, s.n_artifacts};
    bs_log_info("simulate: %s, %d channels, %.1f s, %d units (%lld spikes), %d hash units, drift %s",
                bs_sim_probe_name(p->probe), C, (double)n_samples / p->fs_hz, p->n_units, (long long)s.n_spikes,
                n_hash, bs_sim_drift_name(p->drift));
    st = render(&rc);
    if (st != BS_OK)
        goto done;
    rec_open = 0;
    if ((st = bs_atomic_commit(&frec)) != BS_OK)
        goto done;
    if (p->spikeglx) {
        sglx_open = 0;
        if ((st = bs_atomic_commit(&fsglx)) != BS_OK)
            goto done;
        char meta[4300];
        if ((st = bs_path_join(meta, sizeof meta, sglx_dir, "sim_g0_t0.imec0.ap.meta")) != BS_OK)
            goto done;
        if ((st = bs_sim_write_meta(meta, "sim_g0_t0.imec0.ap.bin", &L, &probe, p->fs_hz, n_samples, p->seed)) !=
            BS_OK)
            goto done;
    }
    if (p->openephys &&
        (st = bs_sim_write_openephys(out_dir, &L, &probe, p->fs_hz, n_samples, s.uv_per_bit)) != BS_OK)
        goto done;

    /* ground-truth files */
    int64_t shp[3];
    shp[0] = s.n_spikes;
    if ((st = save_npy(out_dir, "gt_spike_times.npy", BS_NPY_I64, 1, shp, gt_t)) != BS_OK)
        goto done;
    if ((st = save_npy(out_dir, "gt_spike_units.npy", BS_NPY_I32, 1, shp, gt_u)) != BS_OK)
        goto done;
    shp[0] = p->n_units;
    shp[1] = 3;
    if ((st = save_npy(out_dir, "gt_unit_positions.npy", BS_NPY_F32, 2, shp, pos)) != BS_OK)
        goto done;
    shp[1] = w.nt;
    shp[2] = C;
    if ((st = save_npy(out_dir, "gt_templates.npy", BS_NPY_F32, 3, shp, tmpl)) != BS_OK)
        goto done;
    shp[0] = w.n_bins;
    shp[1] = w.n_blocks;
    if ((st = save_npy(out_dir, "gt_drift_um.npy", BS_NPY_F32, 2, shp, w.drift)) != BS_OK)
        goto done;
    if (p->artifact_rate_hz > 0 && (st = bs_sim_artifacts_write(out_dir, art, s.n_artifacts)) != BS_OK)
        goto done;
    if ((st = bs_path_join(path, sizeof path, out_dir, "probe.json")) != BS_OK)
        goto done;
    if ((st = bs_probe_write_json(&probe, path)) != BS_OK)
        goto done;
    st = write_recording_json(out_dir, p, &w, units, &s, n_hash,
                              (double)(step_bin * w.bin_samples) / p->fs_hz, counts);
    if (st != BS_OK)
        goto done;
    bs_log_info("simulate: wrote %s in %.1f s (%lld GT spikes, %lld collisions within 1 ms and 100 µm)", out_dir,
                omp_get_wtime() - t_start, (long long)s.n_spikes, (long long)s.n_collisions);
    if (summary)
        *summary = s;

done:
    if (rec_open)
        bs_atomic_abort(&frec);
    if (sglx_open)
        bs_atomic_abort(&fsglx);
    if (st == BS_ERR_MEMORY && strstr(bs_last_error(), "sim/") == NULL)
        bs_error(BS_ERR_MEMORY, "simulate: out of memory");
    if (units)
        for (int u = 0; u < n_all; u++)
            bs_sim_unit_free(&units[u]);
    bs_mem_free(units);
    bs_mem_free(art);
    bs_mem_free(sp);
    bs_mem_free(gt_t);
    bs_mem_free(gt_u);
    bs_mem_free(counts);
    bs_mem_free(pos);
    bs_mem_free(tmpl);
    bs_mem_free(tbuf);
    bs_mem_free(w.drift);
    bs_mem_free(w.block_depth);
    bs_mem_free(chan_dq);
    bs_mem_free(w.chan_bad);
    bs_sim_noise_free(&noise);
    bs_sim_layout_free(&L);
    bs_probe_free(&probe);
    return st;
}
