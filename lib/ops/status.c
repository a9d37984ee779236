/* SPDX-License-Identifier: Apache-2.0 */
/* status.c — status socket server (see status.h): the line protocol, and
 * the socket read with recvmsg so that open files passed with a line
 * (SCM_RIGHTS) reach the command they came with. */
#include "ops/status.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/util.h>

#include "util/log.h"

/* Input held at most: a whole line and the next one's start. */
#define INPUT_MAX (2 * CJ_STATUS_MAX_LINE)
#define READ_CHUNK 16384

/* The socket is read here (recvmsg, into in), not by the bufferevent, which
 * would drop the descriptors; the bufferevent writes the answers. */
struct client {
    struct cj_status *st;
    struct bufferevent *bev;
    struct event *rd;
    struct evbuffer *in;
    struct client *next;
    pid_t pid;
    uid_t uid;
    bool admin;
    bool closing;    /* answer queued, close once flushed */
    bool reading;    /* rd is armed */
    struct cj_status_wait *waiting;   /* a deferred answer: the next commands wait for it */
    uint64_t rx;     /* bytes received so far */
    /* Descriptors received and not yet given to a line, each with the stream
     * offset of the last byte of the read that brought it: the kernel hands
     * them over with the bytes they were sent with, and a read ends with them. */
    int fds[CJ_STATUS_MAX_FDS];
    uint64_t fd_at[CJ_STATUS_MAX_FDS];
    int nfds;
};

struct cj_status_call {
    struct client *c;
    const int *fds;   /* the descriptors that came with the line; the socket closes them after it */
    int nfds;
};

_Static_assert(CJ_STATUS_MAX_FDS >= 1 && CJ_STATUS_MAX_FDS <= 16, "descriptors per line");

struct cj_status_wait {
    struct client *c;
};

struct cj_status {
    struct event_base *base;
    struct evconnlistener *lis;
    struct cj_status_ops ops;
    char path[108];
    struct client *clients;
    int nclients;
    bool has_admin_gid;
    gid_t admin_gid;
};

/* ---- socket file handling ------------------------------------------------ */

static int fill_addr(struct sockaddr_un *sa, const char *path, struct cj_err *err)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path)
        return cj_fail(err, CJ_E_LIMIT, 0, "socket path too long (%zu bytes, max %zu): %s",
                       strlen(path), sizeof sa->sun_path - 1, path);
    memcpy(sa->sun_path, path, strlen(path));
    return 0;
}

/* A socket file is stale when nothing accepts on it.  A non-blocking connect
 * cannot hang: it succeeds or fails at once on AF_UNIX (EAGAIN = live but busy). */
static int check_existing(const char *path, const struct sockaddr_un *sa, struct cj_err *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : cj_fail(err, CJ_E_INVALID, 0, "%s: %s", path, strerror(errno));
    if (!S_ISSOCK(sb.st_mode))
        return cj_fail(err, CJ_E_INVALID, 0, "%s exists and is not a socket; refusing to replace it", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa);
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return cj_fail(err, CJ_E_INVALID, 0, "%s is in use by a running process; refusing to replace it", path);
    if (e != ECONNREFUSED && e != ENOENT)
        return cj_fail(err, CJ_E_INVALID, 0, "%s: cannot tell whether it is stale: %s", path, strerror(e));
    if (unlink(path) != 0 && errno != ENOENT)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot remove stale socket %s: %s", path, strerror(errno));
    cj_log(CJ_LOG_INFO, "replaced stale socket %s", path);
    return 0;
}

int cj_unix_listen(const char *path, mode_t mode, struct cj_err *err)
{
    struct sockaddr_un sa;
    int rc = fill_addr(&sa, path, err);
    if (rc || (rc = check_existing(path, &sa, err))) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno)); return -1; }
    /* umask closes the window between bind() and chmod() in which the socket
     * would have the default mode. */
    mode_t old = umask((mode_t)(~mode & 0777));
    rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc != 0 || chmod(path, mode) != 0 || listen(fd, 64) != 0) {
        if (rc == 0) e = errno;
        cj_fail(err, CJ_E_INVALID, 0, "cannot listen on %s: %s", path, strerror(e));
        close(fd);
        if (rc == 0) unlink(path);
        return -1;
    }
    return fd;
}

