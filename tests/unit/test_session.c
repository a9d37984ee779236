/* SPDX-License-Identifier: Apache-2.0 */
/* test_session.c — the relay's worker sessions (lib/fl/session.c): the relay's
 * stream endpoint and fake worker endpoints in one event loop, joined by an
 * in-memory io; a fake upstream loop records the submit ops. */
#include "testutil.h"

#include <math.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/dlmsg.h"
#include "fl/capi.h"
#include "fl/session.h"
#include "fl/task.h"
#include "payload/lobs.h"
#include "stream/stream.h"
#include "util/mp.h"
#include "wire/header.h"

#include "payload/splice.h"

#include "memnet.h"

#define RELAY "site-1.job-7f3a"
#define SITE "site-1"
#define JOB "job-7f3a"
#define W1 "site-1.job-7f3a.client_api_trainer_1"
#define W2 "site-1.job-7f3a.client_api_trainer_2"
#define TOKEN "q6Y0Zc3rXl2oZ5m8A9tK1vW4bN7sH0dJ3fL6pR9uE2g"   /* vector 20's proof */
#define AUTH_TOKEN "site-token-123"
#define AUTH_SIG "site-signature-456"
#define SERVER "server.job-7f3a"
#define NEP 4

enum { R = 0, WK = 1, WK2 = 2, SRV = 3 };
enum task_mode { T_ACCEPT, T_FAIL, T_HOLD };

struct fx {
    struct memnet net;                   /* first: RUN_UNTIL and the filter take a struct fx for one */
    bool drop_to_worker;                 /* the worker is gone: messages to it vanish */
    struct cj_task_table *tt;
    struct cj_fl_sessions *s;
    struct cj_fl_dispatch_ops d;
    struct cj_capi_msg *m;
    /* fake upstream */
    int submits, fails, kicks, progresses, drained, losts;
    char lost_fqcn[256], lost_why[300];
    struct cj_task *submit_t, *fail_t;
    char fail_why[1024];
    uint8_t *submit_payload;
    size_t submit_len;
    cj_fl_submit_done_fn done;
    void *done_ctx;
    /* worker side */
    enum task_mode mode;
    int task_readys, aborts, shutdowns;
    uint8_t *task_payload;
    size_t task_len;
    bool task_pass_through;
    struct cj_stream_reqctx held;
    char abort_reason[CJ_CAPI_REASON_BUF];
    bool shut_answer_live;
    /* replies to worker requests */
    bool got_reply;
    char rc[64];
    uint8_t *reply;
    size_t reply_len;
    /* shutdown callback */
    int shut_calls, shut_status;
    bool shut_live;
    char session_id[CJ_CAPI_ID_MAX + 1];
    /* the server's download service: source_failure notices received */
    int notices;
    uint8_t *notice;
    size_t notice_len;
    char notice_origin[256];
    int notice_errors;                   /* answer the first ones process_exception */
};

/* ---- in-memory io (memnet.h) ------------------------------------------------------------------ */

static enum memnet_act drop_to_gone_worker(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    struct fx *f = (struct fx *)n;
    bool to_worker = !strcmp(h->destination, W1) || !strcmp(h->destination, W2);
    return to_worker && f->drop_to_worker ? MEMNET_DROP : MEMNET_DELIVER;
}

static void pump(struct fx *f)
{
    RUN_UNTIL(f, false, 0.05);
}

/* ---- fake upstream (submit ops) ------------------------------------------------------------- */

static int up_submit(void *ctx, struct cj_task *t, struct evbuffer *result, cj_fl_submit_done_fn done, void *dctx)
{
    struct fx *f = ctx;
    f->submits++;
    f->submit_t = t;
    free(f->submit_payload);
    f->submit_len = evbuffer_get_length(result);
    f->submit_payload = malloc(f->submit_len + 1);
    evbuffer_remove(result, f->submit_payload, f->submit_len);
    f->done = done;
    f->done_ctx = dctx;
    return 0;
}

static void up_failed(void *ctx, struct cj_task *t, const char *why)
{
    struct fx *f = ctx;
    f->fails++;
    f->fail_t = t;
    snprintf(f->fail_why, sizeof f->fail_why, "%s", why);
    cj_task_fail(t, "%s", why);
}

/* The spool stage's requeue op: takes the task back (as spoolstage.c does) or refuses. */
static int g_requeue_rc;        /* what up_requeue answers */
static bool g_with_requeue;     /* for the next fx_new */
static int g_requeues;
static char g_requeue_why[512];

static int up_requeue(void *ctx, struct cj_task *t, const char *why)
{
    (void)ctx;
    g_requeues++;
    snprintf(g_requeue_why, sizeof g_requeue_why, "%s", why);
    if (g_requeue_rc) return g_requeue_rc;
    t->worker[0] = 0;
    cj_task_set_state(t, CJ_TASK_RECEIVED);
    return 0;
}

static void up_kick(void *ctx) { ((struct fx *)ctx)->kicks++; }
static void up_progress(void *ctx, struct cj_task *t) { ((struct fx *)ctx)->progresses++; }
static void on_drained(void *arg) { ((struct fx *)arg)->drained++; }

static void on_lost(void *arg, const char *fqcn, const char *why)
{
    struct fx *f = arg;
    f->losts++;
    snprintf(f->lost_fqcn, sizeof f->lost_fqcn, "%s", fqcn);
    snprintf(f->lost_why, sizeof f->lost_why, "%s", why);
}

static double g_launch_timeout;   /* for the next fx_new */

/* ---- the worker side ------------------------------------------------------------------------ */

static void worker_reply(struct fx *f, int from, const struct cj_stream_reqctx *rq, msgpack_sbuffer *sb)
{
    struct evbuffer *eb = evbuffer_new();
    evbuffer_add(eb, sb->data, sb->size);
    msgpack_sbuffer_destroy(sb);
    struct cj_stream_msg m = {.encoding = "fobs"};
    assert_int_equal(cj_stream_reply(f->net.ep[from], rq, NULL, &m, eb, NULL, NULL), 0);
}

