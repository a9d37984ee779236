/* SPDX-License-Identifier: Apache-2.0 */
/* joblog.c — a job's FLARE log files (see joblog.h): the records formatted on
 * the event loop, the writer thread that opens, writes and rotates the files,
 * and the log tap that gives each job the daemon's lines naming it. */
#include "ops/joblog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

#define FLUSH_AT_EXIT_SECS 2.0

enum { F_TXT, F_ERR, F_JSON, F_FL, F_N };

/* FLARE's default log_config.json: log.txt, error_log.txt (ERROR), log.json,
 * log_fl.txt (FLFilter; opened at its first record: "delay": true). */
static const struct {
    const char *name;
    bool delay;
} files[F_N] = {{"log.txt", false}, {"error_log.txt", false}, {"log.json", false}, {"log_fl.txt", true}};

struct buf {
    char *p;
    size_t len, cap;
};

struct cj_joblog {
    char job_id[128];
    char dir[4096];
    struct cj_joblog *next;        /* the writer's list (under mu) */
    struct cj_joblog *live_next;   /* the event loop's list of open joblogs (tap) */
    /* under mu */
    struct buf pend[F_N];
    size_t pending;
    uint64_t dropped;              /* records dropped since the last notice */
    bool closing, failed;
    /* the writer's own */
    bool opened;
    int fd[F_N];
    uint64_t size[F_N];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
static struct cj_joblog *all;      /* under mu */
static bool writer_started;
static struct cj_joblog *live;     /* event loop only */
static struct cj_joblog_counts counts;

/* ---- formatting (event loop) ------------------------------------------------------------------ */

static const char *const level_names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};

static bool buf_put(struct buf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

/* Python's json.dumps of a str (ensure_ascii): UTF-8 decoded, invalid bytes as U+FFFD. */
static void json_str(struct buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    char u[16];
    buf_put(b, "\"", 1);
    while (*p) {
        unsigned c = *p, need = 0, cp;
        if (c < 0x80) {
            if (c == '"' || c == '\\') { u[0] = '\\'; u[1] = (char)c; buf_put(b, u, 2); }
            else if (c == '\n') buf_put(b, "\\n", 2);
            else if (c == '\r') buf_put(b, "\\r", 2);
            else if (c == '\t') buf_put(b, "\\t", 2);
            else if (c == '\b') buf_put(b, "\\b", 2);
            else if (c == '\f') buf_put(b, "\\f", 2);
            else if (c < 0x20 || c == 0x7f) { snprintf(u, sizeof u, "\\u%04x", c); buf_put(b, u, 6); }
            else buf_put(b, (const char *)p, 1);
            p++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07; }
        else { buf_put(b, "\\ufffd", 6); p++; continue; }
        unsigned i = 1;
        for (; i <= need && (p[i] & 0xc0) == 0x80; i++) cp = (cp << 6) | (p[i] & 0x3f);
        if (i <= need || (need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
            buf_put(b, "\\ufffd", 6);
            p++;
            continue;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            buf_put(b, u, 12);
        } else {
            snprintf(u, sizeof u, "\\u%04x", cp);
            buf_put(b, u, 6);
        }
        p += need + 1;
    }
    buf_put(b, "\"", 1);
}

/* Python logging's asctime: local time, "2026-01-02 03:04:05,678". */
static void asctime_now(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out + n, cap - n, ",%03ld", ts.tv_nsec / 1000000L);
}

/* FLARE's FLFilter: its logger names, or any record above INFO. */
static bool fl_filter(int level, const char *logger)
{
    static const char *const names[] = {"custom", "nvflare.app_common", "nvflare.app_opt"};
    if (level < CJ_LOG_INFO) return true;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strncmp(logger, names[i], strlen(names[i]))) return true;
    return false;
}

static void wake_writer(void);

