/*
 * test_cluster_centers.c - spatial centers and the per-center feature
 * matrix: on a two-shank probe centers never mix shanks, every grid
 * position goes to the nearest center of its shank, a center's channels are
 * the union of its positions' channel lists; a wide 2-D shank gets several
 * x-centers; templates of a small center (one cluster) equal the mean of the
 * scattered features (zeros where a spike's channels do not reach, the
 * waveform through the temporal basis, the peak channel); a spike of
 * another center is refused.
 */
#include "test.h"

#include "cluster/cluster.h"
#include "detect/detect.h"
#include "mem/mem.h"

static void check_centers(const bs_probe *probe, const bs_detect_grid *g, const bs_cluster_centers *c)
{
    int ok_shank = 1, ok_near = 1, ok_union = 1;
    for (int f = 0; f < g->n_pos; f++) {
        int k = c->pos_center[f];
        ok_shank &= k >= 0 && k < c->n_centers && c->shank[k] == g->shank[f];
        double dk = pow(g->x_um[f] - c->x_um[k], 2) + pow(g->y_um[f] - c->y_um[k], 2);
        for (int q = 0; q < c->n_centers; q++)
            if (c->shank[q] == g->shank[f])
                ok_near &= dk <= pow(g->x_um[f] - c->x_um[q], 2) + pow(g->y_um[f] - c->y_um[q], 2) + 1e-3;
        for (int j = 0; j < g->n_chans; j++) {
            int ch = g->ichan[f * g->n_chans + j], found = 0;
            for (int64_t u = c->chan_off[k]; u < c->chan_off[k + 1]; u++)
                found |= c->chans[u] == ch;
            ok_union &= found;
        }
    }
    for (int k = 0; k < c->n_centers; k++) {
        for (int64_t u = c->chan_off[k]; u < c->chan_off[k + 1]; u++) {
            ok_union &= probe->shank[c->chans[u]] == c->shank[k];
            ok_union &= u == c->chan_off[k] || c->chans[u] > c->chans[u - 1];
            /* every union channel is used by some position of the center */
            int used = 0;
            for (int f = 0; f < g->n_pos && !used; f++)
                if (c->pos_center[f] == k)
                    for (int j = 0; j < g->n_chans; j++)
                        used |= g->ichan[f * g->n_chans + j] == c->chans[u];
            ok_union &= used;
        }
    }
    CHECK(ok_shank);
    CHECK(ok_near);
    CHECK(ok_union);
}

