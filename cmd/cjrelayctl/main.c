/* SPDX-License-Identifier: Apache-2.0 */
/* cjrelayctl — talk to cjrelayd's status socket.
 *
 *   cjrelayctl [-s SOCKET] [-c FILE] [--pass FILE]... COMMAND [ARGS] [json]
 *
 * Sends one command line, prints the answer up to its closing empty line.  A
 * last argument "-" is replaced by standard input (line breaks become spaces):
 * `cjrelayctl job start - < job.json` keeps a description's credentials off
 * every argv.  Each --pass FILE is opened (read-only, with the caller's
 * rights) and passed with the line as an open file (SCM_RIGHTS), the first
 * as index 0: a job description's tls_fds name them (doc/interface.md).
 * Exit statuses: ops/exitcodes.c (0 on OK/data, 1 on an ERR answer, 2 when the
 * socket cannot be reached). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "ops/commands.h"
#include "ops/exitcodes.h"
#include "util/version.h"

#define DEFAULT_SOCKET "/run/cjrelay/status.sock"
#define ANSWER_TIMEOUT_MS 30000
#define LINE_MAX_BYTES (64 * 1024)   /* the daemon's longest command line (a job description) */
#define PASS_MAX 3                   /* open files with one line: the daemon's CJ_STATUS_MAX_FDS */

/* The commands are the daemon's table (ops/commands.c): the list cannot drift. */
static void usage(FILE *f)
{
    char line[256];
    fprintf(f, "usage: cjrelayctl [-s SOCKET] [-c FILE] [--pass FILE]... COMMAND [ARGS] [json]\ncommands:\n");
    for (int i = 0; i < CJ_CMD_COUNT; i++) {
        fprintf(f, "  %-20s %s%s\n", cj_cmd_usage((enum cj_cmd)i, false, line, sizeof line), cj_cmds[i].help,
                cj_cmds[i].access == CJ_ACCESS_ADMIN ? " (admin)" : "");
        for (int t = 0; i == CJ_CMD_SHOW && t < CJ_SHOW_COUNT; t++)
            fprintf(f, "      %-16s %s\n", cj_shows[t].name, cj_shows[t].help);
    }
    fprintf(f, "a last argument '-' is read from standard input (job start - < job.json)\n");
    fprintf(f, "--pass FILE: open FILE and pass it with the command as an open file (at most %d; the first is\n"
               "  index 0 of a job description's tls_fds): the daemon reads it without the right to open it\n", PASS_MAX);
    fprintf(f, "socket: -s SOCKET, else [status] socket of -c FILE, else %s\n", DEFAULT_SOCKET);
    fprintf(f, "exit status:\n");
    for (size_t i = 0; i < cj_exit_ncodes; i++)
        if (!strcmp(cj_exit_codes[i].program, "cjrelayctl"))
            fprintf(f, "  %d  %s\n", cj_exit_codes[i].code, cj_exit_codes[i].meaning);
    fprintf(f, "see cjrelayctl(8); the stats fields: cjrelayd(8)\n");
}

static int connect_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "cjrelayctl: socket path too long: %s\n", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        fprintf(stderr, "cjrelayctl: cannot connect to %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The line's first bytes go with the open files (the daemon gives them to
 * the line that holds the last byte of the read that brings them), the rest
 * after them. */
static int send_line(int fd, const char *buf, size_t n, const int *files, int nfiles)
{
    if (!nfiles) return send_all(fd, buf, n);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * PASS_MAX)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)buf, n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfiles)};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfiles);
    memcpy(CMSG_DATA(h), files, sizeof(int) * (size_t)nfiles);
    ssize_t w;
    while ((w = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
    if (w < 0) return -1;
    return send_all(fd, buf + w, n - (size_t)w);
}

/* Reads until the empty line that ends an answer (waiting at most
 * timeout_ms, -1: as long as it takes); prints it; returns the exit status
 * (OK, ERR, or unreachable when the answer was cut short). */
static int read_answer(int fd, int timeout_ms)
{
    char buf[8192];
    size_t have = 0;
    int is_err = -1;
    char prev = '\n';
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, timeout_ms);
        if (pr == 0) { fprintf(stderr, "cjrelayctl: no answer within %d s\n", timeout_ms / 1000); return CJ_CTL_EXIT_UNREACHABLE; }
        if (pr < 0) { if (errno == EINTR) continue; return CJ_CTL_EXIT_UNREACHABLE; }
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { fprintf(stderr, "cjrelayctl: connection closed before the answer ended\n"); return CJ_CTL_EXIT_UNREACHABLE; }
        for (ssize_t i = 0; i < r; i++) {
            if (is_err < 0 && have == 0) is_err = (size_t)r >= 4 && memcmp(buf, "ERR ", 4) == 0;
            if (buf[i] == '\n' && prev == '\n' && have > 0) {
                fwrite(buf, 1, (size_t)i, stdout);
                return is_err == 1 ? CJ_CTL_EXIT_ERR : CJ_CTL_EXIT_OK;
            }
            prev = buf[i];
            have++;
        }
        fwrite(buf, 1, (size_t)r, stdout);
    }
}

