/*
 * nwb.c - the NWB reader's HDF5 side (see nwb.h): finding ElectricalSeries,
 * reading their metadata into a bs_nwb_meta, and reading samples.
 *
 * Finding series: a walk of the links under /acquisition and /processing
 * (hard and soft links; external links are never followed), at most 6
 * groups deep and 100000 links, keeping every group whose neurodata_type
 * attribute is "ElectricalSeries" (at most BS_NWB_MAX_SERIES).
 *
 * Reading samples (rec->read_rows, called by the batch reader): one
 * hyperslab of whole rows [row0, row0 + n) x all columns, converted by HDF5
 * to the recording's sample type straight into the batch reader's raw block.
 * Chunked datasets get a chunk cache that holds two bands of chunks across
 * all columns, so consecutive blocks (and the halo overlap between batches)
 * decompress each chunk once; its size (capped at 256 MiB) is reported to
 * the memory accountant under "io/nwb-chunk-cache". One process-wide mutex
 * serialises the HDF5 calls, so readers in several threads are safe even
 * with a library built without thread safety.
 *
 * Every HDF5 failure becomes a bs_error naming the file, the object and
 * what was expected (nwb_h5.h: the library's own text is appended).
 */
#include "nwb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../mem/mem.h"

int bs_nwb_looks_like(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    size_t n = strlen(path);
    if (n >= 4 && strcasecmp(path + n - 4, ".nwb") == 0)
        return 1;
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    int found = 0;
    static const long offs[] = {0, 512, 1024, 2048};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0] && !found; i++) {
        unsigned char b[8];
        found = fseek(fp, offs[i], SEEK_SET) == 0 && fread(b, 1, 8, fp) == 8 && memcmp(b, sig, 8) == 0;
    }
    fclose(fp);
    return found;
}

#ifndef BS_HAVE_HDF5

int bs_nwb_available(void) { return 0; }

static bs_status no_hdf5(const char *path)
{
    return bs_error(BS_ERR_INPUT,
                    "%s: this boundsort was built without HDF5, so it cannot read NWB files: install libhdf5-dev "
                    "and rebuild",
                    path);
}

bs_status bs_nwb_open(const char *path, const char *series, bs_recording *rec)
{
    (void)series;
    memset(rec, 0, sizeof *rec);
    return no_hdf5(path);
}

const bs_nwb_info *bs_nwb_get_info(const bs_recording *rec)
{
    (void)rec;
    return NULL;
}

bs_status bs_nwb_sample_times(const bs_recording *rec, const int64_t *samples, int64_t n, double *t_s)
{
    (void)samples, (void)n, (void)t_s;
    return no_hdf5(rec->data_path);
}

void bs_nwb_print_info(const bs_recording *rec, FILE *out) { (void)rec, (void)out; }

#else /* BS_HAVE_HDF5 */

#include <pthread.h>

#include "nwb_h5.h"

int bs_nwb_available(void) { return 1; }

static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;

#define CACHE_MAX ((size_t)256 << 20) /* bytes */
#define WALK_DEPTH 6
#define WALK_LINKS 100000

typedef struct {
    hid_t file, dset, ts;  /* file, its data dataset, timestamps (or -1) */
    hid_t mem_type;        /* memory type matching rec->dtype */
    size_t cache_bytes;    /* tracked with the accountant */
    int64_t *rows;         /* [n_cols] electrodes table row per data column, bs_mem */
    char *names;           /* series paths, NUL-separated */
    bs_nwb_info info;
} nwb_source;

/* ---------------------------------------------------------------- series */

typedef struct {
    char paths[BS_NWB_MAX_SERIES][1024];
    int n;
    long links;
} series_list;

static int is_series(hid_t g)
{
    char t[64];
    return bs_h5_attr_string(g, "neurodata_type", t, sizeof t) == 1 && strcmp(t, "ElectricalSeries") == 0;
}

