/*
 * stage_channels.c - stage 0 of `boundsort sort` (the table: src/pipeline/
 * stages.h): dead, noisy and out-of-brain channels (bad_channels.h), found on
 * chunks spread over the recording, then handled as --bad-channels says:
 *   interpolate (default)  dead and noisy channels are rewritten from their
 *                          neighbours in every batch (kriging weights, before
 *                          the median reference); out-of-brain ones dropped;
 *   remove                 all of them dropped from the probe;
 *   keep                   listed only.
 * A dropped channel is gone for the rest of the run and its outputs: the
 * probe the later stages see (and channel_map.npy, the quality metrics,
 * OUT/source.json) has only the channels sorted. More than max_fraction of
 * the channels bad refuses the run (exit 2) once OUT/bad_channels.tsv lists
 * them.
 *
 * OUT/bad_channels.tsv: one row per bad channel, columns channel (index in
 * the recording's probe as opened), column (of the data file), shank, x_um,
 * y_um, label (dead, noisy, out), action (interpolated, removed, kept),
 * coherence (median over the chunks), psd_hf_uv2_hz (median high-band
 * power, µV²/Hz).
 *
 * The stage also builds the denoiser that replaces the global median
 * reference (--denoise cmr-local: each channel's ring of neighbours;
 * destripe: its gain floor from each kept channel's RMS in the chunks) for
 * the channels kept, and opens the run's batch lane (stage.h) for them,
 * which every later stage reads through.
 *
 * Checkpoint (OUT/.stages/channels/bad.npy): float32 (C, 4) label,
 * coherence, psd_hf, rms (µV) of each channel as opened; the handling
 * (finish) is redone from it on --resume.
 */
#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../io/npy.h"
#include "../mem/mem.h"
#include "../pipeline/stage.h"
#include "../pipeline/stages.h"
#include "bad_channels.h"

static const char *const files[1] = {"channels/bad.npy"};

#define BAD_TSV "bad_channels.tsv"

static void plan(bs_sort_plan *pl, bs_plan_stage *s)
{
    int C = pl->n_chan;
    size_t lane = pl->shapes.reader + pl->shapes.scratch + pl->shapes.artifact;
    /* the scan's buffers are freed before the run's lane is opened at the stage's end */
    bs_plan_add(s, "bad-channel scan (chunk reader, detector), then the batch lane",
                pl->shapes.bad_scan > lane ? pl->shapes.bad_scan : lane);
    bs_plan_add(s, "labels and interpolation weights", (size_t)C * 4 * sizeof(float) + pl->shapes.bad_interp);
    snprintf(s->strategy, sizeof s->strategy, "%d chunks of %g s", pl->p.bad.n_chunks, pl->p.bad.chunk_s);
    s->reduce = "bad_channels.chunk_s";
    bs_plan_add(s, "small buffers", BS_PLAN_SMALL_BYTES);
    bs_plan_stage_total(s);
    bs_plan_disk(s, 2, (double)C * (4 * sizeof(float) + 80.0)); /* bad.npy and the table */
}

static bs_status run(bs_run_ctx *c)
{
    const bs_recording *rec = c->rec;
    int C = rec->probe.n_chan;
    c->bad_n_chan = C;
    c->bad = bs_mem_alloc("sort/bad_channels", (size_t)C * 4 * sizeof(float));
    int8_t *lab = bs_mem_alloc("sort/bad_channels", (size_t)C);
    float *coh = bs_mem_alloc("sort/bad_channels", (size_t)C * sizeof(float));
    float *psd = bs_mem_alloc("sort/bad_channels", (size_t)C * sizeof(float));
    float *rms = bs_mem_alloc("sort/bad_channels", (size_t)C * sizeof(float));
    bs_status st = c->bad && lab && coh && psd && rms ? BS_OK : BS_ERR_MEMORY;
    if (st == BS_OK)
        st = bs_bad_channels_scan(rec, &c->p->bad, bs_sort_phase_shift(rec, c->p), c->halo,
                                  c->p->max_railed_fraction,
                                  c->p->no_artifact_removal ? NULL : &c->p->artifact, lab, coh, psd, rms,
                                  &c->summary->bad_chunks);
    for (int ch = 0; st == BS_OK && ch < C; ch++) {
        c->bad[4 * ch] = lab[ch];
        c->bad[4 * ch + 1] = coh[ch];
        c->bad[4 * ch + 2] = psd[ch];
        c->bad[4 * ch + 3] = rms[ch];
    }
    bs_mem_free(lab);
    bs_mem_free(coh);
    bs_mem_free(psd);
    bs_mem_free(rms);
    char path[4200];
    int64_t shape[2] = {C, 4};
    if (st == BS_OK)
        st = bs_stage_file(c->stage_dir, files[0], path, sizeof path);
    if (st == BS_OK)
        st = bs_npy_save(path, BS_NPY_F32, 2, shape, c->bad);
    return st;
}

