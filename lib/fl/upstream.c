/* SPDX-License-Identifier: Apache-2.0 */
/* upstream.c — the FL loop toward server.<job> (see upstream.h).
 *
 * Three independent activities share one object:
 *   - the run: sync -> heartbeats + polling -> end of run (or fatal);
 *   - polling: one get_task in flight at most, the next one scheduled at
 *     next_poll_at (the server's __wait_time__, get_task_interval, or the
 *     authentication back-off), and only while a worker is idle;
 *   - submissions: one struct up_sub per result or failure report, each
 *     cycling task check -> submit_update -> (check -> resend)...
 *
 * The server job's presence: heartbeats ask for an answer, and every answer
 * (to a heartbeat, get_task, task check, submit_update) says whether the cell
 * server.<job> is there.  A cell that is gone shows as the server's forwarder
 * error on an optional request (StreamTargetUnreachable naming server.<job>,
 * as FLARE's cellnet sends it); when nothing but that has come back for
 * job_heartbeat_timeout, the job is gone and the loop ends as fatal.  Silence
 * (a stalled link, timeouts) is never taken for absence.
 *
 * Payloads are built and read by fl/flmsg.c and requests sent through
 * fl/flclient.c, so the loop never handles raw spans. */
#include "fl/upstream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <msgpack.h>

#include "fl/flmsg.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/uuid.h"

#define TOPIC_TASK_CHECK "__task_check__"
#define TOPIC_END_RUN "__end_run__"
#define TOPIC_SUBMIT "submit_update"
#define FAILED_RC "EXECUTION_EXCEPTION"

/* The aux topics answered TOPIC_UNKNOWN (the stream layer has no wildcard). */
static const char *const UNKNOWN_TOPICS[] = { "__do_task__" };

/* The stream-level timeout of a submit_update: the loop keeps its own idle
 * timer (restarted by progress()), so the stream's must never fire first. */
#define SUBMIT_STREAM_TIMEOUT (365.0 * 86400)

/* A failure repeated with the same reason is logged again every this many times. */
#define LOG_REPEAT_EVERY 20

#define WHY_MAX 256

/* One line per failure streak: the first failure (or a new reason) at level,
 * repeats every LOG_REPEAT_EVERY at level, the others at debug. */
struct streak {
    char last[WHY_MAX];
    unsigned n;
};

enum sub_stage { SUB_CHECK, SUB_CHECK_WAIT, SUB_SUBMIT };

struct up_sub {
    struct up_sub *next;
    struct cj_fl_up *up;
    struct cj_task *t;
    uint8_t *result;            /* the worker's result_ready payload; NULL: a failure report */
    size_t len;
    struct evbuffer *payload;   /* the next submit_update payload, built with msg_root_id */
    char msg_root_id[37];
    cj_fl_submit_done_fn done;
    void *done_ctx;
    bool fail_pending;          /* failed() arrived while the result was being submitted */
    bool pulled;                /* the server's download of the result moved (progress) */
    char why[WHY_MAX];          /* why the task failed (failure reports) */
    enum sub_stage stage;
    unsigned checks, attempts;
    bool in_req;
    uint64_t req;
    struct event *timer;        /* SUB_CHECK_WAIT: next check; SUB_SUBMIT: idle timeout */
    struct streak streak;
};

struct cj_fl_up {
    struct event_base *base;
    struct cj_stream_ep *ep;
    struct cj_task_table *tt;
    struct cj_fl_dispatch_ops dispatch;
    struct cj_fl_up_cfg cfg;
    char site[CJ_TASK_STR_MAX];
    char job[CJ_TASK_STR_MAX];
    char server[CJ_TASK_STR_MAX + 8];
    struct cj_fl_client fl;       /* requests to server */
    msgpack_sbuffer project_hv;   /* packed project_name ("" = none) */

    enum cj_fl_up_state state;
    bool paused, draining;

    struct event *sync_ev, *hb_ev, *poll_ev;
    double sync_started;
    bool sync_inflight, poll_inflight, hb_inflight;
    uint64_t sync_req, poll_req, hb_req;
    double absent_since;          /* first "not there" answer of the current streak; 0 none */
    unsigned absent_answers;
    struct streak sync_streak, poll_streak;

    double next_poll_at;
    double backoff;
    double gtt;                   /* get_task timeout in use */
    char last_task_id[CJ_TASK_STR_MAX];
    char last_error[WHY_MAX];

    uint64_t sync_tries, polls, try_again, tasks, heartbeats, submits, submits_failed, auth_errors;
    struct up_sub *subs;
    unsigned n_subs;
};

/* ---- helpers ------------------------------------------------------------------------ */

static void log_streak(struct streak *s, int level, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Logs fmt (which should include why) once per streak of the same why. */
static void log_streak(struct streak *s, int level, const char *why, const char *fmt, ...)
{
    bool same = s->n && strcmp(s->last, why) == 0;
    s->n = same ? s->n + 1 : 1;
    snprintf(s->last, sizeof s->last, "%s", why);
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!same) cj_log(level, "%s", line);
    else if (s->n % LOG_REPEAT_EVERY == 0) cj_log(level, "%s (%u times)", line, s->n);
    else cj_log_debug("%s", line);
}

static void streak_reset(struct streak *s)
{
    s->n = 0;
    s->last[0] = '\0';
}

