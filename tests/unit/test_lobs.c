/* SPDX-License-Identifier: Apache-2.0 */
/* test_lobs.c — LOBS container: vector layouts, validator rules, hostile framing, writer. */
#include "testutil.h"
#include "payload/lobs.h"

static const char *ALL_PAYLOADS[] = {
    "00_min_dict_one_array_via_downloader.bin", "01_builtin_wrappers.bin",
    "02_server_task_shareable_via_downloader.bin", "03_task_shareable_native.bin",
    "04_cj_task_ready_lazy_reemit.bin", "07_relay_spliced_task_ready.bin",
    "08_large_bytes_blob_datum.bin", "09_trainer_result_ready_flmodel.bin",
    "10_cj_submit_update_lazy_reemit.bin", "12_relay_task_ready_full_splice.bin",
    "13_relay_submit_update_splice.bin", "14_get_task_request.bin",
    "15_aux_task_check_request.bin", "16_get_task_reply_try_again.bin",
    "20_capi_hello.bin", "21_capi_hello_accepted.bin", "22_capi_hello_rejected.bin",
    "23_capi_session_ready.bin", "24_capi_task_accepted.bin", "25_capi_result_accepted.bin",
    "26_capi_heartbeat.bin", "27_capi_shutdown.bin", "28_capi_log.bin",
    "30_dl_pull_first.bin", "31_dl_reply_data.bin", "32_dl_pull_next.bin",
    "33_dl_reply_eof_confirm.bin", "34_dl_confirm.bin", "35_dl_cancel.bin",
    "36_dl_source_failure.bin", "37_dl_reply_eof_legacy.bin",
};

static int validate_hex(const char *hex, size_t *n_datums)
{
    size_t n;
    uint8_t *b = tu_hex(hex, &n);
    struct cj_err e = {0};
    int rc = cj_lobs_validate(b, n, NULL, NULL, 0, n_datums, &e);
    if (rc) assert_true(e.msg[0] != 0);
    free(b);
    return rc;
}

static void assert_id_tail(const uint8_t id[16], const char *uuid_hex)
{
    size_t n;
    uint8_t *want = tu_hex(uuid_hex, &n);
    assert_int_equal(n, 16);
    assert_memory_equal(id, want, 16);
    free(want);
}

static void test_vector00_sections(void **state)
{
    (void)state;
    size_t len;
    uint8_t *b = tu_read_vector("00_min_dict_one_array_via_downloader.bin", &len);
    assert_int_equal(len, 260);
    struct cj_lobs_iter it;
    struct cj_lobs_section s;
    struct cj_err e = {0};
    cj_lobs_iter_init(&it, b, len);
    assert_int_equal(cj_lobs_next(&it, &s, &e), 1);
    assert_int_equal(s.marker, CJ_LOBS_MAIN);
    assert_int_equal(s.dot, 0);
    assert_int_equal(s.offset, 0);
    assert_int_equal(s.value_len, 147);
    assert_int_equal(s.total, 157);
    assert_ptr_equal(s.value, b + 10);
    assert_ptr_equal(cj_lobs_section_start(&s), b);
    assert_int_equal(cj_lobs_next(&it, &s, &e), 1);
    assert_int_equal(s.marker, CJ_LOBS_TEXT);
    assert_int_equal(s.dot, 3);
    assert_int_equal(s.offset, 157);
    assert_int_equal(s.total, 103);          /* 10 + 93 */
    assert_int_equal(s.value_len, 77);
    assert_id_tail(s.id, "11111111 2222 4333 8444 000000000002");
    assert_memory_equal(s.value, "{\"fqcn\": \"server.job-7f3a\", \"ref_id\": \"11111111-2222-4333-8444-000000000001\"}", 77);
    assert_ptr_equal(cj_lobs_section_start(&s), b + 157);
    assert_int_equal(cj_lobs_next(&it, &s, &e), 0);
    assert_int_equal(cj_lobs_next(&it, &s, &e), 0);  /* stays at the end */

    struct cj_lobs_section m, d[4];
    size_t nd = 99;
    assert_int_equal(cj_lobs_validate(b, len, &m, d, 4, &nd, &e), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(m.value_len, 147);
    assert_int_equal(d[0].offset, 157);
    free(b);
}

static void test_vector01_one_section(void **state)
{
    (void)state;
    size_t len, nd = 99;
    uint8_t *b = tu_read_vector("01_builtin_wrappers.bin", &len);
    struct cj_lobs_section m;
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(b, len, &m, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, 0);
    assert_int_equal(m.value_len, 284);
    assert_int_equal(m.total, len);
    free(b);
}

static void test_vector02_and_08(void **state)
{
    (void)state;
    size_t len, nd;
    struct cj_lobs_section m, d[2];
    struct cj_err e = {0};
    uint8_t *b = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    assert_int_equal(cj_lobs_validate(b, len, &m, d, 2, &nd, &e), 0);
    assert_int_equal(m.value_len, 965);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].offset, 975);
    assert_int_equal(d[0].marker, CJ_LOBS_TEXT);
    assert_int_equal(d[0].dot, 3);
    assert_int_equal(d[0].total - 10, 93);
    assert_id_tail(d[0].id, "11111111 2222 4333 8444 0000000000ca");
    free(b);

    b = tu_read_vector("08_large_bytes_blob_datum.bin", &len);
    assert_int_equal(cj_lobs_validate(b, len, &m, d, 2, &nd, &e), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].offset, 224);
    assert_int_equal(d[0].marker, CJ_LOBS_BLOB);
    assert_int_equal(d[0].dot, 0);
    assert_int_equal(d[0].total - 10, 1516);
    assert_int_equal(d[0].value_len, 1500);
    for (size_t i = 0; i < 1500; i++) assert_int_equal(d[0].value[i], 0xab);
    assert_id_tail(d[0].id, "11111111 2222 4333 8444 000000000321");
    free(b);
}

