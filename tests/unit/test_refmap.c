/* SPDX-License-Identifier: Apache-2.0 */
/* test_refmap.c — rewriting download-ref datums (lib/payload/refmap.c) on the vectors. */
#include "testutil.h"

#include <event2/buffer.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/refmap.h"

static const char *NEW_FQCN = "site-1.job-7f3a";
static const char *NEW_ID = "0f0e0d0c-0b0a-4908-8706-050403020100";

/* The sections of a, except the rewritten refs, are equal to b's. */
static void assert_same_but_refs(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    struct cj_lobs_iter ia, ib;
    struct cj_lobs_section sa, sb;
    struct cj_err e = {0};
    cj_lobs_iter_init(&ia, a, alen);
    cj_lobs_iter_init(&ib, b, blen);
    int ra, rb;
    while ((ra = cj_lobs_next(&ia, &sa, &e)) == 1) {
        rb = cj_lobs_next(&ib, &sb, &e);
        assert_int_equal(rb, 1);
        assert_int_equal(sa.marker, sb.marker);
        assert_int_equal(sa.dot, sb.dot);
        assert_memory_equal(sa.id, sb.id, 16);
        if (sa.dot != 3 && sa.dot != 6) {
            assert_int_equal(sa.value_len, sb.value_len);
            assert_memory_equal(sa.value, sb.value, sa.value_len);
        }
    }
    assert_int_equal(ra, 0);
    assert_int_equal(cj_lobs_next(&ib, &sb, &e), 0);
}

/* Rewrites every ref of a vector to (NEW_FQCN, NEW_ID<i>), checks the result,
 * rewrites back and gets the original bytes. */
static void roundtrip(const char *name, size_t want_refs)
{
    size_t len, n, n2;
    uint8_t *p = tu_read_vector(name, &len);
    struct cj_fobs_ref refs[8], after[8];
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_list_refs(p, len, refs, 8, &n, &e), 0);
    assert_int_equal(n, want_refs);
    char ids[8][64];
    struct cj_refmap_entry fwd[8], back[8];
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "%.35s%zu", NEW_ID, i);
        fwd[i] = (struct cj_refmap_entry){refs[i].fqcn, refs[i].ref_id, NEW_FQCN, ids[i]};
        back[i] = (struct cj_refmap_entry){NEW_FQCN, ids[i], refs[i].fqcn, refs[i].ref_id};
    }
    msgpack_sbuffer out, orig;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_init(&orig);
    assert_int_equal(cj_refmap_rewrite(p, len, fwd, n, &out, &n2, &e), 0);
    assert_int_equal(n2, n);
    assert_int_equal(cj_lobs_validate(out.data, out.size, NULL, NULL, 0, NULL, &e), 0);
    assert_int_equal(cj_fobs_list_refs((uint8_t *)out.data, out.size, after, 8, &n2, &e), 0);
    assert_int_equal(n2, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(after[i].fqcn, NEW_FQCN);
        assert_string_equal(after[i].ref_id, ids[i]);
        assert_int_equal(after[i].dot, refs[i].dot);
        assert_memory_equal(after[i].datum_id, refs[i].datum_id, 16);
    }
    assert_same_but_refs((uint8_t *)out.data, out.size, p, len);
    /* the size difference is exactly the JSON difference */
    if (n == 1) {
        char a[600], b[600];
        int la = cj_refmap_json(NEW_FQCN, ids[0], a, sizeof a), lb = cj_refmap_json(refs[0].fqcn, refs[0].ref_id, b, sizeof b);
        assert_true(la > 0 && lb > 0);
        assert_int_equal(out.size, len - (size_t)lb + (size_t)la);
    }
    assert_int_equal(cj_refmap_rewrite((uint8_t *)out.data, out.size, back, n, &orig, &n2, &e), 0);
    assert_int_equal(n2, n);
    assert_int_equal(orig.size, len);
    assert_memory_equal(orig.data, p, len);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&orig);
    free(p);
}

