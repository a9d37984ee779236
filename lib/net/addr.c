/* SPDX-License-Identifier: Apache-2.0 */
/* addr.c — link addresses: parsing, resolution, connect and listen (see addr.h). */
#include "net/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/dns.h>
#include <event2/listener.h>

#include "util/log.h"

/* ---- parsing ---------------------------------------------------------------------- */

/* cj_parse_endpoint wants a port in 1..65535; a listen address may say :0
 * ("any free port"), so that one case is parsed as :1 and set back to 0. */
int cj_addr_parse(const char *url, unsigned kinds, unsigned flags, struct cj_addr *a,
                  struct cj_err *err)
{
    char tmp[CJ_ADDR_TEXT_MAX];
    const char *why = NULL;
    bool port0 = false;
    size_t n = url ? strlen(url) : 0;
    if (!url || n == 0) return cj_fail(err, CJ_E_INVALID, 0, "empty address");
    if (n >= sizeof tmp) return cj_fail(err, CJ_E_LIMIT, 0, "address longer than %zu bytes", sizeof tmp - 1);
    memcpy(tmp, url, n + 1);
    bool unix_path = !strncmp(tmp, "unix:", 5) || !strncmp(tmp, "uds://", 6);
    if ((flags & CJ_ADDR_LISTEN) && !unix_path && n >= 2 && !strcmp(tmp + n - 2, ":0")) {
        tmp[n - 1] = '1';
        port0 = true;
    }
    struct cj_addr out;
    memset(&out, 0, sizeof out);
    if (cj_parse_endpoint(tmp, kinds, &out.ep, &why) < 0)
        return cj_fail(err, CJ_E_INVALID, 0, "address '%s': %s", url, why);
    if (port0) out.ep.port = 0;
    if ((flags & CJ_ADDR_LISTEN) && !cj_endpoint_is_loopback(&out.ep))
        return cj_fail(err, CJ_E_INVALID, 0, "address '%s': a worker listener must be loopback "
                       "(127.0.0.0/8, [::1] or localhost)", url);
    cj_endpoint_format(&out.ep, out.text, sizeof out.text);
    *a = out;
    return 0;
}

bool cj_addr_is_loopback(const struct cj_addr *a) { return cj_endpoint_is_loopback(&a->ep); }

static bool is_ip_literal(const char *h)
{
    struct in_addr a4;
    struct in6_addr a6;
    return inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1;
}

bool cj_addr_is_numeric(const struct cj_addr *a)
{
    return a->ep.kind == CJ_EP_UNIX || !strcasecmp(a->ep.addr, "localhost") || is_ip_literal(a->ep.addr);
}

int cj_addr_sockaddr(const struct cj_addr *a, struct sockaddr_storage *ss, socklen_t *len,
                     struct cj_err *err)
{
    memset(ss, 0, sizeof *ss);
    if (a->ep.kind == CJ_EP_UNIX) {
        struct sockaddr_un *su = (struct sockaddr_un *)ss;
        size_t n = strlen(a->ep.addr);
        if (n >= sizeof su->sun_path) return cj_fail(err, CJ_E_LIMIT, 0, "socket path too long: %s", a->ep.addr);
        su->sun_family = AF_UNIX;
        memcpy(su->sun_path, a->ep.addr, n + 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
    }
    if (!cj_addr_is_numeric(a))
        return cj_fail(err, CJ_E_INVALID, 0, "host '%s' is a name (needs DNS)", a->ep.addr);
    const char *host = strcasecmp(a->ep.addr, "localhost") ? a->ep.addr : "127.0.0.1";
    char port[8];
    snprintf(port, sizeof port, "%u", a->ep.port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc || !res) return cj_fail(err, CJ_E_INVALID, 0, "cannot use address %s: %s", a->text, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* ---- asynchronous resolution ------------------------------------------------------- */

struct cj_resolve {
    struct evdns_getaddrinfo_request *req;
    cj_addr_resolved_fn fn;      /* NULL once cancelled */
    void *ctx;
    char host[CJ_EP_ADDR_MAX];
};

static void resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct cj_resolve *r = arg;
    if (r->fn) {
        if (result == 0 && res) {
            r->fn(0, res->ai_addr, (socklen_t)res->ai_addrlen, NULL, r->ctx);
        } else {
            char why[CJ_EP_ADDR_MAX + 96];
            snprintf(why, sizeof why, "cannot resolve '%s': %s", r->host,
                     result ? evutil_gai_strerror(result) : "no address");
            r->fn(-1, NULL, 0, why, r->ctx);
        }
    }
    if (res) evutil_freeaddrinfo(res);
    free(r);
}

struct cj_resolve *cj_addr_resolve(struct evdns_base *dns, const struct cj_addr *a, cj_addr_resolved_fn fn,
                                   void *ctx)
{
    struct cj_err err;
    if (cj_addr_is_numeric(a)) {
        struct sockaddr_storage ss;
        socklen_t len;
        if (cj_addr_sockaddr(a, &ss, &len, &err) < 0) fn(-1, NULL, 0, err.msg, ctx);
        else fn(0, (struct sockaddr *)&ss, len, NULL, ctx);
        return NULL;
    }
    if (!dns) {
        char why[CJ_EP_ADDR_MAX + 64];
        snprintf(why, sizeof why, "host name '%s' needs a DNS resolver", a->ep.addr);
        fn(-1, NULL, 0, why, ctx);
        return NULL;
    }
    struct cj_resolve *r = calloc(1, sizeof *r);
    if (!r) {
        fn(-1, NULL, 0, "out of memory", ctx);
        return NULL;
    }
    r->fn = fn;
    r->ctx = ctx;
    snprintf(r->host, sizeof r->host, "%s", a->ep.addr);
    char port[8];
    snprintf(port, sizeof port, "%u", a->ep.port);
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
    /* NULL: the callback already ran (and freed r). */
    struct evdns_getaddrinfo_request *req = evdns_getaddrinfo(dns, a->ep.addr, port, &hints, resolved, r);
    if (!req) return NULL;
    r->req = req;
    return r;
}

/* evdns calls `resolved` with EVUTIL_EAI_CANCEL (now or later); it frees r. */
void cj_addr_resolve_cancel(struct cj_resolve *r)
{
    if (!r) return;
    r->fn = NULL;
    evdns_getaddrinfo_cancel(r->req);
}

/* ---- sockets ------------------------------------------------------------------------ */

evutil_socket_t cj_sock_connect_start(const struct sockaddr *sa, socklen_t len, struct cj_err *err)
{
    evutil_socket_t fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS && errno != EINTR) {
        cj_fail(err, CJ_E_INVALID, 0, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int cj_sock_connect_result(evutil_socket_t fd)
{
    int e = 0;
    socklen_t n = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &n) < 0) return errno;
    return e;
}

static int sock_family(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t n = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &n) < 0) return -1;
    return ss.ss_family;
}

