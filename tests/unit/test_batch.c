/*
 * test_batch.c - the batch reader: every window value equals the scaled
 * sample at the clamped index (exact reconstruction and edge replication) for
 * NB not dividing T, halo > NB, T < NB, halo 0 and tiny raw blocks; a spike
 * straddling a batch boundary is detected exactly once at the right sample;
 * uint16 / int32 / float32 / float16 scaling; the float16 fast path (F16C) against
 * bs_half_to_float; NaN in float32 and float16 input; the allocation
 * equals bs_batch_reader_bytes; one reader per thread reads in parallel;
 * every window the same read with O_DIRECT (direct_io) as through the page cache;
 * reading ahead (bs_batch_prefetch): the same windows in order, every other
 * batch, after a wrong hint and a hint never read, and every hinted batch
 * read from the read ahead where the file system takes O_DIRECT;
 * the railed fraction of noise, flat and clipped channels.
 */
#include "test.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <unistd.h>

#include "common/half.h"
#include "io/batch.h"
#include "io/recording.h"
#include "mem/mem.h"

static const char *g_dir;
static int g_direct_used; /* a reader opened with O_DIRECT (not on a file system without it, e.g. tmpfs) */

/* A Kilosort probe with channels on the given columns (a vertical line). */
static void write_probe(const char *path, int n_chan, const int *cols, int n_cols)
{
    FILE *fp = fopen(path, "w");
    fprintf(fp, "{\"chanMap\":[");
    for (int c = 0; c < n_chan; c++)
        fprintf(fp, "%s%d", c ? "," : "", cols[c]);
    fprintf(fp, "],\"xc\":[");
    for (int c = 0; c < n_chan; c++)
        fprintf(fp, "%s0", c ? "," : "");
    fprintf(fp, "],\"yc\":[");
    for (int c = 0; c < n_chan; c++)
        fprintf(fp, "%s%d", c ? "," : "", 20 * c);
    fprintf(fp, "],\"n_chan\":%d}", n_cols);
    fclose(fp);
}

/* int16 test signal, distinct per (t, col) */
static int16_t sig16(int64_t t, int col)
{
    return (int16_t)(((t * 7 + col * 1000) % 20000) - 10000);
}

static void write_i16(const char *path, int64_t T, int n_cols)
{
    FILE *fp = fopen(path, "wb");
    for (int64_t t = 0; t < T; t++)
        for (int c = 0; c < n_cols; c++) {
            int16_t v = sig16(t, c);
            fwrite(&v, sizeof v, 1, fp);
        }
    fclose(fp);
}

static int64_t clamp64(int64_t s, int64_t lo, int64_t hi)
{
    return s < lo ? lo : s > hi ? hi : s;
}

/* Open a recording of T int16 samples (5 columns, channels on 4, 0, 2). */
static bs_status open_i16(bs_recording *rec, int64_t T, double uvpb)
{
    static const int cols[3] = {4, 0, 2};
    char bin[4200], probe[4200];
    snprintf(bin, sizeof bin, "%s/i16_%lld.bin", g_dir, (long long)T);
    snprintf(probe, sizeof probe, "%s/probe3.json", g_dir);
    write_probe(probe, 3, cols, 5);
    write_i16(bin, T, 5);
    bs_open_options opt = {.probe_path = probe, .fs_hz = 30000, .uv_per_bit = uvpb};
    return bs_recording_open(bin, &opt, rec);
}

/* Read every batch; check every window value against the clamped sample and
 * the concatenation of the central parts against the whole signal. Returns
 * the number of mismatches. */
