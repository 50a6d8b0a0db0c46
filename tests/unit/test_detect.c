/*
 * test_detect.c - universal detection on synthetic whitened data with known
 * spikes: learned bases, recall and precision, positions, exact pruning
 * (identical to exhaustive evaluation), thread-count independence, spikes at
 * batch boundaries found exactly once, scratch memory equal to its size
 * function, and a clear error when there are no spikes to learn from. Where
 * a CUDA GPU is usable (src/gpu/gpu.h), detection with the filtering and
 * scoring on it gives the same spikes up to near-ties (the GPU filters
 * directly, the CPU with its filter bank: float rounding), with its tracked GPU memory equal
 * to bs_gpu_detector_bytes (elsewhere that part prints that it was skipped).
 * An artifact storm (every position above threshold for thousands of
 * samples) through lists at their smallest limits: chunks overflow and are
 * done in parts, with the same spikes, and the memory held stays within
 * bs_detect_batch_bytes.
 */
#include "test.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "common/rng.h"
#include "detect/detect.h"
#include "gpu/gpu.h"
#include "io/probe.h"
#include "mem/mem.h"

#define C 32
#define T 60000
#define NU 8
#define HALO 61
#define NB 10000

static float *signal_;
static int64_t gt_t[2000];
static int gt_u[2000], n_gt;
static double unit_x[NU], unit_y[NU];

static void make_probe(bs_probe *p)
{
    bs_probe_alloc(p, C);
    for (int c = 0; c < C; c++) {
        p->column[c] = c;
        p->x_um[c] = (c % 2) * 32.0;
        p->y_um[c] = (c / 2) * 20.0;
    }
}

static void add_spike(int64_t t, int u, double amp)
{
    for (int c = 0; c < C; c++) {
        double dx = (c % 2) * 32.0 - unit_x[u], dy = (c / 2) * 20.0 - unit_y[u];
        double a = amp * exp(-(dx * dx + dy * dy) / (2 * 25.0 * 25.0));
        for (int s = -20; s <= 40; s++) {
            double w = -exp(-(s * s) / (2.0 * (2.0 + 0.3 * u) * (2.0 + 0.3 * u))) +
                       0.35 * exp(-((s - 10.0 - u) * (s - 10.0 - u)) / (2.0 * 36.0));
            signal_[(size_t)c * T + (size_t)(t + s)] += (float)(a * w);
        }
    }
    gt_t[n_gt] = t;
    gt_u[n_gt++] = u;
}

static void make_signal(int with_spikes)
{
    bs_rng r;
    bs_rng_seed(&r, 42);
    for (size_t i = 0; i < (size_t)C * T; i++)
        signal_[i] = (float)bs_rng_normal(&r);
    n_gt = 0;
    if (!with_spikes)
        return;
    for (int u = 0; u < NU; u++) {
        unit_x[u] = (u % 3) * 16.0;
        unit_y[u] = 30.0 + 35.0 * u;
    }
    /* every spike >= 140 samples from the others; some exactly at batch boundaries */
    int64_t special[] = {NB, 2 * NB - 1, 3 * NB + 1, 4 * NB - 2};
    int k = 0;
    for (int64_t t = 300; t < T - 300; t += 150, k++) {
        int near_special = 0;
        for (int s = 0; s < 4; s++)
            near_special |= llabs(t - special[s]) < 150;
        if (!near_special)
            add_spike(t + (k * 37) % 11, k % NU, 12.0 + (k % 5));
    }
    for (int s = 0; s < 4; s++)
        add_spike(special[s], s, 14.0);
}

/* Run detection batch by batch over the whole signal. */
static bs_status detect_on(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                           const bs_probe *probe, bs_gpu_detector *gpu, bs_detect_output *out)
{
    int64_t W = NB + 2 * HALO;
    float *win = malloc((size_t)C * W * sizeof(float));
    bs_status st = BS_OK;
    for (int64_t start = 0; start < T && st == BS_OK; start += NB) {
        int64_t n_valid = start + NB <= T ? NB : T - start;
        for (int c = 0; c < C; c++)
            for (int64_t i = 0; i < W; i++) {
                int64_t t = start - HALO + i;
                t = t < 0 ? 0 : t >= T ? T - 1 : t;
                win[(size_t)c * W + i] = signal_[(size_t)c * T + t];
            }
        st = bs_detect_batch_on(p, b, g, probe, win, W, HALO, n_valid, start, gpu, bs_detect_output_append, out);
    }
    free(win);
    return st;
}