void cj_sock_tune(evutil_socket_t fd)
{
    int fam = sock_family(fd), one = 1, size = CJ_SOCK_BUFFER;
    if (fam == AF_INET || fam == AF_INET6) {
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
            cj_log_warning("cannot set TCP_NODELAY: %s", strerror(errno));
    } else if (fam == AF_UNIX) {
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size) < 0)
            cj_log_debug("cannot set SO_SNDBUF: %s", strerror(errno));
    }
}

static void inet_text(const struct sockaddr *sa, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        snprintf(buf, n, "%s:%u", host, ntohs(s4->sin_port));
    } else {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        snprintf(buf, n, "[%s]:%u", host, ntohs(s6->sin6_port));
    }
}

void cj_sock_peer_text(evutil_socket_t fd, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0) {
        snprintf(buf, n, "fd %d", (int)fd);
        return;
    }
    if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
        inet_text((struct sockaddr *)&ss, buf, n);
        return;
    }
    /* AF_UNIX: the peer usually has no name; its pid says more. */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid > 0)
        snprintf(buf, n, "unix peer pid %ld uid %ld", (long)cr.pid, (long)cr.uid);
    else
        snprintf(buf, n, "unix peer fd %d", (int)fd);
}

/* ---- listeners ---------------------------------------------------------------------- */

struct cj_listener {
    struct evconnlistener *lev;
    cj_accept_fn fn;
    void *ctx;
    struct cj_addr addr;
    unsigned port;
    bool unlink_on_free;
    int n_uids;
    uid_t uids[CJ_LISTENER_UIDS_MAX];   /* unix: the peers' uids accepted; none: any */
    dev_t dev;
    ino_t ino;
    struct event *resume;               /* ends an accept pause (made on the first failed accept) */
    char text[CJ_ADDR_TEXT_MAX];
};

/* A unix peer's uid is one the listener was told to accept (or no list). */
static bool peer_uid_allowed(const struct cj_listener *l, evutil_socket_t fd)
{
    if (l->n_uids == 0 || l->addr.ep.kind != CJ_EP_UNIX) return true;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) return false;
    for (int i = 0; i < l->n_uids; i++)
        if (cr.uid == l->uids[i]) return true;
    return false;
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)lev; (void)sa; (void)salen;
    struct cj_listener *l = arg;
    char peer[CJ_ADDR_TEXT_MAX];
    cj_sock_peer_text(fd, peer, sizeof peer);
    if (!peer_uid_allowed(l, fd)) {
        cj_log_warning("listener %s: refused %s: not the daemon's, root's or the workers' account", l->text, peer);
        evutil_closesocket(fd);
        return;
    }
    l->fn(fd, peer, l->ctx);
}

#define ACCEPT_PAUSE_SECS 1

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct cj_listener *l = arg;
    evconnlistener_enable(l->lev);
}

