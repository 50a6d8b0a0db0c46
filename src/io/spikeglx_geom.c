/*
 * spikeglx_geom.c - from parsed SpikeGLX metadata to the sorted channels:
 * which file columns are AP channels, where each sits on the probe (µm), and
 * its µV per bit.
 *
 * Mechanism, in order:
 *   1. Columns. nSavedChans int16 columns; snsSaveChanSubset ("all" or a
 *      printer list, strictly ascending) gives the acquired channel id of each
 *      column. An id below acqApLfSy[0] is AP, below AP+LF is LF, else SY. The
 *      counts must agree with snsApLfSy when present.
 *   2. The probe part. The ~imroTbl header's first field is a type code
 *      ("0", "21", "24", "1030", ...), a part number ("NP2020", SpikeGLX
 *      >= 20260115), or, with a 3-field header, a phase-3A serial number.
 *      imDatPrb_pn, when it is in the part table, chooses the geometry (it is
 *      more specific: NP1015 is type 0 but has a linear layout); the imro
 *      header chooses how the imro entries are laid out.
 *   3. Positions. ~snsGeomMap when present: one (shank:x:z:used) entry per
 *      saved neural channel in file order; x is from the left edge of its
 *      shank, so x_abs = shank * shankPitch + x. Otherwise each acquired
 *      channel's electrode is taken from its imro entry (NP1.0 format:
 *      bank * nReadout + channel; NP2.0 formats: the electrode field; NP1110:
 *      the UHD2 group/bank addressing) and placed with the part's constants:
 *      row = el / cols, col = el % cols, x = (row odd ? x0_odd : x0_even) +
 *      col * xPitch + shank * shankPitch, y = row * zPitch.
 *   4. Exclusions: SY and LF columns, the part's on-shank reference channel,
 *      the phase-3A reference channels, entries whose "used" flag is 0 in
 *      ~snsGeomMap (or ~snsShankMap when there is no geometry map), standby
 *      channels (imStdby).
 *   5. Gains (µV/bit = imAiRangeMax / imMaxInt / apGain * 1e6): NP1.0-format
 *      imro entries per acquired channel, the NP1110 imro header, then
 *      imChan0apGain, then the part's fixed gain.
 *
 * The part table rows were printed by tests/data/spikeglx/make_part_table.py
 * from probeinterface's copy of billkarsh/ProbeTable (numbers are facts of the
 * hardware). Table values in the metadata are parsed with explicit bounds;
 * anything malformed is BS_ERR_INPUT naming the file and the field.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../mem/mem.h"
#include "probe.h"
#include "spikeglx.h"

/* ---- the part table ---------------------------------------------------- */

enum { IMRO_NP1000 = 0, IMRO_NP1110, IMRO_NP2000, IMRO_NP2010, IMRO_3A };

typedef struct {
    const char *pn;
    int imro_format;
    int n_shanks;
    int cols;          /* electrode columns per shank */
    int rows;          /* electrode rows per shank */
    double x_pitch;    /* µm between columns */
    double z_pitch;    /* µm between rows */
    double x0_even;    /* µm from the shank's left edge to column 0 on even rows */
    double x0_odd;     /* same on odd rows */
    double shank_pitch;/* µm between shanks */
    int n_readout;     /* readout (acquired AP) channels */
    int adc_bits;
    double adc_vpp;    /* ADC range, V peak to peak */
    double fixed_gain; /* AP gain when not selectable, 0 when per channel */
    int ref_chan;      /* on-shank reference readout channel, -1 if none */
} sglx_part;

