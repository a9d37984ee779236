/* SPDX-License-Identifier: Apache-2.0 */
/* pipe.c — the pipe peer of a FLARE 2.7/2.8 trainer (see pipe.h; releases.md
 * §4.4-4.8, §5, §7 items 5-8): the worker side of the pipe dialect, behind the
 * same operations as the client_api sessions (dialect.h).
 *
 * One trainer per job (CellPipe's name is fixed).  The relay plays the
 * passive cell <site>.<job>.<site>_<job>_passive with a stream endpoint of its
 * own, reached through a router virtual cell, so that every pipe request, pipe
 * ACK and stream ACK it sends has that cn__origin (the trainer checks it).
 *
 *   expected --first message--> ready <-> busy (task REQ sent .. REP) -> result
 *   (REP ACKed, submitted; the trainer serves its refs) -> ready
 *   any --(silent past the peer timeout, process exit)--> lost
 *
 * A task goes to the trainer once (its refs untouched: the trainer downloads
 * them from the server through the relay); its pipe ACK comes after the
 * trainer decoded it (downloaded every ref), with no deadline while the
 * trainer lives.  A REP is ACKed at once; a resend (same cell_pipe.msg_id) is
 * ACKed again and nothing else.  The result (its refs to the trainer's cell,
 * untouched) goes through the submit ops.  The trainer is inside its result
 * barrier from the REP until the server answered the submission (a 2.7.2/2.8.x
 * server job pulls the result's refs while it decodes submit_update, so their
 * EOFs have passed when it answers). */
#include "fl/pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "cell/router.h"
#include "fl/creds.h"
#include "fl/pipemsg.h"
#include "payload/splice.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mp.h"
#include "util/stats.h"
#include "util/uuid.h"
#include "wire/msg.h"

#define HB_INTERVAL 5.0                /* FLARE's, fixed on both sides */
#define PEER_TIMEOUT_MIN 15.0          /* > 2 heartbeat intervals */
#define ACK_WAIT_FOREVER 1e9
#define END_TIMEOUT 5.0
#define NAME_MAX_LEN 255
#define CH_TASK CJ_PIPE_CH_PREFIX "task"
#define CH_METRIC CJ_PIPE_CH_PREFIX "metric"
#define PIPE_METRICS 16

enum pstate { P_NONE, P_EXPECTED, P_READY, P_BUSY, P_RESULT, P_LOST };
static const char *const state_names[] = {"none", "expected", "ready", "busy", "result", "lost"};

struct pp {
    struct event_base *base;
    struct cj_stream_ep *ep;           /* the job cell's (relay counters) */
    struct cj_stream_ep *pep;          /* the passive cell's */
    struct cj_router *router;
    struct cj_task_table *tt;
    struct cj_fl_submit_ops sub;
    struct cj_fl_sessions_cfg cfg;
    char token[CJ_CREDS_VALUE_MAX + 1], signature[CJ_CREDS_VALUE_MAX + 1];   /* "" when the job has none */
    uint64_t creds_refused;
    char site[NAME_MAX_LEN + 1], job[NAME_MAX_LEN + 1];
    char trainer[NAME_MAX_LEN + 1];    /* <site>.<job>.<site>_<job>_active */
    char passive[NAME_MAX_LEN + 1];
    double peer_timeout;
    /* the trainer */
    enum pstate state;
    pid_t pid;
    bool link_up;
    double last_seen, expected_at;
    bool metric_pipe;                  /* heard on cell_pipe.metric: it has one */
    int64_t hb_seq_task, hb_seq_metric;
    uint64_t bytes;
    /* its task */
    char task_id[CJ_TASK_ID_LEN + 1];  /* local id, "" none */
    char server_task_id[CJ_PIPE_ID_MAX + 1];
    char task_topic[CJ_PIPE_ID_MAX + 1];
    bool req_pending;
    uint64_t req;
    char rep_msg_id[CJ_PIPE_ID_MAX + 1];   /* the accepted REP (resends are ACKed again) */
    bool submit_answered;
    /* the run */
    bool draining, drained_fired;
    bool launch_once;                  /* TASK_EXCHANGE.launch_once: false = one trainer per task */
    struct event *tick, *drain_ev;
    struct cj_fl_sessions_stats st;
    struct {                           /* the latest value per metric name (oldest replaced) */
        char name[CJ_FL_METRIC_NAME_MAX + 1];
        char value[CJ_FL_METRIC_VALUE_MAX + 1];
        uint64_t seq;
    } metrics[PIPE_METRICS];
    uint64_t metric_seq;
};

