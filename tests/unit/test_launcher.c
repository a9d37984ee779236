/* SPDX-License-Identifier: Apache-2.0 */
/* test_launcher.c — worker processes (lib/fl/launcher.c) with /bin/sh scripts as
 * workers: bootstrap file and environment, output logged per line with the
 * worker's name, restart with back-off, staged stop up to SIGKILL, the stop and
 * replacement of a lost worker, launch_timeout (gave_up with the worker's last
 * error and stderr line; a worker through SESSION_READY stops the count), and the
 * launch_token_file reader. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "fl/bootstrap.h"
#include "fl/launcher.h"

#define SITE "site-1"
#define JOB "job-7f3a"
#define URL "tcp://127.0.0.1:8003"
#define MAXL 64

struct fx {
    struct event_base *base;
    struct event *guard;
    char dir[64];
    struct cj_launcher *l;
    /* callbacks */
    int spawns, exits;
    char fqcn[8][256];
    char token[8][64];
    pid_t pid[8];
    double spawn_at[8];
    int exit_status[8];
    bool exit_stopping[8];
    double exit_at[8];
    int n_lines;
    char lines[MAXL][1100];
    int line_stream[MAXL];
    double barrier_until;               /* in_barrier answers true until then */
    double launch_timeout;              /* for the next fx_launcher */
    int gave_ups;
    double gave_up_at;
    char gave_up_why[CJ_LAUNCHER_WHY_MAX];
    int barrier_asks;
    /* stderr capture */
    int saved_err;
    char log_path[96];
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#define RUN_UNTIL(f, cond, secs)                                                                        \
    do {                                                                                                \
        double end_ = mono() + (secs);                                                                  \
        while (!(cond) && mono() < end_) event_base_loop((f)->base, EVLOOP_ONCE);                       \
    } while (0)

static void on_spawn(void *ctx, const char *fqcn, const char *token, pid_t pid)
{
    struct fx *f = ctx;
    int i = f->spawns++;
    if (i >= 8) return;
    snprintf(f->fqcn[i], sizeof f->fqcn[i], "%s", fqcn);
    snprintf(f->token[i], sizeof f->token[i], "%s", token);
    f->pid[i] = pid;
    f->spawn_at[i] = mono();
}

static void on_exit_cb(void *ctx, const char *fqcn, int status, bool stopping)
{
    struct fx *f = ctx;
    int i = f->exits++;
    if (i >= 8) return;
    bool known = false;
    for (int k = 0; k < f->spawns && k < 8; k++) known |= !strcmp(fqcn, f->fqcn[k]);
    assert_true(known);
    f->exit_status[i] = status;
    f->exit_stopping[i] = stopping;
    f->exit_at[i] = mono();
}

static void on_line(void *ctx, const char *fqcn, int stream, const char *line)
{
    struct fx *f = ctx;
    if (f->n_lines >= MAXL) return;
    snprintf(f->lines[f->n_lines], sizeof f->lines[0], "%s", line);
    f->line_stream[f->n_lines++] = stream;
}

static bool in_barrier(void *ctx, const char *fqcn)
{
    struct fx *f = ctx;
    f->barrier_asks++;
    return mono() < f->barrier_until;
}

static void on_gave_up(void *ctx, const char *why)
{
    struct fx *f = ctx;
    f->gave_ups++;
    f->gave_up_at = mono();
    snprintf(f->gave_up_why, sizeof f->gave_up_why, "%s", why);
}

static bool has_line(const struct fx *f, const char *line, int stream)
{
    for (int i = 0; i < f->n_lines; i++)
        if (!strcmp(f->lines[i], line) && f->line_stream[i] == stream) return true;
    return false;
}

static void guard_cb(evutil_socket_t fd, short what, void *arg) {}

