/*
 * cmd_export_nwb.c - `boundsort export-nwb OUT [--input-nwb IN] [--series
 * NAME] [-o FILE.nwb] [--spike-buffer N] [metadata options]`: the units of the Phy folder OUT as
 * an NWB Units table (src/export/nwb_export.h), in a copy of the NWB
 * recording IN or in a new file. Without --input-nwb, OUT/source.json (when
 * `sort` wrote one) names the recording: an NWB one is used as IN (its
 * "stream" or "series" as the series). Exit codes: 0, 1 usage, 2 bad input.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../export/nwb_export.h"
#include "cli.h"

static const char *usage_text =
    "usage: boundsort export-nwb OUT [--input-nwb IN] [--series NAME] [-o FILE.nwb] [--spike-buffer N]\n"
    "                            [--subject-json F] [--experimenter NAME ...] [--institution X] [--lab X]\n"
    "                            [--experiment-description X] [--session-description X] [--keywords A,B]\n"
    "\n"
    "Writes the sorted units of the Phy folder OUT into an NWB file (Units table: spike times in seconds,\n"
    "mean waveforms in volts on each unit's electrodes, quality metrics and labels as columns).\n"
    "  --input-nwb IN    the NWB recording that was sorted: the units go into a copy of it\n"
    "                    (default: the NWB recording named by OUT/source.json, else a new file)\n"
    "  --series NAME     its ElectricalSeries, when it has several\n"
    "  -o FILE.nwb       output file (default OUT/units.nwb)\n"
    "  --spike-buffer N  spikes held in memory at once while grouping them by unit (default 4194304)\n"
    "The file's metadata (/general; nwbinspector reports a file without a subject as CRITICAL). Refused\n"
    "where a copied input already has the field:\n"
    "  --subject-json F  a JSON object of NWB Subject fields (strings): subject_id, species (\"Mus musculus\"),\n"
    "                    sex (M, F, U, O), age (ISO 8601 duration: \"P90D\"), description, genotype, strain,\n"
    "                    weight, date_of_birth\n"
    "  --experimenter NAME  \"Last, First\"; repeat for several\n"
    "  --institution X, --lab X, --experiment-description X, --keywords A,B (comma-separated)\n"
    "  --session-description X  a new file's (default: where the units came from)\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "boundsort export-nwb: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return BS_ERR_USAGE;
}

/* The NWB recording named by OUT/source.json, if any (strings copied). */
static void from_source_json(const char *dir, char *in, size_t in_len, char *series, size_t series_len)
{
    char path[4200], *text = NULL;
    size_t len;
    struct stat sb;
    if (bs_path_join(path, sizeof path, dir, "source.json") != BS_OK || stat(path, &sb) != 0 ||
        bs_read_text_file(path, (size_t)1 << 20, &text, &len) != BS_OK)
        return;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "nwb") == 0) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "paths");
        if (cJSON_IsArray(p))
            p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p))
            p = cJSON_GetObjectItemCaseSensitive(j, "path");
        if (cJSON_IsString(p))
            snprintf(in, in_len, "%s", p->valuestring);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "stream");
        if (!cJSON_IsString(s))
            s = cJSON_GetObjectItemCaseSensitive(j, "series");
        if (cJSON_IsString(s) && s->valuestring[0])
            snprintf(series, series_len, "%s", s->valuestring);
    }
    cJSON_Delete(j);
}

int bs_cmd_export_nwb(int argc, char **argv)
{
    if (bs_cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return BS_OK;
    }
    bs_nwb_export_opts o = {0};
    bs_nwb_general meta = {0};
    const char *experimenters[16];
    meta.experimenters = experimenters;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        char msg[256];
        int r = bs_cli_next_arg(argc, argv, &i, "sorting folder", &o.phy_dir, &v, msg, sizeof msg, usage_text);
        if (r < 0)
            return usage_error("%s", msg);
        if (r == BS_CLI_POSITIONAL)
            continue;
        long long n;
        if (strcmp(a, "--input-nwb") == 0)
            o.input_nwb = v;
        else if (strcmp(a, "--series") == 0)
            o.series = v;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0)
            o.out_path = v;
        else if (strcmp(a, "--subject-json") == 0)
            meta.subject_json = v;
        else if (strcmp(a, "--experimenter") == 0) {
            if (meta.n_experimenters == 16)
                return usage_error("%s", "--experimenter: at most 16");
            experimenters[meta.n_experimenters++] = v;
        } else if (strcmp(a, "--institution") == 0)
            meta.institution = v;
        else if (strcmp(a, "--lab") == 0)
            meta.lab = v;
        else if (strcmp(a, "--experiment-description") == 0)
            meta.experiment_description = v;
        else if (strcmp(a, "--session-description") == 0)
            meta.session_description = v;
        else if (strcmp(a, "--keywords") == 0)
            meta.keywords = v;
        else if (strcmp(a, "--spike-buffer") == 0) {
            if (!bs_cli_parse_long(v, 1, LLONG_MAX / 16, &n))
                return usage_error("--spike-buffer: expected a number of spikes >= 1, got '%s'", v);
            o.spike_buffer = (size_t)n;
        } else
            return usage_error("unknown option %s", a);
    }
    if (!o.phy_dir)
        return usage_error("%s", "missing the sorting folder OUT");
    o.meta = &meta;
    char in[4096] = "", series[1024] = "";
    if (!o.input_nwb) {
        from_source_json(o.phy_dir, in, sizeof in, series, sizeof series);
        if (in[0]) {
            o.input_nwb = in;
            if (!o.series && series[0])
                o.series = series;
        }
    }
    bs_nwb_export_summary s;
    bs_status st = bs_nwb_export(&o, &s);
    if (st != BS_OK)
        return bs_cli_fail(st);
    printf("%s: %lld units, %lld spikes, %d quality columns%s%s\n", s.path, (long long)s.n_units,
           (long long)s.n_spikes, s.n_quality_columns, o.input_nwb ? ", in a copy of " : " (new file)",
           o.input_nwb ? o.input_nwb : "");
    return BS_OK;
}
