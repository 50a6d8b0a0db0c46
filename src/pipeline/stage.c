/*
 * stage.c - the helpers every stage shares (see stage.h): reading a batch
 * through the run's preprocessing, and the checkpoint file plumbing of
 * OUT/.stages/<stage>/.
 */
#include "stage.h"

#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../io/npy.h"
#include "../mem/mem.h"

bs_status bs_run_read_batch(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    BS_TRY(bs_batch_read(&c->reader, b, x, n_valid));
    bs_preprocess pp = c->pp;
    if (c->have_corr)
        BS_TRY(bs_drift_corrector_whitener(&c->corr, b, &pp.wh));
    return bs_preprocess_batch(&pp, *x, c->rec->probe.n_chan, c->width, c->scratch, c->scratch_bytes, NULL);
}

bs_status bs_run_read_unwhitened(bs_run_ctx *c, int64_t b, float **x, int64_t *n_valid)
{
    BS_TRY(bs_batch_read(&c->reader, b, x, n_valid));
    bs_preprocess pp = c->pp;
    pp.wh = NULL;
    return bs_preprocess_batch(&pp, *x, c->rec->probe.n_chan, c->width, c->scratch, c->scratch_bytes, NULL);
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
