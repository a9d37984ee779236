/* SPDX-License-Identifier: Apache-2.0 */
/* session.c — worker sessions on channel client_api (see session.h): the
 * worker records and their state machine, task delivery, results and settling.
 * The source-failure notices are in srcfail.c, LOG data and metrics in
 * workerlog.c.
 *
 * Reasons given to workers are NVFlare's words (its CJ-side cell backend), so a
 * stock trainer logs the same thing it would behind a Python CJ. */
#include "fl/session_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fl/capi.h"
#include "payload/lobs.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/mp.h"
#include "util/repr.h"

#include "payload/fobs.h"
#include "payload/splice.h"

#define CH CJ_CAPI_CHANNEL
#define SHUTDOWN_TIMEOUT_DEFAULT 5.0

/* ---- small helpers -------------------------------------------------------------------- */

static void wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}

/* Python repr() of a str (for reasons that quote a value), or None. */
static void repr(char *out, size_t n, const char *s, bool present)
{
    if (!present) {
        copy_str(out, n, "None");
        return;
    }
    cj_repr_str(out, n, s);
}

const uint8_t *cj_fl_sess_blob_bytes(struct cj_stream_blob *b, size_t *n)
{
    static const uint8_t none[1];
    *n = b->data ? evbuffer_get_length(b->data) : 0;
    if (!*n) return none;
    const uint8_t *p = evbuffer_pullup(b->data, -1);
    return p ? p : none;
}

/* Positions c on the MAIN body of a LOBS payload.  0 or -1. */
int cj_fl_sess_open_main(const uint8_t *p, size_t n, struct mp_cur *c)
{
    struct cj_lobs_section main;
    struct cj_err e = {0};
    if (cj_lobs_validate(p, n, &main, NULL, 0, NULL, &e)) return -1;
    c->base = p;
    c->pos = main.offset + CJ_LOBS_HDR_LEN;
    c->end = c->pos + main.value_len;
    return 0;
}

static bool body_is_map(const uint8_t *p, size_t n)
{
    struct mp_cur c;
    struct mp_val v;
    struct cj_err e = {0};
    return cj_fl_sess_open_main(p, n, &c) == 0 && mp_next(&c, &v, &e) == 0 && v.kind == MP_MAP;
}

/* The str value of key in the body map (for reasons, when the strict decoder refused). */
bool cj_fl_sess_body_str(const uint8_t *p, size_t n, const char *key, char *buf, size_t sz)
{
    struct mp_cur c, v;
    uint32_t cnt, len;
    const uint8_t *s;
    struct cj_err e = {0};
    if (cj_fl_sess_open_main(p, n, &c) || mp_read_map(&c, &cnt, &e) || mp_map_find(&c, cnt, key, &v, &e) != 1)
        return false;
    if (mp_read_str(&v, &s, &len, &e) || len >= sz || memchr(s, 0, len)) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    return true;
}

/* ---- worker records ----------------------------------------------------------------- */

/* The record of fqcn: a live one if there is one, else a lost one. */
static struct worker *find_worker(const struct cj_fl_sessions *s, const char *fqcn)
{
    struct worker *lost = NULL;
    if (!fqcn || !fqcn[0]) return NULL;
    for (struct worker *w = s->workers; w; w = w->next) {
        if (w->any_fqcn || strcmp(w->fqcn, fqcn)) continue;
        if (w->state != W_LOST) return w;
        if (!lost) lost = w;
    }
    return lost;
}

/* An unbound any-FQCN record whose token the proof matches. */
static struct worker *find_any_by_token(const struct cj_fl_sessions *s, const char *proof)
{
    for (struct worker *w = s->workers; w; w = w->next)
        if (w->any_fqcn && w->state != W_LOST && cj_capi_token_equal(proof, strlen(proof), w->token)) return w;
    return NULL;
}

static bool holds_task(const struct worker *w)
{
    return w->task_id[0] && !w->result_accepted;
}

static bool is_idle(const struct worker *w)
{
    return w->state == W_READY && w->link_up && !w->stopping && !w->task_id[0] && !w->source_live;
}

static const char *shown_state(const struct worker *w)
{
    switch (w->state) {
    case W_EXPECTED: return "expected";
    case W_HELLO: return "hello";
    case W_LOST: return "lost";
    case W_READY: break;
    }
    if (w->source_live) return "result";
    if (w->task_id[0]) return "busy";
    return "ready";
}

static void touch(struct worker *w)
{
    w->last_seen = cj_now();
}

static struct cj_task *task_of(const struct cj_fl_sessions *s, const struct worker *w)
{
    return w->task_id[0] ? cj_task_find(s->tt, w->task_id) : NULL;
}

/* A call the caller must not see from inside its own call (shutdown answers
 * for a worker that went away). */
struct deferred_shut {
    cj_fl_shutdown_fn fn;
    void *arg;
    char fqcn[CJ_CAPI_ID_MAX + 1];
};

static void deferred_shut_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct deferred_shut *d = arg;
    d->fn(d->arg, d->fqcn, -1, false);
    free(d);
}

static void cancel_requests(struct worker *w)
{
    struct cj_fl_sessions *s = w->s;
    if (w->task_req_pending) cj_stream_request_cancel(s->ep, w->task_req);
    w->task_req_pending = false;
    if (w->shut_pending) {
        cj_stream_request_cancel(s->ep, w->shut_req);
        w->shut_pending = false;
        struct deferred_shut *d = calloc(1, sizeof *d);
        static const struct timeval zero = {0, 0};
        if (d && w->shut_fn) {
            d->fn = w->shut_fn;
            d->arg = w->shut_arg;
            copy_str(d->fqcn, sizeof d->fqcn, w->fqcn);
            if (event_base_once(s->base, -1, EV_TIMEOUT, deferred_shut_cb, d, &zero) == 0) d = NULL;
        }
        free(d);
    }
}

