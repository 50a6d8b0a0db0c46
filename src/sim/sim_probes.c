/*
 * sim_probes.c - the probe layouts the simulator offers, built the way
 * SpikeGLX computes positions (docs/FORMATS.md §2.4):
 *
 *   np1         NP1000, type 0: channel i reads electrode i (bank 0); row = i / 2,
 *               col = i % 2, x = (row odd ? 11 : 27) + 32 col µm, y = 20 row µm
 *               (staggered four-column checkerboard, 384 channels, 3820 µm span).
 *   np2         NP2003, type 2003: electrode i, x = 27 + 32 col, y = 15 row
 *               (two straight columns, 384 channels, 2865 µm span).
 *   np2-4shank  NP2013, type 2013: the bottom 96 electrodes of each of four
 *               shanks 250 µm apart, with the channel-to-shank wiring of a real
 *               SpikeGLX "horizontal stripe" table: channels in groups of 48 go
 *               to shanks 0,1,0,1,2,3,2,3, electrodes 0-47 then 48-95.
 *               x = 250 shank + 27 + 32 col, y = 15 row (705 µm span per shank).
 *   linear32    a generic 32-contact single-column probe: x = 0, y = 25 i µm
 *               (775 µm span), recorded with an Intan-style 0.195 µV/bit.
 *
 * ADC multiplexing follows SpikeGLX's ~muxTbl: NP1 channel i is sampled in slot
 * (i % 24) / 2 of 13 per sample period, NP2 channel i in slot (i % 32) / 2 of 16.
 *
 * Channel i is always column i of recording.bin.
 */
#include <stdio.h>
#include <string.h>

#include "../mem/mem.h"
#include "sim_internal.h"

bs_status bs_sim_layout_make(bs_sim_probe_kind kind, bs_probe *probe, bs_sim_layout *L)
{
    memset(L, 0, sizeof *L);
    int n = kind == BS_SIM_PROBE_LINEAR32 ? 32 : 384;
    BS_TRY(bs_probe_alloc(probe, n));
    L->n_chan = n;
    L->electrode = bs_mem_calloc("sim/probe", (size_t)n, sizeof *L->electrode);
    L->mux_order = bs_mem_calloc("sim/probe", (size_t)n, sizeof *L->mux_order);
    if (!L->electrode || !L->mux_order) {
        bs_mem_free(L->electrode);
        bs_mem_free(L->mux_order);
        bs_probe_free(probe);
        return BS_ERR_MEMORY;
    }
    L->n_shanks = 1;
    L->type_code = -1;
    L->shank_width_um = 70;
    static const int shank_of_group[8] = {0, 1, 0, 1, 2, 3, 2, 3};
    static const int half_of_group[8] = {0, 0, 1, 1, 0, 0, 1, 1};
    for (int i = 0; i < n; i++) {
        int el = i, shank = 0;
        double x = 0, y = 0;
        switch (kind) {
        case BS_SIM_PROBE_NP1: {
            int row = el / 2, col = el % 2;
            x = (row % 2 ? 11.0 : 27.0) + 32.0 * col;
            y = 20.0 * row;
            break;
        }
        case BS_SIM_PROBE_NP2: {
            int row = el / 2, col = el % 2;
            x = 27.0 + 32.0 * col;
            y = 15.0 * row;
            break;
        }
        case BS_SIM_PROBE_NP2_4SHANK: {
            int g = i / 48;
            shank = shank_of_group[g];
            el = i % 48 + 48 * half_of_group[g];
            int row = el / 2, col = el % 2;
            x = 250.0 * shank + 27.0 + 32.0 * col;
            y = 15.0 * row;
            break;
        }
        case BS_SIM_PROBE_LINEAR32:
            x = 0.0;
            y = 25.0 * i;
            break;
        }
        L->electrode[i] = el;
        probe->column[i] = i;
        probe->x_um[i] = x;
        probe->y_um[i] = y;
        probe->shank[i] = shank;
    }
    switch (kind) {
    case BS_SIM_PROBE_NP1:
        L->part_number = "NP1000";
        L->type_code = 0;
        L->x_min_um = 11;
        L->x_max_um = 59;
        break;
    case BS_SIM_PROBE_NP2:
        L->part_number = "NP2003";
        L->type_code = 2003;
        L->x_min_um = 27;
        L->x_max_um = 59;
        break;
    case BS_SIM_PROBE_NP2_4SHANK:
        L->part_number = "NP2013";
        L->type_code = 2013;
        L->n_shanks = 4;
        L->shank_pitch_um = 250;
        L->x_min_um = 27;
        L->x_max_um = 59;
        break;
    case BS_SIM_PROBE_LINEAR32:
        L->part_number = "linear32";
        L->shank_width_um = 30;
        L->x_min_um = 0;
        L->x_max_um = 0;
        break;
    }
    /* ADC multiplexing (SpikeGLX ~muxTbl): NP1 has 32 ADCs reading 12 channels each in 13 slots per
     * sample, slot = (ch % 24) / 2; NP2 has 24 ADCs reading 16 channels each in 16 slots, slot = (ch % 32) / 2 */
    if (kind == BS_SIM_PROBE_NP1) {
        L->mux_cycles = 13;
        L->mux_groups = 12;
        L->mux_adcs = 32;
    } else if (kind != BS_SIM_PROBE_LINEAR32) {
        L->mux_cycles = 16;
        L->mux_groups = 16;
        L->mux_adcs = 24;
    }
    for (int i = 0; i < n && L->mux_cycles; i++)
        L->mux_order[i] = (i % (2 * L->mux_groups)) / 2;
    probe->n_shanks = L->n_shanks;
    snprintf(probe->model, sizeof probe->model, "%s", L->part_number);
    L->y_min_um = probe->y_um[0];
    L->y_max_um = probe->y_um[0];
    for (int i = 1; i < n; i++) {
        if (probe->y_um[i] < L->y_min_um)
            L->y_min_um = probe->y_um[i];
        if (probe->y_um[i] > L->y_max_um)
            L->y_max_um = probe->y_um[i];
    }
    return BS_OK;
}