int main(void)
{
    bs_detect_params dp;
    bs_detect_default_params(&dp);
    bs_cluster_params cp;
    bs_cluster_default_params(&cp);

    /* two shanks of 16 contacts, 2 columns, 20 µm rows (0..140 µm), 250 µm apart */
    bs_probe probe;
    CHECK(bs_probe_alloc(&probe, 32) == BS_OK);
    for (int c = 0; c < 32; c++) {
        probe.column[c] = c;
        probe.shank[c] = c / 16;
        probe.x_um[c] = (c % 2) * 32.0 + 250.0 * (c / 16);
        probe.y_um[c] = ((c % 16) / 2) * 20.0;
    }
    probe.n_shanks = 2;
    bs_detect_grid g;
    CHECK(bs_grid_build(&probe, &dp, &g) == BS_OK);
    bs_cluster_centers cen;
    CHECK(bs_centers_build(&probe, &g, &cp, &cen) == BS_OK);
    /* per shank: y-centers 19, 59, 99, 139 µm, one x-center in the middle of the shank */
    printf("two shanks: %d positions, %d centers\n", g.n_pos, cen.n_centers);
    CHECK(cen.n_centers == 8);
    CHECK(cen.shank[0] == 0 && cen.shank[7] == 1);
    CHECK(fabsf(cen.y_um[0] - 19.0f) < 1e-4f && fabsf(cen.y_um[3] - 139.0f) < 1e-4f);
    CHECK(fabsf(cen.x_um[0] - 16.0f) < 1e-4f && fabsf(cen.x_um[4] - 266.0f) < 1e-4f);
    check_centers(&probe, &g, &cen);

    /* templates of a small center: spikes alternate between two positions of center 1 */
    int k = 1, f1 = -1, f2 = -1;
    for (int f = 0; f < g.n_pos; f++)
        if (cen.pos_center[f] == k) {
            if (f1 < 0)
                f1 = f;
            else if (memcmp(g.ichan + f * g.n_chans, g.ichan + f1 * g.n_chans, g.n_chans * sizeof(int)) != 0)
                f2 = f;
        }
    CHECK(f1 >= 0 && f2 >= 0);
    bs_temporal_basis b = {61, 20, 6, 6, NULL, NULL};
    float wpca[6 * 61];
    for (int p = 0; p < 6; p++)
        for (int u = 0; u < 61; u++)
            wpca[p * 61 + u] = (float)sin(0.1 * (p + 1) * (u + 1));
    b.wpca = wpca;
    int n = 40, P = 6, nC = g.n_chans;
    bs_detected_spike *sp = calloc((size_t)n, sizeof *sp);
    float *feat = malloc((size_t)n * nC * P * sizeof *feat);
    for (int i = 0; i < n; i++) {
        int f = i % 2 ? f2 : f1;
        sp[i].t = 1000 * i;
        sp[i].pos = f;
        for (int j = 0; j < nC; j++)
            for (int p = 0; p < P; p++)
                feat[(i * nC + j) * P + p] = (float)((g.ichan[f * nC + j] + 1) * (p + 1) * 0.01);
    }
    int32_t lab[40];
    bs_center_templates tm;
    CHECK(bs_cluster_center(&cp, &cen, k, &g, &b, sp, feat, n, lab, &tm) == BS_OK);
    CHECK(tm.n_clusters == 1 && tm.n_spikes[0] == n && tm.n_chans == bs_center_n_chans(&cen, k));
    int ok_feat = 1, ok_wave = 1, peak = -1;
    double best = -1;
    for (int j = 0; j < tm.n_chans; j++) {
        int ch = tm.chans[j], cov = 0;
        for (int q = 0; q < nC; q++)
            cov += (g.ichan[f1 * nC + q] == ch) + (g.ichan[f2 * nC + q] == ch);
        double nrm = 0;
        for (int p = 0; p < P; p++) {
            double want = (ch + 1) * (p + 1) * 0.01 * cov / 2.0;
            ok_feat &= fabs(tm.feat[j * P + p] - want) < 1e-5;
        }
        for (int u = 0; u < 61; u++) {
            double w = 0;
            for (int p = 0; p < P; p++)
                w += (double)tm.feat[j * P + p] * wpca[p * 61 + u];
            ok_wave &= fabs(tm.wave[j * 61 + u] - w) < 1e-4;
            nrm += w * w;
        }
        if (nrm > best) {
            best = nrm;
            peak = ch;
        }
    }
    CHECK(ok_feat);
    CHECK(ok_wave);
    CHECK(tm.peak_chan[0] == peak);
    bs_center_templates_free(&tm);
    /* a spike of another center is refused */
    int other = -1;
    for (int f = 0; f < g.n_pos && other < 0; f++)
        if (cen.pos_center[f] != k)
            other = f;
    sp[3].pos = other;
    CHECK(bs_cluster_center(&cp, &cen, k, &g, &b, sp, feat, n, lab, &tm) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "does not belong") != NULL);
    free(sp);
    free(feat);
    bs_centers_free(&cen);
    bs_grid_free(&g);
    bs_probe_free(&probe);

    /* a wide 2-D array: 8 columns 100 µm apart (x span 700 µm) -> ceil(700/200) = 4 x-centers */
    CHECK(bs_probe_alloc(&probe, 64) == BS_OK);
    for (int c = 0; c < 64; c++) {
        probe.column[c] = c;
        probe.shank[c] = 0;
        probe.x_um[c] = (c % 8) * 100.0;
        probe.y_um[c] = (c / 8) * 20.0;
    }
    probe.n_shanks = 1;
    CHECK(bs_grid_build(&probe, &dp, &g) == BS_OK);
    CHECK(bs_centers_build(&probe, &g, &cp, &cen) == BS_OK);
    int xs = 0;
    float seen[64];
    for (int q = 0; q < cen.n_centers; q++) {
        int dup = 0;
        for (int s = 0; s < xs; s++)
            dup |= seen[s] == cen.x_um[q];
        if (!dup)
            seen[xs++] = cen.x_um[q];
    }
    printf("2-D array: %d positions, %d centers, %d x-centers\n", g.n_pos, cen.n_centers, xs);
    CHECK(xs == 4);
    check_centers(&probe, &g, &cen);
    bs_centers_free(&cen);
    bs_grid_free(&g);
    bs_probe_free(&probe);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
