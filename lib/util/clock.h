/* SPDX-License-Identifier: Apache-2.0 */
/* clock.h — the monotonic clock every timer, age and deadline is measured on,
 * the conversion of a delay in seconds to the timeval libevent takes, and the
 * one way status shows a wall-clock time. */
#ifndef CJ_UTIL_CLOCK_H
#define CJ_UTIL_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double cj_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Microseconds on CLOCK_MONOTONIC (systemd's MONOTONIC_USEC). */
static inline uint64_t cj_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A delay in seconds as a timeval: negative or NaN is 0, more than 1e9 s is 1e9 s
 * (a timer that never fires in practice, without overflowing time_t). */
static inline struct timeval cj_tv(double secs)
{
    if (!(secs > 0)) secs = 0;
    if (secs > 1e9) secs = 1e9;
    struct timeval tv;
    tv.tv_sec = (time_t)secs;
    tv.tv_usec = (suseconds_t)((secs - (double)tv.tv_sec) * 1e6);
    return tv;
}

/* Wall-clock time t in UTC as status shows it, "2026-11-27T06:40:01Z", in buf
 * (at least 21 bytes); "" when t is 0 (never) or cannot be shown.  Returns buf. */
static inline const char *cj_utc_text(time_t t, char *buf, size_t size)
{
    struct tm tm;
    if (size) buf[0] = '\0';
    if (t && gmtime_r(&t, &tm) && !strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) && size) buf[0] = '\0';
    return buf;
}

#endif