static void remove_worker(struct cj_fl_sessions *s, struct worker *w)
{
    for (struct worker **pp = &s->workers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    s->n_workers--;
    cancel_requests(w);
    cj_fl_workerlog_retire(s, w);
    wipe(w, sizeof *w);
    free(w);
}

/* A new expected-worker record at the end of the list (nothing is evicted here). */
static struct worker *add_record(struct cj_fl_sessions *s, const char *fqcn, const char *token)
{
    struct worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->s = s;
    w->any_fqcn = !fqcn || !fqcn[0];
    copy_str(w->fqcn, sizeof w->fqcn, w->any_fqcn ? "" : fqcn);
    copy_str(w->token, sizeof w->token, token);
    w->state = W_EXPECTED;
    w->link_up = true;
    w->last_seen = -1;
    w->idle_since = w->expected_at = cj_now();
    struct worker **pp = &s->workers;   /* kept in the order they became known */
    while (*pp) pp = &(*pp)->next;
    *pp = w;
    s->n_workers++;
    return w;
}

/* ---- sending --------------------------------------------------------------------------- */

static const struct cj_stream_msg FOBS_MSG = {.encoding = "fobs"};

/* Answers request b with the body in sb (taken), cell rc "ok" or rc. */
static void reply_sb(struct cj_fl_sessions *s, struct cj_stream_blob *b, msgpack_sbuffer *sb, const char *rc)
{
    if (!b->req.has_ri) {
        msgpack_sbuffer_destroy(sb);
        return;
    }
    struct worker *w = find_worker(s, b->origin);
    if (w) w->bytes += sb->size;
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(sb);
    if (!eb || cj_stream_reply(s->ep, &b->req, rc, &FOBS_MSG, eb, NULL, NULL) != 0)
        cj_log_warning("client_api: cannot answer %s from %s", b->req.topic, b->origin);
}

typedef int (*reason_enc_fn)(msgpack_sbuffer *, const char *, struct cj_err *);

static void reply_reason(struct cj_fl_sessions *s, struct cj_stream_blob *b, reason_enc_fn enc, const char *reason)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (enc(&sb, reason, &e)) {
        cj_log_error("client_api: cannot encode a reply to %s: %s", b->req.topic, e.msg);
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    reply_sb(s, b, &sb, NULL);
}

/* A body that is not a map: NVFlare answers cell rc invalid_request, no body. */
static void reply_invalid(struct cj_fl_sessions *s, struct cj_stream_blob *b, const char *why)
{
    s->st.bad_requests++;
    cj_stream_relay_stats(s->ep)->drops++;
    cj_log_warning("client_api: %s from %s is not a valid request: %s", b->req.topic, b->origin, why);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    reply_sb(s, b, &sb, "invalid_request");
}

/* Fire-and-forget to a worker. */
static int send_oneway(struct cj_fl_sessions *s, struct worker *w, const char *topic, msgpack_sbuffer *sb)
{
    struct cj_stream_msg m = {.encoding = "fobs", .optional = true};
    w->bytes += sb->size;
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(sb);
    if (!eb) return -1;
    return cj_stream_send(s->ep, w->fqcn, CH, topic, &m, NULL, eb, NULL, NULL, NULL);
}

static int send_abort(struct cj_fl_sessions *s, struct worker *w, const char *reason)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (!w->session_id[0] || cj_capi_encode_abort(&sb, w->session_id, reason, &e)) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    cj_log_info("client_api: abort sent to %s: %s", w->fqcn, reason);
    return send_oneway(s, w, CJ_CAPI_T_ABORT, &sb);
}

/* ---- end of run ----------------------------------------------------------------------------- */

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cj_fl_sessions *s = arg;
    cj_log_info("client_api: end of run: no worker holds a task or a live result source");
    if (s->drained) s->drained(s->drained_arg);
}

static void check_drained(struct cj_fl_sessions *s)
{
    if (s->draining && !s->drained_fired && cj_fl_sessions_busy(s) == 0) {
        s->drained_fired = true;
        event_active(s->drain_ev, EV_TIMEOUT, 1);
    }
}

static void kick(struct cj_fl_sessions *s)
{
    if (!s->draining && s->sub.kick) s->sub.kick(s->sub.ctx);
}

/* ---- task failure and worker loss ---------------------------------------------------------- */

/* The worker gives task t up: it is reported failed upstream, never dropped. */
static void fail_task(struct cj_fl_sessions *s, struct worker *w, struct cj_task *t, const char *why)
{
    char refs[1024];
    if (w) {
        w->task_id[0] = 0;
        w->result_accepted = w->source_live = false;
        w->idle_since = cj_now();
    }
    if (!t) return;
    cj_log_error("task %s (server task %s, '%s') failed on worker %s: %s; refs: %s", t->id, t->server_id, t->name,
                 w ? w->fqcn : t->worker, why, cj_task_refs_text(t->refs, t->n_refs, refs, sizeof refs));
    s->st.tasks_failed++;
    if (s->sub.failed) s->sub.failed(s->sub.ctx, t, why);
}

/* The worker lost t before its result (it did not give it up itself): the
 * submit side may take it back to deliver it again (spool mode: the files are
 * still on disk); otherwise it is reported failed. */
static void lose_task(struct cj_fl_sessions *s, struct worker *w, struct cj_task *t, const char *why)
{
    if (t && s->sub.requeue) {
        w->task_id[0] = 0;
        w->result_accepted = w->source_live = false;
        w->idle_since = cj_now();
        if (s->sub.requeue(s->sub.ctx, t, why) == 0) {
            cj_log_warning("task %s (server task %s, '%s') taken back from worker %s (%s): it will be delivered "
                           "again",
                           t->id, t->server_id, t->name, w->fqcn, why);
            return;
        }
    }
    fail_task(s, w, t, why);
}

/* The lost callback runs from the loop, never inside our own iteration. */
struct deferred_lost {
    void (*fn)(void *arg, const char *fqcn, const char *why);
    void *arg;
    char fqcn[CJ_CAPI_ID_MAX + 1];
    char why[300];
};

static void deferred_lost_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct deferred_lost *d = arg;
    d->fn(d->arg, d->fqcn, d->why);
    free(d);
}

static void notify_lost(struct cj_fl_sessions *s, const char *fqcn, const char *why)
{
    static const struct timeval zero = {0, 0};
    struct deferred_lost *d = calloc(1, sizeof *d);
    if (!d) return;
    d->fn = s->lost;
    d->arg = s->lost_arg;
    copy_str(d->fqcn, sizeof d->fqcn, fqcn);
    copy_str(d->why, sizeof d->why, why);
    if (event_base_once(s->base, -1, EV_TIMEOUT, deferred_lost_cb, d, &zero) != 0) free(d);
}

