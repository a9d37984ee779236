/* router.c — routing table, forwarding, RETURN, local dispatch, anti-spoofing,
 * backpressure and upstream reconnect for the relay cell (see router.h). */
#include "cell/router.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>

#include "net/addr.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/fqcn.h"

#define DROP_LOG_WINDOW 10.0   /* seconds */
#define DROP_LOG_BURST 20      /* drop lines per window before suppressing */

/* Pacing (see pace_wanted): the queue a reading worker may have before the
 * upstream waits for it, how long without draining that much before a worker
 * counts as not reading, and how recent a worker's traffic must be for it to
 * count as possibly waiting on the upstream. */
#define WORKER_PACE ((size_t)2 << 20)
/* CJRELAY_PACE=0 in the environment turns pacing off (the relay then holds up
 * to one sender window per worker, as before pacing): for comparisons (make
 * bench) and as a way back should pacing misbehave somewhere. */
#define PACE_ENV "CJRELAY_PACE"
#define PACE_STALL 5.0         /* seconds */
#define PACE_ACTIVE 1.0        /* seconds */

enum role { ROLE_UPSTREAM = 1, ROLE_WORKER = 2 };

/* A worker's request in flight through the upstream (see router.h): what its
 * forwarder error notice needs.  Fixed size: sm__ri, cn__destination,
 * cn__origin, sm__ch and sm__tp packed NUL-terminated into text (a request
 * whose strings do not fit is not remembered, and counted). */
#define INFLIGHT_TEXT 512
struct inflight {
    uint64_t seq;              /* 0: free slot; else the order it was remembered in (oldest: smallest) */
    uint64_t sm_id;
    bool sm_id_neg, has_ch, has_tp;
    uint16_t dest, origin, ch, tp;   /* offsets into text; sm__ri is at 0 */
    char text[INFLIGHT_TEXT];
};

/* Per-link router data (cj_link_set_data). */
struct rlink {
    enum role role;
    bool up;
    char fqcn[CJ_FQCN_MAX + 1];
    size_t stall_queued;       /* queued bytes when the link was last seen over its bound */
    double stall_since;        /* monotonic time it stopped draining; 0 = not stalled */
    uint64_t fwd;              /* bytes forwarded into this worker link */
    uint64_t drain_mark;       /* drained bytes (fwd - queued) when read_at was last set */
    double read_at;            /* monotonic time it last drained a pace's worth; 0 = never */
    double fed_at;             /* monotonic time a burst of forwards into it began; 0 = none yet */
    double active_at;          /* monotonic time of its last forwarded traffic, either way */
    struct inflight *inflight; /* worker: CJ_ROUTER_INFLIGHT_MAX slots, allocated at its first request */
    unsigned n_inflight;       /* used slots */
    unsigned holds;            /* cj_router_hold: consumers behind on what this link brings */
    double hold_since;         /* monotonic time the link was paused for them; 0 = not paused */
};

struct handler {
    char *channel, *topic;     /* NULL channel: default; NULL topic: any */
    cj_router_handler_fn fn;
    void *ctx;
};

struct cj_router {
    struct event_base *base;
    char me[CJ_FQCN_MAX + 1];
    struct cj_link_cfg worker_cfg, upstream_cfg;

    struct cj_link **links;    /* every link, any state */
    size_t n_links, cap_links;

    struct cj_listener **listeners;
    size_t n_listeners;

    struct handler *handlers;
    size_t n_handlers;

    cj_router_stamp_fn stamp;
    void *stamp_ctx;
    struct cj_router_events ev;
    void *ev_ctx;

    /* upstream */
    char up_url[CJ_ADDR_TEXT_MAX];
    char up_tls_name[CJ_EP_ADDR_MAX]; /* grpcs: the server certificate's expected name ("" = the url's host) */
    SSL_CTX *up_tls;
    struct evdns_base *dns;
    bool own_dns;
    double rmin, rmax;
    int attempt;
    bool proven;               /* a DATA frame arrived since the link came up */
    double up_since;           /* monotonic time the current upstream link came up */
    enum cj_upstream_state up_state;
    struct cj_link *up_link;   /* the current upstream link, any state */
    struct event *up_timer;
    uint64_t rng;

    /* drop log limiter */
    char last_why[256];        /* reason of the last upstream failure (log once) */
    double drop_window;
    unsigned drop_lines;
    uint64_t drop_suppressed;

    size_t link_buffer, shared_slack;
    double stall_timeout;
    struct event *stall_timer;
    size_t pace;               /* min(link_buffer, WORKER_PACE) with pacing, else link_buffer: the
                                  worker links' own bound */
    bool pacing;               /* on unless [limits] pacing = false or PACE_ENV is "0" */
    struct cj_link *paced_on;  /* the worker the upstream is paused for (pacing), or NULL */
    uint64_t inflight_seq;     /* last struct inflight.seq given */

    struct cj_router_counters c;
};

static int originate(struct cj_router *r, struct cj_hb *hb, const struct cj_hdr_msg *m, struct evbuffer *payload,
                     bool bulk, bool stamp, struct cj_err *err);
static void local_dispatch(struct cj_router *r, struct cj_msg *m);

/* ---- helpers -------------------------------------------------------------------- */

static double rand01(struct cj_router *r)
{
    r->rng ^= r->rng << 13;   /* xorshift64: jitter only, not security */
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return (double)(r->rng >> 11) / 9007199254740992.0;
}

static struct rlink *rl(const struct cj_link *l) { return cj_link_data(l); }

static bool is_upstream(const struct cj_link *l) { return l && rl(l) && rl(l)->role == ROLE_UPSTREAM; }

static void rlink_free(struct rlink *d)
{
    if (!d) return;
    free(d->inflight);
    free(d);
}

static bool upstream_slack(struct cj_router *r, struct cj_link *src, struct cj_link *dst, double now);
static void unpace(struct cj_router *r, const char *why);
static void upstream_sent(struct cj_router *r, struct cj_link *dst, struct cj_link *src);
static void drop_log(struct cj_router *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void drop_log(struct cj_router *r, const char *fmt, ...)
{
    double now = cj_now();
    if (now - r->drop_window >= DROP_LOG_WINDOW) {
        if (r->drop_suppressed)
            cj_log_warning("router %s: %llu more dropped-message lines suppressed", r->me,
                           (unsigned long long)r->drop_suppressed);
        r->drop_window = now;
        r->drop_lines = 0;
        r->drop_suppressed = 0;
    }
    if (r->drop_lines++ >= DROP_LOG_BURST) {
        r->drop_suppressed++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    cj_vlog(CJ_LOG_WARNING, fmt, ap);
    va_end(ap);
}

static int add_link(struct cj_router *r, struct cj_link *l)
{
    if (r->n_links == r->cap_links) {
        size_t cap = r->cap_links ? r->cap_links * 2 : 8;
        struct cj_link **n = realloc(r->links, cap * sizeof *n);
        if (!n) return -1;
        r->links = n;
        r->cap_links = cap;
    }
    r->links[r->n_links++] = l;
    return 0;
}

static void remove_link(struct cj_router *r, struct cj_link *l)
{
    for (size_t i = 0; i < r->n_links; i++)
        if (r->links[i] == l) {
            r->links[i] = r->links[--r->n_links];
            return;
        }
}

/* ---- routing table ---------------------------------------------------------------- */

struct cj_link *cj_router_child(const struct cj_router *r, const char *fqcn)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct rlink *d = rl(r->links[i]);
        if (d && d->role == ROLE_WORKER && d->up && !strcmp(d->fqcn, fqcn)) return r->links[i];
    }
    return NULL;
}

