/* SPDX-License-Identifier: Apache-2.0 */
/* test_spoolstage.c — spool mode's FL stage (lib/fl/spoolstage.c) against a fake
 * spool store and fake upstream / sessions ops.
 *
 * The spool functions the stage calls are defined here, so the library's
 * spool store is not linked: the test drives fetch and serve outcomes by hand. */
#include "testutil.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/spool.h"
#include "fl/spoolstage.h"
#include "fl/task.h"
#include "payload/fobs.h"
#include "payload/refmap.h"

#define ME "site-1.job-7f3a"

/* ---- fake spool ---------------------------------------------------------------------------------- */

struct cj_spool_ref {
    char tag[64], source[256], ref_id[128], served[128];
    int dot;
    bool dropped;
    cj_spool_fetched_fn fn;
    void *ctx;
    cj_spool_served_fn sfn;
    void *sctx;
    uint32_t n_ids, num;
    char ids[4][256];
    uint64_t bytes_served;
};

static struct cj_spool_ref g_refs[32];
static size_t g_nrefs;
static unsigned g_serves;
static bool g_fetch_refuses;

const char *cj_stream_me(const struct cj_stream_ep *ep)
{
    (void)ep;
    return ME;
}

struct cj_spool_ref *cj_spool_fetch(struct cj_spool *sp, const char *tag, int dot, const char *source,
                                    const char *ref_id, cj_spool_fetched_fn fn, void *ctx)
{
    (void)sp;
    if (g_fetch_refuses || g_nrefs == 32) return NULL;
    struct cj_spool_ref *r = &g_refs[g_nrefs++];
    memset(r, 0, sizeof *r);
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    snprintf(r->source, sizeof r->source, "%s", source);
    snprintf(r->ref_id, sizeof r->ref_id, "%s", ref_id);
    r->dot = dot;
    r->fn = fn;
    r->ctx = ctx;
    return r;
}

int cj_spool_serve(struct cj_spool *sp, struct cj_spool_ref *r, uint32_t num_receivers, const char *const *ids,
                   size_t n_ids, cj_spool_served_fn fn, void *ctx, char *new_ref_id)
{
    (void)sp;
    assert_false(r->dropped);
    snprintf(r->served, sizeof r->served, "srv-%u", ++g_serves);
    snprintf(new_ref_id, CJ_DL_REF_ID_MAX + 1, "%s", r->served);
    r->sfn = fn;
    r->sctx = ctx;
    r->num = num_receivers;
    r->n_ids = (uint32_t)n_ids;
    for (size_t i = 0; i < n_ids && i < 4; i++) snprintf(r->ids[i], sizeof r->ids[i], "%s", ids[i]);
    return 0;
}

void cj_spool_drop(struct cj_spool *sp, struct cj_spool_ref *r)
{
    (void)sp;
    assert_false(r->dropped);
    r->dropped = true;
}

void cj_spool_foreach(struct cj_spool *sp, cj_spool_visit_fn fn, void *arg)
{
    (void)sp;
    for (size_t i = 0; i < g_nrefs; i++) {
        if (g_refs[i].dropped) continue;
        struct cj_spool_ref_info ri = {.tag = g_refs[i].tag, .source = g_refs[i].source, .ref_id = g_refs[i].ref_id,
                                       .served_id = g_refs[i].served, .bytes_served = g_refs[i].bytes_served};
        fn(arg, &ri);
    }
}

uint64_t cj_spool_ref_bytes(const struct cj_spool_ref *r) { (void)r; return 100; }
uint32_t cj_spool_ref_items(const struct cj_spool_ref *r) { (void)r; return 2; }
const char *cj_spool_ref_served_id(const struct cj_spool_ref *r) { return r->served; }

/* ---- fake upstream and sessions ------------------------------------------------------------------- */

struct rec {
    size_t idle;
    unsigned delivers, submits, fails, kicks, progress, dones, done_ok;
    uint8_t *delivered;
    size_t dlen;
    uint8_t *submitted;
    size_t slen;
    char fail_why[512];
    cj_fl_submit_done_fn up_done;
    void *up_done_ctx;
    int deliver_rc;
};
static struct rec g;

static size_t down_idle(void *ctx) { (void)ctx; return g.idle; }

static int down_deliver(void *ctx, struct cj_task *t, const uint8_t *p, size_t n, char *why, size_t whysz)
{
    (void)ctx;
    if (g.deliver_rc) {
        snprintf(why, whysz, "no idle worker");
        return g.deliver_rc;
    }
    assert_string_equal(t->worker, "");   /* the guard in session.c */
    g.delivers++;
    free(g.delivered);
    g.delivered = malloc(n);
    memcpy(g.delivered, p, n);
    g.dlen = n;
    snprintf(t->worker, sizeof t->worker, "%s.w%u", ME, g.delivers);
    cj_task_set_state(t, CJ_TASK_DELIVERING);
    return 0;
}

