/* SPDX-License-Identifier: Apache-2.0 */
/* rx.c — the receiver (doc/protocol/streaming.md §4, §5, §6).
 *
 * One struct rx_stream per (cn__origin, sm__id) in a chained hash table.  In-order
 * chunks are appended to the blob evbuffer by moving their chains; chunks
 * ahead of a gap wait in a sorted array bounded as FLARE bounds it.  Memory:
 * a stream is admitted only when its sm__sz (<= max_blob) fits in the
 * endpoint's reservation (max_buffered), and no stream ever holds more chunk
 * bytes than its sm__sz, so everything buffered is bounded by the limits.
 *
 * A finished stream (completed or failed) keeps a small state: a reliable
 * sender's retransmissions get re-ACKed (for sm__rt + sm__rw), late chunks of
 * other streams are ignored instead of opening a new stream (for linger).
 * These states are evicted oldest first when the table is full.
 *
 * Sink replies (cj_stream_request_sink): the contiguous bytes go to the
 * owner's sink->data as they arrive instead of into the blob evbuffer, so the
 * stream reserves only what can wait ahead of a gap (the sender's window plus
 * two chunks), not sm__sz.  With hold_acks the ACKed offset is capped at what
 * the owner released; a fully delivered stream whose last bytes are not yet
 * released waits on ep->draining (state RX_DRAIN) for the final ACK.  Sink
 * callbacks may call back into the endpoint (release, cancel the request), so
 * after each one the stream's state is checked again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"
#include "util/log.h"

enum rx_state { RX_ACTIVE, RX_DONE, RX_FAILED, RX_DRAIN };

struct ooo_chunk {
    uint64_t sq, os;
    uint64_t len;
    struct evbuffer *data;
};

struct rx_stream {
    struct rx_stream *hnext;
    TAILQ_ENTRY(rx_stream) fin;      /* on ep->finished when not active */
    struct cj_stream_ep *ep;
    uint64_t id;
    bool id_neg;
    enum rx_state state;
    bool reliable, final_seen, have_chunk0, has_ri;
    char origin[CJ_HDR_STR_MAX + 1];
    char ch[CJ_HDR_STR_MAX + 1];
    char tp[CJ_HDR_STR_MAX + 1];
    char ri[CJ_HDR_STR_MAX + 1];
    uint64_t sz, consumed, data_bytes;   /* data_bytes: consumed + out-of-order bytes */
    uint64_t next_sq, final_sq, last_ack_os;
    int64_t ai, ws;                      /* sender's sm__ai (chunk 0) and sm__ws */
    size_t max_ooo;
    double keep;                         /* reliable: sm__rt + sm__rw from chunk 0 */
    uint8_t *hblk0;                      /* chunk 0's header block */
    size_t hlen0;
    struct evbuffer *blob;
    struct ooo_chunk *ooo;
    size_t n_ooo, cap_ooo;
    uint64_t buffered, reserved;         /* accounted in ep->rx_buffered / rx_reserved */
    struct event *timer;                 /* idle timeout, then expiry of the finished state */
    struct sm_req *req;                  /* the request a return_only stream answers */
    /* sink replies */
    bool sinking;                        /* bytes go to sink.data, not blob */
    bool sink_live;                      /* sink callbacks may still be called */
    bool hold;                           /* hold_acks */
    struct cj_stream_sink sink;
    uint64_t released;                   /* hold_acks: bytes the owner released */
    uint64_t handle;                     /* the request's handle (release after it finished) */
};

/* ---- table --------------------------------------------------------------------------- */

static size_t key_hash(const struct cj_stream_ep *ep, const char *origin, uint64_t id)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)origin; *p; p++) h = (h ^ *p) * 1099511628211ull;
    h ^= id * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return (size_t)h & (ep->nbuckets - 1);
}

static struct rx_stream *rx_lookup(struct cj_stream_ep *ep, const char *origin, uint64_t id, bool neg)
{
    for (struct rx_stream *s = ep->buckets[key_hash(ep, origin, id)]; s; s = s->hnext)
        if (s->id == id && s->id_neg == neg && strcmp(s->origin, origin) == 0) return s;
    return NULL;
}

static void rx_unlink(struct rx_stream *s)
{
    struct cj_stream_ep *ep = s->ep;
    struct rx_stream **pp = &ep->buckets[key_hash(ep, s->origin, s->id)];
    while (*pp && *pp != s) pp = &(*pp)->hnext;
    if (*pp) *pp = s->hnext;
    ep->n_rx--;
    if (s->state == RX_DRAIN) {
        TAILQ_REMOVE(&ep->draining, s, fin);
    } else if (s->state != RX_ACTIVE) {
        TAILQ_REMOVE(&ep->finished, s, fin);
        ep->n_rx_finished--;
    }
}

