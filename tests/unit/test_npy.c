/*
 * test_npy.c - .npy writer and reader: round trips, a streamed file whose row
 * count is rewritten at close, 64-byte alignment, and malformed headers.
 */
#include "test.h"
#include <unistd.h>

#include "io/npy.h"
#include "mem/mem.h"

static bs_status parse(const char *dict, bs_npy_header *h)
{
    uint8_t buf[256] = "\x93NUMPY\x01\x00";
    size_t n = strlen(dict);
    buf[8] = (uint8_t)n;
    buf[9] = 0;
    memcpy(buf + 10, dict, n);
    return bs_npy_parse_header(buf, 10 + n, "test.npy", h);
}

int main(void)
{
    const char *dir = test_tmpdir();
    char path[4200];
    bs_npy_header h;

    /* whole-array round trip */
    float m[2][3] = {{1, 2, 3}, {4, 5, 6.5f}};
    int64_t shape[2] = {2, 3};
    snprintf(path, sizeof path, "%s/m.npy", dir);
    CHECK(bs_npy_save(path, BS_NPY_F32, 2, shape, m) == BS_OK);
    float *back = NULL;
    CHECK(bs_npy_load_expect(path, "test/npy", BS_NPY_F32, 2, &h, (void **)&back) == BS_OK);
    CHECK(h.ndim == 2 && h.shape[0] == 2 && h.shape[1] == 3 && h.data_offset % 64 == 0);
    CHECK(back && back[5] == 6.5f && back[0] == 1.0f);
    bs_mem_free(back);
    CHECK(bs_npy_load_expect(path, "test/npy", BS_NPY_I64, 2, &h, (void **)&back) == BS_ERR_INPUT);

    /* streaming writer: rows appended, count rewritten */
    snprintf(path, sizeof path, "%s/stream.npy", dir);
    bs_npy_writer w;
    CHECK(bs_npy_writer_open(&w, path, BS_NPY_I64, 1, NULL) == BS_OK);
    for (int64_t i = 0; i < 100000; i += 1000) {
        int64_t rows[1000];
        for (int j = 0; j < 1000; j++)
            rows[j] = i + j;
        CHECK(bs_npy_writer_append(&w, rows, 1000) == BS_OK);
    }
    CHECK(bs_npy_writer_close(&w) == BS_OK);
    int64_t *times = NULL;
    CHECK(bs_npy_load_expect(path, "test/npy", BS_NPY_I64, 1, &h, (void **)&times) == BS_OK);
    CHECK(h.shape[0] == 100000 && times && times[99999] == 99999);
    bs_mem_free(times);

    /* an empty streamed array is valid */
    snprintf(path, sizeof path, "%s/empty.npy", dir);
    int64_t row3[1] = {3};
    CHECK(bs_npy_writer_open(&w, path, BS_NPY_F32, 2, row3) == BS_OK);
    CHECK(bs_npy_writer_close(&w) == BS_OK);
    CHECK(bs_npy_read_header(path, &h) == BS_OK && h.shape[0] == 0 && h.shape[1] == 3);

    /* the files numpy would write parse */
    CHECK(parse("{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }", &h) == BS_OK);
    CHECK(h.dtype == BS_NPY_I64 && h.ndim == 1 && h.shape[0] == 7);
    CHECK(parse("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &h) == BS_OK && h.ndim == 0);
    CHECK(parse("{'descr':'<f8','fortran_order':False,'shape':(2, 3, 4)}", &h) == BS_OK && h.shape[2] == 4);

    /* malformed headers are refused with a message */
    CHECK(parse("{'descr': '>f4', 'fortran_order': False, 'shape': (7,), }", &h) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "unsupported descr") != NULL);
    CHECK(parse("{'descr': '<f4', 'fortran_order': True, 'shape': (7, 2), }", &h) == BS_ERR_INPUT);
    CHECK(parse("{'descr': '<f4', 'shape': (7,), }", &h) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "fortran_order") != NULL);
    CHECK(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (7,-1), }", &h) == BS_ERR_INPUT);
    CHECK(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", &h) ==
          BS_ERR_INPUT);
    CHECK(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (7,", &h) == BS_ERR_INPUT);
    CHECK(parse("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (7,), }", &h) == BS_ERR_INPUT);
    CHECK(parse("['descr']", &h) == BS_ERR_INPUT);
    uint8_t bad[16] = "\x93NUMPX\x01\x00\x04\x00{}  ";
    CHECK(bs_npy_parse_header(bad, sizeof bad, "bad.npy", &h) == BS_ERR_INPUT);
    uint8_t trunc[12] = "\x93NUMPY\x01\x00\xff\x00{'";
    CHECK(bs_npy_parse_header(trunc, sizeof trunc, "trunc.npy", &h) == BS_ERR_INPUT);
    CHECK(strstr(bs_last_error(), "truncated") != NULL);

    /* a file shorter than its shape declares */
    snprintf(path, sizeof path, "%s/short.npy", dir);
    int64_t s1[1] = {4};
    int32_t vals[4] = {1, 2, 3, 4};
    CHECK(bs_npy_save(path, BS_NPY_I32, 1, s1, vals) == BS_OK);
    CHECK(truncate(path, 64 + 8) == 0);
    CHECK(bs_npy_read_header(path, &h) == BS_ERR_INPUT && strstr(bs_last_error(), "truncated"));

    CHECK(bs_mem_live_blocks() == 0);
    TEST_MAIN_END();
}