static long check_all_io(int64_t T, int64_t nb, int64_t halo, size_t block_bytes, int direct)
{
    bs_recording rec;
    if (open_i16(&rec, T, 0.25) != BS_OK) {
        fprintf(stderr, "open: %s\n", bs_last_error());
        return 1;
    }
    rec.direct_io = direct;
    bs_batch_reader r;
    long bad = 0;
    if (bs_batch_reader_open(&r, &rec, nb, halo, block_bytes) != BS_OK) {
        fprintf(stderr, "reader: %s\n", bs_last_error());
        bs_recording_close(&rec);
        return 1;
    }
    const int64_t W = nb + 2 * halo;
    if (r.n_batches != (T + nb - 1) / nb || r.width != W)
        bad++;
    int64_t next = 0; /* next sample expected in the concatenation */
    for (int64_t b = 0; b < r.n_batches; b++) {
        float *w;
        int64_t nv;
        if (bs_batch_read(&r, b, &w, &nv) != BS_OK) {
            bad++;
            continue;
        }
        int64_t want_nv = (b + 1) * nb <= T ? nb : T - b * nb;
        if (nv != want_nv)
            bad++;
        for (int c = 0; c < 3; c++)
            for (int64_t j = 0; j < W; j++) {
                int64_t s = clamp64(b * nb - halo + j, 0, T - 1);
                float want = (float)((double)sig16(s, rec.probe.column[c]) * 0.25);
                if (w[c * W + j] != want)
                    bad++;
            }
        /* central part continues the concatenation */
        for (int64_t j = 0; j < nv; j++)
            if (w[0 * W + halo + j] != (float)((double)sig16(next + j, 4) * 0.25))
                bad++;
        next += nv;
    }
    if (next != T)
        bad++;
    if (!direct && r.direct)
        bad++;
    g_direct_used |= r.direct;
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
    return bad;
}

/* The same through the page cache and with O_DIRECT (aligned blocks around rows of 10 bytes). */
static long check_all(int64_t T, int64_t nb, int64_t halo, size_t block_bytes)
{
    return check_all_io(T, nb, halo, block_bytes, 0) + check_all_io(T, nb, halo, block_bytes, 1);
}

/* Tiny detector: negative peaks below -thr, reported only in the central part
 * of each batch; the halo supplies the neighbours. */
static int detect(bs_batch_reader *r, float thr, int64_t *found, int max_found)
{
    int n = 0;
    for (int64_t b = 0; b < r->n_batches; b++) {
        float *w;
        int64_t nv;
        if (bs_batch_read(r, b, &w, &nv) != BS_OK)
            return -1;
        for (int64_t j = r->halo; j < r->halo + nv; j++) {
            float x = w[j];
            if (x < -thr && x <= w[j - 1] && x < w[j + 1] && n < max_found)
                found[n++] = b * r->nb + (j - r->halo);
        }
    }
    return n;
}

static void test_spike_at_boundary(void)
{
    const int64_t T = 1000, NB = 250;
    const int64_t peaks[4] = {499, 500, 501, 750};
    for (int k = 0; k < 4; k++) {
        char bin[4200], probe[4200];
        snprintf(bin, sizeof bin, "%s/spike.bin", g_dir);
        snprintf(probe, sizeof probe, "%s/probe1.json", g_dir);
        int col0 = 0;
        write_probe(probe, 1, &col0, 1);
        FILE *fp = fopen(bin, "wb");
        for (int64_t t = 0; t < T; t++) {
            int64_t d = t - peaks[k];
            int16_t v = (int16_t)((d >= -6 && d <= 6) ? -(700 - 100 * (d < 0 ? -d : d)) : 3 * ((t % 5) - 2));
            fwrite(&v, sizeof v, 1, fp);
        }
        fclose(fp);
        bs_open_options opt = {.probe_path = probe, .fs_hz = 30000, .uv_per_bit = 0.5};
        bs_recording rec;
        CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
        for (int64_t halo = 1; halo <= 20; halo += 19) {
            bs_batch_reader r;
            CHECK(bs_batch_reader_open(&r, &rec, NB, halo, 0) == BS_OK);
            int64_t found[8] = {0};
            int n = detect(&r, 100.0f, found, 8);
            CHECK_MSG(n == 1 && found[0] == peaks[k], "peak %lld halo %lld: found %d, first at %lld",
                      (long long)peaks[k], (long long)halo, n, (long long)found[0]);
            bs_batch_reader_close(&r);
        }
        bs_recording_close(&rec);
    }
}

/* One sample type, 2 columns, channel 0 on column 1: the window's first
 * value equals `want`. */
