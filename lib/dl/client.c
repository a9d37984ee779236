/* SPDX-License-Identifier: Apache-2.0 */
/* client.c — the download service's consumer side (see client.h). */
#include "dl/client.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "payload/lobs.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"

#include "dl/dlmsg.h"
#include "dl/replyparse.h"
#include "util/mp.h"

/* Data replies in a row without a single item before the download is called stuck. */
#define MAX_EMPTY_REPLIES 100

struct cj_dl_fetch {
    struct event_base *base;
    struct cj_stream_ep *ep;
    char source[CJ_DL_FQCN_MAX + 1];
    char ref_id[CJ_DL_REF_ID_MAX + 1];
    struct cj_dl_fetch_cfg cfg;
    cj_dl_fetch_item_fn item;
    cj_dl_fetch_done_fn done;
    void *ctx;
    uint8_t *state;               /* the last reply's state, raw; NULL before the first */
    size_t state_len;
    bool in_flight;
    uint64_t handle;
    struct event *timer;          /* backoff before a retry */
    int attempt;                  /* retries of the current pull so far */
    bool cancel_capable;
    bool in_cb, cancelled;
    unsigned empty_streak;
    uint64_t items, bytes, requests, retries;
    double t0, last;
    /* sink mode (spool): the reply is read piece by piece */
    bool sink_mode;
    struct cj_dl_sink sink;
    struct cj_dl_rp rp;           /* the current reply's reader */
    bool rp_live;                 /* rp initialised (kept after the reply for its last releases) */
    bool rp_ignore;               /* a non-ok reply: its bytes are dropped */
    bool pull_delivered;          /* an item of this pull reached the sink: it cannot be retried */
    bool wait_release;            /* the next pull waits until every item byte is released */
    bool at_eof;                  /* sink->eof called: waiting for cj_dl_fetch_finish */
    bool confirm_expected;
    char nonce[CJ_DL_NONCE_LEN + 1];
    uint64_t reply_base;          /* item bytes delivered before the current reply */
    uint64_t released;            /* item bytes the consumer released (cumulative) */
    uint64_t acked_upto;          /* last release offset given for the current reply */
    bool fin_req, fin_ok;         /* cj_dl_fetch_finish called from inside a callback */
    char fin_why[640];
    char sink_why[640];           /* why the reader or the sink failed the current reply */
};

enum act { A_NEXT, A_EOF, A_PRODUCER_ERROR, A_FAIL, A_ABORT };

static double elapsed(const struct cj_dl_fetch *f)
{
    return cj_now() - f->t0;
}

void cj_dl_fetch_cfg_default(struct cj_dl_fetch_cfg *c)
{
    *c = (struct cj_dl_fetch_cfg){
        .request_timeout = 600.0, .max_retries = 3, .backoff_base = 2.0, .backoff_cap = 60.0, .no_confirm = false,
    };
}

static void fetch_free(struct cj_dl_fetch *f)
{
    if (f->rp_live) cj_dl_rp_clear(&f->rp);
    if (f->timer) event_free(f->timer);
    free(f->state);
    free(f);
}

/* ---- fire-and-forget messages ------------------------------------------------------------ */

static void fire_done(void *arg, int status, const char *why)
{
    if (status) cj_log_info("dl: %s could not be sent: %s", (const char *)arg, why ? why : "");
}

static void send_fire(struct cj_dl_fetch *f, msgpack_sbuffer *sb, const char *what)
{
    struct evbuffer *b = mp_sbuffer_to_evbuffer(sb);
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (!b) {
        cj_log_info("dl: %s for ref %s not sent: out of memory", what, f->ref_id);
        return;
    }
    if (cj_stream_send(f->ep, f->source, CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, NULL, b, fire_done, (void *)what, NULL))
        cj_log_info("dl: %s for ref %s to %s could not be started", what, f->ref_id, f->source);
}

