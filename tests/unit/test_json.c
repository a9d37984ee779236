/* SPDX-License-Identifier: Apache-2.0 */
/* test_json.c — the bounded JSON cursor (lib/util/json.c): strings and their
 * escapes, integers, skipping with the nesting cap, error texts and offsets. */
#include "testutil.h"
#include "util/json.h"

static struct cj_json cur(const char *s, struct cj_err *e)
{
    return (struct cj_json){.p = (const uint8_t *)s, .pos = 0, .end = strlen(s), .who = "fmt", .err = e};
}

static void test_strings(void **state)
{
    (void)state;
    struct cj_err e = {0};
    char out[16];
    struct cj_json j = cur("  \"a\\u00e9\\ud83d\\ude00\\n\" :", &e);
    assert_int_equal(cj_json_string(&j, out, sizeof out), 0);
    assert_string_equal(out, "a\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_int_equal(cj_json_expect(&j, ':'), 0);
    assert_int_equal(cj_json_peek(&j), -1);

    j = cur("\"abcdefgh\"", &e);
    assert_int_equal(cj_json_string(&j, out, 8), -CJ_E_LIMIT);
    assert_string_equal(e.msg, "fmt: string at offset 0 longer than 7 bytes");
    j = cur("\"abcdefgh\"", &e);
    assert_int_equal(cj_json_string(&j, NULL, 0), 0);   /* only checked */

    static const struct { const char *s, *msg; } bad[] = {
        {"\"\\ud800\"", "fmt: invalid JSON header: lone high surrogate at offset 7"},
        {"\"\\udc00\"", "fmt: invalid JSON header: lone low surrogate at offset 7"},
        {"\"\\x\"", "fmt: invalid JSON header: unknown escape at offset 2"},
        {"\"a\x01\"", "fmt: invalid JSON header: control character in string at offset 2"},
        {"\"\xc3\x28\"", "fmt: invalid JSON header: invalid UTF-8 in string at offset 1"},
        {"\"abc", "fmt: invalid JSON header: unterminated string at offset 4"},
        {"\"\\u0000\"", "fmt: invalid JSON header: NUL in a name at offset 7"},
        {"5", "fmt: invalid JSON header: expected a string at offset 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = cur(bad[i].s, &e);
        assert_int_equal(cj_json_string(&j, out, sizeof out), -CJ_E_INVALID);
        assert_string_equal(e.msg, bad[i].msg);
    }
}

static void test_uint(void **state)
{
    (void)state;
    struct cj_err e = {0};
    uint64_t v;
    struct cj_json j = cur(" 1234,", &e);
    assert_int_equal(cj_json_uint(&j, &v), 0);
    assert_int_equal(v, 1234);
    j = cur("-1", &e);
    assert_int_equal(cj_json_uint(&j, &v), -CJ_E_INVALID);
    j = cur("01", &e);
    assert_int_equal(cj_json_uint(&j, &v), -CJ_E_INVALID);
    j = cur("1.5", &e);
    assert_int_equal(cj_json_uint(&j, &v), -CJ_E_INVALID);
    j = cur("99999999999999999999", &e);
    assert_int_equal(cj_json_uint(&j, &v), -CJ_E_LIMIT);
    assert_string_equal(e.msg, "fmt: integer at offset 0 too large");
}

static void test_skip(void **state)
{
    (void)state;
    struct cj_err e = {0};
    struct cj_json j = cur("{\"a\": [1, -2.5e3, true, null, {\"b\": \"c\"}], \"d\": {}} x", &e);
    assert_int_equal(cj_json_skip(&j, 3), 0);
    assert_int_equal(cj_json_peek(&j), 'x');
    j = cur("[[[1]]]", &e);
    assert_int_equal(cj_json_skip(&j, 2), -CJ_E_LIMIT);
    assert_string_equal(e.msg, "fmt: JSON nested deeper than 2 at offset 2");
    j = cur("[[[1]]]", &e);
    assert_int_equal(cj_json_skip(&j, 3), 0);
    static const char *bad[] = {"[1,]", "{\"a\" 1}", "{1: 2}", "tru", "[1 2]", "-", "1.", "[", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = cur(bad[i], &e);
        assert_int_equal(cj_json_skip(&j, 8), -CJ_E_INVALID);
    }
}

/* ---- cj_json_object_walk: a whole object, member by member (bootstrap and credentials files) ---------------------------------------------------------------------- */

struct collect {
    int n;
    char keys[8][16];
    enum cj_json_type types[8];
};

static int on_member(void *ud, const char *key, size_t klen, const struct cj_json_val *v, struct cj_err *err)
{
    struct collect *c = ud;
    if (c->n == 8) return cj_fail(err, CJ_E_LIMIT, 0, "too many");
    snprintf(c->keys[c->n], sizeof c->keys[0], "%.*s", (int)klen, key);
    c->types[c->n++] = v->type;
    return 0;
}

static void test_json_walk(void **state)
{
    (void)state;
    struct collect c = {0};
    struct cj_err e = {0};
    const char *j = " {\"a\":null,\"b\":false,\"c\":-0.5E+2,\"d\":\"x\",\"e\":{},\"f\":[ ]} \n";
    assert_int_equal(cj_json_object_walk(j, strlen(j), on_member, &c, &e), 0);
    assert_int_equal(c.n, 6);
    assert_int_equal(c.types[0], CJ_JSON_NULL);
    assert_int_equal(c.types[2], CJ_JSON_NUMBER);
    assert_int_equal(c.types[4], CJ_JSON_OBJECT);
    assert_int_equal(c.types[5], CJ_JSON_ARRAY);
    assert_string_equal(c.keys[3], "d");
    assert_int_equal(cj_json_object_walk("{}", 2, NULL, NULL, &e), 0);
    assert_int_equal(cj_json_object_walk("{\"a\" 1}", 7, NULL, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_json_object_walk("{\"a\":1", 6, NULL, NULL, &e), -CJ_E_TRUNCATED);
    assert_int_equal(cj_json_object_walk("{\"\\u0000\":1}", 12, NULL, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_json_object_walk("", 0, NULL, NULL, &e), -CJ_E_TRUNCATED);
    assert_int_equal(cj_json_object_walk(" [1]", 4, NULL, NULL, &e), -CJ_E_TYPE);
    assert_int_equal(cj_json_object_walk("{\"a\":1} x", 9, NULL, NULL, &e), -CJ_E_INVALID);
    assert_non_null(strstr(e.msg, "json: trailing characters after the object at offset 8"));
    assert_int_equal(cj_json_object_walk("{\"a\":-12,\"b\":1e400}", 19, NULL, NULL, &e), 0);
    char deep[2 * CJ_JSON_MAX_DEPTH + 16];
    int o = snprintf(deep, sizeof deep, "{\"a\":");
    for (int i = 0; i <= CJ_JSON_MAX_DEPTH; i++) deep[o++] = '[';
    for (int i = 0; i <= CJ_JSON_MAX_DEPTH; i++) deep[o++] = ']';
    deep[o++] = '}';
    assert_int_equal(cj_json_object_walk(deep, (size_t)o, NULL, NULL, &e), -CJ_E_LIMIT);
}

static int on_int(void *ud, const char *key, size_t klen, const struct cj_json_val *v, struct cj_err *err)
{
    struct cj_json_val *out = ud;
    *out = *v;
    return 0;
}

static void test_json_walk_numbers(void **state)
{
    (void)state;
    struct cj_json_val v;
    struct cj_err e = {0};
    assert_int_equal(cj_json_object_walk("{\"n\": -9007199254740993}", 24, on_int, &v, &e), 0);
    assert_true(v.is_int);
    assert_true(v.i == -9007199254740993LL);
    assert_int_equal(cj_json_object_walk("{\"n\": 2.5}", 10, on_int, &v, &e), 0);
    assert_false(v.is_int);
    assert_true(v.d == 2.5);
    assert_int_equal(cj_json_object_walk("{\"n\": 99999999999999999999}", 27, on_int, &v, &e), 0);
    assert_false(v.is_int);   /* beyond int64: a double only */
    assert_int_equal(cj_json_object_walk("{\"n\": 01}", 9, on_int, &v, &e), -CJ_E_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_uint),
        cmocka_unit_test(test_skip),
        cmocka_unit_test(test_json_walk),
        cmocka_unit_test(test_json_walk_numbers),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
