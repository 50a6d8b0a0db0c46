/*
 * list.c - the listing of a discovered batch: a table for people (one line
 * per recording: kind, channels, duration, data size, planned peak of tracked
 * memory, the budget sort will get and the job's whole need, and the output
 * folder under OUTROOT; a recording that cannot be sorted shows its reason on
 * the next line) or the same as JSON (sizes in bytes, durations in seconds).
 * In the table, a name's control characters are escaped (\n, \r, \t, \xNN;
 * a backslash is \\), so that a folder named with a newline cannot break or
 * forge a line; the JSON holds the names as they are (cJSON escapes them).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../mem/mem.h"
#include "jobs.h"

/* s with control characters escaped, into buf (cut at len - 1 bytes, whole escapes only). */
static const char *esc(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char e[8];
        if (*c == '\n' || *c == '\r' || *c == '\t' || *c == '\\')
            snprintf(e, sizeof e, "\\%c", *c == '\n' ? 'n' : *c == '\r' ? 'r' : *c == '\t' ? 't' : '\\');
        else if (*c < 0x20 || *c == 0x7f)
            snprintf(e, sizeof e, "\\x%02x", *c);
        else
            snprintf(e, sizeof e, "%c", *c);
        size_t l = strlen(e);
        if (n + l >= len)
            break;
        memcpy(buf + n, e, l);
        n += l;
    }
    buf[n] = '\0';
    return buf;
}

void bs_jobs_print_table(const bs_jobs *b, FILE *out)
{
    char e1[4 * 4096 + 1], e2[4 * 4096 + 1];
    fprintf(out, "root    %s\noutroot %s\n", esc(b->root, e1, sizeof e1), esc(b->outroot, e2, sizeof e2));
    fprintf(out, "%3s  %-9s %5s %9s %10s %10s %10s %10s  %s\n", "id", "kind", "chan", "dur(s)", "size", "plan peak",
            "sort --mem", "job needs", "output (under outroot)");
    int ok = 0;
    size_t total = 0, largest = 0;
    for (int i = 0; i < b->n; i++) {
        const bs_job *j = &b->jobs[i];
        char s1[32], s2[32], s3[32], s4[32];
        if (j->ok) {
            fprintf(out, "%3d  %-9s %5d %9.1f %10s %10s %10s %10s  %s\n", j->id, j->kind, j->n_chan, j->duration_s,
                    bs_mem_format(j->bytes, s1, sizeof s1), bs_mem_format(j->plan_peak, s2, sizeof s2),
                    bs_mem_format(j->sort_mem, s3, sizeof s3), bs_mem_format(j->job_mem, s4, sizeof s4),
                    esc(j->rel, e1, sizeof e1));
            ok++;
            total += j->bytes;
            if (j->job_mem > largest)
                largest = j->job_mem;
        } else {
            fprintf(out, "%3d  %-9s %5s %9s %10s %10s %10s %10s  %s\n", j->id, j->kind, "-", "-", "-", "-", "-", "-",
                    esc(j->rel, e1, sizeof e1));
        }
        if (j->reason[0])
            fprintf(out, "     %s: %s\n", j->ok ? "warning" : "not sortable", esc(j->reason, e1, sizeof e1));
    }
    char s1[32], s2[32];
    fprintf(out, "%d recording(s), %d sortable, %s of data; the largest job needs %s\n", b->n, ok,
            bs_mem_format(total, s1, sizeof s1), bs_mem_format(largest, s2, sizeof s2));
}

char *bs_jobs_json(const bs_jobs *b)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "root", b->root);
    cJSON_AddStringToObject(r, "outroot", b->outroot);
    cJSON *a = cJSON_AddArrayToObject(r, "recordings");
    for (int i = 0; i < b->n; i++) {
        const bs_job *j = &b->jobs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", j->id);
        cJSON_AddStringToObject(o, "kind", j->kind);
        cJSON_AddStringToObject(o, "recording", j->rec);
        if (j->stream[0])
            cJSON_AddStringToObject(o, "stream", j->stream);
        else
            cJSON_AddNullToObject(o, "stream");
        cJSON_AddStringToObject(o, "out", j->out);
        cJSON_AddStringToObject(o, "rel", j->rel);
        cJSON_AddBoolToObject(o, "sortable", j->ok);
        cJSON_AddStringToObject(o, "reason", j->reason);
        if (j->ok) {
            cJSON_AddNumberToObject(o, "bytes", (double)j->bytes);
            cJSON_AddNumberToObject(o, "duration_s", j->duration_s);
            cJSON_AddNumberToObject(o, "n_chan", j->n_chan);
            cJSON_AddNumberToObject(o, "fs_hz", j->fs_hz);
            cJSON_AddNumberToObject(o, "plan_peak_bytes", (double)j->plan_peak);
            cJSON_AddBoolToObject(o, "plan_fits", j->plan_fits);
            cJSON_AddNumberToObject(o, "sort_mem_bytes", (double)j->sort_mem);
            cJSON_AddNumberToObject(o, "job_mem_bytes", (double)j->job_mem);
        }
        cJSON_AddItemToArray(a, o);
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}