/* Frees the chunk data and header block and gives back the accounting. */
static void rx_release(struct rx_stream *s)
{
    struct cj_stream_ep *ep = s->ep;
    for (size_t i = 0; i < s->n_ooo; i++) evbuffer_free(s->ooo[i].data);
    free(s->ooo);
    s->ooo = NULL;
    s->n_ooo = s->cap_ooo = 0;
    if (s->blob) evbuffer_free(s->blob);
    s->blob = NULL;
    free(s->hblk0);
    s->hblk0 = NULL;
    ep->rx_buffered -= s->buffered;
    ep->rx_reserved -= s->reserved;
    s->buffered = s->reserved = 0;
}

static void rx_destroy(struct rx_stream *s)
{
    rx_unlink(s);
    rx_release(s);
    if (s->timer) event_free(s->timer);
    free(s);
}

static void rx_fail(struct rx_stream *s, bool notify, const char *et, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void rx_unbind_req(struct rx_stream *s)
{
    s->req = NULL;
    if (!s->sinking) return;
    s->sink_live = false;
    if (s->state == RX_ACTIVE && !s->ep->closing) rx_fail(s, true, "StreamError", "request ended");
}

void rx_free_all(struct cj_stream_ep *ep)
{
    for (size_t i = 0; i < ep->nbuckets; i++)
        while (ep->buckets[i]) rx_destroy(ep->buckets[i]);
}

static void rx_arm(struct rx_stream *s, double seconds)
{
    struct timeval tv = cj_tv(seconds);
    evtimer_add(s->timer, &tv);
}

/* The stream is over: drop its data and remember it for `keep` seconds. */
static void rx_retire(struct rx_stream *s, enum rx_state st, double keep)
{
    struct cj_stream_ep *ep = s->ep;
    if (s->state == RX_DRAIN) TAILQ_REMOVE(&ep->draining, s, fin);
    s->sink_live = false;
    rx_release(s);
    s->state = st;
    TAILQ_INSERT_TAIL(&ep->finished, s, fin);
    ep->n_rx_finished++;
    rx_arm(s, keep);
}

/* ---- messages ------------------------------------------------------------------------ */

static void add_id(struct cj_hb *b, uint64_t id, bool neg)
{
    if (neg) cj_hb_int(b, "sm__id", (int64_t)id);
    else cj_hb_uint(b, "sm__id", id);
}

/* ACK (§5): sm__os bytes consumed, sm__sq the last chunk received contiguously. */
static void rx_ack(struct rx_stream *s, uint64_t os, uint64_t sq)
{
    struct cj_stream_ep *ep = s->ep;
    struct cj_hb b;
    cj_hb_init(&b);
    sm_add_headers(ep, &b, NULL, s->origin);
    add_id(&b, s->id, s->id_neg);
    cj_hb_int(&b, "sm__dt", CJ_SM_ACK);
    cj_hb_uint(&b, "sm__os", os);
    cj_hb_uint(&b, "sm__sq", sq);
    if (sm_send_msg(ep, &b, s->origin, CJ_STREAM_TOPIC_ACK, "none", 0, true, true) == 0) ep->st.acks_out++;
    cj_hb_destroy(&b);
    s->last_ack_os = os;
}

/* What an ACK may cover: the bytes consumed, with hold_acks only those the
 * owner released.  sm__sq still says what was received (§5), so a reliable
 * sender does not retransmit bytes that are merely waiting for the disk. */
static uint64_t rx_ack_upto(const struct rx_stream *s)
{
    return s->hold && s->released < s->consumed ? s->released : s->consumed;
}

/* The current state, for duplicates on a reliable stream (nothing if no chunk 0 yet). */
static void rx_reack(struct rx_stream *s)
{
    if (s->state == RX_DONE) rx_ack(s, s->sz, s->final_sq);
    else if (s->next_sq > 0) rx_ack(s, rx_ack_upto(s), s->next_sq - 1);
}

static void send_one_error(struct cj_stream_ep *ep, const char *topic, const char *origin, uint64_t id,
                           bool id_neg, const char *ch, const char *tp, const char *ri, const char *et,
                           const char *em)
{
    struct cj_hb b;
    cj_hb_init(&b);
    sm_add_headers(ep, &b, NULL, origin);
    add_id(&b, id, id_neg);
    cj_hb_int(&b, "sm__dt", CJ_SM_ERROR);
    cj_hb_str(&b, "sm__em", em);
    if (ch && *ch) cj_hb_str(&b, "sm__ch", ch);
    if (tp && *tp) cj_hb_str(&b, "sm__tp", tp);
    if (et && *et) cj_hb_str(&b, "sm__et", et);
    if (ri && *ri) cj_hb_str(&b, "sm__ri", ri);
    if (sm_send_msg(ep, &b, origin, topic, "none", 0, true, true) == 0) ep->st.errors_out++;
    cj_hb_destroy(&b);
}

void rx_send_error(struct cj_stream_ep *ep, const char *origin, uint64_t id, bool id_neg, const char *ch,
                   const char *tp, const char *ri, const char *et, const char *em)
{
    /* On sm__ERROR, and again on sm__ACK for older senders (§6); a 2.8.x cell
     * has no handler for sm__ERROR and would log each one as an error (§11). */
    if (ep->wire != CJ_STREAM_WIRE_2_8) send_one_error(ep, CJ_STREAM_TOPIC_ERROR, origin, id, id_neg, ch, tp, ri, et, em);
    send_one_error(ep, CJ_STREAM_TOPIC_ACK, origin, id, id_neg, ch, tp, ri, et, em);
}

/* ---- failure, completion ------------------------------------------------------------- */

static void rx_fail(struct rx_stream *s, bool notify, const char *et, const char *fmt, ...)
{
    struct cj_stream_ep *ep = s->ep;
    if (s->state != RX_ACTIVE) return;
    char em[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(em, sizeof em, fmt, ap);
    va_end(ap);
    cj_log_warning("stream: %s stream %s%" PRIu64 " from %s (%s/%s) failed: %s",
                   notify ? "receiving" : "received", s->id_neg ? "-" : "", s->id, s->origin, s->ch, s->tp, em);
    ep->st.rx_failed++;
    struct sm_req *r = s->req;
    s->req = NULL;
    rx_retire(s, RX_FAILED, ep->lim.linger);
    if (notify) rx_send_error(ep, s->origin, s->id, s->id_neg, s->ch, s->tp, s->has_ri ? s->ri : NULL, et, em);
    if (r) req_on_rx_failed(r, em);
}

static void rx_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct rx_stream *s = arg;
    if (s->state == RX_ACTIVE) {
        rx_fail(s, true, "StreamError", "no data for %g s (received %" PRIu64 " of %" PRIu64 " bytes)",
                s->ep->lim.rx_idle, s->consumed, s->sz);
    } else if (s->state == RX_DRAIN) {
        cj_log_warning("stream: reply stream %s%" PRIu64 " from %s (%s/%s): owner released %" PRIu64 " of %" PRIu64
                       " bytes in %g s; final ACK not sent",
                       s->id_neg ? "-" : "", s->id, s->origin, s->ch, s->tp, s->released, s->sz,
                       s->ep->lim.rx_idle);
        rx_retire(s, RX_FAILED, s->ep->lim.linger);
    } else {
        rx_destroy(s);
    }
}

/* Hands the blob to its handler, or to the request it answers. */
static void rx_deliver(struct cj_stream_ep *ep, const struct rx_stream *s, uint8_t *hblk, size_t hlen,
                       struct evbuffer *blob, struct sm_req *r)
{
    struct cj_hdr h;
    struct cj_err err = { 0 };
    if (cj_hdr_decode(&h, hblk, hlen, &err)) {   /* cannot happen: it decoded when it arrived */
        if (blob) evbuffer_free(blob);
        if (r) req_on_rx_failed(r, err.msg);
        return;
    }
    if (strcmp(s->ch, CJ_STREAM_RETURN_ONLY) == 0) {
        if (r) req_on_reply(r, &h, blob);
        else {
            cj_log_debug("stream: reply %s/%s from %s matches no request; discarded", s->ch, s->tp, s->origin);
            if (blob) evbuffer_free(blob);
        }
        return;
    }
    struct sm_handler *hd = sm_handler_find(ep, s->ch, s->tp);
    if (!hd || !blob) {
        if (blob) evbuffer_free(blob);
        rx_send_error(ep, s->origin, s->id, s->id_neg, s->ch, s->tp, s->has_ri ? s->ri : NULL, "StreamError",
                      "no handler");
        return;
    }
    struct cj_stream_blob b = {
        .hdr = &h, .hblk = hblk, .hlen = hlen, .data = blob, .size = s->sz,
        .encoding = h.sm_pe, .origin = s->origin, .stream_id = s->id,
    };
    b.req.has_ri = s->has_ri;
    strcpy(b.req.origin, s->origin);
    strcpy(b.req.ri, s->ri);
    strcpy(b.req.channel, s->ch);
    strcpy(b.req.topic, s->tp);
    int rc = hd->fn(hd->arg, &b);
    if (b.data) evbuffer_free(b.data);
    if (rc < 0)
        rx_send_error(ep, s->origin, s->id, s->id_neg, s->ch, s->tp, s->has_ri ? s->ri : NULL, "StreamError",
                      b.error[0] ? b.error : "handler failed");
}

static void rx_complete(struct rx_stream *s)
{
    struct cj_stream_ep *ep = s->ep;
    if (s->consumed != s->sz) {
        rx_fail(s, true, "BlobSizeError", "reassembled %" PRIu64 " bytes, sm__sz %" PRIu64, s->consumed, s->sz);
        return;
    }
    ep->st.blobs_in++;
    struct evbuffer *blob = s->sinking ? NULL : s->blob;   /* a sink's bytes went to sink->data */
    uint8_t *hblk = s->hblk0;
    size_t hlen = s->hlen0;
    struct sm_req *r = s->req;
    if (!s->sinking) s->blob = NULL;
    s->hblk0 = NULL;
    s->req = NULL;
    if (s->hold && s->released < s->sz) {
        /* The final ACK waits for the owner's release (rx_release_upto). */
        rx_release(s);
        s->sink_live = false;
        s->state = RX_DRAIN;
        TAILQ_INSERT_TAIL(&ep->draining, s, fin);
        rx_arm(s, ep->lim.rx_idle);
    } else {
        /* Final ACK at once, without waiting for the consumer (§5). */
        rx_ack(s, s->sz, s->final_sq);
        rx_retire(s, RX_DONE, s->reliable ? s->keep : ep->lim.linger);
    }
    rx_deliver(ep, s, hblk, hlen, blob, r);
    free(hblk);
}

/* ---- chunk 0 ------------------------------------------------------------------------- */

static double num_or(const struct cj_hdr_entry *e, double dflt)
{
    struct mp_cur c;
    struct mp_val v;
    mp_cur_init(&c, e->val.p, e->val.len);
    if (mp_next(&c, &v, NULL)) return dflt;
    if (v.kind == MP_FLOAT) return v.f;
    if (v.kind == MP_UINT) return (double)v.u;
    if (v.kind == MP_INT) return (double)v.i;
    return dflt;
}

/* sm__rw + sm__rt (chunk 0, reliable only): how long to keep a finished stream. */
static double reliable_keep(const struct cj_hdr *h)
{
    double rw = 5.0, rt = 60.0;
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        if (mp_str_eq(e.key, e.key_len, "sm__rw")) rw = num_or(&e, rw);
        else if (mp_str_eq(e.key, e.key_len, "sm__rt")) rt = num_or(&e, rt);
    }
    double keep = rw + rt;
    if (!(keep >= 0)) keep = SM_RELIABLE_KEEP_DEFAULT;   /* NaN or negative */
    return keep > SM_RELIABLE_KEEP_MAX ? SM_RELIABLE_KEEP_MAX : keep;
}