/* Detections of a GPU run the same as the CPU's in time, position and score (within 1e-4 relative): the GPU
 * filters directly, the CPU by its filter bank, so the scores differ by float rounding and a near-tie may
 * go the other way. */
static int64_t same_detections(const bs_detect_output *cpu, const bs_detect_output *gpu)
{
    int64_t same = 0;
    for (int64_t a = 0, q = 0; a < cpu->n; a++) {
        const bs_detected_spike *x = &cpu->spikes[a];
        while (q < gpu->n && (gpu->spikes[q].t < x->t || (gpu->spikes[q].t == x->t && gpu->spikes[q].pos < x->pos)))
            q++;
        same += q < gpu->n && gpu->spikes[q].t == x->t && gpu->spikes[q].pos == x->pos &&
                fabsf(gpu->spikes[q].score - x->score) <= 1e-4f * x->score;
    }
    return same;
}

static bs_status detect_all(const bs_detect_params *p, const bs_temporal_basis *b, const bs_detect_grid *g,
                            const bs_probe *probe, bs_detect_output *out)
{
    return detect_on(p, b, g, probe, NULL, out);
}

/* The low tier's stride against the recording's length (detect.low_tier_max_s, 20 s by default): the
 * parameter's up to 3 x 20 s of recording, a minute included (a third of it, exactly the cap), then
 * ceil(duration / 20 s); no cap with 0; a stride the user set larger is kept. */
static void test_low_stride(void)
{
    bs_detect_params d;
    bs_detect_default_params(&d);
    const double fs = 30000.0;
    CHECK(d.low_stride == 3 && d.low_max_s == 20.0);
    CHECK(bs_detect_low_stride(&d, 20 * 30000, fs) == 3);
    CHECK(bs_detect_low_stride(&d, 60 * 30000, fs) == 3);
    CHECK(bs_detect_low_stride(&d, 60 * 30000 + 1, fs) == 4);
    CHECK(bs_detect_low_stride(&d, 90 * 30000, fs) == 5);
    CHECK(bs_detect_low_stride(&d, 120 * 30000, fs) == 6);
    CHECK(bs_detect_low_stride(&d, 300 * 30000, fs) == 15);
    CHECK(bs_detect_low_stride(&d, 600 * 30000, fs) == 30);
    CHECK(bs_detect_low_stride(&d, (int64_t)3600 * 30000, fs) == 180);
    CHECK(bs_detect_low_stride(&d, 121 * 30000, 30000.0) == 7);
    d.low_max_s = 0;
    CHECK(bs_detect_low_stride(&d, (int64_t)3600 * 30000, fs) == 3);
    d.low_max_s = 20.0;
    d.low_stride = 500;
    CHECK(bs_detect_low_stride(&d, (int64_t)3600 * 30000, fs) == 500);
}