static void walk(hid_t g, const char *path, int depth, series_list *L)
{
    H5G_info_t gi;
    if (depth > WALK_DEPTH || H5Gget_info(g, &gi) < 0)
        return;
    for (hsize_t i = 0; i < gi.nlinks && L->links < WALK_LINKS && L->n < BS_NWB_MAX_SERIES; i++) {
        L->links++;
        char name[512];
        ssize_t k = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
        if (k <= 0 || (size_t)k >= sizeof name)
            continue;
        H5L_info_t li;
        if (H5Lget_info(g, name, &li, H5P_DEFAULT) < 0 || (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT))
            continue;
        char sub[1024];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, name) >= sizeof sub)
            continue;
        hid_t o = H5Oopen(g, name, H5P_DEFAULT);
        if (o < 0)
            continue;
        if (H5Iget_type(o) == H5I_GROUP) {
            if (is_series(o))
                snprintf(L->paths[L->n++], sizeof L->paths[0], "%s", sub);
            else
                walk(o, sub, depth + 1, L);
        }
        H5Oclose(o);
    }
}

static void find_series(hid_t file, series_list *L)
{
    static const char *roots[] = {"/acquisition", "/processing"};
    for (int r = 0; r < 2; r++) {
        if (!bs_h5_exists(file, roots[r]))
            continue;
        hid_t g = H5Oopen(file, roots[r], H5P_DEFAULT);
        if (g < 0)
            continue;
        if (H5Iget_type(g) == H5I_GROUP)
            walk(g, roots[r], 1, L);
        H5Oclose(g);
    }
    H5Eclear2(H5E_DEFAULT);
}

static void join_list(const series_list *L, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < L->n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ", " : "", L->paths[i]);
}

static bs_status pick_series(const char *path, const series_list *L, const char *want, int *which)
{
    char list[4096];
    join_list(L, list, sizeof list);
    if (L->n == 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: no ElectricalSeries: expected a group with neurodata_type 'ElectricalSeries' under "
                        "/acquisition or /processing",
                        path);
    if (!want) {
        if (L->n == 1) {
            *which = 0;
            return BS_OK;
        }
        return bs_error(BS_ERR_INPUT, "%s: %d ElectricalSeries (%s): choose one with --series NAME", path, L->n, list);
    }
    const char *w = want[0] == '/' ? want + 1 : want;
    int hit = -1, n_hit = 0;
    for (int i = 0; i < L->n; i++) {
        const char *p = L->paths[i] + 1, *base = strrchr(p, '/');
        if (strcmp(p, w) == 0) { /* a full path wins */
            *which = i;
            return BS_OK;
        }
        if (strcmp(base ? base + 1 : p, w) == 0) {
            hit = i;
            n_hit++;
        }
    }
    if (n_hit == 1) {
        *which = hit;
        return BS_OK;
    }
    if (n_hit > 1)
        return bs_error(BS_ERR_INPUT, "%s: --series '%s' matches %d ElectricalSeries (%s): give its full path", path,
                        want, n_hit, list);
    return bs_error(BS_ERR_INPUT, "%s: --series '%s': no such ElectricalSeries; the file has: %s", path, want, list);
}

/* --------------------------------------------------------------- reading */

/* 1-D (or scalar) dataset `name` under loc read as doubles (at most `max`
 * values from the start; *n gets the full length): 1 read, 0 absent. */
