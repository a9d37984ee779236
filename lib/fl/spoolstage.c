/* SPDX-License-Identifier: Apache-2.0 */
/* spoolstage.c — spool mode between the upstream loop and the worker sessions
 * (see spoolstage.h).
 *
 * One record per task with spool work.  Spool callbacks only record what
 * happened and wake the stage's work event; the work pass (the loop, outside
 * any callback) serves refs, rewrites payloads, hands tasks and results on and
 * drops finished records, so no spool call is ever made from inside one of
 * the spool's own callbacks. */
#include "fl/spoolstage.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/spool.h"
#include "payload/fobs.h"
#include "payload/refmap.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mp.h"

#define TICK_SECS 1
#define SERVED_GRACE_SECS 30.0   /* after the server's ok, how long the end of the run waits for its confirm */
#define RCV_MAX 16               /* receiver_ids kept for a result */

enum sstate {
    S_FETCHING,          /* task refs being spooled */
    S_WAITING,           /* spooled; waiting for an idle worker */
    S_DELIVERED,         /* a worker has it */
    S_RESULT_FETCHING,   /* result refs being spooled from the worker */
    S_RESULT_SPOOLED,    /* ... all on disk: to be served and submitted */
    S_SUBMITTING,        /* the upstream loop has the result */
    S_SUBMITTED,         /* the server accepted it; served result refs not finished yet */
};

struct stask;

struct sref {
    struct stask *tk;
    struct cj_spool_ref *r;
    int dot;
    char fqcn[CJ_FOBS_FQCN_MAX + 1];
    char ref_id[CJ_FOBS_REF_ID_MAX + 1];
    char served[CJ_DL_REF_ID_MAX + 1];   /* "" until served */
    bool fetched, finished;              /* finished: the served ref's producer ref ended */
    int outcome;                         /* enum cj_dl_outcome when finished */
};

struct stask {
    struct cj_spool_stage *st;
    char id[CJ_TASK_ID_LEN + 1];
    char tag[CJ_TASK_ID_LEN + 8];        /* "<id>.result" for results */
    enum sstate state;
    bool dead;                           /* to be dropped by the work pass */
    char fail_why[512];                  /* set: the work pass fails the task upstream */
    uint8_t *payload;                    /* the get_task payload (refs only: small) */
    size_t len;
    struct sref in[CJ_TASK_MAX_REFS];
    size_t n_in;
    unsigned deliveries;
    struct sref out[CJ_TASK_MAX_REFS];
    size_t n_out;
    uint8_t *result;                     /* the worker's result_ready payload */
    size_t rlen;
    cj_fl_submit_done_fn done;
    void *done_ctx;
    bool submit_ok;
    double submitted_at;
    uint64_t served_seen;                /* result bytes served, at the last tick */
    struct stask *next;
};

struct cj_spool_stage {
    struct event_base *base;
    struct cj_stream_ep *ep;
    struct cj_spool *spool;
    struct cj_task_table *tt;
    unsigned max_deliveries;
    struct cj_fl_submit_ops up;
    struct cj_fl_dispatch_ops down;
    struct event *work_ev, *tick_ev;
    bool ending;
    bool in_work;                        /* inside work_cb: a nested wake-up waits for the event */
    struct stask *tasks;                 /* oldest first */
    struct cj_spool_stage_stats stats;
    char last_error[CJ_SPOOL_STAGE_ERROR_MAX];   /* the last task or result that failed here, and why */
    time_t last_error_at;
};

/* ---- records ------------------------------------------------------------------------------------ */

static void wake(struct cj_spool_stage *st)
{
    event_active(st->work_ev, EV_TIMEOUT, 1);
}

static struct stask *find(const struct cj_spool_stage *st, const char *id)
{
    for (struct stask *tk = st->tasks; tk; tk = tk->next)
        if (!tk->dead && !strcmp(tk->id, id)) return tk;
    return NULL;
}

static struct stask *add(struct cj_spool_stage *st, const struct cj_task *t)
{
    struct stask *tk = calloc(1, sizeof *tk);
    if (!tk) return NULL;
    tk->st = st;
    snprintf(tk->id, sizeof tk->id, "%s", t->id);
    snprintf(tk->tag, sizeof tk->tag, "%s", t->id);
    struct stask **pp = &st->tasks;
    while (*pp) pp = &(*pp)->next;
    *pp = tk;
    st->stats.in_progress++;
    return tk;
}