/* Keeps chunk 0's header block (the blob's headers, §4.7).  -1: stream failed. */
static int rx_keep_chunk0(struct rx_stream *s, const struct cj_hdr *h)
{
    struct cj_stream_ep *ep = s->ep;
    if (ep->rx_reserved + h->len > ep->lim.max_buffered) {
        rx_fail(s, true, "StreamError", "receiver buffer limit reached");
        return -1;
    }
    s->hblk0 = malloc(h->len ? h->len : 1);
    if (!s->hblk0) {
        rx_fail(s, true, "StreamError", "out of memory");
        return -1;
    }
    memcpy(s->hblk0, h->blk, h->len);
    s->hlen0 = h->len;
    s->reserved += h->len;
    s->buffered += h->len;
    ep->rx_reserved += h->len;
    ep->rx_buffered += h->len;
    s->have_chunk0 = true;
    s->ai = cj_hdr_has(h, CJ_HK_SM_AI) ? h->sm_ai : 0;
    s->keep = s->reliable ? reliable_keep(h) : 0;
    return 0;
}

/* The sender's sm__ai capped at its sm__ws; 4 MiB before chunk 0 (§4.2). */
static uint64_t rx_ack_interval(const struct rx_stream *s)
{
    uint64_t ai = s->have_chunk0 && s->ai > 0 ? (uint64_t)s->ai : SM_DEFAULT_ACK;
    if (s->ws > 0 && ai > (uint64_t)s->ws) ai = (uint64_t)s->ws;
    return ai;
}