static struct fx *fx_new(void)
{
    struct fx *f = calloc(1, sizeof *f);
    f->base = event_base_new();
    f->guard = event_new(f->base, -1, EV_PERSIST, guard_cb, f);
    struct timeval tv = {0, 10000};
    event_add(f->guard, &tv);
    snprintf(f->dir, sizeof f->dir, "/tmp/cjlaunch.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    /* the log goes to a file we can read back */
    snprintf(f->log_path, sizeof f->log_path, "%s.log", f->dir);
    fflush(stderr);
    f->saved_err = dup(2);
    int fd = open(f->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    dup2(fd, 2);
    close(fd);
    return f;
}

static struct cj_launcher *fx_launcher(struct fx *f, const char *command, int count, double grace, double rmin,
                                       double rmax, size_t line_max)
{
    struct cj_launcher_cfg cfg = {
        .command = command, .count = count, .runtime_dir = f->dir, .connect_url = URL,
        .site = SITE, .job_id = JOB, .shutdown_grace = grace, .restart_min = rmin, .restart_max = rmax,
        .line_max = line_max, .launch_timeout = f->launch_timeout,
    };
    struct cj_launcher_cbs cbs = {f, on_spawn, on_exit_cb, in_barrier, on_line, on_gave_up};
    struct cj_err e = {0};
    f->l = cj_launcher_new(f->base, &cfg, &cbs, &e);
    if (!f->l) fail_msg("launcher: %s", e.msg);
    return f->l;
}

/* The captured log so far (malloc'd, NUL-terminated). */
static char *read_log(const struct fx *f)
{
    FILE *fp = fopen(f->log_path, "rb");
    assert_non_null(fp);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return buf;
}

static void fx_free(struct fx *f)
{
    cj_launcher_free(f->l);
    dup2(f->saved_err, 2);
    close(f->saved_err);
    unlink(f->log_path);
    assert_int_equal(rmdir(f->dir), 0);   /* every bootstrap file was removed */
    event_free(f->guard);
    event_base_free(f->base);
    free(f);
}

/* ---- command splitting ---------------------------------------------------------------------- */

static void split_ok(const char *cmd, int n, const char *const want[])
{
    char **argv;
    int argc;
    struct cj_err e = {0};
    if (cj_launcher_split(cmd, &argv, &argc, &e)) fail_msg("split %s: %s", cmd, e.msg);
    assert_int_equal(argc, n);
    for (int i = 0; i < n; i++) assert_string_equal(argv[i], want[i]);
    assert_null(argv[n]);
    cj_launcher_argv_free(argv);
}

static void split_bad(const char *cmd)
{
    char **argv = (char **)1;
    struct cj_err e = {0};
    assert_true(cj_launcher_split(cmd, &argv, NULL, &e) < 0);
    assert_null(argv);
    assert_true(e.msg[0] != 0);
}

static void test_split(void **state)
{
    split_ok("python3  train.py --epochs 2", 4, (const char *const[]){"python3", "train.py", "--epochs", "2"});
    split_ok("  a\tb\n", 2, (const char *const[]){"a", "b"});
    split_ok("'a b' \"c \\\" d\" e\\ f", 3, (const char *const[]){"a b", "c \" d", "e f"});
    split_ok("\"$HOME\\$x\\n\" 'it''s' \"\"", 3, (const char *const[]){"$HOME$x\\n", "its", ""});
    split_ok("x'y'\"z\"", 1, (const char *const[]){"xyz"});
    split_ok("'\\' \"a\\\\b\"", 2, (const char *const[]){"\\", "a\\b"});
    split_bad("");
    split_bad("   ");
    split_bad("'open");
    split_bad("\"open");
    split_bad("trailing\\");
    char many[2 * (CJ_LAUNCHER_MAX_ARGS + 1) + 1];
    for (int i = 0; i <= CJ_LAUNCHER_MAX_ARGS; i++) {
        many[2 * i] = 'a';
        many[2 * i + 1] = ' ';
    }
    many[2 * (CJ_LAUNCHER_MAX_ARGS + 1)] = 0;
    split_bad(many);
}

/* ---- processes ---------------------------------------------------------------------------------- */

static void test_launch_and_stop(void **state)
{
    struct fx *f = fx_new();
    setenv("CLIENT_API_TYPE", "CELL_API", 1);
    setenv("NVFLARE_JOB_AUTH_TOKEN", "relay-secret", 1);
    /* The script text is an argument beyond argv[0]: it must never be logged. */
    fx_launcher(f,
                "/bin/sh -c 'echo hello from worker; echo \"boot=$NVFLARE_CLIENT_API_BOOTSTRAP\"; "
                "echo \"type=${CLIENT_API_TYPE-unset} tok=${NVFLARE_JOB_AUTH_TOKEN-unset}\"; "
                "echo oops >&2; printf partial; exec sleep 10 # ARGV-MARKER'",
                1, 0.3, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    assert_int_equal(f->spawns, 1);
    assert_string_equal(f->fqcn[0], SITE "." JOB ".client_api_trainer_1");
    assert_int_equal(strlen(f->token[0]), CJ_BOOTSTRAP_TOKEN_LEN);
    assert_int_equal(cj_launcher_pid(f->l, f->fqcn[0]), f->pid[0]);
    assert_int_equal(cj_launcher_running(f->l), 1);
    RUN_UNTIL(f, f->n_lines >= 4, 3.0);

    char path[200];
    snprintf(path, sizeof path, "%s/client_api_bootstrap_1.json", f->dir);
    char want[260];
    snprintf(want, sizeof want, "boot=%s", path);
    assert_true(has_line(f, "hello from worker", 1));
    assert_true(has_line(f, want, 1));
    assert_true(has_line(f, "type=unset tok=unset", 1));
    assert_true(has_line(f, "oops", 2));

    /* the bootstrap file: 0600, the launch's values */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    struct cj_bootstrap b;
    struct cj_err e = {0};
    assert_int_equal(cj_bootstrap_read(path, &b, &e), 0);
    assert_string_equal(b.trainer_fqcn, f->fqcn[0]);
    assert_string_equal(b.launch_token, f->token[0]);
    assert_string_equal(b.cj_fqcn, SITE "." JOB);
    assert_string_equal(b.connect_url, URL);
    assert_int_equal(b.cj_pid, getpid());
    assert_false(b.secure_mode);
    /* its own process group */
    assert_int_equal(getpgid(f->pid[0]), f->pid[0]);

    /* staged stop: SIGTERM after the grace, then reaped, file removed, no relaunch */
    double t0 = mono();
    assert_int_equal(cj_launcher_stop(f->l, f->fqcn[0]), 0);
    RUN_UNTIL(f, f->exits > 0, 3.0);
    assert_int_equal(f->exits, 1);
    assert_true(f->exit_at[0] - t0 >= 0.25);
    assert_true(WIFSIGNALED(f->exit_status[0]) && WTERMSIG(f->exit_status[0]) == SIGTERM);
    assert_true(f->exit_stopping[0]);
    assert_int_equal(cj_launcher_running(f->l), 0);
    assert_int_equal(cj_launcher_pid(f->l, f->fqcn[0]), 0);
    assert_int_equal(access(path, F_OK), -1);
    RUN_UNTIL(f, false, 0.3);
    assert_int_equal(f->spawns, 1);
    assert_true(has_line(f, "partial", 1));   /* the unterminated tail, at EOF */

    /* the log: lines prefixed with the worker's name; no token, no arguments */
    char *log = read_log(f);
    assert_non_null(strstr(log, "worker client_api_trainer_1: hello from worker"));
    assert_non_null(strstr(log, "worker client_api_trainer_1 (stderr): oops"));
    assert_null(strstr(log, f->token[0]));
    assert_null(strstr(log, "ARGV-MARKER"));
    assert_null(strstr(log, "relay-secret"));
    free(log);
    unsetenv("CLIENT_API_TYPE");
    unsetenv("NVFLARE_JOB_AUTH_TOKEN");
    fx_free(f);
}

static void test_restart_backoff(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "/bin/sh -c 'echo started; exit 3'", 1, 0.3, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->spawns >= 4, 4.0);
    assert_true(f->spawns >= 4);
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, SITE "." JOB ".client_api_trainer_%d", i + 1);
        assert_string_equal(f->fqcn[i], want);
        assert_true(WIFEXITED(f->exit_status[i]) && WEXITSTATUS(f->exit_status[i]) == 3);
        assert_false(f->exit_stopping[i]);
        assert_string_not_equal(f->token[i], f->token[i + 1]);   /* a fresh token per launch */
    }
    /* back-off: 0.1, 0.2, 0.4 (capped) after each exit */
    assert_true(f->spawn_at[1] - f->exit_at[0] >= 0.09);
    assert_true(f->spawn_at[2] - f->exit_at[1] >= 0.19);
    assert_true(f->spawn_at[3] - f->exit_at[2] >= 0.39);
    assert_true(cj_launcher_launches(f->l) >= 4);
    cj_launcher_stop_all(f->l, false);
    int spawns = f->spawns;
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 2.0);
    RUN_UNTIL(f, false, 0.6);
    assert_int_equal(f->spawns, spawns);   /* no relaunch once stopping */
    fx_free(f);
}

