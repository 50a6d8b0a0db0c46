/*
 * cmd_simulate.c - `boundsort simulate`: parses the options into
 * bs_sim_params (src/sim/simulate.h) and writes a ground-truth folder.
 * Bad options exit 1 (usage) with a message naming the option; an output
 * folder that cannot be created or written exits 2.
 */
#include <errno.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../sim/simulate.h"
#include "cli.h"

static const char *usage_text =
    "usage: boundsort simulate -o DIR [--probe np1|np2|np2-4shank|linear32] [--duration S] [--units N]\n"
    "                          [--drift none|rigid|nonrigid|step] [--drift-um UM] [--seed S] [--fs HZ]\n"
    "                          [--noise UV] [--artifacts RATE] [--spikeglx] [--nwb] [--openephys] [--no-mux]\n"
    "                          [--dead-channels N] [--noisy-channels N] [--out-channels N] [--noise-units N]\n"
    "                          [--coupled-pairs N] [--coupled-lag-ms MS] [--threads N] [-q]\n"
    "\n"
    "Writes a ground-truth recording into DIR: recording.bin (int16), probe.json, recording.json,\n"
    "gt_spike_times.npy, gt_spike_units.npy, gt_unit_positions.npy, gt_templates.npy, gt_drift_um.npy.\n"
    "  -o, --out DIR     output folder (created)\n"
    "  --probe P         np1 (default, NP1000 384 ch), np2 (NP2003), np2-4shank (NP2013, 96 ch per shank),\n"
    "                    linear32 (one column, 25 µm pitch)\n"
    "  --duration S      seconds (default 60)\n"
    "  --units N         ground-truth units (default 50)\n"
    "  --drift K         none (default), rigid (sinusoid), nonrigid (depth-dependent sinusoid), step\n"
    "  --drift-um UM     sinusoid amplitude (default 15) or step size (default 20), µm\n"
    "  --seed S          random seed (default 1); the same seed gives byte-identical files\n"
    "  --fs HZ           sampling rate (default 30000)\n"
    "  --noise UV        background noise rms per channel, µV (default 10)\n"
    "  --artifacts RATE  broadband transients (stimulation pulses, chewing, movement) per second on most\n"
    "                    channels, 300-3000 µV (default 0); listed in DIR/gt_artifacts.tsv\n"
    "  --spikeglx        also write DIR/spikeglx/sim_g0_t0.imec0.ap.bin + .meta (Neuropixels probes)\n"
    "  --nwb             also write DIR/recording.nwb (NWB 2.x, gzip-chunked int16, electrodes table)\n"
    "  --openephys       also write an Open Ephys Record Node folder DIR/openephys/Record Node 101/\n"
    "                    (GUI 0.6 layout; Neuropixels geometry in settings.xml; linear32 needs --probe)\n"
    "  --no-mux          sample every channel at the same time (default: Neuropixels ADC multiplexing,\n"
    "                    channels sampled at staggered sub-sample times as in SpikeGLX's ~muxTbl)\n"
    "  --dead-channels N, --noisy-channels N\n"
    "                    bad channels planted at random: dead (signal x 0.02, flat after quantization) or\n"
    "                    noisy (50 µV rms of white noise added); listed in recording.json \"bad_channels\"\n"
    "  --out-channels N  the N highest channels of each shank out of the brain (white noise of 0.8 x\n"
    "                    the noise rms only: no spikes, nothing shared with the other channels)\n"
    "  --noise-units N   the last N of the --units are artifact-like, not neurons: a ringing waveform\n"
    "                    (a damped 2-3.5 kHz oscillation) with an almost flat footprint over 300 µm;\n"
    "                    listed in recording.json \"noise_units\" (the other units are unchanged)\n"
    "  --coupled-pairs N GT units 2i and 2i+1 (i < N) are neighbours (30 µm apart) and unit 2i+1 also\n"
    "                    fires --coupled-lag-ms (default 0.6) after half of unit 2i's spikes: collisions\n"
    "                    at one lag, listed in recording.json \"coupled_pairs\"\n"
    "  --threads N       OpenMP threads (the output does not depend on it)\n"
    "  -q                quiet\n";

static int bad_value(const char *opt, const char *val, const char *expected)
{
    fprintf(stderr, "boundsort simulate: option %s: expected %s, got '%s'\n%s", opt, expected, val ? val : "",
            usage_text);
    return BS_ERR_USAGE;
}

static int parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno)
        return 0;
    *out = v;
    return 1;
}

static int parse_ll(const char *s, long long *out)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno)
        return 0;
    *out = v;
    return 1;
}

