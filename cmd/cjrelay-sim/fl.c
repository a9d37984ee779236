/* SPDX-License-Identifier: Apache-2.0 */
/* fl.c — cjrelay-sim's FL server: aux topics, get_task, submit_update,
 * the task refs it serves and the result refs it downloads and verifies (see
 * sim.h for the list, doc/design.md "Simulator" and "Conventions").
 *
 * A round r (1..--rounds) is issued as a task to the first site that polls
 * while it has no task out; the site then gets __try_again__ until its result
 * arrives.  The task's tensors are one producer ref (source server.<job>, one
 * receiver) whose items are generated when a reply needs them (model.c) and
 * freed once sent, so the simulator never holds the model.  A result is
 * checked (headers, DXO), its ref downloaded from the FQCN its datum names,
 * every element compared with task + 1.0f, and only then answered ok.  A
 * failed round (failed result, failed download, task timeout, undeliverable
 * task) is issued again as a new task, up to --max-failures times.
 *
 * The result's check is in verify.c; source-failure notices and their
 * tombstones in srcfail.c (a round whose download they fail is issued again). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/client.h"
#include "dl/lent.h"
#include "dl/producer.h"
#include "fl_int.h"
#include "model.h"
#include "payload/lobs.h"
#include "sim.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mp.h"
#include "util/uuid.h"

#include "dl/dlmsg.h"
#include "payload/dxo.h"
#include "payload/fobs.h"

#define CH_AUX "aux_communication"
#define CH_CMD "server_command"
#define TASK_NAME "train"
#define MAX_SUBMIT ((size_t)64 << 20) /* a result payload with refs is small; inline ones are not */

static const char *state_name(enum tstate st)
{
    static const char *const n[] = {"sending", "issued", "verifying", "done", "failed"};
    return n[st];
}

/* ---- small payloads ----------------------------------------------------------------- */

/* A payload as one contiguous buffer (NULL when too large or no memory). */
const uint8_t *blob_bytes(struct evbuffer *b, size_t max, size_t *len)
{
    *len = evbuffer_get_length(b);
    if (*len == 0 || *len > max) return NULL;
    return evbuffer_pullup(b, -1);
}

/* Streams sb as a fobs reply to rq (rc NULL = ok). */
int send_reply(struct sim_fl *fl, const struct cj_stream_reqctx *rq, const char *rc, const msgpack_sbuffer *sb,
               cj_stream_done_fn done, void *arg)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) return -1;
    if (sb && sb->size && evbuffer_add(b, sb->data, sb->size)) {
        evbuffer_free(b);
        return -1;
    }
    struct cj_stream_msg m = {.encoding = sb && sb->size ? "fobs" : "none"};
    if (cj_stream_reply(fl->job->ep, rq, rc, &m, b, done, arg) < 0) {
        cj_log_warning("sim: cannot send the %s reply to %s", rq->topic, rq->origin);
        return -1;
    }
    return 0;
}

static int pack_str(msgpack_packer *pk, const char *s)
{
    return cj_fobs_write_str(pk, s);
}

/* MAIN { Shareable { __headers__: <map of n entries written by fn> } } */
typedef int (*hdr_fn)(msgpack_packer *pk, struct sim_fl *fl, const void *arg);

static int build_headers_only(msgpack_sbuffer *sb, struct sim_fl *fl, uint32_t n, hdr_fn fn, const void *arg)
{
    struct cj_err e;
    size_t hoff;
    msgpack_packer pk;
    if (cj_lobs_begin_main(sb, &hoff, &e)) return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (cj_fobs_write_shareable_begin(&pk, 1) || pack_str(&pk, CJ_FOBS_HEADERS_KEY) || msgpack_pack_map(&pk, n) ||
        fn(&pk, fl, arg) || cj_fobs_write_shareable_end(&pk))
        return -1;
    cj_lobs_end_main(sb, hoff);
    return 0;
}

static int pack_peer_ctx(msgpack_packer *pk, struct sim_fl *fl)
{
    return pack_str(pk, "__peer_ctx__") || cj_fobs_write_flcontext(pk, CJ_FQCN_SERVER, fl->job->id) ? -1 : 0;
}

/* {__task_id__: id} */
static int pack_cookie_jar(msgpack_packer *pk, const char *task_id)
{
    return pack_str(pk, "__cookie_jar__") || msgpack_pack_map(pk, 1) || pack_str(pk, "__task_id__") ||
                   pack_str(pk, task_id)
               ? -1 : 0;
}

/* Aux reply: {__rc__, [__cookie_jar__ (raw echo)], __peer_ctx__}. */
struct aux_reply {
    const char *rc;
    const uint8_t *jar;
    size_t jar_len;
};

static int aux_hdrs(msgpack_packer *pk, struct sim_fl *fl, const void *arg)
{
    const struct aux_reply *a = arg;
    if (pack_str(pk, "__rc__") || pack_str(pk, a->rc)) return -1;
    if (a->jar && (pack_str(pk, "__cookie_jar__") || msgpack_sbuffer_write(pk->data, (const char *)a->jar, a->jar_len)))
        return -1;
    return pack_peer_ctx(pk, fl);
}

