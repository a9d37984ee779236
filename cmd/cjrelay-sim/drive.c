/* SPDX-License-Identifier: Apache-2.0 */
/* drive.c — `cjrelay-sim --drive URL`: a stand-in site for testing the FL
 * server without cjrelayd or cjrelay-worker.  One cell (--drive-as, default
 * site-1.<job>) plays the relay and the worker at once:
 *
 *   __sync_runner__ until OK, one __job_heartbeat__, then get_task polling;
 *   a task: its ref is downloaded from the FQCN its datum names and every
 *   element checked (model.c, the same conventions), a result with +1.0f is
 *   served by this cell's own producer (1 receiver) and submitted the way the
 *   relay does it (result_ready envelope -> cj_splice_submit_update), after a
 *   __task_check__; __end_run__ ends the drive ("DRIVE END rounds=N", exit 0).
 *
 * Fault injection: --drive-fail R sends an EXECUTION_EXCEPTION result for the
 * first task of round R (the server must issue the round again);
 * --drive-corrupt R changes one element of round R's result (the server must
 * say SIM FAIL).  Any unexpected answer ends it with "DRIVE FAIL <why>", exit 1.
 *
 * --drive-source-failure R plays a relay whose worker died inside its result
 * barrier (doc/protocol/download.md §2 "Source-failure notice", §6.1 step 1, §7):
 *   attempt 1 of round R: the result's ref names a worker cell <me>.sf_trainer
 *     that never answers (the server's pulls to it are dropped, one
 *     "DRIVE DROPPED" line each); at the first pull a sibling cell
 *     <me>.sf_sibling (not the parent) sends a notice for it — the server must
 *     refuse it — and then this cell (the parent) sends one, which the server
 *     must accept and which must fail the download at once ("DRIVE NOTICE" lines);
 *   attempt 2: the same (source, ref) again: the server must fail it before its
 *     first pull (no DROPPED line);
 *   attempt 3: a normal result.
 *
 * --drive-parent URL plays a client job's side of its parent link
 * (doc/protocol/site.md §3): a second link, as the same cell, to the client
 * parent <site>; admin/train.notify_job_status STARTED once __sync_runner__
 * answered and the parent link is up, STOPPED before the drive ends (its
 * reply, or 5 s, awaited); client_command show_stats answered with a map,
 * abort ends the drive ("DRIVE END aborted rounds=N", after STOPPED),
 * abort_task and reset_errors printed, anything else answered invalid_request. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "wire/msg.h"
#include "cpmsg.h"
#include "dl/client.h"
#include "dl/producer.h"
#include "model.h"
#include "net/link.h"
#include "payload/lobs.h"
#include "sim.h"
#include "fl/flclient.h"
#include "stream/stream.h"
#include "util/log.h"
#include "util/mp.h"
#include "util/uuid.h"

#include "dl/dlmsg.h"
#include "payload/dxo.h"
#include "payload/fobs.h"
#include "payload/splice.h"
#include "util/clock.h"

#define MAX_TASK ((size_t)64 << 20)

struct drive {
    struct event_base *base;
    const struct sim_opts *o;
    char me[CJ_FQCN_MAX + 1], site[CJ_FQCN_MAX + 1], server[CJ_FQCN_MAX + 1];
    struct cj_link *link;
    struct cj_stream_ep *ep;
    struct cj_dl_producer *prod;
    struct event *timer;
    void (*timer_fn)(struct drive *);
    int exit_code;
    bool done;
    uint8_t dot;
    uint64_t nelem;
    long rounds_done, sync_tries;
    bool failed_once;
    char last_task_id[CJ_SPLICE_NAME_MAX + 1];
    /* the task at hand */
    uint8_t *task;
    size_t task_len;
    char task_id[CJ_SPLICE_NAME_MAX + 1];
    long round;
    struct cj_dxo_tensor *ts;
    long *item_tensor;
    uint64_t items_ok;
    char res_ref[CJ_DL_REF_ID_MAX + 1];
    struct evbuffer *submit;
    /* --drive-source-failure */
    char sf_child[CJ_FQCN_MAX + 1], sf_sibling[CJ_FQCN_MAX + 1];
    char sf_ref[CJ_DL_REF_ID_MAX + 1];
    struct cj_stream_ep *sib_ep;         /* the sibling cell's endpoint (same link) */
    long sf_attempt;                     /* tasks of round R taken so far */
    bool sf_notified;                    /* attempt 1's notices are out */
    /* --drive-parent */
    struct cj_link *plink;
    bool synced, started_sent, stopping;
    long notify_status;                  /* the notice awaiting its reply (0: none) */
    char notify_rid[CJ_CPMSG_RID_LEN + 1];
    struct event *notify_timer;
    int end_code;                        /* the end held until STOPPED is answered */
    char end_why[512];
};