static void drop_refs(struct cj_spool_stage *st, struct sref *refs, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        if (refs[i].r) cj_spool_drop(st->spool, refs[i].r);
    *n = 0;
}

/* Unlinks and frees tk (its spool refs dropped: producer refs removed, files deleted). */
static void destroy(struct cj_spool_stage *st, struct stask *tk)
{
    for (struct stask **pp = &st->tasks; *pp; pp = &(*pp)->next)
        if (*pp == tk) {
            *pp = tk->next;
            break;
        }
    drop_refs(st, tk->in, &tk->n_in);
    drop_refs(st, tk->out, &tk->n_out);
    free(tk->payload);
    free(tk->result);
    free(tk);
    st->stats.in_progress--;
}

/* tk is finished: dropped by the next work pass (never from inside a spool callback). */
static void retire(struct stask *tk)
{
    tk->dead = true;
    wake(tk->st);
}

/* The task failed here: reported upstream, its spool dropped (by the work pass). */
static void fail_task(struct cj_spool_stage *st, struct stask *tk, const char *why)
{
    struct cj_task *t = cj_task_find(st->tt, tk->id);
    st->stats.tasks_failed++;
    cj_log_error("task %s (server task %s): spool mode: %s", tk->id, t ? t->server_id : "?", why);
    snprintf(st->last_error, sizeof st->last_error, "task %s: %s", tk->id, why);
    st->last_error_at = time(NULL);
    retire(tk);
    if (t && st->up.failed) st->up.failed(st->up.ctx, t, why);
    if (st->up.kick) st->up.kick(st->up.ctx);   /* a worker's place is free again */
}

/* The result could not be spooled or submitted: the sessions hear done(false), the server a failure. */
static void fail_result(struct cj_spool_stage *st, struct stask *tk, const char *why)
{
    struct cj_task *t = cj_task_find(st->tt, tk->id);
    st->stats.results_failed++;
    cj_log_error("task %s (server task %s): spool mode: result not submitted: %s", tk->id, t ? t->server_id : "?",
                 why);
    snprintf(st->last_error, sizeof st->last_error, "task %s: result not submitted: %s", tk->id, why);
    st->last_error_at = time(NULL);
    cj_fl_submit_done_fn done = tk->done;
    tk->done = NULL;
    retire(tk);
    if (t && done) done(tk->done_ctx, t, false, why);
    if (t && st->up.failed) st->up.failed(st->up.ctx, t, why);
}

static size_t count_state(const struct cj_spool_stage *st, enum sstate a, enum sstate b)
{
    size_t k = 0;
    for (const struct stask *tk = st->tasks; tk; tk = tk->next) k += !tk->dead && tk->state >= a && tk->state <= b;
    return k;
}

static const char *refs_text(const struct sref *refs, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && o < outsz; i++) {
        int k = snprintf(out + o, outsz - o, "%s%d:%s/%s%s%s", i ? ", " : "", refs[i].dot, refs[i].fqcn, refs[i].ref_id,
                         refs[i].served[0] ? " as " : "", refs[i].served);
        if (k < 0) break;
        o += (size_t)k;
    }
    return n ? out : "none";
}

/* ---- spool callbacks: record, then wake the work pass ----------------------------------------------- */

static void on_fetched(void *ctx, struct cj_spool_ref *r, bool ok, const char *why)
{
    struct sref *sr = ctx;
    struct stask *tk = sr->tk;
    struct cj_spool_stage *st = tk->st;
    if (tk->dead) return;
    bool result = tk->state == S_RESULT_FETCHING;
    if (!ok) {
        snprintf(tk->fail_why, sizeof tk->fail_why, "spooling %s ref %s from %s failed: %s", result ? "result" : "task",
                 sr->ref_id, sr->fqcn, why ? why : "unknown");
        wake(st);
        return;
    }
    sr->fetched = true;
    cj_log_info("task %s: %s ref %s from %s spooled: %" PRIu32 " item(s), %" PRIu64 " bytes", tk->id,
                result ? "result" : "task", sr->ref_id, sr->fqcn, cj_spool_ref_items(r), cj_spool_ref_bytes(r));
    wake(st);
}