size_t cj_router_children(const struct cj_router *r, struct cj_link **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_links; i++) {
        struct rlink *d = rl(r->links[i]);
        if (!d || d->role != ROLE_WORKER || !d->up) continue;
        if (n < max) out[n] = r->links[i];
        n++;
    }
    return n;
}

struct cj_link *cj_router_upstream(const struct cj_router *r)
{
    return r->up_state == CJ_UP_UP ? r->up_link : NULL;
}

/* cellnet.md §6: me -> none; under me -> the child me.<leaf> (longest
 * connected prefix: only direct children connect); else the upstream. */
struct cj_link *cj_router_next_hop(const struct cj_router *r, const char *dest, const char **why)
{
    static __thread char reason[CJ_FQCN_MAX + 64];
    const char *dummy;
    if (!why) why = &dummy;
    if (!strcmp(dest, r->me)) {
        *why = "the destination is this cell";
        return NULL;
    }
    if (cj_fqcn_is_ancestor(r->me, dest)) {
        size_t ml = strlen(r->me);
        const char *dot = strchr(dest + ml + 1, '.');
        size_t cl = dot ? (size_t)(dot - dest) : strlen(dest);
        char child[CJ_FQCN_MAX + 1];
        if (cl > CJ_FQCN_MAX) cl = CJ_FQCN_MAX;
        memcpy(child, dest, cl);
        child[cl] = '\0';
        struct cj_link *l = cj_router_child(r, child);
        if (!l) {
            snprintf(reason, sizeof reason, "worker %s is not connected", child);
            *why = reason;
        }
        return l;
    }
    struct cj_link *up = cj_router_upstream(r);
    if (!up) *why = "the upstream is not connected";
    return up;
}

/* ---- unroutable: RETURN, forwarder notice, drop ------------------------------------------ */

static void send_return(struct cj_router *r, const struct cj_msg *m, char *note, size_t n)
{
    msgpack_sbuffer sb;
    struct cj_err err;
    msgpack_sbuffer_init(&sb);
    struct cj_link *back = m->from;
    if (cj_link_get_state(back) != CJ_LINK_UP) {
        snprintf(note, n, "; no RETURN (the link it came from is down)");
    } else if (cj_hdr_build_return(&m->hdr, r->me, cj_link_peer(back), cj_msg_now(), &sb, &err) < 0) {
        snprintf(note, n, "; no RETURN (%s)", err.msg);
    } else if (cj_link_send(back, (const uint8_t *)sb.data, sb.size, NULL, true) < 0) {
        snprintf(note, n, "; RETURN could not be queued");
    } else {
        r->c.returns_sent++;
        r->c.sent_msgs++;
        snprintf(note, n, "; RETURN sent to %s", cj_link_peer(back));
    }
    msgpack_sbuffer_destroy(&sb);
}

/* What a forwarder error notice says about the stream it fails. */
struct notice {
    const char *origin;        /* the stream's cn__origin: where the notice goes */
    const char *dest;          /* the stream's cn__destination (sm__fd) */
    const char *ch, *tp, *ri;  /* NULL: absent */
    uint64_t sm_id;
    bool sm_id_neg;
};

/* streaming.md §6, forwarder error row: sm__em is "stream forwarding to <D>
 * failed: <failure>"; sm__et StreamTargetUnreachable or StreamError. */
static int send_notice(struct cj_router *r, const struct notice *n, const char *failure, bool unreachable,
                       struct cj_err *err)
{
    struct cj_hb hb;
    char em[CJ_FQCN_MAX + 320];
    cj_hb_init(&hb);
    if (n->sm_id_neg) cj_hb_int(&hb, "sm__id", (int64_t)n->sm_id);
    else cj_hb_uint(&hb, "sm__id", n->sm_id);
    cj_hb_int(&hb, "sm__dt", CJ_SM_ERROR);
    snprintf(em, sizeof em, "stream forwarding to %s failed: %.280s", n->dest, failure);
    cj_hb_str(&hb, "sm__em", em);
    cj_hb_str(&hb, "sm__et", unreachable ? "StreamTargetUnreachable" : "StreamError");
    cj_hb_str(&hb, "sm__fd", n->dest);
    if (n->ch) cj_hb_str(&hb, "sm__ch", n->ch);
    if (n->tp) cj_hb_str(&hb, "sm__tp", n->tp);
    if (n->ri) cj_hb_str(&hb, "sm__ri", n->ri);
    struct cj_hdr_msg hm = {
        .type = CJ_MSG_REQ, .destination = n->origin, .channel = "sm__STREAM", .topic = "sm__ERROR",
        .optional = true, .payload_encoding = "none", .payload_len = 0,
    };
    if (originate(r, &hb, &hm, NULL, false, true, err) < 0) return -1;
    r->c.fwd_errors_sent++;
    return 0;
}

static void send_forward_error(struct cj_router *r, const struct cj_msg *m, const char *rc, char *note, size_t n)
{
    const struct cj_hdr *h = &m->hdr;
    struct cj_err err;
    struct notice nt = {
        .origin = h->origin, .dest = h->destination, .sm_id = h->sm_id, .sm_id_neg = h->sm_id_neg,
        .ch = cj_hdr_has(h, CJ_HK_SM_CH) ? h->sm_ch : NULL, .tp = cj_hdr_has(h, CJ_HK_SM_TP) ? h->sm_tp : NULL,
        .ri = cj_hdr_has(h, CJ_HK_SM_RI) ? h->sm_ri : NULL,
    };
    if (send_notice(r, &nt, rc, !strcmp(rc, "target_unreachable"), &err) < 0)
        snprintf(note, n, "; no sm__ERROR notice (%s)", err.msg);
    else
        snprintf(note, n, "; sm__ERROR notice sent to %s", h->origin);
}

/* ---- worker requests in flight through the upstream (see router.h) ------------------------- */

static bool toward_upstream(const struct cj_router *r, const char *dest)
{
    return strcmp(dest, r->me) != 0 && !cj_fqcn_is_ancestor(r->me, dest);
}

/* The first chunk of a request stream (streaming.md §7: sm__ri, not a reply);
 * a reliable sender's retransmission of it is told apart in inflight_track. */
static bool is_request_start(const struct cj_hdr *h)
{
    return cj_hdr_has(h, CJ_HK_SM_RI) && cj_hdr_has(h, CJ_HK_SM_ID) && !strcmp(h->channel, "sm__STREAM") &&
           !strcmp(h->topic, "sm__DATA") && strcmp(h->sm_ch, "return_only") != 0 &&
           !(cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR) && (!cj_hdr_has(h, CJ_HK_SM_SQ) || h->sm_sq == 0);
}

/* A message toward the requester that settles the request with its sm__ri:
 * the reply's final chunk, or an error notice. */
