/* SPDX-License-Identifier: Apache-2.0 */
/* launcher.c — worker processes: spawn, output, reaping, restart, staged stop (see launcher.h). */
#include "fl/launcher.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fl/bootstrap.h"
#include "fl/creds.h"
#include "util/clock.h"
#include "util/log.h"

extern char **environ;

#define POLL_SECS 1.0                  /* reaping safety net besides SIGCHLD */
#define GRACE_DEFAULT 10.0
#define RESTART_MIN_DEFAULT 1.0
#define RESTART_MAX_DEFAULT 30.0
#define NAME_MAX_LEN 255

/* One output pipe of a worker.  Lives until EOF, independently of its slot (a
 * relaunch may happen before the old pipe drains). */
struct outp {
    struct cj_launcher *l;
    struct bufferevent *bev;
    struct slot *sl;                   /* its slot, whose last_output it keeps */
    int stream;                        /* 1 stdout, 2 stderr */
    char name[64];                     /* worker leaf, for the log prefix */
    char fqcn[NAME_MAX_LEN + 1];
    struct outp *next;
};

enum stop_stage { STOP_NONE, STOP_GRACE, STOP_TERM, STOP_KILL };

struct slot {
    struct cj_launcher *l;
    unsigned seq;                      /* of the current / last launch, 0 none yet */
    char fqcn[NAME_MAX_LEN + 1];
    char leaf[64];
    char bootstrap[PATH_MAX];
    pid_t pid;                         /* running child (its pgid too), 0 none */
    double started;
    bool stopping;                     /* being stopped: no relaunch after this child... */
    bool relaunch;                     /* ...unless it is stopped to be replaced (cj_launcher_restart) */
    bool now;                          /* stop overrides the result barrier */
    bool barrier_logged;
    enum stop_stage stage;
    double backoff;                    /* last restart delay, 0 = none yet */
    struct event *stop_timer, *restart_timer;
    int report_fd;                     /* read end of the child's launch report pipe, -1 none */
    char last_error[CJ_LAUNCHER_ERROR_MAX];   /* why the last launch failed or its worker died */
    time_t last_error_at;
    double relaunch_at;                /* cj_now() of the pending relaunch, 0 none */
    unsigned failures;                 /* launches that failed or died since the last clean one */
    double waiting_since;              /* cj_now() since when the slot has had no worker through its
                                          SESSION_READY (launch_timeout), 0 none */
    unsigned waiting_launches;         /* launches since then */
    struct event *launch_timer;
    char last_output[CJ_LAUNCHER_OUTPUT_MAX];   /* the last non-empty stderr line of its workers */
};

struct cj_launcher {
    struct event_base *base;
    char **argv;
    int argc;
    int count;
    char runtime_dir[PATH_MAX];
    bool clean_env;
    char *env_text;             /* envc "NAME=value" strings, one after the other */
    int envc;
    char cwd[PATH_MAX];
    bool has_account;
    struct cj_account account;
    char *boot_extra;           /* boot_extrac pairs, see cj_launcher_cfg */
    int boot_extrac;
    const struct cj_launch_style *style;
    char *config_text;          /* style->config_file's text, NULL none */
    size_t config_len;
    char connect_url[CJ_BOOTSTRAP_URL_MAX + 1];
    char site[NAME_MAX_LEN + 1], job[NAME_MAX_LEN + 1];
    bool secure;
    double grace, rmin, rmax;
    double launch_timeout;             /* 0 none */
    bool gave_up;                      /* launch_timeout passed: gave_up() called, no more launches */
    size_t line_max;
    struct cj_launcher_cbs cbs;
    struct slot *slots;
    unsigned seq;
    bool stopping_all;
    bool hold;                         /* no relaunch (the run is ending) */
    struct event *sigchld, *poll;
    struct outp *outs;
};

static void arm(struct event *ev, double secs)
{
    struct timeval tv = cj_tv(secs);
    evtimer_add(ev, &tv);
}

/* ---- command splitting ----------------------------------------------------------------- */

void cj_launcher_argv_free(char **argv)
{
    if (!argv) return;
    for (char **p = argv; *p; p++) free(*p);
    free(argv);
}

/* One word of cmd starting at *i (not a blank) into word; *i moves past it.
 * Returns its length, or -1 with err filled. */
static long split_word(const char *cmd, size_t n, size_t *i, char *word, struct cj_err *err)
{
    size_t w = 0, k = *i;
    while (k < n && cmd[k] != ' ' && cmd[k] != '\t' && cmd[k] != '\n') {
        char c = cmd[k];
        if (c == '\'') {                      /* '...': everything literally */
            size_t at = k++;
            while (k < n && cmd[k] != '\'') word[w++] = cmd[k++];
            if (k >= n) return cj_fail(err, CJ_E_INVALID, at, "command: unterminated single quote at offset %zu", at), -1;
            k++;
        } else if (c == '"') {                /* "...": only \" \\ \$ \` and backslash-newline escape */
            size_t at = k++;
            while (k < n && cmd[k] != '"') {
                if (cmd[k] == '\\' && k + 1 < n && strchr("\"\\$`\n", cmd[k + 1])) {
                    if (cmd[k + 1] != '\n') word[w++] = cmd[k + 1];
                    k += 2;
                } else {
                    word[w++] = cmd[k++];
                }
            }
            if (k >= n) return cj_fail(err, CJ_E_INVALID, at, "command: unterminated double quote at offset %zu", at), -1;
            k++;
        } else if (c == '\\') {               /* backslash: the next character literally */
            if (k + 1 >= n) return cj_fail(err, CJ_E_INVALID, k, "command: trailing backslash"), -1;
            if (cmd[k + 1] != '\n') word[w++] = cmd[k + 1];
            k += 2;
        } else {
            word[w++] = cmd[k++];
        }
    }
    *i = k;
    return (long)w;
}