static int read_vector(hid_t loc, const char *name, int64_t max, double **out, int64_t *n, int *rank_out,
                       const char *file, const char *where, bs_status *st)
{
    *out = NULL;
    *n = 0;
    if (!bs_h5_exists(loc, name))
        return 0;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) {
        *st = bs_h5_fail(BS_ERR_INPUT, "%s: %s/%s: expected a dataset", file, where, name);
        return -1;
    }
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    hsize_t dims[1] = {1};
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    int ok = 1;
    if (rank_out)
        *rank_out = rank;
    if (rank > 1 || rank < 0 || (cls != H5T_INTEGER && cls != H5T_FLOAT)) {
        *st = bs_error(BS_ERR_INPUT, "%s: %s/%s: expected a numeric vector, got %s with %d dimensions", file, where,
                       name, cls == H5T_STRING ? "text" : (cls == H5T_INTEGER || cls == H5T_FLOAT) ? "numbers"
                                                                                                 : "another type",
                       rank);
        ok = -1;
    } else {
        if (rank == 1)
            H5Sget_simple_extent_dims(s, dims, NULL);
        *n = (int64_t)dims[0];
        int64_t k = *n < max ? *n : max;
        *out = bs_mem_alloc("io/nwb-meta", (size_t)(k > 0 ? k : 1) * sizeof **out);
        if (!*out) {
            *st = BS_ERR_MEMORY;
            ok = -1;
        } else if (k > 0) {
            hid_t ms = -1;
            herr_t e;
            if (rank == 1) {
                hsize_t start = 0, cnt = (hsize_t)k;
                H5Sselect_hyperslab(s, H5S_SELECT_SET, &start, NULL, &cnt, NULL);
                ms = H5Screate_simple(1, &cnt, NULL);
                e = H5Dread(d, H5T_NATIVE_DOUBLE, ms, s, H5P_DEFAULT, *out);
            } else {
                e = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out);
            }
            if (ms >= 0)
                H5Sclose(ms);
            if (e < 0) {
                *st = bs_h5_fail(BS_ERR_INPUT, "%s: %s/%s: cannot read the values", file, where, name);
                ok = -1;
            }
        }
    }
    if (ok < 0) {
        bs_mem_free(*out);
        *out = NULL;
    }
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Dclose(d);
    return ok;
}

/* A 1-D text column as NUL-separated strings: 1 read, 0 absent. */
static int read_strings(hid_t loc, const char *name, char **store, const char ***out, int64_t *n, const char *file,
                        bs_status *st)
{
    *store = NULL;
    *out = NULL;
    *n = 0;
    if (!bs_h5_exists(loc, name))
        return 0;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) {
        *st = bs_h5_fail(BS_ERR_INPUT, "%s: electrodes table: column '%s': expected a dataset", file, name);
        return -1;
    }
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    int ok = -1;
    hsize_t dim = 0;
    if (s >= 0 && t >= 0 && H5Sget_simple_extent_ndims(s) == 1 && H5Tget_class(t) == H5T_STRING &&
        H5Sget_simple_extent_dims(s, &dim, NULL) >= 0 && dim <= 10000000) {
        int vlen = H5Tis_variable_str(t) > 0;
        size_t fixed = vlen ? 0 : H5Tget_size(t);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, vlen ? H5T_VARIABLE : fixed + 1);
        H5Tset_cset(mt, H5Tget_cset(t));
        size_t cell = vlen ? sizeof(char *) : fixed + 1;
        char *raw = fixed < ((size_t)1 << 16) ? calloc(dim ? dim : 1, cell) : NULL;
        if (raw && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0) {
            size_t total = 0;
            for (hsize_t i = 0; i < dim; i++) {
                const char *c = vlen ? ((char **)raw)[i] : raw + i * cell;
                total += (c ? strlen(c) : 0) + 1;
            }
            *store = malloc(total ? total : 1);
            *out = calloc(dim ? dim : 1, sizeof **out);
            if (*store && *out) {
                size_t k = 0;
                for (hsize_t i = 0; i < dim; i++) {
                    const char *c = vlen ? ((char **)raw)[i] : raw + i * cell;
                    size_t L = c ? strlen(c) : 0;
                    memcpy(*store + k, c ? c : "", L + 1);
                    (*out)[i] = *store + k;
                    k += L + 1;
                }
                *n = (int64_t)dim;
                ok = 1;
            } else {
                *st = bs_error(BS_ERR_MEMORY, "%s: electrodes table: column '%s': out of memory", file, name);
            }
            if (vlen) {
                hsize_t dd = dim;
                hid_t ms = H5Screate_simple(1, &dd, NULL);
                H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, raw);
                H5Sclose(ms);
            }
        } else {
            *st = bs_h5_fail(BS_ERR_INPUT, "%s: electrodes table: column '%s': cannot read the text", file, name);
        }
        free(raw);
        H5Tclose(mt);
    } else {
        *st = bs_error(BS_ERR_INPUT, "%s: electrodes table: column '%s': expected a 1-D text column", file, name);
    }
    if (ok < 0) {
        free(*store), free(*out);
        *store = NULL, *out = NULL;
    }
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Dclose(d);
    return ok;
}

