/* SPDX-License-Identifier: Apache-2.0 */
/* test_upstream.c — the FL loop toward the server: a relay endpoint
 * (site-1.job-7f3a) and a scripted fake server job cell (server.job-7f3a) in one
 * event loop, joined by an in-memory io; a fake dispatch on the worker side.
 * Timings are scaled down (tenths of seconds) so the whole file runs in a few
 * seconds.  The job is named job-7f3a so that the payloads can be compared
 * byte for byte with vectors 13, 14 and 15. */
#include "testutil.h"
#include "fl/upstream.h"
#include "fl/flmsg.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "wire/header.h"

#include "memnet.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <msgpack.h>

#define RELAY 0
#define SERVER 1
#define SITE "site-1"
#define JOB "job-7f3a"
#define SERVER_FQCN "server.job-7f3a"
#define TASK_ID "9b2c0c1e-task"
#define REF_C9 "11111111-2222-4333-8444-0000000000c9"
#define ROOT_D00D "11111111-2222-4333-8444-00000000d00d"
#define TOKEN "tok-123"
#define SIGNATURE "sig-456"
#define SSID "ssid-789"
#define PROJECT "proj-x"

/* ---- the in-memory io (memnet.h, without faults) ------------------------------------------------ */

static struct memnet *net_new(void)
{
    static const char *const names[2] = { SITE "." JOB, SERVER_FQCN };
    return memnet_new(2, names, NULL);
}

/* ---- header inspection ---------------------------------------------------------------------------------- */

static bool hdr_str(const struct cj_hdr *h, const char *key, char *out, size_t outsz)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        if (!mp_str_eq(e.key, e.key_len, key)) continue;
        struct mp_cur c;
        const uint8_t *p;
        uint32_t n;
        mp_cur_init(&c, e.val.p, e.val.len);
        if (mp_read_str(&c, &p, &n, NULL) || n >= outsz) return false;
        memcpy(out, p, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

static bool hdr_is(const struct cj_hdr *h, const char *key, const char *val)
{
    char buf[256];
    return hdr_str(h, key, buf, sizeof buf) && strcmp(buf, val) == 0;
}

static bool has_auth(const struct cj_hdr *h)
{
    return hdr_is(h, "client_name", SITE) && hdr_is(h, "ssid", SSID) && hdr_is(h, "__token__", TOKEN) &&
           hdr_is(h, "__token_signature__", SIGNATURE);
}

/* ---- payloads ----------------------------------------------------------------------------------------------- */

static uint8_t *copy_ev(struct evbuffer *b, size_t *len)
{
    *len = b ? evbuffer_get_length(b) : 0;
    uint8_t *p = malloc(*len ? *len : 1);
    if (*len) evbuffer_copyout(b, p, *len);
    return p;
}

static struct evbuffer *ev_of(const void *p, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, p, len);
    return b;
}

static struct evbuffer *ev_vector(const char *name)
{
    size_t len;
    uint8_t *p = tu_read_vector(name, &len);
    struct evbuffer *b = ev_of(p, len);
    free(p);
    return b;
}

