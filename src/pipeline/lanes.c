/*
 * lanes.c - a stage's batches worked on several at once (stage.h:
 * bs_run_lanes; docs/ARCHITECTURE.md §2.1, "Batches at once").
 *
 * L threads (an OpenMP team), each standing for one lane of the stage's (its
 * reader, buffers and GPU objects, which the stage owns and indexes by the
 * lane number), take the batches in turn: a dynamic schedule of one batch
 * each, so a slow batch holds up only its own lane. work(ctx, lane, b) runs on
 * the lane's thread with one OpenMP thread inside (omp_set_num_threads(1) in
 * the team: a lane's calls size their per-thread buffers for one), and may
 * run for batches b and b + 1 at the same time on two lanes. write(ctx, lane,
 * b) runs in batch order, one at a time, once batch b's work is done (an
 * ordered region): a lane that has finished batch b waits there for b - 1 to
 * be written, and only then takes another batch, so a lane's results stay
 * its own until written. Batches are independent, so what is written does
 * not depend on L or on which lane did which batch.
 *
 * The first error (of work or write) is kept with its message (messages are
 * per thread) and returned; the lanes skip the batches left. With L = 1 the
 * batches run in order on the calling thread, with all its threads.
 */
#include <omp.h>
#include <stdio.h>

#include "stage.h"

bs_status bs_run_lanes(int L, int64_t n_batches, bs_lane_fn work, bs_lane_fn write, void *ctx)
{
    if (L <= 1) { /* one lane: in order on the calling thread, with all its threads */
        for (int64_t b = 0; b < n_batches; b++) {
            BS_TRY(work(ctx, 0, b));
            BS_TRY(write(ctx, 0, b));
        }
        return BS_OK;
    }
    bs_status wst = BS_OK; /* the first error, set in the ordered region (one thread at a time) */
    char msg[1024] = "";
#pragma omp parallel num_threads(L)
    {
        int lane = omp_get_thread_num();
        omp_set_num_threads(1);
#pragma omp for ordered schedule(dynamic, 1)
        for (int64_t b = 0; b < n_batches; b++) {
            int stop;
#pragma omp atomic read
            stop = wst;
            bs_status s1 = stop ? BS_OK : work(ctx, lane, b);
#pragma omp ordered
            {
                if (wst == BS_OK) {
                    bs_status s2 = s1 == BS_OK ? write(ctx, lane, b) : s1;
                    if (s2 != BS_OK) {
                        snprintf(msg, sizeof msg, "%s", bs_last_error());
#pragma omp atomic write
                        wst = s2;
                    }
                }
            }
        }
    }
    return wst == BS_OK ? BS_OK : bs_error(wst, "%s", msg);
}