static void send_confirm(struct cj_dl_fetch *f, bool success, const char *nonce)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    if (cj_dl_encode_confirm(&sb, f->ref_id, success, nonce, &e)) cj_log_info("dl: cannot encode a confirm: %s", e.msg);
    else send_fire(f, &sb, success ? "confirm success" : "confirm failed");
    msgpack_sbuffer_destroy(&sb);
}

/* §6.4: only to a producer that said cancel_capable. */
static void send_cancel(struct cj_dl_fetch *f)
{
    if (!f->cancel_capable) return;
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    if (cj_dl_encode_cancel(&sb, f->ref_id, &e)) cj_log_info("dl: cannot encode a cancel: %s", e.msg);
    else send_fire(f, &sb, "cancel");
    msgpack_sbuffer_destroy(&sb);
}

/* ---- the end --------------------------------------------------------------------------------- */

static void finish(struct cj_dl_fetch *f, bool ok, const char *why)
{
    f->in_cb = true;
    if (f->done) f->done(f->ctx, ok, ok ? "" : why);
    fetch_free(f);
}

static void fail(struct cj_dl_fetch *f, bool cancel, const char *why)
{
    cj_log_warning("[DOWNLOAD_FAILED] source=%s ref_id=%s attempt=%d elapsed=%.1fs: %s", f->source, f->ref_id,
                   f->attempt + 1, elapsed(f), why);
    if (cancel) send_cancel(f);
    finish(f, false, why);
}

static void abort_now(struct cj_dl_fetch *f)
{
    if (f->in_flight) cj_stream_request_cancel(f->ep, f->handle);
    f->in_flight = false;
    cj_log_info("dl: download of ref %s from %s aborted after %.1f s (%" PRIu64 " items)", f->ref_id, f->source,
                elapsed(f), f->items);
    send_cancel(f);
    fetch_free(f);
}

void cj_dl_fetch_cancel(struct cj_dl_fetch *f)
{
    if (!f) return;
    if (f->in_cb) {   /* from inside a callback: the caller of the callback cleans up */
        f->cancelled = true;
        return;
    }
    abort_now(f);
}

/* ---- pulls ------------------------------------------------------------------------------------- */

static void on_reply(void *arg, struct cj_stream_reply *r);
static int sink_begin(void *arg, const struct cj_hdr *hdr, uint64_t size);
static int sink_data(void *arg, uint64_t offset, struct evbuffer *piece);

static int send_pull(struct cj_dl_fetch *f)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    int rc = cj_dl_encode_pull(&sb, f->ref_id, !f->cfg.no_confirm, f->state, f->state_len, &e);
    struct evbuffer *b = rc ? NULL : mp_sbuffer_to_evbuffer(&sb);
    msgpack_sbuffer_destroy(&sb);
    if (!b) {
        cj_log_warning("dl: cannot build a pull for ref %s: %s", f->ref_id, rc ? e.msg : "out of memory");
        return -1;
    }
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (f->sink_mode) {
        if (f->rp_live) cj_dl_rp_clear(&f->rp);
        f->rp_live = f->rp_ignore = f->pull_delivered = false;
        f->sink_why[0] = 0;
        struct cj_stream_sink sk = { .begin = sink_begin, .data = sink_data, .arg = f, .hold_acks = true };
        if (cj_stream_request_sink(f->ep, f->source, CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, b, f->cfg.request_timeout, &sk,
                                   on_reply, f, &f->handle, NULL))
            return -1;
    } else if (cj_stream_request(f->ep, f->source, CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, b, f->cfg.request_timeout, on_reply,
                                 f, &f->handle, NULL)) {
        return -1;
    }
    f->in_flight = true;
    f->requests++;
    return 0;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cj_dl_fetch *f = arg;
    if (send_pull(f)) fail(f, true, "download retry could not be sent");
}

static double backoff(const struct cj_dl_fetch *f, int n)
{
    double d = f->cfg.backoff_base * ldexp(1.0, n - 1);
    return d < f->cfg.backoff_cap ? d : f->cfg.backoff_cap;
}

/* ---- reading a reply --------------------------------------------------------------------------- */

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