static void test_kill_escalation(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "/bin/sh -c \"trap '' TERM; echo ready; while :; do sleep 0.05; done\"", 1, 0.3, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->n_lines >= 1, 3.0);
    assert_true(has_line(f, "ready", 1));
    double t0 = mono();
    assert_int_equal(cj_launcher_stop(f->l, f->fqcn[0]), 0);
    RUN_UNTIL(f, f->exits > 0, 3.0);
    assert_int_equal(f->exits, 1);
    assert_true(WIFSIGNALED(f->exit_status[0]) && WTERMSIG(f->exit_status[0]) == SIGKILL);
    assert_true(f->exit_at[0] - t0 >= 0.55);   /* grace, SIGTERM ignored, grace, SIGKILL */
    assert_true(f->exit_at[0] - t0 < 2.0);
    char *log = read_log(f);
    assert_non_null(strstr(log, "SIGTERM to its process group"));
    assert_non_null(strstr(log, "SIGKILL to its process group"));
    free(log);
    fx_free(f);
}

static void test_barrier_delays_term(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "sleep 10", 1, 0.2, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, false, 0.05);
    double t0 = mono();
    f->barrier_until = t0 + 0.8;   /* the worker serves its result for 0.8 s */
    assert_int_equal(cj_launcher_stop(f->l, f->fqcn[0]), 0);
    RUN_UNTIL(f, f->exits > 0, 3.0);
    assert_int_equal(f->exits, 1);
    assert_true(f->exit_at[0] - t0 >= 0.8);
    assert_true(f->exit_at[0] - t0 < 2.0);
    assert_true(f->barrier_asks >= 2);
    assert_true(WIFSIGNALED(f->exit_status[0]) && WTERMSIG(f->exit_status[0]) == SIGTERM);
    fx_free(f);
}