/* ---- clients ------------------------------------------------------------- */

static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++) close(fds[i]);
}

static void client_free(struct client *c)
{
    struct cj_status *st = c->st;
    close_fds(c->fds, c->nfds);
    if (c->rd) event_free(c->rd);
    if (c->in) evbuffer_free(c->in);
    if (c->waiting) {
        if (st->ops.cancel) st->ops.cancel(st->ops.ctx, c->waiting);
        free(c->waiting);
    }
    for (struct client **pp = &st->clients; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; break; }
    st->nclients--;
    bufferevent_free(c->bev);
    free(c);
}

static void reply_err(struct evbuffer *out, int code, const char *text)
{
    evbuffer_add_printf(out, "ERR %d %s\n\n", code, text);
}

/* Reading goes on while the client is open, its input has room, and it reads
 * its answers; idle for CJ_STATUS_IDLE_SECS it is closed, unless it waits for
 * a deferred answer. */
static void update_reading(struct client *c)
{
    bool want = !c->closing && evbuffer_get_length(c->in) < INPUT_MAX &&
                evbuffer_get_length(bufferevent_get_output(c->bev)) < CJ_STATUS_MAX_OUTPUT;
    struct timeval idle = {CJ_STATUS_IDLE_SECS, 0};
    if (c->reading) event_del(c->rd);   /* re-added: the idle time starts anew, or stops while waiting */
    if (want) event_add(c->rd, c->waiting ? NULL : &idle);
    c->reading = want;
}

static void close_after_flush(struct client *c)
{
    c->closing = true;
    update_reading(c);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) client_free(c);
}

/* ---- the line protocol ------------------------------------------------------ */

/* Words quoted back in an error are cut short: the line may be 4 KiB. */
#define QUOTE_MAX 64

static void reply_usage(struct evbuffer *out, const char *what, enum cj_cmd c)
{
    char usage[256];
    evbuffer_add_printf(out, "ERR 400 %s; usage: %s\n\n", what, cj_cmd_usage(c, false, usage, sizeof usage));
}

static void help_list(struct evbuffer *out)
{
    char usage[256];
    for (int i = 0; i < CJ_CMD_COUNT; i++)
        evbuffer_add_printf(out, "%s\n", cj_cmd_usage((enum cj_cmd)i, true, usage, sizeof usage));
    evbuffer_add(out, "\n", 1);
}

static void help_one(struct evbuffer *out, const char *name)
{
    int c = cj_cmd_find(name);
    if (c < 0 && cj_cmd_is_prefix(name)) {   /* "help job": the job commands' usage lines */
        char usage[256];
        size_t n = strlen(name);
        for (int i = 0; i < CJ_CMD_COUNT; i++)
            if (strncmp(cj_cmds[i].name, name, n) == 0 && cj_cmds[i].name[n] == ' ')
                evbuffer_add_printf(out, "%s\n", cj_cmd_usage((enum cj_cmd)i, true, usage, sizeof usage));
        evbuffer_add(out, "\n", 1);
        return;
    }
    if (c < 0) { evbuffer_add_printf(out, "ERR 400 unknown command '%.*s'; try: help\n\n", QUOTE_MAX, name); return; }
    char usage[256];
    const struct cj_cmd_def *d = &cj_cmds[c];
    evbuffer_add_printf(out, "usage: %s\naccess: %s\nwhat: %s\n", cj_cmd_usage((enum cj_cmd)c, false, usage, sizeof usage),
                        d->access == CJ_ACCESS_ADMIN ? "admin" : "read", d->help);
    for (int i = 0; c == CJ_CMD_SHOW && i < CJ_SHOW_COUNT; i++)
        evbuffer_add_printf(out, "%s: %s\n", cj_shows[i].name, cj_shows[i].help);
    evbuffer_add(out, "\n", 1);
}