static void down_end_run(void *ctx) { (void)ctx; }

static int up_submit(void *ctx, struct cj_task *t, struct evbuffer *res, cj_fl_submit_done_fn done, void *done_ctx)
{
    (void)ctx;
    (void)t;
    g.submits++;
    free(g.submitted);
    g.slen = evbuffer_get_length(res);
    g.submitted = malloc(g.slen);
    evbuffer_remove(res, g.submitted, g.slen);
    g.up_done = done;
    g.up_done_ctx = done_ctx;
    return 0;
}

static void up_failed(void *ctx, struct cj_task *t, const char *why)
{
    (void)ctx;
    g.fails++;
    snprintf(g.fail_why, sizeof g.fail_why, "%s", why);
    cj_task_fail(t, "%s", why);
}

static void up_kick(void *ctx) { (void)ctx; g.kicks++; }
static void up_progress(void *ctx, struct cj_task *t) { (void)ctx; (void)t; g.progress++; }

static void sess_done(void *ctx, struct cj_task *t, bool ok, const char *why)
{
    (void)ctx;
    (void)t;
    (void)why;
    g.dones++;
    g.done_ok += ok;
}

/* ---- fixture ----------------------------------------------------------------------------------------- */

struct fx {
    struct event_base *base;
    struct cj_task_table *tt;
    struct cj_spool_stage *st;
    struct cj_fl_dispatch_ops disp;   /* the stage's, as the upstream sees them */
    struct cj_fl_submit_ops sub;      /* the stage's, as the sessions see them */
    uint8_t *task;
    size_t tlen;
    struct cj_task *t;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    memset(&g, 0, sizeof g);
    memset(g_refs, 0, sizeof g_refs);
    g_nrefs = 0;
    g_serves = 0;
    g_fetch_refuses = false;
    f->base = event_base_new();
    f->tt = cj_task_table_new();
    struct cj_fl_submit_ops up = {.ctx = NULL, .submit = up_submit, .failed = up_failed, .kick = up_kick,
                                  .progress = up_progress};
    struct cj_spool_stage_cfg cfg = {.base = f->base, .ep = (struct cj_stream_ep *)1, .spool = (struct cj_spool *)1,
                                     .tt = f->tt};
    f->st = cj_spool_stage_new(&cfg, &up);
    assert_non_null(f->st);
    struct cj_fl_dispatch_ops down = {.ctx = NULL, .idle = down_idle, .deliver = down_deliver, .end_run = down_end_run};
    cj_spool_stage_set_workers(f->st, &down);
    cj_spool_stage_dispatch_ops(f->st, &f->disp);
    cj_spool_stage_submit_ops(f->st, &f->sub);
    f->task = tu_read_vector("02_server_task_shareable_via_downloader.bin", &f->tlen);
    char why[256];
    f->t = cj_task_add(f->tt, f->task, f->tlen, why, sizeof why);
    assert_non_null(f->t);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    cj_spool_stage_free(f->st);
    cj_task_table_free(f->tt);
    event_base_free(f->base);
    free(f->task);
    free(g.delivered);
    free(g.submitted);
    free(f);
    return 0;
}

static void run(struct fx *f)
{
    event_base_loop(f->base, EVLOOP_NONBLOCK);
}

static void assert_one_ref(const uint8_t *p, size_t n, const char *fqcn, const char *ref_id)
{
    struct cj_fobs_ref r;
    size_t nr;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_list_refs(p, n, &r, 1, &nr, &e), 0);
    assert_int_equal(nr, 1);
    assert_string_equal(r.fqcn, fqcn);
    assert_string_equal(r.ref_id, ref_id);
}

/* deliver: one fetch per ref under the task id; once spooled, served under a
 * fresh id and the rewritten payload goes to the sessions. */
static void start_and_deliver(struct fx *f)
{
    char why[256] = "";
    g.idle = 2;
    assert_int_equal(f->disp.deliver(f->disp.ctx, f->t, f->task, f->tlen, why, sizeof why), 0);
    assert_int_equal(g_nrefs, 1);
    assert_string_equal(g_refs[0].tag, f->t->id);
    assert_string_equal(g_refs[0].source, "server.job-7f3a");
    assert_string_equal(g_refs[0].ref_id, "11111111-2222-4333-8444-0000000000c9");
    assert_int_equal(g_refs[0].dot, 3);
    assert_int_equal(f->disp.idle(f->disp.ctx), 1);      /* one worker's place is taken by the fetch */
    assert_int_equal(cj_spool_stage_busy(f->st), 1);
    run(f);
    assert_int_equal(g.delivers, 0);
    g_refs[0].fn(g_refs[0].ctx, &g_refs[0], true, NULL);
    assert_int_equal(g.delivers, 0);                     /* never from inside the spool's callback */
    run(f);
    assert_int_equal(g.delivers, 1);
    assert_int_equal(g_refs[0].num, 1);
    assert_int_equal(g_refs[0].n_ids, 0);
    assert_one_ref(g.delivered, g.dlen, ME, "srv-1");
    /* everything else is the server's payload */
    struct cj_refmap_entry back = {ME, "srv-1", "server.job-7f3a", "11111111-2222-4333-8444-0000000000c9"};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    struct cj_err e = {0};
    assert_int_equal(cj_refmap_rewrite(g.delivered, g.dlen, &back, 1, &sb, NULL, &e), 0);
    assert_int_equal(sb.size, f->tlen);
    assert_memory_equal(sb.data, f->task, f->tlen);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(f->disp.idle(f->disp.ctx), 2);
    assert_int_equal(cj_spool_stage_busy(f->st), 0);     /* the sessions count a delivered task */
}