static const struct cj_stream_msg NONE_MSG = {.encoding = "none"};

/* time.time(), as cell_pipe.start carries it. */
static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- sending as the passive cell ------------------------------------------------------- */

static int pep_send(void *ctx, const char *dest, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                    bool control)
{
    struct pp *p = ctx;
    struct cj_err e;
    return cj_router_send_block(p->router, dest, hblk, hlen, payload, control, &e) == 0 ? 0 : -1;
}

static const char *pep_next_hop(void *ctx, const char *dest)
{
    struct pp *p = ctx;
    return cj_router_next_hop_name(p->router, dest);
}

static void on_virtual(struct cj_router *r, struct cj_msg *msg, void *ctx)
{
    struct pp *p = ctx;
    (void)r;
    if (!strcmp(msg->hdr.channel, CJ_STREAM_CHANNEL)) cj_stream_input(p->pep, &msg->hdr, msg->payload);
    else cj_log_debug("pipe %s: %s/%s from %s ignored", p->passive, msg->hdr.channel, msg->hdr.topic, msg->hdr.origin);
    cj_msg_free(msg);
}

/* A pipe message to the trainer: hdrs as the pipe writes them, body = a FOBS string. */
static int send_str(struct pp *p, const char *channel, const char *topic, const char *body, bool request,
                    int64_t hb_seq, cj_stream_reply_fn fn)
{
    struct cj_pipe_hdrs h = {.rep = false, .start = wall_time(), .hb_seq = hb_seq};
    struct cj_stream_hv hv[CJ_PIPE_HDRS];
    size_t n;
    msgpack_sbuffer vals, sb;
    msgpack_sbuffer_init(&vals);
    msgpack_sbuffer_init(&sb);
    cj_uuid4_str(h.msg_id);
    int rc = -1;
    struct evbuffer *eb = NULL;
    if (cj_pipemsg_build(&vals, hv, &n, &h) == 0 && cj_pipemsg_str_body(&sb, body) == 0 &&
        (eb = mp_sbuffer_to_evbuffer(&sb))) {
        struct cj_stream_msg m = {.hdrs = hv, .n_hdrs = n, .encoding = "fobs", .optional = true};
        rc = request ? cj_stream_request(p->pep, p->trainer, channel, topic, &m, eb, END_TIMEOUT, fn, p, NULL, NULL)
                     : cj_stream_send(p->pep, p->trainer, channel, topic, &m, NULL, eb, NULL, NULL, NULL);
    }
    if (!eb) msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&vals);
    return rc;
}

static void ignore_reply(void *arg, struct cj_stream_reply *r)
{
    (void)arg;
    (void)r;
}

/* _END_ / _ABORT_ on the task pipe (and the metric pipe when it has one). */
static void tell_end(struct pp *p, const char *topic, const char *body)
{
    if (!p->link_up) return;
    if (send_str(p, CH_TASK, topic, body, true, 0, ignore_reply) != 0)
        cj_log_warning("pipe: cannot send %s to %s", topic, p->trainer);
    if (p->metric_pipe && !strcmp(topic, CJ_PIPE_T_END)) send_str(p, CH_METRIC, topic, body, true, 0, ignore_reply);
    cj_log_info("pipe: %s (%s) sent to %s", topic, body, p->trainer);
}

/* ---- task state -------------------------------------------------------------------------- */

static struct cj_task *cur_task(struct pp *p) { return p->task_id[0] ? cj_task_find(p->tt, p->task_id) : NULL; }

static bool in_barrier(const struct pp *p) { return p->state == P_RESULT; }

static size_t busy_count(const struct pp *p) { return p->state == P_BUSY || p->state == P_RESULT; }

static void barrier_check(struct pp *p);

static void check_drained(struct pp *p)
{
    if (p->draining && !p->drained_fired && busy_count(p) == 0) {
        p->drained_fired = true;
        event_active(p->drain_ev, EV_TIMEOUT, 1);
    }
}

static void kick(struct pp *p)
{
    if (!p->draining && p->sub.kick) p->sub.kick(p->sub.ctx);
}

static void clear_task(struct pp *p)
{
    if (p->req_pending) cj_stream_request_cancel(p->pep, p->req);
    if (p->task_topic[0]) cj_stream_on(p->pep, CH_TASK, p->task_topic, NULL, NULL);
    p->req_pending = false;
    p->task_id[0] = p->server_task_id[0] = p->task_topic[0] = p->rep_msg_id[0] = 0;
    p->submit_answered = false;
}