static bs_status load(bs_run_ctx *c)
{
    int64_t dims[2] = {c->rec->probe.n_chan, 4};
    c->bad_n_chan = c->rec->probe.n_chan;
    void *a = NULL;
    BS_TRY(bs_stage_load_exact(c->stage_dir, files[0], "sort/bad_channels", BS_NPY_F32, 2, dims, &a));
    c->bad = a;
    return BS_OK;
}

static const char *action_of(int mode, int label)
{
    if (label == BS_CHAN_GOOD || mode == BS_BAD_KEEP)
        return "kept";
    return mode == BS_BAD_REMOVE || label == BS_CHAN_OUT ? "removed" : "interpolated";
}

static bs_status write_tsv(const bs_run_ctx *c)
{
    const bs_probe *pr = &c->rec->probe; /* still the channels as opened */
    char path[4200];
    BS_TRY(bs_path_join(path, sizeof path, c->p->out_dir, BAD_TSV));
    bs_atomic_file f;
    BS_TRY(bs_atomic_open(&f, path));
    fprintf(f.fp, "channel\tcolumn\tshank\tx_um\ty_um\tlabel\taction\tcoherence\tpsd_hf_uv2_hz\n");
    for (int ch = 0; ch < pr->n_chan; ch++) {
        int l = (int)c->bad[4 * ch];
        if (l == BS_CHAN_GOOD)
            continue;
        fprintf(f.fp, "%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t%.4f\t%.5g\n", ch, pr->column[ch], pr->shank[ch], pr->x_um[ch],
                pr->y_um[ch], bs_chan_label_name(l), action_of(c->p->bad.mode, l), c->bad[4 * ch + 1],
                c->bad[4 * ch + 2]);
    }
    return bs_atomic_commit(&f);
}

/* --denoise cmr-local / destripe: built for the channels the sort keeps (rms_uv: theirs, µV). */
static bs_status build_denoiser(bs_run_ctx *c, const float *rms_uv)
{
    const bs_probe *pr = &c->rec->probe;
    if (c->p->denoise == BS_DENOISE_CMR_LOCAL) {
        BS_TRY(bs_local_ref_build(pr, BS_LOCAL_REF_R_IN_UM, BS_LOCAL_REF_R_OUT_UM, BS_LOCAL_REF_MIN, &c->local_ref));
        c->pp.local_ref = &c->local_ref;
    }
    if (c->p->denoise == BS_DENOISE_DESTRIPE) {
        BS_TRY(bs_destripe_init(pr, c->rec->fs_hz, rms_uv, &c->destripe));
        c->pp.destripe = &c->destripe;
    }
    return BS_OK;
}