static int w_task_ready(void *arg, struct cj_stream_blob *b)
{
    struct fx *f = arg;
    f->task_readys++;
    free(f->task_payload);
    f->task_len = evbuffer_get_length(b->data);
    f->task_payload = malloc(f->task_len);
    evbuffer_copyout(b->data, f->task_payload, f->task_len);
    f->task_pass_through = b->hdr->pass_through || cj_hdr_has(b->hdr, CJ_HK_PASS_THROUGH);
    struct cj_err e = {0};
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_TASK_READY, f->task_payload, f->task_len, f->m, &e), 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (f->mode == T_HOLD) {
        f->held = b->req;
        return 0;
    }
    if (f->mode == T_ACCEPT) assert_int_equal(cj_capi_encode_task_accepted(&sb, f->m->task_id, &e), 0);
    else assert_int_equal(cj_capi_encode_task_failed(&sb, f->m->task_id, "out of GPU memory", &e), 0);
    worker_reply(f, WK, &b->req, &sb);
    return 0;
}

/* The server's download service: records each source_failure notice. */
static int s_source_failure(void *arg, struct cj_stream_blob *b)
{
    struct fx *f = arg;
    f->notices++;
    free(f->notice);
    f->notice_len = evbuffer_get_length(b->data);
    f->notice = malloc(f->notice_len + 1);
    evbuffer_copyout(b->data, f->notice, f->notice_len);
    snprintf(f->notice_origin, sizeof f->notice_origin, "%s", b->origin);
    assert_string_equal(b->encoding, "fobs");
    bool fail = f->notice_errors > 0;
    if (fail) f->notice_errors--;
    struct cj_stream_msg m = {.encoding = "fobs"};
    assert_int_equal(cj_stream_reply(f->net.ep[SRV], &b->req, fail ? "process_exception" : NULL, &m, evbuffer_new(),
                                     NULL, NULL), 0);
    return 0;
}

static int w_abort(void *arg, struct cj_stream_blob *b)
{
    struct fx *f = arg;
    size_t n = evbuffer_get_length(b->data);
    struct cj_err e = {0};
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_ABORT, evbuffer_pullup(b->data, -1), n, f->m, &e), 0);
    snprintf(f->abort_reason, sizeof f->abort_reason, "%s", f->m->reason);
    f->aborts++;
    return 0;
}

static int w_shutdown(void *arg, struct cj_stream_blob *b)
{
    struct fx *f = arg;
    f->shutdowns++;
    size_t n = evbuffer_get_length(b->data);
    struct cj_err e = {0};
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_SHUTDOWN, evbuffer_pullup(b->data, -1), n, f->m, &e), 0);
    assert_string_equal(f->m->session_id, f->session_id);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_shutdown_reply(&sb, f->shut_answer_live, &e), 0);
    worker_reply(f, WK, &b->req, &sb);
    return 0;
}

static void on_wreply(void *arg, struct cj_stream_reply *r)
{
    struct fx *f = arg;
    f->got_reply = true;
    snprintf(f->rc, sizeof f->rc, "%s", r->return_code);
    free(f->reply);
    f->reply = NULL;
    f->reply_len = r->data ? evbuffer_get_length(r->data) : 0;
    if (f->reply_len) {
        f->reply = malloc(f->reply_len);
        evbuffer_copyout(r->data, f->reply, f->reply_len);
    }
}

/* Worker `from` sends request topic with the body in sb (consumed) and waits for
 * the reply; decodes it as the reply to `kind` into f->m when kind != NONE. */
static void wreq_hdrs(struct fx *f, int from, const char *topic, msgpack_sbuffer *sb, enum cj_capi_kind kind,
                      const struct cj_stream_hv *hdrs, size_t n_hdrs)
{
    struct evbuffer *eb = evbuffer_new();
    evbuffer_add(eb, sb->data, sb->size);
    msgpack_sbuffer_destroy(sb);
    struct cj_stream_msg m = {.encoding = "fobs", .hdrs = hdrs, .n_hdrs = n_hdrs};
    f->got_reply = false;
    assert_int_equal(cj_stream_request(f->net.ep[from], RELAY, CJ_CAPI_CHANNEL, topic, &m, eb, 5.0, on_wreply, f, NULL,
                                       NULL), 0);
    RUN_UNTIL(f, f->got_reply, 5.0);
    assert_true(f->got_reply);
    if (kind != CJ_CAPI_NONE) {
        struct cj_err e = {0};
        assert_string_equal(f->rc, "ok");
        if (cj_capi_decode_reply(kind, f->reply, f->reply_len, f->m, &e)) fail_msg("reply: %s", e.msg);
    }
}

static void wreq(struct fx *f, int from, const char *topic, msgpack_sbuffer *sb, enum cj_capi_kind kind)
{
    wreq_hdrs(f, from, topic, sb, kind, NULL, 0);
}

static void wsend(struct fx *f, int from, const char *topic, msgpack_sbuffer *sb)
{
    struct evbuffer *eb = evbuffer_new();
    evbuffer_add(eb, sb->data, sb->size);
    msgpack_sbuffer_destroy(sb);
    struct cj_stream_msg m = {.encoding = "fobs"};
    assert_int_equal(cj_stream_send(f->net.ep[from], RELAY, CJ_CAPI_CHANNEL, topic, &m, NULL, eb, NULL, NULL, NULL), 0);
    pump(f);
}

/* ---- fixture -------------------------------------------------------------------------------- */

static struct fx *fx_new(double hb_interval, double hb_timeout, bool secure)
{
    static const char *const names[NEP] = {RELAY, W1, W2, SERVER};
    struct fx *f = calloc(1, sizeof *f);
    memnet_init(&f->net, NEP, names, NULL);
    f->net.filter = drop_to_gone_worker;
    f->m = calloc(1, sizeof *f->m);
    for (int i = WK; i <= WK2; i++) {
        cj_stream_on(f->net.ep[i], CJ_CAPI_CHANNEL, CJ_CAPI_T_TASK_READY, w_task_ready, f);
        cj_stream_on(f->net.ep[i], CJ_CAPI_CHANNEL, CJ_CAPI_T_ABORT, w_abort, f);
        cj_stream_on(f->net.ep[i], CJ_CAPI_CHANNEL, CJ_CAPI_T_SHUTDOWN, w_shutdown, f);
    }
    cj_stream_on(f->net.ep[SRV], CJ_DL_CHANNEL, CJ_DL_TOPIC_SOURCE_FAILURE, s_source_failure, f);
    f->tt = cj_task_table_new();
    struct cj_fl_sessions_cfg cfg = {
        .site = SITE, .job_id = JOB,
        .heartbeat_interval = hb_interval, .heartbeat_timeout = hb_timeout,
        .secure_mode = secure, .auth_token = AUTH_TOKEN, .auth_token_signature = AUTH_SIG,
        .shutdown_timeout = 2.0,
        .drained = on_drained, .drained_arg = f,
        .lost = on_lost, .lost_arg = f,
        .launch_timeout = g_launch_timeout,
    };
    struct cj_fl_submit_ops ops = {f, up_submit, up_failed, up_kick, up_progress, g_with_requeue ? up_requeue : NULL};
    f->s = cj_fl_sessions_new(f->net.base, f->net.ep[R], &cfg, f->tt, &ops);
    assert_non_null(f->s);
    cj_fl_sessions_dispatch_ops(f->s, &f->d);
    return f;
}

