/* SPDX-License-Identifier: Apache-2.0 */
/* task.c — one task at a time (doc/design.md "Reference worker"):
 *
 *   task_ready -> cj_dxo_read the model -> cj_dl_fetch its ref from the source
 *   (through the relay) -> per item, as it arrives: parse (npz / safetensors),
 *   +1.0f on every float32 element in place, write the result item, drop the
 *   task item -> reply task_accepted (after the whole download, like the stock
 *   trainer) or task_failed -> result: the same DXO shape pointing at our own
 *   producer ref (1 receiver) -> result_ready (cn__pass_through) ->
 *   result_accepted + the ref done (the server downloaded and confirmed) ->
 *   result_source_settled (3 tries, 30 s each, 0.1 s apart) -> metric -> idle.
 *
 * Inline models (tensors inside the task, cjrelay-sim --inline) skip the
 * download: each tensor is transformed where it lies in the payload; the
 * result is served as refs all the same.
 *
 * Result items are reference-counted: the producer lends them to reply
 * evbuffers by reference, and an item is freed when the task released it and
 * no reply still points at it. */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/client.h"
#include "dl/itemcheck.h"
#include "dl/lent.h"
#include "dl/producer.h"
#include "fl/capi.h"
#include "payload/items.h"
#include "payload/lobs.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "worker.h"

#include "payload/dxo.h"
#include "util/mp.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tensor transform assumes a little-endian host (items are little-endian)"
#endif

#define ITEM_TENSORS_MAX 16          /* members / tensors looked at per item */
#define RESULT_READY_TIMEOUT 60.0    /* s for the relay's result_accepted */
#define SETTLE_TIMEOUT 30.0          /* s per result_source_settled try (stock trainer) */
#define SETTLE_TRIES 3
#define SETTLE_GAP 0.1               /* s between tries */
#define MIB (1024.0 * 1024.0)
#define TRIM_MIN ((size_t)4 << 20)   /* items this large give their freed chunks back to the system */
#define DL_REQUEST_TIMEOUT 600.0     /* s per download request: the stock trainer's default */

/* The download's per-request timeout, as the stock trainer's numpy and
 * tensor decomposers read it: the application config variable
 * np_ / tensor_streaming_per_request_timeout, here from its environment form
 * (NVFLARE_ and upper case, as FLARE's ConfigService falls back to); not a
 * positive number: the default, 600 s.  A request that gets no reply for this
 * long (its reply went down with the relay's upstream, say) returns timeout,
 * and the download re-sends it with the same state. */
static double per_request_timeout(int dot)
{
    const char *var = dot == CJ_DXO_DOT_NUMPY ? "NVFLARE_NP_STREAMING_PER_REQUEST_TIMEOUT"
                                              : "NVFLARE_TENSOR_STREAMING_PER_REQUEST_TIMEOUT";
    const char *v = getenv(var);
    char *end;
    double secs = v && *v ? strtod(v, &end) : 0;
    if (v && *v && (*end || !(secs > 0) || secs > 1e9)) {
        cj_log_warning("%s=%s is not a positive number of seconds: using %g s", var, v, DL_REQUEST_TIMEOUT);
        return DL_REQUEST_TIMEOUT;
    }
    return secs > 0 ? secs : DL_REQUEST_TIMEOUT;
}

struct wk_task {
    char id[CJ_CAPI_ID_MAX + 1];
    char name[CJ_CAPI_ID_MAX + 1];
    struct cj_stream_reqctx req;     /* the task_ready request, answered once */
    bool answered;
    int64_t round;
    uint8_t dot;                     /* 3 numpy (npz items), 6 torch (safetensors items) */
    bool inline_model;               /* the tensors came inside the task (no download) */
    size_t n;                        /* tensors = items; item i is "T<i>" */
    char **names;                    /* tensor name of item i */
    char src[CJ_FOBS_FQCN_MAX + 1];  /* where the model's ref lives */
    char src_ref[CJ_FOBS_REF_ID_MAX + 1];
    struct cj_dl_fetch *fetch;
    char why[512];                   /* our own reason when an item was refused */
    struct cj_dl_lent **items;       /* result item i, lent to the server's pulls */
    uint64_t *sizes;
    uint64_t got, bytes_in, bytes_out, floats;
    double t0, t_dl;
    /* result */
    bool ref_added, ref_live, ref_done, accepted, rr_pending, settle_pending;
    enum cj_dl_outcome outcome;
    char ref[CJ_DL_REF_ID_MAX + 1];
    uint64_t rr_req, settle_req;
    int settle_tries;
    struct event *settle_timer;
};