struct parsed {
    struct cj_dl_reply r;
    struct cj_dl_item_ref local[16];
    struct cj_dl_item_ref *items;   /* local or malloc'd */
    uint64_t *off;                  /* absolute position of each item's bytes in the reply */
    uint8_t *state;                 /* copy of the state map (NULL when absent) */
    size_t state_len;
};

static void parsed_free(struct parsed *p)
{
    if (p->items != p->local) free(p->items);
    free(p->off);
    free(p->state);
}

/* Points DatumRef items at the BLOB datum sections that follow the MAIN section
 * at pos, reading only section headers (the datums may be huge). */
static int resolve_datums(struct evbuffer *buf, size_t pos, struct parsed *p, char *why, size_t whysz)
{
    size_t total = evbuffer_get_length(buf), sections = 0;
    while (pos < total) {
        uint8_t h[CJ_LOBS_DATUM_HDR_LEN];
        struct evbuffer_ptr ep;
        if (total - pos < sizeof h || evbuffer_ptr_set(buf, &ep, pos, EVBUFFER_PTR_SET) ||
            evbuffer_copyout_from(buf, &ep, h, sizeof h) != (ev_ssize_t)sizeof h) {
            snprintf(why, whysz, "truncated datum section at offset %zu", pos);
            return -1;
        }
        uint64_t size = be64(h + 2);
        if ((h[0] != CJ_LOBS_TEXT && h[0] != CJ_LOBS_BLOB && h[0] != CJ_LOBS_FILE) || size <= CJ_LOBS_ID_LEN ||
            size > total - pos - CJ_LOBS_HDR_LEN || ++sections > CJ_LOBS_MAX_DATUMS) {
            snprintf(why, whysz, "bad datum section at offset %zu", pos);
            return -1;
        }
        for (size_t i = 0; i < p->r.n_items; i++) {
            struct cj_dl_item_ref *it = &p->items[i];
            if (!it->is_datum || memcmp(it->datum_id, h + CJ_LOBS_HDR_LEN, CJ_LOBS_ID_LEN)) continue;
            if (h[0] != CJ_LOBS_BLOB || h[1] != 0) {
                snprintf(why, whysz, "datum of item %zu is not a DOT-0 BLOB", i);
                return -1;
            }
            if (it->resolved && it->off != pos + CJ_LOBS_DATUM_HDR_LEN) {
                snprintf(why, whysz, "duplicate datum id at offset %zu", pos);
                return -1;
            }
            it->resolved = true;
            it->off = pos + CJ_LOBS_DATUM_HDR_LEN;
            it->len = (size_t)(size - CJ_LOBS_ID_LEN);
        }
        pos += CJ_LOBS_HDR_LEN + (size_t)size;
    }
    for (size_t i = 0; i < p->r.n_items; i++)
        if (!p->items[i].resolved) {
            snprintf(why, whysz, "item %zu refers to a datum the reply lacks", i);
            return -1;
        }
    return 0;
}

