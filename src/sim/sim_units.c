/*
 * sim_units.c - simulated units: parameters, waveforms, footprints, spike
 * trains and the rendering of one spike.
 *
 * Waveform. Each unit has its own raw shape in time (ms) around the trough:
 *
 *   base(tau) = -exp(-tau^2 / 2 s^2)                     s = sig_l before, sig_r after the trough
 *               + rep_ratio exp(-(tau - rep_t)^2 / 2 rep_sig^2)   repolarization peak
 *               + pre_ratio exp(-(tau + pre_t)^2 / 2 pre_sig^2)   pre-trough peak (triphasic units)
 *
 * drawn from a narrow (fast-spiking) or a broad class, so units differ in
 * trough width, peak/trough ratio, repolarization time and phase count, not
 * only in size. On a contact at 3-D distance d the shape is stretched and
 * delayed: g(tau; d) = base((tau - delay(d)) / widen(d)) with
 * widen = 1 + widen_per_100um (d - d_ref) / 100 (at least 0.85) and
 * delay = delay_ms_per_100um (d - d_ref) / 100, d_ref being the distance to
 * the nearest contact at t = 0. The shape is shifted so that its trough at
 * d_ref falls exactly on the spike time and scaled so that trough is -1.
 *
 * Noise units (--noise-units): the last units of the ground truth are
 * artifact-like instead: a ringing shape -sin(2 pi f (tau - t0))
 * exp(-(tau - t0) / decay) from t0 = -1 / (4 f) on (f 2-3.5 kHz, decay
 * 0.5-0.9 ms: several troughs), the same at every distance, and an almost
 * flat footprint (d0 400-600 µm, p 0.3-0.5, cut at 300 µm), 80-200 µV.
 * Their parameters are drawn after the neuron's, so the other units do not
 * change.
 *
 * Placement. x within the shank's contact span plus 25 µm, y within the
 * depth span plus 20 µm, z (distance from the probe plane) 10-80 µm, closer
 * for larger units (up to 10-30 µm for 400 µV). Peak amplitudes are
 * log-uniform in 35-400 µV, so some units sit near the noise.
 *
 * Footprint. amplitude(d) = amp_norm * f(d), f(d) = (1 + (d / d0)^2)^-p with
 * per-unit d0 and p, tapered by a half cosine to exactly 0 between 0.75 d_cut
 * and d_cut, where d_cut is where the amplitude falls below 0.3 µV (0.2 µV
 * for hash units) or 300 µm (200 µm). amp_norm makes the trough on the
 * nearest contact at t = 0 equal to peak_uv.
 *
 * Shape table. For speed the shape is tabulated once per unit on a distance
 * grid (rows every BS_SIM_DIST_STEP_UM, one row exactly at d_ref, linear
 * interpolation between rows) and at 9
 * sub-sample phases (spike trough at t + (k - 4) / 8 samples), over a window
 * of nt samples with the trough at nt_before; the first 3 and last 8 samples
 * are tapered by half cosines so no waveform ends in a step.
 *
 * Firing. Poisson events with an absolute refractory period (dead time):
 * ISI = refractory + Exp(mean 1/rate - refractory). Bursting units start a
 * burst of 2-5 spikes at an event with probability burst_prob; burst ISIs are
 * 3-8 ms and the amplitude decays by 0.8 per spike within the burst. Every
 * spike has an amplitude jitter of 7 % rms (clipped to +-20 %). Times are
 * drawn in continuous time; the sample of the trough is the nearest sample
 * and the remainder selects the sub-sample phase.
 *
 * ADC multiplexing. On Neuropixels a channel sampled dq/8 samples after the
 * nominal time sees each spike dq/8 samples earlier in its sample index; the
 * spike's time reference is the sample of the trough on the unit's peak
 * channel (at t = 0), so channels sampled in other slots are shifted by the
 * difference of delays (whole samples plus a sub-sample phase).
 *
 * Drift. The drift table holds the apparent depth shift of the tissue
 * (units) relative to the probe per time bin and depth block; a unit at depth
 * y moves by the shift interpolated linearly between block centres (clamped
 * outside). Every spike is rendered from its unit's position in its bin.
 */
