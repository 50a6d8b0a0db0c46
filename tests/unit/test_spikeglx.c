/*
 * test_spikeglx.c - the SpikeGLX reader against real metadata and
 * probeinterface.
 *
 * For every real .meta in tests/data/spikeglx/meta/ (probeinterface's test
 * data, see tests/data/README.md) the test writes a copy and a 100-sample
 * int16 binary of nSavedChans columns into $BS_TMP, opens it with bs_spikeglx_open and compares the sorted channels
 * with tests/data/spikeglx/expected_probeinterface.txt (made by
 * make_expected.py from probeinterface's read_spikeglx): probeinterface's
 * contact k is file column k; our channels must be exactly those columns minus
 * the listed reference columns, in increasing column order, at the same
 * positions up to ONE shift of origin shared by all channels (within 0.01 µm),
 * on the same shanks. Files with ~snsGeomMap are also placed from ~imroTbl
 * alone and must agree with the map exactly. Gains are checked as exact µV/bit
 * values, and the metadata parser on CRLF, missing newlines, duplicates and
 * huge values. Malformed inputs are in test_spikeglx_malformed.c.
 */
#include "test.h"

#include <stdint.h>

#include "common/fileio.h"
#include "io/spikeglx.h"
#include "mem/mem.h"

static char *read_all(const char *path, size_t *len)
{
    char *text = NULL;
    return bs_read_text_file(path, (size_t)1 << 26, &text, len) == BS_OK ? text : NULL;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    fclose(f);
    return w == len ? 0 : -1;
}

static int write_zero_bin(const char *path, int n_cols, int n_samples)
{
    size_t bytes = (size_t)n_cols * (size_t)n_samples * 2;
    char *z = calloc(bytes ? bytes : 1, 1);
    int r = write_file(path, z, bytes);
    free(z);
    return r;
}

static void rec_free(bs_recording *rec)
{
    bs_probe_free(&rec->probe);
    bs_mem_free(rec->uv_per_bit);
    memset(rec, 0, sizeof *rec);
}

/* One fixture line: NAME|N|EXCL|x:y:s,... */
typedef struct {
    char name[256];
    int n;
    int excl[64], n_excl;
    double *x, *y;
    int *s;
} expected;

static int parse_expected(char *line, expected *e)
{
    char *f1 = strchr(line, '|');
    if (!f1)
        return -1;
    *f1++ = 0;
    snprintf(e->name, sizeof e->name, "%s", line);
    char *f2 = strchr(f1, '|');
    if (!f2)
        return -1;
    *f2++ = 0;
    e->n = atoi(f1);
    char *f3 = strchr(f2, '|');
    if (!f3)
        return -1;
    *f3++ = 0;
    e->n_excl = 0;
    if (strcmp(f2, "-") != 0)
        for (char *t = strtok(f2, ","); t && e->n_excl < 64; t = strtok(NULL, ","))
            e->excl[e->n_excl++] = atoi(t);
    e->x = malloc((size_t)e->n * sizeof *e->x);
    e->y = malloc((size_t)e->n * sizeof *e->y);
    e->s = malloc((size_t)e->n * sizeof *e->s);
    int k = 0;
    char *p = f3;
    while (k < e->n && *p) {
        char *end;
        e->x[k] = strtod(p, &end);
        if (*end != ':')
            return -1;
        e->y[k] = strtod(end + 1, &end);
        if (*end != ':')
            return -1;
        e->s[k] = (int)strtol(end + 1, &end, 10);
        k++;
        p = *end == ',' ? end + 1 : end;
    }
    return k == e->n ? 0 : -1;
}

