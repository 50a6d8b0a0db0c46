/*
 * openephys.c - opening an Open Ephys recording (openephys.h, layer 3):
 * where REC points, which stream, the sizes of continuous.dat and its
 * sample numbers, and the probe.
 *
 * Resolution: a path to structure.oebin or continuous.dat, or a folder
 * holding structure.oebin or continuous.dat (with ../../structure.oebin), is
 * used directly; any other folder is searched for recordings along the
 * tree's own names only: recording*, experiment* / recording*, and
 * Record Node* / experiment* / recording* (each entry sorted by name), so a
 * search never wanders through unrelated folders. Exactly one recording must
 * be found; the message lists up to ten when there are several.
 *
 * Sizes: n_samples = size(continuous.dat) / (2 x num_channels), which must
 * divide exactly. The sample numbers are checked against it without reading
 * them all: the .npy header gives the count (which must equal n_samples),
 * and the first and last values are read with pread; last - first !=
 * n_samples - 1 means gaps (a warning). Nothing here allocates more than the
 * channel tables and the probe.
 */
#define _POSIX_C_SOURCE 200809L
#include "openephys.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../mem/mem.h"
#include "npy.h"
#include "prb.h"
#include "xml.h"

#define OE_TAG "io/openephys"
#define MAX_FOUND 10

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* dirname of path into out ("." when there is none). */
static bs_status dir_name(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    if (!b)
        return snprintf(out, n, ".") < (int)n ? BS_OK : BS_ERR_INPUT;
    size_t l = b == path ? 1 : (size_t)(b - path);
    if (l + 1 > n)
        return bs_error(BS_ERR_INPUT, "%.200s...: path too long", path);
    memcpy(out, path, l);
    out[l] = '\0';
    return BS_OK;
}

static bs_status join(char *out, size_t n, const char *a, const char *b)
{
    if (snprintf(out, n, "%s/%s", a, b) >= (int)n)
        return bs_error(BS_ERR_INPUT, "%.200s/%.100s: path too long", a, b);
    return BS_OK;
}

/* ---- finding the recording ------------------------------------------------------ */

