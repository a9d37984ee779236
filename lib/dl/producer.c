/* SPDX-License-Identifier: Apache-2.0 */
/* producer.c — the download service's producer side (see producer.h). */
#include "dl/producer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"

#include "dl/dlmsg.h"
#include "payload/fobs.h"
#include "util/mp.h"
#include "util/uuid.h"

/* Pulls, confirms and cancels are a few hundred bytes; anything much larger is not one. */
#define MAX_REQUEST_BYTES 65536

struct rcv {
    char *fqcn;
    enum cj_dl_rcv_state state;
    bool expected, pulled;
    bool awaiting;                     /* a terminal serve with a nonce is pending */
    bool await_ok;                     /* ... and it was eof (false: error) */
    char nonce[CJ_DL_NONCE_LEN + 1];
    uint64_t bytes;
    uint32_t replies;
};

struct srv;

struct ref {
    TAILQ_ENTRY(ref) link;
    struct cj_dl_producer *p;
    char id[CJ_DL_REF_ID_MAX + 1];
    size_t n_items;
    uint64_t *sizes;
    uint64_t total;
    cj_dl_item_fn item_fn;
    cj_dl_item_read_fn item_read;
    struct srv *srvs;                  /* item_read: replies being streamed */
    cj_dl_ref_done_fn done;
    void *ctx;
    uint32_t num_receivers;            /* count mode */
    bool identity;                     /* receiver_ids given */
    struct rcv *rcv;
    size_t n_rcv, cap_rcv, n_unlisted;
    double timeout, last;
    struct event *timer;
};

struct tomb {
    TAILQ_ENTRY(tomb) link;
    double expires;
    bool ok;
    char ref[CJ_DL_REF_ID_MAX + 1];
    char *requester;
};

TAILQ_HEAD(ref_list, ref);
TAILQ_HEAD(tomb_list, tomb);

struct cj_dl_producer {
    struct event_base *base;
    struct cj_stream_ep *ep;
    struct cj_dl_producer_cfg cfg;
    struct ref_list refs;
    struct tomb_list tombs;            /* oldest first: all share one TTL, so also soonest to expire */
    struct cj_dl_producer_stats st;
};

/* ---- tombstones ----------------------------------------------------------------------- */

static void tomb_free(struct cj_dl_producer *p, struct tomb *t)
{
    TAILQ_REMOVE(&p->tombs, t, link);
    p->st.tombstones--;
    free(t->requester);
    free(t);
}

static void tomb_purge(struct cj_dl_producer *p, double now)
{
    struct tomb *t;
    while ((t = TAILQ_FIRST(&p->tombs)) && t->expires <= now) tomb_free(p, t);
}

static void tomb_add(struct cj_dl_producer *p, const char *ref, const char *requester, bool ok, double now)
{
    struct tomb *t = calloc(1, sizeof *t);
    if (!t || !(t->requester = strdup(requester))) {
        free(t);
        cj_log_warning("dl: out of memory keeping the tombstone of ref %s for %s", ref, requester);
        return;
    }
    tomb_purge(p, now);
    while (p->st.tombstones >= p->cfg.max_tombstones && !TAILQ_EMPTY(&p->tombs))
        tomb_free(p, TAILQ_FIRST(&p->tombs));
    snprintf(t->ref, sizeof t->ref, "%s", ref);
    t->ok = ok;
    t->expires = now + p->cfg.tombstone_ttl;
    TAILQ_INSERT_TAIL(&p->tombs, t, link);
    p->st.tombstones++;
}

static enum cj_dl_tombstone tomb_find(struct cj_dl_producer *p, const char *ref, const char *requester)
{
    tomb_purge(p, cj_now());
    struct tomb *t;
    TAILQ_FOREACH(t, &p->tombs, link)
        if (!strcmp(t->ref, ref) && !strcmp(t->requester, requester))
            return t->ok ? CJ_DL_TOMB_SUCCESS : CJ_DL_TOMB_FAILED;
    return CJ_DL_TOMB_NONE;
}

/* ---- refs and receivers --------------------------------------------------------------- */

static struct ref *ref_find(const struct cj_dl_producer *p, const char *id)
{
    struct ref *r;
    TAILQ_FOREACH(r, &p->refs, link)
        if (!strcmp(r->id, id)) return r;
    return NULL;
}

static void srv_detach_all(struct ref *r);

static void ref_free(struct ref *r)
{
    srv_detach_all(r);
    if (r->timer) event_free(r->timer);
    for (size_t i = 0; i < r->n_rcv; i++) free(r->rcv[i].fqcn);
    free(r->rcv);
    free(r->sizes);
    free(r);
}

static struct rcv *rcv_find(struct ref *r, const char *fqcn)
{
    for (size_t i = 0; i < r->n_rcv; i++)
        if (!strcmp(r->rcv[i].fqcn, fqcn)) return &r->rcv[i];
    return NULL;
}