static float first_value(const char *dtype, const void *row, size_t row_bytes, double uvpb, double offset)
{
    char bin[4200], probe[4200];
    snprintf(bin, sizeof bin, "%s/scale_%s.bin", g_dir, dtype);
    snprintf(probe, sizeof probe, "%s/probe_c1.json", g_dir);
    int col1 = 1;
    write_probe(probe, 1, &col1, 2);
    FILE *fp = fopen(bin, "wb");
    fwrite(row, row_bytes, 1, fp);
    fclose(fp);
    bs_open_options opt = {.probe_path = probe, .fs_hz = 1000, .dtype = dtype, .uv_per_bit = uvpb, .offset = offset};
    bs_recording rec;
    float v = -12345.0f;
    if (bs_recording_open(bin, &opt, &rec) != BS_OK)
        return v;
    bs_batch_reader r;
    float *w;
    int64_t nv;
    if (bs_batch_reader_open(&r, &rec, 4, 2, 0) == BS_OK && bs_batch_read(&r, 0, &w, &nv) == BS_OK && nv == 1)
        v = w[2];
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
    return v;
}

static void test_scaling(void)
{
    uint16_t u[2] = {7, 32768 + 100};
    CHECK(first_value("uint16", u, sizeof u, 0.195, 0) == (float)(100.0 * (double)(float)0.195));
    u[1] = 1000;
    CHECK(first_value("uint16", u, sizeof u, 2.0, 600) == 800.0f);
    u[1] = 0;
    CHECK(first_value("uint16", u, sizeof u, 1.0, 0) == -32768.0f);
    int32_t i[2] = {0, (1 << 30) + 3};
    CHECK(first_value("int32", i, sizeof i, 0.25, 0) == (float)268435456.75);
    i[1] = -2000000;
    CHECK(first_value("int32", i, sizeof i, 0.5, 0) == -1000000.0f);
    float f[2] = {1e30f, 3.5f};
    CHECK(first_value("float32", f, sizeof f, 2.0, 0.5) == 6.0f);
    int16_t s[2] = {0, -32768};
    CHECK(first_value("int16", s, sizeof s, 0.125, 0) == -4096.0f);
    uint16_t h[2] = {0, 0xc248}; /* float16 -3.140625 */
    CHECK(first_value("float16", h, sizeof h, 1.0, 0) == -3.140625f);
    CHECK(first_value("f2", h, sizeof h, 2.0, 0.5) == (float)((-3.140625 - 0.5) * 2.0));
}

