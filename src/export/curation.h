/*
 * curation.h - SpikeInterface curation format v2 (curation.json), the JSON
 * that spikeinterface.curation.apply_curation() and AIND's pipeline read
 * (docs/FORMATS.md §9.1; SpikeInterface's curation_model.py: CurationModel with
 * format_version "2").
 *
 * Written layout:
 *   {"format_version": "2",
 *    "unit_ids": [0, 1, ...],
 *    "label_definitions": {
 *        "quality":  {"name": "quality",  "label_options": ["good", "mua", "noise"], "exclusive": true},
 *        "qc_label": {"name": "qc_label", "label_options": ["good", "fail", "unknown"],
 *                     "exclusive": true},
 *        "unit_type": {"name": "unit_type", "label_options": ["noise", "non-somatic", "mua", "good"],
 *                      "exclusive": true}},
 *    "manual_labels": [{"unit_id": 0, "labels": {"quality": ["good"], "qc_label": ["fail"],
 *                                                "unit_type": ["mua"]}}, ...],
 *    "merges": [], "splits": [], "removed": []}
 * "quality" is the Phy group of the unit (cluster_group.tsv: the sorter's
 * good/mua label until someone curates in Phy; "unsorted" and unknown groups
 * get no quality label), "qc_label" the automatic Allen rule (good = passes; unknown:
 * a metric of the rule could not be computed, qc.h), "unit_type" the Bombcell
 * classification (qc.h: bs_unit_type_of).
 * Unit ids are integers, written in ascending order. Merges, splits and
 * removals are empty: this file records labels, a curation tool adds the
 * rest. The file is written atomically.
 */
#ifndef BS_CURATION_H
#define BS_CURATION_H

#include <stdint.h>

#include "../common/status.h"

typedef struct {
    int32_t unit_id;      /* cluster id */
    const char *quality;  /* "good", "mua", "noise", or NULL (no quality label) */
    const char *qc_label; /* "good", "fail", "unknown", or NULL */
    const char *unit_type; /* "noise", "non-somatic", "mua", "good", or NULL */
} bs_curation_unit;

/* Write the curation JSON v2 for n units (ids distinct) to path. */
bs_status bs_curation_write(const char *path, int n, const bs_curation_unit *units);

#endif