/* __try_again__ (with __wait_time__) or __end_run__ (without), in the server's order (vector 16). */
static int special_hdrs(msgpack_packer *pk, struct sim_fl *fl, const void *arg)
{
    const char *name = arg;
    if (!strcmp(name, "__try_again__") && (pack_str(pk, "__wait_time__") || msgpack_pack_double(pk, fl->o->wait_time)))
        return -1;
    if (pack_cookie_jar(pk, "") || pack_str(pk, "__task_id__") || pack_str(pk, "") || pack_str(pk, "task_name") ||
        pack_str(pk, name))
        return -1;
    return pack_peer_ctx(pk, fl);
}

/* The empty-string reply of submit_update: 64 00 <u64 1> a0. */
static void empty_string_payload(msgpack_sbuffer *sb)
{
    static const char b[] = {0x64, 0, 0, 0, 0, 0, 0, 0, 0, 1, (char)0xa0};
    msgpack_sbuffer_write(sb, b, sizeof b);
}

/* ---- reading requests --------------------------------------------------------------- */
static int read_req(struct evbuffer *data, size_t max, struct req *r, char *why, size_t whysz)
{
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    memset(r, 0, sizeof *r);
    if (!(r->p = blob_bytes(data, max, &r->len))) {
        snprintf(why, whysz, "payload of %zu bytes (empty, too large or no memory)", r->len);
        return -1;
    }
    if (cj_lobs_validate(r->p, r->len, &m, NULL, 0, NULL, &e) ||
        cj_fobs_find_shareable(m.value, m.value_len, &sh, &e)) {
        snprintf(why, whysz, "not a Shareable: %s", e.msg);
        return -1;
    }
    r->body_off = (size_t)(m.value - r->p);
    r->body_len = m.value_len;
    if (sh.headers.len) {
        r->hdrs = m.value + sh.headers.off;
        r->hdrs_len = sh.headers.len;
    }
    return 0;
}

/* The raw value of header key (NULL when absent). */
static const uint8_t *hdr_raw(const struct req *r, const char *key, size_t *len)
{
    struct cj_range sp;
    if (!r->hdrs || cj_fobs_map_get(r->hdrs, r->hdrs_len, key, &sp, NULL) != 1) return NULL;
    *len = sp.len;
    return r->hdrs + sp.off;
}

/* Header key as a string: 1 found, 0 absent, -1 not a (short enough) str. */
static int hdr_str(const struct req *r, const char *key, char *out, size_t outsz)
{
    size_t n;
    const uint8_t *v = hdr_raw(r, key, &n);
    if (!v) return 0;
    return cj_fobs_span_str(v, (struct cj_range){0, n}, out, outsz, NULL) == 0 ? 1 : -1;
}

/* map[key] as a string from a raw map value: 1 found, 0 absent/other. */
static int map_str(const uint8_t *map, size_t len, const char *key, char *out, size_t outsz)
{
    struct cj_range sp;
    if (!map || cj_fobs_map_get(map, len, key, &sp, NULL) != 1) return 0;
    return cj_fobs_span_str(map, sp, out, outsz, NULL) == 0;
}

/* props[key].value of an FLContext wrapper [model, {key: {value, mask}}]. */
static int ctx_prop(const uint8_t *ctx, size_t len, const char *key, char *out, size_t outsz)
{
    struct cj_range data, prop;
    struct mp_cur c;
    uint32_t n;
    if (!ctx || cj_fobs_map_get(ctx, len, CJ_FOBS_DATA_KEY, &data, NULL) != 1) return 0;
    mp_cur_init(&c, ctx, data.off + data.len);
    c.pos = data.off;
    if (mp_read_array(&c, &n, NULL) < 0 || n < 2 || mp_skip(&c, NULL) < 0) return 0;
    size_t props = c.pos;
    if (mp_skip(&c, NULL) < 0) return 0;
    if (cj_fobs_map_get(ctx + props, c.pos - props, key, &prop, NULL) != 1) return 0;
    return map_str(ctx + props + prop.off, prop.len, "value", out, outsz);
}

/* ---- the download log and served-to ---------------------------------------------------- */

static const char *rcv_state(const struct cj_dl_receiver_info *r)
{
    return r->state == CJ_DL_RCV_OK ? "ok" : r->state == CJ_DL_RCV_FAILED ? "failed" : "incomplete";
}

/* One line per receiver of the task's ref (file and stdout); fills served_to. */
static void log_receivers(struct task *t, const struct cj_dl_receiver_info *rcv, size_t n)
{
    struct sim_fl *fl = t->fl;
    size_t o = 0;
    t->served_to[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const struct cj_dl_receiver_info *r = &rcv[i];
        if (!r->pulled) continue;
        printf("DOWNLOAD ref=%s by=%s bytes=%" PRIu64 " status=%s round=%ld%s\n", t->ref_id, r->fqcn, r->bytes,
               rcv_state(r), t->round, fl->job->tag);
        if (fl->dlog) {
            fprintf(fl->dlog, "%s %s %" PRIu64 " %s round=%ld task=%s\n", t->ref_id, r->fqcn, r->bytes, rcv_state(r),
                    t->round, t->id);
            fflush(fl->dlog);
        }
        int k = snprintf(t->served_to + o, sizeof t->served_to - o, "%s%s", o ? "," : "", r->fqcn);
        if (k > 0 && (size_t)k < sizeof t->served_to - o) o += (size_t)k;
    }
}