static void fx_free(struct fx *f)
{
    cj_fl_sessions_free(f->s);
    memnet_fini(&f->net);
    cj_task_table_free(f->tt);
    free(f->submit_payload);
    free(f->task_payload);
    free(f->reply);
    free(f->notice);
    free(f->m);
    free(f);
}

/* ---- protocol steps ---------------------------------------------------------------------------- */

static void hello_vector(struct fx *f, int from)
{
    size_t n;
    uint8_t *v = tu_read_vector("20_capi_hello.bin", &n);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, (const char *)v, n);
    free(v);
    wreq(f, from, CJ_CAPI_T_HELLO, &sb, CJ_CAPI_HELLO);
}

/* A HELLO with vector 20's keys; each argument may replace one value. */
static void hello_with(struct fx *f, int from, const char *fqcn, const char *proof, int64_t version, const char *job,
                       const char *site, const char *rank)
{
    struct cj_capi_msg *m = calloc(1, sizeof *m);
    struct cj_err e = {0};
    m->kind = CJ_CAPI_HELLO;
    m->has = CJ_CAPI_F_TRAINER_FQCN | CJ_CAPI_F_PROOF | CJ_CAPI_F_PROTOCOL_VERSION | CJ_CAPI_F_JOB_ID |
             CJ_CAPI_F_SITE_NAME | CJ_CAPI_F_RANK;
    snprintf(m->trainer_fqcn, sizeof m->trainer_fqcn, "%s", fqcn);
    snprintf(m->proof, sizeof m->proof, "%s", proof);
    m->protocol_version.type = CJ_CAPI_V_INT;
    m->protocol_version.i = version;
    snprintf(m->job_id, sizeof m->job_id, "%s", job);
    snprintf(m->site_name, sizeof m->site_name, "%s", site);
    snprintf(m->rank, sizeof m->rank, "%s", rank);
    m->rank_is_str = true;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode(&sb, m, &e), 0);
    free(m);
    wreq(f, from, CJ_CAPI_T_HELLO, &sb, CJ_CAPI_HELLO);
}

static void session_ready_hdrs(struct fx *f, const char *sid, const struct cj_stream_hv *h, size_t nh)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_session_ready(&sb, sid, &e), 0);
    wreq_hdrs(f, WK, CJ_CAPI_T_SESSION_READY, &sb, CJ_CAPI_SESSION_READY, h, nh);
}

/* expect + hello (vector 20) + session_ready: a ready worker W1. */
static void connect_worker(struct fx *f)
{
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    hello_vector(f, WK);
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    snprintf(f->session_id, sizeof f->session_id, "%s", f->m->session_id);
    session_ready_hdrs(f, f->session_id, NULL, 0);
    assert_int_equal(f->m->kind, CJ_CAPI_SESSION_READY_REPLY);
    assert_int_equal(f->d.idle(f->d.ctx), 1);
}

static struct cj_task *new_task(struct fx *f, uint8_t **payload, size_t *len)
{
    char why[256];
    *payload = tu_read_vector("02_server_task_shareable_via_downloader.bin", len);
    struct cj_task *t = cj_task_add(f->tt, *payload, *len, why, sizeof why);
    if (!t) fail_msg("task: %s", why);
    return t;
}

static struct cj_task *deliver_task(struct fx *f)
{
    uint8_t *p;
    size_t n;
    char why[256];
    struct cj_task *t = new_task(f, &p, &n);
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), 0);
    free(p);
    RUN_UNTIL(f, f->task_readys > 0, 2.0);
    assert_int_equal(f->task_readys, 1);
    assert_string_equal(t->worker, W1);
    return t;
}

/* result_ready shaped like vector 09 with this session and task id; the payload
 * sent is returned (malloc'd) for comparison. */
static void result_ready(struct fx *f, const char *sid, const char *task_id, uint8_t **sent, size_t *sent_len)
{
    size_t n;
    uint8_t *v = tu_read_vector("09_trainer_result_ready_flmodel.bin", &n);
    struct cj_capi_msg *m = calloc(1, sizeof *m);
    struct cj_err e = {0};
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_RESULT_READY, v, n, m, &e), 0);
    struct cj_lobs_section main;
    assert_int_equal(cj_lobs_validate(v, n, &main, NULL, 0, NULL, &e), 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_result_ready(&sb, sid, task_id, m->body, m->body_len, &e), 0);
    msgpack_sbuffer_write(&sb, (const char *)v + main.total, n - main.total);   /* the datum sections */
    if (sent) {
        *sent_len = sb.size;
        *sent = malloc(sb.size);
        memcpy(*sent, sb.data, sb.size);
    }
    free(m);
    free(v);
    wreq(f, WK, CJ_CAPI_T_RESULT_READY, &sb, CJ_CAPI_RESULT_READY);
}

static void settled(struct fx *f, const char *task_id)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_settled(&sb, f->session_id, task_id, &e), 0);
    wreq(f, WK, CJ_CAPI_T_SETTLED, &sb, CJ_CAPI_SETTLED);
}

static void heartbeat(struct fx *f, const char *sid, bool live)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_heartbeat(&sb, sid, live, &e), 0);
    wreq(f, WK, CJ_CAPI_T_HEARTBEAT, &sb, CJ_CAPI_HEARTBEAT);
}

struct winfo {
    char state[32], task[64];
    pid_t pid;
    double age;
    uint64_t bytes;
    int n;
};

static void on_worker(void *arg, const struct cj_fl_worker_info *wi)
{
    struct winfo *w = arg;
    w->n++;
    snprintf(w->state, sizeof w->state, "%s", wi->state);
    snprintf(w->task, sizeof w->task, "%s", wi->task);
    w->pid = wi->pid;
    w->age = wi->heartbeat_age;
    w->bytes = wi->bytes;
}