static void worker_lost(struct cj_fl_sessions *s, struct worker *w, const char *why, bool notify)
{
    if (w->state == W_LOST) return;
    bool had_session = w->session_id[0] != 0;
    w->state = W_LOST;
    s->st.workers_lost++;
    cj_log_warning("worker %s lost: %s", w->fqcn[0] ? w->fqcn : "(unbound)", why);
    if (w->task_req_pending) cj_stream_request_cancel(s->ep, w->task_req);
    w->task_req_pending = false;
    struct cj_task *t = task_of(s, w);
    if (holds_task(w)) {
        char msg[512];
        snprintf(msg, sizeof msg, "worker %s lost while it held the task (%s)", w->fqcn, why);
        lose_task(s, w, t, msg);
    } else if (w->source_live) {
        char refs[1024];
        /* R13: the server may still be pulling these refs from the dead worker. */
        cj_log_error("worker %s died inside the result barrier of task %s (server task %s): result refs %s "
                     "are gone; %s",
                     w->fqcn, w->task_id, t ? t->server_id : "?",
                     t ? cj_task_refs_text(t->result_refs, t->n_result_refs, refs, sizeof refs) : "unknown",
                     w->submit_answered ? "the server had already answered the submission"
                                        : "the submission will fail or time out upstream");
        if (t) {
            /* Not in spool mode (requeue op set): there the relay itself downloads
             * the worker's result, and the refs the server pulls are the relay's. */
            if (!s->sub.requeue) cj_fl_srcfail_send(&s->sf, w->fqcn, t, why);
            for (size_t i = 0; i < t->n_result_refs; i++)
                if (t->result_refs[i].state == CJ_REF_PENDING) t->result_refs[i].state = CJ_REF_FAILED;
            if (w->submit_answered && w->submit_ok) cj_task_set_state(t, CJ_TASK_DONE);
        }
        w->task_id[0] = 0;
        w->source_live = w->result_accepted = false;
    }
    if (had_session && w->link_up) send_abort(s, w, why);
    check_drained(s);
    if (notify && s->lost && w->fqcn[0]) notify_lost(s, w->fqcn, why);
    /* A launch_token_file token outlives the worker that used it: the next
     * process presenting it may connect. */
    if (w->from_token_file && !find_any_by_token(s, w->token)) {
        if (s->n_workers < CJ_FL_MAX_WORKERS && add_record(s, NULL, w->token))
            cj_log_info("client_api: the launch token of %s is accepted again from a new worker", w->fqcn);
        else
            cj_log_error("client_api: cannot keep the launch token record of %s", w->fqcn);
    }
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cj_fl_sessions *s = arg;
    double now = cj_now();
    char why[160];
    for (struct worker *w = s->workers; w; w = w->next) {
        if (s->launch_timeout > 0 && !w->any_fqcn && (w->state == W_EXPECTED || w->state == W_HELLO) &&
            now - w->expected_at > s->launch_timeout) {
            snprintf(why, sizeof why, "no %s within launch_timeout (%g s)",
                     w->state == W_EXPECTED ? "HELLO" : "SESSION_READY", s->launch_timeout);
            worker_lost(s, w, why, true);
            continue;
        }
        if (!(s->hb_timeout > 0) || (w->state != W_HELLO && w->state != W_READY) || w->last_seen < 0) continue;
        double silent = now - w->last_seen;
        if (silent > s->hb_timeout) {
            snprintf(why, sizeof why, "no valid message for %.1f s (heartbeat_timeout %g s)", silent, s->hb_timeout);
            worker_lost(s, w, why, true);
        }
    }
}

/* ---- session validation ---------------------------------------------------------------------- */

/* Binds a post-HELLO message to its worker's session (NVFlare's
 * _validate_session_msg): the record of cn__origin, ready, same session_id. */
struct worker *cj_fl_sess_session_of(struct cj_fl_sessions *s, const char *origin, const struct cj_capi_msg *m,
                                     char *reason, size_t reasonsz)
{
    struct worker *w = find_worker(s, origin);
    if (!w || w->state != W_READY) {
        copy_str(reason, reasonsz, "no active trainer session");
        return NULL;
    }
    if (!(m->has & CJ_CAPI_F_SESSION_ID) || strcmp(m->session_id, w->session_id)) {
        copy_str(reason, reasonsz, "stale or unknown session id");
        return NULL;
    }
    touch(w);
    return w;
}

/* Decodes a request body.  0: m complete; 1: the body is a map the strict
 * decoder refused (m->has then says which ids were found, for reasons); -1: not
 * a map, already answered invalid_request. */
static int decode_req(struct cj_fl_sessions *s, struct cj_stream_blob *b, enum cj_capi_kind kind, const uint8_t *p,
                      size_t n, struct cj_capi_msg *m)
{
    struct cj_err e = {0};
    if (cj_capi_decode_request(kind, p, n, m, &e) == 0) return 0;
    if (!body_is_map(p, n)) {
        reply_invalid(s, b, e.msg);
        return -1;
    }
    cj_log_info("client_api: %s from %s: %s", cj_capi_kind_name(kind), b->origin, e.msg);
    m->has = 0;
    if (cj_fl_sess_body_str(p, n, "session_id", m->session_id, sizeof m->session_id)) m->has |= CJ_CAPI_F_SESSION_ID;
    if (cj_fl_sess_body_str(p, n, "task_id", m->task_id, sizeof m->task_id)) m->has |= CJ_CAPI_F_TASK_ID;
    return 1;
}

/* ---- hello / session_ready -------------------------------------------------------------------- */

static bool is_child(const struct cj_fl_sessions *s, const char *fqcn)
{
    size_t n = strlen(s->me);
    return !strncmp(fqcn, s->me, n) && fqcn[n] == '.' && fqcn[n + 1] && !strchr(fqcn + n + 1, '.');
}