/* show <what> [job ID] [json] */
static void cmd_show(const struct cj_status_ops *ops, struct evbuffer *out, char **args, int nargs)
{
    int what = cj_show_find(args[0]);
    if (what < 0) {
        evbuffer_add_printf(out, "ERR 400 unknown show target '%.*s'; try: help show\n\n", QUOTE_MAX, args[0]);
        return;
    }
    bool json = nargs > 1 && strcmp(args[nargs - 1], "json") == 0;
    int rest = nargs - 1 - json;
    const char *job = NULL;
    if (rest == 2 && strcmp(args[1], "job") == 0) job = args[2];
    else if (rest != 0) { reply_usage(out, "unknown option", CJ_CMD_SHOW); return; }
    if (!ops->show) { reply_err(out, 500, "no show handler"); return; }
    struct evbuffer *tmp = evbuffer_new();
    if (!tmp) { reply_err(out, 500, "out of memory"); return; }
    struct cj_out o;
    char msg[256] = "";
    cj_out_begin(&o, tmp, json);
    int rc = ops->show(ops->ctx, (enum cj_show)what, job, &o, msg, sizeof msg);
    if (rc) {
        msg[sizeof msg - 1] = '\0';
        reply_err(out, rc, msg[0] ? msg : "failed");
    } else {
        cj_out_end(&o);
        evbuffer_add_buffer(out, tmp);
    }
    evbuffer_free(tmp);
}