static void test_all_vectors_validate(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ALL_PAYLOADS / sizeof *ALL_PAYLOADS; i++) {
        size_t len, nd;
        uint8_t *b = tu_read_vector(ALL_PAYLOADS[i], &len);
        struct cj_err e = {0};
        int rc = cj_lobs_validate(b, len, NULL, NULL, 0, &nd, &e);
        if (rc) fail_msg("%s: %s", ALL_PAYLOADS[i], e.msg);
        free(b);
    }
}

static void test_count_then_fill(void **state)
{
    (void)state;
    /* MAIN {"n":1} + two TEXT datums "a", "b" with ids 01.. and 02.. */
    size_t n;
    uint8_t *b = tu_hex("64 00 0000000000000004 81 a1 6e 01"
                        "65 00 0000000000000011 01000000000000000000000000000000 61"
                        "65 07 0000000000000011 02000000000000000000000000000000 62", &n);
    size_t nd = 0;
    struct cj_lobs_section d[2];
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(b, n, NULL, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, 2);
    assert_int_equal(cj_lobs_validate(b, n, NULL, d, 1, &nd, &e), 0);  /* partial fill */
    assert_int_equal(nd, 2);
    assert_int_equal(d[0].value[0], 'a');
    assert_int_equal(cj_lobs_validate(b, n, NULL, d, 2, &nd, &e), 0);
    assert_int_equal(d[1].value[0], 'b');
    assert_int_equal(d[1].dot, 7);   /* unknown DOTs are framed, not judged */
    free(b);
}

static void test_spec_smallest(void **state)
{
    (void)state;
    size_t nd;
    assert_int_equal(validate_hex("64 00 00 00 00 00 00 00 00 04 81 a1 6e 01", &nd), 0);
    assert_int_equal(nd, 0);
}