/* Decodes the MAIN body (made contiguous; the datums are not) and locates every item. */
static int parse_reply(struct evbuffer *buf, struct parsed *p, char *why, size_t whysz)
{
    size_t total = evbuffer_get_length(buf);
    uint8_t h[CJ_LOBS_HDR_LEN];
    p->items = p->local;
    if (total < sizeof h || evbuffer_copyout(buf, h, sizeof h) != (ev_ssize_t)sizeof h || h[0] != CJ_LOBS_MAIN ||
        h[1] != 0) {
        snprintf(why, whysz, "reply is not a LOBS payload (%zu bytes)", total);
        return -1;
    }
    uint64_t n = be64(h + 2);
    if (n == 0 || n > total - sizeof h) {
        snprintf(why, whysz, "reply MAIN section of %" PRIu64 " bytes in a %zu-byte payload", n, total);
        return -1;
    }
    const uint8_t *body = evbuffer_pullup(buf, (ev_ssize_t)(sizeof h + n));
    if (!body) {
        snprintf(why, whysz, "out of memory reading a reply");
        return -1;
    }
    body += sizeof h;
    struct cj_err e = { 0 };
    size_t cap = sizeof p->local / sizeof p->local[0];
    int rc = cj_dl_decode_reply_body(body, (size_t)n, &p->r, p->items, cap, &e);
    if (!rc && p->r.n_items > cap) {   /* n_items <= body bytes: the allocation is bounded by the input */
        if (!(p->items = calloc(p->r.n_items, sizeof *p->items))) {
            snprintf(why, whysz, "out of memory for %zu items", p->r.n_items);
            return -1;
        }
        rc = cj_dl_decode_reply_body(body, (size_t)n, &p->r, p->items, p->r.n_items, &e);
    }
    if (rc) {
        snprintf(why, whysz, "%s", e.msg);
        return -1;
    }
    if (p->r.state.len) {
        if (!(p->state = malloc(p->r.state.len))) {
            snprintf(why, whysz, "out of memory");
            return -1;
        }
        memcpy(p->state, body + p->r.state.off, p->r.state.len);
        p->state_len = p->r.state.len;
    }
    for (size_t i = 0; i < p->r.n_items; i++)
        if (!p->items[i].is_datum) p->items[i].off += sizeof h;   /* body-relative -> reply-relative */
    return resolve_datums(buf, sizeof h + (size_t)n, p, why, whysz);
}

/* Hands the items to the callback in order.  When they lie in the reply in
 * order (always, from NVFlare and from this project's producer), each one is
 * cut out of the reply buffer (whole chains move, no copy); otherwise copied. */
static enum act deliver(struct cj_dl_fetch *f, struct evbuffer *buf, struct parsed *p, char *why, size_t whysz)
{
    bool in_order = true;
    size_t end = 0;
    for (size_t i = 0; i < p->r.n_items; i++) {
        if (p->items[i].off < end) in_order = false;
        end = p->items[i].off + p->items[i].len;
    }
    const uint8_t *flat = in_order ? NULL : evbuffer_pullup(buf, -1);
    if (!in_order && !flat) {
        snprintf(why, whysz, "exception when consuming data: out of memory");
        return A_FAIL;
    }
    size_t consumed = 0;
    for (size_t i = 0; i < p->r.n_items; i++) {
        const struct cj_dl_item_ref *it = &p->items[i];
        struct evbuffer *item = evbuffer_new();
        int ok = item != NULL;
        if (ok && in_order) {
            evbuffer_drain(buf, it->off - consumed);
            evbuffer_remove_buffer(buf, item, it->len);   /* returns an int: check the length instead */
            ok = evbuffer_get_length(item) == it->len;
            consumed = it->off + it->len;
        } else if (ok) {
            ok = evbuffer_add(item, flat + it->off, it->len) == 0;
        }
        if (!ok) {
            if (item) evbuffer_free(item);
            snprintf(why, whysz, "exception when consuming data: out of memory");
            return A_FAIL;
        }
        uint64_t index = f->items++;
        f->bytes += it->len;
        f->in_cb = true;
        int rc = f->item(f->ctx, index, item);
        f->in_cb = false;
        if (f->cancelled) return A_ABORT;
        if (rc) {
            snprintf(why, whysz, "exception when consuming data: item %" PRIu64 " refused by the consumer", index);
            return A_FAIL;
        }
    }
    return A_NEXT;
}

/* What a decoded reply means (both modes): terminal or data; takes the state.
 * In sink mode an eof is not confirmed here: cj_dl_fetch_finish does it. */
