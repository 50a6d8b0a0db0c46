/*
 * checkpoint.c - stage manifest and resume (see checkpoint.h).
 */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "params.h"

#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME 1099511628211ULL
#define EDGE_BYTES ((size_t)1 << 20) /* bytes hashed at each end of the data file */

static void fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= FNV_PRIME;
    }
}

static void fnv_i64(uint64_t *h, int64_t v)
{
    fnv(h, &v, sizeof v);
}

static void fnv_f64(uint64_t *h, double v)
{
    fnv(h, &v, sizeof v);
}

/* First and last EDGE_BYTES of the data file. */
static bs_status hash_data_edges(uint64_t *h, const bs_recording *rec)
{
    int fd = open(rec->data_path, O_RDONLY);
    if (fd < 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot open: %s", rec->data_path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return bs_error(BS_ERR_INPUT, "%s: cannot stat: %s", rec->data_path, strerror(errno));
    }
    unsigned char *buf = malloc(EDGE_BYTES);
    if (!buf) {
        close(fd);
        return bs_error(BS_ERR_MEMORY, "out of memory hashing %s", rec->data_path);
    }
    bs_status st = BS_OK;
    fnv_i64(h, (int64_t)sb.st_size);
    off_t starts[2] = {0, sb.st_size > (off_t)EDGE_BYTES ? sb.st_size - (off_t)EDGE_BYTES : 0};
    for (int e = 0; e < 2 && st == BS_OK; e++) {
        ssize_t got = pread(fd, buf, EDGE_BYTES, starts[e]);
        if (got < 0)
            st = bs_error(BS_ERR_INPUT, "%s: cannot read: %s", rec->data_path, strerror(errno));
        else
            fnv(h, buf, (size_t)got);
    }
    free(buf);
    close(fd);
    return st;
}

/* --motion FOLDER: every file under it (path relative to FOLDER, size and bytes, in the order the file
 * system lists them), so another motion is another run; nftw's callback has no context argument, hence
 * the static. */
static uint64_t *motion_h;
static size_t motion_root;

static int hash_motion_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F)
        return 0;
    fnv(motion_h, path + motion_root, strlen(path + motion_root));
    fnv_i64(motion_h, (int64_t)sb->st_size);
    char *text = NULL;
    size_t len = 0;
    if (bs_read_text_file(path, 64u << 20, &text, &len) != BS_OK)
        return -1;
    fnv(motion_h, text, len);
    free(text);
    return 0;
}

static bs_status hash_motion(uint64_t *h, const char *dir)
{
    motion_h = h;
    motion_root = strlen(dir);
    fnv(h, "motion", 6);
    if (nftw(dir, hash_motion_entry, 16, FTW_PHYS) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot read the motion folder: %s", dir, bs_last_error());
    return BS_OK;
}

bs_status bs_checkpoint_key(const bs_recording *rec, const bs_sort_params *p, uint64_t *key)
{
    uint64_t h = FNV_OFFSET;
    fnv(&h, BOUNDSORT_VERSION, strlen(BOUNDSORT_VERSION));
    fnv(&h, rec->format, strlen(rec->format));
    fnv(&h, rec->stream, strnlen(rec->stream, sizeof rec->stream));
    fnv_i64(&h, rec->dtype);
    fnv_i64(&h, rec->n_cols);
    fnv_i64(&h, (int64_t)rec->data_offset);
    fnv_i64(&h, rec->n_samples);
    fnv_i64(&h, rec->row0);
    fnv_f64(&h, rec->fs_hz);
    fnv_f64(&h, rec->offset);
    const bs_probe *pr = &rec->probe;
    fnv_i64(&h, pr->n_chan);
    for (int c = 0; c < pr->n_chan; c++) {
        fnv_i64(&h, pr->column[c]);
        fnv_f64(&h, pr->x_um[c]);
        fnv_f64(&h, pr->y_um[c]);
        fnv_i64(&h, pr->shank[c]);
        fnv_f64(&h, rec->uv_per_bit[c]);
    }
    const float *shift = bs_sort_phase_shift(rec, p); /* the delays the preprocessing removes */
    for (int c = 0; shift && c < pr->n_chan; c++)
        fnv_f64(&h, shift[c]);
    BS_TRY(hash_data_edges(&h, rec));
    if (p->motion_dir && !p->no_drift)
        BS_TRY(hash_motion(&h, p->motion_dir));
    /* every algorithm parameter (params.h; threads, budget, trace and verbosity never change the output);
       the drift stage's own parameters only when it runs */
    bs_sort_params q = *p; /* the batch and halo as resolved: 0 (automatic) and its value are one run */
    bs_sort_batch_geometry(p, rec->fs_hz, &q.batch_samples, &q.halo_samples);
    for (int i = 0; i < bs_n_sort_param_fields; i++) {
        const bs_param_field *f = &bs_sort_param_fields[i];
        if (q.no_drift && strcmp(f->group, "drift") == 0 && f->offset != offsetof(bs_sort_params, no_drift))
            continue;
        if (bs_param_is_int(f))
            fnv_i64(&h, bs_param_int(&q, f));
        else
            fnv_f64(&h, bs_param_real(&q, f));
    }
    *key = h;
    return BS_OK;
}

static bs_status manifest_path(const bs_checkpoint *c, char *buf, size_t len)
{
    return bs_path_join(buf, len, c->stage_dir, "manifest.json");
}

bs_status bs_checkpoint_open(bs_checkpoint *c, const char *stage_dir, const bs_recording *rec,
                             const bs_sort_params *p, int resume)
{
    memset(c, 0, sizeof *c);
    snprintf(c->stage_dir, sizeof c->stage_dir, "%s", stage_dir);
    BS_TRY(bs_checkpoint_key(rec, p, &c->key));
    char path[4200], hex[32];
    BS_TRY(manifest_path(c, path, sizeof path));
    snprintf(hex, sizeof hex, "%016" PRIx64, c->key);
    if (!resume) {
        if (remove(path) != 0 && errno != ENOENT)
            return bs_error(BS_ERR_INPUT, "%s: cannot remove the old manifest: %s", path, strerror(errno));
    } else {
        char *text = NULL;
        size_t len = 0;
        cJSON *m = NULL;
        if (bs_read_text_file(path, (size_t)1 << 24, &text, &len) == BS_OK)
            m = cJSON_Parse(text);
        else
            bs_clear_error();
        free(text);
        const cJSON *k = m ? cJSON_GetObjectItemCaseSensitive(m, "key") : NULL;
        if (!m)
            bs_log_info("resume: no usable checkpoint manifest in %s; running every stage", stage_dir);
        else if (!cJSON_IsString(k) || strcmp(k->valuestring, hex) != 0)
            bs_log_info("resume: the recording or the parameters changed since the checkpoints were written; "
                        "running every stage");
        else {
            c->resume = 1;
            c->manifest = m;
            m = NULL;
        }
        cJSON_Delete(m);
    }
    if (!c->manifest) {
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddStringToObject(m, "key", hex) || !cJSON_AddArrayToObject(m, "stages")) {
            cJSON_Delete(m);
            return bs_error(BS_ERR_MEMORY, "out of memory starting the checkpoint manifest");
        }
        c->manifest = m;
    }
    return BS_OK;
}

