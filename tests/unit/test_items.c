/* SPDX-License-Identifier: Apache-2.0 */
/* test_items.c — safetensors / npz item parsers and writers: the vectors
 * (11, 40, 41, 42, 43, tool_npz_example.txt) parse to the documented tensors and
 * are reproduced byte for byte by the writers; hostile items fail cleanly. */
#include "testutil.h"
#include "payload/items.h"

#define CAP 16

static float f32_at(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static uint8_t *vec(const char *name, size_t *n) { return tu_read_vector(name, n); }

/* Parses a malloc'd exact-size copy (so ASan sees any over-read). */
static int st_parse_copy(const uint8_t *p, size_t n, struct item_tensor *t, size_t *cnt, struct cj_err *e)
{
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, p, n);
    int rc = items_st_parse(c, n, t, CAP, cnt, e);
    for (size_t i = 0; rc == 0 && i < *cnt; i++) assert_true(t[i].data_off + t[i].data_len <= n);
    free(c);
    return rc;
}

static int npz_parse_copy(const uint8_t *p, size_t n, unsigned fl, struct item_tensor *t, size_t *cnt,
                          struct cj_err *e)
{
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, p, n);
    int rc = items_npz_parse(c, n, fl, t, CAP, cnt, e);
    for (size_t i = 0; rc == 0 && i < *cnt; i++) {
        assert_true(t[i].member_off + t[i].member_len <= n);
        if (t[i].is_npy) {
            assert_true(t[i].data_off >= t[i].member_off);
            assert_true(t[i].data_off + t[i].data_len <= t[i].member_off + t[i].member_len);
        }
    }
    free(c);
    return rc;
}

/* ---- shared ---------------------------------------------------------------------- */