static enum act judge_reply(struct cj_dl_fetch *f, const struct cj_dl_reply *r, uint8_t **state, size_t state_len,
                            char *why, size_t whysz)
{
    if (r->status == CJ_DL_STATUS_EOF || r->status == CJ_DL_STATUS_ERROR) {
        bool eof = r->status == CJ_DL_STATUS_EOF;
        bool confirm = r->confirm_expected && !f->cfg.no_confirm;
        if (eof && f->sink_mode) {
            f->confirm_expected = confirm;
            memcpy(f->nonce, r->confirm_nonce, sizeof f->nonce);
        } else if (confirm) {
            send_confirm(f, eof, r->confirm_nonce);
        }
        if (!eof) snprintf(why, whysz, "producer error after %.1f secs", elapsed(f));
        return eof ? A_EOF : A_PRODUCER_ERROR;
    }
    f->cancel_capable |= r->cancel_capable;
    if (!*state) {
        snprintf(why, whysz, "exception when consuming data: data reply from %s without a state", f->source);
        return A_FAIL;
    }
    free(f->state);
    f->state = *state;
    f->state_len = state_len;
    *state = NULL;
    f->empty_streak = r->n_items ? 0 : f->empty_streak + 1;
    return A_NEXT;
}

static enum act check_streak(struct cj_dl_fetch *f, enum act a, char *why, size_t whysz)
{
    if (a == A_NEXT && f->empty_streak > MAX_EMPTY_REPLIES) {
        snprintf(why, whysz, "exception when consuming data: %u data replies in a row without items", f->empty_streak);
        return A_FAIL;
    }
    return a;
}

/* One good reply (whole-reply mode): terminal, or items then the next pull. */
static enum act handle_data(struct cj_dl_fetch *f, struct evbuffer *buf, char *why, size_t whysz)
{
    struct parsed p;
    memset(&p, 0, sizeof p);
    char perr[200];
    if (parse_reply(buf, &p, perr, sizeof perr)) {
        parsed_free(&p);
        snprintf(why, whysz, "exception when consuming data: bad reply from %s: %s", f->source, perr);
        return A_FAIL;
    }
    enum act a = judge_reply(f, &p.r, &p.state, p.state_len, why, whysz);
    if (a == A_NEXT) {
        cj_log_debug("dl: ref %s from %s: %zu items in a %zu-byte reply", f->ref_id, f->source, p.r.n_items,
                     evbuffer_get_length(buf));
        a = deliver(f, buf, &p, why, whysz);
    }
    parsed_free(&p);
    return check_streak(f, a, why, whysz);
}

/* One good reply (sink mode): it was read as it came; check it ended well. */
static enum act handle_streamed(struct cj_dl_fetch *f, char *why, size_t whysz)
{
    if (!f->rp_live) {
        snprintf(why, whysz, "exception when consuming data: empty reply from %s", f->source);
        return A_FAIL;
    }
    if (cj_dl_rp_finish(&f->rp)) {
        snprintf(why, whysz, "exception when consuming data: bad reply from %s: %s", f->source, f->rp.why);
        return A_FAIL;
    }
    enum act a = judge_reply(f, &f->rp.r, &f->rp.state, f->rp.state_len, why, whysz);
    if (a == A_NEXT)
        cj_log_debug("dl: ref %s from %s: %zu items in a %" PRIu64 "-byte reply (streamed)", f->ref_id, f->source,
                     f->rp.n_items, f->rp.total);
    return check_streak(f, a, why, whysz);
}

/* ---- sink mode: the reader's callbacks, the stream sink, releases ---------------------------- */

/* After a consumer callback: -1 when it asked to stop (cancel or finish). */
static int after_cb(struct cj_dl_fetch *f, int rc, uint64_t index)
{
    f->in_cb = false;
    if (f->cancelled) return -1;
    if (f->fin_req) {
        if (!f->sink_why[0])
            snprintf(f->sink_why, sizeof f->sink_why, "%s", f->fin_ok ? "download aborted" : f->fin_why);
        return -1;
    }
    if (rc) {
        if (!f->sink_why[0])
            snprintf(f->sink_why, sizeof f->sink_why, "exception when consuming data: item %" PRIu64 " refused by the consumer",
                     index);
        return -1;
    }
    return 0;
}

static int rp_item_begin(void *arg, size_t i, uint64_t size)
{
    struct cj_dl_fetch *f = arg;
    f->pull_delivered = true;
    f->in_cb = true;
    return after_cb(f, f->sink.item_begin(f->ctx, f->items, size), f->items);
}