/* max(16, min(ceil(window / chunk) + 1, 1024)) from the sender's sm__ws / sm__cs;
 * 16 for a sender that gives no sm__ws (FLARE <= 2.8, §11). */
static size_t ooo_limit(const struct cj_hdr *h)
{
    if (!cj_hdr_has(h, CJ_HK_SM_WS)) return SM_OOO_MIN;
    uint64_t ws = h->sm_ws > 0 ? (uint64_t)h->sm_ws : SM_DEFAULT_WINDOW;
    uint64_t cs = cj_hdr_has(h, CJ_HK_SM_CS) && h->sm_cs > 0 ? (uint64_t)h->sm_cs : SM_DEFAULT_CHUNK;
    uint64_t n = ws / cs + (ws % cs != 0) + 1;
    if (n > SM_OOO_MAX) n = SM_OOO_MAX;
    return n < SM_OOO_MIN ? SM_OOO_MIN : (size_t)n;
}

/* A sink stream holds only chunks waiting ahead of a gap: a sender keeps at
 * most its window (+ the chunk that crossed it) beyond the ACKed offset, and
 * that offset never passes what was consumed.  Room for one more chunk. */
static uint64_t sink_reserve(const struct cj_hdr *h, uint64_t sz)
{
    uint64_t ws = cj_hdr_has(h, CJ_HK_SM_WS) && h->sm_ws > 0 ? (uint64_t)h->sm_ws : SM_DEFAULT_WINDOW;
    uint64_t cs = cj_hdr_has(h, CJ_HK_SM_CS) && h->sm_cs > 0 ? (uint64_t)h->sm_cs : SM_DEFAULT_CHUNK;
    if (ws > CJ_STREAM_MAX_BLOB) ws = CJ_STREAM_MAX_BLOB;
    if (cs > CJ_STREAM_MAX_BLOB) cs = CJ_STREAM_MAX_BLOB;
    uint64_t need = ws + 2 * cs;
    return need < sz ? need : sz;
}