int cj_launcher_split(const char *cmd, char ***argv_out, int *argc_out, struct cj_err *err)
{
    *argv_out = NULL;
    if (argc_out) *argc_out = 0;
    if (!cmd) return cj_fail(err, CJ_E_MISSING, 0, "command: empty");
    size_t n = strlen(cmd), i = 0;
    char **argv = calloc(CJ_LAUNCHER_MAX_ARGS + 1, sizeof *argv);
    char *word = malloc(n + 1);   /* a word is never longer than the command */
    int argc = 0, rc = 0;
    if (!argv || !word) {
        rc = cj_fail(err, CJ_E_NOMEM, 0, "command: out of memory");
        goto out;
    }
    for (;;) {
        while (i < n && (cmd[i] == ' ' || cmd[i] == '\t' || cmd[i] == '\n')) i++;
        if (i >= n) break;
        if (argc >= CJ_LAUNCHER_MAX_ARGS) {
            rc = cj_fail(err, CJ_E_LIMIT, i, "command: more than %d words", CJ_LAUNCHER_MAX_ARGS);
            goto out;
        }
        size_t at = i;
        long w = split_word(cmd, n, &i, word, err);
        if (w < 0) {
            rc = err ? -err->code : -CJ_E_INVALID;
            goto out;
        }
        if (!(argv[argc] = malloc((size_t)w + 1))) {
            rc = cj_fail(err, CJ_E_NOMEM, at, "command: out of memory");
            goto out;
        }
        memcpy(argv[argc], word, (size_t)w);
        argv[argc++][w] = 0;
    }
    if (argc == 0) rc = cj_fail(err, CJ_E_MISSING, 0, "command: no words");
out:
    free(word);
    if (rc) {
        cj_launcher_argv_free(argv);
        return rc;
    }
    *argv_out = argv;
    if (argc_out) *argc_out = argc;
    return 0;
}

/* ---- output pipes ------------------------------------------------------------------------ */

static void emit(struct outp *o, const char *line)
{
    struct cj_launcher *l = o->l;
    if (o->stream == 2) cj_log_info("worker %s (stderr): %s", o->name, line);
    else cj_log_info("worker %s: %s", o->name, line);
    if (o->stream == 2 && line[strspn(line, " \t")])
        snprintf(o->sl->last_output, sizeof o->sl->last_output, "%s", line);
    if (l->cbs.on_line) l->cbs.on_line(l->cbs.ctx, o->fqcn, o->stream, line);
}

/* Logs every complete line in; final: the rest too.  Lines longer than
 * line_max are cut into line_max pieces (so memory stays bounded). */
static void emit_lines(struct outp *o, struct evbuffer *in, bool final)
{
    size_t max = o->l->line_max;
    char *buf = malloc(max + 1);
    if (!buf) return;
    for (;;) {
        size_t len = evbuffer_get_length(in);
        if (!len) break;
        size_t eol_len = 0;
        struct evbuffer_ptr p = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        size_t take, drop = 0;
        if (p.pos >= 0 && (size_t)p.pos <= max) {
            take = (size_t)p.pos;
            drop = eol_len;
        } else if (len >= max || (p.pos >= 0) || final) {
            take = len < max ? len : max;   /* a cut piece of a long line, or the unterminated tail */
        } else {
            break;
        }
        evbuffer_remove(in, buf, take);
        if (drop) evbuffer_drain(in, drop);
        buf[take] = 0;
        if (take && buf[take - 1] == '\r') buf[take - 1] = 0;
        emit(o, buf);
    }
    free(buf);
}

static void outp_free(struct outp *o)
{
    struct cj_launcher *l = o->l;
    for (struct outp **pp = &l->outs; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    if (o->bev) bufferevent_free(o->bev);
    free(o);
}

static void out_read_cb(struct bufferevent *bev, void *arg)
{
    emit_lines(arg, bufferevent_get_input(bev), false);
}

static void out_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct outp *o = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        emit_lines(o, bufferevent_get_input(bev), true);
        outp_free(o);
    }
}

static int outp_new(struct cj_launcher *l, struct slot *sl, int fd, int stream)
{
    struct outp *o = calloc(1, sizeof *o);
    if (!o) return -1;
    o->l = l;
    o->sl = sl;
    o->stream = stream;
    snprintf(o->name, sizeof o->name, "%s", sl->leaf);
    snprintf(o->fqcn, sizeof o->fqcn, "%s", sl->fqcn);
    evutil_make_socket_nonblocking(fd);
    o->bev = bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!o->bev) {
        close(fd);
        free(o);
        return -1;
    }
    bufferevent_setcb(o->bev, out_read_cb, NULL, out_event_cb, o);
    /* Bounded reads: a chatty worker cannot make the relay buffer more than this. */
    bufferevent_setwatermark(o->bev, EV_READ, 0, l->line_max * 4 + 4096);
    bufferevent_enable(o->bev, EV_READ);
    o->next = l->outs;
    l->outs = o;
    return 0;
}

/* ---- spawning ------------------------------------------------------------------------------ */

/* ---- launch styles --------------------------------------------------------------------------- */

static int bootstrap_leaf(char *out, size_t n, const char *site, const char *job, unsigned seq)
{
    (void)site;
    (void)job;
    return (size_t)snprintf(out, n, "%s%u", CJ_LAUNCHER_LEAF_PREFIX, seq) < n ? 0 : -1;
}

const struct cj_launch_style cj_launch_style_bootstrap = {
    .name = "bootstrap", .leaf = bootstrap_leaf, .bootstrap = true,
};

/* True when e ("NAME=value") sets the name of set ("NAME=value"). */
static bool same_name(const char *e, const char *set)
{
    const char *eq = set ? strchr(set, '=') : NULL;
    return eq && !strncmp(e, set, (size_t)(eq - set) + 1);
}

static bool env_dropped(const struct cj_launcher *l, const char *e)
{
    if (same_name(e, l->style->env_set)) return true;
    static const char *const names[] = {
        "CLIENT_API_TYPE", CJ_BOOTSTRAP_ENV,
        /* the relay's own job credentials: workers get theirs from hello_accepted */
        CJ_CREDS_ENV_TOKEN, CJ_CREDS_ENV_SIGNATURE, CJ_CREDS_ENV_SSID,
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(e, names[i], n) && e[n] == '=') return true;
    }
    return false;
}