static struct rcv *rcv_add(struct ref *r, const char *fqcn, bool expected)
{
    if (r->n_rcv == r->cap_rcv) {
        size_t cap = r->cap_rcv ? 2 * r->cap_rcv : 4;
        struct rcv *n = realloc(r->rcv, cap * sizeof *n);
        if (!n) return NULL;
        r->rcv = n;
        r->cap_rcv = cap;
    }
    struct rcv *v = &r->rcv[r->n_rcv];
    memset(v, 0, sizeof *v);
    if (!(v->fqcn = strdup(fqcn))) return NULL;
    v->expected = expected;
    r->n_rcv++;
    if (!expected) r->n_unlisted++;
    return v;
}

/* The requester's record, created on its first pull (NULL: too many, or no memory). */
static struct rcv *rcv_get(struct ref *r, const char *fqcn)
{
    struct rcv *v = rcv_find(r, fqcn);
    if (v) return v;
    if (r->n_unlisted >= r->p->cfg.max_receivers) {
        cj_log_warning("dl: ref %s already has %zu receivers; %s refused", r->id, r->n_unlisted, fqcn);
        return NULL;
    }
    return rcv_add(r, fqcn, false);
}

static void fill_info(const struct ref *r, struct cj_dl_receiver_info *out)
{
    for (size_t i = 0; i < r->n_rcv; i++) {
        const struct rcv *v = &r->rcv[i];
        out[i] = (struct cj_dl_receiver_info){
            .fqcn = v->fqcn, .state = v->state, .expected = v->expected, .pulled = v->pulled,
            .awaiting_confirm = v->awaiting, .bytes = v->bytes, .replies = v->replies,
        };
    }
}

static const char *outcome_name(enum cj_dl_outcome o)
{
    return o == CJ_DL_OUT_OK ? "completed" : o == CJ_DL_OUT_FAILED ? "failed" : "timed out";
}

/* Ends a ref: tombstones (only when it finished), unlink, done, free. */
static void ref_finish(struct ref *r, enum cj_dl_outcome outcome)
{
    struct cj_dl_producer *p = r->p;
    double now = cj_now();
    if (outcome != CJ_DL_OUT_TIMEOUT)
        for (size_t i = 0; i < r->n_rcv; i++)
            if (r->rcv[i].state != CJ_DL_RCV_PENDING) tomb_add(p, r->id, r->rcv[i].fqcn, r->rcv[i].state == CJ_DL_RCV_OK, now);
    if (outcome == CJ_DL_OUT_TIMEOUT)
        for (size_t i = 0; i < r->n_rcv; i++)
            if (r->rcv[i].state == CJ_DL_RCV_PENDING) r->rcv[i].state = CJ_DL_RCV_FAILED;   /* fail closed */
    TAILQ_REMOVE(&p->refs, r, link);
    srv_detach_all(r);   /* before done: reads answered from inside it find their ref gone */
    p->st.refs_live--;
    if (outcome == CJ_DL_OUT_OK) p->st.refs_ok++;
    else if (outcome == CJ_DL_OUT_FAILED) p->st.refs_failed++;
    else p->st.refs_timed_out++;
    uint64_t bytes = 0;
    for (size_t i = 0; i < r->n_rcv; i++) bytes += r->rcv[i].bytes;
    cj_log(outcome == CJ_DL_OUT_OK ? CJ_LOG_INFO : CJ_LOG_WARNING,
        "dl: ref %s %s (%zu receivers, %zu items, %" PRIu64 " bytes served)", r->id, outcome_name(outcome), r->n_rcv,
        r->n_items, bytes);
    if (r->done) {
        struct cj_dl_receiver_info *info = calloc(r->n_rcv ? r->n_rcv : 1, sizeof *info);
        if (info) fill_info(r, info);
        else cj_log_warning("dl: out of memory reporting the receivers of ref %s", r->id);
        r->done(r->ctx, r->id, outcome, info, info ? r->n_rcv : 0);
        free(info);
    }
    ref_free(r);
}

/* Finished when every expected receiver has a final status.  1 if it finished (r is gone). */
static int ref_check_complete(struct ref *r)
{
    size_t final = 0, failed = 0;
    for (size_t i = 0; i < r->n_rcv; i++) {
        const struct rcv *v = &r->rcv[i];
        if (r->identity && !v->expected) continue;
        if (v->state == CJ_DL_RCV_PENDING) {
            if (r->identity) return 0;
            continue;
        }
        final++;
        failed += v->state == CJ_DL_RCV_FAILED;
    }
    if (!r->identity && (r->num_receivers == 0 || final < r->num_receivers)) return 0;
    ref_finish(r, failed ? CJ_DL_OUT_FAILED : CJ_DL_OUT_OK);
    return 1;
}

/* A receiver's first final status (later ones are ignored).  1 if the ref finished. */
static int rcv_finalize(struct ref *r, struct rcv *v, bool ok, const char *why)
{
    if (v->state != CJ_DL_RCV_PENDING) return 0;
    v->state = ok ? CJ_DL_RCV_OK : CJ_DL_RCV_FAILED;
    v->awaiting = false;
    cj_log(ok ? CJ_LOG_INFO : CJ_LOG_WARNING, "dl: ref %s receiver %s %s (%s): %" PRIu64 " bytes in %" PRIu32 " replies",
                                        r->id, v->fqcn, ok ? "done" : "failed", why, v->bytes, v->replies);
    return ref_check_complete(r);
}

