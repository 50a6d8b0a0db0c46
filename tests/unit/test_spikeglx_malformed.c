/*
 * test_spikeglx_malformed.c - bad SpikeGLX inputs: each case is a real .meta
 * (from tests/data/spikeglx/meta) with one field edited, or a
 * binary of the wrong size, and must give BS_ERR_INPUT with a message naming
 * the field and what was expected (checked by a key phrase), never a crash,
 * and leave no allocation behind.
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
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    fclose(f);
    return w == len ? 0 : -1;
}

/* A copy of `text` with the line of `key` (written with or without '~')
 * replaced by "key=value", removed (value NULL), or appended if absent. */
static char *meta_edit(const char *text, const char *key, const char *value)
{
    size_t n = strlen(text), vlen = value ? strlen(value) : 0, klen = strlen(key);
    char *out = malloc(n + klen + vlen + 8);
    size_t o = 0;
    int found = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p + 1) : strlen(p);
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            found = 1;
            if (value)
                o += (size_t)sprintf(out + o, "%s=%s\n", key, value);
        } else {
            memcpy(out + o, p, ll);
            o += ll;
        }
        p += ll;
    }
    if (!found && value)
        o += (size_t)sprintf(out + o, "%s=%s\n", key, value);
    out[o] = '\0';
    return out;
}

/* Replace the first occurrence of `from` by `to`. */
static char *str_sub(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at)
        return NULL;
    size_t n = strlen(text), a = (size_t)(at - text), f = strlen(from), t = strlen(to);
    char *out = malloc(n - f + t + 1);
    memcpy(out, text, a);
    memcpy(out + a, to, t);
    memcpy(out + a + t, at + f, n - a - f + 1);
    return out;
}

static int expect_bad(const char *text, size_t len, const char *phrase, int line)
{
    bs_probe p;
    float *uv = NULL;
    int ns;
    double fs;
    if (!text) {
        fprintf(stderr, "line %d: the edit did not apply\n", line);
        return 0;
    }
    bs_status st = bs_spikeglx_probe_from_meta(text, len, "bad.meta", &p, &uv, &ns, &fs);
    int ok = st == BS_ERR_INPUT && strstr(bs_last_error(), phrase) != NULL && strstr(bs_last_error(), "bad.meta");
    if (!ok)
        fprintf(stderr, "line %d: status %d, message '%s', expected '%s'\n", line, st, bs_last_error(), phrase);
    if (st == BS_OK) {
        bs_probe_free(&p);
        bs_mem_free(uv);
    }
    return ok;
}

static int good(const char *text)
{
    bs_probe p;
    float *uv = NULL;
    int ns;
    double fs;
    bs_status st = bs_spikeglx_probe_from_meta(text, strlen(text), "good.meta", &p, &uv, &ns, &fs);
    if (st != BS_OK)
        return 0;
    bs_probe_free(&p);
    bs_mem_free(uv);
    return 1;
}

#define BAD(text, phrase)                                                        \
    do {                                                                         \
        char *t_ = (text);                                                       \
        CHECK(expect_bad(t_, t_ ? strlen(t_) : 0, phrase, __LINE__));            \
        free(t_);                                                                \
    } while (0)

