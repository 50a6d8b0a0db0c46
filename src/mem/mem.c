/*
 * mem.c - the memory accountant (see mem.h for the mechanism).
 */
#include "mem.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HEADER_BYTES 64
#define BLOCK_MAGIC 0xB5A11C0CULL

typedef struct {
    uint64_t magic;
    size_t bytes; /* requested bytes */
    int tag;      /* index into tags[] */
} block_header;

typedef struct {
    char name[BS_MEM_TAG_CHARS];
    size_t current[BS_DEV_COUNT];
    size_t peak[BS_DEV_COUNT];
} tag_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tag_entry tags[BS_MEM_MAX_TAGS];
static int n_tags;
static size_t dev_current[BS_DEV_COUNT], dev_peak[BS_DEV_COUNT], dev_budget[BS_DEV_COUNT];
static size_t live_blocks;
static FILE *trace_out;
static struct timespec trace_t0;

static const char *dev_name(bs_mem_device dev)
{
    static const char *names[BS_DEV_COUNT] = {"host", "pinned", "gpu"};
    return (unsigned)dev < BS_DEV_COUNT ? names[dev] : "?";
}

/* Index of `tag`, created if new; the last slot collects overflowing tags. */
static int tag_index(const char *tag)
{
    if (!tag || !*tag)
        tag = "untagged";
    for (int i = 0; i < n_tags; i++)
        if (strncmp(tags[i].name, tag, BS_MEM_TAG_CHARS - 1) == 0)
            return i;
    if (n_tags == BS_MEM_MAX_TAGS)
        return BS_MEM_MAX_TAGS - 1;
    snprintf(tags[n_tags].name, BS_MEM_TAG_CHARS, "%s", tag);
    return n_tags++;
}

static void trace_event(const char *op, int tag, size_t bytes, bs_mem_device dev)
{
    if (!trace_out)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)(now.tv_sec - trace_t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - trace_t0.tv_nsec);
    fprintf(trace_out, "{\"t_s\":%.6f,\"op\":\"%s\",\"tag\":\"%s\",\"bytes\":%zu,\"device\":\"%s\"}\n", t, op,
            tags[tag].name, bytes, dev_name(dev));
}

/* Caller holds the lock. Checks the budget and counts the bytes. */
static bs_status account_add(bs_mem_device dev, int tag, size_t bytes)
{
    size_t budget = dev_budget[dev];
    if (budget && (bytes > budget || dev_current[dev] > budget - bytes)) {
        char need[32], have[32], cur[32];
        return bs_error(BS_ERR_MEMORY, "allocating %s for '%s' on %s would exceed the budget of %s (%s in use)",
                        bs_mem_format(bytes, need, sizeof need), tags[tag].name, dev_name(dev),
                        bs_mem_format(budget, have, sizeof have), bs_mem_format(dev_current[dev], cur, sizeof cur));
    }
    dev_current[dev] += bytes;
    if (dev_current[dev] > dev_peak[dev])
        dev_peak[dev] = dev_current[dev];
    tags[tag].current[dev] += bytes;
    if (tags[tag].current[dev] > tags[tag].peak[dev])
        tags[tag].peak[dev] = tags[tag].current[dev];
    trace_event("alloc", tag, bytes, dev);
    return BS_OK;
}

static void account_sub(bs_mem_device dev, int tag, size_t bytes)
{
    dev_current[dev] -= bytes < dev_current[dev] ? bytes : dev_current[dev];
    tags[tag].current[dev] -= bytes < tags[tag].current[dev] ? bytes : tags[tag].current[dev];
    trace_event("free", tag, bytes, dev);
}

static block_header *header_of(const void *p)
{
    return (block_header *)((char *)(uintptr_t)p - HEADER_BYTES);
}

void *bs_mem_alloc(const char *tag, size_t bytes)
{
    if (bytes > SIZE_MAX - 2 * HEADER_BYTES) {
        bs_error(BS_ERR_MEMORY, "allocation of %zu bytes for '%s' is too large", bytes, tag ? tag : "untagged");
        return NULL;
    }
    pthread_mutex_lock(&lock);
    int t = tag_index(tag);
    bs_status st = account_add(BS_DEV_HOST, t, bytes);
    pthread_mutex_unlock(&lock);
    if (st != BS_OK)
        return NULL;
    size_t total = (HEADER_BYTES + bytes + HEADER_BYTES - 1) / HEADER_BYTES * HEADER_BYTES;
    block_header *h = aligned_alloc(HEADER_BYTES, total);
    if (!h) {
        pthread_mutex_lock(&lock);
        account_sub(BS_DEV_HOST, t, bytes);
        pthread_mutex_unlock(&lock);
        char buf[32];
        bs_error(BS_ERR_MEMORY, "the system refused %s for '%s'", bs_mem_format(bytes, buf, sizeof buf),
                 tag ? tag : "untagged");
        return NULL;
    }
    h->magic = BLOCK_MAGIC;
    h->bytes = bytes;
    h->tag = t;
    pthread_mutex_lock(&lock);
    live_blocks++;
    pthread_mutex_unlock(&lock);
    return (char *)h + HEADER_BYTES;
}

