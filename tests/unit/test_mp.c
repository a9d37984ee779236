/* SPDX-License-Identifier: Apache-2.0 */
/* test_mp.c — the msgpack cursor: every type, skipping, lying counts, truncation. */
#include "testutil.h"
#include "util/mp.h"

#include <event2/buffer.h>
#include <msgpack.h>

static void skip_all(const char *hex, int want_rc, size_t want_pos)
{
    size_t n;
    uint8_t *b = tu_hex(hex, &n);
    struct mp_cur c;
    struct cj_err e = {0};
    mp_cur_init(&c, b, n);
    int rc = mp_skip(&c, &e);
    assert_int_equal(rc, want_rc);
    if (rc == 0) assert_int_equal(c.pos, want_pos);
    else assert_int_equal(c.pos, 0); /* a failed skip leaves the cursor where it was */
    free(b);
}

static void test_skip_each_type(void **state)
{
    (void)state;
    skip_all("c0", 0, 1);
    skip_all("c2", 0, 1);
    skip_all("7f", 0, 1);
    skip_all("e0", 0, 1);
    skip_all("cc ff", 0, 2);
    skip_all("cd 01 00", 0, 3);
    skip_all("ce 00 00 00 01", 0, 5);
    skip_all("cf 00 06 60 d4 77 40 2b ce", 0, 9);
    skip_all("d0 80", 0, 2);
    skip_all("d3 ff ff ff ff ff ff ff ff", 0, 9);
    skip_all("ca 3f 80 00 00", 0, 5);
    skip_all("cb 3f f0 00 00 00 00 00 00", 0, 9);
    skip_all("a3 61 62 63", 0, 4);
    skip_all("d9 01 61", 0, 3);
    skip_all("da 00 01 61", 0, 4);
    skip_all("db 00 00 00 01 61", 0, 6);
    skip_all("c4 02 00 01", 0, 4);
    skip_all("c5 00 01 00", 0, 4);
    skip_all("c6 00 00 00 00", 0, 5);
    skip_all("d4 01 00", 0, 3);
    skip_all("d8 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", 0, 18);
    skip_all("c7 01 05 00", 0, 4);
    skip_all("92 01 81 a1 61 90", 0, 6);
    skip_all("dc 00 02 c0 c0", 0, 5);
    skip_all("de 00 01 a1 6e 01", 0, 6);
}

static void test_skip_hostile(void **state)
{
    (void)state;
    skip_all("c1", -CJ_E_INVALID, 0);
    skip_all("dd ff ff ff ff", -CJ_E_TRUNCATED, 0);   /* 4 billion elements claimed */
    skip_all("df ff ff ff ff 01 02", -CJ_E_TRUNCATED, 0);
    skip_all("db ff ff ff ff 61", -CJ_E_TRUNCATED, 0);
    skip_all("92 01", -CJ_E_TRUNCATED, 0);
    skip_all("cb 3f f0", -CJ_E_TRUNCATED, 0);
    skip_all("", -CJ_E_TRUNCATED, 0);
    /* deep nesting is fine without recursion: 100000 nested arrays */
    size_t depth = 100000;
    uint8_t *b = malloc(depth + 1);
    memset(b, 0x91, depth);
    b[depth] = 0xc0;
    struct mp_cur c;
    mp_cur_init(&c, b, depth + 1);
    assert_int_equal(mp_skip(&c, NULL), 0);
    assert_int_equal(c.pos, depth + 1);
    mp_cur_init(&c, b, depth);
    struct cj_err e;
    assert_int_equal(mp_skip(&c, &e), -CJ_E_TRUNCATED);
    free(b);
}

static void test_truncation_every_offset(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = tu_read_vector("02_server_task_shareable_via_downloader.bin", &n);
    /* the MAIN body is bytes [10, 975) */
    for (size_t cut = 10; cut < 975; cut++) {
        struct mp_cur c = {b, 10, cut};
        assert_int_not_equal(mp_skip(&c, NULL), 0);
    }
    struct mp_cur c = {b, 10, 975};
    assert_int_equal(mp_skip(&c, NULL), 0);
    assert_int_equal(c.pos, 975);
    free(b);
}

