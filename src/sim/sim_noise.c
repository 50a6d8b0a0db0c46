/*
 * sim_noise.c - background noise: band-limited, spatially correlated, and
 * reproducible sample by sample.
 *
 * Per channel c the noise is
 *
 *   n_c(t) = s_ind    * F[e_c](t)                          independent part
 *          + s_local  * sum_k w_ck F[l_k](t)                spatially smooth part
 *          + s_common * F[m_shank(c)](t)                    common to the shank
 *          + sum_{j<3} lfp_w[j][c] * A_lfp sin(2 pi f_j t + phi_j)   LFP-like wave
 *
 * where e_c, l_k, m_s are white sequences from the counter-based generator
 * (value at sample t = hash(key of the source, t)), F is a 15-tap
 * Hann-windowed-sinc low-pass at 5 kHz normalised to unit output variance, so
 * each part is band-limited noise with exactly the requested rms. The common
 * source is sampled at each channel's ADC time: a channel sampled d/8 samples
 * late gets it through the low-pass delayed by d/8 (the independent and
 * smooth parts are not delayed; the LFP is too slow to matter). The smooth
 * sources l_k sit every 40 µm along each shank; a channel's weights are
 * Gaussian in depth (sigma 50 µm, cut at 3 sigma) normalised so that the sum
 * of squares is 1; the correlation of this part between two channels
 * dy apart is about exp(-dy^2 / (4 sigma^2)), decaying with distance. The
 * variance split is 64 % independent, 32 % smooth, 4 % common, so
 * sqrt(s_ind^2 + s_local^2 + s_common^2) = noise_uv. The LFP (1-12 Hz, a
 * slow spatial cosine along the probe) lies far below the 300 Hz high-pass of
 * any sorter.
 *
 * Because each output sample is a pure function of the seed and the absolute
 * sample index, a block computes its noise (with a half-filter margin of
 * white noise on both sides) independently of every other block.
 */
#include <math.h>
#include <string.h>

#include "../mem/mem.h"
#include "sim_internal.h"

#define HALF_TAPS 7 /* filtered() writes the 15 taps out */
#define LOCAL_PITCH_UM 40.0
#define LOCAL_SIGMA_UM 50.0

static double lowpass_tap(double x, double fc)
{
    if (fabs(x) >= HALF_TAPS + 1)
        return 0.0;
    double a = 2.0 * fc * x;
    double sinc = fabs(a) < 1e-12 ? 1.0 : sin(M_PI * a) / (M_PI * a);
    return 2.0 * fc * sinc * 0.5 * (1.0 + cos(M_PI * x / (HALF_TAPS + 1)));
}