static void ref_touch(struct ref *r)
{
    r->last = cj_now();
}

static void ref_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct ref *r = arg;
    double idle = cj_now() - r->last;
    if (idle > r->timeout) {
        cj_log_warning("dl: ref %s idle for %.1f s (timeout %.1f s): expired", r->id, idle, r->timeout);
        ref_finish(r, CJ_DL_OUT_TIMEOUT);
        return;
    }
    struct timeval tv = cj_tv(r->timeout - idle + 0.001);   /* strictly past the deadline */
    evtimer_add(r->timer, &tv);
}

/* ---- replies ------------------------------------------------------------------------------ */

static void send_reply(struct cj_dl_producer *p, const struct cj_stream_reqctx *rq, const char *rc,
                       const char *encoding, struct evbuffer *blob)
{
    struct cj_stream_msg m = { .encoding = encoding };
    if (!rq->has_ri) {
        evbuffer_free(blob);
        return;
    }
    if (cj_stream_reply(p->ep, rq, rc, &m, blob, NULL, NULL))
        cj_log_warning("dl: cannot send a %s reply to %s", rc ? rc : "ok", rq->origin);
}

/* A reply without a body: rc NULL = ok. */
static void answer(struct cj_dl_producer *p, const struct cj_stream_reqctx *rq, const char *rc)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) return;
    if (rc && !strcmp(rc, "invalid_request")) p->st.invalid_requests++;
    send_reply(p, rq, rc, "none", b);
}

static void send_sbuffer(struct cj_dl_producer *p, const struct cj_stream_reqctx *rq, msgpack_sbuffer *sb)
{
    struct evbuffer *b = mp_sbuffer_to_evbuffer(sb);
    if (!b) {
        cj_log_warning("dl: out of memory replying to %s", rq->origin);
        return;
    }
    send_reply(p, rq, NULL, "fobs", b);
}

/* {"status": "eof"|"error"} with or without a nonce. */
static void send_terminal(struct cj_dl_producer *p, const struct cj_stream_reqctx *rq, bool ok, const char *nonce)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    if (cj_dl_encode_terminal(&sb, ok ? CJ_DL_STATUS_EOF : CJ_DL_STATUS_ERROR, nonce, &e))
        cj_log_warning("dl: cannot encode a terminal reply: %s", e.msg);
    else
        send_sbuffer(p, rq, &sb);
    msgpack_sbuffer_destroy(&sb);
    if (ok) p->st.eof_replies++;
    else p->st.error_replies++;
}

/* Builds the data reply for items [start, start+count): framing from the plan,
 * item bytes appended by the owner.  NULL when an item cannot be produced. */
static struct evbuffer *build_data(struct ref *r, uint64_t start, size_t count)
{
    struct cj_dl_producer *p = r->p;
    msgpack_sbuffer fr;
    struct cj_err e = { 0 };
    size_t cap = CJ_DL_MAX_PIECES(count), np = 0;
    struct cj_dl_piece *pieces = malloc(cap * sizeof *pieces);
    struct evbuffer *out = evbuffer_new();
    struct cj_dl_reply_opts o = { .datum_min = p->cfg.datum_min, .cancel_capable = true };
    msgpack_sbuffer_init(&fr);
    if (!pieces || !out) {
        cj_log_warning("dl: out of memory building a reply for ref %s", r->id);
        goto fail;
    }
    if (cj_dl_plan_data_reply(&fr, start, r->sizes + start, count, &o, pieces, cap, &np, &e)) {
        cj_log_warning("dl: cannot frame a reply for ref %s: %s", r->id, e.msg);
        goto fail;
    }
    for (size_t i = 0; i < np; i++) {
        const struct cj_dl_piece *pc = &pieces[i];
        if (pc->item < 0) {
            if (evbuffer_add(out, fr.data + pc->off, (size_t)pc->len)) goto fail;
            continue;
        }
        size_t idx = (size_t)start + (size_t)pc->item, before = evbuffer_get_length(out);
        if (r->item_fn(r->ctx, idx, out)) {
            cj_log_warning("dl: ref %s: item %zu cannot be produced", r->id, idx);
            p->st.item_errors++;
            goto fail;
        }
        if (evbuffer_get_length(out) - before != pc->len) {
            cj_log_warning("dl: ref %s: item %zu gave %zu bytes, announced %" PRIu64, r->id, idx,
                           evbuffer_get_length(out) - before, pc->len);
            p->st.item_errors++;
            goto fail;
        }
    }
    msgpack_sbuffer_destroy(&fr);
    free(pieces);
    return out;
fail:
    msgpack_sbuffer_destroy(&fr);
    free(pieces);
    if (out) evbuffer_free(out);
    return NULL;
}