/* ---- result items ------------------------------------------------------------------------- */

static void release_items(struct wk_task *t)
{
    for (size_t i = 0; t->items && i < t->n; i++) {
        cj_dl_lent_release(t->items[i]);
        t->items[i] = NULL;
    }
}

/* The producer's item callback: lends item index by reference. */
static int serve_item(void *ctx, size_t index, struct evbuffer *out)
{
    struct wk *w = ctx;
    struct wk_task *t = w->task;
    if (!t || index >= t->n || !t->items[index]) return -1;
    return cj_dl_lent_add(t->items[index], out);
}

/* ---- task lifetime ---------------------------------------------------------------------------- */

static void task_free(struct wk *w, struct wk_task *t)
{
    if (t->fetch) cj_dl_fetch_cancel(t->fetch);
    if (t->ref_live) cj_dl_producer_remove_ref(w->prod, t->ref);
    if (t->rr_pending) cj_stream_request_cancel(w->ep, t->rr_req);
    if (t->settle_pending) cj_stream_request_cancel(w->ep, t->settle_req);
    if (t->settle_timer) event_free(t->settle_timer);
    release_items(t);
    for (size_t i = 0; t->names && i < t->n; i++) free(t->names[i]);
    free(t->names);
    free(t->items);
    free(t->sizes);
    free(t);
    if (w->task == t) w->task = NULL;
}

bool wk_task_live(const struct wk *w)
{
    return w->task && w->task->ref_added;
}

/* Answers the task_ready request: task_accepted, or task_failed with reason. */
static void answer_task(struct wk *w, struct cj_stream_reqctx *req, const char *task_id, const char *reason)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    const char *what = reason ? "task_failed" : "task_accepted";
    msgpack_sbuffer_init(&sb);
    int rc = reason ? cj_capi_encode_task_failed(&sb, task_id, reason, &e)
                    : cj_capi_encode_task_accepted(&sb, task_id, &e);
    struct evbuffer *eb = rc || !req->has_ri ? NULL : mp_sbuffer_to_evbuffer(&sb);
    msgpack_sbuffer_destroy(&sb);
    struct cj_stream_msg m = {.encoding = "fobs"};
    if (rc) cj_log_error("task %s: cannot encode %s: %s", task_id ? task_id : "?", what, e.msg);
    else if (!req->has_ri)
        cj_log_error("task %s: the task_ready had no request id: no %s", task_id ? task_id : "?", what);
    else if (!eb || cj_stream_reply(w->ep, req, NULL, &m, eb, NULL, NULL))
        cj_log_error("task %s: cannot send %s", task_id ? task_id : "?", what);
}

static void fail_task(struct wk *w, struct wk_task *t, const char *why)
{
    cj_log_error("task %s ('%s'): failed: %s", t->id, t->name, why);
    if (!t->answered) answer_task(w, &t->req, t->id, why);
    t->answered = true;
    task_free(w, t);
    w->mode->task_done(w, NULL, why);
}

void wk_task_drop(struct wk *w)
{
    struct wk_task *t = w->task;
    if (!t) return;
    if (!t->answered && !t->ref_added) fail_task(w, t, "the worker is exiting");
    else task_free(w, t);
}

/* The end of a task whose result went out: metric, free, next. */
static void task_over(struct wk *w, struct wk_task *t, bool settled)
{
    double total = cj_now() - t->t0;
    cj_log_info("task %s ('%s', round %" PRId64 ") done%s: %.1f MiB in, %.1f MiB out, %.2f s in all", t->id, t->name,
                t->round, settled ? "" : " (not settled)", (double)t->bytes_in / MIB, (double)t->bytes_out / MIB,
                total);
    if (t->accepted) wk_log_metric(w, "loss", 1.0 / (double)(t->round + 1), t->round);
    task_free(w, t);
#ifdef __GLIBC__
    malloc_trim(0);   /* the chunks that carried the result out: nothing is kept between tasks */
#endif
    wk_session_task_over(w);
}

/* ---- the transform: +1.0f on every float32 element ------------------------------------------------ */