static void check_real_file(const char *meta_dir, const char *tmp, expected *e, int *n_files)
{
    char src[4200], meta[4200], bin[4200];
    if (snprintf(src, sizeof src, "%s/%s", meta_dir, e->name) >= (int)sizeof src) {
        CHECK_MSG(0, "path too long: %s/%s", meta_dir, e->name);
        return;
    }
    size_t len;
    char *text = read_all(src, &len);
    CHECK_MSG(text != NULL, "cannot read fixture %s", src);
    if (!text)
        return;
    snprintf(meta, sizeof meta, "%s/%s", tmp, e->name);
    snprintf(bin, sizeof bin, "%s/%.*s.bin", tmp, (int)(strlen(e->name) - 5), e->name);
    CHECK(write_file(meta, text, len) == 0);

    bs_sglx_meta m;
    CHECK(bs_sglx_meta_parse(text, len, e->name, &m) == BS_OK);
    int64_t n_saved = 0;
    CHECK(bs_sglx_meta_int64(&m, "nSavedChans", 1, 100000, &n_saved) == BS_OK);
    CHECK(write_zero_bin(bin, (int)n_saved, 100) == 0);

    bs_recording rec;
    bs_status st = bs_spikeglx_open(bin, &rec);
    CHECK_MSG(st == BS_OK, "%s: %s", e->name, bs_last_error());
    if (st != BS_OK) {
        bs_sglx_meta_free(&m);
        free(text);
        return;
    }
    (*n_files)++;
    CHECK(strcmp(rec.format, "spikeglx") == 0);
    CHECK(rec.dtype == BS_SAMPLE_I16);
    CHECK(rec.n_cols == (int)n_saved);
    CHECK(rec.n_samples == 100);
    CHECK(rec.data_offset == 0);
    CHECK(strcmp(rec.data_path, bin) == 0);
    double fs;
    CHECK(bs_sglx_meta_double(&m, "imSampRate", &fs) == BS_OK);
    CHECK(rec.fs_hz == fs);

    /* the channel set: probeinterface's columns minus the reference columns */
    char *want = calloc((size_t)e->n, 1);
    for (int k = 0; k < e->n; k++)
        want[k] = 1;
    for (int i = 0; i < e->n_excl; i++)
        want[e->excl[i]] = 0;
    int n_want = 0;
    for (int k = 0; k < e->n; k++)
        n_want += want[k];
    CHECK_MSG(rec.probe.n_chan == n_want, "%s: %d sorted channels, expected %d", e->name, rec.probe.n_chan, n_want);
    int bad_set = 0, bad_pos = 0, bad_shank = 0, bad_order = 0;
    double dx = 0, dy = 0;
    for (int j = 0; j < rec.probe.n_chan; j++) {
        int c = rec.probe.column[j];
        if (c < 0 || c >= e->n || !want[c]) {
            bad_set++;
            continue;
        }
        if (j > 0 && c <= rec.probe.column[j - 1])
            bad_order++;
        if (j == 0) {
            dx = rec.probe.x_um[0] - e->x[c];
            dy = rec.probe.y_um[0] - e->y[c];
        }
        if (fabs(rec.probe.x_um[j] - e->x[c] - dx) > 0.01 || fabs(rec.probe.y_um[j] - e->y[c] - dy) > 0.01) {
            if (bad_pos++ < 3)
                fprintf(stderr, "%s: column %d at (%g, %g), probeinterface (%g, %g) + shift (%g, %g)\n", e->name, c,
                        rec.probe.x_um[j], rec.probe.y_um[j], e->x[c], e->y[c], dx, dy);
        }
        if (rec.probe.shank[j] != e->s[c])
            bad_shank++;
    }
    CHECK_MSG(bad_set == 0, "%s: %d channels outside probeinterface's set", e->name, bad_set);
    CHECK_MSG(bad_order == 0, "%s: channels not in column order", e->name);
    CHECK_MSG(bad_pos == 0, "%s: %d positions differ beyond one shift", e->name, bad_pos);
    CHECK_MSG(bad_shank == 0, "%s: %d shank ids differ", e->name, bad_shank);
    for (int j = 0; j < rec.probe.n_chan; j++)
        if (!(rec.uv_per_bit[j] > 0.1f && rec.uv_per_bit[j] < 20.0f)) {
            CHECK_MSG(0, "%s: channel %d has %g µV/bit", e->name, j, rec.uv_per_bit[j]);
            break;
        }

    /* ~snsGeomMap and ~imroTbl must agree exactly (both measure x from the shank's left edge) */
    if (bs_sglx_meta_get(&m, "snsGeomMap")) {
        bs_sglx_info a, b;
        CHECK(bs_sglx_info_from_meta(&m, 0, &a) == BS_OK);
        st = bs_sglx_info_from_meta(&m, BS_SGLX_IGNORE_GEOMMAP, &b);
        CHECK_MSG(st == BS_OK, "%s: %s", e->name, bs_last_error());
        if (st == BS_OK) {
            CHECK(a.geometry_from_geommap == 1 && b.geometry_from_geommap == 0);
            CHECK(a.probe.n_chan == b.probe.n_chan);
            int diff = 0;
            for (int j = 0; j < a.probe.n_chan && j < b.probe.n_chan; j++)
                diff += a.probe.x_um[j] != b.probe.x_um[j] || a.probe.y_um[j] != b.probe.y_um[j] ||
                        a.probe.shank[j] != b.probe.shank[j] || a.probe.column[j] != b.probe.column[j];
            CHECK_MSG(diff == 0, "%s: snsGeomMap and imroTbl disagree on %d channels", e->name, diff);
            bs_sglx_info_free(&b);
        }
        bs_sglx_info_free(&a);
    }
    free(want);
    rec_free(&rec);
    bs_sglx_meta_free(&m);
    free(text);
}