static struct winfo worker_info(struct fx *f)
{
    struct winfo w = {0};
    cj_fl_sessions_workers(f->s, on_worker, &w);
    return w;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static bool is_hex32(const char *s)
{
    if (strlen(s) != 32) return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
    return true;
}

static void test_hello_accepted(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    cj_fl_sessions_set_pid(f->s, W1, 4242);
    hello_vector(f, WK);
    struct cj_capi_msg *m = f->m;
    assert_int_equal(m->kind, CJ_CAPI_HELLO_ACCEPTED);
    assert_true(is_hex32(m->session_id));
    assert_string_equal(m->job_id, JOB);
    assert_string_equal(m->site_name, SITE);
    assert_true(m->heartbeat_interval > 0 && m->heartbeat_interval < m->heartbeat_timeout);
    assert_true(m->has & CJ_CAPI_F_SECURE_MODE);
    assert_false(m->secure_mode);
    assert_false(m->has & CJ_CAPI_F_AUTH_TOKEN);
    char why[200];
    assert_int_equal(cj_capi_check_hello_accepted(m, false, why, sizeof why), 0);
    char sid[64];
    snprintf(sid, sizeof sid, "%s", m->session_id);
    struct winfo w = worker_info(f);
    assert_string_equal(w.state, "hello");
    assert_int_equal(w.pid, 4242);
    assert_true(w.age >= 0 && w.age < 1);
    /* not ready before session_ready: no task for it */
    assert_int_equal(f->d.idle(f->d.ctx), 0);
    /* a duplicate HELLO gets the same session id */
    hello_vector(f, WK);
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    assert_string_equal(f->m->session_id, sid);
    struct cj_fl_sessions_stats st;
    cj_fl_sessions_get_stats(f->s, &st);
    assert_int_equal(st.hellos_accepted, 1);
    fx_free(f);
}

static void expect_rejected(struct fx *f, const char *reason)
{
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_REJECTED);
    assert_string_equal(f->m->reason, reason);
}

static void test_hello_rejected(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    /* nobody expected yet */
    hello_vector(f, WK);
    expect_rejected(f, "no active trainer launch");
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    hello_with(f, WK, W1, "wrong-token-0000000000000000000000000000000", 1, JOB, SITE, "0");
    expect_rejected(f, "launch token mismatch");
    hello_with(f, WK, W2, TOKEN, 1, JOB, SITE, "0");
    expect_rejected(f, "unexpected trainer identity (origin='" W1 "', claimed='" W2 "')");
    hello_with(f, WK2, W1, TOKEN, 1, JOB, SITE, "0");   /* right claim, foreign origin */
    expect_rejected(f, "unexpected trainer identity (origin='" W2 "', claimed='" W1 "')");
    hello_with(f, WK, W1, TOKEN, 2, JOB, SITE, "0");
    expect_rejected(f, "unsupported protocol version 2 (expect 1)");
    hello_with(f, WK, W1, TOKEN, 1, "job-other", SITE, "0");
    expect_rejected(f, "job id mismatch: 'job-other'");
    hello_with(f, WK, W1, TOKEN, 1, JOB, "site-9", "0");
    expect_rejected(f, "site name mismatch: 'site-9'");
    hello_with(f, WK, W1, TOKEN, 1, JOB, SITE, "1");
    expect_rejected(f, "only rank 0 may connect (got rank '1')");
    struct cj_fl_sessions_stats st;
    cj_fl_sessions_get_stats(f->s, &st);
    assert_int_equal(st.hellos_rejected, 8);
    assert_int_equal(st.hellos_accepted, 0);
    /* after all that, the right one still gets in */
    hello_with(f, WK, W1, TOKEN, 1, JOB, SITE, "0");
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    /* a body that is not a map: cell rc invalid_request */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    static const uint8_t not_map[] = {0x64, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x07};
    msgpack_sbuffer_write(&sb, (const char *)not_map, sizeof not_map);
    wreq(f, WK, CJ_CAPI_T_HELLO, &sb, CJ_CAPI_NONE);
    assert_string_equal(f->rc, "invalid_request");
    /* closed: backend is closed */
    cj_fl_sessions_close(f->s);
    hello_vector(f, WK);
    expect_rejected(f, "backend is closed");
    fx_free(f);
}

static void test_any_fqcn_record(void **state)
{
    /* a launch_token_file record: any child FQCN presenting the token */
    struct fx *f = fx_new(5.0, 30.0, false);
    assert_int_equal(cj_fl_sessions_expect(f->s, NULL, TOKEN), 0);
    hello_with(f, WK2, W1, TOKEN, 1, JOB, SITE, "0");   /* claims another name than its origin */
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_REJECTED);
    hello_with(f, WK2, W2, TOKEN, 1, JOB, SITE, "0");
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    char sid[CJ_CAPI_ID_MAX + 1];
    snprintf(sid, sizeof sid, "%s", f->m->session_id);
    /* now bound to W2: W1 with the same token is a stranger */
    hello_with(f, WK, W1, TOKEN, 1, JOB, SITE, "0");
    expect_rejected(f, "no active trainer launch");
    /* W2's process goes: the token may be used again, by a new process of any name */
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W2, "exit code 0"), 0);
    hello_with(f, WK2, W2, TOKEN, 1, JOB, SITE, "0");
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    assert_string_not_equal(f->m->session_id, sid);
    assert_int_equal(cj_fl_sessions_workers(f->s, NULL, NULL), 1);   /* one record, bound again */
    fx_free(f);
}

static void test_session_ready(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    session_ready_hdrs(f, "0123456789abcdef0123456789abcdef", NULL, 0);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "no accepted trainer session");
    hello_vector(f, WK);
    snprintf(f->session_id, sizeof f->session_id, "%s", f->m->session_id);
    session_ready_hdrs(f, "0123456789abcdef0123456789abcdef", NULL, 0);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "stale or unknown session id");
    assert_int_equal(f->kicks, 0);
    session_ready_hdrs(f, f->session_id, NULL, 0);
    assert_int_equal(f->m->kind, CJ_CAPI_SESSION_READY_REPLY);
    assert_string_equal(f->m->session_id, f->session_id);
    assert_int_equal(f->d.idle(f->d.ctx), 1);
    assert_int_equal(f->kicks, 1);
    assert_string_equal(worker_info(f).state, "ready");
    fx_free(f);
}

