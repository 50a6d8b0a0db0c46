/*
 * report_run.c - the run summary (run_summary.json) and the memory timeline.
 *
 * run_summary.json (written by `sort`): {"boundsort_version", "total_wall_s",
 * "peak_rss_bytes", "budget_bytes", "stages": [{"name", "wall_s",
 * "planned_peak_bytes", "tracked_peak_bytes", "rss_peak_bytes", "strategy"}],
 * "mem_trace": the trace file as given to sort --mem-trace}. Known fields are checked (a
 * number where a number is expected, a string where a string is) and copied
 * to the page; a missing field shows as empty.
 *
 * The memory trace (JSON lines {"t_s", "op": "alloc"|"free", "tag", "bytes",
 * "device"}) can hold millions of events, so it is read twice, line by line:
 * the first pass finds each tag's peak bytes and the time span; the second
 * replays the events and, for each of MEM_BINS time bins, keeps the bytes per
 * series at the moment the total is highest within the bin (so a short peak
 * is not lost between samples). Series are the MEM_SERIES tags with the
 * largest peaks plus "other"; tags on a device other than the host are named
 * "<device>:<tag>".
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "report_internal.h"

#define MEM_BINS 400
#define MEM_SERIES 10
#define MEM_KEYS 4096
#define HASH_SLOTS 8192

typedef struct {
    char *name[MEM_KEYS];
    double cur[MEM_KEYS], peak[MEM_KEYS];
    int series[MEM_KEYS];
    int slot[HASH_SLOTS]; /* key index + 1, 0 = empty */
    int n;
} tag_table;

static int key_of(tag_table *tt, const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    for (uint32_t i = h % HASH_SLOTS;; i = (i + 1) % HASH_SLOTS) {
        int k = tt->slot[i] - 1;
        if (k < 0) {
            if (tt->n == MEM_KEYS)
                return MEM_KEYS - 1; /* table full: the last key collects the rest */
            k = tt->n++;
            tt->name[k] = strdup(name);
            tt->slot[i] = k + 1;
            return tt->name[k] ? k : MEM_KEYS - 1;
        }
        if (tt->name[k] && strcmp(tt->name[k], name) == 0)
            return k;
    }
}

typedef struct {
    double t, bytes;
    int is_alloc;
    char key[160];
} mem_event;

static bs_status parse_event(const char *path, long line_no, const char *line, mem_event *e)
{
    cJSON *o = cJSON_Parse(line);
    bs_status st = BS_OK;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "t_s"), *op = cJSON_GetObjectItemCaseSensitive(o, "op"),
                *tag = cJSON_GetObjectItemCaseSensitive(o, "tag"), *b = cJSON_GetObjectItemCaseSensitive(o, "bytes"),
                *dev = cJSON_GetObjectItemCaseSensitive(o, "device");
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(t) || !cJSON_IsString(op) || !cJSON_IsString(tag) ||
        !cJSON_IsNumber(b) || (strcmp(op->valuestring, "alloc") != 0 && strcmp(op->valuestring, "free") != 0)) {
        st = bs_error(BS_ERR_INPUT, "%s: line %ld: expected {\"t_s\": s, \"op\": \"alloc\"|\"free\", \"tag\": str, "
                      "\"bytes\": n, \"device\": str}", path, line_no);
    } else {
        e->t = t->valuedouble;
        e->bytes = b->valuedouble;
        e->is_alloc = strcmp(op->valuestring, "alloc") == 0;
        if (cJSON_IsString(dev) && strcmp(dev->valuestring, "host") != 0)
            snprintf(e->key, sizeof e->key, "%s:%s", dev->valuestring, tag->valuestring);
        else
            snprintf(e->key, sizeof e->key, "%s", tag->valuestring);
    }
    cJSON_Delete(o);
    return st;
}

typedef int (*event_fn)(rp_data *d, tag_table *tt, const mem_event *e, int k, void *ctx);

static bs_status each_event(rp_data *d, const char *path, tag_table *tt, event_fn fn, void *ctx, long *n_events)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return bs_error(BS_ERR_INPUT, "%s: cannot open the memory trace", path);
    char *line = NULL;
    size_t cap = 0;
    long line_no = 0;
    bs_status st = BS_OK;
    *n_events = 0;
    while (getline(&line, &cap, fp) > 0) {
        line_no++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        mem_event e;
        if ((st = parse_event(path, line_no, line, &e)) != BS_OK)
            break;
        fn(d, tt, &e, key_of(tt, e.key), ctx);
        (*n_events)++;
    }
    free(line);
    fclose(fp);
    return st;
}

