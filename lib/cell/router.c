/* SPDX-License-Identifier: Apache-2.0 */
/* router.c — the relay cell's routing table, forwarding, RETURN and forwarder
 * notices, local dispatch, anti-spoofing, worker links and life cycle (see
 * router.h).  Requests in flight upstream: inflight.c; pacing, slack, stalls
 * and holds: pacing.c; the upstream link and its back-off: reconnect.c. */
#include "cell/router_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>

#include "net/addr.h"
#include "util/log.h"
#include "wire/fqcn.h"

#define DROP_LOG_WINDOW 10.0   /* seconds */
#define DROP_LOG_BURST 20      /* drop lines per window before suppressing */

static int originate(struct cj_router *r, struct cj_hb *hb, const struct cj_hdr_msg *m, struct evbuffer *payload,
                     bool bulk, bool stamp, struct cj_err *err);
static void local_dispatch(struct cj_router *r, struct cj_msg *m);

/* ---- helpers -------------------------------------------------------------------- */

void router_rlink_free(struct rlink *d)
{
    if (!d) return;
    free(d->inflight);
    free(d);
}

void router_drop_log(struct cj_router *r, const char *fmt, ...)
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

int router_add_link(struct cj_router *r, struct cj_link *l)
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

void router_remove_link(struct cj_router *r, struct cj_link *l)
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
    return r->up.state == CJ_UP_UP ? r->up.link : NULL;
}

struct cj_link *cj_router_parent(const struct cj_router *r)
{
    return r->parent.state == CJ_UP_UP ? r->parent.link : NULL;
}