static void test_secure_session(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, true);
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    hello_vector(f, WK);
    assert_int_equal(f->m->kind, CJ_CAPI_HELLO_ACCEPTED);
    assert_true(f->m->secure_mode);
    assert_string_equal(f->m->auth_token, AUTH_TOKEN);
    assert_string_equal(f->m->auth_token_signature, AUTH_SIG);
    char why[200];
    assert_int_equal(cj_capi_check_hello_accepted(f->m, true, why, sizeof why), 0);
    snprintf(f->session_id, sizeof f->session_id, "%s", f->m->session_id);
    session_ready_hdrs(f, f->session_id, NULL, 0);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "delegated site authentication headers are not installed");
    /* msgpack str values of the three headers */
    static const uint8_t site[] = "\xa6" "site-1", tok[] = "\xae" AUTH_TOKEN, sig[] = "\xb2" AUTH_SIG,
                         bad[] = "\xa3" "bad";
    struct cj_stream_hv wrong[] = {{"client_name", site, 7}, {"__token__", bad, 4}, {"__token_signature__", sig, 19}};
    session_ready_hdrs(f, f->session_id, wrong, 3);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    struct cj_stream_hv right[] = {{"client_name", site, 7}, {"__token__", tok, 15}, {"__token_signature__", sig, 19}};
    session_ready_hdrs(f, f->session_id, right, 3);
    assert_int_equal(f->m->kind, CJ_CAPI_SESSION_READY_REPLY);
    assert_int_equal(f->d.idle(f->d.ctx), 1);
    fx_free(f);
}

static void test_task_round(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    uint8_t *p;
    size_t n;
    char why[256];
    struct cj_task *t = new_task(f, &p, &n);
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), 0);
    assert_int_equal(t->state, CJ_TASK_DELIVERING);
    assert_int_equal(f->d.idle(f->d.ctx), 0);
    /* the same task again: refused (one task's refs never go to two workers) */
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), -1);
    assert_non_null(strstr(why, "already given"));
    RUN_UNTIL(f, f->task_readys > 0 && t->state == CJ_TASK_ACCEPTED, 2.0);
    assert_int_equal(f->task_readys, 1);
    assert_false(f->task_pass_through);
    /* what the worker got is exactly the task_ready splice */
    msgpack_sbuffer want;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&want);
    assert_int_equal(cj_splice_task_ready(p, n, f->session_id, t->id, JOB, SITE, 0, &want, NULL, &e), 0);
    assert_int_equal(f->task_len, want.size);
    assert_memory_equal(f->task_payload, want.data, want.size);
    msgpack_sbuffer_destroy(&want);
    free(p);
    assert_int_equal(t->state, CJ_TASK_ACCEPTED);
    struct winfo w = worker_info(f);
    assert_string_equal(w.state, "busy");
    assert_string_equal(w.task, t->id);
    assert_true(w.bytes > f->task_len);

    /* a result for a task never given */
    result_ready(f, f->session_id, "00000000000000000000000000000000", NULL, NULL);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_REJECTED);
    assert_string_equal(f->m->reason, "no current task matching task_id '00000000000000000000000000000000'");
    /* a stale session */
    result_ready(f, "ffffffffffffffffffffffffffffffff", t->id, NULL, NULL);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_REJECTED);
    assert_string_equal(f->m->reason, "stale or unknown session id");
    assert_int_equal(f->submits, 0);

    /* the result */
    uint8_t *sent;
    size_t sent_len;
    result_ready(f, f->session_id, t->id, &sent, &sent_len);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_ACCEPTED);
    assert_int_equal(f->submits, 1);
    assert_ptr_equal(f->submit_t, t);
    assert_int_equal(f->submit_len, sent_len);
    assert_memory_equal(f->submit_payload, sent, sent_len);
    free(sent);
    assert_int_equal(t->state, CJ_TASK_RESULT_IN);
    assert_int_equal(t->n_result_refs, 1);
    assert_int_equal(t->result_refs[0].dot, 3);
    assert_string_equal(t->result_refs[0].fqcn, "site-1.job-7f3a.client_api_trainer_0");
    assert_string_equal(t->result_refs[0].ref_id, "11111111-2222-4333-8444-000000000385");
    assert_int_equal(t->result_refs[0].items, 2);
    assert_true(cj_fl_sessions_in_barrier(f->s, W1));
    assert_string_equal(worker_info(f).state, "result");
    assert_int_equal(cj_fl_sessions_busy(f->s), 1);

    /* twice: refused */
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_REJECTED);
    assert_string_equal(f->m->reason, "a result was already accepted for this task");
    assert_int_equal(f->submits, 1);
    struct cj_fl_sessions_stats st;
    cj_fl_sessions_get_stats(f->s, &st);
    assert_int_equal(st.results_accepted, 1);
    assert_int_equal(st.results_rejected, 3);
    assert_int_equal(st.results_duplicate, 1);
    assert_int_equal(st.results_unknown_task, 1);

    /* progress while the server pulls */
    heartbeat(f, f->session_id, true);
    assert_int_equal(f->progresses, 1);

    /* the server answered; then the worker settles */
    int kicks = f->kicks;
    f->done(f->done_ctx, t, true, NULL);
    assert_int_equal(t->state, CJ_TASK_SUBMITTED);
    settled(f, "not-the-task");
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "no live result source matching task_id 'not-the-task'");
    settled(f, t->id);
    assert_int_equal(f->m->kind, CJ_CAPI_SETTLED_REPLY);
    assert_string_equal(f->m->task_id, t->id);
    assert_int_equal(t->state, CJ_TASK_DONE);
    assert_int_equal(t->result_refs[0].state, CJ_REF_COMPLETED);
    assert_int_equal(f->kicks, kicks + 1);
    assert_false(cj_fl_sessions_in_barrier(f->s, W1));
    assert_int_equal(f->d.idle(f->d.ctx), 1);
    assert_int_equal(cj_fl_sessions_busy(f->s), 0);
    /* settled twice: no live source any more */
    settled(f, t->id);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    /* a late result for the finished task */
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_REJECTED);
    assert_non_null(strstr(f->m->reason, "no current task matching task_id"));
    assert_int_equal(f->fails, 0);
    fx_free(f);
}

static void test_settle_before_answer(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    f->mode = T_HOLD;   /* no task_accepted: the result counts as acceptance */
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_ACCEPTED);
    settled(f, t->id);
    assert_int_equal(f->m->kind, CJ_CAPI_SETTLED_REPLY);
    assert_int_equal(t->state, CJ_TASK_RESULT_IN);   /* the server has not answered yet */
    assert_int_equal(f->d.idle(f->d.ctx), 1);
    f->done(f->done_ctx, t, true, NULL);
    assert_int_equal(t->state, CJ_TASK_DONE);
    /* the held task_accepted reply arrives late: ignored (its request was dropped) */
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_task_accepted(&sb, t->id, &e), 0);
    worker_reply(f, WK, &f->held, &sb);
    pump(f);
    assert_int_equal(t->state, CJ_TASK_DONE);
    assert_int_equal(f->fails, 0);
    fx_free(f);
}