static int on_hello(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    struct cj_err e = {0};
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    const char *origin = b->origin ? b->origin : "";
    char reason[CJ_CAPI_REASON_BUF];

    if (cj_capi_decode_request(CJ_CAPI_HELLO, p, n, m, &e)) {
        reply_invalid(s, b, e.msg);
        return 0;
    }
    struct worker *w = NULL;
    int step = -1;
    if (s->closed) {
        copy_str(reason, sizeof reason, "backend is closed");
    } else {
        w = find_worker(s, origin);
        if ((!w || w->state == W_LOST) && (m->has & CJ_CAPI_F_TRAINER_FQCN)) w = find_worker(s, m->trainer_fqcn);
        if ((!w || w->state == W_LOST) && (m->has & CJ_CAPI_F_PROOF)) w = find_any_by_token(s, m->proof);
        if (w && w->state == W_LOST) w = NULL;   /* that launch is over */
        struct cj_capi_hello_expect x = {
            .active = w != NULL,
            .origin = origin,
            .trainer_fqcn = !w ? NULL : !w->any_fqcn ? w->fqcn : is_child(s, origin) ? origin : "",
            .launch_token = w ? w->token : NULL,
            .job_id = s->job,
            .site_name = s->site,
        };
        step = cj_capi_check_hello(m, &x, reason, sizeof reason);
    }
    if (step != 0) {
        s->st.hellos_rejected++;
        cj_stream_relay_stats(s->ep)->workers_refused++;
        cj_log_warning("client_api: rejecting HELLO from '%s': %s", origin, reason);
        reply_reason(s, b, cj_capi_encode_hello_rejected, reason);
        return 0;
    }
    if (w->any_fqcn) {
        struct worker *old;   /* an earlier, lost worker of that name: this one replaces it */
        while ((old = find_worker(s, origin)) && old->state == W_LOST) remove_worker(s, old);
        copy_str(w->fqcn, sizeof w->fqcn, origin);
        w->any_fqcn = false;
        w->from_token_file = true;
    }
    if (!w->session_id[0]) {
        if (cj_capi_new_session_id(w->session_id)) {
            cj_log_error("client_api: cannot make a session id for %s", origin);
            return -1;
        }
        w->state = W_HELLO;
        w->link_up = true;
        s->st.hellos_accepted++;
        cj_log_info("client_api: HELLO accepted from %s (session_id=%s); awaiting SESSION_READY", origin,
                    w->session_id);
    } else {
        cj_log_info("client_api: duplicate HELLO from %s: same session", origin);
    }
    touch(w);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_hello_accepted(&sb, w->session_id, s->job, s->site, s->hb_interval, s->hb_timeout, s->secure,
                                      s->secure ? s->auth_token : NULL, s->secure ? s->auth_sig : NULL, &e)) {
        cj_log_error("client_api: cannot encode hello_accepted: %s", e.msg);
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    reply_sb(s, b, &sb, NULL);
    return 0;
}

/* A str header of the request equal (constant time) to want. */
static bool header_equals(const struct cj_hdr *h, const char *key, const char *want)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry ent;
    struct cj_err e = {0};
    bool ok = false;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &ent, &e) == 1) {
        if (!mp_str_eq(ent.key, ent.key_len, key)) continue;
        struct mp_cur c;
        const uint8_t *v;
        uint32_t len;
        mp_cur_init(&c, ent.val.p, ent.val.len);
        ok = mp_read_str(&c, &v, &len, &e) == 0 && cj_capi_token_equal((const char *)v, len, want);
    }
    return ok;
}

static bool delegated_headers_ok(const struct cj_fl_sessions *s, const struct cj_hdr *h)
{
    return h && header_equals(h, "client_name", s->site) && header_equals(h, "__token__", s->auth_token) &&
           header_equals(h, "__token_signature__", s->auth_sig);
}

static int on_session_ready(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    char reason[160];
    if (decode_req(s, b, CJ_CAPI_SESSION_READY, p, n, m) < 0) return 0;

    struct worker *w = find_worker(s, b->origin);
    const char *bad = NULL;
    if (s->closed) bad = "backend is closed";
    else if (!w || w->state == W_LOST || !w->session_id[0]) bad = "no accepted trainer session";
    else if (!(m->has & CJ_CAPI_F_SESSION_ID) || strcmp(m->session_id, w->session_id))
        bad = "stale or unknown session id";
    else if (s->secure && !delegated_headers_ok(s, b->hdr))
        bad = "delegated site authentication headers are not installed";
    if (bad) {
        copy_str(reason, sizeof reason, bad);
        cj_log_warning("client_api: rejecting SESSION_READY from %s: %s", b->origin, reason);
        reply_reason(s, b, cj_capi_encode_error, reason);
        return 0;
    }
    touch(w);
    bool became_ready = w->state == W_HELLO;
    if (became_ready) {
        w->state = W_READY;
        w->idle_since = cj_now();
        cj_log_info("client_api: worker %s ready (session_id=%s)", w->fqcn, w->session_id);
    }
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_session_ready_reply(&sb, w->session_id, &e)) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    reply_sb(s, b, &sb, NULL);
    if (became_ready && s->ready) s->ready(s->ready_arg, w->fqcn);
    if (became_ready) kick(s);
    return 0;
}

/* ---- heartbeat -------------------------------------------------------------------------------- */

static int on_heartbeat(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    char reason[160];
    if (decode_req(s, b, CJ_CAPI_HEARTBEAT, p, n, m) < 0) return 0;
    struct worker *w = NULL;
    if (s->closed) copy_str(reason, sizeof reason, "backend is closed");
    else w = cj_fl_sess_session_of(s, b->origin, m, reason, sizeof reason);
    if (!w) {
        cj_log_warning("client_api: rejecting HEARTBEAT from %s: %s", b->origin, reason);
        reply_reason(s, b, cj_capi_encode_error, reason);
        return 0;
    }
    s->st.heartbeats++;
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_heartbeat_reply(&sb, w->session_id, &e)) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    reply_sb(s, b, &sb, NULL);
    /* A worker still serving its result while the server pulls it: progress. */
    if (w->source_live && m->result_source_live && !w->submit_answered) cj_fl_sessions_progress(s, w->fqcn);
    return 0;
}

/* ---- task_ready ------------------------------------------------------------------------------- */

static struct worker *pick_idle(struct cj_fl_sessions *s)
{
    struct worker *best = NULL;
    for (struct worker *w = s->workers; w; w = w->next)
        if (is_idle(w) && (!best || w->idle_since < best->idle_since)) best = w;   /* longest idle first */
    return best;
}

static size_t op_idle(void *ctx)
{
    struct cj_fl_sessions *s = ctx;
    size_t k = 0;
    if (s->draining || s->closed) return 0;
    for (struct worker *w = s->workers; w; w = w->next) k += is_idle(w);
    return k;
}