/* The worker's environment: ours minus the dropped names, or a clean one
 * (PATH and the job's own), plus the bootstrap path. */
/* True when the job's own variables set PATH: it replaces the daemon's. */
static bool job_sets_path(const struct cj_launcher *l)
{
    const char *p = l->env_text;
    for (int i = 0; i < l->envc; i++, p += strlen(p) + 1)
        if (!strncmp(p, "PATH=", 5)) return true;
    return false;
}

static char **make_env(const struct cj_launcher *l, const char *bootstrap)
{
    size_t n = 0;
    for (char **e = environ; e && *e; e++) n++;
    char **env = calloc(n + (size_t)l->envc + 2, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    bool own_path = l->clean_env && job_sets_path(l);
    for (char **e = environ; e && *e; e++)
        if (l->clean_env ? !own_path && !strncmp(*e, "PATH=", 5) : !env_dropped(l, *e)) env[k++] = *e;
    const char *p = l->env_text;
    for (int i = 0; l->clean_env && i < l->envc; i++, p += strlen(p) + 1)
        if (!same_name(p, l->style->env_set)) env[k++] = (char *)p;
    char *mine;
    if (l->style->bootstrap) {
        size_t len = strlen(CJ_BOOTSTRAP_ENV) + 1 + strlen(bootstrap) + 1;
        if ((mine = malloc(len))) snprintf(mine, len, "%s=%s", CJ_BOOTSTRAP_ENV, bootstrap);
    } else {
        mine = strdup(l->style->env_set);   /* checked in cj_launcher_new */
    }
    if (!mine) {
        free(env);
        return NULL;
    }
    env[k++] = mine;
    env[k] = NULL;
    return env;
}

static void free_env(char **env)
{
    if (!env) return;
    char **e = env;
    while (e[1]) e++;
    free(*e);   /* only the last entry is ours */
    free(env);
}

bool cj_launcher_path_next(const char **cursor, const char *file, char *out, size_t outsz)
{
    const char *d = *cursor, *end = strchr(d, ':');
    size_t dl = end ? (size_t)(end - d) : strlen(d), fl = strlen(file);
    *cursor = end ? end + 1 : NULL;
    if ((dl ? dl : 1) + 1 + fl >= outsz) return false;
    if (dl) memcpy(out, d, dl);
    else out[dl++] = '.';
    out[dl] = '/';
    memcpy(out + dl + 1, file, fl + 1);
    return true;
}

/* execvpe, but the command is looked up on the PATH of the worker's own
 * environment (execvpe uses the daemon's): each directory in turn, as the
 * shell does.  Async-signal-safe: only execve and our own string work. */
static void exec_on_path(char *const argv[], char *const env[])
{
    const char *file = argv[0], *path = NULL;
    if (strchr(file, '/')) {
        execve(file, argv, env);
        return;
    }
    for (char *const *e = env; *e && !path; e++)
        if (!strncmp(*e, "PATH=", 5)) path = *e + 5;
    int first_err = ENOENT;
    for (const char *cur = path ? path : CJ_LAUNCHER_DEFAULT_PATH; cur;) {
        char full[PATH_MAX];
        if (!cj_launcher_path_next(&cur, file, full, sizeof full)) continue;
        execve(full, argv, env);
        if (errno != ENOENT && errno != ENOTDIR && first_err == ENOENT) first_err = errno;
    }
    errno = first_err;
}

/* What a launched child tells its parent through the report pipe when it
 * cannot become the worker (the pipe is close-on-exec: a successful exec
 * leaves it empty).  The parent reads it once the child is reaped. */
enum launch_stage { LAUNCH_ACCOUNT = 1, LAUNCH_CWD, LAUNCH_CONFIG, LAUNCH_EXEC };
struct launch_report {
    int32_t stage;
    int32_t err;   /* errno */
};

/* In the child: reports the failed stage and ends (async-signal-safe). */
static void child_fail(int report_fd, int err_fd, enum launch_stage stage, const char *msg, size_t len)
{
    struct launch_report r = {.stage = stage, .err = errno};
    ssize_t rc = write(report_fd, &r, sizeof r);
    rc = write(err_fd, msg, len);
    (void)rc;
    _exit(127);
}
#define CHILD_FAIL(fd, efd, stage, text) child_fail(fd, efd, stage, text "\n", sizeof text)

/* The worker gets SIGTERM when the daemon dies, even by SIGKILL, so no worker
 * outlives it (its own exit then follows its SIGTERM handling).  Set after the
 * credential switch, which clears the death signal; a daemon that died before
 * this point left the child re-parented already, so getppid() tells. */
static void die_with_parent(pid_t parent, int err_fd)
{
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
        static const char msg[] = "cjrelay launcher: cannot set the parent-death signal\n";
        ssize_t rc = write(err_fd, msg, sizeof msg - 1);
        (void)rc;
    }
    if (getppid() != parent) _exit(127);
}

/* In the child, as the worker's account in its cwd: the style's config file,
 * 0600, through "<file>.tmp" and rename (a reader never sees half of it), its
 * directory made 0700 when missing.  Async-signal-safe calls only.  0 or -1. */