/* A terminal serve (§2 step 5): the nonce form only for a confirm-capable
 * receiver without a final status; otherwise the legacy form, which makes the
 * receiver final at once.  An error is final (failed) at once either way. */
static void serve_terminal(struct ref *r, struct rcv *v, const struct cj_stream_reqctx *rq, bool capable, bool ok)
{
    struct cj_dl_producer *p = r->p;
    char nonce[CJ_DL_NONCE_LEN + 1];
    bool want = cj_dl_terminal_wants_confirm(capable, !p->cfg.confirm_disabled, v->state != CJ_DL_RCV_PENDING);
    if (want && cj_dl_new_nonce(nonce)) want = false;
    send_terminal(p, rq, ok, want ? nonce : NULL);
    if (want) {
        v->awaiting = true;
        v->await_ok = ok;
        memcpy(v->nonce, nonce, sizeof nonce);   /* replaces an earlier serve's nonce */
    }
    if (!want || !ok) rcv_finalize(r, v, ok, ok ? "eof served" : "producer error");
}

/* ---- streamed replies (item_read: bytes come asynchronously, e.g. from disk) ------------------ *
 *
 * One struct srv per data reply.  The reply is planned (framing + item pieces),
 * the first range of the first item is read BEFORE the reply stream starts (so
 * an item that cannot be read still gets {"status":"error"}), then the stream
 * asks for bytes (want) and gets the framing at once and item bytes one range
 * (<= CJ_DL_READ_MAX) at a time, one read outstanding.  A srv is the token of
 * its reads: it outlives its ref (removed, finished, producer freed) until the
 * outstanding read is answered and the stream is over, and then knows it is
 * dead (r == NULL). */

#define CJ_DL_READ_MAX ((size_t)1 << 20)

struct srv {
    struct srv *next;
    struct ref *r;                     /* NULL once dead */
    struct cj_stream_ep *ep;
    struct cj_stream_reqctx rq;
    bool confirm_capable;
    uint64_t start;
    size_t count;
    msgpack_sbuffer fr;                /* framing bytes */
    struct cj_dl_piece *pieces;
    size_t np, pi;                     /* pieces, the current one */
    uint64_t poff;                     /* bytes of the current piece already fed (or read) */
    uint64_t size, fed;
    uint64_t id;                       /* the reply stream */
    bool started, stream_live, reading, in_pump;
    size_t want_len;                   /* length of the outstanding read */
    size_t rd_pi;                      /* ... its piece and offset */
    uint64_t rd_off;
    struct evbuffer *ready;            /* item bytes read, not fed yet */
};

static void srv_free(struct srv *s)
{
    msgpack_sbuffer_destroy(&s->fr);
    free(s->pieces);
    if (s->ready) evbuffer_free(s->ready);
    free(s);
}

