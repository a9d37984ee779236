/* SPDX-License-Identifier: Apache-2.0 */
/* link.c — one SFM connection: connect, TLS, handshake, heartbeat, frames,
 * control/bulk output queues, backpressure (see link.h). */
#include "net/link.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "net/addr.h"
#include "net/carrier.h"
#include "net/conn.h"
#include "net/tls.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/fqcn.h"
#include "wire/frame.h"

/* A forwarded frame waiting in the bulk queue: its header block and payload
 * bytes are in l->bulk; the 16-byte prefix is written when it moves to the
 * wire, so stream_id/sequence stay in wire order. */
struct bulk_ent {
    uint32_t hlen;
    uint32_t body;      /* hlen + payload length */
};

struct cj_link {
    struct event_base *base;
    struct cj_conn *conn;
    SSL_CTX *tls;
    bool active;
    int scheme;                  /* enum cj_ep_kind: the carrier under the frames */
    char tls_name[CJ_EP_ADDR_MAX]; /* grpcs: the name to check, "" = the URL's host */
    bool reneg_refused;          /* the TLS peer asked to renegotiate (refused: tls.c) */
    enum cj_link_state state;

    /* connecting (active side) */
    struct cj_addr addr;
    struct evdns_base *dns;
    struct cj_resolve *resolve;
    evutil_socket_t fd;            /* the socket until the conn owns it */
    struct event *conn_ev;

    struct event *start_ev, *hs_timer, *hb_timer, *kick_ev, *reaper;

    char name[CJ_LINK_NAME_MAX + 1];
    char me[CJ_FQCN_MAX + 1];
    char peer[CJ_FQCN_MAX + 1];
    char addr_text[CJ_ADDR_TEXT_MAX];

    uint32_t max_frame;
    double hs_timeout, hello_timeout, hb_interval, dead_after;
    bool quiet;                 /* routine state changes at debug */
    size_t link_buffer;

    struct cj_frame_counters fc;
    size_t need;                   /* current read low watermark */
    double last_rx, last_ping, up_at;

    /* bulk queue */
    struct evbuffer *bulk;
    struct evbuffer *small;      /* empty between add_small calls */
    struct bulk_ent *fifo;
    size_t fifo_cap, fifo_head, fifo_n;

    /* backpressure */
    unsigned paused_owner;       /* CJ_LINK_PAUSE_* bits */
    bool was_over;
    struct cj_link *blocked_on;    /* destination we wait for */
    TAILQ_HEAD(, cj_link) waiters; /* sources waiting for us */
    TAILQ_ENTRY(cj_link) wait_entry;

    int busy;                      /* nesting of callbacks running for this link */
    bool released;                 /* the owner dropped it: free when not busy */
    bool unused_frame_logged;
    struct cj_link_counters c;
    struct cj_link_ops ops;
    void *ctx, *data;
};

static void link_down(struct cj_link *l, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void process_input(struct cj_link *l);
static void refill_wire(struct cj_link *l);

/* ---- small helpers ------------------------------------------------------------ */

const char *cj_link_state_name(enum cj_link_state s)
{
    switch (s) {
    case CJ_LINK_CONNECTING: return "connecting";
    case CJ_LINK_TLS: return "tls";
    case CJ_LINK_HANDSHAKE: return "handshake";
    case CJ_LINK_UP: return "up";
    case CJ_LINK_CLOSED: return "closed";
    }
    return "?";
}

/* "worker site-1.J1.trainer_1 (unix peer pid 42)" / "upstream (tcp://h:1)". */
static const char *label(const struct cj_link *l, char *buf, size_t n)
{
    if (l->peer[0]) snprintf(buf, n, "%s %s (%s)", l->name, l->peer, l->addr_text);
    else snprintf(buf, n, "%s (%s)", l->name, l->addr_text);
    return buf;
}

static void set_state(struct cj_link *l, enum cj_link_state st, const char *detail)
{
    char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    if (st == l->state) return;
    /* A passive link starts connected: call its first state "accepted". */
    const char *from = l->state == CJ_LINK_CONNECTING && !l->active ? "accepted" : cj_link_state_name(l->state);
    cj_log(l->quiet ? CJ_LOG_DEBUG : CJ_LOG_INFO, "link %s: %s -> %s%s%s", label(l, lb, sizeof lb), from,
           cj_link_state_name(st), detail ? ": " : "", detail ? detail : "");
    l->state = st;
}

static void enter(struct cj_link *l) { l->busy++; }

static void really_free(struct cj_link *l)
{
    if (l->reaper) event_free(l->reaper);
    free(l->fifo);
    if (l->bulk) evbuffer_free(l->bulk);
    if (l->small) evbuffer_free(l->small);
    free(l);
}

static void leave(struct cj_link *l)
{
    if (--l->busy == 0 && l->state == CJ_LINK_CLOSED && l->released) really_free(l);
}

/* After on_down the owner holds no pointer: free at the next loop turn. */
static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    l->released = true;
    if (l->busy == 0) really_free(l);
}

static void set_need(struct cj_link *l, size_t need)
{
    if (!l->conn || need == l->need) return;
    l->need = need;
    cj_conn_set_read_watermarks(l->conn, need, need > CJ_LINK_READ_AHEAD ? need : CJ_LINK_READ_AHEAD);
}

bool cj_link_reading(const struct cj_link *l) { return !l->paused_owner && !l->blocked_on; }

/* Applies the pause state to the connection; frames already buffered are
 * handled from the kick event (no new read event will announce them).  The
 * kick runs even with nothing buffered: a pause taken right after a frame
 * leaves the read low watermark at that frame's length (process_input stopped
 * before lowering it to a prefix), and smaller frames arriving later would
 * then never wake the reader. */