/* A failed accept (out of descriptors, most likely) would fail again at once
 * on the still readable socket, turning the loop into a spin that logs a line
 * each turn: stop accepting for a second instead. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct cj_listener *l = arg;
    int err = errno;
    if (!l->resume) l->resume = evtimer_new(evconnlistener_get_base(lev), on_accept_resume, l);
    struct timeval pause = {ACCEPT_PAUSE_SECS, 0};
    if (!l->resume || evtimer_add(l->resume, &pause) != 0) {
        cj_log_warning("listener %s: accept failed: %s", l->text, strerror(err));
        return;
    }
    cj_log_warning("listener %s: accept failed: %s; not accepting for %d s", l->text, strerror(err), ACCEPT_PAUSE_SECS);
    evconnlistener_disable(lev);
}

/* An existing socket file: replace it only when nobody accepts on it. */
static int clear_stale_socket(const char *path, const struct sockaddr_storage *ss, socklen_t len,
                              struct cj_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) return 0;
        return cj_fail(err, CJ_E_INVALID, 0, "cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return cj_fail(err, CJ_E_INVALID, 0, "%s exists and is not a socket; not replacing it", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)ss, len);
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN)
        return cj_fail(err, CJ_E_INVALID, 0, "%s is in use by a running process; not replacing it", path);
    if (e != ECONNREFUSED)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot probe %s: %s", path, strerror(e));
    if (unlink(path) < 0 && errno != ENOENT)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot remove stale socket %s: %s", path, strerror(errno));
    cj_log_info("removed stale socket %s", path);
    return 0;
}

static evutil_socket_t bind_unix(struct cj_listener *l, unsigned mode, struct cj_err *err)
{
    const char *path = l->addr.ep.addr;
    struct sockaddr_storage ss;
    socklen_t len;
    if (cj_addr_sockaddr(&l->addr, &ss, &len, err) < 0) return -1;
    if (clear_stale_socket(path, &ss, len, err) < 0) return -1;
    evutil_socket_t fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno));
        return -1;
    }
    /* Create the file owner-only, then open it up to `mode`: no window in
     * which the socket is more accessible than configured. */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&ss, len);
    int e = errno;
    umask(old);
    if (rc < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "bind %s: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    struct stat st;
    if ((mode && chmod(path, mode) < 0) || stat(path, &st) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "chmod %s: %s", path, strerror(errno));
        unlink(path);
        close(fd);
        return -1;
    }
    l->unlink_on_free = true;
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    return fd;
}

static evutil_socket_t bind_tcp(struct cj_listener *l, struct cj_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (cj_addr_sockaddr(&l->addr, &ss, &len, err) < 0) return -1;
    evutil_socket_t fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "bind %s: %s", l->addr.text, strerror(errno));
        close(fd);
        return -1;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
        l->port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                                 : ((struct sockaddr_in6 *)&got)->sin6_port);
    return fd;
}

struct cj_listener *cj_listener_open(struct event_base *base, const struct cj_addr *a, unsigned mode,
                                     cj_accept_fn fn, void *ctx, struct cj_err *err)
{
    if (a->ep.kind != CJ_EP_UNIX && !cj_addr_is_loopback(a)) {
        cj_fail(err, CJ_E_INVALID, 0, "refusing to listen on %s: not a loopback address", a->text);
        return NULL;
    }
    if (a->ep.kind == CJ_EP_STCP) {
        cj_fail(err, CJ_E_INVALID, 0, "refusing to listen on %s: worker links are clear text", a->text);
        return NULL;
    }
    struct cj_listener *l = calloc(1, sizeof *l);
    if (!l) {
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
        return NULL;
    }
    l->fn = fn;
    l->ctx = ctx;
    l->addr = *a;
    evutil_socket_t fd = a->ep.kind == CJ_EP_UNIX ? bind_unix(l, mode, err) : bind_tcp(l, err);
    if (fd < 0) {
        free(l);
        return NULL;
    }
    if (a->ep.kind == CJ_EP_UNIX) {
        snprintf(l->text, sizeof l->text, "%s", a->text);
    } else {
        struct cj_endpoint ep = a->ep;
        ep.port = l->port;
        cj_endpoint_format(&ep, l->text, sizeof l->text);
    }
    l->lev = evconnlistener_new(base, on_accept, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 64, fd);
    if (!l->lev) {
        cj_fail(err, CJ_E_INVALID, 0, "listen %s: %s", l->text, strerror(errno));
        if (l->unlink_on_free) unlink(a->ep.addr);
        close(fd);
        free(l);
        return NULL;
    }
    evconnlistener_set_error_cb(l->lev, on_accept_error);
    cj_log_info("listening on %s", l->text);
    return l;
}

void cj_listener_set_peer_uids(struct cj_listener *l, const uid_t *uids, int n)
{
    if (n < 0) n = 0;
    if (n > CJ_LISTENER_UIDS_MAX) n = CJ_LISTENER_UIDS_MAX;
    memcpy(l->uids, uids, (size_t)n * sizeof *uids);
    l->n_uids = n;
}

void cj_listener_free(struct cj_listener *l)
{
    if (!l) return;
    if (l->resume) event_free(l->resume);
    evconnlistener_free(l->lev);
    struct stat st;
    /* Remove the file only if it is still ours (not replaced by someone else). */
    if (l->unlink_on_free && lstat(l->addr.ep.addr, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->addr.ep.addr);
    free(l);
}

unsigned cj_listener_port(const struct cj_listener *l) { return l->port; }
const char *cj_listener_text(const struct cj_listener *l) { return l->text; }