static void srv_unlink(struct srv *s)
{
    if (!s->r) return;
    for (struct srv **pp = &s->r->srvs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    s->r = NULL;
    s->next = NULL;
}

static void srv_maybe_free(struct srv *s)
{
    if (!s->r && !s->stream_live && !s->reading && !s->in_pump) srv_free(s);
}

/* Stops s and forgets it (its ref is going away or it failed). */
static void srv_kill(struct srv *s)
{
    srv_unlink(s);
    if (s->stream_live && s->fed < s->size && cj_stream_cancel(s->ep, s->id) == 0) s->stream_live = false;
    srv_maybe_free(s);
}

/* The ref goes away (removed, finished, expired, producer freed).  A pull
 * whose reply has not sent a byte yet (first read outstanding, or the stream
 * not fed yet: cancelling it tells the requester nothing) is answered
 * invalid_request, as it would be a moment later, rather than left to time
 * out; a reply under way is cancelled (the requester gets an error notice). */
static void srv_detach_all(struct ref *r)
{
    struct cj_dl_producer *p = r->p;
    while (r->srvs) {
        struct srv *s = r->srvs;
        bool unsent = !s->started || s->fed == 0;
        struct cj_stream_reqctx rq = s->rq;
        srv_kill(s);
        if (unsent) answer(p, &rq, "invalid_request");
    }
}

static void srv_got(void *token, int err, struct evbuffer *data);

/* Asks for bytes of item piece `pi` from offset off (at most CJ_DL_READ_MAX).
 * at: where they land in the reply stream.  A read ends on a chunk boundary
 * of the stream when it can, so each chunk takes whole read buffers: a read
 * straddling two chunks would be copied in part and its buffer kept, nearly
 * empty, until the second chunk left. */
static void srv_read(struct srv *s, size_t pi, uint64_t off, uint64_t at)
{
    const struct cj_dl_piece *pc = &s->pieces[pi];
    uint64_t left = pc->len - off;
    uint64_t chunk = cj_stream_chunk_size(s->ep), max = CJ_DL_READ_MAX;
    if (chunk && chunk <= CJ_DL_READ_MAX) max = (CJ_DL_READ_MAX / chunk) * chunk - at % chunk;
    s->want_len = left < max ? (size_t)left : (size_t)max;
    s->rd_pi = pi;
    s->rd_off = off;
    s->reading = true;
    struct ref *r = s->r;
    r->item_read(r->ctx, (size_t)(s->start + (uint64_t)pc->item), off, s->want_len, srv_got, s);
}

/* The first item piece with bytes (np when none). */
static size_t srv_first_item(const struct srv *s)
{
    for (size_t i = 0; i < s->np; i++)
        if (s->pieces[i].item >= 0 && s->pieces[i].len > 0) return i;
    return s->np;
}

/* Feeds what can go now: framing, and at most one read range of item bytes;
 * starts the next read when the stream wants more and nothing is ready. */
static void srv_pump(struct srv *s)
{
    if (!s->r || !s->stream_live || s->in_pump) return;
    struct evbuffer *out = evbuffer_new();
    if (!out) return;
    bool took_item = false;
    s->in_pump = true;
    while (s->pi < s->np && s->r) {
        const struct cj_dl_piece *pc = &s->pieces[s->pi];
        if (pc->item < 0) {
            evbuffer_add(out, s->fr.data + pc->off + s->poff, (size_t)(pc->len - s->poff));
            s->pi++;
            s->poff = 0;
            continue;
        }
        if (s->poff >= pc->len) {
            s->pi++;
            s->poff = 0;
            continue;
        }
        if (s->ready) {
            size_t n = evbuffer_get_length(s->ready);
            evbuffer_add_buffer(out, s->ready);
            evbuffer_free(s->ready);
            s->ready = NULL;
            s->poff += n;
            took_item = true;
            continue;
        }
        if (took_item || s->reading) break;
        srv_read(s, s->pi, s->poff, s->fed + evbuffer_get_length(out));   /* may answer at once (s->ready set,
                                                                          or s killed on an error) */
        if (s->reading) break;
    }
    s->in_pump = false;
    size_t n = evbuffer_get_length(out);
    if (n && s->r && s->stream_live) {
        if (cj_stream_feed(s->ep, s->id, out)) {
            cj_log_warning("dl: ref %s: reply stream to %s refused %zu bytes", s->r->id, s->rq.origin, n);
            struct srv *k = s;
            evbuffer_free(out);
            srv_kill(k);
            return;
        }
        s->fed += n;
    }
    evbuffer_free(out);
    srv_maybe_free(s);
}

static void srv_want(void *arg, uint64_t fed)
{
    srv_pump(arg);
}

static void srv_done(void *arg, int status, const char *why)
{
    struct srv *s = arg;
    s->stream_live = false;
    if (status)
        cj_log_info("dl: reply to %s for ref %s ended early: %s", s->rq.origin, s->r ? s->r->id : "(gone)",
                    why ? why : "");
    srv_unlink(s);
    srv_maybe_free(s);
}

/* Starts the reply stream once the first item bytes are in hand. */
static void srv_start(struct srv *s)
{
    struct ref *r = s->r;
    struct cj_dl_producer *p = r->p;
    struct cj_stream_msg m = { .encoding = "fobs" };
    struct cj_stream_source src = { .size = s->size, .want = srv_want, .arg = s };
    if (cj_stream_reply_source(p->ep, &s->rq, NULL, &m, &src, srv_done, s, &s->id)) {
        cj_log_warning("dl: ref %s: cannot start a reply to %s", r->id, s->rq.origin);
        srv_kill(s);
        return;
    }
    s->started = s->stream_live = true;
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->count; i++) bytes += r->sizes[s->start + i];
    struct rcv *v = rcv_find(r, s->rq.origin);
    if (v) {
        v->bytes += bytes;
        v->replies++;
    }
    p->st.data_replies++;
    p->st.bytes_served += bytes;
    cj_log_debug("dl: ref %s -> %s: items %" PRIu64 "..%" PRIu64 " of %zu, %" PRIu64 " bytes (streamed)", r->id,
                 s->rq.origin, s->start, s->start + s->count - 1, r->n_items, bytes);
}

/* An item range that could not be read: {"status":"error"} if nothing was
 * sent yet, else the reply stream is cancelled (the receiver fails). */
static void srv_item_error(struct srv *s, const char *why)
{
    struct ref *r = s->r;
    struct cj_dl_producer *p = r->p;
    size_t idx = (size_t)(s->start + (uint64_t)s->pieces[s->rd_pi].item);
    p->st.item_errors++;
    cj_log_warning("dl: ref %s: item %zu cannot be read at offset %" PRIu64 " for %s: %s", r->id, idx, s->rd_off,
                   s->rq.origin, why);
    if (s->started) {
        srv_kill(s);
        return;
    }
    struct cj_stream_reqctx rq = s->rq;
    bool capable = s->confirm_capable;
    srv_kill(s);   /* before serve_terminal: it may finish (and free) the ref */
    struct rcv *v = rcv_find(r, rq.origin);
    if (v) serve_terminal(r, v, &rq, capable, false);
}