static void cmd_other(const struct cj_status_ops *ops, enum cj_cmd c, struct cj_status_call *call,
                      struct evbuffer *out, char **args, int nargs)
{
    char msg[512] = "";
    int rc = ops->command ? ops->command(ops->ctx, c, args, nargs, call, msg, sizeof msg) : 500;
    if (rc == CJ_STATUS_DEFERRED) return;
    msg[sizeof msg - 1] = '\0';
    /* The answer is one line: a message with a newline would break the protocol. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    if (rc) reply_err(out, rc, msg[0] ? msg : "failed");
    else evbuffer_add_printf(out, "OK%s%s\n\n", msg[0] ? " " : "", msg);
}

/* A word of the line: [start, start + len). */
struct span {
    size_t start, len;
};

static bool is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

/* The spans of up to max words from pos on; returns how many (max + 1 when
 * there are more). */
static int find_words(const char *line, size_t len, size_t pos, struct span *w, int max)
{
    int n = 0;
    while (pos < len) {
        while (pos < len && is_blank(line[pos])) pos++;
        if (pos == len) break;
        if (n == max) return max + 1;
        w[n].start = pos;
        while (pos < len && !is_blank(line[pos])) pos++;
        w[n].len = pos - w[n].start;
        n++;
    }
    return n;
}

/* Word i as a C string in buf (cut to its size), the line left as it is. */
static const char *word(const char *line, const struct span *w, char *buf, size_t size)
{
    snprintf(buf, size, "%.*s", (int)w->len, line + w->start);
    return buf;
}

/* Which command the first words name: one word, or two ("job start").
 * Returns the index and sets *used to the words of the name, or -1. */
static int name_command(const char *line, const struct span *w, int nw, int *used)
{
    char one[64], two[160];
    *used = 1;
    int c = cj_cmd_find(word(line, &w[0], one, sizeof one));
    if (c >= 0 || nw < 2) return c;
    snprintf(two, sizeof two, "%s %.*s", one, (int)w[1].len, line + w[1].start);
    *used = 2;
    return cj_cmd_find(two);
}

/* The table decides: the name, then who may run it, then how many arguments. */
static void run_command(const struct cj_status_ops *ops, bool admin, struct cj_status_call *call, char *line,
                        size_t len, struct evbuffer *out)
{
    struct span w[CJ_STATUS_MAX_WORDS + 1];
    int nw = find_words(line, len, 0, w, CJ_STATUS_MAX_WORDS);
    if (nw == 0) { reply_err(out, 400, "empty command; try: help"); return; }
    int used, c = name_command(line, w, nw, &used);
    if (c < 0) {
        char first[64], second[64];
        word(line, &w[0], first, sizeof first);
        if (nw >= 2 && cj_cmd_is_prefix(first))
            evbuffer_add_printf(out, "ERR 400 unknown command '%s %s'; try: help %s\n\n", first,
                                word(line, &w[1], second, sizeof second), first);
        else evbuffer_add_printf(out, "ERR 400 unknown command '%.*s'; try: help\n\n", QUOTE_MAX, first);
        return;
    }
    const struct cj_cmd_def *d = &cj_cmds[c];
    if (d->access == CJ_ACCESS_ADMIN && !admin) { reply_err(out, 403, "permission denied: read-only client"); return; }
    int nfds = call ? call->nfds : 0;
    if (nfds > d->max_fds) {
        if (d->max_fds) evbuffer_add_printf(out, "ERR 400 %d open files came with '%s', which takes %d at most\n\n", nfds, d->name, d->max_fds);
        else evbuffer_add_printf(out, "ERR 400 open files came with '%s', which takes none\n\n", d->name);
        return;
    }
    char *args[CJ_STATUS_MAX_WORDS];
    int nargs = 0;
    if (d->rest && nw - used >= d->max_args) {
        /* the words before the last argument, then the rest of the line as it is */
        nargs = d->max_args;
        size_t from = w[used + nargs - 1].start, to = len;
        while (to > from && is_blank(line[to - 1])) to--;
        line[to] = '\0';
        args[nargs - 1] = line + from;
        for (int i = 0; i < nargs - 1; i++) {
            args[i] = line + w[used + i].start;
            line[w[used + i].start + w[used + i].len] = '\0';
        }
    } else {
        if (nw > CJ_STATUS_MAX_WORDS) { reply_err(out, 400, "too many words; try: help"); return; }
        nargs = nw - used;
        if (nargs > d->max_args) { reply_usage(out, "too many arguments", (enum cj_cmd)c); return; }
        for (int i = 0; i < nargs; i++) {
            args[i] = line + w[used + i].start;
            line[w[used + i].start + w[used + i].len] = '\0';
        }
    }
    if (nargs < d->min_args) { reply_usage(out, "missing argument", (enum cj_cmd)c); return; }
    if (c == CJ_CMD_HELP) {
        if (nargs) help_one(out, args[0]);
        else help_list(out);
    } else if (c == CJ_CMD_SHOW) {
        cmd_show(ops, out, args, nargs);
    } else {
        cmd_other(ops, (enum cj_cmd)c, call, out, args, nargs);
    }
}

int cj_status_parse(char *line, char **argv, int max)
{
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (argc == max) return -1;
        argv[argc++] = t;
    }
    return argc;
}

static bool has_control(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 0x20 && ch != '\t' && ch != '\r') || ch == 0x7f) return true;
    }
    return false;
}

void cj_status_dispatch(const struct cj_status_ops *ops, bool admin, struct cj_status_call *call, char *line,
                        size_t len, struct evbuffer *out)
{
    if (has_control(line, len)) { reply_err(out, 400, "control character in command; try: help"); return; }
    run_command(ops, admin, call, line, len, out);
}

/* What the log keeps of a command: a change (an admin command, by its name
 * only: a job description holds credentials) and any ERR answer, with who
 * sent it.  Read-only commands that succeed leave no line above debug, so a
 * poller does not fill the journal. */
static int command_of(const char *line, size_t len)
{
    struct span w[3];
    int nw = find_words(line, len, 0, w, 2), used;
    return nw > 0 ? name_command(line, w, nw > 2 ? 2 : nw, &used) : -1;
}

