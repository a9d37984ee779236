/* SPDX-License-Identifier: Apache-2.0 */
/* tx.c — the sender (doc/protocol/streaming.md §3, §5, §6).
 *
 * A blob is cut into chunks of exactly chunk_size bytes (the last one holds
 * the rest) and each chunk's bytes are moved out of the blob evbuffer into
 * the message handed to io->send.  The window holds the sender back while
 * bytes_sent − highest_acked_offset > window; blocked without ACK progress for
 * tx_no_progress seconds, the stream fails.  Streams are sent non-reliably
 * (sm__rs false): a stream is done once its FINAL chunk is handed to io.
 *
 * Completion is always reported from the event loop (the stream's timer
 * event is activated), never from inside the call that caused it, and a
 * stream is freed only there; so io->send or an ACK arriving during a pump
 * cannot free a stream under our feet.
 *
 * A source stream (cj_stream_reply_source) knows its size up front and holds
 * only the bytes the owner fed and that were not sent yet: the chunks are cut
 * exactly as from a whole blob (a chunk leaves only once all its bytes are
 * held).  When fewer than two chunks are held the owner is asked for more
 * (want, from the loop, one at a time).  Waiting for the owner is not a
 * window stall: it has its own timer (tx_no_progress), and an owner that
 * feeds nothing for that long fails the stream. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"
#include "util/log.h"

enum tx_state { TX_SENDING, TX_DONE, TX_FAILED };

struct tx_stream {
    TAILQ_ENTRY(tx_stream) link;
    struct cj_stream_ep *ep;
    uint64_t id;
    char dest[CJ_HDR_STR_MAX + 1];
    char ch[CJ_HDR_STR_MAX + 1];
    char tp[CJ_HDR_STR_MAX + 1];
    char ri[CJ_HDR_STR_MAX + 1];
    char rc[CJ_HDR_STR_MAX + 1];
    char pe[8];
    bool has_ri, is_reply, optional;
    struct sm_hlist hdrs;
    struct evbuffer *blob;
    uint64_t sz, sent, seq, acked_os;
    int64_t acked_sq;
    bool final_sent, pumping, repump, blocked, started;
    enum tx_state state;
    char why[200];
    struct event *ev;          /* no-progress timer; activated to finish */
    cj_stream_done_fn done;
    void *arg;
    struct sm_req *req;
    /* source streams */
    bool is_source, want_out, starved;
    struct cj_stream_source src;
    uint64_t fed;
    struct event *want_ev;     /* activated to call src.want from the loop */
    struct event *feed_ev;     /* the owner fed nothing while we could send */
    struct event *busy_ev;     /* the route was busy (io->busy): try again shortly */
};

void tx_set_req(struct tx_stream *t, struct sm_req *r)
{
    t->req = r;
}

uint64_t tx_id(const struct tx_stream *t)
{
    return t->id;
}

static struct tx_stream *tx_find(struct cj_stream_ep *ep, uint64_t id)
{
    struct tx_stream *t;
    TAILQ_FOREACH(t, &ep->tx, link)
        if (t->id == id) return t;
    return NULL;
}

static void tx_destroy(struct tx_stream *t)
{
    TAILQ_REMOVE(&t->ep->tx, t, link);
    t->ep->n_tx--;
    sm_hlist_clear(&t->hdrs);
    if (t->blob) evbuffer_free(t->blob);
    if (t->ev) event_free(t->ev);
    if (t->want_ev) event_free(t->want_ev);
    if (t->feed_ev) event_free(t->feed_ev);
    if (t->busy_ev) event_free(t->busy_ev);
    free(t);
}

/* ---- building chunks ------------------------------------------------------------------ */

/* Chunk headers in the captured order (cap06 request, cap08 reply): application
 * and auth headers, [reply keys], sm__pe, cn__payload_len, sm__ri, sm__*, cellnet keys. */