/* Vector 16 with __wait_time__ 1.0 replaced by `wait`. */
static struct evbuffer *try_again_reply(double wait)
{
    size_t len;
    uint8_t *p = tu_read_vector("16_get_task_reply_try_again.bin", &len);
    static const uint8_t one[9] = { 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0 };
    uint8_t *at = memmem(p, len, one, sizeof one);
    assert_non_null(at);
    union { double d; uint64_t u; } v = { .d = wait };
    for (int i = 0; i < 8; i++) at[1 + i] = (uint8_t)(v.u >> (56 - 8 * i));
    struct evbuffer *b = ev_of(p, len);
    free(p);
    return b;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* Shareable{__headers__: {__task_id__: "", task_name: name[, __wait_time__: wait]
 * [, min_get_task_timeout: mgt]}} as LOBS (wait / mgt < 0: absent). */
static struct evbuffer *special_reply(const char *name, double wait, double mgt)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pack_str(&pk, "__fobs_type__");
    pack_str(&pk, "nvflare.apis.shareable.Shareable");
    pack_str(&pk, "__fobs_data__");
    msgpack_pack_map(&pk, 1);
    pack_str(&pk, "__headers__");
    msgpack_pack_map(&pk, 2 + (wait >= 0) + (mgt >= 0));
    if (wait >= 0) {
        pack_str(&pk, "__wait_time__");
        msgpack_pack_double(&pk, wait);
    }
    pack_str(&pk, "__task_id__");
    pack_str(&pk, "");
    pack_str(&pk, "task_name");
    pack_str(&pk, name);
    if (mgt >= 0) {
        pack_str(&pk, "min_get_task_timeout");
        msgpack_pack_int(&pk, (int)mgt);   /* an int: accepted as well as a float */
    }
    pack_str(&pk, "__fobs_dc__");
    pack_str(&pk, "nvflare.fuel.utils.fobs.decomposer.DictDecomposer");
    uint8_t hdr[10] = { 0x64, 0 };
    for (int i = 0; i < 8; i++) hdr[2 + i] = (uint8_t)((uint64_t)sb.size >> (56 - 8 * i));
    struct evbuffer *b = ev_of(hdr, sizeof hdr);
    evbuffer_add(b, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return b;
}

static struct evbuffer *aux_rc_reply(const char *rc)
{
    struct evbuffer *b = evbuffer_new();
    char why[256];
    assert_int_equal(cj_flmsg_aux_reply(b, NULL, 0, rc, "server", JOB, why, sizeof why), 0);
    return b;
}

static const uint8_t EMPTY_OK[] = { 0x64, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xa0 };

/* ---- the fake server job cell ------------------------------------------------------------------------------ */

#define MAXREC 32

/* Scripts: one action per request, the last one repeating.
 *   sync / check:  "OK", "TASK_UNKNOWN", "COMMUNICATION_ERROR" (__rc__), "!<cell rc>", "silent"
 *   get_task:      "try", "trymin" (with min_get_task_timeout 5), "task", "end", "!<cell rc>", "silent"
 *   submit:        "ok", "!<cell rc>", "silent" */
struct srv {
    struct memnet *n;
    const char *sync_script[8], *gt_script[8], *chk_script[8], *sub_script[8];
    int sync_n, hb_n, gt_n, chk_n, sub_n;
    bool hb_bad;                         /* a heartbeat had no sm__ri (it asks for an answer) or no optional flag */
    double gt_time[MAXREC];
    double gt_backoff[MAXREC];           /* the relay's poll back-off when get_task i arrived */
    struct cj_fl_up **up;                /* the relay under test, for gt_backoff */
    uint8_t *gt_req[MAXREC];
    size_t gt_len[MAXREC];
    bool gt_hdr_ok[MAXREC];              /* project_name, auth, optional */
    uint8_t *chk_req[MAXREC];
    size_t chk_len[MAXREC];
    uint8_t *sub_pl[MAXREC];
    size_t sub_len[MAXREC];
    char sub_root[MAXREC][64];
    bool sub_hdr_ok[MAXREC];
    double try_wait;
};

static const char *script_at(const char *const *s, int i)
{
    int last = 0;
    while (last + 1 < 8 && s[last + 1]) last++;
    return s[i < last ? i : last];
}

static void reply(struct srv *s, struct cj_stream_blob *b, const char *rc, struct evbuffer *out)
{
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (!out) out = evbuffer_new();
    assert_int_equal(cj_stream_reply(s->n->ep[SERVER], &b->req, rc, &m, out, NULL, NULL), 0);
}

/* "OK"-style scripts for aux requests. */
static void aux_act(struct srv *s, struct cj_stream_blob *b, const char *act)
{
    if (strcmp(act, "silent") == 0) return;
    if (act[0] == '!') reply(s, b, act + 1, NULL);
    else reply(s, b, NULL, aux_rc_reply(act));
}

static int on_sync(void *arg, struct cj_stream_blob *b)
{
    struct srv *s = arg;
    assert_true(b->req.has_ri);
    aux_act(s, b, script_at(s->sync_script, s->sync_n++));
    return 0;
}

static int on_heartbeat(void *arg, struct cj_stream_blob *b)
{
    struct srv *s = arg;
    s->hb_n++;
    if (!b->req.has_ri || !b->hdr->optional || !has_auth(b->hdr)) s->hb_bad = true;
    return 0;
}

static int on_get_task(void *arg, struct cj_stream_blob *b)
{
    struct srv *s = arg;
    int i = s->gt_n++;
    assert_true(i < MAXREC);
    s->gt_time[i] = cj_now();
    if (s->up && *s->up) {
        struct cj_fl_up_status st;
        cj_fl_up_get_status(*s->up, &st);
        s->gt_backoff[i] = st.backoff;
    }
    s->gt_req[i] = copy_ev(b->data, &s->gt_len[i]);
    s->gt_hdr_ok[i] = hdr_is(b->hdr, "project_name", PROJECT) && has_auth(b->hdr) && b->hdr->optional &&
                      b->hdr->sm_op && strcmp(b->encoding, "fobs") == 0;
    const char *act = script_at(s->gt_script, i);
    if (strcmp(act, "silent") == 0) return 0;
    if (act[0] == '!') reply(s, b, act + 1, NULL);
    else if (strcmp(act, "try") == 0) reply(s, b, NULL, try_again_reply(s->try_wait));
    else if (strcmp(act, "task") == 0) reply(s, b, NULL, ev_vector("02_server_task_shareable_via_downloader.bin"));
    else if (strcmp(act, "end") == 0) reply(s, b, NULL, special_reply("__end_run__", -1, -1));
    else if (strcmp(act, "trymin") == 0) reply(s, b, NULL, special_reply("__try_again__", 0.05, 5));
    else fail_msg("bad get_task script %s", act);
    return 0;
}

static int on_task_check(void *arg, struct cj_stream_blob *b)
{
    struct srv *s = arg;
    int i = s->chk_n++;
    assert_true(i < MAXREC);
    assert_true(has_auth(b->hdr));
    s->chk_req[i] = copy_ev(b->data, &s->chk_len[i]);
    aux_act(s, b, script_at(s->chk_script, i));
    return 0;
}

static int on_submit(void *arg, struct cj_stream_blob *b)
{
    struct srv *s = arg;
    int i = s->sub_n++;
    assert_true(i < MAXREC);
    s->sub_pl[i] = copy_ev(b->data, &s->sub_len[i]);
    hdr_str(b->hdr, "cn__msg_root_id", s->sub_root[i], sizeof s->sub_root[i]);
    s->sub_hdr_ok[i] = hdr_is(b->hdr, "project_name", PROJECT) && has_auth(b->hdr) && !b->hdr->optional &&
                       strcmp(b->encoding, "fobs") == 0;
    const char *act = script_at(s->sub_script, i);
    if (strcmp(act, "silent") == 0) return 0;
    if (act[0] == '!') reply(s, b, act + 1, NULL);
    else reply(s, b, NULL, ev_of(EMPTY_OK, sizeof EMPTY_OK));
    return 0;
}

static void srv_init(struct srv *s, struct memnet *n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->sync_script[0] = "OK";
    s->gt_script[0] = "silent";
    s->chk_script[0] = "OK";
    s->sub_script[0] = "ok";
    s->try_wait = 0.3;
    struct cj_stream_ep *ep = n->ep[SERVER];
    assert_int_equal(cj_stream_on(ep, CJ_FL_AUX_CHANNEL, "__sync_runner__", on_sync, s), 0);
    assert_int_equal(cj_stream_on(ep, CJ_FL_AUX_CHANNEL, "__job_heartbeat__", on_heartbeat, s), 0);
    assert_int_equal(cj_stream_on(ep, CJ_FL_AUX_CHANNEL, "__task_check__", on_task_check, s), 0);
    assert_int_equal(cj_stream_on(ep, CJ_FL_SERVER_CHANNEL, "get_task", on_get_task, s), 0);
    assert_int_equal(cj_stream_on(ep, CJ_FL_SERVER_CHANNEL, "submit_update", on_submit, s), 0);
}

static void srv_free(struct srv *s)
{
    for (int i = 0; i < MAXREC; i++) {
        free(s->gt_req[i]);
        free(s->chk_req[i]);
        free(s->sub_pl[i]);
    }
}

/* ---- the fake worker side and the loop's callbacks --------------------------------------------------------- */

struct fake {
    size_t idle;
    int delivered, deliver_rc, end_runs, fatals, run_ends;
    struct cj_task *last;
    char end_why[256], fatal_why[256];
};

static size_t fd_idle(void *ctx)
{
    return ((struct fake *)ctx)->idle;
}

static int fd_deliver(void *ctx, struct cj_task *t, const uint8_t *payload, size_t len, char *why, size_t whysz)
{
    struct fake *f = ctx;
    f->delivered++;
    f->last = t;
    assert_non_null(payload);
    assert_true(len > 0 && payload[0] == 0x64);
    if (f->deliver_rc < 0) {
        snprintf(why, whysz, "no worker could take it");
        return -1;
    }
    f->idle = 0;   /* the worker is busy now */
    cj_task_set_state(t, CJ_TASK_DELIVERING);
    return 0;
}

static void fd_end_run(void *ctx)
{
    ((struct fake *)ctx)->end_runs++;
}

static void on_end_run_cb(void *ctx, const char *why)
{
    struct fake *f = ctx;
    f->run_ends++;
    snprintf(f->end_why, sizeof f->end_why, "%s", why);
}

static void on_fatal_cb(void *ctx, const char *why)
{
    struct fake *f = ctx;
    f->fatals++;
    snprintf(f->fatal_why, sizeof f->fatal_why, "%s", why);
}

struct done {
    int n;
    bool ok;
    char why[256];
    struct cj_task *t;
};

static void on_done(void *ctx, struct cj_task *t, bool ok, const char *why)
{
    struct done *d = ctx;
    d->n++;
    d->ok = ok;
    d->t = t;
    snprintf(d->why, sizeof d->why, "%s", why ? why : "");
}

struct world {
    struct memnet *n;
    struct srv s;
    struct fake f;
    struct cj_creds creds;
    struct cj_task_table *tt;
    struct cj_fl_up *up;
    struct cj_fl_submit_ops ops;
    struct cj_fl_up_cfg cfg;
};

static struct world *world_new(void)
{
    struct world *w = calloc(1, sizeof *w);
    w->n = net_new();
    srv_init(&w->s, w->n);
    w->s.up = &w->up;
    w->f.idle = 1;
    snprintf(w->creds.token, sizeof w->creds.token, TOKEN);
    snprintf(w->creds.signature, sizeof w->creds.signature, SIGNATURE);
    snprintf(w->creds.ssid, sizeof w->creds.ssid, SSID);
    w->tt = cj_task_table_new();
    cj_fl_up_cfg_default(&w->cfg);
    w->cfg.site = SITE;
    w->cfg.job_id = JOB;
    w->cfg.project_name = PROJECT;
    w->cfg.creds = &w->creds;
    w->cfg.get_task_interval = 0.05;
    w->cfg.get_task_timeout = 1.0;
    w->cfg.job_heartbeat_interval = 0.1;
    w->cfg.reconnect_min = 0.05;
    w->cfg.reconnect_max = 0.2;
    w->cfg.sync_interval = 0.05;
    w->cfg.sync_timeout = 0.2;
    w->cfg.sync_give_up = 3;
    w->cfg.task_check_timeout = 0.3;
    w->cfg.task_check_interval = 0.05;
    w->cfg.task_check_tries = 10;
    w->cfg.on_end_run = on_end_run_cb;
    w->cfg.on_fatal = on_fatal_cb;
    w->cfg.cb_ctx = &w->f;
    return w;
}

static void world_start(struct world *w)
{
    struct cj_fl_dispatch_ops d = { .ctx = &w->f, .idle = fd_idle, .deliver = fd_deliver, .end_run = fd_end_run };
    w->up = cj_fl_up_new(w->n->base, w->n->ep[RELAY], &w->cfg, w->tt, &d);
    assert_non_null(w->up);
    cj_fl_up_submit_ops(w->up, &w->ops);
    assert_int_equal(cj_fl_up_start(w->up), 0);
}

static void world_free(struct world *w)
{
    cj_fl_up_free(w->up);
    w->up = NULL;
    memnet_free(w->n);
    srv_free(&w->s);
    cj_task_table_free(w->tt);
    free(w);
}

static enum cj_fl_up_state up_state(struct world *w)
{
    struct cj_fl_up_status st;
    cj_fl_up_get_status(w->up, &st);
    return st.state;
}

/* Every message the relay sent to the server (chunks, ACKs) carried the auth headers. */
static void check_auth_everywhere(struct memnet *n, int *acks)
{
    int k = 0, a = 0;
    for (int i = 0; i < n->n_caps; i++) {
        if (n->caps[i].from != RELAY || strncmp(n->caps[i].dest, "server", 6) != 0) continue;
        struct cj_hdr h;
        memnet_decode(&h, n->caps[i].blk, n->caps[i].len);
        if (!has_auth(&h)) fail_msg("message %d (%s) to %s lacks auth headers", i, h.topic, n->caps[i].dest);
        if (strcmp(h.topic, "sm__ACK") == 0) a++;
        k++;
    }
    assert_true(k > 0);
    if (acks) *acks = a;
}

/* The received submit_update payload with its msg root id set to vector 13's. */
static void assert_is_vector13(struct srv *s, int i)
{
    size_t vlen;
    uint8_t *v13 = tu_read_vector("13_relay_submit_update_splice.bin", &vlen);
    assert_int_equal(s->sub_len[i], vlen);
    assert_int_equal(strlen(s->sub_root[i]), 36);
    uint8_t *at = memmem(s->sub_pl[i], s->sub_len[i], s->sub_root[i], 36);
    assert_non_null(at);   /* __msg_root_id__ in the Shareable == cn__msg_root_id */
    uint8_t *copy = malloc(vlen);
    memcpy(copy, s->sub_pl[i], vlen);
    memcpy(copy + (at - s->sub_pl[i]), ROOT_D00D, 36);
    assert_memory_equal(copy, v13, vlen);
    free(copy);
    free(v13);
}

static void assert_ev_is(const uint8_t *p, size_t len, struct evbuffer *want)
{
    size_t n;
    uint8_t *w = copy_ev(want, &n);
    assert_int_equal(len, n);
    assert_memory_equal(p, w, n);
    free(w);
    evbuffer_free(want);
}

static struct evbuffer *get_task_req(const char *last)
{
    struct evbuffer *b = evbuffer_new();
    char why[256];
    assert_int_equal(cj_flmsg_get_task_request(b, SITE, JOB, last, why, sizeof why), 0);
    return b;
}

/* ---- tests ---------------------------------------------------------------------------------------------------- */

/* sync (retried) -> heartbeats -> try again -> task -> result -> end of run. */
static void test_full_loop(void **state)
{
    struct world *w = world_new();
    w->s.sync_script[0] = "!service_unavailable";
    w->s.sync_script[1] = "silent";
    w->s.sync_script[2] = "OK";
    w->s.gt_script[0] = "try";
    w->s.gt_script[1] = "task";
    w->s.gt_script[2] = "end";
    world_start(w);
    assert_int_equal(up_state(w), CJ_FL_UP_SYNCING);

    RUN_UNTIL(w->n, w->f.delivered == 1, 3.0);
    assert_int_equal(w->s.sync_n, 3);   /* service_unavailable, no reply (timeout), OK */
    assert_int_equal(up_state(w), CJ_FL_UP_RUNNING);
    assert_true(w->s.hb_n >= 1);
    assert_false(w->s.hb_bad);

    /* try again: the next poll waited __wait_time__ (0.3 s) */
    assert_int_equal(w->s.gt_n, 2);
    double gap = w->s.gt_time[1] - w->s.gt_time[0];
    assert_true(gap >= 0.28 && gap < 0.6);
    for (int i = 0; i < 2; i++) assert_true(w->s.gt_hdr_ok[i]);
    size_t vlen;
    uint8_t *v14 = tu_read_vector("14_get_task_request.bin", &vlen);
    assert_int_equal(w->s.gt_len[0], vlen);
    assert_memory_equal(w->s.gt_req[0], v14, vlen);   /* first poll: no last_task_id */
    assert_memory_equal(w->s.gt_req[1], v14, vlen);   /* a try-again is not a task */
    free(v14);

    /* the task: in the table with the server's id and refs, handed to the dispatcher */
    struct cj_task *t = w->f.last;
    assert_non_null(t);
    assert_ptr_equal(cj_task_find(w->tt, t->id), t);
    assert_string_equal(t->server_id, TASK_ID);
    assert_string_equal(t->name, "train");
    assert_int_equal(t->n_refs, 1);
    assert_string_equal(t->refs[0].fqcn, SERVER_FQCN);
    assert_string_equal(t->refs[0].ref_id, REF_C9);
    assert_int_equal(t->refs[0].dot, 3);
    assert_int_equal(t->refs[0].items, 2);
    assert_int_equal(t->state, CJ_TASK_DELIVERING);

    /* no idle worker: no polling */
    settle(w->n, 0.15);
    assert_int_equal(w->s.gt_n, 2);

    /* the result: task check (vector 15), then submit_update (vector 13 with a fresh root id) */
    uint64_t out0 = cj_stream_relay_stats(w->n->ep[RELAY])->results_out;
    struct done d = { 0 };
    struct evbuffer *res = ev_vector("09_trainer_result_ready_flmodel.bin");
    assert_int_equal(w->ops.submit(w->ops.ctx, t, res, on_done, &d), 0);
    assert_int_equal(evbuffer_get_length(res), 0);   /* contents taken */
    evbuffer_free(res);
    assert_int_equal(d.n, 0);
    RUN_UNTIL(w->n, d.n == 1, 2.0);
    assert_int_equal(d.n, 1);
    assert_true(d.ok);
    assert_ptr_equal(d.t, t);
    assert_int_equal(w->s.chk_n, 1);
    uint8_t *v15 = tu_read_vector("15_aux_task_check_request.bin", &vlen);
    assert_int_equal(w->s.chk_len[0], vlen);
    assert_memory_equal(w->s.chk_req[0], v15, vlen);
    free(v15);
    assert_int_equal(w->s.sub_n, 1);
    assert_true(w->s.sub_hdr_ok[0]);
    assert_is_vector13(&w->s, 0);
    assert_int_equal(t->state, CJ_TASK_SUBMITTED);
    assert_int_equal(t->n_result_refs, 1);
    assert_string_equal(t->result_refs[0].fqcn, "site-1.job-7f3a.client_api_trainer_0");
    assert_int_equal(cj_stream_relay_stats(w->n->ep[RELAY])->results_out, out0 + 1);

    /* paused: a free worker and a kick do not poll; resume does */
    w->f.idle = 1;
    cj_fl_up_pause(w->up);
    w->ops.kick(w->ops.ctx);
    settle(w->n, 0.2);
    assert_int_equal(w->s.gt_n, 2);
    cj_fl_up_resume(w->up);
    RUN_UNTIL(w->n, w->f.run_ends == 1, 2.0);
    assert_int_equal(w->s.gt_n, 3);
    assert_true(w->s.gt_hdr_ok[2]);
    assert_ev_is(w->s.gt_req[2], w->s.gt_len[2], get_task_req(TASK_ID));   /* last_task_id */

    /* end of run: both callbacks, no more polls or heartbeats */
    assert_int_equal(w->f.run_ends, 1);
    assert_int_equal(w->f.end_runs, 1);
    assert_non_null(strstr(w->f.end_why, "__end_run__"));
    assert_int_equal(up_state(w), CJ_FL_UP_ENDED);
    assert_int_equal(cj_fl_up_start(w->up), -1);
    int hb = w->s.hb_n;
    w->ops.kick(w->ops.ctx);
    settle(w->n, 0.2);
    assert_int_equal(w->s.gt_n, 3);
    assert_int_equal(w->s.hb_n, hb);

    int acks = 0;
    check_auth_everywhere(w->n, &acks);
    assert_true(acks > 0);   /* ACKs of the server's reply streams carry them too */
    world_free(w);
}

static struct cj_task *get_one_task(struct world *w)
{
    w->s.gt_script[0] = "task";
    w->s.gt_script[1] = "silent";
    world_start(w);
    RUN_UNTIL(w->n, w->f.delivered == 1, 2.0);
    assert_int_equal(w->f.delivered, 1);
    return w->f.last;
}

/* The worker's result for t (vector 09) handed to the upstream; d hears how it ended. */
static void submit_result(struct world *w, struct cj_task *t, struct done *d)
{
    struct evbuffer *res = ev_vector("09_trainer_result_ready_flmodel.bin");
    assert_int_equal(w->ops.submit(w->ops.ctx, t, res, on_done, d), 0);
    evbuffer_free(res);
}

static void test_task_unknown_drops(void **state)
{
    struct world *w = world_new();
    w->s.chk_script[0] = "TASK_UNKNOWN";
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, d.n == 1, 2.0);
    assert_int_equal(d.n, 1);
    assert_false(d.ok);
    assert_non_null(strstr(d.why, "TASK_UNKNOWN"));
    settle(w->n, 0.1);
    assert_int_equal(w->s.chk_n, 1);
    assert_int_equal(w->s.sub_n, 0);   /* dropped: nothing submitted */
    assert_int_equal(t->state, CJ_TASK_FAILED);
    world_free(w);
}