/* Up to size - 1 bytes of the answer that starts at offset `at` of out, cut at its first newline. */
static void answer_start(struct evbuffer *out, size_t at, char *buf, size_t size)
{
    struct evbuffer_iovec v[16];
    int n = evbuffer_peek(out, (ev_ssize_t)(at + size - 1), NULL, v, 16);
    size_t got = 0, skip = at;
    for (int i = 0; i < n && i < 16 && got < size - 1; i++) {
        size_t l = v[i].iov_len;
        if (skip >= l) { skip -= l; continue; }
        size_t k = l - skip < size - 1 - got ? l - skip : size - 1 - got;
        memcpy(buf + got, (const char *)v[i].iov_base + skip, k);
        got += k;
        skip = 0;
    }
    buf[got] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

static void log_command(const struct client *c, int cmd, struct evbuffer *out, size_t before)
{
    char ans[160] = "";
    if (evbuffer_get_length(out) > before) answer_start(out, before, ans, sizeof ans);
    bool change = cmd >= 0 && cj_cmds[cmd].access == CJ_ACCESS_ADMIN;
    if (!strncmp(ans, "ERR ", 4))
        cj_log(CJ_LOG_INFO, "status: pid %d uid %u: %s%s%s", (int)c->pid, (unsigned)c->uid, cmd >= 0 ? cj_cmds[cmd].name : "",
               cmd >= 0 ? ": " : "", ans);
    else if (change)
        cj_log(CJ_LOG_INFO, "status: pid %d uid %u (admin): %s", (int)c->pid, (unsigned)c->uid, cj_cmds[cmd].name);
    else
        cj_log(CJ_LOG_DEBUG, "status: pid %d uid %u: %s", (int)c->pid, (unsigned)c->uid, cmd >= 0 ? cj_cmds[cmd].name : "?");
}

/* ---- deferred answers -------------------------------------------------------------- */

struct cj_status_wait *cj_status_defer(struct cj_status_call *call)
{
    if (!call || !call->c || call->c->waiting) return NULL;
    struct cj_status_wait *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->c = call->c;
    call->c->waiting = w;
    bufferevent_set_timeouts(w->c->bev, NULL, NULL);   /* waiting is not idling */
    update_reading(w->c);
    return w;
}

void cj_status_answer(struct cj_status_wait *w, int code, const char *text)
{
    struct client *c = w->c;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (code) evbuffer_add_printf(out, "ERR %d %s\n\n", code, text);
    else evbuffer_add_printf(out, "%s\n", text);
    c->waiting = NULL;
    free(w);
    struct timeval idle = {CJ_STATUS_IDLE_SECS, 0};
    bufferevent_set_timeouts(c->bev, NULL, &idle);
    update_reading(c);
    /* the client's next commands run from the loop, not from inside the caller */
    bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* ---- socket callbacks --------------------------------------------------------- */

/* The descriptors received before stream offset end: those of the line that ends there. */
static int take_line_fds(struct client *c, uint64_t end, int *fds)
{
    int n = 0;
    while (n < c->nfds && c->fd_at[n] < end) n++;
    memcpy(fds, c->fds, (size_t)n * sizeof *fds);
    memmove(c->fds, c->fds + n, (size_t)(c->nfds - n) * sizeof *c->fds);
    memmove(c->fd_at, c->fd_at + n, (size_t)(c->nfds - n) * sizeof *c->fd_at);
    c->nfds -= n;
    return n;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct client *c = arg;
    struct evbuffer *in = c->in;
    struct evbuffer *out = bufferevent_get_output(bev);
    while (!c->closing && !c->waiting && evbuffer_get_length(out) < CJ_STATUS_MAX_OUTPUT) {
        size_t n;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF);
        if (!line) break;
        if (n >= CJ_STATUS_MAX_LINE) {
            free(line);
            reply_err(out, 413, "line too long");
            cj_log(CJ_LOG_WARNING, "status: client pid %d uid %u sent a line of %zu bytes; closing", (int)c->pid,
                   (unsigned)c->uid, n);
            close_after_flush(c);
            return;
        }
        int fds[CJ_STATUS_MAX_FDS];
        struct cj_status_call call = {c, fds, take_line_fds(c, c->rx - evbuffer_get_length(in), fds)};
        size_t before = evbuffer_get_length(out);
        int cmd = command_of(line, n);   /* before dispatch cuts the line into words */
        cj_status_dispatch(&c->st->ops, c->admin, &call, line, n, out);
        close_fds(fds, call.nfds);   /* used or not, none outlives its command */
        log_command(c, cmd, out, before);
        free(line);
    }
    if (c->closing) return;
    if (!c->waiting && evbuffer_get_length(in) >= CJ_STATUS_MAX_LINE) {   /* no newline in sight */
        reply_err(out, 413, "line too long");
        cj_log(CJ_LOG_WARNING, "status: client pid %d uid %u sent over %d bytes without a newline; closing",
               (int)c->pid, (unsigned)c->uid, CJ_STATUS_MAX_LINE);
        close_after_flush(c);
        return;
    }
    /* A client that does not read its answers stops being read from. */
    update_reading(c);
}

/* Keeps the descriptors a read brought, for the line holding byte `at` (the
 * read's last); false when more came than one line may bring, or the
 * kernel had to cut them short: then they are all closed. */
static bool take_fds(struct client *c, struct msghdr *m, uint64_t at)
{
    bool ok = !(m->msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h; h = CMSG_NXTHDR(m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof fd, sizeof fd);
            if (!ok || c->nfds == CJ_STATUS_MAX_FDS) {
                close(fd);
                ok = false;
                continue;
            }
            c->fds[c->nfds] = fd;
            c->fd_at[c->nfds++] = at;
        }
    }
    return ok;
}