static void test_stop_all_now(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "sleep 10", 2, 2.0, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    assert_int_equal(cj_launcher_running(f->l), 2);
    assert_string_equal(f->fqcn[1], SITE "." JOB ".client_api_trainer_2");
    RUN_UNTIL(f, false, 0.1);
    double t0 = mono();
    f->barrier_until = t0 + 60;         /* "now" overrides the result barrier */
    cj_launcher_stop_all(f->l, true);   /* SIGTERM at once, not after the 2 s grace */
    RUN_UNTIL(f, f->exits >= 2, 3.0);
    assert_int_equal(f->exits, 2);
    assert_true(mono() - t0 < 1.0);
    assert_int_equal(cj_launcher_running(f->l), 0);
    fx_free(f);
}

struct slot_seen {
    int n;
    char last_error[CJ_LAUNCHER_ERROR_MAX];
    unsigned failures;
    time_t at;
};

static void see_slot(void *arg, const struct cj_launcher_slot_info *si)
{
    struct slot_seen *s = arg;
    s->n++;
    snprintf(s->last_error, sizeof s->last_error, "%s", si->last_error);
    s->failures = si->failures;
    s->at = si->last_error_at;
}

static void test_exec_failure_and_long_lines(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "/nonexistent/cjrelay-worker --flag", 1, 0.3, 0.1, 0.2, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->exits >= 2, 3.0);
    assert_true(WIFEXITED(f->exit_status[0]) && WEXITSTATUS(f->exit_status[0]) == 127);
    assert_true(f->spawns >= 2);
    /* the slot says why, with errno's text, for show workers */
    struct slot_seen seen = {0};
    cj_launcher_slots(f->l, see_slot, &seen);
    assert_int_equal(seen.n, 1);
    assert_non_null(strstr(seen.last_error, "cannot exec /nonexistent/cjrelay-worker: No such file or directory"));
    assert_true(seen.failures >= 2 && seen.at > 0);
    cj_launcher_stop_all(f->l, true);
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 2.0);
    cj_launcher_free(f->l);

    /* a 2500-byte line with line_max 1000: three pieces */
    f->n_lines = 0;
    f->spawns = f->exits = 0;
    fx_launcher(f, "/bin/sh -c 'head -c 2500 /dev/zero | tr \"\\\\0\" a; echo; echo next; sleep 10'", 1, 0.3, 0.1,
                0.2, 1000);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->n_lines >= 4, 3.0);
    assert_int_equal(f->n_lines, 4);
    assert_int_equal(strlen(f->lines[0]), 1000);
    assert_int_equal(strlen(f->lines[1]), 1000);
    assert_int_equal(strlen(f->lines[2]), 500);
    assert_string_equal(f->lines[3], "next");
    cj_launcher_stop_all(f->l, true);
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 2.0);
    fx_free(f);
}

