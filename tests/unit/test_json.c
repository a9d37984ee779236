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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_uint),
        cmocka_unit_test(test_skip),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