/* The sample type HDF5 converts `t` to, or -1 with a message. */
static int sample_type_for(hid_t t, bs_sample_type *st_out, hid_t *mem)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER) {
        int sgn = H5Tget_sign(t) == H5T_SGN_2;
        if (sz == 1 || (sz == 2 && sgn)) {
            *st_out = BS_SAMPLE_I16, *mem = H5T_NATIVE_INT16;
            return 0;
        }
        if (sz == 2) {
            *st_out = BS_SAMPLE_U16, *mem = H5T_NATIVE_UINT16;
            return 0;
        }
        if (sz == 4 && sgn) {
            *st_out = BS_SAMPLE_I32, *mem = H5T_NATIVE_INT32;
            return 0;
        }
    } else if (c == H5T_FLOAT && (sz == 4 || sz == 8)) {
        *st_out = BS_SAMPLE_F32, *mem = H5T_NATIVE_FLOAT;
        return 0;
    }
    return -1;
}

static void source_free(nwb_source *S)
{
    if (!S)
        return;
    if (S->ts >= 0)
        H5Dclose(S->ts);
    if (S->dset >= 0)
        H5Dclose(S->dset);
    if (S->file >= 0)
        H5Fclose(S->file);
    if (S->cache_bytes)
        bs_mem_untrack(BS_DEV_HOST, "io/nwb-chunk-cache", S->cache_bytes);
    bs_mem_free(S->rows);
    free(S->names);
    free(S);
}

static void close_source(bs_recording *rec)
{
    pthread_mutex_lock(&h5_lock);
    bs_h5_quiet();
    source_free(rec->source);
    pthread_mutex_unlock(&h5_lock);
    rec->source = NULL;
    rec->read_rows = NULL;
    rec->close_source = NULL;
}

static bs_status read_rows(const bs_recording *rec, int64_t row0, int64_t n_rows, void *dst)
{
    nwb_source *S = rec->source;
    pthread_mutex_lock(&h5_lock);
    bs_h5_quiet();
    hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)n_rows, (hsize_t)rec->n_cols};
    hid_t fs = H5Dget_space(S->dset), ms = H5Screate_simple(2, count, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) : -1;
    if (e >= 0)
        e = H5Dread(S->dset, S->mem_type, ms, fs, H5P_DEFAULT, dst);
    bs_status st = BS_OK;
    if (e < 0)
        st = bs_h5_fail(BS_ERR_INPUT, "%s: %s/data: cannot read samples %lld..%lld", rec->data_path, S->info.series,
                        (long long)row0, (long long)(row0 + n_rows - 1));
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

/* Reopen data with a chunk cache sized for row bands across all columns. */
static bs_status open_data(nwb_source *S, hid_t g, const char *path)
{
    hid_t d = H5Dopen2(g, "data", H5P_DEFAULT);
    if (d < 0)
        return bs_h5_fail(BS_ERR_INPUT, "%s: %s/data: expected a dataset", path, S->info.series);
    hid_t dcpl = H5Dget_create_plist(d), t = H5Dget_type(d);
    hsize_t ch[2] = {0, 0}, dims[2] = {0, 0};
    hid_t s = H5Dget_space(d);
    int chunked = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 2, ch) == 2;
    if (s >= 0)
        H5Sget_simple_extent_dims(s, dims, NULL);
    size_t cache = 0;
    if (chunked && ch[0] > 0 && ch[1] > 0 && t >= 0) {
        double chunk_bytes = (double)ch[0] * (double)ch[1] * (double)H5Tget_size(t);
        double across = ceil((double)dims[1] / (double)ch[1]);
        double want = 2.0 * chunk_bytes * across;
        cache = want > (double)CACHE_MAX ? CACHE_MAX : (size_t)want;
        if (cache < ((size_t)1 << 20))
            cache = 0; /* HDF5's default 1 MiB cache is enough */
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    if (!cache) {
        S->dset = d;
        return BS_OK;
    }
    H5Dclose(d);
    if (bs_mem_track(BS_DEV_HOST, "io/nwb-chunk-cache", cache) != BS_OK)
        return BS_ERR_MEMORY;
    S->cache_bytes = cache;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 100003, cache, 1.0);
    S->dset = H5Dopen2(g, "data", dapl);
    H5Pclose(dapl);
    if (S->dset < 0)
        return bs_h5_fail(BS_ERR_INPUT, "%s: %s/data: expected a dataset", path, S->info.series);
    return BS_OK;
}