static void notify(struct drive *d, long status);

static void drive_end(struct drive *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void drive_end(struct drive *d, int code, const char *fmt, ...)
{
    if (d->done || d->stopping) return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (d->started_sent && d->plink) {   /* STOPPED first, the end once it is answered */
        d->stopping = true;
        d->end_code = code;
        snprintf(d->end_why, sizeof d->end_why, "%s", why);
        evtimer_del(d->timer);
        notify(d, CJ_CPMSG_STOPPED);
        return;
    }
    printf("DRIVE %s %s\n", code ? "FAIL" : "END", why);
    d->done = true;
    d->exit_code = code;
    event_base_loopbreak(d->base);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct drive *d = arg;
    d->timer_fn(d);
}

static void later(struct drive *d, double secs, void (*fn)(struct drive *))
{
    struct timeval tv = cj_tv(secs);
    d->timer_fn = fn;
    evtimer_add(d->timer, &tv);
}

/* This cell's requests to the server. */
static struct cj_fl_client fl_client(const struct drive *d)
{
    return (struct cj_fl_client){.ep = d->ep, .server = d->server, .site = d->site, .job = d->o->job_id};
}

/* ---- start: sync, heartbeat, poll ---------------------------------------------------- */

static void poll_task(struct drive *d);
static void sync_runner(struct drive *d);

static void on_sync(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    char rc[64];
    cj_fl_client_reply_rc(r, rc, sizeof rc, NULL, 0);
    if (strcmp(r->return_code, "ok") || strcmp(rc, "OK")) {
        if (++d->sync_tries > 120) drive_end(d, 1, "__sync_runner__ never answered OK (last %s/%s)", r->return_code, rc);
        else later(d, 0.5, sync_runner);
        return;
    }
    printf("DRIVE SYNCED\n");
    d->synced = true;
    if (d->plink && cj_link_get_state(d->plink) == CJ_LINK_UP && !d->started_sent) notify(d, CJ_CPMSG_STARTED);
    struct cj_fl_client c = fl_client(d);
    cj_fl_client_heartbeat(&c);
    poll_task(d);
}

static void sync_runner(struct drive *d)
{
    struct cj_fl_client c = fl_client(d);
    if (cj_fl_client_aux(&c, "__sync_runner__", NULL, 2.0, on_sync, d, NULL))
        drive_end(d, 1, "cannot send __sync_runner__");
}

/* ---- the result --------------------------------------------------------------------- */

static void free_item(const void *data, size_t len, void *extra)
{
    (void)len; (void)extra;
    free((void *)data);
}

static int result_item(void *ctx, size_t index, struct evbuffer *out)
{
    struct drive *d = ctx;
    float per[SIM_PERIOD];
    size_t len;
    sim_period(d->round, index, true, per);
    if (d->o->drive_corrupt == d->round && index == 0) per[SIM_PERIOD - 1] += 1.0f;   /* one wrong element */
    uint8_t *p = sim_item_build(d->dot, index, d->nelem, per, &len);
    if (!p || evbuffer_add_reference(out, p, len, free_item, NULL)) {
        free(p);
        return -1;
    }
    return 0;
}

static void result_ref_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                            const struct cj_dl_receiver_info *rcv, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        printf("DRIVE SERVED ref=%s to=%s bytes=%" PRIu64 " %s\n", ref_id, rcv[i].fqcn, rcv[i].bytes,
               outcome == CJ_DL_OUT_OK ? "ok" : "failed");
}