#include <math.h>
#include <string.h>

#include "../mem/mem.h"
#include "sim_internal.h"

static double base_shape(const bs_sim_unit *u, double tau)
{
    if (u->is_noise) { /* ringing: first trough at tau = 0 */
        double t = tau + 0.25 / u->ring_khz;
        return t < 0 ? 0.0 : -sin(2 * M_PI * u->ring_khz * t) * exp(-t / u->ring_decay_ms);
    }
    double s = tau < 0 ? u->sig_l_ms : u->sig_r_ms;
    double v = -exp(-0.5 * tau * tau / (s * s));
    double a = (tau - u->rep_t_ms) / u->rep_sig_ms;
    v += u->rep_ratio * exp(-0.5 * a * a);
    if (u->pre_ratio > 0) {
        double b = (tau + u->pre_t_ms) / u->pre_sig_ms;
        v += u->pre_ratio * exp(-0.5 * b * b);
    }
    return v;
}

void bs_sim_unit_draw(const bs_sim_params *p, const bs_sim_world *w, int hash, int u, bs_sim_unit *unit)
{
    memset(unit, 0, sizeof *unit);
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, hash ? BS_SIM_STREAM_HASH : BS_SIM_STREAM_UNIT, (uint64_t)u);
    const bs_sim_layout *L = w->layout;
    unit->is_hash = hash;
    unit->shank = L->n_shanks > 1 ? (int)(bs_sim_rng_uniform(&r) * L->n_shanks) : 0;
    double margin_x = hash ? 80.0 : 25.0, margin_y = hash ? 60.0 : 20.0;
    double xlo = L->x_min_um - margin_x, xhi = L->x_max_um + margin_x;
    if (L->x_max_um - L->x_min_um < 1.0) { /* single column: units on both sides */
        xlo = L->x_min_um - 40.0;
        xhi = L->x_max_um + 40.0;
    }
    unit->x = unit->shank * L->shank_pitch_um + bs_sim_rng_range(&r, xlo, xhi);
    unit->y = bs_sim_rng_range(&r, L->y_min_um - margin_y, L->y_max_um + margin_y);
    unit->peak_uv = hash ? exp(bs_sim_rng_range(&r, log(5.0), log(20.0)))
                         : exp(bs_sim_rng_range(&r, log(35.0), log(400.0)));
    /* large units sit close to the probe: z in 10..(80 - 50 la) µm, la = log-amplitude fraction */
    double la = (log(unit->peak_uv) - log(35.0)) / (log(400.0) - log(35.0));
    unit->z = hash ? bs_sim_rng_range(&r, 60.0, 180.0) : bs_sim_rng_range(&r, 10.0, 80.0 - 50.0 * la);
    unit->d0_um = hash ? bs_sim_rng_range(&r, 40.0, 80.0) : bs_sim_rng_range(&r, 20.0, 40.0);
    unit->expo = hash ? bs_sim_rng_range(&r, 1.0, 1.3) : bs_sim_rng_range(&r, 1.0, 1.5);
    int narrow = bs_sim_rng_uniform(&r) < 0.3;
    if (narrow) {
        unit->sig_l_ms = bs_sim_rng_range(&r, 0.06, 0.09);
        unit->sig_r_ms = bs_sim_rng_range(&r, 0.08, 0.13);
        unit->rep_ratio = bs_sim_rng_range(&r, 0.35, 0.7);
        unit->rep_t_ms = bs_sim_rng_range(&r, 0.25, 0.4);
        unit->rep_sig_ms = bs_sim_rng_range(&r, 0.10, 0.18);
    } else {
        unit->sig_l_ms = bs_sim_rng_range(&r, 0.08, 0.12);
        unit->sig_r_ms = bs_sim_rng_range(&r, 0.12, 0.22);
        unit->rep_ratio = bs_sim_rng_range(&r, 0.12, 0.4);
        unit->rep_t_ms = bs_sim_rng_range(&r, 0.45, 0.8);
        unit->rep_sig_ms = bs_sim_rng_range(&r, 0.2, 0.35);
    }
    if (bs_sim_rng_uniform(&r) < 0.35) {
        unit->pre_ratio = bs_sim_rng_range(&r, 0.08, 0.25);
        unit->pre_t_ms = bs_sim_rng_range(&r, 0.2, 0.35);
        unit->pre_sig_ms = bs_sim_rng_range(&r, 0.06, 0.1);
    }
    unit->widen_per_100um = bs_sim_rng_range(&r, 0.15, 0.35);
    unit->delay_ms_per_100um = bs_sim_rng_range(&r, 0.03, 0.08);
    if (hash) {
        unit->rate_hz = bs_sim_rng_range(&r, 2.0, 12.0);
    } else {
        double lr = log(3.0) + 1.0 * bs_sim_rng_normal(&r);
        unit->rate_hz = fmin(20.0, fmax(0.5, exp(lr)));
    }
    unit->refractory_ms = bs_sim_rng_range(&r, 1.6, 2.5);
    unit->bursting = !hash && bs_sim_rng_uniform(&r) < 0.2;
    unit->burst_prob = unit->bursting ? bs_sim_rng_range(&r, 0.1, 0.3) : 0.0;
    if (!hash && u >= p->n_units - p->n_noise_units) { /* artifact-like: drawn after, the others unchanged */
        unit->is_noise = 1;
        unit->ring_khz = bs_sim_rng_range(&r, 2.0, 3.5);
        unit->ring_decay_ms = bs_sim_rng_range(&r, 0.5, 0.9);
        unit->peak_uv = bs_sim_rng_range(&r, 80.0, 200.0);
        unit->z = bs_sim_rng_range(&r, 10.0, 30.0);
        unit->d0_um = bs_sim_rng_range(&r, 400.0, 600.0);
        unit->expo = bs_sim_rng_range(&r, 0.3, 0.5);
        unit->widen_per_100um = 0.0;
        unit->delay_ms_per_100um = 0.0;
        unit->bursting = 0;
        unit->burst_prob = 0.0;
    }
}

