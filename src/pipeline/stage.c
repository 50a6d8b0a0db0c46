/*
 * stage.c - the helpers every stage shares (see stage.h): the batches a
 * statistic is estimated from, and the checkpoint file plumbing of
 * OUT/.stages/<stage>/ (reading a batch: read_lane.c).
 */
#include "stage.h"

#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../common/progress.h"
#include "../mem/mem.h"

bs_status bs_sample_batches_init(bs_sample_batches *s, const bs_run_ctx *c, int stride, const char *what)
{
    memset(s, 0, sizeof *s);
    if (stride < 1)
        stride = 1;
    s->n_seg = (c->n_batches + stride - 1) / stride;
    s->what = what;
    s->seen = bs_mem_calloc("sort/sampled-batches", (size_t)(c->n_batches + 7) / 8 + 1, 1);
    return s->seen ? BS_OK : BS_ERR_MEMORY;
}

/* 1 bit per batch in s->seen: read already (handed out or passed over) */
static int seen(const bs_sample_batches *s, int64_t b)
{
    return (s->seen[b / 8] >> (b % 8)) & 1;
}

/* batch cand read; *usable = 1 (then it is preprocessed) or 0 (flat or saturated) */
static bs_status take(bs_run_ctx *c, bs_sample_batches *s, int64_t cand, float **x, int64_t *n_valid, int *usable)
{
    double t0 = bs_now_s();
    bs_status st = bs_batch_read(&c->rd.reader, cand, x, n_valid);
    if (c->summary)
        bs_run_stage_read(c->summary, bs_now_s() - t0);
    BS_TRY(st);
    double railed = c->rd.pre ? c->railed[cand] /* the raw window's (the preprocessed one no longer shows it) */
                              : bs_batch_railed_fraction(*x, c->rec->probe.n_chan, c->width, c->halo, c->halo + *n_valid);
    *usable = railed <= c->p->max_railed_fraction;
    s->seen[cand / 8] |= (uint8_t)(1u << (cand % 8));
    if (!*usable) {
        s->n_skipped++;
        return BS_OK;
    }
    s->n_used++;
    double t1 = bs_now_s();
    st = bs_run_preprocess_read(c, cand, *x);
    if (c->summary)
        bs_run_stage_read(c->summary, bs_now_s() - t1);
    return st;
}

bs_status bs_sample_batches_next(bs_run_ctx *c, bs_sample_batches *s, int more, int64_t *b, float **x,
                                 int64_t *n_valid)
{
    int usable = 0;
    for (; s->seg < s->n_seg; s->seg++) {
        int64_t lo = s->seg * c->n_batches / s->n_seg, hi = (s->seg + 1) * c->n_batches / s->n_seg;
        int64_t mid = lo + (hi - lo) / 2;
        for (int64_t k = 0; k < 2 * (hi - lo); k++) { /* mid, mid + 1, mid - 1, mid + 2, ... */
            int64_t cand = mid + (k % 2 ? -(k + 1) / 2 : k / 2);
            if (cand < lo || cand >= hi)
                continue;
            BS_TRY(take(c, s, cand, x, n_valid, &usable));
            if (usable) {
                s->seg++;
                *b = cand;
                return BS_OK;
            }
        }
    }
    /* more: the batches not read yet, in order */
    for (; more && s->rest < c->n_batches; s->rest++) {
        int64_t cand = s->rest;
        if (seen(s, cand))
            continue;
        BS_TRY(take(c, s, cand, x, n_valid, &usable));
        if (usable) {
            s->rest++;
            *b = cand;
            return BS_OK;
        }
    }
    *b = -1;
    return BS_OK;
}

bs_status bs_sample_batches_end(const bs_run_ctx *c, bs_sample_batches *s, bs_status st)
{
    bs_mem_free(s->seen);
    s->seen = NULL;
    if (st != BS_OK)
        return st;
    double batch_s = (double)c->nb / c->rec->fs_hz;
    if (s->n_used == 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: %s: all %lld batches read (%.3g s each) are flat or saturated (more than %.0f%% of their "
                        "samples at their channel's extremes): no signal to estimate from",
                        c->rec->data_path, s->what, (long long)s->n_skipped, batch_s, 100.0 * c->p->max_railed_fraction);
    if (s->n_skipped > 0)
        bs_log_info("%s: %lld flat or saturated batches of %.3g s passed over; estimated from %lld others", s->what,
                    (long long)s->n_skipped, batch_s, (long long)s->n_used);
    return BS_OK;
}

bs_status bs_stage_rows(const char *stage_dir, const char *rel, int64_t *n)
{
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, rel));
    BS_TRY(bs_npy_read_header(path, &h));
    *n = h.shape[0];
    return BS_OK;
}

bs_status bs_stage_file(const char *stage_dir, const char *rel, char *buf, size_t len)
{
    char sub[4200];
    BS_TRY(bs_path_join(buf, len, stage_dir, rel));
    snprintf(sub, sizeof sub, "%s", buf);
    char *slash = strrchr(sub, '/');
    if (slash) {
        *slash = '\0';
        BS_TRY(bs_mkdir_p(sub));
    }
    return BS_OK;
}

bs_status bs_stage_load_exact(const char *stage_dir, const char *rel, const char *tag, bs_npy_dtype dtype, int ndim,
                              const int64_t *dims, void **data)
{
    char path[4200];
    bs_npy_header h;
    BS_TRY(bs_path_join(path, sizeof path, stage_dir, rel));
    BS_TRY(bs_npy_load_expect(path, tag, dtype, ndim, &h, data));
    for (int i = 0; i < ndim; i++)
        if (dims[i] >= 0 && h.shape[i] != dims[i]) {
            bs_mem_free(*data);
            *data = NULL;
            return bs_error(BS_ERR_INPUT, "%s: checkpoint has shape[%d] = %lld, expected %lld", path, i,
                            (long long)h.shape[i], (long long)dims[i]);
        }
    return BS_OK;
}

int bs_chan_rank_desc(const void *a, const void *b)
{
    const bs_chan_rank *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->ch > y->ch) - (x->ch < y->ch);
}
