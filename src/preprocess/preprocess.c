/*
 * preprocess.c - one batch window through the whole preprocessing chain:
 * mean removal, ADC phase shift (phase_shift.c), bad channels' interpolation
 * (bad_channels.c), median reference (car.c, or car_local.c), zero-phase high-pass
 * (and destripe.c)
 * (highpass.c), artifact check, local whitening (whiten.c), in the order of
 * docs/ALGORITHM.md §3.1 (see preprocess.h).
 *
 * The kernels run one after another on the same window, so one scratch
 * buffer of the largest kernel's size serves all of them: the batch's size
 * function is the maximum of the enabled kernels' size functions. When the
 * caller passes no scratch, that buffer is allocated once under
 * "preprocess/batch" and handed to each kernel (which then allocates
 * nothing itself).
 */
#include <math.h>
#include <string.h>

#include "bad_channels.h"
#include "pp_internal.h"
#include "preprocess.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static const char *const denoise_names[3] = {"cmr", "cmr-local", "destripe"};

const char *bs_denoise_name(int denoise) { return denoise >= 0 && denoise < 3 ? denoise_names[denoise] : "?"; }

int bs_denoise_parse(const char *text)
{
    for (int d = 0; d < 3; d++)
        if (text && strcmp(text, denoise_names[d]) == 0)
            return d;
    return -1;
}

size_t bs_preprocess_scratch_bytes(const bs_preprocess *pp, int n_chan, int64_t n_t, int n_threads)
{
    size_t s = 0;
    if (pp->car || pp->remove_mean)
        s = max_sz(s, bs_car_scratch_bytes(n_chan, n_t, n_threads));
    if (pp->car && pp->local_ref)
        s = max_sz(s, bs_car_local_scratch_bytes(pp->local_ref, n_t, n_threads));
    if (pp->destripe)
        s = max_sz(s, bs_destripe_scratch_bytes(pp->destripe, n_t, n_threads));
    if (pp->phase_shift)
        s = max_sz(s, bs_phase_shift_scratch_bytes(n_t, n_threads));
    if (pp->hp)
        s = max_sz(s, bs_highpass_scratch_bytes(pp->hp, n_chan, n_t, n_threads));
    if (pp->wh)
        s = max_sz(s, bs_whiten_scratch_bytes(n_chan, n_t, n_threads));
    return s;
}

bs_status bs_preprocess_batch(const bs_preprocess *pp, float *x, int n_chan, int64_t n_t, void *scratch,
                              size_t scratch_bytes, int *zeroed)
{
    if (zeroed)
        *zeroed = 0;
    if (n_chan < 1 || n_t < 1)
        return bs_error(BS_ERR_INPUT, "preprocess: window of %d channels x %lld samples: expected at least 1 x 1",
                        n_chan, (long long)n_t);
    if (pp->wh && pp->wh->n_chan != n_chan)
        return bs_error(BS_ERR_INPUT, "preprocess: whitening matrix is for %d channels, the window has %d",
                        pp->wh->n_chan, n_chan);
    if (pp->hp && n_t <= pp->hp->padlen)
        return bs_error(BS_ERR_INPUT,
                        "preprocess: window of %lld samples: expected more than the high-pass padding of %d samples",
                        (long long)n_t, pp->hp->padlen);
    int owned = 0;
    if (!scratch) {
        scratch_bytes = bs_preprocess_scratch_bytes(pp, n_chan, n_t, omp_get_max_threads());
        scratch = bs_mem_alloc("preprocess/batch", scratch_bytes);
        if (!scratch)
            return BS_ERR_MEMORY;
        owned = 1;
    }
    bs_status st = BS_OK;
    if (pp->phase_shift || pp->interp || pp->local_ref) { /* between the mean and the median: the reference
                                                             sees aligned channels and no bad one */
        if (pp->remove_mean)
            st = bs_car(x, n_chan, n_t, 1, 0, scratch, scratch_bytes);
        if (st == BS_OK && pp->phase_shift)
            st = bs_phase_shift_apply(pp->phase_shift, x, n_chan, n_t, scratch, scratch_bytes);
        if (st == BS_OK && pp->interp)
            bs_bad_interp_apply(pp->interp, x, n_t);
        if (st == BS_OK && pp->car)
            st = pp->local_ref ? bs_car_local(pp->local_ref, x, n_t, scratch, scratch_bytes)
                               : bs_car(x, n_chan, n_t, 0, 1, scratch, scratch_bytes);
    } else if (pp->remove_mean || pp->car) {
        st = bs_car(x, n_chan, n_t, pp->remove_mean, pp->car, scratch, scratch_bytes);
    }
    if (st == BS_OK && pp->hp)
        st = bs_highpass_apply(pp->hp, x, n_chan, n_t, scratch, scratch_bytes);
    if (st == BS_OK && pp->destripe)
        st = bs_destripe_apply(pp->destripe, x, n_chan, n_t, scratch, scratch_bytes);
    if (st == BS_OK && pp->artifact_uv > 0) {
        const float thr = (float)pp->artifact_uv;
        const size_t n = (size_t)n_chan * (size_t)n_t;
        int hit = 0;
#pragma omp parallel for reduction(| : hit) schedule(static)
        for (size_t i = 0; i < n; i++)
            hit |= !(fabsf(x[i]) < thr); /* NaN counts as an artifact */
        if (hit) { /* the whole window becomes zeros and whitening is skipped */
            memset(x, 0, n * sizeof *x);
            if (zeroed)
                *zeroed = 1;
            if (owned)
                bs_mem_free(scratch);
            return BS_OK;
        }
    }
    if (st == BS_OK && pp->wh)
        st = bs_whiten_apply(pp->wh, x, n_t, scratch, scratch_bytes);
    if (owned)
        bs_mem_free(scratch);
    return st;
}
