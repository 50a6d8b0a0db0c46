/*
 * test_mem.c - the memory accountant: exact peaks per tag and device, budget
 * refusal without a crash, no leak, size parsing.
 */
#include "test.h"

#include "mem/mem.h"

int main(void)
{
    CHECK(bs_mem_current(BS_DEV_HOST) == 0);
    void *a = bs_mem_alloc("stage/a", 1000);
    void *b = bs_mem_alloc("stage/b", 3000);
    CHECK(a && b);
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    CHECK(bs_mem_current(BS_DEV_HOST) == 4000);
    CHECK(bs_mem_size(b) == 3000);
    bs_mem_free(a);
    void *c = bs_mem_alloc("stage/a", 500);
    CHECK(bs_mem_tag_peak("stage/a", BS_DEV_HOST) == 1000);
    CHECK(bs_mem_tag_current("stage/a", BS_DEV_HOST) == 500);
    CHECK(bs_mem_peak(BS_DEV_HOST) == 4000);
    CHECK(bs_mem_current(BS_DEV_HOST) == 3500);

    /* realloc keeps the tag and the content */
    unsigned char *r = bs_mem_alloc("stage/r", 10);
    for (int i = 0; i < 10; i++)
        r[i] = (unsigned char)i;
    r = bs_mem_realloc(r, "ignored", 20);
    CHECK(r && r[9] == 9 && bs_mem_tag_current("stage/r", BS_DEV_HOST) == 20);
    bs_mem_free(r);

    /* budget: 5000 bytes; 3500 in use; 2000 more must fail cleanly */
    bs_mem_set_budget(BS_DEV_HOST, 5000);
    void *d = bs_mem_alloc("stage/too-big", 2000);
    CHECK(d == NULL);
    CHECK(strstr(bs_last_error(), "stage/too-big") != NULL);
    CHECK(bs_mem_current(BS_DEV_HOST) == 3500);
    void *e = bs_mem_alloc("stage/fits", 1500);
    CHECK(e != NULL);
    CHECK(bs_mem_peak(BS_DEV_HOST) == 5000);
    CHECK(bs_mem_calloc("stage/overflow", SIZE_MAX / 2, 4) == NULL);
    bs_mem_free(e);
    bs_mem_set_budget(BS_DEV_HOST, 0);

    /* GPU memory tracked from elsewhere, with its own budget */
    bs_mem_set_budget(BS_DEV_GPU, 1 << 20);
    CHECK(bs_mem_track(BS_DEV_GPU, "match/table", 1 << 19) == BS_OK);
    CHECK(bs_mem_track(BS_DEV_GPU, "match/scores", 1 << 20) == BS_ERR_MEMORY);
    CHECK(bs_mem_peak(BS_DEV_GPU) == (1 << 19));
    bs_mem_untrack(BS_DEV_GPU, "match/table", 1 << 19);

    /* reset peaks to current */
    bs_mem_reset_peaks();
    CHECK(bs_mem_peak(BS_DEV_HOST) == 3500);

    /* the trace records allocs and frees as JSON lines */
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.jsonl", test_tmpdir());
    FILE *trace = fopen(path, "w");
    bs_mem_set_trace(trace);
    void *t = bs_mem_alloc("trace/x", 77);
    bs_mem_free(t);
    bs_mem_set_trace(NULL);
    fclose(trace);
    trace = fopen(path, "r");
    char line[512];
    int n_alloc = 0, n_free = 0;
    while (fgets(line, sizeof line, trace)) {
        n_alloc += strstr(line, "\"op\":\"alloc\",\"tag\":\"trace/x\",\"bytes\":77") != NULL;
        n_free += strstr(line, "\"op\":\"free\",\"tag\":\"trace/x\",\"bytes\":77") != NULL;
    }
    fclose(trace);
    CHECK(n_alloc == 1 && n_free == 1);

    bs_mem_free(b);
    bs_mem_free(c);
    bs_mem_print_table(stdout);
    CHECK(bs_mem_current(BS_DEV_HOST) == 0);
    CHECK(bs_mem_live_blocks() == 0);

    size_t bytes;
    CHECK(bs_mem_parse_size("4G", &bytes) == BS_OK && bytes == 4ull << 30);
    CHECK(bs_mem_parse_size("512M", &bytes) == BS_OK && bytes == 512ull << 20);
    CHECK(bs_mem_parse_size("1.5GiB", &bytes) == BS_OK && bytes == 3ull << 29);
    CHECK(bs_mem_parse_size("1000", &bytes) == BS_OK && bytes == 1000);
    CHECK(bs_mem_parse_size("4X", &bytes) == BS_ERR_USAGE);
    CHECK(bs_mem_parse_size("-1G", &bytes) == BS_ERR_USAGE);
    CHECK(bs_mem_parse_size("", &bytes) == BS_ERR_USAGE);
    TEST_MAIN_END();
}