/* ---- opening a stream ---------------------------------------------------------------- */

/* Room in the table: evicts the oldest finished state if needed. */
static bool rx_room(struct cj_stream_ep *ep)
{
    if (ep->n_rx < ep->lim.max_streams) return true;
    struct rx_stream *old = TAILQ_FIRST(&ep->finished);
    if (!old) return false;
    rx_destroy(old);
    return true;
}

static struct rx_stream *rx_new(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    struct rx_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->timer = evtimer_new(ep->base, rx_timer_cb, s);
    s->blob = evbuffer_new();
    if (!s->timer || !s->blob) {
        if (s->timer) event_free(s->timer);
        if (s->blob) evbuffer_free(s->blob);
        free(s);
        return NULL;
    }
    s->ep = ep;
    s->id = h->sm_id;
    s->id_neg = h->sm_id_neg;
    s->reliable = cj_hdr_has(h, CJ_HK_SM_RS) && h->sm_rs;
    strcpy(s->origin, h->origin);
    strcpy(s->ch, h->sm_ch);
    strcpy(s->tp, h->sm_tp);
    s->has_ri = cj_hdr_has(h, CJ_HK_SM_RI);
    if (s->has_ri) strcpy(s->ri, h->sm_ri);
    s->sz = (uint64_t)h->sm_sz;
    s->ws = cj_hdr_has(h, CJ_HK_SM_WS) ? h->sm_ws : 0;
    s->max_ooo = ooo_limit(h);
    size_t b = key_hash(ep, s->origin, s->id);
    s->hnext = ep->buckets[b];
    ep->buckets[b] = s;
    ep->n_rx++;
    return s;
}

/* The first chunk of an unknown stream: admit it, or refuse it with an error
 * notice (the refused stream is remembered so its other chunks stay silent). */