static bool ends_request(const struct cj_hdr *h)
{
    if (!cj_hdr_has(h, CJ_HK_SM_RI) || strcmp(h->channel, "sm__STREAM") != 0) return false;
    if ((cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR) || !strcmp(h->topic, "sm__ERROR") ||
        (!strcmp(h->topic, "sm__ACK") && cj_hdr_has(h, CJ_HK_SM_EM)))
        return true;
    return !strcmp(h->topic, "sm__DATA") && !strcmp(h->sm_ch, "return_only") && cj_hdr_has(h, CJ_HK_SM_DT) &&
           h->sm_dt == CJ_SM_FINAL;
}

static uint16_t pack_text(struct inflight *f, size_t *at, const char *s)
{
    size_t n = strlen(s) + 1;
    uint16_t off = (uint16_t)*at;
    memcpy(f->text + *at, s, n);
    *at += n;
    return off;
}

/* Remembers the request h (its first chunk, forwarded from worker link l
 * toward the upstream), once per stream; at the bound the oldest is forgotten. */
static void inflight_track(struct cj_router *r, struct cj_link *l, const struct cj_hdr *h)
{
    struct rlink *d = rl(l);
    if (!d || d->role != ROLE_WORKER) return;
    bool has_ch = cj_hdr_has(h, CJ_HK_SM_CH), has_tp = cj_hdr_has(h, CJ_HK_SM_TP);
    size_t need = strlen(h->sm_ri) + strlen(h->destination) + strlen(h->origin) + 3 +
                  (has_ch ? strlen(h->sm_ch) + 1 : 0) + (has_tp ? strlen(h->sm_tp) + 1 : 0);
    if (need > INFLIGHT_TEXT) {
        r->c.inflight_untracked++;
        cj_log_debug("router %s: request %s of %s not remembered: its names are too long", r->me, h->sm_ri, d->fqcn);
        return;
    }
    if (!d->inflight && !(d->inflight = calloc(CJ_ROUTER_INFLIGHT_MAX, sizeof *d->inflight))) {
        r->c.inflight_untracked++;
        return;
    }
    struct inflight *slot = NULL, *oldest = NULL;
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &d->inflight[i];
        if (!f->seq) {
            if (!slot) slot = f;
            continue;
        }
        if (f->sm_id == h->sm_id && f->sm_id_neg == h->sm_id_neg && !strcmp(f->text, h->sm_ri)) return;   /* again */
        if (!oldest || f->seq < oldest->seq) oldest = f;
    }
    if (!slot) {
        slot = oldest;
        d->n_inflight--;
        r->c.inflight_untracked++;
        cj_log_debug("router %s: %s has %d requests in flight upstream: forgot the oldest (%s)", r->me, d->fqcn,
                     CJ_ROUTER_INFLIGHT_MAX, slot->text);
    }
    size_t at = 0;
    pack_text(slot, &at, h->sm_ri);
    slot->dest = pack_text(slot, &at, h->destination);
    slot->origin = pack_text(slot, &at, h->origin);
    slot->has_ch = has_ch;
    slot->has_tp = has_tp;
    if (has_ch) slot->ch = pack_text(slot, &at, h->sm_ch);
    if (has_tp) slot->tp = pack_text(slot, &at, h->sm_tp);
    slot->sm_id = h->sm_id;
    slot->sm_id_neg = h->sm_id_neg;
    slot->seq = ++r->inflight_seq;
    d->n_inflight++;
}

static void inflight_forget(struct rlink *d, const char *ri)
{
    for (unsigned i = 0; d->n_inflight && i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &d->inflight[i];
        if (f->seq && !strcmp(f->text, ri)) {
            f->seq = 0;
            d->n_inflight--;
            return;
        }
    }
}

/* Fails every request remembered for worker link l with a forwarder error
 * notice and forgets them; one log line.  The table is taken off the link
 * first: a send that closes l (out of memory) frees its rlink. */
static void inflight_fail_link(struct cj_router *r, struct cj_link *l, const char *failure, bool rate_limited)
{
    struct rlink *d = rl(l);
    if (!d || !d->n_inflight) return;
    struct inflight *t = d->inflight;
    unsigned n = d->n_inflight, sent = 0;
    char who[CJ_FQCN_MAX + 1], first_err[256] = "";
    snprintf(who, sizeof who, "%s", d->fqcn);
    d->inflight = NULL;
    d->n_inflight = 0;
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &t[i];
        if (!f->seq) continue;
        struct notice nt = {
            .origin = f->text + f->origin, .dest = f->text + f->dest, .ri = f->text,
            .ch = f->has_ch ? f->text + f->ch : NULL, .tp = f->has_tp ? f->text + f->tp : NULL,
            .sm_id = f->sm_id, .sm_id_neg = f->sm_id_neg,
        };
        struct cj_err err;
        if (send_notice(r, &nt, failure, false, &err) == 0) sent++;
        else if (!first_err[0]) snprintf(first_err, sizeof first_err, "; %u not sent: %s", n - sent, err.msg);
        f->seq = 0;
    }
    r->c.inflight_failed += sent;
    d = rl(l);
    if (d && !d->inflight) d->inflight = t;   /* reused, all slots free */
    else free(t);
    if (rate_limited)
        drop_log(r, "router %s: failed %u request%s of %s in flight through the upstream with sm__ERROR notices: %s%s",
                 r->me, sent, sent == 1 ? "" : "s", who, failure, first_err);
    else
        cj_log_warning("router %s: failed %u request%s of %s in flight through the upstream with sm__ERROR notices: "
                       "%s%s", r->me, sent, sent == 1 ? "" : "s", who, failure, first_err);
}

/* Every worker's remembered requests.  Links may go away while notices are
 * sent (their slot in r->links is then reused): look again after each. */
static void inflight_fail_all(struct cj_router *r, const char *failure, bool rate_limited)
{
    for (;;) {
        struct cj_link *l = NULL;
        for (size_t i = 0; i < r->n_links && !l; i++)
            if (rl(r->links[i]) && rl(r->links[i])->n_inflight) l = r->links[i];
        if (!l) return;
        inflight_fail_link(r, l, failure, rate_limited);
    }
}

static bool is_optional_chunk(const struct cj_hdr *h)
{
    return h->optional && !strcmp(h->channel, "sm__STREAM") && !strcmp(h->topic, "sm__DATA") &&
           cj_hdr_has(h, CJ_HK_SM_ID);
}

/* cellnet.md §6 step 5.  Takes m. */
static void unroutable(struct cj_router *r, struct cj_msg *m, uint64_t *counter, const char *rc, const char *why)
{
    const struct cj_hdr *h = &m->hdr;
    char note[512] = "";
    r->c.drops++;
    if (counter) (*counter)++;
    if (m->from) {
        if (h->msg_type == CJ_MSG_REQ && h->reply_expected) send_return(r, m, note, sizeof note);
        else if (is_optional_chunk(h)) send_forward_error(r, m, rc, note, sizeof note);
        /* A worker's message toward the upstream while it is not connected
         * (an ACK of a reply that stopped, a new request): its requests in
         * flight there will never be answered. */
        struct rlink *d = rl(m->from);
        if (d && d->role == ROLE_WORKER && toward_upstream(r, h->destination) && !cj_router_upstream(r)) {
            if (is_request_start(h) && !is_optional_chunk(h)) inflight_track(r, m->from, h);
            inflight_fail_all(r, "the upstream is not connected", true);
        }
    }
    drop_log(r, "router %s: cannot deliver %s origin=%s destination=%s channel=%s topic=%s (from %s): %s%s", r->me,
             cj_msg_type_name(h->msg_type), h->origin, h->destination, h->channel, h->topic,
             m->from ? cj_link_name(m->from) : "this cell", why, note);
    cj_msg_free(m);
}