static bool is_f32(uint8_t dot, const char *dtype)
{
    return !strcmp(dtype, dot == CJ_DXO_DOT_NUMPY ? "<f4" : "F32");
}

static void add_one(uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, p + i * 4, 4);   /* npz data need not be 4-aligned in the item */
        f += 1.0f;
        memcpy(p + i * 4, &f, 4);
    }
}

/* Transforms task item `index` in place (p, n) and writes result item `index`.
 * rename (may be NULL): the key of a single-tensor result (inline tensors
 * become items keyed T<i>). */
static int make_result_item(struct wk_task *t, uint64_t index, uint8_t *p, size_t n, const char *rename,
                            uint8_t **out, size_t *outlen, char *why, size_t whysz)
{
    struct item_tensor tens[ITEM_TENSORS_MAX];
    struct item_in in[ITEM_TENSORS_MAX];
    size_t cnt = 0, k = 0;
    struct cj_err e = {0};
    bool npz = t->dot == CJ_DXO_DOT_NUMPY;
    int rc = npz ? items_npz_parse(p, n, 0, tens, ITEM_TENSORS_MAX, &cnt, &e)
                 : items_st_parse(p, n, tens, ITEM_TENSORS_MAX, &cnt, &e);
    if (rc) {
        snprintf(why, whysz, "item T%" PRIu64 " is not a valid %s item: %s", index, npz ? "npz" : "safetensors",
                 e.msg);
        return -1;
    }
    for (size_t i = 0; i < cnt; i++) {
        struct item_tensor *x = &tens[i];
        if (npz && (!x->is_npy || !strcmp(x->name, "allow_pickle"))) continue;   /* numpy < 2's extra member */
        if (npz && x->fortran_order && x->ndim > 1) {
            snprintf(why, whysz, "item T%" PRIu64 " member %.200s is a Fortran-order array (not supported)", index,
                     x->name);
            return -1;
        }
        if (is_f32(t->dot, x->dtype)) {
            add_one(p + x->data_off, x->nelem);
            t->floats += x->nelem;
        }
        in[k++] = (struct item_in){.name = x->name, .dtype = x->dtype, .ndim = x->ndim, .shape = x->shape,
                                   .data = p + x->data_off, .len = x->data_len};
    }
    if (!k) {
        snprintf(why, whysz, "item T%" PRIu64 " holds no tensor", index);
        return -1;
    }
    if (rename && k == 1) in[0].name = rename;
    rc = npz ? items_npz_write(in, k, 0, out, outlen, &e) : items_st_write(in, k, out, outlen, &e);
    if (rc) snprintf(why, whysz, "cannot write result item T%" PRIu64 ": %s", index, e.msg);
    return rc ? -1 : 0;
}

/* ---- the download ------------------------------------------------------------------------------ */

/* Keeps result item index (out, taken).  0 or -1 (out freed). */
static int store_result(struct wk_task *t, uint64_t index, uint8_t *out, size_t outlen)
{
    struct cj_dl_lent *it = cj_dl_lent_new(out, outlen);
    if (!it) {
        snprintf(t->why, sizeof t->why, "out of memory");
        return -1;
    }
    t->items[index] = it;
    t->sizes[index] = outlen;
    t->bytes_out += outlen;
    return 0;
}

/* --raw: the item's header is checked (as the spool checks it) and the item
 * dropped, so a benchmark sees the transfer and not the transform. */
static int check_raw_item(struct wk_task *t, uint64_t index, struct evbuffer *item)
{
    static uint8_t head[CJ_ITEM_HDR_MAX];
    size_t n = evbuffer_get_length(item), have = n < sizeof head ? n : sizeof head;
    ev_ssize_t got = evbuffer_copyout(item, head, have);
    char why[256];
    if (got < 0 || cj_item_check_header(t->dot, head, (size_t)got, n, (uint32_t)index, true, why, sizeof why) != 1) {
        snprintf(t->why, sizeof t->why, "item T%" PRIu64 ": %s", index, got < 0 ? "unreadable" : why);
        return -1;
    }
    return 0;
}