static void test_deliver(void **state)
{
    start_and_deliver(*state);
    assert_int_equal(g.fails, 0);
}

/* A lost worker: the task is taken back, served again under a fresh id, at most 3 deliveries. */
static void test_requeue(void **state)
{
    struct fx *f = *state;
    start_and_deliver(f);
    for (unsigned k = 2; k <= 3; k++) {
        assert_int_equal(f->sub.requeue(f->sub.ctx, f->t, "worker lost"), 0);
        assert_string_equal(f->t->worker, "");
        assert_int_equal(f->t->state, CJ_TASK_RECEIVED);
        assert_int_equal(g.delivers, k - 1);              /* never from inside the call */
        assert_int_equal(f->disp.idle(f->disp.ctx), 1);   /* the waiting task takes a place */
        run(f);
        assert_int_equal(g.delivers, k);
        char want[16];
        snprintf(want, sizeof want, "srv-%u", k);
        assert_one_ref(g.delivered, g.dlen, ME, want);
        assert_false(g_refs[0].dropped);                  /* the files stay */
    }
    assert_int_equal(f->sub.requeue(f->sub.ctx, f->t, "worker lost"), -1);
    /* the sessions then report it failed */
    f->sub.failed(f->sub.ctx, f->t, "worker lost while it held the task");
    assert_int_equal(g.fails, 1);
    run(f);
    assert_true(g_refs[0].dropped);
    assert_int_equal(cj_spool_stage_busy(f->st), 0);
}

/* No idle worker when the spool is ready: the task waits; the sessions' kick delivers it first. */
static void test_waits_for_worker(void **state)
{
    struct fx *f = *state;
    char why[256];
    g.idle = 1;
    assert_int_equal(f->disp.deliver(f->disp.ctx, f->t, f->task, f->tlen, why, sizeof why), 0);
    g.idle = 0;
    g_refs[0].fn(g_refs[0].ctx, &g_refs[0], true, NULL);
    run(f);
    assert_int_equal(g.delivers, 0);
    assert_int_equal(cj_spool_stage_busy(f->st), 1);
    g.idle = 1;
    assert_int_equal(f->disp.idle(f->disp.ctx), 0);
    f->sub.kick(f->sub.ctx);
    assert_int_equal(g.delivers, 1);
    assert_int_equal(g.kicks, 1);
}

/* A fetch that fails: the task is failed upstream with the reason; its spool dropped. */
static void test_fetch_failure(void **state)
{
    struct fx *f = *state;
    char why[256];
    g.idle = 1;
    assert_int_equal(f->disp.deliver(f->disp.ctx, f->t, f->task, f->tlen, why, sizeof why), 0);
    g_refs[0].fn(g_refs[0].ctx, &g_refs[0], false, "spool disk full: writing chunk_0.npz: No space left on device");
    run(f);
    assert_int_equal(g.delivers, 0);
    assert_int_equal(g.fails, 1);
    assert_non_null(strstr(g.fail_why, "spool disk full"));
    assert_non_null(strstr(g.fail_why, "11111111-2222-4333-8444-0000000000c9"));
    assert_true(g_refs[0].dropped);
    assert_int_equal(cj_spool_stage_busy(f->st), 0);
    /* a fetch that cannot start: deliver refuses at once, with the reason */
    g_fetch_refuses = true;
    why[0] = 0;
    assert_int_equal(f->disp.deliver(f->disp.ctx, f->t, f->task, f->tlen, why, sizeof why), -1);
    assert_non_null(strstr(why, "cannot start spooling"));
    run(f);
    assert_int_equal(cj_spool_stage_busy(f->st), 0);
}

/* The result: its refs spooled from the worker, served to one receiver, the
 * rewritten result submitted; the spool goes once the server accepted it and
 * pulled the result refs. */
