/*
 * report.c - bs_report_write(): gathers everything from the folder, then
 * writes the page in one go.
 *
 * The page is web/report.html with three markers replaced: <!--@CSS@--> by
 * report.css in a <style>, <!--@DATA@--> by the data as JSON in
 * <script id="bs-data" type="application/json">, <!--@JS@--> by plot.js and
 * report.js in a <script>. Nothing outside the file is referenced, so the
 * page opens from disk with no network. The data object's keys are listed in
 * write_data(); report.js documents how it reads each one.
 *
 * The file is written under a temporary name and renamed into place
 * (src/common/fileio.h), so an interrupted run leaves any previous
 * report.html untouched. The output is a function of the folder's content
 * and name only (no clock, no absolute path), so two runs give the same bytes.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../include/boundsort.h"
#include "../common/fileio.h"
#include "../common/log.h"
#include "../mem/mem.h"
#include "report_internal.h"
#include "web_assets.h"

void bs_report_params_default(bs_report_params *p)
{
    p->spikes_per_unit = 300;
    p->n_similar = 5;
    p->drift_time_bins = 600;
    p->drift_depth_bins = 300;
    p->split_max_spikes = 2000000;
    p->trace_stretches = 4;
    p->trace_ms = 100;
}

size_t bs_report_page_bytes(const bs_report_params *p, int64_t n_units, int n_chan, double fs_hz)
{
    size_t traces = (size_t)p->trace_stretches * (size_t)rp_trace_samples(p, fs_hz) * (size_t)(n_chan > 0 ? n_chan : 0);
    return 900000u + 7000u * (size_t)(n_units > 0 ? n_units : 0) +
           RP_SPLIT_BYTES_PER_SPIKE * (size_t)(p->split_max_spikes > 0 ? p->split_max_spikes : 0) + traces / 3 * 4 +
           RP_TRACE_MAX_SPIKES * 12u;
}

void rp_note(rp_data *d, const char *fmt, ...)
{
    if (d->n_notes == RP_MAX_NOTES)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    d->notes[d->n_notes] = strdup(buf);
    if (d->notes[d->n_notes])
        d->n_notes++;
}

void rp_free(rp_data *d)
{
    for (int i = 0; i < d->n_notes; i++)
        free(d->notes[i]);
    rp_free_tables(d);
    rp_traces_free(d);
    void *bulk[] = {d->chan_x, d->chan_y, d->chan_shank, d->unit_id, d->id_to_unit, d->count, d->tmpl,
                    d->amp_sum, d->pos_sum, d->pos_n, d->peak_ch, d->tchan, d->twave, d->tscale, d->tpos,
                    d->sim_unit, d->sim_score, d->pair, d->pair_score, d->ccg, d->acg, d->ring_full, d->sub_off,
                    d->sub_t, d->sub_amp, d->sub_x, d->sub_y, d->all_off, d->all_t, d->all_amp, d->dmap_count, d->dmap_amp, d->mot, d->mot_t,
                    d->mot_depth, d->mot_shank, d->mem_t, d->mem_bytes};
    for (size_t i = 0; i < sizeof bulk / sizeof bulk[0]; i++)
        bs_mem_free(bulk[i]);
    for (int s = 0; s < d->mem_ntag && d->mem_tag; s++)
        free(d->mem_tag[s]);
    free(d->mem_tag);
    cJSON_Delete(d->run_json);
    memset(d, 0, sizeof *d);
}

static void write_data(rp_json *j, const rp_data *d)
{
    rpj_obj(j, NULL);
    rpj_str(j, "format", "boundsort-report-1");
    rpj_str(j, "boundsort_version", BOUNDSORT_VERSION);
    char *full = realpath(d->dir, NULL); /* the folder's own name, also for "." */
    const char *name = full ? full : d->dir, *slash = strrchr(name, '/');
    rpj_str(j, "folder", slash && slash[1] ? slash + 1 : name);
    free(full);
    rpj_arr(j, "notes");
    for (int i = 0; i < d->n_notes; i++)
        rpj_str(j, NULL, d->notes[i]);
    rpj_end_arr(j);
    rpj_obj(j, "params");
    rpj_int(j, "spikes_per_unit", d->p.spikes_per_unit);
    rpj_int(j, "n_similar", d->p.n_similar);
    rpj_end_obj(j);
    rp_emit_units(j, d);
    rp_emit_tables(j, d);
    rp_emit_templates(j, d);
    rp_emit_spikes(j, d);
    rp_emit_drift(j, d);
    rp_emit_traces(j, d);
    rp_emit_run(j, d);
    rpj_end_obj(j);
}

