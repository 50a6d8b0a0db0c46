/*
 * test_drift_sim_shanks.c - shanks are estimated independently. Two
 * simulated Neuropixels 2.0 four-shank recordings with different motion
 * (a 15 µm rigid sinusoid and a 20 µm step) are cut into one two-shank
 * recording: shank 0's 96 channels from the first, shank 1's from the
 * second. Each shank is 705 µm tall, too short for the default 5 nonrigid
 * blocks, so each falls back to rigid with a warning recorded in
 * .stages/drift/drift.json. Each shank's estimate must match its own truth
 * (RMS <= 5 µm) and not the other's (RMS > 5 µm against it). The same run
 * with 1 and 2 threads gives byte-identical drift files (determinism).
 * Under the sanitizers a shorter recording runs without the accuracy checks.
 */
#include "drift_sim.h"
#include "test.h"

#include "io/probe.h"

/* Columns of shank s from gt dir src into the combined int16 buffer. */
static int combine(const char *dir_a, const char *dir_b, const char *rec_out, const char *probe_out)
{
    bs_probe pr;
    if (bs_sim_make_probe(BS_SIM_PROBE_NP2_4SHANK, &pr) != BS_OK)
        return 0;
    const int C = pr.n_chan;
    int sel[384], n = 0;
    for (int c = 0; c < C && n < 384; c++)
        if (pr.shank[c] <= 1)
            sel[n++] = c;
    char pa[4300], pb[4300];
    snprintf(pa, sizeof pa, "%s/recording.bin", dir_a);
    snprintf(pb, sizeof pb, "%s/recording.bin", dir_b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb"), *fo = fopen(rec_out, "wb");
    int ok = fa && fb && fo;
    enum { ROWS = 4096 };
    int16_t *ba = malloc((size_t)ROWS * C * 2), *bb = malloc((size_t)ROWS * C * 2), *bo = malloc((size_t)ROWS * n * 2);
    ok = ok && ba && bb && bo;
    while (ok) {
        size_t ra = fread(ba, (size_t)C * 2, ROWS, fa), rb = fread(bb, (size_t)C * 2, ROWS, fb);
        if (ra != rb) {
            ok = 0;
            break;
        }
        if (ra == 0)
            break;
        for (size_t r = 0; r < ra; r++)
            for (int k = 0; k < n; k++)
                bo[r * n + k] = (pr.shank[sel[k]] == 0 ? ba : bb)[r * C + sel[k]];
        ok = fwrite(bo, (size_t)n * 2, ra, fo) == ra;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    if (fo && fclose(fo) != 0)
        ok = 0;
    free(ba), free(bb), free(bo);
    /* Kilosort-style probe file: positions and shanks of the kept channels */
    FILE *fp = ok ? fopen(probe_out, "w") : NULL;
    if (fp) {
        const char *keys[4] = {"chanMap", "xc", "yc", "kcoords"};
        fprintf(fp, "{");
        for (int q = 0; q < 4; q++) {
            fprintf(fp, "%s\"%s\": [", q ? ", " : "", keys[q]);
            for (int k = 0; k < n; k++) {
                double v = q == 0 ? k : q == 1 ? pr.x_um[sel[k]] : q == 2 ? pr.y_um[sel[k]] : pr.shank[sel[k]];
                fprintf(fp, "%s%g", k ? ", " : "", v);
            }
            fprintf(fp, "]");
        }
        fprintf(fp, ", \"n_chan\": %d}\n", n);
        ok = fclose(fp) == 0;
    } else {
        ok = 0;
    }
    bs_probe_free(&pr);
    return ok;
}

static int same_file(const char *a, const char *b)
{
    char *ta = NULL, *tb = NULL;
    size_t la = 0, lb = 0;
    int ok = bs_read_text_file(a, 1 << 26, &ta, &la) == BS_OK && bs_read_text_file(b, 1 << 26, &tb, &lb) == BS_OK &&
             la == lb && memcmp(ta, tb, la) == 0;
    free(ta);
    free(tb);
    return ok;
}

int main(void)
{
    const char *tmp = test_tmpdir();
    int san = dsim_sanitized();
    double dur = san ? 4.0 : 20.0;
    char a[4200], b[4200], rec[4200], probe[4200], out1[4200], out2[4200];
    snprintf(a, sizeof a, "%s/shank_a", tmp);
    snprintf(b, sizeof b, "%s/shank_b", tmp);
    snprintf(rec, sizeof rec, "%s/two_shanks.bin", tmp);
    snprintf(probe, sizeof probe, "%s/two_shanks.json", tmp);
    snprintf(out1, sizeof out1, "%s/shanks_out1", tmp);
    snprintf(out2, sizeof out2, "%s/shanks_out2", tmp);
    CHECK(dsim_make(a, BS_SIM_PROBE_NP2_4SHANK, BS_SIM_DRIFT_RIGID, dur, 60, 6));
    CHECK(dsim_make(b, BS_SIM_PROBE_NP2_4SHANK, BS_SIM_DRIFT_STEP, dur, 60, 7));
    CHECK(combine(a, b, rec, probe));
    CHECK(dsim_drift_only(rec, probe, out2, 2, NULL));
    CHECK(dsim_drift_only(rec, probe, out1, 1, NULL));

    /* each shank rigid (too short for 5 blocks), with the fallback recorded */
    char path[13000], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/.stages/drift/drift.json", out2);
    CHECK(bs_read_text_file(path, 1 << 20, &text, &len) == BS_OK);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *shanks = cJSON_GetObjectItem(j, "shanks"), *warn = cJSON_GetObjectItem(j, "warnings");
    CHECK(cJSON_GetArraySize(shanks) == 2 && cJSON_GetArraySize(warn) == 2);
    for (int s = 0; s < cJSON_GetArraySize(shanks); s++) {
        const cJSON *o = cJSON_GetArrayItem(shanks, s);
        const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(o, "mode"));
        const char *note = cJSON_GetStringValue(cJSON_GetObjectItem(o, "note"));
        CHECK_MSG(mode && strcmp(mode, "rigid") == 0, "shank %d mode %s", s, mode ? mode : "?");
        CHECK_MSG(note && strstr(note, "rigid correction"), "shank %d note '%s'", s, note ? note : "");
    }
    cJSON_Delete(j);

    /* each shank follows its own recording's motion, not the other's */
    double t0, t1, p0, p1;
    double r00 = dsim_rms(out2, a, 0, 2.0, &t0, &p0), r11 = dsim_rms(out2, b, 1, 2.0, &t1, &p1);
    double r01 = dsim_rms(out2, b, 0, 2.0, NULL, NULL), r10 = dsim_rms(out2, a, 1, 2.0, NULL, NULL);
    printf("shank 0 (rigid sinusoid): RMS error %.2f µm (truth RMS %.2f), against shank 1's truth %.2f µm\n", r00,
           t0, r01);
    printf("shank 1 (20 µm step):     RMS error %.2f µm (truth RMS %.2f), against shank 0's truth %.2f µm\n", r11,
           t1, r10);
    CHECK(isfinite(r00) && isfinite(r11));
    if (!san) {
        CHECK_MSG(r00 <= 5.0, "shank 0 RMS %.2f", r00);
        CHECK_MSG(r11 <= 5.0, "shank 1 RMS %.2f", r11);
        CHECK_MSG(r01 > 5.0 && r10 > 5.0, "cross RMS %.2f %.2f", r01, r10);
    }

    /* identical for 1 and 2 threads */
    const char *files[] = {"drift.npy", "drift_times_s.npy", "drift_depths_um.npy", "drift_shanks.npy",
                           "driftmap.npy"};
    for (int f = 0; f < 5; f++) {
        char p1s[4400], p2s[4400];
        snprintf(p1s, sizeof p1s, "%s/%s", out1, files[f]);
        snprintf(p2s, sizeof p2s, "%s/%s", out2, files[f]);
        CHECK_MSG(same_file(p1s, p2s), "%s differs between 1 and 2 threads", files[f]);
    }
    if (!test_failed_) { /* the recordings are large: keep them only to debug a failure */
        snprintf(path, sizeof path, "rm -rf '%s' '%s' '%s'", a, b, rec);
        CHECK(system(path) == 0);
    }
    TEST_MAIN_END();
}