int main(void)
{
    test_low_stride();
    signal_ = malloc((size_t)C * T * sizeof(float));
    bs_probe probe;
    make_probe(&probe);
    bs_detect_params p;
    bs_detect_default_params(&p);

    /* pure noise: too few isolated spikes to learn shapes */
    make_signal(0);
    bs_snippet_set snips;
    CHECK(bs_snippets_init(&snips, &p) == BS_OK);
    bs_snippets_collect(&snips, &p, signal_, C, T, HALO, T - 2 * HALO);
    bs_temporal_basis basis;
    CHECK(bs_basis_learn(&snips, &p, &basis) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "isolated spikes") != NULL);
    bs_snippets_free(&snips);

    make_signal(1);
    CHECK(bs_snippets_init(&snips, &p) == BS_OK);
    bs_snippets_collect(&snips, &p, signal_, C, T, HALO, T - 2 * HALO);
    CHECK_MSG(snips.n > n_gt / 2, "%d snippets for %d spikes", snips.n, n_gt);
    CHECK(bs_basis_learn(&snips, &p, &basis) == BS_OK);
    bs_snippets_free(&snips);
    for (int i = 0; i < p.n_pcs; i++)
        for (int j = 0; j < p.n_pcs; j++) {
            double dot = 0;
            for (int u = 0; u < p.nt; u++)
                dot += (double)basis.wpca[i * p.nt + u] * basis.wpca[j * p.nt + u];
            CHECK_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
        }
    for (int k = 0; k < p.n_shapes; k++) {
        double norm = 0;
        for (int u = 0; u < p.nt; u++)
            norm += (double)basis.wtemp[k * p.nt + u] * basis.wtemp[k * p.nt + u];
        CHECK_NEAR(norm, 1.0, 1e-5);
        CHECK(basis.wtemp[k * p.nt + p.nt_before] < 0);
    }

    bs_detect_grid grid;
    CHECK(bs_grid_build(&probe, &p, &grid) == BS_OK);
    /* 2 columns 32 µm apart -> 3 grid columns; rows every 10 µm over 300 µm */
    CHECK(grid.n_pos == 3 * 31);
    CHECK(grid.n_chans == 10 && grid.neighbors[0] == 0);
    /* each position's subspace bound: two orthonormal directions, and for random filter outputs (some along
       an envelope, some random) max over sizes of |a_s.p| + r_s |b - p| is at least every |w_s.b|, and below
       |b| where b is noise */
    {
        bs_rng rng;
        bs_rng_seed(&rng, 7);
        const int nC = grid.n_chans, S = grid.n_sizes;
        int bad = 0, tighter = 0, n_noise = 0;
        CHECK(S * nC <= 5 * 10);
        for (int f = 0; f < grid.n_pos; f++) {
            const float *q = grid.sub + (size_t)f * BS_GRID_SUB_FLOATS(nC, S), *coef = q + 2 * nC;
            /* the envelopes over the position's channels in ascending order, the directions' order */
            float w[5 * 10];
            for (int j = 0; j < nC; j++) {
                int rank = 0;
                for (int i = 0; i < nC; i++)
                    rank += grid.ichan[(size_t)f * nC + i] < grid.ichan[(size_t)f * nC + j];
                for (int s = 0; s < S; s++)
                    w[s * nC + rank] = grid.weights[((size_t)f * S + s) * nC + j];
            }
            for (int d = 0; d < 2; d++)
                for (int e = 0; e < 2; e++) {
                    double dot = 0;
                    for (int j = 0; j < nC; j++)
                        dot += (double)q[d * nC + j] * q[e * nC + j];
                    bad += fabs(dot - (d == e)) > 1e-6;
                }
            for (int trial = 0; trial < 40; trial++) {
                double b[64], p[2] = {0, 0}, b2 = 0;
                for (int j = 0; j < nC; j++)
                    b[j] = bs_rng_normal(&rng) + (trial % 4 == 0 ? 5.0 * w[(trial / 4 % S) * nC + j] : 0.0);
                for (int j = 0; j < nC; j++) {
                    p[0] += q[j] * b[j];
                    p[1] += q[nC + j] * b[j];
                    b2 += b[j] * b[j];
                }
                double R = sqrt(fmax(b2 - p[0] * p[0] - p[1] * p[1], 0)), bound = 0, score = 0;
                for (int s = 0; s < S; s++) {
                    double ws = 0;
                    for (int j = 0; j < nC; j++)
                        ws += (double)w[s * nC + j] * b[j];
                    score = fmax(score, fabs(ws));
                    bound = fmax(bound, fabs(coef[3 * s] * p[0] + coef[3 * s + 1] * p[1]) + coef[3 * s + 2] * R);
                }
                bad += bound < score * (1 - 1e-9);
                if (trial % 4) {
                    n_noise++;
                    tighter += bound < 0.8 * sqrt(b2);
                }
            }
        }
        printf("subspace bound: %d of %d noise vectors under 0.8 |b|\n", tighter, n_noise);
        CHECK(bad == 0);
        CHECK(tighter > n_noise / 2);
    }

    bs_detect_output out;
    bs_detect_output_init(&out, grid.n_chans, p.n_pcs);
    omp_set_num_threads(2);
    CHECK(detect_all(&p, &basis, &grid, &probe, &out) == BS_OK);

    /* recall, precision, position */
    int found = 0, good_pos = 0, false_pos = 0;
    for (int i = 0; i < n_gt; i++) {
        int hits = 0, best = -1;
        for (int64_t s = 0; s < out.n; s++)
            if (llabs(out.spikes[s].t - gt_t[i]) <= 2) {
                hits++;
                best = (int)s;
            }
        found += hits >= 1;
        if (best >= 0 && fabs(out.spikes[best].y_um - unit_y[gt_u[i]]) < 15.0)
            good_pos++;
    }
    for (int64_t s = 0; s < out.n; s++) {
        int ok = 0;
        for (int i = 0; i < n_gt && !ok; i++)
            ok = llabs(out.spikes[s].t - gt_t[i]) <= 2;
        false_pos += !ok;
    }
    printf("detected %lld spikes; %d of %d ground-truth spikes found, %d well placed, %d unmatched detections\n",
           (long long)out.n, found, n_gt, good_pos, false_pos);
    CHECK(found >= 0.95 * n_gt);
    CHECK(good_pos >= 0.9 * n_gt);
    CHECK(false_pos <= 0.05 * out.n);
    /* the spikes placed at batch boundaries are each found exactly once */
    for (int i = n_gt - 4; i < n_gt; i++) {
        int hits = 0;
        for (int64_t s = 0; s < out.n; s++)
            hits += llabs(out.spikes[s].t - gt_t[i]) <= 2;
        CHECK_MSG(hits == 1, "boundary spike at %lld found %d times", (long long)gt_t[i], hits);
    }
    /* output in time order */
    int sorted = 1;
    for (int64_t s = 1; s < out.n; s++)
        sorted &= out.spikes[s].t >= out.spikes[s - 1].t;
    CHECK(sorted);

    /* exhaustive evaluation gives the identical result (on the batch holding
     * the first boundary spike, to keep the test short) */
    {
        int64_t W = NB + 2 * HALO, start = NB;
        float *win = malloc((size_t)C * W * sizeof(float));
        for (int c = 0; c < C; c++)
            memcpy(win + (size_t)c * W, signal_ + (size_t)c * T + start - HALO, (size_t)W * sizeof(float));
        bs_detect_output fast, ex;
        bs_detect_output_init(&fast, grid.n_chans, p.n_pcs);
        bs_detect_output_init(&ex, grid.n_chans, p.n_pcs);
        bs_detect_params pe = p;
        pe.exhaustive = 1;
        CHECK(bs_detect_batch(&p, &basis, &grid, &probe, win, W, HALO, NB, start, &fast) == BS_OK);
        CHECK(bs_detect_batch(&pe, &basis, &grid, &probe, win, W, HALO, NB, start, &ex) == BS_OK);
        CHECK(fast.n > 10);
        CHECK(ex.n == fast.n && memcmp(ex.spikes, fast.spikes, (size_t)fast.n * sizeof *fast.spikes) == 0 &&
              memcmp(ex.features, fast.features, (size_t)fast.n * fast.feat_len * sizeof(float)) == 0);
        /* the portable kernels (scores, bounds, the filter outputs' transposes) give the same bits as the
           AVX-512 and AVX2 ones (where the CPU has them) */
        bs_detect_output port;
        bs_detect_output_init(&port, grid.n_chans, p.n_pcs);
        bs_detect_force_portable(1);
        CHECK(bs_detect_batch(&p, &basis, &grid, &probe, win, W, HALO, NB, start, &port) == BS_OK);
        bs_detect_force_portable(0);
        CHECK(port.n == fast.n && memcmp(port.spikes, fast.spikes, (size_t)fast.n * sizeof *fast.spikes) == 0 &&
              memcmp(port.features, fast.features, (size_t)fast.n * fast.feat_len * sizeof(float)) == 0);
        bs_detect_output_free(&port);
        /* a low tier (th_low in the first chunk of every 2): the detections above th_universal are the same
           bytes (a lower score never suppresses a higher one), the others lie in the low chunks only, and
           pruning still equals exhaustive evaluation */
        bs_detect_params pl = p, p0 = p;
        pl.th_low = 3.5f;
        pl.low_stride = 2;
        p0.th_low = 0; /* no low tier */
        bs_detect_output lo, lo_ex, none;
        bs_detect_output_init(&lo, grid.n_chans, p.n_pcs);
        bs_detect_output_init(&lo_ex, grid.n_chans, p.n_pcs);
        bs_detect_output_init(&none, grid.n_chans, p.n_pcs);
        CHECK(bs_detect_batch(&p0, &basis, &grid, &probe, win, W, HALO, NB, start, &none) == BS_OK);
        CHECK(bs_detect_batch(&pl, &basis, &grid, &probe, win, W, HALO, NB, start, &lo) == BS_OK);
        pl.exhaustive = 1;
        CHECK(bs_detect_batch(&pl, &basis, &grid, &probe, win, W, HALO, NB, start, &lo_ex) == BS_OK);
        CHECK(lo_ex.n == lo.n && memcmp(lo_ex.spikes, lo.spikes, (size_t)lo.n * sizeof *lo.spikes) == 0 &&
              memcmp(lo_ex.features, lo.features, (size_t)lo.n * lo.feat_len * sizeof(float)) == 0);
        int64_t n_hi = 0, n_low = 0, n_odd = 0, same = 1;
        for (int64_t s = 0; s < lo.n; s++) {
            if (lo.spikes[s].score > p.th_universal) {
                same &= n_hi < none.n && memcmp(&lo.spikes[s], &none.spikes[n_hi], sizeof *lo.spikes) == 0 &&
                        memcmp(lo.features + s * lo.feat_len, none.features + n_hi * none.feat_len,
                               (size_t)lo.feat_len * sizeof(float)) == 0;
                n_hi++;
                continue;
            }
            n_low++;
            n_odd += ((lo.spikes[s].t - start) / 1024) % 2 != 0;
        }
        printf("low tier: %lld detections at 3.5-%g in the low chunks, %lld above as before\n", (long long)n_low,
               (double)p.th_universal, (long long)n_hi);
        CHECK(same && n_hi == none.n && none.n > 10);
        CHECK(n_low > 0 && n_odd == 0);
        bs_detect_output_free(&none);
        bs_detect_output_free(&lo);
        bs_detect_output_free(&lo_ex);
        bs_detect_output_free(&fast);
        bs_detect_output_free(&ex);
        free(win);
    }

    /* one thread gives the identical result */
    bs_detect_output one;
    bs_detect_output_init(&one, grid.n_chans, p.n_pcs);
    omp_set_num_threads(1);
    CHECK(detect_all(&p, &basis, &grid, &probe, &one) == BS_OK);
    CHECK(one.n == out.n && memcmp(one.spikes, out.spikes, (size_t)out.n * sizeof *out.spikes) == 0 &&
          memcmp(one.features, out.features, (size_t)out.n * out.feat_len * sizeof(float)) == 0);
    bs_detect_output_free(&one);

    /* the order of the GPU's candidates: any input order sorts to (t, f) */
    {
        enum { NC = 5000, F = 400 };
        bs_detect_candidate *c = malloc(NC * sizeof *c), *ref = malloc(NC * sizeof *ref);
        bs_rng r;
        bs_rng_seed(&r, 7);
        int64_t n = 0;
        for (int64_t t = 100; t < 1100 && n < NC; t++) /* columns 100..1099, up to 40 positions each */
            for (int f = 0; f < F && n < NC; f += 1 + (int)(bs_rng_uniform(&r) * 20))
                ref[n++] = (bs_detect_candidate){t, f, (int16_t)(f % 7), (int8_t)(f % 2 ? 1 : -1), (float)t};
        memcpy(c, ref, (size_t)n * sizeof *c);
        for (int64_t i = n - 1; i > 0; i--) { /* shuffle */
            int64_t j = (int64_t)(bs_rng_uniform(&r) * (double)(i + 1));
            bs_detect_candidate tmp = c[i];
            c[i] = c[j];
            c[j] = tmp;
        }
        CHECK(bs_detect_sort_candidates(c, n, 90, 1200) == BS_OK);
        int same = 1; /* field by field: struct copies need not keep the padding bytes */
        for (int64_t i = 0; i < n; i++)
            same &= c[i].t == ref[i].t && c[i].f == ref[i].f && c[i].q == ref[i].q && c[i].sign == ref[i].sign &&
                    c[i].score == ref[i].score;
        printf("candidate order: %lld candidates in 1000 columns, sorted from a shuffle: %d\n", (long long)n, same);
        CHECK(n > 1000 && same);
        free(c);
        free(ref);
    }

    /* the filtering and scoring on a GPU: the same bytes */
    if (bs_gpu_device_info(0, NULL, 0, NULL) == BS_OK) {
        bs_gpu_detector *gd = NULL;
        bs_mem_reset_peaks();
        CHECK(bs_gpu_detector_create(0, &p, &basis, &grid, C, NB + 2 * HALO, &gd) == BS_OK);
        CHECK(bs_mem_tag_current("detect/gpu", BS_DEV_GPU) ==
              bs_gpu_detector_bytes(C, NB + 2 * HALO, p.n_shapes, p.nt, grid.n_pos, grid.n_chans, grid.n_sizes));
        bs_detect_output gout;
        bs_detect_output_init(&gout, grid.n_chans, p.n_pcs);
        CHECK(gd && detect_on(&p, &basis, &grid, &probe, gd, &gout) == BS_OK);
        int64_t same = same_detections(&out, &gout);
        printf("GPU detection: %lld spikes (CPU %lld), %lld the same in time, position and score\n",
               (long long)gout.n, (long long)out.n, (long long)same);
        CHECK(same >= out.n - out.n / 100 && llabs(gout.n - out.n) <= out.n / 100 + 1);
        bs_gpu_detector_free(gd);
        /* a low tier (th_low 3.5 in the first chunk of every 2): the GPU keeps each column's candidates at
           the lowest threshold of the chunks that read it, so the low chunks' detections are there too */
        bs_detect_params pg = p;
        pg.th_low = 3.5f;
        pg.low_stride = 2;
        bs_detect_output cl, gl;
        bs_detect_output_init(&cl, grid.n_chans, p.n_pcs);
        bs_detect_output_init(&gl, grid.n_chans, p.n_pcs);
        CHECK(detect_on(&pg, &basis, &grid, &probe, NULL, &cl) == BS_OK);
        CHECK(bs_gpu_detector_create(0, &pg, &basis, &grid, C, NB + 2 * HALO, &gd) == BS_OK);
        CHECK(gd && detect_on(&pg, &basis, &grid, &probe, gd, &gl) == BS_OK);
        int64_t n_low = 0, same_low = same_detections(&cl, &gl);
        for (int64_t s = 0; s < cl.n; s++)
            n_low += cl.spikes[s].score <= p.th_universal;
        printf("GPU detection with a low tier: %lld spikes (CPU %lld, %lld under th_universal), %lld the same\n",
               (long long)gl.n, (long long)cl.n, (long long)n_low, (long long)same_low);
        CHECK(n_low > 0 && same_low >= cl.n - cl.n / 100 && llabs(gl.n - cl.n) <= cl.n / 100 + 1);
        bs_gpu_detector_free(gd);
        bs_detect_output_free(&cl);
        bs_detect_output_free(&gl);
        CHECK(bs_mem_tag_current("detect/gpu", BS_DEV_GPU) == 0);
        bs_detect_output_free(&gout);
    } else {
        printf("GPU detection: skipped (%s)\n", bs_last_error());
    }

    /* an artifact storm with the lists at their smallest limits (one column's worth): the chunks overflow and
       are done again in halves; the spikes are the same bytes and the memory within bs_detect_batch_bytes */
    {
        int64_t W = NB + 2 * HALO, start = NB;
        float *win = malloc((size_t)C * W * sizeof(float));
        for (int c = 0; c < C; c++)
            memcpy(win + (size_t)c * W, signal_ + (size_t)c * T + start - HALO, (size_t)W * sizeof(float));
        bs_rng r;
        bs_rng_seed(&r, 11);
        for (int64_t t0 = HALO + 2000; t0 < HALO + 6000; t0 += 9) /* broadband pulses, every channel */
            for (int c = 0; c < C; c++) {
                double a = 20.0 + 40.0 * bs_rng_uniform(&r);
                for (int s = -4; s <= 4; s++)
                    win[(size_t)c * W + (size_t)(t0 + s)] -= (float)(a * exp(-s * s / 4.0));
            }
        bs_detect_params pn = p; /* few neighbours: many spikes per chunk, so the spike list overflows too */
        pn.n_neighbors = 3;
        bs_detect_grid g3;
        CHECK(bs_grid_build(&probe, &pn, &g3) == BS_OK);
        bs_detect_params pm = pn;
        pm.chunk_candidates_per_pos = 1;
        pm.chunk_spikes_per_pos = 1;
        bs_detect_output ref, small;
        bs_detect_output_init(&ref, g3.n_chans, p.n_pcs);
        bs_detect_output_init(&small, g3.n_chans, p.n_pcs);
        omp_set_num_threads(2);
        CHECK(bs_detect_batch(&pn, &basis, &g3, &probe, win, W, HALO, NB, start, &ref) == BS_OK);
        int64_t most = 0; /* spikes of the fullest chunk of 1,024 samples */
        for (int64_t s0 = 0, s1 = 0; s0 < ref.n; s0 = s1) {
            int64_t k = (ref.spikes[s0].t - start) / 1024;
            for (s1 = s0; s1 < ref.n && (ref.spikes[s1].t - start) / 1024 == k; s1++)
                ;
            most = s1 - s0 > most ? s1 - s0 : most;
        }
        size_t base = bs_mem_current(BS_DEV_HOST);
        bs_mem_reset_peaks();
        CHECK(bs_detect_batch(&pm, &basis, &g3, &probe, win, W, HALO, NB, start, &small) == BS_OK);
        /* the output's own growth is the test's, not the detector's */
        size_t held = bs_mem_peak(BS_DEV_HOST) - base - bs_mem_size(small.spikes) - bs_mem_size(small.features);
        size_t bound = bs_detect_scratch_bytes(C, &pm, 2) + bs_detect_batch_bytes(&pm, g3.n_pos, g3.n_chans, 2, W, 0);
        int same = small.n == ref.n && memcmp(small.spikes, ref.spikes, (size_t)ref.n * sizeof *ref.spikes) == 0 &&
                   memcmp(small.features, ref.features, (size_t)ref.n * ref.feat_len * sizeof(float)) == 0;
        printf("artifact storm: %lld spikes (%lld in the fullest chunk, limit %d), smallest lists identical: %d, "
               "held %zu B <= bound %zu B\n",
               (long long)ref.n, (long long)most, g3.n_pos, same, held, bound);
        CHECK(most > g3.n_pos); /* the spike list overflowed */
        CHECK(same);
        CHECK(held <= bound);
        bs_detect_output_free(&ref);
        bs_detect_output_free(&small);
        bs_grid_free(&g3);
        free(win);
    }

    /* scratch equals its size function (2 threads, 10 chunks per batch) */
    omp_set_num_threads(2);
    bs_mem_reset_peaks();
    bs_detect_output_clear(&out);
    CHECK(detect_all(&p, &basis, &grid, &probe, &out) == BS_OK);
    CHECK(bs_mem_tag_peak("detect/scratch", BS_DEV_HOST) == bs_detect_scratch_bytes(C, &p, 2));

    bs_detect_output_free(&out);
    bs_grid_free(&grid);
    bs_basis_free(&basis);
    bs_probe_free(&probe);
    free(signal_);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