/* Appends the record to the pending buffers; false when it did not fit (force: past the bound). */
static bool put_record(struct cj_joblog *jl, int level, const char *logger, const char *msg, bool force)
{
    char when[48];
    const char *dot = strrchr(logger, '.');
    const char *name = dot ? dot + 1 : logger;
    asctime_now(when, sizeof when);
    /* baseFormatter: "%(asctime)s - %(name)s - %(levelname)s - %(message)s" (an empty fl_ctx left out) */
    struct buf txt = {0}, json = {0};
    bool ok = buf_put(&txt, when, strlen(when)) && buf_put(&txt, " - ", 3) && buf_put(&txt, name, strlen(name)) &&
              buf_put(&txt, " - ", 3) && buf_put(&txt, level_names[level], strlen(level_names[level])) &&
              buf_put(&txt, " - ", 3) && buf_put(&txt, msg, strlen(msg)) && buf_put(&txt, "\n", 1);
    /* jsonFormatter: the keys of its fmt, in its order */
    static const char *const keys[] = {"asctime", "name", "fullName", "levelname", "fl_ctx", "message"};
    const char *vals[] = {when, name, logger, level_names[level], "", msg};
    buf_put(&json, "{", 1);
    for (size_t i = 0; i < 6; i++) {
        if (i) buf_put(&json, ", ", 2);
        json_str(&json, keys[i]);
        buf_put(&json, ": ", 2);
        json_str(&json, vals[i]);
    }
    ok = ok && buf_put(&json, "}\n", 2);
    bool to[F_N] = {[F_TXT] = true, [F_ERR] = level == CJ_LOG_ERROR, [F_JSON] = true,
                    [F_FL] = fl_filter(level, logger)};
    size_t need = json.len + txt.len * (1 + to[F_ERR] + to[F_FL]);
    pthread_mutex_lock(&mu);
    bool fits = ok && !jl->failed && (force || jl->pending + need <= CJ_JOBLOG_PENDING_MAX);
    if (fits) {
        for (int f = 0; f < F_N; f++)
            if (to[f]) {
                const struct buf *src = f == F_JSON ? &json : &txt;
                if (buf_put(&jl->pend[f], src->p, src->len)) jl->pending += src->len;
            }
    } else if (!jl->failed) {
        jl->dropped++;
    }
    pthread_mutex_unlock(&mu);
    free(txt.p);
    free(json.p);
    if (fits) wake_writer();
    return fits;
}

static void drop_note(char *note, size_t cap, uint64_t dropped)
{
    snprintf(note, cap, "%llu log records of this job dropped: the disk did not keep up", (unsigned long long)dropped);
}

static void record(struct cj_joblog *jl, int level, const char *logger, const char *msg)
{
    if (level > CJ_LOG_INFO) return;   /* FLARE's root logger is at INFO */
    pthread_mutex_lock(&mu);
    uint64_t dropped = jl->dropped;
    bool failed = jl->failed;
    pthread_mutex_unlock(&mu);
    if (failed) return;
    if (dropped) {   /* the disk caught up: say what was lost first */
        char note[128];
        drop_note(note, sizeof note, dropped);
        if (put_record(jl, CJ_LOG_WARNING, CJ_JOBLOG_DAEMON_LOGGER, note, false)) {
            pthread_mutex_lock(&mu);
            jl->dropped -= dropped;
            pthread_mutex_unlock(&mu);
        }
    }
    if (put_record(jl, level, logger, msg, false)) counts.records++;
    else counts.dropped++;
}

void cj_joblog_record(struct cj_joblog *jl, int level, const char *logger, const char *msg)
{
    if (jl) record(jl, level, logger, msg);
}

void cj_joblog_worker_line(struct cj_joblog *jl, int stream, const char *line)
{
    /* FLARE merges the trainer's stderr into its stdout and logs each non-empty line at INFO */
    if (jl && line[0]) record(jl, CJ_LOG_INFO, CJ_JOBLOG_TRAINER_LOGGER, line);
}

void cj_joblog_counts(struct cj_joblog_counts *c) { *c = counts; }

/* ---- the tap: the daemon's lines that name a job ----------------------------------------------- */

static bool id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static bool names_job(const char *msg, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = msg; (p = strstr(p, id)); p++)
        if ((p == msg || !id_char(p[-1])) && !id_char(p[n])) return true;
    return false;
}

/* "worker <leaf>: <line>" and "worker <leaf> (stderr): <line>" echo a worker's
 * output, which reaches its job as that; a leaf name has no dot (an fqcn does). */
static bool is_output_echo(const char *msg)
{
    if (strncmp(msg, "worker ", 7)) return false;
    size_t n = strcspn(msg + 7, " :.");
    return msg[7 + n] != '.';
}