static void on_served(void *ctx, struct cj_spool_ref *r, enum cj_dl_outcome outcome)
{
    struct sref *sr = ctx;
    struct stask *tk = sr->tk;
    if (tk->dead) return;
    sr->finished = true;
    sr->outcome = (int)outcome;
    const char *what = outcome == CJ_DL_OUT_OK ? "completed" : outcome == CJ_DL_OUT_FAILED ? "failed" : "timed out";
    bool result = sr >= tk->out && sr < tk->out + CJ_TASK_MAX_REFS;
    if (outcome == CJ_DL_OUT_OK)
        cj_log_info("task %s: served %s ref %s (spooled from %s/%s) %s: %" PRIu64 " bytes", tk->id,
                    result ? "result" : "task", cj_spool_ref_served_id(r), sr->fqcn, sr->ref_id, what,
                    cj_spool_ref_bytes(r));
    else
        cj_log_warning("task %s: served %s ref %s (spooled from %s/%s) %s", tk->id, result ? "result" : "task",
                       cj_spool_ref_served_id(r), sr->fqcn, sr->ref_id, what);
    wake(tk->st);
}

/* ---- serving and rewriting ------------------------------------------------------------------------------ */

/* Serves refs under fresh ids and rewrites payload to them into sb.  0 or -1 (why). */
static int serve_and_rewrite(struct cj_spool_stage *st, struct sref *refs, size_t n, const char *const *ids,
                             size_t n_ids, const uint8_t *payload, size_t len, msgpack_sbuffer *sb, char *why,
                             size_t whysz)
{
    struct cj_refmap_entry map[CJ_TASK_MAX_REFS];
    const char *me = cj_stream_me(st->ep);
    for (size_t i = 0; i < n; i++) {
        refs[i].finished = false;
        if (cj_spool_serve(st->spool, refs[i].r, n_ids ? 0 : 1, ids, n_ids, on_served, &refs[i], refs[i].served)) {
            snprintf(why, whysz, "cannot serve spooled ref %s (from %s)", refs[i].ref_id, refs[i].fqcn);
            return -1;
        }
        map[i] = (struct cj_refmap_entry){refs[i].fqcn, refs[i].ref_id, me, refs[i].served};
    }
    struct cj_err e = {0};
    size_t done = 0;
    if (cj_refmap_rewrite(payload, len, map, n, sb, &done, &e) || done != n) {
        snprintf(why, whysz, "cannot rewrite the refs to %s: %s", me, e.msg[0] ? e.msg : "a ref was not found");
        return -1;
    }
    return 0;
}

/* A spooled task to the longest-idle worker. */
static void deliver_now(struct cj_spool_stage *st, struct stask *tk)
{
    char why[512], refs[1024];
    struct cj_task *t = cj_task_find(st->tt, tk->id);
    if (!t) {
        cj_log_warning("task %s: gone from the task table before delivery; spool dropped", tk->id);
        retire(tk);
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = serve_and_rewrite(st, tk->in, tk->n_in, NULL, 0, tk->payload, tk->len, &sb, why, sizeof why);
    if (rc == 0) {
        why[0] = 0;
        rc = st->down.deliver ? st->down.deliver(st->down.ctx, t, (const uint8_t *)sb.data, sb.size, why, sizeof why)
                              : -1;
        if (rc) {
            char msg[sizeof why];
            snprintf(msg, sizeof msg, "%s", why[0] ? why : "no worker side");
            snprintf(why, sizeof why, "not delivered: %.480s", msg);
        }
    }
    msgpack_sbuffer_destroy(&sb);
    if (rc) {
        fail_task(st, tk, why);
        return;
    }
    tk->deliveries++;
    tk->state = S_DELIVERED;
    cj_log_info("task %s: delivery %u/%u from the spool to %s: %s", tk->id, tk->deliveries, st->max_deliveries,
                t->worker, refs_text(tk->in, tk->n_in, refs, sizeof refs));
}

/* The result's refs are on disk: serve them to the result receivers, rewrite, submit. */
static void on_up_done(void *ctx, struct cj_task *t, bool ok, const char *why);

static void submit_now(struct cj_spool_stage *st, struct stask *tk)
{
    char why[512], refs[1024];
    struct cj_task *t = cj_task_find(st->tt, tk->id);
    if (!t) {
        cj_log_warning("task %s: gone from the task table before its result was submitted; spool dropped", tk->id);
        retire(tk);
        return;
    }
    char ids[RCV_MAX][256];
    const char *idp[RCV_MAX];
    int n_ids = cj_spool_stage_receivers(t->headers, t->headers_len, ids, RCV_MAX);
    if (n_ids < 0) {
        fail_result(st, tk, "the task's receiver_ids do not fit");
        return;
    }
    for (int i = 0; i < n_ids; i++) idp[i] = ids[i];
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (serve_and_rewrite(st, tk->out, tk->n_out, idp, (size_t)n_ids, tk->result, tk->rlen, &sb, why, sizeof why)) {
        msgpack_sbuffer_destroy(&sb);
        fail_result(st, tk, why);
        return;
    }
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    msgpack_sbuffer_destroy(&sb);
    if (!eb) {
        fail_result(st, tk, "out of memory");
        return;
    }
    st->stats.results_spooled++;
    tk->state = S_SUBMITTING;
    cj_log_info("task %s: result spooled; served to %s: %s", tk->id, n_ids ? "the task's receiver_ids" : "one receiver",
                refs_text(tk->out, tk->n_out, refs, sizeof refs));
    if (!st->up.submit || st->up.submit(st->up.ctx, t, eb, on_up_done, tk) != 0) {
        evbuffer_free(eb);
        fail_result(st, tk, "the upstream loop refused the result");
        return;
    }
    evbuffer_free(eb);
}

/* ---- the work pass ------------------------------------------------------------------------------------------ */

static bool all_fetched(const struct sref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!refs[i].fetched) return false;
    return true;
}