static void on_task_reply(void *arg, struct cj_stream_reply *r)
{
    struct worker *w = arg;
    struct cj_fl_sessions *s = w->s;
    w->task_req_pending = false;
    struct cj_task *t = task_of(s, w);
    char why[CJ_CAPI_REASON_BUF + 256];
    size_t n = r->data ? evbuffer_get_length(r->data) : 0;
    w->bytes += n;
    if (strcmp(r->return_code, "ok")) {
        snprintf(why, sizeof why, "cell-level failure delivering TASK_READY: %s%s%s", r->return_code,
                 r->error[0] ? ": " : "", r->error);
        lose_task(s, w, t, why);
        kick(s);
        check_drained(s);
        return;
    }
    touch(w);
    struct cj_capi_msg *m = s->m;
    struct cj_err e = {0};
    const uint8_t *p = n ? evbuffer_pullup(r->data, -1) : (const uint8_t *)"";
    if (cj_capi_decode_reply(CJ_CAPI_TASK_READY, p, n, m, &e)) {
        snprintf(why, sizeof why, "invalid TASK_READY reply: %s", e.msg);
    } else if (m->kind != CJ_CAPI_TASK_ACCEPTED) {
        snprintf(why, sizeof why, "trainer replied %s: %s", cj_capi_topic(m->kind),
                 (m->has & CJ_CAPI_F_REASON) ? m->reason : "None");
    } else if (strcmp(m->task_id, w->task_id)) {
        snprintf(why, sizeof why, "task_accepted names task '%s', not the task sent", m->task_id);
    } else {
        if (t && t->state == CJ_TASK_DELIVERING) cj_task_set_state(t, CJ_TASK_ACCEPTED);
        cj_log_info("task %s accepted by %s", w->task_id, w->fqcn);
        return;
    }
    fail_task(s, w, t, why);
    kick(s);
    check_drained(s);
}

static int op_deliver(void *ctx, struct cj_task *t, const uint8_t *payload, size_t len, char *why, size_t whysz)
{
    struct cj_fl_sessions *s = ctx;
    char refs[1024];
    if (s->draining || s->closed) {
        snprintf(why, whysz, "the relay is ending the run");
        return -1;
    }
    if (t->state == CJ_TASK_FAILED || t->state == CJ_TASK_DONE) {
        snprintf(why, whysz, "task %s is %s", t->id, cj_task_state_name(t->state));
        return -1;
    }
    if (t->worker[0]) {   /* one task's refs never go to two workers */
        snprintf(why, whysz, "task %s was already given to worker %s", t->id, t->worker);
        cj_log_error("refusing to deliver task %s a second time (it went to %s)", t->id, t->worker);
        return -1;
    }
    struct worker *w = pick_idle(s);
    if (!w) {
        snprintf(why, whysz, "no idle worker");
        return -1;
    }
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    struct cj_task_info info;
    msgpack_sbuffer_init(&sb);
    if (cj_splice_task_ready(payload, len, w->session_id, t->id, s->job, s->site, 0, &sb, &info, &e)) {
        msgpack_sbuffer_destroy(&sb);
        snprintf(why, whysz, "cannot build task_ready: %s", e.msg);
        return -1;
    }
    size_t size = sb.size;
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    double timeout = s->task_timeout > 0 ? s->task_timeout : CJ_FL_TASK_WAIT_FOREVER;
    if (!eb || cj_stream_request(s->ep, w->fqcn, CH, CJ_CAPI_T_TASK_READY, &FOBS_MSG, eb, timeout, on_task_reply, w,
                                 &w->task_req, NULL) != 0) {
        snprintf(why, whysz, "cannot send task_ready to %s", w->fqcn);
        return -1;
    }
    w->task_req_pending = true;
    copy_str(w->task_id, sizeof w->task_id, t->id);
    w->result_accepted = w->source_live = w->submit_answered = w->submit_ok = false;
    w->bytes += size;
    copy_str(t->worker, sizeof t->worker, w->fqcn);
    cj_task_set_state(t, CJ_TASK_DELIVERING);
    s->st.tasks_delivered++;
    cj_stream_relay_stats(s->ep)->tasks_out++;
    cj_stream_relay_stats(s->ep)->refs_passed += t->n_refs;
    cj_log_info("task %s (server task %s, '%s') sent to %s: %zu bytes, %s", t->id, t->server_id, t->name, w->fqcn,
                size, cj_task_refs_text(t->refs, t->n_refs, refs, sizeof refs));
    return 0;
}

static void op_end_run(void *ctx)
{
    struct cj_fl_sessions *s = ctx;
    if (!s->draining)
        cj_log_info("client_api: end of run: no new tasks; %zu worker(s) still busy", cj_fl_sessions_busy(s));
    s->draining = true;
    check_drained(s);
}

void cj_fl_sessions_dispatch_ops(struct cj_fl_sessions *s, struct cj_fl_dispatch_ops *out)
{
    out->ctx = s;
    out->idle = op_idle;
    out->deliver = op_deliver;
    out->end_run = op_end_run;
}

/* ---- result_ready ----------------------------------------------------------------------------- */

/* Records the result's download refs (worker FQCN, ref ids) in t. */
static void record_result_refs(struct cj_task *t, const struct worker *w, const uint8_t *p, size_t n)
{
    char why[256];
    if (cj_task_set_result_refs(t, p, n, why, sizeof why)) {
        cj_log_warning("task %s: the result's refs cannot be listed: %s", t->id, why);
        t->n_result_refs = 0;
    }
    for (size_t i = 0; i < t->n_result_refs; i++)
        if (strcmp(t->result_refs[i].fqcn, w->fqcn))
            cj_log_warning("task %s: result ref %s points at %s, not at worker %s", t->id, t->result_refs[i].ref_id,
                           t->result_refs[i].fqcn, w->fqcn);
}

static void on_submit_done(void *ctx, struct cj_task *t, bool ok, const char *why)
{
    struct cj_fl_sessions *s = ctx;
    struct worker *w = NULL;
    for (struct worker *x = s->workers; x; x = x->next)
        if (x->task_id[0] && !strcmp(x->task_id, t->id)) w = x;
    if (ok) {
        cj_log_info("task %s: the server accepted the result%s", t->id,
                    w && w->source_live ? "; waiting for the worker to settle" : "");
        if (w && w->source_live) {
            w->submit_answered = w->submit_ok = true;
            if (t->state < CJ_TASK_SUBMITTED) cj_task_set_state(t, CJ_TASK_SUBMITTED);
        } else if (t->state != CJ_TASK_FAILED) {
            cj_task_set_state(t, CJ_TASK_DONE);
        }
        return;
    }
    cj_log_error("task %s (server task %s): result submission failed: %s", t->id, t->server_id,
                 why ? why : "unknown");
    if (w && w->source_live) {
        /* Nobody will pull the worker's refs: free it rather than let it wait out its idle timeout. */
        w->submit_answered = true;
        send_abort(s, w, "the relay could not submit the result");
        w->task_id[0] = 0;
        w->source_live = w->result_accepted = false;
        w->idle_since = cj_now();
        check_drained(s);
    }
}