/* The trainer lost its task before a result: requeue it (spool mode) or report it failed. */
static void lose_task(struct pp *p, const char *why)
{
    struct cj_task *t = cur_task(p);
    bool had_result = p->state == P_RESULT;
    clear_task(p);
    if (!t || had_result) return;
    if (p->sub.requeue && p->sub.requeue(p->sub.ctx, t, why) == 0) return;
    p->st.tasks_failed++;
    cj_task_fail(t, "%s", why);
    if (p->sub.failed) p->sub.failed(p->sub.ctx, t, why);
}

static void lost(struct pp *p, const char *why, bool process_gone)
{
    if (p->state == P_LOST || p->state == P_NONE) return;
    cj_log_warning("pipe: trainer %s lost: %s", p->trainer, why);
    p->st.workers_lost++;
    lose_task(p, why);
    p->state = P_LOST;
    if (!process_gone && p->cfg.lost) p->cfg.lost(p->cfg.lost_arg, p->trainer, why);
    check_drained(p);
}

/* Any message from the trainer: it lives.  The first one makes it ready
 * (TaskExchanger waits for it before the first task). */
static void heard(struct pp *p)
{
    p->last_seen = cj_now();
    if (p->state == P_EXPECTED || p->state == P_LOST) {
        p->state = P_READY;
        p->st.hellos_accepted++;
        cj_log_info("pipe: trainer %s is up (first message on its pipe)", p->trainer);
        if (p->cfg.ready) p->cfg.ready(p->cfg.ready_arg, p->trainer);
        kick(p);
    }
}

/* A pipe request counts when it comes from the trainer's cell and, when the
 * job has credentials, carries them (CellPipe stamps the site's token and
 * signature on every request; the file that gave them to the trainer is 0600). */
static bool from_trainer(struct pp *p, const struct cj_stream_blob *b)
{
    if (strcmp(b->origin, p->trainer)) {
        p->st.bad_requests++;
        cj_log_warning("pipe: %s/%s from %s, not the trainer %s: ignored", b->req.channel, b->req.topic, b->origin,
                       p->trainer);
        return false;
    }
    if (p->token[0] && !cj_pipemsg_creds_ok(b->hdr, p->token, p->signature)) {
        p->st.bad_requests++;
        if (p->creds_refused++ % 100 == 0)
            cj_log_warning("pipe: %s/%s from %s without the site's credentials (__token__, __token_signature__): "
                           "ignored (%llu so far)", b->req.channel, b->req.topic, b->origin,
                           (unsigned long long)p->creds_refused);
        return false;
    }
    return true;
}

/* The pipe ACK: an empty reply, sm__pe none (make_reply(OK)). */
static void ack(struct pp *p, struct cj_stream_blob *b)
{
    if (!b->req.has_ri) return;
    struct evbuffer *eb = evbuffer_new();
    if (!eb || cj_stream_reply(p->pep, &b->req, NULL, &NONE_MSG, eb, NULL, NULL) != 0)
        cj_log_warning("pipe: cannot ACK %s/%s to %s", b->req.channel, b->req.topic, b->origin);
}

/* ---- handlers ----------------------------------------------------------------------------- */

static int on_heartbeat(void *arg, struct cj_stream_blob *b)
{
    struct pp *p = arg;
    if (!from_trainer(p, b)) return 0;
    if (!strcmp(b->req.channel, CH_METRIC)) p->metric_pipe = true;
    p->st.heartbeats++;
    heard(p);
    return 0;
}

static void set_metric(struct pp *p, const char *name, const char *value)
{
    size_t at = 0;
    for (size_t i = 0; i < PIPE_METRICS; i++) {
        if (!strcmp(p->metrics[i].name, name)) { at = i; break; }
        if (p->metrics[i].seq < p->metrics[at].seq) at = i;
    }
    snprintf(p->metrics[at].name, sizeof p->metrics[at].name, "%s", name);
    snprintf(p->metrics[at].value, sizeof p->metrics[at].value, "%s", value);
    p->metrics[at].seq = ++p->metric_seq;
}

/* "metric": an analytics DXO (flare.log); ACKed at once, its key and value kept
 * as the worker's metrics (show metrics), as client_api.log's are. */