static int on_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct wk *w = ctx;
    struct wk_task *t = w->task;
    size_t n = evbuffer_get_length(item);
    int rc = -1;
    if (!t) {
        evbuffer_free(item);
        return -1;
    }
    if (index < t->n && n > 0 && w->opts.raw) {
        rc = check_raw_item(t, index, item);
    } else if (index >= t->n) {
        snprintf(t->why, sizeof t->why, "the ref holds more items than the model's %zu tensors", t->n);
    } else if (n == 0) {
        snprintf(t->why, sizeof t->why, "item T%" PRIu64 " is empty", index);
    } else {
        /* One contiguous copy of this item only; it is dropped right after. */
        uint8_t *p = evbuffer_pullup(item, -1), *out = NULL;
        size_t outlen = 0;
#ifdef __GLIBC__
        /* The pullup freed the reply's many small chunks into the heap; give them
         * back now, or the result item below would come on top of them (an item
         * would then cost 3x its size instead of 2x). */
        if (p && n >= TRIM_MIN) malloc_trim(0);
#endif
        if (!p) snprintf(t->why, sizeof t->why, "out of memory for item T%" PRIu64 " (%zu bytes)", index, n);
        else if (make_result_item(t, index, p, n, NULL, &out, &outlen, t->why, sizeof t->why) == 0)
            rc = store_result(t, index, out, outlen);
    }
    if (rc == 0) {
        t->got++;
        t->bytes_in += n;
    }
    evbuffer_free(item);
    return rc;
}

static void start_result(struct wk *w, struct wk_task *t);

/* Every tensor is in and transformed: accept the task, serve the result. */
static void model_ready(struct wk *w, struct wk_task *t)
{
    double dt = cj_now() - t->t0;
    t->t_dl = dt;
    cj_log_info("task %s: %s %zu items (%.1f MiB) from %s in %.2f s (%.1f MiB/s); %" PRIu64
                " float32 elements + 1.0",
                t->id, t->inline_model ? "read" : "downloaded", t->n, (double)t->bytes_in / MIB,
                t->inline_model ? "the task" : t->src, dt, dt > 0 ? (double)t->bytes_in / MIB / dt : 0.0, t->floats);
    struct wk_task_end end = {.id = t->id, .round = t->round, .bytes = t->bytes_in, .secs = dt};
    w->mode->task_done(w, &end, NULL);
}

void wk_task_serve_result(struct wk *w, const struct wk_task_end *end, const char *why)
{
    struct wk_task *t = w->task;
    (void)end;
    if (why || !t) return;   /* a failure was answered task_failed already */
    /* The stock trainer accepts the task only once its downloads are done. */
    answer_task(w, &t->req, t->id, NULL);
    t->answered = true;
    start_result(w, t);
}

static void on_fetched(void *ctx, bool ok, const char *why)
{
    struct wk *w = ctx;
    struct wk_task *t = w->task;
    if (!t) return;
    t->fetch = NULL;   /* freed by the client right after this call */
    char reason[1200];
    if (!ok) {
        snprintf(reason, sizeof reason, "download of ref %s from %s failed: %.600s", t->src_ref, t->src,
                 t->why[0] ? t->why : why);
        fail_task(w, t, reason);
        return;
    }
    if (t->got != t->n) {
        snprintf(reason, sizeof reason, "ref %s from %s held %" PRIu64 " items; the model has %zu tensors", t->src_ref,
                 t->src, t->got, t->n);
        fail_task(w, t, reason);
        return;
    }
    model_ready(w, t);
}

/* ---- the result ------------------------------------------------------------------------------ */

static void settle(struct wk *w, struct wk_task *t);

static void on_ref_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                        const struct cj_dl_receiver_info *rcv, size_t n_rcv)
{
    struct wk *w = ctx;
    struct wk_task *t = w->task;
    if (!t || strcmp(ref_id, t->ref)) return;
    t->ref_live = false;
    t->ref_done = true;
    t->outcome = outcome;
    for (size_t i = 0; i < n_rcv; i++)
        cj_log_info("task %s: result ref %s: %s downloaded %.1f MiB in %u replies: %s", t->id, ref_id, rcv[i].fqcn,
                    (double)rcv[i].bytes / MIB, rcv[i].replies,
                    rcv[i].state == CJ_DL_RCV_OK       ? "confirmed"
                    : rcv[i].state == CJ_DL_RCV_FAILED ? "failed"
                                                       : "pending");
    if (outcome == CJ_DL_OUT_OK)
        cj_log_info("task %s: result ref %s downloaded and confirmed", t->id, ref_id);
    else
        cj_log_error("task %s: result ref %s %s", t->id, ref_id,
                     outcome == CJ_DL_OUT_TIMEOUT ? "expired: nobody downloaded it in time" : "failed to download");
    release_items(t);   /* freed now, or when the last reply referring to one is freed */
    if (t->accepted) settle(w, t);
}

