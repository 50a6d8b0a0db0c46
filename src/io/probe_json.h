/*
 * probe_json.h - reading probe geometry from JSON: probeinterface ProbeGroup
 * files and Kilosort probe dictionaries, told apart by their keys.
 *
 * probeinterface (docs/FORMATS.md §5.1): {"probes": [{...}, ...]} (a bare
 * probe object with "contact_positions" at the top level is also accepted).
 *   - contact_positions: N rows of ndim (2 or 3) numbers; x = row[0],
 *     y = row[1] (depth); si_units "um" (default when absent) or "mm"
 *     (multiplied by 1000 to µm).
 *   - device_channel_indices: N ints, the data file column of each contact;
 *     -1 = not recorded (the contact is skipped); absent = contact order
 *     (contact i reads column i).
 *   - shank_ids: N strings or ints (absent = one shank). Ids are compared as
 *     text (an int 1 and the string "1" are the same shank). The distinct ids
 *     of the connected contacts are numbered 0..n_shanks-1 in ascending order:
 *     numerically if every id is an integer, else byte-wise (strcmp).
 *   - annotations.model_name -> bs_probe.model.
 *   - Several probes: probe `probe_index` is used; its columns are global to
 *     the group, so the column count the file needs (`required_cols`) is the
 *     largest device index over all probes of the group, plus one.
 * Kilosort ({"chanMap", "xc", "yc", "kcoords", "n_chan"}): chanMap = 0-based
 *   columns, xc/yc in µm, kcoords = shank ids (numbered like shank_ids;
 *   absent = one shank), n_chan = columns in the binary (absent = max
 *   chanMap + 1); every chanMap entry must lie in 0..n_chan-1.
 *
 * Sorted channel order is the order in which the file lists the contacts
 * (skipping unconnected ones); it is never re-sorted by depth. Every parsed
 * probe passes bs_probe_validate against required_cols (finite positions,
 * no duplicate sites, distinct columns in range). Messages name the file and
 * the field ("probes[0].contact_positions[3][1]: expected a number").
 */
#ifndef BS_PROBE_JSON_H
#define BS_PROBE_JSON_H

#include <stddef.h>

#include "recording.h"

/* Largest probe file accepted, bytes. */
#define BS_PROBE_JSON_MAX_BYTES ((size_t)64 << 20)

/* Parse `len` bytes of JSON text (need not be NUL-terminated). `name` is used
 * in messages. On success *p is allocated (bs_probe_free) and *required_cols
 * (may be NULL) is the number of file columns the probe needs. On failure
 * *p is left zeroed. */
bs_status bs_probe_json_parse(const char *text, size_t len, const char *name, int probe_index, bs_probe *p,
                              int *required_cols);

/* Read and parse a probe file. */
bs_status bs_probe_json_load(const char *path, int probe_index, bs_probe *p, int *required_cols);

/* Vertical pitch of the probe, µm: the most common nonzero y spacing between
 * neighbouring contacts of one geometric column (same shank and x); ties go
 * to the smaller spacing; 0 if no column holds two contacts. */
double bs_probe_vertical_pitch_um(const bs_probe *p);

#endif