static int child_config(const struct cj_launcher *l)
{
    const char *file = l->style->config_file;
    char dir[PATH_MAX], tmp[PATH_MAX];
    size_t fl = strlen(file);
    if (fl + 5 > sizeof tmp) return -1;
    memcpy(tmp, file, fl);
    memcpy(tmp + fl, ".tmp", 5);
    const char *slash = strrchr(file, '/');
    if (slash) {
        memcpy(dir, file, (size_t)(slash - file));
        dir[slash - file] = 0;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
    }
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    for (size_t off = 0; off < l->config_len;) {
        ssize_t n = write(fd, l->config_text + off, l->config_len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0 || rename(tmp, file) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child_exec(const struct cj_launcher *l, pid_t parent, int out_fd, int err_fd, int report_fd, char **env)
{
    setsid();   /* leads its own process group: pgid = pid */
    if (l->has_account ? cj_account_enter(&l->account) != 0 : cj_account_drop_caps() != 0)
        CHILD_FAIL(report_fd, err_fd, LAUNCH_ACCOUNT, "cjrelay launcher: cannot switch to the worker's account");
    die_with_parent(parent, err_fd);
    if (l->cwd[0] && chdir(l->cwd) != 0)
        CHILD_FAIL(report_fd, err_fd, LAUNCH_CWD, "cjrelay launcher: cannot enter the worker's directory");
    if (l->style->config_file && child_config(l) != 0)
        CHILD_FAIL(report_fd, err_fd, LAUNCH_CONFIG, "cjrelay launcher: cannot write the worker's config file");
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0 && nul != 0) {
        dup2(nul, 0);
        close(nul);
    }
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (report_fd != 3) {   /* the report pipe stays open (close-on-exec) as fd 3 */
        dup3(report_fd, 3, O_CLOEXEC);
        report_fd = 3;
    }
    if (close_range(4, ~0U, 0) != 0)
        for (int fd = 4; fd < 4096; fd++) close(fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);   /* SIGPIPE may be ignored here */
    exec_on_path(l->argv, env);
    CHILD_FAIL(report_fd, 2, LAUNCH_EXEC, "cjrelay launcher: cannot exec the worker command");
}

/* Keeps why a launch failed or its worker died, for show workers / show info. */
static void set_last_error(struct slot *sl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_last_error(struct slot *sl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sl->last_error, sizeof sl->last_error, fmt, ap);
    va_end(ap);
    sl->last_error_at = time(NULL);
}

/* The reaped child's launch report, if it wrote one: false when its exec
 * succeeded (the pipe closed empty). */
static bool read_report(struct slot *sl, struct launch_report *r)
{
    if (sl->report_fd < 0) return false;
    ssize_t n;
    do n = read(sl->report_fd, r, sizeof *r);
    while (n < 0 && errno == EINTR);
    close(sl->report_fd);
    sl->report_fd = -1;
    return n == (ssize_t)sizeof *r;
}

static void report_text(const struct cj_launcher *l, const struct launch_report *r, char *out, size_t n)
{
    const char *what = strerror(r->err);
    switch (r->stage) {
    case LAUNCH_ACCOUNT: snprintf(out, n, "cannot switch to uid %u gid %u: %s", (unsigned)l->account.uid,
                                  (unsigned)l->account.gid, what); break;
    case LAUNCH_CWD: snprintf(out, n, "cannot enter %.150s: %s", l->cwd, what); break;
    case LAUNCH_CONFIG: snprintf(out, n, "cannot write %.40s under %.100s: %s", l->style->config_file,
                                 l->cwd[0] ? l->cwd : ".", what); break;
    default: snprintf(out, n, "cannot exec %.150s: %s", l->argv[0], what); break;
    }
}

static void schedule_restart(struct slot *sl, double lived);

/* ---- launch timeout ------------------------------------------------------------------------ */

/* The slot needs a worker through SESSION_READY from now (its first launch, or
 * its worker died or was lost); launch_timeout counts from here. */
static void start_waiting(struct slot *sl)
{
    struct cj_launcher *l = sl->l;
    if (l->launch_timeout <= 0 || sl->waiting_since > 0) return;
    sl->waiting_since = cj_now();
    sl->waiting_launches = 0;
    arm(sl->launch_timer, l->launch_timeout);
}

static void stop_waiting(struct slot *sl)
{
    sl->waiting_since = 0;
    sl->waiting_launches = 0;
    evtimer_del(sl->launch_timer);
}

/* An snprintf that appends to buf[cap] at len (cut at the end). */
struct line_buf {
    char *buf;
    size_t cap, len;
};

static void add(struct line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct line_buf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len = b->len + (size_t)n < b->cap ? b->len + (size_t)n : b->cap - 1;
}

/* launch_timeout passed with no worker of the slot through: no more launches,
 * and the owner is told why (the slot's last error and its worker's last
 * stderr line: what the operator needs to see first). */
static void launch_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct slot *sl = arg;
    struct cj_launcher *l = sl->l;
    if (l->stopping_all || l->hold || l->gave_up || sl->waiting_since <= 0) return;
    char why[CJ_LAUNCHER_WHY_MAX];
    struct line_buf b = {why, sizeof why, 0};
    add(&b, "no worker completed its HELLO within launch_timeout %g s (%u launch%s)", l->launch_timeout,
        sl->waiting_launches, sl->waiting_launches == 1 ? "" : "es");
    if (sl->pid) add(&b, "; %s (pid %d) is running but has not completed its HELLO", sl->leaf, (int)sl->pid);
    if (sl->last_error[0]) add(&b, "; last: %s", sl->last_error);
    else if (!sl->pid) add(&b, "; no worker could be launched");
    if (sl->last_output[0]) add(&b, "; its last stderr line: %s", sl->last_output);
    l->gave_up = true;
    cj_launcher_hold(l);
    cj_log_error("workers of %s.%s: %s", l->site, l->job, why);
    if (l->cbs.gave_up) l->cbs.gave_up(l->cbs.ctx, why);
}

void cj_launcher_session_ready(struct cj_launcher *l, const char *fqcn)
{
    for (int i = 0; fqcn && i < l->count; i++)
        if (l->slots[i].pid && !strcmp(l->slots[i].fqcn, fqcn)) stop_waiting(&l->slots[i]);
}

/* A copy of n "key" NUL value NUL pairs laid one after the other.  0 or -1. */
static int copy_pairs(const char *src, int n, char **out)
{
    const char *p = src;
    for (int i = 0; i < 2 * n; i++) p += strlen(p) + 1;
    size_t len = (size_t)(p - src);
    if (!(*out = malloc(len))) return -1;
    memcpy(*out, src, len);
    return 0;
}

static int write_bootstrap(struct cj_launcher *l, struct slot *sl, const char *token)
{
    struct cj_bootstrap b;
    struct cj_err e = {0};
    cj_bootstrap_defaults(&b);
    snprintf(b.connect_url, sizeof b.connect_url, "%s", l->connect_url);
    if ((size_t)snprintf(b.cj_fqcn, sizeof b.cj_fqcn, "%s.%s", l->site, l->job) >= sizeof b.cj_fqcn) return -1;
    b.cj_pid = (int64_t)getpid();
    snprintf(b.trainer_fqcn, sizeof b.trainer_fqcn, "%s", sl->fqcn);
    snprintf(b.launch_token, sizeof b.launch_token, "%s", token);
    snprintf(b.job_id, sizeof b.job_id, "%s", l->job);
    snprintf(b.site_name, sizeof b.site_name, "%s", l->site);
    b.secure_mode = l->secure;
    b.extra = l->boot_extra;
    b.extrac = l->boot_extrac;
    int rc = cj_bootstrap_write(sl->bootstrap, &b, &e);
    explicit_bzero(&b, sizeof b);
    if (rc) cj_log_error("worker %s: cannot write its bootstrap file: %s", sl->leaf, e.msg);
    return rc;
}

static int spawn(struct slot *sl)
{
    struct cj_launcher *l = sl->l;
    char token[CJ_BOOTSTRAP_TOKEN_LEN + 1];
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pr[2] = {-1, -1};
    char **env = NULL;

    sl->seq = ++l->seq;
    int leaf_rc = l->style->leaf(sl->leaf, sizeof sl->leaf, l->site, l->job, sl->seq);
    start_waiting(sl);
    sl->waiting_launches++;
    sl->bootstrap[0] = 0;
    token[0] = 0;
    if (leaf_rc != 0 ||
        (size_t)snprintf(sl->fqcn, sizeof sl->fqcn, "%s.%s.%s", l->site, l->job, sl->leaf) >= sizeof sl->fqcn) {
        sl->bootstrap[0] = 0;
        cj_log_error("worker %s: FQCN too long", sl->leaf);
        set_last_error(sl, "%s: FQCN too long", sl->leaf);
        goto fail;
    }
    if (!l->style->bootstrap) goto launch;   /* no token, no bootstrap file */
    if ((size_t)snprintf(sl->bootstrap, sizeof sl->bootstrap, "%s/client_api_bootstrap_%u.json", l->runtime_dir,
                         sl->seq) >= sizeof sl->bootstrap) {
        sl->bootstrap[0] = 0;
        cj_log_error("worker %s: runtime directory path too long", sl->leaf);
        set_last_error(sl, "%s: runtime directory path too long", sl->leaf);
        goto fail;
    }
    if (cj_bootstrap_new_token(token)) {
        cj_log_error("worker %s: cannot make a launch token", sl->leaf);
        set_last_error(sl, "%s: cannot make a launch token", sl->leaf);
        goto fail;
    }
    if (write_bootstrap(l, sl, token)) {
        set_last_error(sl, "%s: cannot write its bootstrap file %s", sl->leaf, sl->bootstrap);
        goto fail;
    }
    if (l->has_account && chown(sl->bootstrap, l->account.uid, l->account.gid) != 0) {
        cj_log_error("worker %s: cannot give its bootstrap file to uid %u: %s", sl->leaf, (unsigned)l->account.uid,
                     strerror(errno));
        set_last_error(sl, "%s: cannot give its bootstrap file to uid %u: %s", sl->leaf, (unsigned)l->account.uid,
                       strerror(errno));
        goto fail;
    }
launch:
    if (!(env = make_env(l, sl->bootstrap)) || pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) ||
        pipe2(pr, O_CLOEXEC | O_NONBLOCK)) {
        cj_log_error("worker %s: cannot prepare its launch: %s", sl->leaf, strerror(errno));
        set_last_error(sl, "%s: cannot prepare its launch: %s", sl->leaf, strerror(errno));
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        cj_log_error("worker %s: fork failed: %s", sl->leaf, strerror(errno));
        set_last_error(sl, "%s: fork failed: %s", sl->leaf, strerror(errno));
        goto fail;
    }
    if (pid == 0) child_exec(l, parent, po[1], pe[1], pr[1], env);   /* never returns */
    close(po[1]);
    close(pe[1]);
    close(pr[1]);
    sl->report_fd = pr[0];
    free_env(env);
    sl->pid = pid;
    sl->relaunch_at = 0;
    sl->started = cj_now();
    sl->stopping = sl->now = sl->barrier_logged = false;
    sl->stage = STOP_NONE;
    if (outp_new(l, sl, po[0], 1)) cj_log_warning("worker %s: its stdout is not captured", sl->leaf);
    if (outp_new(l, sl, pe[0], 2)) cj_log_warning("worker %s: its stderr is not captured", sl->leaf);
    if (l->style->bootstrap)
        cj_log_info("worker %s launched: pid %d, %s (%d more args not shown), bootstrap %s", sl->fqcn, (int)pid,
                    l->argv[0], l->argc - 1, sl->bootstrap);
    else
        cj_log_info("worker %s launched: pid %d, %s (%d more args not shown), %s%s%s", sl->fqcn, (int)pid,
                    l->argv[0], l->argc - 1, l->style->env_set ? l->style->env_set : "",
                    l->style->config_file ? ", config " : "", l->style->config_file ? l->style->config_file : "");
    if (l->cbs.on_spawn) l->cbs.on_spawn(l->cbs.ctx, sl->fqcn, token, pid);
    explicit_bzero(token, sizeof token);
    return 0;
fail:
    explicit_bzero(token, sizeof token);
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pe[i] >= 0) close(pe[i]);
        if (pr[i] >= 0) close(pr[i]);
    }
    free_env(env);
    if (sl->bootstrap[0]) unlink(sl->bootstrap);
    sl->pid = 0;
    sl->failures++;
    schedule_restart(sl, 0);
    return -1;
}

