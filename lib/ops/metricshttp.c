/* SPDX-License-Identifier: Apache-2.0 */
/* metricshttp.c — GET /metrics over libevent's HTTP server (see metricshttp.h). */
#include "ops/metricshttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "net/addr.h"
#include "util/log.h"

#define MAX_HEADERS (8 * 1024)
#define MAX_BODY (4 * 1024)
#define IDLE_SECS 10
#define BACKLOG 16
#define ACCEPT_PAUSE_SECS 1
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* every method libevent parses: the ones not served are answered 405, not 501 */
#define ALL_METHODS                                                                                         \
    (EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |              \
     EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH)

struct cj_metrics_http {
    struct evhttp *http;
    struct evconnlistener *lev;   /* owned by http */
    cj_metrics_render_fn render;
    void *ctx;
    char url[CJ_ADDR_TEXT_MAX + 16];
};

/* A short plain-text answer for an error status. */
static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
    if (code == HTTP_BADMETHOD) evhttp_add_header(h, "Allow", "GET, HEAD");
    struct evbuffer *body = evbuffer_new();
    if (body) evbuffer_add_printf(body, "%s\n", text);
    evhttp_send_reply(req, code, reason, body);
    if (body) evbuffer_free(body);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct cj_metrics_http *m = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    cj_log_debug("metrics: %s %s", cmd == EVHTTP_REQ_GET ? "GET" : cmd == EVHTTP_REQ_HEAD ? "HEAD" : "request for",
                 path ? path : "(no path)");
    if (!path || strcmp(path, "/metrics") != 0) {
        reply_text(req, HTTP_NOTFOUND, "Not Found", "not found: only /metrics is served here");
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        reply_text(req, HTTP_BADMETHOD, "Method Not Allowed", "method not allowed: GET /metrics");
        return;
    }
    struct evbuffer *body = evbuffer_new();
    if (!body || m->render(m->ctx, body) != 0) {
        if (body) evbuffer_free(body);
        reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", CONTENT_TYPE);
    evhttp_send_reply(req, HTTP_OK, "OK", body);   /* libevent leaves a HEAD's body out */
    evbuffer_free(body);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    evconnlistener_enable(arg);
}

/* A failed accept (out of descriptors, most likely) would fail again at once
 * on the still readable socket, turning the loop into a spin: stop accepting
 * for a second.  (arg is evhttp's; the pause is a one-shot event of the base,
 * which is why the endpoint is freed only once the loop has stopped.) */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct timeval pause = {ACCEPT_PAUSE_SECS, 0};
    cj_log_warning("metrics: accept failed: %s; not accepting for %d s", strerror(errno), ACCEPT_PAUSE_SECS);
    evconnlistener_disable(lev);
    if (event_base_once(evconnlistener_get_base(lev), -1, EV_TIMEOUT, on_resume, lev, &pause) != 0)
        evconnlistener_enable(lev);
}

/* HOST:PORT as the key is written ([IPv6]:PORT). */
static void host_port(const char *host, unsigned port, char *buf, size_t len)
{
    snprintf(buf, len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

/* A bound, non-blocking socket for ep; *port is the port it got. */
static evutil_socket_t bind_socket(const struct cj_endpoint *ep, unsigned *port, struct cj_err *err)
{
    struct cj_addr a = {.ep = *ep};
    struct sockaddr_storage ss;
    socklen_t len;
    struct cj_err why = {0};
    char where[CJ_ADDR_TEXT_MAX];
    host_port(ep->addr, ep->port, where, sizeof where);
    if (cj_addr_sockaddr(&a, &ss, &len, &why) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "[metrics] listen = %s: %s", where, why.msg);
        return -1;
    }
    evutil_socket_t fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "[metrics] listen = %s: socket: %s", where, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, BACKLOG) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "[metrics] listen = %s: cannot listen on it: %s", where, strerror(errno));
        close(fd);
        return -1;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    *port = ep->port;
    if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
        *port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                               : ((struct sockaddr_in6 *)&got)->sin6_port);
    return fd;
}

/* The server's bounds: headers, body, idle connections, the methods it answers. */
static void set_bounds(struct evhttp *http)
{
    evhttp_set_max_headers_size(http, MAX_HEADERS);
    evhttp_set_max_body_size(http, MAX_BODY);
    evhttp_set_timeout(http, IDLE_SECS);
    evhttp_set_allowed_methods(http, ALL_METHODS);
}

/* The socket for ep as a libevent listener; *port is the port it got. */
static struct evconnlistener *open_listener(struct event_base *base, const struct cj_endpoint *ep, unsigned *port,
                                            struct cj_err *err)
{
    evutil_socket_t fd = bind_socket(ep, port, err);
    if (fd < 0) return NULL;
    /* listen() has been called: a backlog of 0 keeps evconnlistener from calling it again */
    struct evconnlistener *lev =
        evconnlistener_new(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (!lev) {
        close(fd);
        cj_fail(err, CJ_E_NOMEM, 0, "[metrics] listen: out of memory");
    }
    return lev;
}

struct cj_metrics_http *cj_metrics_http_new(struct event_base *base, const struct cj_endpoint *ep,
                                            cj_metrics_render_fn render, void *ctx, struct cj_err *err)
{
    struct cj_metrics_http *m = calloc(1, sizeof *m);
    unsigned port = 0;
    if (!m || !(m->http = evhttp_new(base))) {
        cj_metrics_http_free(m);
        cj_fail(err, CJ_E_NOMEM, 0, "[metrics] listen: out of memory");
        return NULL;
    }
    m->render = render;
    m->ctx = ctx;
    set_bounds(m->http);
    evhttp_set_gencb(m->http, on_request, m);
    if (!(m->lev = open_listener(base, ep, &port, err))) {
        cj_metrics_http_free(m);
        return NULL;
    }
    if (!evhttp_bind_listener(m->http, m->lev)) {
        evconnlistener_free(m->lev);
        cj_metrics_http_free(m);
        cj_fail(err, CJ_E_NOMEM, 0, "[metrics] listen: out of memory");
        return NULL;
    }
    evconnlistener_set_error_cb(m->lev, on_accept_error);
    char where[CJ_ADDR_TEXT_MAX];
    host_port(ep->addr, port, where, sizeof where);
    snprintf(m->url, sizeof m->url, "http://%s/metrics", where);
    cj_log_info("metrics: listening on %s", m->url);
    return m;
}

const char *cj_metrics_http_url(const struct cj_metrics_http *m) { return m->url; }

void cj_metrics_http_free(struct cj_metrics_http *m)
{
    if (!m) return;
    if (m->http) evhttp_free(m->http);   /* its bound listener and every connection too */
    free(m);
}