static void test_result(void **state)
{
    struct fx *f = *state;
    start_and_deliver(f);
    size_t rlen;
    uint8_t *res = tu_read_vector("09_trainer_result_ready_flmodel.bin", &rlen);
    struct evbuffer *eb = evbuffer_new();
    evbuffer_add(eb, res, rlen);
    assert_int_equal(f->sub.submit(f->sub.ctx, f->t, eb, sess_done, NULL), 0);
    assert_int_equal(evbuffer_get_length(eb), 0);      /* contents taken */
    evbuffer_free(eb);
    assert_true(g_refs[0].dropped);                     /* the task's refs are not needed any more */
    assert_int_equal(g_nrefs, 2);
    char tag[64];
    snprintf(tag, sizeof tag, "%s.result", f->t->id);
    assert_string_equal(g_refs[1].tag, tag);
    assert_string_equal(g_refs[1].source, "site-1.job-7f3a.client_api_trainer_0");
    assert_int_equal(cj_spool_stage_busy(f->st), 1);
    g_refs[1].fn(g_refs[1].ctx, &g_refs[1], true, NULL);
    assert_int_equal(g.submits, 0);
    run(f);
    assert_int_equal(g.submits, 1);
    assert_one_ref(g.submitted, g.slen, ME, "srv-2");
    assert_int_equal(g_refs[1].num, 1);
    /* progress of the server's download extends the submit timeout */
    g_refs[1].bytes_served = 10;
    event_base_loopexit(f->base, &(struct timeval){1, 300000});
    event_base_dispatch(f->base);
    assert_true(g.progress >= 1);
    /* the server accepted it: the sessions hear ok; the spool stays until the pull finished */
    g.up_done(g.up_done_ctx, f->t, true, NULL);
    assert_int_equal(g.dones, 1);
    assert_int_equal(g.done_ok, 1);
    run(f);
    assert_false(g_refs[1].dropped);
    assert_int_equal(cj_spool_stage_busy(f->st), 1);
    g_refs[1].sfn(g_refs[1].sctx, &g_refs[1], CJ_DL_OUT_OK);
    run(f);
    assert_true(g_refs[1].dropped);
    assert_int_equal(cj_spool_stage_busy(f->st), 0);
    struct cj_spool_stage_stats ss;
    cj_spool_stage_get_stats(f->st, &ss);
    assert_int_equal(ss.in_progress, 0);
    assert_int_equal(ss.results_spooled, 1);
    free(res);
}

/* A result fetch that fails: done(false) to the sessions, failed upstream. */
static void test_result_fetch_failure(void **state)
{
    struct fx *f = *state;
    start_and_deliver(f);
    size_t rlen;
    uint8_t *res = tu_read_vector("09_trainer_result_ready_flmodel.bin", &rlen);
    struct evbuffer *eb = evbuffer_new();
    evbuffer_add(eb, res, rlen);
    assert_int_equal(f->sub.submit(f->sub.ctx, f->t, eb, sess_done, NULL), 0);
    evbuffer_free(eb);
    g_refs[1].fn(g_refs[1].ctx, &g_refs[1], false, "spool_max_bytes (1048576) reached");
    run(f);
    assert_int_equal(g.submits, 0);
    assert_int_equal(g.dones, 1);
    assert_int_equal(g.done_ok, 0);
    assert_int_equal(g.fails, 1);
    assert_non_null(strstr(g.fail_why, "spool_max_bytes"));
    assert_true(g_refs[1].dropped);
    free(res);
}

/* receiver_ids of the task header: identity mode for results. */
static void test_receivers(void **state)
{
    (void)state;
    /* {"receiver_ids": ["a.b", "c"]} */
    static const uint8_t h[] = {0x81, 0xac, 'r', 'e', 'c', 'e', 'i', 'v', 'e', 'r', '_', 'i', 'd', 's',
                                0x92, 0xa3, 'a', '.', 'b', 0xa1, 'c'};
    char ids[4][256];
    assert_int_equal(cj_spool_stage_receivers(h, sizeof h, ids, 4), 2);
    assert_string_equal(ids[0], "a.b");
    assert_string_equal(ids[1], "c");
    assert_int_equal(cj_spool_stage_receivers(h, sizeof h, ids, 1), -1);
    static const uint8_t none[] = {0x81, 0xac, 'r', 'e', 'c', 'e', 'i', 'v', 'e', 'r', '_', 'i', 'd', 's', 0xc0};
    assert_int_equal(cj_spool_stage_receivers(none, sizeof none, ids, 4), 0);
    assert_int_equal(cj_spool_stage_receivers(NULL, 0, ids, 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_deliver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requeue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waits_for_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_result, setup, teardown),
        cmocka_unit_test_setup_teardown(test_result_fetch_failure, setup, teardown),
        cmocka_unit_test(test_receivers),
    };
    return cmocka_run_group_tests_name("spoolstage", tests, NULL, NULL);
}