typedef struct {
    double t0, t1;
} span;

static int first_pass(rp_data *d, tag_table *tt, const mem_event *e, int k, void *ctx)
{
    (void)d;
    span *s = ctx;
    s->t0 = e->t < s->t0 ? e->t : s->t0;
    s->t1 = e->t > s->t1 ? e->t : s->t1;
    tt->cur[k] += e->is_alloc ? e->bytes : -e->bytes;
    tt->peak[k] = tt->cur[k] > tt->peak[k] ? tt->cur[k] : tt->peak[k];
    return 0;
}

typedef struct {
    span s;
    int bin;
    double bin_max, total;
    double series_cur[MEM_SERIES + 1];
} replay;

static void snapshot(rp_data *d, replay *r)
{
    for (int s = 0; s < d->mem_ntag; s++)
        d->mem_bytes[(size_t)s * MEM_BINS + r->bin] = r->series_cur[s];
}

static int second_pass(rp_data *d, tag_table *tt, const mem_event *e, int k, void *ctx)
{
    replay *r = ctx;
    double w = r->s.t1 > r->s.t0 ? r->s.t1 - r->s.t0 : 1;
    int b = (int)((e->t - r->s.t0) / w * MEM_BINS);
    b = b >= MEM_BINS ? MEM_BINS - 1 : b < r->bin ? r->bin : b;
    while (r->bin < b) { /* bins with no event keep the state they start with */
        r->bin++;
        r->bin_max = r->total;
        snapshot(d, r);
    }
    double delta = e->is_alloc ? e->bytes : -e->bytes;
    tt->cur[k] += delta;
    r->series_cur[tt->series[k]] += delta;
    r->total += delta;
    if (r->total > d->mem_peak)
        d->mem_peak = r->total;
    if (r->total >= r->bin_max) {
        r->bin_max = r->total;
        snapshot(d, r);
    }
    return 0;
}

/* `sort` records the trace path as given on its command line: a relative path is looked for in the folder,
   then where the report runs (sort was often run from there too). */
static bs_status load_trace(rp_data *d, const char *rel)
{
    char path[4200];
    struct stat sb;
    if (rel[0] == '/' || bs_path_join(path, sizeof path, d->dir, rel) != BS_OK || stat(path, &sb) != 0)
        snprintf(path, sizeof path, "%s", rel);
    if (stat(path, &sb) != 0) {
        rp_note(d, "memory trace %s (named in run_summary.json) not found: no memory timeline", rel);
        return BS_OK;
    }
    if (!S_ISREG(sb.st_mode)) { /* a device (/dev/null, /dev/full) would feed getline one endless line */
        rp_note(d, "memory trace %s (named in run_summary.json) is not a regular file: no memory timeline", rel);
        return BS_OK;
    }
    tag_table *tt = bs_mem_calloc("report/mem_trace", 1, sizeof *tt);
    if (!tt)
        return BS_ERR_MEMORY;
    span s = {INFINITY, -INFINITY};
    long n_events = 0;
    bs_status st = each_event(d, path, tt, first_pass, &s, &n_events);
    if (st != BS_OK || n_events == 0) {
        if (st == BS_OK)
            rp_note(d, "memory trace %s is empty: no memory timeline", rel);
        goto done;
    }
    /* the MEM_SERIES largest peaks get their own series, the rest is "other" */
    int order[MEM_SERIES];
    int n_top = tt->n < MEM_SERIES ? tt->n : MEM_SERIES;
    for (int i = 0; i < n_top; i++) { /* selection of the largest peaks, ties to the first seen */
        int best = -1;
        for (int k = 0; k < tt->n; k++) {
            int taken = 0;
            for (int q = 0; q < i; q++)
                taken |= order[q] == k;
            if (!taken && (best < 0 || tt->peak[k] > tt->peak[best]))
                best = k;
        }
        order[i] = best;
    }
    int has_other = tt->n > n_top;
    d->mem_ntag = n_top + has_other;
    d->mem_nb = MEM_BINS;
    d->mem_tag = calloc((size_t)d->mem_ntag, sizeof(char *));
    d->mem_t = bs_mem_alloc("report/mem_trace", MEM_BINS * sizeof(double));
    d->mem_bytes = bs_mem_calloc("report/mem_trace", (size_t)d->mem_ntag * MEM_BINS, sizeof(double));
    if (!d->mem_tag || !d->mem_t || !d->mem_bytes) {
        st = bs_error(BS_ERR_MEMORY, "%s: out of memory for the timeline", path);
        goto done;
    }
    for (int k = 0; k < tt->n; k++) {
        tt->series[k] = n_top; /* "other" */
        tt->cur[k] = 0;
    }
    for (int i = 0; i < n_top; i++) {
        tt->series[order[i]] = i;
        d->mem_tag[i] = strdup(tt->name[order[i]] ? tt->name[order[i]] : "?");
    }
    if (has_other)
        d->mem_tag[n_top] = strdup("other");
    for (int b = 0; b < MEM_BINS; b++)
        d->mem_t[b] = s.t0 + (s.t1 > s.t0 ? s.t1 - s.t0 : 1) * b / MEM_BINS;
    replay r = {.s = s, .bin = 0, .bin_max = 0, .total = 0};
    st = each_event(d, path, tt, second_pass, &r, &n_events);
    while (st == BS_OK && r.bin < MEM_BINS - 1) {
        r.bin++;
        snapshot(d, &r);
    }
done:
    for (int k = 0; k < tt->n; k++)
        free(tt->name[k]);
    bs_mem_free(tt);
    return st;
}