/* result_ready envelope {"result": <Shareable>} + the datums, from a cj_dxo_write payload. */
static int envelope(const msgpack_sbuffer *res, msgpack_sbuffer *out)
{
    struct cj_lobs_section m;
    if (cj_lobs_validate(res->data, res->size, &m, NULL, 0, NULL, NULL)) return -1;
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 1) || cj_fobs_write_str(&pk, "result") ||
             msgpack_sbuffer_write(&body, (const char *)m.value, m.value_len) ||
             cj_lobs_write_main_header(out, body.size, NULL) || msgpack_sbuffer_write(out, body.data, body.size) ||
             msgpack_sbuffer_write(out, res->data + m.total, res->size - m.total);
    msgpack_sbuffer_destroy(&body);
    return rc ? -1 : 0;
}

/* --drive-source-failure: this attempt's result names the dead worker (attempts 1 and 2). */
static bool sf_dead_source(const struct drive *d)
{
    return d->o->drive_source_failure == d->round && d->sf_attempt >= 1 && d->sf_attempt <= 2;
}

/* The submit_update payload: a failure report, or the DXO result with a fresh ref. */
static int build_submit(struct drive *d, bool failure, msgpack_sbuffer *out)
{
    char root[37];
    uint8_t id[16];
    struct cj_err e = {0};
    cj_uuid4(id);
    cj_uuid_str(id, root);
    if (failure)
        return cj_splice_failed_result("EXECUTION_EXCEPTION", d->task, d->task_len, NULL, NULL, root, d->site,
                                       d->o->job_id, out, &e);
    size_t n = (size_t)d->o->tensors;
    int ret;
    const char *source = d->me;
    if (sf_dead_source(d)) {   /* a ref of a "dead worker": nobody serves it */
        if (d->sf_attempt == 1) {
            cj_uuid4(id);
            cj_uuid_str(id, d->sf_ref);
        }
        snprintf(d->res_ref, sizeof d->res_ref, "%s", d->sf_ref);
        source = d->sf_child;
        printf("DRIVE SF %ld attempt=%ld result ref=%s from=%s (never served)\n", d->round, d->sf_attempt, d->res_ref,
               source);
    } else {
        uint64_t *sizes = calloc(n, sizeof *sizes);
        if (!sizes) return -1;
        for (size_t i = 0; i < n; i++) sizes[i] = sim_item_size(d->dot, i, d->nelem);
        struct cj_dl_ref_cfg rc = {.n_items = n, .sizes = sizes, .item_fn = result_item, .num_receivers = 1,
                                   .done = result_ref_done, .ctx = d};
        ret = cj_dl_producer_add_ref(d->prod, &rc, d->res_ref);
        free(sizes);
        if (ret) return -1;
    }
    static const uint8_t hdrs[] = "\x81\xb0__content_type__\xa3" "DXO";
    struct cj_dxo_out o = {.headers = hdrs, .headers_len = sizeof hdrs - 1, .dot = d->dot, .n_tensors = n,
                           .current_round = d->round, .source = source, .ref_id = d->res_ref};
    msgpack_sbuffer res, env;
    msgpack_sbuffer_init(&res);
    msgpack_sbuffer_init(&env);
    ret = cj_dxo_write(&res, &o, &e) || envelope(&res, &env) ||
          cj_splice_submit_update((const uint8_t *)env.data, env.size, d->task, d->task_len, NULL, NULL, root, d->site,
                                  d->o->job_id, out, &e);
    if (ret) fprintf(stderr, "drive: cannot build the result: %s\n", e.msg);
    msgpack_sbuffer_destroy(&res);
    msgpack_sbuffer_destroy(&env);
    return ret ? -1 : 0;
}

static void on_submit(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    printf("DRIVE SUBMITTED %ld task=%s rc=%s\n", d->round, d->task_id, r->return_code);
    if (!strcmp(r->return_code, "ok")) d->rounds_done++;
    if (d->stopping) return;
    later(d, d->o->wait_time, poll_task);
}