static void tx_headers(struct tx_stream *t, struct cj_hb *b, uint64_t len, int dt, bool chunk0)
{
    struct cj_stream_ep *ep = t->ep;
    sm_add_headers(ep, b, &t->hdrs, t->dest);
    if (t->is_reply) {
        cj_hb_str(b, "cn__return_code", t->rc);
        cj_hb_str(b, "cn__req_id", "");
        cj_hb_str(b, "cn__msg_type", "req");
        cj_hb_str(b, "sm__ri", t->ri);
    }
    cj_hb_str(b, "sm__pe", t->pe);
    cj_hb_uint(b, "cn__payload_len", len);
    if (t->has_ri && !t->is_reply) cj_hb_str(b, "sm__ri", t->ri);
    cj_hb_str(b, "sm__ch", t->ch);
    cj_hb_str(b, "sm__tp", t->tp);
    cj_hb_uint(b, "sm__sz", t->sz);
    cj_hb_uint(b, "sm__id", t->id);
    cj_hb_int(b, "sm__dt", dt);
    cj_hb_uint(b, "sm__sq", t->seq);
    cj_hb_uint(b, "sm__os", t->sent);
    cj_hb_bool(b, "sm__rs", false);
    cj_hb_bool(b, "sm__op", t->optional);
    cj_hb_uint(b, "sm__cs", ep->lim.chunk_size);
    cj_hb_uint(b, "sm__ws", ep->lim.window);
    if (chunk0) cj_hb_uint(b, "sm__ai", ep->lim.ack_interval);
}

/* ---- finishing ------------------------------------------------------------------------- */

static void tx_schedule_finish(struct tx_stream *t)
{
    event_del(t->ev);
    event_active(t->ev, EV_TIMEOUT, 1);
}

static void tx_finalize(struct tx_stream *t)
{
    struct sm_req *r = t->req;
    cj_stream_done_fn done = t->done;
    void *arg = t->arg;
    int status = t->state == TX_DONE ? 0 : -1;
    char why[sizeof t->why];
    memcpy(why, t->why, sizeof why);
    t->req = NULL;
    tx_destroy(t);
    if (r) {
        if (status == 0) req_on_tx_done(r);
        else req_on_tx_failed(r, why);
    }
    if (done) done(arg, status, status ? why : NULL);
}

/* §6 "sender error": tells the receiver the stream is abandoned. */
static void tx_send_abort(struct tx_stream *t)
{
    struct cj_stream_ep *ep = t->ep;
    /* Nothing sent yet: the receiver has no state to clear — except a requester
     * waiting for this reply, which the notice's sm__ri fails at once instead
     * of after its whole request timeout. */
    if (ep->closing || t->final_sent || (t->seq == 0 && !t->has_ri)) return;
    struct cj_hb b;
    cj_hb_init(&b);
    sm_add_headers(ep, &b, &t->hdrs, t->dest);
    if (t->has_ri) cj_hb_str(&b, "sm__ri", t->ri);
    cj_hb_str(&b, "sm__ch", t->ch);
    cj_hb_str(&b, "sm__tp", t->tp);
    cj_hb_uint(&b, "sm__id", t->id);
    cj_hb_int(&b, "sm__dt", CJ_SM_ERROR);
    cj_hb_uint(&b, "sm__os", t->sent);
    cj_hb_str(&b, "sm__em", t->why);
    if (sm_send_msg(ep, &b, t->dest, CJ_STREAM_TOPIC_DATA, "none", 0, t->optional, true) == 0) ep->st.errors_out++;
    cj_hb_destroy(&b);
}

static void tx_pump(struct tx_stream *t);
static void tx_fail(struct tx_stream *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void tx_fail(struct tx_stream *t, const char *fmt, ...)
{
    if (t->state != TX_SENDING) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof t->why, fmt, ap);
    va_end(ap);
    t->state = TX_FAILED;
    t->ep->st.tx_failed++;
    if (t->want_ev) event_del(t->want_ev);
    if (t->feed_ev) event_del(t->feed_ev);
    if (t->busy_ev) event_del(t->busy_ev);
    cj_log_warning("stream: sending stream %" PRIu64 " to %s (%s/%s) failed: %s", t->id, t->dest, t->ch, t->tp,
                   t->why);
    tx_send_abort(t);
    tx_schedule_finish(t);
}

void tx_abort(struct tx_stream *t, const char *why)
{
    t->done = NULL;
    t->req = NULL;
    tx_fail(t, "%s", why);
}

/* The stream's one event: its first run starts sending; later it is the
 * no-progress timer, or it was activated to finish the stream. */
static void tx_ev_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tx_stream *t = arg;
    if (!t->started) {
        t->started = true;
        if (t->state == TX_SENDING) {
            tx_pump(t);
            return;
        }
    }
    if (t->state == TX_SENDING)   /* the no-progress timer */
        tx_fail(t, "no ACK progress for %g s (sent %" PRIu64 ", acked %" PRIu64 " of %" PRIu64 " bytes)",
                t->ep->lim.tx_no_progress, t->sent, t->acked_os, t->sz);
    if (t->state != TX_SENDING) {
        event_del(t->ev);
        tx_finalize(t);
    }
}