static int on_metric(void *arg, struct cj_stream_blob *b)
{
    struct pp *p = arg;
    char key[CJ_FL_METRIC_NAME_MAX + 1], val[CJ_FL_METRIC_VALUE_MAX + 1];
    if (!from_trainer(p, b)) return 0;
    p->metric_pipe = true;
    heard(p);
    ack(p, b);
    p->st.logs++;
    p->bytes += b->size;
    size_t n = b->data ? evbuffer_get_length(b->data) : 0;
    const uint8_t *body = n ? evbuffer_pullup(b->data, -1) : NULL;
    if (body && cj_pipemsg_metric(body, n, key, sizeof key, val, sizeof val) == 0) set_metric(p, key, val);
    else p->st.logs_dropped++;
    return 0;
}

static void on_submit_done(void *ctx, struct cj_task *t, bool ok, const char *why)
{
    struct pp *p = ctx;
    bool mine = p->task_id[0] && !strcmp(p->task_id, t->id);
    if (ok) {
        cj_log_info("task %s: the server accepted the result", t->id);
        if (t->state != CJ_TASK_FAILED) cj_task_set_state(t, CJ_TASK_DONE);
    } else {
        cj_log_error("task %s (server task %s): result submission failed: %s", t->id, t->server_id,
                     why ? why : "unknown");
        if (mine) tell_end(p, CJ_PIPE_T_ABORT, p->server_task_id);
    }
    if (!mine) return;
    p->submit_answered = true;
    barrier_check(p);
}

/* REP: the trainer's result for the task it holds. */
static int on_task_msg(void *arg, struct cj_stream_blob *b)
{
    struct pp *p = arg;
    struct cj_pipe_hdrs h;
    struct cj_err e = {0};
    char refs[1024];
    if (!from_trainer(p, b)) return 0;
    heard(p);
    p->bytes += b->size;
    if (cj_pipemsg_read(b->hdr, &h, &e) != 0) {
        p->st.bad_requests++;
        cj_log_warning("pipe: %s/%s from %s: %s", b->req.channel, b->req.topic, b->origin, e.msg);
        return 0;   /* no ACK: the trainer resends, then gives up */
    }
    if (!h.rep || strcmp(h.req_id, p->server_task_id) || strcmp(b->req.topic, p->task_topic)) {
        p->st.results_unknown_task++;
        p->st.results_rejected++;
        cj_log_warning("pipe: %s %s/%s (req_id '%s') from %s matches no task it holds: ignored", h.rep ? "REP" : "REQ",
                       b->req.channel, b->req.topic, h.req_id, b->origin);
        return 0;
    }
    if (p->rep_msg_id[0]) {   /* a resend of the result already taken, or a second one */
        if (!strcmp(p->rep_msg_id, h.msg_id)) {
            ack(p, b);
            cj_log_info("pipe: resent result %s of task %s ACKed again", h.msg_id, p->task_id);
        } else {
            p->st.results_duplicate++;
            p->st.results_rejected++;
            cj_log_error("pipe: a second result (%s) from %s for task %s refused", h.msg_id, b->origin, p->task_id);
        }
        return 0;
    }
    struct cj_task *t = cur_task(p);
    if (!t) {
        p->st.results_rejected++;
        cj_log_warning("pipe: result for task %s, which the relay no longer holds: ignored", p->task_id);
        return 0;
    }
    if (p->req_pending) {   /* a result before the pipe ACK counts as acceptance */
        cj_stream_request_cancel(p->pep, p->req);
        p->req_pending = false;
    }
    size_t n = evbuffer_get_length(b->data);
    const uint8_t *body = n ? evbuffer_pullup(b->data, -1) : NULL;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    char why[300];
    if (cj_splice_wrap_result(body, n, &sb, &e) != 0) {
        msgpack_sbuffer_destroy(&sb);
        p->st.results_rejected++;
        snprintf(why, sizeof why, "the trainer's result is not a Shareable payload: %s", e.msg);
        cj_log_error("pipe: task %s: %s", p->task_id, why);
        ack(p, b);   /* taken: a resend would not be any better */
        lose_task(p, why);
        p->state = P_READY;
        kick(p);
        check_drained(p);
        return 0;
    }
    snprintf(p->rep_msg_id, sizeof p->rep_msg_id, "%s", h.msg_id);
    ack(p, b);
    cj_task_set_result_refs(t, body, n, why, sizeof why);
    cj_task_set_state(t, CJ_TASK_RESULT_IN);
    p->state = P_RESULT;
    p->st.results_accepted++;
    cj_stream_relay_stats(p->ep)->results_in++;
    cj_log_info("task %s: result %s from %s accepted: %s", t->id, h.msg_id, p->trainer,
                cj_task_refs_text(t->result_refs, t->n_result_refs, refs, sizeof refs));
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    if (!eb || !p->sub.submit || p->sub.submit(p->sub.ctx, t, eb, on_submit_done, p) != 0) {
        cj_log_error("task %s: the result could not be handed to the upstream loop", t->id);
        on_submit_done(p, t, false, "cannot submit");
        if (p->sub.failed) p->sub.failed(p->sub.ctx, t, "the relay could not submit the result");
    }
    if (eb) evbuffer_free(eb);
    else msgpack_sbuffer_destroy(&sb);
    return 0;
}