/* ---- run_summary.json ---- */

static bs_status check_field(const char *path, const char *where, const cJSON *o, const char *key, int want_num)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v) || (want_num ? cJSON_IsNumber(v) : cJSON_IsString(v)))
        return BS_OK;
    return bs_error(BS_ERR_INPUT, "%s: field '%s%s': expected a %s", path, where, key, want_num ? "number" : "string");
}

/* OUT/bad_channels.tsv (stage_channels.c) into the run summary's "bad_channels" record as "channels":
 * [{channel, column, label, action}], for the page's run tab. */
static bs_status load_bad_channels(rp_data *d, cJSON *root)
{
    cJSON *bc = cJSON_GetObjectItemCaseSensitive(root, "bad_channels");
    if (!cJSON_IsObject(bc) || !bs_phy_has(d->dir, "bad_channels.tsv"))
        return BS_OK;
    char path[4200], *text;
    size_t len;
    BS_TRY(bs_path_join(path, sizeof path, d->dir, "bad_channels.tsv"));
    BS_TRY(bs_read_text_file(path, 16 << 20, &text, &len));
    cJSON *arr = cJSON_AddArrayToObject(bc, "channels");
    char *save = NULL;
    int line = 0;
    for (char *ln = strtok_r(text, "\n", &save); ln && arr; ln = strtok_r(NULL, "\n", &save)) {
        if (line++ == 0)
            continue; /* the header */
        int ch, col, shank;
        double x, y;
        char label[16], action[16];
        if (sscanf(ln, "%d\t%d\t%d\t%lf\t%lf\t%15s\t%15s", &ch, &col, &shank, &x, &y, label, action) != 7) {
            free(text);
            return bs_error(BS_ERR_INPUT, "%s: line %d: expected channel, column, shank, x_um, y_um, label, action",
                            path, line);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "channel", ch);
        cJSON_AddNumberToObject(o, "column", col);
        cJSON_AddStringToObject(o, "label", label);
        cJSON_AddStringToObject(o, "action", action);
        cJSON_AddItemToArray(arr, o);
    }
    free(text);
    return BS_OK;
}

bs_status rp_load_run(rp_data *d)
{
    if (!bs_phy_has(d->dir, "run_summary.json")) {
        rp_note(d, "run_summary.json absent: no run summary (folders sorted by an older boundsort, or not by "
                   "boundsort sort)");
        return BS_OK;
    }
    char path[4200], *text;
    size_t len;
    BS_TRY(bs_path_join(path, sizeof path, d->dir, "run_summary.json"));
    BS_TRY(bs_read_text_file(path, 16 << 20, &text, &len));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bs_error(BS_ERR_INPUT, "%s: expected a JSON object", path);
    }
    d->run_json = root;
    static const char *const nums[] = {"total_wall_s", "peak_rss_bytes", "budget_bytes"};
    static const char *const stage_nums[] = {"wall_s", "planned_peak_bytes", "tracked_peak_bytes", "rss_peak_bytes",
                                             "disk_planned_bytes", "disk_written_bytes"};
    for (size_t i = 0; i < 3; i++)
        BS_TRY(check_field(path, "", root, nums[i], 1));
    BS_TRY(check_field(path, "", root, "boundsort_version", 0));
    BS_TRY(check_field(path, "", root, "mem_trace", 0));
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    if (stages && !cJSON_IsArray(stages))
        return bs_error(BS_ERR_INPUT, "%s: field 'stages': expected an array", path);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, stages)
    {
        char where[64];
        snprintf(where, sizeof where, "stages[%d].", i++);
        if (!cJSON_IsObject(s))
            return bs_error(BS_ERR_INPUT, "%s: field 'stages[%d]': expected an object", path, i - 1);
        for (size_t k = 0; k < sizeof stage_nums / sizeof stage_nums[0]; k++)
            BS_TRY(check_field(path, where, s, stage_nums[k], 1));
        BS_TRY(check_field(path, where, s, "name", 0));
        BS_TRY(check_field(path, where, s, "strategy", 0));
    }
    BS_TRY(load_bad_channels(d, root));
    const cJSON *trace = cJSON_GetObjectItemCaseSensitive(root, "mem_trace");
    if (cJSON_IsString(trace) && trace->valuestring[0])
        return load_trace(d, trace->valuestring);
    rp_note(d, "the run recorded no memory trace (sort --mem-trace FILE): no memory timeline");
    return BS_OK;
}