/* ---- the owner of a source stream ------------------------------------------------------- */

/* Asks for more (from the loop) when under two chunks are held and bytes are missing. */
static void tx_want_check(struct tx_stream *t)
{
    if (!t->is_source || t->state != TX_SENDING || t->want_out || t->fed >= t->sz) return;
    if (evbuffer_get_length(t->blob) >= 2 * (uint64_t)t->ep->lim.chunk_size) return;
    t->want_out = true;
    event_active(t->want_ev, EV_TIMEOUT, 1);
}

static void tx_want_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tx_stream *t = arg;
    if (t->state != TX_SENDING || !t->want_out) return;
    t->src.want(t->src.arg, t->fed);   /* may feed or cancel at once; t stays valid */
}

static void tx_feed_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tx_stream *t = arg;
    if (t->state != TX_SENDING) return;
    tx_fail(t, "the owner fed no bytes for %g s (fed %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64 " sent)",
            t->ep->lim.tx_no_progress, t->fed, t->sz, t->sent);
}

/* ---- sending ----------------------------------------------------------------------------- */

static int tx_send_chunk(struct tx_stream *t)
{
    struct cj_stream_ep *ep = t->ep;
    uint64_t left = t->sz - t->sent;
    uint64_t len = left < ep->lim.chunk_size ? left : ep->lim.chunk_size;
    bool final = len == left;
    struct cj_hb b;
    cj_hb_init(&b);
    tx_headers(t, &b, len, final ? CJ_SM_FINAL : CJ_SM_CHUNK, t->seq == 0);
    if (len) evbuffer_remove_buffer(t->blob, ep->scratch, (size_t)len);
    int rc = sm_send_msg(ep, &b, t->dest, CJ_STREAM_TOPIC_DATA, "bytes", -1, t->optional, false);
    cj_hb_destroy(&b);
    if (rc) {
        if (rc == -1) tx_fail(t, "no route to %s", t->dest);
        else tx_fail(t, "cannot build chunk %" PRIu64 " header", t->seq);
        return -1;
    }
    ep->st.chunks_out++;
    t->sent += len;
    t->seq++;
    if (final) t->final_sent = true;
    if (t->req) req_on_tx_progress(t->req);
    return 0;
}

/* Sends while the window allows.  Re-entry (an ACK delivered during io->send)
 * only asks the running pump to go round again. */
static void tx_busy_cb(evutil_socket_t fd, short what, void *arg)
{
    tx_pump(arg);
}

/* io->busy says the route already holds enough of our bytes: wait a moment
 * instead of queueing up to a whole window in this process. */
static bool tx_route_busy(struct tx_stream *t)
{
    struct cj_stream_ep *ep = t->ep;
    /* Small messages (task requests, replies with refs) never wait: only a
     * bulk stream could fill a queue, and holding control-sized messages behind
     * someone else's bulk traffic would starve them. */
    if (t->sz <= 2 * (uint64_t)ep->lim.chunk_size) return false;
    if (!ep->io.busy || !ep->io.busy(ep->io.ctx, t->dest)) return false;
    if (!t->busy_ev && !(t->busy_ev = evtimer_new(ep->base, tx_busy_cb, t))) return false;
    if (!evtimer_pending(t->busy_ev, NULL)) {
        struct timeval tv = {0, CJ_STREAM_BUSY_RETRY_MS * 1000};
        evtimer_add(t->busy_ev, &tv);
    }
    return true;
}

static void tx_pump(struct tx_stream *t)
{
    if (t->pumping) {
        t->repump = true;
        return;
    }
    t->pumping = true;
    do {
        t->repump = false;
        while (t->state == TX_SENDING && !t->final_sent) {
            if (t->sent - t->acked_os > t->ep->lim.window) {
                if (!t->blocked || !evtimer_pending(t->ev, NULL)) {
                    struct timeval tv = cj_tv(t->ep->lim.tx_no_progress);
                    evtimer_add(t->ev, &tv);
                }
                t->blocked = true;
                break;
            }
            t->blocked = false;
            if (t->is_source) {   /* the next chunk leaves whole, as from a blob */
                uint64_t left = t->sz - t->sent;
                uint64_t len = left < t->ep->lim.chunk_size ? left : t->ep->lim.chunk_size;
                if (evbuffer_get_length(t->blob) < len) {
                    if (!t->starved || !evtimer_pending(t->feed_ev, NULL)) {
                        struct timeval tv = cj_tv(t->ep->lim.tx_no_progress);
                        evtimer_add(t->feed_ev, &tv);
                    }
                    t->starved = true;
                    break;
                }
                t->starved = false;
            }
            if (tx_route_busy(t)) break;
            if (tx_send_chunk(t)) break;
        }
    } while (t->repump && t->state == TX_SENDING);
    t->pumping = false;
    if (t->state == TX_SENDING && t->final_sent) {
        t->state = TX_DONE;
        t->ep->st.blobs_out++;
        if (t->feed_ev) event_del(t->feed_ev);
        tx_schedule_finish(t);
    }
    tx_want_check(t);
}