/* The trainer's pipe ACK of the task REQ: it decoded the task (downloaded every ref). */
static void on_task_ack(void *arg, struct cj_stream_reply *r)
{
    struct pp *p = arg;
    p->req_pending = false;
    struct cj_task *t = cur_task(p);
    if (strcmp(r->return_code, "ok")) {
        char why[300];
        snprintf(why, sizeof why, "the trainer did not take the task: %s%s%s", r->return_code,
                 r->error[0] ? ": " : "", r->error);
        cj_log_error("pipe: task %s: %s", p->task_id, why);
        if (p->state == P_BUSY) {
            lose_task(p, why);
            p->state = P_READY;
            kick(p);
            check_drained(p);
        }
        return;
    }
    heard(p);
    if (t && t->state == CJ_TASK_DELIVERING) cj_task_set_state(t, CJ_TASK_ACCEPTED);
    cj_log_info("task %s taken by %s (its refs downloaded)", p->task_id, p->trainer);
}

/* ---- dispatch ops --------------------------------------------------------------------------- */

static size_t op_idle(void *ctx)
{
    struct pp *p = ctx;
    return !p->draining && p->state == P_READY && p->link_up;
}

static int op_deliver(void *ctx, struct cj_task *t, const uint8_t *payload, size_t len, char *why, size_t whysz)
{
    struct pp *p = ctx;
    char refs[1024];
    if (p->draining) return snprintf(why, whysz, "the relay is ending the run"), -1;
    if (t->worker[0]) return snprintf(why, whysz, "task %s was already given to %s", t->id, t->worker), -1;
    if (p->state != P_READY || !p->link_up) return snprintf(why, whysz, "the trainer is not ready"), -1;
    if (!t->name[0] || strspn(t->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                           strlen(t->name) || strlen(t->name) > CJ_PIPE_ID_MAX)
        return snprintf(why, whysz, "task name '%.64s' is not a pipe topic ([a-zA-Z0-9_]+)", t->name), -1;
    const char *sid = t->server_id[0] ? t->server_id : t->id;
    msgpack_sbuffer sb, vals;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_init(&vals);
    if (cj_splice_task_body(payload, len, p->job, p->site, &sb, NULL, &e) != 0) {
        msgpack_sbuffer_destroy(&sb);
        msgpack_sbuffer_destroy(&vals);
        return snprintf(why, whysz, "cannot build the task body: %s", e.msg), -1;
    }
    struct cj_pipe_hdrs h = {.rep = false, .start = wall_time()};
    snprintf(h.msg_id, sizeof h.msg_id, "%s", sid);
    struct cj_stream_hv hv[CJ_PIPE_HDRS];
    size_t n = 0, size = sb.size;
    struct evbuffer *eb = NULL;
    int rc = cj_pipemsg_build(&vals, hv, &n, &h);
    if (rc == 0 && cj_stream_on(p->pep, CH_TASK, t->name, on_task_msg, p) != 0) rc = -1;
    if (rc == 0 && !(eb = mp_sbuffer_to_evbuffer(&sb))) rc = -1;
    struct cj_stream_msg m = {.hdrs = hv, .n_hdrs = n, .encoding = "fobs"};
    if (rc == 0 &&
        cj_stream_request(p->pep, p->trainer, CH_TASK, t->name, &m, eb, ACK_WAIT_FOREVER, on_task_ack, p, &p->req, NULL))
        rc = -1;
    if (!eb) msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&vals);
    if (rc) return snprintf(why, whysz, "cannot send the task to %s", p->trainer), -1;
    p->req_pending = true;
    snprintf(p->task_id, sizeof p->task_id, "%s", t->id);
    snprintf(p->server_task_id, sizeof p->server_task_id, "%s", sid);
    snprintf(p->task_topic, sizeof p->task_topic, "%s", t->name);
    p->rep_msg_id[0] = 0;
    p->submit_answered = false;
    p->state = P_BUSY;
    p->bytes += size;
    snprintf(t->worker, sizeof t->worker, "%s", p->trainer);
    cj_task_set_state(t, CJ_TASK_DELIVERING);
    p->st.tasks_delivered++;
    cj_stream_relay_stats(p->ep)->tasks_out++;
    cj_stream_relay_stats(p->ep)->refs_passed += t->n_refs;
    cj_log_info("task %s (server task %s, '%s') sent to %s on %s: %zu bytes, %s", t->id, t->server_id, t->name,
                p->trainer, CH_TASK, size, cj_task_refs_text(t->refs, t->n_refs, refs, sizeof refs));
    return 0;
}