static void test_bad_result_envelope(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    /* result is a map but not a Shareable */
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    static const uint8_t plain_map[] = {0x81, 0xa1, 'a', 0x01};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_result_ready(&sb, f->session_id, t->id, plain_map, sizeof plain_map, &e), 0);
    wreq(f, WK, CJ_CAPI_T_RESULT_READY, &sb, CJ_CAPI_RESULT_READY);
    assert_int_equal(f->m->kind, CJ_CAPI_RESULT_REJECTED);
    assert_string_equal(f->m->reason, "invalid result envelope: Shareable result required");
    assert_int_equal(f->submits, 0);
    fx_free(f);
}

static void test_task_failed(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    f->mode = T_FAIL;
    struct cj_task *t = deliver_task(f);
    RUN_UNTIL(f, f->fails > 0, 2.0);
    assert_int_equal(f->fails, 1);
    assert_ptr_equal(f->fail_t, t);
    assert_non_null(strstr(f->fail_why, "out of GPU memory"));
    assert_int_equal(t->state, CJ_TASK_FAILED);
    assert_int_equal(f->d.idle(f->d.ctx), 1);   /* the worker is free again */
    assert_true(f->kicks >= 2);
    fx_free(f);
}

static void test_heartbeat(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    heartbeat(f, f->session_id, false);
    assert_int_equal(f->m->kind, CJ_CAPI_HEARTBEAT_REPLY);
    assert_string_equal(f->m->session_id, f->session_id);
    heartbeat(f, "0123456789abcdef0123456789abcdef", false);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "stale or unknown session id");
    assert_int_equal(f->progresses, 0);
    struct cj_fl_sessions_stats st;
    cj_fl_sessions_get_stats(f->s, &st);
    assert_int_equal(st.heartbeats, 1);
    fx_free(f);
}

static void test_silence_lost(void **state)
{
    struct fx *f = fx_new(0.1, 0.5, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    RUN_UNTIL(f, t->state == CJ_TASK_ACCEPTED, 1.0);
    /* heartbeats keep it alive */
    for (int i = 0; i < 4; i++) {
        RUN_UNTIL(f, false, 0.1);
        heartbeat(f, f->session_id, false);
        assert_int_equal(f->m->kind, CJ_CAPI_HEARTBEAT_REPLY);
    }
    assert_int_equal(f->fails, 0);
    /* then silence */
    double t0 = memnet_now();
    RUN_UNTIL(f, f->fails > 0, 2.0);
    assert_int_equal(f->fails, 1);
    assert_true(memnet_now() - t0 >= 0.4);
    assert_ptr_equal(f->fail_t, t);
    assert_non_null(strstr(f->fail_why, "lost"));
    assert_int_equal(t->state, CJ_TASK_FAILED);
    assert_string_equal(worker_info(f).state, "lost");
    assert_int_equal(f->d.idle(f->d.ctx), 0);
    RUN_UNTIL(f, f->aborts > 0, 1.0);
    assert_int_equal(f->aborts, 1);   /* abort sent while the link is up */
    RUN_UNTIL(f, f->losts > 0, 1.0);   /* the owner is told, to stop the process */
    assert_int_equal(f->losts, 1);
    assert_string_equal(f->lost_fqcn, W1);
    assert_non_null(strstr(f->lost_why, "heartbeat_timeout"));
    /* a lost worker's messages are refused */
    heartbeat(f, f->session_id, false);
    assert_int_equal(f->m->kind, CJ_CAPI_ERROR);
    assert_string_equal(f->m->reason, "no active trainer session");
    /* its process exits: the record goes */
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "exit code 1"), 0);
    assert_int_equal(cj_fl_sessions_workers(f->s, NULL, NULL), 0);
    fx_free(f);
}

static void test_launch_timeout(void **state)
{
    g_launch_timeout = 0.3;
    struct fx *f = fx_new(5.0, 30.0, false);
    g_launch_timeout = 0;
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    RUN_UNTIL(f, false, 0.15);
    assert_int_equal(cj_fl_sessions_expect(f->s, W2, TOKEN), 0);
    hello_with(f, WK2, W2, TOKEN, 1, JOB, SITE, "0");
    snprintf(f->session_id, sizeof f->session_id, "%s", f->m->session_id);
    RUN_UNTIL(f, f->losts > 0, 1.0);
    assert_int_equal(f->losts, 1);
    assert_string_equal(f->lost_fqcn, W1);
    assert_string_equal(f->lost_why, "no HELLO within launch_timeout (0.3 s)");
    RUN_UNTIL(f, f->losts > 1, 1.0);   /* W2 said hello but never session_ready */
    assert_int_equal(f->losts, 2);
    assert_string_equal(f->lost_fqcn, W2);
    assert_string_equal(f->lost_why, "no SESSION_READY within launch_timeout (0.3 s)");
    /* a relaunch under the same name replaces the lost record */
    assert_int_equal(cj_fl_sessions_expect(f->s, W1, TOKEN), 0);
    assert_int_equal(cj_fl_sessions_workers(f->s, NULL, NULL), 2);
    fx_free(f);
}

static void test_worker_exited_during_task(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    f->mode = T_HOLD;
    f->drop_to_worker = true;   /* it dies while downloading */
    uint8_t *p;
    size_t n;
    char why[256];
    struct cj_task *t = new_task(f, &p, &n);
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), 0);
    free(p);
    pump(f);
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 1);
    assert_int_equal(f->fails, 1);
    assert_ptr_equal(f->fail_t, t);
    assert_non_null(strstr(f->fail_why, "process exited"));
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "again"), -1);
    assert_int_equal(f->d.idle(f->d.ctx), 0);
    /* no worker left: the next task cannot be delivered (the caller reports it) */
    uint8_t *p2;
    size_t n2;
    struct cj_task *t2 = new_task(f, &p2, &n2);
    assert_int_equal(f->d.deliver(f->d.ctx, t2, p2, n2, why, sizeof why), -1);
    assert_string_equal(why, "no idle worker");
    free(p2);
    fx_free(f);
}

/* Spool mode: a worker lost holding a task hands it to the requeue op instead
 * of failing it, and the same task can then be delivered to the next worker. */