/* The receivers of a live ref, without logging (for the ROUND line). */
static void visit_served(void *arg, const struct cj_dl_ref_info *ri)
{
    struct task *t = arg;
    if (strcmp(ri->ref_id, t->ref_id)) return;
    size_t o = 0;
    t->served_to[0] = '\0';
    for (size_t i = 0; i < ri->n_rcv; i++) {
        if (!ri->rcv[i].pulled) continue;
        int k = snprintf(t->served_to + o, sizeof t->served_to - o, "%s%s", o ? "," : "", ri->rcv[i].fqcn);
        if (k > 0 && (size_t)k < sizeof t->served_to - o) o += (size_t)k;
    }
}

static void visit_log(void *arg, const struct cj_dl_ref_info *ri)
{
    struct task *t = arg;
    if (!strcmp(ri->ref_id, t->ref_id)) log_receivers(t, ri->rcv, ri->n_rcv);
}

/* Drops the task's ref if it is still live, logging who got what. */
static void drop_ref(struct task *t)
{
    struct sim_fl *fl = t->fl;
    if (!t->ref_live) return;
    cj_dl_producer_foreach(fl->prod, visit_log, t);
    cj_dl_producer_remove_ref(fl->prod, t->ref_id);
    t->ref_live = false;
}

/* ---- tasks -------------------------------------------------------------------------- */

static struct task *task_find(struct sim_fl *fl, const char *id)
{
    for (struct task *t = fl->tasks; t; t = t->next)
        if (!strcmp(t->id, id)) return t;
    return NULL;
}

static bool task_open(const struct task *t)
{
    return t->state == T_SENDING || t->state == T_ISSUED || t->state == T_VERIFYING;
}

static struct task *task_of_site(struct sim_fl *fl, const char *site)
{
    for (struct task *t = fl->tasks; t; t = t->next)
        if (task_open(t) && !strcmp(t->site, site)) return t;
    return NULL;
}

static void task_free(struct task *t)
{
    if (t->fetch) cj_dl_fetch_cancel(t->fetch);
    if (t->timeout_ev) event_free(t->timeout_ev);
    free(t->item_tensor);
    if (t->built)
        for (long i = 0; i < t->fl->o->tensors; i++) cj_dl_lent_release(t->built[i]);
    free(t->built);
    free(t);
}

/* Unlinks and frees t once it is settled and its ref is gone. */
static void task_reap(struct task *t)
{
    struct sim_fl *fl = t->fl;
    if (task_open(t) || t->ref_live || t->reply_pending) return;
    for (struct task **pp = &fl->tasks; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    task_free(t);
}

/* ok with the empty string: the server's answer to a submit_update. */
static void reply_empty_ok(struct sim_fl *fl, const struct cj_stream_reqctx *rq)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    empty_string_payload(&sb);
    send_reply(fl, rq, NULL, &sb, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
}

/* Answers every submit_update waiting for t. */
static void answer_waiters(struct task *t, const char *rc)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (!rc) empty_string_payload(&sb);
    for (size_t i = 0; i < t->n_waiters; i++) send_reply(t->fl, &t->waiters[i], rc, rc ? NULL : &sb, NULL, NULL);
    t->n_waiters = 0;
    msgpack_sbuffer_destroy(&sb);
}

/* A round that did not verify: issued again unless too many failed. */
void round_failed(struct task *t, const char *fmt, ...)
{
    struct sim_fl *fl = t->fl;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    t->state = T_FAILED;
    fl->round_state[t->round] = 0;
    fl->failures++;
    printf("ROUND %ld%s task=%s FAILED %s\n", t->round, fl->job->tag, t->id, why);
    cj_log_warning("sim: round %ld (task %s, site %s) failed: %s", t->round, t->id, t->site, why);
    if (t->fetch) {
        cj_dl_fetch_cancel(t->fetch);
        t->fetch = NULL;
    }
    answer_waiters(t, "process_exception");
    drop_ref(t);
    if (fl->failures > fl->o->max_failures)
        sim_finish(fl->job, 1, "round %ld: %s (%ld failed rounds, --max-failures %ld)", t->round, why, fl->failures,
                   fl->o->max_failures);
    task_reap(t);
}

static void on_task_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct task *t = arg;
    if (t->state == T_VERIFYING) return;   /* the result is in; its download has its own timeouts */
    round_failed(t, "no result after %.1f s (--task-timeout)", t->fl->o->task_timeout);
}

/* Producer item callback: the item is built now and freed once it is sent. */
static void free_item(const void *data, size_t len, void *extra)
{
    (void)len; (void)extra;
    free((void *)data);
}

