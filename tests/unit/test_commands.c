/* SPDX-License-Identifier: Apache-2.0 */
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
    char arg[64], last[256], job[64];
    int nargs;
    int rc;   /* what the command handler answers */
};

static int rec_show(void *ctx, enum cj_show what, const char *job, struct cj_out *o, char *msg, size_t msgsz)
{
    struct calls *c = ctx;
    c->shows++;
    c->what = what;
    c->json = o->json;
    snprintf(c->job, sizeof c->job, "%s", job ? job : "(null)");
    if (job && !strcmp(job, "nope")) { snprintf(msg, msgsz, "no job 'nope'"); return 404; }
    cj_out_str(o, "target", cj_shows[what].name);
    return 0;
}

static int rec_command(void *ctx, enum cj_cmd cmd, char **args, int nargs, struct cj_status_call *call, char *msg,
                       size_t msgsz)
{
    struct calls *c = ctx;
    c->commands++;
    c->cmd = cmd;
    c->nargs = nargs;
    snprintf(c->arg, sizeof c->arg, "%s", nargs ? args[0] : "(null)");
    snprintf(c->last, sizeof c->last, "%s", nargs ? args[nargs - 1] : "(null)");
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
    cj_status_dispatch(&ops, admin, NULL, buf, strlen(buf), out);
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
                        "show info|stats|workers|tasks|refs|config|metrics|jobs|prometheus [job ID] [json]\n"
                        "pause\nresume\nreload\nshutdown [now]\n"
                        "job start <json>\njob stop <job_id> [reason]\njob wait <job_id>\n\n");
    const char *a = run(&c, false, "help show");
    assert_non_null(strstr(a, "usage: show <what> [job ID] [json]\naccess: read\n"));
    for (int i = 0; i < CJ_SHOW_COUNT; i++) {
        char want[128];
        snprintf(want, sizeof want, "\n%s: %s\n", cj_shows[i].name, cj_shows[i].help);
        assert_non_null(strstr(a, want));
    }
    assert_string_equal(run(&c, false, "help shutdown"),
                        "usage: shutdown [now]\naccess: admin\nwhat: drain (no new tasks, work in flight finishes) "
                        "then exit; now: stop at once\n\n");
    assert_string_equal(run(&c, false, "help nope"), "ERR 400 unknown command 'nope'; try: help\n\n");
    assert_string_equal(run(&c, false, "help job"),
                        "job start <json>\njob stop <job_id> [reason]\njob wait <job_id>\n\n");
    assert_non_null(strstr(run(&c, false, "help job stop"), "usage: job stop <job_id> [reason]\naccess: admin\n"));
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
    assert_string_equal(run(&c, false, "show stats xml"),
                        "ERR 400 unknown option; usage: show <what> [job ID] [json]\n\n");
    assert_string_equal(run(&c, false, "show"), "ERR 400 missing argument; usage: show <what> [job ID] [json]\n\n");
    assert_string_equal(run(&c, false, "show stats job J1 json x"),
                        "ERR 400 too many arguments; usage: show <what> [job ID] [json]\n\n");
    assert_string_equal(run(&c, false, "show stats json job J1"),
                        "ERR 400 unknown option; usage: show <what> [job ID] [json]\n\n");
    assert_string_equal(run(&c, false, "show stats job J1 json"), "{\"target\":\"stats\"}\n\n");
    assert_string_equal(c.job, "J1");
    assert_string_equal(run(&c, false, "show tasks job nope"), "ERR 404 no job 'nope'\n\n");
    assert_int_equal(c.shows, 2 * CJ_SHOW_COUNT + 2);
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
        if (d->rest) {   /* the last argument takes the rest of the line */
            if (d->access == CJ_ACCESS_ADMIN)
                assert_string_equal(run(&c, false, line), "ERR 403 permission denied: read-only client\n\n");
            assert_string_equal(run(&c, true, line), "OK\n\n");
            assert_int_equal(c.nargs, d->max_args);
            assert_string_equal(c.last, d->max_args == 1 ? "a b c" : "b c");
            continue;
        }
        if (d->access == CJ_ACCESS_ADMIN)
            assert_string_equal(run(&c, false, line), "ERR 403 permission denied: read-only client\n\n");
        snprintf(want, sizeof want, "ERR 400 too many arguments; usage: %s%s%s\n\n", d->name, d->args[0] ? " " : "",
                 d->args);
        assert_string_equal(run(&c, true, line), want);
        assert_int_equal(c.commands, 0);
        if (d->min_args == 0) {
            assert_string_equal(run(&c, true, d->name), "OK\n\n");
            assert_int_equal(c.cmd, i);
            assert_string_equal(c.arg, "(null)");
        } else {
            snprintf(want, sizeof want, "ERR 400 missing argument; usage: %s %s\n\n", d->name, d->args);
            assert_string_equal(run(&c, true, d->name), want);
        }
        if (d->max_args > 0) {
            snprintf(line, sizeof line, "%s now", d->name);
            assert_string_equal(run(&c, true, line), "OK\n\n");
            assert_string_equal(c.arg, "now");
        }
    }
}

/* job start: the JSON is the rest of the line as it came, blanks and all. */
static void test_rest_of_line(void **state)
{
    (void)state;
    struct calls c = {0};
    assert_string_equal(run(&c, true, "job start  {\"job_id\": \"J1\",\t\"mode\": \"spool\"}  "), "OK\n\n");
    assert_int_equal(c.cmd, CJ_CMD_JOB_START);
    assert_string_equal(c.last, "{\"job_id\": \"J1\",\t\"mode\": \"spool\"}");
    assert_string_equal(run(&c, true, "job stop J1 the operator said so"), "OK\n\n");
    assert_int_equal(c.nargs, 2);
    assert_string_equal(c.arg, "J1");
    assert_string_equal(c.last, "the operator said so");
    assert_string_equal(run(&c, true, "job stop J1"), "OK\n\n");
    assert_int_equal(c.nargs, 1);
    /* a long description is not "too many words" */
    assert_string_equal(run(&c, true, "job start {\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5}"), "OK\n\n");
    assert_string_equal(run(&c, true, "job start"), "ERR 400 missing argument; usage: job start <json>\n\n");
    assert_string_equal(run(&c, false, "job wait J1 x"), "ERR 400 too many arguments; usage: job wait <job_id>\n\n");
    assert_string_equal(run(&c, true, "job frob J1"), "ERR 400 unknown command 'job frob'; try: help job\n\n");
}

static void test_refusals(void **state)
{
    (void)state;
    struct calls c = {.rc = 500};
    /* a handler's message is one line, whatever it holds */
    assert_string_equal(run(&c, true, "reload"), "ERR 500 refused with a newline\n\n");
    assert_string_equal(run(&c, true, "bogus x"), "ERR 400 unknown command 'bogus'; try: help\n\n");
    assert_string_equal(run(&c, true, ""), "ERR 400 empty command; try: help\n\n");
    assert_string_equal(run(&c, true, "show a b c d e f g h i"), "ERR 400 too many words; try: help\n\n");
    assert_string_equal(run(&c, true, "a b c d e f g h i"), "ERR 400 unknown command 'a'; try: help\n\n");
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
        cmocka_unit_test(test_rest_of_line),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