struct tx_stream *tx_start(struct cj_stream_ep *ep, const char *destination, const char *channel,
                           const char *topic, const struct cj_stream_msg *m, const char *ri, bool is_reply,
                           const char *rc, struct evbuffer *blob, const struct cj_stream_source *src,
                           cj_stream_done_fn done, void *arg)
{
    static const struct cj_stream_msg none = { 0 };
    if (!m) m = &none;
    const char *pe = m->encoding ? m->encoding : "bytes";
    struct tx_stream *t = NULL;
    if (src) {   /* the held bytes of a source stream live where a blob would */
        if (blob || src->size > ep->lim.max_blob || (src->size && !src->want)) goto fail;
        if (!(blob = evbuffer_new())) goto fail;
    }
    if (!blob || ep->closing || !sm_name_ok(destination) || !sm_name_ok(channel) || !sm_name_ok(topic) ||
        (ri && !sm_name_ok(ri)) || (rc && !sm_name_ok(rc)) || strlen(pe) >= sizeof t->pe ||
        evbuffer_get_length(blob) > ep->lim.max_blob)
        goto fail;
    if (!(t = calloc(1, sizeof *t))) goto fail;
    t->ep = ep;
    t->id = cj_stream_next_id(ep);
    strcpy(t->dest, destination);
    strcpy(t->ch, channel);
    strcpy(t->tp, topic);
    strcpy(t->pe, pe);
    if ((t->has_ri = ri != NULL)) strcpy(t->ri, ri);
    if ((t->is_reply = is_reply)) strcpy(t->rc, rc ? rc : "ok");
    t->optional = m->optional;
    t->acked_sq = -1;
    t->sz = src ? src->size : evbuffer_get_length(blob);
    t->done = done;
    t->arg = arg;
    if (sm_hlist_set_raw(&t->hdrs, m->hdrs, m->n_hdrs) || !(t->ev = evtimer_new(ep->base, tx_ev_cb, t))) goto fail;
    if (src) {
        t->is_source = true;
        t->src = *src;
        if (!(t->want_ev = evtimer_new(ep->base, tx_want_cb, t)) ||
            !(t->feed_ev = evtimer_new(ep->base, tx_feed_timeout_cb, t)))
            goto fail;
    }

    /* Build chunk 0's block once now, so a bad header fails the call, not the stream. */
    msgpack_sbuffer out;
    struct cj_err err = { 0 };
    struct cj_hb b;
    msgpack_sbuffer_init(&out);
    cj_hb_init(&b);
    uint64_t len0 = t->sz < ep->lim.chunk_size ? t->sz : ep->lim.chunk_size;
    tx_headers(t, &b, len0, len0 == t->sz ? CJ_SM_FINAL : CJ_SM_CHUNK, true);
    int brc = sm_build_msg(ep, &b, t->dest, CJ_STREAM_TOPIC_DATA, "bytes", -1, t->optional, &out, &err);
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&out);
    if (brc) {
        cj_log_warning("stream: cannot send %s/%s to %s: %s", channel, topic, destination, err.msg);
        goto fail;
    }
    t->blob = blob;
    TAILQ_INSERT_TAIL(&ep->tx, t, link);
    ep->n_tx++;
    /* The first chunks go out from the loop: the caller gets its id (and a
     * request its binding) before anything can happen to the stream. */
    event_active(t->ev, EV_TIMEOUT, 1);
    tx_want_check(t);   /* activates want_ev: the owner is asked from the loop */
    return t;
fail:
    if (t) {
        sm_hlist_clear(&t->hdrs);
        if (t->ev) event_free(t->ev);
        if (t->want_ev) event_free(t->want_ev);
        if (t->feed_ev) event_free(t->feed_ev);
    if (t->busy_ev) event_free(t->busy_ev);
        free(t);
    }
    if (blob) evbuffer_free(blob);
    return NULL;
}