static void apply_reading(struct cj_link *l)
{
    if (!l->conn || l->state == CJ_LINK_CLOSED) return;
    if (cj_link_reading(l)) {
        cj_conn_set_reading(l->conn, true);
        l->last_rx = cj_now();           /* our pause is not the peer's silence */
        event_active(l->kick_ev, 0, 0);
    } else {
        cj_conn_set_reading(l->conn, false);
    }
}

/* ---- output ----------------------------------------------------------------------- */

size_t cj_link_queued(const struct cj_link *l)
{
    size_t q = l->bulk ? evbuffer_get_length(l->bulk) : 0;
    if (l->conn) q += cj_conn_queued(l->conn);
    return q;
}

bool cj_link_over(const struct cj_link *l) { return cj_link_queued(l) > l->link_buffer; }

static void note_queued(struct cj_link *l)
{
    size_t q = cj_link_queued(l);
    if (q > l->c.queued_peak) l->c.queued_peak = q;
    if (q > l->link_buffer) l->was_over = true;
}

static void count_out(struct cj_link *l, size_t len)
{
    l->c.frames_out++;
    l->c.bytes_out += len;
}

static void data_prefix(struct cj_link *l, uint32_t length, uint16_t hlen, uint8_t out[CJ_FRAME_PREFIX_LEN])
{
    struct cj_frame_prefix p = {.length = length, .header_len = hlen, .type = CJ_FRAME_DATA,
                                .app_id = CJ_FRAME_APP_CELLNET};
    cj_frame_counters_next(&l->fc, CJ_FRAME_DATA, &p.stream_id, &p.sequence);
    cj_frame_prefix_encode(&p, out);
}

/* Appends a small piece (a frame prefix, a header block) to dst in a chain of
 * its own.  evbuffer_add would size a new chain like dst's last one: after a
 * 1 MiB payload chain, 1 MiB for 16 bytes, so every queued bulk frame held
 * twice its size.  Frames also start on a chain boundary this way, so moving
 * whole frames between buffers (refill_wire) moves chains and copies nothing. */
static int add_small(struct cj_link *l, struct evbuffer *dst, const void *a, size_t an, const void *b, size_t bn)
{
    if (evbuffer_add(l->small, a, an) < 0 || (bn && evbuffer_add(l->small, b, bn) < 0)) {
        evbuffer_drain(l->small, evbuffer_get_length(l->small));
        return -1;
    }
    return evbuffer_add_buffer(dst, l->small);
}

static int send_heartbeat(struct cj_link *l, uint8_t type)
{
    uint8_t f[CJ_FRAME_HEARTBEAT_LEN];
    uint16_t sid, seq;
    cj_frame_counters_next(&l->fc, type, &sid, &seq);
    cj_frame_build_heartbeat(f, type, sid, seq);
    if (add_small(l, cj_conn_output(l->conn), f, sizeof f, NULL, 0) < 0) return -1;
    count_out(l, sizeof f);
    if (type == CJ_FRAME_PING) l->c.pings_out++;
    else l->c.pongs_out++;
    return 0;
}

