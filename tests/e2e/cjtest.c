/* SPDX-License-Identifier: Apache-2.0 */
/* cjtest — small tools the shell end-to-end tests need and the shell lacks.
 *
 *   cjtest notify-sink PATH            bind a Unix datagram socket at PATH and print
 *                                      each datagram on one line ('\n' shown as '|')
 *   cjtest noread SOCKET N SECS        send N "show config" lines, never read, hold SECS
 *   cjtest longline SOCKET BYTES       send BYTES without a newline; print what comes back
 *   cjtest flood SOCKET N              open N connections at once, hold 1 s
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int unix_sock(const char *path, int type, int do_bind)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, type, 0);
    if (fd < 0) return -1;
    int rc = do_bind ? bind(fd, (struct sockaddr *)&sa, sizeof sa) : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0) { perror(path); close(fd); return -1; }
    return fd;
}

static int notify_sink(const char *path)
{
    unlink(path);
    int fd = unix_sock(path, SOCK_DGRAM, 1);
    if (fd < 0) return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n < 0) { if (errno == EINTR) continue; return 1; }
        for (ssize_t i = 0; i < n; i++) if (buf[i] == '\n') buf[i] = '|';
        buf[n] = 0;
        printf("%s\n", buf);
    }
}

static int noread(const char *path, int n, int secs)
{
    int fd = unix_sock(path, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    const char *cmd = "show config\n";
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, 1000) <= 0) break;   /* the daemon stopped reading us: fine */
        if (send(fd, cmd, strlen(cmd), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) break;
    }
    sleep((unsigned)secs);
    close(fd);
    return 0;
}

static int longline(const char *path, long bytes)
{
    int fd = unix_sock(path, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    for (long sent = 0; sent < bytes;) {
        size_t k = (size_t)(bytes - sent < (long)sizeof chunk ? bytes - sent : (long)sizeof chunk);
        ssize_t w = send(fd, chunk, k, MSG_NOSIGNAL);
        if (w <= 0) break;   /* the daemon closed on us: expected */
        sent += w;
    }
    char buf[512];
    ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
    if (r > 0) { buf[r] = 0; fputs(buf, stdout); }
    close(fd);
    return 0;
}

static int flood(const char *path, int n)
{
    int *fds = calloc((size_t)n, sizeof *fds);
    int ok = 0;
    for (int i = 0; i < n; i++) if ((fds[i] = unix_sock(path, SOCK_STREAM, 0)) >= 0) ok++;
    sleep(1);
    for (int i = 0; i < n; i++) if (fds[i] >= 0) close(fds[i]);
    printf("connected %d\n", ok);
    free(fds);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && !strcmp(argv[1], "notify-sink")) return notify_sink(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "noread")) return noread(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "longline")) return longline(argv[2], atol(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "flood")) return flood(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: see the comment at the top of cjtest.c\n");
    return 2;
}