int cj_stream_send(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                   const struct cj_stream_msg *m, const char *ri, struct evbuffer *blob, cj_stream_done_fn done,
                   void *arg, uint64_t *id_out)
{
    if (channel && strcmp(channel, CJ_STREAM_RETURN_ONLY) == 0) {   /* replies go through cj_stream_reply */
        if (blob) evbuffer_free(blob);
        return -1;
    }
    struct tx_stream *t = tx_start(ep, destination, channel, topic, m, ri, false, NULL, blob, NULL, done, arg);
    if (!t) return -1;
    if (id_out) *id_out = t->id;
    return 0;
}

int cj_stream_cancel(struct cj_stream_ep *ep, uint64_t id)
{
    struct tx_stream *t = tx_find(ep, id);
    if (!t || t->state != TX_SENDING) return -1;
    if (t->req) {                   /* a request's stream: the request fails */
        t->done = NULL;
        tx_fail(t, "cancelled");
        return 0;
    }
    tx_abort(t, "cancelled");
    return 0;
}

int cj_stream_feed(struct cj_stream_ep *ep, uint64_t id, struct evbuffer *more)
{
    struct tx_stream *t = tx_find(ep, id);
    if (!t || !t->is_source || t->state != TX_SENDING || !more) return -1;
    size_t n = evbuffer_get_length(more);
    if (n > t->sz - t->fed) {
        cj_log_warning("stream: source stream %" PRIu64 " to %s: feed of %zu bytes goes past its size %" PRIu64
                       " (%" PRIu64 " fed); refused",
                       t->id, t->dest, n, t->sz, t->fed);
        return -1;
    }
    evbuffer_add_buffer(t->blob, more);
    t->fed += n;
    t->want_out = false;
    event_del(t->feed_ev);
    if (t->started) tx_pump(t);   /* may send at once; callbacks only from the loop */
    else tx_want_check(t);
    return 0;
}

/* ---- ACKs and error notices ----------------------------------------------------------------- */

/* Only the receiver (the stream's destination) may ACK it. */
static struct tx_stream *tx_for(struct cj_stream_ep *ep, const struct cj_hdr *h, bool allow_fd)
{
    if (!cj_hdr_has(h, CJ_HK_SM_ID) || h->sm_id_neg) return NULL;
    struct tx_stream *t = tx_find(ep, h->sm_id);
    if (!t) return NULL;
    if (strcmp(h->origin, t->dest) == 0) return t;
    if (allow_fd && cj_hdr_has(h, CJ_HK_SM_FD) && strcmp(h->sm_fd, t->dest) == 0) return t;
    cj_log_debug("stream: notice for stream %" PRIu64 " from %s, not its receiver %s; ignored", t->id, h->origin,
                 t->dest);
    return NULL;
}

void tx_input_ack(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    ep->st.acks_in++;
    struct tx_stream *t = tx_for(ep, h, false);
    if (!t || t->state != TX_SENDING) return;   /* finished or unknown: tolerated (§9) */
    if (cj_hdr_has(h, CJ_HK_SM_SQ) && h->sm_sq > t->acked_sq) t->acked_sq = h->sm_sq;
    if (!cj_hdr_has(h, CJ_HK_SM_OS)) return;
    uint64_t os = (uint64_t)h->sm_os;
    if (os > t->sent) {
        cj_log_debug("stream: ACK for stream %" PRIu64 " claims %" PRIu64 " bytes, only %" PRIu64 " sent", t->id, os,
                     t->sent);
        return;
    }
    if (os <= t->acked_os) return;
    t->acked_os = os;
    if (t->req) req_on_tx_progress(t->req);
    if (t->blocked) {
        event_del(t->ev);   /* progress: the no-progress wait starts again */
        tx_pump(t);
    }
}

void tx_input_error(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    struct tx_stream *t = tx_for(ep, h, true);
    if (!t || t->state != TX_SENDING) return;
    tx_fail(t, "receiver error: %.*s", (int)(h->sm_em.len > 150 ? 150 : h->sm_em.len),
            h->sm_em.p ? (const char *)h->sm_em.p : "");
}

void tx_free_all(struct cj_stream_ep *ep)
{
    struct tx_stream *t;
    while ((t = TAILQ_FIRST(&ep->tx))) {
        cj_stream_done_fn done = t->done;
        void *arg = t->arg;
        int status = t->state == TX_DONE ? 0 : -1;
        tx_destroy(t);
        if (done) done(arg, status, status ? "endpoint closed" : NULL);
    }
}