/* The result barrier ends when the server answered the submission: the server job
 * pulled the result's refs while it decoded submit_update, so their EOFs have
 * passed.  The trainer's own producer notices within its 5 s monitor; waiting for
 * that (launch_once true) would only delay the next task (which the trainer queues meanwhile, as it
 * does from a stock client job) and the end of the run (the stock client job
 * sends _END_, then SIGTERM, right after __end_run__). */
static void barrier_check(struct pp *p)
{
    /* launch_once false: the trainer exits by itself once its producer saw the
     * download done; its barrier ends with the process (pp_exited), as the stock
     * client job waits for that exit before the next task or the end */
    if (p->state != P_RESULT || !p->submit_answered || !p->launch_once) return;
    cj_log_info("task %s: the trainer's result barrier is over", p->task_id);
    clear_task(p);
    p->state = P_READY;
    kick(p);
    check_drained(p);
}

static void op_end_run(void *ctx)
{
    struct pp *p = ctx;
    if (!p->draining) cj_log_info("pipe: end of run: no new tasks; %zu trainer(s) still busy", busy_count(p));
    p->draining = true;
    barrier_check(p);
    check_drained(p);
}

/* ---- timers --------------------------------------------------------------------------------- */

static void on_drain_ev(evutil_socket_t fd, short what, void *arg)
{
    struct pp *p = arg;
    (void)fd;
    (void)what;
    if (p->cfg.drained) p->cfg.drained(p->cfg.drained_arg);
}

/* Heartbeats both pipes every 5 s, the peer timeout, the launch bound. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct pp *p = arg;
    (void)fd;
    (void)what;
    double now = cj_now();
    if (p->link_up && p->state != P_LOST && p->state != P_NONE) {
        send_str(p, CH_TASK, CJ_PIPE_T_HEARTBEAT, "", false, ++p->hb_seq_task, NULL);
        if (p->metric_pipe) send_str(p, CH_METRIC, CJ_PIPE_T_HEARTBEAT, "", false, ++p->hb_seq_metric, NULL);
    }
    if (p->state == P_EXPECTED && p->cfg.launch_timeout > 0 && now - p->expected_at > p->cfg.launch_timeout)
        lost(p, "no message on its pipe within launch_timeout", false);
    else if (p->state != P_EXPECTED && p->state != P_LOST && p->state != P_NONE && p->last_seen > 0 &&
             now - p->last_seen > p->peer_timeout) {
        char why[96];
        snprintf(why, sizeof why, "silent for %.0f s (peer timeout %.0f s)", now - p->last_seen, p->peer_timeout);
        lost(p, why, false);
    }
}

/* ---- the worker-side operations ------------------------------------------------------------- */

static void pp_destroy(void *w)
{
    struct pp *p = w;
    if (!p) return;
    if (p->router) cj_router_virtual(p->router, p->passive, NULL, NULL);
    if (p->tick) event_free(p->tick);
    if (p->drain_ev) event_free(p->drain_ev);
    if (p->pep) cj_stream_free(p->pep);
    explicit_bzero(p->token, sizeof p->token);
    explicit_bzero(p->signature, sizeof p->signature);
    free(p);
}