static void on_log(int level, const char *msg)
{
    if (is_output_echo(msg)) return;
    for (struct cj_joblog *jl = live; jl; jl = jl->live_next)
        if (names_job(msg, jl->job_id)) record(jl, level, CJ_JOBLOG_DAEMON_LOGGER, msg);
}

/* ---- the writer thread ------------------------------------------------------------------------- */

static void report_failure(struct cj_joblog *jl, const char *what, const char *path, int err)
{
    pthread_mutex_lock(&mu);
    bool first = !jl->failed;
    jl->failed = true;
    for (int f = 0; f < F_N; f++) jl->pend[f].len = 0;
    jl->pending = 0;
    pthread_mutex_unlock(&mu);
    if (first)
        cj_log_warning("job %s: cannot %s %s: %s; FLARE's log files of the job stay incomplete (the daemon's log has "
                       "its lines)", jl->job_id, what, path, strerror(err));
}

static int open_file(struct cj_joblog *jl, int f)
{
    char path[sizeof jl->dir + 32];
    snprintf(path, sizeof path, "%s/%s", jl->dir, files[f].name);
    jl->fd[f] = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (jl->fd[f] < 0) {
        report_failure(jl, "write", path, errno);
        return -1;
    }
    struct stat st;
    jl->size[f] = fstat(jl->fd[f], &st) == 0 ? (uint64_t)st.st_size : 0;
    return 0;
}

static void open_files(struct cj_joblog *jl)
{
    jl->opened = true;
    if (mkdir(jl->dir, 0755) != 0 && errno != EEXIST) {
        report_failure(jl, "create", jl->dir, errno);
        return;
    }
    for (int f = 0; f < F_N; f++)
        if (!files[f].delay && open_file(jl, f)) return;
}

/* As RotatingFileHandler.doRollover: name.N-1 -> name.N ... name -> name.1, a new name. */
static int rotate(struct cj_joblog *jl, int f)
{
    char from[sizeof jl->dir + 48], to[sizeof from];
    close(jl->fd[f]);
    jl->fd[f] = -1;
    for (int i = CJ_JOBLOG_BACKUPS - 1; i >= 1; i--) {
        snprintf(from, sizeof from, "%s/%s.%d", jl->dir, files[f].name, i);
        snprintf(to, sizeof to, "%s/%s.%d", jl->dir, files[f].name, i + 1);
        rename(from, to);
    }
    snprintf(from, sizeof from, "%s/%s", jl->dir, files[f].name);
    snprintf(to, sizeof to, "%s/%s.1", jl->dir, files[f].name);
    rename(from, to);
    return open_file(jl, f);
}

static int write_all(struct cj_joblog *jl, int f, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(jl->fd[f], p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            char path[sizeof jl->dir + 32];
            snprintf(path, sizeof path, "%s/%s", jl->dir, files[f].name);
            report_failure(jl, "write", path, w < 0 ? errno : ENOSPC);
            return -1;
        }
        p += w;
        n -= (size_t)w;
        jl->size[f] += (uint64_t)w;
    }
    return 0;
}

/* Writes whole lines, rolling the file over before a line that would take it past the bound. */
static void write_file(struct cj_joblog *jl, int f, const char *p, size_t n)
{
    if (jl->fd[f] < 0 && open_file(jl, f)) return;
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t line = nl ? (size_t)(nl - p) + 1 : n;
        size_t take = 0;   /* the lines that still fit */
        while (take + line <= n && jl->size[f] + take + line <= CJ_JOBLOG_FILE_MAX) {
            take += line;
            if (take == n) break;
            nl = memchr(p + take, '\n', n - take);
            line = nl ? (size_t)(nl - (p + take)) + 1 : n - take;
        }
        if (!take) {   /* the next line does not fit: roll over (a line longer than the bound goes alone) */
            if (jl->size[f] && rotate(jl, f)) return;
            take = line;
        }
        if (write_all(jl, f, p, take)) return;
        p += take;
        n -= take;
    }
}

static void close_files(struct cj_joblog *jl)
{
    for (int f = 0; f < F_N; f++)
        if (jl->fd[f] >= 0) close(jl->fd[f]);
}