static void on_settle_reply(void *arg, struct cj_stream_reply *r);

static void settle_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    if (w->task && !w->exiting) settle(w, w->task);
}

static void settle_again(struct wk *w, struct wk_task *t, const char *why)
{
    if (t->settle_tries >= SETTLE_TRIES) {
        cj_log_error("task %s: result_source_settled failed %d times (%s); giving up", t->id, t->settle_tries, why);
        task_over(w, t, false);
        return;
    }
    cj_log_warning("task %s: result_source_settled try %d failed: %s; trying again", t->id, t->settle_tries, why);
    struct timeval tv = {0, (suseconds_t)(SETTLE_GAP * 1e6)};
    if (!t->settle_timer) t->settle_timer = evtimer_new(w->base, settle_cb, w);
    if (t->settle_timer) evtimer_add(t->settle_timer, &tv);
    else task_over(w, t, false);
}

static void settle(struct wk *w, struct wk_task *t)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    t->settle_tries++;
    if (cj_capi_encode_settled(&sb, w->session_id, t->id, &e)) {
        msgpack_sbuffer_destroy(&sb);
        cj_log_error("task %s: cannot encode result_source_settled: %s", t->id, e.msg);
        task_over(w, t, false);
        return;
    }
    if (wk_request(w, CJ_CAPI_T_SETTLED, &sb, SETTLE_TIMEOUT, on_settle_reply, w, &t->settle_req, false)) {
        settle_again(w, t, "cannot send");
        return;
    }
    t->settle_pending = true;
}

static void on_settle_reply(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    struct wk_task *t = w->task;
    if (w->exiting || !t || !t->settle_pending) return;
    t->settle_pending = false;
    char why[600];
    size_t n;
    const uint8_t *p = wk_bytes(r->data, &n);
    struct cj_err e = {0};
    if (strcmp(r->return_code, "ok")) {
        snprintf(why, sizeof why, "%s %s", r->return_code, r->error);
    } else if (cj_capi_decode_reply(CJ_CAPI_SETTLED, p, n, w->m, &e)) {
        snprintf(why, sizeof why, "invalid reply: %s", e.msg);
    } else if (w->m->kind == CJ_CAPI_ERROR) {
        snprintf(why, sizeof why, "the relay answered: %.400s", w->m->reason);
    } else if (strcmp(w->m->task_id, t->id)) {
        snprintf(why, sizeof why, "the reply names task '%s'", w->m->task_id);
    } else {
        wk_touch(w);
        cj_log_info("task %s: result source settled", t->id);
        task_over(w, t, true);
        return;
    }
    settle_again(w, t, why);
}

static void result_failed(struct wk *w, struct wk_task *t, const char *why)
{
    cj_log_error("task %s: result not delivered: %s", t->id, why);
    task_over(w, t, false);
}

static void on_result_reply(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    struct wk_task *t = w->task;
    if (w->exiting || !t || !t->rr_pending) return;
    t->rr_pending = false;
    char why[600];
    size_t n;
    const uint8_t *p = wk_bytes(r->data, &n);
    struct cj_err e = {0};
    if (strcmp(r->return_code, "ok")) {
        snprintf(why, sizeof why, "result_ready not answered: %s %s", r->return_code, r->error);
    } else if (cj_capi_decode_reply(CJ_CAPI_RESULT_READY, p, n, w->m, &e)) {
        snprintf(why, sizeof why, "invalid result_ready reply: %s", e.msg);
    } else if (w->m->kind != CJ_CAPI_RESULT_ACCEPTED) {
        snprintf(why, sizeof why, "the relay answered %s: %.400s", cj_capi_kind_name(w->m->kind), w->m->reason);
    } else {
        wk_touch(w);
        t->accepted = true;
        if (t->ref_done) {
            settle(w, t);
        } else {
            cj_log_info("task %s: result accepted by the relay; serving ref %s until the server has it", t->id,
                        t->ref);
        }
        return;
    }
    result_failed(w, t, why);
}

/* {"__content_type__": "DXO"} */
static void pack_result_headers(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str(&pk, 16);
    msgpack_pack_str_body(&pk, "__content_type__", 16);
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "DXO", 3);
}

