/*
 * test_drift_sim_nonrigid.c - nonrigid drift estimate against the simulator
 * (Neuropixels 1.0, 20 s, a sinusoid whose amplitude grows with depth from
 * 0.3x to 1.7x of 15 µm): the probe is tall enough for the default 5 blocks
 * (9 half-overlapping), RMS error <= 8 µm (the target), and the
 * depth dependence is found: the motion range of the top block is at least
 * twice that of the bottom block (the truth's ratio is about 4). Skipped
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
    dsim_paths_for(&P, tmp, "nonrigid");
    CHECK(dsim_make(P.gt, BS_SIM_PROBE_NP1, BS_SIM_DRIFT_NONRIGID, 20.0, 60, 5));
    CHECK(dsim_drift_only(P.rec, P.probe, P.out, 2, NULL));
    double truth = 0, peak = 0;
    double rms = dsim_rms(P.out, P.gt, 0, 2.0, &truth, &peak);
    printf("nonrigid sinusoid: RMS error %.2f µm (truth RMS %.2f µm)\n", rms, truth);
    CHECK_MSG(rms <= 8.0, "RMS error %.2f µm", rms);
    bs_npy_header h, hd;
    float *m = dsim_load(P.out, "drift.npy", BS_NPY_F32, 2, &h);
    float *dep = dsim_load(P.out, "drift_depths_um.npy", BS_NPY_F32, 1, &hd);
    CHECK(m && dep);
    if (m && dep) {
        int B = (int)h.shape[0], K = (int)h.shape[1];
        CHECK_MSG(K == 9, "%d blocks, expected 9", K);
        double range[2];
        for (int e = 0; e < 2; e++) {
            int k = e ? K - 1 : 0;
            double lo = 1e9, hi = -1e9;
            for (int t = 0; t < B; t++) {
                double v = m[(size_t)t * K + k];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            range[e] = hi - lo;
        }
        printf("motion range: bottom block (%.0f µm) %.1f µm, top block (%.0f µm) %.1f µm\n", dep[0], range[0],
               dep[K - 1], range[1]);
        CHECK(dep[K - 1] > dep[0]);
        CHECK_MSG(range[1] >= 2.0 * range[0], "top %.1f, bottom %.1f", range[1], range[0]);
    }
    bs_mem_free(m);
    bs_mem_free(dep);
    if (!test_failed_)
        dsim_cleanup(P.gt, P.out);
    TEST_MAIN_END();
}
