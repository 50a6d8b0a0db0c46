/*
 * report_traces.c - the page's traces view: a few short stretches of the
 * preprocessed recording, with the spikes that fall in them.
 *
 * Where: the recording named by OUT/source.json (written by `sort`), opened
 * as `qc` opens it. Without that file, or when the recording is gone or no
 * longer matches (sampling rate, channel count, length: bs_source_open), the
 * page has no traces and a note says why; nothing else depends on them.
 *
 * Which stretches: p.trace_stretches stretches of p.trace_ms each, spread
 * evenly over the recording: stretch i is batch b_i = floor((i + 1/2) x
 * n_full / n) of length L = trace_ms (n_full: the whole batches of L in the
 * recording), so every stretch is read by the batch reader as one batch
 * with its halo. Fewer when the recording holds fewer whole batches.
 *
 * Preprocessing: bs_qc_preprocess, the one `qc` uses for its µV templates
 * (with qc's default order, cutoff and halo), so the traces and the
 * waveforms in the unit view are the same signal.
 *
 * Stored: int8 per sample, channel-major per stretch, with one scale per
 * stretch (µV per step = max |x| / 127 over the stretch), i.e.
 * n x L x channels bytes (4/3 of that in base64). The spikes in the
 * stretches (sample offset, unit index) are gathered by the spike pass
 * (rp_traces_add), at most RP_TRACE_MAX_SPIKES. Anything that keeps the
 * traces from being read (the memory budget, a read error) leaves the page
 * without them, with a note: they never fail the report.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../export/source.h"
#include "../io/batch.h"
#include "../common/samples.h"
#include "../mem/mem.h"
#include "../qc/qc.h"
#include "report_internal.h"

int64_t rp_trace_samples(const bs_report_params *p, double fs_hz)
{
    return bs_seconds_to_samples(p->trace_ms * 1e-3, fs_hz);
}

bs_status rp_traces_setup(rp_data *d)
{
    d->tr_n = 0;
    if (d->p.trace_stretches == 0)
        return BS_OK;
    bs_source src;
    if (bs_source_read(d->dir, &src) != BS_OK) {
        rp_note(d, "no readable source.json (the recording's address, written by boundsort sort): no traces view");
        return BS_OK;
    }
    d->tr_rec = calloc(1, sizeof(bs_recording));
    if (!d->tr_rec)
        return bs_error(BS_ERR_MEMORY, "report: out of memory for the recording's description");
    if (bs_source_open(&src, d->tr_rec) != BS_OK) {
        rp_note(d, "the recording of source.json (%s) cannot be opened or has changed: no traces view", src.recording);
        free(d->tr_rec);
        d->tr_rec = NULL;
        return BS_OK;
    }
    const bs_recording *rec = d->tr_rec;
    if (rec->probe.n_chan != d->n_chan || fabs(rec->fs_hz - d->fs_hz) > 1e-6 * d->fs_hz) {
        rp_note(d, "the recording has %d channels at %g Hz, the folder %d at %g Hz: no traces view", rec->probe.n_chan,
                rec->fs_hz, d->n_chan, d->fs_hz);
        return BS_OK;
    }
    int64_t L = rp_trace_samples(&d->p, d->fs_hz), n_full = rec->n_samples / L;
    int n = d->p.trace_stretches < n_full ? d->p.trace_stretches : (int)n_full;
    if (n < 1) {
        rp_note(d, "the recording is shorter than one %g-ms stretch: no traces view", d->p.trace_ms);
        return BS_OK;
    }
    d->tr_len = L;
    for (int i = 0; i < n; i++)
        d->tr_batch[i] = (int64_t)floor((i + 0.5) * (double)n_full / n);
    d->tr_sp_t = bs_mem_alloc("report/traces", RP_TRACE_MAX_SPIKES * sizeof(uint32_t));
    d->tr_sp_u = bs_mem_alloc("report/traces", RP_TRACE_MAX_SPIKES * sizeof(int32_t));
    d->tr_sp_s = bs_mem_alloc("report/traces", RP_TRACE_MAX_SPIKES);
    if (!d->tr_sp_t || !d->tr_sp_u || !d->tr_sp_s)
        return BS_ERR_MEMORY;
    d->tr_n = n;
    return BS_OK;
}

void rp_traces_add(rp_data *d, int64_t t, int32_t u)
{
    for (int i = 0; i < d->tr_n; i++) {
        int64_t off = t - d->tr_batch[i] * d->tr_len;
        if (off < 0 || off >= d->tr_len)
            continue;
        if (d->tr_n_sp == RP_TRACE_MAX_SPIKES) {
            d->tr_sp_dropped++;
            return;
        }
        d->tr_sp_t[d->tr_n_sp] = (uint32_t)off;
        d->tr_sp_u[d->tr_n_sp] = u;
        d->tr_sp_s[d->tr_n_sp] = (uint8_t)i;
        d->tr_n_sp++;
        return;
    }
}

static bs_status read_stretches(rp_data *d);

/* The traces are optional: when they cannot be read (a budget too small, a read error), the page has none
   and a note says why; the report goes on. */