/* The socket has bytes (and maybe descriptors), or the client idled too long. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    if (what & EV_TIMEOUT) {
        cj_log(CJ_LOG_INFO, "status: client pid %d idle or not reading; closing", (int)c->pid);
        client_free(c);
        return;
    }
    struct evbuffer *in = c->in;
    size_t room = INPUT_MAX - evbuffer_get_length(in);
    char buf[READ_CHUNK];
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * CJ_STATUS_MAX_FDS)];
    } ctl;
    struct iovec iov = {buf, room < sizeof buf ? room : sizeof buf};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
    if (!iov.iov_len) { update_reading(c); return; }
    /* CLOEXEC: a worker launched meanwhile never inherits one */
    ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    bool fds_ok = n < 0 || take_fds(c, &m, c->rx + (uint64_t)(n > 0 ? n - 1 : 0));
    if (n <= 0) { client_free(c); return; }   /* the client closed (or the socket failed) */
    c->rx += (uint64_t)n;
    if (evbuffer_add(in, buf, (size_t)n) != 0) { client_free(c); return; }
    if (!fds_ok) {
        evbuffer_add_printf(bufferevent_get_output(c->bev), "ERR 400 more than %d open files with one command\n\n",
                            CJ_STATUS_MAX_FDS);
        cj_log(CJ_LOG_WARNING, "status: client pid %d uid %u passed more than %d open files with one command; closing",
               (int)c->pid, (unsigned)c->uid, CJ_STATUS_MAX_FDS);
        close_after_flush(c);
        return;
    }
    on_read(c->bev, c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct client *c = arg;
    if (c->closing) { client_free(c); return; }
    if (!c->reading) {
        update_reading(c);
        on_read(bev, c);   /* commands may be waiting in the input buffer */
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct client *c = arg;
    if (what & BEV_EVENT_TIMEOUT)
        cj_log(CJ_LOG_INFO, "status: client pid %d idle or not reading; closing", (int)c->pid);
    client_free(c);
}

/* Root, the daemon's own user, and the admin group's members. */
static bool is_admin(const struct cj_status *st, int fd, const struct ucred *cred)
{
    if (cred->uid == 0 || cred->uid == geteuid()) return true;
    if (!st->has_admin_gid) return false;
    if (cred->gid == st->admin_gid) return true;
    gid_t groups[256];
    socklen_t len = sizeof groups;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) return false;   /* more than 256: not admin */
    for (size_t i = 0; i < len / sizeof *groups; i++)
        if (groups[i] == st->admin_gid) return true;
    return false;
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    struct cj_status *st = arg;
    struct ucred cred = {0};
    socklen_t cl = sizeof cred;
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl);
    if (st->nclients >= CJ_STATUS_MAX_CLIENTS) {
        static const char busy[] = "ERR 503 too many clients\n\n";
        ssize_t w = write(fd, busy, sizeof busy - 1);
        (void)w;
        close(fd);
        cj_log(CJ_LOG_WARNING, "status: refused pid %d uid %u: %d clients connected", (int)cred.pid,
               (unsigned)cred.uid, st->nclients);
        return;
    }
    struct client *c = calloc(1, sizeof *c);
    struct bufferevent *bev = c ? bufferevent_socket_new(st->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    struct event *rd = bev ? event_new(st->base, fd, EV_READ | EV_PERSIST, on_readable, c) : NULL;
    struct evbuffer *in = rd ? evbuffer_new() : NULL;
    if (!in) {
        if (rd) event_free(rd);
        if (bev) bufferevent_free(bev);
        else close(fd);
        free(c);
        return;
    }
    c->in = in;
    c->st = st;
    c->bev = bev;
    c->rd = rd;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->admin = is_admin(st, fd, &cred);
    c->next = st->clients;
    st->clients = c;
    st->nclients++;
    /* debug: a monitoring poller connects every few seconds (what it changes or gets refused is logged) */
    cj_log(CJ_LOG_DEBUG, "status: client connected pid %d uid %u (%s)", (int)cred.pid, (unsigned)cred.uid,
           c->admin ? "admin" : "read-only");
    struct timeval idle = {CJ_STATUS_IDLE_SECS, 0};
    bufferevent_set_timeouts(bev, NULL, &idle);   /* reading's idle time is rd's */
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    bufferevent_enable(bev, EV_WRITE);
    update_reading(c);
}