static int send_hello(struct cj_link *l, uint8_t type)
{
    struct cj_frame_hello h;
    struct cj_err err;
    msgpack_sbuffer sb;
    uint16_t sid, seq;
    msgpack_sbuffer_init(&sb);
    cj_frame_counters_next(&l->fc, type, &sid, &seq);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int rc = cj_frame_hello_init(&h, l->me, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, &err);
    if (rc == 0) rc = cj_frame_build_hello(&sb, type, sid, seq, &h, &err);
    if (rc == 0) rc = add_small(l, cj_conn_output(l->conn), sb.data, sb.size, NULL, 0);
    if (rc == 0) count_out(l, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int fifo_push(struct cj_link *l, uint32_t hlen, uint32_t body)
{
    if (l->fifo_n == l->fifo_cap) {
        size_t cap = l->fifo_cap ? l->fifo_cap * 2 : 64;
        struct bulk_ent *f = malloc(cap * sizeof *f);
        if (!f) return -1;
        for (size_t i = 0; i < l->fifo_n; i++) f[i] = l->fifo[(l->fifo_head + i) % l->fifo_cap];
        free(l->fifo);
        l->fifo = f;
        l->fifo_cap = cap;
        l->fifo_head = 0;
    }
    l->fifo[(l->fifo_head + l->fifo_n) % l->fifo_cap] = (struct bulk_ent){hlen, body};
    l->fifo_n++;
    return 0;
}

/* Moves whole bulk frames to the wire while it holds less than WIRE_LOW. */
static void refill_wire(struct cj_link *l)
{
    if (!l->conn || l->state != CJ_LINK_UP) return;
    struct evbuffer *out = cj_conn_output(l->conn);
    while (l->fifo_n > 0 && evbuffer_get_length(out) < CJ_LINK_WIRE_LOW) {
        struct bulk_ent e = l->fifo[l->fifo_head];
        l->fifo_head = (l->fifo_head + 1) % l->fifo_cap;
        l->fifo_n--;
        uint8_t pre[CJ_FRAME_PREFIX_LEN];
        data_prefix(l, CJ_FRAME_PREFIX_LEN + e.body, (uint16_t)e.hlen, pre);
        if (add_small(l, out, pre, sizeof pre, NULL, 0) < 0 || evbuffer_remove_buffer(l->bulk, out, e.body) != (int)e.body) {
            link_down(l, CJ_LOG_ERROR, "out of memory moving a frame to the wire");
            return;
        }
        count_out(l, CJ_FRAME_PREFIX_LEN + e.body);
    }
}

int cj_link_send(struct cj_link *l, const uint8_t *hblk, size_t hlen, struct evbuffer *payload, bool control)
{
    if (!l || l->state != CJ_LINK_UP || hlen == 0 || hlen > 65535) return -1;
    size_t plen = payload ? evbuffer_get_length(payload) : 0;
    if (plen > (size_t)CJ_FRAME_MAX_DEFAULT - CJ_FRAME_PREFIX_LEN - hlen) return -1;
    uint32_t body = (uint32_t)(hlen + plen);
    int rc;
    if (control) {
        struct evbuffer *out = cj_conn_output(l->conn);
        uint8_t pre[CJ_FRAME_PREFIX_LEN];
        data_prefix(l, CJ_FRAME_PREFIX_LEN + body, (uint16_t)hlen, pre);
        rc = add_small(l, out, pre, sizeof pre, hblk, hlen);
        if (rc == 0 && plen) rc = evbuffer_add_buffer(out, payload);
        if (rc == 0) count_out(l, CJ_FRAME_PREFIX_LEN + body);
    } else {
        rc = add_small(l, l->bulk, hblk, hlen, NULL, 0);
        if (rc == 0 && plen) rc = evbuffer_add_buffer(l->bulk, payload);
        if (rc == 0) rc = fifo_push(l, (uint32_t)hlen, body);
        if (rc == 0) refill_wire(l);
    }
    if (rc < 0) {           /* a half-queued frame would corrupt the stream */
        link_down(l, CJ_LOG_ERROR, "out of memory queueing a frame");
        return -1;
    }
    note_queued(l);
    return 0;
}

int cj_link_send_msg(struct cj_link *l, struct cj_msg *msg, bool control)
{
    if (cj_link_send(l, msg->hblk, msg->hlen, msg->payload, control) < 0) return -1;
    cj_msg_free(msg);
    return 0;
}

/* ---- backpressure -------------------------------------------------------------- */

static void unblock(struct cj_link *src)
{
    struct cj_link *dst = src->blocked_on;
    if (!dst) return;
    TAILQ_REMOVE(&dst->waiters, src, wait_entry);
    src->blocked_on = NULL;
    char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    cj_log_debug("link %s: reading resumed", label(src, lb, sizeof lb));
    apply_reading(src);
}

static void release_waiters(struct cj_link *dst)
{
    struct cj_link *w;
    while ((w = TAILQ_FIRST(&dst->waiters)) != NULL) unblock(w);
}

bool cj_link_throttle(struct cj_link *src, struct cj_link *dst)
{
    if (!src || !dst || src == dst || src->blocked_on || dst->state == CJ_LINK_CLOSED ||
        src->state == CJ_LINK_CLOSED || !cj_link_over(dst))
        return false;
    src->blocked_on = dst;
    TAILQ_INSERT_TAIL(&dst->waiters, src, wait_entry);
    src->c.throttled++;
    char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    char lb2[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    cj_log_debug("link %s: reading paused, %s has %zu bytes queued (limit %zu)", label(src, lb, sizeof lb),
                 label(dst, lb2, sizeof lb2), cj_link_queued(dst), dst->link_buffer);
    apply_reading(src);
    return true;
}

/* After the wire drained: waiters go on below half the bound. */
static void check_drained(struct cj_link *l)
{
    if (cj_link_queued(l) >= l->link_buffer / 2) return;
    release_waiters(l);
    if (l->was_over) {
        l->was_over = false;
        if (l->ops.on_drain && l->state != CJ_LINK_CLOSED) l->ops.on_drain(l, l->ctx);
    }
}

void cj_link_pause_reading(struct cj_link *l, unsigned why)
{
    l->paused_owner |= why;
    apply_reading(l);
}

void cj_link_resume_reading(struct cj_link *l, unsigned why)
{
    l->paused_owner &= ~why;
    apply_reading(l);
}

/* ---- closing ---------------------------------------------------------------------- */

static void free_event(struct event **ev)
{
    if (*ev) event_free(*ev);
    *ev = NULL;
}

/* Stops all I/O and timers; the struct stays until the reaper or leave(). */
static void teardown(struct cj_link *l)
{
    if (l->resolve) cj_addr_resolve_cancel(l->resolve);
    l->resolve = NULL;
    free_event(&l->conn_ev);
    free_event(&l->start_ev);
    free_event(&l->hs_timer);
    free_event(&l->hb_timer);
    free_event(&l->kick_ev);
    if (l->conn) cj_conn_free(l->conn);        /* closes the socket (and frees the SSL) */
    else if (l->fd >= 0) close(l->fd);
    l->conn = NULL;
    l->fd = -1;
    release_waiters(l);
    if (l->blocked_on) {
        TAILQ_REMOVE(&l->blocked_on->waiters, l, wait_entry);
        l->blocked_on = NULL;
    }
    if (l->bulk) evbuffer_drain(l->bulk, evbuffer_get_length(l->bulk));
    l->fifo_n = 0;
}

static void link_vdown(struct cj_link *l, int level, bool notify, const char *fmt, va_list ap)
{
    if (l->state == CJ_LINK_CLOSED) return;
    char why[1024];
    vsnprintf(why, sizeof why, fmt, ap);
    char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    cj_log(l->quiet && l->state != CJ_LINK_UP ? CJ_LOG_DEBUG : level, "link %s: %s -> closed: %s",
           label(l, lb, sizeof lb), cj_link_state_name(l->state), why);
    l->state = CJ_LINK_CLOSED;
    enter(l);
    teardown(l);
    if (notify && !l->released && l->ops.on_down) l->ops.on_down(l, why, l->ctx);
    if (!l->released) event_active(l->reaper, 0, 0);
    leave(l);
}

static void link_down(struct cj_link *l, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    link_vdown(l, level, true, fmt, ap);
    va_end(ap);
}

void cj_link_close(struct cj_link *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    link_vdown(l, CJ_LOG_INFO, true, fmt, ap);
    va_end(ap);
}

static void silent_close(struct cj_link *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void silent_close(struct cj_link *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    link_vdown(l, CJ_LOG_INFO, false, fmt, ap);
    va_end(ap);
}

void cj_link_free(struct cj_link *l)
{
    if (!l) return;
    l->released = true;
    enter(l);
    silent_close(l, "closed by its owner");
    leave(l);                                 /* frees it now unless a callback of l is running */
}

/* ---- timers ----------------------------------------------------------------------- */

static void hs_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    enter(l);
    const char *w = l->state == CJ_LINK_CONNECTING ? "connection"
                    : l->state == CJ_LINK_TLS      ? "TLS handshake"
                    : l->active                     ? "READY" : "HELLO";
    size_t held = l->conn ? cj_conn_held(l->conn) : 0;
    if (held) /* a gRPC server that never opened its window */
        link_down(l, CJ_LOG_WARNING, "handshake not completed within %g s (still waiting for the %s; %zu bytes wait "
                  "for the server's flow-control window)", l->hs_timeout, w, held);
    else
        link_down(l, CJ_LOG_WARNING, "handshake not completed within %g s (still waiting for the %s)", l->hs_timeout, w);
    leave(l);
}

static void hb_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    if (l->state != CJ_LINK_UP) return;
    enter(l);
    double now = cj_now();
    if (!cj_link_reading(l)) l->last_rx = now;     /* we are not reading: no verdict */
    double idle = now - l->last_rx;
    if (idle >= 0.2 && l->conn) cj_conn_idle(l->conn);   /* read memory back while quiet */
    if (l->dead_after > 0 && idle > l->dead_after) {
        link_down(l, CJ_LOG_WARNING, "nothing received for %.1f s (limit %.1f s): peer presumed dead", idle,
                  l->dead_after);
    } else if (l->hb_interval > 0 && idle >= l->hb_interval && now - l->last_ping >= l->hb_interval) {
        l->last_ping = now;
        if (send_heartbeat(l, CJ_FRAME_PING) < 0) link_down(l, CJ_LOG_ERROR, "out of memory sending PING");
    }
    leave(l);
}

static void start_heartbeat(struct cj_link *l)
{
    double per = 0;
    if (l->hb_interval > 0) per = l->hb_interval;
    if (l->dead_after > 0 && (per == 0 || l->dead_after < per)) per = l->dead_after;
    if (per <= 0) return;
    per /= 4;                                     /* NVFlare looks every 5 s */
    if (per > 5) per = 5;
    if (per < 0.01) per = 0.01;
    l->hb_timer = event_new(l->base, -1, EV_PERSIST, hb_cb, l);
    if (!l->hb_timer) return;
    struct timeval tv = cj_tv(per);
    event_add(l->hb_timer, &tv);
}

/* ---- handshake ------------------------------------------------------------------------ */

static void become_up(struct cj_link *l)
{
    char detail[CJ_FQCN_MAX + 64];
    free_event(&l->hs_timer);
    l->up_at = cj_now();
    l->last_rx = l->up_at;
    l->last_ping = l->up_at;
    snprintf(detail, sizeof detail, "peer %s", l->peer);
    set_state(l, CJ_LINK_UP, detail);
    start_heartbeat(l);
    if (l->ops.on_up) l->ops.on_up(l, l->ctx);
    if (l->state == CJ_LINK_UP) refill_wire(l);
}

/* The transport is ready (connected, TLS done): start the SFM handshake. */
static void transport_ready(struct cj_link *l)
{
    if (l->active) {
        if (send_hello(l, CJ_FRAME_HELLO) < 0) {
            link_down(l, CJ_LOG_ERROR, "cannot send HELLO");
            return;
        }
        set_state(l, CJ_LINK_HANDSHAKE, "HELLO sent, waiting for READY");
        if (l->hello_timeout > 0 && l->hs_timer) {   /* READY gets its own bound from here */
            struct timeval tv = cj_tv(l->hello_timeout);
            l->hs_timeout = l->hello_timeout;
            evtimer_add(l->hs_timer, &tv);
        }
    } else {
        set_state(l, CJ_LINK_HANDSHAKE, "waiting for HELLO");
    }
}

/* A HELLO/READY name must be a valid FQCN and not ours (doc/protocol/sfm.md §3). */
static int check_peer_name(struct cj_link *l, const char *name, char *why, size_t whysz)
{
    struct cj_err err;
    if (cj_fqcn_check(name, strlen(name), &err) < 0) {
        snprintf(why, whysz, "endpoint_name '%.*s' is not a valid FQCN: %s", 80, name, err.msg);
        return -1;
    }
    if (!strcmp(name, l->me)) {
        snprintf(why, whysz, "endpoint_name '%s' is our own name", name);
        return -1;
    }
    return 0;
}

static void on_hello(struct cj_link *l, const struct cj_frame_hello *h)
{
    char why[512] = "";
    if (check_peer_name(l, h->endpoint_name, why, sizeof why) < 0 ||
        (l->ops.on_hello && l->ops.on_hello(l, h->endpoint_name, why, sizeof why, l->ctx) < 0)) {
        if (l->state == CJ_LINK_CLOSED) return;
        link_down(l, CJ_LOG_WARNING, "HELLO refused: %s", why[0] ? why : "not accepted");
        return;
    }
    if (l->state == CJ_LINK_CLOSED) return;
    snprintf(l->peer, sizeof l->peer, "%s", h->endpoint_name);
    if (send_hello(l, CJ_FRAME_READY) < 0) {
        link_down(l, CJ_LOG_ERROR, "cannot send READY");
        return;
    }
    become_up(l);
}

static void on_ready(struct cj_link *l, const struct cj_frame_hello *h)
{
    char why[512];
    if (check_peer_name(l, h->endpoint_name, why, sizeof why) < 0) {
        link_down(l, CJ_LOG_WARNING, "READY refused: %s", why);
        return;
    }
    snprintf(l->peer, sizeof l->peer, "%s", h->endpoint_name);
    become_up(l);
}

static void handle_handshake_frame(struct cj_link *l, const struct cj_frame_prefix *p, struct evbuffer *in)
{
    const char *tn = cj_frame_type_name(p->type);
    if (p->length > CJ_LINK_CTRL_MAX) {
        link_down(l, CJ_LOG_WARNING, "%s frame of %u bytes is longer than %u", tn, p->length, CJ_LINK_CTRL_MAX);
        return;
    }
    const uint8_t *f = evbuffer_pullup(in, p->length);
    struct cj_frame_hello h;
    struct cj_err err;
    int rc = f ? cj_frame_hello_decode(f + CJ_FRAME_PREFIX_LEN, p->length - CJ_FRAME_PREFIX_LEN, &h, &err)
               : cj_fail(&err, CJ_E_NOMEM, 0, "out of memory");
    evbuffer_drain(in, p->length);
    bool wanted = l->state == CJ_LINK_HANDSHAKE && p->type == (l->active ? CJ_FRAME_READY : CJ_FRAME_HELLO);
    if (!wanted) {
        char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
        cj_log_warning("link %s: unexpected %s frame in state %s, ignored", label(l, lb, sizeof lb), tn,
                       cj_link_state_name(l->state));
        return;
    }
    if (rc < 0) {
        link_down(l, CJ_LOG_WARNING, "malformed %s payload at offset %zu: %s", tn, err.offset, err.msg);
        return;
    }
    if (p->type == CJ_FRAME_HELLO) on_hello(l, &h);
    else on_ready(l, &h);
}

/* ---- input ---------------------------------------------------------------------------- */

static void handle_data(struct cj_link *l, const struct cj_frame_prefix *p, struct evbuffer *in)
{
    size_t hl = p->header_len;
    size_t plen = p->length - CJ_FRAME_PREFIX_LEN - hl;
    if (l->state != CJ_LINK_UP) {
        evbuffer_drain(in, p->length);
        l->c.frames_dropped++;
        link_down(l, CJ_LOG_WARNING, "DATA frame before the handshake completed (dropped)");
        return;
    }
    evbuffer_drain(in, CJ_FRAME_PREFIX_LEN);
    uint8_t *blk = malloc(hl);
    if (!blk) {
        link_down(l, CJ_LOG_ERROR, "out of memory for a %zu-byte header block", hl);
        return;
    }
    evbuffer_remove(in, blk, hl);
    struct cj_err err;
    struct cj_msg *m = cj_msg_from_block(blk, hl, &err);   /* takes blk */
    if (!m) {
        evbuffer_drain(in, plen);
        char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
        if (err.code == CJ_E_MISSING) {     /* doc/protocol/cellnet.md §1: dropped, the link stays */
            l->c.frames_dropped++;
            cj_log_warning("link %s: DATA frame dropped: %s", label(l, lb, sizeof lb), err.msg);
        } else {
            link_down(l, CJ_LOG_ERROR, "malformed header block (offset %zu): %s", err.offset, err.msg);
        }
        return;
    }
    /* The payload's chains move to the message: no copy of chunk data. */
    if (plen && evbuffer_remove_buffer(in, m->payload, plen) != (int)plen) {
        cj_msg_free(m);
        link_down(l, CJ_LOG_ERROR, "out of memory moving a %zu-byte payload", plen);
        return;
    }
    m->from = l;
    l->c.msgs_in++;
    if (l->ops.on_msg) l->ops.on_msg(l, m, l->ctx);
    else cj_msg_free(m);
}

static void handle_frame(struct cj_link *l, const struct cj_frame_prefix *p, struct evbuffer *in)
{
    char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
    l->c.frames_in++;
    l->c.bytes_in += p->length;
    switch (p->type) {
    case CJ_FRAME_DATA:
        handle_data(l, p, in);
        return;
    case CJ_FRAME_HELLO:
    case CJ_FRAME_READY:
        handle_handshake_frame(l, p, in);
        return;
    case CJ_FRAME_PING:
        evbuffer_drain(in, p->length);
        l->c.pings_in++;
        if (send_heartbeat(l, CJ_FRAME_PONG) < 0) link_down(l, CJ_LOG_ERROR, "out of memory sending PONG");
        return;
    case CJ_FRAME_PONG:
        evbuffer_drain(in, p->length);
        l->c.pongs_in++;
        return;
    default:                                     /* FRAG, ACK: defined, never sent */
        evbuffer_drain(in, p->length);
        l->c.frames_dropped++;
        cj_log(l->unused_frame_logged ? CJ_LOG_DEBUG : CJ_LOG_WARNING, "link %s: %s frame dropped (unused type)",
               label(l, lb, sizeof lb), cj_frame_type_name(p->type));
        l->unused_frame_logged = true;
        return;
    }
}

/* Handles every whole frame in the input, until it runs out, the link
 * closes, or reading gets paused (then the rest waits in the buffer). */
static void process_input(struct cj_link *l)
{
    while (l->conn && l->state != CJ_LINK_CLOSED && cj_link_reading(l)) {
        struct evbuffer *in = cj_conn_input(l->conn);
        size_t avail = evbuffer_get_length(in);
        if (avail < CJ_FRAME_PREFIX_LEN) {
            set_need(l, CJ_FRAME_PREFIX_LEN);
            return;
        }
        const uint8_t *pre = evbuffer_pullup(in, CJ_FRAME_PREFIX_LEN);
        struct cj_frame_prefix p;
        struct cj_err err;
        size_t need;
        /* Only the 16 pulled-up bytes are contiguous: cj_frame_next sees those
         * and reports the whole frame's length in need. */
        /* Before HELLO/READY only small frames make sense: a peer nobody has
         * identified yet may not make us buffer up to max_message_size. */
        uint32_t limit = l->state == CJ_LINK_UP || l->max_frame < CJ_LINK_HANDSHAKE_FRAME_MAX
                             ? l->max_frame
                             : CJ_LINK_HANDSHAKE_FRAME_MAX;
        int rc = pre ? cj_frame_next(pre, CJ_FRAME_PREFIX_LEN, limit, &p, &need, &err)
                     : cj_fail(&err, CJ_E_NOMEM, 0, "out of memory");
        if (rc < 0) {
            link_down(l, CJ_LOG_ERROR, "malformed frame: %s", err.msg);
            return;
        }
        if (avail < need) {
            set_need(l, need);
            return;
        }
        handle_frame(l, &p, in);
    }
}

/* ---- connection callbacks ----------------------------------------------------------- */

static void read_cb(struct cj_conn *c, void *arg)
{
    (void)c;
    struct cj_link *l = arg;
    enter(l);
    process_input(l);
    leave(l);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    enter(l);
    process_input(l);
    leave(l);
}

static void write_cb(struct cj_conn *c, void *arg)
{
    (void)c;
    struct cj_link *l = arg;
    enter(l);
    refill_wire(l);
    if (l->state != CJ_LINK_CLOSED) check_drained(l);
    leave(l);
}

/* Any bytes arriving count as activity, even inside a large frame. */
static void input_added(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    if (info->n_added) ((struct cj_link *)arg)->last_rx = cj_now();
}

/* OpenSSL's view of a failure: the error queue (captured by the conn when it
 * happened), the verify result, else the errno text. */
static void tls_error_text(struct cj_link *l, char *buf, size_t n)
{
    size_t used = 0;
    const char *q = cj_conn_error_text(l->conn);
    buf[0] = '\0';
    if (q[0]) {
        int w = snprintf(buf, n, "%s", q);
        if (w > 0) used = (size_t)w < n ? (size_t)w : n - 1;
    }
    SSL *ssl = cj_conn_ssl(l->conn);
    long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (vr != X509_V_OK && used + 3 < n) {
        int w = snprintf(buf + used, n - used, "%s%s certificate: %s", used ? "; " : "",
                         l->active ? "server" : "client", X509_verify_cert_error_string(vr));
        if (w > 0) used += (size_t)w < n - used ? (size_t)w : n - used - 1;
    }
    if (!used) snprintf(buf, n, "%s", "connection failed");
}

static void event_cb(struct cj_conn *c, int what, void *arg)
{
    (void)c;
    struct cj_link *l = arg;
    enter(l);
    if (what & CJ_CONN_CONNECTED) {             /* TLS handshake done (we connect sockets ourselves) */
        char d[512], lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
        SSL *ssl = cj_conn_ssl(l->conn);
        if (ssl) {
            cj_tls_describe(ssl, d, sizeof d);
            cj_log_info("link %s: TLS established: %s", label(l, lb, sizeof lb), d);
        }
        transport_ready(l);
    } else if (what & CJ_CONN_ERROR) {
        char t[1024];
        if (l->tls) {
            tls_error_text(l, t, sizeof t);
            const char *hint = cj_tls_alert_hint(t);
            const char *when = l->reneg_refused ? "TLS: the peer ended the link after its renegotiation was refused"
                               : l->state == CJ_LINK_TLS ? "TLS handshake failed"
                               : l->state == CJ_LINK_HANDSHAKE && l->active
                                   ? "TLS: the peer ended the connection after the handshake (under TLS 1.3 "
                                     "a refused client certificate is reported on the first read)"
                                   : "TLS error";
            if (l->reneg_refused) hint = NULL;   /* its alert is the answer to ours, not a cipher mismatch */
            link_down(l, CJ_LOG_ERROR, "%s: %s%s%s", when, t, hint ? " -- " : "", hint ? hint : "");
        } else {
            const char *t2 = cj_conn_error_text(l->conn);
            link_down(l, CJ_LOG_WARNING, "connection error: %s", t2[0] ? t2 : "unknown");
        }
    } else if (what & CJ_CONN_EOF) {
        const char *when = l->reneg_refused ? " after its TLS renegotiation was refused"
                           : l->state == CJ_LINK_TLS        ? " during the TLS handshake"
                           : l->state == CJ_LINK_HANDSHAKE && l->active && l->tls
                               ? " before READY (over TLS 1.3 this is how a server refuses the client certificate: "
                                 "check that cert_file is signed by the server's CA, is not expired, and that its "
                                 "CN equals [relay] site)"
                           : l->state == CJ_LINK_HANDSHAKE ? (l->active ? " before READY" : " before HELLO")
                                                           : "";
        const char *carrier = l->scheme & CJ_EP_CARRIED ? cj_conn_error_text(l->conn) : "";
        link_down(l, l->state == CJ_LINK_UP ? CJ_LOG_INFO : CJ_LOG_WARNING, "peer closed the connection%s%s%s", when,
                  carrier[0] ? ": " : "", carrier);
    }
    leave(l);
}

/* ---- creating --------------------------------------------------------------------------- */

static struct cj_link *link_new(struct event_base *base, bool active, SSL_CTX *tls, const struct cj_link_cfg *cfg,
                                const struct cj_link_ops *ops, void *ctx)
{
    struct cj_link *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->base = base;
    l->active = active;
    l->tls = tls;
    l->fd = -1;
    l->state = CJ_LINK_CONNECTING;
    snprintf(l->name, sizeof l->name, "%s", cfg->name ? cfg->name : "link");
    snprintf(l->me, sizeof l->me, "%s", cfg->me ? cfg->me : "");
    l->max_frame = cfg->max_frame ? cfg->max_frame : CJ_FRAME_MAX_DEFAULT;
    l->hs_timeout = cfg->handshake_timeout > 0 ? cfg->handshake_timeout : CJ_LINK_HANDSHAKE_TIMEOUT;
    l->hello_timeout = cfg->hello_timeout;
    l->hb_interval = cfg->heartbeat_interval;
    l->dead_after = cfg->dead_after;
    l->quiet = cfg->quiet;
    l->scheme = cfg->scheme;
    snprintf(l->tls_name, sizeof l->tls_name, "%s", cfg->tls_name ? cfg->tls_name : "");
    l->link_buffer = cfg->link_buffer ? cfg->link_buffer : CJ_LINK_BUFFER_DEFAULT;
    if (ops) l->ops = *ops;
    l->ctx = ctx;
    cj_frame_counters_init(&l->fc);
    TAILQ_INIT(&l->waiters);
    l->bulk = evbuffer_new();
    l->small = evbuffer_new();
    l->reaper = event_new(base, -1, 0, reaper_cb, l);
    l->hs_timer = event_new(base, -1, 0, hs_timeout_cb, l);
    struct timeval tv = cj_tv(l->hs_timeout);
    if (!l->bulk || !l->small || !l->reaper || !l->hs_timer || event_add(l->hs_timer, &tv) < 0) {
        free_event(&l->hs_timer);
        really_free(l);
        return NULL;
    }
    return l;
}

static void ready_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    enter(l);
    free_event(&l->start_ev);
    transport_ready(l);
    leave(l);
}

/* OpenSSL tells us when it refuses a renegotiation (tls.c sets
 * SSL_OP_NO_RENEGOTIATION): it sends a no_renegotiation alert. */
static void tls_info_cb(const SSL *ssl, int where, int ret)
{
    struct cj_link *l = SSL_get_app_data(ssl);
    if (!l || (where & SSL_CB_WRITE_ALERT) != SSL_CB_WRITE_ALERT || (ret & 0xff) != SSL_AD_NO_RENEGOTIATION) return;
    if (!l->reneg_refused) {
        char lb[CJ_LINK_NAME_MAX + CJ_FQCN_MAX + CJ_ADDR_TEXT_MAX + 8];
        cj_log_warning("link %s: the peer asked for a TLS renegotiation: refused (cjrelay never renegotiates)",
                       label(l, lb, sizeof lb));
    }
    l->reneg_refused = true;
}

/* http/https and grpc/grpcs carry the frames in WebSocket or gRPC messages:
 * the conn gets that carrier (a client names HOST:PORT to the server). */
static int attach_carrier(struct cj_link *l)
{
    if (!(l->scheme & CJ_EP_CARRIED)) return 0;
    enum cj_carrier_kind kind = l->scheme & (CJ_EP_HTTP | CJ_EP_HTTPS) ? CJ_CARRIER_WS : CJ_CARRIER_GRPC;
    char authority[CJ_EP_ADDR_MAX + 16] = "";
    if (l->active)
        snprintf(authority, sizeof authority, strchr(l->addr.ep.addr, ':') ? "[%s]:%u" : "%s:%u", l->addr.ep.addr,
                 l->addr.ep.port);
    struct cj_carrier *k = cj_carrier_new(kind, !l->active, authority, cj_ep_tls(l->scheme));
    if (!k) return -1;
    if (cj_conn_set_carrier(l->conn, k) < 0) {
        cj_carrier_free(k);
        return -1;
    }
    return 0;
}

/* TLS for grpcs as FLARE's gRPC client does it: ALPN h2, and the server's
 * certificate must name the host of the URL (or the name configured instead). */
static int tls_for_grpcs(struct cj_link *l, SSL *ssl)
{
    if (l->scheme != CJ_EP_GRPCS) return 0;
    if (!l->active) return 0;  /* a server's ALPN answer is its context's (cj_tls_server_ctx) */
    if (SSL_set_alpn_protos(ssl, (const unsigned char *)"\x02h2", 3) != 0) return -1;
    return SSL_set1_host(ssl, l->tls_name[0] ? l->tls_name : l->addr.ep.addr) == 1 ? 0 : -1;
}

/* Wraps the connected fd in a conn (OpenSSL over it for TLS links). */
static int attach_conn(struct cj_link *l, evutil_socket_t fd)
{
    static const struct cj_conn_ops conn_ops = {read_cb, write_cb, event_cb};
    cj_sock_tune(fd);
    l->kick_ev = event_new(l->base, -1, 0, kick_cb, l);
    if (!l->kick_ev) return -1;
    SSL *ssl = NULL;
    if (l->tls) {
        ssl = SSL_new(l->tls);
        if (!ssl) return -1;
        SSL_set_app_data(ssl, l);
        SSL_set_info_callback(ssl, tls_info_cb);
        if (tls_for_grpcs(l, ssl) < 0) {
            SSL_free(ssl);
            return -1;
        }
    }
    l->conn = cj_conn_new(l->base, fd, ssl, l->active, &conn_ops, l);
    if (!l->conn) {
        if (ssl) SSL_free(ssl);
        return -1;
    }
    l->fd = -1;                                   /* the conn owns it now */
    if (attach_carrier(l) < 0) return -1;
    l->need = 0;
    set_need(l, CJ_FRAME_PREFIX_LEN);
    cj_conn_set_write_low(l->conn, CJ_LINK_WIRE_LOW);
    cj_conn_set_reading(l->conn, cj_link_reading(l));
    evbuffer_add_cb(cj_conn_input(l->conn), input_added, l);
    l->last_rx = cj_now();
    if (l->tls) {
        set_state(l, CJ_LINK_TLS, l->active ? "TLS client handshake" : "TLS server handshake");
        return 0;
    }
    /* From the loop, so that a failure is never reported inside cj_link_attach. */
    l->start_ev = event_new(l->base, -1, 0, ready_cb, l);
    if (!l->start_ev) return -1;
    event_active(l->start_ev, 0, 0);
    return 0;
}

static void conn_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct cj_link *l = arg;
    enter(l);
    free_event(&l->conn_ev);
    int e = cj_sock_connect_result(fd);
    if (e) {
        link_down(l, CJ_LOG_WARNING, "connect to %s failed: %s", l->addr.text, strerror(e));
    } else if (attach_conn(l, fd) < 0) {
        if (!l->conn) { close(fd); l->fd = -1; }
        link_down(l, CJ_LOG_ERROR, "cannot set up the connection (out of memory)");
    }
    leave(l);
}

