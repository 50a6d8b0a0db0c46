/*
 * fuzz_nwb_meta.c - libFuzzer target for the NWB metadata layer
 * (bs_nwb_meta_resolve, src/io/nwb_meta.c): everything the reader takes from
 * an NWB file's attributes and small datasets, decoded from the input bytes.
 *
 * Input layout: byte 0 = presence flags (starting_time, rate, timestamps,
 * channel_conversion, electrodes, rel_x, rel_y, group_name), bytes 1-5 =
 * rank (0-3), channels (0-31), table rows (0-32), sample type (0-3),
 * timestamps (0-63); then conversion, offset, starting_time and rate as
 * float64, then the arrays in that order (channel_conversion and
 * timestamps float64, electrodes int8, rel_x / rel_y int8 or float64 as
 * flag bit 0 of byte 5 says), then group names separated by '\n'. Missing
 * bytes read as zeros.
 *
 * The HDF5 library itself is not fuzzed here: it is an external library
 * built without instrumentation, whose own crashes on crafted files are
 * known upstream and cannot be fixed in this project; what it returns is
 * exactly what this target feeds to the parsing and checks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/nwb.h"
#include "mem/mem.h"

typedef struct {
    const uint8_t *p;
    size_t n, at;
} reader;

static uint8_t byte(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }

static double f64(reader *r)
{
    uint8_t b[8] = {0};
    for (int i = 0; i < 8; i++)
        b[i] = byte(r);
    double v;
    memcpy(&v, b, 8);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    uint8_t flags = byte(&r);
    bs_nwb_meta m;
    memset(&m, 0, sizeof m);
    m.file = "fuzz.nwb";
    m.series = "/acquisition/es";
    m.rank = byte(&r) % 4;
    m.n_chan = byte(&r) % 32;
    m.n_times = 1000;
    int rows = byte(&r) % 33;
    m.dtype = (bs_sample_type)(byte(&r) % 4);
    uint8_t b5 = byte(&r);
    int n_ts = b5 % 64, small_pos = b5 & 1;
    m.conversion = f64(&r);
    m.offset = f64(&r);
    m.starting_time = f64(&r);
    m.rate = f64(&r);
    m.has_starting_time = flags & 1;
    m.has_rate = (flags >> 1) & 1;
    double cc[32], ts[64], rx[33], ry[33];
    int64_t el[32];
    if (flags & 8) {
        for (int i = 0; i < (int)m.n_chan; i++)
            cc[i] = f64(&r);
        m.channel_conversion = cc;
        m.n_channel_conversion = m.n_chan - (b5 >> 7);
    }
    if (flags & 4) {
        for (int i = 0; i < n_ts; i++)
            ts[i] = f64(&r);
        m.timestamps = ts;
        m.n_timestamps_head = n_ts;
        m.n_timestamps = (b5 & 2) ? m.n_times : n_ts;
    }
    if (flags & 16) {
        for (int i = 0; i < (int)m.n_chan; i++)
            el[i] = (int8_t)byte(&r);
        m.electrodes = el;
        m.n_electrodes = m.n_chan;
    }
    m.n_rows = (flags & 16) ? rows : -1;
    for (int i = 0; i < rows; i++) {
        rx[i] = small_pos ? (int8_t)byte(&r) : f64(&r);
        ry[i] = small_pos ? (int8_t)byte(&r) : f64(&r);
    }
    if (flags & 32)
        m.rel_x = rx, m.n_rel_x = rows;
    if (flags & 64)
        m.rel_y = ry, m.n_rel_y = rows;
    char text[1024];
    const char *names[33];
    if (flags & 128) {
        size_t k = 0;
        while (r.at < r.n && k + 1 < sizeof text)
            text[k++] = (char)byte(&r);
        text[k] = '\0';
        char *s = text;
        for (int i = 0; i < rows; i++) {
            names[i] = s;
            char *nl = strchr(s, '\n');
            if (nl) {
                *nl = '\0';
                s = nl + 1;
            } else {
                s += strlen(s);
            }
        }
        m.group_name = names;
        m.n_group_name = rows;
    }
    bs_recording rec;
    memset(&rec, 0, sizeof rec);
    double t0;
    if (bs_nwb_meta_resolve(&m, &rec, &t0) == BS_OK) {
        bs_probe_free(&rec.probe);
        bs_mem_free(rec.uv_per_bit);
    }
    double rate;
    if (n_ts >= 2 && (flags & 4))
        bs_nwb_rate_from_timestamps(ts, n_ts, "fuzz", &rate);
    return 0;
}
