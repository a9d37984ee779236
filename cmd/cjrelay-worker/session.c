/* SPDX-License-Identifier: Apache-2.0 */
/* session.c — the worker's Client API session (doc/protocol/fl-protocols.md §7-§8), which
 * makes the launched mode (wk_launched_mode): the link to the relay coming and
 * going, HELLO and SESSION_READY with the stock trainer's retries, heartbeats,
 * the relay-silence and relay-pid watchdogs, abort, shutdown, log. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fl/capi.h"
#include "net/link.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "worker.h"
#include "util/mp.h"

static const uint8_t MP_TRUE[] = {0xc3};
static const struct cj_stream_msg FOBS_MSG = {.encoding = "fobs"};

void wk_touch(struct wk *w)
{
    w->last_activity = cj_now();
}

/* ---- sending ------------------------------------------------------------------------------ */

/* In secure mode the worker stamps the delegated credentials on its own
 * requests (doc/protocol/cellnet.md §8; the relay checks them on SESSION_READY). */
struct auth_hdrs {
    msgpack_sbuffer sb;
    struct cj_stream_hv hv[4];
    size_t n;
};

static void pack_hv(struct auth_hdrs *a, const char *key, const char *val)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, &a->sb, msgpack_sbuffer_write);
    size_t at = a->sb.size;
    msgpack_pack_str(&pk, strlen(val));
    msgpack_pack_str_body(&pk, val, strlen(val));
    a->hv[a->n++] = (struct cj_stream_hv){key, (const void *)(uintptr_t)at, a->sb.size - at};
}

static void auth_build(struct auth_hdrs *a, const struct wk *w, bool pass_through)
{
    msgpack_sbuffer_init(&a->sb);
    a->n = 0;
    if (w->bs.secure_mode && w->auth_token[0]) {
        pack_hv(a, "client_name", w->bs.site_name);
        pack_hv(a, "__token__", w->auth_token);
        pack_hv(a, "__token_signature__", w->auth_sig);
        for (size_t i = 0; i < a->n; i++) a->hv[i].val = a->sb.data + (uintptr_t)a->hv[i].val;
    }
    if (pass_through) a->hv[a->n++] = (struct cj_stream_hv){"cn__pass_through", MP_TRUE, sizeof MP_TRUE};
}

int wk_request(struct wk *w, const char *topic, msgpack_sbuffer *sb, double timeout,
               void (*fn)(void *arg, struct cj_stream_reply *r), void *arg, uint64_t *handle, bool pass_through)
{
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(sb);
    if (!eb) return -1;
    struct auth_hdrs a;
    auth_build(&a, w, pass_through);
    struct cj_stream_msg m = {.hdrs = a.hv, .n_hdrs = a.n, .encoding = "fobs"};
    int rc = cj_stream_request(w->ep, w->bs.cj_fqcn, CJ_CAPI_CHANNEL, topic, &m, eb, timeout, fn, arg, handle, NULL);
    msgpack_sbuffer_destroy(&a.sb);
    return rc;
}

static int send_oneway(struct wk *w, const char *topic, msgpack_sbuffer *sb)
{
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(sb);
    if (!eb) return -1;
    struct auth_hdrs a;
    auth_build(&a, w, false);
    struct cj_stream_msg m = {.hdrs = a.hv, .n_hdrs = a.n, .encoding = "fobs", .optional = true};
    int rc = cj_stream_send(w->ep, w->bs.cj_fqcn, CJ_CAPI_CHANNEL, topic, &m, NULL, eb, NULL, NULL, NULL);
    msgpack_sbuffer_destroy(&a.sb);
    return rc;
}

/* Cell rc invalid_request, no body (what the stock trainer answers to a
 * request from the wrong origin or session). */