/* COMMUNICATION_ERROR and no reply are retried; a failed submit_update is resent
 * after a new check, with a fresh msg_root_id. */
static void test_check_retry_and_resend(void **state)
{
    struct world *w = world_new();
    w->s.chk_script[0] = "COMMUNICATION_ERROR";
    w->s.chk_script[1] = "silent";
    w->s.chk_script[2] = "OK";
    w->s.sub_script[0] = "!comm_error";
    w->s.sub_script[1] = "ok";
    struct cj_task *t = get_one_task(w);
    uint64_t retries0 = cj_stream_relay_stats(w->n->ep[RELAY])->retries;
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, d.n == 1, 3.0);
    assert_int_equal(d.n, 1);
    assert_true(d.ok);
    assert_int_equal(w->s.chk_n, 4);   /* COMM_ERROR, silent, OK, OK (before the resend) */
    assert_int_equal(w->s.sub_n, 2);
    assert_string_not_equal(w->s.sub_root[0], w->s.sub_root[1]);
    assert_is_vector13(&w->s, 0);
    assert_is_vector13(&w->s, 1);
    assert_true(cj_stream_relay_stats(w->n->ep[RELAY])->retries >= retries0 + 3);
    assert_int_equal(t->state, CJ_TASK_SUBMITTED);
    world_free(w);
}

