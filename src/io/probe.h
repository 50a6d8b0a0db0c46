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

/* Median spacing between the distinct contact depths (y), µm; 1 when every
 * contact is at the same depth (or on allocation failure). */
double bs_probe_median_depth_step(const bs_probe *p);

#endif