/* ---- forwarding -------------------------------------------------------------------------- */

static void forward(struct cj_router *r, struct cj_msg *m)
{
    const char *why = NULL;
    char reason[2 * CJ_FQCN_MAX + 96];
    struct cj_link *dst = cj_router_next_hop(r, m->hdr.destination, &why);
    if (!dst) {
        unroutable(r, m, &r->c.drops_unroutable, "target_unreachable", why);
        return;
    }
    const char *hop = cj_link_peer(dst);
    if (cj_hdr_loop_refused(&m->hdr, hop)) {
        snprintf(reason, sizeof reason, "loop: next hop %s is already on cn__route", hop);
        unroutable(r, m, &r->c.drops_loop, "target_unreachable", reason);
        return;
    }
    if (dst == m->from && strcmp(hop, m->hdr.destination)) {   /* would bounce to a neighbour that is not D */
        snprintf(reason, sizeof reason, "loop: next hop %s is where it came from", hop);
        unroutable(r, m, &r->c.drops_loop, "target_unreachable", reason);
        return;
    }
    msgpack_sbuffer sb;
    struct cj_err err;
    msgpack_sbuffer_init(&sb);
    double now = cj_msg_now();
    if (cj_hdr_forward(m->hblk, m->hlen, r->me, hop, now, now, &sb, &err) < 0) {
        msgpack_sbuffer_destroy(&sb);
        snprintf(reason, sizeof reason, "header rewrite failed: %s", err.msg);
        unroutable(r, m, err.code == CJ_E_LIMIT ? &r->c.drops_too_big : NULL,
                   err.code == CJ_E_LIMIT ? "msg_too_big" : "comm_error", reason);
        return;
    }
    size_t bytes = sb.size + evbuffer_get_length(m->payload);
    /* The same payload evbuffer's chains move on: no copy. */
    if (cj_link_send(dst, (const uint8_t *)sb.data, sb.size, m->payload, false) < 0) {
        msgpack_sbuffer_destroy(&sb);
        unroutable(r, m, &r->c.drops_unroutable, "comm_error", "the next link refused the frame");
        return;
    }
    msgpack_sbuffer_destroy(&sb);
    struct cj_link *src = m->from;
    now = cj_now();   /* from here on: the pacing clock */
    if (is_upstream(dst)) {
        r->c.up_msgs++;
        r->c.up_bytes += bytes;
        if (src && is_request_start(&m->hdr)) inflight_track(r, src, &m->hdr);
        upstream_sent(r, dst, src);
    } else {
        r->c.down_msgs++;
        r->c.down_bytes += bytes;
        struct rlink *d = rl(dst);
        if (d) {
            if (!d->fwd || now - d->active_at > PACE_STALL) d->fed_at = now;   /* a new burst */
            d->fwd += bytes;
            d->active_at = now;
            if (d->n_inflight && ends_request(&m->hdr)) inflight_forget(d, m->hdr.sm_ri);
        }
    }
    if (src && rl(src) && !is_upstream(src)) rl(src)->active_at = now;
    cj_msg_free(m);
    if (src && !upstream_slack(r, src, dst, now) && cj_link_throttle(src, dst)) r->c.throttles++;
}

/* Pacing.  A worker link's own bound (link_buffer of its cj_link) is r->pace,
 * a few MiB.  When the upstream feeds a worker past it:
 *   - if the worker is reading (it drained a pace's worth within PACE_STALL)
 *     and no other worker may be waiting on the upstream (none had traffic
 *     within PACE_ACTIVE while holding less than half a pace), the upstream
 *     pauses until the worker has drained to half a pace: the sender's window
 *     then waits in the server's socket, not in the relay, so the relay's
 *     memory does not grow with the window or the model;
 *   - otherwise the worker's queue may grow (the upstream's slack) so that a
 *     worker that stops reading, or a slow one, does not stall the others.
 * A pace is lifted as soon as anything else needs the upstream: another
 * worker (or this cell) sends upstream, another worker drains, the paced
 * worker goes away or stops reading (check_stalls). */
static bool worker_reading(struct cj_router *r, struct cj_link *l, double now)
{
    struct rlink *d = rl(l);
    size_t q = cj_link_queued(l);
    uint64_t drained = d->fwd > q ? d->fwd - q : 0;
    if (drained >= d->drain_mark + r->pace) {
        d->drain_mark = drained;
        d->read_at = now;
    }
    /* A worker that has not drained a pace yet gets PACE_STALL from its first
     * bytes to do so: otherwise a worker slow to start (a loaded machine)
     * would take up to a whole window into the relay before pacing began. */
    double since = d->read_at > 0 ? d->read_at : d->fed_at;
    return since > 0 && now - since < PACE_STALL;
}

static bool other_worker_waiting(struct cj_router *r, struct cj_link *dst, double now)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct cj_link *l = r->links[i];
        struct rlink *d = rl(l);
        if (l == dst || !d || d->role != ROLE_WORKER || !d->up) continue;
        if (now - d->active_at < PACE_ACTIVE && cj_link_queued(l) < r->pace / 2) return true;
    }
    return false;
}

static void pace(struct cj_router *r, struct cj_link *up, struct cj_link *dst)
{
    if (r->paced_on || !cj_link_reading(up)) return;
    r->paced_on = dst;
    r->c.throttles++;
    cj_log_debug("router %s: upstream paced for %s (%zu bytes queued toward it)", r->me, rl(dst)->fqcn,
                 cj_link_queued(dst));
    cj_link_pause_reading(up, CJ_LINK_PAUSE_OWNER);
}

static void unpace(struct cj_router *r, const char *why)
{
    if (!r->paced_on) return;
    cj_log_debug("router %s: upstream pace for %s lifted: %s (%zu bytes queued toward it)", r->me,
                 rl(r->paced_on) ? rl(r->paced_on)->fqcn : "?", why, cj_link_queued(r->paced_on));
    r->paced_on = NULL;
    if (r->up_link) cj_link_resume_reading(r->up_link, CJ_LINK_PAUSE_OWNER);
}

/* Something went out on the upstream link dst (src: the link it came from,
 * NULL when this cell originated it): unless it is the paced worker's own
 * traffic (its ACKs), someone may wait for an answer: lift the pace. */
static void upstream_sent(struct cj_router *r, struct cj_link *dst, struct cj_link *src)
{
    if (r->paced_on && is_upstream(dst) && src != r->paced_on) unpace(r, "traffic toward the upstream");
}

/* A worker link drained below half its bound after being over it. */
static void worker_drained(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    if (!r->paced_on || !d) return;
    if (l == r->paced_on || cj_now() - d->active_at < PACE_ACTIVE) unpace(r, l == r->paced_on ? "it drained" : "another worker drained");
}

/* A worker that stops reading must not stall the shared upstream, and with it
 * every other worker.  Unless pacing applies (above), its queue may grow past
 * its bound, up to link_buffer + shared_slack (one sender window: a sender
 * that respects its window cannot fill it), before the upstream pauses; past
 * link_buffer the worker counts as stalled, and a stalled worker that drains
 * nothing for stall_timeout is closed (check_stalls).  True: no throttle. */
