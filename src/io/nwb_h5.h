/*
 * nwb_h5.h - small HDF5 helpers shared by the NWB reader (src/io/nwb.c), the
 * NWB writer (src/export/nwb_*.c) and the simulator (src/sim/sim_nwb.c).
 * Everything here exists only when the build found HDF5 (BS_HAVE_HDF5).
 *
 * Errors: the HDF5 library prints its error stack to stderr by default;
 * bs_h5_quiet() turns that off for the calling thread (the setting is per
 * thread in thread-safe builds, so every entry point calls it), and
 * bs_h5_fail() turns the stack into one bs_error message: our text, then
 * "(HDF5: <innermost description>)" when the library recorded one.
 *
 * Reading: attributes of any numeric type are read as double; strings of
 * either kind (fixed length or variable length, ASCII or UTF-8) are copied
 * into a caller buffer and truncated to fit.
 *
 * Writing follows what NWB readers expect of an HDF5 file written by hdmf
 * (checked against files written by pynwb): text is variable-length UTF-8,
 * scalar text is a scalar dataspace, and object modification times are not
 * recorded (so the same content gives the same bytes). Every typed object
 * carries the attributes neurodata_type, namespace and object_id; object_id
 * is a version-4-shaped UUID derived from a 64-bit seed and the object's
 * path, so ids are unique within a file and reproducible.
 */
#ifndef BS_NWB_H5_H
#define BS_NWB_H5_H

#ifdef BS_HAVE_HDF5
#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

/* Silence HDF5's automatic error printing for this thread. */
void bs_h5_quiet(void);
/* Record `fmt` as the error, with the innermost HDF5 message appended when
 * there is one; clears HDF5's error stack. Returns st. */
bs_status bs_h5_fail(bs_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 if obj has an attribute `name`, 0 if not (or on error). */
int bs_h5_has_attr(hid_t obj, const char *name);
/* Numeric scalar (or one-element) attribute as double: 1 read, 0 absent,
 * -1 present but not a numeric scalar. */
int bs_h5_attr_double(hid_t obj, const char *name, double *v);
/* String attribute into buf: 1 read, 0 absent, -1 present but not a string. */
int bs_h5_attr_string(hid_t obj, const char *name, char *buf, size_t len);
/* 1 if the link `name` under loc exists (soft links included, not followed). */
int bs_h5_exists(hid_t loc, const char *name);

/* Writers; each returns BS_OK or a message naming `name`. */
hid_t bs_h5_group(hid_t loc, const char *name); /* create; H5I_INVALID_HID (with bs_error) on failure */
bs_status bs_h5_attr_str(hid_t obj, const char *name, const char *value);
bs_status bs_h5_attr_strs(hid_t obj, const char *name, const char *const *values, int n);
bs_status bs_h5_attr_num(hid_t obj, const char *name, hid_t file_type, double value);
/* Attribute holding an object reference to the object at `target` (a path in obj's file). */
bs_status bs_h5_attr_ref(hid_t obj, const char *name, const char *target);
bs_status bs_h5_str_dataset(hid_t loc, const char *name, const char *value);
/* 1-D text dataset of n strings. */
bs_status bs_h5_strs_dataset(hid_t loc, const char *name, const char *const *values, int64_t n);
/* Dataset of `rank` dims from a buffer in mem_type (NULL data with n = 0
 * elements is fine). chunk0 > 0 chunks along the first dimension (rows of
 * chunk0) and compresses with gzip level 4; 0 stores it contiguous. Returns
 * the open dataset (caller closes) or H5I_INVALID_HID with a message. */
hid_t bs_h5_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int rank, const hsize_t *dims,
                    hsize_t chunk0, const void *data);
/* 1-D dataset of object references to the objects at paths[0..n). */
bs_status bs_h5_refs_dataset(hid_t loc, const char *name, const char *const *paths, int64_t n);

/* neurodata_type, namespace and object_id attributes of an NWB object. */
bs_status bs_nwb_mark(hid_t obj, const char *ns, const char *type, uint64_t seed);
/* The object_id text (36 characters + NUL) for a seed and a path. */
void bs_nwb_uuid(uint64_t seed, const char *path, char out[37]);

#endif
#endif