static void on_task_check(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    char rc[64];
    cj_fl_client_reply_rc(r, rc, sizeof rc, NULL, 0);
    if (strcmp(rc, "OK")) {
        printf("DRIVE CHECK %ld task=%s %s: result dropped\n", d->round, d->task_id, rc[0] ? rc : r->return_code);
        evbuffer_free(d->submit);
        d->submit = NULL;
        later(d, d->o->wait_time, poll_task);
        return;
    }
    struct cj_stream_msg m = {.encoding = "fobs"};
    struct evbuffer *b = d->submit;
    d->submit = NULL;
    if (cj_stream_request(d->ep, d->server, "server_command", "submit_update", &m, b, 120, on_submit, d, NULL, NULL))
        drive_end(d, 1, "cannot send submit_update");
}

/* __task_check__, then submit_update. */
static void submit(struct drive *d, bool failure)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (build_submit(d, failure, &sb) || !(d->submit = mp_sbuffer_to_evbuffer(&sb))) {
        msgpack_sbuffer_destroy(&sb);
        drive_end(d, 1, "cannot build the submit_update of round %ld", d->round);
        return;
    }
    msgpack_sbuffer_destroy(&sb);
    struct cj_fl_client c = fl_client(d);
    if (cj_fl_client_aux(&c, "__task_check__", d->task_id, 5.0, on_task_check, d, NULL))
        drive_end(d, 1, "cannot send __task_check__");
}

/* ---- the task ------------------------------------------------------------------------ */

static int task_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct drive *d = ctx;
    size_t len = evbuffer_get_length(item);
    const uint8_t *p = len ? evbuffer_pullup(item, -1) : NULL;
    char key[32], why[256];
    float per[SIM_PERIOD];
    int rc = -1;
    snprintf(key, sizeof key, "T%" PRIu64, index);
    if (!p || index >= (uint64_t)d->o->tensors || d->item_tensor[index] < 0) {
        printf("DRIVE BAD item %s of round %ld: unexpected\n", key, d->round);
        goto out;
    }
    sim_period(d->round, (size_t)d->item_tensor[index], false, per);
    if (sim_item_verify(d->dot, p, len, key, d->nelem, per, why, sizeof why)) {
        printf("DRIVE BAD item %s of round %ld: %s\n", key, d->round, why);
        goto out;
    }
    d->items_ok++;
    rc = 0;
out:
    evbuffer_free(item);
    return rc;
}

static void task_fetched(void *ctx, bool ok, const char *why)
{
    struct drive *d = ctx;
    if (d->stopping) return;
    if (!ok || d->items_ok != (uint64_t)d->o->tensors) {
        drive_end(d, 1, "round %ld: task download failed: %s (%" PRIu64 " items verified)", d->round, why ? why : "?",
                  d->items_ok);
        return;
    }
    printf("DRIVE TASK %ld task=%s verified %" PRIu64 " tensors\n", d->round, d->task_id, d->items_ok);
    bool fail = d->o->drive_fail == d->round && !d->failed_once;
    if (fail) d->failed_once = true;
    submit(d, fail);
}

/* layer<t>.weight -> t (-1 otherwise). */
static long tensor_index(const struct cj_dxo_tensor *t)
{
    char name[64];
    long v;
    int used = 0;
    cj_dxo_name(t, name, sizeof name);
    if (sscanf(name, "layer%ld.weight%n", &v, &used) != 1 || (size_t)used != strlen(name)) return -1;
    return v;
}