static int on_result_ready(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    char reason[CJ_CAPI_REASON_BUF], idr[300], refs[1024];
    int dec = decode_req(s, b, CJ_CAPI_RESULT_READY, p, n, m);
    if (dec < 0) return 0;
    cj_stream_relay_stats(s->ep)->results_in++;

    struct worker *w = NULL;
    struct cj_task *t = NULL;
    if (s->closed) copy_str(reason, sizeof reason, "backend is closed");
    else w = cj_fl_sess_session_of(s, b->origin, m, reason, sizeof reason);
    if (w) w->bytes += n;
    if (w) {
        bool has_tid = m->has & CJ_CAPI_F_TASK_ID;
        if (!has_tid || !w->task_id[0] || strcmp(m->task_id, w->task_id)) {
            repr(idr, sizeof idr, m->task_id, has_tid);
            snprintf(reason, sizeof reason, "no current task matching task_id %s", idr);
            s->st.results_unknown_task++;
            struct cj_task *other = has_tid ? cj_task_find(s->tt, m->task_id) : NULL;
            cj_log_error("client_api: result from %s for task %s refused: %s", w->fqcn, idr,
                         !other ? "no such task was given to it"
                         : strcmp(other->worker, w->fqcn) ? "that task belongs to another worker"
                                                          : "that task is finished");
            w = NULL;
        } else if (w->result_accepted) {
            copy_str(reason, sizeof reason, "a result was already accepted for this task");
            s->st.results_duplicate++;
            cj_log_error("client_api: second result from %s for task %s refused", w->fqcn, w->task_id);
            w = NULL;
        } else if (dec != 0 || cj_fobs_find_shareable(m->body, m->body_len, &(struct cj_fobs_shareable){0}, NULL)) {
            copy_str(reason, sizeof reason, "invalid result envelope: Shareable result required");
            w = NULL;
        } else if (!(t = task_of(s, w))) {
            repr(idr, sizeof idr, m->task_id, true);
            snprintf(reason, sizeof reason, "no current task matching task_id %s", idr);
            w = NULL;
        }
    }
    if (!w) {
        s->st.results_rejected++;
        cj_log_warning("client_api: rejecting RESULT_READY from %s: %s", b->origin, reason);
        reply_reason(s, b, cj_capi_encode_result_rejected, reason);
        return 0;
    }

    /* Accepted.  A result before task_accepted counts as acceptance. */
    if (w->task_req_pending) {
        cj_stream_request_cancel(s->ep, w->task_req);
        w->task_req_pending = false;
    }
    record_result_refs(t, w, p, n);
    w->result_accepted = w->source_live = true;
    w->submit_answered = w->submit_ok = false;
    cj_task_set_state(t, CJ_TASK_RESULT_IN);
    s->st.results_accepted++;
    cj_log_info("task %s: result from %s accepted: %s", t->id, w->fqcn,
                cj_task_refs_text(t->result_refs, t->n_result_refs, refs, sizeof refs));
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_result_accepted(&sb, &e) == 0) reply_sb(s, b, &sb, NULL);
    else msgpack_sbuffer_destroy(&sb);

    /* The raw result_ready payload goes upstream (its contents are taken). */
    if (!s->sub.submit || s->sub.submit(s->sub.ctx, t, b->data, on_submit_done, s) != 0) {
        cj_log_error("task %s: the result could not be handed to the upstream loop", t->id);
        on_submit_done(s, t, false, "cannot submit");
        if (s->sub.failed) s->sub.failed(s->sub.ctx, t, "the relay could not submit the result");
    }
    return 0;
}

/* ---- result_source_settled ------------------------------------------------------------------- */

static int on_settled(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    char reason[400], idr[300];
    if (decode_req(s, b, CJ_CAPI_SETTLED, p, n, m) < 0) return 0;
    struct worker *w = cj_fl_sess_session_of(s, b->origin, m, reason, sizeof reason);
    bool has_tid = m->has & CJ_CAPI_F_TASK_ID;
    if (w && (!has_tid || !m->task_id[0] || !w->source_live || strcmp(m->task_id, w->task_id))) {
        repr(idr, sizeof idr, m->task_id, has_tid);
        snprintf(reason, sizeof reason, "no live result source matching task_id %s", idr);
        w = NULL;
    }
    if (!w) {
        cj_log_warning("client_api: rejecting RESULT_SOURCE_SETTLED from %s: %s", b->origin, reason);
        reply_reason(s, b, cj_capi_encode_error, reason);
        return 0;
    }
    struct cj_task *t = task_of(s, w);
    char task_id[CJ_TASK_ID_LEN + 1];
    copy_str(task_id, sizeof task_id, w->task_id);
    if (t) {
        for (size_t i = 0; i < t->n_result_refs; i++)
            if (t->result_refs[i].state == CJ_REF_PENDING) t->result_refs[i].state = CJ_REF_COMPLETED;
        /* DONE once both the server answered and the worker settled (either order). */
        if (w->submit_answered && w->submit_ok) cj_task_set_state(t, CJ_TASK_DONE);
    }
    cj_log_info("task %s: worker %s settled its result source%s", task_id, w->fqcn,
                w->submit_answered ? "" : " (the server has not answered the submission yet)");
    w->task_id[0] = 0;
    w->source_live = w->result_accepted = false;
    w->idle_since = cj_now();
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_settled_reply(&sb, task_id, &e) == 0) reply_sb(s, b, &sb, NULL);
    else msgpack_sbuffer_destroy(&sb);
    kick(s);
    check_drained(s);
    return 0;
}

/* ---- public: life cycle -------------------------------------------------------------------------- */

static const struct {
    const char *topic;
    cj_stream_handler_fn fn;
} HANDLERS[] = {
    {CJ_CAPI_T_HELLO, on_hello},
    {CJ_CAPI_T_SESSION_READY, on_session_ready},
    {CJ_CAPI_T_HEARTBEAT, on_heartbeat},
    {CJ_CAPI_T_RESULT_READY, on_result_ready},
    {CJ_CAPI_T_SETTLED, on_settled},
    {CJ_CAPI_T_LOG, cj_fl_workerlog_on_log},
};
#define N_HANDLERS (sizeof HANDLERS / sizeof HANDLERS[0])

static bool usable_secret(const char *v)
{
    return v && v[0] && strcmp(v, "NA") && strlen(v) <= CJ_CAPI_TOKEN_MAX;
}