static void srv_got(void *token, int err, struct evbuffer *data)
{
    struct srv *s = token;
    s->reading = false;
    size_t n = data ? evbuffer_get_length(data) : 0;
    if (!s->r) {   /* dead: the ref went away while the read was outstanding */
        if (data) evbuffer_drain(data, n);
        srv_maybe_free(s);
        return;
    }
    if (err || !data || n != s->want_len) {
        char why[96];
        if (err) snprintf(why, sizeof why, "%s", strerror(err));
        else snprintf(why, sizeof why, "%zu bytes instead of %zu", n, s->want_len);
        if (data) evbuffer_drain(data, n);
        srv_item_error(s, why);
        return;
    }
    if (!s->ready && !(s->ready = evbuffer_new())) {
        evbuffer_drain(data, n);
        srv_item_error(s, "out of memory");
        return;
    }
    evbuffer_add_buffer(s->ready, data);
    if (!s->started) srv_start(s);
    else if (!s->in_pump) srv_pump(s);
}

/* A data reply for items [start, start+count) of an item_read ref. */
static void serve_streamed(struct ref *r, const struct cj_stream_reqctx *ctx, bool capable, uint64_t start, size_t count)
{
    struct cj_dl_producer *p = r->p;
    struct srv *s = calloc(1, sizeof *s);
    struct cj_err e = { 0 };
    size_t cap = CJ_DL_MAX_PIECES(count);
    struct cj_dl_reply_opts o = { .datum_min = p->cfg.datum_min, .cancel_capable = true };
    if (!s) goto oom;
    msgpack_sbuffer_init(&s->fr);
    if (!(s->pieces = malloc(cap * sizeof *s->pieces))) goto oom;
    if (cj_dl_plan_data_reply(&s->fr, start, r->sizes + start, count, &o, s->pieces, cap, &s->np, &e)) {
        cj_log_warning("dl: cannot frame a reply for ref %s: %s", r->id, e.msg);
        srv_free(s);
        struct rcv *v = rcv_find(r, ctx->origin);
        if (v) serve_terminal(r, v, ctx, capable, false);
        return;
    }
    for (size_t i = 0; i < s->np; i++) s->size += s->pieces[i].len;
    s->ep = p->ep;
    s->rq = *ctx;
    s->confirm_capable = capable;
    s->start = start;
    s->count = count;
    s->r = r;
    s->next = r->srvs;
    r->srvs = s;
    size_t k = srv_first_item(s);
    uint64_t at = 0;   /* the framing before it */
    for (size_t i = 0; i < k && i < s->np; i++) at += s->pieces[i].len;
    if (k < s->np) srv_read(s, k, 0, at);   /* the first bytes before anything is sent */
    else srv_start(s);                  /* no item bytes at all (empty items) */
    return;
oom:
    cj_log_warning("dl: out of memory building a reply for ref %s", r->id);
    if (s) srv_free(s);
}

/* §2 step 4-5. */
static void handle_pull(struct cj_dl_producer *p, const struct cj_dl_request *rq, const uint8_t *buf,
                        const struct cj_stream_reqctx *ctx)
{
    p->st.pulls++;
    if (!ctx->has_ri) {
        cj_log_debug("dl: pull for ref %s from %s without sm__ri; dropped", rq->ref_id, ctx->origin);
        return;
    }
    struct ref *r = ref_find(p, rq->ref_id);
    if (!r) {
        switch (cj_dl_pull_outcome(false, false, tomb_find(p, rq->ref_id, ctx->origin))) {
        case CJ_DL_REPLAY_EOF:
            p->st.replays++;
            send_terminal(p, ctx, true, NULL);
            return;
        case CJ_DL_REPLAY_ERROR:
            p->st.replays++;
            send_terminal(p, ctx, false, NULL);
            return;
        default:
            cj_log_info("dl: pull for unknown ref %s from %s", rq->ref_id, ctx->origin);
            answer(p, ctx, "invalid_request");
            return;
        }
    }
    struct rcv *v = rcv_get(r, ctx->origin);
    if (!v) {
        answer(p, ctx, "invalid_request");
        return;
    }
    ref_touch(r);
    v->pulled = true;
    uint64_t start;
    size_t count;
    struct cj_err e = { 0 };
    if (cj_dl_next_start(buf, rq->state, &start, &e)) {
        cj_log_warning("dl: ref %s: bad state from %s: %s", r->id, ctx->origin, e.msg);
        answer(p, ctx, "invalid_request");
        return;
    }
    if (!cj_dl_group(r->sizes, NULL, r->n_items, start, p->cfg.max_chunk, &count)) {
        serve_terminal(r, v, ctx, rq->confirm_capable, true);
        return;
    }
    if (r->item_read) {
        serve_streamed(r, ctx, rq->confirm_capable, start, count);
        return;
    }
    struct evbuffer *out = build_data(r, start, count);
    if (!out) {
        serve_terminal(r, v, ctx, rq->confirm_capable, false);
        return;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; i++) bytes += r->sizes[start + i];
    v->bytes += bytes;
    v->replies++;
    p->st.data_replies++;
    p->st.bytes_served += bytes;
    cj_log_debug("dl: ref %s -> %s: items %" PRIu64 "..%" PRIu64 " of %zu, %" PRIu64 " bytes", r->id, ctx->origin,
                 start, start + count - 1, r->n_items, bytes);
    send_reply(p, ctx, NULL, "fobs", out);
}