static int task_item(void *ctx, size_t index, struct evbuffer *out)
{
    struct task *t = ctx;
    struct sim_fl *fl = t->fl;
    float per[SIM_PERIOD];
    size_t len;
    if (t->built) return cj_dl_lent_add(t->built[index], out);
    sim_period(t->round, index, false, per);
    uint8_t *p = sim_item_build(fl->dot, index, fl->nelem, per, &len);
    if (!p) {
        cj_log_error("sim: out of memory building item T%zu of round %ld", index, t->round);
        return -1;
    }
    if (evbuffer_add_reference(out, p, len, free_item, NULL)) {
        free(p);
        return -1;
    }
    return 0;
}

static void task_ref_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                          const struct cj_dl_receiver_info *rcv, size_t n_rcv)
{
    struct task *t = ctx;
    t->ref_live = false;
    cj_log_info("sim: task ref %s (round %ld) %s", ref_id, t->round,
                outcome == CJ_DL_OUT_OK ? "completed" : outcome == CJ_DL_OUT_FAILED ? "failed" : "expired");
    log_receivers(t, rcv, n_rcv);
    task_reap(t);
}

/* ---- get_task ----------------------------------------------------------------------- */

static void on_exit_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct sim_fl *fl = arg;
    sim_finish(fl->job, 0, "rounds=%ld", fl->verified);
}

static void end_run_done(void *arg, int status, const char *why)
{
    struct sim_fl *fl = arg;
    if (fl->closing) return;
    if (status != 0) {
        cj_log_warning("sim: the __end_run__ reply failed: %s", why ? why : "?");
        return;
    }
    if (fl->exit_ev) return;
    struct timeval tv = {1, 0};
    if (!(fl->exit_ev = evtimer_new(fl->s->base, on_exit_timer, fl)) || evtimer_add(fl->exit_ev, &tv))
        sim_finish(fl->job, 0, "rounds=%ld", fl->verified);
}

static void reply_special(struct sim_fl *fl, const struct cj_stream_reqctx *rq, const char *name)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    bool end = !strcmp(name, "__end_run__");
    if (build_headers_only(&sb, fl, end ? 4 : 5, special_hdrs, name) == 0)
        send_reply(fl, rq, NULL, &sb, end ? end_run_done : NULL, fl);
    msgpack_sbuffer_destroy(&sb);
}

/* The task's __headers__: {__content_type__, current_round, __wait_time__, __cookie_jar__,
 * __task_id__, __task_name__ (FLARE's server_runner sets both on the task data; a 2.7/2.8
 * trainer's FlareAgent takes its task's name from it), task_name, __peer_ctx__}. */
static int task_headers(msgpack_sbuffer *hb, struct sim_fl *fl, const struct task *t)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, hb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 8) || pack_str(&pk, "__task_name__") || pack_str(&pk, TASK_NAME) || pack_str(&pk, "__content_type__") || pack_str(&pk, "DXO") ||
        pack_str(&pk, "current_round") || msgpack_pack_long(&pk, t->round) || pack_str(&pk, "__wait_time__") ||
        msgpack_pack_double(&pk, fl->o->wait_time) || pack_cookie_jar(&pk, t->id) || pack_str(&pk, "__task_id__") ||
        pack_str(&pk, t->id) || pack_str(&pk, "task_name") || pack_str(&pk, TASK_NAME))
        return -1;
    return pack_peer_ctx(&pk, fl);
}

/* Inline form: every tensor's bytes in the payload (the model is held while building). */
static int build_inline(msgpack_sbuffer *sb, struct sim_fl *fl, struct task *t, struct cj_dxo_out *d,
                        struct cj_err *e)
{
    size_t n = (size_t)fl->o->tensors;
    uint8_t **nat = calloc(n, sizeof *nat);
    size_t *nl = calloc(n, sizeof *nl);
    int rc = -1;
    if (!nat || !nl) goto out;
    for (size_t i = 0; i < n; i++) {
        float per[SIM_PERIOD];
        sim_period(t->round, i, false, per);
        if (!(nat[i] = sim_native_build(fl->dot, fl->nelem, per, &nl[i]))) goto out;
        t->bytes += nl[i];
    }
    d->native = (const uint8_t *const *)nat;
    d->native_len = nl;
    rc = cj_dxo_write(sb, d, e);
out:
    if (rc && !e->msg[0]) snprintf(e->msg, sizeof e->msg, "out of memory");
    for (size_t i = 0; nat && i < n; i++) free(nat[i]);
    free(nat);
    free(nl);
    return rc;
}

/* --prebuild: every item of t built now. */
static int prebuild_items(struct task *t, size_t n)
{
    t->built = calloc(n, sizeof *t->built);
    if (!t->built) return -1;
    for (size_t i = 0; i < n; i++) {
        float per[SIM_PERIOD];
        size_t len;
        sim_period(t->round, i, false, per);
        uint8_t *p = sim_item_build(t->fl->dot, i, t->fl->nelem, per, &len);
        if (!p || !(t->built[i] = cj_dl_lent_new(p, len))) return -1;
    }
    return 0;
}