static bool all_finished(const struct sref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!refs[i].finished) return false;
    return true;
}

static size_t workers_idle(struct cj_spool_stage *st)
{
    return st->down.idle ? st->down.idle(st->down.ctx) : 0;
}

static void step(struct cj_spool_stage *st, struct stask *tk)
{
    if (tk->fail_why[0]) {
        char why[sizeof tk->fail_why];
        snprintf(why, sizeof why, "%s", tk->fail_why);
        tk->fail_why[0] = 0;
        if (tk->state >= S_RESULT_FETCHING) fail_result(st, tk, why);
        else fail_task(st, tk, why);
        return;
    }
    switch (tk->state) {
    case S_FETCHING:
        if (!all_fetched(tk->in, tk->n_in)) return;
        tk->state = S_WAITING;
        st->stats.tasks_spooled++;
        cj_log_info("task %s: all %zu ref(s) spooled; waiting for a worker", tk->id, tk->n_in);
        /* fall through */
    case S_WAITING:
        if (st->ending) {
            fail_task(st, tk, "the run ended before a worker took the task");
            return;
        }
        if (workers_idle(st) > 0) deliver_now(st, tk);
        return;
    case S_RESULT_FETCHING:
        if (!all_fetched(tk->out, tk->n_out)) return;
        tk->state = S_RESULT_SPOOLED;
        /* fall through */
    case S_RESULT_SPOOLED:
        submit_now(st, tk);
        return;
    case S_SUBMITTED:
        if (all_finished(tk->out, tk->n_out)) {
            cj_log_info("task %s: result confirmed by the server and downloaded; spool removed", tk->id);
            retire(tk);
        }
        return;
    case S_DELIVERED:
    case S_SUBMITTING:
        return;
    }
}

static void work_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cj_spool_stage *st = arg;
    if (st->in_work) {
        wake(st);
        return;
    }
    st->in_work = true;
    /* Oldest first: a requeued task keeps its place ahead of newer ones.  step()
     * may call out (deliver, submit, failed); records are only unlinked below. */
    for (struct stask *tk = st->tasks; tk; tk = tk->next)
        if (!tk->dead) step(st, tk);
    struct stask *tk = st->tasks;
    while (tk) {
        struct stask *next = tk->next;
        if (tk->dead) destroy(st, tk);
        tk = next;
    }
    st->in_work = false;
}

/* Bytes the server pulled of served result refs extend the submit timeout. */
struct served_sum {
    const char *tag;
    uint64_t bytes;
};