static void *pp_create(const struct cj_fl_workers_cfg *c, struct cj_err *err)
{
    const struct cj_fl_sessions_cfg *sc = c->sc;
    struct pp *p = calloc(1, sizeof *p);
    if (!p) return cj_fail(err, CJ_E_NOMEM, 0, "pipe: out of memory"), NULL;
    p->base = c->base;
    p->ep = c->ep;
    p->router = c->router;
    p->tt = c->tt;
    p->sub = *c->submit;
    p->cfg = *sc;
    snprintf(p->site, sizeof p->site, "%s", sc->site);
    snprintf(p->job, sizeof p->job, "%s", sc->job_id);
    char leaf[NAME_MAX_LEN + 1];
    if (cj_fl_pipe_leaf(leaf, sizeof leaf, p->site, p->job, "active") ||
        (size_t)snprintf(p->trainer, sizeof p->trainer, "%s.%s.%s", p->site, p->job, leaf) >= sizeof p->trainer ||
        cj_fl_pipe_leaf(leaf, sizeof leaf, p->site, p->job, "passive") ||
        (size_t)snprintf(p->passive, sizeof p->passive, "%s.%s.%s", p->site, p->job, leaf) >= sizeof p->passive) {
        cj_fail(err, CJ_E_INVALID, 0, "pipe: site and job id too long for CellPipe's names");
        goto fail;
    }
    if (c->site_token && c->site_token[0] && strcmp(c->site_token, "NA") && c->site_signature &&
        c->site_signature[0] && strcmp(c->site_signature, "NA")) {
        snprintf(p->token, sizeof p->token, "%s", c->site_token);
        snprintf(p->signature, sizeof p->signature, "%s", c->site_signature);
    }
    p->launch_once = cj_fl_pipe_launch_once(c->extra, c->extrac);
    p->peer_timeout = sc->heartbeat_timeout > PEER_TIMEOUT_MIN ? sc->heartbeat_timeout : PEER_TIMEOUT_MIN;
    struct cj_stream_io io = {.ctx = p, .send = pep_send, .next_hop = pep_next_hop,
                              .stats = cj_stream_relay_stats(c->ep)};
    if (!(p->pep = cj_stream_new(c->base, p->passive, &io, NULL))) {
        cj_fail(err, CJ_E_NOMEM, 0, "pipe: cannot create the endpoint of %s", p->passive);
        goto fail;
    }
    cj_stream_set_wire(p->pep, cj_stream_get_wire(c->ep));   /* the trainer is a cell of the job's FLARE */
    if (cj_router_virtual(c->router, p->passive, on_virtual, p) != 0) {
        cj_fail(err, CJ_E_INVALID, 0, "pipe: cannot play the cell %s", p->passive);
        goto fail;
    }
    if (cj_stream_on(p->pep, CH_TASK, CJ_PIPE_T_HEARTBEAT, on_heartbeat, p) ||
        cj_stream_on(p->pep, CH_METRIC, CJ_PIPE_T_HEARTBEAT, on_heartbeat, p) ||
        cj_stream_on(p->pep, CH_METRIC, "metric", on_metric, p)) {
        cj_fail(err, CJ_E_NOMEM, 0, "pipe: cannot register the pipe handlers");
        goto fail;
    }
    struct timeval tv = cj_tv(HB_INTERVAL);
    p->tick = event_new(c->base, -1, EV_PERSIST, on_tick, p);
    p->drain_ev = event_new(c->base, -1, 0, on_drain_ev, p);
    if (!p->tick || !p->drain_ev || event_add(p->tick, &tv) != 0) {
        cj_fail(err, CJ_E_NOMEM, 0, "pipe: cannot create a timer");
        goto fail;
    }
    cj_log_info("pipe: playing %s for the trainer %s (heartbeats every %.0f s, peer timeout %.0f s)", p->passive,
                p->trainer, HB_INTERVAL, p->peer_timeout);
    return p;
fail:
    pp_destroy(p);
    return NULL;
}

static void pp_dispatch_ops(void *w, struct cj_fl_dispatch_ops *out)
{
    *out = (struct cj_fl_dispatch_ops){.ctx = w, .idle = op_idle, .deliver = op_deliver, .end_run = op_end_run};
}

/* A launched trainer (no token: its pipe cell is known by name). */
static int pp_expect(void *w, const char *fqcn, const char *token)
{
    struct pp *p = w;
    (void)token;
    if (!fqcn || strcmp(fqcn, p->trainer)) {
        cj_log_error("pipe: a worker %s is not the trainer's pipe cell %s", fqcn ? fqcn : "(any)", p->trainer);
        return -1;
    }
    p->state = P_EXPECTED;
    p->expected_at = cj_now();
    p->last_seen = -1;
    p->metric_pipe = false;
    p->hb_seq_task = p->hb_seq_metric = 0;
    return 0;
}