/* Adds the producer ref and writes the task payload. */
static int build_task(msgpack_sbuffer *sb, struct sim_fl *fl, struct task *t, char *why, size_t whysz)
{
    msgpack_sbuffer hb;
    struct cj_err e = {0};
    int rc = -1;
    size_t n = (size_t)fl->o->tensors;
    uint64_t *sizes = calloc(n, sizeof *sizes);
    msgpack_sbuffer_init(&hb);
    if (!sizes || task_headers(&hb, fl, t)) {
        snprintf(why, whysz, "out of memory");
        goto out;
    }
    struct cj_dxo_out d = {
        .headers = (const uint8_t *)hb.data, .headers_len = hb.size, .dot = fl->dot, .n_tensors = n,
        .current_round = t->round, .source = fl->job->cell,
    };
    if (t->inline_model) {
        if (build_inline(sb, fl, t, &d, &e)) snprintf(why, whysz, "cannot build the inline task: %s", e.msg);
        else rc = 0;
        goto out;
    }
    for (size_t i = 0; i < n; i++) t->bytes += sizes[i] = sim_item_size(fl->dot, i, fl->nelem);
    if (fl->o->prebuild && prebuild_items(t, n) < 0) {
        snprintf(why, whysz, "out of memory prebuilding the items");
        goto out;
    }
    struct cj_dl_ref_cfg rc_cfg = {
        .n_items = n, .sizes = sizes, .item_fn = task_item, .num_receivers = 1, .done = task_ref_done, .ctx = t,
    };
    if (cj_dl_producer_add_ref(fl->prod, &rc_cfg, t->ref_id)) {
        snprintf(why, whysz, "cannot add the producer ref");
        goto out;
    }
    t->ref_live = true;
    d.ref_id = t->ref_id;
    if (cj_dxo_write(sb, &d, &e)) {
        snprintf(why, whysz, "cannot build the task: %s", e.msg);
        drop_ref(t);
        goto out;
    }
    rc = 0;
out:
    free(sizes);
    msgpack_sbuffer_destroy(&hb);
    return rc;
}

static void task_sent(void *arg, int status, const char *why)
{
    struct task *t = arg;
    t->reply_pending = false;
    if (t->fl->closing) return;
    if (t->state != T_SENDING) {
        task_reap(t);
        return;
    }
    if (status != 0) {
        round_failed(t, "the task could not be delivered to %s: %s", t->site, why ? why : "?");
        return;
    }
    t->state = T_ISSUED;
    sim_cp_task_out(t->fl->job, t->round);
    sim_vanish_check(t->fl->job, t->round);
}

static long next_round(const struct sim_fl *fl)
{
    for (long r = 1; r <= fl->o->rounds; r++)
        if (fl->round_state[r] == 0) return r;
    return 0;
}

static void new_task_id(char out[ID_LEN + 1])
{
    uint8_t id[16];
    if (cj_uuid4(id)) {
        static unsigned long seq;
        snprintf(out, ID_LEN + 1, "sim-task-%lu-%ld", ++seq, (long)time(NULL));
        return;
    }
    cj_uuid_str(id, out);
}

static void issue_task(struct sim_fl *fl, struct cj_stream_blob *b, long r)
{
    struct task *t = calloc(1, sizeof *t);
    char why[256];
    if (!t) {
        reply_special(fl, &b->req, "__try_again__");
        return;
    }
    t->fl = fl;
    t->round = r;
    t->inline_model = fl->o->inline_tensors;
    new_task_id(t->id);
    snprintf(t->site, sizeof t->site, "%s", b->origin);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (build_task(&sb, fl, t, why, sizeof why)) {
        msgpack_sbuffer_destroy(&sb);
        free(t);
        sim_finish(fl->job, 1, "round %ld: %s", r, why);
        return;
    }
    t->next = fl->tasks;
    fl->tasks = t;
    fl->round_state[r] = 1;
    fl->issued++;
    t->state = T_SENDING;
    t->t0 = cj_now();
    if (fl->o->task_timeout > 0) {
        struct timeval tv = cj_tv(fl->o->task_timeout);
        if ((t->timeout_ev = evtimer_new(fl->s->base, on_task_timeout, t))) evtimer_add(t->timeout_ev, &tv);
    }
    printf("TASK %ld%s task=%s to=%s ref=%s tensors=%ld bytes=%" PRIu64 "\n", r, fl->job->tag, t->id, t->site,
           t->inline_model ? "inline" : t->ref_id, fl->o->tensors, t->bytes);
    cj_log_info("sim: round %ld: task %s (%zu payload bytes, %" PRIu64 " tensor bytes) to %s", r, t->id, sb.size,
                t->bytes, t->site);
    t->reply_pending = true;
    if (send_reply(fl, &b->req, NULL, &sb, task_sent, t) < 0) {
        t->reply_pending = false;
        round_failed(t, "cannot start the get_task reply");
    }
    msgpack_sbuffer_destroy(&sb);
}