static void set_last_error(struct cj_fl_up *up, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The failure shown by the status socket (cut to fit). */
static void set_last_error(struct cj_fl_up *up, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(up->last_error, sizeof up->last_error, fmt, ap);
    va_end(ap);
}

static void arm(struct event *ev, double secs)
{
    struct timeval tv = cj_tv(secs);
    evtimer_add(ev, &tv);
}

/* The bytes of a reply or blob evbuffer, contiguous (NULL, 0 when empty). */
static const uint8_t *bytes_of(struct evbuffer *b, size_t *len)
{
    *len = b ? evbuffer_get_length(b) : 0;
    return *len ? evbuffer_pullup(b, -1) : NULL;
}

/* The __rc__ of an aux reply; -1 with why when the request failed or the reply is not a Shareable. */
static int aux_reply_rc(struct cj_stream_reply *r, char *rc, size_t rcsz, char *why, size_t whysz)
{
    if (strcmp(r->return_code, "ok") != 0) {
        snprintf(why, whysz, "%s%s%s", r->return_code, r->error[0] ? ": " : "", r->error);
        return -1;
    }
    return cj_fl_client_reply_rc(r, rc, rcsz, why, whysz);
}

static bool from_server(const struct cj_fl_up *up, const char *origin)
{
    return origin && (strcmp(origin, up->server) == 0 || strcmp(origin, "server") == 0);
}

/* ---- creds ---------------------------------------------------------------------------- */

int cj_fl_up_set_creds(struct cj_fl_up *up, const struct cj_creds *c)
{
    if (!c) return -1;
    struct cj_stream_kv kv[4] = {
        { "client_name", up->site },
        { "ssid", c->ssid },
        { "__token__", c->token },
        { "__token_signature__", c->signature },
    };
    if (cj_stream_set_auth(up->ep, kv, 4)) {
        cj_log_error("upstream %s: cannot set the auth headers", up->server);
        return -1;
    }
    char desc[160];
    cj_log_info("upstream %s: auth headers set for client %s (%s)", up->server, up->site,
                cj_creds_describe(c, desc, sizeof desc));
    return 0;
}

/* ---- the run -------------------------------------------------------------------------------- */

const char *cj_fl_up_state_name(enum cj_fl_up_state s)
{
    static const char *const names[] = { "idle", "syncing", "running", "ended", "fatal" };
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

static void set_state(struct cj_fl_up *up, enum cj_fl_up_state s)
{
    if (up->state == s) return;
    cj_log_info("upstream %s: %s -> %s", up->server, cj_fl_up_state_name(up->state), cj_fl_up_state_name(s));
    up->state = s;
}

/* Stops sync, heartbeats and polling (submissions go on). */
static void stop_loop(struct cj_fl_up *up)
{
    if (up->sync_ev) evtimer_del(up->sync_ev);
    if (up->hb_ev) evtimer_del(up->hb_ev);
    if (up->poll_ev) evtimer_del(up->poll_ev);
    if (up->sync_inflight) cj_stream_request_cancel(up->ep, up->sync_req);
    if (up->poll_inflight) cj_stream_request_cancel(up->ep, up->poll_req);
    if (up->hb_inflight) cj_stream_request_cancel(up->ep, up->hb_req);
    up->sync_inflight = up->poll_inflight = up->hb_inflight = false;
}

static void end_run(struct cj_fl_up *up, const char *why)
{
    if (up->state == CJ_FL_UP_ENDED || up->state == CJ_FL_UP_FATAL) return;
    cj_log_info("upstream %s: end of run: %s (%u submissions in progress)", up->server, why, up->n_subs);
    stop_loop(up);
    set_state(up, CJ_FL_UP_ENDED);
    if (up->dispatch.end_run) up->dispatch.end_run(up->dispatch.ctx);
    if (up->cfg.on_end_run) up->cfg.on_end_run(up->cfg.cb_ctx, why);
}

static void fatal(struct cj_fl_up *up, const char *why)
{
    if (up->state == CJ_FL_UP_ENDED || up->state == CJ_FL_UP_FATAL) return;
    stop_loop(up);
    set_state(up, CJ_FL_UP_FATAL);
    set_last_error(up, "%s", why);
    if (up->cfg.on_fatal) up->cfg.on_fatal(up->cfg.cb_ctx, why);
}

/* ---- the server job's presence ------------------------------------------------------------------ */

/* A failed request whose failure says the cell server.<job> is not there: the
 * forwarder error of a hop that has no route to it, or a cellnet return code
 * saying so. */
static bool says_absent(const struct cj_stream_reply *r)
{
    if (!strcmp(r->return_code, "target_unreachable") || !strcmp(r->return_code, "invalid_target")) return true;
    return !strcmp(r->return_code, "comm_error") && !strncmp(r->error, "StreamTargetUnreachable", 23);
}

/* An answer from the server job itself: it is there. */
static void job_present(struct cj_fl_up *up)
{
    if (!up->absent_since) return;
    cj_log_info("upstream %s: the server job answers again after %u \"not there\" answers in %.1f s", up->server,
                up->absent_answers, cj_now() - up->absent_since);
    up->absent_since = 0;
    up->absent_answers = 0;
}

/* what (a request) was answered as not there (why): the first of a streak
 * is logged; one lasting job_heartbeat_timeout ends the loop. */
static void job_absent(struct cj_fl_up *up, const char *what, const char *why)
{
    double now = cj_now(), limit = up->cfg.job_heartbeat_timeout;
    if (up->state != CJ_FL_UP_RUNNING) return;
    up->absent_answers++;
    if (!up->absent_since) {
        up->absent_since = now;
        cj_log_warning("upstream %s: %s answered: %s; the server job is not there (job %s ends if this lasts %g s, "
                       "upstream.job_heartbeat_timeout)", up->server, what, why, up->job, limit);
    }
    set_last_error(up, "%s: %s", what, why);
    if (limit <= 0 || now - up->absent_since < limit) return;
    char msg[WHY_MAX];
    cj_log_error("upstream %s: the server job is gone: %u answers in %.1f s said it is not there (last: %s: %s); "
                 "ending job %s", up->server, up->absent_answers, now - up->absent_since, what, why, up->job);
    snprintf(msg, sizeof msg, "the server job %.60s is gone (%.24s: %.120s)", up->server, what, why);
    fatal(up, msg);
}

/* ---- __job_heartbeat__ ------------------------------------------------------------------------ */

static void on_heartbeat_reply(void *arg, struct cj_stream_reply *r)
{
    struct cj_fl_up *up = arg;
    up->hb_inflight = false;
    if (!strcmp(r->return_code, "ok")) {
        job_present(up);
        return;
    }
    char why[WHY_MAX];
    snprintf(why, sizeof why, "%s%s%s", r->return_code, r->error[0] ? ": " : "", r->error);
    if (says_absent(r)) job_absent(up, "__job_heartbeat__", why);
    else cj_log_debug("upstream %s: __job_heartbeat__ not answered: %s", up->server, why);
}

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cj_fl_up *up = arg;
    if (up->hb_inflight) return;   /* the last one is still waiting: its timeout is one interval */
    const char *fail = cj_fl_client_heartbeat_req(&up->fl, up->cfg.job_heartbeat_interval, on_heartbeat_reply, up,
                                                  &up->hb_req);
    if (fail) {
        cj_log_debug("upstream %s: __job_heartbeat__ not sent: %s", up->server, fail);
        return;
    }
    up->hb_inflight = true;
    up->heartbeats++;
}

/* ---- polling ------------------------------------------------------------------------------------- */

static bool can_poll(const struct cj_fl_up *up)
{
    return up->state == CJ_FL_UP_RUNNING && !up->paused && !up->draining;
}

static void schedule_poll(struct cj_fl_up *up, double delay)
{
    up->next_poll_at = cj_now() + (delay > 0 ? delay : 0);
    if (can_poll(up)) arm(up->poll_ev, delay);
}

static void poll_failed(struct cj_fl_up *up, const char *why)
{
    set_last_error(up, "get_task: %s", why);
    log_streak(&up->poll_streak, CJ_LOG_WARNING, why, "upstream %s: get_task failed: %s; retrying every %g s",
               up->server, why, up->cfg.get_task_interval);
    cj_stream_relay_stats(up->ep)->retries++;
    schedule_poll(up, up->cfg.get_task_interval);
}

static void on_get_task_reply(void *arg, struct cj_stream_reply *r);

static void send_get_task(struct cj_fl_up *up)
{
    struct cj_stream_hv hv = { "project_name", up->project_hv.data, up->project_hv.size };
    struct cj_stream_msg m = { .hdrs = &hv, .n_hdrs = up->project_hv.size ? 1 : 0, .encoding = "fobs",
                               .optional = true };
    const char *fail = cj_fl_client_get_task(&up->fl, up->last_task_id[0] ? up->last_task_id : NULL, &m, up->gtt,
                                             on_get_task_reply, up, &up->poll_req);
    if (fail) {
        poll_failed(up, fail);
        return;
    }
    up->poll_inflight = true;
    up->polls++;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cj_fl_up *up = arg;
    if (!can_poll(up) || up->poll_inflight) return;
    size_t idle = up->dispatch.idle ? up->dispatch.idle(up->dispatch.ctx) : 0;
    if (!idle) {   /* kick() polls as soon as a worker frees up; this is only a safety net */
        arm(up->poll_ev, up->cfg.get_task_interval);
        return;
    }
    send_get_task(up);
}

static void report_failed(struct cj_fl_up *up, struct cj_task *t, const char *why);
static struct up_sub *find_sub(struct cj_fl_up *up, const struct cj_task *t);

/* A real task: into the table, then to a worker. */
static void take_task(struct cj_fl_up *up, const uint8_t *p, size_t len, const struct cj_flmsg_task_reply *tr)
{
    char why[WHY_MAX];
    struct cj_task *t = cj_task_add(up->tt, p, len, why, sizeof why);
    if (!t) {
        cj_log_error("upstream %s: get_task reply (task '%s', server task %s) not taken: %s", up->server,
                     tr->task_name, tr->task_id[0] ? tr->task_id : "-", why);
        cj_stream_relay_stats(up->ep)->errors++;
        return;
    }
    cj_stream_relay_stats(up->ep)->tasks_in++;
    up->tasks++;
    snprintf(up->last_task_id, sizeof up->last_task_id, "%s", t->server_id);
    if (t->state == CJ_TASK_FAILED) {   /* cj_task_add logged why */
        report_failed(up, t, t->why);
        return;
    }
    int rc = -1;
    why[0] = '\0';
    if (up->dispatch.deliver) rc = up->dispatch.deliver(up->dispatch.ctx, t, p, len, why, sizeof why);
    else snprintf(why, sizeof why, "no worker side");
    if (rc < 0) {
        char msg[WHY_MAX + 32];
        snprintf(msg, sizeof msg, "not delivered: %s", why[0] ? why : "no reason given");
        cj_task_fail(t, "%s", msg);
        report_failed(up, t, msg);
    }
}

static void on_get_task_reply(void *arg, struct cj_stream_reply *r)
{
    struct cj_fl_up *up = arg;
    char why[WHY_MAX];
    up->poll_inflight = false;
    if (up->state != CJ_FL_UP_RUNNING) return;
    if (strcmp(r->return_code, "ok") != 0) {
        snprintf(why, sizeof why, "%s%s%s", r->return_code, r->error[0] ? ": " : "", r->error);
        if (strcmp(r->return_code, "authentication_error") == 0) {
            up->auth_errors++;
            up->backoff = up->backoff > 0 ? up->backoff * 2 : up->cfg.reconnect_min;
            if (up->backoff > up->cfg.reconnect_max) up->backoff = up->cfg.reconnect_max;
            set_last_error(up, "get_task: %s (check token, signature and ssid)", why);
            log_streak(&up->poll_streak, CJ_LOG_ERROR, why,
                       "upstream %s: get_task refused: %s; AUTHENTICATION FAILED for client %s "
                       "(check the token, signature and ssid); backing off %g..%g s",
                       up->server, why, up->site, up->cfg.reconnect_min, up->cfg.reconnect_max);
            schedule_poll(up, up->backoff);
            return;
        }
        if (says_absent(r)) job_absent(up, "get_task", why);
        if (up->state == CJ_FL_UP_RUNNING) poll_failed(up, why);
        return;
    }
    job_present(up);
    if (up->poll_streak.n)
        cj_log_info("upstream %s: get_task answered again after %u failures", up->server, up->poll_streak.n);
    streak_reset(&up->poll_streak);
    up->backoff = 0;
    up->last_error[0] = '\0';

    size_t len;
    const uint8_t *p = bytes_of(r->data, &len);
    struct cj_flmsg_task_reply tr;
    if (cj_flmsg_read_reply(p, len, &tr, why, sizeof why)) {
        cj_stream_relay_stats(up->ep)->errors++;
        poll_failed(up, why);
        return;
    }
    if (tr.min_get_task_timeout > up->gtt) {
        cj_log_info("upstream %s: get_task timeout raised to the server's minimum %.1f s", up->server,
                    tr.min_get_task_timeout);
        up->gtt = tr.min_get_task_timeout;
    }
    double wait = tr.wait_time >= 0 ? tr.wait_time : up->cfg.get_task_interval;
    if (strcmp(tr.task_name, "__try_again__") == 0) {
        up->try_again++;
        cj_log_debug("upstream %s: try again in %.2f s", up->server, wait);
        schedule_poll(up, wait);
        return;
    }
    if (strcmp(tr.task_name, "__end_run__") == 0) {
        end_run(up, "the server answered get_task with __end_run__");
        return;
    }
    take_task(up, p, len, &tr);
    if (up->state == CJ_FL_UP_RUNNING) schedule_poll(up, wait);
}

/* ---- __sync_runner__ ----------------------------------------------------------------------------- */

static void sync_send(struct cj_fl_up *up);

static void synced(struct cj_fl_up *up)
{
    cj_log_info("upstream %s: synced with the server job after %llu tries (%.1f s)", up->server,
                (unsigned long long)up->sync_tries, cj_now() - up->sync_started);
    streak_reset(&up->sync_streak);
    up->last_error[0] = '\0';
    set_state(up, CJ_FL_UP_RUNNING);
    if (up->cfg.job_heartbeat_interval > 0) {
        heartbeat_cb(-1, 0, up);
        arm(up->hb_ev, up->cfg.job_heartbeat_interval);
    }
    schedule_poll(up, 0);
}

static void sync_retry(struct cj_fl_up *up, const char *why)
{
    double waited = cj_now() - up->sync_started;
    set_last_error(up, "__sync_runner__: %s", why);
    if (waited + up->cfg.sync_interval >= up->cfg.sync_give_up) {
        char msg[sizeof up->server + 32];
        cj_log_error("upstream %s: cannot sync with %s: no OK to __sync_runner__ in %.1f s (%llu tries, last: %s)",
                     up->server, up->server, waited, (unsigned long long)up->sync_tries, why);
        snprintf(msg, sizeof msg, "cannot sync with %s", up->server);
        fatal(up, msg);
        return;
    }
    /* The server job answers once it is up: a normal start waits a few seconds here.
     * Info until sync_give_up passes (then the error above), counted apart from failures. */
    log_streak(&up->sync_streak, CJ_LOG_INFO, why,
               "upstream %s: __sync_runner__ not accepted yet: %s; the server job may still be starting: "
               "asking every %g s for up to %g s", up->server, why, up->cfg.sync_interval, up->cfg.sync_give_up);
    cj_stream_relay_stats(up->ep)->sync_waits++;
    arm(up->sync_ev, up->cfg.sync_interval);
}

static void on_sync_reply(void *arg, struct cj_stream_reply *r)
{
    struct cj_fl_up *up = arg;
    char why[WHY_MAX], rc[64];
    up->sync_inflight = false;
    if (up->state != CJ_FL_UP_SYNCING) return;
    if (aux_reply_rc(r, rc, sizeof rc, why, sizeof why)) {
        sync_retry(up, why);
        return;
    }
    if (strcmp(rc, "OK") != 0) {
        snprintf(why, sizeof why, "__rc__ %s", rc);
        sync_retry(up, why);
        return;
    }
    synced(up);
}

static void sync_send(struct cj_fl_up *up)
{
    if (up->state != CJ_FL_UP_SYNCING) return;
    up->sync_tries++;
    const char *fail = cj_fl_client_sync(&up->fl, up->cfg.sync_timeout, on_sync_reply, up, &up->sync_req);
    if (fail) {
        sync_retry(up, fail);
        return;
    }
    up->sync_inflight = true;
}

static void sync_cb(evutil_socket_t fd, short what, void *arg)
{
    sync_send(arg);
}

int cj_fl_up_start(struct cj_fl_up *up)
{
    if (up->state == CJ_FL_UP_SYNCING || up->state == CJ_FL_UP_RUNNING) return 0;
    if (up->state != CJ_FL_UP_IDLE) return -1;
    set_state(up, CJ_FL_UP_SYNCING);
    up->sync_started = cj_now();
    sync_send(up);
    return 0;
}

void cj_fl_up_pause(struct cj_fl_up *up)
{
    if (up->paused) return;
    up->paused = true;
    evtimer_del(up->poll_ev);
    cj_log_info("upstream %s: polling paused", up->server);
}

/* Re-arms the poll timer for the pending wait (or now). */
static void repoll(struct cj_fl_up *up)
{
    if (!can_poll(up) || up->poll_inflight) return;
    arm(up->poll_ev, up->next_poll_at - cj_now());
}

void cj_fl_up_resume(struct cj_fl_up *up)
{
    if (!up->paused) return;
    up->paused = false;
    cj_log_info("upstream %s: polling resumed", up->server);
    repoll(up);
}

/* The link to the server is back: what waits out a retry interval because
 * the link was gone (a task check, the next get_task) goes now, not up to
 * task_check_interval or a poll backoff later.  Through the timers, so that
 * nothing here runs a request inside the router's callback. */
void cj_fl_up_reconnected(struct cj_fl_up *up)
{
    unsigned early = 0;
    for (struct up_sub *s = up->subs; s; s = s->next)
        if (s->stage == SUB_CHECK_WAIT) {
            arm(s->timer, 0);
            early++;
        }
    if (can_poll(up) && !up->poll_inflight && up->next_poll_at > cj_now()) schedule_poll(up, 0);
    if (early) cj_log_info("upstream %s: link back: %u task check%s retried now", up->server, early, early == 1 ? "" : "s");
}

void cj_fl_up_drain(struct cj_fl_up *up)
{
    if (up->draining) return;
    up->draining = true;
    evtimer_del(up->poll_ev);
    cj_log_info("upstream %s: draining: no more get_task (%u submissions in progress)", up->server, up->n_subs);
}

/* ---- submissions ----------------------------------------------------------------------------------- */

static struct up_sub *find_sub(struct cj_fl_up *up, const struct cj_task *t)
{
    for (struct up_sub *s = up->subs; s; s = s->next)
        if (s->t == t) return s;
    return NULL;
}

static void sub_unlink(struct up_sub *s)
{
    struct cj_fl_up *up = s->up;
    for (struct up_sub **pp = &up->subs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            up->n_subs--;
            break;
        }
    evtimer_del(s->timer);
    if (s->in_req) cj_stream_request_cancel(up->ep, s->req);
    s->in_req = false;
}

static void sub_free(struct up_sub *s)
{
    if (s->t) cj_task_unpin(s->t);
    if (s->timer) event_free(s->timer);
    if (s->payload) evbuffer_free(s->payload);
    free(s->result);
    free(s);
}

/* Ends s: unlinks it, then calls its done callback (which may submit again). */
static void sub_end(struct up_sub *s, bool ok, const char *why)
{
    sub_unlink(s);
    cj_fl_submit_done_fn done = s->done;
    s->done = NULL;
    if (done) done(s->done_ctx, s->t, ok, why);
    sub_free(s);
}

/* Builds the next payload with a fresh __msg_root_id__. */
static int sub_build(struct up_sub *s, char *why, size_t whysz)
{
    struct cj_fl_up *up = s->up;
    if (s->payload) evbuffer_free(s->payload);
    s->payload = evbuffer_new();
    if (!s->payload || cj_uuid4_str(s->msg_root_id)) {
        snprintf(why, whysz, "out of memory or randomness");
        return -1;
    }
    if (s->result)
        return cj_flmsg_submit_payload(s->payload, s->t, s->result, s->len, s->msg_root_id, up->site, up->job, why,
                                       whysz);
    return cj_flmsg_failed_payload(s->payload, s->t, FAILED_RC, s->msg_root_id, up->site, up->job, why, whysz);
}

/* A result is given up and turned into a failure report: done(false) runs now,
 * the report then goes through its own check and attempts. */
static void sub_to_report(struct up_sub *s, const char *why)
{
    char msg[2 * WHY_MAX];
    snprintf(msg, sizeof msg, "%s; reporting %s instead", why, FAILED_RC);
    free(s->result);
    s->result = NULL;
    s->len = 0;
    s->fail_pending = false;
    s->attempts = 0;
    cj_stream_relay_stats(s->up->ep)->tasks_failed++;
    cj_log_info("task %s (server task %s): %s", s->t->id, s->t->server_id, msg);
    cj_fl_submit_done_fn done = s->done;
    s->done = NULL;
    if (done) done(s->done_ctx, s->t, false, msg);
}

static void sub_give_up(struct up_sub *s, const char *why)
{
    struct cj_task *t = s->t;
    s->up->submits_failed++;
    if (s->result) {
        cj_task_fail(t, "result not submitted: %s", why);
    } else {
        char rt[512];
        cj_log_error("task %s (server task %s, '%s'): failure (%s) could not be reported upstream: %s; refs %s", t->id,
                     t->server_id, t->name, s->why, why, cj_task_refs_text(t->refs, t->n_refs, rt, sizeof rt));
    }
    sub_end(s, false, why);
}

static void check_send(struct up_sub *s);

static void check_retry(struct up_sub *s, const char *why)
{
    struct cj_fl_up *up = s->up;
    if (s->checks >= up->cfg.task_check_tries) {
        char msg[WHY_MAX + 64];
        snprintf(msg, sizeof msg, "task check: no usable answer in %u tries (last: %s)", s->checks, why);
        sub_give_up(s, msg);
        return;
    }
    log_streak(&s->streak, CJ_LOG_WARNING, why, "task %s (server task %s): __task_check__: %s; retrying in %g s",
               s->t->id, s->t->server_id, why, up->cfg.task_check_interval);
    cj_stream_relay_stats(s->up->ep)->retries++;
    s->stage = SUB_CHECK_WAIT;
    arm(s->timer, up->cfg.task_check_interval);
}

static void submit_send(struct up_sub *s);

static void on_check_reply(void *arg, struct cj_stream_reply *r)
{
    struct up_sub *s = arg;
    char why[WHY_MAX], rc[64];
    s->in_req = false;
    if (aux_reply_rc(r, rc, sizeof rc, why, sizeof why)) {
        if (says_absent(r)) job_absent(s->up, "__task_check__", why);
        check_retry(s, why);
        return;
    }
    job_present(s->up);
    if (strcmp(rc, "COMMUNICATION_ERROR") == 0 || strcmp(rc, "SERVER_NOT_READY") == 0) {
        snprintf(why, sizeof why, "__rc__ %s", rc);
        check_retry(s, why);
        return;
    }
    if (strcmp(rc, "TASK_UNKNOWN") == 0) {
        const char *msg = s->result ? "the server no longer knows the task (TASK_UNKNOWN): result dropped"
                                    : "the server no longer knows the task (TASK_UNKNOWN): failure report dropped";
        if (s->result) {
            cj_task_fail(s->t, "%s", msg);
        } else {
            cj_log_warning("task %s (server task %s): %s", s->t->id, s->t->server_id, msg);
        }
        sub_end(s, false, msg);
        return;
    }
    if (strcmp(rc, "OK") != 0)
        cj_log_info("task %s (server task %s): __task_check__ answered %s; submitting anyway", s->t->id,
                    s->t->server_id, rc);
    submit_send(s);
}

static void check_send(struct up_sub *s)
{
    struct cj_fl_up *up = s->up;
    if (s->result) cj_task_set_state(s->t, CJ_TASK_CHECKING);
    s->stage = SUB_CHECK;
    s->checks++;
    const char *fail = cj_fl_client_aux(&up->fl, TOPIC_TASK_CHECK, s->t->server_id, up->cfg.task_check_timeout,
                                        on_check_reply, s, &s->req);
    if (fail) {
        check_retry(s, fail);
        return;
    }
    s->in_req = true;
}

static void on_submit_reply(void *arg, struct cj_stream_reply *r);

static void submit_failed(struct up_sub *s, const char *why)
{
    struct cj_fl_up *up = s->up;
    cj_log_warning("task %s (server task %s): submit_update attempt %u/%u failed: %s", s->t->id, s->t->server_id,
                   s->attempts, up->cfg.submit_attempts, why);
    /* A 2.7.2/2.8.x server job pulls the result's refs while it decodes the request, and
     * answers a pull of a ref it finished with EOF and no items: a resend it could not
     * decode makes a 2.8.x server job exit (releases.md §2.3).  Once its pull moved, the
     * server has the request: the result is not resent (nor reported failed: the server
     * may well have taken it), and the task ends here, saying so. */
    if (s->result && s->pulled && cj_stream_get_wire(up->ep) == CJ_STREAM_WIRE_2_8) {
        char msg[WHY_MAX + 160];
        snprintf(msg, sizeof msg, "no answer after the server pulled the result (%s); not resent: a FLARE 2.7/2.8 "
                 "server job cannot take a result whose refs it finished pulling", why);
        cj_log_error("task %s (server task %s, '%s'): %s", s->t->id, s->t->server_id, s->t->name, msg);
        cj_task_fail(s->t, "%s", msg);
        sub_end(s, false, msg);
        return;
    }
    if (s->result && s->fail_pending) {
        sub_to_report(s, "the task failed during its submission");
    } else if (s->attempts >= up->cfg.submit_attempts) {
        char msg[WHY_MAX + 64];
        snprintf(msg, sizeof msg, "submit_update failed %u times (last: %s)", s->attempts, why);
        if (!s->result) {
            sub_give_up(s, msg);
            return;
        }
        /* never silently dropped: the server hears that the task failed */
        snprintf(s->why, sizeof s->why, "result not submitted: submit_update failed %u times (last: %s)", s->attempts,
                 why);
        cj_task_fail(s->t, "%s", s->why);
        sub_to_report(s, s->why);
    }
    char bwhy[WHY_MAX];
    if (sub_build(s, bwhy, sizeof bwhy)) {
        sub_give_up(s, bwhy);
        return;
    }
    /* a resend only after the server confirms the task again */
    s->checks = 0;
    streak_reset(&s->streak);
    check_send(s);
}

/* doc/protocol/fl-protocols.md §3: a submit_update is optional only for a TASK_ABORTED result. */
static bool aborted_result(struct evbuffer *payload)
{
    char rc[64], why[WHY_MAX];
    size_t len;
    const uint8_t *p = bytes_of(payload, &len);   /* one chunk already: no copy */
    return cj_flmsg_read_rc(p, len, rc, sizeof rc, why, sizeof why) == 0 && strcmp(rc, "TASK_ABORTED") == 0;
}

static void submit_send(struct up_sub *s)
{
    struct cj_fl_up *up = s->up;
    char why[WHY_MAX];
    if (!s->payload && sub_build(s, why, sizeof why)) {
        sub_give_up(s, why);
        return;
    }
    s->attempts++;
    if (s->attempts > 1) cj_stream_relay_stats(s->up->ep)->retries++;
    msgpack_sbuffer root;
    msgpack_packer pk;
    msgpack_sbuffer_init(&root);
    msgpack_packer_init(&pk, &root, msgpack_sbuffer_write);
    msgpack_pack_str_with_body(&pk, s->msg_root_id, strlen(s->msg_root_id));
    struct cj_stream_hv hv[2];
    size_t n = 0;
    if (up->project_hv.size) hv[n++] = (struct cj_stream_hv){ "project_name", up->project_hv.data, up->project_hv.size };
    hv[n++] = (struct cj_stream_hv){ "cn__msg_root_id", root.data, root.size };
    struct cj_stream_msg m = { .hdrs = hv, .n_hdrs = n, .encoding = "fobs", .optional = aborted_result(s->payload) };
    struct evbuffer *b = s->payload;
    size_t blen = evbuffer_get_length(b);
    s->payload = NULL;
    if (s->result) cj_task_set_state(s->t, CJ_TASK_SUBMITTING);
    s->stage = SUB_SUBMIT;
    int rc = cj_stream_request(up->ep, up->server, CJ_FL_SERVER_CHANNEL, TOPIC_SUBMIT, &m, b, SUBMIT_STREAM_TIMEOUT,
                               on_submit_reply, s, &s->req, NULL);
    msgpack_sbuffer_destroy(&root);
    if (rc) {
        submit_failed(s, "request could not be sent");
        return;
    }
    s->in_req = true;
    up->submits++;
    if (s->result && s->attempts == 1) {
        cj_stream_relay_stats(s->up->ep)->results_out++;
        cj_stream_relay_stats(s->up->ep)->refs_passed += s->t->n_result_refs;
    }
    cj_log_info("task %s (server task %s): submit_update %s to %s, %zu bytes, attempt %u/%u, msg_root_id %s",
                s->t->id, s->t->server_id, s->result ? "(result)" : "(" FAILED_RC ")", up->server, blen,
                s->attempts, up->cfg.submit_attempts, s->msg_root_id);
    arm(s->timer, up->cfg.submit_timeout);
}

static void on_submit_reply(void *arg, struct cj_stream_reply *r)
{
    struct up_sub *s = arg;
    char why[WHY_MAX], rt[512];
    s->in_req = false;
    evtimer_del(s->timer);
    if (strcmp(r->return_code, "ok") != 0) {
        snprintf(why, sizeof why, "%s%s%s", r->return_code, r->error[0] ? ": " : "", r->error);
        if (says_absent(r)) job_absent(s->up, "submit_update", why);
        submit_failed(s, why);
        return;
    }
    job_present(s->up);
    struct cj_task *t = s->t;
    if (!s->result) {
        cj_log_info("task %s (server task %s, '%s'): failure reported upstream as %s (%s)", t->id, t->server_id,
                    t->name, FAILED_RC, s->why);
    } else if (t->state == CJ_TASK_FAILED || s->fail_pending) {
        cj_log_warning("task %s (server task %s): the server accepted the result although the task failed here (%s)",
                       t->id, t->server_id, t->why);
    } else {
        cj_task_set_state(t, CJ_TASK_SUBMITTED);
        cj_log_info("task %s (server task %s, '%s'): result submitted (attempt %u); result refs %s", t->id,
                    t->server_id, t->name, s->attempts,
                    cj_task_refs_text(t->result_refs, t->n_result_refs, rt, sizeof rt));
    }
    sub_end(s, true, NULL);
}

static void sub_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct up_sub *s = arg;
    if (s->stage == SUB_CHECK_WAIT) {
        check_send(s);
        return;
    }
    if (s->stage != SUB_SUBMIT) return;
    /* idle timeout: no reply and no progress of the server's result download */
    char why[WHY_MAX];
    if (s->in_req) cj_stream_request_cancel(s->up->ep, s->req);
    s->in_req = false;
    cj_stream_relay_stats(s->up->ep)->timeouts++;
    snprintf(why, sizeof why, "timeout: no reply and no result download progress for %g s (upstream.submit_timeout)",
             s->up->cfg.submit_timeout);
    submit_failed(s, why);
}