bs_status bs_sim_noise_init(bs_sim_noise *nz, const bs_sim_params *p, const bs_probe *pr, const int *chan_dq)
{
    memset(nz, 0, sizeof *nz);
    int C = pr->n_chan;
    nz->n_chan = C;
    nz->seed = p->seed;
    nz->half_taps = HALF_TAPS;
    nz->sigma_ind_uv = (float)(p->noise_uv * sqrt(0.64));
    nz->sigma_local_uv = (float)(p->noise_uv * sqrt(0.32));
    nz->sigma_common_uv = (float)(p->noise_uv * sqrt(0.04));
    nz->n_common = pr->n_shanks;
    nz->chan_shank = pr->shank;
    nz->lfp_uv = p->lfp_uv;
    int ntaps = 2 * HALF_TAPS + 1;
    nz->chan_dq = chan_dq;
    nz->taps = bs_mem_alloc("sim/noise", (size_t)ntaps * sizeof(float));
    nz->taps_delayed = bs_mem_alloc("sim/noise", (size_t)8 * (size_t)ntaps * sizeof(float));
    if (!nz->taps || !nz->taps_delayed) {
        bs_sim_noise_free(nz);
        return BS_ERR_MEMORY;
    }
    double fc = 5000.0 / p->fs_hz, e = 0;
    for (int k = -HALF_TAPS; k <= HALF_TAPS; k++)
        e += lowpass_tap(k, fc) * lowpass_tap(k, fc);
    for (int k = -HALF_TAPS; k <= HALF_TAPS; k++)
        nz->taps[k + HALF_TAPS] = (float)(lowpass_tap(k, fc) / sqrt(e));
    /* a channel sampled d/8 samples late sees s(t + d/8) = sum_k w[t + k] h(d/8 - k) */
    for (int d = 0; d < 8; d++)
        for (int k = -HALF_TAPS; k <= HALF_TAPS; k++)
            nz->taps_delayed[d * ntaps + k + HALF_TAPS] = (float)(lowpass_tap(d / 8.0 - k, fc) / sqrt(e));

    /* smooth sources along each shank */
    double ymin = pr->y_um[0], ymax = pr->y_um[0];
    for (int c = 1; c < C; c++) {
        ymin = fmin(ymin, pr->y_um[c]);
        ymax = fmax(ymax, pr->y_um[c]);
    }
    double y_first = ymin - 2.0 * LOCAL_PITCH_UM;
    int per_shank = (int)floor((ymax - ymin + 4.0 * LOCAL_PITCH_UM) / LOCAL_PITCH_UM) + 1;
    nz->n_local = per_shank * pr->n_shanks;
    int max_per_chan = (int)(6.0 * LOCAL_SIGMA_UM / LOCAL_PITCH_UM) + 2;
    nz->local_start = bs_mem_alloc("sim/noise", (size_t)(C + 1) * sizeof(int));
    nz->local_src = bs_mem_alloc("sim/noise", (size_t)C * (size_t)max_per_chan * sizeof(int));
    nz->local_w = bs_mem_alloc("sim/noise", (size_t)C * (size_t)max_per_chan * sizeof(float));
    nz->lfp_w = bs_mem_alloc("sim/noise", (size_t)3 * (size_t)C * sizeof(float));
    if (!nz->local_start || !nz->local_src || !nz->local_w || !nz->lfp_w) {
        bs_sim_noise_free(nz);
        return BS_ERR_MEMORY;
    }
    int nnz = 0;
    for (int c = 0; c < C; c++) {
        nz->local_start[c] = nnz;
        double ss = 0;
        int first = nnz;
        for (int k = 0; k < per_shank; k++) {
            double dy = pr->y_um[c] - (y_first + k * LOCAL_PITCH_UM);
            if (fabs(dy) > 3.0 * LOCAL_SIGMA_UM || nnz - first >= max_per_chan)
                continue;
            double wgt = exp(-0.5 * dy * dy / (LOCAL_SIGMA_UM * LOCAL_SIGMA_UM));
            nz->local_src[nnz] = pr->shank[c] * per_shank + k;
            nz->local_w[nnz] = (float)wgt;
            ss += wgt * wgt;
            nnz++;
        }
        for (int i = first; i < nnz; i++)
            nz->local_w[i] = (float)(nz->local_w[i] / sqrt(ss));
    }
    nz->local_start[C] = nnz;

    /* LFP-like components */
    bs_sim_rng r;
    bs_sim_rng_seed(&r, p->seed, BS_SIM_STREAM_LFP, 0);
    for (int j = 0; j < 3; j++) {
        nz->lfp_freq_hz[j] = bs_sim_rng_range(&r, 1.0, 12.0);
        nz->lfp_phase[j] = bs_sim_rng_range(&r, 0.0, 2.0 * M_PI);
        double lambda = bs_sim_rng_range(&r, 1500.0, 4000.0), phi = bs_sim_rng_range(&r, 0.0, 2.0 * M_PI);
        for (int c = 0; c < C; c++)
            nz->lfp_w[j * C + c] = (float)cos(2.0 * M_PI * pr->y_um[c] / lambda + phi);
    }
    return BS_OK;
}

void bs_sim_noise_free(bs_sim_noise *nz)
{
    bs_mem_free(nz->taps);
    bs_mem_free(nz->taps_delayed);
    bs_mem_free(nz->local_start);
    bs_mem_free(nz->local_src);
    bs_mem_free(nz->local_w);
    bs_mem_free(nz->lfp_w);
    memset(nz, 0, sizeof *nz);
}

size_t bs_sim_noise_scratch(const bs_sim_noise *nz, int64_t B)
{
    return (size_t)(B + 2 * nz->half_taps) + (size_t)(nz->n_local + 8 * nz->n_common + 3) * (size_t)B;
}

/* out[i] = sigma * sum_k taps[k] white[i + k], white from (key, t0 - half + i). */
static void filtered(const bs_sim_noise *nz, const float *taps, uint64_t key, int64_t t0, int64_t B, float sigma,
                     float *white, float *out)
{
    int h = nz->half_taps, nt = 2 * h + 1;
    int64_t nw = B + 2 * h;
    uint64_t base = (uint64_t)(t0 - h);
#pragma omp simd
    for (int64_t i = 0; i < nw; i++)
        white[i] = bs_sim_counter_normal(key, base + (uint64_t)i);
    (void)nt;
    /* the 15 taps written out: one load per tap and one store per sample (fast even unoptimised) */
    const float h0 = taps[0] * sigma, h1 = taps[1] * sigma, h2 = taps[2] * sigma, h3 = taps[3] * sigma,
                h4 = taps[4] * sigma, h5 = taps[5] * sigma, h6 = taps[6] * sigma, h7 = taps[7] * sigma,
                h8 = taps[8] * sigma, h9 = taps[9] * sigma, h10 = taps[10] * sigma, h11 = taps[11] * sigma,
                h12 = taps[12] * sigma, h13 = taps[13] * sigma, h14 = taps[14] * sigma;
#pragma omp simd
    for (int64_t i = 0; i < B; i++) {
        const float *x = white + i;
        out[i] = ((h0 * x[0] + h1 * x[1]) + (h2 * x[2] + h3 * x[3])) +
                 ((h4 * x[4] + h5 * x[5]) + (h6 * x[6] + h7 * x[7])) +
                 ((h8 * x[8] + h9 * x[9]) + (h10 * x[10] + h11 * x[11])) +
                 ((h12 * x[12] + h13 * x[13]) + h14 * x[14]);
    }
}

