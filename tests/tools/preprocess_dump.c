/*
 * preprocess_dump - one stretch of a recording after boundsort's first
 * preprocessing steps, as a .npy, for comparisons with other tools
 * (tests/cli/test_real_spikeglx.sh and bench/preprocess_si.py compare it with
 * SpikeInterface's phase_shift; tests/cli/test_denoise_si.sh with its
 * highpass_spatial_filter and local common_reference). Built with the tests.
 *
 * Reads batch 0 of --seconds S (default 1) of REC through the sort's batch
 * reader (µV, sorted channels, the recording's first sample replicated into
 * the halo), removes each channel's mean over the window, and with --phase
 * applies the ADC phase shift (preprocess.h), then writes the central S
 * seconds as float32 (samples x channels) to OUT.npy.
 *
 * With --destripe or --car-local the steps run on the S seconds themselves
 * (the recording's first min(S, duration) seconds, no halo: the same samples
 * SpikeInterface is given): mean removal, the phase shift with --phase, then
 *   --destripe: the 300 Hz 3rd-order zero-phase high-pass (bs_highpass),
 *     then bs_destripe_apply with each channel's RMS over those high-passed
 *     samples (µV), which --rms R.npy writes as float32 (channels,);
 *   --car-local: the local median reference, (30, 55] µm, at least 5
 *     neighbours (bs_car_local).
 *
 * With --interpolate (the plain path), the sort's bad-channel scan runs with
 * its defaults (bad_channels.h) and the dead and noisy channels are
 * interpolated from the good ones after the phase shift, as the sort does
 * (out-of-brain channels are left as they are: the sort drops them).
 *
 *   preprocess_dump REC [--probe P --fs HZ] [--seconds S] [--phase]
 *                   [--destripe [--rms R.npy] | --car-local | --interpolate] OUT.npy
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/batch.h"
#include "io/npy.h"
#include "io/recording.h"
#include "pipeline/sort.h"
#include "preprocess/bad_channels.h"
#include "preprocess/preprocess.h"

/* --destripe / --car-local: compact x (C rows of `width`) to its n valid central samples in place, then mean
 * removal, the phase shift if asked, and the denoising step. */
static bs_status denoise(const bs_recording *rec, float *x, int64_t width, int64_t halo, int64_t n, int phase,
                         int destripe, const char *rms_out)
{
    const int C = rec->probe.n_chan;
    for (int c = 0; c < C; c++)
        memmove(x + (size_t)c * n, x + (size_t)c * width + halo, sizeof(float) * (size_t)n);
    BS_TRY(bs_car(x, C, n, 1, 0, NULL, 0));
    if (phase)
        BS_TRY(bs_phase_shift_apply(rec->probe.adc_shift, x, C, n, NULL, 0));
    if (!destripe) {
        bs_local_ref r;
        BS_TRY(bs_local_ref_build(&rec->probe, 30, 55, 5, &r));
        bs_status st = bs_car_local(&r, x, n, NULL, 0);
        bs_local_ref_free(&r);
        return st;
    }
    bs_highpass hp;
    BS_TRY(bs_highpass_design(3, 300, rec->fs_hz, &hp));
    BS_TRY(bs_highpass_apply(&hp, x, C, n, NULL, 0));
    float *rms = malloc(sizeof(float) * (size_t)C);
    if (!rms)
        return BS_ERR_MEMORY;
    for (int c = 0; c < C; c++) {
        double ss = 0;
        for (int64_t t = 0; t < n; t++)
            ss += (double)x[(size_t)c * n + t] * x[(size_t)c * n + t];
        rms[c] = (float)sqrt(ss / (double)n);
    }
    int64_t shape[1] = {C};
    bs_status st = rms_out ? bs_npy_save(rms_out, BS_NPY_F32, 1, shape, rms) : BS_OK;
    bs_destripe d;
    if (st == BS_OK)
        st = bs_destripe_init(&rec->probe, rec->fs_hz, rms, &d);
    if (st == BS_OK) {
        st = bs_destripe_apply(&d, x, C, n, NULL, 0);
        bs_destripe_free(&d);
    }
    free(rms);
    return st;
}

int main(int argc, char **argv)
{
    const char *rec_path = NULL, *out = NULL;
    bs_open_options opt;
    memset(&opt, 0, sizeof opt);
    double seconds = 1;
    int phase = 0, destripe = 0, car_local = 0, interpolate = 0;
    const char *rms_out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--probe") == 0 && i + 1 < argc)
            opt.probe_path = argv[++i];
        else if (strcmp(argv[i], "--fs") == 0 && i + 1 < argc)
            opt.fs_hz = atof(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--phase") == 0)
            phase = 1;
        else if (strcmp(argv[i], "--destripe") == 0)
            destripe = 1;
        else if (strcmp(argv[i], "--car-local") == 0)
            car_local = 1;
        else if (strcmp(argv[i], "--interpolate") == 0)
            interpolate = 1;
        else if (strcmp(argv[i], "--rms") == 0 && i + 1 < argc)
            rms_out = argv[++i];
        else if (!rec_path)
            rec_path = argv[i];
        else
            out = argv[i];
    }
    if (!rec_path || !out || !(seconds > 0) || destripe + car_local + interpolate > 1 || (rms_out && !destripe)) {
        fprintf(stderr, "usage: preprocess_dump REC [--probe P --fs HZ] [--seconds S] [--phase] "
                        "[--destripe [--rms R.npy] | --car-local | --interpolate] OUT.npy\n");
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
    int64_t width = nb + 2 * halo;
    if (destripe || car_local) {
        /* the valid samples only, channel-major, then the steps on them */
        if (st == BS_OK)
            st = denoise(&rec, x, width, halo, n_valid, phase, destripe, rms_out);
        width = n_valid;
        halo = 0;
    } else {
        bs_preprocess pp = {.remove_mean = 1, .phase_shift = phase ? rec.probe.adc_shift : NULL};
        bs_bad_interp ip = {0};
        if (st == BS_OK && interpolate) { /* the sort's scan and interpolation */
            bs_sort_params sp;
            bs_sort_default_params(&sp);
            int64_t snb, shalo;
            bs_sort_batch_geometry(&sp, rec.fs_hz, &snb, &shalo);
            int8_t *lab = malloc((size_t)C);
            float *coh = malloc(sizeof(float) * (size_t)C), *psd = malloc(sizeof(float) * (size_t)C);
            uint8_t *bad = malloc((size_t)C), *good = malloc((size_t)C);
            st = lab && coh && psd && bad && good ? BS_OK : BS_ERR_MEMORY;
            if (st == BS_OK)
                st = bs_bad_channels_scan(&rec, &sp.bad, pp.phase_shift, shalo, sp.max_railed_fraction, &sp.artifact,
                                          lab, coh, psd, NULL, NULL);
            for (int c = 0; st == BS_OK && c < C; c++) {
                bad[c] = lab[c] == BS_CHAN_DEAD || lab[c] == BS_CHAN_NOISY;
                good[c] = lab[c] == BS_CHAN_GOOD;
            }
            if (st == BS_OK)
                st = bs_bad_interp_build(&rec.probe, bad, good, 1.3, &ip);
            pp.interp = ip.n_bad ? &ip : NULL;
            free(lab), free(coh), free(psd), free(bad), free(good);
        }
        if (st == BS_OK)
            st = bs_preprocess_batch(&pp, x, C, width, NULL, 0, NULL);
        bs_bad_interp_free(&ip);
    }
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
