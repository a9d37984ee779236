/* SPDX-License-Identifier: Apache-2.0 */
/* upstream.h — the relay's FL loop toward server.<job> (doc/protocol/fl-protocols.md §1-§4, §9).
 *
 * The relay acts as the cell <site>.<job> running NVFlare's client runner:
 *
 *   start ──> __sync_runner__ (every sync_interval, sync_timeout each, until
 *             __rc__ OK; after sync_give_up: fatal "cannot sync with server.<job>")
 *         ──> __job_heartbeat__ fire-and-forget every job_heartbeat_interval
 *         ──> get_task polling, only while dispatch idle() > 0 and not paused or
 *             draining: a task goes to the task table then to dispatch deliver();
 *             __try_again__ waits __wait_time__; __end_run__ ends the run;
 *             authentication_error backs off reconnect_min .. reconnect_max
 *
 * Results come back through the submit ops (fl.h): __task_check__ (retried
 * every task_check_interval on COMMUNICATION_ERROR / SERVER_NOT_READY / no
 * reply; TASK_UNKNOWN drops the result), then submit_update with a fresh
 * __msg_root_id__ (also as cell header cn__msg_root_id) and app header
 * project_name, whose reply wait is an idle timeout of get_task_timeout that
 * the progress() op restarts; up to submit_attempts sends, each after a fresh
 * task check.  failed() sends an EXECUTION_EXCEPTION result the same way, and
 * so does a result whose sends all failed (never silently dropped).
 *
 * Incoming aux: __end_run__ is answered __rc__ OK and ends the run; __do_task__
 * is answered TOPIC_UNKNOWN.
 *
 * Everything runs on the event loop's thread.  No callback may free the loop
 * object (cj_fl_up_free) from inside itself. */
#ifndef CJ_FL_UPSTREAM_H
#define CJ_FL_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "fl/creds.h"
#include "fl/fl.h"
#include "fl/flclient.h"
#include "fl/task.h"

struct cj_stream_ep;

struct cj_fl_up_cfg {
    const char *site;                /* [relay] site: client_name, __identity_name__ */
    const char *job_id;              /* the job: peer is server.<job_id> */
    const char *project_name;        /* app header on get_task / submit_update; NULL or "" = none */
    const struct cj_creds *creds;    /* auth headers set on the endpoint; NULL = leave them alone */
    double get_task_interval;        /* 0.5 s: poll pause after try-again, errors, tasks without __wait_time__ */
    double get_task_timeout;         /* 60 s: get_task reply timeout */
    double submit_timeout;           /* 60 s: submit_update idle timeout (no reply, no result download progress) */
    double job_heartbeat_interval;   /* 10 s; <= 0: no heartbeats */
    double job_heartbeat_timeout;    /* 60 s: the server job's cell answered "not there" (target
                                        unreachable) this long, with no answer from it between: the
                                        job is gone, on_fatal; <= 0: never */
    double reconnect_min;            /* 0.5 s: first back-off after authentication_error ... */
    double reconnect_max;            /* 30 s: ... doubling up to this */
    double sync_interval;            /* 0.5 s between __sync_runner__ tries */
    double sync_timeout;             /* 2 s reply timeout of one try */
    double sync_give_up;             /* 60 s: then the fatal callback */
    double task_check_timeout;       /* 5 s */
    double task_check_interval;      /* 5 s between task check tries */
    unsigned task_check_tries;       /* 120: tries per check before giving the result up */
    unsigned submit_attempts;        /* 3: submit_update sends per result */
    /* The run ended (__end_run__ in a get_task reply or as aux).  dispatch
     * end_run is called just before. */
    void (*on_end_run)(void *ctx, const char *why);
    /* The loop cannot go on: sync gave up ("cannot sync with server.<job>"), or
     * the server job is gone ("the server job server.<job> is gone: ..."). */
    void (*on_fatal)(void *ctx, const char *why);
    void *cb_ctx;
};

/* The defaults above; strings NULL, no callbacks. */
void cj_fl_up_cfg_default(struct cj_fl_up_cfg *cfg);

enum cj_fl_up_state {
    CJ_FL_UP_IDLE,       /* created, not started */
    CJ_FL_UP_SYNCING,    /* __sync_runner__ until OK */
    CJ_FL_UP_RUNNING,    /* heartbeats and polling */
    CJ_FL_UP_ENDED,      /* __end_run__: no more polling; in-flight results still finish */
    CJ_FL_UP_FATAL,      /* gave up (sync) */
};

struct cj_fl_up_status {
    enum cj_fl_up_state state;
    bool paused, draining;
    bool polling;                    /* a get_task request is waiting for its reply */
    double backoff;                  /* current authentication back-off (0 when none) */
    double get_task_timeout;         /* in use (raised by min_get_task_timeout) */
    char last_task_id[CJ_TASK_STR_MAX];   /* the server's id of the last task received */
    char last_error[256];            /* the last upstream failure ("" after a good reply) */
    uint64_t sync_tries, polls, try_again, tasks, heartbeats, submits, submits_failed, auth_errors;
    unsigned submissions;            /* results / failure reports in progress */
};

struct cj_fl_up;

/* site, job_id and ep are required.  Copies cfg (and its strings), sets the
 * auth headers from cfg->creds, registers the aux handlers on ep.  NULL on bad
 * arguments (logged) or no memory. */
struct cj_fl_up *cj_fl_up_new(struct event_base *base, struct cj_stream_ep *ep, const struct cj_fl_up_cfg *cfg,
                              struct cj_task_table *tt, const struct cj_fl_dispatch_ops *dispatch);

/* Cancels every request and timer and removes the aux handlers; submissions
 * in progress are dropped without calling their done callbacks. */
void cj_fl_up_free(struct cj_fl_up *up);

/* (Re)sets the endpoint's auth headers: client_name = site, ssid, __token__,
 * __token_signature__.  0 or -1.  Values are never logged. */
int cj_fl_up_set_creds(struct cj_fl_up *up, const struct cj_creds *c);

/* Call when the upstream link is READY: starts the sync.  Again while syncing
 * or running: nothing.  0, or -1 after the end of the run or a fatal error. */
int cj_fl_up_start(struct cj_fl_up *up);

/* Stop / restart polling (a get_task already sent is still handled). */
void cj_fl_up_pause(struct cj_fl_up *up);
void cj_fl_up_resume(struct cj_fl_up *up);
/* The upstream link reconnected: waiting task checks and the poll go now. */
void cj_fl_up_reconnected(struct cj_fl_up *up);
/* Stops polling for good; results in flight still go out. */
void cj_fl_up_drain(struct cj_fl_up *up);

/* The submit ops (fl.h) of this loop:
 *   submit: 0 = taken, done will run once; -1 = refused at once (the result
 *           cannot be spliced, or t already has a submission): done is not
 *           called; the caller reports the task failed.  done(ok = false)
 *           means t is already failed and, unless the server no longer knows
 *           it (TASK_UNKNOWN) or could not be reached, being reported as
 *           EXECUTION_EXCEPTION: calling failed() then is not needed.
 *   failed: cj_task_fail(t, why) and an EXECUTION_EXCEPTION result upstream (a
 *           result being submitted for t is replaced by it if that send fails).
 *   kick:   polls now if allowed (a pending __wait_time__ is still honoured).
 *   progress: restarts t's submit_update idle timeout. */
void cj_fl_up_submit_ops(struct cj_fl_up *up, struct cj_fl_submit_ops *out);

void cj_fl_up_get_status(const struct cj_fl_up *up, struct cj_fl_up_status *st);
const char *cj_fl_up_state_name(enum cj_fl_up_state s);

#endif