void bs_sim_layout_free(bs_sim_layout *L)
{
    bs_mem_free(L->electrode);
    bs_mem_free(L->mux_order);
    memset(L, 0, sizeof *L);
}

bs_status bs_sim_make_probe(bs_sim_probe_kind kind, bs_probe *p)
{
    bs_sim_layout L;
    BS_TRY(bs_sim_layout_make(kind, p, &L));
    bs_sim_layout_free(&L);
    return BS_OK;
}

double bs_sim_uv_per_bit(bs_sim_probe_kind kind)
{
    switch (kind) {
    case BS_SIM_PROBE_NP1: return 0.6 / 512.0 / 500.0 * 1e6;            /* 2.34375 */
    case BS_SIM_PROBE_NP2:
    case BS_SIM_PROBE_NP2_4SHANK: return 0.62 / 2048.0 / 100.0 * 1e6;   /* 3.02734375 */
    case BS_SIM_PROBE_LINEAR32: return 0.195;
    }
    return 1.0;
}

static const char *probe_names[] = {"np1", "np2", "np2-4shank", "linear32"};
static const char *drift_names[] = {"none", "rigid", "nonrigid", "step"};

bs_status bs_sim_parse_probe(const char *text, bs_sim_probe_kind *kind)
{
    for (int i = 0; i < 4; i++)
        if (text && strcmp(text, probe_names[i]) == 0) {
            *kind = (bs_sim_probe_kind)i;
            return BS_OK;
        }
    return bs_error(BS_ERR_USAGE, "option --probe: unknown probe '%s', expected np1, np2, np2-4shank or linear32",
                    text ? text : "");
}

bs_status bs_sim_parse_drift(const char *text, bs_sim_drift_kind *kind)
{
    for (int i = 0; i < 4; i++)
        if (text && strcmp(text, drift_names[i]) == 0) {
            *kind = (bs_sim_drift_kind)i;
            return BS_OK;
        }
    return bs_error(BS_ERR_USAGE, "option --drift: unknown drift '%s', expected none, rigid, nonrigid or step",
                    text ? text : "");
}

const char *bs_sim_probe_name(bs_sim_probe_kind kind)
{
    return (unsigned)kind < 4 ? probe_names[kind] : "?";
}

const char *bs_sim_drift_name(bs_sim_drift_kind kind)
{
    return (unsigned)kind < 4 ? drift_names[kind] : "?";
}