static double raw_footprint(const bs_sim_unit *u, double d)
{
    double q = d / u->d0_um;
    return pow(1.0 + q * q, -u->expo);
}

double bs_sim_footprint(const bs_sim_unit *u, double d)
{
    if (d >= u->d_cut_um)
        return 0.0;
    double f = raw_footprint(u, d);
    double start = 0.75 * u->d_cut_um;
    if (d > start)
        f *= 0.5 * (1.0 + cos(M_PI * (d - start) / (u->d_cut_um - start)));
    return f;
}

double bs_sim_drift_at(const bs_sim_world *w, int64_t bin, double y)
{
    if (bin < 0)
        bin = 0;
    if (bin >= w->n_bins)
        bin = w->n_bins - 1;
    const float *row = w->drift + bin * w->n_blocks;
    const double *bd = w->block_depth;
    int nb = w->n_blocks;
    if (nb == 1 || y <= bd[0])
        return row[0];
    if (y >= bd[nb - 1])
        return row[nb - 1];
    int k = 0;
    while (k < nb - 2 && y > bd[k + 1])
        k++;
    double a = (y - bd[k]) / (bd[k + 1] - bd[k]);
    return (1.0 - a) * row[k] + a * row[k + 1];
}

bs_status bs_sim_unit_build(const bs_sim_world *w, bs_sim_unit *u)
{
    const bs_probe *pr = w->probe;
    double y0 = u->y + bs_sim_drift_at(w, 0, u->y);
    /* nearest contact at t = 0 */
    double best = 1e300;
    for (int c = 0; c < pr->n_chan; c++) {
        double dx = pr->x_um[c] - u->x, dy = pr->y_um[c] - y0;
        double d2 = dx * dx + dy * dy;
        if (d2 < best) {
            best = d2;
            u->peak_chan = c;
        }
    }
    u->d_ref_um = sqrt(best + u->z * u->z);
    u->dq_peak = w->chan_dq ? w->chan_dq[u->peak_chan] : 0;
    /* cut-off distance */
    double thr = u->is_hash ? 0.2 : 0.3, cap = u->is_hash ? 200.0 : 300.0;
    double fref = raw_footprint(u, u->d_ref_um);
    double dc = u->d_ref_um;
    while (dc < cap && u->peak_uv * raw_footprint(u, dc) / fref > thr)
        dc += 5.0;
    if (dc < (u->d_ref_um + 1.0) / 0.75)
        dc = (u->d_ref_um + 1.0) / 0.75;
    u->d_cut_um = dc;
    u->amp_norm = u->peak_uv / fref;
    /* trough of the raw shape (at d_ref the shape is base itself) */
    double tbest = 0, vbest = 1e300;
    for (double t = -0.3; t <= 0.3; t += 0.0005) {
        double v = base_shape(u, t);
        if (v < vbest) {
            vbest = v;
            tbest = t;
        }
    }
    double h = 0.0005, vm = base_shape(u, tbest - h), vp = base_shape(u, tbest + h);
    double den = vm - 2 * vbest + vp;
    if (den > 0)
        tbest += 0.5 * h * (vm - vp) / den;
    u->tau_star_ms = tbest;
    double gmin = -base_shape(u, tbest);
    /* candidate channels */
    int *cand = bs_mem_alloc("sim/units", (size_t)pr->n_chan * sizeof *cand);
    if (!cand)
        return BS_ERR_MEMORY;
    int nc = 0;
    for (int c = 0; c < pr->n_chan; c++) {
        double dx = pr->x_um[c] - u->x, dy = fabs(pr->y_um[c] - u->y) - w->max_abs_drift;
        if (dy < 0)
            dy = 0;
        if (sqrt(dx * dx + dy * dy + u->z * u->z) < u->d_cut_um)
            cand[nc++] = c;
    }
    u->cand = cand;
    u->n_cand = nc;
    /* shape table */
    u->d_lo_um = u->d_ref_um - floor(u->d_ref_um / BS_SIM_DIST_STEP_UM) * BS_SIM_DIST_STEP_UM;
    u->n_dist = (int)floor((u->d_cut_um - u->d_lo_um) / BS_SIM_DIST_STEP_UM) + 2;
    size_t nvals = (size_t)u->n_dist * BS_SIM_NPHASE * (size_t)w->nt;
    u->shape = bs_mem_alloc("sim/shapes", nvals * sizeof(float));
    if (!u->shape)
        return BS_ERR_MEMORY;
    int nt = w->nt, nb = w->nt_before;
    for (int r = 0; r < u->n_dist; r++) {
        double d = u->d_lo_um + r * BS_SIM_DIST_STEP_UM;
        double widen = fmax(0.85, 1.0 + u->widen_per_100um * (d - u->d_ref_um) / 100.0);
        double delay = u->delay_ms_per_100um * (d - u->d_ref_um) / 100.0;
        for (int ph = 0; ph < BS_SIM_NPHASE; ph++) {
            double off = (ph - (BS_SIM_NPHASE - 1) / 2) / 8.0; /* samples */
            float *row = u->shape + ((size_t)r * BS_SIM_NPHASE + ph) * (size_t)nt;
            for (int j = 0; j < nt; j++) {
                double tau = (j - nb - off) / w->fs_hz * 1000.0 + u->tau_star_ms;
                double v = base_shape(u, (tau - delay) / widen) / gmin;
                double taper = 1.0;
                if (j < 3)
                    taper = 0.5 * (1.0 - cos(M_PI * (j + 0.5) / 3.0));
                else if (j >= nt - 8)
                    taper = 0.5 * (1.0 - cos(M_PI * (nt - j - 0.5) / 8.0));
                row[j] = (float)(v * taper);
            }
        }
    }
    return BS_OK;
}