static bool upstream_slack(struct cj_router *r, struct cj_link *src, struct cj_link *dst, double now)
{
    if (!is_upstream(src) || is_upstream(dst) || !rl(dst) || !cj_link_over(dst)) return false;
    size_t q = cj_link_queued(dst);
    if (q > r->link_buffer + r->shared_slack) return false;
    if (r->pacing && worker_reading(r, dst, now) && !other_worker_waiting(r, dst, now)) {
        pace(r, src, dst);
        return true;   /* paused by the pace, not by a throttle */
    }
    if (q > r->link_buffer) r->c.slack_used++;
    return true;
}

/* Holds.  A consumer of this cell's own streams that is behind (the spool,
 * waiting for its disk) stops the link its source's bytes arrive on: they
 * then wait in the peer's socket and window, not here.  A link stays paused
 * at most HOLD_LAPSE s at a time: past that, the stream's window (its ACKs
 * wait for the consumer) bounds what arrives, and everything else on the
 * link (heartbeats, other streams) flows again. */
#define HOLD_LAPSE 2.0

/* A worker's heartbeats wait while its link is held: half its heartbeat
 * interval at most, so that a held worker never looks silent. */
static double hold_lapse(const struct cj_router *r, struct cj_link *l)
{
    double half = r->worker_cfg.heartbeat_interval / 2;
    return is_upstream(l) || half <= 0 || half > HOLD_LAPSE ? HOLD_LAPSE : half;
}

static void hold_lift(struct cj_router *r, struct cj_link *l, bool lapsed)
{
    struct rlink *d = rl(l);
    if (!d || d->hold_since == 0) return;
    if (lapsed) {
        r->c.holds_lapsed++;
        cj_log_debug("router %s: hold on %s lapsed after %.1f s", r->me, d->fqcn, cj_now() - d->hold_since);
    }
    d->hold_since = 0;
    cj_link_resume_reading(l, CJ_LINK_PAUSE_HOLD);
}

int cj_router_hold(struct cj_router *r, const char *source, bool on)
{
    const char *why;
    struct cj_link *l = source ? cj_router_next_hop(r, source, &why) : NULL;
    struct rlink *d = l ? rl(l) : NULL;
    if (!d || !d->up) return -1;
    if (!on) {
        if (d->holds && --d->holds == 0) hold_lift(r, l, false);
        return 0;
    }
    if (d->holds++ == 0) {
        d->hold_since = cj_now();
        r->c.holds++;
        cj_link_pause_reading(l, CJ_LINK_PAUSE_HOLD);
    }
    return 0;
}

static void check_holds(struct cj_router *r, double now)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct rlink *d = rl(r->links[i]);
        if (d && d->hold_since > 0 && now - d->hold_since >= hold_lapse(r, r->links[i])) hold_lift(r, r->links[i], true);
    }
}

static void check_stalls(evutil_socket_t fd, short what, void *arg)
{
    struct cj_router *r = arg;
    double now = cj_now();
    if (r->paced_on && !worker_reading(r, r->paced_on, now)) {   /* it stopped reading */
        cj_log_info("router %s: worker %s drained nothing for %.0f s: the upstream is no longer paced for it", r->me,
                    rl(r->paced_on) ? rl(r->paced_on)->fqcn : "?", PACE_STALL);
        unpace(r, "it stopped reading");
    }
    check_holds(r, now);
    for (size_t i = 0; i < r->n_links; i++) {
        struct cj_link *l = r->links[i];
        struct rlink *d = rl(l);
        if (!d || d->role != ROLE_WORKER || !d->up) continue;
        size_t q = cj_link_queued(l);
        bool over = q > r->link_buffer;
        if (!over || q < d->stall_queued) {   /* under the bound, or draining */
            d->stall_since = over ? now : 0;
            d->stall_queued = q;
            continue;
        }
        if (d->stall_since == 0) { d->stall_since = now; d->stall_queued = q; continue; }
        d->stall_queued = q;
        if (now - d->stall_since < r->stall_timeout) continue;
        r->c.stalled_closed++;
        cj_log_warning("router %s: worker %s is not reading: %zu bytes queued toward it, none drained for %.0f s; "
                       "closing its link so the other workers' traffic keeps flowing", r->me, d->fqcn, q,
                       now - d->stall_since);
        d->stall_since = 0;
        cj_link_close(l, "not reading for %.0f s with %zu bytes queued", r->stall_timeout, q);
    }
}

/* cellnet.md §6 anti-spoofing: a worker speaks for itself and its
 * descendants; nothing from upstream may claim to be me or under me. */
static bool spoofed(struct cj_router *r, const struct cj_msg *m, const char **why)
{
    const char *o = m->hdr.origin;
    if (!m->from) return false;
    struct rlink *d = rl(m->from);
    if (!d) return false;
    if (d->role == ROLE_UPSTREAM) {
        *why = "origin claims to be this cell or under it, but came from the upstream";
        return !strcmp(o, r->me) || cj_fqcn_is_ancestor(r->me, o);
    }
    *why = "origin is neither the worker nor one of its descendants";
    return strcmp(o, d->fqcn) && !cj_fqcn_is_ancestor(d->fqcn, o);
}

void cj_router_input(struct cj_router *r, struct cj_msg *m)
{
    const char *why = NULL;
    if (spoofed(r, m, &why)) {
        r->c.drops++;
        r->c.drops_spoof++;
        drop_log(r, "router %s: dropped spoofed %s origin=%s destination=%s channel=%s topic=%s from %s %s: %s",
                 r->me, cj_msg_type_name(m->hdr.msg_type), m->hdr.origin, m->hdr.destination, m->hdr.channel,
                 m->hdr.topic, cj_link_name(m->from), cj_link_peer(m->from), why);
        cj_msg_free(m);
        return;
    }
    if (!strcmp(m->hdr.destination, r->me)) local_dispatch(r, m);
    else forward(r, m);
}

/* ---- sending what this cell originates ------------------------------------------------- */

static int send_built(struct cj_router *r, struct cj_msg *msg, bool bulk, struct cj_err *err)
{
    if (!strcmp(msg->hdr.destination, r->me)) {
        r->c.sent_msgs++;
        msg->from = NULL;
        local_dispatch(r, msg);
        return 0;
    }
    const char *why = NULL;
    struct cj_link *dst = cj_router_next_hop(r, msg->hdr.destination, &why);
    if (!dst) {
        cj_fail(err, CJ_E_INVALID, 0, "cannot send to %s: %s", msg->hdr.destination, why);
        cj_msg_free(msg);
        return -1;
    }
    if (cj_link_send_msg(dst, msg, !bulk) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "cannot send to %s: link %s refused the frame", msg->hdr.destination,
                cj_link_name(dst));
        cj_msg_free(msg);
        return -1;
    }
    r->c.sent_msgs++;
    upstream_sent(r, dst, NULL);
    return 0;
}

int cj_router_send(struct cj_router *r, struct cj_msg *msg, bool bulk, struct cj_err *err)
{
    return send_built(r, msg, bulk, err);
}

const char *cj_router_next_hop_name(const struct cj_router *r, const char *dest)
{
    struct cj_link *l = cj_router_next_hop(r, dest, NULL);
    return l ? cj_link_peer(l) : NULL;
}