static struct rx_stream *rx_open(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    const char *ri = cj_hdr_has(h, CJ_HK_SM_RI) ? h->sm_ri : NULL;
    if (!rx_room(ep)) {
        cj_log_warning("stream: refusing stream from %s (%s/%s): %u streams open", h->origin, h->sm_ch, h->sm_tp,
                       ep->n_rx);
        rx_send_error(ep, h->origin, h->sm_id, h->sm_id_neg, h->sm_ch, h->sm_tp, ri, "StreamError",
                      "too many streams");
        return NULL;
    }
    struct rx_stream *s = rx_new(ep, h);
    if (!s) {
        rx_send_error(ep, h->origin, h->sm_id, h->sm_id_neg, h->sm_ch, h->sm_tp, ri, "StreamError",
                      "out of memory");
        return NULL;
    }
    rx_arm(s, ep->lim.rx_idle);
    uint64_t sz = (uint64_t)h->sm_sz;
    bool reply = strcmp(h->sm_ch, CJ_STREAM_RETURN_ONLY) == 0;
    if (reply && ri && (s->req = req_match_reply(ep, h->origin, ri))) {
        req_bind_rx(s->req, s);   /* bound first: a refused reply fails its request */
        const struct cj_stream_sink *sk = req_sink(s->req);
        if (sk) {
            s->sinking = s->sink_live = true;
            s->sink = *sk;
            s->hold = sk->hold_acks;
            s->handle = req_handle(s->req);
        }
    }
    /* sm__sz is checked before anything is allocated for the data (§4.6). */
    if (sz > ep->lim.max_blob) {
        rx_fail(s, true, "BlobSizeError", "blob size %" PRIu64 " exceeds limit %" PRIu64, sz, ep->lim.max_blob);
        return NULL;
    }
    if (!reply && !sm_handler_find(ep, h->sm_ch, h->sm_tp)) {
        rx_fail(s, true, "StreamError", "no handler for %s:%s", h->sm_ch, h->sm_tp);
        return NULL;
    }
    uint64_t need = s->sinking ? sink_reserve(h, sz) : sz;
    if (ep->rx_reserved + need > ep->lim.max_buffered) {
        rx_fail(s, true, "StreamError", "receiver buffer limit reached (%" PRIu64 " bytes reserved)",
                ep->rx_reserved);
        return NULL;
    }
    s->reserved = need;
    ep->rx_reserved += need;
    return s;
}

/* ---- chunks ------------------------------------------------------------------------- */

static bool ooo_has(const struct rx_stream *s, uint64_t sq)
{
    size_t lo = 0, hi = s->n_ooo;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ooo[mid].sq == sq) return true;
        if (s->ooo[mid].sq < sq) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

/* Keeps an out-of-sequence chunk (sorted by sm__sq).  -1: stream failed. */
static int ooo_insert(struct rx_stream *s, uint64_t sq, uint64_t os, struct evbuffer *payload, uint64_t len)
{
    if (s->n_ooo >= s->max_ooo) {
        rx_fail(s, true, "StreamError", "too many out-of-sequence chunks");
        return -1;
    }
    if (s->n_ooo == s->cap_ooo) {
        size_t cap = s->cap_ooo ? s->cap_ooo * 2 : 8;
        if (cap > s->max_ooo) cap = s->max_ooo;
        struct ooo_chunk *n = realloc(s->ooo, cap * sizeof *n);
        if (!n) {
            rx_fail(s, true, "StreamError", "out of memory");
            return -1;
        }
        s->ooo = n;
        s->cap_ooo = cap;
    }
    struct evbuffer *data = evbuffer_new();
    if (!data) {
        rx_fail(s, true, "StreamError", "out of memory");
        return -1;
    }
    evbuffer_add_buffer(data, payload);
    size_t i = s->n_ooo;
    while (i > 0 && s->ooo[i - 1].sq > sq) i--;
    memmove(&s->ooo[i + 1], &s->ooo[i], (s->n_ooo - i) * sizeof *s->ooo);
    s->ooo[i] = (struct ooo_chunk){ .sq = sq, .os = os, .len = len, .data = data };
    s->n_ooo++;
    return 0;
}

/* Drops buffered chunks past the FINAL one (§4.5). */
static void ooo_trim(struct rx_stream *s)
{
    struct cj_stream_ep *ep = s->ep;
    while (s->n_ooo && s->ooo[s->n_ooo - 1].sq > s->final_sq) {
        struct ooo_chunk *c = &s->ooo[--s->n_ooo];
        s->data_bytes -= c->len;
        s->buffered -= c->len;
        ep->rx_buffered -= c->len;
        evbuffer_free(c->data);
    }
}

/* Appends the chunk that is next in sequence (its offset already checked),
 * or hands it to the sink.  -1: the stream failed (sink refused it, or the
 * owner ended the request from inside the callback). */
static int rx_append(struct rx_stream *s, struct evbuffer *data)
{
    struct cj_stream_ep *ep = s->ep;
    size_t len = evbuffer_get_length(data);
    uint64_t off = s->consumed;
    s->consumed += len;
    s->next_sq++;
    if (!s->sinking) {
        evbuffer_add_buffer(s->blob, data);   /* moves the chains: no copy */
        return 0;
    }
    s->buffered -= len;   /* the owner holds these bytes now, not us */
    ep->rx_buffered -= len;
    int rc = 0;
    if (len && s->sink_live) rc = s->sink.data(s->sink.arg, off, data);
    size_t left = evbuffer_get_length(data);
    if (left) evbuffer_drain(data, left);
    if (s->state != RX_ACTIVE) return -1;
    if (rc < 0) {
        rx_fail(s, true, "StreamError", "sink refused %zu bytes at offset %" PRIu64, len, off);
        return -1;
    }
    return 0;
}

