/* SPDX-License-Identifier: Apache-2.0 */
/* reqrep.c — request/reply over streams (doc/protocol/streaming.md §6, §7, §8).
 *
 * A request is a stream carrying a fresh uuid4 sm__ri.  The reply is another
 * stream on return_only / "<ch>:<tp>" from the target with the same sm__ri;
 * the receiver (rx.c) binds it to the request when its first chunk arrives.
 * One timer per request measures idleness, never a deadline: it is restarted
 * by every sign of progress in the current stage (request chunk sent or ACKed;
 * request fully sent; reply chunk received).  A failed request stream, an
 * error notice naming the request (from the target, or a forwarder naming
 * the target in sm__fd) or a failed reply stream give comm_error.
 *
 * A request with a sink gets its reply piece by piece (rx.c hands the bytes
 * to the sink); with hold_acks the owner's releases are progress too and are
 * passed to the reply stream, even after the request finished (the final
 * ACK may still wait for them). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/internal.h"
#include "util/log.h"
#include "util/uuid.h"

enum { RQ_SENDING, RQ_WAITING, RQ_RECEIVING };
static const char *const STAGE_NAMES[] = { "sending the request", "waiting for the reply",
                                           "receiving the reply" };

struct sm_req {
    TAILQ_ENTRY(sm_req) link;
    struct cj_stream_ep *ep;
    uint64_t handle;
    char ri[CJ_STREAM_RI_LEN + 1];
    char target[CJ_HDR_STR_MAX + 1];
    double timeout;
    int stage;
    struct tx_stream *tx;
    uint64_t sid;                       /* sm__id of the request stream (error notices without sm__ri) */
    struct rx_stream *rx;
    struct event *timer;
    cj_stream_reply_fn fn;
    void *arg;
    bool has_sink;
    struct cj_stream_sink sink;
    bool patient;                       /* its timeout is not a failure (cj_stream_msg.patient) */
};

/* ---- life cycle -------------------------------------------------------------------------- */

static void req_arm(struct sm_req *r)
{
    struct timeval tv = cj_tv(r->timeout);
    evtimer_add(r->timer, &tv);
}

/* Ends the request and calls its callback (if any) with the outcome. */
static void req_finish(struct sm_req *r, const char *rc, const char *error, const struct cj_hdr *h,
                       struct evbuffer *data)
{
    struct cj_stream_ep *ep = r->ep;
    TAILQ_REMOVE(&ep->reqs, r, link);
    ep->n_req--;
    if (r->tx) {
        struct tx_stream *t = r->tx;
        r->tx = NULL;
        tx_abort(t, "request ended");   /* no-op once the stream is finished */
    }
    if (r->rx) rx_unbind_req(r->rx);    /* the reply stream goes on, as an unknown reply */
    r->rx = NULL;
    event_free(r->timer);
    struct cj_stream_reply rep = {
        .return_code = rc,
        .error = error ? error : "",
        .hdr = h,
        .data = data,
        .encoding = h ? h->sm_pe : "",
    };
    if (r->fn) r->fn(r->arg, &rep);
    if (rep.data) evbuffer_free(rep.data);
    free(r);
}