static void reply_invalid(struct wk *w, struct cj_stream_blob *b)
{
    if (!b->req.has_ri) return;
    struct evbuffer *eb = evbuffer_new();
    if (!eb || cj_stream_reply(w->ep, &b->req, "invalid_request", &FOBS_MSG, eb, NULL, NULL))
        cj_log_warning("cannot answer %s from %s", b->req.topic, b->origin);
}

bool wk_from_relay(struct wk *w, struct cj_stream_blob *b, const char *what)
{
    if (!strcmp(b->origin, w->bs.cj_fqcn)) return true;
    cj_log_warning("refusing %s from %s: only the relay %s may send it", what, b->origin, w->bs.cj_fqcn);
    reply_invalid(w, b);
    return false;
}

/* ---- handshake: HELLO, then SESSION_READY, each retried every second ------------------------- */

static void on_hs_reply(void *arg, struct cj_stream_reply *r);

static void hs_failed(struct wk *w, const char *what, const char *fmt, const char *detail)
{
    char why[400];
    snprintf(why, sizeof why, fmt, detail);
    snprintf(w->last_error, sizeof w->last_error, "%s: %s", what, why);
    cj_log_debug("%s; retrying", w->last_error);
    double wait = w->hs_sent + WK_RETRY_EVERY - cj_now();
    wk_retry_in(w, wait > 0 ? wait : 0);
}

static void send_hs(struct wk *w)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    bool hello = w->phase == WK_HELLO;
    const char *topic = hello ? CJ_CAPI_T_HELLO : CJ_CAPI_T_SESSION_READY;
    msgpack_sbuffer_init(&sb);
    int rc = hello ? cj_capi_encode_hello(&sb, w->bs.trainer_fqcn, w->bs.launch_token, w->bs.job_id,
                                          w->bs.site_name, &e)
                   : cj_capi_encode_session_ready(&sb, w->session_id, &e);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        wk_exit(w, WK_EXIT_NO_SESSION, "cannot encode %s: %s", topic, e.msg);
        return;
    }
    w->hs_sent = cj_now();
    if (wk_request(w, topic, &sb, WK_RETRY_EVERY, on_hs_reply, w, &w->hs_req, false)) {
        hs_failed(w, topic, "%s", "cannot send");
        return;
    }
    w->hs_pending = true;
}

/* The link to the relay came up (or back): start or continue the handshake. */
static void link_up(struct wk *w, struct cj_link *l)
{
    if (strcmp(cj_link_peer(l), w->bs.cj_fqcn))
        cj_log_warning("the relay at %s calls itself %s, not %s (bootstrap cj_fqcn)", w->bs.connect_url,
                       cj_link_peer(l), w->bs.cj_fqcn);
    if (w->phase == WK_READY) {
        cj_log_info("link to the relay %s re-established after %.1f s", w->bs.cj_fqcn, cj_now() - w->link_lost_at);
        w->link_lost_at = 0;
        return;
    }
    cj_log_info("connected to the relay %s at %s as %s", cj_link_peer(l), w->bs.connect_url, w->bs.trainer_fqcn);
    if (w->phase == WK_CONNECTING) w->phase = WK_HELLO;
    if (!w->hs_pending) send_hs(w);
}

/* The link to the relay is gone: reconnect; a handshake under way starts over. */
static void link_down(struct wk *w)
{
    if (w->phase == WK_READY) {
        if (!w->link_lost_at) w->link_lost_at = cj_now();
        cj_log_warning("link to the relay lost: %s; reconnecting every %.0f s", w->last_error, WK_RETRY_EVERY);
    } else {
        cj_log_debug("relay not reachable yet: %s", w->last_error);
        w->phase = WK_CONNECTING;
        if (w->hs_pending) cj_stream_request_cancel(w->ep, w->hs_req);   /* a new link starts over */
        w->hs_pending = false;
    }
    wk_retry_in(w, WK_RETRY_EVERY);
}

void wk_session_retry(struct wk *w)
{
    if ((w->phase == WK_HELLO || w->phase == WK_SESSION_READY) && !w->hs_pending) send_hs(w);
}

