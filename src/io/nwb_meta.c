/*
 * nwb_meta.c - bs_nwb_meta_resolve: from what an NWB ElectricalSeries says
 * (attributes, small datasets; see nwb.h) to a recording's rate, scaling and
 * probe, with every check and message. No HDF5 here, so it is built always,
 * unit-tested with hand-made metadata and fuzzed (fuzz/fuzz_nwb_meta.c).
 *
 * Order of checks (the first failure is reported): data shape, the
 * conversion / offset attributes, channel_conversion, the time base
 * (starting_time + rate, else timestamps), the electrodes region and its
 * table, the positions (rel_x, rel_y), then the resulting probe
 * (bs_probe_validate: finite, distinct positions per shank).
 *
 * µV per raw unit is computed in double and stored as float; for int
 * samples the largest scaled value must fit a float32 (as for raw files).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/samples.h"
#include "../mem/mem.h"
#include "nwb.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bs_status bs_nwb_rate_from_timestamps(const double *t, int64_t n, const char *what, double *rate_hz)
{
    if (n < 2)
        return bs_error(BS_ERR_INPUT, "%s: expected at least 2 timestamps to know the sampling rate, got %lld", what,
                        (long long)n);
    double *d = malloc((size_t)(n - 1) * sizeof *d);
    if (!d)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", what);
    for (int64_t i = 0; i + 1 < n; i++) {
        d[i] = t[i + 1] - t[i];
        if (!isfinite(t[i]) || !isfinite(t[i + 1]) || !(d[i] > 0)) {
            free(d);
            return bs_error(BS_ERR_INPUT,
                            "%s: timestamps %lld and %lld: expected finite, strictly increasing seconds, got %g and %g",
                            what, (long long)i, (long long)(i + 1), t[i], t[i + 1]);
        }
    }
    qsort(d, (size_t)(n - 1), sizeof *d, cmp_double);
    double med = d[(n - 1) / 2];
    free(d);
    *rate_hz = 1.0 / med;
    if (!isfinite(*rate_hz))
        return bs_error(BS_ERR_INPUT, "%s: timestamps step %g s gives no finite sampling rate", what, med);
    return BS_OK;
}

static bs_status check_scaling(const bs_nwb_meta *m)
{
    const char *f = m->file, *s = m->series;
    if (!isfinite(m->conversion) || m->conversion == 0)
        return bs_error(BS_ERR_INPUT, "%s: %s/data: attribute 'conversion': expected a finite non-zero number, got %g",
                        f, s, m->conversion);
    if (!isfinite(m->offset))
        return bs_error(BS_ERR_INPUT, "%s: %s/data: attribute 'offset': expected a finite number of volts, got %g", f,
                        s, m->offset);
    if (!m->channel_conversion)
        return BS_OK;
    if (m->n_channel_conversion != m->n_chan)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s/channel_conversion: expected one factor per data column (%lld), got %lld", f, s,
                        (long long)m->n_chan, (long long)m->n_channel_conversion);
    for (int64_t c = 0; c < m->n_chan; c++)
        if (!isfinite(m->channel_conversion[c]) || m->channel_conversion[c] == 0)
            return bs_error(BS_ERR_INPUT,
                            "%s: %s/channel_conversion[%lld]: expected a finite non-zero factor, got %g", f, s,
                            (long long)c, m->channel_conversion[c]);
    return BS_OK;
}

static bs_status resolve_time(const bs_nwb_meta *m, double *fs, double *t0)
{
    const char *f = m->file, *s = m->series;
    if (m->has_starting_time) {
        if (!m->has_rate)
            return bs_error(BS_ERR_INPUT, "%s: %s/starting_time: attribute 'rate' is missing: expected the sampling "
                                          "rate in Hz",
                            f, s);
        if (!isfinite(m->rate) || !(m->rate > 0))
            return bs_error(BS_ERR_INPUT, "%s: %s/starting_time: attribute 'rate': expected a sampling rate > 0 Hz, "
                                          "got %g",
                            f, s, m->rate);
        if (!isfinite(m->starting_time))
            return bs_error(BS_ERR_INPUT, "%s: %s/starting_time: expected a finite time in seconds, got %g", f, s,
                            m->starting_time);
        *fs = m->rate;
        *t0 = m->starting_time;
        return BS_OK;
    }
    if (!m->timestamps)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s: no starting_time (with its rate) and no timestamps: expected one of them to know the "
                        "sampling rate",
                        f, s);
    if (m->n_timestamps != m->n_times)
        return bs_error(BS_ERR_INPUT, "%s: %s/timestamps: expected one timestamp per sample (%lld), got %lld", f, s,
                        (long long)m->n_times, (long long)m->n_timestamps);
    char what[2200];
    snprintf(what, sizeof what, "%s: %s/timestamps", f, s);
    BS_TRY(bs_nwb_rate_from_timestamps(m->timestamps, m->n_timestamps_head, what, fs));
    *t0 = m->timestamps[0];
    return BS_OK;
}

static bs_status check_electrodes(const bs_nwb_meta *m)
{
    const char *f = m->file, *s = m->series;
    if (!m->electrodes)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s/electrodes is missing: expected the region of the electrodes table (one row per data "
                        "column)",
                        f, s);
    if (m->n_electrodes != m->n_chan)
        return bs_error(BS_ERR_INPUT, "%s: %s/electrodes: expected one electrode per data column (%lld), got %lld", f,
                        s, (long long)m->n_chan, (long long)m->n_electrodes);
    if (m->n_rows < 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s/electrodes: the electrodes table was not found (no 'table' reference and no "
                        "/general/extracellular_ephys/electrodes)",
                        f, s);
    for (int64_t c = 0; c < m->n_chan; c++)
        if (m->electrodes[c] < 0 || m->electrodes[c] >= m->n_rows)
            return bs_error(BS_ERR_INPUT, "%s: %s/electrodes[%lld]: expected a row of the electrodes table (0..%lld), "
                                          "got %lld",
                            f, s, (long long)c, (long long)m->n_rows - 1, (long long)m->electrodes[c]);
    if (!m->rel_x || !m->rel_y)
        return bs_error(BS_ERR_INPUT,
                        "%s: electrodes table: column '%s' is missing: expected the contact positions on the probe "
                        "(rel_x, rel_y, µm); x/y/z are brain coordinates, not probe geometry",
                        f, m->rel_x ? "rel_y" : "rel_x");
    if (m->n_rel_x != m->n_rows || m->n_rel_y != m->n_rows)
        return bs_error(BS_ERR_INPUT, "%s: electrodes table: column '%s': expected %lld rows (one per electrode), got "
                                      "%lld",
                        f, m->n_rel_x != m->n_rows ? "rel_x" : "rel_y", (long long)m->n_rows,
                        (long long)(m->n_rel_x != m->n_rows ? m->n_rel_x : m->n_rel_y));
    if (m->group_name && m->n_group_name != m->n_rows)
        return bs_error(BS_ERR_INPUT, "%s: electrodes table: column 'group_name': expected %lld rows, got %lld", f,
                        (long long)m->n_rows, (long long)m->n_group_name);
    return BS_OK;
}

bs_status bs_nwb_meta_resolve(const bs_nwb_meta *m, bs_recording *rec, double *t0_s)
{
    const char *f = m->file, *s = m->series;
    if (m->rank != 2)
        return bs_error(BS_ERR_INPUT, "%s: %s/data: expected 2 dimensions (time x channels), got %d", f, s, m->rank);
    if (m->n_chan < 1 || m->n_chan > 1000000 || m->n_times < 0)
        return bs_error(BS_ERR_INPUT, "%s: %s/data: expected 1..1000000 channels, got shape (%lld, %lld)", f, s,
                        (long long)m->n_times, (long long)m->n_chan);
    BS_TRY(check_scaling(m));
    double fs = 0, t0 = 0;
    BS_TRY(resolve_time(m, &fs, &t0));
    if (!(fabs(t0) * fs < 9e18))
        return bs_error(BS_ERR_INPUT, "%s: %s: start time %g s at %g Hz: expected a sample number that fits 64 bits", f,
                        s, t0, fs);
    BS_TRY(check_electrodes(m));

    const int C = (int)m->n_chan;
    double max_raw = m->dtype == BS_SAMPLE_I32 ? 2147483648.0 : 65536.0;
    double off_raw = 0; /* raw units; -0 is written as 0 */
    int uneven = 0;
    for (int c = 0; c < C; c++) {
        double g = m->conversion * (m->channel_conversion ? m->channel_conversion[c] : 1.0);
        if (c == 0)
            off_raw = -m->offset / g + 0.0;
        else if (m->offset != 0 && -m->offset / g != off_raw)
            uneven = 1;
        double uv = fabs(g) * 1e6;
        if (!(uv * (m->dtype == BS_SAMPLE_F32 ? 1.0 : max_raw + fabs(off_raw)) < FLT_MAX) || (float)uv == 0.0f)
            return bs_error(BS_ERR_INPUT,
                            "%s: %s: channel %d: conversion x channel_conversion = %g V per unit: expected scaled "
                            "samples to fit a float32 (and a non-zero µV per unit)",
                            f, s, c, g);
    }
    if (!isfinite((float)off_raw))
        return bs_error(BS_ERR_INPUT, "%s: %s/data: attribute 'offset' %g V is %g raw units: expected it to fit a float32",
                        f, s, m->offset, off_raw);
    if (uneven)
        bs_log_warn("%s: %s: offset %g V with unequal channel_conversion: channel 0's raw offset (%g) is used for every "
                    "channel (a constant level the sorter removes)",
                    f, s, m->offset, off_raw);

    bs_probe *p = &rec->probe;
    BS_TRY(bs_probe_alloc(p, C));
    rec->uv_per_bit = bs_mem_alloc("io/recording", (size_t)C * sizeof *rec->uv_per_bit);
    if (!rec->uv_per_bit) {
        bs_probe_free(p);
        return BS_ERR_MEMORY;
    }
    /* shanks: distinct group names in order of first appearance (at most C of them) */
    int n_shanks = 0;
    for (int c = 0; c < C; c++) {
        int64_t row = m->electrodes[c];
        p->column[c] = c;
        p->x_um[c] = m->rel_x[row];
        p->y_um[c] = m->rel_y[row];
        double g = m->conversion * (m->channel_conversion ? m->channel_conversion[c] : 1.0);
        /* negative gains flip the sign: µV = (raw - off) * g * 1e6 keeps it */
        rec->uv_per_bit[c] = (float)(g * 1e6);
        p->shank[c] = 0;
        if (!m->group_name)
            continue;
        const char *name = m->group_name[row] ? m->group_name[row] : "";
        int k = 0;
        while (k < c && strcmp(m->group_name[m->electrodes[k]] ? m->group_name[m->electrodes[k]] : "", name) != 0)
            k++;
        p->shank[c] = k < c ? p->shank[k] : n_shanks++;
    }
    p->n_shanks = m->group_name ? n_shanks : 1;
    if (!m->group_name)
        bs_log_warn("%s: electrodes table has no 'group_name' column: every channel is on one shank", f);
    char name[2200];
    snprintf(name, sizeof name, "%s: electrodes table (rel_x, rel_y)", f);
    bs_status st = bs_probe_validate(p, C, name);
    if (st != BS_OK) {
        bs_probe_free(p);
        bs_mem_free(rec->uv_per_bit);
        rec->uv_per_bit = NULL;
        return st;
    }
    rec->dtype = m->dtype;
    rec->n_cols = C;
    rec->n_samples = m->n_times;
    rec->fs_hz = fs;
    rec->offset = (float)off_raw;
    rec->first_sample = bs_seconds_to_samples(t0, fs);
    *t0_s = t0;
    return BS_OK;
}