static void resolved_cb(int rc, const struct sockaddr *sa, socklen_t len, const char *why, void *arg)
{
    struct cj_link *l = arg;
    enter(l);
    l->resolve = NULL;
    struct cj_err err;
    if (rc < 0) {
        link_down(l, CJ_LOG_WARNING, "%s", why);
    } else if ((l->fd = cj_sock_connect_start(sa, len, &err)) < 0) {
        link_down(l, CJ_LOG_WARNING, "connect to %s failed: %s", l->addr.text, err.msg);
    } else {
        l->conn_ev = event_new(l->base, l->fd, EV_WRITE, conn_cb, l);
        if (!l->conn_ev || event_add(l->conn_ev, NULL) < 0)
            link_down(l, CJ_LOG_ERROR, "cannot wait for the connection (out of memory)");
    }
    leave(l);
}

/* Runs from the loop so that no callback comes from inside cj_link_connect. */
static void start_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_link *l = arg;
    enter(l);
    free_event(&l->start_ev);
    l->resolve = cj_addr_resolve(l->dns, &l->addr, resolved_cb, l);
    leave(l);
}

struct cj_link *cj_link_connect(struct event_base *base, struct evdns_base *dns, const char *url, SSL_CTX *tls,
                                const struct cj_link_cfg *cfg, const struct cj_link_ops *ops, void *ctx,
                                struct cj_err *err)
{
    struct cj_addr a;
    if (cj_addr_parse(url, CJ_EP_NET | CJ_EP_UNIX, 0, &a, err) < 0) return NULL;
    if (cj_ep_tls(a.ep.kind) && !tls) {
        cj_fail(err, CJ_E_INVALID, 0, "%s: %s:// needs a TLS context", a.text, cj_ep_scheme(a.ep.kind));
        return NULL;
    }
    if (!cj_ep_tls(a.ep.kind) && tls) {
        cj_fail(err, CJ_E_INVALID, 0, "%s: TLS needs an stcp://, https:// or grpcs:// address", a.text);
        return NULL;
    }
    struct cj_link *l = link_new(base, true, tls, cfg, ops, ctx);
    if (!l) {
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a link");
        return NULL;
    }
    l->addr = a;
    l->scheme = a.ep.kind;
    l->dns = dns;
    snprintf(l->addr_text, sizeof l->addr_text, "%s", a.text);
    l->start_ev = event_new(base, -1, 0, start_cb, l);
    if (!l->start_ev) {
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a link");
        free_event(&l->hs_timer);
        really_free(l);
        return NULL;
    }
    event_active(l->start_ev, 0, 0);
    cj_log(l->quiet ? CJ_LOG_DEBUG : CJ_LOG_INFO, "link %s (%s): connecting", l->name, l->addr_text);
    return l;
}