/* Everything below the series group that bs_nwb_meta_resolve needs. */
typedef struct {
    double *cc, *ts, *el, *rel_x, *rel_y, *ids;
    int64_t *el_rows;
    char *gn_store;
    const char **gn;
} meta_bufs;

static void meta_bufs_free(meta_bufs *b)
{
    bs_mem_free(b->cc), bs_mem_free(b->ts), bs_mem_free(b->el), bs_mem_free(b->rel_x), bs_mem_free(b->rel_y),
        bs_mem_free(b->ids), bs_mem_free(b->el_rows);
    free(b->gn_store);
    free(b->gn);
    memset(b, 0, sizeof *b);
}

static bs_status read_meta(nwb_source *S, hid_t g, const char *path, bs_nwb_meta *m, meta_bufs *b)
{
    const char *ser = S->info.series;
    bs_status st = BS_OK;
    memset(m, 0, sizeof *m);
    m->file = path;
    m->series = ser;
    m->conversion = 1.0;
    m->n_rows = -1;
    /* data */
    if (!bs_h5_exists(g, "data"))
        return bs_error(BS_ERR_INPUT, "%s: %s: no 'data' dataset: expected the samples (time x channels)", path, ser);
    hid_t d = H5Dopen2(g, "data", H5P_DEFAULT);
    if (d < 0)
        return bs_h5_fail(BS_ERR_INPUT, "%s: %s/data: expected a dataset", path, ser);
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    hsize_t dims[8] = {0};
    m->rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (m->rank >= 1 && m->rank <= 8)
        H5Sget_simple_extent_dims(s, dims, NULL);
    m->n_times = (int64_t)dims[0];
    m->n_chan = m->rank >= 2 ? (int64_t)dims[1] : 0;
    int tok = t >= 0 ? sample_type_for(t, &m->dtype, &S->mem_type) : -1;
    char tname[64] = "unknown";
    if (t >= 0 && tok < 0)
        snprintf(tname, sizeof tname, "%s of %zu bytes",
                 H5Tget_class(t) == H5T_INTEGER ? (H5Tget_sign(t) == H5T_SGN_2 ? "signed integer" : "unsigned integer")
                 : H5Tget_class(t) == H5T_FLOAT ? "float"
                 : H5Tget_class(t) == H5T_STRING ? "text"
                                                 : "non-numeric type",
                 H5Tget_size(t));
    int ca = bs_h5_attr_double(d, "conversion", &m->conversion);
    int oa = bs_h5_attr_double(d, "offset", &m->offset);
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Dclose(d);
    if (m->rank == 2 && tok < 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s/data: expected int8, uint8, int16, uint16, int32, float32 or float64 samples, got %s",
                        path, ser, tname);
    if (ca < 0 || oa < 0)
        return bs_error(BS_ERR_INPUT, "%s: %s/data: attribute '%s': expected a number", path, ser,
                        ca < 0 ? "conversion" : "offset");
    m->has_conversion = ca == 1;
    m->has_offset = oa == 1;
    if (m->rank != 2)
        return BS_OK; /* resolve reports the shape */
    /* channel_conversion */
    int64_t n = 0;
    int r = read_vector(g, "channel_conversion", 10000000, &b->cc, &n, NULL, path, ser, &st);
    if (r < 0)
        return st;
    m->channel_conversion = b->cc;
    m->n_channel_conversion = n;
    /* time */
    if (bs_h5_exists(g, "starting_time")) {
        int rank = 0;
        r = read_vector(g, "starting_time", 1, &b->el, &n, &rank, path, ser, &st);
        if (r < 0)
            return st;
        if (n != 1)
            return bs_error(BS_ERR_INPUT, "%s: %s/starting_time: expected one number of seconds, got %lld values", path,
                            ser, (long long)n);
        m->has_starting_time = 1;
        m->starting_time = b->el[0];
        bs_mem_free(b->el);
        b->el = NULL;
        hid_t sd = H5Dopen2(g, "starting_time", H5P_DEFAULT);
        int ra = sd >= 0 ? bs_h5_attr_double(sd, "rate", &m->rate) : -1;
        if (sd >= 0)
            H5Dclose(sd);
        if (ra < 0)
            return bs_error(BS_ERR_INPUT, "%s: %s/starting_time: attribute 'rate': expected a number of Hz", path, ser);
        m->has_rate = ra == 1;
    } else {
        r = read_vector(g, "timestamps", BS_NWB_TIMESTAMPS_HEAD, &b->ts, &n, NULL, path, ser, &st);
        if (r < 0)
            return st;
        m->timestamps = b->ts;
        m->n_timestamps = n;
        m->n_timestamps_head = n < BS_NWB_TIMESTAMPS_HEAD ? n : BS_NWB_TIMESTAMPS_HEAD;
    }
    /* electrodes region and its table */
    r = read_vector(g, "electrodes", 10000000, &b->el, &n, NULL, path, ser, &st);
    if (r < 0)
        return st;
    if (r == 1) {
        b->el_rows = bs_mem_alloc("io/nwb-meta", (size_t)(n > 0 ? n : 1) * sizeof *b->el_rows);
        if (!b->el_rows)
            return BS_ERR_MEMORY;
        for (int64_t i = 0; i < n; i++) {
            double v = b->el[i];
            b->el_rows[i] = v >= -1e15 && v <= 1e15 && v == floor(v) ? (int64_t)v : -1;
        }
        m->electrodes = b->el_rows;
        m->n_electrodes = n;
    }
    hid_t table = -1;
    if (r == 1) {
        hid_t ed = H5Dopen2(g, "electrodes", H5P_DEFAULT);
        if (ed >= 0 && bs_h5_has_attr(ed, "table")) {
            hid_t a = H5Aopen(ed, "table", H5P_DEFAULT);
            hid_t at = a >= 0 ? H5Aget_type(a) : -1;
            hobj_ref_t ref;
            if (at >= 0 && H5Tget_class(at) == H5T_REFERENCE && H5Aread(a, H5T_STD_REF_OBJ, &ref) >= 0)
                table = H5Rdereference2(ed, H5P_DEFAULT, H5R_OBJECT, &ref);
            if (at >= 0)
                H5Tclose(at);
            if (a >= 0)
                H5Aclose(a);
        }
        if (ed >= 0)
            H5Dclose(ed);
        if (table >= 0 && H5Iget_type(table) != H5I_GROUP) {
            H5Oclose(table);
            table = -1;
        }
        H5Eclear2(H5E_DEFAULT);
    }
    if (table < 0 && bs_h5_exists(S->file, "/general/extracellular_ephys/electrodes")) {
        table = H5Oopen(S->file, "/general/extracellular_ephys/electrodes", H5P_DEFAULT);
        if (table >= 0 && H5Iget_type(table) != H5I_GROUP) {
            H5Oclose(table);
            table = -1;
        }
    }
    if (table < 0)
        return BS_OK; /* n_rows = -1: resolve reports it */
    H5Iget_name(table, S->info.electrodes, sizeof S->info.electrodes);
    const char *tw = "electrodes table";
    r = read_vector(table, "id", 10000000, &b->ids, &n, NULL, path, tw, &st);
    if (r >= 0)
        m->n_rows = r == 1 ? n : -1;
    if (r >= 0)
        r = read_vector(table, "rel_x", 10000000, &b->rel_x, &m->n_rel_x, NULL, path, tw, &st);
    if (r >= 0)
        r = read_vector(table, "rel_y", 10000000, &b->rel_y, &m->n_rel_y, NULL, path, tw, &st);
    if (r >= 0)
        r = read_strings(table, "group_name", &b->gn_store, &b->gn, &m->n_group_name, path, &st);
    H5Oclose(table);
    if (r < 0)
        return st;
    if (m->n_rows < 0 && b->rel_x)
        m->n_rows = m->n_rel_x; /* no id column: the table's length is its columns' */
    else if (m->n_rows < 0)
        m->n_rows = 0;
    m->rel_x = b->rel_x;
    m->rel_y = b->rel_y;
    m->group_name = (const char *const *)b->gn;
    return BS_OK;
}