static void sum_served(void *arg, const struct cj_spool_ref_info *ri)
{
    struct served_sum *s = arg;
    if (!strcmp(ri->tag, s->tag)) s->bytes += ri->bytes_served;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cj_spool_stage *st = arg;
    for (struct stask *tk = st->tasks; tk; tk = tk->next) {
        if (tk->dead || tk->state != S_SUBMITTING) continue;
        struct served_sum s = {tk->tag, 0};
        cj_spool_foreach(st->spool, sum_served, &s);
        if (s.bytes != tk->served_seen) {
            tk->served_seen = s.bytes;
            struct cj_task *t = cj_task_find(st->tt, tk->id);
            if (t && st->up.progress) st->up.progress(st->up.ctx, t);
        }
    }
}

/* ---- dispatch ops (called by the upstream loop) --------------------------------------------------------------- */

static size_t op_idle(void *ctx)
{
    struct cj_spool_stage *st = ctx;
    size_t idle = workers_idle(st), taken = count_state(st, S_FETCHING, S_WAITING);
    return idle > taken ? idle - taken : 0;
}

/* Starts spooling refs[0..n) under tag into srefs.  0, or -1 with why (the started ones dropped). */
static int start_fetches(struct cj_spool_stage *st, struct stask *tk, const char *tag, const struct cj_fobs_ref *refs,
                         size_t n, struct sref *srefs, size_t *n_srefs, char *why, size_t whysz)
{
    for (size_t i = 0; i < n; i++) {
        struct sref *sr = &srefs[i];
        memset(sr, 0, sizeof *sr);
        sr->tk = tk;
        sr->dot = refs[i].dot;
        snprintf(sr->fqcn, sizeof sr->fqcn, "%s", refs[i].fqcn);
        snprintf(sr->ref_id, sizeof sr->ref_id, "%s", refs[i].ref_id);
        sr->r = cj_spool_fetch(st->spool, tag, sr->dot, sr->fqcn, sr->ref_id, on_fetched, sr);
        if (!sr->r) {
            snprintf(why, whysz, "cannot start spooling ref %s from %s", sr->ref_id, sr->fqcn);
            *n_srefs = i;
            drop_refs(st, srefs, n_srefs);
            return -1;
        }
    }
    *n_srefs = n;
    return 0;
}

static int list_refs(const uint8_t *p, size_t len, struct cj_fobs_ref *refs, size_t *n, char *why, size_t whysz)
{
    struct cj_err e = {0};
    if (cj_fobs_list_refs(p, len, refs, CJ_TASK_MAX_REFS, n, &e)) {
        snprintf(why, whysz, "cannot list the download refs: %s", e.msg);
        return -1;
    }
    if (*n > CJ_TASK_MAX_REFS) {
        snprintf(why, whysz, "%zu download refs (most %d)", *n, CJ_TASK_MAX_REFS);
        return -1;
    }
    return 0;
}

static int op_deliver(void *ctx, struct cj_task *t, const uint8_t *payload, size_t len, char *why, size_t whysz)
{
    struct cj_spool_stage *st = ctx;
    struct cj_fobs_ref refs[CJ_TASK_MAX_REFS];
    size_t n = 0;
    char txt[1024];
    if (st->ending) {
        snprintf(why, whysz, "the relay is ending the run");
        return -1;
    }
    if (find(st, t->id)) {
        snprintf(why, whysz, "task %s is already being spooled", t->id);
        return -1;
    }
    if (list_refs(payload, len, refs, &n, why, whysz)) return -1;
    if (n == 0)   /* nothing to download: the task goes as it is */
        return st->down.deliver ? st->down.deliver(st->down.ctx, t, payload, len, why, whysz) : -1;
    struct stask *tk = add(st, t);
    if (!tk || !(tk->payload = malloc(len ? len : 1))) {
        if (tk) retire(tk);
        snprintf(why, whysz, "out of memory");
        return -1;
    }
    memcpy(tk->payload, payload, len);
    tk->len = len;
    tk->state = S_FETCHING;
    if (start_fetches(st, tk, tk->tag, refs, n, tk->in, &tk->n_in, why, whysz)) {
        retire(tk);
        return -1;
    }
    cj_log_info("task %s (server task %s, '%s'): spooling %zu ref(s): %s", t->id, t->server_id, t->name, n,
                refs_text(tk->in, tk->n_in, txt, sizeof txt));
    return 0;
}