void bs_sim_unit_free(bs_sim_unit *u)
{
    bs_mem_free(u->shape);
    bs_mem_free(u->cand);
    u->shape = NULL;
    u->cand = NULL;
}

static bs_status push(bs_sim_spike **sp, int64_t *n, int64_t *cap, bs_sim_spike s)
{
    if (*n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 4096;
        bs_sim_spike *q = bs_mem_realloc(*sp, "sim/spikes", (size_t)nc * sizeof *q);
        if (!q)
            return BS_ERR_MEMORY;
        *sp = q;
        *cap = nc;
    }
    (*sp)[(*n)++] = s;
    return BS_OK;
}

/* A spike whose trough falls at tc samples (continuous): the nearest sample and the sub-sample phase,
 * appended when the sample lies in [t_lo, t_hi). */
static bs_status emit_at(double tc, float scale, int32_t idx, int64_t t_lo, int64_t t_hi, bs_sim_spike **sp,
                         int64_t *n, int64_t *cap)
{
    double ti = floor(tc + 0.5);
    int64_t t = (int64_t)ti;
    if (t < t_lo || t >= t_hi)
        return BS_OK;
    int ph = (int)floor((tc - ti) * 8.0 + 0.5) + (BS_SIM_NPHASE - 1) / 2;
    if (ph < 0)
        ph = 0;
    if (ph >= BS_SIM_NPHASE)
        ph = BS_SIM_NPHASE - 1;
    return push(sp, n, cap, (bs_sim_spike){.t = t, .unit = idx, .phase = (int8_t)ph, .scale = scale});
}