void bs_sim_noise_block(const bs_sim_noise *nz, double fs_hz, int64_t t0, int64_t B, float *buf, float *scratch)
{
    int C = nz->n_chan;
    float *white = scratch;
    float *src = white + B + 2 * nz->half_taps; /* [n_local + n_common][B] */
    float *lfp = src + (size_t)(nz->n_local + 8 * nz->n_common) * (size_t)B;
    int ntaps = 2 * nz->half_taps + 1;
    for (int k = 0; k < nz->n_local; k++)
        filtered(nz, nz->taps, bs_sim_key(nz->seed, BS_SIM_STREAM_NOISE_LOCAL, (uint64_t)k), t0, B, 1.0f, white,
                 src + (size_t)k * (size_t)B);
    for (int k = 0; k < nz->n_common; k++)
        for (int d = 0; d < (nz->chan_dq ? 8 : 1); d++)
            filtered(nz, nz->taps_delayed + d * ntaps, bs_sim_key(nz->seed, BS_SIM_STREAM_NOISE_COMMON, (uint64_t)k),
                     t0, B, nz->sigma_common_uv, white, src + (size_t)(nz->n_local + 8 * k + d) * (size_t)B);
    for (int j = 0; j < 3; j++) {
        double w = 2.0 * M_PI * nz->lfp_freq_hz[j] / fs_hz;
        for (int64_t i = 0; i < B; i++)
            lfp[j * B + i] = (float)(nz->lfp_uv * sin(w * (double)(t0 + i) + nz->lfp_phase[j]));
    }
    for (int c = 0; c < nz->n_chan; c++) {
        float *out = buf + (size_t)c * (size_t)B;
        filtered(nz, nz->taps, bs_sim_key(nz->seed, BS_SIM_STREAM_NOISE_CHAN, (uint64_t)c), t0, B,
                 nz->sigma_ind_uv, white, out);
        int q = nz->local_start[c], q1 = nz->local_start[c + 1];
        for (; q + 4 <= q1; q += 4) { /* four sources per pass */
            const float *s0 = src + (size_t)nz->local_src[q] * (size_t)B;
            const float *s1 = src + (size_t)nz->local_src[q + 1] * (size_t)B;
            const float *s2 = src + (size_t)nz->local_src[q + 2] * (size_t)B;
            const float *s3 = src + (size_t)nz->local_src[q + 3] * (size_t)B;
            float w0 = nz->local_w[q] * nz->sigma_local_uv, w1 = nz->local_w[q + 1] * nz->sigma_local_uv;
            float w2 = nz->local_w[q + 2] * nz->sigma_local_uv, w3 = nz->local_w[q + 3] * nz->sigma_local_uv;
#pragma omp simd
            for (int64_t i = 0; i < B; i++)
                out[i] += (w0 * s0[i] + w1 * s1[i]) + (w2 * s2[i] + w3 * s3[i]);
        }
        for (; q < q1; q++) {
            const float *s0 = src + (size_t)nz->local_src[q] * (size_t)B;
            float w0 = nz->local_w[q] * nz->sigma_local_uv;
#pragma omp simd
            for (int64_t i = 0; i < B; i++)
                out[i] += w0 * s0[i];
        }
        int shank = nz->chan_shank[c];
        int dq = nz->chan_dq ? nz->chan_dq[c] : 0;
        const float *m = src + (size_t)(nz->n_local + 8 * shank + dq) * (size_t)B;
        float a0 = nz->lfp_w[c], a1 = nz->lfp_w[C + c], a2 = nz->lfp_w[2 * C + c];
#pragma omp simd
        for (int64_t i = 0; i < B; i++)
            out[i] += m[i] + a0 * lfp[i] + a1 * lfp[B + i] + a2 * lfp[2 * B + i];
    }
}
