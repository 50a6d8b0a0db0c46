/*
 * consumer.c - opens a recording with an installed libboundsort_core (tests/cli/test_install.sh):
 * prints the library's version, the recording's channel count, rate and length, and the tracked memory
 * its reader holds.
 */
#include <boundsort.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 1;
    bs_open_options opt = {0};
    bs_recording rec;
    if (bs_recording_open(argv[1], &opt, &rec) != BS_OK) {
        fprintf(stderr, "consumer: %s\n", bs_last_error());
        return 2;
    }
    printf("%s %d %.0f %lld\n", BOUNDSORT_VERSION, rec.probe.n_chan, rec.fs_hz, (long long)rec.n_samples);
    bs_recording_close(&rec);
    return bs_mem_current(BS_DEV_HOST) == 0 ? 0 : 3;
}
