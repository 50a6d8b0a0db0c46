/*
 * nwb_write.h - building blocks for writing NWB 2.x files with the HDF5 C
 * library (only with BS_HAVE_HDF5): the file skeleton and the electrodes
 * table (nwb_file.c), used by the units export (nwb_units.c) and by the
 * simulator (src/sim/sim_nwb.c).
 *
 * Layout written (NWB core 2.7.0 + hdmf-common 1.8.0; names and attributes
 * as in the schema's nwb.file / nwb.ecephys / table specs and as pynwb
 * writes them):
 *   /  attrs nwb_version "2.7.0", neurodata_type "NWBFile", namespace "core",
 *      object_id
 *   /identifier, /session_description (text), /session_start_time,
 *   /timestamps_reference_time (ISO 8601 text), /file_create_date (1-D text)
 *   /acquisition, /analysis, /processing, /stimulus/presentation,
 *   /stimulus/templates, /general (empty groups)
 *   /general/devices/<device>                    Device
 *   /general/extracellular_ephys/<group>         ElectrodeGroup (description,
 *      location; soft link "device" to the device)
 *   /general/extracellular_ephys/electrodes      DynamicTable: id
 *      (ElementIdentifiers), location, group (object references),
 *      group_name (text), rel_x, rel_y (float32 µm) (VectorData)
 * The specifications are not cached in the file (that would mean embedding
 * the schema text); readers then use their own copy of the core namespace
 * (pynwb says so with a warning and validates the file against it).
 */
#ifndef BS_NWB_WRITE_H
#define BS_NWB_WRITE_H

#ifdef BS_HAVE_HDF5
#include <hdf5.h>
#include <stdint.h>

#include "../common/status.h"
#include "nwb_export.h"

#define BS_NWB_VERSION "2.7.0"
#define BS_NWB_ELECTRODES "/general/extracellular_ephys/electrodes"

typedef struct {
    const char *identifier;          /* unique id of the file */
    const char *session_description;
    const char *session_start_time;  /* ISO 8601, e.g. "2024-01-01T00:00:00+00:00" */
    const char *file_create_date;    /* ISO 8601 */
    uint64_t seed;                   /* object_id seed */
} bs_nwb_file_desc;

typedef struct {
    int n;                   /* rows */
    const double *rel_x_um;  /* [n] contact x on the probe, µm */
    const double *rel_y_um;  /* [n] contact y (depth), µm */
    const int *group;        /* [n] electrode group index, 0..n_groups-1 */
    int n_groups;            /* groups are named "shank<k>" */
    const char *device;      /* device name (a path component) */
    const char *device_description;
} bs_nwb_electrodes;

/* The metadata of m (nwb_export.h) under /general (nwb_general.c); refused where the file has it. */
bs_status bs_nwb_write_general(hid_t file, const bs_nwb_general *m, uint64_t seed);
/* Root attributes, required datasets and the standard empty groups. */
bs_status bs_nwb_write_skeleton(hid_t file, const bs_nwb_file_desc *d);
/* Device, electrode groups and the electrodes table. */
bs_status bs_nwb_write_electrodes(hid_t file, const bs_nwb_electrodes *e, uint64_t seed);
/* A VectorData / VectorIndex / DynamicTableRegion marker: neurodata_type,
 * namespace "hdmf-common", object_id and description. */
bs_status bs_nwb_mark_column(hid_t obj, const char *type, const char *description, uint64_t seed);
/* "YYYY-MM-DDTHH:MM:SS+00:00" for a time (UTC). */
void bs_nwb_iso_time(long long unix_s, char out[32]);

#endif
#endif