int cj_router_send_block(struct cj_router *r, const char *destination, const uint8_t *hblk, size_t hlen,
                         struct evbuffer *payload, bool control, struct cj_err *err)
{
    const char *why = NULL;
    struct cj_link *dst = cj_router_next_hop(r, destination, &why);
    if (!dst) return cj_fail(err, CJ_E_INVALID, 0, "cannot send to %s: %s", destination, why);
    if (cj_link_send(dst, hblk, hlen, payload, control) < 0)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot send to %s: link %s refused the frame", destination,
                       cj_link_name(dst));
    r->c.sent_msgs++;
    upstream_sent(r, dst, NULL);
    return 0;
}

static int originate(struct cj_router *r, struct cj_hb *hb, const struct cj_hdr_msg *m, struct evbuffer *payload,
                     bool bulk, bool stamp, struct cj_err *err)
{
    struct cj_hdr_msg mm = *m;
    const char *why = NULL;
    mm.me = r->me;
    if (!strcmp(m->destination, r->me)) {
        mm.to = r->me;
    } else {
        struct cj_link *dst = cj_router_next_hop(r, m->destination, &why);
        if (!dst) {
            cj_hb_destroy(hb);
            return cj_fail(err, CJ_E_INVALID, 0, "cannot send to %s: %s", m->destination, why);
        }
        mm.to = cj_link_peer(dst);
    }
    double now = cj_msg_now();
    if (mm.route_time == 0) mm.route_time = now;
    if (mm.send_time == 0) mm.send_time = now;
    if (stamp && r->stamp) r->stamp(r, hb, m->destination, r->stamp_ctx);
    struct cj_msg *msg = cj_msg_build(hb, &mm, payload, err);
    cj_hb_destroy(hb);
    if (!msg) return -1;
    return send_built(r, msg, bulk, err);
}

int cj_router_originate(struct cj_router *r, struct cj_hb *hb, const struct cj_hdr_msg *m,
                        struct evbuffer *payload, bool bulk, struct cj_err *err)
{
    return originate(r, hb, m, payload, bulk, false, err);
}

int cj_router_reply(struct cj_router *r, const struct cj_msg *req, const char *return_code, const char *error,
                    struct evbuffer *payload, const char *payload_encoding, struct cj_err *err)
{
    const struct cj_hdr *h = &req->hdr;
    size_t plen = payload ? evbuffer_get_length(payload) : 0;
    struct cj_hb hb;
    cj_hb_init(&hb);
    if (error) cj_hb_str(&hb, "cn__error", error);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REPLY, .destination = h->origin, .channel = h->channel, .topic = h->topic,
        .req_id = h->req_id, .return_code = return_code ? return_code : "ok",
        .optional = h->optional, .secure = h->secure,
        .payload_encoding = payload_encoding ? payload_encoding : plen ? "bytes" : "none",
        .payload_len = (int64_t)plen,
    };
    return originate(r, &hb, &m, payload, false, true, err);
}

/* ---- local dispatch ------------------------------------------------------------------------ */

static struct handler *find_handler(struct cj_router *r, const char *channel, const char *topic)
{
    for (size_t i = 0; i < r->n_handlers; i++) {
        struct handler *h = &r->handlers[i];
        bool ch = channel ? (h->channel && !strcmp(h->channel, channel)) : !h->channel;
        bool tp = topic ? (h->topic && !strcmp(h->topic, topic)) : !h->topic;
        if (ch && tp) return h;
    }
    return NULL;
}

static void reply_or_log(struct cj_router *r, struct cj_msg *m, const char *rc, const char *error)
{
    struct cj_err err;
    if (cj_router_reply(r, m, rc, error, NULL, NULL, &err) < 0)
        cj_log_warning("router %s: cannot reply to %s %s/%s from %s: %s", r->me, cj_msg_type_name(m->hdr.msg_type),
                       m->hdr.channel, m->hdr.topic, m->hdr.origin, err.msg);
}

static void local_dispatch(struct cj_router *r, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    bool wants_reply = h->msg_type == CJ_MSG_REQ && h->reply_expected;
    r->c.local_msgs++;
    if (h->secure) {   /* cellnet.md §10: the relay does not decrypt */
        cj_log_warning("router %s: secure message %s/%s from %s not supported by the relay%s", r->me, h->channel,
                       h->topic, h->origin, wants_reply ? "; answering process_exception" : "; dropped");
        if (wants_reply) reply_or_log(r, m, "process_exception", "secure messages are not supported by the relay");
        else r->c.drops++;
        cj_msg_free(m);
        return;
    }
    struct handler *hd = find_handler(r, h->channel, h->topic);
    if (!hd) hd = find_handler(r, h->channel, NULL);
    if (!hd) hd = find_handler(r, NULL, NULL);
    if (hd) {
        hd->fn(r, m, hd->ctx);
        return;
    }
    if (!strcmp(h->channel, "cellnet.channel") && !strcmp(h->topic, "bye")) {
        cj_log_info("router %s: %s says bye", r->me, h->origin);
        if (wants_reply) reply_or_log(r, m, "ok", NULL);
    } else if (wants_reply) {
        cj_log_info("router %s: no handler for %s/%s (from %s): answering process_exception", r->me, h->channel,
                    h->topic, h->origin);
        reply_or_log(r, m, "process_exception", "no callback");
    } else {
        r->c.drops++;
        cj_log_debug("router %s: no handler for %s %s/%s from %s: dropped", r->me, cj_msg_type_name(h->msg_type),
                     h->channel, h->topic, h->origin);
    }
    cj_msg_free(m);
}

int cj_router_handle(struct cj_router *r, const char *channel, const char *topic, cj_router_handler_fn fn,
                     void *ctx)
{
    if (!channel) topic = NULL;
    struct handler *h = find_handler(r, channel, topic);
    if (h && !fn) {                           /* remove */
        free(h->channel);
        free(h->topic);
        *h = r->handlers[--r->n_handlers];
        return 0;
    }
    if (!fn) return 0;
    if (h) {
        h->fn = fn;
        h->ctx = ctx;
        return 0;
    }
    struct handler *n = realloc(r->handlers, (r->n_handlers + 1) * sizeof *n);
    if (!n) return -1;
    r->handlers = n;
    h = &n[r->n_handlers];
    h->channel = channel ? strdup(channel) : NULL;
    h->topic = topic ? strdup(topic) : NULL;
    if ((channel && !h->channel) || (topic && !h->topic)) {
        free(h->channel);
        free(h->topic);
        return -1;
    }
    h->fn = fn;
    h->ctx = ctx;
    r->n_handlers++;
    return 0;
}

void cj_router_set_stamp(struct cj_router *r, cj_router_stamp_fn fn, void *ctx)
{
    r->stamp = fn;
    r->stamp_ctx = ctx;
}

void cj_router_set_events(struct cj_router *r, const struct cj_router_events *ev, void *ctx)
{
    if (ev) r->ev = *ev;
    else memset(&r->ev, 0, sizeof r->ev);
    r->ev_ctx = ctx;
}

/* ---- worker links ---------------------------------------------------------------------------- */