typedef struct {
    char rec_dir[4096];   /* folder of structure.oebin */
    char folder[256];     /* stream folder given by the path, "" if none */
    int n_found;          /* recordings found by a search */
    char found[MAX_FOUND][512];
} location;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sub-folders of dir whose names start with prefix, sorted (malloc'ed). */
static int list_dirs(const char *dir, const char *prefix, char ***out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    size_t pl = strlen(prefix);
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, pl) != 0)
            continue;
        char p[4400];
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p || !is_dir(p))
            continue;
        if (n == cap) {
            int nc = cap ? 2 * cap : 8;
            char **nn = realloc(names, (size_t)nc * sizeof *nn);
            if (!nn)
                break;
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Record every dir/rel/structure.oebin below `dir` following `levels`
 * (name prefixes), e.g. {"experiment", "recording"}. */
static void search(const char *dir, const char *rel, const char *const *levels, int n_levels, location *loc)
{
    char here[4400];
    if (n_levels == 0) {
        char oebin[4500];
        if (snprintf(oebin, sizeof oebin, "%s/structure.oebin", dir) < (int)sizeof oebin && bs_is_file(oebin)) {
            if (loc->n_found == 0)
                snprintf(loc->rec_dir, sizeof loc->rec_dir, "%s", dir);
            if (loc->n_found < MAX_FOUND)
                snprintf(loc->found[loc->n_found], sizeof loc->found[0], "%s", rel);
            loc->n_found++;
        }
        return;
    }
    char **names;
    int n = list_dirs(dir, levels[0], &names);
    for (int i = 0; i < n; i++) {
        char sub_rel[600];
        if (snprintf(here, sizeof here, "%s/%s", dir, names[i]) >= (int)sizeof here ||
            snprintf(sub_rel, sizeof sub_rel, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >= (int)sizeof sub_rel)
            continue;
        search(here, sub_rel, levels + 1, n_levels - 1, loc);
    }
    free_list(names, n);
}

static void search_all(const char *dir, location *loc)
{
    static const char *const levels[] = {"Record", "experiment", "recording"}; /* "Record Node 101", "Record_Node_101" */
    loc->n_found = 0;
    for (int k = 1; k <= 3; k++) /* the last k levels: recording, experiment + recording, all three */
        search(dir, "", levels + 3 - k, k, loc);
}

/* The stream folder `dir` (holding continuous.dat) inside rec/continuous/. */
static int stream_folder(const char *dir, location *loc)
{
    char cont[4096], rec[4096], oebin[4200];
    if (dir_name(dir, cont, sizeof cont) != BS_OK || strcmp(base_name(cont), "continuous") != 0 ||
        dir_name(cont, rec, sizeof rec) != BS_OK || join(oebin, sizeof oebin, rec, "structure.oebin") != BS_OK ||
        !bs_is_file(oebin))
        return 0;
    snprintf(loc->rec_dir, sizeof loc->rec_dir, "%s", rec);
    snprintf(loc->folder, sizeof loc->folder, "%s", base_name(dir));
    return 1;
}

/* Where REC points; 0 if it does not look like Open Ephys (no message). */
static int locate(const char *path, location *loc)
{
    memset(loc, 0, sizeof *loc);
    char p[4096];
    if (strlen(path) >= sizeof p - 64)
        return 0;
    snprintf(p, sizeof p, "%s", path);
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/')
        p[--l] = '\0';
    if (bs_is_file(p)) {
        char dir[4096];
        if (dir_name(p, dir, sizeof dir) != BS_OK)
            return 0;
        if (strcmp(base_name(p), "structure.oebin") == 0) {
            snprintf(loc->rec_dir, sizeof loc->rec_dir, "%s", dir);
            return 1;
        }
        return strcmp(base_name(p), "continuous.dat") == 0 && stream_folder(dir, loc);
    }
    if (!is_dir(p))
        return 0;
    char f[4200];
    if (join(f, sizeof f, p, "structure.oebin") == BS_OK && bs_is_file(f)) {
        snprintf(loc->rec_dir, sizeof loc->rec_dir, "%s", p);
        return 1;
    }
    if (join(f, sizeof f, p, "continuous.dat") == BS_OK && bs_is_file(f))
        return stream_folder(p, loc);
    search_all(p, loc);
    return loc->n_found > 0;
}

int bs_openephys_detect(const char *path)
{
    location loc;
    return locate(path, &loc);
}

static bs_status resolve(const char *path, location *loc)
{
    if (!locate(path, loc))
        return bs_error(BS_ERR_INPUT, "%s: not an Open Ephys recording: expected structure.oebin, a recording, "
                                      "experiment or Record Node folder, or a continuous/<stream> folder",
                        path);
    if (loc->n_found > 1) {
        char list[2048] = "";
        for (int i = 0; i < loc->n_found && i < MAX_FOUND; i++) {
            size_t u = strlen(list);
            snprintf(list + u, sizeof list - u, "%s%s", i ? ", " : "", loc->found[i]);
        }
        return bs_error(BS_ERR_INPUT, "%s: holds %d Open Ephys recordings (%s%s): name the one to open", path,
                        loc->n_found, list, loc->n_found > MAX_FOUND ? ", ..." : "");
    }
    return BS_OK;
}

static bs_status read_index(const location *loc, char *oebin, size_t n, bs_oe_index *idx)
{
    BS_TRY(join(oebin, n, loc->rec_dir, "structure.oebin"));
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(oebin, BS_OE_OEBIN_MAX_BYTES, &text, &len));
    bs_status st = bs_oe_oebin_parse(text, len, oebin, idx);
    free(text);
    return st;
}

/* ---- sample numbers -------------------------------------------------------------- */

static bs_status read_i64_at(const char *path, uint64_t offset, int64_t *v)
{
    int fd;
    BS_TRY(bs_open_input(path, &fd));
    unsigned char b[8];
    ssize_t got = pread(fd, b, 8, (off_t)offset);
    close(fd);
    if (got != 8)
        return bs_error(BS_ERR_INPUT, "%s: cannot read 8 bytes at offset %llu", path, (unsigned long long)offset);
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = (u << 8) | b[i];
    *v = (int64_t)u;
    return BS_OK;
}

/* First sample number of the stream in `dir`, checked against n_samples. */
static bs_status first_sample_number(const char *dir, int64_t n_samples, int64_t *first)
{
    char sn[4200], ts[4200];
    BS_TRY(join(sn, sizeof sn, dir, "sample_numbers.npy"));
    BS_TRY(join(ts, sizeof ts, dir, "timestamps.npy"));
    const char *path = sn, *what = "sample numbers";
    bs_npy_header h;
    if (!bs_is_file(sn)) {
        if (!bs_is_file(ts))
            return bs_error(BS_ERR_INPUT, "%s: missing: expected sample_numbers.npy (GUI >= 0.6) or timestamps.npy "
                                          "(GUI 0.5.x) beside continuous.dat",
                            sn);
        path = ts;
        what = "sample numbers (GUI 0.5.x timestamps.npy)";
    }
    BS_TRY(bs_npy_read_header(path, &h));
    if (h.dtype != BS_NPY_I64 || h.ndim != 1) {
        if (path == ts)
            return bs_error(BS_ERR_INPUT, "%s: holds %s values with %d dimensions (GUI >= 0.6 seconds) and "
                                          "sample_numbers.npy is missing: expected sample_numbers.npy, or 1-D int64 "
                                          "sample numbers here (GUI 0.5.x)",
                            ts, bs_npy_dtype_descr(h.dtype), h.ndim);
        return bs_error(BS_ERR_INPUT, "%s: expected a 1-D int64 array of sample numbers, got %s with %d dimensions",
                        path, bs_npy_dtype_descr(h.dtype), h.ndim);
    }
    if (h.shape[0] != n_samples)
        return bs_error(BS_ERR_INPUT, "%s: holds %lld %s but continuous.dat holds %lld samples: expected one per "
                                      "sample (truncated file, or wrong num_channels in structure.oebin?)",
                        path, (long long)h.shape[0], what, (long long)n_samples);
    *first = 0;
    if (n_samples == 0)
        return BS_OK;
    int64_t last = 0;
    BS_TRY(read_i64_at(path, h.data_offset, first));
    BS_TRY(read_i64_at(path, h.data_offset + 8 * (uint64_t)(n_samples - 1), &last));
    if ((uint64_t)last - (uint64_t)*first != (uint64_t)(n_samples - 1))
        bs_log_warn("%s: sample numbers run from %lld to %lld over %lld samples: the recording has gaps; spike times "
                    "are indices into continuous.dat, map them through this file",
                    path, (long long)*first, (long long)last, (long long)n_samples);
    return BS_OK;
}

/* ---- the probe --------------------------------------------------------------------- */

static bs_status settings_path(const location *loc, char *out, size_t n)
{
    char exp_dir[4096], node[4096];
    BS_TRY(dir_name(loc->rec_dir, exp_dir, sizeof exp_dir));
    BS_TRY(dir_name(exp_dir, node, sizeof node));
    const char *e = base_name(exp_dir);
    int num = 0;
    if (strncmp(e, "experiment", 10) == 0 && sscanf(e + 10, "%d", &num) == 1 && num > 1) {
        char name[64];
        snprintf(name, sizeof name, "settings_%d.xml", num);
        BS_TRY(join(out, n, node, name));
        if (bs_is_file(out))
            return BS_OK;
    }
    return join(out, n, node, "settings.xml");
}

static bs_status probe_from_settings(const location *loc, const bs_oe_stream *s, bs_probe *p)
{
    char path[4200];
    BS_TRY(settings_path(loc, path, sizeof path));
    if (!bs_is_file(path))
        return bs_error(BS_ERR_INPUT, "%s: missing: the probe geometry of stream '%s' comes from the Record Node's "
                                      "settings.xml, or give it with --probe FILE",
                        path, s->name);
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(path, BS_XML_MAX_BYTES, &text, &len));
    bs_oe_settings set;
    bs_status st = bs_oe_settings_parse(text, len, path, s->source_processor_id, &set);
    free(text);
    if (st != BS_OK)
        return st;
    st = bs_oe_settings_probe(&set, s, p);
    bs_oe_settings_free(&set);
    return st;
}