static void test_typed_and_find(void **state)
{
    (void)state;
    size_t n;
    /* {"a": 1, "b": "xy", 5: [1,2], "c": -3, "d": 1.5, "e": true} */
    uint8_t *b = tu_hex("86 a1 61 01 a1 62 a2 78 79 05 92 01 02 a1 63 fd a1 64 cb 3f f8 00 00 00 00 00 00 a1 65 c3", &n);
    struct mp_cur c;
    uint32_t pairs;
    struct cj_err e;
    mp_cur_init(&c, b, n);
    assert_int_equal(mp_read_map(&c, &pairs, &e), 0);
    assert_int_equal(pairs, 6);
    struct mp_cur body = c, v;
    assert_int_equal(mp_map_find(&c, pairs, "c", &v, &e), 1);
    assert_int_equal(c.pos, n);
    int64_t i;
    assert_int_equal(mp_read_int(&v, &i, &e), 0);
    assert_int_equal(i, -3);
    c = body;
    char s[8];
    assert_int_equal(mp_map_find_str(&c, pairs, "b", s, sizeof s, &e), 1);
    assert_string_equal(s, "xy");
    c = body;
    assert_int_equal(mp_map_find(&c, pairs, "zz", &v, &e), 0);
    c = body;
    assert_int_equal(mp_map_find(&c, pairs, "d", &v, &e), 1);
    double d;
    assert_int_equal(mp_read_float(&v, &d, &e), 0);
    assert_true(d == 1.5);
    c = body;
    assert_int_equal(mp_map_find(&c, pairs, "e", &v, &e), 1);
    bool bo;
    assert_int_equal(mp_read_bool(&v, &bo, &e), 0);
    assert_true(bo);
    /* wrong type is reported with its offset and the cursor does not move */
    c = body;
    assert_int_equal(mp_map_find(&c, pairs, "a", &v, &e), 1);
    size_t at = v.pos;
    assert_int_equal(mp_read_float(&v, &d, &e), -CJ_E_TYPE);
    assert_int_equal(e.offset, at);
    assert_int_equal(v.pos, at);
    free(b);
}

/* Keys: a container key is skipped whole (the cursor lands on its value); entries give the value's span. */
static void test_keys_and_entries(void **state)
{
    (void)state;
    size_t n;
    /* {[1]: 7, {}: 8, "k": [1, 2]} */
    uint8_t *b = tu_hex("83 91 01 07 80 08 a1 6b 92 01 02", &n);
    struct mp_cur c, v;
    struct mp_val k;
    uint32_t pairs;
    struct cj_err e = {0};
    mp_cur_init(&c, b, n);
    assert_int_equal(mp_read_map(&c, &pairs, &e), 0);
    assert_int_equal(mp_read_key(&c, &k, &e), 0);
    assert_int_equal(k.kind, MP_ARRAY);
    assert_false(mp_key_is(&k, "k"));
    assert_int_equal(c.pos, 3);                    /* at the value 7 */
    assert_int_equal(mp_skip(&c, &e), 0);
    assert_int_equal(mp_read_entry(&c, &k, &v, &e), 0);
    assert_int_equal(k.kind, MP_MAP);
    assert_int_equal(v.pos, 5);
    assert_int_equal(v.end, 6);
    assert_int_equal(mp_read_entry(&c, &k, &v, &e), 0);
    assert_true(mp_key_is(&k, "k"));
    assert_int_equal(v.pos, 8);
    assert_int_equal(v.end, n);
    assert_int_equal(c.pos, n);
    /* a truncated key or value fails */
    mp_cur_init(&c, b, 3);
    assert_int_equal(mp_read_map(&c, &pairs, &e), 0);
    assert_int_equal(mp_read_entry(&c, &k, &v, &e), -CJ_E_TRUNCATED);
    free(b);
}

