/*
 * test_progress.c - progress line text (bs_progress_format): bar fill,
 * percentage, counts, elapsed time and the ETA (elapsed × remaining / done),
 * no ETA at 0 or at the end, and the bar clipped at 100%.
 */
#include <string.h>

#include "../../src/common/progress.h"
#include "test.h"

int main(void)
{
    bs_progress p;
    bs_progress_start(&p, "detect", "batches", 20);
    p.t0_s = 100.0;
    char line[256];
    bs_progress_format(&p, 5, 110.0, 10, line, sizeof line);
    CHECK_MSG(strcmp(line, "detect    [##........]  25%  5/20 batches  10.0 s  ETA 30.0 s") == 0, "got \"%s\"", line);
    bs_progress_format(&p, 0, 100.5, 0, line, sizeof line);
    CHECK_MSG(strcmp(line, "detect      0%  0/20 batches  0.5 s") == 0, "got \"%s\"", line);
    bs_progress_format(&p, 20, 140.0, 4, line, sizeof line);
    CHECK_MSG(strcmp(line, "detect    [####] 100%  20/20 batches  40.0 s") == 0, "got \"%s\"", line);
    bs_progress_format(&p, 25, 140.0, 4, line, sizeof line); /* over the total: clipped */
    CHECK(strstr(line, "[####] 100%") != NULL);
    /* a silenced progress (total 0) writes nothing and does not crash */
    bs_progress_start(&p, "x", "items", 0);
    CHECK(p.active == 0);
    bs_progress_update(&p, 1);
    bs_progress_finish(&p);
    TEST_MAIN_END();
}