static void restart_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct slot *sl = arg;
    if (!sl->l->stopping_all && !sl->l->hold && !sl->l->gave_up && !sl->pid) spawn(sl);
}

static void schedule_restart(struct slot *sl, double lived)
{
    struct cj_launcher *l = sl->l;
    if (l->stopping_all || l->hold) return;
    if (lived > l->rmax || sl->backoff <= 0) sl->backoff = l->rmin;
    else sl->backoff = sl->backoff * 2 > l->rmax ? l->rmax : sl->backoff * 2;
    cj_log_info("worker slot of %s: relaunch in %.1f s", sl->leaf[0] ? sl->leaf : "(none)", sl->backoff);
    sl->relaunch_at = cj_now() + sl->backoff;
    arm(sl->restart_timer, sl->backoff);
}

/* ---- reaping and stopping -------------------------------------------------------------------- */

static void signal_group(pid_t pid, int sig)
{
    /* Before the child's setsid() the group does not exist yet: signal the child itself. */
    if (killpg(pid, sig) != 0 && errno == ESRCH) kill(pid, sig);
}

static void status_text(int st, char *out, size_t n)
{
    if (WIFEXITED(st)) snprintf(out, n, "exit code %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, n, "status 0x%x", st);
}

static void child_exited(struct slot *sl, int st)
{
    struct cj_launcher *l = sl->l;
    pid_t pid = sl->pid;
    char how[96];
    sl->pid = 0;
    evtimer_del(sl->stop_timer);
    status_text(st, how, sizeof how);
    double lived = cj_now() - sl->started;
    bool relaunch = sl->relaunch && !l->stopping_all && !l->hold;
    bool stopping = (sl->stopping || l->stopping_all) && !relaunch;
    sl->relaunch = false;
    struct launch_report r;
    if (read_report(sl, &r)) {
        char why[CJ_LAUNCHER_ERROR_MAX - 32];   /* room for the leaf in front */
        report_text(l, &r, why, sizeof why);
        cj_log_error("worker %s (pid %d) could not be launched: %s", sl->fqcn, (int)pid, why);
        set_last_error(sl, "%s: %s", sl->leaf, why);
        sl->failures++;
    } else if (relaunch) {
        cj_log_info("worker %s (pid %d) stopped: %s; another worker replaces it", sl->fqcn, (int)pid, how);
    } else if (stopping) {
        cj_log_info("worker %s (pid %d) stopped: %s", sl->fqcn, (int)pid, how);
    } else {
        cj_log_warning("worker %s (pid %d) exited after %.1f s: %s", sl->fqcn, (int)pid, lived, how);
        set_last_error(sl, "%s: exited after %.1f s: %s", sl->leaf, lived, how);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) sl->failures++;
    }
    if (killpg(pid, 0) == 0) {   /* its group outlived it: nobody owns those processes now */
        cj_log_warning("worker %s: processes of its group survived it; killing them", sl->fqcn);
        killpg(pid, SIGKILL);
    }
    if (unlink(sl->bootstrap) != 0 && errno != ENOENT)
        cj_log_warning("worker %s: cannot remove %s: %s", sl->fqcn, sl->bootstrap, strerror(errno));
    if (stopping || l->hold || l->stopping_all) stop_waiting(sl);
    else start_waiting(sl);   /* its replacement must come through within launch_timeout */
    if (l->cbs.on_exit) l->cbs.on_exit(l->cbs.ctx, sl->fqcn, st, stopping);
    /* A clean exit (a per-task trainer, launch_once false) is no reason to back off further. */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) sl->backoff = 0, sl->failures = 0;
    if (!stopping && !sl->pid) schedule_restart(sl, lived);
}