static int on_get_task(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct req r;
    char why[256], run[128] = "", last[128] = "";
    fl->polls++;
    if (!b->req.has_ri) return 0;
    if (read_req(b->data, 1 << 20, &r, why, sizeof why)) {
        cj_log_warning("sim: get_task from %s: %s; answering __try_again__", b->origin, why);
        reply_special(fl, &b->req, "__try_again__");
        return 0;
    }
    size_t cl;
    const uint8_t *ctx = hdr_raw(&r, "__peer_ctx__", &cl);
    if (!ctx_prop(ctx, ctx ? cl : 0, "__run_num__", run, sizeof run)) {
        cj_log_warning("sim: get_task from %s without a peer context job id: __try_again__", b->origin);
        reply_special(fl, &b->req, "__try_again__");
        return 0;
    }
    if (strcmp(run, fl->job->id)) {
        cj_log_warning("sim: get_task from %s for job %s (this is %s): __end_run__", b->origin, run, fl->job->id);
        reply_special(fl, &b->req, "__end_run__");
        return 0;
    }
    hdr_str(&r, "last_task_id", last, sizeof last);
    cj_log_debug("sim: get_task from %s (last_task_id %s)", b->origin, last[0] ? last : "-");
    struct task *out = task_of_site(fl, b->origin);
    long next = next_round(fl);
    if (fl->job->ended) {
        reply_special(fl, &b->req, "__end_run__");
    } else if (fl->verified >= fl->o->rounds) {
        if (!fl->end_sent) cj_log_info("sim: all %ld rounds verified: __end_run__ to %s", fl->o->rounds, b->origin);
        fl->end_sent = true;
        reply_special(fl, &b->req, "__end_run__");
    } else if (out || !next) {
        reply_special(fl, &b->req, "__try_again__");
    } else {
        issue_task(fl, b, next);
    }
    return 0;
}

/* ---- submit_update --------------------------------------------------------------------- */

void round_verified(struct task *t)
{
    struct sim_fl *fl = t->fl;
    double secs = cj_now() - t->t0, fsecs = cj_now() - t->t_fetch;
    t->state = T_DONE;
    fl->round_state[t->round] = 2;
    fl->verified++;
    if (t->timeout_ev) event_del(t->timeout_ev);
    answer_waiters(t, NULL);
    if (t->inline_model) snprintf(t->served_to, sizeof t->served_to, "inline");
    else if (t->ref_live) cj_dl_producer_foreach(fl->prod, visit_served, t);
    printf("RESULT %ld%s task=%s ref=%s from=%s items=%" PRIu64 " bytes=%" PRIu64 " secs=%.3f\n", t->round,
           fl->job->tag, t->id, t->res_ref[0] ? t->res_ref : "inline", t->res_from, t->res_items, t->res_bytes, fsecs);
    printf("ROUND %ld%s task=%s tensors=%ld bytes=%" PRIu64
           " served_to=%s result_from=%s verified secs=%.3f MiB/s=%.1f\n",
           t->round, fl->job->tag, t->id, fl->o->tensors, t->bytes, t->served_to[0] ? t->served_to : "none",
           t->res_from, secs, secs > 0 ? (double)(t->bytes + t->res_bytes) / 1048576.0 / secs : 0.0);
    cj_log_info("sim: job %s: round %ld verified (%ld of %ld)", fl->job->id, t->round, fl->verified, fl->o->rounds);
    task_reap(t);
}
/* Checks the submit's headers against the task (fatal on mismatch). */
static int check_submit_headers(struct sim_fl *fl, const struct req *r, const struct task *t, char *why, size_t whysz)
{
    char v[256];
    size_t n;
    if (hdr_str(r, "__task_name__", v, sizeof v) != 1 || strcmp(v, TASK_NAME))
        return snprintf(why, whysz, "header __task_name__ is not \"%s\"", TASK_NAME), -1;
    if (hdr_str(r, "__task_id__", v, sizeof v) != 1 || strcmp(v, t->id))
        return snprintf(why, whysz, "header __task_id__ is not %s", t->id), -1;
    const uint8_t *jar = hdr_raw(r, "__cookie_jar__", &n);
    if (!map_str(jar, jar ? n : 0, "__task_id__", v, sizeof v) || strcmp(v, t->id))
        return snprintf(why, whysz, "header __cookie_jar__ has no __task_id__ %s", t->id), -1;
    const uint8_t *ctx = hdr_raw(r, "__peer_ctx__", &n);
    if (!ctx_prop(ctx, ctx ? n : 0, "__run_num__", v, sizeof v) || strcmp(v, fl->job->id))
        return snprintf(why, whysz, "header __peer_ctx__ has no __run_num__ %s", fl->job->id), -1;
    const uint8_t *cr = hdr_raw(r, "current_round", &n);
    if (cr) {
        struct mp_cur c;
        int64_t round;
        mp_cur_init(&c, cr, n);
        if (mp_read_int(&c, &round, NULL) || round != t->round)
            return snprintf(why, whysz, "header current_round is not %ld", t->round), -1;
    } else {
        cj_log_warning("sim: result of task %s has no current_round header", t->id);
    }
    return 0;
}