static void test_worker_exited_requeue(void **state)
{
    g_with_requeue = true;
    g_requeue_rc = 0;
    g_requeues = 0;
    struct fx *f = fx_new(5.0, 30.0, false);
    g_with_requeue = false;
    connect_worker(f);
    f->mode = T_HOLD;
    f->drop_to_worker = true;
    uint8_t *p;
    size_t n;
    char why[256];
    struct cj_task *t = new_task(f, &p, &n);
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), 0);
    pump(f);
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 1);
    assert_int_equal(g_requeues, 1);
    assert_non_null(strstr(g_requeue_why, "process exited"));
    assert_int_equal(f->fails, 0);
    assert_int_equal(t->state, CJ_TASK_RECEIVED);
    /* the relaunched worker gets the same task: the second-delivery guard lets it through */
    f->drop_to_worker = false;
    f->task_readys = 0;
    connect_worker(f);
    assert_int_equal(f->d.deliver(f->d.ctx, t, p, n, why, sizeof why), 0);
    RUN_UNTIL(f, f->task_readys > 0, 2.0);
    assert_int_equal(f->task_readys, 1);
    assert_string_equal(t->worker, W1);
    /* a requeue that is refused (deliveries used up): reported failed as before */
    g_requeue_rc = -1;
    f->drop_to_worker = true;
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 1);
    assert_int_equal(g_requeues, 2);
    assert_int_equal(f->fails, 1);
    assert_ptr_equal(f->fail_t, t);
    free(p);
    fx_free(f);
}

static void test_barrier_death(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_true(cj_fl_sessions_in_barrier(f->s, W1));
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 2);
    assert_int_equal(f->fails, 0);   /* the submission in flight decides */
    assert_int_equal(t->result_refs[0].state, CJ_REF_FAILED);
    /* R13 / doc/protocol/download.md §7: the result receiver (server.<job>: the task has no
     * receiver_ids) is told that the worker's result refs are gone.  The first
     * attempt is answered process_exception: retried after 0.25 s. */
    assert_int_equal(f->notices, 0);   /* sent from the loop, not inside worker_exited */
    f->notice_errors = 1;
    RUN_UNTIL(f, f->notices >= 2, 3.0);
    pump(f);
    assert_int_equal(f->notices, 2);
    assert_string_equal(f->notice_origin, RELAY);   /* the worker's FQCN parent */
    struct cj_dl_source_failure *sf = calloc(1, sizeof *sf);
    struct cj_err e = {0};
    if (cj_dl_decode_source_failure(f->notice, f->notice_len, sf, &e)) fail_msg("notice: %s", e.msg);
    assert_string_equal(sf->source_fqcn, W1);
    assert_int_equal(sf->n_ref_ids, 1);
    assert_string_equal(sf->ref_ids[0], "11111111-2222-4333-8444-000000000385");
    assert_true(sf->tuple_form);
    assert_non_null(strstr(sf->reason, W1));
    assert_non_null(strstr(sf->reason, "killed by signal 9"));
    free(sf);
    /* delivered: nothing more is sent */
    RUN_UNTIL(f, false, 1.5);
    assert_int_equal(f->notices, 2);
    fx_free(f);
}

/* On the 2.8 wire (FLARE 2.7.2 / 2.8.x receivers have no source_failure handler;
 * doc/protocol/download.md §10) no notice is sent, and the log says so. */
static void test_barrier_death_wire28(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    cj_stream_set_wire(f->net.ep[R], CJ_STREAM_WIRE_2_8);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    tu_logcap_begin();
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 2);
    RUN_UNTIL(f, false, 0.5);
    char *log = tu_logcap_end();
    assert_int_equal(f->notices, 0);
    assert_int_equal(t->result_refs[0].state, CJ_REF_FAILED);
    assert_non_null(strstr(log, "FLARE 2.8 receivers take no source_failure notice"));
    free(log);
    fx_free(f);
}

/* A notice nobody answers (the server unreachable): 4 attempts at most, then
 * given up; freeing the sessions with a notice under way is clean. */
static void test_barrier_death_notice_retries(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 2);
    f->notice_errors = 100;
    RUN_UNTIL(f, false, 3.5);   /* attempts at 0, 0.25, 0.75, 1.75 s */
    assert_int_equal(f->notices, 4);
    fx_free(f);
}

/* Freeing the sessions while a notice waits for its retry: cancelled, no callback. */
static void test_barrier_death_notice_free(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    assert_int_equal(cj_fl_sessions_worker_exited(f->s, W1, "killed by signal 9"), 2);
    f->notice_errors = 100;
    RUN_UNTIL(f, f->notices >= 1, 2.0);
    assert_int_equal(f->notices, 1);
    fx_free(f);   /* ASan build: no leak, no use after free */
}

struct metrics {
    int n;
    char names[8][64], values[8][64];
};

static void on_metric(void *arg, const char *worker, const char *name, const char *value)
{
    struct metrics *m = arg;
    assert_string_equal(worker, W1);
    if (m->n < 8) {
        snprintf(m->names[m->n], 64, "%s", name);
        snprintf(m->values[m->n], 64, "%s", value);
    }
    m->n++;
}

static const char *metric(const struct metrics *m, const char *name)
{
    for (int i = 0; i < m->n && i < 8; i++)
        if (!strcmp(m->names[i], name)) return m->values[i];
    return NULL;
}

static void test_log_metrics(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    /* vector 28's shape with this session */
    struct cj_capi_value v = {.type = CJ_CAPI_V_FLOAT, .f = 0.25};
    struct cj_capi_extra step = {.name = "global_step", .v = {.type = CJ_CAPI_V_INT, .i = 10}};
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_log(&sb, f->session_id, "train_loss", &v, "SCALAR", &step, 1, &e), 0);
    wsend(f, WK, CJ_CAPI_T_LOG, &sb);
    v.f = 0.125;   /* the latest value wins */
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_log(&sb, f->session_id, "train_loss", &v, "SCALAR", &step, 1, &e), 0);
    wsend(f, WK, CJ_CAPI_T_LOG, &sb);
    /* a METRICS map: flattened as group.name */
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    size_t hdr;
    assert_int_equal(cj_lobs_begin_main(&sb, &hdr, &e), 0);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str_with_body(&pk, "session_id", 10);
    msgpack_pack_str_with_body(&pk, f->session_id, strlen(f->session_id));
    msgpack_pack_str_with_body(&pk, "key", 3);
    msgpack_pack_str_with_body(&pk, "val", 3);
    msgpack_pack_str_with_body(&pk, "value", 5);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "acc", 3);
    msgpack_pack_double(&pk, 0.9);
    msgpack_pack_str_with_body(&pk, "n", 1);
    msgpack_pack_int(&pk, 3);
    msgpack_pack_str_with_body(&pk, "data_type", 9);
    msgpack_pack_str_with_body(&pk, "METRICS", 7);
    cj_lobs_end_main(&sb, hdr);
    wsend(f, WK, CJ_CAPI_T_LOG, &sb);
    /* a stale session: dropped */
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode_log(&sb, "ffffffffffffffffffffffffffffffff", "evil", &v, "SCALAR", NULL, 0, &e), 0);
    wsend(f, WK, CJ_CAPI_T_LOG, &sb);

    struct metrics m = {0};
    assert_int_equal(cj_fl_sessions_metrics(f->s, on_metric, &m), 3);
    assert_string_equal(metric(&m, "train_loss"), "0.125");
    assert_string_equal(metric(&m, "val.acc"), "0.9");
    assert_string_equal(metric(&m, "val.n"), "3");
    assert_null(metric(&m, "evil"));
    struct cj_fl_sessions_stats st;
    cj_fl_sessions_get_stats(f->s, &st);
    assert_int_equal(st.logs, 3);
    assert_int_equal(st.logs_dropped, 1);
    fx_free(f);
}