/* Appends the chunk, then every buffered one that is now in sequence.  Each
 * buffered chunk leaves the array before it is handed on, so a sink callback
 * failing the stream finds the array consistent.  -1: stream failed (a
 * chunk's sm__os is not where the blob ends, or rx_append failed). */
static int rx_consume(struct rx_stream *s, uint64_t sq, uint64_t os, struct evbuffer *payload)
{
    if (os != s->consumed) goto bad;
    if (rx_append(s, payload)) return -1;
    while (s->n_ooo && s->ooo[0].sq == s->next_sq) {
        struct ooo_chunk c = s->ooo[0];
        memmove(s->ooo, s->ooo + 1, (s->n_ooo - 1) * sizeof *s->ooo);
        s->n_ooo--;
        sq = c.sq;
        os = c.os;
        if (os != s->consumed) {   /* its bytes stay counted in buffered until rx_fail releases all */
            evbuffer_free(c.data);
            goto bad;
        }
        int rc = rx_append(s, c.data);
        evbuffer_free(c.data);
        if (rc) return -1;
    }
    return 0;
bad:
    rx_fail(s, true, "StreamError", "chunk %" PRIu64 " at offset %" PRIu64 ", expected %" PRIu64, sq, os,
            s->consumed);
    return -1;
}

/* Checks a new (not duplicate) chunk against sm__sz and the FINAL rules.  -1: failed. */
static int rx_check_chunk(struct rx_stream *s, const struct cj_hdr *h, uint64_t len)
{
    uint64_t sq = (uint64_t)h->sm_sq, os = (uint64_t)h->sm_os;
    if (os > s->sz || len > s->sz - os || len > s->sz - s->data_bytes) {
        rx_fail(s, true, "BlobSizeError",
                "chunk %" PRIu64 " (offset %" PRIu64 ", %" PRIu64 " bytes) goes past sm__sz %" PRIu64, sq, os, len,
                s->sz);
        return -1;
    }
    if (h->sm_dt != CJ_SM_FINAL) return 0;
    if (s->final_seen) {
        rx_fail(s, true, "StreamError", "second FINAL chunk %" PRIu64 " (first %" PRIu64 ")", sq, s->final_sq);
        return -1;
    }
    if (os + len != s->sz) {
        rx_fail(s, true, "BlobSizeError", "FINAL chunk %" PRIu64 " ends at %" PRIu64 ", sm__sz %" PRIu64, sq,
                os + len, s->sz);
        return -1;
    }
    s->final_seen = true;
    s->final_sq = sq;
    ooo_trim(s);
    return 0;
}

static void rx_chunk(struct rx_stream *s, const struct cj_hdr *h, struct evbuffer *payload)
{
    struct cj_stream_ep *ep = s->ep;
    uint64_t sq = (uint64_t)h->sm_sq, os = (uint64_t)h->sm_os;
    uint64_t len = evbuffer_get_length(payload);
    if ((uint64_t)h->sm_sz != s->sz) {
        rx_fail(s, true, "StreamError", "sm__sz changed from %" PRIu64 " to %" PRId64, s->sz, h->sm_sz);
        return;
    }
    /* The blob's headers are chunk 0's; the stream was keyed on the first chunk seen. */
    if (strcmp(h->sm_ch, s->ch) != 0 || strcmp(h->sm_tp, s->tp) != 0 || cj_hdr_has(h, CJ_HK_SM_RI) != s->has_ri ||
        (s->has_ri && strcmp(h->sm_ri, s->ri) != 0)) {
        rx_fail(s, true, "StreamError", "chunk %" PRIu64 " changes sm__ch, sm__tp or sm__ri", sq);
        return;
    }
    if (s->final_seen && sq > s->final_sq) {   /* after FINAL: ignored */
        ep->st.dup_chunks++;
        return;
    }
    if (sq < s->next_sq || ooo_has(s, sq)) {   /* duplicate */
        ep->st.dup_chunks++;
        if (s->reliable) rx_reack(s);
        return;
    }
    if (rx_check_chunk(s, h, len)) return;
    if (s->sinking && sq != s->next_sq && s->buffered + len > s->reserved) {
        rx_fail(s, true, "StreamError",
                "chunk %" PRIu64 ": %" PRIu64 " bytes would wait ahead of chunk %" PRIu64 ", more than the window",
                sq, s->buffered + len, s->next_sq);
        return;
    }
    if (sq == 0 && !s->have_chunk0) {
        if (rx_keep_chunk0(s, h)) return;
        if (s->sink_live && s->sink.begin) {
            int rc = s->sink.begin(s->sink.arg, h, s->sz);
            if (s->state != RX_ACTIVE) return;
            if (rc < 0) {
                rx_fail(s, true, "StreamError", "sink refused the reply (%" PRIu64 " bytes)", s->sz);
                return;
            }
        }
    }
    s->data_bytes += len;
    s->buffered += len;
    ep->rx_buffered += len;
    if (sq == s->next_sq ? rx_consume(s, sq, os, payload) : ooo_insert(s, sq, os, payload, len)) return;

    rx_arm(s, ep->lim.rx_idle);
    if (s->req) req_on_rx_progress(s->req);
    if (s->final_seen && s->next_sq > s->final_sq) rx_complete(s);
    else if (rx_ack_upto(s) - s->last_ack_os >= rx_ack_interval(s)) rx_ack(s, rx_ack_upto(s), s->next_sq - 1);
}