static const sglx_part parts[] = {
    {"NP1000", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1001", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1010", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1011", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1012", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1013", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1014", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1015", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 27, 0, 384, 10, 1.2, 0, 191},
    {"NP1016", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 27, 0, 384, 10, 1.2, 0, 191},
    {"NP1017", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 27, 0, 384, 10, 1.2, 0, 191},
    {"NP1020", IMRO_NP1000, 1, 2, 1248, 87, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1021", IMRO_NP1000, 1, 2, 1248, 87, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1022", IMRO_NP1000, 1, 2, 1248, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1030", IMRO_NP1000, 1, 2, 2208, 87, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1031", IMRO_NP1000, 1, 2, 2208, 87, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1032", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1033", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1040", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1041", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1042", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1050", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1051", IMRO_NP1000, 1, 2, 2208, 103, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1100", IMRO_NP1000, 1, 8, 48, 6, 6, 14, 14, 0, 384, 10, 1.2, 0, -1},
    {"NP1110", IMRO_NP1110, 1, 8, 768, 6, 6, 15.5, 15.5, 0, 384, 10, 1.2, 0, -1},
    {"NP1120", IMRO_NP1000, 1, 2, 192, 4.5, 4.5, 6.75, 6.75, 0, 384, 10, 1.2, 0, -1},
    {"NP1121", IMRO_NP1000, 1, 1, 384, 0, 3, 6.25, 6.25, 0, 384, 10, 1.2, 0, -1},
    {"NP1122", IMRO_NP1000, 1, 16, 24, 3, 3, 12.5, 12.5, 0, 384, 10, 1.2, 0, -1},
    {"NP1123", IMRO_NP1000, 1, 12, 32, 4.5, 4.5, 10.25, 10.25, 0, 384, 10, 1.2, 0, -1},
    {"NP1200", IMRO_NP1000, 1, 2, 64, 32, 31, 56.5, 36.5, 0, 128, 10, 1.2, 0, -1},
    {"NP1210", IMRO_NP1000, 1, 2, 64, 32, 31, 56.5, 36.5, 0, 128, 10, 1.2, 0, -1},
    {"NP1300", IMRO_NP1000, 1, 2, 480, 48, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP1400", IMRO_NP1000, 1, 2, 480, 48, 20, 11, 11, 0, 384, 10, 1.2, 0, 191},
    {"NP2000", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 384, 14, 1, 80, 127},
    {"NP2003", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 384, 12, 1.24, 100, -1},
    {"NP2004", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 384, 12, 1.24, 100, -1},
    {"NP2005", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 384, 12, 1.24, 100, -1},
    {"NP2006", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 11, 0, 384, 12, 1.24, 100, -1},
    {"NP2010", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 384, 14, 1, 80, 127},
    {"NP2013", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 384, 12, 1.24, 100, -1},
    {"NP2014", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 384, 12, 1.24, 100, -1},
    {"NP2020", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.24, 100, -1},
    {"NP2021", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.24, 100, -1},
    {"NP2022", IMRO_NP2010, 4, 2, 640, 20, 15, 27, 11, 2141.45, 1536, 12, 1.24, 100, -1},
    {"NP2300", IMRO_NP2000, 1, 2, 640, 48, 15, 11, 11, 0, 384, 12, 1.24, 100, -1},
    {"NP3000", IMRO_NP1000, 1, 1, 128, 0, 15, 59, 59, 0, 128, 10, 1.2, 0, -1},
    {"NP3010", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 1536, 12, 1.34, 100, -1},
    {"NP3011", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 1536, 12, 1.34, 100, -1},
    {"NP3012", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 1536, 12, 1.34, 100, -1},
    {"NP3020", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.34, 100, -1},
    {"NP3021", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.34, 100, -1},
    {"NP3022", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.34, 100, -1},
    {"NP3023", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.34, 100, -1},
    {"NP3024", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 1536, 12, 1.34, 100, -1},
    {"PRB2_1_2_0640_0", IMRO_NP2000, 1, 2, 640, 32, 15, 27, 27, 0, 384, 14, 1, 80, 127},
    {"PRB2_4_2_0640_0", IMRO_NP2010, 4, 2, 640, 32, 15, 27, 27, 250, 384, 14, 1, 80, 127},
    {"PRB_1_2_0480_2", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"PRB_1_4_0480_1", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
    {"PRB_1_4_0480_1_C", IMRO_NP1000, 1, 2, 480, 32, 20, 27, 11, 0, 384, 10, 1.2, 0, 191},
};
#define N_PARTS (sizeof parts / sizeof parts[0])

/* imro type code -> default part number (for old metas with no imDatPrb_pn) */
static const struct {
    int type;
    const char *pn;
} type_parts[] = {
    {0, "NP1000"},    {21, "NP2000"},   {24, "NP2010"},   {1020, "NP1020"}, {1030, "NP1030"},
    {1100, "NP1100"}, {1110, "NP1110"}, {1120, "NP1120"}, {1121, "NP1121"}, {1122, "NP1122"},
    {1123, "NP1123"}, {1200, "NP1200"}, {1300, "NP1300"}, {2003, "NP2003"}, {2013, "NP2013"},
    {2020, "NP2020"}, {3010, "NP3010"}, {3020, "NP3020"}, {3022, "NP3022"},
};

/* phase 3A (option 3) reference channels, readout ids */
static const int phase3a_refs[] = {36, 75, 112, 151, 188, 227, 264, 303, 340, 379};

static const sglx_part *find_part(const char *pn)
{
    if (!pn)
        return NULL;
    for (size_t i = 0; i < N_PARTS; i++)
        if (strcmp(parts[i].pn, pn) == 0)
            return &parts[i];
    return NULL;
}

static const sglx_part *find_type(long type)
{
    for (size_t i = 0; i < sizeof type_parts / sizeof type_parts[0]; i++)
        if (type_parts[i].type == type)
            return find_part(type_parts[i].pn);
    return NULL;
}

/* ---- tables of parenthesised entries ------------------------------------ */

#define MAX_FIELDS 8
#define FIELD_CHARS 48

typedef struct {
    int n;                             /* fields in this entry */
    char f[MAX_FIELDS][FIELD_CHARS];   /* the fields as text */
} entry;

/* Next "(...)" group of a table value starting at *p. Returns 1 and the
 * fields split at `sep` (blanks around fields are dropped), 0 at the end of
 * the value, -1 on malformed text (junk between groups, a missing ')', more
 * than MAX_FIELDS fields or a field longer than FIELD_CHARS - 1). */
static int next_entry(const char **p, char sep, entry *e)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0') {
        *p = s;
        return 0;
    }
    if (*s != '(')
        return -1;
    s++;
    const char *close = strchr(s, ')');
    if (!close)
        return -1;
    const char *paren = memchr(s, '(', (size_t)(close - s));
    if (paren)
        return -1;
    e->n = 0;
    const char *f = s;
    for (;;) {
        const char *fe = f;
        if (sep == ' ') {
            while (f < close && *f == ' ')
                f++;
            fe = f;
            while (fe < close && *fe != ' ')
                fe++;
        } else {
            while (fe < close && *fe != sep)
                fe++;
        }
        const char *a = f, *b = fe;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (e->n == MAX_FIELDS || b - a >= FIELD_CHARS)
            return -1;
        if (!(sep == ' ' && a == b && fe >= close)) {
            memcpy(e->f[e->n], a, (size_t)(b - a));
            e->f[e->n][b - a] = '\0';
            e->n++;
        }
        if (fe >= close)
            break;
        f = fe + 1;
    }
    *p = close + 1;
    return 1;
}

static int field_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    if (!*s)
        return -1;
    long x = strtol(s, &end, 10);
    if (*end || errno == ERANGE || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

static int field_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    if (!*s)
        return -1;
    double x = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

static int is_integer_text(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* ---- the imro table ------------------------------------------------------ */

typedef struct {
    int format;              /* IMRO_* */
    const sglx_part *part;   /* part named by the header (NULL if unknown) */
    char header_pn[FIELD_CHARS];
    int header_is_type;      /* first field was a numeric type code */
    long type;               /* that code */
    int phase3a;
    double hdr_ap_gain;      /* NP1110 header AP gain, 0 if none */
    int col_mode;            /* NP1110 column mode: 0 INNER, 1 OUTER, 2 ALL */
} imro_header;

static bs_status parse_imro_header(const char *name, const char *imro, imro_header *h, const char **rest)
{
    memset(h, 0, sizeof *h);
    entry e;
    const char *p = imro;
    if (next_entry(&p, ',', &e) != 1 || e.n < 2)
        return bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': expected a header like (0,384) or (NP2020,1536), got '%.40s'",
                        name, imro);
    *rest = p;
    snprintf(h->header_pn, sizeof h->header_pn, "%s", e.f[0]);
    if (is_integer_text(e.f[0])) {
        h->header_is_type = 1;
        if (e.n == 3) { /* phase 3A: (serial, probe option, channels) */
            h->phase3a = 1;
            h->format = IMRO_3A;
            h->part = find_part("NP1010");
            return BS_OK;
        }
        long t;
        if (field_long(e.f[0], 0, 1000000, &t) != 0)
            return bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': header type '%s' is not a probe type code", name,
                            e.f[0]);
        h->type = t;
        h->part = find_type(t);
    } else {
        h->part = find_part(e.f[0]);
    }
    if (h->part)
        h->format = h->part->imro_format;
    else
        h->format = -1;
    if (h->format == IMRO_NP1110) {
        double g;
        long mode;
        if (e.n != 6 || field_double(e.f[3], &g) != 0 || g <= 0 || field_long(e.f[1], 0, 2, &mode) != 0)
            return bs_error(BS_ERR_INPUT,
                            "%s: field 'imroTbl': NP1110 header expected (type,colMode,ref,apGain,lfGain,hpFilter), "
                            "got %d fields",
                            name, e.n);
        h->hdr_ap_gain = g;
        h->col_mode = (int)mode;
    }
    return BS_OK;
}

/* NP1110 (UHD2) addressing: 384 readout channels in 24 groups of 16; each
 * group's imro entry names two banks (A, B); column mode ALL uses bank A,
 * INNER/OUTER pick A or B per column. Rows count from the tip, 48 rows per
 * bank, 8 columns. */
static int uhd2_group(int ch) { return 2 * ((ch % 384) / 32) + ((ch % 384) & 1); }

static int uhd2_col(int ch, int bank)
{
    static const int group_col[8] = {0, 3, 1, 2, 1, 2, 0, 3};
    int gc = group_col[4 * (bank & 1) + uhd2_group(ch) % 4];
    int within = ((((ch % 64) % 32) / 2) & 1) ^ ((bank / 4) & 1);
    return 2 * gc + ((ch & 1) ? 1 - within : within);
}

static int uhd2_row(int ch, int bank)
{
    int gr = uhd2_group(ch) / 4;
    int within = ((ch % 64) % 32) / 4;
    return 48 * bank + 8 * gr + ((ch & 1) ? 7 - within : within);
}

static int uhd2_bank(int ch, int mode, int bank_a, int bank_b)
{
    if (mode == 2) /* ALL */
        return bank_a;
    int c = uhd2_col(ch, bank_a);
    int odd = c & 1;
    int use_a;
    if (c <= 3)
        use_a = (mode == 1) ? !odd : odd; /* OUTER : INNER */
    else
        use_a = (mode == 1) ? odd : !odd;
    return use_a ? bank_a : bank_b;
}

/* Per acquired AP channel: electrode, shank and (NP1.0 formats) AP gain. */
typedef struct {
    int n;         /* acquired AP channels */
    int *el;       /* electrode within its shank */
    int *shank;
    double *gain;  /* AP gain per channel, 0 where the format has none */
} imro_chans;

static void imro_chans_free(imro_chans *c)
{
    free(c->el);
    free(c->shank);
    free(c->gain);
    memset(c, 0, sizeof *c);
}

static bs_status parse_imro_entries(const char *name, const char *rest, const imro_header *h, const sglx_part *part,
                                    int n_acq, imro_chans *c)
{
    memset(c, 0, sizeof *c);
    c->n = n_acq;
    c->el = malloc((size_t)n_acq * sizeof *c->el);
    c->shank = calloc((size_t)n_acq, sizeof *c->shank);
    c->gain = calloc((size_t)n_acq, sizeof *c->gain);
    char *seen = calloc((size_t)n_acq, 1);
    if (!c->el || !c->shank || !c->gain || !seen) {
        free(seen);
        imro_chans_free(c);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory reading imroTbl", name);
    }
    bs_status st = BS_OK;
    const char *p = rest;
    entry e;
    int k = 0, r;
    int electrodes = part->cols * part->rows;
    int bank_a[24], bank_b[24];
    while ((r = next_entry(&p, ' ', &e)) == 1) {
        long v[MAX_FIELDS];
        int nf = e.n;
        int want = h->format == IMRO_NP1000   ? 6
                   : h->format == IMRO_3A     ? 5
                   : h->format == IMRO_NP2000 ? 4
                   : h->format == IMRO_NP2010 ? 5
                                              : 3;
        if (nf != want) {
            st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d has %d fields, expected %d for this probe type",
                          name, k, nf, want);
            break;
        }
        int ok = 1;
        for (int i = 0; i < nf && ok; i++)
            ok = field_long(e.f[i], -1000000, 1000000, &v[i]) == 0;
        if (!ok) {
            st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d is not a list of integers", name, k);
            break;
        }
        if (h->format == IMRO_NP1110) {
            /* per group: (group bankA bankB); the channels are resolved after the loop */
            if (k >= 24 || v[0] != k || v[1] < 0 || v[1] > 15 || v[2] < 0 || v[2] > 15) {
                st = bs_error(BS_ERR_INPUT,
                              "%s: field 'imroTbl': NP1110 entry %d expected (group bankA bankB) with group = %d and "
                              "banks 0..15",
                              name, k, k);
                break;
            }
            bank_a[k] = (int)v[1];
            bank_b[k] = (int)v[2];
            k++;
            continue;
        }
        long ch = v[0];
        if (ch < 0 || ch >= n_acq || seen[ch]) {
            st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d names channel %ld, expected a new channel 0..%d",
                          name, k, ch, n_acq - 1);
            break;
        }
        seen[ch] = 1;
        long el = 0, shank = 0;
        if (h->format == IMRO_NP1000 || h->format == IMRO_3A) {
            el = v[1] * part->n_readout + ch;
            if (v[3] <= 0) {
                st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d has AP gain %ld, expected > 0", name, k,
                              v[3]);
                break;
            }
            c->gain[ch] = (double)v[3];
        } else if (h->format == IMRO_NP2000) {
            el = v[3];
        } else {
            shank = v[1];
            el = v[4];
        }
        if (shank < 0 || shank >= part->n_shanks) {
            st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d has shank %ld, expected 0..%d", name, k, shank,
                          part->n_shanks - 1);
            break;
        }
        if (el < 0 || el >= electrodes) {
            st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': entry %d selects electrode %ld, expected 0..%d for %s",
                          name, k, el, electrodes - 1, part->pn);
            break;
        }
        c->el[ch] = (int)el;
        c->shank[ch] = (int)shank;
        k++;
        if (k > n_acq)
            break;
    }
    free(seen);
    if (st == BS_OK && r < 0)
        st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl': malformed entry after entry %d, expected (a b c ...)", name,
                      k);
    int expect = h->format == IMRO_NP1110 ? 24 : n_acq;
    if (st == BS_OK && k != expect)
        st = bs_error(BS_ERR_INPUT, "%s: field 'imroTbl' has %s%d entries, expected %d (%s)", name,
                      k > expect ? "more than " : "", k, expect,
                      h->format == IMRO_NP1110 ? "24 NP1110 groups" : "one per acquired AP channel");
    if (st != BS_OK) {
        imro_chans_free(c);
        return st;
    }
    if (h->format == IMRO_NP1110) {
        if (n_acq != 384) {
            imro_chans_free(c);
            return bs_error(BS_ERR_INPUT, "%s: field 'acqApLfSy': NP1110 has 384 AP channels, got %d", name, n_acq);
        }
        for (int ch = 0; ch < 384; ch++) {
            int g = uhd2_group(ch);
            int bank = uhd2_bank(ch, h->col_mode, bank_a[g], bank_b[g]);
            c->el[ch] = 8 * uhd2_row(ch, bank) + uhd2_col(ch, bank);
            c->gain[ch] = h->hdr_ap_gain;
        }
    }
    return BS_OK;
}