static void op_end_run(void *ctx)
{
    struct cj_spool_stage *st = ctx;
    st->ending = true;
    wake(st);   /* tasks still waiting for a worker are failed */
    if (st->down.end_run) st->down.end_run(st->down.ctx);
}

/* ---- submit ops (called by the sessions) ------------------------------------------------------------------------- */

static int op_submit(void *ctx, struct cj_task *t, struct evbuffer *result, cj_fl_submit_done_fn done, void *done_ctx)
{
    struct cj_spool_stage *st = ctx;
    char why[512], txt[1024];
    struct stask *tk = find(st, t->id);
    if (tk && tk->state >= S_RESULT_FETCHING) {
        evbuffer_drain(result, evbuffer_get_length(result));
        cj_log_error("task %s: a result is already being spooled; second result refused", t->id);
        return -1;
    }
    if (tk) drop_refs(st, tk->in, &tk->n_in);   /* the task's own refs are not needed any more */
    size_t len = evbuffer_get_length(result);
    uint8_t *p = malloc(len ? len : 1);
    if (!p) {
        evbuffer_drain(result, len);
        return -1;
    }
    evbuffer_remove(result, p, len);
    struct cj_fobs_ref refs[CJ_TASK_MAX_REFS];
    size_t n = 0;
    if (list_refs(p, len, refs, &n, why, sizeof why)) {
        cj_log_error("task %s: result refused: %s", t->id, why);
        free(p);
        if (tk) retire(tk);
        return -1;
    }
    if (!tk && !(tk = add(st, t))) {
        free(p);
        return -1;
    }
    free(tk->payload);
    tk->payload = NULL;
    tk->result = p;
    tk->rlen = len;
    tk->done = done;
    tk->done_ctx = done_ctx;
    snprintf(tk->tag, sizeof tk->tag, "%s.result", t->id);
    tk->state = S_RESULT_FETCHING;
    if (start_fetches(st, tk, tk->tag, refs, n, tk->out, &tk->n_out, why, sizeof why)) {
        cj_log_error("task %s: result refused: %s", t->id, why);
        tk->done = NULL;
        retire(tk);
        return -1;
    }
    cj_log_info("task %s: spooling the result's %zu ref(s): %s", t->id, n, refs_text(tk->out, tk->n_out, txt, sizeof txt));
    if (n == 0) wake(st);   /* nothing to fetch: submitted by the work pass */
    return 0;
}

static void on_up_done(void *ctx, struct cj_task *t, bool ok, const char *why)
{
    struct stask *tk = ctx;
    struct cj_spool_stage *st = tk->st;
    cj_fl_submit_done_fn done = tk->done;
    tk->done = NULL;
    if (ok) {
        tk->submit_ok = true;
        tk->state = S_SUBMITTED;
        tk->submitted_at = cj_now();
        wake(st);   /* dropped once the served result refs finished */
    } else {
        retire(tk);
    }
    if (done) done(tk->done_ctx, t, ok, why);
}

static void op_failed(void *ctx, struct cj_task *t, const char *why)
{
    struct cj_spool_stage *st = ctx;
    struct stask *tk = find(st, t->id);
    /* A result the upstream loop is submitting keeps its served refs: the server
     * may be pulling them; the loop reports through on_up_done. */
    if (tk && tk->state != S_SUBMITTING) retire(tk);
    if (st->up.failed) st->up.failed(st->up.ctx, t, why);
}

static void op_kick(void *ctx)
{
    struct cj_spool_stage *st = ctx;
    /* Spooled tasks (requeued ones included) go first: the work pass delivers
     * them; the upstream polls only for what idle() still leaves. */
    if (count_state(st, S_WAITING, S_WAITING)) work_cb(-1, 0, st);
    if (st->up.kick) st->up.kick(st->up.ctx);
}

static void op_progress(void *ctx, struct cj_task *t)
{
    struct cj_spool_stage *st = ctx;
    if (st->up.progress) st->up.progress(st->up.ctx, t);
}

