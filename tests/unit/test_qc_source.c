/*
 * test_qc_source.c - OUT/source.json (src/export/source.h): a raw recording
 * opened with every option (uint16 with the default offset, header bytes,
 * µV/bit, fs, a Kilosort probe file, a relative path) is written, read back
 * and reopened identically from another working directory; a recording
 * whose length changed since is refused; malformed or missing files give
 * BS_ERR_INPUT with a message naming the field.
 */
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#include "export/source.h"
#include "io/recording.h"
#include "mem/mem.h"

static void write_raw(const char *path, int n_cols, int64_t n, int header)
{
    FILE *fp = fopen(path, "wb");
    for (int i = 0; i < header; i++)
        fputc('h', fp);
    for (int64_t t = 0; t < n; t++)
        for (int c = 0; c < n_cols; c++) {
            uint16_t v = (uint16_t)(32768 + 100 * c + (t % 50));
            fwrite(&v, 2, 1, fp);
        }
    fclose(fp);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
}

#define BAD_SOURCE(dir, text, phrase)                                                                       \
    do {                                                                                                    \
        char p_[4400];                                                                                      \
        snprintf(p_, sizeof p_, "%s/source.json", dir);                                                     \
        write_text(p_, text);                                                                               \
        bs_source s_;                                                                                       \
        bs_status st_ = bs_source_read(dir, &s_);                                                           \
        CHECK_MSG(st_ == BS_ERR_INPUT, "status %d for %s", (int)st_, text);                                 \
        CHECK_MSG(strstr(bs_last_error(), phrase) != NULL, "message '%s' lacks '%s'", bs_last_error(), phrase); \
    } while (0)

int main(void)
{
    const char *dir = test_tmpdir();
    char probe[4200], raw[4200], out[4200], other[4200], cwd[4200];
    char *probe_abs = realpath(test_env("BS_TEST_DATA", "tests/data"), NULL);
    snprintf(probe, sizeof probe, "%s/probes/ks_probe.json", probe_abs ? probe_abs : "tests/data");
    free(probe_abs);
    snprintf(raw, sizeof raw, "%s/rec.bin", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(other, sizeof other, "%s/elsewhere", dir);
    char cmd[17000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s' '%s'", out, other, out, other);
    CHECK(system(cmd) == 0);
    write_raw(raw, 8, 1000, 16);

    /* open from the folder with a relative path, as a user would type it */
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir) == 0);
    bs_open_options opt = {.probe_path = probe, .fs_hz = 25000, .dtype = "uint16", .uv_per_bit = 0.5,
                           .header_bytes = 16};
    bs_recording rec;
    bs_status st = bs_recording_open("rec.bin", &opt, &rec);
    CHECK(st == BS_OK);
    if (st != BS_OK) {
        fprintf(stderr, "%s (is BS_TEST_DATA set?)\n", bs_last_error());
        TEST_MAIN_END();
    }
    CHECK(bs_source_write(out, "rec.bin", &opt, &rec) == BS_OK);

    /* read back from another directory */
    CHECK(chdir(other) == 0);
    bs_source s;
    CHECK(bs_source_read(out, &s) == BS_OK);
    CHECK(s.recording[0] == '/' && strstr(s.recording, "/rec.bin") != NULL);
    CHECK(strcmp(s.probe, probe) == 0 && s.opt.probe_path == s.probe);
    CHECK(s.opt.fs_hz == 25000 && s.opt.uv_per_bit == 0.5 && s.opt.header_bytes == 16 && s.opt.offset == 0);
    CHECK(s.opt.dtype && strcmp(s.opt.dtype, "uint16") == 0 && s.opt.n_cols == 0 && s.opt.probe_index == 0);
    CHECK(s.n_chan == 6 && s.n_samples == 1000 && s.fs_hz == 25000 && strcmp(s.format, "raw") == 0);
    bs_recording r2;
    st = bs_source_open(&s, &r2);
    CHECK(st == BS_OK);
    if (st != BS_OK)
        TEST_MAIN_END();
    CHECK(r2.n_samples == rec.n_samples && r2.n_cols == rec.n_cols && r2.dtype == BS_SAMPLE_U16);
    CHECK(r2.data_offset == 16 && r2.offset == rec.offset && r2.offset == 32768);
    CHECK(r2.uv_per_bit[0] == rec.uv_per_bit[0] && r2.probe.n_chan == 6);
    for (int c = 0; c < 6; c++)
        CHECK(r2.probe.column[c] == rec.probe.column[c] && r2.probe.x_um[c] == rec.probe.x_um[c] &&
              r2.probe.y_um[c] == rec.probe.y_um[c]);
    bs_recording_close(&r2);

    /* the recording grew since the sort */
    write_raw(raw, 8, 1010, 16);
    CHECK(bs_source_open(&s, &r2) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "changed since the sort") != NULL);
    CHECK(chdir(cwd) == 0);
    bs_recording_close(&rec);

    /* missing and malformed files */
    bs_source s2;
    CHECK(bs_source_read(other, &s2) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "--recording") != NULL);
    BAD_SOURCE(other, "{not json", "not valid JSON");
    BAD_SOURCE(other, "{\"format_version\": 2, \"recording\": \"/x\", \"open_options\": {}}", "format_version");
    BAD_SOURCE(other, "{\"format_version\": 1, \"open_options\": {}}", "recording");
    BAD_SOURCE(other, "{\"format_version\": 1, \"recording\": \"/x\"}", "open_options");
    BAD_SOURCE(other, "{\"format_version\": 1, \"recording\": \"/x\", \"open_options\": {\"dtype\": \"int8\"}}",
               "open_options.dtype");
    BAD_SOURCE(other, "{\"format_version\": 1, \"recording\": \"/x\", \"open_options\": {\"fs_hz\": -5}}", "fs_hz");
    BAD_SOURCE(other, "{\"format_version\": 1, \"recording\": 7, \"open_options\": {}}", "recording");
    /* a valid file naming a missing recording: the open fails with the reader's message */
    write_text(strcat(strcpy(cmd, other), "/source.json"),
               "{\"format_version\": 1, \"recording\": \"/nonexistent/rec.bin\", \"open_options\": {}}");
    CHECK(bs_source_read(other, &s2) == BS_OK);
    CHECK(bs_source_open(&s2, &r2) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "cannot open the recording") != NULL);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