/* ---- geometry maps ------------------------------------------------------- */

/* ~snsGeomMap: header (partNumber,nShanks,shankPitch,shankWidth), entries
 * (shank:x:z:used), one per saved neural channel. Positions are absolute. */
static bs_status parse_geommap(const char *name, const char *text, int n_need, int n_alt, double *x, double *y,
                               int *shank, char *used, char *pn, size_t pn_len, int *n_found)
{
    entry e;
    const char *p = text;
    long n_shanks;
    double pitch, width;
    if (next_entry(&p, ',', &e) != 1 || e.n != 4 || field_long(e.f[1], 1, 64, &n_shanks) != 0 ||
        field_double(e.f[2], &pitch) != 0 || field_double(e.f[3], &width) != 0 || pitch < 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: field 'snsGeomMap': expected a header (partNumber,nShanks,shankPitch_um,shankWidth_um), "
                        "got '%.40s'",
                        name, text);
    snprintf(pn, pn_len, "%s", e.f[0]);
    int k = 0, r;
    while ((r = next_entry(&p, ':', &e)) == 1) {
        long s, u;
        double ex, ez;
        if (e.n != 4 || field_long(e.f[0], 0, n_shanks - 1, &s) != 0 || field_double(e.f[1], &ex) != 0 ||
            field_double(e.f[2], &ez) != 0 || field_long(e.f[3], 0, 1, &u) != 0)
            return bs_error(BS_ERR_INPUT,
                            "%s: field 'snsGeomMap': entry %d expected (shank:x_um:z_um:used) with shank 0..%ld and "
                            "used 0 or 1",
                            name, k, n_shanks - 1);
        if (k < n_alt) {
            x[k] = (double)s * pitch + ex;
            y[k] = ez;
            shank[k] = (int)s;
            used[k] = (char)u;
        }
        k++;
    }
    if (r < 0)
        return bs_error(BS_ERR_INPUT, "%s: field 'snsGeomMap': malformed text after entry %d, expected (s:x:z:u)", name,
                        k);
    if (k != n_need && k != n_alt)
        return bs_error(BS_ERR_INPUT, "%s: field 'snsGeomMap' has %d entries, expected %d (one per saved AP channel)",
                        name, k, n_need);
    *n_found = k;
    return BS_OK;
}