static int op_requeue(void *ctx, struct cj_task *t, const char *why)
{
    struct cj_spool_stage *st = ctx;
    struct stask *tk = find(st, t->id);
    if (!tk || tk->state != S_DELIVERED) return -1;
    if (st->ending) return -1;
    if (tk->deliveries >= st->max_deliveries) {
        cj_log_error("task %s: not delivered again: already delivered %u times (most %u)", t->id, tk->deliveries,
                     st->max_deliveries);
        return -1;
    }
    t->worker[0] = 0;
    cj_task_set_state(t, CJ_TASK_RECEIVED);
    tk->state = S_WAITING;
    st->stats.requeued++;
    cj_log_warning("task %s (server task %s): requeued after %s; its spooled refs will be served again to the next "
                   "idle worker",
                   t->id, t->server_id, why);
    wake(st);
    return 0;
}

/* ---- public -------------------------------------------------------------------------------------------------------- */

int cj_spool_stage_receivers(const uint8_t *headers, size_t len, char (*ids)[256], size_t cap)
{
    struct cj_fobs_headers h;
    struct cj_err e = {0};
    if (!headers || !len || cj_fobs_read_headers(headers, len, &h, &e) || !h.receiver_ids.len) return 0;
    struct mp_cur c;
    uint32_t n;
    mp_cur_init(&c, headers + h.receiver_ids.off, h.receiver_ids.len);
    if (mp_read_array(&c, &n, &e)) return 0;   /* None or another type: no identity list */
    if (n > cap) return -1;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *s;
        uint32_t sl;
        if (mp_read_str(&c, &s, &sl, &e) || sl == 0 || memchr(s, 0, sl)) return 0;
        if (sl >= 256) return -1;
        memcpy(ids[i], s, sl);
        ids[i][sl] = 0;
    }
    return (int)n;
}

struct cj_spool_stage *cj_spool_stage_new(const struct cj_spool_stage_cfg *cfg, const struct cj_fl_submit_ops *up)
{
    if (!cfg || !cfg->base || !cfg->ep || !cfg->spool || !cfg->tt || !up) return NULL;
    struct cj_spool_stage *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->base = cfg->base;
    st->ep = cfg->ep;
    st->spool = cfg->spool;
    st->tt = cfg->tt;
    st->max_deliveries = cfg->max_deliveries ? cfg->max_deliveries : CJ_SPOOL_STAGE_DELIVERIES;
    st->up = *up;
    st->work_ev = event_new(cfg->base, -1, 0, work_cb, st);
    st->tick_ev = event_new(cfg->base, -1, EV_PERSIST, tick_cb, st);
    struct timeval tv = {TICK_SECS, 0};
    if (!st->work_ev || !st->tick_ev || event_add(st->tick_ev, &tv) != 0) {
        cj_spool_stage_free(st);
        return NULL;
    }
    return st;
}

void cj_spool_stage_set_workers(struct cj_spool_stage *st, const struct cj_fl_dispatch_ops *down)
{
    st->down = *down;
}

void cj_spool_stage_free(struct cj_spool_stage *st)
{
    if (!st) return;
    while (st->tasks) destroy(st, st->tasks);
    if (st->work_ev) event_free(st->work_ev);
    if (st->tick_ev) event_free(st->tick_ev);
    free(st);
}

void cj_spool_stage_dispatch_ops(struct cj_spool_stage *st, struct cj_fl_dispatch_ops *out)
{
    *out = (struct cj_fl_dispatch_ops){.ctx = st, .idle = op_idle, .deliver = op_deliver, .end_run = op_end_run};
}

void cj_spool_stage_submit_ops(struct cj_spool_stage *st, struct cj_fl_submit_ops *out)
{
    *out = (struct cj_fl_submit_ops){.ctx = st, .submit = op_submit, .failed = op_failed, .kick = op_kick,
                                     .progress = op_progress, .requeue = op_requeue};
}

size_t cj_spool_stage_busy(const struct cj_spool_stage *st)
{
    size_t k = 0;
    double now = cj_now();
    for (const struct stask *tk = st->tasks; tk; tk = tk->next) {
        if (tk->dead || tk->state == S_DELIVERED) continue;   /* a worker holds it: the sessions count it */
        if (tk->state == S_SUBMITTED && now - tk->submitted_at > SERVED_GRACE_SECS) continue;
        k++;
    }
    return k;
}

const char *cj_spool_stage_last_error(const struct cj_spool_stage *st, time_t *at)
{
    *at = st->last_error_at;
    return st->last_error;
}

void cj_spool_stage_get_stats(const struct cj_spool_stage *st, struct cj_spool_stage_stats *out)
{
    *out = st->stats;
}