/* §5 confirm: accepted only with a pending terminal serve and the right nonce. */
static void handle_confirm(struct cj_dl_producer *p, const struct cj_dl_request *rq, const struct cj_stream_reqctx *ctx)
{
    struct ref *r = ref_find(p, rq->ref_id);
    if (ctx->has_ri) answer(p, ctx, NULL);   /* fire-and-forget normally; an unknown ref gets ok */
    if (!r) {
        cj_log_debug("dl: confirm for unknown ref %s from %s; ignored", rq->ref_id, ctx->origin);
        return;
    }
    struct rcv *v = rcv_find(r, ctx->origin);
    const char *why = NULL;
    if (!v || !v->awaiting) why = v && v->state != CJ_DL_RCV_PENDING ? "already final" : "no terminal serve pending";
    else if (!rq->has_nonce || strcmp(rq->confirm_nonce, v->nonce)) why = "nonce mismatch";
    else if (rq->confirm == CJ_DL_CONFIRM_OTHER) why = "unknown confirm value";
    if (why) {
        p->st.confirms_dropped++;
        cj_log_info("dl: confirm for ref %s from %s dropped: %s", r->id, ctx->origin, why);
        return;
    }
    p->st.confirms_accepted++;
    ref_touch(r);
    bool ok = rq->confirm == CJ_DL_CONFIRM_SUCCESS && v->await_ok;
    rcv_finalize(r, v, ok, ok ? "confirmed" : "confirmed failed");
}

/* §5 cancel: ignored unless the requester has pulled. */
static void handle_cancel(struct cj_dl_producer *p, const struct cj_dl_request *rq, const struct cj_stream_reqctx *ctx)
{
    struct ref *r = ref_find(p, rq->ref_id);
    if (ctx->has_ri) answer(p, ctx, NULL);
    struct rcv *v = r ? rcv_find(r, ctx->origin) : NULL;
    if (!v || !v->pulled) {
        p->st.cancels_ignored++;
        cj_log_info("dl: cancel for ref %s from %s ignored (%s)", rq->ref_id, ctx->origin,
                    r ? "it never pulled" : "unknown ref");
        return;
    }
    p->st.cancels++;
    rcv_finalize(r, v, false, "cancelled");
}

static int on_download(void *arg, struct cj_stream_blob *b)
{
    struct cj_dl_producer *p = arg;
    size_t len = evbuffer_get_length(b->data);
    const uint8_t *buf = len <= MAX_REQUEST_BYTES ? evbuffer_pullup(b->data, -1) : NULL;
    struct cj_dl_request rq;
    struct cj_err e = { 0 };
    if (!buf || cj_dl_decode_request(buf, len, &rq, &e)) {
        cj_log_info("dl: bad download request from %s (%zu bytes): %s", b->origin, len,
                    buf ? e.msg : "too large or no memory");
        answer(p, &b->req, "invalid_request");
        return 0;
    }
    switch (cj_dl_classify(&rq)) {
    case CJ_DL_ACT_CONFIRM:
        handle_confirm(p, &rq, &b->req);
        break;
    case CJ_DL_ACT_CANCEL:
        handle_cancel(p, &rq, &b->req);
        break;
    case CJ_DL_ACT_PULL:
        handle_pull(p, &rq, buf, &b->req);
        break;
    default:
        cj_log_info("dl: download request from %s without a usable ref_id", b->origin);
        answer(p, &b->req, "invalid_request");
        break;
    }
    return 0;
}

/* ---- the public side ------------------------------------------------------------------------ */

struct cj_dl_producer *cj_dl_producer_new(struct event_base *base, struct cj_stream_ep *ep,
                                          const struct cj_dl_producer_cfg *cfg)
{
    struct cj_dl_producer *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->base = base;
    p->ep = ep;
    if (cfg) p->cfg = *cfg;
    if (!p->cfg.max_chunk) p->cfg.max_chunk = CJ_DL_MAX_CHUNK;
    if (!p->cfg.datum_min) p->cfg.datum_min = CJ_DL_DATUM_MIN;
    if (!(p->cfg.tombstone_ttl > 0)) p->cfg.tombstone_ttl = CJ_DL_TOMBSTONE_TTL;
    if (!p->cfg.max_tombstones) p->cfg.max_tombstones = CJ_DL_MAX_TOMBSTONES;
    if (!p->cfg.max_receivers) p->cfg.max_receivers = CJ_DL_MAX_RECEIVERS;
    TAILQ_INIT(&p->refs);
    TAILQ_INIT(&p->tombs);
    if (cj_stream_on(ep, CJ_DL_CHANNEL, CJ_DL_TOPIC, on_download, p)) {
        free(p);
        return NULL;
    }
    return p;
}