static bs_status finish(bs_run_ctx *c)
{
    const bs_bad_channel_params *bp = &c->p->bad;
    bs_run_summary *sum = c->summary;
    const int C = c->bad_n_chan;
    sum->bad_done = 1;
    sum->bad_mode = bs_bad_mode_name(bp->mode);
    bs_bad_detector det;
    BS_TRY(bs_bad_detector_init(&c->rec->probe, c->rec->fs_hz, bp, &det));
    sum->bad_examined = det.start[det.n_groups];
    bs_bad_detector_free(&det);
    int n_bad = 0;
    for (int ch = 0; ch < C; ch++) {
        int l = (int)c->bad[4 * ch];
        sum->bad_n[l]++;
        n_bad += l != BS_CHAN_GOOD;
    }
    BS_TRY(write_tsv(c));
    sum->denoise = bs_denoise_name(c->p->denoise);
    if (n_bad > bp->max_fraction * C)
        return bs_error(BS_ERR_INPUT,
                        "%s: %d of %d channels are bad (%d dead, %d noisy, %d out of the brain), more than the "
                        "--max-bad-channel-fraction of %g allows; %s/%s lists them",
                        c->rec->data_path, n_bad, C, sum->bad_n[1], sum->bad_n[2], sum->bad_n[3], bp->max_fraction,
                        c->p->out_dir, BAD_TSV);
    uint8_t *drop = bs_mem_calloc("sort/bad_channels", (size_t)C, 1);
    uint8_t *interp = bs_mem_calloc("sort/bad_channels", (size_t)C, 1);
    uint8_t *good = bs_mem_calloc("sort/bad_channels", (size_t)C, 1);
    bs_status st = drop && interp && good ? BS_OK : BS_ERR_MEMORY;
    const int act = bp->mode != BS_BAD_KEEP; /* keep: listed only */
    int n_drop = 0;
    for (int ch = 0; st == BS_OK && ch < C; ch++) {
        int l = (int)c->bad[4 * ch];
        drop[ch] = act && l != BS_CHAN_GOOD && (bp->mode == BS_BAD_REMOVE || l == BS_CHAN_OUT);
        n_drop += drop[ch];
    }
    /* the kept channels, in order: which to interpolate, from which */
    int k = 0;
    for (int ch = 0; st == BS_OK && ch < C; ch++) {
        if (drop[ch])
            continue;
        interp[k] = act && c->bad[4 * ch] != BS_CHAN_GOOD;
        good[k] = !interp[k];
        k++;
    }
    if (st == BS_OK && n_drop) {
        st = bs_recording_drop_channels(c->rec, drop);
        if (st == BS_OK && c->rec->probe.n_chan < 2)
            st = bs_error(BS_ERR_INPUT, "%s: sorting needs at least 2 channels, %d are left once the bad ones are "
                                        "dropped", c->rec->data_path, c->rec->probe.n_chan);
    }
    if (st == BS_OK)
        st = bs_bad_interp_build(&c->rec->probe, interp, good, 1.3, &c->interp);
    if (st == BS_OK && c->interp.n_bad)
        c->pp.interp = &c->interp;
    sum->bad_removed = n_drop;
    sum->bad_interpolated = c->interp.n_bad;
    /* the kept channels' RMS for the destriping's gain floor: an interpolated channel's is the weighted
     * sum of its sources' (what its interpolated trace has at most) */
    float *rms = st == BS_OK ? bs_mem_alloc("sort/bad_channels", (size_t)C * sizeof(float)) : NULL;
    if (st == BS_OK && !rms)
        st = BS_ERR_MEMORY;
    for (int ch = 0, k2 = 0; st == BS_OK && ch < C; ch++)
        if (!drop[ch])
            rms[k2++] = c->bad[4 * ch + 3];
    for (int i = 0; st == BS_OK && i < c->interp.n_bad; i++) {
        double r = 0;
        for (int q = c->interp.start[i]; q < c->interp.start[i + 1]; q++)
            r += c->interp.w[q] * rms[c->interp.src[q]];
        rms[c->interp.bad[i]] = (float)r;
    }
    if (st == BS_OK)
        st = build_denoiser(c, rms);
    if (st == BS_OK) /* the lane every later stage reads through, for the channels kept and their reference */
        st = bs_read_lane_open(&c->rd, c, c->n_threads, "sort/preprocess-scratch", "sort/artifacts");
    bs_mem_free(rms);
    bs_mem_free(drop);
    bs_mem_free(interp);
    bs_mem_free(good);
    return st;
}

static const char *const params[] = {"batch", "preprocess", "bad_channels", NULL};

const bs_stage bs_channels_stage = {.name = "channels",
                                    .plan = plan,
                                    .run = run,
                                    .load = load,
                                    .finish = finish,
                                    .files = files,
                                    .n_files = 1,
                                    .params = params};
