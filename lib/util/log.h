/* SPDX-License-Identifier: Apache-2.0 */
/* log.h — the daemon's log: stderr, optionally syslog(3).
 *
 * Under systemd (JOURNAL_STREAM set) each line starts with a "<N>" priority
 * prefix that journald turns into the entry's priority; otherwise each line
 * starts with an ISO-8601 UTC timestamp, the program name and pid, and the
 * level.  One write(2) per line, so lines from several processes sharing a
 * terminal or pipe do not interleave.  Embedded newlines become spaces: one
 * call, one line. */
#ifndef CJ_UTIL_LOG_H
#define CJ_UTIL_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum cj_log_level { CJ_LOG_ERROR, CJ_LOG_WARNING, CJ_LOG_INFO, CJ_LOG_DEBUG };

/* "error", "warning", "info", "debug", NULL: indexed by enum cj_log_level. */
extern const char *const cj_log_level_names[];

#define CJ_LOG_LINE_MAX 2048   /* longer messages are cut, ending in "..." */

/* Sets the program name (default "cjrelay") and looks at JOURNAL_STREAM again.
 * Optional: cj_log works without it. */
void cj_log_init(const char *ident);

void cj_log_set_level(int level);      /* clamped to error..debug; default info */
int cj_log_get_level(void);
bool cj_log_enabled(int level);        /* would a message at level be written? */

/* Also send every line to syslog(3) (facility daemon), or stop doing so. */
void cj_log_set_syslog(bool on);

/* A tap: each line written from the thread that set it (the event loop's)
 * also goes to fn, as its level and text without the prefix; lines at info
 * and above reach it even when the level set is lower.  One tap; NULL
 * removes it.  Lines fn itself logs do not reach it again. */
typedef void (*cj_log_tap_fn)(int level, const char *msg);
void cj_log_set_tap(cj_log_tap_fn fn);

/* Name -> level (exact, lowercase), -1 when unknown. */
int cj_log_level_from_name(const char *name);

void cj_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cj_vlog(int level, const char *fmt, va_list ap);

#define cj_log_error(...) cj_log(CJ_LOG_ERROR, __VA_ARGS__)
#define cj_log_warning(...) cj_log(CJ_LOG_WARNING, __VA_ARGS__)
#define cj_log_info(...) cj_log(CJ_LOG_INFO, __VA_ARGS__)
#define cj_log_debug(...) cj_log(CJ_LOG_DEBUG, __VA_ARGS__)

#endif
