/* status.c — status socket server (see status.h). */
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

#include "util/log.h"

struct client {
    struct cj_status *st;
    struct bufferevent *bev;
    struct client *next;
    pid_t pid;
    uid_t uid;
    bool admin;
    bool closing;    /* answer queued, close once flushed */
};

struct cj_status {
    struct event_base *base;
    struct evconnlistener *lis;
    struct cj_status_ops ops;
    char path[108];
    struct client *clients;
    int nclients;
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

static void client_free(struct client *c)
{
    struct cj_status *st = c->st;
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

static void close_after_flush(struct client *c)
{
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
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
    if (c < 0) { evbuffer_add_printf(out, "ERR 400 unknown command '%.*s'; try: help\n\n", QUOTE_MAX, name); return; }
    char usage[256];
    const struct cj_cmd_def *d = &cj_cmds[c];
    evbuffer_add_printf(out, "usage: %s\naccess: %s\nwhat: %s\n", cj_cmd_usage((enum cj_cmd)c, false, usage, sizeof usage),
                        d->access == CJ_ACCESS_ADMIN ? "admin" : "read", d->help);
    for (int i = 0; c == CJ_CMD_SHOW && i < CJ_SHOW_COUNT; i++)
        evbuffer_add_printf(out, "%s: %s\n", cj_shows[i].name, cj_shows[i].help);
    evbuffer_add(out, "\n", 1);
}

static void cmd_show(const struct cj_status_ops *ops, struct evbuffer *out, char **args, int nargs)
{
    int what = cj_show_find(args[0]);
    if (what < 0) {
        evbuffer_add_printf(out, "ERR 400 unknown show target '%.*s'; try: help show\n\n", QUOTE_MAX, args[0]);
        return;
    }
    if (nargs == 2 && strcmp(args[1], "json") != 0) { reply_usage(out, "unknown option", CJ_CMD_SHOW); return; }
    if (!ops->show) { reply_err(out, 500, "no show handler"); return; }
    struct evbuffer *tmp = evbuffer_new();
    if (!tmp) { reply_err(out, 500, "out of memory"); return; }
    struct cj_out o;
    cj_out_begin(&o, tmp, nargs == 2);
    ops->show(ops->ctx, (enum cj_show)what, &o);
    cj_out_end(&o);
    evbuffer_add_buffer(out, tmp);
    evbuffer_free(tmp);
}

static void cmd_other(const struct cj_status_ops *ops, enum cj_cmd c, struct evbuffer *out, const char *arg)
{
    char msg[256] = "";
    int rc = ops->command ? ops->command(ops->ctx, c, arg, msg, sizeof msg) : 500;
    msg[sizeof msg - 1] = '\0';
    /* The answer is one line: a message with a newline would break the protocol. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    if (rc) reply_err(out, rc, msg[0] ? msg : "failed");
    else evbuffer_add_printf(out, "OK%s%s\n\n", msg[0] ? " " : "", msg);
}

/* The table decides: the name, then who may run it, then how many arguments. */
static void run_command(const struct cj_status_ops *ops, bool admin, char **argv, int argc, struct evbuffer *out)
{
    int c = cj_cmd_find(argv[0]);
    if (c < 0) { evbuffer_add_printf(out, "ERR 400 unknown command '%.*s'; try: help\n\n", QUOTE_MAX, argv[0]); return; }
    const struct cj_cmd_def *d = &cj_cmds[c];
    if (d->access == CJ_ACCESS_ADMIN && !admin) { reply_err(out, 403, "permission denied: read-only client"); return; }
    int nargs = argc - 1;
    if (nargs > d->max_args) { reply_usage(out, "too many arguments", (enum cj_cmd)c); return; }
    if (nargs < d->min_args) { reply_usage(out, "missing argument", (enum cj_cmd)c); return; }
    if (c == CJ_CMD_HELP) {
        if (nargs) help_one(out, argv[1]);
        else help_list(out);
    } else if (c == CJ_CMD_SHOW) {
        cmd_show(ops, out, argv + 1, nargs);
    } else {
        cmd_other(ops, (enum cj_cmd)c, out, nargs ? argv[1] : NULL);
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

void cj_status_dispatch(const struct cj_status_ops *ops, bool admin, char *line, size_t len, struct evbuffer *out)
{
    char *argv[CJ_STATUS_MAX_WORDS];
    if (has_control(line, len)) { reply_err(out, 400, "control character in command; try: help"); return; }
    int argc = cj_status_parse(line, argv, CJ_STATUS_MAX_WORDS);
    if (argc < 0) { reply_err(out, 400, "too many words; try: help"); return; }
    if (argc == 0) { reply_err(out, 400, "empty command; try: help"); return; }
    run_command(ops, admin, argv, argc, out);
}

/* ---- socket callbacks --------------------------------------------------------- */

static void on_read(struct bufferevent *bev, void *arg)
{
    struct client *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer *out = bufferevent_get_output(bev);
    while (!c->closing && evbuffer_get_length(out) < CJ_STATUS_MAX_OUTPUT) {
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
        cj_status_dispatch(&c->st->ops, c->admin, line, n, out);
        free(line);
    }
    if (c->closing) return;
    if (evbuffer_get_length(in) >= CJ_STATUS_MAX_LINE) {   /* no newline in sight */
        reply_err(out, 413, "line too long");
        cj_log(CJ_LOG_WARNING, "status: client pid %d uid %u sent over %d bytes without a newline; closing",
               (int)c->pid, (unsigned)c->uid, CJ_STATUS_MAX_LINE);
        close_after_flush(c);
        return;
    }
    /* A client that does not read its answers stops being read from. */
    if (evbuffer_get_length(out) >= CJ_STATUS_MAX_OUTPUT) bufferevent_disable(bev, EV_READ);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct client *c = arg;
    if (c->closing) { client_free(c); return; }
    if (!(bufferevent_get_enabled(bev) & EV_READ)) {
        bufferevent_enable(bev, EV_READ);
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
    if (!bev) { free(c); close(fd); return; }
    c->st = st;
    c->bev = bev;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->admin = cred.uid == 0 || cred.uid == geteuid();
    c->next = st->clients;
    st->clients = c;
    st->nclients++;
    cj_log(CJ_LOG_INFO, "status: client connected pid %d uid %u (%s)", (int)cred.pid, (unsigned)cred.uid,
           c->admin ? "admin" : "read-only");
    struct timeval idle = {CJ_STATUS_IDLE_SECS, 0};
    bufferevent_set_timeouts(bev, &idle, &idle);
    bufferevent_setwatermark(bev, EV_READ, 0, CJ_STATUS_MAX_LINE * 2);
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
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
