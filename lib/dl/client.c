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
#include "util/log.h"
#include "util/stats.h"

#include "dl/dlmsg.h"

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
};

enum act { A_NEXT, A_EOF, A_PRODUCER_ERROR, A_FAIL, A_ABORT };

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double elapsed(const struct cj_dl_fetch *f)
{
    return now_mono() - f->t0;
}

void cj_dl_fetch_cfg_default(struct cj_dl_fetch_cfg *c)
{
    *c = (struct cj_dl_fetch_cfg){
        .request_timeout = 600.0, .max_retries = 3, .backoff_base = 2.0, .backoff_cap = 60.0, .no_confirm = false,
    };
}

static void fetch_free(struct cj_dl_fetch *f)
{
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
    struct evbuffer *b = evbuffer_new();
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (!b || evbuffer_add(b, sb->data, sb->size)) {
        if (b) evbuffer_free(b);
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

static int send_pull(struct cj_dl_fetch *f)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    int rc = cj_dl_encode_pull(&sb, f->ref_id, !f->cfg.no_confirm, f->state, f->state_len, &e);
    struct evbuffer *b = rc ? NULL : evbuffer_new();
    if (b && evbuffer_add(b, sb.data, sb.size)) {
        evbuffer_free(b);
        b = NULL;
    }
    msgpack_sbuffer_destroy(&sb);
    if (!b) {
        cj_log_warning("dl: cannot build a pull for ref %s: %s", f->ref_id, rc ? e.msg : "out of memory");
        return -1;
    }
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (cj_stream_request(f->ep, f->source, CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, b, f->cfg.request_timeout, on_reply, f,
                          &f->handle, NULL))
        return -1;
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
static int resolve_datums(struct evbuffer *buf, size_t pos, struct parsed *p, char *why, size_t wn)
{
    size_t total = evbuffer_get_length(buf), sections = 0;
    while (pos < total) {
        uint8_t h[CJ_LOBS_DATUM_HDR_LEN];
        struct evbuffer_ptr ep;
        if (total - pos < sizeof h || evbuffer_ptr_set(buf, &ep, pos, EVBUFFER_PTR_SET) ||
            evbuffer_copyout_from(buf, &ep, h, sizeof h) != (ev_ssize_t)sizeof h) {
            snprintf(why, wn, "truncated datum section at offset %zu", pos);
            return -1;
        }
        uint64_t size = be64(h + 2);
        if ((h[0] != CJ_LOBS_TEXT && h[0] != CJ_LOBS_BLOB && h[0] != CJ_LOBS_FILE) || size <= CJ_LOBS_ID_LEN ||
            size > total - pos - CJ_LOBS_HDR_LEN || ++sections > CJ_LOBS_MAX_DATUMS) {
            snprintf(why, wn, "bad datum section at offset %zu", pos);
            return -1;
        }
        for (size_t i = 0; i < p->r.n_items; i++) {
            struct cj_dl_item_ref *it = &p->items[i];
            if (!it->is_datum || memcmp(it->datum_id, h + CJ_LOBS_HDR_LEN, CJ_LOBS_ID_LEN)) continue;
            if (h[0] != CJ_LOBS_BLOB || h[1] != 0) {
                snprintf(why, wn, "datum of item %zu is not a DOT-0 BLOB", i);
                return -1;
            }
            if (it->resolved && it->off != pos + CJ_LOBS_DATUM_HDR_LEN) {
                snprintf(why, wn, "duplicate datum id at offset %zu", pos);
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
            snprintf(why, wn, "item %zu refers to a datum the reply lacks", i);
            return -1;
        }
    return 0;
}

/* Decodes the MAIN body (made contiguous; the datums are not) and locates every item. */
static int parse_reply(struct evbuffer *buf, struct parsed *p, char *why, size_t wn)
{
    size_t total = evbuffer_get_length(buf);
    uint8_t h[CJ_LOBS_HDR_LEN];
    p->items = p->local;
    if (total < sizeof h || evbuffer_copyout(buf, h, sizeof h) != (ev_ssize_t)sizeof h || h[0] != CJ_LOBS_MAIN ||
        h[1] != 0) {
        snprintf(why, wn, "reply is not a LOBS payload (%zu bytes)", total);
        return -1;
    }
    uint64_t n = be64(h + 2);
    if (n == 0 || n > total - sizeof h) {
        snprintf(why, wn, "reply MAIN section of %" PRIu64 " bytes in a %zu-byte payload", n, total);
        return -1;
    }
    const uint8_t *body = evbuffer_pullup(buf, (ev_ssize_t)(sizeof h + n));
    if (!body) {
        snprintf(why, wn, "out of memory reading a reply");
        return -1;
    }
    body += sizeof h;
    struct cj_err e = { 0 };
    size_t cap = sizeof p->local / sizeof p->local[0];
    int rc = cj_dl_decode_reply_body(body, (size_t)n, &p->r, p->items, cap, &e);
    if (!rc && p->r.n_items > cap) {   /* n_items <= body bytes: the allocation is bounded by the input */
        if (!(p->items = calloc(p->r.n_items, sizeof *p->items))) {
            snprintf(why, wn, "out of memory for %zu items", p->r.n_items);
            return -1;
        }
        rc = cj_dl_decode_reply_body(body, (size_t)n, &p->r, p->items, p->r.n_items, &e);
    }
    if (rc) {
        snprintf(why, wn, "%s", e.msg);
        return -1;
    }
    if (p->r.state.len) {
        if (!(p->state = malloc(p->r.state.len))) {
            snprintf(why, wn, "out of memory");
            return -1;
        }
        memcpy(p->state, body + p->r.state.off, p->r.state.len);
        p->state_len = p->r.state.len;
    }
    for (size_t i = 0; i < p->r.n_items; i++)
        if (!p->items[i].is_datum) p->items[i].off += sizeof h;   /* body-relative -> reply-relative */
    return resolve_datums(buf, sizeof h + (size_t)n, p, why, wn);
}

/* Hands the items to the callback in order.  When they lie in the reply in
 * order (always, from NVFlare and from this project's producer), each one is
 * cut out of the reply buffer (whole chains move, no copy); otherwise copied. */
static enum act deliver(struct cj_dl_fetch *f, struct evbuffer *buf, struct parsed *p, char *why, size_t wn)
{
    bool in_order = true;
    size_t end = 0;
    for (size_t i = 0; i < p->r.n_items; i++) {
        if (p->items[i].off < end) in_order = false;
        end = p->items[i].off + p->items[i].len;
    }
    const uint8_t *flat = in_order ? NULL : evbuffer_pullup(buf, -1);
    if (!in_order && !flat) {
        snprintf(why, wn, "exception when consuming data: out of memory");
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
            snprintf(why, wn, "exception when consuming data: out of memory");
            return A_FAIL;
        }
        uint64_t index = f->items++;
        f->bytes += it->len;
        f->in_cb = true;
        int rc = f->item(f->ctx, index, item);
        f->in_cb = false;
        if (f->cancelled) return A_ABORT;
        if (rc) {
            snprintf(why, wn, "exception when consuming data: item %" PRIu64 " refused by the consumer", index);
            return A_FAIL;
        }
    }
    return A_NEXT;
}

/* One good reply: terminal, or items then the next pull. */
static enum act handle_data(struct cj_dl_fetch *f, struct evbuffer *buf, char *why, size_t wn)
{
    struct parsed p;
    memset(&p, 0, sizeof p);
    char perr[200];
    if (parse_reply(buf, &p, perr, sizeof perr)) {
        parsed_free(&p);
        snprintf(why, wn, "exception when consuming data: bad reply from %s: %s", f->source, perr);
        return A_FAIL;
    }
    enum act a;
    if (p.r.status == CJ_DL_STATUS_EOF || p.r.status == CJ_DL_STATUS_ERROR) {
        bool eof = p.r.status == CJ_DL_STATUS_EOF;
        if (p.r.confirm_expected && !f->cfg.no_confirm) send_confirm(f, eof, p.r.confirm_nonce);
        if (!eof) snprintf(why, wn, "producer error after %.1f secs", elapsed(f));
        parsed_free(&p);
        return eof ? A_EOF : A_PRODUCER_ERROR;
    }
    f->cancel_capable |= p.r.cancel_capable;
    if (!p.state) {
        parsed_free(&p);
        snprintf(why, wn, "exception when consuming data: data reply from %s without a state", f->source);
        return A_FAIL;
    }
    free(f->state);
    f->state = p.state;
    f->state_len = p.state_len;
    p.state = NULL;
    cj_log_debug("dl: ref %s from %s: %zu items in a %zu-byte reply", f->ref_id, f->source, p.r.n_items,
                 evbuffer_get_length(buf));
    f->empty_streak = p.r.n_items ? 0 : f->empty_streak + 1;
    a = deliver(f, buf, &p, why, wn);
    parsed_free(&p);
    if (a == A_NEXT && f->empty_streak > MAX_EMPTY_REPLIES) {
        snprintf(why, wn, "exception when consuming data: %u data replies in a row without items", f->empty_streak);
        a = A_FAIL;
    }
    return a;
}

static void on_reply(void *arg, struct cj_stream_reply *r)
{
    struct cj_dl_fetch *f = arg;
    char why[640];
    f->in_flight = false;
    if (strcmp(r->return_code, "ok")) {
        bool timeout = !strcmp(r->return_code, "timeout");
        if (timeout && f->attempt < f->cfg.max_retries) {
            f->attempt++;
            f->retries++;
            cj_stats.retries++;
            double d = backoff(f, f->attempt);
            cj_log_warning("[DOWNLOAD_RETRY] source=%s ref_id=%s attempt=%d/%d elapsed=%.1fs: %s (%s); retrying in %.2f s",
                           f->source, f->ref_id, f->attempt + 1, f->cfg.max_retries + 1, elapsed(f), r->return_code,
                           r->error, d);
            struct timeval tv = { (time_t)d, (suseconds_t)((d - floor(d)) * 1e6) };
            evtimer_add(f->timer, &tv);
            return;
        }
        snprintf(why, sizeof why, "error requesting data from %s after %.1f secs: %s%s%s", f->source, elapsed(f),
                 r->return_code, r->error[0] ? ": " : "", r->error);
        fail(f, true, why);
        return;
    }
    if (f->attempt)
        cj_log_info("[DOWNLOAD_RECOVERED] source=%s ref_id=%s attempt=%d elapsed=%.1fs", f->source, f->ref_id,
                    f->attempt + 1, elapsed(f));
    f->attempt = 0;
    f->last = now_mono();
    struct evbuffer *buf = r->data;
    r->data = NULL;
    enum act a = A_FAIL;
    if (!buf) snprintf(why, sizeof why, "exception when consuming data: empty reply from %s", f->source);
    else a = handle_data(f, buf, why, sizeof why);
    if (buf) evbuffer_free(buf);
    switch (a) {
    case A_NEXT:
        if (send_pull(f)) fail(f, true, "the next pull could not be sent");
        return;
    case A_EOF:
        cj_log_info("dl: ref %s from %s downloaded: %" PRIu64 " items, %" PRIu64 " bytes, %" PRIu64 " requests in %.1f s",
                    f->ref_id, f->source, f->items, f->bytes, f->requests, elapsed(f));
        finish(f, true, "");
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

/* ---- the public side --------------------------------------------------------------------------- */

struct cj_dl_fetch *cj_dl_fetch(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                const char *ref_id, const struct cj_dl_fetch_cfg *cfg, cj_dl_fetch_item_fn item,
                                cj_dl_fetch_done_fn done, void *ctx)
{
    if (!base || !ep || !source_fqcn || !ref_id || !item || !source_fqcn[0] || !ref_id[0] ||
        strlen(source_fqcn) > CJ_DL_FQCN_MAX || strlen(ref_id) > CJ_DL_REF_ID_MAX)
        return NULL;
    struct cj_dl_fetch *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->base = base;
    f->ep = ep;
    strcpy(f->source, source_fqcn);
    strcpy(f->ref_id, ref_id);
    if (cfg) f->cfg = *cfg;
    else cj_dl_fetch_cfg_default(&f->cfg);
    if (!(f->cfg.request_timeout > 0)) f->cfg.request_timeout = 600.0;
    if (f->cfg.max_retries < 0) f->cfg.max_retries = 0;
    if (!(f->cfg.backoff_base >= 0)) f->cfg.backoff_base = 2.0;
    if (!(f->cfg.backoff_cap >= 0)) f->cfg.backoff_cap = 60.0;
    f->item = item;
    f->done = done;
    f->ctx = ctx;
    f->t0 = f->last = now_mono();
    if (!(f->timer = evtimer_new(base, retry_cb, f)) || send_pull(f)) {
        fetch_free(f);
        return NULL;
    }
    cj_log_debug("dl: downloading ref %s from %s", ref_id, source_fqcn);
    return f;
}

void cj_dl_fetch_get_progress(const struct cj_dl_fetch *f, struct cj_dl_fetch_progress *p)
{
    double now = now_mono();
    *p = (struct cj_dl_fetch_progress){
        .items = f->items, .bytes = f->bytes, .requests = f->requests, .retries = f->retries,
        .elapsed = now - f->t0, .idle = now - f->last,
    };
}