struct cj_status *cj_status_new(struct event_base *base, const char *path, mode_t mode,
                                const struct cj_status_ops *ops, struct cj_err *err)
{
    int fd = cj_unix_listen(path, mode, err);
    if (fd < 0) return NULL;
    struct cj_status *st = calloc(1, sizeof *st);
    if (!st) { close(fd); unlink(path); cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    st->base = base;
    st->ops = *ops;
    snprintf(st->path, sizeof st->path, "%s", path);
    st->lis = evconnlistener_new(base, on_accept, st, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (!st->lis) { close(fd); unlink(path); free(st); cj_fail(err, CJ_E_NOMEM, 0, "evconnlistener_new failed"); return NULL; }
    return st;
}

void cj_status_free(struct cj_status *st)
{
    if (!st) return;
    /* Best effort: a client waiting for the answer to "shutdown" still gets it. */
    for (struct client *c = st->clients; c; c = c->next)
        evbuffer_write(bufferevent_get_output(c->bev), bufferevent_getfd(c->bev));
    while (st->clients) client_free(st->clients);
    evconnlistener_free(st->lis);
    unlink(st->path);
    free(st);
}

int cj_status_clients(const struct cj_status *st) { return st->nclients; }

int cj_status_call_fds(const struct cj_status_call *call, const int **fds)
{
    *fds = call ? call->fds : NULL;
    return call ? call->nfds : 0;
}

void cj_status_set_admin_group(struct cj_status *st, gid_t gid)
{
    st->admin_gid = gid;
    st->has_admin_gid = true;
}