static struct up_sub *sub_new(struct cj_fl_up *up, struct cj_task *t)
{
    struct up_sub *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->up = up;
    s->t = t;
    cj_task_pin(t);   /* s->t stays valid while the submission is retried */
    if (!(s->timer = evtimer_new(up->base, sub_timer_cb, s))) {
        cj_task_unpin(t);
        free(s);
        return NULL;
    }
    return s;
}

static void sub_link(struct up_sub *s)
{
    s->next = s->up->subs;
    s->up->subs = s;
    s->up->n_subs++;
}

static void report_failed(struct cj_fl_up *up, struct cj_task *t, const char *why)
{
    char bwhy[WHY_MAX];
    cj_stream_relay_stats(up->ep)->tasks_failed++;
    struct up_sub *s = sub_new(up, t);
    if (!s) {
        cj_log_error("task %s (server task %s): out of memory: failure not reported", t->id, t->server_id);
        return;
    }
    snprintf(s->why, sizeof s->why, "%s", why ? why : "failed");
    if (sub_build(s, bwhy, sizeof bwhy)) {
        cj_log_error("task %s (server task %s): failure not reported: %s", t->id, t->server_id, bwhy);
        sub_free(s);
        return;
    }
    cj_log_info("task %s (server task %s): reporting %s upstream (%s)", t->id, t->server_id, FAILED_RC, s->why);
    sub_link(s);
    check_send(s);
}