static void test_hostile_framing(void **state)
{
    (void)state;
    size_t nd;
    const char *M = "64 00 0000000000000004 81 a1 6e 01";
    char buf[512];
    assert_int_equal(validate_hex("", &nd), -CJ_E_TRUNCATED);
    assert_int_equal(validate_hex("64 00 00 00", &nd), -CJ_E_TRUNCATED);
    /* size 0 */
    assert_int_equal(validate_hex("64 00 0000000000000000", &nd), -CJ_E_INVALID);
    /* MAIN with a non-zero dot, wrong first marker */
    assert_int_equal(validate_hex("64 01 0000000000000001 c0", &nd), -CJ_E_INVALID);
    assert_int_equal(validate_hex("65 00 0000000000000011 00000000000000000000000000000000 61", &nd), -CJ_E_INVALID);
    /* MAIN claiming 2^63 bytes, and 2^64-1 */
    assert_int_equal(validate_hex("64 00 8000000000000000 c0", &nd), -CJ_E_TRUNCATED);
    assert_int_equal(validate_hex("64 00 ffffffffffffffff c0", &nd), -CJ_E_TRUNCATED);
    /* sizes off by one */
    assert_int_equal(validate_hex("64 00 0000000000000005 81 a1 6e 01", &nd), -CJ_E_TRUNCATED);
    assert_int_equal(validate_hex("64 00 0000000000000003 81 a1 6e 01", &nd), -CJ_E_TRUNCATED);
    /* trailing bytes after the main body */
    assert_int_equal(validate_hex("64 00 0000000000000005 81 a1 6e 01 c0", &nd), -CJ_E_INVALID);
    /* body not msgpack */
    assert_int_equal(validate_hex("64 00 0000000000000001 c1", &nd), -CJ_E_INVALID);
    /* datum size 16 (empty value), size 0, size 17 ok */
    snprintf(buf, sizeof buf, "%s 65 03 0000000000000010 00000000000000000000000000000001", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    snprintf(buf, sizeof buf, "%s 66 00 0000000000000000", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    snprintf(buf, sizeof buf, "%s 67 00 0000000000000011 00000000000000000000000000000001 00", M);
    assert_int_equal(validate_hex(buf, &nd), 0);
    assert_int_equal(nd, 1);
    /* datum off by one */
    snprintf(buf, sizeof buf, "%s 65 03 0000000000000012 00000000000000000000000000000001 61", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_TRUNCATED);
    snprintf(buf, sizeof buf, "%s 65 03 0000000000000010 00000000000000000000000000000001 61", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    snprintf(buf, sizeof buf, "%s 65 03 0000000000000011 00000000000000000000000000000001 61 62", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_TRUNCATED);
    /* unknown markers, a second MAIN */
    snprintf(buf, sizeof buf, "%s 68 00 0000000000000011 00000000000000000000000000000001 61", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    snprintf(buf, sizeof buf, "%s 63 00 0000000000000011 00000000000000000000000000000001 61", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    snprintf(buf, sizeof buf, "%s %s", M, M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
    /* a truncated datum header */
    snprintf(buf, sizeof buf, "%s 65 03 00", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_TRUNCATED);
    /* duplicated datum id (non-adjacent) */
    snprintf(buf, sizeof buf, "%s 65 03 0000000000000011 aa000000000000000000000000000001 61"
                              " 66 00 0000000000000011 bb000000000000000000000000000001 62"
                              " 66 00 0000000000000011 aa000000000000000000000000000001 63", M);
    assert_int_equal(validate_hex(buf, &nd), -CJ_E_INVALID);
}

static void test_error_names_offset(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = tu_hex("64 00 0000000000000004 81 a1 6e 01 68 00 0000000000000011 "
                        "00000000000000000000000000000001 61", &n);
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(b, n, NULL, NULL, 0, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(e.offset, 14);
    assert_non_null(strstr(e.msg, "0x68"));
    free(b);
    /* msgpack errors inside the body are reported at container offsets */
    b = tu_hex("64 00 0000000000000003 81 a1 c1", &n);
    assert_int_equal(cj_lobs_validate(b, n, NULL, NULL, 0, NULL, &e), -CJ_E_TRUNCATED);
    assert_true(e.offset >= 10);
    free(b);
}

/* Every prefix of 02 and 09 fails cleanly, except the one that ends right after MAIN. */
static void truncate_every_byte(const char *name, size_t main_end)
{
    size_t len;
    uint8_t *b = tu_read_vector(name, &len);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);   /* exact-size copy so ASan sees overreads */
        memcpy(p, b, cut);
        struct cj_err e = {0};
        int rc = cj_lobs_validate(p, cut, NULL, NULL, 0, NULL, &e);
        if (cut == main_end) assert_int_equal(rc, 0);
        else {
            assert_true(rc < 0);
            assert_true(e.offset <= cut);
        }
        free(p);
    }
    free(b);
}

static void test_truncation(void **state)
{
    (void)state;
    truncate_every_byte("02_server_task_shareable_via_downloader.bin", 975);
    truncate_every_byte("09_trainer_result_ready_flmodel.bin", 949);
}

static void test_datum_cap(void **state)
{
    (void)state;
    size_t per = CJ_LOBS_DATUM_HDR_LEN + 1, head = 14;
    size_t n = CJ_LOBS_MAX_DATUMS + 1;
    size_t len = head + n * per;
    uint8_t *b = calloc(1, len);
    memcpy(b, "\x64\x00\x00\x00\x00\x00\x00\x00\x00\x04\x81\xa1\x6e\x01", head);
    for (size_t i = 0; i < n; i++) {
        uint8_t *d = b + head + i * per;
        d[0] = CJ_LOBS_BLOB;
        d[9] = 17;
        d[10] = (uint8_t)(i >> 8);
        d[11] = (uint8_t)i;
        d[26] = 0x5a;
    }
    size_t nd;
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(b, len, NULL, NULL, 0, &nd, &e), -CJ_E_LIMIT);
    assert_int_equal(cj_lobs_validate(b, len - per, NULL, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, CJ_LOBS_MAX_DATUMS);
    free(b);
}

static void test_writer_rebuilds(void **state)
{
    (void)state;
    const char *names[] = {"00_min_dict_one_array_via_downloader.bin",
                           "02_server_task_shareable_via_downloader.bin",
                           "08_large_bytes_blob_datum.bin", "09_trainer_result_ready_flmodel.bin"};
    for (size_t k = 0; k < 4; k++) {
        size_t len, nd;
        uint8_t *b = tu_read_vector(names[k], &len);
        struct cj_lobs_section m, d[4];
        struct cj_err e = {0};
        assert_int_equal(cj_lobs_validate(b, len, &m, d, 4, &nd, &e), 0);
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        assert_int_equal(msgpack_sbuffer_write(&sb, "junk", 4), 0);  /* writers append */
        size_t off;
        assert_int_equal(cj_lobs_begin_main(&sb, &off, &e), 0);
        assert_int_equal(off, 4);
        assert_int_equal(msgpack_sbuffer_write(&sb, (const char *)m.value, m.value_len), 0);
        cj_lobs_end_main(&sb, off);
        for (size_t i = 0; i < nd; i++) assert_int_equal(cj_lobs_write_section(&sb, &d[i], &e), 0);
        assert_int_equal(sb.size, len + 4);
        assert_memory_equal(sb.data + 4, b, len);

        msgpack_sbuffer_clear(&sb);
        assert_int_equal(cj_lobs_write_main_header(&sb, m.value_len, &e), 0);
        assert_int_equal(msgpack_sbuffer_write(&sb, (const char *)m.value, m.value_len), 0);
        for (size_t i = 0; i < nd; i++)
            assert_int_equal(cj_lobs_write_datum(&sb, d[i].marker, d[i].dot, d[i].id, d[i].value,
                                                 d[i].value_len, &e), 0);
        assert_int_equal(sb.size, len);
        assert_memory_equal(sb.data, b, len);
        msgpack_sbuffer_destroy(&sb);
        free(b);
    }
}

static void test_writer_refuses(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint8_t id[16] = {1};
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_write_datum(&sb, CJ_LOBS_TEXT, 3, id, "", 0, &e), -CJ_E_INVALID);
    assert_int_equal(cj_lobs_write_datum(&sb, CJ_LOBS_MAIN, 0, id, "x", 1, &e), -CJ_E_INVALID);
    assert_int_equal(sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector00_sections),
        cmocka_unit_test(test_vector01_one_section),
        cmocka_unit_test(test_vector02_and_08),
        cmocka_unit_test(test_all_vectors_validate),
        cmocka_unit_test(test_count_then_fill),
        cmocka_unit_test(test_spec_smallest),
        cmocka_unit_test(test_hostile_framing),
        cmocka_unit_test(test_error_names_offset),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_datum_cap),
        cmocka_unit_test(test_writer_rebuilds),
        cmocka_unit_test(test_writer_refuses),
    };
    return cmocka_run_group_tests_name("lobs", tests, NULL, NULL);
}
