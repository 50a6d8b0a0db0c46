/*
 * nwb_h5.c - HDF5 helpers for NWB reading and writing (see nwb_h5.h).
 *
 * Error text: H5Ewalk2 visits the current error stack from the innermost
 * record (where the library detected the problem, e.g. "file signature not
 * found" or "truncated file: eof = ...") outwards; the first record's
 * description is the most specific one and is the only one kept.
 *
 * object_id: splitmix64 of (seed, FNV-1a hash of the path) gives 128 bits,
 * the version nibble is set to 4 and the variant bits to 10, as in a random
 * UUID, and it is printed in the 8-4-4-4-12 form.
 */
#include "nwb_h5.h"

#ifdef BS_HAVE_HDF5
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bs_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

static herr_t first_desc(unsigned n, const H5E_error2_t *e, void *data)
{
    char *buf = data;
    if (n == 0 && e->desc && e->desc[0])
        snprintf(buf, 256, "%s", e->desc);
    return 0;
}

bs_status bs_h5_fail(bs_status st, const char *fmt, ...)
{
    char msg[1024], detail[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_desc, detail);
    H5Eclear2(H5E_DEFAULT);
    if (detail[0])
        return bs_error(st, "%s (HDF5: %s)", msg, detail);
    return bs_error(st, "%s", msg);
}

int bs_h5_has_attr(hid_t obj, const char *name) { return H5Aexists(obj, name) > 0; }

int bs_h5_exists(hid_t loc, const char *name)
{
    /* check each path component so a missing parent is "absent", not an error */
    char part[1024];
    size_t n = strlen(name);
    if (n >= sizeof part)
        return 0;
    for (size_t i = 1; i <= n; i++)
        if (name[i] == '/' || name[i] == '\0') {
            memcpy(part, name, i);
            part[i] = '\0';
            if (H5Lexists(loc, part, H5P_DEFAULT) <= 0)
                return 0;
        }
    return 1;
}

int bs_h5_attr_double(hid_t obj, const char *name, double *v)
{
    if (H5Aexists(obj, name) <= 0)
        return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    int ok = -1;
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    if (t >= 0 && s >= 0) {
        H5T_class_t c = H5Tget_class(t);
        hssize_t n = H5Sget_simple_extent_npoints(s);
        if ((c == H5T_INTEGER || c == H5T_FLOAT) && n == 1 && H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0)
            ok = 1;
    }
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Aclose(a);
    return ok;
}

int bs_h5_attr_string(hid_t obj, const char *name, char *buf, size_t len)
{
    if (len == 0 || H5Aexists(obj, name) <= 0)
        return 0;
    buf[0] = '\0';
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    int ok = -1;
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(s) == 1) {
        if (H5Tis_variable_str(t) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            char *p = NULL;
            if (H5Aread(a, mt, &p) >= 0) {
                snprintf(buf, len, "%s", p ? p : "");
                ok = 1;
                H5free_memory(p);
            }
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(t);
            char *tmp = sz < ((size_t)1 << 20) ? calloc(sz + 1, 1) : NULL;
            if (tmp && H5Aread(a, t, tmp) >= 0) {
                snprintf(buf, len, "%s", tmp);
                ok = 1;
            }
            free(tmp);
        }
    }
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    H5Aclose(a);
    return ok;
}

/* Creation properties without modification times (reproducible files). */
static hid_t no_times(hid_t cls)
{
    hid_t p = H5Pcreate(cls);
    if (p >= 0)
        H5Pset_obj_track_times(p, 0);
    return p;
}

hid_t bs_h5_group(hid_t loc, const char *name)
{
    hid_t p = no_times(H5P_GROUP_CREATE);
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, p, H5P_DEFAULT);
    H5Pclose(p);
    if (g < 0)
        bs_h5_fail(BS_ERR_INPUT, "cannot create the HDF5 group '%s'", name);
    return g;
}

static hid_t vlen_str(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

static bs_status write_attr(hid_t obj, const char *name, hid_t type, hid_t space, hid_t mem_type, const void *v)
{
    if (H5Aexists(obj, name) > 0)
        H5Adelete(obj, name);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a >= 0 ? H5Awrite(a, mem_type, v) : -1;
    if (a >= 0)
        H5Aclose(a);
    return e < 0 ? bs_h5_fail(BS_ERR_INPUT, "cannot write the HDF5 attribute '%s'", name) : BS_OK;
}

bs_status bs_h5_attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = vlen_str(), s = H5Screate(H5S_SCALAR);
    bs_status st = write_attr(obj, name, t, s, t, &value);
    H5Sclose(s);
    H5Tclose(t);
    return st;
}

bs_status bs_h5_attr_strs(hid_t obj, const char *name, const char *const *values, int n)
{
    hsize_t d = (hsize_t)n;
    hid_t t = vlen_str(), s = H5Screate_simple(1, &d, NULL);
    bs_status st = write_attr(obj, name, t, s, t, values);
    H5Sclose(s);
    H5Tclose(t);
    return st;
}