static int op_submit(void *ctx, struct cj_task *t, struct evbuffer *result, cj_fl_submit_done_fn done, void *done_ctx)
{
    struct cj_fl_up *up = ctx;
    char why[WHY_MAX];
    if (!t || !result) return -1;
    size_t len = evbuffer_get_length(result);
    if (find_sub(up, t)) {
        evbuffer_drain(result, len);
        cj_log_error("task %s (server task %s): a result or failure report is already being submitted; "
                     "second result refused", t->id, t->server_id);
        return -1;
    }
    struct up_sub *s = sub_new(up, t);
    if (!s || !(s->result = malloc(len ? len : 1))) {
        evbuffer_drain(result, len);
        if (s) sub_free(s);
        cj_log_error("task %s: out of memory taking the result", t->id);
        return -1;
    }
    s->len = len;
    evbuffer_remove(result, s->result, len);
    s->done = done;
    s->done_ctx = done_ctx;
    if (cj_task_set_result_refs(t, s->result, len, why, sizeof why) || sub_build(s, why, sizeof why)) {
        cj_log_error("task %s (server task %s): result refused: %s", t->id, t->server_id, why);
        s->done = NULL;
        sub_free(s);
        return -1;
    }
    sub_link(s);
    check_send(s);
    return 0;
}