static int rp_item_data(void *arg, size_t i, struct evbuffer *piece)
{
    struct cj_dl_fetch *f = arg;
    f->bytes += evbuffer_get_length(piece);
    f->in_cb = true;
    return after_cb(f, f->sink.item_data(f->ctx, f->items, piece), f->items);
}

static int rp_item_end(void *arg, size_t i)
{
    struct cj_dl_fetch *f = arg;
    uint64_t index = f->items++;
    f->in_cb = true;
    return after_cb(f, f->sink.item_end(f->ctx, index), index);
}

static const struct cj_dl_rp_cb rp_cbs = { rp_item_begin, rp_item_data, rp_item_end };

/* Lets the ACKs of the current reply go as far as the consumer allows. */
static void update_release(struct cj_dl_fetch *f)
{
    if (!f->rp_live) return;
    uint64_t rel = f->released > f->reply_base ? f->released - f->reply_base : 0;
    uint64_t upto = cj_dl_rp_release_upto(&f->rp, rel);
    if (upto > f->acked_upto) {
        f->acked_upto = upto;
        cj_stream_request_release(f->ep, f->handle, upto);   /* -1 once the request is over: harmless */
    }
}

static int sink_begin(void *arg, const struct cj_hdr *hdr, uint64_t size)
{
    struct cj_dl_fetch *f = arg;
    if (hdr && hdr->return_code[0] && strcmp(hdr->return_code, "ok")) {
        f->rp_ignore = true;   /* an error reply: on_reply reports its return code */
        return 0;
    }
    if (f->rp_live) cj_dl_rp_clear(&f->rp);
    cj_dl_rp_init(&f->rp, size, &rp_cbs, f);
    f->rp_live = true;
    f->reply_base = f->bytes;
    f->acked_upto = 0;
    return 0;
}

static int sink_data(void *arg, uint64_t offset, struct evbuffer *piece)
{
    struct cj_dl_fetch *f = arg;
    if (f->rp_ignore) {
        size_t n = evbuffer_get_length(piece);
        evbuffer_drain(piece, n);
        cj_stream_request_release(f->ep, f->handle, offset + n);
        return 0;
    }
    if (!f->rp_live) {
        snprintf(f->sink_why, sizeof f->sink_why, "exception when consuming data: reply bytes before its start");
        return -1;
    }
    if (cj_dl_rp_feed(&f->rp, piece)) {
        if (!f->sink_why[0])
            snprintf(f->sink_why, sizeof f->sink_why, "exception when consuming data: bad reply from %s: %s", f->source,
                     f->rp.why);
        return -1;
    }
    update_release(f);
    return 0;
}

/* ---- the end of a reply ------------------------------------------------------------------------- */

static void do_finish(struct cj_dl_fetch *f, bool ok, const char *why);

static void next_pull(struct cj_dl_fetch *f)
{
    if (f->sink_mode && f->released < f->bytes) {
        f->wait_release = true;   /* one reply's bytes between the network and the disk at a time */
        return;
    }
    if (send_pull(f)) fail(f, true, "the next pull could not be sent");
}

static void reached_eof(struct cj_dl_fetch *f)
{
    cj_log_info("dl: ref %s from %s downloaded: %" PRIu64 " items, %" PRIu64 " bytes, %" PRIu64 " requests in %.1f s",
                f->ref_id, f->source, f->items, f->bytes, f->requests, elapsed(f));
    if (!f->sink_mode) {
        finish(f, true, "");
        return;
    }
    f->at_eof = true;
    f->in_cb = true;
    f->sink.eof(f->ctx);
    f->in_cb = false;
    if (f->cancelled) abort_now(f);
    else if (f->fin_req) do_finish(f, f->fin_ok, f->fin_why);
}