/* The result_ready payload: the envelope around the DXO Shareable, then its datum. */
static int build_result_ready(struct wk *w, struct wk_task *t, msgpack_sbuffer *out, struct cj_err *e)
{
    msgpack_sbuffer hdr, dxo;
    struct cj_lobs_section main, datums[4];
    size_t nd = 0;
    msgpack_sbuffer_init(&hdr);
    msgpack_sbuffer_init(&dxo);
    pack_result_headers(&hdr);
    struct cj_dxo_out d = {
        .headers = (const uint8_t *)hdr.data, .headers_len = hdr.size, .dot = t->dot, .n_tensors = t->n,
        .names = (const char *const *)t->names, .current_round = t->round, .source = w->bs.trainer_fqcn,
        .ref_id = t->ref,
    };
    int rc = cj_dxo_write(&dxo, &d, e);
    if (!rc) rc = cj_lobs_validate(dxo.data, dxo.size, &main, datums, 4, &nd, e);
    if (!rc && nd > 4) rc = cj_fail(e, CJ_E_LIMIT, 0, "the result DXO has %zu datums", nd);
    if (!rc) rc = cj_capi_encode_result_ready(out, w->session_id, t->id, main.value, main.value_len, e);
    for (size_t i = 0; !rc && i < nd; i++) rc = cj_lobs_write_section(out, &datums[i], e);
    msgpack_sbuffer_destroy(&hdr);
    msgpack_sbuffer_destroy(&dxo);
    return rc;
}

static void start_result(struct wk *w, struct wk_task *t)
{
    struct cj_dl_ref_cfg rc = {
        .n_items = t->n, .sizes = t->sizes, .item_fn = serve_item, .num_receivers = 1,
        .timeout = CJ_DL_DEFAULT_TIMEOUT, .done = on_ref_done, .ctx = w,
    };
    if (cj_dl_producer_add_ref(w->prod, &rc, t->ref)) {
        result_failed(w, t, "cannot add the result ref to the producer");
        return;
    }
    t->ref_added = t->ref_live = true;
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (build_result_ready(w, t, &sb, &e)) {
        msgpack_sbuffer_destroy(&sb);
        char why[400];
        snprintf(why, sizeof why, "cannot build result_ready: %s", e.msg);
        result_failed(w, t, why);
        return;
    }
    size_t size = sb.size;
    if (wk_request(w, CJ_CAPI_T_RESULT_READY, &sb, RESULT_READY_TIMEOUT, on_result_reply, w, &t->rr_req, true)) {
        result_failed(w, t, "cannot send result_ready");
        return;
    }
    t->rr_pending = true;
    cj_log_info("task %s: result_ready sent (%zu bytes): ref %s, %zu items, %.1f MiB served from %s", t->id, size,
                t->ref, t->n, (double)t->bytes_out / MIB, w->bs.trainer_fqcn);
}

/* ---- task_ready --------------------------------------------------------------------------------- */

/* Inline tensors (cjrelay-sim --inline): {type: "native"} values inside the
 * payload, a safetensors blob (torch) or an .npy file (numpy).  An .npy file
 * is parsed by items_npz_parse after wrapping it in a one-member stored ZIP
 * (local header, the file, end record; CRCs are not checked). */
static uint8_t *npy_in_zip(const uint8_t *npy, size_t n, size_t *len)
{
    static const char name[] = "t.npy";
    const size_t nl = sizeof name - 1, hl = 30 + nl;
    uint8_t *z = malloc(hl + n + 22);
    if (!z) return NULL;
    memset(z, 0, hl);
    memcpy(z, "PK\x03\x04", 4);
    z[4] = 20;                                                         /* version needed 2.0 */
    for (int i = 0; i < 4; i++) z[18 + i] = z[22 + i] = (uint8_t)(n >> (8 * i));   /* csize = usize */
    z[26] = (uint8_t)nl;
    memcpy(z + 30, name, nl);
    memcpy(z + hl, npy, n);
    uint8_t *e = z + hl + n;                                           /* end record, no central directory */
    size_t cd = hl + n;
    memset(e, 0, 22);
    memcpy(e, "PK\x05\x06", 4);
    e[8] = e[10] = 1;                                                  /* 1 entry (here, in all) */
    for (int i = 0; i < 4; i++) e[16 + i] = (uint8_t)(cd >> (8 * i)); /* cd at the end, size 0 */
    *len = hl + n + 22;
    return z;
}

