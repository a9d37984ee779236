/* SPDX-License-Identifier: Apache-2.0 */
/* log.c — leveled logging to stderr (journal-aware) and optionally syslog. */
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

const char *const cj_log_level_names[] = {"error", "warning", "info", "debug", NULL};

/* syslog(3) priority of each level; the same numbers journald reads in "<N>". */
static const int level_prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};

static atomic_int cur_level = CJ_LOG_INFO;
static atomic_bool use_syslog;
static atomic_int journal = -1;            /* -1: not looked at yet */
static char ident[64] = "cjrelay";
static pthread_t tap_thread;               /* the one thread whose lines go to the tap */
static _Atomic(cj_log_tap_fn) tap;
static _Thread_local bool in_tap;

/* The contract says: priority prefixes when JOURNAL_STREAM is set.  (systemd
 * also allows comparing its dev:ino with stderr's; a set variable is enough
 * here because only the service manager sets it.) */
static int journal_mode(void)
{
    int j = atomic_load(&journal);
    if (j < 0) {
        const char *js = getenv("JOURNAL_STREAM");
        j = (js && *js) ? 1 : 0;
        atomic_store(&journal, j);
    }
    return j;
}

void cj_log_init(const char *name)
{
    if (name && *name) snprintf(ident, sizeof ident, "%s", name);
    atomic_store(&journal, -1);
    journal_mode();
}

void cj_log_set_level(int level)
{
    if (level < CJ_LOG_ERROR) level = CJ_LOG_ERROR;
    if (level > CJ_LOG_DEBUG) level = CJ_LOG_DEBUG;
    atomic_store(&cur_level, level);
}

int cj_log_get_level(void) { return atomic_load(&cur_level); }

bool cj_log_enabled(int level) { return level <= atomic_load(&cur_level); }

void cj_log_set_syslog(bool on)
{
    bool was = atomic_exchange(&use_syslog, on);
    if (on && !was) openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
    if (!on && was) closelog();
}

void cj_log_set_tap(cj_log_tap_fn fn)
{
    tap_thread = pthread_self();
    atomic_store(&tap, fn);
}

static bool tapped(int level)
{
    return level <= CJ_LOG_INFO && !in_tap && atomic_load(&tap) && pthread_equal(pthread_self(), tap_thread);
}

int cj_log_level_from_name(const char *name)
{
    for (int i = 0; cj_log_level_names[i]; i++)
        if (!strcmp(name, cj_log_level_names[i])) return i;
    return -1;
}

/* "<N>" under journald, else "2026-01-02T03:04:05.678Z ident[pid] level: ". */
static size_t format_prefix(char *buf, size_t cap, int level)
{
    if (journal_mode()) return (size_t)snprintf(buf, cap, "<%d>", level_prio[level]);
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, cap - n, ".%03ldZ %s[%ld] %s: ", ts.tv_nsec / 1000000L,
                          ident, (long)getpid(), cj_log_level_names[level]);
    return n < cap ? n : cap - 1;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;                  /* nowhere left to complain */
        p += w;
        n -= (size_t)w;
    }
}

void cj_vlog(int level, const char *fmt, va_list ap)
{
    if (level < CJ_LOG_ERROR) level = CJ_LOG_ERROR;
    if (level > CJ_LOG_DEBUG) level = CJ_LOG_DEBUG;
    bool to_tap = tapped(level), to_log = cj_log_enabled(level);
    if (!to_log && !to_tap) return;
    char line[CJ_LOG_LINE_MAX + 2];
    size_t pre = format_prefix(line, CJ_LOG_LINE_MAX, level);
    int m = vsnprintf(line + pre, CJ_LOG_LINE_MAX - pre, fmt, ap);
    size_t len = m < 0 ? pre : pre + (size_t)m;
    if (len >= CJ_LOG_LINE_MAX) {            /* cut: mark it */
        len = CJ_LOG_LINE_MAX - 1;
        memcpy(line + len - 3, "...", 3);
    }
    for (size_t i = pre; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
    line[len] = '\0';
    if (to_tap) {
        in_tap = true;
        atomic_load(&tap)(level, line + pre);
        in_tap = false;
    }
    if (!to_log) return;
    if (atomic_load(&use_syslog)) syslog(level_prio[level], "%s", line + pre);
    line[len++] = '\n';
    write_all(STDERR_FILENO, line, len);
}

void cj_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cj_vlog(level, fmt, ap);
    va_end(ap);
}
