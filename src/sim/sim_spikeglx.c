/*
 * sim_spikeglx.c - the .meta of the simulated SpikeGLX pair.
 *
 * The binary beside it holds the same int16 samples as recording.bin plus a
 * sync word as the last column (snsApLfSy=384,0,1: 385 columns). The meta
 * follows SpikeGLX's layout (docs/FORMATS.md §2): key=value lines,
 * ~imroTbl with one entry per acquired channel, ~snsChanMap for the saved
 * channels, and ~snsGeomMap (shank:x:z:used) with x measured from the left
 * edge of each shank and z from the lowest electrode row, so both our reader
 * and probeinterface find the positions of probe.json (probeinterface up to a
 * constant shift). Gains and ranges make the readers' µV/bit equal
 * bs_sim_uv_per_bit():
 *   NP1000 (type 0):  Vmax 0.6 V,  Imax 512,  per-channel AP gain 500 in the
 *                     imroTbl (ch bank ref apGain lfGain hp) -> 2.34375 µV/bit
 *   NP2003 / NP2013:  Vmax 0.62 V, Imax 2048, imChan0apGain 100
 *                     -> 3.02734375 µV/bit; imroTbl entries (ch bankmask ref el)
 *                     and (ch shank bank ref el).
 * ~muxTbl lists the ADC sampling groups (NP1 (32,12), NP2 (24,16)), as in
 * real metas; the samples carry the matching sub-sample delays.
 * Every contact is marked used (the simulator has no reference contact).
 * fileCreateTime is fixed so the files are identical for the same seed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "sim_internal.h"

typedef struct {
    char *s;
    size_t n, cap;
    int bad;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->bad)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->bad = 1;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap * 2 + (size_t)k + 1;
        char *q = realloc(b->s, nc);
        if (!q) {
            b->bad = 1;
            return;
        }
        b->s = q;
        b->cap = nc;
    }
}

bs_status bs_sim_write_meta(const char *meta_path, const char *bin_name, const bs_sim_layout *L, const bs_probe *pr,
                            double fs_hz, int64_t n_samples, uint64_t seed)
{
    if (L->type_code < 0)
        return bs_error(BS_ERR_USAGE, "a SpikeGLX pair can only be written for a Neuropixels probe, not '%s'",
                        L->part_number);
    int C = pr->n_chan, np1 = L->type_code == 0;
    sbuf b = {malloc(65536), 0, 65536, 0};
    if (!b.s)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory", meta_path);
    uint64_t bytes = (uint64_t)n_samples * (uint64_t)(C + 1) * 2u;
    sb_printf(&b, "acqApLfSy=%d,%d,1\n", C, np1 ? C : 0);
    sb_printf(&b, "appVersion=20230425\n");
    sb_printf(&b, "fileCreateTime=2000-01-01T00:00:00\n");
    sb_printf(&b, "fileName=%s\n", bin_name);
    sb_printf(&b, "fileSizeBytes=%llu\n", (unsigned long long)bytes);
    sb_printf(&b, "fileTimeSecs=%.17g\n", (double)n_samples / fs_hz);
    sb_printf(&b, "firstSample=0\n");
    sb_printf(&b, "gateMode=Immediate\n");
    sb_printf(&b, "imAiRangeMax=%s\n", np1 ? "0.6" : "0.62");
    sb_printf(&b, "imAiRangeMin=%s\n", np1 ? "-0.6" : "-0.62");
    sb_printf(&b, "imCalibrated=false\n");
    sb_printf(&b, "imChan0apGain=%d\n", np1 ? 500 : 100);
    if (np1)
        sb_printf(&b, "imChan0lfGain=250\n");
    sb_printf(&b, "imDatPrb_pn=%s\n", L->part_number);
    sb_printf(&b, "imDatPrb_type=%d\n", L->type_code);
    sb_printf(&b, "imMaxInt=%d\n", np1 ? 512 : 2048);
    sb_printf(&b, "imSampRate=%.17g\n", fs_hz);
    sb_printf(&b, "imStdby=\n");
    sb_printf(&b, "nSavedChans=%d\n", C + 1);
    sb_printf(&b, "snsApLfSy=%d,0,1\n", C);
    if (np1)
        sb_printf(&b, "snsSaveChanSubset=0:%d,%d\n", C - 1, 2 * C);
    else
        sb_printf(&b, "snsSaveChanSubset=0:%d\n", C);
    sb_printf(&b, "syncSourcePeriod=1\n");
    sb_printf(&b, "trigMode=Immediate\n");
    sb_printf(&b, "typeImEnabled=1\n");
    sb_printf(&b, "typeNiEnabled=0\n");
    sb_printf(&b, "typeThis=imec\n");
    sb_printf(&b, "userNotes=simulated by boundsort simulate (seed %llu)\n", (unsigned long long)seed);
    /* imroTbl */
    sb_printf(&b, "~imroTbl=(%d,%d)", L->type_code, C);
    for (int c = 0; c < C; c++) {
        if (np1)
            sb_printf(&b, "(%d 0 0 500 250 1)", c);
        else if (L->n_shanks == 1)
            sb_printf(&b, "(%d 1 0 %d)", c, L->electrode[c]);
        else
            sb_printf(&b, "(%d %d 0 0 %d)", c, pr->shank[c], L->electrode[c]);
    }
    sb_printf(&b, "\n");
    /* ~muxTbl: (ADCs, groups), then per group the channels sampled together in that slot */
    if (L->mux_cycles > 0) {
        sb_printf(&b, "~muxTbl=(%d,%d)", L->mux_adcs, L->mux_groups);
        for (int g = 0; g < L->mux_groups; g++) {
            sb_printf(&b, "(");
            int first = 1;
            for (int c = 0; c < C; c++)
                if (L->mux_order[c] == g) {
                    sb_printf(&b, first ? "%d" : " %d", c);
                    first = 0;
                }
            sb_printf(&b, ")");
        }
        sb_printf(&b, "\n");
    }
    /* snsChanMap: saved channels in file order */
    int sy = np1 ? 2 * C : C;
    sb_printf(&b, "~snsChanMap=(%d,%d,1)", C, np1 ? C : 0);
    for (int c = 0; c < C; c++)
        sb_printf(&b, "(AP%d;%d:%d)", c, c, c);
    sb_printf(&b, "(SY0;%d:%d)\n", sy, C);
    /* snsGeomMap */
    sb_printf(&b, "~snsGeomMap=(%s,%d,%g,%g)", L->part_number, L->n_shanks, L->shank_pitch_um, L->shank_width_um);
    for (int c = 0; c < C; c++)
        sb_printf(&b, "(%d:%g:%g:1)", pr->shank[c], pr->x_um[c] - pr->shank[c] * L->shank_pitch_um,
                  pr->y_um[c] - L->y_min_um);
    sb_printf(&b, "\n");
    bs_status st = b.bad ? bs_error(BS_ERR_MEMORY, "%s: out of memory formatting the meta", meta_path)
                         : bs_write_file_atomic(meta_path, b.s, b.n);
    free(b.s);
    return st;
}