static int inline_result_item(struct wk_task *t, uint64_t i, uint8_t *data, size_t len, char *why, size_t whysz)
{
    char key[32];
    uint8_t *out = NULL, *z = NULL, *p = data;
    size_t outlen = 0, n = len;
    snprintf(key, sizeof key, "T%" PRIu64, i);
    if (t->dot == CJ_DXO_DOT_NUMPY) {
        if (len > 0xffffffffu - 64) {
            snprintf(why, whysz, "inline tensor %" PRIu64 " is over 4 GiB", i);
            return -1;
        }
        if (!(z = npy_in_zip(data, len, &n))) {
            snprintf(why, whysz, "out of memory");
            return -1;
        }
        p = z;
    }
    int rc = make_result_item(t, i, p, n, key, &out, &outlen, why, whysz);   /* safetensors: in place */
    free(z);
    if (!rc) rc = store_result(t, i, out, outlen);
    if (rc && t->why[0]) snprintf(why, whysz, "%s", t->why);
    return rc;
}

/* Reads the model's DXO into t: names by item index, DOT, and either the
 * source ref (refs) or the inline tensors, transformed here (the payload p is
 * mutable and ours while this runs).  0 or -1 with why. */
static int read_model(struct wk_task *t, uint8_t *p, size_t n, const struct cj_capi_msg *m, char *why, size_t whysz)
{
    struct cj_dxo_in d = {0};
    struct cj_err e = {0};
    if (cj_dxo_read(p, n, m->body_off, m->body_len, &d, &e)) goto bad;
    bool native = d.n_native > 0;
    if (d.n_tensors == 0 || (native ? d.n_native : d.n_refs) != d.n_tensors) {
        snprintf(why, whysz, "the model must be one or more tensors, all refs or all inline (got %zu tensors: %zu "
                 "refs, %zu inline)", d.n_tensors, d.n_refs, d.n_native);
        return -1;
    }
    if (!native && (d.dot != CJ_DXO_DOT_NUMPY && d.dot != CJ_DXO_DOT_TORCH)) {
        snprintf(why, whysz, "unsupported DOT %u", d.dot);
        return -1;
    }
    if (!native && (!d.has_datum || d.n_items != d.n_tensors)) {
        snprintf(why, whysz, "the model's %zu tensors name %" PRIu64 " items%s", d.n_tensors, d.n_items,
                 d.has_datum ? "" : " and no download ref");
        return -1;
    }
    struct cj_dxo_tensor *tt = calloc(d.n_tensors, sizeof *tt);
    t->n = d.n_tensors;
    t->names = calloc(t->n, sizeof *t->names);
    t->items = calloc(t->n, sizeof *t->items);
    t->sizes = calloc(t->n, sizeof *t->sizes);
    if (!tt || !t->names || !t->items || !t->sizes) {
        free(tt);
        snprintf(why, whysz, "out of memory for %zu tensors", t->n);
        return -1;
    }
    d.tensors = tt;
    d.cap = t->n;
    if (cj_dxo_read(p, n, m->body_off, m->body_len, &d, &e)) {
        free(tt);
        goto bad;
    }
    t->inline_model = native;
    t->dot = native ? (tt[0].kind == CJ_FOBS_WRAP_TORCH ? CJ_DXO_DOT_TORCH : CJ_DXO_DOT_NUMPY) : d.dot;
    int rc = 0;
    for (size_t i = 0; !rc && i < t->n; i++) {
        int64_t k = native ? (int64_t)i : tt[i].item;
        if (native && tt[i].kind != tt[0].kind) {
            snprintf(why, whysz, "inline tensors of two kinds (numpy and torch)");
            rc = -1;
        } else if (k < 0 || (uint64_t)k >= t->n || t->names[k]) {
            snprintf(why, whysz, "tensor %zu has item id %.*s (want T0..T%zu, each once)", i, (int)tt[i].data_len,
                     (const char *)tt[i].data, t->n - 1);
            rc = -1;
        } else if (!(t->names[k] = malloc(tt[i].name_len + 1))) {
            snprintf(why, whysz, "out of memory");
            rc = -1;
        } else {
            cj_dxo_name(&tt[i], t->names[k], tt[i].name_len + 1);
        }
    }
    /* Inline: transform each tensor now, where it lies in the payload. */
    for (size_t i = 0; !rc && native && i < t->n; i++) {
        uint8_t *data = p + (tt[i].data - p);   /* the payload is ours: writable */
        rc = inline_result_item(t, i, data, tt[i].data_len, why, whysz);
        if (!rc) t->bytes_in += tt[i].data_len;
    }
    free(tt);
    if (rc) return -1;
    t->round = d.has_round ? d.current_round : 0;
    if (!native) {
        if (d.n_datums > 1)
            cj_log_warning("task %s: the model has %zu DOT-%u datums; using the first", t->id, d.n_datums, d.dot);
        snprintf(t->src, sizeof t->src, "%s", d.fqcn);
        snprintf(t->src_ref, sizeof t->src_ref, "%s", d.ref_id);
    }
    return 0;
bad:
    snprintf(why, whysz, "cannot read the model: %s", e.msg);
    return -1;
}