/* doc/protocol/cellnet.md §6: me -> none; under me -> the child me.<leaf> (longest
 * connected prefix: only direct children connect); the parent and its other
 * descendants -> the parent link when one is configured (never the upstream
 * instead: down, it is unroutable); else the upstream. */
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
    if (router_for_parent(r, dest)) {
        struct cj_link *p = cj_router_parent(r);
        if (!p) *why = "the parent link is not connected";
        return p;
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

/* doc/protocol/streaming.md §6, forwarder error row: sm__em is "stream forwarding to <D>
 * failed: <failure>"; sm__et StreamTargetUnreachable or StreamError. */
int router_send_notice(struct cj_router *r, const struct notice *n, const char *failure, bool unreachable,
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
    if (router_send_notice(r, &nt, rc, !strcmp(rc, "target_unreachable"), &err) < 0)
        snprintf(note, n, "; no sm__ERROR notice (%s)", err.msg);
    else
        snprintf(note, n, "; sm__ERROR notice sent to %s", h->origin);
}

static bool is_optional_chunk(const struct cj_hdr *h)
{
    return h->optional && !strcmp(h->channel, "sm__STREAM") && !strcmp(h->topic, "sm__DATA") &&
           cj_hdr_has(h, CJ_HK_SM_ID);
}

/* doc/protocol/cellnet.md §6 step 5.  Takes m. */
static void unroutable(struct cj_router *r, struct cj_msg *m, uint64_t *counter, const char *rc, const char *why)
{
    const struct cj_hdr *h = &m->hdr;
    char note[512] = "";
    r->c.drops++;
    if (counter) (*counter)++;
    if (m->from) {
        if (h->msg_type == CJ_MSG_REQ && h->reply_expected) send_return(r, m, note, sizeof note);
        else if (is_optional_chunk(h)) send_forward_error(r, m, rc, note, sizeof note);
    }
    router_drop_log(r, "router %s: cannot deliver %s origin=%s destination=%s channel=%s topic=%s (from %s): %s%s", r->me,
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
    if (router_parent_full(dst)) {
        unroutable(r, m, &r->c.drops_parent_full, "comm_error", "the parent link is full (not reading)");
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
        if (src && inflight_is_request_start(&m->hdr)) inflight_track(r, src, &m->hdr);
        upstream_sent(r, dst, src);
    } else if (rl(dst) && rl(dst)->role == ROLE_PARENT) {
        r->c.parent_msgs++;
        r->c.parent_bytes += bytes;
    } else {
        r->c.down_msgs++;
        r->c.down_bytes += bytes;
        struct rlink *d = rl(dst);
        if (d) {
            if (!d->fwd || now - d->active_at > PACE_STALL) d->fed_at = now;   /* a new burst */
            d->fwd += bytes;
            d->active_at = now;
            if (d->n_inflight && inflight_ends_request(&m->hdr)) inflight_forget(d, m->hdr.sm_ri);
        }
    }
    if (src && rl(src) && !is_upstream(src)) rl(src)->active_at = now;
    cj_msg_free(m);
    /* The parent link is bounded by refusing (above), never by pausing its
     * senders: the upstream and the workers keep flowing when the CP does not read. */
    if (src && !(rl(dst) && rl(dst)->role == ROLE_PARENT) && !upstream_slack(r, src, dst, now) &&
        cj_link_throttle(src, dst))
        r->c.throttles++;
}

/* doc/protocol/cellnet.md §6 anti-spoofing: a worker speaks for itself and its
 * descendants; nothing from upstream may claim to be me or under me; the
 * parent speaks for itself and its other descendants (parent.c). */
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
    if (d->role == ROLE_PARENT) {
        *why = "origin is neither the parent nor one of its other descendants";
        return !router_parent_origin_ok(r, o);
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
        router_drop_log(r, "router %s: dropped spoofed %s origin=%s destination=%s channel=%s topic=%s from %s %s: %s",
                 r->me, cj_msg_type_name(m->hdr.msg_type), m->hdr.origin, m->hdr.destination, m->hdr.channel,
                 m->hdr.topic, cj_link_name(m->from), cj_link_peer(m->from), why);
        cj_msg_free(m);
        return;
    }
    if (!strcmp(m->hdr.destination, r->me)) {
        local_dispatch(r, m);
        return;
    }
    for (int i = 0; i < ROUTER_VIRTUAL_MAX; i++)
        if (r->virt[i].fn && !strcmp(m->hdr.destination, r->virt[i].fqcn)) {
            r->c.local_msgs++;
            r->virt[i].fn(r, m, r->virt[i].ctx);
            return;
        }
    forward(r, m);
}

int cj_router_virtual(struct cj_router *r, const char *fqcn, cj_router_handler_fn fn, void *ctx)
{
    if (!cj_fqcn_is_direct_child(r->me, fqcn, NULL) || strlen(fqcn) > CJ_FQCN_MAX) return -1;
    int free_at = -1;
    for (int i = 0; i < ROUTER_VIRTUAL_MAX; i++) {
        if (r->virt[i].fn && !strcmp(r->virt[i].fqcn, fqcn)) free_at = i;
        else if (!r->virt[i].fn && free_at < 0) free_at = i;
    }
    if (free_at < 0) return fn ? -1 : 0;
    snprintf(r->virt[free_at].fqcn, sizeof r->virt[free_at].fqcn, "%s", fqcn);
    r->virt[free_at].fn = fn;
    r->virt[free_at].ctx = ctx;
    return 0;
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
    if (router_parent_full(dst)) {
        r->c.drops_parent_full++;
        cj_fail(err, CJ_E_LIMIT, 0, "cannot send to %s: the parent link is full", msg->hdr.destination);
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
    if (router_parent_full(dst)) {
        r->c.drops_parent_full++;
        return cj_fail(err, CJ_E_LIMIT, 0, "cannot send to %s: the parent link is full", destination);
    }
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
    if (h->secure) {   /* doc/protocol/cellnet.md §10: the relay does not decrypt */
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
    /* doc/protocol/sfm.md: a newer connection from the same name evicts the older one, so
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

void router_link_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct cj_router *r = ctx;
    struct outlink *o = router_outlink(r, l);
    if (o) outlink_heard(o);
    cj_router_input(r, m);
}

static void worker_down(struct cj_link *l, const char *why, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    if (r->paced_on == l) unpace(r, "it went away");
    router_remove_link(r, l);
    cj_link_set_data(l, NULL);
    if (d && d->up && r->ev.worker_down) r->ev.worker_down(r, d->fqcn, why, r->ev_ctx);
    router_rlink_free(d);   /* its requests in flight are forgotten */
}

static const struct cj_link_ops worker_ops = {
    .on_up = worker_up, .on_msg = router_link_msg, .on_down = worker_down, .on_hello = worker_hello,
    .on_drain = worker_drained,
};

int cj_router_accept(struct cj_router *r, evutil_socket_t fd, const char *peer_addr)
{
    struct cj_err err;
    struct rlink *d = calloc(1, sizeof *d);
    if (!d || router_add_link(r, NULL) < 0) {
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
    router_add_link(r, l);
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
    cj_listener_set_peer_uids(l, r->worker_uids, r->n_worker_uids);
    r->listeners[r->n_listeners++] = l;
    if (port) *port = cj_listener_port(l);
    return 0;
}

void cj_router_set_worker_uids(struct cj_router *r, const uid_t *uids, int n)
{
    if (n < 0) n = 0;
    if (n > CJ_LISTENER_UIDS_MAX) n = CJ_LISTENER_UIDS_MAX;
    memcpy(r->worker_uids, uids, (size_t)n * sizeof *uids);
    r->n_worker_uids = n;
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
    r->up.r = r;
    r->up.role = ROLE_UPSTREAM;
    r->up.what = "upstream";
    r->up.reconnects = &r->c.reconnects;
    r->up.cfg = base_cfg;
    r->up.cfg.name = "upstream";
    if (cfg->upstream_connect_timeout > 0) r->up.cfg.handshake_timeout = cfg->upstream_connect_timeout;
    r->up.cfg.hello_timeout = cfg->upstream_hello_timeout;
    r->up.cfg.heartbeat_interval = cfg->upstream_heartbeat_interval > 0 ? cfg->upstream_heartbeat_interval : 60;
    r->up.cfg.dead_after =
        cfg->upstream_dead_after > 0 ? cfg->upstream_dead_after : 3 * r->up.cfg.heartbeat_interval;
    router_parent_init(r, &base_cfg);
    r->link_buffer = cfg->link_buffer ? cfg->link_buffer : (size_t)64 << 20;
    r->shared_slack = cfg->shared_slack ? cfg->shared_slack : r->link_buffer;
    const char *pe = getenv(PACE_ENV);
    r->pacing = !cfg->no_pacing && !(pe && !strcmp(pe, "0"));
    r->pace = r->pacing && r->link_buffer > WORKER_PACE ? WORKER_PACE : r->link_buffer;
    r->worker_cfg.link_buffer = r->pace;   /* over it, pacing or the slack decide (upstream_slack) */
    /* Toward the server (results the server downloads from a worker): a worker
     * feeding the upstream past the pace stops being read until it drains to
     * half (cj_link_throttle); only that worker waits, so no slack is needed. */
    r->up.cfg.link_buffer = r->pace;
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
        router_rlink_free(rl(r->links[i]));
        cj_link_set_data(r->links[i], NULL);
        cj_link_free(r->links[i]);
    }
    free(r->links);
    outlink_free(&r->up);
    outlink_free(&r->parent);
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