/* Writes one joblog's pending lines; true when it is closed and done (unlinked from all, to free). */
static bool service(struct cj_joblog *jl)
{
    struct buf take[F_N];
    memcpy(take, jl->pend, sizeof take);
    memset(jl->pend, 0, sizeof jl->pend);
    jl->pending = 0;
    bool closing = jl->closing, opened = jl->opened;
    pthread_mutex_unlock(&mu);
    if (!opened) open_files(jl);
    for (int f = 0; f < F_N; f++) {
        pthread_mutex_lock(&mu);
        bool failed = jl->failed;
        pthread_mutex_unlock(&mu);
        if (take[f].len && !failed) write_file(jl, f, take[f].p, take[f].len);
        free(take[f].p);
    }
    pthread_mutex_lock(&mu);
    return closing && !jl->pending;
}

static bool has_work(const struct cj_joblog *jl) { return jl->pending || jl->closing || !jl->opened; }

static void *writer(void *arg)
{
    pthread_mutex_lock(&mu);
    for (;;) {
        struct cj_joblog **pp = &all, *jl;
        while ((jl = *pp) && !has_work(jl)) pp = &jl->next;
        if (!jl) {
            pthread_cond_broadcast(&idle);
            pthread_cond_wait(&wake, &mu);
            continue;
        }
        if (service(jl)) {
            for (pp = &all; *pp != jl; pp = &(*pp)->next) {}
            *pp = jl->next;
            pthread_mutex_unlock(&mu);
            close_files(jl);
            for (int f = 0; f < F_N; f++) free(jl->pend[f].p);
            free(jl);
            pthread_mutex_lock(&mu);
        }
    }
    return arg;
}

static void wake_writer(void)
{
    pthread_mutex_lock(&mu);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&mu);
}

/* At exit, the writer gets a moment to write what is pending; a stuck disk does not hold the exit. */
static void flush_at_exit(void)
{
    struct timespec until;
    cj_log_set_tap(NULL);   /* the joblogs go: no line reaches them any more */
    live = NULL;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)FLUSH_AT_EXIT_SECS;
    pthread_mutex_lock(&mu);
    for (struct cj_joblog *jl = all; jl; jl = jl->next) jl->closing = true;
    pthread_cond_signal(&wake);
    while (all && pthread_cond_timedwait(&idle, &mu, &until) == 0) {}
    pthread_mutex_unlock(&mu);
}

static int start_writer(void)
{
    if (writer_started) return 0;
    pthread_t t;
    pthread_attr_t a;
    sigset_t all_sigs, old;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sigfillset(&all_sigs);
    pthread_sigmask(SIG_SETMASK, &all_sigs, &old);   /* signals stay with the event loop */
    int rc = pthread_create(&t, &a, writer, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    if (rc) {
        cj_log_warning("cannot start the job log writer: %s; jobs get no FLARE log files", strerror(rc));
        return -1;
    }
    writer_started = true;
    atexit(flush_at_exit);
    cj_log_set_tap(on_log);
    return 0;
}

/* ---- life cycle (event loop) ------------------------------------------------------------------- */

struct cj_joblog *cj_joblog_open(const char *dir, const char *job_id)
{
    if (start_writer()) return NULL;
    struct cj_joblog *jl = calloc(1, sizeof *jl);
    if (!jl) return NULL;
    snprintf(jl->dir, sizeof jl->dir, "%s", dir);
    snprintf(jl->job_id, sizeof jl->job_id, "%s", job_id);
    for (int f = 0; f < F_N; f++) jl->fd[f] = -1;
    jl->live_next = live;
    live = jl;
    pthread_mutex_lock(&mu);
    jl->next = all;
    all = jl;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&mu);
    return jl;
}

void cj_joblog_close(struct cj_joblog *jl)
{
    if (!jl) return;
    for (struct cj_joblog **pp = &live; *pp; pp = &(*pp)->live_next)
        if (*pp == jl) {
            *pp = jl->live_next;
            break;
        }
    pthread_mutex_lock(&mu);
    uint64_t dropped = jl->failed ? 0 : jl->dropped;
    pthread_mutex_unlock(&mu);
    if (dropped) {   /* the last word on what was lost, past the bound if need be */
        char note[128];
        drop_note(note, sizeof note, dropped);
        put_record(jl, CJ_LOG_WARNING, CJ_JOBLOG_DAEMON_LOGGER, note, true);
    }
    pthread_mutex_lock(&mu);
    jl->closing = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&mu);
}