static void test_nan(void)
{
    char bin[4200], probe[4200];
    snprintf(bin, sizeof bin, "%s/nan.bin", g_dir);
    snprintf(probe, sizeof probe, "%s/probe_nan.json", g_dir);
    const int cols[2] = {2, 0};
    write_probe(probe, 2, cols, 3);
    FILE *fp = fopen(bin, "wb");
    for (int t = 0; t < 100; t++)
        for (int c = 0; c < 3; c++) {
            float v = (float)(t + c);
            if (t == 37 && c == 0)
                v = NAN;
            if (t == 60 && c == 1) /* column 1 is not on the probe: never read */
                v = INFINITY;
            fwrite(&v, sizeof v, 1, fp);
        }
    fclose(fp);
    bs_open_options opt = {.probe_path = probe, .fs_hz = 1000, .dtype = "float32"};
    bs_recording rec;
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    bs_batch_reader r;
    CHECK(bs_batch_reader_open(&r, &rec, 30, 5, 0) == BS_OK);
    float *w;
    int64_t nv;
    CHECK(bs_batch_read(&r, 0, &w, &nv) == BS_OK && w[5 + 29] == 31.0f); /* channel 0 = column 2 */
    CHECK(bs_batch_read(&r, 1, &w, &nv) == BS_ERR_INPUT);                /* reads 25..64 */
    CHECK(strstr(bs_last_error(), "nan.bin: sample 37, channel 1 (file column 0): expected a finite float32") !=
          NULL);
    CHECK(bs_batch_read(&r, 3, &w, &nv) == BS_OK && nv == 10 && w[40 + 5 + 9] == 99.0f);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);

    /* float16: a NaN is refused the same way (a half's NaN: exponent bits all set, mantissa not 0) */
    fp = fopen(bin, "wb");
    for (int t = 0; t < 100; t++)
        for (int c = 0; c < 3; c++) {
            uint16_t v = t == 37 && c == 0 ? 0x7e00 : bs_float_to_half((float)(t + c));
            fwrite(&v, sizeof v, 1, fp);
        }
    fclose(fp);
    opt.dtype = "float16";
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    CHECK(bs_batch_reader_open(&r, &rec, 30, 5, 0) == BS_OK);
    CHECK(bs_batch_read(&r, 0, &w, &nv) == BS_OK && w[5 + 29] == 31.0f);
    CHECK(bs_batch_read(&r, 1, &w, &nv) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "nan.bin: sample 37, channel 1 (file column 0): expected a finite float16") !=
          NULL);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
    opt.dtype = "float32";

    /* a finite value whose scaled µV overflows float32 */
    fp = fopen(bin, "wb");
    for (int t = 0; t < 10; t++)
        for (int c = 0; c < 3; c++) {
            float v = (t == 4 && c == 2) ? 3e38f : 1.0f;
            fwrite(&v, sizeof v, 1, fp);
        }
    fclose(fp);
    opt.uv_per_bit = 4.0;
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    CHECK(bs_batch_reader_open(&r, &rec, 30, 5, 0) == BS_OK);
    CHECK(bs_batch_read(&r, 0, &w, &nv) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "sample 4, channel 0 (file column 2): expected a finite float32 value whose scaled") !=
          NULL);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);

    /* a window of many conversion tiles (128 rows each) converted on 3 threads: the value reported is the one
       a single thread going tile by tile, channel by channel, would meet first: in the tile of rows 640..767,
       channel 0 (column 2) at 720 before channel 1 (column 0) at 700; not the later tile's at 900 */
    fp = fopen(bin, "wb");
    for (int t = 0; t < 1000; t++)
        for (int c = 0; c < 3; c++) {
            float v = (t == 720 && c == 2) || (t == 700 && c == 0) || (t == 900 && c == 2) ? NAN : 1.0f;
            fwrite(&v, sizeof v, 1, fp);
        }
    fclose(fp);
    opt.uv_per_bit = 1.0;
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    CHECK(bs_batch_reader_open(&r, &rec, 1000, 0, 0) == BS_OK);
    omp_set_num_threads(3);
    CHECK(bs_batch_read(&r, 0, &w, &nv) == BS_ERR_INPUT);
    CHECK_MSG(strstr(bs_last_error(), "sample 720, channel 0 (file column 2)") != NULL, "%s", bs_last_error());
    omp_set_num_threads(2);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
}

/* float16, unscaled, file column c = channel c (the preprocessed recording's
 * layout, converted 8 x 8 by F16C where the CPU has it): every window value
 * is bs_half_to_float of its half (subnormals, -0, the largest halves among
 * them), for 19 channels and 1003 rows (neither a multiple of 8), with
 * 5-row raw blocks too; a NaN is reported where a channel-by-channel scan
 * finds it first. */