bs_status rp_traces_load(rp_data *d)
{
    if (d->tr_n == 0)
        return BS_OK;
    if (read_stretches(d) != BS_OK) {
        rp_note(d, "the traces could not be read (%s): no traces view", bs_last_error());
        bs_mem_free(d->tr_data);
        d->tr_data = NULL;
        d->tr_n = 0;
    }
    return BS_OK;
}

static bs_status read_stretches(rp_data *d)
{
    if (d->tr_sp_dropped)
        rp_note(d, "the traces view marks the first %d spikes of its stretches, not %lld more", RP_TRACE_MAX_SPIKES,
                (long long)d->tr_sp_dropped);
    bs_qc_params qp;
    bs_qc_default_params(&qp);
    bs_highpass hp;
    BS_TRY(bs_highpass_design(qp.highpass_order, qp.highpass_hz, d->fs_hz, &hp));
    int64_t halo = bs_qc_preprocess_halo(d->fs_hz), L = d->tr_len;
    int C = d->n_chan;
    d->tr_data = bs_mem_alloc("report/traces", (size_t)d->tr_n * (size_t)L * (size_t)C);
    if (!d->tr_data)
        return BS_ERR_MEMORY;
    bs_batch_reader rd = {.fd = -1};
    BS_TRY(bs_batch_reader_open(&rd, d->tr_rec, L, halo, 0));
    bs_status st = BS_OK;
    for (int i = 0; i < d->tr_n && st == BS_OK; i++) {
        float *x;
        int64_t n_valid;
        if ((st = bs_batch_read(&rd, d->tr_batch[i], &x, &n_valid)) != BS_OK ||
            (st = bs_qc_preprocess(&hp, x, C, rd.width, NULL, 0)) != BS_OK)
            break;
        float mx = 0;
        for (int c = 0; c < C; c++)
            for (int64_t k = 0; k < L; k++) {
                float a = fabsf(x[(size_t)c * rd.width + halo + k]);
                mx = a > mx ? a : mx;
            }
        d->tr_scale[i] = mx > 0 ? mx / 127.0f : 1.0f;
        int8_t *q = d->tr_data + (size_t)i * L * C;
        for (int c = 0; c < C; c++)
            for (int64_t k = 0; k < L; k++)
                q[(size_t)c * L + k] = (int8_t)lrintf(x[(size_t)c * rd.width + halo + k] / d->tr_scale[i]);
    }
    bs_batch_reader_close(&rd);
    return st;
}

void rp_emit_traces(rp_json *j, const rp_data *d)
{
    if (d->tr_n == 0 || !d->tr_data) {
        rpj_null(j, "traces");
        return;
    }
    rpj_obj(j, "traces");
    rpj_int(j, "n", d->tr_n);
    rpj_int(j, "n_t", d->tr_len);
    rpj_num(j, "ms", d->p.trace_ms);
    rpj_arr(j, "start_s");
    for (int i = 0; i < d->tr_n; i++)
        rpj_num(j, NULL, (double)(d->tr_batch[i] * d->tr_len) / d->fs_hz);
    rpj_end_arr(j);
    rpj_typed(j, "scale", "f32", d->tr_scale, (size_t)d->tr_n);
    rpj_typed(j, "data", "i8", d->tr_data, (size_t)d->tr_n * (size_t)d->tr_len * (size_t)d->n_chan);
    rpj_typed(j, "spike_stretch", "u8", d->tr_sp_s, (size_t)d->tr_n_sp);
    rpj_typed(j, "spike_t", "u32", d->tr_sp_t, (size_t)d->tr_n_sp);
    rpj_typed(j, "spike_unit", "i32", d->tr_sp_u, (size_t)d->tr_n_sp);
    rpj_end_obj(j);
}

void rp_traces_free(rp_data *d)
{
    if (d->tr_rec) {
        bs_recording_close(d->tr_rec);
        free(d->tr_rec);
    }
    bs_mem_free(d->tr_data);
    bs_mem_free(d->tr_sp_t);
    bs_mem_free(d->tr_sp_u);
    bs_mem_free(d->tr_sp_s);
}
