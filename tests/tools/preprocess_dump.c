/*
 * preprocess_dump.c - one stretch of a recording after boundsort's first
 * preprocessing steps, as a .npy, for comparisons with other tools
 * (tests/cli/test_real_spikeglx.sh and bench/preprocess_si.py compare it with
 * SpikeInterface's phase_shift). Built with the tests.
 *
 * Reads batch 0 of --seconds S (default 1) of REC through the sort's batch
 * reader (µV, sorted channels, the recording's first sample replicated into
 * the halo), removes each channel's mean over the window, and with --phase
 * applies the ADC phase shift (preprocess.h), then writes the central S
 * seconds as float32 (samples x channels) to OUT.npy.
 *
 *   preprocess_dump REC [--probe P --fs HZ] [--seconds S] [--phase] OUT.npy
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/batch.h"
#include "io/npy.h"
#include "io/recording.h"
#include "preprocess/preprocess.h"

int main(int argc, char **argv)
{
    const char *rec_path = NULL, *out = NULL;
    bs_open_options opt;
    memset(&opt, 0, sizeof opt);
    double seconds = 1;
    int phase = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--probe") == 0 && i + 1 < argc)
            opt.probe_path = argv[++i];
        else if (strcmp(argv[i], "--fs") == 0 && i + 1 < argc)
            opt.fs_hz = atof(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--phase") == 0)
            phase = 1;
        else if (!rec_path)
            rec_path = argv[i];
        else
            out = argv[i];
    }
    if (!rec_path || !out || !(seconds > 0)) {
        fprintf(stderr, "usage: preprocess_dump REC [--probe P --fs HZ] [--seconds S] [--phase] OUT.npy\n");
        return 1;
    }
    bs_recording rec;
    if (bs_recording_open(rec_path, &opt, &rec) != BS_OK) {
        fprintf(stderr, "%s\n", bs_last_error());
        return 2;
    }
    if (phase && !rec.probe.adc_shift) {
        fprintf(stderr, "%s: the probe has no ADC sampling delays\n", rec_path);
        bs_recording_close(&rec);
        return 2;
    }
    int64_t nb = (int64_t)(seconds * rec.fs_hz), halo = BS_PREPROCESS_HALO_DEFAULT;
    int C = rec.probe.n_chan;
    bs_batch_reader rd;
    float *x = NULL, *t = NULL;
    int64_t n_valid = 0;
    bs_status st = bs_batch_reader_open(&rd, &rec, nb, halo, 0);
    if (st == BS_OK)
        st = bs_batch_read(&rd, 0, &x, &n_valid);
    bs_preprocess pp = {.remove_mean = 1, .phase_shift = phase ? rec.probe.adc_shift : NULL};
    int64_t width = nb + 2 * halo;
    if (st == BS_OK)
        st = bs_preprocess_batch(&pp, x, C, width, NULL, 0, NULL);
    if (st == BS_OK && !(t = malloc(sizeof(float) * (size_t)n_valid * C)))
        st = BS_ERR_MEMORY;
    for (int64_t s = 0; st == BS_OK && s < n_valid; s++)
        for (int c = 0; c < C; c++)
            t[s * C + c] = x[(size_t)c * width + halo + s];
    int64_t shape[2] = {n_valid, C};
    if (st == BS_OK)
        st = bs_npy_save(out, BS_NPY_F32, 2, shape, t);
    if (st != BS_OK)
        fprintf(stderr, "%s\n", bs_last_error());
    free(t);
    bs_batch_reader_close(&rd);
    bs_recording_close(&rec);
    return st == BS_OK ? 0 : 2;
}
