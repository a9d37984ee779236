/* SPDX-License-Identifier: Apache-2.0 */
/* test_account.c — a worker account from names or ids, and the switch in a
 * child (lib/util/account.c). */
#include "testutil.h"
#include <sys/wait.h>
#include <unistd.h>

#include "util/account.h"

static void test_own_account(void **state)
{
    (void)state;
    struct cj_account a;
    char why[256];
    assert_int_equal(cj_account_resolve(NULL, NULL, &a, why, sizeof why), 0);
    assert_int_equal(a.uid, geteuid());
    assert_int_equal(a.gid, getegid());
    char id[16];
    snprintf(id, sizeof id, "%u", (unsigned)geteuid());
    assert_int_equal(cj_account_resolve(id, NULL, &a, why, sizeof why), 0);
    assert_int_equal(a.uid, geteuid());
    assert_true(a.ngroups >= 1);
}

static void test_refusals(void **state)
{
    (void)state;
    struct cj_account a;
    char why[256];
    assert_int_equal(cj_account_resolve("cjtest-no-such-user", NULL, &a, why, sizeof why), -1);
    assert_string_equal(why, "user: no user 'cjtest-no-such-user' on this system");
    assert_int_equal(cj_account_resolve(NULL, "cjtest-no-such-group", &a, why, sizeof why), -1);
    assert_string_equal(why, "group: no group 'cjtest-no-such-group' on this system");
    /* 4294967295 is (uid_t)-1, "leave unchanged" to setuid: never an account */
    assert_int_equal(cj_account_resolve("4294967295", NULL, &a, why, sizeof why), -1);
    if (geteuid() != 0) { /* another account needs root */
        assert_int_equal(cj_account_resolve("0", NULL, &a, why, sizeof why), -1);
        assert_non_null(strstr(why, "that needs root"));
    }
}

/* As root: a child switches to uid/gid 65534 and cannot come back. */
static void test_enter(void **state)
{
    (void)state;
    if (geteuid() != 0) skip();
    struct cj_account a;
    char why[256];
    assert_int_equal(cj_account_resolve("65534", "65534", &a, why, sizeof why), 0);
    assert_int_equal(a.uid, 65534);
    assert_int_equal(a.gid, 65534);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gid_t g[4];
        int ok = cj_account_enter(&a) == 0 && getuid() == 65534 && geteuid() == 65534 && getgid() == 65534 &&
                 getgroups(4, g) >= 1 && g[0] == 65534 && setuid(0) != 0;
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_account),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_enter),
    };
    return cmocka_run_group_tests_name("account", tests, NULL, NULL);
}