int bs_cmd_simulate(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return BS_OK;
    }
    bs_sim_params p;
    bs_sim_params_default(&p);
    const char *out = NULL;
    int threads = 0, nwb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        long long n;
        if (strcmp(a, "-q") == 0) {
            bs_log_set_level(BS_LOG_WARN);
            continue;
        }
        if (strcmp(a, "--spikeglx") == 0) {
            p.spikeglx = 1;
            continue;
        }
        if (strcmp(a, "--nwb") == 0) {
            nwb = 1;
            continue;
        }
        if (strcmp(a, "--openephys") == 0) {
            p.openephys = 1;
            continue;
        }
        if (strcmp(a, "--no-mux") == 0) {
            p.adc_mux = 0;
            continue;
        }
        if (a[0] != '-') {
            fprintf(stderr, "boundsort simulate: unexpected argument '%s'\n%s", a, usage_text);
            return BS_ERR_USAGE;
        }
        if (!v || !v[0]) {
            fprintf(stderr, "boundsort simulate: ");
            fprintf(stderr, !bs_cli_option_listed(usage_text, a) ? "unknown option %s"
                            : v                                    ? "option %s: the value is empty ('')"
                                                                   : "option %s needs a value",
                    a);
            fprintf(stderr, "\n%s", usage_text);
            return BS_ERR_USAGE;
        }
        i++;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            out = v;
        } else if (strcmp(a, "--probe") == 0) {
            bs_status st = bs_sim_parse_probe(v, &p.probe);
            if (st != BS_OK)
                return bs_cli_fail(st);
        } else if (strcmp(a, "--drift") == 0) {
            bs_status st = bs_sim_parse_drift(v, &p.drift);
            if (st != BS_OK)
                return bs_cli_fail(st);
        } else if (strcmp(a, "--duration") == 0) {
            if (!parse_double(v, &d) || !(d > 0))
                return bad_value(a, v, "a positive number of seconds");
            p.duration_s = d;
        } else if (strcmp(a, "--units") == 0) {
            if (!parse_ll(v, &n) || n < 1 || n > 2000)
                return bad_value(a, v, "a number of units in 1..2000");
            p.n_units = (int)n;
        } else if (strcmp(a, "--drift-um") == 0) {
            if (!parse_double(v, &d) || !(d > 0 && d <= 500))
                return bad_value(a, v, "a drift size in (0, 500] µm");
            p.drift_um = d;
        } else if (strcmp(a, "--seed") == 0) {
            if (!parse_ll(v, &n) || n < 0)
                return bad_value(a, v, "a non-negative integer");
            p.seed = (uint64_t)n;
        } else if (strcmp(a, "--fs") == 0) {
            if (!parse_double(v, &d) || !(d >= 1000 && d <= 200000))
                return bad_value(a, v, "a sampling rate in 1000..200000 Hz");
            p.fs_hz = d;
        } else if (strcmp(a, "--noise") == 0) {
            if (!parse_double(v, &d) || !(d >= 0 && d <= 1000))
                return bad_value(a, v, "a noise rms in 0..1000 µV");
            p.noise_uv = d;
        } else if (strcmp(a, "--artifacts") == 0) {
            if (!parse_double(v, &d) || !(d >= 0 && d <= 100))
                return bad_value(a, v, "an artifact rate in 0..100 per second");
            p.artifact_rate_hz = d;
        } else if (strcmp(a, "--dead-channels") == 0 || strcmp(a, "--noisy-channels") == 0 ||
                   strcmp(a, "--out-channels") == 0) {
            if (!parse_ll(v, &n) || n < 0 || n > 4096)
                return bad_value(a, v, "a channel count in 0..4096");
            *(a[2] == 'd' ? &p.n_dead : a[2] == 'n' ? &p.n_noisy : &p.n_out) = (int)n;
        } else if (strcmp(a, "--noise-units") == 0) {
            if (!parse_ll(v, &n) || n < 0 || n > 2000)
                return bad_value(a, v, "a unit count in 0..2000");
            p.n_noise_units = (int)n;
        } else if (strcmp(a, "--coupled-pairs") == 0) {
            if (!parse_ll(v, &n) || n < 0 || n > 1000)
                return bad_value(a, v, "a pair count in 0..1000");
            p.n_coupled = (int)n;
        } else if (strcmp(a, "--coupled-lag-ms") == 0) {
            if (!parse_double(v, &d) || !(fabs(d) <= 2.0))
                return bad_value(a, v, "a lag in -2..2 ms");
            p.coupled_lag_ms = d;
        } else if (strcmp(a, "--threads") == 0) {
            if (!parse_ll(v, &n) || n < 1 || n > 1024)
                return bad_value(a, v, "a thread count in 1..1024");
            threads = (int)n;
        } else {
            fprintf(stderr, "boundsort simulate: unknown option '%s'\n%s", a, usage_text);
            return BS_ERR_USAGE;
        }
    }
    if (!out) {
        fprintf(stderr, "boundsort simulate: the output folder is missing (-o DIR)\n%s", usage_text);
        return BS_ERR_USAGE;
    }
    if (threads > 0)
        omp_set_num_threads(threads);
    bs_sim_summary s;
    bs_status st = bs_simulate(&p, out, &s);
    if (st == BS_OK && nwb)
        st = bs_sim_write_nwb(out, &p, &s);
    if (st != BS_OK)
        return bs_cli_fail(st);
    printf("%s: %d channels x %lld samples at %g Hz, %d units, %lld spikes, %lld GT pairs colliding within 1 ms "
           "and 100 µm\n",
           out, s.n_chan, (long long)s.n_samples, p.fs_hz, p.n_units, (long long)s.n_spikes,
           (long long)s.n_collisions);
    return BS_OK;
}