static void take_task(struct drive *d, const uint8_t *p, size_t len, const struct cj_task_info *info)
{
    struct cj_lobs_section m;
    struct cj_err e = {0};
    size_t n = (size_t)d->o->tensors;
    free(d->task);
    if (!(d->task = malloc(len))) {
        drive_end(d, 1, "out of memory");
        return;
    }
    memcpy(d->task, p, len);
    d->task_len = len;
    snprintf(d->task_id, sizeof d->task_id, "%s", info->task_id);
    snprintf(d->last_task_id, sizeof d->last_task_id, "%s", info->task_id);
    free(d->ts);
    free(d->item_tensor);
    d->ts = calloc(n, sizeof *d->ts);
    d->item_tensor = malloc(n * sizeof *d->item_tensor);
    struct cj_dxo_in x = {.tensors = d->ts, .cap = n};
    if (!d->ts || !d->item_tensor || cj_lobs_validate(d->task, len, &m, NULL, 0, NULL, &e) ||
        cj_dxo_read(d->task, len, (size_t)(m.value - d->task), m.value_len, &x, &e)) {
        drive_end(d, 1, "task %s does not decode: %s", d->task_id, e.msg);
        return;
    }
    if (x.has_round && x.n_tensors == n && x.n_native == n) {   /* --inline on the server */
        d->round = (long)x.current_round;
        d->dot = strcmp(d->o->format, "numpy") ? SIM_DOT_TORCH : SIM_DOT_NUMPY;
        for (size_t i = 0; i < n; i++) {
            float per[SIM_PERIOD];
            char why[256];
            sim_period(d->round, (size_t)tensor_index(&d->ts[i]), false, per);
            if (tensor_index(&d->ts[i]) < 0 ||
                sim_native_verify(d->dot, d->ts[i].data, d->ts[i].data_len, d->nelem, per, why, sizeof why)) {
                drive_end(d, 1, "task %s: inline tensor %zu: %s", d->task_id, i, why);
                return;
            }
        }
        d->items_ok = n;
        printf("DRIVE GOT %ld task=%s inline\n", d->round, d->task_id);
        task_fetched(d, true, NULL);
        return;
    }
    if (!x.has_round || x.n_tensors != n || x.n_refs != n || x.n_items != n) {
        drive_end(d, 1, "task %s: %zu tensors, %zu refs, %" PRIu64 " items (want %zu each), round %s", d->task_id,
                  x.n_tensors, x.n_refs, x.n_items, n, x.has_round ? "ok" : "missing");
        return;
    }
    d->round = (long)x.current_round;
    d->dot = x.dot;
    d->items_ok = 0;
    if (d->o->drive_source_failure == d->round) d->sf_attempt++;
    for (size_t i = 0; i < n; i++) d->item_tensor[i] = -1;
    for (size_t i = 0; i < n; i++) d->item_tensor[d->ts[i].item] = tensor_index(&d->ts[i]);
    printf("DRIVE GOT %ld task=%s ref=%s from=%s dot=%u\n", d->round, d->task_id, x.ref_id, x.fqcn, x.dot);
    struct cj_dl_fetch_cfg fc;
    cj_dl_fetch_cfg_default(&fc);
    fc.request_timeout = d->o->fetch_timeout;
    if (!cj_dl_fetch(d->base, d->ep, x.fqcn, x.ref_id, &fc, task_item, task_fetched, d))
        drive_end(d, 1, "cannot start downloading %s from %s", x.ref_id, x.fqcn);
}

static double wait_time(const uint8_t *p, size_t len, double dflt)
{
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    double w = dflt;
    if (cj_lobs_validate(p, len, &m, NULL, 0, NULL, NULL) || cj_fobs_find_shareable(m.value, m.value_len, &sh, NULL) ||
        cj_fobs_read_headers(m.value + sh.headers.off, sh.headers.len, &h, NULL) || !h.wait_time.len)
        return w;
    struct mp_cur c = {m.value + sh.headers.off, h.wait_time.off, h.wait_time.off + h.wait_time.len};
    struct mp_val v;
    if (mp_next(&c, &v, NULL) == 0) w = v.kind == MP_FLOAT ? v.f : v.kind == MP_UINT ? (double)v.u : w;
    return w;
}

static void on_task(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    if (d->stopping) return;
    if (strcmp(r->return_code, "ok")) {
        printf("DRIVE POLL rc=%s %s\n", r->return_code, r->error);
        later(d, 0.5, poll_task);
        return;
    }
    size_t len = r->data ? evbuffer_get_length(r->data) : 0;
    const uint8_t *p = len && len <= MAX_TASK ? evbuffer_pullup(r->data, -1) : NULL;
    struct cj_task_info info;
    struct cj_err e = {0};
    if (!p || cj_splice_read_task(p, len, &info, &e)) {
        drive_end(d, 1, "get_task reply does not decode: %s", p ? e.msg : "empty or too large");
        return;
    }
    if (!strcmp(info.task_name, "__try_again__")) {
        later(d, wait_time(p, len, 0.5), poll_task);
        return;
    }
    if (!strcmp(info.task_name, "__end_run__")) {
        drive_end(d, 0, "rounds=%ld", d->rounds_done);
        return;
    }
    take_task(d, p, len, &info);
}