/* ~snsShankMap: only its "used" flags are read (geometry in grid units). */
static bs_status parse_shankmap_used(const char *name, const char *text, int n_need, int n_alt, char *used)
{
    entry e;
    const char *p = text;
    if (next_entry(&p, ',', &e) != 1 || e.n != 3)
        return bs_error(BS_ERR_INPUT, "%s: field 'snsShankMap': expected a header (nShanks,nCols,nRows), got '%.40s'",
                        name, text);
    int k = 0, r;
    while ((r = next_entry(&p, ':', &e)) == 1) {
        long u;
        if (e.n != 4 || field_long(e.f[3], 0, 1, &u) != 0)
            return bs_error(BS_ERR_INPUT, "%s: field 'snsShankMap': entry %d expected (shank:col:row:used)", name, k);
        if (k < n_alt)
            used[k] = (char)u;
        k++;
    }
    if (r < 0 || (k != n_need && k != n_alt))
        return bs_error(BS_ERR_INPUT, "%s: field 'snsShankMap' has %s%d entries, expected %d (one per saved AP channel)",
                        name, r < 0 ? "malformed text after " : "", k, n_need);
    return BS_OK;
}

/* ---- the whole metadata -------------------------------------------------- */

static bs_status parse_triplet(const bs_sglx_meta *m, const char *key, int t[3])
{
    const char *s = bs_sglx_meta_get(m, key);
    if (!s)
        return BS_ERR_INPUT; /* caller decides */
    long a, b, c;
    char extra;
    if (sscanf(s, "%ld,%ld,%ld%c", &a, &b, &c, &extra) != 3 || a < 0 || b < 0 || c < 0 || a > 65535 || b > 65535 ||
        c > 65535)
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected three counts AP,LF,SY like 384,0,1, got '%.40s'",
                        m->name, key, s);
    t[0] = (int)a;
    t[1] = (int)b;
    t[2] = (int)c;
    return BS_OK;
}