/* The same at t_s seconds. */
static bs_status emit(double t_s, double fs, float scale, int32_t idx, int64_t t_lo, int64_t t_hi, bs_sim_spike **sp,
                      int64_t *n, int64_t *cap)
{
    return emit_at(t_s * fs, scale, idx, t_lo, t_hi, sp, n, cap);
}

/* A spike's amplitude jitter: 7 % rms, clipped to +-20 %. */
static float amp_jitter(bs_sim_rng *r)
{
    return (float)fmin(0.2, fmax(-0.2, 0.07 * bs_sim_rng_normal(r)));
}

bs_status bs_sim_unit_train(const bs_sim_params *p, const bs_sim_world *w, const bs_sim_unit *u, int hash, int ui,
                            int32_t idx, int64_t t_lo, int64_t t_hi, bs_sim_spike **sp, int64_t *n, int64_t *cap)
{
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, hash ? BS_SIM_STREAM_HASH_TRAIN : BS_SIM_STREAM_TRAIN, (uint64_t)ui);
    double fs = w->fs_hz;
    double refr = u->refractory_ms * 1e-3;
    double spikes_per_event = 1.0 + u->burst_prob * 2.5; /* bursts of 2..5 spikes, mean 3.5 */
    double mean_isi = spikes_per_event / u->rate_hz;
    double extra = mean_isi - refr;
    if (extra < refr)
        extra = refr;
    double t_end = (double)t_hi / fs;
    double t = (double)t_lo / fs + extra * bs_sim_rng_exp(&r);
    while (t < t_end) {
        BS_TRY(emit(t, fs, 1.0f + amp_jitter(&r), idx, t_lo, t_hi, sp, n, cap));
        if (u->bursting && bs_sim_rng_uniform(&r) < u->burst_prob) {
            int extra_spikes = 1 + (int)(bs_sim_rng_uniform(&r) * 4.0); /* 1..4 more */
            double decay = 1.0;
            for (int k = 0; k < extra_spikes; k++) {
                t += bs_sim_rng_range(&r, 3e-3, 8e-3);
                decay *= 0.8;
                BS_TRY(emit(t, fs, (float)decay * (1.0f + amp_jitter(&r)), idx, t_lo, t_hi, sp, n, cap));
            }
        }
        t += refr + extra * bs_sim_rng_exp(&r);
    }
    return BS_OK;
}

void bs_sim_couple_place(const bs_sim_world *w, const bs_sim_unit *leader, bs_sim_unit *follower)
{
    const bs_sim_layout *L = w->layout;
    follower->shank = leader->shank;
    follower->x = leader->x;
    follower->y = leader->y + BS_SIM_COUPLE_DY_UM;
    if (follower->y > L->y_max_um)
        follower->y = leader->y - BS_SIM_COUPLE_DY_UM;
}