void cj_dl_producer_free(struct cj_dl_producer *p)
{
    if (!p) return;
    cj_stream_on(p->ep, CJ_DL_CHANNEL, CJ_DL_TOPIC, NULL, NULL);
    struct ref *r;
    while ((r = TAILQ_FIRST(&p->refs))) {
        TAILQ_REMOVE(&p->refs, r, link);
        ref_free(r);
    }
    while (!TAILQ_EMPTY(&p->tombs)) tomb_free(p, TAILQ_FIRST(&p->tombs));
    free(p);
}

static bool ref_id_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n <= CJ_DL_REF_ID_MAX;
}

int cj_dl_producer_add_ref(struct cj_dl_producer *p, const struct cj_dl_ref_cfg *c,
                           char ref_id_out[CJ_DL_REF_ID_MAX + 1])
{
    if (!p || !c || (c->n_items && (!c->sizes || (!c->item_fn && !c->item_read))) || (c->item_fn && c->item_read) ||
        (c->n_receiver_ids && !c->receiver_ids))
        return -1;
    if (c->ref_id && (!ref_id_ok(c->ref_id) || ref_find(p, c->ref_id))) return -1;
    for (size_t i = 0; i < c->n_receiver_ids; i++)
        if (!c->receiver_ids[i] || !c->receiver_ids[i][0]) return -1;
    struct ref *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->p = p;
    if (c->ref_id) {
        snprintf(r->id, sizeof r->id, "%s", c->ref_id);
    } else {
        uint8_t u[16];
        char s[37];
        if (cj_uuid4(u)) goto fail;
        cj_uuid_str(u, s);
        snprintf(r->id, sizeof r->id, "%s", s);
    }
    r->n_items = c->n_items;
    if (!(r->sizes = malloc((c->n_items ? c->n_items : 1) * sizeof *r->sizes))) goto fail;
    for (size_t i = 0; i < c->n_items; i++) {
        r->sizes[i] = c->sizes[i];
        r->total += c->sizes[i];
    }
    r->item_fn = c->item_fn;
    r->item_read = c->item_read;
    r->done = c->done;
    r->ctx = c->ctx;
    r->identity = c->n_receiver_ids > 0;
    r->num_receivers = r->identity ? 0 : c->num_receivers;
    for (size_t i = 0; i < c->n_receiver_ids; i++)
        if (!rcv_find(r, c->receiver_ids[i]) && !rcv_add(r, c->receiver_ids[i], true)) goto fail;
    r->timeout = c->timeout > 0 ? c->timeout : CJ_DL_DEFAULT_TIMEOUT;
    if (!(r->timer = evtimer_new(p->base, ref_timer_cb, r))) goto fail;
    ref_touch(r);
    struct timeval tv = cj_tv(r->timeout + 0.001);
    evtimer_add(r->timer, &tv);
    TAILQ_INSERT_TAIL(&p->refs, r, link);
    p->st.refs_live++;
    if (ref_id_out) memcpy(ref_id_out, r->id, sizeof r->id);
    cj_log_debug("dl: ref %s added: %zu items, %" PRIu64 " bytes, %s %u, timeout %.0f s", r->id, r->n_items, r->total,
                 r->identity ? "listed receivers" : "receivers", r->identity ? (unsigned)r->n_rcv : r->num_receivers,
                 r->timeout);
    return 0;
fail:
    ref_free(r);
    return -1;
}

int cj_dl_producer_remove_ref(struct cj_dl_producer *p, const char *ref_id)
{
    struct ref *r = ref_find(p, ref_id);
    if (!r) return -1;
    TAILQ_REMOVE(&p->refs, r, link);
    p->st.refs_live--;
    p->st.refs_removed++;
    cj_log_info("dl: ref %s removed", r->id);
    ref_free(r);
    return 0;
}

bool cj_dl_producer_has_ref(const struct cj_dl_producer *p, const char *ref_id)
{
    return ref_find(p, ref_id) != NULL;
}

void cj_dl_producer_foreach(struct cj_dl_producer *p, cj_dl_ref_visit_fn fn, void *arg)
{
    double now = cj_now();
    struct ref *r;
    TAILQ_FOREACH(r, &p->refs, link) {
        struct cj_dl_receiver_info *info = calloc(r->n_rcv ? r->n_rcv : 1, sizeof *info);
        if (!info) return;
        fill_info(r, info);
        struct cj_dl_ref_info ri = {
            .ref_id = r->id, .n_items = r->n_items, .total_bytes = r->total, .num_receivers = r->num_receivers,
            .idle = now - r->last, .timeout = r->timeout, .rcv = info, .n_rcv = r->n_rcv,
        };
        fn(arg, &ri);
        free(info);
    }
}

void cj_dl_producer_get_stats(const struct cj_dl_producer *p, struct cj_dl_producer_stats *st)
{
    *st = p->st;
}