/* ---- ADC multiplexing: each channel's sampling delay ------------------------ */

/* Sampling slots per sample period of a part's ADCs, for `groups` channels an ADC (0: unknown), as
 * SpikeInterface counts them: groups x (1 + LF rate / AP rate). Neuropixels 1.0 technology (10-bit ADCs)
 * samples its LF band at 1/12 of the AP rate in extra slots: 12 channels an ADC in 13 slots; 2.0
 * technology (NP2000/NP2010 imro formats) has no LF band: 16 in 16. */
static int np_technology(const sglx_part *part, int phase3a) /* 1 or 2 (Neuropixels 1.0 / 2.0), 0 unknown */
{
    if (phase3a || (part && part->adc_bits == 10))
        return 1;
    return part && (part->imro_format == IMRO_NP2000 || part->imro_format == IMRO_NP2010) ? 2 : 0;
}

static int part_mux_cycles(const sglx_part *part, int phase3a, int groups)
{
    switch (np_technology(part, phase3a)) {
    case 1: return groups % 12 == 0 ? groups + groups / 12 : 0;
    case 2: return groups;
    default: return 0;
    }
}

/* A channel's slot in the standard order with `groups` channels an ADC: pairs of consecutive channels go to
 * consecutive slots, SpikeGLX's ~muxTbl for the 1.0 and 2.0 parts. */
static int standard_slot(int ch, int groups) { return (ch % (2 * groups)) / 2; }

/* Channels an ADC of a part's standard order (standard_slot), for parts of 384 readout channels of known
 * technology; 0 otherwise. */
static int standard_groups(const sglx_part *part, int phase3a, int n_readout)
{
    int tech = n_readout == 384 ? np_technology(part, phase3a) : 0;
    return tech == 1 ? 12 : tech == 2 ? 16 : 0;
}

int bs_neuropixels_standard_shifts(const char *part_number, const int *readout, int n, double *shift)
{
    const sglx_part *part = find_part(part_number);
    int groups = part ? standard_groups(part, 0, part->n_readout) : 0;
    int cycles = groups ? part_mux_cycles(part, 0, groups) : 0;
    if (!cycles)
        return 0;
    for (int i = 0; i < n; i++) {
        if (readout[i] < 0 || readout[i] >= part->n_readout)
            return 0;
        shift[i] = (double)standard_slot(readout[i], groups) / cycles;
    }
    return 1;
}

/* slot[ch] (ch < n_readout) from ~muxTbl=(ADCs,groups)(ch ch ...)(...): group g lists the channels sampled in
 * slot g. 0 on success, -1 (with why) when the field does not have that form. */
static int parse_mux_table(const char *v, int n_readout, int *slot, int *n_groups, char *why, size_t why_len)
{
    int adcs, groups, used = -1; /* %n is set only when the whole header matched */
    if (sscanf(v, " (%d ,%d ) %n", &adcs, &groups, &used) != 2 || used < 0 || adcs < 1 || groups < 1 ||
        groups > 64) {
        snprintf(why, why_len, "expected (ADCs,groups) first");
        return -1;
    }
    *n_groups = groups;
    for (int c = 0; c < n_readout; c++)
        slot[c] = -1;
    const char *p = v + used;
    for (int g = 0; g < groups; g++) {
        while (*p == ' ')
            p++;
        if (*p++ != '(') {
            snprintf(why, why_len, "group %d: expected '('", g);
            return -1;
        }
        for (;;) {
            while (*p == ' ')
                p++;
            if (*p == ')') {
                p++;
                break;
            }
            char *end;
            long ch = strtol(p, &end, 10);
            if (end == p || ch < 0 || ch >= n_readout || slot[ch] >= 0) {
                snprintf(why, why_len, "group %d: a channel that is not a new readout channel below %d", g, n_readout);
                return -1;
            }
            slot[ch] = g;
            p = end;
        }
    }
    return 0;
}

/* info->probe.adc_shift from the part's multiplexing: ~muxTbl when the metadata has it, else, for a part of
 * 384 readout channels, its technology's standard order (12 or 16 channels an ADC, standard_slot, as
 * SpikeGLX assigns them); left NULL (no phase shift, the sort says why) for a
 * part whose ADC layout is not known. */