static void test_crc32_and_sizes(void **state)
{
    (void)state;
    assert_int_equal(items_crc32(0, "123456789", 9), 0xcbf43926u);
    assert_int_equal(items_crc32(0, "", 0), 0);
    /* incremental == one shot */
    assert_int_equal(items_crc32(items_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
    assert_int_equal(items_st_dtype_size("F32"), 4);
    assert_int_equal(items_st_dtype_size("BF16"), 2);
    assert_int_equal(items_st_dtype_size("BOOL"), 1);
    assert_int_equal(items_st_dtype_size("I64"), 8);
    assert_int_equal(items_st_dtype_size("f32"), 0);
    assert_int_equal(items_npy_descr_size("<f4"), 4);
    assert_int_equal(items_npy_descr_size("|b1"), 1);
    assert_int_equal(items_npy_descr_size("<f8"), 8);
    assert_int_equal(items_npy_descr_size("<U3"), 12);
    assert_int_equal(items_npy_descr_size("<M8[ns]"), 8);
    assert_int_equal(items_npy_descr_size("|O"), 0);
    assert_int_equal(items_npy_descr_size("<f"), 0);
    assert_int_equal(items_npy_descr_size(""), 0);
}

/* ---- npz vectors ------------------------------------------------------------------ */

static void check_allow_pickle(const struct item_tensor *t)
{
    assert_non_null(t);
    assert_true(t->is_npy);
    assert_string_equal(t->dtype, "|b1");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nelem, 1);
    assert_int_equal(t->member_len, 129);
    assert_int_equal(t->data_off - t->member_off, 128);
    assert_int_equal(t->data_len, 1);
    assert_int_equal(t->crc32, 0xa4ff1d14u);
}

/* Writes one float32 member (plus numpy 1.24's allow_pickle) and compares. */
static void check_npz_rewrite(const char *vname, const char *key, int ndim, const uint64_t *shape,
                              const void *data, size_t len)
{
    size_t n, wn;
    uint8_t *v = vec(vname, &n), *w;
    struct item_in in = {.name = key, .dtype = "<f4", .ndim = ndim, .shape = shape, .data = data, .len = len};
    struct cj_err e = {0};
    assert_int_equal(items_npz_write(&in, 1, ITEMS_NPZ_NUMPY124, &w, &wn, &e), 0);
    assert_int_equal(wn, n);
    assert_memory_equal(w, v, n);
    free(w);
    free(v);
}

static void test_npz_vector_11(void **state)
{
    (void)state;
    size_t n, cnt;
    uint8_t *p = vec("11_download_item_T0.npz", &n);
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(n, 523);
    assert_int_equal(npz_parse_copy(p, n, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 2);
    check_allow_pickle(items_find(t, cnt, "allow_pickle"));
    const struct item_tensor *t0 = items_find(t, cnt, "T0");
    assert_non_null(t0);
    assert_string_equal(t0->dtype, "<f4");
    assert_int_equal(t0->ndim, 1);
    assert_int_equal(t0->shape[0], 2);
    assert_int_equal(t0->data_len, 8);
    static const uint8_t zeros[8];
    assert_memory_equal(p + t0->data_off, zeros, 8);
    free(p);
    uint64_t shape[] = {2};
    check_npz_rewrite("11_download_item_T0.npz", "T0", 1, shape, zeros, 8);
}

static void test_npz_vector_40(void **state)
{
    (void)state;
    size_t n, cnt;
    uint8_t *p = vec("40_item_T0.npz", &n);
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(n, 539);
    assert_int_equal(npz_parse_copy(p, n, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 2);
    assert_string_equal(t[0].name, "allow_pickle");   /* numpy < 2 writes it first */
    check_allow_pickle(&t[0]);
    const struct item_tensor *t0 = items_find(t, cnt, "T0");
    assert_non_null(t0);
    assert_true(t0->is_npy);
    assert_false(t0->fortran_order);
    assert_string_equal(t0->dtype, "<f4");
    assert_int_equal(t0->elem_size, 4);
    assert_int_equal(t0->ndim, 2);
    assert_int_equal(t0->shape[0], 2);
    assert_int_equal(t0->shape[1], 3);
    assert_int_equal(t0->nelem, 6);
    assert_int_equal(t0->member_len, 152);
    assert_int_equal(t0->data_off - t0->member_off, 128);   /* data offset 128 inside the member */
    assert_int_equal(t0->data_len, 24);
    assert_int_equal(t0->crc32, 0x2a00e94fu);
    /* the NPY header text as README states it */
    const char *hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_memory_equal(p + t0->member_off + 10, hdr, strlen(hdr));
    float want[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++) assert_true(f32_at(p + t0->data_off + 4 * i) == want[i]);
    free(p);
    uint64_t shape[] = {2, 3};
    check_npz_rewrite("40_item_T0.npz", "T0", 2, shape, want, sizeof want);
}

static void test_npz_vector_41(void **state)
{
    (void)state;
    size_t n, cnt;
    uint8_t *p = vec("41_item_T1.npz", &n);
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(n, 523);
    assert_int_equal(npz_parse_copy(p, n, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 2);
    check_allow_pickle(items_find(t, cnt, "allow_pickle"));
    const struct item_tensor *t1 = items_find(t, cnt, "T1");
    assert_non_null(t1);
    assert_string_equal(t1->dtype, "<f4");
    assert_int_equal(t1->ndim, 1);
    assert_int_equal(t1->shape[0], 2);
    assert_int_equal(t1->data_off - t1->member_off, 128);
    assert_int_equal(t1->data_len, 8);
    assert_true(f32_at(p + t1->data_off) == 0.5f);
    assert_true(f32_at(p + t1->data_off + 4) == -0.5f);
    free(p);
    uint64_t shape[] = {2};
    float data[] = {0.5f, -0.5f};
    check_npz_rewrite("41_item_T1.npz", "T1", 1, shape, data, sizeof data);
}

static void test_npz_tool_example(void **state)
{
    (void)state;
    /* tool_npz_example.txt: numpy 1.24's npz of a 2x2 float32 [1,2,3,4] is 531 bytes */
    float data[] = {1, 2, 3, 4};
    uint64_t shape[] = {2, 2};
    struct item_in in = {.name = "T0", .dtype = "<f4", .ndim = 2, .shape = shape, .data = data, .len = 16};
    uint8_t *w;
    size_t wn, cnt, xn;
    struct cj_err e = {0};
    assert_int_equal(items_npz_write(&in, 1, ITEMS_NPZ_NUMPY124, &w, &wn, &e), 0);
    assert_int_equal(wn, 531);
    uint8_t *x = tu_hex("504b0304 1400 0000 0000 0000 2100 141dffa4 81000000 81000000 1000 1400", &xn);
    assert_memory_equal(w, x, xn);   /* ver=20 flag=0 stored crc=0xa4ff1d14 sizes 0x81 name 16 extra 20 */
    free(x);
    assert_memory_equal(w + 30, "allow_pickle.npy", 16);
    x = tu_hex("0100100081000000000000008100000000000000", &xn);
    assert_memory_equal(w + 46, x, xn);
    free(x);
    struct item_tensor t[CAP];
    assert_int_equal(npz_parse_copy(w, wn, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 2);
    assert_int_equal(t[0].member_len, 129);
    assert_int_equal(t[1].member_len, 144);
    const uint8_t *m = w + t[1].member_off;
    assert_memory_equal(m, "\x93NUMPY\x01\x00", 8);
    assert_int_equal(m[8] | m[9] << 8, 118);
    const char *hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    assert_memory_equal(m + 10, hdr, strlen(hdr));
    for (size_t i = 10 + strlen(hdr); i < 127; i++) assert_int_equal(m[i], ' ');
    assert_int_equal(m[127], '\n');
    assert_int_equal(t[1].data_off - t[1].member_off, 128);
    x = tu_hex("0000803f000000400000404000008040", &xn);
    assert_memory_equal(w + t[1].data_off, x, xn);
    free(x);
    free(w);
}

/* Several members, without the numpy-1.24 extra, other dtypes, fortran order on read. */
static void test_npz_roundtrip(void **state)
{
    (void)state;
    double d[3] = {1.5, -2.5, 1e300};
    uint8_t u[24];
    for (int i = 0; i < 24; i++) u[i] = (uint8_t)i;
    uint64_t s1[] = {3}, s2[] = {2, 3, 4}, s3[] = {0, 5};
    struct item_in in[] = {
        {.name = "a", .dtype = "<f8", .ndim = 1, .shape = s1, .data = d, .len = 24},
        {.name = "layer.0.weight", .dtype = "|u1", .ndim = 3, .shape = s2, .data = u, .len = 24},
        {.name = "empty", .dtype = "<f4", .ndim = 2, .shape = s3, .data = NULL, .len = 0},
    };
    uint8_t *w;
    size_t wn, cnt;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(items_npz_write(in, 3, 0, &w, &wn, &e), 0);
    assert_int_equal(npz_parse_copy(w, wn, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct item_tensor *x = items_find(t, cnt, in[i].name);
        assert_non_null(x);
        assert_string_equal(x->dtype, in[i].dtype);
        assert_int_equal(x->ndim, in[i].ndim);
        for (int k = 0; k < x->ndim; k++) assert_int_equal(x->shape[k], in[i].shape[k]);
        assert_int_equal(x->data_len, in[i].len);
        assert_int_equal((x->data_off - x->member_off) % 64, 0);
        if (in[i].len) assert_memory_equal(w + x->data_off, in[i].data, in[i].len);
    }
    free(w);
    /* zero members: an empty ZIP, just the end record */
    assert_int_equal(items_npz_write(NULL, 0, 0, &w, &wn, &e), 0);
    assert_int_equal(wn, 22);
    assert_int_equal(npz_parse_copy(w, wn, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
    assert_int_equal(cnt, 0);
    free(w);
    /* writer refusals */
    struct item_in bad = in[0];
    bad.len = 23;
    assert_true(items_npz_write(&bad, 1, 0, &w, &wn, &e) < 0);
    bad = in[0];
    bad.dtype = "|O";
    assert_true(items_npz_write(&bad, 1, 0, &w, &wn, &e) < 0);
    bad.dtype = "<f'8";
    assert_true(items_npz_write(&bad, 1, 0, &w, &wn, &e) < 0);
    struct item_in two[] = {in[0], in[0]};
    assert_true(items_npz_write(two, 2, 0, &w, &wn, &e) < 0);   /* duplicate name */
    bad = in[0];
    bad.name = "allow_pickle";
    assert_true(items_npz_write(&bad, 1, ITEMS_NPZ_NUMPY124, &w, &wn, &e) < 0);
}

/* ---- safetensors vectors ------------------------------------------------------------ */

static void test_st_vector_42(void **state)
{
    (void)state;
    size_t n, cnt, wn;
    uint8_t *p = vec("42_item_T0.safetensors", &n), *w;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(n, 88);
    assert_int_equal(p[0], 64);   /* N = 64: 58 bytes of JSON + 6 spaces */
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), 0);
    assert_int_equal(cnt, 1);
    assert_string_equal(t[0].name, "T0");
    assert_string_equal(t[0].dtype, "F32");
    assert_int_equal(t[0].ndim, 2);
    assert_int_equal(t[0].shape[0], 2);
    assert_int_equal(t[0].shape[1], 2);
    assert_int_equal(t[0].data_off, 8 + 64);   /* data_offsets [0, 16] */
    assert_int_equal(t[0].data_len, 16);
    for (int i = 0; i < 4; i++) assert_true(f32_at(p + t[0].data_off + 4 * i) == (float)(i + 1));
    /* the writer reproduces it */
    uint64_t shape[] = {2, 2};
    struct item_in in = {.name = "T0", .dtype = "F32", .ndim = 2, .shape = shape, .data = p + 72, .len = 16};
    assert_int_equal(items_st_write(&in, 1, &w, &wn, &e), 0);
    assert_int_equal(wn, n);
    assert_memory_equal(w, p, n);
    free(w);
    free(p);
}

static void test_st_vector_43(void **state)
{
    (void)state;
    size_t n, cnt, wn;
    uint8_t *p = vec("43_two_tensors.safetensors", &n), *w;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(n, 150);
    assert_int_equal(p[0], 120);
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), 0);
    assert_int_equal(cnt, 2);
    const struct item_tensor *t0 = items_find(t, cnt, "T0"), *t1 = items_find(t, cnt, "T1");
    assert_non_null(t0);
    assert_non_null(t1);
    assert_string_equal(t0->dtype, "F32");
    assert_int_equal(t0->ndim, 2);
    assert_int_equal(t0->data_off, 128);
    assert_int_equal(t0->data_len, 16);
    assert_string_equal(t1->dtype, "F16");
    assert_int_equal(t1->ndim, 1);
    assert_int_equal(t1->shape[0], 3);
    assert_int_equal(t1->data_off, 128 + 16);
    assert_int_equal(t1->data_len, 6);
    /* F16 1.0, -2.0, 0.5 */
    static const uint8_t f16[] = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38};
    assert_memory_equal(p + t1->data_off, f16, 6);
    uint64_t s0[] = {2, 2}, s1[] = {3};
    struct item_in in[] = {
        {.name = "T0", .dtype = "F32", .ndim = 2, .shape = s0, .data = p + t0->data_off, .len = 16},
        {.name = "T1", .dtype = "F16", .ndim = 1, .shape = s1, .data = f16, .len = 6},
    };
    assert_int_equal(items_st_write(in, 2, &w, &wn, &e), 0);
    assert_int_equal(wn, n);
    assert_memory_equal(w, p, n);
    free(w);
    free(p);
}

/* Key order carries no meaning: T1 before T0, metadata first, unknown fields, escapes. */
static uint8_t *st_make(const char *json, size_t datalen, size_t *n)
{
    size_t j = strlen(json);
    *n = 8 + j + datalen;
    uint8_t *b = calloc(1, *n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)j >> (8 * i));
    memcpy(b + 8, json, j);
    return b;
}

static int st_try(const char *json, size_t datalen)
{
    size_t n, cnt;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    uint8_t *b = st_make(json, datalen, &n);
    int rc = st_parse_copy(b, n, t, &cnt, &e);
    free(b);
    return rc;
}

static void test_st_order_and_forms(void **state)
{
    (void)state;
    size_t n, cnt;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    uint8_t *b = st_make(" { \"__metadata__\" : {\"format\":\"pt\",\"x\":\"{[\\\"\"} ,\n"
                         "\"T1\":{\"shape\":[3],\"data_offsets\":[16,22],\"dtype\":\"F16\",\"extra\":[1,{\"a\":null}]},"
                         "\"T\\u00e9\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                         "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[22,30]},"
                         "\"z\":{\"dtype\":\"I8\",\"shape\":[0,4],\"data_offsets\":[30,30]},"
                         "\"u\":{\"dtype\":\"X9\",\"shape\":[7],\"data_offsets\":[30,31]}}   ",
                         31, &n);
    assert_int_equal(st_parse_copy(b, n, t, &cnt, &e), 0);
    assert_int_equal(cnt, 5);
    const struct item_tensor *x = items_find(t, cnt, "T\xc3\xa9\xf0\x9f\x98\x80");
    assert_non_null(x);
    assert_int_equal(x->data_len, 16);
    x = items_find(t, cnt, "T1");
    assert_non_null(x);
    assert_int_equal(x->data_off, n - 31 + 16);
    x = items_find(t, cnt, "s");
    assert_int_equal(x->ndim, 0);
    assert_int_equal(x->nelem, 1);
    x = items_find(t, cnt, "z");
    assert_int_equal(x->nelem, 0);
    x = items_find(t, cnt, "u");
    assert_int_equal(x->elem_size, 0);   /* unknown dtype: size unchecked, span still checked */
    assert_null(items_find(t, cnt, "__metadata__"));
    free(b);
    /* an empty item is legal */
    assert_int_equal(st_try("{}", 0), 0);
    assert_int_equal(st_try("{\"__metadata__\":{}}", 0), 0);
}

/* ---- hostile ---------------------------------------------------------------------------- */

static void test_truncation_every_offset(void **state)
{
    (void)state;
    const char *names[] = {"11_download_item_T0.npz", "40_item_T0.npz", "41_item_T1.npz", "42_item_T0.safetensors",
                           "43_two_tensors.safetensors"};
    for (size_t v = 0; v < 5; v++) {
        size_t n, cnt;
        uint8_t *p = vec(names[v], &n);
        struct item_tensor t[CAP];
        struct cj_err e = {0};
        for (size_t k = 0; k < n; k++) {
            /* every proper prefix fails, as either format */
            if (st_parse_copy(p, k, t, &cnt, &e) == 0) fail_msg("%s: prefix %zu parsed as safetensors", names[v], k);
            if (npz_parse_copy(p, k, 0, t, &cnt, &e) == 0) fail_msg("%s: prefix %zu parsed as npz", names[v], k);
            /* and so does every single-byte corruption-with-truncation: dropping byte k */
            uint8_t *q = malloc(n);
            memcpy(q, p, k);
            memcpy(q + k, p + k + 1, n - k - 1);
            st_parse_copy(q, n - 1, t, &cnt, &e);   /* must not crash; spans checked inside */
            npz_parse_copy(q, n - 1, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e);
            free(q);
        }
        free(p);
    }
}

static void test_st_hostile(void **state)
{
    (void)state;
    size_t n, cnt;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    uint8_t *p = vec("42_item_T0.safetensors", &n);
    /* N larger than the file, N = 0, N over the limit, N = 2^64-1 */
    p[0] = 81;
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), -CJ_E_TRUNCATED);
    p[0] = 0;
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), -CJ_E_INVALID);
    p[3] = 0x10;   /* 256 MiB */
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), -CJ_E_LIMIT);
    memset(p, 0xff, 8);
    assert_int_equal(st_parse_copy(p, n, t, &cnt, &e), -CJ_E_LIMIT);
    free(p);

    const char *pre = "{\"T0\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":";
    char js[512];
    struct { const char *offs; size_t dlen; int rc; } offcases[] = {
        {"[0,16]}}", 16, 0},
        {"[0,32]}}", 16, -CJ_E_TRUNCATED},   /* past the end */
        {"[16,32]}}", 16, -CJ_E_TRUNCATED},
        {"[-1,15]}}", 16, -CJ_E_INVALID},    /* negative */
        {"[16,0]}}", 16, -CJ_E_INVALID},     /* decreasing */
        {"[0,12]}}", 16, -CJ_E_INVALID},     /* shape needs 16 */
        {"[0,16]}}", 20, -CJ_E_INVALID},     /* gap at the end */
        {"[4,20]}}", 20, -CJ_E_INVALID},     /* gap at the start */
        {"[0,16.0]}}", 16, -CJ_E_INVALID},
        {"[0,016]}}", 16, -CJ_E_INVALID},
        {"[0,1e1]}}", 16, -CJ_E_INVALID},
        {"[0]}}", 16, -CJ_E_INVALID},
        {"[0,16,32]}}", 16, -CJ_E_INVALID},
        {"[0,99999999999999999999]}}", 16, -CJ_E_LIMIT},
        {"\"0,16\"}}", 16, -CJ_E_INVALID},
        {"[0,16]}} x", 16, -CJ_E_INVALID},   /* trailing garbage in the header */
        {"[0,16]},}", 16, -CJ_E_INVALID},
        {"[0,16]}", 16, -CJ_E_INVALID},      /* unterminated object */
    };
    for (size_t i = 0; i < sizeof offcases / sizeof offcases[0]; i++) {
        snprintf(js, sizeof js, "%s%s", pre, offcases[i].offs);
        int rc = st_try(js, offcases[i].dlen);
        if (rc != offcases[i].rc) fail_msg("case %zu (%s): rc %d, want %d", i, js, rc, offcases[i].rc);
    }
    /* overlapping tensors: same span twice, and partial overlap */
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16), -CJ_E_INVALID);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24), -CJ_E_INVALID);
    /* bad magic / not an object / invalid JSON */
    assert_int_equal(st_try("[]", 0), -CJ_E_INVALID);
    assert_int_equal(st_try("\"x\"", 0), -CJ_E_INVALID);
    assert_int_equal(st_try("{\"a\":1}", 0), -CJ_E_INVALID);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4), -CJ_E_INVALID);
    assert_int_equal(st_try("{'a':{}}", 0), -CJ_E_INVALID);
    assert_int_equal(st_try("{\"a\x01\":{}}", 0), -CJ_E_INVALID);
    assert_int_equal(st_try("{\"\xff\":{}}", 0), -CJ_E_INVALID);       /* not UTF-8 */
    assert_int_equal(st_try("{\"\\ud800\":{}}", 0), -CJ_E_INVALID);     /* lone surrogate */
    assert_int_equal(st_try("{\"\\u0000\":{}}", 0), -CJ_E_INVALID);     /* NUL in a name */
    assert_int_equal(st_try("{\"__metadata__\":[]}", 0), -CJ_E_INVALID);
    /* an empty name (the writers refuse one, so the parser does too: found by fuzz_items) */
    assert_int_equal(st_try("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), -CJ_E_INVALID);
    /* missing fields, duplicates */
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), -CJ_E_MISSING);
    assert_int_equal(st_try("{\"a\":{}}", 0), -CJ_E_MISSING);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                     -CJ_E_INVALID);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), -CJ_E_INVALID);
    /* huge shapes: element count overflow, byte count overflow, too many dims */
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                            "\"data_offsets\":[0,4]}}", 4), -CJ_E_LIMIT);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                            "\"data_offsets\":[0,4]}}", 4), -CJ_E_LIMIT);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                            "\"data_offsets\":[0,4]}}", 4), -CJ_E_LIMIT);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1],"
                            "\"data_offsets\":[0,4]}}", 4), 0);
    /* long name, long dtype */
    char big[600];
    memset(big, 0, sizeof big);
    strcpy(big, "{\"");
    memset(big + 2, 'n', 300);
    strcat(big, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    assert_int_equal(st_try(big, 4), -CJ_E_LIMIT);
    assert_int_equal(st_try("{\"a\":{\"dtype\":\"F32XXXXXXXXXXXXXXXXXXX\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                     -CJ_E_LIMIT);
}

static void test_st_deep_json_and_cap(void **state)
{
    (void)state;
    /* deep nesting in __metadata__ and in an unknown tensor field: capped, iterative */
    size_t depth = 10000, k;
    char *js = malloc(6 * depth + 256);
    strcpy(js, "{\"__metadata__\":");
    k = strlen(js);
    for (size_t i = 0; i < depth; i++) { memcpy(js + k, "{\"a\":", 5); k += 5; }
    js[k] = 0;
    assert_int_equal(st_try(js, 0), -CJ_E_LIMIT);
    strcpy(js, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":");
    k = strlen(js);
    for (size_t i = 0; i < depth; i++) js[k++] = '[';
    for (size_t i = 0; i < depth; i++) js[k++] = ']';
    strcpy(js + k, "}}");
    assert_int_equal(st_try(js, 4), -CJ_E_LIMIT);
    /* nesting within the cap is fine */
    strcpy(js, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":");
    k = strlen(js);
    for (size_t i = 0; i < 20; i++) js[k++] = '[';
    for (size_t i = 0; i < 20; i++) js[k++] = ']';
    strcpy(js + k, "}}");
    assert_int_equal(st_try(js, 4), 0);
    free(js);

    /* more tensors than the caller's capacity */
    size_t n, cnt;
    struct item_tensor t[2];
    struct cj_err e = {0};
    uint8_t *b = st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                         "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                         "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", 3, &n);
    assert_int_equal(items_st_parse(b, n, t, 2, &cnt, &e), -CJ_E_LIMIT);
    free(b);
}

static void test_st_writer_refusals(void **state)
{
    (void)state;
    uint64_t s[] = {2};
    float d[2] = {1, 2};
    uint8_t *w;
    size_t wn, cnt;
    struct cj_err e = {0};
    struct item_in in = {.name = "x", .dtype = "F32", .ndim = 1, .shape = s, .data = d, .len = 8};
    struct item_in bad = in;
    bad.dtype = "X9";
    assert_true(items_st_write(&bad, 1, &w, &wn, &e) < 0);
    bad = in;
    bad.len = 4;
    assert_true(items_st_write(&bad, 1, &w, &wn, &e) < 0);
    bad = in;
    bad.name = "__metadata__";
    assert_true(items_st_write(&bad, 1, &w, &wn, &e) < 0);
    bad = in;
    bad.ndim = 9;
    assert_true(items_st_write(&bad, 1, &w, &wn, &e) < 0);
    /* the longest name a parser returns (255 bytes) is writable as a safetensors key */
    char longname[ITEMS_NAME_MAX];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    bad = in;
    bad.name = longname;
    assert_int_equal(items_st_write(&bad, 1, &w, &wn, &e), 0);
    free(w);
    /* a name needing JSON escapes round-trips */
    bad = in;
    bad.name = "a\"b\\c\n\x01";
    assert_int_equal(items_st_write(&bad, 1, &w, &wn, &e), 0);
    assert_int_equal((8 + w[0]) % 8, 0);
    struct item_tensor t[CAP];
    assert_int_equal(st_parse_copy(w, wn, t, &cnt, &e), 0);
    assert_string_equal(t[0].name, "a\"b\\c\n\x01");
    free(w);
    /* zero tensors */
    assert_int_equal(items_st_write(NULL, 0, &w, &wn, &e), 0);
    assert_int_equal(wn, 16);
    assert_int_equal(st_parse_copy(w, wn, t, &cnt, &e), 0);
    assert_int_equal(cnt, 0);
    free(w);
}

/* Patches bytes of a copy of a vector (at2 < 0: one patch only) and parses it. */
static int npz_patched2(const char *vname, size_t at, const char *hex, long at2, const char *hex2, unsigned flags)
{
    size_t n, xn, cnt;
    uint8_t *p = vec(vname, &n), *x = tu_hex(hex, &xn);
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    memcpy(p + at, x, xn);
    free(x);
    if (at2 >= 0) {
        x = tu_hex(hex2, &xn);
        memcpy(p + at2, x, xn);
        free(x);
    }
    int rc = npz_parse_copy(p, n, flags, t, &cnt, &e);
    free(p);
    return rc;
}

static int npz_patched(const char *vname, size_t at, const char *hex, unsigned flags)
{
    return npz_patched2(vname, at, hex, -1, NULL, flags);
}

/* Replaces the first occurrence of from (same length as to) in vector 40 and parses. */
static int npz_replaced(const char *from, const char *to, struct item_tensor *t, size_t *cnt)
{
    size_t n;
    uint8_t *p = vec("40_item_T0.npz", &n);
    struct cj_err e = {0};
    assert_int_equal(strlen(from), strlen(to));
    uint8_t *at = memmem(p + 0xc3, n - 0xc3, from, strlen(from));   /* inside member T0 */
    assert_non_null(at);
    memcpy(at, to, strlen(to));
    int rc = npz_parse_copy(p, n, 0, t, cnt, &e);
    free(p);
    return rc;
}

static void test_npz_hostile(void **state)
{
    (void)state;
    /* Layout of vector 40: member 1 header at 0 (crc 14, csize 18, usize 22, name 30,
     * zip64 extra 46..65), member 2 header at 0xc3 (name 0xe1, NPY at 0xfb),
     * central directory 0x193, end record 0x205. */
    const char *v = "40_item_T0.npz";
    size_t n, cnt;
    struct item_tensor t[CAP];
    struct cj_err e = {0};
    assert_int_equal(npz_patched(v, 0, "50", ITEMS_NPZ_CHECK_CRC), 0);   /* baseline */
    /* bad magic */
    assert_int_equal(npz_patched(v, 0, "51", 0), -CJ_E_INVALID);
    /* compression method 8, encrypted flag, data-descriptor flag */
    assert_int_equal(npz_patched(v, 8, "0800", 0), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 6, "0100", 0), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 6, "0800", 0), -CJ_E_INVALID);
    /* CRC mismatch only matters when asked */
    assert_int_equal(npz_patched(v, 14, "00000000", ITEMS_NPZ_CHECK_CRC), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 14, "00000000", 0), 0);
    /* saturated 32-bit sizes come from the zip64 extra (as numpy's reader does) */
    assert_int_equal(npz_patched(v, 18, "ffffffffffffffff", ITEMS_NPZ_CHECK_CRC), 0);
    /* unsaturated: the extra is ignored; saturated with a lying extra: refused */
    assert_int_equal(npz_patched(v, 50, "ffffffffffffff7f", 0), 0);
    assert_true(npz_patched2(v, 18, "ffffffffffffffff", 50, "ffffffffffffff7fffffffffffffff7f", 0) < 0);
    assert_true(npz_patched2(v, 18, "ffffffffffffffff", 46, "0200", 0) < 0);   /* no tag 1 */
    /* sizes past the end / csize != usize / member overruns the next header */
    assert_int_equal(npz_patched(v, 18, "ffffff00ffffff00", 0), -CJ_E_TRUNCATED);
    assert_int_equal(npz_patched(v, 18, "8200000081000000", 0), -CJ_E_INVALID);
    assert_true(npz_patched(v, 18, "8200000082000000", 0) < 0);
    /* name and extra lengths past the end; extra field overrunning the extra area */
    assert_true(npz_patched(v, 26, "ffff", 0) < 0);
    assert_int_equal(npz_patched(v, 48, "1100", 0), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 26, "0000", 0), -CJ_E_INVALID);   /* empty name */
    /* end record disagreeing with the walk: member count, cd offset, cd size */
    assert_int_equal(npz_patched(v, 0x205 + 10, "0300", 0), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 0x205 + 16, "94010000", 0), -CJ_E_INVALID);
    assert_int_equal(npz_patched(v, 0x205 + 12, "71000000", 0), -CJ_E_INVALID);
    assert_true(npz_patched(v, 0x205 + 20, "0100", 0) < 0);   /* comment length */
    /* NPY problems in member T0 */
    assert_int_equal(npz_patched(v, 0xfb, "94", 0), -CJ_E_INVALID);               /* magic */
    assert_int_equal(npz_patched(v, 0xfb + 6, "09", 0), -CJ_E_INVALID);           /* version */
    assert_int_equal(npz_patched(v, 0xfb + 8, "ff00", 0), -CJ_E_TRUNCATED);       /* header_len */
    assert_int_equal(npz_replaced("(2, 3)", "(2, 4)", t, &cnt), -CJ_E_INVALID);   /* data size */
    assert_int_equal(npz_replaced("(2, 3)", "(6)   ", t, &cnt), -CJ_E_INVALID);   /* not a tuple */
    assert_int_equal(npz_replaced("(2, 3)", "(2, 3 ", t, &cnt), -CJ_E_INVALID);
    assert_int_equal(npz_replaced("(2, 3)", "(-6,) ", t, &cnt), -CJ_E_INVALID);
    assert_int_equal(npz_replaced("'<f4'", "'|O4'", t, &cnt), -CJ_E_INVALID);     /* object array */
    assert_int_equal(npz_replaced("'<f4'", "''   ", t, &cnt), 0);                 /* empty descr: unknown */
    assert_int_equal(items_find(t, cnt, "T0")->elem_size, 0);
    assert_int_equal(npz_replaced("'<f4'", "'<'  ", t, &cnt), 0);
    assert_int_equal(npz_replaced("{'descr'", "['descr'", t, &cnt), -CJ_E_INVALID);
    assert_int_equal(npz_replaced("'descr'", "'dexcr'", t, &cnt), -CJ_E_INVALID);
    assert_int_equal(npz_replaced("'shape'", "'descr'", t, &cnt), -CJ_E_INVALID); /* repeated key */
    assert_int_equal(npz_replaced(", }", " } ", t, &cnt), 0);                     /* no trailing comma */
    assert_int_equal(npz_replaced("(2, 3)", "(6,)  ", t, &cnt), 0);               /* same size */
    assert_int_equal(items_find(t, cnt, "T0")->ndim, 1);
    assert_int_equal(npz_replaced("'fortran_order': False, ", "'fortran_order': True,  ", t, &cnt), 0);
    assert_true(items_find(t, cnt, "T0")->fortran_order);
    /* a non-.npy member is tolerated and listed */
    assert_int_equal(npz_replaced("T0.npy", "T0.bin", t, &cnt), 0);
    assert_non_null(items_find(t, cnt, "T0.bin"));
    assert_false(items_find(t, cnt, "T0.bin")->is_npy);
    /* two members with the same key */
    {
        uint64_t s1[] = {1};
        float d = 1;
        struct item_in in[] = {{.name = "ab", .dtype = "<f4", .ndim = 1, .shape = s1, .data = &d, .len = 4},
                               {.name = "cd", .dtype = "<f4", .ndim = 1, .shape = s1, .data = &d, .len = 4}};
        uint8_t *w;
        size_t wn;
        assert_int_equal(items_npz_write(in, 2, 0, &w, &wn, &e), 0);
        assert_int_equal(npz_parse_copy(w, wn, ITEMS_NPZ_CHECK_CRC, t, &cnt, &e), 0);
        memcpy(memmem(w, wn, "cd.npy", 6), "ab.npy", 6);   /* the local header of member 2 */
        assert_int_equal(npz_parse_copy(w, wn, 0, t, &cnt, &e), -CJ_E_INVALID);
        free(w);
    }
    {
        uint8_t *p = vec(v, &n);
        memcpy(p + 30, "T0.npy\0\0\0\0\0\0\0\0\0\0", 16);   /* name_len stays 16: NUL inside */
        assert_int_equal(npz_parse_copy(p, n, 0, t, &cnt, &e), -CJ_E_INVALID);
        free(p);
    }
    /* huge shape in the NPY header: the element count overflows */
    {
        uint64_t s[] = {1};
        float d = 1;
        struct item_in in = {.name = "T0", .dtype = "<f4", .ndim = 1, .shape = s, .data = &d, .len = 4};
        uint8_t *w;
        size_t wn;
        assert_int_equal(items_npz_write(&in, 1, 0, &w, &wn, &e), 0);
        uint8_t *sh = memmem(w, wn, "(1,), }", 7);
        assert_non_null(sh);
        const char *huge = "(4294967296, 4294967296, 4294967296), }";   /* fits in the growth padding */
        memcpy(sh, huge, strlen(huge));
        assert_int_equal(npz_parse_copy(w, wn, 0, t, &cnt, &e), -CJ_E_LIMIT);
        free(w);
    }
    /* capacity; garbage after the end record */
    uint8_t *p = vec(v, &n);
    assert_int_equal(items_npz_parse(p, n, 0, t, 1, &cnt, &e), -CJ_E_LIMIT);
    uint8_t *q = malloc(n + 3);
    memcpy(q, p, n);
    memcpy(q + n, "xyz", 3);
    assert_true(npz_parse_copy(q, n + 3, 0, t, &cnt, &e) < 0);
    free(q);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32_and_sizes),
        cmocka_unit_test(test_npz_vector_11),
        cmocka_unit_test(test_npz_vector_40),
        cmocka_unit_test(test_npz_vector_41),
        cmocka_unit_test(test_npz_tool_example),
        cmocka_unit_test(test_npz_roundtrip),
        cmocka_unit_test(test_st_vector_42),
        cmocka_unit_test(test_st_vector_43),
        cmocka_unit_test(test_st_order_and_forms),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_st_hostile),
        cmocka_unit_test(test_st_deep_json_and_cap),
        cmocka_unit_test(test_st_writer_refusals),
        cmocka_unit_test(test_npz_hostile),
    };
    return cmocka_run_group_tests_name("items", tests, NULL, NULL);
}