int wk_task_ready(void *arg, struct cj_stream_blob *b)
{
    struct wk *w = arg;
    struct cj_capi_msg *m = w->m;
    char why[700];
    if (w->exiting || !wk_from_relay(w, b, "task_ready")) return 0;
    size_t n;
    uint8_t *p = (uint8_t *)wk_bytes(b->data, &n);   /* b->data is ours during the call */
    struct cj_err e = {0};
    if (cj_capi_decode_request(CJ_CAPI_TASK_READY, p, n, m, &e)) {
        snprintf(why, sizeof why, "invalid task_ready: %s", e.msg);
        cj_log_error("%s", why);
        answer_task(w, &b->req, NULL, why);
        return 0;
    }
    if (w->phase != WK_READY || strcmp(m->session_id, w->session_id)) {
        snprintf(why, sizeof why, "task_ready for session '%s'; ours is '%s'", m->session_id, w->session_id);
        cj_log_error("task %s refused: %s", m->task_id, why);
        answer_task(w, &b->req, m->task_id, why);
        return 0;
    }
    wk_touch(w);
    if (w->task) {
        snprintf(why, sizeof why, "busy with task %s", w->task->id);
        cj_log_error("task %s refused: %s", m->task_id, why);
        answer_task(w, &b->req, m->task_id, why);
        return 0;
    }
    wk_task_begin(w, p, n, m, &b->req);
    return 0;
}

void wk_task_begin(struct wk *w, uint8_t *p, size_t n, const struct cj_capi_msg *m,
                   const struct cj_stream_reqctx *req)
{
    char why[700];
    struct wk_task *t = calloc(1, sizeof *t);
    if (!t) {
        if (req) answer_task(w, (struct cj_stream_reqctx *)req, m->task_id, "out of memory");
        else wk_exit(w, WK_EXIT_FAIL, "out of memory");
        return;
    }
    w->task = t;
    t->t0 = cj_now();
    if (req) t->req = *req;
    else t->answered = true;   /* direct mode: nobody to answer */
    snprintf(t->id, sizeof t->id, "%s", m->task_id);
    snprintf(t->name, sizeof t->name, "%s", m->task_name);
    if (n == 0 || read_model(t, p, n, m, why, sizeof why)) {
        fail_task(w, t, n ? why : "empty task_ready");
        return;
    }
    if (t->inline_model) {
        cj_log_info("task %s ('%s', round %" PRId64 "): %zu inline %s tensors", t->id, t->name, t->round, t->n,
                    t->dot == CJ_DXO_DOT_NUMPY ? "numpy" : "torch");
        t->got = t->n;
        model_ready(w, t);
        return;
    }
    cj_log_info("task %s ('%s', round %" PRId64 "): downloading %zu %s tensors from %s (ref %s)", t->id, t->name,
                t->round, t->n, t->dot == CJ_DXO_DOT_NUMPY ? "numpy" : "torch", t->src, t->src_ref);
    struct cj_dl_fetch_cfg cfg;
    cj_dl_fetch_cfg_default(&cfg);
    cfg.request_timeout = per_request_timeout(t->dot);
    t->fetch = cj_dl_fetch(w->base, w->ep, t->src, t->src_ref, &cfg, on_item, on_fetched, w);
    if (!t->fetch) {
        snprintf(why, sizeof why, "cannot start downloading ref %s from %s", t->src_ref, t->src);
        fail_task(w, t, why);
    }
}