static void op_failed(void *ctx, struct cj_task *t, const char *why)
{
    struct cj_fl_up *up = ctx;
    if (!t) return;
    cj_task_fail(t, "%s", why ? why : "failed");
    struct up_sub *s = find_sub(up, t);
    if (s) {
        if (s->result && !s->fail_pending) {   /* its current send may still succeed */
            s->fail_pending = true;
            snprintf(s->why, sizeof s->why, "%s", why ? why : "failed");
            cj_log_info("task %s: failure noted; a failure report replaces the result if its submission fails", t->id);
        }
        return;
    }
    report_failed(up, t, why ? why : "failed");
}

static void op_kick(void *ctx)
{
    repoll(ctx);
}

static void op_progress(void *ctx, struct cj_task *t)
{
    struct cj_fl_up *up = ctx;
    struct up_sub *s = find_sub(up, t);
    if (s && s->stage == SUB_SUBMIT && s->in_req) {
        s->pulled = true;
        arm(s->timer, up->cfg.submit_timeout);
    }
}

void cj_fl_up_submit_ops(struct cj_fl_up *up, struct cj_fl_submit_ops *out)
{
    *out = (struct cj_fl_submit_ops){
        .ctx = up, .submit = op_submit, .failed = op_failed, .kick = op_kick, .progress = op_progress,
    };
}