struct cj_link *cj_link_attach(struct event_base *base, evutil_socket_t fd, bool active, SSL_CTX *tls,
                               const char *peer_addr, const struct cj_link_cfg *cfg,
                               const struct cj_link_ops *ops, void *ctx, struct cj_err *err)
{
    struct cj_link *l = link_new(base, active, tls, cfg, ops, ctx);
    if (!l) {
        close(fd);
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a link");
        return NULL;
    }
    if (peer_addr) snprintf(l->addr_text, sizeof l->addr_text, "%s", peer_addr);
    else cj_sock_peer_text(fd, l->addr_text, sizeof l->addr_text);
    evutil_make_socket_nonblocking(fd);
    cj_log_info("link %s (%s): connected (%s side)", l->name, l->addr_text, active ? "active" : "passive");
    if (attach_conn(l, fd) < 0) {
        if (l->conn) cj_conn_free(l->conn);
        else close(fd);
        free_event(&l->hs_timer);
        free_event(&l->kick_ev);
        free_event(&l->start_ev);
        really_free(l);
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a link");
        return NULL;
    }
    return l;
}

struct cj_link *cj_link_accept(struct event_base *base, evutil_socket_t fd, SSL_CTX *tls, const char *peer_addr,
                               const struct cj_link_cfg *cfg, const struct cj_link_ops *ops, void *ctx,
                               struct cj_err *err)
{
    return cj_link_attach(base, fd, false, tls, peer_addr, cfg, ops, ctx, err);
}

/* ---- looking at a link --------------------------------------------------------------- */

const char *cj_link_name(const struct cj_link *l) { return l->name; }
const char *cj_link_peer(const struct cj_link *l) { return l->peer; }
const char *cj_link_addr(const struct cj_link *l) { return l->addr_text; }
enum cj_link_state cj_link_get_state(const struct cj_link *l) { return l->state; }
bool cj_link_is_active(const struct cj_link *l) { return l->active; }
bool cj_link_is_tls(const struct cj_link *l) { return l->tls != NULL; }
double cj_link_rx_idle(const struct cj_link *l) { return cj_now() - l->last_rx; }
double cj_link_up_time(const struct cj_link *l) { return l->state == CJ_LINK_UP ? cj_now() - l->up_at : 0; }
const struct cj_link_counters *cj_link_counters(const struct cj_link *l) { return &l->c; }
void *cj_link_ctx(const struct cj_link *l) { return l->ctx; }
void cj_link_set_data(struct cj_link *l, void *data) { l->data = data; }
void *cj_link_data(const struct cj_link *l) { return l->data; }