static void test_f16_direct(void)
{
    enum { C = 19, T = 1003 };
    char bin[4200], probe[4200];
    snprintf(bin, sizeof bin, "%s/direct.f16", g_dir);
    snprintf(probe, sizeof probe, "%s/probe_direct.json", g_dir);
    int cols[C];
    for (int c = 0; c < C; c++)
        cols[c] = c;
    write_probe(probe, C, cols, C);
    static uint16_t h[T][C];
    uint32_t state = 12345;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            state = state * 1664525u + 1013904223u;
            uint16_t v = (uint16_t)(state >> 16);
            if ((v & 0x7c00u) == 0x7c00u) /* no infinity or NaN here */
                v ^= 0x4000u;
            h[t][c] = v;
        }
    h[0][0] = 0x8000u; /* -0 */
    h[1][1] = 0x0001u; /* the smallest subnormal */
    h[2][2] = 0xfbffu; /* -65504 */
    FILE *fp = fopen(bin, "wb");
    fwrite(h, sizeof h, 1, fp);
    fclose(fp);
    bs_open_options opt = {.probe_path = probe, .fs_hz = 1000, .dtype = "float16"};
    bs_recording rec;
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    for (size_t bb = 0; bb <= 5 * C * 2; bb += 5 * C * 2) {
        bs_batch_reader r;
        CHECK(bs_batch_reader_open(&r, &rec, 300, 40, bb) == BS_OK && r.f16_direct);
        long bad = 0;
        for (int64_t b = 0; b < r.n_batches; b++) {
            float *w;
            int64_t nv;
            CHECK(bs_batch_read(&r, b, &w, &nv) == BS_OK);
            for (int c = 0; c < C; c++)
                for (int64_t j = 0; j < r.width; j++) {
                    int64_t t = clamp64(b * 300 - 40 + j, 0, T - 1);
                    float want = bs_half_to_float(h[t][c]);
                    bad += memcmp(&w[c * r.width + j], &want, sizeof want) != 0;
                }
        }
        CHECK_MSG(bad == 0, "%ld window values differ from bs_half_to_float", bad);
        bs_batch_reader_close(&r);
    }
    bs_recording_close(&rec);
    h[500][12] = 0x7e00u; /* NaN in channel 12, then an earlier row of a later channel */
    h[490][15] = 0x7c00u;
    fp = fopen(bin, "wb");
    fwrite(h, sizeof h, 1, fp);
    fclose(fp);
    CHECK(bs_recording_open(bin, &opt, &rec) == BS_OK);
    bs_batch_reader r;
    CHECK(bs_batch_reader_open(&r, &rec, 300, 40, 0) == BS_OK);
    float *w;
    int64_t nv;
    CHECK(bs_batch_read(&r, 1, &w, &nv) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "sample 500, channel 12 (file column 12): expected a finite float16") != NULL);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
}

static void test_bytes(void)
{
    /* NP1-like shape, by hand: row 385*2 = 770 bytes, 8 MiB / 770 = 10894 rows */
    CHECK(bs_batch_block_rows(385, BS_SAMPLE_I16, 60000, 61, 0) == 10894);
    CHECK(bs_batch_reader_bytes(384, 385, BS_SAMPLE_I16, 60000, 61) ==
          (size_t)10894 * 770 + 3 * 4096 + (size_t)384 * 60122 * 4);
    /* small windows: the raw block is the whole window (and O_DIRECT's three aligned blocks) */
    CHECK(bs_batch_reader_bytes(3, 5, BS_SAMPLE_F32, 100, 10) == (size_t)120 * 20 + 3 * 4096 + (size_t)3 * 120 * 4);
    CHECK(bs_batch_reader_bytes_ex(3, 5, BS_SAMPLE_I16, 100, 10, 25) ==
          (size_t)2 * 10 + 3 * 4096 + (size_t)3 * 120 * 4);
    CHECK(bs_batch_reader_bytes(0, 5, BS_SAMPLE_I16, 100, 10) == SIZE_MAX);
    CHECK(bs_batch_reader_bytes(3, 5, BS_SAMPLE_I16, 0, 10) == SIZE_MAX);
    CHECK(bs_batch_reader_bytes(3, 5, BS_SAMPLE_I16, 100, -1) == SIZE_MAX);
    CHECK(bs_batch_reader_bytes(1 << 30, 5, BS_SAMPLE_I16, (int64_t)1 << 60, 0) == SIZE_MAX);

    /* what the reader allocates equals the size function */
    bs_recording rec;
    CHECK(open_i16(&rec, 700, 1.0) == BS_OK);
    const struct {
        int64_t nb, halo;
        size_t block;
    } shapes[3] = {{256, 32, 0}, {100, 150, 64}, {1000, 0, 1}};
    for (int k = 0; k < 3; k++) {
        bs_mem_reset_peaks();
        bs_batch_reader r;
        CHECK(bs_batch_reader_open(&r, &rec, shapes[k].nb, shapes[k].halo, shapes[k].block) == BS_OK);
        float *w;
        int64_t nv;
        for (int64_t b = 0; b < r.n_batches; b++)
            CHECK(bs_batch_read(&r, b, &w, &nv) == BS_OK);
        size_t want = bs_batch_reader_bytes_ex(3, 5, BS_SAMPLE_I16, shapes[k].nb, shapes[k].halo, shapes[k].block);
        CHECK(bs_mem_tag_peak("io/batch-raw", BS_DEV_HOST) + bs_mem_tag_peak("io/batch-out", BS_DEV_HOST) == want);
        bs_batch_reader_close(&r);
        CHECK(bs_mem_tag_current("io/batch-raw", BS_DEV_HOST) == 0);
    }
    bs_batch_reader r;
    CHECK(bs_batch_reader_open(&r, &rec, 0, 5, 0) == BS_ERR_INPUT && strstr(bs_last_error(), "invalid shape"));
    CHECK(bs_batch_reader_open(&r, &rec, 100, 5, 0) == BS_OK);
    float *w;
    int64_t nv;
    CHECK(bs_batch_read(&r, 7, &w, &nv) == BS_ERR_INTERNAL);
    CHECK(bs_batch_read(&r, -1, &w, &nv) == BS_ERR_INTERNAL);
    bs_batch_reader rd;
    rec.direct_io = 1;
    CHECK(bs_batch_reader_open(&rd, &rec, 100, 5, 0) == BS_OK);
    /* the file shrinks after opening: a clear read error, no crash (with O_DIRECT too) */
    CHECK(truncate(rec.data_path, 5 * 2 * 300) == 0);
    CHECK(bs_batch_read(&r, 6, &w, &nv) == BS_ERR_INPUT && strstr(bs_last_error(), "did it shrink"));
    CHECK(bs_batch_read(&rd, 6, &w, &nv) == BS_ERR_INPUT && strstr(bs_last_error(), "did it shrink"));
    CHECK(bs_batch_read(&rd, 1, &w, &nv) == BS_OK && nv == 100);
    bs_batch_reader_close(&rd);
    bs_batch_reader_close(&r);
    bs_recording_close(&rec);
}