/* ---- incoming aux ------------------------------------------------------------------------------------ */

static void reply_aux(struct cj_fl_up *up, struct cj_stream_blob *b, const char *rc)
{
    char why[WHY_MAX];
    if (!b->req.has_ri) return;   /* fire-and-forget */
    size_t len;
    const uint8_t *p = bytes_of(b->data, &len);
    struct evbuffer *out = evbuffer_new();
    if (!out || cj_flmsg_aux_reply(out, p, len, rc, up->site, up->job, why, sizeof why)) {
        if (out) evbuffer_free(out);
        cj_log_error("upstream %s: cannot build the aux reply to %s: %s", up->server, b->req.topic, why);
        return;
    }
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (cj_stream_reply(up->ep, &b->req, NULL, &m, out, NULL, NULL))
        cj_log_warning("upstream %s: aux reply to %s from %s not sent", up->server, b->req.topic, b->origin);
}

static int on_aux_end_run(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_up *up = arg;
    if (!from_server(up, b->origin)) {
        cj_log_warning("upstream %s: aux __end_run__ from %s ignored: only the server may end the run", up->server,
                       b->origin);
        reply_aux(up, b, "BAD_REQUEST_DATA");
        return 0;
    }
    reply_aux(up, b, "OK");
    end_run(up, "the server sent aux __end_run__");
    return 0;
}