static void reap(struct cj_launcher *l)
{
    for (int i = 0; i < l->count; i++) {
        struct slot *sl = &l->slots[i];
        int st;
        if (!sl->pid) continue;
        pid_t r = waitpid(sl->pid, &st, WNOHANG);
        if (r == sl->pid) child_exited(sl, st);
        else if (r < 0 && errno == ECHILD) child_exited(sl, 0);   /* reaped elsewhere */
    }
}

static void sigchld_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    reap(arg);
}

static void stop_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct slot *sl = arg;
    struct cj_launcher *l = sl->l;
    if (!sl->pid) return;
    switch (sl->stage) {
    case STOP_NONE:
    case STOP_GRACE:
        if (!sl->now && l->cbs.in_barrier && l->cbs.in_barrier(l->cbs.ctx, sl->fqcn)) {
            if (!sl->barrier_logged)
                cj_log_info("worker %s (pid %d): serving its result to the server; SIGTERM waits for the barrier",
                            sl->fqcn, (int)sl->pid);
            sl->barrier_logged = true;
            arm(sl->stop_timer, 1.0);
            break;
        }
        cj_log_info("worker %s (pid %d): SIGTERM to its process group (%s)", sl->fqcn, (int)sl->pid,
                    sl->now ? "stop now" : "still running after the grace");
        sl->stage = STOP_TERM;
        signal_group(sl->pid, SIGTERM);
        signal_group(sl->pid, SIGCONT);   /* a stopped (SIGSTOP) worker can act on it too */
        arm(sl->stop_timer, l->grace);
        break;
    case STOP_TERM:
        cj_log_warning("worker %s (pid %d): survived SIGTERM for %g s; SIGKILL to its process group", sl->fqcn,
                       (int)sl->pid, l->grace);
        sl->stage = STOP_KILL;
        signal_group(sl->pid, SIGKILL);
        arm(sl->stop_timer, l->grace);
        break;
    case STOP_KILL:
        cj_log_error("worker %s (pid %d): did not die after SIGKILL", sl->fqcn, (int)sl->pid);
        signal_group(sl->pid, SIGKILL);
        arm(sl->stop_timer, l->grace);
        break;
    }
}

/* relaunch: the stop of a lost worker, replaced once it is gone; a plain stop
 * under way stays one. */