/* Write `len` bytes of the template from `s`, replacing the markers. */
static void write_page(FILE *fp, const rp_data *d)
{
    const char *html = (const char *)bs_web_report_html;
    static const char *const markers[] = {"<!--@CSS@-->", "<!--@DATA@-->", "<!--@JS@-->"};
    const char *s = html;
    for (;;) {
        const char *next = NULL;
        int which = -1;
        for (int m = 0; m < 3; m++) {
            const char *p = strstr(s, markers[m]);
            if (p && (!next || p < next)) {
                next = p;
                which = m;
            }
        }
        if (!next) {
            fputs(s, fp);
            return;
        }
        fwrite(s, 1, (size_t)(next - s), fp);
        s = next + strlen(markers[which]);
        if (which == 0) {
            fputs("<style>\n", fp);
            fwrite(bs_web_report_css, 1, bs_web_report_css_len, fp);
            fputs("</style>", fp);
        } else if (which == 1) {
            fputs("<script id=\"bs-data\" type=\"application/json\">", fp);
            rp_json j = {.fp = fp};
            write_data(&j, d);
            fputs("</script>", fp);
        } else {
            fputs("<script>\n", fp);
            fwrite(bs_web_plot_js, 1, bs_web_plot_js_len, fp);
            fputs("\n", fp);
            fwrite(bs_web_report_js, 1, bs_web_report_js_len, fp);
            fputs("</script>", fp);
        }
    }
}

bs_status bs_report_check_params(const bs_report_params *p)
{
    if (p->spikes_per_unit < 10 || p->spikes_per_unit > 100000)
        return bs_error(BS_ERR_USAGE, "--spikes-per-unit: expected 10 to 100000, got %d", p->spikes_per_unit);
    if (p->split_max_spikes < 0 || p->split_max_spikes > 100000000)
        return bs_error(BS_ERR_USAGE, "--split-spikes: expected 0 to 100000000, got %lld",
                        (long long)p->split_max_spikes);
    if (p->trace_stretches < 0 || p->trace_stretches > RP_TRACE_MAX_STRETCHES)
        return bs_error(BS_ERR_USAGE, "--traces: expected 0 to %d, got %d", RP_TRACE_MAX_STRETCHES,
                        p->trace_stretches);
    if (!(p->trace_ms >= 10) || !(p->trace_ms <= 2000))
        return bs_error(BS_ERR_USAGE, "--trace-ms: expected 10 to 2000, got %g", p->trace_ms);
    if (p->n_similar < 0 || p->n_similar > 50)
        return bs_error(BS_ERR_USAGE, "--similar: expected 0 to 50, got %d", p->n_similar);
    if (p->drift_time_bins < 10 || p->drift_time_bins > 10000 || p->drift_depth_bins < 10 ||
        p->drift_depth_bins > 10000)
        return bs_error(BS_ERR_USAGE, "drift map bins: expected 10 to 10000 each, got %d x %d", p->drift_time_bins,
                        p->drift_depth_bins);
    return BS_OK;
}

static bs_status gather(rp_data *d)
{
    BS_TRY(rp_load_units(d));
    BS_TRY(rp_load_tables(d));
    BS_TRY(rp_load_templates(d));
    BS_TRY(rp_find_similar(d));
    BS_TRY(rp_drift_setup(d));
    BS_TRY(rp_traces_setup(d));
    BS_TRY(rp_spike_pass(d));
    BS_TRY(rp_drift_load(d));
    BS_TRY(rp_traces_load(d));
    return rp_load_run(d);
}

bs_status bs_report_write(const char *dir, const char *html_path, const bs_report_params *p,
                          bs_report_summary *summary)
{
    BS_TRY(bs_report_check_params(p));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: not a folder (expected the output folder of boundsort sort)", dir);
    char path[4200];
    if (!html_path) {
        BS_TRY(bs_path_join(path, sizeof path, dir, "report.html"));
        html_path = path;
    }
    rp_data d;
    memset(&d, 0, sizeof d);
    d.dir = dir;
    d.p = *p;
    bs_status st = gather(&d);
    if (st == BS_OK) {
        bs_atomic_file f;
        st = bs_atomic_open(&f, html_path);
        if (st == BS_OK) {
            write_page(f.fp, &d);
            st = bs_atomic_commit(&f);
        }
    }
    if (st == BS_OK && summary) {
        uint64_t bytes = 0;
        bs_file_size(html_path, &bytes);
        summary->n_spikes = d.n_spikes;
        summary->n_units = d.n_units;
        summary->n_ccg_pairs = d.n_pairs;
        summary->html_bytes = bytes;
        summary->n_notes = d.n_notes;
    }
    for (int i = 0; st == BS_OK && i < d.n_notes; i++)
        bs_log_info("report: note: %s", d.notes[i]);
    rp_free(&d);
    return st;
}