static bool cfg_ok(const struct cj_fl_sessions_cfg *c)
{
    const char *bad = NULL;
    if (!c->site || !c->site[0] || strlen(c->site) > CJ_CAPI_ID_MAX) bad = "site";
    else if (!c->job_id || !c->job_id[0] || strlen(c->job_id) > CJ_CAPI_ID_MAX) bad = "job_id";
    else if (!isfinite(c->heartbeat_interval) || !(c->heartbeat_interval > 0)) bad = "heartbeat_interval";
    else if (!isfinite(c->heartbeat_timeout) || c->heartbeat_timeout < 0 ||
             (c->heartbeat_timeout > 0 && !(c->heartbeat_interval < c->heartbeat_timeout)))
        bad = "heartbeat_timeout (must be 0 or larger than heartbeat_interval)";
    else if (c->secure_mode && (!usable_secret(c->auth_token) || !usable_secret(c->auth_token_signature)))
        bad = "secure mode credentials (token and signature must be set, not NA)";
    if (bad) cj_log_error("client_api: bad worker session settings: %s", bad);
    return !bad;
}

struct cj_fl_sessions *cj_fl_sessions_new(struct event_base *base, struct cj_stream_ep *ep,
                                          const struct cj_fl_sessions_cfg *cfg, struct cj_task_table *tt,
                                          const struct cj_fl_submit_ops *submit)
{
    if (!base || !ep || !cfg || !tt || !cfg_ok(cfg)) return NULL;
    struct cj_fl_sessions *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = base;
    s->ep = ep;
    s->tt = tt;
    if (submit) s->sub = *submit;
    copy_str(s->site, sizeof s->site, cfg->site);
    copy_str(s->job, sizeof s->job, cfg->job_id);
    snprintf(s->me, sizeof s->me, "%s.%s", s->site, s->job);
    s->sf.base = base;
    s->sf.ep = ep;
    s->sf.job = s->job;
    s->hb_interval = cfg->heartbeat_interval;
    s->hb_timeout = cfg->heartbeat_timeout;
    s->task_timeout = cfg->task_idle_timeout;
    s->shutdown_timeout = cfg->shutdown_timeout > 0 ? cfg->shutdown_timeout : SHUTDOWN_TIMEOUT_DEFAULT;
    s->secure = cfg->secure_mode;
    if (s->secure) {
        copy_str(s->auth_token, sizeof s->auth_token, cfg->auth_token);
        copy_str(s->auth_sig, sizeof s->auth_sig, cfg->auth_token_signature);
    }
    s->launch_timeout = cfg->launch_timeout > 0 ? cfg->launch_timeout : 0;
    s->drained = cfg->drained;
    s->drained_arg = cfg->drained_arg;
    s->lost = cfg->lost;
    s->lost_arg = cfg->lost_arg;
    s->ready = cfg->ready;
    s->ready_arg = cfg->ready_arg;
    s->m = calloc(1, sizeof *s->m);
    s->drain_ev = event_new(base, -1, 0, drain_cb, s);
    s->tick = event_new(base, -1, EV_PERSIST, tick_cb, s);
    double every = s->hb_timeout > 0 ? s->hb_timeout / 4 : 1.0;
    if (s->launch_timeout > 0 && s->launch_timeout / 4 < every) every = s->launch_timeout / 4;
    if (every < 0.05) every = 0.05;
    if (every > 1.0) every = 1.0;
    struct timeval tv = cj_tv(every);
    if (!s->m || !s->drain_ev || !s->tick || evtimer_add(s->tick, &tv) != 0) goto fail;
    for (size_t i = 0; i < N_HANDLERS; i++)
        if (cj_stream_on(ep, CH, HANDLERS[i].topic, HANDLERS[i].fn, s) != 0) goto fail;
    return s;
fail:
    cj_log_error("client_api: cannot set up worker sessions");
    cj_fl_sessions_free(s);
    return NULL;
}

void cj_fl_sessions_free(struct cj_fl_sessions *s)
{
    if (!s) return;
    for (size_t i = 0; i < N_HANDLERS; i++) cj_stream_on(s->ep, CH, HANDLERS[i].topic, NULL, NULL);
    cj_fl_srcfail_cancel_all(&s->sf);   /* pending requests cancelled: no callbacks */
    while (s->workers) {
        struct worker *w = s->workers;
        w->shut_fn = NULL;   /* no callbacks from free */
        remove_worker(s, w);
    }
    if (s->tick) event_free(s->tick);
    if (s->drain_ev) event_free(s->drain_ev);
    for (size_t i = 0; i < RETIRED_MAX; i++) free(s->retired[i].metrics);
    free(s->m);
    wipe(s, sizeof *s);
    free(s);
}

/* ---- public: workers ---------------------------------------------------------------------------- */

int cj_fl_sessions_expect(struct cj_fl_sessions *s, const char *fqcn, const char *token)
{
    if (!token || !token[0] || strlen(token) > CJ_CAPI_TOKEN_MAX || (fqcn && strlen(fqcn) > CJ_CAPI_ID_MAX))
        return -1;
    bool any = !fqcn || !fqcn[0];
    struct worker *old = any ? NULL : find_worker(s, fqcn);
    if (old) {
        if (old->state != W_LOST) worker_lost(s, old, "replaced by a new launch with the same name", false);
        remove_worker(s, old);
    }
    if (s->n_workers >= CJ_FL_MAX_WORKERS) {   /* make room: the oldest lost record goes */
        struct worker *victim = NULL;
        for (struct worker *w = s->workers; w; w = w->next)
            if (w->state == W_LOST) { victim = w; break; }
        if (!victim) {
            cj_log_error("client_api: too many workers (%d)", CJ_FL_MAX_WORKERS);
            return -1;
        }
        remove_worker(s, victim);
    }
    return add_record(s, any ? NULL : fqcn, token) ? 0 : -1;
}

void cj_fl_sessions_set_pid(struct cj_fl_sessions *s, const char *fqcn, pid_t pid)
{
    struct worker *w = find_worker(s, fqcn);
    if (w) w->pid = pid;
}

void cj_fl_sessions_link_up(struct cj_fl_sessions *s, const char *fqcn)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w || w->state == W_LOST) return;
    bool was = w->link_up;
    w->link_up = true;
    if (!was && is_idle(w)) kick(s);
}

void cj_fl_sessions_link_down(struct cj_fl_sessions *s, const char *fqcn, const char *why)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w || w->state == W_LOST) return;
    w->link_up = false;
    if (w->state == W_EXPECTED) return;
    if (!(s->hb_timeout > 0)) {   /* no lease to wait out */
        char msg[300];
        snprintf(msg, sizeof msg, "link closed (%s)", why ? why : "unknown");
        worker_lost(s, w, msg, true);
    } else {
        cj_log_info("client_api: link of %s down (%s); lost unless it comes back within %g s", fqcn,
                    why ? why : "unknown", s->hb_timeout);
    }
}