/* Open a real meta by name from the fixture folder and fill its info: 1 on
 * success; otherwise a failed check that names the file and the reason (a
 * missing fixture fails loudly) and 0, and the caller skips the checks on
 * the info's fields. */
static int info_of(const char *meta_dir, const char *name, bs_sglx_info *info)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", meta_dir, name);
    memset(info, 0, sizeof *info);
    bs_sglx_meta m;
    bs_status st = bs_sglx_meta_read(path, &m);
    if (st == BS_OK) {
        st = bs_sglx_info_from_meta(&m, 0, info);
        bs_sglx_meta_free(&m);
    }
    CHECK_MSG(st == BS_OK, "%s: %s", path, bs_last_error());
    return st == BS_OK;
}

static int find_col(const bs_sglx_info *info, int col)
{
    for (int j = 0; j < info->probe.n_chan; j++)
        if (info->probe.column[j] == col)
            return j;
    return -1;
}

/* The ADC sampling delays against SpikeInterface's (expected_sample_shifts.txt, per saved AP column, made
 * by make_expected_shifts.py): every sorted channel's adc_shift equals its column's value. Returns the
 * files compared. */
static int check_sample_shifts(const char *data, const char *meta_dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/spikeglx/expected_sample_shifts.txt", data);
    size_t len;
    char *fx = read_all(path, &len), *save = NULL;
    CHECK_MSG(fx != NULL, "cannot read %s", path);
    int n = 0;
    for (char *line = fx ? strtok_r(fx, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        char *bar = strchr(line, '|');
        if (line[0] == '#' || !bar)
            continue;
        *bar = '\0';
        bs_sglx_info info;
        if (!info_of(meta_dir, line, &info))
            continue;
        n++;
        if (strcmp(bar + 1, "-") == 0) {
            CHECK_MSG(info.probe.adc_shift == NULL, "%s: SpikeInterface knows no shifts, boundsort does", line);
        } else {
            CHECK_MSG(info.probe.adc_shift != NULL, "%s: no ADC shifts (part %s)", line, info.part_number);
            char *p = bar + 1, *end;
            int worst_col = -1;
            for (int col = 0; *p && info.probe.adc_shift; col++, p = *end ? end + 1 : end) {
                double want = strtod(p, &end);
                int j = find_col(&info, col);
                if (j >= 0 && fabs(info.probe.adc_shift[j] - want) > 1e-6 && worst_col < 0)
                    worst_col = col;
            }
            CHECK_MSG(worst_col < 0, "%s: column %d's shift differs from SpikeInterface's", line, worst_col);
        }
        bs_sglx_info_free(&info);
    }
    free(fx);
    return n;
}

static void check_gains_and_layouts(const char *meta_dir)
{
    bs_sglx_info in;
    /* NP1.0, no imMaxInt (10-bit part: 512), gain 500: 0.6 / 512 / 500 = 2.34375 µV */
    if (info_of(meta_dir, "Noise_g0_t0.imec0.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 383 && in.n_saved_chans == 385 && in.sync_column == 384);
        CHECK(in.n_ap == 384 && in.n_lf == 0 && in.n_sy == 1);
        CHECK(find_col(&in, 191) < 0 && find_col(&in, 190) == 190 && find_col(&in, 192) == 191);
        CHECK(in.uv_per_bit[0] == 2.34375f && in.uv_per_bit[382] == 2.34375f);
        CHECK(strcmp(in.probe.model, "PRB_1_4_0480_1") == 0);
        /* staggered: electrode 0 at x 27, electrode 1 at 59, electrode 2 (row 1) at 11, 20 µm rows */
        CHECK_NEAR(in.probe.x_um[0], 27, 1e-12);
        CHECK_NEAR(in.probe.x_um[1], 59, 1e-12);
        CHECK_NEAR(in.probe.x_um[2], 11, 1e-12);
        CHECK_NEAR(in.probe.y_um[2], 20, 1e-12);
        CHECK(in.first_sample == 177385 && in.meta_file_bytes == 121625350);
        bs_sglx_info_free(&in);
    }

    /* NP2.0 single shank type 21: 0.5 / 8192 / 80 */
    if (info_of(meta_dir, "p2_g0_t0.imec0.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 383 && find_col(&in, 127) < 0);
        CHECK_NEAR(in.uv_per_bit[0], 0.5 / 8192 / 80 * 1e6, 1e-7);
        CHECK_NEAR(in.probe.x_um[0], 27, 1e-12);
        CHECK_NEAR(in.probe.y_um[2], 15, 1e-12);
        bs_sglx_info_free(&in);
    }

    /* NP2013 four shanks from snsGeomMap: 0.62 / 2048 / 100 = 3.02734375; subset of 120 AP channels */
    if (info_of(meta_dir, "NP2_2013_subset_channels.imec0.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 120 && in.n_saved_chans == 121 && in.sync_column == 120);
        CHECK(in.uv_per_bit[5] == 3.02734375f);
        CHECK(in.geometry_from_geommap == 1);
        CHECK(in.acq_chan[36] == 72 && in.acq_chan[119] == 287);
        bs_sglx_info_free(&in);
    }

    /* four shanks, electrodes on shank 3: x = 3 * 250 + 27 */
    if (info_of(meta_dir, "NP2_4_shanks_save_different_electrodes.imec0.ap.meta", &in)) {
        CHECK(in.probe.shank[0] == 3 && in.probe.n_shanks == 4);
        CHECK_NEAR(in.probe.x_um[0], 777, 1e-12);
        CHECK_NEAR(in.uv_per_bit[0], 0.5 / 8192 / 80 * 1e6, 1e-7);
        bs_sglx_info_free(&in);
    }

    /* NP1.0 subset 0:150,768: 151 AP channels, 191 not saved so nothing excluded */
    if (info_of(meta_dir, "NP1_saved_only_subset_of_channels.meta", &in)) {
        CHECK(in.probe.n_chan == 151 && in.n_saved_chans == 152 && in.sync_column == 151);
        bs_sglx_info_free(&in);
    }

    /* NP2020: part number in the imro header, 4 SY columns */
    if (info_of(meta_dir, "NP2020_sample_g0_t0.imec0.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 1536 && in.n_sy == 4 && in.sync_column == 1536 && in.probe.n_shanks == 4);
        CHECK(strcmp(in.part_number, "NP2020") == 0);
        CHECK(in.uv_per_bit[0] == 3.02734375f);
        bs_sglx_info_free(&in);
    }

    /* phase 3A: ten reference channels out */
    if (info_of(meta_dir, "phase3a.imec.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 374 && find_col(&in, 36) < 0 && find_col(&in, 379) < 0);
        CHECK(strcmp(in.part_number, "phase3A") == 0);
        CHECK(in.uv_per_bit[0] == 2.34375f);
        bs_sglx_info_free(&in);
    }

    /* NP1110 (UHD2): gain from the imro header, 6 µm grid */
    if (info_of(meta_dir, "NP1110_bank0_g0_t0.imec0.ap.meta", &in)) {
        CHECK(in.probe.n_chan == 384 && in.uv_per_bit[100] == 2.34375f);
        CHECK_NEAR(in.probe.x_um[0], 15.5, 1e-12);
        bs_sglx_info_free(&in);
    }

    /* NHP long (NP1030): 87 µm column pitch */
    if (info_of(meta_dir, "non_human_primate_long_staggered.imec0.ap.meta", &in)) {
        CHECK_NEAR(in.probe.x_um[1] - in.probe.x_um[0], 87, 1e-12);
        bs_sglx_info_free(&in);
    }

    /* CatGT output, calibrated rate */
    if (info_of(meta_dir, "catgt.meta", &in)) {
        CHECK(in.fs_hz == 30000.149579831934);
        bs_sglx_info_free(&in);
    }
}

/* A small NP1.0 meta written by hand. */
static const char *np1_meta(char *buf, size_t len, const char *eol, const char *extra, int gain5)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, len - n,
                          "imSampRate=30000%snSavedChans=5%stypeThis=imec%ssnsApLfSy=4,0,1%sacqApLfSy=384,384,1%s"
                          "snsSaveChanSubset=3:5,191,768%simAiRangeMax=0.6%simMaxInt=512%simDatPrb_pn=NP1000%s%s",
                          eol, eol, eol, eol, eol, eol, eol, eol, eol, extra);
    n += (size_t)snprintf(buf + n, len - n, "~imroTbl=(0,384)");
    for (int ch = 0; ch < 384; ch++)
        n += (size_t)snprintf(buf + n, len - n, "(%d 0 0 %d 250 1)", ch, ch == 5 ? gain5 : 500);
    return buf;
}

/* ~muxTbl: the slots it lists (channels 3, 4, 5 sorted; NP1.0: 13 slots), the standard order without it,
 * and a malformed or incomplete table (a warning; the standard order, or no shift). */
static void check_mux_tables(void)
{
    static char buf[64 * 1024];
    static const struct {
        const char *mux;
        float want[3]; /* channels 3, 4, 5; -1: no shifts */
    } cases[] = {
        {"", {1 / 13.f, 2 / 13.f, 2 / 13.f}},
        {"~muxTbl=(32,12)(4)(3)(5)()()()()()()()()()\n", {1 / 13.f, 0, 2 / 13.f}},
        {"~muxTbl=(32,12)(4 4)(3)(5)()()()()()()()()()\n", {1 / 13.f, 2 / 13.f, 2 / 13.f}}, /* twice: standard */
        {"~muxTbl=(32,12)(4)(3)()()()()()()()()()()\n", {-1, -1, -1}},                       /* 5 has no slot */
        {"~muxTbl=(32,12\n", {1 / 13.f, 2 / 13.f, 2 / 13.f}}, /* a header cut short (the fuzzer's find): standard */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        np1_meta(buf, sizeof buf, "\n", cases[i].mux, 500);
        bs_probe p;
        float *uv;
        int n_saved;
        double fs;
        bs_status st = bs_spikeglx_probe_from_meta(buf, strlen(buf), "mux.meta", &p, &uv, &n_saved, &fs);
        CHECK_MSG(st == BS_OK, "case %zu: %s", i, bs_last_error());
        if (st != BS_OK)
            continue;
        CHECK(p.n_chan == 3 && (p.adc_shift != NULL) == (cases[i].want[0] >= 0));
        for (int j = 0; j < 3 && p.adc_shift; j++)
            CHECK_MSG(fabsf(p.adc_shift[j] - cases[i].want[j]) < 1e-6f, "case %zu channel %d: %g", i, j,
                      (double)p.adc_shift[j]);
        bs_probe_free(&p);
        bs_mem_free(uv);
    }
}

static void check_parser_and_gains(void)
{
    static char buf[64 * 1024];
    bs_probe p;
    float *uv;
    int n_saved;
    double fs;

    /* CRLF, no trailing newline, per-channel gain indexed by acquired id (ch 5 has 250) */
    np1_meta(buf, sizeof buf, "\r\n", "", 250);
    CHECK(bs_spikeglx_probe_from_meta(buf, strlen(buf), "crlf.meta", &p, &uv, &n_saved, &fs) == BS_OK);
    CHECK(n_saved == 5 && fs == 30000.0);
    CHECK(p.n_chan == 3); /* 3, 4, 5 (191 is the reference, 768 is SY) */
    CHECK(p.column[0] == 0 && p.column[2] == 2);
    CHECK(uv && uv[0] == 2.34375f && uv[2] == 4.6875f);
    /* channel 3 = electrode 3: row 1 (odd) col 1 -> x = 11 + 32, y = 20 */
    CHECK_NEAR(p.x_um[0], 43, 1e-12);
    CHECK_NEAR(p.y_um[0], 20, 1e-12);
    bs_probe_free(&p);
    bs_mem_free(uv);

    /* lone CR line ends, '~' keys, duplicate keys: the last value wins */
    np1_meta(buf, sizeof buf, "\r", "imSampRate=25000.5\r", 500);
    CHECK(bs_spikeglx_probe_from_meta(buf, strlen(buf), "cr.meta", &p, &uv, &n_saved, &fs) == BS_OK);
    CHECK(fs == 25000.5);
    bs_probe_free(&p);
    bs_mem_free(uv);

    /* a huge value of an unused key, blank lines and spaces around '=' */
    bs_sglx_meta m;
    size_t big = 3u << 20;
    char *huge = malloc(big + 4096);
    memcpy(huge, "userNotes = ", 12);
    memset(huge + 12, 'x', big);
    size_t n = 12 + big;
    huge[n++] = '\n';
    huge[n++] = '\n';
    memcpy(huge + n, "  \n", 3);
    n += 3;
    np1_meta(buf, sizeof buf, "\n", "", 500);
    char *all = malloc(n + strlen(buf) + 1);
    memcpy(all, huge, n);
    memcpy(all + n, buf, strlen(buf) + 1);
    CHECK(bs_sglx_meta_parse(all, n + strlen(buf), "huge.meta", &m) == BS_OK);
    const char *notes = bs_sglx_meta_get(&m, "userNotes");
    CHECK(notes && strlen(notes) == big);
    CHECK(bs_sglx_meta_get(&m, "~imroTbl") == bs_sglx_meta_get(&m, "imroTbl"));
    CHECK(bs_sglx_meta_get(&m, "imroTbl") && strncmp(bs_sglx_meta_get(&m, "imroTbl"), "(0,384)(0 0", 11) == 0);
    CHECK(bs_sglx_meta_get(&m, "nothere") == NULL);
    bs_sglx_meta_free(&m);
    free(huge);
    free(all);

    /* an unknown part is fine with ~snsGeomMap and imChan0apGain (no imroTbl at all); x per shank */
    const char *tiny = "imSampRate=30000\r\nnSavedChans=3\r\nsnsApLfSy=2,0,1\r\nacqApLfSy=2,0,1\r\n"
                       "snsSaveChanSubset=all\r\nimAiRangeMax=0.6\r\nimChan0apGain=100\r\n"
                       "~snsGeomMap=(NPX,2,250,70)(0:27:0:1)(1:27.5:15:1)";
    CHECK(bs_spikeglx_probe_from_meta(tiny, strlen(tiny), "tiny.meta", &p, &uv, &n_saved, &fs) == BS_OK);
    CHECK(p.n_chan == 2 && p.n_shanks == 2 && p.shank[1] == 1 && strcmp(p.model, "NPX") == 0);
    CHECK_NEAR(p.x_um[1], 277.5, 1e-12);
    CHECK_NEAR(p.y_um[1], 15, 1e-12);
    CHECK(uv[0] == 11.71875f); /* 0.6 V / 512 (default imMaxInt) / 100 */
    bs_probe_free(&p);
    bs_mem_free(uv);

    /* a combined 3A-style file: AP 0:3, LF 384:387, SY 768 -> 9 columns, only the 4 AP sorted */
    np1_meta(buf, sizeof buf, "\n", "", 500);
    char *at = strstr(buf, "nSavedChans=5");
    memcpy(at, "nSavedChans=9", 13);
    at = strstr(buf, "snsApLfSy=4,0,1");
    memcpy(at, "snsApLfSy=4,4,1", 15);
    at = strstr(buf, "snsSaveChanSubset=3:5,191,768\n");
    char *rest = strdup(at + strlen("snsSaveChanSubset=3:5,191,768\n"));
    sprintf(at, "snsSaveChanSubset=0:3,384:387,768\n%s", rest);
    free(rest);
    CHECK(bs_sglx_meta_parse(buf, strlen(buf), "lf.meta", &m) == BS_OK);
    bs_sglx_info info;
    bs_status st = bs_sglx_info_from_meta(&m, 0, &info);
    CHECK_MSG(st == BS_OK, "%s", bs_last_error());
    if (st == BS_OK) {
        CHECK(info.n_ap == 4 && info.n_lf == 4 && info.n_sy == 1 && info.sync_column == 8);
        CHECK(info.probe.n_chan == 4 && info.probe.column[3] == 3 && info.acq_chan[3] == 3);
        bs_sglx_info_free(&info);
    }
    bs_sglx_meta_free(&m);

    /* the imro header written as a part number (SpikeGLX >= 20260115) reads like the type code */
    np1_meta(buf, sizeof buf, "\n", "", 250);
    CHECK(bs_spikeglx_probe_from_meta(buf, strlen(buf), "code.meta", &p, &uv, &n_saved, &fs) == BS_OK);
    bs_probe q;
    float *uq;
    char *pnform = malloc(strlen(buf) + 8);
    at = strstr(buf, "~imroTbl=(0,384)");
    sprintf(pnform, "%.*s~imroTbl=(NP1000,384)%s", (int)(at - buf), buf, at + strlen("~imroTbl=(0,384)"));
    CHECK(bs_spikeglx_probe_from_meta(pnform, strlen(pnform), "pn.meta", &q, &uq, &n_saved, &fs) == BS_OK);
    CHECK(p.n_chan == q.n_chan && q.n_chan == 3);
    for (int j = 0; j < p.n_chan && j < q.n_chan; j++)
        CHECK(p.x_um[j] == q.x_um[j] && p.y_um[j] == q.y_um[j] && uv[j] == uq[j] && p.column[j] == q.column[j]);
    free(pnform);
    bs_probe_free(&p);
    bs_probe_free(&q);
    bs_mem_free(uv);
    bs_mem_free(uq);

    /* the list parser */
    int *l, nl;
    CHECK(bs_sglx_parse_list("0:2,5,7:8", 10, "t", "f", &l, &nl) == BS_OK && nl == 6 && l[3] == 5 && l[5] == 8);
    free(l);
    CHECK(bs_sglx_parse_list("3:1", 10, "t", "f", &l, &nl) == BS_ERR_INPUT && strstr(bs_last_error(), "reversed"));
    CHECK(bs_sglx_parse_list("0:10", 10, "t", "f", &l, &nl) == BS_ERR_INPUT && strstr(bs_last_error(), "out of range"));
    CHECK(bs_sglx_parse_list("0,,1", 10, "t", "f", &l, &nl) == BS_ERR_INPUT);
    CHECK(bs_sglx_parse_list("1,", 10, "t", "f", &l, &nl) == BS_ERR_INPUT);
}

static void check_paths(const char *meta_dir, const char *tmp)
{
    char dir[4200], path[8600], meta[4300];
    size_t len;
    char src[4300];
    snprintf(src, sizeof src, "%s/p2_g0_t0.imec0.ap.meta", meta_dir);
    char *text = read_all(src, &len);
    CHECK_MSG(text != NULL, "cannot read fixture %s", src);
    if (!text)
        return;
    bs_recording rec;

    /* a folder holding one *.ap.bin; also opened through its .meta */
    snprintf(dir, sizeof dir, "%s/onefolder", tmp);
    snprintf(path, sizeof path, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(path) == 0);
    snprintf(meta, sizeof meta, "%s/run_g0_t0.imec0.ap.meta", dir);
    CHECK(write_file(meta, text, len) == 0);
    snprintf(path, sizeof path, "%s/run_g0_t0.imec0.ap.bin", dir);
    CHECK(write_zero_bin(path, 385, 7) == 0);
    snprintf(path, sizeof path, "%s/run_g0_t0.imec0.lf.bin", dir); /* not an AP binary: ignored */
    CHECK(write_zero_bin(path, 385, 1) == 0);
    CHECK(bs_spikeglx_open(dir, &rec) == BS_OK);
    CHECK(rec.n_samples == 7 && rec.probe.n_chan == 383);
    CHECK(strstr(rec.data_path, "run_g0_t0.imec0.ap.bin") != NULL);
    rec_free(&rec);
    CHECK(bs_spikeglx_open(meta, &rec) == BS_OK);
    CHECK(rec.n_samples == 7);
    rec_free(&rec);

    /* zero samples: opens with n_samples = 0 (the sorter refuses it later) */
    snprintf(path, sizeof path, "%s/run_g0_t0.imec0.ap.bin", dir);
    CHECK(write_zero_bin(path, 385, 0) == 0);
    CHECK(bs_spikeglx_open(path, &rec) == BS_OK);
    CHECK(rec.n_samples == 0 && rec.n_cols == 385);
    rec_free(&rec);

    /* two *.ap.bin: the message lists both */
    snprintf(path, sizeof path, "%s/other_g0_t0.imec1.ap.bin", dir);
    CHECK(write_zero_bin(path, 385, 1) == 0);
    CHECK(bs_spikeglx_open(dir, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "2 *.ap.bin files") && strstr(bs_last_error(), "other_g0_t0.imec1.ap.bin") &&
          strstr(bs_last_error(), "run_g0_t0.imec0.ap.bin"));
    CHECK(rec.probe.n_chan == 0 && rec.uv_per_bit == NULL);

    /* an empty folder */
    snprintf(dir, sizeof dir, "%s/emptyfolder", tmp);
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    CHECK(system(path) == 0);
    CHECK(bs_spikeglx_open(dir, &rec) == BS_ERR_INPUT && strstr(bs_last_error(), "no *.ap.bin"));

    /* neither .bin nor .meta */
    snprintf(path, sizeof path, "%s/onefolder/x.dat", tmp);
    CHECK(bs_spikeglx_open(path, &rec) == BS_ERR_INPUT && strstr(bs_last_error(), "expected a SpikeGLX .bin"));
    free(text);
}

int main(void)
{
    const char *tmp = test_tmpdir();
    const char *data = test_env("BS_TEST_DATA", "tests/data");
    char meta_dir[4200], fixture[4200];
    snprintf(meta_dir, sizeof meta_dir, "%s/spikeglx/meta", data);
    snprintf(fixture, sizeof fixture, "%s/spikeglx/expected_probeinterface.txt", data);

    size_t len;
    char *fx = read_all(fixture, &len);
    CHECK_MSG(fx != NULL, "cannot read %s", fixture);
    int n_lines = 0, n_files = 0;
    if (fx) {
        char *save = NULL;
        for (char *line = strtok_r(fx, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            if (line[0] == '#')
                continue;
            expected e;
            memset(&e, 0, sizeof e);
            int ok = parse_expected(line, &e) == 0;
            CHECK_MSG(ok, "bad fixture line for %s", e.name);
            if (ok) {
                n_lines++;
                check_real_file(meta_dir, tmp, &e, &n_files);
            }
            free(e.x);
            free(e.y);
            free(e.s);
        }
        free(fx);
    }
    /* every real file is in the fixture, and every one opened */
    CHECK_MSG(n_lines == 19, "%d fixture lines", n_lines);
    CHECK(n_files == n_lines);

    CHECK_MSG(check_sample_shifts(data, meta_dir) == 19, "the ADC shifts of every fixture compared");
    check_mux_tables();
    check_gains_and_layouts(meta_dir);
    check_parser_and_gains();
    check_paths(meta_dir, tmp);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