static void test_vector_00(void **st) { (void)st; roundtrip("00_min_dict_one_array_via_downloader.bin", 1); }
static void test_vector_02(void **st) { (void)st; roundtrip("02_server_task_shareable_via_downloader.bin", 1); }
static void test_vector_09(void **st) { (void)st; roundtrip("09_trainer_result_ready_flmodel.bin", 1); }
static void test_vector_12(void **st) { (void)st; roundtrip("12_relay_task_ready_full_splice.bin", 1); }
static void test_vector_13(void **st) { (void)st; roundtrip("13_relay_submit_update_splice.bin", 1); }

static void test_json_form(void **st)
{
    (void)st;
    char out[200];
    int n = cj_refmap_json("server.job-7f3a", "11111111-2222-4333-8444-000000000001", out, sizeof out);
    assert_string_equal(out, "{\"fqcn\": \"server.job-7f3a\", \"ref_id\": \"11111111-2222-4333-8444-000000000001\"}");
    assert_int_equal(n, (int)strlen(out));
    assert_int_equal(cj_refmap_json("a\"b", "c\\d", out, sizeof out), 34);
    assert_string_equal(out, "{\"fqcn\": \"a\\\"b\", \"ref_id\": \"c\\\\d\"}");
    assert_int_equal(cj_refmap_json("", "x", out, sizeof out), -1);
    assert_int_equal(cj_refmap_json("a\nb", "x", out, sizeof out), -1);
    assert_int_equal(cj_refmap_json("a", "x", out, 10), -1);
    /* the vector's own JSON is exactly what we write */
    size_t len;
    uint8_t *p = tu_read_vector("00_min_dict_one_array_via_downloader.bin", &len);
    const char *want = "{\"fqcn\": \"server.job-7f3a\", \"ref_id\": \"11111111-2222-4333-8444-000000000001\"}";
    assert_non_null(memmem(p, len, want, strlen(want)));
    free(p);
}

/* No entry matches: the bytes are unchanged; other DOTs (0) are copied. */
static void test_no_match_and_dot0(void **st)
{
    (void)st;
    const char *names[] = {"00_min_dict_one_array_via_downloader.bin", "08_large_bytes_blob_datum.bin",
                           "03_task_shareable_native.bin"};
    for (size_t k = 0; k < 3; k++) {
        size_t len, n = 9;
        uint8_t *p = tu_read_vector(names[k], &len);
        struct cj_refmap_entry m = {"server.job-7f3a", "nope", NEW_FQCN, NEW_ID};
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        struct cj_err e = {0};
        assert_int_equal(cj_refmap_rewrite(p, len, &m, 1, &out, &n, &e), 0);
        assert_int_equal(n, 0);
        assert_int_equal(out.size, len);
        assert_memory_equal(out.data, p, len);
        msgpack_sbuffer_destroy(&out);
        free(p);
    }
}