/* Batch b of reader r, read after hinting `hint` (-1: none), compared with the plain reader's window. */
static long ahead_read(bs_batch_reader *r, bs_batch_reader *plain, int64_t b, int64_t hint)
{
    float *w, *p;
    int64_t nv, np;
    if (bs_batch_read(r, b, &w, &nv) != BS_OK || bs_batch_read(plain, b, &p, &np) != BS_OK || nv != np)
        return 1;
    if (hint >= 0)
        bs_batch_prefetch(r, hint);
    return memcmp(w, p, (size_t)3 * (size_t)r->width * sizeof *w) != 0;
}

static void test_read_ahead(void)
{
    const int64_t T = 20000, NB = 3000, halo = 61;
    bs_recording rec;
    CHECK(open_i16(&rec, T, 0.25) == BS_OK);
    bs_batch_reader plain, r;
    CHECK(bs_batch_reader_open(&plain, &rec, NB, halo, 0) == BS_OK);
    rec.direct_io = 1;
    const size_t block = bs_batch_ahead_block(&rec, NB, halo);
    CHECK(block >= BS_BATCH_BLOCK_BYTES);
    CHECK(bs_batch_reader_open(&r, &rec, NB, halo, block) == BS_OK && r.block_rows == r.width);
    const int64_t n = r.n_batches; /* 7, the last one short */
    long bad = 0;
    /* in order, each hinting the next */
    for (int64_t b = 0; b < n; b++)
        bad += ahead_read(&r, &plain, b, b + 1 < n ? b + 1 : -1);
    int64_t want = n - 1;
    /* every other batch (two lanes taking turns) */
    for (int64_t b = 0; b < n; b += 2)
        bad += ahead_read(&r, &plain, b, b + 2);
    want += (n - 1) / 2;
    /* a wrong hint (batch 5, then 2 read), a hint replaced (4, then 6), a hint past the end (ignored) */
    bad += ahead_read(&r, &plain, 0, 5);
    bad += ahead_read(&r, &plain, 2, 4);
    bs_batch_prefetch(&r, 6);
    bad += ahead_read(&r, &plain, 6, n);
    want += 1;
    bad += ahead_read(&r, &plain, 3, -1);
    CHECK_MSG(bad == 0, "read ahead: %ld windows differ from the page cache's", bad);
    if (r.direct && r.aio_off != 2)
        CHECK_MSG(r.ahead_hits == want && r.aio_off == 0, "read ahead: %lld batches from it, expected %lld",
                  (long long)r.ahead_hits, (long long)want);
    else
        CHECK(r.ahead_hits == 0);
    if (r.aio_off == 2)
        fprintf(stderr, "note: this kernel or sandbox gives no AIO context; the read ahead was not exercised\n");
    /* a hint never read: the close waits for it */
    bs_batch_prefetch(&r, 1);
    bs_batch_reader_close(&r);
    /* a reader whose block holds less than a window does not read ahead */
    CHECK(bs_batch_reader_open(&r, &rec, NB, halo, 4000) == BS_OK && r.block_rows < r.width);
    bs_batch_prefetch(&r, 1);
    CHECK(r.ahead == -1 && ahead_read(&r, &plain, 1, -1) == 0 && r.ahead_hits == 0);
    bs_batch_reader_close(&r);
    bs_batch_reader_close(&plain);
    bs_recording_close(&rec);
}

