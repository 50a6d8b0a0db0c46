/*
 * mem.h - the memory accountant (docs/ARCHITECTURE.md §3).
 *
 * Every bulk allocation (anything larger than a few KiB) goes through this
 * module with a tag of the form "stage/buffer". The accountant keeps, per
 * device (host, pinned host, GPU) and per tag, the current and the peak number
 * of bytes, and enforces a budget per device: an allocation that would take
 * the device's current total above its budget fails with BS_ERR_MEMORY and a
 * message naming the tag and the bytes, it never aborts.
 *
 * Host blocks carry a 64-byte header in front of the user pointer that records
 * the size and tag, so bs_mem_free() needs only the pointer. Pointers returned
 * are 64-byte aligned. Memory owned by other allocators (cudaMalloc, pinned
 * buffers) is reported with bs_mem_track()/bs_mem_untrack().
 *
 * The accountant is process-global and thread-safe (one mutex; allocations are
 * rare compared with the work done on them). Counts are exact: the requested
 * byte count, not the rounded one, is what is counted.
 *
 * With bs_mem_set_trace(FILE*) every tracked allocation and free is written as
 * one JSON line: {"t_s":..., "op":"alloc"|"free", "tag":..., "bytes":..., "device":...}.
 */
#ifndef BS_MEM_H
#define BS_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

typedef enum { BS_DEV_HOST = 0, BS_DEV_PINNED = 1, BS_DEV_GPU = 2, BS_DEV_COUNT = 3 } bs_mem_device;

#define BS_MEM_MAX_TAGS 512
#define BS_MEM_TAG_CHARS 64

/* Host allocation under `tag`. Returns NULL (status BS_ERR_MEMORY recorded
 * with bs_error) if the budget would be exceeded or the system refuses.
 * bytes == 0 returns a valid unique pointer that counts 0 bytes. */
void *bs_mem_alloc(const char *tag, size_t bytes);
/* Zero-filled; n * size is overflow-checked. */
void *bs_mem_calloc(const char *tag, size_t n, size_t size);
/* Resize a block from bs_mem_alloc (keeps its tag); NULL p acts as alloc.
 * On failure the old block is untouched and NULL is returned. */
void *bs_mem_realloc(void *p, const char *tag, size_t bytes);
void bs_mem_free(void *p);
/* Bytes of a live block. */
size_t bs_mem_size(const void *p);

/* Account memory allocated elsewhere (GPU, pinned). Fails like bs_mem_alloc. */
bs_status bs_mem_track(bs_mem_device dev, const char *tag, size_t bytes);
void bs_mem_untrack(bs_mem_device dev, const char *tag, size_t bytes);

/* Budget in bytes for a device; 0 means unlimited. */
void bs_mem_set_budget(bs_mem_device dev, size_t bytes);
size_t bs_mem_budget(bs_mem_device dev);

size_t bs_mem_current(bs_mem_device dev);
size_t bs_mem_peak(bs_mem_device dev);
size_t bs_mem_tag_current(const char *tag, bs_mem_device dev);
size_t bs_mem_tag_peak(const char *tag, bs_mem_device dev);
/* Number of live blocks on the host (leak check). */
size_t bs_mem_live_blocks(void);
/* Reset every peak to the current value (start of a stage). */
void bs_mem_reset_peaks(void);

/* Print the table: one row per tag with current and peak bytes per device,
 * then the totals and budgets. */
void bs_mem_print_table(FILE *out);

/* JSON-lines trace of every tracked allocation and free (NULL turns it off). */
void bs_mem_set_trace(FILE *out);

/* Parse "4G", "512M", "1.5GiB", "1000000" into bytes (K/M/G/T = 2^10..2^40).
 * Returns BS_ERR_USAGE with a message on malformed text. */
bs_status bs_mem_parse_size(const char *text, size_t *bytes);
/* Format bytes as "1.50 GiB" into buf. */
const char *bs_mem_format(size_t bytes, char *buf, size_t buflen);

#endif
