/* SPDX-License-Identifier: Apache-2.0 */
/* notify.h — systemd's notify protocol without libsystemd.
 *
 * A datagram of "KEY=VALUE\n" lines sent to $NOTIFY_SOCKET (a filesystem path, or
 * an abstract socket when it starts with '@').  Sending never blocks: the socket is
 * non-blocking and a full queue drops the message (systemd's own behaviour). */
#ifndef CJ_OPS_NOTIFY_H
#define CJ_OPS_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Reads $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID once; true when notify is on. */
bool cj_notify_init(void);
bool cj_notify_enabled(void);

/* Sends one datagram; state is "KEY=VALUE" lines joined by '\n'. Returns 0 or -errno. */
int cj_notify(const char *state);
int cj_notify_ready(void);
int cj_notify_reloading(void);          /* RELOADING=1 + MONOTONIC_USEC= */
int cj_notify_stopping(void);
int cj_notify_status(const char *line); /* STATUS=<line> */
int cj_notify_watchdog(void);

/* WATCHDOG_USEC for this process (0 when not set or meant for another pid). */
uint64_t cj_notify_watchdog_usec(void);

#endif