static bs_status set_adc_shift(const bs_sglx_meta *m, const char *name, const sglx_part *part, int phase3a,
                               int n_readout, bs_sglx_info *info)
{
    if ((!part && !phase3a) || n_readout < 1)
        return BS_OK;
    int *slot = malloc((size_t)n_readout * sizeof *slot);
    if (!slot)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    const char *mux = bs_sglx_meta_get(m, "muxTbl");
    char why[160];
    int groups = 0;
    if (mux && parse_mux_table(mux, n_readout, slot, &groups, why, sizeof why) != 0) {
        bs_log_warn("%s: field '~muxTbl' is not a multiplexing table (%s); using %s's standard ADC order", name, why,
                    info->part_number);
        mux = NULL;
    }
    if (!mux) {
        groups = standard_groups(part, phase3a, n_readout);
        for (int c = 0; c < n_readout && groups; c++)
            slot[c] = standard_slot(c, groups);
    }
    int cycles = groups ? part_mux_cycles(part, phase3a, groups) : 0;
    double *d = cycles ? malloc((size_t)info->probe.n_chan * sizeof *d) : NULL;
    if (!d) {
        free(slot);
        return cycles ? bs_error(BS_ERR_MEMORY, "%s: out of memory", name) : BS_OK;
    }
    bs_status st = BS_OK;
    int missing = -1;
    for (int j = 0; j < info->probe.n_chan && missing < 0; j++) {
        int a = info->acq_chan[j];
        int s = a >= 0 && a < n_readout ? slot[a] : -1;
        if (s < 0 || s >= cycles)
            missing = a;
        else
            d[j] = (double)s / cycles;
    }
    if (missing >= 0)
        bs_log_warn("%s: field '~muxTbl' gives readout channel %d no sampling slot below %d: the channels' sampling "
                    "skew is not corrected (no phase shift)", name, missing, cycles);
    else
        st = bs_probe_set_adc_shift(&info->probe, d, name);
    free(slot), free(d);
    return st;
}

void bs_sglx_info_free(bs_sglx_info *info)
{
    bs_probe_free(&info->probe);
    bs_mem_free(info->uv_per_bit);
    bs_mem_free(info->acq_chan);
    memset(info, 0, sizeof *info);
    info->sync_column = -1;
}

typedef struct {
    int *subset;     /* [n_saved] acquired id of each column */
    double *x, *y;   /* [n_ap] position of each saved AP column, µm */
    int *shank;      /* [n_ap] */
    char *used;      /* [n_ap + n_lf] */
    char *excluded;  /* [n_ap] */
    double *gain;    /* [n_ap] */
    imro_chans ic;
} scratch;

static void scratch_free(scratch *s)
{
    free(s->subset);
    free(s->x);
    free(s->y);
    free(s->shank);
    free(s->used);
    free(s->excluded);
    free(s->gain);
    imro_chans_free(&s->ic);
}