/* ---- a lost worker: stopped, then replaced ------------------------------------------------------ */

static void test_restart_lost_worker(void **state)
{
    struct fx *f = fx_new();
    /* ignores SIGTERM: SIGKILL must reach it, SIGSTOPped as it is */
    fx_launcher(f, "/bin/sh -c \"trap '' TERM; echo up; while :; do sleep 0.05; done\"", 1, 0.2, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->n_lines >= 1, 3.0);
    assert_int_equal(kill(f->pid[0], SIGSTOP), 0);
    char old_boot[200];
    snprintf(old_boot, sizeof old_boot, "%s/client_api_bootstrap_1.json", f->dir);
    assert_int_equal(cj_launcher_restart(f->l, "site-1.job-7f3a.no_such_worker"), -1);
    double t0 = mono();
    assert_int_equal(cj_launcher_restart(f->l, f->fqcn[0]), 0);
    assert_int_equal(cj_launcher_restart(f->l, f->fqcn[0]), 0);   /* asked twice: one stop */
    RUN_UNTIL(f, f->spawns >= 2, 4.0);
    assert_int_equal(f->exits, 1);
    assert_true(WIFSIGNALED(f->exit_status[0]) && WTERMSIG(f->exit_status[0]) == SIGKILL);
    assert_false(f->exit_stopping[0]);                 /* a relaunch follows */
    assert_true(f->exit_at[0] - t0 >= 0.35);           /* grace, SIGTERM, grace, SIGKILL */
    assert_true(f->spawn_at[1] - f->exit_at[0] >= 0.09);   /* the restart back-off applies */
    assert_int_equal(f->spawns, 2);
    assert_string_equal(f->fqcn[1], SITE "." JOB ".client_api_trainer_2");
    assert_string_not_equal(f->token[1], f->token[0]);
    assert_int_equal(access(old_boot, F_OK), -1);      /* the stale bootstrap is gone */
    assert_int_equal(cj_launcher_pid(f->l, f->fqcn[0]), 0);
    assert_int_equal(cj_launcher_pid(f->l, f->fqcn[1]), f->pid[1]);
    assert_int_equal(cj_launcher_running(f->l), 1);
    char *log = read_log(f);
    assert_non_null(strstr(log, "stopping it to launch a replacement"));
    assert_non_null(strstr(log, "another worker replaces it"));
    free(log);
    cj_launcher_stop_all(f->l, true);
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 3.0);
    fx_free(f);
}