static int worker_hello(struct cj_link *l, const char *peer, char *why, size_t whysz, void *ctx)
{
    struct cj_router *r = ctx;
    if (!cj_fqcn_is_direct_child(r->me, peer, NULL)) {
        r->c.workers_refused++;
        snprintf(why, whysz, "'%s' is not a child of %s (expected %s.<name>)", peer, r->me, r->me);
        return -1;
    }
    /* sfm.md: a newer connection from the same name evicts the older one, so
     * that a worker can reconnect.  A worker reconnects when its connection
     * broke, and a broken local connection is seen at once on both ends, or
     * goes silent: the old link answers our PINGs no more.  A name whose link
     * is alive (heard from within two heartbeat intervals) is taken: the
     * newcomer is refused, so that a second process claiming a live worker's
     * name cannot cut it off or receive its traffic. */
    struct cj_link *old = cj_router_child(r, peer);
    if (old && old != l) {
        double idle = cj_link_rx_idle(old), live = 2 * r->worker_cfg.heartbeat_interval;
        if (idle < live) {
            r->c.workers_refused++;
            snprintf(why, whysz,
                     "'%s' is taken by a live connection (%s, heard from %.1f s ago); a new connection gets the "
                     "name once the old one has closed or gone silent for %.0f s",
                     peer, cj_link_addr(old), idle, live);
            return -1;
        }
        r->c.workers_replaced++;
        cj_link_close(old, "replaced by a newer connection from %s (%s); this one was silent for %.1f s", peer,
                      cj_link_addr(l), idle);
    }
    return 0;
}

static void worker_up(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    d->up = true;
    snprintf(d->fqcn, sizeof d->fqcn, "%s", cj_link_peer(l));
    r->c.workers_accepted++;
    if (r->ev.worker_up) r->ev.worker_up(r, d->fqcn, l, r->ev_ctx);
}

static void link_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct cj_router *r = ctx;
    if (is_upstream(l) && !r->proven) {    /* the upstream answers: the link works */
        r->proven = true;
        r->attempt = 0;
    }
    cj_router_input(r, m);
}

static void worker_down(struct cj_link *l, const char *why, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    if (r->paced_on == l) unpace(r, "it went away");
    remove_link(r, l);
    cj_link_set_data(l, NULL);
    if (d && d->up && r->ev.worker_down) r->ev.worker_down(r, d->fqcn, why, r->ev_ctx);
    rlink_free(d);   /* its requests in flight are forgotten */
}

static const struct cj_link_ops worker_ops = {
    .on_up = worker_up, .on_msg = link_msg, .on_down = worker_down, .on_hello = worker_hello,
    .on_drain = worker_drained,
};

int cj_router_accept(struct cj_router *r, evutil_socket_t fd, const char *peer_addr)
{
    struct cj_err err;
    struct rlink *d = calloc(1, sizeof *d);
    if (!d || add_link(r, NULL) < 0) {
        free(d);
        close(fd);
        cj_log_error("router %s: out of memory accepting a worker", r->me);
        return -1;
    }
    r->n_links--;                           /* slot reserved: the add below cannot fail */
    d->role = ROLE_WORKER;
    struct cj_link *l = cj_link_accept(r->base, fd, NULL, peer_addr, &r->worker_cfg, &worker_ops, r, &err);
    if (!l) {
        free(d);
        cj_log_error("router %s: cannot accept a worker connection: %s", r->me, err.msg);
        return -1;
    }
    cj_link_set_data(l, d);
    add_link(r, l);
    return 0;
}

static void on_worker_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    cj_router_accept(ctx, fd, peer);
}

int cj_router_listen(struct cj_router *r, const char *url, unsigned mode, unsigned *port, struct cj_err *err)
{
    struct cj_addr a;
    if (cj_addr_parse(url, CJ_EP_UNIX | CJ_EP_TCP, CJ_ADDR_LISTEN, &a, err) < 0) return -1;
    struct cj_listener **n = realloc(r->listeners, (r->n_listeners + 1) * sizeof *n);
    if (!n) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    r->listeners = n;
    struct cj_listener *l = cj_listener_open(r->base, &a, mode, on_worker_accept, r, err);
    if (!l) return -1;
    r->listeners[r->n_listeners++] = l;
    if (port) *port = cj_listener_port(l);
    return 0;
}

/* ---- the upstream ---------------------------------------------------------------------------- */

const char *cj_router_upstream_state_name(enum cj_upstream_state s)
{
    switch (s) {
    case CJ_UP_DISABLED: return "disabled";
    case CJ_UP_CONNECTING: return "connecting";
    case CJ_UP_UP: return "up";
    case CJ_UP_BACKOFF: return "backoff";
    }
    return "?";
}

enum cj_upstream_state cj_router_upstream_state(const struct cj_router *r) { return r->up_state; }

static void upstream_connect(struct cj_router *r);

static void upstream_up(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    d->up = true;
    snprintf(d->fqcn, sizeof d->fqcn, "%s", cj_link_peer(l));
    r->up_state = CJ_UP_UP;
    r->proven = false;
    r->up_since = cj_now();
    cj_log_info("router %s: upstream up (%s at %s)%s", r->me, d->fqcn, r->up_url,
                r->upstream_cfg.quiet ? " after retrying" : "");
    r->upstream_cfg.quiet = false;
    r->last_why[0] = '\0';
    if (r->ev.upstream_up) r->ev.upstream_up(r, d->fqcn, r->ev_ctx);
}

/* Every transition is logged once: the first failure (or a new reason) at
 * warning, repeats of the same failure only every 20 attempts; the links of
 * retries log at debug. */
static void report_retry(struct cj_router *r, const char *why, bool was_up)
{
    bool same = !was_up && !strcmp(why, r->last_why);
    if (!same || r->attempt % 20 == 0)
        cj_log_warning("router %s: upstream %s: %s; retrying every %.1f..%.1f s%s", r->me,
                       was_up ? "lost" : "unreachable", why, r->rmin, r->rmax,
                       same ? " (still failing)" : "");
    snprintf(r->last_why, sizeof r->last_why, "%s", why);
    r->upstream_cfg.quiet = true;
}

static void upstream_backoff(struct cj_router *r)
{
    double d = r->rmin;
    for (int i = 0; i < r->attempt && d < r->rmax; i++) d *= 2;
    if (d > r->rmax) d = r->rmax;
    d = d / 2 + rand01(r) * d / 2;           /* jitter: [d/2, d] */
    if (d < r->rmin) d = r->rmin;
    if (r->attempt < 64) r->attempt++;
    r->up_state = CJ_UP_BACKOFF;
    cj_log_debug("router %s: upstream reconnect in %.2f s (attempt %d)", r->me, d, r->attempt);
    struct timeval tv = {.tv_sec = (time_t)d, .tv_usec = (suseconds_t)((d - (double)(time_t)d) * 1e6)};
    event_add(r->up_timer, &tv);
}

static void upstream_down(struct cj_link *l, const char *why, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    bool was_up = d && d->up;
    remove_link(r, l);
    cj_link_set_data(l, NULL);
    free(d);
    r->up_link = NULL;
    r->paced_on = NULL;   /* the next upstream link starts reading */
    /* A link that stayed up a while was healthy: start the back-off over.
     * One the server drops right after READY keeps backing off. */
    if (was_up && cj_now() - r->up_since > 2 * r->rmax) r->attempt = 0;
    if (was_up && !r->proven && cj_link_is_tls(l))
        cj_log_warning("router %s: the server closed the link after READY before answering anything; with mtls "
                       "the usual cause is a client certificate whose CN differs from the site name '%.*s'",
                       r->me, (int)cj_fqcn_root_len(r->me), r->me);
    if (r->ev.upstream_down) r->ev.upstream_down(r, why, r->ev_ctx);
    report_retry(r, why, was_up);
    if (was_up) {   /* the replies to the workers' requests in flight will not come */
        char failure[320];
        snprintf(failure, sizeof failure, "the upstream was lost (%.250s)", why);
        inflight_fail_all(r, failure, false);
    }
    upstream_backoff(r);
}

