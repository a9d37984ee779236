/* SPDX-License-Identifier: Apache-2.0 */
/* notify.c — sd_notify(3) datagrams over $NOTIFY_SOCKET (see notify.h). */
#include "ops/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static int notify_fd = -1;
static uint64_t watchdog_usec;

bool cj_notify_init(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    const char *wd = getenv("WATCHDOG_USEC");
    const char *wpid = getenv("WATCHDOG_PID");

    watchdog_usec = 0;
    if (wd && (!wpid || (pid_t)strtol(wpid, NULL, 10) == getpid()))
        watchdog_usec = strtoull(wd, NULL, 10);
    if (notify_fd >= 0) { close(notify_fd); notify_fd = -1; }
    if (!path || !*path || strlen(path) >= sizeof notify_addr.sun_path) return false;
    if (path[0] != '/' && path[0] != '@') return false;

    memset(&notify_addr, 0, sizeof notify_addr);
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, path, strlen(path));
    if (path[0] == '@') notify_addr.sun_path[0] = '\0'; /* abstract namespace */
    notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    return notify_fd >= 0;
}

bool cj_notify_enabled(void) { return notify_fd >= 0; }

uint64_t cj_notify_watchdog_usec(void) { return watchdog_usec; }

int cj_notify(const char *state)
{
    if (notify_fd < 0) return 0;
    ssize_t n = sendto(notify_fd, state, strlen(state), MSG_NOSIGNAL,
                       (struct sockaddr *)&notify_addr, notify_len);
    return n < 0 ? -errno : 0;
}

int cj_notify_ready(void) { return cj_notify("READY=1"); }
int cj_notify_stopping(void) { return cj_notify("STOPPING=1"); }
int cj_notify_watchdog(void) { return cj_notify("WATCHDOG=1"); }

int cj_notify_reloading(void)
{
    /* systemd ≥ 253 wants MONOTONIC_USEC with RELOADING=1 (Type=notify-reload). */
    char buf[96];
    snprintf(buf, sizeof buf, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)cj_now_us());
    return cj_notify(buf);
}

int cj_notify_status(const char *line)
{
    char buf[512];
    snprintf(buf, sizeof buf, "STATUS=%s", line);
    for (char *p = buf; *p; p++) if (*p == '\n') *p = ' ';
    return cj_notify(buf);
}