static bs_status probe_from_file(const bs_open_options *opt, const bs_oe_stream *s, const char *oebin, bs_probe *p)
{
    int required = 0;
    BS_TRY(bs_probe_file_load(opt->probe_path, opt->probe_index, p, &required));
    bs_status st = BS_OK;
    if (required > s->n_cols)
        st = bs_error(BS_ERR_INPUT, "%s: the probe needs %d data columns but stream '%s' has %d (%s)",
                      opt->probe_path, required, s->name, s->n_cols, oebin);
    for (int i = 0; st == BS_OK && i < p->n_chan; i++) {
        const bs_oe_channel *c = &s->channels[p->column[i]];
        if (c->kind != BS_OE_CHAN_NEURAL)
            st = bs_error(BS_ERR_INPUT, "%s: probe channel %d reads column %d of stream '%s', which is %s channel "
                                        "'%s', expected a neural channel",
                          opt->probe_path, i, p->column[i], s->name,
                          c->kind == BS_OE_CHAN_SYNC ? "the sync" : c->kind == BS_OE_CHAN_ADC ? "an ADC" : "an AUX",
                          c->name);
    }
    if (st != BS_OK)
        bs_probe_free(p);
    return st;
}

/* ---- opening ------------------------------------------------------------------------- */

static bs_status pick(const location *loc, const bs_open_options *opt, const bs_oe_index *idx, const char *oebin,
                      int *which)
{
    const char *want = opt ? opt->stream : NULL;
    if (want && loc->folder[0]) {
        BS_TRY(bs_oe_pick_stream(idx, want, oebin, which));
        if (strcmp(idx->streams[*which].folder, loc->folder) != 0)
            return bs_error(BS_ERR_INPUT, "%s: --stream %s names folder '%s' but the path given is stream folder '%s'",
                            oebin, want, idx->streams[*which].folder, loc->folder);
        return BS_OK;
    }
    if (!want && loc->folder[0]) {
        for (int s = 0; s < idx->n_streams; s++)
            if (strcmp(idx->streams[s].folder, loc->folder) == 0) {
                if (idx->streams[s].kind == BS_OE_STREAM_OTHER)
                    return bs_error(BS_ERR_INPUT, "%s: stream '%s' has no neural channels (ADC, AUX or SYNC only): "
                                                  "nothing to sort",
                                    oebin, idx->streams[s].name);
                *which = s;
                return BS_OK;
            }
        return bs_error(BS_ERR_INPUT, "%s: no stream has folder_name '%s' (the folder given)", oebin, loc->folder);
    }
    return bs_oe_pick_stream(idx, want, oebin, which);
}