static void pp_set_pid(void *w, const char *fqcn, pid_t pid)
{
    struct pp *p = w;
    if (fqcn && !strcmp(fqcn, p->trainer)) p->pid = pid;
}

static int pp_exited(void *w, const char *fqcn, const char *why)
{
    struct pp *p = w;
    if (!fqcn || strcmp(fqcn, p->trainer)) return -1;
    int doing = p->state == P_BUSY ? 1 : p->state == P_RESULT && !p->submit_answered ? 2 : 0;
    if (p->state == P_RESULT && p->submit_answered) {   /* launch_once false: it exits once its result is pulled */
        clear_task(p);
        p->state = P_READY;
    }
    if (doing == 0 && (p->draining || p->state == P_READY)) {
        cj_log_info("pipe: trainer %s ended (%s)%s", p->trainer, why, p->draining ? " at the end of the run" : "");
        clear_task(p);
        p->state = P_LOST;
    }
    lost(p, why, true);
    p->state = P_NONE;
    p->pid = 0;
    check_drained(p);
    return doing;
}

static void pp_link_up(void *w, const char *fqcn)
{
    struct pp *p = w;
    if (!strcmp(fqcn, p->trainer)) p->link_up = true;
    else cj_log_warning("pipe: %s connected, but this job's trainer is %s", fqcn, p->trainer);
}

static void pp_link_down(void *w, const char *fqcn, const char *why)
{
    struct pp *p = w;
    if (strcmp(fqcn, p->trainer)) return;
    p->link_up = false;
    cj_log_info("pipe: the trainer's link went down: %s", why);
}

static bool pp_in_barrier(const void *w, const char *fqcn)
{
    const struct pp *p = w;
    return fqcn && !strcmp(fqcn, p->trainer) && in_barrier(p);
}

static size_t pp_busy(const void *w) { return busy_count(w); }

static void pp_progress(void *w, const char *fqcn)
{
    struct pp *p = w;
    struct cj_task *t = cur_task(p);
    if (t && p->state == P_RESULT && !strcmp(fqcn, p->trainer) && p->sub.progress) p->sub.progress(p->sub.ctx, t);
}

/* At the end of the run: _END_ ("end_of_job") on every pipe; the trainer leaves
 * its loop and exits (the launcher's staged stop follows). */
static int pp_shutdown(void *w, const char *fqcn, const char *reason, cj_fl_shutdown_fn fn, void *arg)
{
    struct pp *p = w;
    (void)reason;
    (void)fn;
    (void)arg;
    if (!fqcn || strcmp(fqcn, p->trainer) || !p->link_up) return -1;
    tell_end(p, CJ_PIPE_T_END, "end_of_job");
    return 0;
}

static size_t pp_workers(const void *w, cj_fl_worker_fn fn, void *arg)
{
    const struct pp *p = w;
    if (p->state == P_NONE && !p->pid) return 0;
    struct cj_fl_worker_info wi = {
        .fqcn = p->trainer, .pid = p->pid, .state = state_names[p->state], .link_up = p->link_up,
        .heartbeat_age = p->last_seen > 0 ? cj_now() - p->last_seen : -1, .task = p->task_id, .bytes = p->bytes,
    };
    fn(arg, &wi);
    return 1;
}

static size_t pp_metrics(const void *w, cj_fl_metric_fn fn, void *arg)
{
    const struct pp *p = w;
    size_t k = 0;
    for (size_t i = 0; i < PIPE_METRICS; i++)
        if (p->metrics[i].name[0]) fn(arg, p->trainer, p->metrics[i].name, p->metrics[i].value), k++;
    return k;
}

static void pp_stats(const void *w, struct cj_fl_sessions_stats *st) { *st = ((const struct pp *)w)->st; }

const struct cj_fl_workers_ops cj_fl_pipe_workers_ops = {
    .create = pp_create, .destroy = pp_destroy, .dispatch_ops = pp_dispatch_ops, .expect = pp_expect,
    .set_pid = pp_set_pid, .worker_exited = pp_exited, .link_up = pp_link_up, .link_down = pp_link_down,
    .in_barrier = pp_in_barrier, .busy = pp_busy, .progress = pp_progress, .shutdown = pp_shutdown,
    .workers = pp_workers, .metrics = pp_metrics, .get_stats = pp_stats,
};
