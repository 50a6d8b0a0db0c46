/*
 * test_params.c - every algorithm parameter of a sort is in the resume key
 * and in OUT/params.json (src/pipeline/params.h), and a changed parameter
 * invalidates --resume.
 *
 * On a short simulated recording (nothing is sorted): each field of the
 * parameter table, changed on its own, changes the run key; threads, memory
 * budget, verbosity and resume do not. A manifest written under the default
 * parameters is reused by a resume with the same ones and refused (every
 * stage runs again) once a clustering parameter changes, as it is for a
 * merge or shadow parameter. params.json holds every field of the table
 * under its group, the resume key, and each stage of the table with its
 * parameter groups and checkpoint files.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>

#include "drift_sim.h"
#include "pipeline/checkpoint.h"
#include "pipeline/params.h"
#include "pipeline/stages.h"
#include "test.h"

#include "common/lsan_options.h" /* sorts in-process: OpenBLAS called from OpenMP threads */

/* Change field f of p: integers by one, reals by half their value plus one. */
static void bump(bs_sort_params *p, const bs_param_field *f)
{
    char *a = (char *)p + f->offset;
    switch (f->type) {
    case BS_PARAM_INT: *(int *)a += 1; break;
    case BS_PARAM_I64: *(int64_t *)a += 1; break;
    case BS_PARAM_U64: *(uint64_t *)a += 1; break;
    case BS_PARAM_F32: *(float *)a = *(float *)a * 1.5f + 1.0f; break;
    case BS_PARAM_F64: *(double *)a = *(double *)a * 1.5 + 1.0; break;
    }
}

static uint64_t key_of(const bs_recording *rec, const bs_sort_params *p)
{
    uint64_t k = 0;
    CHECK_MSG(bs_checkpoint_key(rec, p, &k) == BS_OK, "key: %s", bs_last_error());
    return k;
}

/* Open the checkpoints of stage_dir with resume: 1 if the manifest was taken. */
static int resumes(const char *stage_dir, const bs_recording *rec, const bs_sort_params *p)
{
    bs_checkpoint c;
    CHECK(bs_checkpoint_open(&c, stage_dir, rec, p, 1) == BS_OK);
    int r = c.resume && bs_checkpoint_done(&c, "whitening");
    bs_checkpoint_close(&c);
    return r;
}

static void check_json(const char *out, const bs_sort_params *p, uint64_t key)
{
    char path[4200], *text = NULL, hex[32];
    size_t len = 0;
    snprintf(path, sizeof path, "%.4000s/params.json", out);
    CHECK(bs_read_text_file(path, (size_t)1 << 20, &text, &len) == BS_OK);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(root != NULL);
    if (!root)
        return;
    snprintf(hex, sizeof hex, "%016" PRIx64, key);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "resume_key");
    CHECK(cJSON_IsString(k) && strcmp(k->valuestring, hex) == 0);
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, f->group);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, f->name);
        CHECK_MSG(cJSON_IsNumber(v), "params.json has no %s.%s", f->group, f->name);
        if (cJSON_IsNumber(v) && bs_param_is_int(f) && strcmp(f->group, "batch") != 0)
            CHECK_MSG(v->valuedouble == (double)bs_param_int(p, f), "%s.%s", f->group, f->name);
    }
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    CHECK(cJSON_GetObjectItemCaseSensitive(cl, "min_spikes")->valuedouble == 200);
    const cJSON *mg = cJSON_GetObjectItemCaseSensitive(root, "merge");
    CHECK(cJSON_GetObjectItemCaseSensitive(mg, "r_thresh")->valuedouble == 0.5);
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(root, "batch");
    CHECK(cJSON_GetObjectItemCaseSensitive(bt, "batch_samples")->valuedouble == 60000);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    CHECK(cJSON_GetArraySize(stages) == bs_n_stages);
    for (int i = 0; i < bs_n_stages && i < cJSON_GetArraySize(stages); i++) {
        const cJSON *s = cJSON_GetArrayItem(stages, i);
        CHECK(strcmp(cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring, bs_stages[i]->name) == 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "files")) == bs_stages[i]->n_files);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "params")) > 0);
    }
    cJSON_Delete(root);
}

int main(void)
{
    const char *tmp = test_tmpdir();
    dsim_paths P;
    dsim_paths_for(&P, tmp, "params");
    CHECK(dsim_make(P.gt, BS_SIM_PROBE_LINEAR32, BS_SIM_DRIFT_NONE, 2.0, 4, 7));
    bs_open_options o = {0};
    o.probe_path = P.probe;
    o.fs_hz = 30000;
    bs_recording rec;
    if (bs_recording_open(P.rec, &o, &rec) != BS_OK) {
        fprintf(stderr, "open %s: %s\n", P.rec, bs_last_error());
        CHECK(0);
        TEST_MAIN_END();
    }
    bs_sort_params p0;
    bs_sort_default_params(&p0);
    p0.out_dir = P.out;
    uint64_t k0 = key_of(&rec, &p0);

    /* every field of the table is in the key; names are unique within a group */
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        bs_sort_params p = p0;
        bump(&p, f);
        CHECK_MSG(key_of(&rec, &p) != k0, "%s.%s is not in the resume key", f->group, f->name);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(f->group, bs_sort_param_fields[j].group) != 0 ||
                  strcmp(f->name, bs_sort_param_fields[j].name) != 0);
    }
    /* settings that never change the output are not */
    bs_sort_params s = p0;
    s.threads = 3;
    s.mem_budget = (size_t)1 << 30;
    s.quiet = 1;
    s.resume = 1;
    s.cluster.par_min_work = 0;
    s.cluster.init_cache_floats = 1;
    CHECK(key_of(&rec, &s) == k0);

    /* a manifest of the default parameters; resume with a changed clustering, merge or shadow parameter */
    char stage_dir[4300];
    snprintf(stage_dir, sizeof stage_dir, "%.4200s/.stages", P.out);
    CHECK(bs_mkdir_p(stage_dir) == BS_OK);
    bs_checkpoint c;
    CHECK(bs_checkpoint_open(&c, stage_dir, &rec, &p0, 0) == BS_OK);
    CHECK(bs_checkpoint_mark(&c, "whitening", 0, NULL) == BS_OK);
    bs_checkpoint_close(&c);
    CHECK(resumes(stage_dir, &rec, &p0));
    bs_sort_params q = p0;
    q.cluster.min_spikes = 300;
    CHECK(!resumes(stage_dir, &rec, &q));
    q = p0;
    q.cluster.seed = 6;
    CHECK(!resumes(stage_dir, &rec, &q));
    q = p0;
    q.finish.merge.r_thresh = 0.6;
    CHECK(!resumes(stage_dir, &rec, &q));
    q = p0;
    q.finish.shadow.min_count = 30;
    CHECK(!resumes(stage_dir, &rec, &q));
    CHECK(resumes(stage_dir, &rec, &p0));

    /* params.json */
    CHECK(bs_sort_params_write(&p0, 60000, 600, k0, P.out) == BS_OK);
    check_json(P.out, &p0, k0);

    bs_recording_close(&rec);
    if (!test_failed_)
        dsim_cleanup(P.gt, P.out);
    TEST_MAIN_END();
}