static void req_fail(struct sm_req *r, const char *rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void req_fail(struct sm_req *r, const char *rc, const char *fmt, ...)
{
    char why[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    cj_log_info("stream: request %s to %s: %s (%s)", r->ri, r->target, rc, why);
    req_finish(r, rc, why, NULL, NULL);
}

static void req_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct sm_req *r = arg;
    if (r->patient) {   /* a wait, not a failure: the caller counts and logs it */
        char why[128];
        snprintf(why, sizeof why, "no answer yet after %g s", r->timeout);
        cj_log_debug("stream: request %s to %s: timeout (%s)", r->ri, r->target, why);
        req_finish(r, "timeout", why, NULL, NULL);
        return;
    }
    r->ep->io.stats->timeouts++;
    req_fail(r, "timeout", "no progress for %g s while %s", r->timeout, STAGE_NAMES[r->stage]);
}

int cj_stream_request(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                      const struct cj_stream_msg *m, struct evbuffer *blob, double timeout, cj_stream_reply_fn fn,
                      void *arg, uint64_t *handle_out, char *ri_out)
{
    return cj_stream_request_sink(ep, destination, channel, topic, m, blob, timeout, NULL, fn, arg, handle_out,
                                  ri_out);
}

int cj_stream_request_sink(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                           const struct cj_stream_msg *m, struct evbuffer *blob, double timeout,
                           const struct cj_stream_sink *sink, cj_stream_reply_fn fn, void *arg, uint64_t *handle_out,
                           char *ri_out)
{
    struct sm_req *r = NULL;
    if (!fn || !(timeout > 0) || ep->closing || !sm_name_ok(destination) || (sink && !sink->data)) goto fail;
    if (!(r = calloc(1, sizeof *r)) || cj_uuid4_str(r->ri) || !(r->timer = evtimer_new(ep->base, req_timer_cb, r)))
        goto fail;
    r->ep = ep;
    r->handle = ep->req_next++;
    strcpy(r->target, destination);
    r->timeout = timeout;
    r->stage = RQ_SENDING;
    r->fn = fn;
    r->arg = arg;
    r->patient = m && m->patient;
    if ((r->has_sink = sink != NULL)) r->sink = *sink;
    r->tx = tx_start(ep, destination, channel, topic, m, r->ri, false, NULL, blob, NULL, NULL, NULL);
    blob = NULL;   /* taken by tx_start, even on failure */
    if (!r->tx) goto fail;
    r->sid = tx_id(r->tx);
    tx_set_req(r->tx, r);
    TAILQ_INSERT_TAIL(&ep->reqs, r, link);
    ep->n_req++;
    req_arm(r);
    if (handle_out) *handle_out = r->handle;
    if (ri_out) memcpy(ri_out, r->ri, CJ_STREAM_RI_LEN + 1);
    return 0;
fail:
    if (blob) evbuffer_free(blob);
    if (r && r->timer) event_free(r->timer);
    free(r);
    return -1;
}

int cj_stream_request_cancel(struct cj_stream_ep *ep, uint64_t handle)
{
    struct sm_req *r;
    TAILQ_FOREACH(r, &ep->reqs, link)
        if (r->handle == handle) {
            r->fn = NULL;
            req_finish(r, "comm_error", "cancelled", NULL, NULL);
            return 0;
        }
    return -1;
}

int cj_stream_request_release(struct cj_stream_ep *ep, uint64_t handle, uint64_t upto)
{
    struct sm_req *r;
    TAILQ_FOREACH(r, &ep->reqs, link)
        if (r->handle == handle) {
            if (r->rx) rx_release_upto(r->rx, upto);   /* no reply stream yet: nothing to release */
            return 0;
        }
    return rx_release_handle(ep, handle, upto);
}

void req_free_all(struct cj_stream_ep *ep)
{
    struct sm_req *r;
    while ((r = TAILQ_FIRST(&ep->reqs))) req_finish(r, "comm_error", "endpoint closed", NULL, NULL);
}

/* ---- the request stream -------------------------------------------------------------------- */

void req_on_tx_progress(struct sm_req *r)
{
    if (r->stage == RQ_SENDING) req_arm(r);
}

void req_on_tx_done(struct sm_req *r)
{
    r->tx = NULL;
    if (r->stage == RQ_SENDING) {
        r->stage = RQ_WAITING;
        req_arm(r);
    }
}

void req_on_tx_failed(struct sm_req *r, const char *why)
{
    r->tx = NULL;
    req_fail(r, "comm_error", "request stream failed: %s", why);
}

/* ---- the reply stream ---------------------------------------------------------------------- */

struct sm_req *req_match_reply(struct cj_stream_ep *ep, const char *origin, const char *ri)
{
    struct sm_req *r;
    TAILQ_FOREACH(r, &ep->reqs, link)
        if (!r->rx && strcmp(r->ri, ri) == 0) {
            if (strcmp(r->target, origin) == 0) return r;
            cj_log_warning("stream: reply for request %s came from %s, not its target %s; not accepted", ri, origin,
                           r->target);
            return NULL;
        }
    return NULL;
}

const struct cj_stream_sink *req_sink(const struct sm_req *r)
{
    return r->has_sink ? &r->sink : NULL;
}

uint64_t req_handle(const struct sm_req *r)
{
    return r->handle;
}

void req_bind_rx(struct sm_req *r, struct rx_stream *s)
{
    r->rx = s;
    r->stage = RQ_RECEIVING;
    req_arm(r);
}

void req_on_rx_progress(struct sm_req *r)
{
    r->stage = RQ_RECEIVING;
    req_arm(r);
}

void req_on_reply(struct sm_req *r, const struct cj_hdr *h, struct evbuffer *data)
{
    char error[CJ_HDR_STR_MAX + 1] = "";
    r->rx = NULL;
    if (cj_hdr_has(h, CJ_HK_ERROR)) {
        size_t n = h->error.len < sizeof error - 1 ? h->error.len : sizeof error - 1;
        memcpy(error, h->error.p, n);
        error[n] = 0;
    }
    req_finish(r, cj_hdr_has(h, CJ_HK_RETURN_CODE) ? h->return_code : "ok", error, h, data);
}

void req_on_rx_failed(struct sm_req *r, const char *why)
{
    r->rx = NULL;
    req_fail(r, "comm_error", "reply stream failed: %s", why);
}

/* The request a notice names: by sm__ri, or, without one, by the sm__id of the
 * request's stream (FLARE <= 2.8 sends receiver errors as an sm__ACK with only
 * sm__id and sm__em, also after the stream completed, e.g. when the handler
 * could not decode it: streaming.md §11). */
static struct sm_req *req_of_notice(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    struct sm_req *r;
    if (cj_hdr_has(h, CJ_HK_SM_RI)) {
        TAILQ_FOREACH(r, &ep->reqs, link)
            if (strcmp(r->ri, h->sm_ri) == 0) return r;
        return NULL;
    }
    if (!cj_hdr_has(h, CJ_HK_SM_ID) || h->sm_id_neg) return NULL;
    TAILQ_FOREACH(r, &ep->reqs, link)
        if (r->sid == h->sm_id) return r;
    return NULL;
}

/* §6: accepted only from the target, or from a forwarder naming the target in sm__fd. */
bool req_input_error(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    struct sm_req *r = req_of_notice(ep, h);
    if (!r) return false;
    if (strcmp(h->origin, r->target) != 0 && !(cj_hdr_has(h, CJ_HK_SM_FD) && strcmp(h->sm_fd, r->target) == 0)) {
        cj_log_warning("stream: error notice for request %s from %s, not its target %s; ignored", r->ri, h->origin,
                       r->target);
        return false;
    }
    int n = (int)(h->sm_em.len > 200 ? 200 : h->sm_em.len);
    req_fail(r, "comm_error", "%s%s%.*s", cj_hdr_has(h, CJ_HK_SM_ET) ? h->sm_et : "",
             cj_hdr_has(h, CJ_HK_SM_ET) ? ": " : "", n, h->sm_em.p ? (const char *)h->sm_em.p : "");
    return true;
}

/* ---- replying ------------------------------------------------------------------------------ */

static struct tx_stream *reply_start(struct cj_stream_ep *ep, const struct cj_stream_reqctx *rq, const char *rc,
                                     const struct cj_stream_msg *m, struct evbuffer *blob,
                                     const struct cj_stream_source *src, cj_stream_done_fn done, void *arg)
{
    char topic[2 * CJ_HDR_STR_MAX + 2];
    if (!rq || !rq->has_ri || snprintf(topic, sizeof topic, "%s:%s", rq->channel, rq->topic) > CJ_HDR_STR_MAX) {
        if (blob) evbuffer_free(blob);
        return NULL;
    }
    struct cj_stream_msg rm = { 0 };
    if (m) rm = *m;
    rm.optional = true;   /* NVFlare sends replies optional (sm__op, cn__optional true) */
    return tx_start(ep, rq->origin, CJ_STREAM_RETURN_ONLY, topic, &rm, rq->ri, true, rc, blob, src, done, arg);
}

int cj_stream_reply(struct cj_stream_ep *ep, const struct cj_stream_reqctx *rq, const char *rc,
                    const struct cj_stream_msg *m, struct evbuffer *blob, cj_stream_done_fn done, void *arg)
{
    if (!blob) return -1;
    return reply_start(ep, rq, rc, m, blob, NULL, done, arg) ? 0 : -1;
}

int cj_stream_reply_source(struct cj_stream_ep *ep, const struct cj_stream_reqctx *rq, const char *rc,
                           const struct cj_stream_msg *m, const struct cj_stream_source *src, cj_stream_done_fn done,
                           void *arg, uint64_t *id_out)
{
    if (!src) return -1;
    struct tx_stream *t = reply_start(ep, rq, rc, m, NULL, src, done, arg);
    if (!t) return -1;
    if (id_out) *id_out = tx_id(t);
    return 0;
}