static void stop_slot(struct slot *sl, bool now, bool relaunch)
{
    struct cj_launcher *l = sl->l;
    evtimer_del(sl->restart_timer);
    if (!sl->pid) return;
    if (!relaunch) sl->relaunch = false;
    else if (sl->stopping && !sl->relaunch) return;
    else sl->relaunch = true;
    sl->stopping = true;
    sl->now |= now;
    if (now && sl->stage < STOP_TERM) {
        sl->stage = STOP_GRACE;
        stop_timer_cb(-1, 0, sl);   /* SIGTERM now, SIGKILL after the grace */
    } else if (sl->stage == STOP_NONE) {
        sl->stage = STOP_GRACE;
        arm(sl->stop_timer, l->grace);
    }
}

/* ---- public ----------------------------------------------------------------------------------- */

/* Bootstrap files (and their temporaries) left in dir by a daemon that was
 * killed before it could remove them: a killed daemon cleans nothing, so the
 * next launcher in the same directory does.  The directory is this run's own
 * (a job's, or the one beside the status socket only one daemon can hold). */
static void sweep_stale_bootstraps(const char *dir)
{
    static const char name[] = "client_api_bootstrap_", tmp[] = ".client_api_bootstrap_";
    char path[PATH_MAX];
    DIR *dp = opendir(dir);
    if (!dp) return;
    for (struct dirent *e; (e = readdir(dp));) {
        if (strncmp(e->d_name, name, sizeof name - 1) != 0 && strncmp(e->d_name, tmp, sizeof tmp - 1) != 0) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        if (unlink(path) == 0) cj_log_warning("removed %s, a bootstrap file left by an earlier daemon", path);
        else if (errno != ENOENT) cj_log_warning("cannot remove the stale bootstrap file %s: %s", path, strerror(errno));
    }
    closedir(dp);
}

struct cj_launcher *cj_launcher_new(struct event_base *base, const struct cj_launcher_cfg *cfg,
                                    const struct cj_launcher_cbs *cbs, struct cj_err *err)
{
    const char *bad = NULL;
    if (!base || !cfg) bad = "no configuration";
    else if (cfg->count < 1 || cfg->count > CJ_LAUNCHER_MAX_WORKERS) bad = "count out of range";
    else if (!cfg->runtime_dir || !cfg->runtime_dir[0] || strlen(cfg->runtime_dir) > PATH_MAX - 64)
        bad = "runtime directory";
    else if (!cfg->connect_url || !cfg->connect_url[0] || strlen(cfg->connect_url) > CJ_BOOTSTRAP_URL_MAX)
        bad = "connect_url";
    else if (!cfg->site || !cfg->site[0] || !cfg->job_id || !cfg->job_id[0] ||
             strlen(cfg->site) + strlen(cfg->job_id) + 64 > NAME_MAX_LEN)
        bad = "site / job_id";
    else if (cfg->style && (!cfg->style->leaf || (!cfg->style->bootstrap && !cfg->style->env_set)))
        bad = "launch style (a leaf, and a bootstrap file or a variable)";
    if (bad) {
        cj_fail(err, CJ_E_INVALID, 0, "launcher: %s", bad);
        return NULL;
    }
    struct cj_launcher *l = calloc(1, sizeof *l);
    if (!l) {
        cj_fail(err, CJ_E_NOMEM, 0, "launcher: out of memory");
        return NULL;
    }
    l->base = base;
    if (cj_launcher_split(cfg->command, &l->argv, &l->argc, err)) {
        free(l);
        return NULL;
    }
    l->count = cfg->count;
    snprintf(l->runtime_dir, sizeof l->runtime_dir, "%s", cfg->runtime_dir);
    if (cfg->cwd) snprintf(l->cwd, sizeof l->cwd, "%s", cfg->cwd);
    if (cfg->account) {
        l->has_account = true;
        l->account = *cfg->account;
    }
    if (cfg->boot_extrac > 0 && copy_pairs(cfg->boot_extra, cfg->boot_extrac, &l->boot_extra) != 0) goto nomem;
    l->boot_extrac = l->boot_extra ? cfg->boot_extrac : 0;
    l->style = cfg->style ? cfg->style : &cj_launch_style_bootstrap;
    if (l->style->config_file) {
        l->config_len = cfg->config_text ? strlen(cfg->config_text) : 0;
        if (!(l->config_text = strndup(cfg->config_text ? cfg->config_text : "", l->config_len))) goto nomem;
    }
    l->clean_env = cfg->clean_env;
    if (cfg->clean_env && cfg->env && cfg->envc > 0) {
        size_t len = 0;
        for (int i = 0; i < cfg->envc; i++) len += strlen(cfg->env + len) + 1;
        if (!(l->env_text = malloc(len))) {
            cj_launcher_argv_free(l->argv);
            free(l);
            cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
            return NULL;
        }
        memcpy(l->env_text, cfg->env, len);
        l->envc = cfg->envc;
    }
    snprintf(l->connect_url, sizeof l->connect_url, "%s", cfg->connect_url);
    snprintf(l->site, sizeof l->site, "%s", cfg->site);
    snprintf(l->job, sizeof l->job, "%s", cfg->job_id);
    l->secure = cfg->secure_mode;
    l->grace = cfg->shutdown_grace > 0 ? cfg->shutdown_grace : GRACE_DEFAULT;
    l->rmin = cfg->restart_min > 0 ? cfg->restart_min : RESTART_MIN_DEFAULT;
    l->rmax = cfg->restart_max > 0 ? cfg->restart_max : RESTART_MAX_DEFAULT;
    if (l->rmax < l->rmin) l->rmax = l->rmin;
    l->launch_timeout = cfg->launch_timeout > 0 ? cfg->launch_timeout : 0;
    l->line_max = cfg->line_max ? cfg->line_max : CJ_LAUNCHER_LINE_MAX;
    if (cbs) l->cbs = *cbs;
    if (mkdir(l->runtime_dir, 0700) != 0 && errno != EEXIST) {
        cj_fail(err, CJ_E_INVALID, 0, "launcher: cannot create %s: %s", l->runtime_dir, strerror(errno));
        cj_launcher_free(l);
        return NULL;
    }
    sweep_stale_bootstraps(l->runtime_dir);
    l->slots = calloc((size_t)l->count, sizeof *l->slots);
    l->sigchld = evsignal_new(base, SIGCHLD, sigchld_cb, l);
    l->poll = event_new(base, -1, EV_PERSIST, sigchld_cb, l);
    if (!l->slots || !l->sigchld || !l->poll || evsignal_add(l->sigchld, NULL) != 0) goto nomem;
    arm(l->poll, POLL_SECS);
    for (int i = 0; i < l->count; i++) {
        struct slot *sl = &l->slots[i];
        sl->l = l;
        sl->report_fd = -1;
        sl->stop_timer = evtimer_new(base, stop_timer_cb, sl);
        sl->restart_timer = evtimer_new(base, restart_cb, sl);
        sl->launch_timer = evtimer_new(base, launch_timeout_cb, sl);
        if (!sl->stop_timer || !sl->restart_timer || !sl->launch_timer) goto nomem;
    }
    return l;
nomem:
    cj_fail(err, CJ_E_NOMEM, 0, "launcher: cannot set up events");
    cj_launcher_free(l);
    return NULL;
}

