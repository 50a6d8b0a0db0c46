/*
 * test_probe.c - probe validation catches each defect with a message; the
 * probeinterface JSON writer; the shanks in use (bs_probe_shanks_in_use).
 */
#include "test.h"

#include "common/fileio.h"
#include "io/probe.h"
#include "io/probe_json.h"
#include "mem/mem.h"

static void line4(bs_probe *p)
{
    bs_probe_alloc(p, 4);
    for (int i = 0; i < 4; i++) {
        p->column[i] = i;
        p->x_um[i] = 0;
        p->y_um[i] = 20.0 * i;
    }
}

int main(void)
{
    bs_probe p;
    line4(&p);
    CHECK(bs_probe_validate(&p, 4, "p") == BS_OK);
    CHECK(bs_probe_validate(&p, 3, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "data column 3"));
    p.y_um[2] = NAN;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "non-finite"));
    p.y_um[2] = 20.0;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "share the position"));
    p.y_um[2] = 40.0;
    p.column[3] = 0;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "same data column"));
    p.column[3] = 3;
    p.shank[3] = 1;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "n_shanks"));
    p.n_shanks = 2;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_OK);
    char path[4200];
    snprintf(path, sizeof path, "%s/probe.json", test_tmpdir());
    CHECK(bs_probe_write_json(&p, path) == BS_OK);
    char *text = NULL;
    CHECK(bs_read_text_file(path, 1 << 20, &text, NULL) == BS_OK);
    CHECK(text && strstr(text, "\"device_channel_indices\"") && strstr(text, "probeinterface"));
    CHECK(text && strstr(text, "\"contact_plane_axes\"")); /* probeinterface refuses a probe without it */
    free(text);
    /* the ADC sampling delays travel as contact_annotations.inter_sample_shift, and come back */
    double d[4] = {0, 0.5, 0.25, 0.875};
    CHECK(bs_probe_set_adc_shift(&p, d, "p") == BS_OK);
    CHECK(bs_probe_write_json(&p, path) == BS_OK);
    bs_probe q;
    int req;
    CHECK(bs_probe_json_load(path, 0, &q, &req) == BS_OK);
    CHECK(q.n_chan == 4 && q.adc_shift != NULL);
    for (int i = 0; i < 4 && q.adc_shift; i++)
        CHECK(q.adc_shift[i] == (float)d[i]);
    bs_probe_free(&q);
    d[3] = 1.0; /* a whole sample is not a sampling skew */
    CHECK(bs_probe_set_adc_shift(&p, d, "p") == BS_ERR_INPUT && strstr(bs_last_error(), "expected 0 <= d < 1"));
    const char *bad = "{\"probes\": [{\"contact_positions\": [[0, 0], [0, 20]], \"device_channel_indices\": [0, 1],"
                      " \"contact_annotations\": {\"inter_sample_shift\": [0.5]}}]}";
    CHECK(bs_probe_json_parse(bad, strlen(bad), "bad.json", 0, &q, &req) == BS_ERR_INPUT &&
          strstr(bs_last_error(), "inter_sample_shift: expected 2 numbers"));
    const char *unconnected = "{\"probes\": [{\"contact_positions\": [[0, 0], [0, 20], [0, 40]], "
                              "\"device_channel_indices\": [1, -1, 0], "
                              "\"contact_annotations\": {\"inter_sample_shift\": [0.5, 0.9, 0.25]}}]}";
    CHECK(bs_probe_json_parse(unconnected, strlen(unconnected), "u.json", 0, &q, &req) == BS_OK);
    CHECK(q.n_chan == 2 && q.adc_shift && q.adc_shift[0] == 0.5f && q.adc_shift[1] == 0.25f);
    bs_probe_free(&q);
    /* shanks in use: the distinct shanks holding a channel, not n_shanks */
    int ids[4] = {-1, -1, -1, -1};
    CHECK(bs_probe_shanks_in_use(&p, ids) == 2 && ids[0] == 0 && ids[1] == 1);
    for (int i = 0; i < 4; i++) /* channels on shanks 1 and 2 only (a SpikeGLX probe keeps physical ids) */
        p.shank[i] = i < 2 ? 1 : 2;
    p.n_shanks = 3;
    CHECK(bs_probe_validate(&p, 4, "p") == BS_OK);
    CHECK(bs_probe_shanks_in_use(&p, ids) == 2 && ids[0] == 1 && ids[1] == 2);
    CHECK(bs_probe_shanks_in_use(&p, NULL) == 2);
    bs_probe_free(&p);
    CHECK(bs_probe_alloc(&p, 0) == BS_ERR_INPUT);
    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