static bs_status open_locked(const char *path, const char *series, bs_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    if (strlen(path) >= sizeof rec->data_path)
        return bs_error(BS_ERR_INPUT, "%s: path longer than %zu bytes", path, sizeof rec->data_path - 1);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return bs_error(BS_ERR_INPUT, "%s: not an HDF5 file (no HDF5 signature): expected an NWB 2.x file", path);
    }
    nwb_source *S = calloc(1, sizeof *S);
    if (!S)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
    S->file = S->dset = S->ts = -1;
    bs_status st = BS_OK;
    series_list *L = calloc(1, sizeof *L);
    meta_bufs b = {0};
    hid_t g = -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, 1, 1); /* lock, but open anyway where the file system has no locks (NFS, Lustre) */
#endif
    S->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (S->file < 0) {
        st = bs_h5_fail(BS_ERR_INPUT, "%s: cannot open the HDF5 file (truncated or damaged?)", path);
        goto fail;
    }
    if (!L) {
        st = bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    find_series(S->file, L);
    int which = 0;
    if ((st = pick_series(path, L, series, &which)) != BS_OK)
        goto fail;
    /* keep the list for info */
    size_t total = 0;
    for (int i = 0; i < L->n; i++)
        total += strlen(L->paths[i]) + 1;
    S->names = malloc(total);
    if (!S->names) {
        st = bs_error(BS_ERR_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0, k = 0; i < L->n; i++) {
        S->info.series_list[i] = S->names + k;
        memcpy(S->names + k, L->paths[i], strlen(L->paths[i]) + 1);
        k += (int)strlen(L->paths[i]) + 1;
    }
    S->info.n_series = L->n;
    snprintf(S->info.series, sizeof S->info.series, "%s", L->paths[which]);
    g = H5Gopen2(S->file, S->info.series, H5P_DEFAULT);
    if (g < 0) {
        st = bs_h5_fail(BS_ERR_INPUT, "%s: %s: cannot open the group", path, S->info.series);
        goto fail;
    }
    bs_nwb_meta m;
    if ((st = read_meta(S, g, path, &m, &b)) != BS_OK)
        goto fail;
    double t0 = 0;
    if ((st = bs_nwb_meta_resolve(&m, rec, &t0)) != BS_OK)
        goto fail;
    S->info.starting_time_s = t0;
    S->info.has_timestamps = m.timestamps != NULL;
    S->info.n_table_rows = m.n_rows;
    S->rows = bs_mem_alloc("io/nwb-meta", (size_t)rec->n_cols * sizeof *S->rows);
    if (!S->rows) {
        st = BS_ERR_MEMORY;
        goto fail;
    }
    memcpy(S->rows, m.electrodes, (size_t)rec->n_cols * sizeof *S->rows);
    S->info.electrode_row = S->rows;
    if ((st = open_data(S, g, path)) != BS_OK)
        goto fail;
    if (S->info.has_timestamps && (S->ts = H5Dopen2(g, "timestamps", H5P_DEFAULT)) < 0) {
        st = bs_h5_fail(BS_ERR_INPUT, "%s: %s/timestamps: cannot open", path, S->info.series);
        goto fail;
    }
    H5Gclose(g);
    meta_bufs_free(&b);
    free(L);
    snprintf(rec->data_path, sizeof rec->data_path, "%s", path);
    snprintf(rec->format, sizeof rec->format, "nwb");
    if (strlen(S->info.series) < sizeof rec->stream) /* the ElectricalSeries read, for source.json */
        memcpy(rec->stream, S->info.series, strlen(S->info.series) + 1);
    rec->data_offset = 0;
    rec->source = S;
    rec->read_rows = read_rows;
    rec->close_source = close_source;
    rec->source_bytes = S->cache_bytes + (size_t)rec->n_cols * sizeof *S->rows;
    return BS_OK;
fail:
    if (g >= 0)
        H5Gclose(g);
    meta_bufs_free(&b);
    free(L);
    source_free(S);
    bs_probe_free(&rec->probe);
    bs_mem_free(rec->uv_per_bit);
    memset(rec, 0, sizeof *rec);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

bs_status bs_nwb_open(const char *path, const char *series, bs_recording *rec)
{
    pthread_mutex_lock(&h5_lock);
    bs_h5_quiet();
    bs_status st = open_locked(path, series, rec);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

const bs_nwb_info *bs_nwb_get_info(const bs_recording *rec)
{
    if (!rec || rec->close_source != close_source || !rec->source)
        return NULL;
    return &((const nwb_source *)rec->source)->info;
}

bs_status bs_nwb_sample_times(const bs_recording *rec, const int64_t *samples, int64_t n, double *t_s)
{
    const bs_nwb_info *info = bs_nwb_get_info(rec);
    if (!info)
        return bs_error(BS_ERR_INTERNAL, "%s: not an NWB recording", rec->data_path);
    for (int64_t i = 0; i < n; i++)
        if (samples[i] < 0 || samples[i] >= rec->n_samples)
            return bs_error(BS_ERR_INTERNAL, "%s: sample %lld outside the recording (%lld samples)", rec->data_path,
                            (long long)samples[i], (long long)rec->n_samples);
    if (!info->has_timestamps) {
        for (int64_t i = 0; i < n; i++)
            t_s[i] = info->starting_time_s + (double)(rec->row0 + samples[i]) / rec->fs_hz;
        return BS_OK;
    }
    const nwb_source *S = rec->source;
    enum { BLOCK = 4096 };
    hsize_t coord[BLOCK];
    bs_status st = BS_OK;
    pthread_mutex_lock(&h5_lock);
    bs_h5_quiet();
    for (int64_t i0 = 0; i0 < n && st == BS_OK; i0 += BLOCK) {
        int64_t k = n - i0 < BLOCK ? n - i0 : BLOCK;
        for (int64_t i = 0; i < k; i++)
            coord[i] = (hsize_t)(rec->row0 + samples[i0 + i]);
        hsize_t kk = (hsize_t)k;
        hid_t fs = H5Dget_space(S->ts), ms = H5Screate_simple(1, &kk, NULL);
        herr_t e = H5Sselect_elements(fs, H5S_SELECT_SET, (size_t)k, coord);
        if (e >= 0)
            e = H5Dread(S->ts, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, t_s + i0);
        if (e < 0)
            st = bs_h5_fail(BS_ERR_INPUT, "%s: %s/timestamps: cannot read", rec->data_path, info->series);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    pthread_mutex_unlock(&h5_lock);
    return st;
}

void bs_nwb_print_info(const bs_recording *rec, FILE *out)
{
    const bs_nwb_info *info = bs_nwb_get_info(rec);
    if (!info)
        return;
    fprintf(out, "series         %s", info->series);
    if (info->n_series > 1) {
        fprintf(out, " (one of %d:", info->n_series);
        for (int i = 0; i < info->n_series; i++)
            fprintf(out, " %s", info->series_list[i]);
        fprintf(out, ")");
    }
    fprintf(out, "\nelectrodes     %s (%lld rows)\n", info->electrodes, (long long)info->n_table_rows);
    fprintf(out, "start time     %.9g s (%s)\n", info->starting_time_s,
            info->has_timestamps ? "timestamps" : "starting_time + rate");
}

#endif /* BS_HAVE_HDF5 */