static void poll_task(struct drive *d)
{
    struct cj_fl_client c = fl_client(d);
    if (cj_fl_client_get_task(&c, d->last_task_id[0] ? d->last_task_id : NULL, NULL, 60, on_task, d, NULL))
        drive_end(d, 1, "cannot send get_task");
}

/* ---- --drive-source-failure: the notices ---------------------------------------------- */

static int send_notice(struct drive *d, struct cj_stream_ep *ep, const char *reason, cj_stream_reply_fn fn)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    const char *ids[1] = {d->sf_ref};
    msgpack_sbuffer_init(&sb);
    if (cj_dl_encode_source_failure(&sb, d->sf_child, ids, 1, reason, &e)) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    struct evbuffer *b = mp_sbuffer_to_evbuffer(&sb);
    msgpack_sbuffer_destroy(&sb);
    if (!b) return -1;
    struct cj_stream_msg m = {.encoding = "fobs"};
    return cj_stream_request(ep, d->server, CJ_DL_CHANNEL, CJ_DL_TOPIC_SOURCE_FAILURE, &m, b, 5.0, fn, d, NULL, NULL);
}

static void on_parent_notice(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    printf("DRIVE NOTICE %ld from=%s source=%s rc=%s error=%s\n", d->round, d->me, d->sf_child, r->return_code,
           r->error[0] ? r->error : "-");
}

static void on_sibling_notice(void *arg, struct cj_stream_reply *r)
{
    struct drive *d = arg;
    printf("DRIVE NOTICE %ld from=%s source=%s rc=%s error=%s\n", d->round, d->sf_sibling, d->sf_child,
           r->return_code, r->error[0] ? r->error : "-");
    if (send_notice(d, d->ep, "sf_trainer killed by the drive (test)", on_parent_notice))
        drive_end(d, 1, "cannot send the source_failure notice");
}

/* A message for a cell of ours that does not exist (the dead worker). */
static void dead_cell_msg(struct drive *d, const struct cj_hdr *h)
{
    printf("DRIVE DROPPED %s %s for %s round=%ld attempt=%ld\n", h->topic, h->sm_tp[0] ? h->sm_tp : "-",
           h->destination, d->round, d->sf_attempt);
    if (d->sf_notified || strcmp(h->destination, d->sf_child)) return;
    d->sf_notified = true;
    /* first a sibling worker claims the failure (not the parent: refused), then the relay */
    if (send_notice(d, d->sib_ep, "sf_trainer killed (claimed by its sibling)", on_sibling_notice))
        drive_end(d, 1, "cannot send the sibling's source_failure notice");
}

/* ---- --drive-parent: the client parent link ------------------------------------------ */

/* The notice in flight is answered (rc) or timed out: the held end, after STOPPED. */
static void notify_done(struct drive *d, const char *rc)
{
    long st = d->notify_status;
    printf("DRIVE NOTIFIED %ld rc=%s\n", st, rc);
    d->notify_status = 0;
    evtimer_del(d->notify_timer);
    if (st != CJ_CPMSG_STOPPED || !d->stopping) return;
    d->stopping = false;
    d->started_sent = false;             /* so drive_end ends now */
    drive_end(d, d->end_code, "%s", d->end_why);
}

static void on_notify_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    notify_done(arg, "timeout");
}

/* admin/train.notify_job_status status to the parent <site> (5 s for the reply). */
static void notify(struct drive *d, long status)
{
    msgpack_sbuffer sb;
    struct timeval tv = cj_tv(5.0);
    msgpack_sbuffer_init(&sb);
    d->notify_status = status;
    if (status == CJ_CPMSG_STARTED) d->started_sent = true;
    if (cj_cpmsg_admin_write(&sb, CJ_CPMSG_TP_NOTIFY, "", d->o->job_id, status, NULL) ||
        cpmsg_request(d->plink, d->me, d->site, CJ_CPMSG_CH_ADMIN, CJ_CPMSG_TP_NOTIFY, true, &sb, d->notify_rid))
        notify_done(d, "not_sent");
    else
        evtimer_add(d->notify_timer, &tv);
    msgpack_sbuffer_destroy(&sb);
}