static void copy_field(rp_json *j, const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v))
        rpj_num(j, key, v->valuedouble);
    else if (cJSON_IsString(v))
        rpj_str(j, key, v->valuestring);
    else
        rpj_null(j, key);
}

/* root[key] (a run-summary record): its boolean `flag` (unless NULL), then `fields` (NULL-ended), or null when
 * absent. */
static void copy_record(rp_json *j, const cJSON *root, const char *key, const char *flag,
                        const char *const *fields)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsObject(o)) {
        rpj_null(j, key);
        return;
    }
    rpj_obj(j, key);
    if (flag)
        rpj_bool(j, flag, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, flag)));
    for (int i = 0; fields[i]; i++)
        copy_field(j, o, fields[i]);
    rpj_end_obj(j);
}

void rp_emit_run(rp_json *j, const rp_data *d)
{
    const cJSON *root = d->run_json;
    if (!root) {
        rpj_null(j, "run");
    } else {
        rpj_obj(j, "run");
        copy_field(j, root, "boundsort_version");
        copy_field(j, root, "total_wall_s");
        copy_field(j, root, "peak_rss_bytes");
        copy_field(j, root, "budget_bytes");
        copy_field(j, root, "mem_trace");
        copy_field(j, root, "denoise");
        rpj_arr(j, "stages");
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(root, "stages"))
        {
            rpj_obj(j, NULL);
            copy_field(j, s, "name");
            copy_field(j, s, "wall_s");
            copy_field(j, s, "planned_peak_bytes");
            copy_field(j, s, "tracked_peak_bytes");
            copy_field(j, s, "rss_peak_bytes");
            copy_field(j, s, "disk_planned_bytes");
            copy_field(j, s, "disk_written_bytes");
            copy_field(j, s, "strategy");
            rpj_end_obj(j);
        }
        rpj_end_arr(j);
        static const char *const art[] = {"periods", "blanked_s", "expected_lost_spikes", NULL};
        static const char *const ps[] = {"max_delay_samples", "why_not", NULL};
        copy_record(j, root, "artifacts", "removal", art);
        copy_record(j, root, "phase_shift", "applied", ps);
        static const char *const bad[] = {"mode", "examined", "dead", "noisy", "out", "interpolated", "removed", NULL};
        copy_record(j, root, "bad_channels", NULL, bad);
        const cJSON *bl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "bad_channels"),
                                                           "channels");
        rpj_arr(j, "bad_channel_list");
        const cJSON *b;
        cJSON_ArrayForEach(b, bl)
        {
            rpj_obj(j, NULL);
            copy_field(j, b, "channel");
            copy_field(j, b, "column");
            copy_field(j, b, "label");
            copy_field(j, b, "action");
            rpj_end_obj(j);
        }
        rpj_end_arr(j);
        rpj_end_obj(j);
    }
    if (!d->mem_bytes) {
        rpj_null(j, "mem");
        return;
    }
    rpj_obj(j, "mem");
    rpj_num(j, "peak_bytes", d->mem_peak);
    rpj_doubles(j, "t_s", d->mem_t, (size_t)d->mem_nb);
    rpj_arr(j, "series");
    for (int s = 0; s < d->mem_ntag; s++) {
        rpj_obj(j, NULL);
        rpj_str(j, "tag", d->mem_tag[s]);
        rpj_doubles(j, "bytes", d->mem_bytes + (size_t)s * d->mem_nb, (size_t)d->mem_nb);
        rpj_end_obj(j);
    }
    rpj_end_arr(j);
    rpj_end_obj(j);
}