static int on_submit_update(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct req r;
    char why[512], id[128] = "", rc[64] = "OK";
    if (read_req(b->data, MAX_SUBMIT, &r, why, sizeof why)) {
        sim_finish(fl->job, 1, "submit_update from %s: %s", b->origin, why);
        return 0;
    }
    hdr_str(&r, "__task_id__", id, sizeof id);
    struct task *t = id[0] ? task_find(fl, id) : NULL;
    if (!t || !task_open(t)) {
        cj_log_warning("sim: submit_update from %s for %s task %s: dropped", b->origin, t ? state_name(t->state) : "unknown",
                       id[0] ? id : "(no __task_id__)");
        if (b->req.has_ri) reply_empty_ok(fl, &b->req);
        return 0;
    }
    if (strcmp(b->origin, t->site))
        cj_log_warning("sim: task %s went to %s but its result comes from %s", t->id, t->site, b->origin);
    if (t->n_waiters < MAX_WAITERS && b->req.has_ri) t->waiters[t->n_waiters++] = b->req;
    if (t->state == T_VERIFYING) {
        cj_log_info("sim: submit_update for task %s again (from %s) while verifying: answered with the first", id,
                    b->origin);
        return 0;
    }
    if (check_submit_headers(fl, &r, t, why, sizeof why)) {
        sim_finish(fl->job, 1, "round %ld task=%s: submit_update from %s: %s", t->round, t->id, b->origin, why);
        return 0;
    }
    if (hdr_str(&r, "__rc__", rc, sizeof rc) < 0 || strcmp(rc, "OK")) {
        cj_log_info("sim: task %s: result with __rc__ %s from %s", t->id, rc, b->origin);
        answer_waiters(t, NULL);     /* the server accepts a failure report */
        round_failed(t, "result __rc__ %s from %s", rc, b->origin);
        return 0;
    }
    bool fatal;
    if (start_verification(t, &r, why, sizeof why, &fatal)) {
        if (fatal) sim_finish(fl->job, 1, "round %ld task=%s: %s", t->round, t->id, why);
        else round_failed(t, "%s", why);
    }
    return 0;
}

/* ---- aux ------------------------------------------------------------------------------ */