/* client_command/<topic> from the parent. */
static void parent_command(struct drive *d, struct cj_link *l, const struct cj_hdr *h)
{
    if (!strcmp(h->topic, "show_stats")) {
        const char *st = d->stopping ? "stopping" : d->started_sent ? "started" : "starting";
        struct cj_cpmsg_kv kv[] = {{"cell", d->me, 0}, {"rounds_done", NULL, d->rounds_done}, {"status", st, 0}};
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        printf("DRIVE SHOW_STATS from=%s\n", h->origin);
        if (h->reply_expected && cj_cpmsg_map_write(&sb, kv, 3) == 0) cpmsg_reply(l, h, "ok", NULL, &sb);
        msgpack_sbuffer_destroy(&sb);
    } else if (!strcmp(h->topic, "abort")) {
        printf("DRIVE ABORT from=%s round=%ld\n", h->origin, d->round);
        drive_end(d, 0, "aborted rounds=%ld", d->rounds_done);
    } else if (!strcmp(h->topic, "abort_task") || !strcmp(h->topic, "reset_errors")) {
        printf("DRIVE %s from=%s round=%ld\n", !strcmp(h->topic, "abort_task") ? "ABORT_TASK" : "RESET_ERRORS",
               h->origin, d->round);
    } else if (h->reply_expected) {
        cpmsg_reply(l, h, "invalid_request", NULL, NULL);
    }
}

static void on_parent_up(struct cj_link *l, void *ctx)
{
    struct drive *d = ctx;
    printf("DRIVE PARENT connected to %s as %s\n", cj_link_peer(l), d->me);
    if (d->synced && !d->started_sent) notify(d, CJ_CPMSG_STARTED);
}

static void on_parent_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct drive *d = ctx;
    const struct cj_hdr *h = &m->hdr;
    if (strcmp(h->destination, d->me)) {
        cj_log_warning("drive: %s/%s for %s from the parent: not this cell, dropped", h->channel, h->topic,
                       h->destination);
    } else if (h->msg_type != CJ_MSG_REQ) {
        if (d->notify_status && !strcmp(h->req_id, d->notify_rid)) notify_done(d, h->return_code);
    } else if (!strcmp(h->channel, CJ_CPMSG_CH_COMMAND)) {
        parent_command(d, l, h);
    } else {
        printf("DRIVE REQUEST %s/%s from=%s via parent: no callback\n", h->channel, h->topic, h->origin);
        if (h->reply_expected) cpmsg_reply(l, h, "process_exception", "no callback", NULL);
    }
    cj_msg_free(m);
}

static void on_parent_down(struct cj_link *l, const char *why, void *ctx)
{
    (void)l;
    struct drive *d = ctx;
    printf("DRIVE PARENT lost: %s\n", why);
    d->plink = NULL;
    if (d->notify_status) notify_done(d, "link_lost");
}

static const struct cj_link_ops PARENT_OPS = {
    .on_up = on_parent_up, .on_msg = on_parent_msg, .on_down = on_parent_down,
};

/* ---- link and endpoint --------------------------------------------------------------- */

static void on_up(struct cj_link *l, void *ctx)
{
    struct drive *d = ctx;
    printf("DRIVE CONNECTED to %s as %s\n", cj_link_peer(l), d->me);
    sync_runner(d);
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    (void)l;
    struct drive *d = ctx;
    if (strcmp(m->hdr.channel, CJ_STREAM_CHANNEL)) {
        /* not for a stream endpoint */
    } else if (d->sib_ep && !strcmp(m->hdr.destination, d->sf_sibling)) {
        cj_stream_input(d->sib_ep, &m->hdr, m->payload);
    } else if (d->sib_ep && strcmp(m->hdr.destination, d->me)) {
        dead_cell_msg(d, &m->hdr);
    } else {
        cj_stream_input(d->ep, &m->hdr, m->payload);
    }
    cj_msg_free(m);
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    (void)l;
    struct drive *d = ctx;
    d->link = NULL;
    if (d->stopping) return;             /* the end is held for STOPPED's answer */
    drive_end(d, 1, "connection lost: %s", why);
}