/* Strings copied to C text: each refusal names who, what and the offset. */
static void test_read_cstr(void **state)
{
    (void)state;
    size_t n;
    char buf[4];
    struct mp_cur c;
    struct cj_err e = {0};
    /* "abc", "", "abcde", "a\0", "\xc3\x28", 5 */
    uint8_t *b = tu_hex("a3 61 62 63 a0 a5 61 62 63 64 65 a2 61 00 a2 c3 28 05", &n);
    mp_cur_init(&c, b, n);
    assert_int_equal(mp_read_cstr(&c, buf, 3, false, "dl", "x", &e), 0);
    assert_string_equal(buf, "abc");
    assert_int_equal(mp_read_cstr(&c, buf, 3, false, "dl", "x", &e), -CJ_E_INVALID);
    assert_string_equal(e.msg, "dl: 'x' is empty (offset 4)");
    c.pos = 4;
    assert_int_equal(mp_read_cstr(&c, buf, 3, true, "dl", "x", &e), 0);
    assert_string_equal(buf, "");
    assert_int_equal(mp_read_cstr(&c, buf, 3, true, "capi", "y", &e), -CJ_E_LIMIT);
    assert_string_equal(e.msg, "capi: 'y' is 5 bytes, limit 3 (offset 5)");
    c.pos = 11;
    assert_int_equal(mp_read_cstr(&c, buf, 3, true, "capi", "y", &e), -CJ_E_INVALID);
    assert_string_equal(e.msg, "capi: 'y' is not valid UTF-8 or holds NUL (offset 11)");
    c.pos = 14;
    assert_int_equal(mp_read_cstr(&c, buf, 3, true, "capi", "y", &e), -CJ_E_INVALID);
    c.pos = 17;
    assert_int_equal(mp_read_cstr(&c, buf, 3, true, "capi", "y", &e), -CJ_E_TYPE);
    assert_string_equal(e.msg, "capi: 'y' is not a str (offset 17)");
    free(b);
}

/* Packed bytes move into an evbuffer unchanged; the sbuffer is left empty (destroying it is harmless). */
static void test_sbuffer_to_evbuffer(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (int i = 0; i < 1000; i++) msgpack_pack_str_with_body(&pk, "relay", 5);
    size_t len = sb.size;
    char *copy = malloc(len);
    memcpy(copy, sb.data, len);
    struct evbuffer *b = mp_sbuffer_to_evbuffer(&sb);
    assert_non_null(b);
    assert_int_equal(sb.size, 0);
    assert_null(sb.data);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(evbuffer_get_length(b), len);
    assert_memory_equal(evbuffer_pullup(b, -1), copy, len);
    evbuffer_free(b);
    free(copy);

    msgpack_sbuffer_init(&sb);   /* nothing packed: an empty evbuffer */
    b = mp_sbuffer_to_evbuffer(&sb);
    assert_non_null(b);
    assert_int_equal(evbuffer_get_length(b), 0);

    evbuffer_add(b, "x", 1);     /* moved after what the evbuffer holds */
    msgpack_sbuffer_write(&sb, "yz", 2);
    assert_int_equal(mp_sbuffer_move(b, &sb), 0);
    assert_int_equal(sb.size, 0);
    assert_int_equal(mp_sbuffer_move(b, &sb), 0);   /* nothing left: nothing added */
    assert_int_equal(evbuffer_get_length(b), 3);
    assert_memory_equal(evbuffer_pullup(b, -1), "xyz", 3);
    evbuffer_free(b);
    msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skip_each_type),
        cmocka_unit_test(test_skip_hostile),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_typed_and_find),
        cmocka_unit_test(test_keys_and_entries),
        cmocka_unit_test(test_read_cstr),
        cmocka_unit_test(test_sbuffer_to_evbuffer),
    };
    return cmocka_run_group_tests_name("mp", tests, NULL, NULL);
}
