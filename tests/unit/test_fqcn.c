/* SPDX-License-Identifier: Apache-2.0 */
/* test_fqcn.c — FQCN rules (doc/protocol/cellnet.md §5). */
#include "testutil.h"
#include "wire/fqcn.h"

static void test_valid(void **state)
{
    (void)state;
    static const char *ok[] = {
        "server", "site-1", "site-1.J1", "site-1.J1.trainer_1", "server.job-7f3a",
        "site-1.job-7f3a.client_api_trainer_1", "a~b_c-D9", "A.B.C.D.E", "0",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct cj_err e = { 0 };
        if (cj_fqcn_check(ok[i], strlen(ok[i]), &e) != 0) fail_msg("'%s' rejected: %s", ok[i], e.msg);
        assert_true(cj_fqcn_valid(ok[i]));
    }
}

static void expect_bad(const char *s, size_t len, int code, size_t off)
{
    struct cj_err e = { 0 };
    int rc = cj_fqcn_check(s, len, &e);
    if (rc != -code) fail_msg("'%.*s': rc %d, want %d (%s)", (int)len, s, rc, -code, e.msg);
    assert_int_equal(e.code, code);
    assert_int_equal(e.offset, off);
}

static void test_invalid(void **state)
{
    (void)state;
    expect_bad("", 0, CJ_E_INVALID, 0);
    expect_bad(".", 1, CJ_E_INVALID, 0);
    expect_bad("a.", 2, CJ_E_INVALID, 2);
    expect_bad(".a", 2, CJ_E_INVALID, 0);
    expect_bad("a..b", 4, CJ_E_INVALID, 2);
    expect_bad("site-1.site-1", 13, CJ_E_INVALID, 7);
    expect_bad("a.b.a", 5, CJ_E_INVALID, 4);
    expect_bad("site-1.J1.J1", 12, CJ_E_INVALID, 10);
    expect_bad("a b", 3, CJ_E_INVALID, 1);
    expect_bad(" site-1", 7, CJ_E_INVALID, 0);
    expect_bad("site-1 ", 7, CJ_E_INVALID, 6);
    expect_bad("a/b", 3, CJ_E_INVALID, 1);
    expect_bad("a:b", 3, CJ_E_INVALID, 1);
    expect_bad("caf\xc3\xa9", 5, CJ_E_INVALID, 3);
    expect_bad("ab\0cd", 5, CJ_E_INVALID, 2);
    assert_false(cj_fqcn_valid(NULL));
    assert_false(cj_fqcn_valid("site-1.site-1"));
    assert_false(cj_fqcn_valid("site-1..J1"));
    /* "site-1.site-10" repeats no part */
    assert_true(cj_fqcn_valid("site-1.site-10"));
    assert_true(cj_fqcn_valid("a.b.ab.ba"));

    char big[CJ_FQCN_MAX + 2];
    memset(big, 'x', sizeof big);
    big[CJ_FQCN_MAX] = 0;
    assert_true(cj_fqcn_valid(big));              /* exactly the limit */
    big[CJ_FQCN_MAX] = 'x';
    big[CJ_FQCN_MAX + 1] = 0;
    expect_bad(big, CJ_FQCN_MAX + 1, CJ_E_LIMIT, CJ_FQCN_MAX);
}

static void test_gen_root(void **state)
{
    (void)state;
    assert_int_equal(cj_fqcn_gen("server"), 1);
    assert_int_equal(cj_fqcn_gen("site-1"), 1);
    assert_int_equal(cj_fqcn_gen("server.job-7f3a"), 2);
    assert_int_equal(cj_fqcn_gen("site-1.J1"), 2);
    assert_int_equal(cj_fqcn_gen("site-1.J1.trainer_1"), 3);
    assert_int_equal(cj_fqcn_gen(""), 0);
    assert_int_equal(cj_fqcn_gen(NULL), 0);
    assert_int_equal(cj_fqcn_root_len("site-1.J1"), 6);
    assert_true(cj_fqcn_is_server("server"));
    assert_true(cj_fqcn_is_server("server.job-7f3a"));
    assert_false(cj_fqcn_is_server("servers"));
    assert_false(cj_fqcn_is_server("serve"));
    assert_false(cj_fqcn_is_server("site-1.server"));
}

static void test_parent(void **state)
{
    (void)state;
    char p[CJ_FQCN_MAX + 1];
    assert_int_equal(cj_fqcn_parent("site-1.J1.trainer_1", p, sizeof p), 0);
    assert_string_equal(p, "site-1.J1");
    assert_int_equal(cj_fqcn_parent("site-1.J1", p, sizeof p), 0);
    assert_string_equal(p, "site-1");
    assert_int_equal(cj_fqcn_parent("site-1", p, sizeof p), -1);
    assert_int_equal(cj_fqcn_parent("server", p, sizeof p), -1);
    assert_int_equal(cj_fqcn_parent("site-1.J1", p, 6), -1); /* "site-1" needs 7 bytes */
    assert_int_equal(cj_fqcn_parent("site-1.J1", p, 7), 0);
}

static void test_ancestor(void **state)
{
    (void)state;
    assert_true(cj_fqcn_is_ancestor("site-1", "site-1.J1"));
    assert_true(cj_fqcn_is_ancestor("site-1", "site-1.J1.trainer_1"));
    assert_true(cj_fqcn_is_ancestor("site-1.J1", "site-1.J1.trainer_1"));
    assert_false(cj_fqcn_is_ancestor("site-1", "site-10.J1"));
    assert_false(cj_fqcn_is_ancestor("site-1.J1", "site-1.J10"));
    assert_false(cj_fqcn_is_ancestor("site-1.J1", "site-1.J1"));
    assert_false(cj_fqcn_is_ancestor("site-1.J1.trainer_1", "site-1.J1"));
    assert_false(cj_fqcn_is_ancestor("", ".x"));
    assert_false(cj_fqcn_is_ancestor("server", "site-1.server"));
    assert_false(cj_fqcn_is_ancestor(NULL, "a.b"));
}

static void test_direct_child(void **state)
{
    (void)state;
    const char *leaf = NULL;
    assert_true(cj_fqcn_is_direct_child("site-1.J1", "site-1.J1.trainer_1", &leaf));
    assert_string_equal(leaf, "trainer_1");
    assert_true(cj_fqcn_is_direct_child("site-1.J1", "site-1.J1.client_api_trainer_1", NULL));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "site-1.J1.a.b", &leaf));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "site-1.J1.", &leaf));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "site-1.J10", &leaf));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "site-1.J1", &leaf));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "server", &leaf));
    assert_false(cj_fqcn_is_direct_child("site-1.J1", "site-1", &leaf));
    assert_true(cj_fqcn_is_direct_child("site-1", "site-1.J1", &leaf));
    assert_string_equal(leaf, "J1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),     cmocka_unit_test(test_invalid),       cmocka_unit_test(test_gen_root),
        cmocka_unit_test(test_parent),    cmocka_unit_test(test_ancestor),      cmocka_unit_test(test_direct_child),
    };
    return cmocka_run_group_tests_name("fqcn", tests, NULL, NULL);
}