static const struct cj_link_ops OPS = {.on_up = on_up, .on_msg = on_msg, .on_down = on_down};

static int io_send(void *ctx, const char *dest, const uint8_t *hblk, size_t hlen, struct evbuffer *payload, bool control)
{
    (void)dest;
    struct drive *d = ctx;
    return d->link && cj_link_send(d->link, hblk, hlen, payload, control) == 0 ? 0 : -1;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    drive_end(arg, 1, "signal %d", (int)sig);
}

int sim_drive(const struct sim_opts *o)
{
    struct drive d;
    struct cj_err err = {0};
    memset(&d, 0, sizeof d);
    d.o = o;
    d.exit_code = 2;
    cj_log_init("cjrelay-sim-drive");
    cj_log_set_level(o->log_level);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(d.server, sizeof d.server, "%s.%s", CJ_FQCN_SERVER, o->job_id);
    if (o->drive_as[0]) snprintf(d.me, sizeof d.me, "%s", o->drive_as);
    else snprintf(d.me, sizeof d.me, "site-1.%s", o->job_id);
    snprintf(d.site, sizeof d.site, "%.*s", (int)strcspn(d.me, "."), d.me);
    snprintf(d.sf_child, sizeof d.sf_child, "%.*s.sf_trainer", (int)sizeof d.sf_child - 12, d.me);
    snprintf(d.sf_sibling, sizeof d.sf_sibling, "%.*s.sf_sibling", (int)sizeof d.sf_sibling - 12, d.me);
    d.nelem = (uint64_t)((o->model_size / o->tensors) & ~(int64_t)3) / 4;
    struct event *sig = NULL;
    struct cj_link_cfg lc = {.name = "server", .me = d.me};
    struct cj_stream_io io = {.ctx = &d, .send = io_send};
    if (!(d.base = event_base_new()) || !(d.timer = evtimer_new(d.base, on_timer, &d)) ||
        !(d.notify_timer = evtimer_new(d.base, on_notify_timeout, &d)) ||
        !(d.ep = cj_stream_new(d.base, d.me, &io, NULL)) || !(d.prod = cj_dl_producer_new(d.base, d.ep, NULL)) ||
        !(sig = evsignal_new(d.base, SIGTERM, on_signal, &d)) || event_add(sig, NULL) ||
        (o->drive_source_failure && !(d.sib_ep = cj_stream_new(d.base, d.sf_sibling, &io, NULL)))) {
        printf("DRIVE FAIL cannot start\n");
        goto out;
    }
    if (!(d.link = cj_link_connect(d.base, NULL, o->drive, NULL, &lc, &OPS, &d, &err))) {
        printf("DRIVE FAIL cannot connect to %s: %s\n", o->drive, err.msg);
        goto out;
    }
    struct cj_link_cfg pc = {.name = "parent", .me = d.me};
    if (o->drive_parent[0] &&
        !(d.plink = cj_link_connect(d.base, NULL, o->drive_parent, NULL, &pc, &PARENT_OPS, &d, &err))) {
        printf("DRIVE FAIL cannot connect to the parent %s: %s\n", o->drive_parent, err.msg);
        goto out;
    }
    event_base_dispatch(d.base);
    /* a link that went down frees itself at the next loop turn: give it one */
    evtimer_del(d.timer);
    if (d.link) cj_link_free(d.link);
    d.link = NULL;
    if (d.plink) cj_link_free(d.plink);
    d.plink = NULL;
    event_base_loop(d.base, EVLOOP_NONBLOCK);
out:
    if (d.prod) cj_dl_producer_free(d.prod);
    if (d.link) cj_link_free(d.link);
    d.link = NULL;
    if (d.plink) cj_link_free(d.plink);
    if (d.sib_ep) cj_stream_free(d.sib_ep);
    if (d.ep) cj_stream_free(d.ep);
    if (d.submit) evbuffer_free(d.submit);
    if (d.timer) event_free(d.timer);
    if (d.notify_timer) event_free(d.notify_timer);
    if (sig) event_free(sig);
    if (d.base) event_base_free(d.base);
    free(d.task);
    free(d.ts);
    free(d.item_tensor);
    return d.exit_code;
}