static const struct cj_link_ops upstream_ops = {
    .on_up = upstream_up, .on_msg = link_msg, .on_down = upstream_down,
};

static void upstream_connect(struct cj_router *r)
{
    struct cj_err err;
    struct rlink *d = calloc(1, sizeof *d);
    if (!d || add_link(r, NULL) < 0) {
        free(d);
        cj_log_error("router %s: out of memory connecting upstream", r->me);
        upstream_backoff(r);
        return;
    }
    r->n_links--;                           /* slot reserved */
    d->role = ROLE_UPSTREAM;
    r->up_state = CJ_UP_CONNECTING;
    struct cj_link *l = cj_link_connect(r->base, r->dns, r->up_url, r->up_tls, &r->upstream_cfg, &upstream_ops, r,
                                        &err);
    if (!l) {
        free(d);
        cj_log_error("router %s: cannot connect upstream: %s", r->me, err.msg);
        upstream_backoff(r);
        return;
    }
    cj_link_set_data(l, d);
    add_link(r, l);
    r->up_link = l;
}

static void upstream_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_router *r = arg;
    r->c.reconnects++;
    upstream_connect(r);
}

int cj_router_upstream_start(struct cj_router *r, const struct cj_upstream_cfg *u, struct cj_err *err)
{
    struct cj_addr a;
    if (r->up_state != CJ_UP_DISABLED) return cj_fail(err, CJ_E_INVALID, 0, "the upstream is already started");
    if (cj_addr_parse(u->url, CJ_EP_NET, 0, &a, err) < 0) return -1;
    if (cj_ep_tls(a.ep.kind) != (u->tls != NULL))
        return cj_fail(err, CJ_E_INVALID, 0, "upstream %s: %s", a.text,
                       u->tls ? "TLS needs an stcp://, https:// or grpcs:// url" : "a TLS scheme needs a TLS context");
    snprintf(r->up_url, sizeof r->up_url, "%s", u->url);
    snprintf(r->up_tls_name, sizeof r->up_tls_name, "%s", u->tls_name ? u->tls_name : "");
    r->upstream_cfg.tls_name = r->up_tls_name;
    r->up_tls = u->tls;
    r->rmin = u->reconnect_min > 0 ? u->reconnect_min : 0.5;
    r->rmax = u->reconnect_max > 0 ? u->reconnect_max : 30;
    if (r->rmax < r->rmin) r->rmax = r->rmin;
    r->dns = u->dns;
    if (!r->dns && !cj_addr_is_numeric(&a)) {
        r->dns = evdns_base_new(r->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (!r->dns) return cj_fail(err, CJ_E_INVALID, 0, "cannot set up a DNS resolver for %s", a.ep.addr);
        r->own_dns = true;
    }
    r->up_timer = evtimer_new(r->base, upstream_timer, r);
    if (!r->up_timer) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    upstream_connect(r);
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------------------- */

struct cj_router *cj_router_new(struct event_base *base, const struct cj_router_cfg *cfg, struct cj_err *err)
{
    struct cj_err e2;
    if (!cfg->me || cj_fqcn_check(cfg->me, strlen(cfg->me), &e2) < 0) {
        cj_fail(err, CJ_E_INVALID, 0, "router name '%s' is not a valid FQCN", cfg->me ? cfg->me : "");
        return NULL;
    }
    struct cj_router *r = calloc(1, sizeof *r);
    if (!r) {
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
        return NULL;
    }
    r->base = base;
    snprintf(r->me, sizeof r->me, "%s", cfg->me);
    r->rng = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)r;
    if (!r->rng) r->rng = 1;
    struct cj_link_cfg base_cfg = {
        .me = r->me, .max_frame = cfg->max_frame, .handshake_timeout = cfg->handshake_timeout,
        .link_buffer = cfg->link_buffer,
    };
    r->worker_cfg = base_cfg;
    r->worker_cfg.name = "worker";
    r->worker_cfg.heartbeat_interval = cfg->worker_heartbeat_interval > 0 ? cfg->worker_heartbeat_interval : 5;
    r->worker_cfg.dead_after = cfg->worker_heartbeat_timeout > 0 ? cfg->worker_heartbeat_timeout : 30;
    r->upstream_cfg = base_cfg;
    r->upstream_cfg.name = "upstream";
    r->upstream_cfg.heartbeat_interval = cfg->upstream_heartbeat_interval > 0 ? cfg->upstream_heartbeat_interval : 60;
    r->upstream_cfg.dead_after =
        cfg->upstream_dead_after > 0 ? cfg->upstream_dead_after : 3 * r->upstream_cfg.heartbeat_interval;
    r->link_buffer = cfg->link_buffer ? cfg->link_buffer : (size_t)64 << 20;
    r->shared_slack = cfg->shared_slack ? cfg->shared_slack : r->link_buffer;
    const char *pe = getenv(PACE_ENV);
    r->pacing = !cfg->no_pacing && !(pe && !strcmp(pe, "0"));
    r->pace = r->pacing && r->link_buffer > WORKER_PACE ? WORKER_PACE : r->link_buffer;
    r->worker_cfg.link_buffer = r->pace;   /* over it, pacing or the slack decide (upstream_slack) */
    /* Toward the server (results the server downloads from a worker): a worker
     * feeding the upstream past the pace stops being read until it drains to
     * half (cj_link_throttle); only that worker waits, so no slack is needed. */
    r->upstream_cfg.link_buffer = r->pace;
    r->stall_timeout = cfg->stall_timeout > 0 ? cfg->stall_timeout : r->worker_cfg.dead_after;
    struct timeval one = {0, 250000};   /* stalls, paces and holds are checked 4 times a second */
    r->stall_timer = event_new(base, -1, EV_PERSIST, check_stalls, r);
    if (!r->stall_timer || event_add(r->stall_timer, &one) != 0) {
        if (r->stall_timer) event_free(r->stall_timer);
        free(r);
        cj_fail(err, CJ_E_NOMEM, 0, "cannot create the stall timer");
        return NULL;
    }
    return r;
}

void cj_router_free(struct cj_router *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_listeners; i++) cj_listener_free(r->listeners[i]);
    free(r->listeners);
    for (size_t i = 0; i < r->n_links; i++) {
        rlink_free(rl(r->links[i]));
        cj_link_set_data(r->links[i], NULL);
        cj_link_free(r->links[i]);
    }
    free(r->links);
    if (r->up_timer) event_free(r->up_timer);
    if (r->stall_timer) event_free(r->stall_timer);
    if (r->own_dns) evdns_base_free(r->dns, 0);
    for (size_t i = 0; i < r->n_handlers; i++) {
        free(r->handlers[i].channel);
        free(r->handlers[i].topic);
    }
    free(r->handlers);
    free(r);
}

const char *cj_router_me(const struct cj_router *r) { return r->me; }
struct event_base *cj_router_base(const struct cj_router *r) { return r->base; }
const struct cj_router_counters *cj_router_counters(const struct cj_router *r) { return &r->c; }