/* Appends s to line (one space between words); -1 when the line would be too long. */
static int append_word(char *line, size_t *len, const char *s, size_t n)
{
    if (*len + n + 2 >= LINE_MAX_BYTES) return -1;
    if (*len) line[(*len)++] = ' ';
    memcpy(line + *len, s, n);
    *len += n;
    line[*len] = '\0';
    return 0;
}

/* Standard input as one word: line breaks and tabs become spaces. */
static int append_stdin(char *line, size_t *len)
{
    char *buf = malloc(LINE_MAX_BYTES);
    if (!buf) return -1;
    size_t n = fread(buf, 1, LINE_MAX_BYTES, stdin);
    int rc = n == LINE_MAX_BYTES || ferror(stdin) ? -1 : 0;
    for (size_t k = 0; k < n; k++)
        if (buf[k] == '\n' || buf[k] == '\r' || buf[k] == '\t') buf[k] = ' ';
    while (n && buf[n - 1] == ' ') n--;
    if (rc == 0) rc = append_word(line, len, buf, n);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sock = NULL, *conf = NULL;
    int files[PASS_MAX], nfiles = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) sock = argv[++i];
        else if (!strcmp(argv[i], "--pass") && i + 1 < argc) {
            const char *file = argv[++i];
            if (nfiles == PASS_MAX) { fprintf(stderr, "cjrelayctl: --pass: at most %d files\n", PASS_MAX); return CJ_CTL_EXIT_UNREACHABLE; }
            if ((files[nfiles] = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0) {
                fprintf(stderr, "cjrelayctl: --pass: cannot open %s: %s\n", file, strerror(errno));
                return CJ_CTL_EXIT_UNREACHABLE;
            }
            nfiles++;
        }
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) conf = argv[++i];
        else if (!strcmp(argv[i], "--version")) { printf("cjrelayctl %s\n", CJRELAY_VERSION); return CJ_CTL_EXIT_OK; }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return CJ_CTL_EXIT_OK; }
        else { usage(stderr); return CJ_CTL_EXIT_UNREACHABLE; }
    }
    if (i >= argc) { usage(stderr); return CJ_CTL_EXIT_UNREACHABLE; }
    char path[4096];
    if (!sock && conf) {
        if (ctl_socket_from_config(conf, path, sizeof path) != 0) return CJ_CTL_EXIT_UNREACHABLE;
        sock = path;
    }
    if (!sock) sock = DEFAULT_SOCKET;

    static char line[LINE_MAX_BYTES];
    size_t len = 0;
    for (; i < argc; i++) {
        int rc = i == argc - 1 && !strcmp(argv[i], "-") ? append_stdin(line, &len)
                                                         : append_word(line, &len, argv[i], strlen(argv[i]));
        if (rc != 0) { fprintf(stderr, "cjrelayctl: command too long (at most %d bytes)\n", LINE_MAX_BYTES - 2); return CJ_CTL_EXIT_UNREACHABLE; }
    }
    line[len++] = '\n';
    line[len] = '\0';
    int fd = connect_socket(sock);
    if (fd < 0) return CJ_CTL_EXIT_UNREACHABLE;
    if (send_line(fd, line, len, files, nfiles) != 0) {
        fprintf(stderr, "cjrelayctl: cannot send to %s: %s\n", sock, strerror(errno));
        close(fd);
        return CJ_CTL_EXIT_UNREACHABLE;
    }
    /* job wait answers when the job ends, however long that takes */
    int rc = read_answer(fd, strncmp(line, "job wait ", 9) == 0 ? -1 : ANSWER_TIMEOUT_MS);
    close(fd);
    return rc;
}
