/*
 * prb.h - Kilosort / klusta / SpyKING CIRCUS `.prb` probe files, and the one
 * entry point that loads any probe file boundsort reads.
 *
 * A .prb file is Python source. The reader does not run Python: it parses
 * the literal subset real files use and refuses anything else with a message.
 *   - statements: `NAME = value` (one per line, or separated by ';'), and
 *     `import ...` / `from ... import ...` lines, which are skipped;
 *   - values: ints (decimal, '_' separators allowed), floats (1.5, .5, 5.,
 *     1e-3), a leading '-' or '+', strings ('...' or "..." with backslash
 *     escapes, optional r/u prefix), True, False, None, lists [...], tuples
 *     (...), dicts {...}, trailing commas, `range(stop)`,
 *     `range(start, stop[, step])`, `list(...)` / `tuple(...)` of those, and
 *     names of variables assigned earlier in the file (their value);
 *   - comments (# to the end of the line), blank lines, backslash line
 *     continuations; newlines inside brackets are blanks.
 * Limits: brackets nested at most BS_PRB_MAX_DEPTH deep, a range of at most
 * 2^20 values, files of at most BS_PRB_MAX_BYTES.
 *
 * Meaning (the last assignment to `channel_groups` is used):
 *   channel_groups = {GROUP: {'channels': [c, ...],
 *                             'geometry': {c: (x, y), ...},
 *                             'graph': [...], 'label': ...}, ...}
 *   - GROUP keys are ints or strings; each group is a shank. Shank indices
 *     are the ranks of the distinct keys in ascending order: numerically if
 *     every key is an integer, else as text (numbers written with %.17g).
 *   - channels: the data file columns of the group's contacts (ints >= 0),
 *     in the order the file lists them; absent: the keys of geometry, in
 *     order. The sorted channel order is group by group in file order.
 *   - geometry: channel -> (x, y[, z]) in µm (a list or tuple of numbers;
 *     x = [0], y = [1]); a key may be an int or a string holding the int. The
 *     last of duplicate keys wins, as in Python. Entries for channels not in
 *     `channels` are ignored; a channel without a position is an error.
 *   - everything else (graph, label, radius, ...) is ignored.
 *   - `total_nb_channels = N`, when present, is the number of columns of the
 *     binary (it must cover every channel); otherwise max channel + 1.
 * A .prb file describes one probe: probe_index must be 0.
 */
#ifndef BS_PRB_H
#define BS_PRB_H

#include <stddef.h>

#include "recording.h"

#define BS_PRB_MAX_BYTES ((size_t)16 << 20) /* bytes */
#define BS_PRB_MAX_DEPTH 64                 /* nested brackets */

/* Parse `len` bytes of .prb text (need not be NUL-terminated); `name` is used
 * in messages. On success *p is allocated (bs_probe_free) and passes
 * bs_probe_validate against *required_cols (may be NULL). On failure *p is
 * zeroed. */
bs_status bs_prb_parse(const char *text, size_t len, const char *name, int probe_index, bs_probe *p,
                       int *required_cols);
bs_status bs_prb_load(const char *path, int probe_index, bs_probe *p, int *required_cols);

/* Any probe file: a name ending in ".prb" (any case) is read as .prb, every
 * other one as JSON (probeinterface or Kilosort, probe_json.h). */
bs_status bs_probe_file_load(const char *path, int probe_index, bs_probe *p, int *required_cols);

#endif