bs_status bs_h5_attr_num(hid_t obj, const char *name, hid_t file_type, double value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    bs_status st = write_attr(obj, name, file_type, s, H5T_NATIVE_DOUBLE, &value);
    H5Sclose(s);
    return st;
}

bs_status bs_h5_attr_ref(hid_t obj, const char *name, const char *target)
{
    hobj_ref_t ref;
    if (H5Rcreate(&ref, obj, target, H5R_OBJECT, -1) < 0)
        return bs_h5_fail(BS_ERR_INPUT, "cannot reference '%s'", target);
    hid_t s = H5Screate(H5S_SCALAR);
    bs_status st = write_attr(obj, name, H5T_STD_REF_OBJ, s, H5T_STD_REF_OBJ, &ref);
    H5Sclose(s);
    return st;
}

hid_t bs_h5_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int rank, const hsize_t *dims,
                    hsize_t chunk0, const void *data)
{
    hid_t s = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, NULL);
    hid_t p = no_times(H5P_DATASET_CREATE);
    int empty = 0;
    for (int i = 0; i < rank; i++)
        empty |= dims[i] == 0;
    if (chunk0 > 0 && rank > 0 && !empty) {
        hsize_t ch[8];
        for (int i = 0; i < rank && i < 8; i++)
            ch[i] = dims[i];
        ch[0] = chunk0 < dims[0] ? chunk0 : dims[0];
        H5Pset_chunk(p, rank, ch);
        H5Pset_deflate(p, 4);
    }
    hid_t d = H5Dcreate2(loc, name, file_type, s, H5P_DEFAULT, p, H5P_DEFAULT);
    herr_t e = d < 0 ? -1 : 0;
    if (d >= 0 && data && !empty)
        e = H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Pclose(p);
    H5Sclose(s);
    if (e < 0) {
        if (d >= 0)
            H5Dclose(d);
        bs_h5_fail(BS_ERR_INPUT, "cannot write the HDF5 dataset '%s'", name);
        return H5I_INVALID_HID;
    }
    return d;
}

/* Text dataset: scalar (rank 0) or 1-D of n strings. */
static bs_status text_dataset(hid_t loc, const char *name, int rank, int64_t n, const char *const *values)
{
    hid_t t = vlen_str();
    hsize_t dims = (hsize_t)n;
    hid_t d = bs_h5_dataset(loc, name, t, t, rank, &dims, 0, values);
    H5Tclose(t);
    if (d < 0)
        return BS_ERR_INPUT;
    H5Dclose(d);
    return BS_OK;
}

bs_status bs_h5_str_dataset(hid_t loc, const char *name, const char *value)
{
    return text_dataset(loc, name, 0, 1, &value);
}

bs_status bs_h5_strs_dataset(hid_t loc, const char *name, const char *const *values, int64_t n)
{
    return text_dataset(loc, name, 1, n, values);
}

bs_status bs_h5_refs_dataset(hid_t loc, const char *name, const char *const *paths, int64_t n)
{
    hobj_ref_t *refs = calloc(n > 0 ? (size_t)n : 1, sizeof *refs);
    if (!refs)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", name);
    for (int64_t i = 0; i < n; i++)
        if (H5Rcreate(&refs[i], loc, paths[i], H5R_OBJECT, -1) < 0) {
            free(refs);
            return bs_h5_fail(BS_ERR_INPUT, "cannot reference '%s'", paths[i]);
        }
    hsize_t dims = (hsize_t)n;
    hid_t d = bs_h5_dataset(loc, name, H5T_STD_REF_OBJ, H5T_STD_REF_OBJ, 1, &dims, 0, refs);
    free(refs);
    if (d < 0)
        return BS_ERR_INPUT;
    H5Dclose(d);
    return BS_OK;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void bs_nwb_uuid(uint64_t seed, const char *path, char out[37])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    uint64_t a = mix64(seed ^ mix64(h)), b = mix64(a ^ 0x6a09e667f3bcc909ULL);
    a = (a & ~0xf000ULL) | 0x4000ULL;                  /* version 4 */
    b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL; /* variant 10 */
    snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)((a >> 16) & 0xffff),
             (unsigned)(a & 0xffff), (unsigned)(b >> 48), (unsigned long long)(b & 0xffffffffffffULL));
}

bs_status bs_nwb_mark(hid_t obj, const char *ns, const char *type, uint64_t seed)
{
    char path[1024] = "", id[37];
    H5Iget_name(obj, path, sizeof path);
    bs_nwb_uuid(seed, path, id);
    BS_TRY(bs_h5_attr_str(obj, "namespace", ns));
    BS_TRY(bs_h5_attr_str(obj, "neurodata_type", type));
    return bs_h5_attr_str(obj, "object_id", id);
}
#endif
