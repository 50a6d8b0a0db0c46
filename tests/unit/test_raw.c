/*
 * test_raw.c - opening raw binaries through bs_recording_open: column count
 * from the probe or the options, sample count from the file size, header
 * bytes, dtypes and offsets, the empty file, and refused inputs (each checked
 * for the status and a key phrase of the message).
 */
#include "test.h"

#include <stdint.h>

#include "io/batch.h"
#include "io/recording.h"
#include "mem/mem.h"

static const char *g_dir;

static const char *tmp(const char *name)
{
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_bytes(const char *path, size_t n, unsigned char fill)
{
    FILE *fp = fopen(path, "wb");
    for (size_t i = 0; i < n; i++)
        fputc(fill, fp);
    fclose(fp);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
}

static const char *fixture(const char *name)
{
    static char buf[4200];
    snprintf(buf, sizeof buf, "%s/probes/%s", test_env("BS_TEST_DATA", "tests/data"), name);
    return buf;
}

#define BAD_OPEN(path, opt, phrase)                                                                          \
    do {                                                                                                     \
        bs_recording r_;                                                                                     \
        bs_status st_ = bs_recording_open(path, opt, &r_);                                                   \
        CHECK_MSG(st_ == BS_ERR_INPUT, "status %d", (int)st_);                                               \
        CHECK_MSG(strstr(bs_last_error(), phrase) != NULL, "message '%s' lacks '%s'", bs_last_error(), phrase); \
        CHECK(r_.probe.n_chan == 0 && r_.uv_per_bit == NULL);                                                \
        if (st_ == BS_OK)                                                                                    \
            bs_recording_close(&r_);                                                                         \
    } while (0)

int main(void)
{
    g_dir = test_tmpdir();
    bs_recording rec;

    /* dtype names */
    bs_sample_type t;
    CHECK(bs_sample_type_parse(NULL, &t) == BS_OK && t == BS_SAMPLE_I16);
    CHECK(bs_sample_type_parse("uint16", &t) == BS_OK && t == BS_SAMPLE_U16);
    CHECK(bs_sample_type_parse("f4", &t) == BS_OK && t == BS_SAMPLE_F32);
    CHECK(bs_sample_type_parse("INT32", &t) == BS_OK && t == BS_SAMPLE_I32);
    CHECK(bs_sample_type_parse("int8", &t) == BS_ERR_USAGE && strstr(bs_last_error(), "got 'int8'"));
    CHECK(strcmp(bs_sample_type_name(BS_SAMPLE_F32), "float32") == 0);
    CHECK(bs_sample_type_parse("f2", &t) == BS_OK && t == BS_SAMPLE_F16 && bs_sample_bytes(t) == 2);
    CHECK(strcmp(bs_sample_type_name(BS_SAMPLE_F16), "float16") == 0);

    /* int16, columns from the probe (pi_2shank needs 12), 100 samples */
    const char *bin12 = tmp("rec12.bin");
    write_bytes(bin12, 12 * 2 * 100, 0);
    bs_open_options opt = {.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000};
    CHECK(bs_recording_open(bin12, &opt, &rec) == BS_OK);
    CHECK(rec.n_cols == 12 && rec.n_samples == 100 && rec.dtype == BS_SAMPLE_I16 && rec.data_offset == 0);
    CHECK(rec.probe.n_chan == 11 && rec.offset == 0.0f && rec.uv_per_bit[10] == 1.0f);
    CHECK(strcmp(rec.format, "raw") == 0 && strcmp(rec.data_path, bin12) == 0 && rec.fs_hz == 30000.0);
    CHECK_NEAR(bs_recording_duration_s(&rec), 100.0 / 30000.0, 1e-15);
    bs_recording_close(&rec);

    /* explicit column count, header bytes, float32, uv_per_bit */
    const char *binh = tmp("rech.bin");
    write_bytes(binh, 64 + 16 * 4 * 25, 0);
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 2500, .n_cols = 16,
                            .dtype = "float32", .uv_per_bit = 0.5, .header_bytes = 64};
    CHECK(bs_recording_open(binh, &opt, &rec) == BS_OK);
    CHECK(rec.n_cols == 16 && rec.n_samples == 25 && rec.data_offset == 64 && rec.dtype == BS_SAMPLE_F32);
    CHECK(rec.uv_per_bit[0] == 0.5f && rec.uv_per_bit[10] == 0.5f);
    bs_recording_close(&rec);

    /* uint16: offset defaults to mid-scale, or as given */
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .dtype = "uint16"};
    CHECK(bs_recording_open(bin12, &opt, &rec) == BS_OK && rec.offset == 32768.0f && rec.dtype == BS_SAMPLE_U16);
    bs_recording_close(&rec);
    opt.offset = 100;
    CHECK(bs_recording_open(bin12, &opt, &rec) == BS_OK && rec.offset == 100.0f);
    bs_recording_close(&rec);

    /* Kilosort probe: n_chan = 8 columns */
    const char *bin8 = tmp("rec8.bin");
    write_bytes(bin8, 8 * 2 * 7, 0);
    opt = (bs_open_options){.probe_path = fixture("ks_probe.json"), .fs_hz = 30000};
    CHECK(bs_recording_open(bin8, &opt, &rec) == BS_OK && rec.n_cols == 8 && rec.n_samples == 7);
    bs_recording_close(&rec);

    /* second probe of a group */
    opt = (bs_open_options){.probe_path = fixture("pi_group2.json"), .fs_hz = 30000, .probe_index = 1};
    CHECK(bs_recording_open(bin8, &opt, &rec) == BS_OK && rec.n_cols == 8 && rec.probe.column[0] == 4);
    bs_recording_close(&rec);

    /* empty data: opens with no samples and no batches */
    const char *empty = tmp("empty.bin");
    write_bytes(empty, 0, 0);
    opt = (bs_open_options){.probe_path = fixture("ks_probe.json"), .fs_hz = 30000};
    CHECK(bs_recording_open(empty, &opt, &rec) == BS_OK && rec.n_samples == 0);
    CHECK(bs_batch_count(rec.n_samples, 1000) == 0 && bs_recording_duration_s(&rec) == 0.0);
    bs_batch_reader br;
    CHECK(bs_batch_reader_open(&br, &rec, 1000, 10, 0) == BS_OK && br.n_batches == 0);
    float *w;
    int64_t nv;
    CHECK(bs_batch_read(&br, 0, &w, &nv) == BS_ERR_INTERNAL);
    bs_batch_reader_close(&br);
    bs_recording_close(&rec);

    /* refused inputs */
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .n_cols = 16};
    const char *odd = tmp("odd.bin");
    write_bytes(odd, 12 * 2 * 101, 0); /* 2424 bytes: not a multiple of 16 x 2 */
    BAD_OPEN(odd, &opt, "2424 data bytes is not a multiple of the sample size 16 columns x 2 bytes = 32 bytes");
    BAD_OPEN(odd, &opt, "odd.bin");
    opt.n_cols = 10; /* the probe reads column 11 */
    BAD_OPEN(bin12, &opt, "maps to data column 11, expected 0..9");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json")};
    BAD_OPEN(bin12, &opt, "sampling rate (--fs): expected a rate > 0 Hz");
    opt.fs_hz = -5;
    BAD_OPEN(bin12, &opt, "expected a rate > 0 Hz, got -5");
    opt = (bs_open_options){.probe_path = "/nonexistent/p.json", .fs_hz = 30000};
    BAD_OPEN(bin12, &opt, "/nonexistent/p.json: cannot open");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .dtype = "int8"};
    BAD_OPEN(bin12, &opt, "dtype: expected int16, uint16, int32, float32 or float16");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .uv_per_bit = -1};
    BAD_OPEN(bin12, &opt, "uv_per_bit (--uv-per-bit): expected a finite value > 0");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .dtype = "int32",
                            .uv_per_bit = 1e30};
    BAD_OPEN(bin12, &opt, "expected scaled int32 values to fit a float32");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000, .header_bytes = 5000};
    BAD_OPEN(bin12, &opt, "fewer than the 5000 header bytes");
    opt = (bs_open_options){.probe_path = fixture("pi_2shank.json"), .fs_hz = 30000};
    BAD_OPEN("/nonexistent/rec.bin", &opt, "/nonexistent/rec.bin: cannot open the recording");
    opt = (bs_open_options){.probe_path = fixture("pi_group2.json"), .fs_hz = 30000, .probe_index = 5};
    BAD_OPEN(bin8, &opt, "probe index 5 requested");
    const char *badprobe = tmp("bad_probe.json");
    write_text(badprobe, "{\"chanMap\":[0,9],\"xc\":[0,0],\"yc\":[0,10],\"n_chan\":8}");
    opt = (bs_open_options){.probe_path = badprobe, .fs_hz = 30000};
    BAD_OPEN(bin8, &opt, "chanMap[1] = 9: expected a column in 0..7");
    /* no probe file: a plain file is not recognised; a .bin with .meta goes to the SpikeGLX reader */
    BAD_OPEN(bin8, NULL, "unrecognised recording");
    const char *glx = tmp("x.ap.bin");
    write_bytes(glx, 16, 0);
    write_bytes(tmp("x.ap.meta"), 4, 'a');
    BAD_OPEN(glx, NULL, "x.ap.meta: line 1: expected key=value");
    CHECK(bs_raw_open(bin8, NULL, &rec) == BS_ERR_INPUT && strstr(bs_last_error(), "needs a probe file"));

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