static bs_status info_build(const bs_sglx_meta *m, int flags, bs_sglx_info *info, scratch *s)
{
    const char *name = m->name;
    int64_t v;
    const char *type_this = bs_sglx_meta_get(m, "typeThis");
    if (type_this && strcmp(type_this, "imec") != 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: field 'typeThis' is '%.20s', expected 'imec' (only imec probe streams carry a probe)",
                        name, type_this);
    BS_TRY(bs_sglx_meta_int64(m, "nSavedChans", 1, 65535, &v));
    int n_saved = (int)v;
    info->n_saved_chans = n_saved;
    BS_TRY(bs_sglx_meta_double(m, "imSampRate", &info->fs_hz));
    if (!(info->fs_hz > 0 && info->fs_hz < 1e7))
        return bs_error(BS_ERR_INPUT, "%s: field 'imSampRate': expected a rate in Hz > 0, got %g", name, info->fs_hz);
    info->first_sample = 0;
    if (bs_sglx_meta_get(m, "firstSample"))
        BS_TRY(bs_sglx_meta_int64(m, "firstSample", 0, INT64_MAX, &info->first_sample));
    info->meta_file_bytes = -1;
    if (bs_sglx_meta_get(m, "fileSizeBytes"))
        BS_TRY(bs_sglx_meta_int64(m, "fileSizeBytes", 0, INT64_MAX, &info->meta_file_bytes));

    /* 1. columns */
    int acq[3], sns[3];
    int have_acq = bs_sglx_meta_get(m, "acqApLfSy") != NULL, have_sns = bs_sglx_meta_get(m, "snsApLfSy") != NULL;
    if (have_acq)
        BS_TRY(parse_triplet(m, "acqApLfSy", acq));
    if (have_sns)
        BS_TRY(parse_triplet(m, "snsApLfSy", sns));
    if (!have_acq) {
        if (!have_sns)
            return bs_error(BS_ERR_INPUT, "%s: field 'acqApLfSy' is missing (and 'snsApLfSy' too), expected AP,LF,SY "
                                          "channel counts like 384,0,1",
                            name);
        memcpy(acq, sns, sizeof acq);
    }
    int n_acq_total = acq[0] + acq[1] + acq[2];
    if (n_acq_total < 1)
        return bs_error(BS_ERR_INPUT, "%s: field 'acqApLfSy': no acquired channels", name);
    const char *subset_text = bs_sglx_meta_get(m, "snsSaveChanSubset");
    int n_sub = 0;
    if (!subset_text || strcmp(subset_text, "all") == 0) {
        if (n_saved != n_acq_total)
            return bs_error(BS_ERR_INPUT,
                            "%s: field 'nSavedChans' is %d but all %d acquired channels (acqApLfSy) were saved", name,
                            n_saved, n_acq_total);
        s->subset = malloc((size_t)n_saved * sizeof *s->subset);
        if (!s->subset)
            return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
        for (int i = 0; i < n_saved; i++)
            s->subset[i] = i;
        n_sub = n_saved;
    } else {
        BS_TRY(bs_sglx_parse_list(subset_text, n_acq_total, name, "snsSaveChanSubset", &s->subset, &n_sub));
        for (int i = 1; i < n_sub; i++)
            if (s->subset[i] <= s->subset[i - 1])
                return bs_error(BS_ERR_INPUT,
                                "%s: field 'snsSaveChanSubset': channels must be listed in increasing order without "
                                "repeats (%d follows %d)",
                                name, s->subset[i], s->subset[i - 1]);
        if (n_sub != n_saved)
            return bs_error(BS_ERR_INPUT, "%s: field 'nSavedChans' is %d but snsSaveChanSubset lists %d channels", name,
                            n_saved, n_sub);
    }
    int n_ap = 0, n_lf = 0, n_sy = 0;
    for (int c = 0; c < n_saved; c++) {
        int id = s->subset[c];
        if (id < acq[0])
            n_ap++;
        else if (id < acq[0] + acq[1])
            n_lf++;
        else {
            if (n_sy == 0)
                info->sync_column = c;
            n_sy++;
        }
    }
    info->n_ap = n_ap;
    info->n_lf = n_lf;
    info->n_sy = n_sy;
    if (have_sns && (sns[0] != n_ap || sns[1] != n_lf || sns[2] != n_sy))
        return bs_error(BS_ERR_INPUT,
                        "%s: field 'snsApLfSy' says %d,%d,%d but snsSaveChanSubset selects %d,%d,%d (AP,LF,SY)", name,
                        sns[0], sns[1], sns[2], n_ap, n_lf, n_sy);
    if (n_ap == 0)
        return bs_error(BS_ERR_INPUT, "%s: no AP channels were saved (an LF-only or sync-only file?); open the .ap.bin",
                        name);

    /* 2. the probe part */
    const char *imro = bs_sglx_meta_get(m, "imroTbl");
    const char *pn = bs_sglx_meta_get(m, "imDatPrb_pn");
    imro_header h;
    const char *imro_rest = NULL;
    memset(&h, 0, sizeof h);
    h.format = -1;
    if (imro)
        BS_TRY(parse_imro_header(name, imro, &h, &imro_rest));
    const sglx_part *part = NULL;
    if (h.phase3a)
        part = h.part;
    else if (find_part(pn))
        part = find_part(pn);
    else
        part = h.part;
    if (part && h.format < 0)
        h.format = part->imro_format;
    if (h.phase3a)
        snprintf(info->part_number, sizeof info->part_number, "phase3A");
    else if (part)
        snprintf(info->part_number, sizeof info->part_number, "%s", part->pn);

    /* 3. positions */
    s->x = malloc((size_t)n_ap * sizeof *s->x);
    s->y = malloc((size_t)n_ap * sizeof *s->y);
    s->shank = calloc((size_t)n_ap, sizeof *s->shank);
    s->used = malloc((size_t)(n_ap + n_lf));
    s->excluded = calloc((size_t)n_ap, 1);
    s->gain = calloc((size_t)n_ap, sizeof *s->gain);
    if (!s->x || !s->y || !s->shank || !s->used || !s->excluded || !s->gain)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    memset(s->used, 1, (size_t)(n_ap + n_lf));
    const char *geom = bs_sglx_meta_get(m, "snsGeomMap");
    const char *shankmap = bs_sglx_meta_get(m, "snsShankMap");
    char geom_pn[64] = "";
    int have_imro_chans = 0;
    if (imro && part) {
        if (part->n_readout != acq[0] && !(h.phase3a && acq[0] == 384))
            return bs_error(BS_ERR_INPUT, "%s: field 'acqApLfSy': %s has %d AP channels, got %d", name, part->pn,
                            part->n_readout, acq[0]);
        BS_TRY(parse_imro_entries(name, imro_rest, &h, part, acq[0], &s->ic));
        have_imro_chans = 1;
    }
    if (geom) {
        int found;
        double *gx = malloc((size_t)(n_ap + n_lf) * sizeof *gx), *gy = malloc((size_t)(n_ap + n_lf) * sizeof *gy);
        int *gs = malloc((size_t)(n_ap + n_lf) * sizeof *gs);
        bs_status st = (gx && gy && gs) ? parse_geommap(name, geom, n_ap, n_ap + n_lf, gx, gy, gs, s->used, geom_pn,
                                                        sizeof geom_pn, &found)
                                        : bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
        if (st == BS_OK && !(flags & BS_SGLX_IGNORE_GEOMMAP)) {
            memcpy(s->x, gx, (size_t)n_ap * sizeof *gx);
            memcpy(s->y, gy, (size_t)n_ap * sizeof *gy);
            memcpy(s->shank, gs, (size_t)n_ap * sizeof *gs);
            info->geometry_from_geommap = 1;
        }
        free(gx);
        free(gy);
        free(gs);
        BS_TRY(st);
    } else if (shankmap) {
        BS_TRY(parse_shankmap_used(name, shankmap, n_ap, n_ap + n_lf, s->used));
    }
    if (!info->geometry_from_geommap) {
        if (!imro)
            return bs_error(BS_ERR_INPUT,
                            "%s: field 'imroTbl' is missing and there is no 'snsGeomMap': cannot place the channels",
                            name);
        if (!part)
            return bs_error(BS_ERR_INPUT,
                            "%s: unknown probe: imDatPrb_pn '%s', imroTbl type '%s' are not in the part table, and "
                            "there is no snsGeomMap to read positions from",
                            name, pn ? pn : "(missing)", h.header_pn);
        for (int k = 0; k < n_ap; k++) {
            int ch = s->subset[k];
            int el = s->ic.el[ch];
            int row = el / part->cols, col = el % part->cols;
            s->shank[k] = s->ic.shank[ch];
            s->x[k] = ((row & 1) ? part->x0_odd : part->x0_even) + col * part->x_pitch +
                      s->shank[k] * part->shank_pitch;
            s->y[k] = row * part->z_pitch;
        }
    }
    if (!part && geom_pn[0])
        snprintf(info->part_number, sizeof info->part_number, "%s", geom_pn);

    /* 4. exclusions */
    int *stdby = NULL, n_stdby = 0;
    const char *stdby_text = bs_sglx_meta_get(m, "imStdby");
    if (stdby_text && *stdby_text)
        BS_TRY(bs_sglx_parse_list(stdby_text, acq[0], name, "imStdby", &stdby, &n_stdby));
    for (int k = 0; k < n_ap; k++) {
        int ch = s->subset[k];
        if (!s->used[k])
            s->excluded[k] = 1;
        if (h.phase3a) {
            for (size_t i = 0; i < sizeof phase3a_refs / sizeof phase3a_refs[0]; i++)
                if (phase3a_refs[i] == ch)
                    s->excluded[k] = 1;
        } else if (part && part->ref_chan == ch) {
            s->excluded[k] = 1;
        }
        for (int i = 0; i < n_stdby; i++)
            if (stdby[i] == ch)
                s->excluded[k] = 1;
    }
    free(stdby);

    /* 5. gains */
    double chan0_gain = 0;
    if (bs_sglx_meta_get(m, "imChan0apGain")) {
        BS_TRY(bs_sglx_meta_double(m, "imChan0apGain", &chan0_gain));
        if (chan0_gain <= 0)
            return bs_error(BS_ERR_INPUT, "%s: field 'imChan0apGain': expected a gain > 0, got %g", name, chan0_gain);
    }
    for (int k = 0; k < n_ap; k++) {
        double g = have_imro_chans ? s->ic.gain[s->subset[k]] : 0;
        if (g <= 0)
            g = chan0_gain;
        if (g <= 0 && part)
            g = part->fixed_gain;
        if (g <= 0)
            return bs_error(BS_ERR_INPUT,
                            "%s: cannot tell the AP gain of channel %d: no per-channel gain in imroTbl, no "
                            "'imChan0apGain', and the probe part is unknown",
                            name, s->subset[k]);
        s->gain[k] = g;
    }
    double vmax, imax;
    if (bs_sglx_meta_get(m, "imAiRangeMax")) {
        BS_TRY(bs_sglx_meta_double(m, "imAiRangeMax", &vmax));
    } else if (part) {
        vmax = part->adc_vpp / 2;
    } else {
        return bs_error(BS_ERR_INPUT, "%s: field 'imAiRangeMax' is missing and the probe part is unknown", name);
    }
    if (!(vmax > 0))
        return bs_error(BS_ERR_INPUT, "%s: field 'imAiRangeMax': expected a voltage > 0, got %g", name, vmax);
    if (bs_sglx_meta_get(m, "imMaxInt")) {
        BS_TRY(bs_sglx_meta_int64(m, "imMaxInt", 1, 1 << 30, &v));
        imax = (double)v;
    } else {
        imax = part ? (double)(1 << (part->adc_bits - 1)) : 512.0;
    }

    /* 6. the sorted channels */
    int n_sort = 0;
    for (int k = 0; k < n_ap; k++)
        n_sort += !s->excluded[k];
    if (n_sort == 0)
        return bs_error(BS_ERR_INPUT, "%s: every saved AP channel is a reference or standby channel; nothing to sort",
                        name);
    BS_TRY(bs_probe_alloc(&info->probe, n_sort));
    info->uv_per_bit = bs_mem_alloc("io/spikeglx", (size_t)n_sort * sizeof *info->uv_per_bit);
    info->acq_chan = bs_mem_alloc("io/spikeglx", (size_t)n_sort * sizeof *info->acq_chan);
    if (!info->uv_per_bit || !info->acq_chan)
        return BS_ERR_MEMORY;
    int j = 0, max_shank = 0;
    for (int k = 0; k < n_ap; k++) {
        if (s->excluded[k])
            continue;
        info->probe.column[j] = k; /* AP columns come first in the file (ascending subset) */
        info->probe.x_um[j] = s->x[k];
        info->probe.y_um[j] = s->y[k];
        info->probe.shank[j] = s->shank[k];
        if (s->shank[k] > max_shank)
            max_shank = s->shank[k];
        double uv = vmax / imax / s->gain[k] * 1e6;
        if (!(uv > 1e-6 && uv < 1e6))
            return bs_error(BS_ERR_INPUT,
                            "%s: imAiRangeMax %g V / imMaxInt %g / gain %g give %g µV per bit for channel %d, expected "
                            "a value in 1e-6..1e6",
                            name, vmax, imax, s->gain[k], uv, s->subset[k]);
        info->uv_per_bit[j] = (float)uv;
        info->acq_chan[j] = s->subset[k];
        j++;
    }
    info->probe.n_shanks = max_shank + 1;
    snprintf(info->probe.model, sizeof info->probe.model, "%s", info->part_number);
    BS_TRY(set_adc_shift(m, name, part, h.phase3a, acq[0], info));
    return bs_probe_validate(&info->probe, n_saved, name);
}

bs_status bs_sglx_info_from_meta(const bs_sglx_meta *m, int flags, bs_sglx_info *info)
{
    memset(info, 0, sizeof *info);
    info->sync_column = -1;
    scratch s;
    memset(&s, 0, sizeof s);
    bs_status st = info_build(m, flags, info, &s);
    scratch_free(&s);
    if (st != BS_OK)
        bs_sglx_info_free(info);
    return st;
}

bs_status bs_spikeglx_probe_from_meta(const char *meta_text, size_t len, const char *name, bs_probe *probe,
                                      float **uv_per_bit, int *n_saved_chans, double *fs_hz)
{
    memset(probe, 0, sizeof *probe);
    *uv_per_bit = NULL;
    bs_sglx_meta m;
    BS_TRY(bs_sglx_meta_parse(meta_text, len, name, &m));
    bs_sglx_info info;
    bs_status st = bs_sglx_info_from_meta(&m, 0, &info);
    bs_sglx_meta_free(&m);
    if (st != BS_OK)
        return st;
    *probe = info.probe;
    *uv_per_bit = info.uv_per_bit;
    *n_saved_chans = info.n_saved_chans;
    *fs_hz = info.fs_hz;
    bs_mem_free(info.acq_chan);
    return BS_OK;
}