static void on_reply(void *arg, struct cj_stream_reply *r)
{
    struct cj_dl_fetch *f = arg;
    char why[640];
    f->in_flight = false;
    if (f->cancelled) {   /* cancelled from inside a sink callback */
        abort_now(f);
        return;
    }
    if (f->fin_req) {     /* finished (failed) from inside a sink callback */
        fail(f, true, f->fin_ok ? "download aborted" : f->fin_why);
        return;
    }
    if (strcmp(r->return_code, "ok")) {
        bool timeout = !strcmp(r->return_code, "timeout");
        if (timeout && f->attempt < f->cfg.max_retries && !f->pull_delivered) {
            f->attempt++;
            f->retries++;
            cj_stream_relay_stats(f->ep)->retries++;
            double d = backoff(f, f->attempt);
            cj_log_warning("[DOWNLOAD_RETRY] source=%s ref_id=%s attempt=%d/%d elapsed=%.1fs: %s (%s); retrying in %.2f s",
                           f->source, f->ref_id, f->attempt + 1, f->cfg.max_retries + 1, elapsed(f), r->return_code,
                           r->error, d);
            struct timeval tv = cj_tv(d);
            evtimer_add(f->timer, &tv);
            return;
        }
        if (f->sink_why[0])
            snprintf(why, sizeof why, "%s", f->sink_why);
        else if (timeout && f->pull_delivered)   /* the sink has written part of this reply: no restart */
            snprintf(why, sizeof why,
                     "error requesting data from %s after %.1f secs: timeout in the middle of a reply (%" PRIu64
                     " item bytes of it already written; a pull cannot be restarted mid-reply)",
                     f->source, elapsed(f), f->bytes - f->reply_base);
        else
            snprintf(why, sizeof why, "error requesting data from %s after %.1f secs: %s%s%s", f->source, elapsed(f),
                     r->return_code, r->error[0] ? ": " : "", r->error);
        fail(f, true, why);
        return;
    }
    if (f->attempt)
        cj_log_info("[DOWNLOAD_RECOVERED] source=%s ref_id=%s attempt=%d elapsed=%.1fs", f->source, f->ref_id,
                    f->attempt + 1, elapsed(f));
    f->attempt = 0;
    f->last = cj_now();
    enum act a = A_FAIL;
    if (f->sink_mode) {
        a = handle_streamed(f, why, sizeof why);
    } else {
        struct evbuffer *buf = r->data;
        r->data = NULL;
        if (!buf) snprintf(why, sizeof why, "exception when consuming data: empty reply from %s", f->source);
        else a = handle_data(f, buf, why, sizeof why);
        if (buf) evbuffer_free(buf);
    }
    switch (a) {
    case A_NEXT:
        next_pull(f);
        return;
    case A_EOF:
        reached_eof(f);
        return;
    case A_PRODUCER_ERROR:
        fail(f, false, why);
        return;
    case A_FAIL:
        fail(f, true, why);
        return;
    case A_ABORT:
        abort_now(f);
        return;
    }
}

/* ---- sink mode: the consumer's side -------------------------------------------------------------- */

void cj_dl_fetch_release(struct cj_dl_fetch *f, uint64_t bytes)
{
    if (!f) return;
    f->released += bytes;
    if (f->released > f->bytes) f->released = f->bytes;
    update_release(f);
    if (f->wait_release && f->released >= f->bytes && !f->in_cb) {
        f->wait_release = false;
        if (send_pull(f)) fail(f, true, "the next pull could not be sent");
    }
}

static void do_finish(struct cj_dl_fetch *f, bool ok, const char *why)
{
    f->fin_req = false;
    if (!why || !why[0]) why = ok ? "" : "download aborted";
    if (f->at_eof && ok) {
        if (f->confirm_expected) send_confirm(f, true, f->nonce);
        finish(f, true, "");
        return;
    }
    if (f->at_eof) {
        if (f->confirm_expected) send_confirm(f, false, f->nonce);
        fail(f, !f->confirm_expected, why);
        return;
    }
    /* before the end: a failure with the consumer's reason */
    if (f->in_flight) cj_stream_request_cancel(f->ep, f->handle);
    f->in_flight = false;
    evtimer_del(f->timer);
    fail(f, true, ok ? "download aborted before its end" : why);
}