/* A plain stop under way stays one; after cj_launcher_hold nothing is relaunched. */
static void test_restart_respects_stop_and_hold(void **state)
{
    struct fx *f = fx_new();
    fx_launcher(f, "sleep 10", 2, 0.2, 0.1, 0.4, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    assert_int_equal(cj_launcher_stop(f->l, f->fqcn[0]), 0);
    assert_int_equal(cj_launcher_restart(f->l, f->fqcn[0]), 0);   /* kept as a stop */
    RUN_UNTIL(f, f->exits >= 1, 3.0);
    assert_true(f->exit_stopping[0]);
    RUN_UNTIL(f, false, 0.5);
    assert_int_equal(f->spawns, 2);

    /* the run ends: a lost worker being stopped is not replaced */
    assert_int_equal(cj_launcher_restart(f->l, f->fqcn[1]), 0);
    cj_launcher_hold(f->l);
    RUN_UNTIL(f, f->exits >= 2, 3.0);
    assert_true(f->exit_stopping[1]);
    RUN_UNTIL(f, false, 0.5);
    assert_int_equal(f->spawns, 2);
    assert_int_equal(cj_launcher_running(f->l), 0);

    /* a crash while held: no relaunch either; start lifts the hold */
    assert_int_equal(cj_launcher_start(f->l), 0);
    assert_int_equal(f->spawns, 4);
    cj_launcher_hold(f->l);
    assert_int_equal(kill(f->pid[2], SIGKILL), 0);
    RUN_UNTIL(f, f->exits >= 3, 3.0);
    RUN_UNTIL(f, false, 0.5);
    assert_int_equal(f->spawns, 4);
    assert_int_equal(cj_launcher_restart(f->l, f->fqcn[3]), 0);   /* held: a plain stop */
    RUN_UNTIL(f, f->exits >= 4, 3.0);
    assert_true(f->exit_stopping[3]);
    RUN_UNTIL(f, false, 0.3);
    assert_int_equal(f->spawns, 4);
    fx_free(f);
}

/* ---- launch_token_file -------------------------------------------------------------------------- */

#define TOK_A "tokA-0123456789abcdef-ZZ9plural"
#define TOK_B "tokB_ABCDEFGHIJKLMNOP"

static void write_file(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

static void tokens_bad(const char *path, const char *text, mode_t mode, const char *want)
{
    struct cj_launch_tokens t;
    struct cj_err e = {0};
    write_file(path, text, mode);
    assert_int_equal(cj_launcher_read_tokens(path, &t, &e), -1);
    if (!strstr(e.msg, want)) fail_msg("%s: got '%s', want '%s'", text, e.msg, want);
    assert_non_null(strstr(e.msg, path));   /* names the file */
    assert_null(strstr(e.msg, "tokA"));     /* never a token */
    assert_int_equal(t.n, 0);
}

/* A worker that dies at once (as a stock trainer given a URL it cannot use):
 * relaunched until launch_timeout, then gave_up() with its last error and its
 * last stderr line, and no launch after that. */
static void test_launch_timeout_gives_up(void **state)
{
    struct fx *f = fx_new();
    f->launch_timeout = 0.8;
    fx_launcher(f, "/bin/sh -c 'echo \"ValueError: invalid Parent URL unix:/x\" >&2; echo bye; exit 1'", 1, 0.3,
                0.1, 0.2, 0);
    double t0 = mono();
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->gave_ups > 0, 5.0);
    assert_int_equal(f->gave_ups, 1);
    assert_true(f->gave_up_at - t0 >= 0.79 && f->gave_up_at - t0 < 2.0);
    assert_true(f->spawns >= 2);   /* relaunched meanwhile */
    assert_non_null(strstr(f->gave_up_why, "no worker completed its HELLO within launch_timeout 0.8 s ("));
    assert_non_null(strstr(f->gave_up_why, "exit code 1"));
    assert_non_null(strstr(f->gave_up_why, "; its last stderr line: ValueError: invalid Parent URL unix:/x"));
    int spawns = f->spawns;
    RUN_UNTIL(f, false, 0.6);
    assert_int_equal(f->spawns, spawns);   /* no relaunch after giving up */
    assert_int_equal(f->gave_ups, 1);
    assert_int_equal(cj_launcher_start(f->l), -1);
    char *log = read_log(f);
    assert_non_null(strstr(log, "workers of " SITE "." JOB ": no worker completed its HELLO"));
    free(log);
    fx_free(f);
}

/* A worker through SESSION_READY stops the count; one that runs without ever
 * getting there is given up on, named with its pid. */
static void test_launch_timeout_ready(void **state)
{
    struct fx *f = fx_new();
    f->launch_timeout = 0.5;
    fx_launcher(f, "/bin/sh -c 'while :; do sleep 0.05; done'", 1, 0.3, 0.1, 0.2, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->spawns > 0, 2.0);
    cj_launcher_session_ready(f->l, f->fqcn[0]);
    RUN_UNTIL(f, false, 1.0);
    assert_int_equal(f->gave_ups, 0);
    cj_launcher_stop_all(f->l, true);
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 3.0);
    cj_launcher_free(f->l);
    fx_launcher(f, "/bin/sh -c 'while :; do sleep 0.05; done'", 1, 0.3, 0.1, 0.2, 0);
    assert_int_equal(cj_launcher_start(f->l), 0);
    RUN_UNTIL(f, f->gave_ups > 0, 3.0);
    assert_int_equal(f->gave_ups, 1);
    assert_non_null(strstr(f->gave_up_why, "(1 launch); client_api_trainer_1 (pid "));
    assert_non_null(strstr(f->gave_up_why, ") is running but has not completed its HELLO"));
    cj_launcher_stop_all(f->l, true);
    RUN_UNTIL(f, cj_launcher_running(f->l) == 0, 3.0);
    fx_free(f);
}