void bs_checkpoint_close(bs_checkpoint *c)
{
    cJSON_Delete(c->manifest);
    c->manifest = NULL;
}

static cJSON *find_entry(const bs_checkpoint *c, const char *stage, int *index)
{
    cJSON *stages = cJSON_GetObjectItemCaseSensitive(c->manifest, "stages");
    int i = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, stages)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "stage");
        if (cJSON_IsString(n) && strcmp(n->valuestring, stage) == 0) {
            if (index)
                *index = i;
            return e;
        }
        i++;
    }
    return NULL;
}

int bs_checkpoint_done(bs_checkpoint *c, const char *stage)
{
    if (!c->resume || c->broken)
        return 0;
    cJSON *e = find_entry(c, stage, NULL);
    const cJSON *files = e ? cJSON_GetObjectItemCaseSensitive(e, "files") : NULL;
    int ok = cJSON_IsArray(files);
    const cJSON *f;
    cJSON_ArrayForEach(f, files)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        char path[4200];
        uint64_t size = 0;
        if (!ok || !cJSON_IsString(name) || !cJSON_IsNumber(bytes) ||
            bs_path_join(path, sizeof path, c->stage_dir, name->valuestring) != BS_OK ||
            bs_file_size(path, &size) != BS_OK || (double)size != bytes->valuedouble) {
            bs_clear_error();
            ok = 0;
            break;
        }
    }
    if (!ok) {
        c->broken = 1;
        return 0;
    }
    bs_log_info("resume: stage %s is complete in %s; skipped", stage, c->stage_dir);
    return 1;
}

bs_status bs_checkpoint_mark(bs_checkpoint *c, const char *stage, int n, const char *const *files)
{
    c->broken = 1; /* this stage ran: nothing after it may be skipped */
    cJSON *stages = cJSON_GetObjectItemCaseSensitive(c->manifest, "stages");
    int idx = -1;
    if (find_entry(c, stage, &idx)) /* drop it and every later entry */
        while (cJSON_GetArraySize(stages) > idx)
            cJSON_DeleteItemFromArray(stages, idx);
    cJSON *e = cJSON_CreateObject();
    cJSON *arr = e ? cJSON_AddArrayToObject(e, "files") : NULL;
    if (!arr || !cJSON_AddStringToObject(e, "stage", stage)) {
        cJSON_Delete(e);
        return bs_error(BS_ERR_MEMORY, "out of memory writing the checkpoint manifest");
    }
    cJSON_AddItemToArray(stages, e);
    for (int i = 0; i < n; i++) {
        char path[4200];
        uint64_t size = 0;
        BS_TRY(bs_path_join(path, sizeof path, c->stage_dir, files[i]));
        BS_TRY(bs_file_size(path, &size));
        cJSON *f = cJSON_CreateObject();
        if (!f || !cJSON_AddStringToObject(f, "name", files[i]) || !cJSON_AddNumberToObject(f, "bytes", (double)size)) {
            cJSON_Delete(f);
            return bs_error(BS_ERR_MEMORY, "out of memory writing the checkpoint manifest");
        }
        cJSON_AddItemToArray(arr, f);
    }
    char *text = cJSON_Print(c->manifest);
    if (!text)
        return bs_error(BS_ERR_MEMORY, "out of memory writing the checkpoint manifest");
    char path[4200];
    bs_status st = manifest_path(c, path, sizeof path);
    if (st == BS_OK)
        st = bs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

void bs_checkpoint_test_kill(const char *stage, int64_t i)
{
    const char *e = getenv("BOUNDSORT_TEST_KILL");
    if (!e)
        return;
    size_t n = strlen(stage);
    if (strncmp(e, stage, n) != 0 || e[n] != ':')
        return;
    const char *v = e + n + 1;
    if ((i == BS_CKPT_END && strcmp(v, "end") == 0) || (i >= 0 && strtoll(v, NULL, 10) == i && *v != 'e')) {
        fflush(NULL);
        raise(SIGKILL);
    }
}
