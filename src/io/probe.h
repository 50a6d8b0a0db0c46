/*
 * probe.h - probe geometry helpers (the bs_probe type is in recording.h):
 * allocation through the accountant, validation, probeinterface JSON output,
 * the shanks in use.
 */
#ifndef BS_PROBE_H
#define BS_PROBE_H

#include "recording.h"

/* bs_probe_alloc / bs_probe_free / bs_probe_validate are declared in recording.h. */

/* Write the probe as a probeinterface JSON ProbeGroup with one probe (µm,
 * shank_ids as strings, device_channel_indices = data file columns). */
bs_status bs_probe_write_json(const bs_probe *p, const char *path);

/* Set the probe's per-channel ADC sampling delays (samples, each in [0, 1); BS_ERR_INPUT naming `what`
 * otherwise). */
bs_status bs_probe_set_adc_shift(bs_probe *p, const double *shift, const char *what);

/* The shanks that hold at least one channel. A probe's shank indices are
 * its own (a 4-shank NP2.0 recording from shanks 1 and 2 has indices 1 and
 * 2, so n_shanks = largest index + 1 = 3 counts an unused shank 0): this
 * returns how many distinct shanks are in use, and when ids is not NULL
 * (room for p->n_shanks ints) writes their indices in ascending order. */
int bs_probe_shanks_in_use(const bs_probe *p, int *ids);

/* The channels shank by shank (shank 0 first), each shank's in depth order: y, then x, then channel index
 * (SpikeInterface's order_channels_by_depth, np.lexsort((x, y))). With keep_if_sorted, a shank whose y
 * never decreases in channel order keeps that order (as SpikeInterface's highpass_spatial_filter does).
 * Shanks with fewer than min_channels channels are left out (min_channels <= 0: every shank, empty ones
 * too, so group g is shank g). order gets the channels (room for p->n_chan), group g is order[start[g] ..
 * start[g + 1]) (start: room for p->n_shanks + 1); returns the groups, or -1 out of memory. */
int bs_probe_depth_order(const bs_probe *p, int min_channels, int keep_if_sorted, int *order, int *start);

/* Median spacing between the distinct contact depths (y), µm; 1 when every
 * contact is at the same depth (or on allocation failure). */
double bs_probe_median_depth_step(const bs_probe *p);

#endif