bs_status bs_openephys_open(const char *path, const bs_open_options *opt, bs_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    location loc;
    BS_TRY(resolve(path, &loc));
    char oebin[4200];
    bs_oe_index idx;
    BS_TRY(read_index(&loc, oebin, sizeof oebin, &idx));
    int which = -1;
    bs_status st = pick(&loc, opt, &idx, oebin, &which);
    if (st != BS_OK) {
        bs_oe_index_free(&idx);
        return st;
    }
    const bs_oe_stream *s = &idx.streams[which];
    char dir[4400], dat[4500];
    uint64_t bytes = 0;
    if (snprintf(dir, sizeof dir, "%s/continuous/%s", loc.rec_dir, s->folder) >= (int)sizeof dir ||
        snprintf(dat, sizeof dat, "%s/continuous.dat", dir) >= (int)sizeof dat ||
        strlen(dat) >= sizeof rec->data_path)
        st = bs_error(BS_ERR_INPUT, "%s: path too long", loc.rec_dir);
    if (st == BS_OK && !bs_is_file(dat))
        st = bs_error(BS_ERR_INPUT, "%s: missing: expected the samples of stream '%s' (%s)", dat, s->name, oebin);
    if (st == BS_OK)
        st = bs_file_size(dat, &bytes);
    uint64_t row = 2 * (uint64_t)s->n_cols;
    if (st == BS_OK && bytes % row != 0)
        st = bs_error(BS_ERR_INPUT,
                      "%s: %llu bytes is not a whole number of samples of %d int16 channels (%llu bytes each; "
                      "remainder %llu): truncated, or num_channels in structure.oebin is wrong",
                      dat, (unsigned long long)bytes, s->n_cols, (unsigned long long)row,
                      (unsigned long long)(bytes % row));
    int64_t n_samples = (int64_t)(bytes / row), first = 0;
    if (st == BS_OK)
        st = first_sample_number(dir, n_samples, &first);
    if (st == BS_OK)
        st = opt && opt->probe_path ? probe_from_file(opt, s, oebin, &rec->probe)
                                    : probe_from_settings(&loc, s, &rec->probe);
    if (st == BS_OK) {
        rec->uv_per_bit = bs_mem_alloc("io/recording", (size_t)rec->probe.n_chan * sizeof *rec->uv_per_bit);
        if (!rec->uv_per_bit)
            st = bs_error_context(BS_ERR_MEMORY, "%s", dat);
    }
    if (st != BS_OK) {
        bs_probe_free(&rec->probe);
        bs_oe_index_free(&idx);
        memset(rec, 0, sizeof *rec);
        return st;
    }
    for (int c = 0; c < rec->probe.n_chan; c++)
        rec->uv_per_bit[c] = (float)s->channels[rec->probe.column[c]].uv_per_bit;
    snprintf(rec->data_path, sizeof rec->data_path, "%s", dat);
    snprintf(rec->format, sizeof rec->format, "openephys");
    snprintf(rec->stream, sizeof rec->stream, "%s", s->name);
    rec->dtype = BS_SAMPLE_I16;
    rec->n_cols = s->n_cols;
    rec->data_offset = 0;
    rec->n_samples = n_samples;
    rec->fs_hz = s->fs_hz;
    rec->offset = 0;
    rec->first_sample = first;
    bs_log_debug("%s: stream '%s', %d sorted channels of %d columns, %lld samples at %g Hz from sample %lld", dat,
                 s->name, rec->probe.n_chan, rec->n_cols, (long long)n_samples, rec->fs_hz, (long long)first);
    bs_oe_index_free(&idx);
    return BS_OK;
}

bs_status bs_openephys_list_streams(const char *path, bs_oe_stream_info **list, int *n)
{
    *list = NULL;
    *n = 0;
    location loc;
    BS_TRY(resolve(path, &loc));
    char oebin[4200];
    bs_oe_index idx;
    BS_TRY(read_index(&loc, oebin, sizeof oebin, &idx));
    bs_oe_stream_info *out = calloc((size_t)idx.n_streams, sizeof *out);
    if (!out) {
        bs_oe_index_free(&idx);
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", oebin);
    }
    for (int s = 0; s < idx.n_streams; s++) {
        const bs_oe_stream *st = &idx.streams[s];
        snprintf(out[s].name, sizeof out[s].name, "%s", st->name);
        snprintf(out[s].folder, sizeof out[s].folder, "%s", st->folder);
        out[s].fs_hz = st->fs_hz;
        out[s].n_cols = st->n_cols;
        out[s].n_neural = st->n_neural;
        out[s].kind = st->kind;
    }
    *list = out;
    *n = idx.n_streams;
    bs_oe_index_free(&idx);
    return BS_OK;
}