static void test_threads(void)
{
    const int64_t T = 5000, NB = 300, halo = 40;
    bs_recording rec;
    CHECK(open_i16(&rec, T, 0.25) == BS_OK);
    const int64_t nbat = bs_batch_count(T, NB);
    long bad = 0, seen = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad, seen)
    {
        bs_batch_reader r;
        if (bs_batch_reader_open(&r, &rec, NB, halo, 4000) != BS_OK) {
            bad++;
        } else {
#pragma omp for schedule(static, 1)
            for (int64_t b = 0; b < nbat; b++) {
                float *w;
                int64_t nv;
                if (bs_batch_read(&r, b, &w, &nv) != BS_OK) {
                    bad++;
                    continue;
                }
                seen += nv;
                for (int c = 0; c < 3; c++)
                    for (int64_t j = 0; j < NB + 2 * halo; j++) {
                        int64_t s = clamp64(b * NB - halo + j, 0, T - 1);
                        if (w[c * (NB + 2 * halo) + j] != (float)((double)sig16(s, rec.probe.column[c]) * 0.25))
                            bad++;
                    }
            }
            bs_batch_reader_close(&r);
        }
    }
    CHECK(bad == 0 && seen == T);
    bs_recording_close(&rec);
}

/* bs_batch_railed_fraction on hand-made windows: noise ≈ 0, a flat channel 1, a channel clipped at
 * its rails half of the time 0.5, the mean over channels; the halo columns are not counted */
static void test_railed(void)
{
    enum { C = 4, W = 1010, H = 5, N = 1000 };
    static float x[C * W];
    uint64_t st = 12345;
    for (int c = 0; c < C; c++)
        for (int t = 0; t < W; t++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            x[c * W + t] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5) * 100.0f;
        }
    double noise = bs_batch_railed_fraction(x, C, W, H, H + N);
    CHECK_MSG(noise <= 2.0 / N, "noise: %g", noise); /* each channel: its one min and one max */
    for (int t = 0; t < W; t++)
        x[0 * W + t] = t < H || t >= H + N ? 50.0f : 7.0f; /* flat in the batch, not in the halo */
    for (int t = H; t < H + N; t++)
        if (t % 2)
            x[1 * W + t] = t % 4 == 1 ? 1000.0f : -1000.0f; /* clipped at ±1000 half of the time */
    double f = bs_batch_railed_fraction(x, C, W, H, H + N);
    double want = (1.0 + 0.5 + 2.0 * 2.0 / N) / C;
    CHECK_MSG(f >= (1.0 + 0.5) / C && f <= want + 1e-12, "flat + clipped: %g, expected about %g", f, want);
    CHECK(bs_batch_railed_fraction(x, C, W, H, H) == 1.0); /* no samples: nothing to estimate from */

    /* the same fraction as one sequential pass over each channel, on rows with ties, NaNs (also as the first
       value) and both zeros, over spans of any length */
    for (int c = 0; c < C; c++)
        for (int t = 0; t < W; t++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            int r = (int)(st >> 59); /* 0..31 */
            x[c * W + t] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : c != 2 ? (float)(r % 7) - 3.0f : (float)(st >> 44);
        }
    x[2 * W + H] = NAN;
    int same = 1;
    for (int lo = H; lo < H + 40; lo += 13)
        for (int hi = lo + 1; hi <= W; hi += 37) {
            const float keep = x[3 * W + hi - 1];
            x[3 * W + hi - 1] = 1e9f; /* a unique maximum last */
            double ref = 0;
            for (int c = 0; c < C; c++) {
                const float *r = x + c * W;
                float mn = r[lo], mx = r[lo];
                for (int t = lo + 1; t < hi; t++) {
                    mn = r[t] < mn ? r[t] : mn;
                    mx = r[t] > mx ? r[t] : mx;
                }
                int64_t n = 0;
                for (int t = lo; t < hi; t++)
                    n += r[t] == mn || r[t] == mx;
                ref += (double)n / (double)(hi - lo);
            }
            same &= bs_batch_railed_fraction(x, C, W, lo, hi) == ref / C;
            x[3 * W + hi - 1] = keep;
        }
    CHECK(same);
}