int cj_fl_sessions_worker_exited(struct cj_fl_sessions *s, const char *fqcn, const char *why)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w) return -1;
    int was = w->state == W_LOST ? 0 : holds_task(w) ? 1 : w->source_live ? 2 : 0;
    char msg[300];
    snprintf(msg, sizeof msg, "process exited (%s)", why ? why : "unknown");
    w->link_up = false;   /* no abort to a dead process */
    if (w->stopping && was == 0 && w->state != W_LOST)   /* told to stop, holding nothing: an orderly end */
        cj_log_info("worker %s ended: %s", w->fqcn[0] ? w->fqcn : "(unbound)", msg);
    else
        worker_lost(s, w, msg, false);
    remove_worker(s, w);
    check_drained(s);
    return was;
}

int cj_fl_sessions_abort(struct cj_fl_sessions *s, const char *fqcn, const char *reason)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w || !w->session_id[0]) return -1;
    return send_abort(s, w, reason ? reason : "aborted by the relay") == 0 ? 0 : -1;
}

static void on_shutdown_reply(void *arg, struct cj_stream_reply *r)
{
    struct worker *w = arg;
    struct cj_fl_sessions *s = w->s;
    w->shut_pending = false;
    int status = -1;
    bool live = w->source_live;
    size_t n = r->data ? evbuffer_get_length(r->data) : 0;
    if (!strcmp(r->return_code, "ok") && n) {
        struct cj_capi_msg *m = s->m;
        struct cj_err e = {0};
        if (cj_capi_decode_reply(CJ_CAPI_SHUTDOWN, evbuffer_pullup(r->data, -1), n, m, &e) == 0) {
            status = 0;
            live = m->result_source_live;
            touch(w);
        } else {
            cj_log_warning("client_api: bad shutdown reply from %s: %s", w->fqcn, e.msg);
        }
    } else {
        cj_log_warning("client_api: shutdown of %s: %s%s%s", w->fqcn, r->return_code, r->error[0] ? ": " : "",
                       r->error);
    }
    if (status == 0 && !live && w->source_live) {
        /* The worker's word: its sending has settled (NVFlare clears its latch the same way). */
        struct cj_task *t = task_of(s, w);
        cj_log_info("client_api: %s reports no live result source: barrier of task %s cleared", w->fqcn,
                    w->task_id);
        if (t && w->submit_answered && w->submit_ok) cj_task_set_state(t, CJ_TASK_DONE);
        w->task_id[0] = 0;
        w->source_live = w->result_accepted = false;
        check_drained(s);
    }
    cj_fl_shutdown_fn fn = w->shut_fn;
    w->shut_fn = NULL;
    if (fn) fn(w->shut_arg, w->fqcn, status, live);
}

int cj_fl_sessions_shutdown(struct cj_fl_sessions *s, const char *fqcn, const char *reason, cj_fl_shutdown_fn fn,
                            void *arg)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w || !w->session_id[0] || w->state == W_LOST || w->shut_pending) return -1;
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_capi_encode_shutdown(&sb, w->session_id, reason ? reason : "end of run", &e)) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    w->bytes += sb.size;
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    if (!eb || cj_stream_request(s->ep, w->fqcn, CH, CJ_CAPI_T_SHUTDOWN, &FOBS_MSG, eb, s->shutdown_timeout,
                                 on_shutdown_reply, w, &w->shut_req, NULL) != 0)
        return -1;
    w->shut_pending = true;
    w->shut_fn = fn;
    w->shut_arg = arg;
    w->stopping = true;
    cj_log_info("client_api: shutdown sent to %s", w->fqcn);
    return 0;
}

bool cj_fl_sessions_in_barrier(const struct cj_fl_sessions *s, const char *fqcn)
{
    const struct worker *w = find_worker(s, fqcn);
    return w && w->state != W_LOST && w->source_live;
}

size_t cj_fl_sessions_busy(const struct cj_fl_sessions *s)
{
    size_t k = 0;
    for (const struct worker *w = s->workers; w; w = w->next) k += w->state != W_LOST && (w->task_id[0] || w->source_live);
    return k;
}

void cj_fl_sessions_progress(struct cj_fl_sessions *s, const char *fqcn)
{
    struct worker *w = find_worker(s, fqcn);
    if (!w || !w->source_live || !s->sub.progress) return;
    struct cj_task *t = task_of(s, w);
    if (t && t->state >= CJ_TASK_RESULT_IN && t->state <= CJ_TASK_SUBMITTING) s->sub.progress(s->sub.ctx, t);
}

void cj_fl_sessions_close(struct cj_fl_sessions *s)
{
    s->closed = true;
}

/* ---- public: status ----------------------------------------------------------------------------- */

size_t cj_fl_sessions_workers(const struct cj_fl_sessions *s, cj_fl_worker_fn fn, void *arg)
{
    size_t k = 0;
    double now = cj_now();
    for (const struct worker *w = s->workers; w; w = w->next, k++) {
        struct cj_fl_worker_info wi = {
            .fqcn = w->fqcn,
            .pid = w->pid,
            .state = shown_state(w),
            .link_up = w->link_up,
            .stopping = w->stopping,
            .heartbeat_age = w->last_seen < 0 ? -1 : now - w->last_seen,
            .task = w->task_id,
            .bytes = w->bytes,
        };
        if (fn) fn(arg, &wi);
    }
    return k;
}

size_t cj_fl_sessions_metrics(const struct cj_fl_sessions *s, cj_fl_metric_fn fn, void *arg)
{
    size_t k = 0;
    for (const struct worker *w = s->workers; w; w = w->next)
        for (size_t i = 0; i < w->n_metrics; i++, k++)
            if (fn) fn(arg, w->fqcn, w->metrics[i].name, w->metrics[i].value);
    for (size_t j = 0; j < RETIRED_MAX; j++) {   /* workers that are gone, oldest first */
        const struct retired *r = &s->retired[(s->retired_next + j) % RETIRED_MAX];
        if (!r->metrics || find_worker(s, r->fqcn)) continue;
        for (size_t i = 0; i < r->n; i++, k++)
            if (fn) fn(arg, r->fqcn, r->metrics[i].name, r->metrics[i].value);
    }
    return k;
}

void cj_fl_sessions_get_stats(const struct cj_fl_sessions *s, struct cj_fl_sessions_stats *st)
{
    *st = s->st;
}