/* A task check waiting out its retry interval goes at once when the link to
 * the server comes back (cj_fl_up_reconnected), not task_check_interval later. */
static void test_check_retried_on_reconnect(void **state)
{
    struct world *w = world_new();
    w->cfg.task_check_interval = 30;
    w->s.chk_script[0] = "COMMUNICATION_ERROR";
    w->s.chk_script[1] = "OK";
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, w->s.chk_n == 1, 2.0);
    settle(w->n, 0.2);
    assert_int_equal(w->s.chk_n, 1);   /* waiting out the 30 s */
    assert_int_equal(d.n, 0);
    cj_fl_up_reconnected(w->up);
    assert_int_equal(w->s.chk_n, 1);   /* through the timer, not from inside the call */
    RUN_UNTIL(w->n, d.n == 1, 2.0);
    assert_int_equal(d.n, 1);
    assert_true(d.ok);
    assert_int_equal(w->s.chk_n, 2);
    assert_int_equal(w->s.sub_n, 1);
    world_free(w);
}

/* The submit_update wait is an idle timeout that progress() extends. */
static void test_submit_idle_timeout(void **state)
{
    struct world *w = world_new();
    w->cfg.submit_timeout = 0.3;
    w->s.sub_script[0] = "silent";
    w->s.sub_script[1] = "ok";
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, w->s.sub_n == 1, 1.0);
    assert_int_equal(t->state, CJ_TASK_SUBMITTING);
    /* the server downloads the result: progress every 0.1 s for 0.6 s (twice the timeout) */
    for (int i = 0; i < 6; i++) {
        settle(w->n, 0.1);
        w->ops.progress(w->ops.ctx, t);
    }
    assert_int_equal(w->s.sub_n, 1);
    assert_int_equal(d.n, 0);
    /* no more progress: timeout, check, resend */
    uint64_t to0 = cj_stream_relay_stats(w->n->ep[RELAY])->timeouts;
    RUN_UNTIL(w->n, d.n == 1, 2.0);
    assert_true(d.ok);
    assert_int_equal(w->s.sub_n, 2);
    assert_true(cj_stream_relay_stats(w->n->ep[RELAY])->timeouts > to0);
    world_free(w);
}