void cj_launcher_free(struct cj_launcher *l)
{
    if (!l) return;
    for (int i = 0; l->slots && i < l->count; i++) {
        struct slot *sl = &l->slots[i];
        if (sl->pid) {
            int st;
            signal_group(sl->pid, SIGKILL);
            while (waitpid(sl->pid, &st, 0) < 0 && errno == EINTR) {}
            unlink(sl->bootstrap);
            sl->pid = 0;
        }
        if (sl->report_fd >= 0) close(sl->report_fd);
        if (sl->stop_timer) event_free(sl->stop_timer);
        if (sl->restart_timer) event_free(sl->restart_timer);
        if (sl->launch_timer) event_free(sl->launch_timer);
    }
    while (l->outs) outp_free(l->outs);
    if (l->sigchld) event_free(l->sigchld);
    if (l->poll) event_free(l->poll);
    free(l->slots);
    cj_launcher_argv_free(l->argv);
    free(l->env_text);
    free(l->boot_extra);
    if (l->config_text) explicit_bzero(l->config_text, l->config_len);
    free(l->config_text);
    free(l);
}

int cj_launcher_start(struct cj_launcher *l)
{
    int ok = 0;
    if (l->gave_up) return -1;
    l->stopping_all = l->hold = false;
    for (int i = 0; i < l->count; i++)
        if (!l->slots[i].pid && spawn(&l->slots[i]) == 0) ok++;
    return ok ? 0 : -1;
}

static struct slot *find_slot(const struct cj_launcher *l, const char *fqcn)
{
    for (int i = 0; fqcn && i < l->count; i++)
        if (l->slots[i].pid && !strcmp(l->slots[i].fqcn, fqcn)) return &l->slots[i];
    return NULL;
}

int cj_launcher_stop(struct cj_launcher *l, const char *fqcn)
{
    struct slot *sl = find_slot(l, fqcn);
    if (!sl) return -1;
    stop_slot(sl, false, false);
    return 0;
}

int cj_launcher_restart(struct cj_launcher *l, const char *fqcn)
{
    struct slot *sl = find_slot(l, fqcn);
    if (!sl) return -1;
    if (l->stopping_all || (sl->stopping && !sl->relaunch)) {
        cj_log_info("worker %s (pid %d): already being stopped; no relaunch", sl->fqcn, (int)sl->pid);
        return 0;
    }
    if (l->hold) {   /* the run is ending: stopped, not replaced */
        cj_log_info("worker %s (pid %d): stopping it (no relaunch: the run is ending)", sl->fqcn, (int)sl->pid);
        stop_slot(sl, false, false);
        return 0;
    }
    if (!sl->relaunch)
        cj_log_info("worker %s (pid %d): stopping it to launch a replacement", sl->fqcn, (int)sl->pid);
    stop_slot(sl, false, true);
    return 0;
}

void cj_launcher_hold(struct cj_launcher *l)
{
    l->hold = true;
    for (int i = 0; i < l->count; i++) {
        struct slot *sl = &l->slots[i];
        evtimer_del(sl->restart_timer);
        stop_waiting(sl);   /* the run is ending: no launch timeout either */
        sl->relaunch = false;   /* a lost worker being stopped stays down */
    }
}

void cj_launcher_stop_all(struct cj_launcher *l, bool now)
{
    l->stopping_all = true;
    for (int i = 0; i < l->count; i++) stop_slot(&l->slots[i], now, false);
}

pid_t cj_launcher_pid(const struct cj_launcher *l, const char *fqcn)
{
    const struct slot *sl = find_slot(l, fqcn);
    return sl ? sl->pid : 0;
}

static struct cj_launcher_slot_info slot_info(const struct slot *sl, double now)
{
    return (struct cj_launcher_slot_info){
        .fqcn = sl->fqcn,
        .pid = sl->pid,
        .last_error = sl->last_error,
        .last_error_at = sl->last_error_at,
        .failures = sl->failures,
        .relaunch_in = !sl->pid && sl->relaunch_at > 0 ? (sl->relaunch_at > now ? sl->relaunch_at - now : 0) : -1,
    };
}

void cj_launcher_slots(const struct cj_launcher *l, cj_launcher_slot_fn fn, void *arg)
{
    double now = cj_now();
    for (int i = 0; i < l->count; i++) {
        struct cj_launcher_slot_info si = slot_info(&l->slots[i], now);
        fn(arg, &si);
    }
}

bool cj_launcher_slot_of(const struct cj_launcher *l, const char *fqcn, struct cj_launcher_slot_info *out)
{
    const struct slot *sl = find_slot(l, fqcn);
    if (sl) *out = slot_info(sl, cj_now());
    return sl != NULL;
}

size_t cj_launcher_running(const struct cj_launcher *l)
{
    size_t k = 0;
    for (int i = 0; i < l->count; i++) k += l->slots[i].pid != 0;
    return k;
}

unsigned cj_launcher_launches(const struct cj_launcher *l)
{
    return l->seq;
}
