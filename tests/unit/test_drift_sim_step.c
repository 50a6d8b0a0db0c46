/*
 * test_drift_sim_step.c - drift estimate against the simulator's 20 µm step
 * at mid-recording (Neuropixels 1.0, 20 s, the step on a batch boundary):
 * RMS error <= 5 µm (the target), and the step is resolved: the
 * mean estimate after the step minus the mean before is 20 ± 4 µm. Skipped
 * under the sanitizers (test_drift_sim_rigid runs the same code there).
 */
#include "drift_sim.h"
#include "test.h"

int main(void)
{
    if (dsim_sanitized())
        return 77;
    const char *tmp = test_tmpdir();
    dsim_paths P;
    dsim_paths_for(&P, tmp, "step");
    CHECK(dsim_make(P.gt, BS_SIM_PROBE_NP1, BS_SIM_DRIFT_STEP, 20.0, 60, 4));
    CHECK(dsim_drift_only(P.rec, P.probe, P.out, 2, NULL));
    double truth = 0, peak = 0;
    double rms = dsim_rms(P.out, P.gt, 0, 2.0, &truth, &peak);
    printf("20 µm step: RMS error %.2f µm (truth RMS %.2f µm)\n", rms, truth);
    CHECK_MSG(rms <= 5.0, "RMS error %.2f µm", rms);
    bs_npy_header h;
    float *m = dsim_load(P.out, "drift.npy", BS_NPY_F32, 2, &h);
    CHECK(m != NULL);
    if (m) {
        int B = (int)h.shape[0], K = (int)h.shape[1];
        double before = 0, after = 0;
        for (int t = 0; t < B; t++)
            for (int k = 0; k < K; k++)
                *(t < B / 2 ? &before : &after) += m[(size_t)t * K + k];
        double step = (after / (B - B / 2) - before / (B / 2)) / K;
        printf("estimated step %.2f µm\n", step);
        CHECK_NEAR(step, 20.0, 4.0);
        bs_mem_free(m);
    }
    if (!test_failed_)
        dsim_cleanup(P.gt, P.out);
    TEST_MAIN_END();
}
