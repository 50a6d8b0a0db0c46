/*
 * test_drift_sim_rigid.c - drift estimate against the simulator's known
 * rigid slow drift (a 15 µm sinusoid over the recording, Neuropixels 1.0,
 * 384 channels): RMS error <= 5 µm (the target) over every time bin
 * and block, with the motion actually found (the estimate's peak within 30%
 * of the truth's). Under the sanitizers a short 32-channel recording runs
 * the same code without the accuracy checks (too few time bins to judge).
 */
#include "drift_sim.h"
#include "test.h"

int main(void)
{
    const char *tmp = test_tmpdir();
    dsim_paths P;
    dsim_paths_for(&P, tmp, "rigid");
    int san = dsim_sanitized();
    CHECK(dsim_make(P.gt, san ? BS_SIM_PROBE_LINEAR32 : BS_SIM_PROBE_NP1, BS_SIM_DRIFT_RIGID, san ? 8.0 : 20.0,
                    san ? 8 : 60, 3));
    CHECK(dsim_drift_only(P.rec, P.probe, P.out, 2, NULL));
    double truth = 0, peak = 0;
    double rms = dsim_rms(P.out, P.gt, 0, 2.0, &truth, &peak);
    printf("rigid sinusoid: RMS error %.2f µm (truth RMS %.2f µm), largest |estimate| %.1f µm\n", rms, truth, peak);
    CHECK(isfinite(rms));
    if (!san) {
        CHECK_MSG(rms <= 5.0, "RMS error %.2f µm", rms);
        CHECK_MSG(peak >= 0.7 * 15.0 && peak <= 1.3 * 15.0 + 5.0, "largest |estimate| %.1f µm for a 15 µm sinusoid",
                  peak);
    }
    if (!test_failed_)
        dsim_cleanup(P.gt, P.out);
    TEST_MAIN_END();
}