void *bs_mem_calloc(const char *tag, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        bs_error(BS_ERR_MEMORY, "allocation of %zu x %zu bytes for '%s' overflows", n, size, tag ? tag : "untagged");
        return NULL;
    }
    void *p = bs_mem_alloc(tag, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *bs_mem_realloc(void *p, const char *tag, size_t bytes)
{
    if (!p)
        return bs_mem_alloc(tag, bytes);
    block_header *h = header_of(p);
    void *q = bs_mem_alloc(tags[h->tag].name, bytes);
    if (!q)
        return NULL;
    memcpy(q, p, h->bytes < bytes ? h->bytes : bytes);
    bs_mem_free(p);
    return q;
}

void bs_mem_free(void *p)
{
    if (!p)
        return;
    block_header *h = header_of(p);
    if (h->magic != BLOCK_MAGIC) {
        fprintf(stderr, "boundsort: internal error: bs_mem_free of a pointer the accountant does not own\n");
        abort();
    }
    pthread_mutex_lock(&lock);
    account_sub(BS_DEV_HOST, h->tag, h->bytes);
    live_blocks--;
    pthread_mutex_unlock(&lock);
    h->magic = 0;
    free(h);
}

size_t bs_mem_size(const void *p) { return p ? header_of(p)->bytes : 0; }

bs_status bs_mem_track(bs_mem_device dev, const char *tag, size_t bytes)
{
    if ((unsigned)dev >= BS_DEV_COUNT)
        return bs_error(BS_ERR_INTERNAL, "bs_mem_track: bad device %d", (int)dev);
    pthread_mutex_lock(&lock);
    bs_status st = account_add(dev, tag_index(tag), bytes);
    pthread_mutex_unlock(&lock);
    return st;
}

void bs_mem_untrack(bs_mem_device dev, const char *tag, size_t bytes)
{
    if ((unsigned)dev >= BS_DEV_COUNT)
        return;
    pthread_mutex_lock(&lock);
    account_sub(dev, tag_index(tag), bytes);
    pthread_mutex_unlock(&lock);
}

void bs_mem_set_budget(bs_mem_device dev, size_t bytes)
{
    if ((unsigned)dev < BS_DEV_COUNT)
        dev_budget[dev] = bytes;
}

size_t bs_mem_budget(bs_mem_device dev) { return (unsigned)dev < BS_DEV_COUNT ? dev_budget[dev] : 0; }

size_t bs_mem_current(bs_mem_device dev) { return (unsigned)dev < BS_DEV_COUNT ? dev_current[dev] : 0; }

size_t bs_mem_peak(bs_mem_device dev) { return (unsigned)dev < BS_DEV_COUNT ? dev_peak[dev] : 0; }

static size_t tag_stat(const char *tag, bs_mem_device dev, int peak)
{
    size_t v = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_tags; i++)
        if (strncmp(tags[i].name, tag, BS_MEM_TAG_CHARS - 1) == 0)
            v = peak ? tags[i].peak[dev] : tags[i].current[dev];
    pthread_mutex_unlock(&lock);
    return v;
}

size_t bs_mem_tag_current(const char *tag, bs_mem_device dev) { return tag_stat(tag, dev, 0); }
size_t bs_mem_tag_peak(const char *tag, bs_mem_device dev) { return tag_stat(tag, dev, 1); }

size_t bs_mem_live_blocks(void) { return live_blocks; }

void bs_mem_reset_peaks(void)
{
    pthread_mutex_lock(&lock);
    for (int d = 0; d < BS_DEV_COUNT; d++) {
        dev_peak[d] = dev_current[d];
        for (int i = 0; i < n_tags; i++)
            tags[i].peak[d] = tags[i].current[d];
    }
    pthread_mutex_unlock(&lock);
}

void bs_mem_print_table(FILE *out)
{
    char a[32], b[32];
    pthread_mutex_lock(&lock);
    fprintf(out, "%-40s %-7s %14s %14s\n", "tag", "device", "current", "peak");
    for (int i = 0; i < n_tags; i++)
        for (int d = 0; d < BS_DEV_COUNT; d++)
            if (tags[i].peak[d])
                fprintf(out, "%-40s %-7s %14s %14s\n", tags[i].name, dev_name(d),
                        bs_mem_format(tags[i].current[d], a, sizeof a), bs_mem_format(tags[i].peak[d], b, sizeof b));
    for (int d = 0; d < BS_DEV_COUNT; d++) {
        if (!dev_peak[d] && !dev_budget[d])
            continue;
        fprintf(out, "%-40s %-7s %14s %14s", "total", dev_name(d), bs_mem_format(dev_current[d], a, sizeof a),
                bs_mem_format(dev_peak[d], b, sizeof b));
        if (dev_budget[d])
            fprintf(out, "  (budget %s)", bs_mem_format(dev_budget[d], a, sizeof a));
        fputc('\n', out);
    }
    pthread_mutex_unlock(&lock);
}

void bs_mem_set_trace(FILE *out)
{
    pthread_mutex_lock(&lock);
    trace_out = out;
    clock_gettime(CLOCK_MONOTONIC, &trace_t0);
    pthread_mutex_unlock(&lock);
}

bs_status bs_mem_parse_size(const char *text, size_t *bytes)
{
    if (!text || !*text)
        return bs_error(BS_ERR_USAGE, "empty memory size (expected e.g. 4G, 512M)");
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v) || v < 0)
        return bs_error(BS_ERR_USAGE, "memory size '%s': expected a number with an optional K/M/G/T suffix", text);
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'B': end++; break;
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: return bs_error(BS_ERR_USAGE, "memory size '%s': unknown suffix '%s' (expected K, M, G or T)", text, end);
    }
    if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "ib") == 0 || strcmp(end, "B") == 0 || strcmp(end, "b") == 0))
        end += strlen(end);
    if (*end)
        return bs_error(BS_ERR_USAGE, "memory size '%s': trailing characters '%s'", text, end);
    double b = v * mult;
    if (b >= 18446744073709551615.0)
        return bs_error(BS_ERR_USAGE, "memory size '%s' is too large", text);
    *bytes = (size_t)b;
    return BS_OK;
}

const char *bs_mem_format(size_t bytes, char *buf, size_t buflen)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, buflen, "%zu B", bytes);
    else
        snprintf(buf, buflen, "%.2f %s", v, units[u]);
    return buf;
}
