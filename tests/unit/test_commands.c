/* test_commands.c — the status command table (lib/ops/commands.c) and the line
 * protocol that walks it (cj_status_dispatch in lib/ops/status.c): names, access
 * levels, argument counts, help, and what reaches the daemon's handlers. */
#include "testutil.h"

#include <event2/buffer.h>

#include "ops/commands.h"
#include "ops/status.h"

struct calls {
    int shows, commands;
    enum cj_show what;
    bool json;
    enum cj_cmd cmd;
    char arg[64];
    int rc;   /* what the command handler answers */
};

static void rec_show(void *ctx, enum cj_show what, struct cj_out *o)
{
    struct calls *c = ctx;
    c->shows++;
    c->what = what;
    c->json = o->json;
    cj_out_str(o, "target", cj_shows[what].name);
}

static int rec_command(void *ctx, enum cj_cmd cmd, const char *arg, char *msg, size_t msgsz)
{
    struct calls *c = ctx;
    c->commands++;
    c->cmd = cmd;
    snprintf(c->arg, sizeof c->arg, "%s", arg ? arg : "(null)");
    if (c->rc) snprintf(msg, msgsz, "refused\nwith a newline");
    return c->rc;
}

/* Runs line as an admin or read-only client; returns the answer (static). */
static const char *run(struct calls *c, bool admin, const char *line)
{
    static char ans[4096];
    struct cj_status_ops ops = {.ctx = c, .show = rec_show, .command = rec_command};
    struct evbuffer *out = evbuffer_new();
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line);
    cj_status_dispatch(&ops, admin, buf, strlen(buf), out);
    size_t n = evbuffer_get_length(out);
    assert_true(n < sizeof ans);
    evbuffer_remove(out, ans, n);
    ans[n] = '\0';
    evbuffer_free(out);
    return ans;
}

static void test_table_is_whole(void **state)
{
    (void)state;
    for (int i = 0; i < CJ_CMD_COUNT; i++) {
        assert_non_null(cj_cmds[i].name);
        assert_non_null(cj_cmds[i].help);
        assert_non_null(cj_cmds[i].args);
        assert_true(cj_cmds[i].min_args <= cj_cmds[i].max_args);
        assert_true(cj_cmds[i].max_args < CJ_STATUS_MAX_WORDS);
        assert_int_equal(cj_cmd_find(cj_cmds[i].name), i);   /* names are unique */
    }
    for (int i = 0; i < CJ_SHOW_COUNT; i++) {
        assert_non_null(cj_shows[i].name);
        assert_non_null(cj_shows[i].help);
        assert_int_equal(cj_show_find(cj_shows[i].name), i);
    }
    assert_int_equal(cj_cmd_find("SHOW"), -1);
    assert_int_equal(cj_show_find(""), -1);
}

static void test_help_lists_the_table(void **state)
{
    (void)state;
    struct calls c = {0};
    assert_string_equal(run(&c, false, "help"),
                        "help [command]\n"
                        "show info|stats|workers|tasks|refs|config|metrics [json]\n"
                        "pause\nresume\nreload\nshutdown [now]\n\n");
    const char *a = run(&c, false, "help show");
    assert_non_null(strstr(a, "usage: show <what> [json]\naccess: read\n"));
    for (int i = 0; i < CJ_SHOW_COUNT; i++) {
        char want[128];
        snprintf(want, sizeof want, "\n%s: %s\n", cj_shows[i].name, cj_shows[i].help);
        assert_non_null(strstr(a, want));
    }
    assert_string_equal(run(&c, false, "help shutdown"),
                        "usage: shutdown [now]\naccess: admin\nwhat: drain (no new tasks, work in flight finishes) "
                        "then exit; now: stop at once\n\n");
    assert_string_equal(run(&c, false, "help nope"), "ERR 400 unknown command 'nope'; try: help\n\n");
    assert_int_equal(c.shows + c.commands, 0);
}