bs_status bs_sim_couple_train(const bs_sim_params *p, const bs_sim_world *w, const bs_sim_unit *follower,
                              int32_t follower_index, int pair, int64_t a0, int64_t b0, int64_t t_lo, int64_t t_hi,
                              bs_sim_spike **sp, int64_t *n, int64_t *cap)
{
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, BS_SIM_STREAM_COUPLE, (uint64_t)pair);
    const double fs = w->fs_hz;
    const int64_t refr = (int64_t)ceil(follower->refractory_ms * 1e-3 * fs);
    const int64_t n_own = *n - b0;
    /* the added spikes, ascending as the leader's are, in a list of their own */
    bs_sim_spike *add = NULL;
    int64_t n_add = 0, cap_add = 0;
    bs_status st = BS_OK;
    for (int64_t i = a0; i < b0 && st == BS_OK; i++) {
        double u = bs_sim_rng_uniform(&r), jit = bs_sim_rng_range(&r, -1.0, 1.0);
        if (u >= BS_SIM_COUPLE_PROB)
            continue;
        double tc = (double)(*sp)[i].t + p->coupled_lag_ms * 1e-3 * fs + jit;
        st = emit_at(tc, 1.0f + amp_jitter(&r), follower_index, t_lo, t_hi, &add, &n_add, &cap_add);
    }
    if (st != BS_OK) {
        bs_mem_free(add);
        return st;
    }
    /* drop the follower's own spikes within refr of an added one (both lists ascending) */
    int64_t keep = b0, j = 0;
    for (int64_t i = b0; i < b0 + n_own; i++) {
        int64_t t = (*sp)[i].t;
        while (j < n_add && add[j].t < t - refr)
            j++;
        if (j < n_add && add[j].t <= t + refr)
            continue;
        (*sp)[keep++] = (*sp)[i];
    }
    *n = keep;
    for (int64_t i = 0; i < n_add && st == BS_OK; i++)
        st = push(sp, n, cap, add[i]);
    bs_mem_free(add);
    return st;
}

void bs_sim_render_spike(const bs_sim_world *w, const bs_sim_unit *u, const bs_sim_spike *sp, float *buf,
                         int64_t stride, int64_t t0, int64_t t1)
{
    const bs_probe *pr = w->probe;
    int nt = w->nt;
    int64_t bin = w->bin_samples > 0 ? sp->t / w->bin_samples : 0;
    double y = u->y + bs_sim_drift_at(w, bin, u->y);
    double z2 = u->z * u->z;
    int half = (BS_SIM_NPHASE - 1) / 2;
    /* trough offset in 1/8 samples on a channel without ADC delay */
    int e0 = sp->phase - half + u->dq_peak;
    for (int k = 0; k < u->n_cand; k++) {
        int c = u->cand[k];
        /* a channel sampled dq/8 samples late sees the trough dq/8 samples earlier in its sample index:
         * split the offset into whole samples (sh) and a phase within +-1/2 sample */
        int e = e0 - (w->chan_dq ? w->chan_dq[c] : 0);
        int sh = e + half >= 0 ? (e + half) / 8 : -((-(e + half) + 7) / 8);
        int ph = e - 8 * sh + half;
        int64_t ts = sp->t - w->nt_before + sh;
        int j0 = ts < t0 ? (int)(t0 - ts) : 0;
        int j1 = ts + nt > t1 ? (int)(t1 - ts) : nt;
        if (j0 >= j1)
            continue;
        double dx = pr->x_um[c] - u->x, dy = pr->y_um[c] - y;
        double d = sqrt(dx * dx + dy * dy + z2);
        if (d >= u->d_cut_um)
            continue;
        float a = (float)(sp->scale * u->amp_norm * bs_sim_footprint(u, d));
        double rr = (d - u->d_lo_um) / BS_SIM_DIST_STEP_UM;
        if (rr < 0)
            rr = 0;
        int r0 = (int)rr;
        if (r0 > u->n_dist - 2)
            r0 = u->n_dist - 2;
        float fr = (float)(rr - r0);
        const float *s0 = u->shape + ((size_t)r0 * BS_SIM_NPHASE + (size_t)ph) * (size_t)nt;
        const float *s1 = s0 + (size_t)BS_SIM_NPHASE * (size_t)nt;
        float *out = buf + (int64_t)c * stride + (ts - t0);
        for (int j = j0; j < j1; j++)
            out[j] += a * (s0[j] + fr * (s1[j] - s0[j]));
    }
}