/* Compact JSON (a reader MUST accept it) is rewritten to NVFlare's form. */
static void test_compact_json_and_appending(void **st)
{
    (void)st;
    const char *json = "{\"ref_id\":\"r1\",\"x\":[1,2],\"fqcn\":\"server.j\"}";
    uint8_t id[16] = {1, 2, 3};
    msgpack_sbuffer in;
    msgpack_sbuffer_init(&in);
    struct cj_err e = {0};
    static const uint8_t body[] = {0x81, 0xa1, 'n', 0x01};
    assert_int_equal(cj_lobs_write_main_header(&in, sizeof body, &e), 0);
    msgpack_sbuffer_write(&in, (const char *)body, sizeof body);
    assert_int_equal(cj_lobs_write_datum(&in, CJ_LOBS_TEXT, 6, id, json, strlen(json), &e), 0);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "pre", 3);   /* output is appended */
    struct cj_refmap_entry m = {"server.j", "r1", "site-1.j", "r2"};
    size_t n;
    assert_int_equal(cj_refmap_rewrite((uint8_t *)in.data, in.size, &m, 1, &out, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(out.data, "pre", 3);
    struct cj_fobs_ref r;
    size_t nr;
    assert_int_equal(cj_fobs_list_refs((uint8_t *)out.data + 3, out.size - 3, &r, 1, &nr, &e), 0);
    assert_int_equal(nr, 1);
    assert_string_equal(r.fqcn, "site-1.j");
    assert_string_equal(r.ref_id, "r2");
    assert_int_equal(r.dot, 6);
    const char *want = "{\"fqcn\": \"site-1.j\", \"ref_id\": \"r2\"}";
    assert_int_equal(out.size, 3 + 10 + sizeof body + 26 + strlen(want));
    assert_memory_equal(out.data + out.size - strlen(want), want, strlen(want));

    /* evbuffer form: same bytes */
    struct evbuffer *eb = evbuffer_new();
    assert_int_equal(cj_refmap_rewrite_evbuffer((uint8_t *)in.data, in.size, &m, 1, eb, &n, &e), 0);
    assert_int_equal(evbuffer_get_length(eb), out.size - 3);
    assert_memory_equal(evbuffer_pullup(eb, -1), out.data + 3, out.size - 3);
    evbuffer_free(eb);
    msgpack_sbuffer_destroy(&in);
    msgpack_sbuffer_destroy(&out);
}

/* Errors leave the output as it was. */
static void test_errors(void **st)
{
    (void)st;
    size_t len, n;
    uint8_t *p = tu_read_vector("00_min_dict_one_array_via_downloader.bin", &len);
    struct cj_err e = {0};
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "xy", 2);
    struct cj_refmap_entry bad = {"server.job-7f3a", "11111111-2222-4333-8444-000000000001", NEW_FQCN, "a\x01"};
    assert_true(cj_refmap_rewrite(p, len, &bad, 1, &out, &n, &e) < 0);
    assert_int_equal(out.size, 2);
    assert_non_null(strstr(e.msg, "unusable"));
    /* truncated container */
    assert_true(cj_refmap_rewrite(p, len - 1, NULL, 0, &out, &n, &e) < 0);
    assert_int_equal(out.size, 2);
    /* a DOT-3 datum that is a BLOB */
    msgpack_sbuffer in;
    msgpack_sbuffer_init(&in);
    uint8_t id[16] = {9};
    static const uint8_t body[] = {0x80};
    assert_int_equal(cj_lobs_write_main_header(&in, 1, &e), 0);
    msgpack_sbuffer_write(&in, (const char *)body, 1);
    assert_int_equal(cj_lobs_write_datum(&in, CJ_LOBS_BLOB, 3, id, "{}", 2, &e), 0);
    assert_true(cj_refmap_rewrite((uint8_t *)in.data, in.size, NULL, 0, &out, &n, &e) < 0);
    assert_int_equal(out.size, 2);
    assert_non_null(strstr(e.msg, "not TEXT"));
    /* a DOT-6 TEXT datum that is not a ref */
    in.size = 0;
    assert_int_equal(cj_lobs_write_main_header(&in, 1, &e), 0);
    msgpack_sbuffer_write(&in, (const char *)body, 1);
    assert_int_equal(cj_lobs_write_datum(&in, CJ_LOBS_TEXT, 6, id, "{\"fqcn\": 1}", 11, &e), 0);
    assert_true(cj_refmap_rewrite((uint8_t *)in.data, in.size, NULL, 0, &out, &n, &e) < 0);
    assert_int_equal(out.size, 2);
    /* too many entries */
    static struct cj_refmap_entry many[CJ_REFMAP_MAX + 1];
    assert_int_equal(cj_refmap_rewrite(p, len, many, CJ_REFMAP_MAX + 1, &out, &n, &e), -CJ_E_LIMIT);
    msgpack_sbuffer_destroy(&in);
    msgpack_sbuffer_destroy(&out);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_00),
        cmocka_unit_test(test_vector_02),
        cmocka_unit_test(test_vector_09),
        cmocka_unit_test(test_vector_12),
        cmocka_unit_test(test_vector_13),
        cmocka_unit_test(test_json_form),
        cmocka_unit_test(test_no_match_and_dot0),
        cmocka_unit_test(test_compact_json_and_appending),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("refmap", tests, NULL, NULL);
}
