/*
 * checkpoint.h - stage checkpoints and `sort --resume` (docs/ARCHITECTURE.md
 * §5).
 *
 * Every stage writes its outputs atomically into OUT/.stages/<stage>/ and
 * then records an entry in OUT/.stages/manifest.json: the run key, and the
 * name and size of each output file. The run key is a 64-bit FNV-1a hash of
 * everything the result depends on: the boundsort version, the recording's
 * identity (format, sample type, shape, sampling rate, µV per bit, offset,
 * probe geometry, and the bytes of the first and last MiB of the data file)
 * and every algorithm parameter (the table of params.h; not threads, budget
 * or verbosity, which never change the output).
 *
 * Without --resume a run starts by removing the manifest. With --resume a
 * stage is skipped (its outputs loaded) when the manifest has the same key,
 * an entry for it and for every earlier stage, and every recorded file has
 * its recorded size. The first stage that is not skipped, and every stage
 * after it, runs again; its entry (and the later ones) are rewritten. A run
 * killed at any point therefore resumes to byte-identical final outputs:
 * files are committed by rename before their entry is written, and the
 * manifest itself is replaced atomically.
 */
#ifndef BS_CHECKPOINT_H
#define BS_CHECKPOINT_H

#include <stdint.h>

#include "../common/status.h"
#include "../io/recording.h"
#include "sort.h"

#define BS_CKPT_MAX_STAGES 12

typedef struct {
    char stage_dir[4096];  /* OUT/.stages */
    uint64_t key;          /* run key */
    int resume;            /* --resume given and the manifest matched */
    int broken;            /* a stage was not skipped: no later stage is */
    void *manifest;        /* cJSON object of the manifest being kept */
} bs_checkpoint;

/* The run key of a sort (exposed for tests). */
bs_status bs_checkpoint_key(const bs_recording *rec, const bs_sort_params *p, uint64_t *key);

/* Start: compute the key; with resume, read the manifest (a missing or
 * different one means nothing is skipped, with a log line saying why);
 * without, remove it. */
bs_status bs_checkpoint_open(bs_checkpoint *c, const char *stage_dir, const bs_recording *rec,
                             const bs_sort_params *p, int resume);
void bs_checkpoint_close(bs_checkpoint *c);

/* 1 if `stage` may be skipped (see above); 0 otherwise (and from then on). */
int bs_checkpoint_done(bs_checkpoint *c, const char *stage);

/* Record `stage` as complete with its n output files (paths relative to
 * stage_dir, e.g. "detect/spike_times.npy"); drops every entry after it and
 * writes the manifest atomically. */
bs_status bs_checkpoint_mark(bs_checkpoint *c, const char *stage, int n, const char *const *files);

/* Test hook: when the environment variable BOUNDSORT_TEST_KILL is
 * "<stage>:<i>", the process kills itself with SIGKILL when stage `stage`
 * reaches step i (a batch or center count; "end" = after its checkpoint is
 * recorded). Used by the kill-and-resume tests; a no-op otherwise. */
void bs_checkpoint_test_kill(const char *stage, int64_t i);
#define BS_CKPT_END (-1)

#endif