static void session_up(struct wk *w)
{
    w->phase = WK_READY;
    wk_touch(w);
    cj_log_info("session %s ready with the relay %s (heartbeat every %g s, timeout %g s)", w->session_id,
                w->bs.cj_fqcn, w->hb_interval, w->hb_timeout);
    if (w->hb_timeout > 0) {   /* with heartbeat_timeout 0 the stock trainer sends none */
        double iv = w->hb_interval;
        struct timeval tv = cj_tv(iv);
        evtimer_add(w->hb_timer, &tv);
    }
}

static void hello_answered(struct wk *w, const struct cj_capi_msg *m)
{
    char why[256];
    if (m->kind == CJ_CAPI_HELLO_REJECTED) {
        wk_exit(w, WK_EXIT_NO_SESSION, "the relay rejected our hello: %s", m->reason);
        return;
    }
    if (cj_capi_check_hello_accepted(m, w->bs.secure_mode, why, sizeof why)) {
        wk_exit(w, WK_EXIT_NO_SESSION, "hello_accepted refused: %s", why);
        return;
    }
    snprintf(w->session_id, sizeof w->session_id, "%s", m->session_id);
    w->hb_interval = m->heartbeat_interval;
    w->hb_timeout = m->heartbeat_timeout;
    if (w->bs.secure_mode) {
        snprintf(w->auth_token, sizeof w->auth_token, "%s", m->auth_token);
        snprintf(w->auth_sig, sizeof w->auth_sig, "%s", m->auth_token_signature);
        /* Download traffic to server.* carries them too (doc/protocol/cellnet.md §8). */
        struct cj_stream_kv kv[] = {
            {"client_name", w->bs.site_name}, {"__token__", w->auth_token}, {"__token_signature__", w->auth_sig}};
        if (cj_stream_set_auth(w->ep, kv, 3)) cj_log_warning("cannot install the delegated credentials");
    }
    cj_log_info("hello accepted: session %s", w->session_id);
    w->phase = WK_SESSION_READY;
    send_hs(w);
}

static void on_hs_reply(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    if (w->exiting || !w->hs_pending) return;
    w->hs_pending = false;
    bool hello = w->phase == WK_HELLO;
    const char *what = hello ? "hello" : "session_ready";
    if (strcmp(r->return_code, "ok")) {
        char d[300];
        snprintf(d, sizeof d, "%s%s%s", r->return_code, r->error[0] ? " " : "", r->error);
        hs_failed(w, what, "no answer (%s)", d);
        return;
    }
    size_t n;
    const uint8_t *p = wk_bytes(r->data, &n);
    struct cj_err e = {0};
    struct cj_capi_msg *m = w->m;
    if (cj_capi_decode_reply(hello ? CJ_CAPI_HELLO : CJ_CAPI_SESSION_READY, p, n, m, &e)) {
        hs_failed(w, what, "invalid reply: %s", e.msg);
        return;
    }
    if (hello) {
        hello_answered(w, m);
    } else if (m->kind == CJ_CAPI_ERROR) {
        wk_exit(w, WK_EXIT_NO_SESSION, "the relay refused session_ready: %s", m->reason);
    } else if (strcmp(m->session_id, w->session_id)) {
        hs_failed(w, what, "reply names session '%s'", m->session_id);
    } else {
        session_up(w);
    }
}

/* ---- heartbeats and watchdogs --------------------------------------------------------------- */

static void on_hb_reply(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    if (w->exiting) return;
    w->hb_pending = false;
    if (strcmp(r->return_code, "ok")) {
        cj_log_debug("heartbeat not answered: %s %s", r->return_code, r->error);
        return;
    }
    size_t n;
    const uint8_t *p = wk_bytes(r->data, &n);
    struct cj_err e = {0};
    if (cj_capi_decode_reply(CJ_CAPI_HEARTBEAT, p, n, w->m, &e)) {
        cj_log_warning("invalid heartbeat reply: %s", e.msg);
    } else if (w->m->kind == CJ_CAPI_ERROR) {
        cj_log_warning("the relay refused our heartbeat: %s", w->m->reason);
    } else if (strcmp(w->m->session_id, w->session_id)) {
        cj_log_warning("heartbeat reply names session '%s', not ours", w->m->session_id);
    } else {
        wk_touch(w);
    }
}