static int on_aux_unknown(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_up *up = arg;
    cj_log_info("upstream %s: aux %s from %s answered TOPIC_UNKNOWN", up->server, b->req.topic, b->origin);
    reply_aux(up, b, "TOPIC_UNKNOWN");
    return 0;
}

/* ---- life cycle ----------------------------------------------------------------------------------------- */

void cj_fl_up_cfg_default(struct cj_fl_up_cfg *cfg)
{
    *cfg = (struct cj_fl_up_cfg){
        .get_task_interval = 0.5,
        .get_task_timeout = 60,
        .submit_timeout = 60,
        .job_heartbeat_interval = 10,
        .job_heartbeat_timeout = 60,
        .reconnect_min = 0.5,
        .reconnect_max = 30,
        .sync_interval = 0.5,
        .sync_timeout = 2,
        .sync_give_up = 60,
        .task_check_timeout = 5,
        .task_check_interval = 5,
        .task_check_tries = 120,
        .submit_attempts = 3,
    };
}

static bool cfg_ok(const struct cj_fl_up_cfg *c)
{
    return c->site && *c->site && strlen(c->site) < CJ_TASK_STR_MAX && c->job_id && *c->job_id &&
           strlen(c->job_id) < CJ_TASK_STR_MAX && (!c->project_name || strlen(c->project_name) < CJ_TASK_STR_MAX) &&
           c->get_task_interval >= 0 && c->get_task_timeout > 0 && c->submit_timeout > 0 && c->reconnect_min > 0 &&
           c->reconnect_max >= c->reconnect_min && c->sync_interval >= 0 && c->sync_timeout > 0 &&
           c->sync_give_up > 0 && c->task_check_timeout > 0 && c->task_check_interval >= 0 && c->task_check_tries > 0 &&
           c->submit_attempts > 0;
}