/* Reads an aux request's headers; sets rc to the FL code of a bad peer context. */
static void aux_reply(struct sim_fl *fl, struct cj_stream_blob *b, const char *topic, const char *rc_ok,
                      const struct req *r, bool parsed)
{
    struct aux_reply a = {.rc = rc_ok};
    char who[128] = "", run[128] = "";
    size_t n = 0;
    const uint8_t *props = parsed ? hdr_raw(r, "__peer_props__", &n) : NULL;
    if (!props || !map_str(props, n, "__run_num__", run, sizeof run)) {
        a.rc = "MISSING_PEER_CONTEXT";
        cj_log_warning("sim: aux %s from %s without __peer_props__ (or its __run_num__)", topic, b->origin);
    } else if (strcmp(run, fl->job->id)) {
        a.rc = "RUN_MISMATCH";
        cj_log_warning("sim: aux %s from %s for job %s (this is %s)", topic, b->origin, run, fl->job->id);
    }
    if (props) map_str(props, n, "__identity_name__", who, sizeof who);
    if (parsed) a.jar = hdr_raw(r, "__cookie_jar__", &a.jar_len);
    cj_log_debug("sim: aux %s from %s (%s): %s", topic, b->origin, who, a.rc);
    if (!b->req.has_ri) return;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (build_headers_only(&sb, fl, a.jar ? 3 : 2, aux_hdrs, &a) == 0) send_reply(fl, &b->req, NULL, &sb, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
}

static int on_aux(struct sim_fl *fl, struct cj_stream_blob *b, const char *topic, struct req *r, bool *parsed)
{
    char why[256];
    *parsed = read_req(b->data, 1 << 20, r, why, sizeof why) == 0;
    if (!*parsed) cj_log_warning("sim: aux %s from %s: %s", topic, b->origin, why);
    return 0;
}

static int on_sync_runner(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct req r;
    bool ok;
    fl->syncs++;
    on_aux(fl, b, "__sync_runner__", &r, &ok);
    if (fl->syncs == 1) cj_log_info("sim: __sync_runner__ from %s", b->origin);
    if ((long)fl->syncs <= fl->o->sync_silent) return 0;   /* the server job is not up yet */
    aux_reply(fl, b, "__sync_runner__", "OK", &r, ok);
    return 0;
}

static int on_heartbeat(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct req r;
    bool ok;
    fl->heartbeats++;
    on_aux(fl, b, "__job_heartbeat__", &r, &ok);
    cj_log_debug("sim: __job_heartbeat__ #%" PRIu64 " from %s", fl->heartbeats, b->origin);
    if (b->req.has_ri) aux_reply(fl, b, "__job_heartbeat__", "OK", &r, ok);
    return 0;
}

static int on_task_check(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct req r;
    bool ok;
    char id[128] = "";
    fl->checks++;
    on_aux(fl, b, "__task_check__", &r, &ok);
    if (ok) hdr_str(&r, "__task_id__", id, sizeof id);
    struct task *t = id[0] ? task_find(fl, id) : NULL;
    bool known = t && task_open(t);
    cj_log_info("sim: __task_check__ %s from %s: %s", id[0] ? id : "(no __task_id__)", b->origin,
                known ? "OK" : "TASK_UNKNOWN");
    aux_reply(fl, b, "__task_check__", known ? "OK" : "TASK_UNKNOWN", &r, ok);
    return 0;
}

/* ---- --isolate ---------------------------------------------------------------------------- */

/* A relay cell: exactly <site>.<job> with site not "server". */
static bool is_relay(const char *job_id, const char *fqcn)
{
    const char *dot = strchr(fqcn, '.');
    if (!dot || dot == fqcn || strchr(dot + 1, '.') || strcmp(dot + 1, job_id)) return false;
    return strncmp(fqcn, CJ_FQCN_SERVER, (size_t)(dot - fqcn)) != 0 || (size_t)(dot - fqcn) != strlen(CJ_FQCN_SERVER);
}

bool sim_fl_isolated(const struct sim_job *j, const char *channel, const char *topic, const char *origin)
{
    return j->fl && j->s->o->isolate && !strcmp(channel, CJ_DL_CHANNEL) && !strcmp(topic, CJ_DL_TOPIC) &&
           !is_relay(j->id, origin);
}

static int on_isolated(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct cj_dl_request rq;
    struct cj_err e = {0};
    size_t len;
    const uint8_t *p = blob_bytes(b->data, 65536, &len);
    if (!p || cj_dl_decode_request(p, len, &rq, &e)) snprintf(rq.ref_id, sizeof rq.ref_id, "?");
    printf("REFUSED download from=%s ref=%s (--isolate)\n", b->origin, rq.ref_id[0] ? rq.ref_id : "?");
    cj_log_warning("sim: --isolate: download request from %s for ref %s refused: not a relay cell", b->origin,
                   rq.ref_id);
    if (!b->req.has_ri) return 0;
    struct cj_stream_reqctx rc = b->req;
    snprintf(rc.topic, sizeof rc.topic, "%s", CJ_DL_TOPIC);   /* the reply names the real topic */
    send_reply(fl, &rc, "invalid_request", NULL, NULL, NULL);
    return 0;
}

/* ---- setup ------------------------------------------------------------------------------- */

int sim_fl_setup(struct sim_job *j, struct cj_err *err)
{
    struct sim *s = j->s;
    const struct sim_opts *o = s->o;
    struct sim_fl *fl = calloc(1, sizeof *fl);
    if (!fl) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    j->fl = fl;
    fl->s = s;
    fl->job = j;
    fl->o = o;
    fl->dot = strcmp(o->format, "numpy") ? SIM_DOT_TORCH : SIM_DOT_NUMPY;
    fl->nelem = (uint64_t)((o->model_size / o->tensors) & ~(int64_t)3) / 4;
    if (!(fl->round_state = calloc((size_t)o->rounds + 1, 1))) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    if (o->download_log[0] && !(fl->dlog = fopen(o->download_log, "a")))
        return cj_fail(err, CJ_E_INVALID, 0, "--download-log %s: cannot open", o->download_log);
    if (!(fl->prod = cj_dl_producer_new(s->base, j->ep, NULL)))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot start the download producer");
    struct { const char *ch, *tp; cj_stream_handler_fn fn; } h[] = {
        {CH_AUX, "__sync_runner__", on_sync_runner},
        {CH_AUX, "__job_heartbeat__", on_heartbeat},
        {CH_AUX, "__task_check__", on_task_check},
        {CH_CMD, "get_task", on_get_task},
        {CH_CMD, "submit_update", on_submit_update},
        {CJ_DL_CHANNEL, SIM_FL_ISOLATED_TOPIC, on_isolated},
        {CJ_DL_CHANNEL, CJ_DL_TOPIC_SOURCE_FAILURE, on_source_failure},
    };
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (cj_stream_on(j->ep, h[i].ch, h[i].tp, h[i].fn, fl) < 0)
            return cj_fail(err, CJ_E_NOMEM, 0, "cannot register %s/%s", h[i].ch, h[i].tp);
    cj_log_info("sim: FL server for job %s: %ld rounds of %ld %s tensors x %" PRIu64 " floats (%" PRIu64
                " bytes each)%s%s", j->id, o->rounds, o->tensors, o->format, fl->nelem, fl->nelem * 4,
                o->inline_tensors ? ", inline" : "", o->isolate ? ", isolated" : "");
    return 0;
}

void sim_fl_stop(struct sim_job *j)
{
    struct sim_fl *fl = j->fl;
    if (!fl || fl->closing) return;
    for (struct task *t = fl->tasks; t; t = t->next) {
        if (t->fetch) {
            cj_dl_fetch_cancel(t->fetch);
            t->fetch = NULL;
        }
        drop_ref(t);
    }
    cj_dl_producer_free(fl->prod);
    fl->prod = NULL;
    fl->closing = true;
}

void sim_fl_free(struct sim_job *j)
{
    struct sim_fl *fl = j->fl;
    if (!fl) return;
    sim_fl_stop(j);
    while (fl->tasks) {
        struct task *t = fl->tasks;
        fl->tasks = t->next;
        task_free(t);
    }
    if (fl->exit_ev) event_free(fl->exit_ev);
    if (fl->dlog) fclose(fl->dlog);
    free(fl->tombs);
    free(fl->round_state);
    free(fl);
    j->fl = NULL;
}

bool sim_fl_in_progress(const struct sim_job *j)
{
    return j->fl && j->fl->issued > 0 && j->fl->verified < j->s->o->rounds;
}

void sim_fl_progress(const struct sim_job *j, long *verified, long *rounds)
{
    *verified = j->fl ? j->fl->verified : 0;
    *rounds = j->s->o->rounds;
}