/* On the 2.7/2.8 wire a result the server started pulling is never resent (a 2.8.x
 * server job exits on a resend whose refs it finished pulling), nor reported failed. */
static void test_submit_no_resend_after_pull_2_8(void **state)
{
    struct world *w = world_new();
    w->cfg.submit_timeout = 0.3;
    w->s.sub_script[0] = "silent";
    w->s.sub_script[1] = "ok";
    cj_stream_set_wire(w->n->ep[RELAY], CJ_STREAM_WIRE_2_8);
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, w->s.sub_n == 1, 1.0);
    settle(w->n, 0.1);
    w->ops.progress(w->ops.ctx, t);   /* the server pulls */
    RUN_UNTIL(w->n, d.n == 1, 2.0);
    assert_int_equal(d.n, 1);
    assert_false(d.ok);
    assert_non_null(strstr(d.why, "not resent"));
    settle(w->n, 0.5);
    assert_int_equal(w->s.sub_n, 1);   /* neither the result again nor a failure report */
    assert_int_equal(t->state, CJ_TASK_FAILED);
    world_free(w);
}

/* ...while one the server never pulled is resent there as on the development wire. */
static void test_submit_resend_without_pull_2_8(void **state)
{
    struct world *w = world_new();
    w->cfg.submit_timeout = 0.3;
    w->s.sub_script[0] = "silent";
    w->s.sub_script[1] = "ok";
    cj_stream_set_wire(w->n->ep[RELAY], CJ_STREAM_WIRE_2_8);
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, d.n == 1, 3.0);
    assert_true(d.ok);
    assert_int_equal(w->s.sub_n, 2);
    world_free(w);
}

