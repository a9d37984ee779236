/* SPDX-License-Identifier: Apache-2.0 */
/* test_repr.c — Python's repr() of str and float (lib/util/repr.c); every expected
 * text is what python3 -c 'print(repr(...))' prints. */
#include "testutil.h"
#include "util/repr.h"

static void repr_is(const char *s, const char *want)
{
    char out[128];
    cj_repr_str(out, sizeof out, s);
    assert_string_equal(out, want);
}

static void test_quotes_and_escapes(void **state)
{
    (void)state;
    repr_is("job-7f3a", "'job-7f3a'");
    repr_is("", "''");
    repr_is("a'b", "\"a'b\"");                     /* ' and no ": Python quotes with " */
    repr_is("a'b\"c", "'a\\'b\"c'");               /* both: ', the ' escaped */
    repr_is("a\"b", "'a\"b'");
    repr_is("back\\slash", "'back\\\\slash'");
    repr_is("\t\n\rx\x1b\x7f", "'\\t\\n\\rx\\x1b\\x7f'");
}

static void test_unicode(void **state)
{
    (void)state;
    repr_is("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80'");   /* é€😀 printed */
    /* U+0085 U+00A0 U+00AD U+200B U+2028 U+FEFF U+E000 U+FFFE U+10FFFD */
    repr_is("\xc2\x85\xc2\xa0\xc2\xad\xe2\x80\x8b\xe2\x80\xa8\xef\xbb\xbf\xee\x80\x80\xef\xbf\xbe\xf4\x8f\xbf\xbd",
            "'\\x85\\xa0\\xad\\u200b\\u2028\\ufeff\\ue000\\ufffe\\U0010fffd'");
    repr_is("\xf3\xa0\x80\x81", "'\\U000e0001'");
    repr_is("a\xff", "'a\\xff'");   /* not UTF-8: the byte escaped */
}

static void test_cut(void **state)
{
    (void)state;
    char out[12];
    cj_repr_str(out, sizeof out, "abcdefghijkl");
    assert_string_equal(out, "'abcdef...'");
    cj_repr_str(out, sizeof out, "abcdef");
    assert_string_equal(out, "'abcdef'");
    cj_repr_str(out, 7, "abc");
    assert_string_equal(out, "");
}

static void float_is(double f, const char *want)
{
    char out[40];
    cj_repr_float(out, sizeof out, f);
    assert_string_equal(out, want);
}

static void test_float(void **state)
{
    (void)state;
    float_is(0.1, "0.1");
    float_is(2.0, "2.0");
    float_is(-0.0, "-0.0");
    float_is(1e16, "1e+16");
    float_is(1e-7, "1e-07");
    float_is(0.125, "0.125");
    float_is(-1.0 / 0.0, "-inf");
    float_is(0.0 / 0.0, "nan");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quotes_and_escapes),
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_float),
    };
    return cmocka_run_group_tests_name("repr", tests, NULL, NULL);
}