void wk_session_hb_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    if (w->exiting || w->phase != WK_READY) return;
    if (w->hb_pending) cj_stream_request_cancel(w->ep, w->hb_req);
    w->hb_pending = false;
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_heartbeat(&sb, w->session_id, wk_task_live(w), &e)) {
        msgpack_sbuffer_destroy(&sb);
        cj_log_warning("cannot encode a heartbeat: %s", e.msg);
        return;
    }
    double timeout = fmin(w->hb_interval, w->hb_timeout);
    if (wk_request(w, CJ_CAPI_T_HEARTBEAT, &sb, timeout, on_hb_reply, w, &w->hb_req, false) == 0)
        w->hb_pending = true;
    else
        cj_log_debug("heartbeat not sent (link down?)");
}

void wk_session_tick(struct wk *w)
{
    double now = cj_now();
    if (w->pid_watch && kill((pid_t)w->bs.cj_pid, 0) < 0 && errno == ESRCH) {
        wk_exit(w, WK_EXIT_RELAY_LOST, "the relay process %lld is gone", (long long)w->bs.cj_pid);
        return;
    }
    if (w->phase != WK_READY) {
        if (now - w->started > w->opts.connect_window)
            wk_exit(w, WK_EXIT_NO_SESSION, "no session with the relay %s at %s within %g s: %s", w->bs.cj_fqcn,
                    w->bs.connect_url, w->opts.connect_window, w->last_error[0] ? w->last_error : "no answer");
        return;
    }
    if (w->link_lost_at && now - w->link_lost_at > w->opts.connect_window) {
        wk_exit(w, WK_EXIT_RELAY_LOST, "the link to the relay has been down for %.0f s: %s", now - w->link_lost_at,
                w->last_error);
        return;
    }
    if (w->hb_timeout > 0 && now - w->last_activity > w->hb_timeout && !wk_task_live(w))
        wk_exit(w, WK_EXIT_RELAY_LOST, "the relay has been silent for %.1f s (heartbeat_timeout %g s)",
                now - w->last_activity, w->hb_timeout);
}

/* ---- relay -> worker: abort, shutdown ----------------------------------------------------------- */

/* Decodes a request from the relay and checks its session.  0 to go on. */
static int relay_request(struct wk *w, struct cj_stream_blob *b, enum cj_capi_kind kind)
{
    const char *what = cj_capi_kind_name(kind);
    if (!wk_from_relay(w, b, what)) return -1;
    size_t n;
    const uint8_t *p = wk_bytes(b->data, &n);
    struct cj_err e = {0};
    if (cj_capi_decode_request(kind, p, n, w->m, &e)) {
        cj_log_warning("invalid %s from the relay: %s", what, e.msg);
        reply_invalid(w, b);
        return -1;
    }
    if (w->phase != WK_READY || strcmp(w->m->session_id, w->session_id)) {
        cj_log_warning("refusing %s for session '%s': ours is '%s'", what, w->m->session_id, w->session_id);
        reply_invalid(w, b);
        return -1;
    }
    wk_touch(w);
    return 0;
}

static int on_abort(void *arg, struct cj_stream_blob *b)
{
    struct wk *w = arg;
    if (w->exiting || relay_request(w, b, CJ_CAPI_ABORT)) return 0;
    wk_exit(w, WK_EXIT_FAIL, "aborted by the relay: %s", (w->m->has & CJ_CAPI_F_REASON) ? w->m->reason : "no reason");
    return 0;
}