static void test_read_tokens(void **state)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/cjtokens.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct cj_launch_tokens t;
    struct cj_err e = {0};

    write_file(path, "# tokens of the externally started workers\n\n  " TOK_A "  \r\n" TOK_B "\n" TOK_A "\n", 0600);
    assert_int_equal(cj_launcher_read_tokens(path, &t, &e), 0);
    assert_int_equal(t.n, 2);   /* the repeated one counts once */
    assert_string_equal(t.tok[0], TOK_A);
    assert_string_equal(t.tok[1], TOK_B);
    cj_launcher_tokens_clear(&t);
    assert_int_equal(t.n, 0);
    assert_int_equal(t.tok[0][0], 0);
    write_file(path, TOK_A, 0400);   /* no final newline; read-only */
    assert_int_equal(cj_launcher_read_tokens(path, &t, &e), 0);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.tok[0], TOK_A);

    tokens_bad(path, TOK_A "\n", 0640, "owner-only");
    tokens_bad(path, TOK_A "\n", 0604, "mode 0604");
    tokens_bad(path, "# nothing\n\n", 0600, "no token");
    tokens_bad(path, "", 0600, "no token");
    tokens_bad(path, TOK_A "\nshort\n", 0600, ":2: the token has 5 characters");
    tokens_bad(path, "tokA with a blank in it\n", 0600, ":1: a token is printable ASCII");
    char big[CJ_LAUNCHER_TOKEN_MAX + 3];
    memset(big, 'x', sizeof big - 2);
    big[sizeof big - 2] = '\n';
    big[sizeof big - 1] = 0;
    tokens_bad(path, big, 0600, "256 characters");
    char many[(CJ_LAUNCHER_TOKENS_MAX + 1) * 24 + 1];
    size_t k = 0;
    for (int i = 0; i <= CJ_LAUNCHER_TOKENS_MAX; i++) k += (size_t)sprintf(many + k, "tokA-%017d\n", i);
    tokens_bad(path, many, 0600, "more than 64 tokens");
    unlink(path);
    assert_int_equal(cj_launcher_read_tokens(path, &t, &e), -1);
    assert_non_null(strstr(e.msg, "cannot open"));
    assert_int_equal(cj_launcher_read_tokens("/tmp", &t, &e), -1);
    assert_non_null(strstr(e.msg, "not a regular file"));
}

static void test_bad_cfg(void **state)
{
    struct event_base *base = event_base_new();
    struct cj_err e = {0};
    struct cj_launcher_cfg cfg = {.command = "'oops", .count = 1, .runtime_dir = "/tmp", .connect_url = URL,
                                  .site = SITE, .job_id = JOB};
    assert_null(cj_launcher_new(base, &cfg, NULL, &e));
    assert_non_null(strstr(e.msg, "unterminated"));
    cfg.command = "true";
    cfg.count = 0;
    assert_null(cj_launcher_new(base, &cfg, NULL, &e));
    event_base_free(base);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_launch_and_stop),
        cmocka_unit_test(test_restart_backoff),
        cmocka_unit_test(test_kill_escalation),
        cmocka_unit_test(test_barrier_delays_term),
        cmocka_unit_test(test_stop_all_now),
        cmocka_unit_test(test_exec_failure_and_long_lines),
        cmocka_unit_test(test_restart_lost_worker),
        cmocka_unit_test(test_restart_respects_stop_and_hold),
        cmocka_unit_test(test_launch_timeout_gives_up),
        cmocka_unit_test(test_launch_timeout_ready),
        cmocka_unit_test(test_read_tokens),
        cmocka_unit_test(test_bad_cfg),
    };
    return cmocka_run_group_tests_name("launcher", tests, NULL, NULL);
}