int main(void)
{
    const char *tmp = test_tmpdir();
    const char *data = test_env("BS_TEST_DATA", "tests/data");
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/spikeglx/meta/Noise_g0_t0.imec0.ap.meta", data);
    char *np1 = read_all(path, &len);
    CHECK_MSG(np1 != NULL, "cannot read fixture %s", path);
    snprintf(path, sizeof path, "%s/spikeglx/meta/p2_g0_t0.imec0.ap.meta", data);
    char *np2 = read_all(path, &len);
    CHECK_MSG(np2 != NULL, "cannot read fixture %s", path);
    snprintf(path, sizeof path, "%s/spikeglx/meta/NP2_2013_all_channels.imec0.ap.meta", data);
    char *geo = read_all(path, &len);
    CHECK_MSG(geo != NULL, "cannot read fixture %s", path);
    if (!np1 || !np2 || !geo)
        TEST_MAIN_END();
    /* the unedited files are good */
    CHECK(good(np1) && good(np2) && good(geo));

    /* metadata fields */
    BAD(meta_edit(np1, "nSavedChans", NULL), "field 'nSavedChans' is missing");
    BAD(meta_edit(np1, "imSampRate", "30kHz"), "field 'imSampRate': expected a number, got '30kHz'");
    BAD(meta_edit(np1, "imSampRate", "-5"), "field 'imSampRate': expected a rate in Hz > 0");
    BAD(meta_edit(np1, "nSavedChans", "384"), "field 'nSavedChans' is 384 but snsSaveChanSubset lists 385 channels");
    BAD(meta_edit(np1, "nSavedChans", "12x"), "field 'nSavedChans': expected an integer, got '12x'");
    BAD(meta_edit(np1, "snsSaveChanSubset", "0:383,769"), "'snsSaveChanSubset': channel 769 is out of range, expected 0..768");
    BAD(meta_edit(np1, "snsSaveChanSubset", "0:382,768,383"), "increasing order");
    BAD(meta_edit(np1, "snsSaveChanSubset", "0:383;768"), "expected a list like 0:10,50:55,100");
    BAD(meta_edit(np1, "snsApLfSy", "383,0,1"), "field 'snsApLfSy' says 383,0,1 but snsSaveChanSubset selects 384,0,1");
    BAD(meta_edit(np1, "acqApLfSy", "384,384"), "field 'acqApLfSy': expected three counts");
    BAD(meta_edit(np1, "typeThis", "nidq"), "field 'typeThis' is 'nidq', expected 'imec'");
    BAD(meta_edit(np1, "imMaxInt", "abc"), "field 'imMaxInt': expected an integer");
    BAD(meta_edit(np1, "imAiRangeMax", "0"), "field 'imAiRangeMax': expected a voltage > 0");
    BAD(meta_edit(np1, "imStdby", "0:383"), "nothing to sort");
    BAD(meta_edit(np1, "imAiRangeMax", "1e300"), "µV per bit for channel 0, expected a value in 1e-6..1e6");
    BAD(meta_edit(np1, "imStdby", "0:400"), "field 'imStdby': channel 400 is out of range");
    {
        /* an LF-only file: no AP channels */
        char *a = meta_edit(np1, "snsSaveChanSubset", "384:767,768");
        char *b = meta_edit(a, "snsApLfSy", "0,384,1");
        BAD(b, "no AP channels were saved");
        free(a);
    }

    /* the probe: unknown part without snsGeomMap, imro problems */
    {
        char *a = meta_edit(np2, "imDatPrb_pn", "NP9999");
        char *b = str_sub(a, "~imroTbl=(21,384)", "~imroTbl=(9999,384)");
        BAD(b, "unknown probe: imDatPrb_pn 'NP9999', imroTbl type '9999'");
        free(a);
    }
    {
        /* imroTbl with 383 entries for 384 channels: drop the last entry */
        char *a = str_sub(np1, "(383 0 0 500 125 1)", "");
        BAD(a, "field 'imroTbl' has 383 entries, expected 384");
    }
    BAD(str_sub(np1, "(383 0 0 500 125 1)", "(383 0 0 500 125 1)(384 0 0 500 125 1)"), "expected a new channel 0..383");
    BAD(str_sub(np1, "(5 0 0 500 125 1)", "(5 0 0 -500 125 1)"), "entry 5 has AP gain -500, expected > 0");
    BAD(str_sub(np1, "(5 0 0 500 125 1)", "(5 0 0 500 125)"), "entry 5 has 5 fields, expected 6");
    BAD(str_sub(np1, "(5 0 0 500 125 1)", "(5 0 0 5x0 125 1)"), "entry 5 is not a list of integers");
    BAD(str_sub(np1, "(5 0 0 500 125 1)", "(5 3 0 500 125 1)"), "selects electrode 1157, expected 0..959");
    BAD(str_sub(np1, "(5 0 0 500 125 1)(6", "(5 0 0 500 125 1)x(6"), "field 'imroTbl': malformed entry after entry 6");
    BAD(str_sub(np2, "(0 1 0 0)", "(0 1 0 1280)"), "entry 0 selects electrode 1280, expected 0..1279");
    BAD(str_sub(np1, "~imroTbl=(0,384)", "~imroTbl=abc"), "field 'imroTbl': expected a header");
    BAD(meta_edit(np1, "~imroTbl", NULL), "field 'imroTbl' is missing and there is no 'snsGeomMap'");

    /* snsGeomMap */
    BAD(str_sub(geo, "(0:27:0:1)", "(0:27:zz:1)"), "field 'snsGeomMap': entry 0 expected (shank:x_um:z_um:used)");
    BAD(str_sub(geo, "(0:27:0:1)", "(7:27:0:1)"), "field 'snsGeomMap': entry 0 expected");
    BAD(str_sub(geo, "(0:27:0:1)", ""), "field 'snsGeomMap' has 383 entries, expected 384");
    BAD(str_sub(geo, "~snsGeomMap=(NP2013,4,250,70)", "~snsGeomMap=(NP2013,4,250)"), "field 'snsGeomMap': expected a header");
    BAD(str_sub(geo, "(0:27:0:1)", "(0:59:0:1)"), "share the position");
    BAD(str_sub(geo, "(0:27:0:1)", "(0:27:0:1"), "field 'snsGeomMap'");

    /* text */
    BAD(str_sub(np1, "imSampRate=30000", "imSampRate 30000"), "expected key=value, got a line without '='");
    BAD(str_sub(np1, "imSampRate=30000", "=30000"), "got an empty key");
    CHECK(expect_bad("", 0, "is empty", __LINE__));
    CHECK(expect_bad("\n\n  \n", 4, "no key=value lines", __LINE__));
    {
        char nul[] = "nSavedChans=385\0imSampRate=30000\n";
        CHECK(expect_bad(nul, sizeof nul - 1, "NUL byte", __LINE__));
    }

    /* files: a truncated binary, a missing .meta, an empty .meta */
    bs_recording rec;
    char bin[4300], meta[4300];
    snprintf(bin, sizeof bin, "%s/trunc.imec0.ap.bin", tmp);
    snprintf(meta, sizeof meta, "%s/trunc.imec0.ap.meta", tmp);
    CHECK(write_file(meta, np1, strlen(np1)) == 0);
    char *zeros = calloc(385 * 2 * 10 + 3, 1);
    CHECK(write_file(bin, zeros, 385 * 2 * 10 + 3) == 0);
    CHECK(bs_spikeglx_open(bin, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "trunc.imec0.ap.bin: the file is 7703 bytes, not a multiple of nSavedChans * 2 = 770"));
    CHECK(rec.probe.n_chan == 0 && rec.uv_per_bit == NULL);

    snprintf(bin, sizeof bin, "%s/nometa.imec0.ap.bin", tmp);
    CHECK(write_file(bin, zeros, 770) == 0);
    CHECK(bs_spikeglx_open(bin, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "nometa.imec0.ap.meta: cannot find the metadata file"));

    snprintf(bin, sizeof bin, "%s/nobin.imec0.ap.bin", tmp);
    snprintf(meta, sizeof meta, "%s/nobin.imec0.ap.meta", tmp);
    CHECK(write_file(meta, np1, strlen(np1)) == 0);
    CHECK(bs_spikeglx_open(meta, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "nobin.imec0.ap.bin: cannot find the binary"));

    snprintf(bin, sizeof bin, "%s/empty.imec0.ap.bin", tmp);
    snprintf(meta, sizeof meta, "%s/empty.imec0.ap.meta", tmp);
    CHECK(write_file(bin, zeros, 770) == 0);
    CHECK(write_file(meta, "", 0) == 0);
    CHECK(bs_spikeglx_open(bin, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "empty.imec0.ap.meta: the metadata file is empty"));

    /* a binary given as its own .meta */
    snprintf(meta, sizeof meta, "%s/binary.imec0.ap.meta", tmp);
    snprintf(bin, sizeof bin, "%s/binary.imec0.ap.bin", tmp);
    CHECK(write_file(meta, zeros, 770) == 0);
    CHECK(write_file(bin, zeros, 770) == 0);
    CHECK(bs_spikeglx_open(bin, &rec) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "binary.imec0.ap.meta") && strstr(bs_last_error(), "NUL"));
    free(zeros);

    free(np1);
    free(np2);
    free(geo);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