static void shutdown_replied(void *arg, int status, const char *why)
{
    struct wk *w = arg;
    if (status) cj_log_warning("the shutdown reply could not be sent: %s", why ? why : "");
    wk_exit(w, WK_EXIT_OK, "shutdown requested by the relay");
}

static int on_shutdown(void *arg, struct cj_stream_blob *b)
{
    struct wk *w = arg;
    if (w->exiting || relay_request(w, b, CJ_CAPI_SHUTDOWN)) return 0;
    bool live = wk_task_live(w);
    if (!w->shutdown_asked)
        cj_log_info("shutdown requested by the relay (%s)%s",
                    (w->m->has & CJ_CAPI_F_REASON) ? w->m->reason : "no reason",
                    live ? "; the result source is live: exiting once it settles" : "");
    w->shutdown_asked = true;
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    struct evbuffer *eb = NULL;
    if (cj_capi_encode_shutdown_reply(&sb, live, &e)) msgpack_sbuffer_destroy(&sb);
    else eb = mp_sbuffer_to_evbuffer(&sb);   /* consumes sb */
    if (eb && !b->req.has_ri) evbuffer_free(eb), eb = NULL;
    bool sent = eb && b->req.has_ri &&
                cj_stream_reply(w->ep, &b->req, NULL, &FOBS_MSG, eb, live ? NULL : shutdown_replied, w) == 0;
    if (!sent && !live) wk_exit(w, WK_EXIT_OK, "shutdown requested by the relay (no reply sent)");
    return 0;
}

void wk_session_task_over(struct wk *w)
{
    w->tasks_done++;
    if (w->exiting) return;
    if (w->shutdown_asked) wk_exit(w, WK_EXIT_OK, "shutdown requested earlier; the result source has settled");
    else if (!w->bs.task_exchange.launch_once)
        wk_exit(w, WK_EXIT_OK, "launch_once is false: done after the first result");
}

/* ---- log -------------------------------------------------------------------------------------- */

void wk_log_metric(struct wk *w, const char *key, double value, int64_t step)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    struct cj_capi_value v = {.type = CJ_CAPI_V_FLOAT, .f = value};
    struct cj_capi_extra x = {.name = "global_step", .v = {.type = CJ_CAPI_V_INT, .i = step}};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_log(&sb, w->session_id, key, &v, "SCALAR", &x, 1, &e)) {
        msgpack_sbuffer_destroy(&sb);
        cj_log_warning("cannot encode the metric %s: %s", key, e.msg);
        return;
    }
    if (send_oneway(w, CJ_CAPI_T_LOG, &sb)) cj_log_warning("cannot send the metric %s", key);
    else cj_log_info("metric %s=%g (global_step %lld) sent", key, value, (long long)step);
}

int wk_session_register(struct wk *w)
{
    if (cj_stream_on(w->ep, CJ_CAPI_CHANNEL, CJ_CAPI_T_TASK_READY, wk_task_ready, w)) return -1;
    if (cj_stream_on(w->ep, CJ_CAPI_CHANNEL, CJ_CAPI_T_ABORT, on_abort, w)) return -1;
    if (cj_stream_on(w->ep, CJ_CAPI_CHANNEL, CJ_CAPI_T_SHUTDOWN, on_shutdown, w)) return -1;
    return 0;
}

/* ---- the launched mode ------------------------------------------------------------------------ */

static void log_start(const struct wk *w)
{
    const struct cj_bootstrap *bs = &w->bs;
    cj_log_info("starting: %s connecting to %s (relay %s, job %s, site %s, secure_mode %s)", bs->trainer_fqcn,
                bs->connect_url, bs->cj_fqcn, bs->job_id, bs->site_name, bs->secure_mode ? "true" : "false");
}

const struct wk_mode wk_launched_mode = {
    .register_handlers = wk_session_register,
    .log_start = log_start,
    .link_up = link_up,
    .link_down = link_down,
    .task_done = wk_task_serve_result,
};