int main(void)
{
    g_dir = test_tmpdir();
    test_f16_direct();

    CHECK(bs_batch_count(0, 10) == 0 && bs_batch_count(1, 10) == 1 && bs_batch_count(10, 10) == 1);
    CHECK(bs_batch_count(11, 10) == 2 && bs_batch_count(5, 0) == 0);

    /* exact reconstruction and edge replication */
    CHECK_MSG(check_all(1000, 128, 16, 0) == 0, "NB does not divide T");
    CHECK_MSG(check_all(1000, 100, 150, 0) == 0, "halo > NB");
    CHECK_MSG(check_all(50, 128, 10, 0) == 0, "T < NB");
    CHECK_MSG(check_all(1000, 100, 0, 0) == 0, "no halo");
    CHECK_MSG(check_all(1000, 128, 16, 30) == 0, "3-row raw blocks");
    CHECK_MSG(check_all(999, 97, 1000, 1) == 0, "1-row raw blocks, halo > T");
    CHECK_MSG(check_all(1, 16, 3, 0) == 0, "one sample");
    CHECK_MSG(check_all(20000, 3000, 61, 0) == 0, "several aligned blocks per read");
    test_read_ahead();
    if (!g_direct_used)
        fprintf(stderr, "note: %s takes no O_DIRECT; only the page cache path was read\n", g_dir);

    /* replication values spelled out: T = 10, NB = 4, halo = 3 */
    {
        bs_recording rec;
        CHECK(open_i16(&rec, 10, 1.0) == BS_OK);
        bs_batch_reader r;
        CHECK(bs_batch_reader_open(&r, &rec, 4, 3, 0) == BS_OK && r.n_batches == 3);
        float *w;
        int64_t nv;
        /* batch 0: channel 1 (column 0) = samples 0 0 0 | 0 1 2 3 | 4 5 6 */
        CHECK(bs_batch_read(&r, 0, &w, &nv) == BS_OK && nv == 4);
        const int64_t s0[10] = {0, 0, 0, 0, 1, 2, 3, 4, 5, 6};
        for (int j = 0; j < 10; j++)
            CHECK(w[10 + j] == (float)sig16(s0[j], 0));
        /* batch 2: samples 5 6 7 | 8 9 9 9 | 9 9 9 */
        CHECK(bs_batch_read(&r, 2, &w, &nv) == BS_OK && nv == 2);
        const int64_t s2[10] = {5, 6, 7, 8, 9, 9, 9, 9, 9, 9};
        for (int j = 0; j < 10; j++)
            CHECK(w[10 + j] == (float)sig16(s2[j], 0));
        CHECK(w[0 * 10 + 4] == (float)sig16(9, 4)); /* channel 0 reads column 4 */
        bs_batch_reader_close(&r);
        bs_recording_close(&rec);
    }

    test_spike_at_boundary();
    test_scaling();
    test_nan();
    test_bytes();
    test_threads();
    test_railed();

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