/* sm__dt 6 on sm__DATA: the sender gave up (§6 "sender error"). */
static void rx_sender_abort(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    struct rx_stream *s = rx_lookup(ep, h->origin, h->sm_id, h->sm_id_neg);
    ep->st.errors_in++;
    if (!s || s->state != RX_ACTIVE) return;
    rx_fail(s, false, NULL, "sender aborted: %.*s", (int)(h->sm_em.len > 120 ? 120 : h->sm_em.len),
            h->sm_em.p ? (const char *)h->sm_em.p : "");
}

static const uint64_t DATA_KEYS = CJ_HK_BIT(CJ_HK_SM_ID) | CJ_HK_BIT(CJ_HK_SM_DT) | CJ_HK_BIT(CJ_HK_SM_SQ) |
                                  CJ_HK_BIT(CJ_HK_SM_OS) | CJ_HK_BIT(CJ_HK_SM_SZ) | CJ_HK_BIT(CJ_HK_SM_CH) |
                                  CJ_HK_BIT(CJ_HK_SM_TP);

void rx_input_data(struct cj_stream_ep *ep, const struct cj_hdr *h, struct evbuffer *payload)
{
    if (cj_hdr_has(h, CJ_HK_SM_ID) && cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR) {
        rx_sender_abort(ep, h);
        return;
    }
    if ((h->have & DATA_KEYS) != DATA_KEYS || (h->sm_dt != CJ_SM_CHUNK && h->sm_dt != CJ_SM_FINAL)) {
        ep->st.dropped++;
        cj_log_debug("stream: chunk from %s without the sm__ keys of a data chunk; dropped", h->origin);
        return;
    }
    ep->st.chunks_in++;
    struct rx_stream *s = rx_lookup(ep, h->origin, h->sm_id, h->sm_id_neg);
    if (!s && !(s = rx_open(ep, h))) return;
    if (s->state == RX_ACTIVE) {
        rx_chunk(s, h, payload);
        return;
    }
    /* A finished stream: a reliable sender's retransmission gets the final state again
     * (a draining one: what the owner released so far). */
    ep->st.dup_chunks++;
    if ((s->state == RX_DONE || s->state == RX_DRAIN) && s->reliable) rx_reack(s);
}

/* ---- hold_acks releases ----------------------------------------------------------------- */

void rx_release_upto(struct rx_stream *s, uint64_t upto)
{
    struct cj_stream_ep *ep = s->ep;
    if (!s->hold || (s->state != RX_ACTIVE && s->state != RX_DRAIN)) return;
    if (upto > s->consumed) upto = s->consumed;   /* only bytes already handed to the sink */
    if (upto <= s->released) return;
    s->released = upto;
    if (s->state == RX_DRAIN) {
        if (s->released < s->sz) return;
        rx_ack(s, s->sz, s->final_sq);
        rx_retire(s, RX_DONE, s->reliable ? s->keep : ep->lim.linger);
        return;
    }
    rx_arm(s, ep->lim.rx_idle);   /* a release is progress: the sender may go on */
    if (s->req) req_on_rx_progress(s->req);
    if (rx_ack_upto(s) - s->last_ack_os >= rx_ack_interval(s)) rx_ack(s, rx_ack_upto(s), s->next_sq - 1);
}

int rx_release_handle(struct cj_stream_ep *ep, uint64_t handle, uint64_t upto)
{
    struct rx_stream *s;
    TAILQ_FOREACH(s, &ep->draining, fin)
        if (s->handle == handle) {
            rx_release_upto(s, upto);
            return 0;
        }
    return -1;
}