static void test_show_reaches_its_target(void **state)
{
    (void)state;
    struct calls c = {0};
    for (int i = 0; i < CJ_SHOW_COUNT; i++) {
        char line[64], want[128];
        snprintf(line, sizeof line, "show %s", cj_shows[i].name);
        snprintf(want, sizeof want, "target: %s\n\n", cj_shows[i].name);
        assert_string_equal(run(&c, false, line), want);
        assert_int_equal(c.what, i);
        assert_false(c.json);
        snprintf(line, sizeof line, "show %s json", cj_shows[i].name);
        snprintf(want, sizeof want, "{\"target\":\"%s\"}\n\n", cj_shows[i].name);
        assert_string_equal(run(&c, false, line), want);
        assert_true(c.json);
    }
    assert_int_equal(c.shows, 2 * CJ_SHOW_COUNT);
    assert_string_equal(run(&c, false, "show bogus"), "ERR 400 unknown show target 'bogus'; try: help show\n\n");
    assert_string_equal(run(&c, false, "show stats xml"), "ERR 400 unknown option; usage: show <what> [json]\n\n");
    assert_string_equal(run(&c, false, "show"), "ERR 400 missing argument; usage: show <what> [json]\n\n");
    assert_string_equal(run(&c, false, "show stats json x"),
                        "ERR 400 too many arguments; usage: show <what> [json]\n\n");
    assert_int_equal(c.shows, 2 * CJ_SHOW_COUNT);
}

/* Every admin command: refused (403) to a read-only client before its
 * arguments are looked at, run for an admin with the argument it allows. */
static void test_access_and_arguments(void **state)
{
    (void)state;
    for (int i = 0; i < CJ_CMD_COUNT; i++) {
        const struct cj_cmd_def *d = &cj_cmds[i];
        if (i == CJ_CMD_HELP || i == CJ_CMD_SHOW) continue;
        struct calls c = {0};
        char line[128], want[192];
        snprintf(line, sizeof line, "%s a b c", d->name);
        if (d->access == CJ_ACCESS_ADMIN)
            assert_string_equal(run(&c, false, line), "ERR 403 permission denied: read-only client\n\n");
        snprintf(want, sizeof want, "ERR 400 too many arguments; usage: %s%s%s\n\n", d->name, d->args[0] ? " " : "",
                 d->args);
        assert_string_equal(run(&c, true, line), want);
        assert_int_equal(c.commands, 0);
        assert_string_equal(run(&c, true, d->name), "OK\n\n");
        assert_int_equal(c.cmd, i);
        assert_string_equal(c.arg, "(null)");
        if (d->max_args > 0) {
            snprintf(line, sizeof line, "%s now", d->name);
            assert_string_equal(run(&c, true, line), "OK\n\n");
            assert_string_equal(c.arg, "now");
        }
    }
}

static void test_refusals(void **state)
{
    (void)state;
    struct calls c = {.rc = 500};
    /* a handler's message is one line, whatever it holds */
    assert_string_equal(run(&c, true, "reload"), "ERR 500 refused with a newline\n\n");
    assert_string_equal(run(&c, true, "bogus x"), "ERR 400 unknown command 'bogus'; try: help\n\n");
    assert_string_equal(run(&c, true, ""), "ERR 400 empty command; try: help\n\n");
    assert_string_equal(run(&c, true, "a b c d e f g h i"), "ERR 400 too many words; try: help\n\n");
    char long_word[200];
    memset(long_word, 'x', sizeof long_word - 1);
    long_word[sizeof long_word - 1] = '\0';
    const char *a = run(&c, true, long_word);   /* quoted back cut short */
    assert_true(strlen(a) < 120);
    assert_int_equal(c.commands, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_whole),
        cmocka_unit_test(test_help_lists_the_table),
        cmocka_unit_test(test_show_reaches_its_target),
        cmocka_unit_test(test_access_and_arguments),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