struct cj_fl_up *cj_fl_up_new(struct event_base *base, struct cj_stream_ep *ep, const struct cj_fl_up_cfg *cfg,
                              struct cj_task_table *tt, const struct cj_fl_dispatch_ops *dispatch)
{
    if (!base || !ep || !cfg || !tt || !cfg_ok(cfg)) {
        cj_log_error("upstream: bad configuration (site, job_id, intervals)");
        return NULL;
    }
    struct cj_fl_up *up = calloc(1, sizeof *up);
    if (!up) return NULL;
    up->base = base;
    up->ep = ep;
    up->tt = tt;
    if (dispatch) up->dispatch = *dispatch;
    up->cfg = *cfg;
    snprintf(up->site, sizeof up->site, "%s", cfg->site);
    snprintf(up->job, sizeof up->job, "%s", cfg->job_id);
    snprintf(up->server, sizeof up->server, "server.%s", cfg->job_id);
    up->fl = (struct cj_fl_client){ .ep = ep, .server = up->server, .site = up->site, .job = up->job };
    up->cfg.site = up->site;
    up->cfg.job_id = up->job;
    up->cfg.project_name = NULL;
    up->cfg.creds = NULL;
    up->gtt = cfg->get_task_timeout;
    msgpack_sbuffer_init(&up->project_hv);
    if (cfg->project_name && *cfg->project_name) {
        msgpack_packer pk;
        msgpack_packer_init(&pk, &up->project_hv, msgpack_sbuffer_write);
        msgpack_pack_str_with_body(&pk, cfg->project_name, strlen(cfg->project_name));
    }
    up->sync_ev = evtimer_new(base, sync_cb, up);
    up->hb_ev = event_new(base, -1, EV_PERSIST, heartbeat_cb, up);
    up->poll_ev = evtimer_new(base, poll_cb, up);
    bool ok = up->sync_ev && up->hb_ev && up->poll_ev;
    ok = ok && cj_stream_on(ep, CJ_FL_AUX_CHANNEL, TOPIC_END_RUN, on_aux_end_run, up) == 0;
    for (size_t i = 0; ok && i < sizeof UNKNOWN_TOPICS / sizeof *UNKNOWN_TOPICS; i++)
        ok = cj_stream_on(ep, CJ_FL_AUX_CHANNEL, UNKNOWN_TOPICS[i], on_aux_unknown, up) == 0;
    if (ok && cfg->creds) ok = cj_fl_up_set_creds(up, cfg->creds) == 0;
    if (!ok) {
        cj_fl_up_free(up);
        return NULL;
    }
    return up;
}

void cj_fl_up_free(struct cj_fl_up *up)
{
    if (!up) return;
    while (up->subs) {
        struct up_sub *s = up->subs;
        sub_unlink(s);
        sub_free(s);
    }
    stop_loop(up);
    cj_stream_on(up->ep, CJ_FL_AUX_CHANNEL, TOPIC_END_RUN, NULL, NULL);
    for (size_t i = 0; i < sizeof UNKNOWN_TOPICS / sizeof *UNKNOWN_TOPICS; i++)
        cj_stream_on(up->ep, CJ_FL_AUX_CHANNEL, UNKNOWN_TOPICS[i], NULL, NULL);
    if (up->sync_ev) event_free(up->sync_ev);
    if (up->hb_ev) event_free(up->hb_ev);
    if (up->poll_ev) event_free(up->poll_ev);
    msgpack_sbuffer_destroy(&up->project_hv);
    free(up);
}

void cj_fl_up_get_status(const struct cj_fl_up *up, struct cj_fl_up_status *st)
{
    memset(st, 0, sizeof *st);
    st->state = up->state;
    st->paused = up->paused;
    st->draining = up->draining;
    st->polling = up->poll_inflight;
    st->backoff = up->backoff;
    st->get_task_timeout = up->gtt;
    snprintf(st->last_task_id, sizeof st->last_task_id, "%s", up->last_task_id);
    snprintf(st->last_error, sizeof st->last_error, "%s", up->last_error);
    st->sync_tries = up->sync_tries;
    st->polls = up->polls;
    st->try_again = up->try_again;
    st->tasks = up->tasks;
    st->heartbeats = up->heartbeats;
    st->submits = up->submits;
    st->submits_failed = up->submits_failed;
    st->auth_errors = up->auth_errors;
    st->submissions = up->n_subs;
}
