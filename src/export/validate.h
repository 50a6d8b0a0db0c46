/*
 * validate.h - check that a Phy / Kilosort folder is loadable by phylib's
 * TemplateModel and by SpikeInterface's read_phy / read_kilosort, and that its
 * files agree with each other (docs/FORMATS.md §1, §1.5 for SpikeInterface).
 *
 * Each violation is reported as one line "<file>: <what is wrong>, expected
 * ..., found ...", and checking goes on after it wherever the remaining
 * checks still make sense. Things that cannot be checked (e.g. spike times
 * against the recording length when the raw file named by dat_path is absent)
 * are reported as lines starting with "note: " and are not violations.
 *
 * Per-spike arrays are read in fixed-size chunks, so validating a folder
 * with any number of spikes needs O(chunk + clusters + channels) memory.
 */
#ifndef BS_VALIDATE_H
#define BS_VALIDATE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

typedef struct {
    int n_violations;
    int64_t n_spikes;    /* length of spike_times.npy, -1 if unreadable */
    int64_t n_clusters;  /* distinct ids in spike_clusters.npy (else spike_templates.npy), -1 if unknown */
    int64_t n_templates; /* rows of templates.npy, -1 if unknown */
} bs_phy_summary;

/* Check the folder `dir`, writing one line per violation (and notes) to
 * `report` (may be NULL). Returns BS_OK when the check ran, whatever it
 * found; BS_ERR_INPUT (with a message) when `dir` is not a readable folder. */
bs_status bs_phy_validate(const char *dir, FILE *report, int *n_violations);
bs_status bs_phy_validate_summary(const char *dir, FILE *report, bs_phy_summary *summary);

#endif