static void on_shut(void *arg, const char *fqcn, int status, bool live)
{
    struct fx *f = arg;
    assert_string_equal(fqcn, W1);
    f->shut_calls++;
    f->shut_status = status;
    f->shut_live = live;
}

static void test_shutdown(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    assert_int_equal(cj_fl_sessions_shutdown(f->s, W1, NULL, on_shut, f), -1);   /* unknown */
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    f->done(f->done_ctx, t, true, NULL);
    /* still serving: the worker says so */
    f->shut_answer_live = true;
    assert_int_equal(cj_fl_sessions_shutdown(f->s, W1, "end of run", on_shut, f), 0);
    RUN_UNTIL(f, f->shut_calls > 0, 2.0);
    assert_int_equal(f->shut_calls, 1);
    assert_int_equal(f->shut_status, 0);
    assert_true(f->shut_live);
    assert_true(cj_fl_sessions_in_barrier(f->s, W1));
    /* re-probe: settled by now */
    f->shut_answer_live = false;
    assert_int_equal(cj_fl_sessions_shutdown(f->s, W1, NULL, on_shut, f), 0);
    RUN_UNTIL(f, f->shut_calls > 1, 2.0);
    assert_int_equal(f->shut_status, 0);
    assert_false(f->shut_live);
    assert_false(cj_fl_sessions_in_barrier(f->s, W1));
    assert_int_equal(t->state, CJ_TASK_DONE);
    assert_int_equal(f->shutdowns, 2);
    /* a worker that never answers: status -1 after the timeout (2 s here) is
     * long for a unit test; forgetting the worker reports -1 from the loop */
    f->drop_to_worker = true;
    assert_int_equal(cj_fl_sessions_shutdown(f->s, W1, NULL, on_shut, f), 0);
    cj_fl_sessions_worker_exited(f->s, W1, "exit code 0");
    assert_int_equal(f->shut_calls, 2);   /* not from inside the call */
    RUN_UNTIL(f, f->shut_calls > 2, 1.0);
    assert_int_equal(f->shut_calls, 3);
    assert_int_equal(f->shut_status, -1);
    fx_free(f);
}

static void test_end_run_drains(void **state)
{
    struct fx *f = fx_new(5.0, 30.0, false);
    connect_worker(f);
    struct cj_task *t = deliver_task(f);
    f->d.end_run(f->d.ctx);
    assert_int_equal(f->d.idle(f->d.ctx), 0);
    pump(f);
    assert_int_equal(f->drained, 0);
    result_ready(f, f->session_id, t->id, NULL, NULL);
    f->done(f->done_ctx, t, true, NULL);
    int kicks = f->kicks;
    settled(f, t->id);
    RUN_UNTIL(f, f->drained > 0, 1.0);
    assert_int_equal(f->drained, 1);
    assert_int_equal(f->kicks, kicks);   /* no polling after the end of the run */
    uint8_t *p;
    size_t n;
    char why[256];
    struct cj_task *t2 = new_task(f, &p, &n);
    assert_int_equal(f->d.deliver(f->d.ctx, t2, p, n, why, sizeof why), -1);
    free(p);
    fx_free(f);
}

static void test_bad_cfg(void **state)
{
    struct event_base *base = event_base_new();
    struct cj_stream_io io = {.send = memnet_send};   /* never called: nothing is sent */
    struct cj_stream_ep *ep = cj_stream_new(base, RELAY, &io, NULL);
    struct cj_task_table *tt = cj_task_table_new();
    struct cj_fl_sessions_cfg cfg = {.site = SITE, .job_id = JOB, .heartbeat_interval = 5, .heartbeat_timeout = 5};
    assert_null(cj_fl_sessions_new(base, ep, &cfg, tt, NULL));   /* timeout not > interval */
    cfg.heartbeat_timeout = 0;                                    /* no lease: fine */
    struct cj_fl_sessions *s = cj_fl_sessions_new(base, ep, &cfg, tt, NULL);
    assert_non_null(s);
    cj_fl_sessions_free(s);
    cfg.secure_mode = true;
    cfg.auth_token = "NA";
    cfg.auth_token_signature = "sig";
    assert_null(cj_fl_sessions_new(base, ep, &cfg, tt, NULL));
    cj_task_table_free(tt);
    cj_stream_free(ep);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_accepted),
        cmocka_unit_test(test_hello_rejected),
        cmocka_unit_test(test_any_fqcn_record),
        cmocka_unit_test(test_session_ready),
        cmocka_unit_test(test_secure_session),
        cmocka_unit_test(test_task_round),
        cmocka_unit_test(test_settle_before_answer),
        cmocka_unit_test(test_bad_result_envelope),
        cmocka_unit_test(test_task_failed),
        cmocka_unit_test(test_heartbeat),
        cmocka_unit_test(test_silence_lost),
        cmocka_unit_test(test_launch_timeout),
        cmocka_unit_test(test_worker_exited_during_task),
        cmocka_unit_test(test_worker_exited_requeue),
        cmocka_unit_test(test_barrier_death),
        cmocka_unit_test(test_barrier_death_wire28),
        cmocka_unit_test(test_barrier_death_notice_retries),
        cmocka_unit_test(test_barrier_death_notice_free),
        cmocka_unit_test(test_log_metrics),
        cmocka_unit_test(test_shutdown),
        cmocka_unit_test(test_end_run_drains),
        cmocka_unit_test(test_bad_cfg),
    };
    return cmocka_run_group_tests_name("session", tests, NULL, NULL);
}