void cj_dl_fetch_finish(struct cj_dl_fetch *f, bool ok, const char *why)
{
    if (!f) return;
    if (f->in_cb) {   /* from inside a callback: acted on when it returns */
        if (!f->fin_req) {
            f->fin_req = true;
            f->fin_ok = ok;
            snprintf(f->fin_why, sizeof f->fin_why, "%s", why && why[0] ? why : "download aborted");
        }
        return;
    }
    do_finish(f, ok, why);
}

/* ---- the public side --------------------------------------------------------------------------- */

static struct cj_dl_fetch *fetch_start(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                       const char *ref_id, const struct cj_dl_fetch_cfg *cfg, cj_dl_fetch_item_fn item,
                                       const struct cj_dl_sink *sink, cj_dl_fetch_done_fn done, void *ctx)
{
    if (!base || !ep || !source_fqcn || !ref_id || (!item && !sink) || !source_fqcn[0] || !ref_id[0] ||
        strlen(source_fqcn) > CJ_DL_FQCN_MAX || strlen(ref_id) > CJ_DL_REF_ID_MAX)
        return NULL;
    if (sink && (!sink->item_begin || !sink->item_data || !sink->item_end || !sink->eof)) return NULL;
    struct cj_dl_fetch *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->base = base;
    f->ep = ep;
    strcpy(f->source, source_fqcn);
    strcpy(f->ref_id, ref_id);
    if (cfg) f->cfg = *cfg;
    else cj_dl_fetch_cfg_default(&f->cfg);
    if (!(f->cfg.request_timeout > 0)) f->cfg.request_timeout = 600.0;
    if (cj_stream_get_wire(ep) == CJ_STREAM_WIRE_2_8 && f->cfg.request_timeout > CJ_DL_REF_IDLE_2_8)
        f->cfg.request_timeout = CJ_DL_REF_IDLE_2_8;
    if (f->cfg.max_retries < 0) f->cfg.max_retries = 0;
    if (!(f->cfg.backoff_base >= 0)) f->cfg.backoff_base = 2.0;
    if (!(f->cfg.backoff_cap >= 0)) f->cfg.backoff_cap = 60.0;
    f->item = item;
    if (sink) {
        f->sink_mode = true;
        f->sink = *sink;
    }
    f->done = done;
    f->ctx = ctx;
    f->t0 = f->last = cj_now();
    if (!(f->timer = evtimer_new(base, retry_cb, f)) || send_pull(f)) {
        fetch_free(f);
        return NULL;
    }
    cj_log_debug("dl: downloading ref %s from %s%s", ref_id, source_fqcn, sink ? " (streamed to a sink)" : "");
    return f;
}

struct cj_dl_fetch *cj_dl_fetch(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                const char *ref_id, const struct cj_dl_fetch_cfg *cfg, cj_dl_fetch_item_fn item,
                                cj_dl_fetch_done_fn done, void *ctx)
{
    if (!item) return NULL;
    return fetch_start(base, ep, source_fqcn, ref_id, cfg, item, NULL, done, ctx);
}

struct cj_dl_fetch *cj_dl_fetch_sink(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                     const char *ref_id, const struct cj_dl_fetch_cfg *cfg,
                                     const struct cj_dl_sink *sink, cj_dl_fetch_done_fn done, void *ctx)
{
    if (!sink) return NULL;
    return fetch_start(base, ep, source_fqcn, ref_id, cfg, NULL, sink, done, ctx);
}

void cj_dl_fetch_get_progress(const struct cj_dl_fetch *f, struct cj_dl_fetch_progress *p)
{
    double now = cj_now();
    *p = (struct cj_dl_fetch_progress){
        .items = f->items, .bytes = f->bytes, .requests = f->requests, .retries = f->retries,
        .elapsed = now - f->t0, .idle = now - f->last, .request_timeout = f->cfg.request_timeout,
    };
}