/* A result whose sends all fail is reported as EXECUTION_EXCEPTION. */
static void test_submit_exhausted_reports(void **state)
{
    struct world *w = world_new();
    w->s.sub_script[0] = "!comm_error";
    w->s.sub_script[1] = "!comm_error";
    w->s.sub_script[2] = "!comm_error";
    w->s.sub_script[3] = "ok";
    struct cj_task *t = get_one_task(w);
    struct done d = { 0 };
    submit_result(w, t, &d);
    RUN_UNTIL(w->n, w->s.sub_n == 4, 2.0);
    settle(w->n, 0.05);
    assert_int_equal(d.n, 1);
    assert_false(d.ok);
    assert_non_null(strstr(d.why, "failed 3 times"));
    assert_int_equal(t->state, CJ_TASK_FAILED);
    assert_int_equal(w->s.sub_n, 4);
    assert_int_equal(w->s.chk_n, 4);
    for (int i = 0; i < 3; i++) assert_is_vector13(&w->s, i);
    char rc[64], why[256];
    assert_int_equal(cj_flmsg_read_rc(w->s.sub_pl[3], w->s.sub_len[3], rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "EXECUTION_EXCEPTION");
    struct cj_fl_up_status st;
    cj_fl_up_get_status(w->up, &st);
    assert_int_equal(st.submissions, 0);
    world_free(w);
}

/* min_get_task_timeout raises the get_task timeout. */
static void test_min_get_task_timeout(void **state)
{
    struct world *w = world_new();
    w->s.gt_script[0] = "trymin";
    w->s.gt_script[1] = "silent";
    world_start(w);
    RUN_UNTIL(w->n, w->s.gt_n == 2, 1.0);
    struct cj_fl_up_status st;
    cj_fl_up_get_status(w->up, &st);
    assert_true(st.get_task_timeout == 5.0);
    assert_true(st.polling);
    assert_int_equal(st.try_again, 1);
    world_free(w);
}

/* authentication_error: a grep-able error and a growing back-off. */
static void test_auth_error_backoff(void **state)
{
    struct world *w = world_new();
    w->s.gt_script[0] = "!authentication_error";
    world_start(w);
    RUN_UNTIL(w->n, w->s.gt_n >= 5, 3.0);
    assert_true(w->s.gt_n >= 5);
    /* reconnect_min 0.05, then doubling, capped at reconnect_max 0.2: the back-off each
     * get_task was sent after is read when it arrives (set by the error before it, not yet
     * changed by its own); the gaps only show a real pause: libevent schedules from the time
     * it cached at the start of the loop's pass, which on a loaded machine under ASan can be
     * well before the reply was read, so a gap may fall short of its back-off */
    static const double want[] = { 0, 0.05, 0.1, 0.2, 0.2 };
    for (int i = 1; i < 5; i++)
        assert_true(w->s.gt_backoff[i] > want[i] - 1e-9 && w->s.gt_backoff[i] < want[i] + 1e-9);
    assert_true(w->s.gt_time[4] - w->s.gt_time[0] >= 0.3);   /* 0.55 of pauses, each short by at most a pass */
    struct cj_fl_up_status st;
    cj_fl_up_get_status(w->up, &st);
    assert_non_null(strstr(st.last_error, "authentication_error"));
    assert_true(st.auth_errors >= 4);
    assert_true(st.backoff > 0.19);
    assert_int_equal(w->f.delivered, 0);
    world_free(w);
}

/* A task the worker side cannot take, and failed(): EXECUTION_EXCEPTION results. */
static void test_failed_reports(void **state)
{
    struct world *w = world_new();
    w->f.deliver_rc = -1;
    uint64_t failed0 = cj_stream_relay_stats(w->n->ep[RELAY])->tasks_failed;
    struct cj_task *t = get_one_task(w);
    RUN_UNTIL(w->n, w->s.sub_n == 1, 2.0);
    assert_int_equal(t->state, CJ_TASK_FAILED);
    assert_non_null(strstr(t->why, "no worker could take it"));
    assert_int_equal(w->s.chk_n, 1);
    assert_int_equal(w->s.sub_n, 1);
    assert_true(w->s.sub_hdr_ok[0]);
    char rc[64], why[256];
    assert_int_equal(cj_flmsg_read_rc(w->s.sub_pl[0], w->s.sub_len[0], rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "EXECUTION_EXCEPTION");
    assert_non_null(memmem(w->s.sub_pl[0], w->s.sub_len[0], TASK_ID, strlen(TASK_ID)));
    assert_non_null(memmem(w->s.sub_pl[0], w->s.sub_len[0], w->s.sub_root[0], 36));
    assert_int_equal(cj_stream_relay_stats(w->n->ep[RELAY])->tasks_failed, failed0 + 1);

    /* failed() on a delivered task */
    w->f.deliver_rc = 0;
    w->f.idle = 1;
    w->s.gt_script[1] = "task";
    w->s.gt_script[2] = "silent";
    t->state = CJ_TASK_DONE;   /* the first one is settled, so the server may hand the id out again */
    w->ops.kick(w->ops.ctx);
    RUN_UNTIL(w->n, w->f.delivered == 2, 2.0);
    struct cj_task *t2 = w->f.last;
    assert_ptr_not_equal(t2, t);
    w->ops.failed(w->ops.ctx, t2, "worker died");
    assert_int_equal(t2->state, CJ_TASK_FAILED);
    RUN_UNTIL(w->n, w->s.sub_n == 2, 2.0);
    assert_int_equal(w->s.sub_n, 2);
    assert_int_equal(cj_flmsg_read_rc(w->s.sub_pl[1], w->s.sub_len[1], rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "EXECUTION_EXCEPTION");
    assert_int_equal(cj_stream_relay_stats(w->n->ep[RELAY])->tasks_failed, failed0 + 2);
    world_free(w);
}

/* The server's aux: __end_run__ answered OK and ends the run; __do_task__ TOPIC_UNKNOWN. */
struct rep {
    int n;
    char cell_rc[64], rc[64];
};

static void on_aux_reply(void *arg, struct cj_stream_reply *r)
{
    struct rep *p = arg;
    p->n++;
    snprintf(p->cell_rc, sizeof p->cell_rc, "%s", r->return_code);
    size_t len;
    uint8_t *b = copy_ev(r->data, &len);
    char why[256];
    if (cj_flmsg_read_rc(b, len, p->rc, sizeof p->rc, why, sizeof why)) p->rc[0] = '\0';
    free(b);
}

static void server_aux(struct world *w, const char *topic, struct rep *p)
{
    struct evbuffer *b = evbuffer_new();
    char why[256];
    assert_int_equal(cj_flmsg_aux_request(b, topic, NULL, "server", JOB, why, sizeof why), 0);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_request(w->n->ep[SERVER], SITE "." JOB, CJ_FL_AUX_CHANNEL, topic, &m, b, 1.0,
                                       on_aux_reply, p, NULL, NULL),
                     0);
    RUN_UNTIL(w->n, p->n == 1, 1.0);
    assert_int_equal(p->n, 1);
}

static void test_aux_from_server(void **state)
{
    struct world *w = world_new();
    world_start(w);
    RUN_UNTIL(w->n, up_state(w) == CJ_FL_UP_RUNNING, 1.0);
    struct rep p = { 0 };
    server_aux(w, "__do_task__", &p);
    assert_string_equal(p.cell_rc, "ok");
    assert_string_equal(p.rc, "TOPIC_UNKNOWN");
    assert_int_equal(up_state(w), CJ_FL_UP_RUNNING);
    memset(&p, 0, sizeof p);
    server_aux(w, "__end_run__", &p);
    assert_string_equal(p.cell_rc, "ok");
    assert_string_equal(p.rc, "OK");
    assert_int_equal(w->f.run_ends, 1);
    assert_int_equal(w->f.end_runs, 1);
    assert_int_equal(up_state(w), CJ_FL_UP_ENDED);
    check_auth_everywhere(w->n, NULL);   /* replies to the server carry them too */
    world_free(w);
}

/* A normal job start: the server job answers __sync_runner__ only once it is up.  The
 * unanswered tries and the refusals meanwhile are waits: logged at info (no warning),
 * counted in sync_waits, not in timeouts, retries or drops. */
static int sync_warnings;
static void sync_tap(int level, const char *msg)
{
    if (level <= CJ_LOG_WARNING && strstr(msg, "__sync_runner__")) sync_warnings++;
}

static void test_sync_wait_is_quiet(void **state)
{
    struct world *w = world_new();
    w->cfg.sync_timeout = 0.1;
    w->s.sync_script[0] = "silent";
    w->s.sync_script[1] = "silent";
    w->s.sync_script[2] = "SERVICE_UNAVAILABLE";
    w->s.sync_script[3] = "OK";
    sync_warnings = 0;
    cj_log_set_tap(sync_tap);
    world_start(w);
    RUN_UNTIL(w->n, up_state(w) == CJ_FL_UP_RUNNING, 3.0);
    cj_log_set_tap(NULL);
    assert_int_equal(up_state(w), CJ_FL_UP_RUNNING);
    assert_int_equal(w->s.sync_n, 4);
    const struct cj_stats *st = cj_stream_relay_stats(w->n->ep[RELAY]);
    assert_int_equal(st->sync_waits, 3);
    assert_int_equal(st->timeouts, 0);
    assert_int_equal(st->retries, 0);
    assert_int_equal(st->drops, 0);
    assert_int_equal(sync_warnings, 0);
    assert_int_equal(w->f.fatals, 0);
    world_free(w);
}

static void test_sync_gives_up(void **state)
{
    struct world *w = world_new();
    w->cfg.sync_give_up = 0.4;
    w->s.sync_script[0] = "SERVICE_UNAVAILABLE";
    world_start(w);
    RUN_UNTIL(w->n, w->f.fatals == 1, 2.0);
    assert_int_equal(w->f.fatals, 1);
    assert_string_equal(w->f.fatal_why, "cannot sync with " SERVER_FQCN);
    assert_int_equal(up_state(w), CJ_FL_UP_FATAL);
    assert_true(w->s.sync_n >= 4);
    assert_int_equal(w->s.gt_n, 0);
    assert_int_equal(w->s.hb_n, 0);
    int n = w->s.sync_n;
    settle(w->n, 0.2);
    assert_int_equal(w->s.sync_n, n);
    world_free(w);
}

/* The server job's cell is gone: get_task answered with the forwarder error FLARE's server
 * sends for it.  The job lasts job_heartbeat_timeout, then the loop ends as fatal; an answer
 * from the job in between starts the count again. */
static void test_job_gone(void **state)
{
    struct world *w = world_new();
    w->cfg.job_heartbeat_timeout = 0.3;
    w->s.gt_script[0] = "try";
    w->s.gt_script[1] = "!target_unreachable";
    world_start(w);
    RUN_UNTIL(w->n, w->f.fatals == 1, 2.0);
    assert_int_equal(w->f.fatals, 1);
    assert_non_null(strstr(w->f.fatal_why, "the server job " SERVER_FQCN " is gone (get_task: target_unreachable"));
    assert_int_equal(up_state(w), CJ_FL_UP_FATAL);
    assert_true(w->s.gt_n >= 4);   /* polled every get_task_interval meanwhile */
    struct cj_fl_up_status st;
    cj_fl_up_get_status(w->up, &st);
    assert_non_null(strstr(st.last_error, "the server job"));
    int n = w->s.gt_n;
    settle(w->n, 0.2);
    assert_int_equal(w->s.gt_n, n);   /* no more polling */
    world_free(w);
}

/* Timeouts and other failures are not "not there": the job stays. */
static void test_silence_is_not_gone(void **state)
{
    struct world *w = world_new();
    w->cfg.job_heartbeat_timeout = 0.2;
    w->cfg.get_task_timeout = 0.1;
    w->s.gt_script[0] = "!comm_error";
    w->s.gt_script[1] = "silent";
    world_start(w);
    settle(w->n, 0.8);
    assert_int_equal(w->f.fatals, 0);
    assert_int_equal(up_state(w), CJ_FL_UP_RUNNING);
    world_free(w);
}

static void test_bad_config(void **state)
{
    struct event_base *base = event_base_new();
    struct cj_fl_up_cfg cfg;
    cj_fl_up_cfg_default(&cfg);
    assert_true(cfg.get_task_interval == 0.5 && cfg.get_task_timeout == 60 && cfg.sync_timeout == 2 &&
                cfg.sync_give_up == 60 && cfg.submit_attempts == 3);
    struct cj_task_table *tt = cj_task_table_new();
    assert_null(cj_fl_up_new(base, NULL, &cfg, tt, NULL));   /* no site, job or endpoint */
    cj_task_table_free(tt);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_loop),
        cmocka_unit_test(test_task_unknown_drops),
        cmocka_unit_test(test_check_retry_and_resend),
        cmocka_unit_test(test_check_retried_on_reconnect),
        cmocka_unit_test(test_submit_idle_timeout),
        cmocka_unit_test(test_submit_no_resend_after_pull_2_8),
        cmocka_unit_test(test_submit_resend_without_pull_2_8),
        cmocka_unit_test(test_submit_exhausted_reports),
        cmocka_unit_test(test_min_get_task_timeout),
        cmocka_unit_test(test_auth_error_backoff),
        cmocka_unit_test(test_failed_reports),
        cmocka_unit_test(test_aux_from_server),
        cmocka_unit_test(test_sync_wait_is_quiet),
        cmocka_unit_test(test_sync_gives_up),
        cmocka_unit_test(test_job_gone),
        cmocka_unit_test(test_silence_is_not_gone),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests_name("upstream", tests, NULL, NULL);
}
