/* SPDX-License-Identifier: Apache-2.0 */
/* session.h — the relay's side of the Client API toward its workers
 * (doc/protocol/fl-protocols.md §7, §8 steps 2-4, §9).
 *
 * One struct cj_fl_sessions per relay.  It registers handlers for channel
 * client_api on the relay's stream endpoint (hello, session_ready, heartbeat,
 * result_ready, result_source_settled, log) and keeps one record per worker:
 *
 *   expected --hello--> hello --session_ready--> ready <-> busy (a task) -> result (live source) -> ready
 *        any of them --(silent past heartbeat_timeout, process exit)--> lost
 *
 * A worker becomes known through cj_fl_sessions_expect (the launcher's on_spawn,
 * or a launch_token_file record).  It gets one task at a time: the upstream loop
 * hands tasks over through the dispatch ops (fl.h), and results go back through
 * the submit ops.  One task's refs never go to two workers; a result for a task
 * the worker was not given, or a second result, is rejected, counted and logged.
 *
 * Worker link events come from the router, which the daemon owns: the daemon
 * forwards them with cj_fl_sessions_link_up / _link_down, and process exits
 * (the launcher's on_exit) with cj_fl_sessions_worker_exited.
 *
 * Free the sessions BEFORE the stream endpoint (pending requests are cancelled
 * here; their callbacks are not called).  Nothing here logs a token. */
#ifndef CJ_FL_SESSION_H
#define CJ_FL_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fl/fl.h"
#include "fl/task.h"

struct event_base;
struct cj_stream_ep;
struct cj_fl_sessions;

#define CJ_FL_MAX_WORKERS 256          /* records kept (lost ones are evicted first) */
#define CJ_FL_MAX_METRICS 64           /* metric names kept per worker (oldest replaced) */
#define CJ_FL_METRIC_NAME_MAX 511      /* "group.name" */
#define CJ_FL_METRIC_VALUE_MAX 127
#define CJ_FL_TASK_WAIT_FOREVER 1e9    /* task_ready reply timeout "while the worker lives" */

struct cj_fl_sessions_cfg {
    const char *site;                  /* [relay] site */
    const char *job_id;                /* [relay] job_id */
    double heartbeat_interval;         /* announced in hello_accepted: > 0 */
    double heartbeat_timeout;          /* 0 = no lease, else > heartbeat_interval; silence past it = lost */
    bool secure_mode;                  /* announce (and require on session_ready) the delegated credentials */
    const char *auth_token;            /* secure mode: the site's token (not "NA", not empty) */
    const char *auth_token_signature;  /* secure mode: its signature */
    double task_idle_timeout;          /* optional bound on a task_ready reply; 0 = none while the worker lives */
    double shutdown_timeout;           /* reply timeout of client_api.shutdown; 0 = 5 s */
    double launch_timeout;             /* an expected worker without SESSION_READY after this long is
                                          lost (doc/protocol/fl-protocols.md §8 step 2); 0 = no bound */
    /* After end_run (dispatch ops): called once, from the loop, when no worker holds
     * a task or a live result source any more.  May be NULL. */
    void (*drained)(void *arg);
    void *drained_arg;
    /* A worker was declared lost while its process may still run (silence, launch
     * timeout, link gone without a lease): stop it (cj_launcher_stop) so that it is
     * relaunched.  Not called for cj_fl_sessions_worker_exited.  Called from the
     * loop (deferred), never from inside a sessions call.  May be NULL. */
    void (*lost)(void *arg, const char *fqcn, const char *why);
    void *lost_arg;
    /* A worker completed its SESSION_READY (the launcher's launch_timeout stops
     * counting for it).  Called from inside the sessions' handler: it must not
     * call back into the sessions.  May be NULL. */
    void (*ready)(void *arg, const char *fqcn);
    void *ready_arg;
};

struct cj_fl_sessions_stats {
    uint64_t hellos_accepted, hellos_rejected;
    uint64_t tasks_delivered, tasks_failed;        /* tasks_failed: failed() calls made here */
    uint64_t results_accepted, results_rejected;   /* results_rejected includes the two below */
    uint64_t results_unknown_task;                 /* result for a task never given to that worker */
    uint64_t results_duplicate;                    /* second result for the same task */
    uint64_t heartbeats, logs, logs_dropped;
    uint64_t workers_lost, bad_requests;           /* bad_requests: bodies answered invalid_request */
};

/* NULL on bad cfg (site/job empty, interval <= 0, timeout neither 0 nor >
 * interval, secure mode without usable credentials) or no memory; the reason
 * is logged.  tt and submit (copied) must outlive the sessions. */
struct cj_fl_sessions *cj_fl_sessions_new(struct event_base *base, struct cj_stream_ep *ep,
                                          const struct cj_fl_sessions_cfg *cfg, struct cj_task_table *tt,
                                          const struct cj_fl_submit_ops *submit);
/* Unregisters the handlers, cancels pending requests (no callbacks), wipes tokens. */
void cj_fl_sessions_free(struct cj_fl_sessions *s);

/* Fills out with this object's idle / deliver / end_run (fl.h). */
void cj_fl_sessions_dispatch_ops(struct cj_fl_sessions *s, struct cj_fl_dispatch_ops *out);

/* An expected worker: fqcn (its prescribed FQCN; NULL or "" = any FQCN, bound at
 * the first valid hello: a launch_token_file record, which is re-armed for the
 * next process once the bound worker is lost or gone) and its launch token
 * (copied).  A record with the same fqcn is replaced.  0 or -1. */
int cj_fl_sessions_expect(struct cj_fl_sessions *s, const char *fqcn, const char *token);
/* The worker's pid, for show workers (the launcher knows it). */
void cj_fl_sessions_set_pid(struct cj_fl_sessions *s, const char *fqcn, pid_t pid);

/* The router's worker link events, forwarded by the daemon.  A link going down
 * does not end the session by itself (the worker may reconnect and the same
 * FQCN replaces the old link); silence past heartbeat_timeout does — at once
 * when heartbeat_timeout is 0. */
void cj_fl_sessions_link_up(struct cj_fl_sessions *s, const char *fqcn);
void cj_fl_sessions_link_down(struct cj_fl_sessions *s, const char *fqcn, const char *why);

/* The worker's process is gone (launcher on_exit): it is declared lost (its
 * in-flight task failed upstream) and its record dropped.  Returns what it was
 * doing: 0 nothing, 1 a task in flight (failed upstream), 2 inside the result
 * barrier (result accepted, source not settled), -1 unknown fqcn. */
int cj_fl_sessions_worker_exited(struct cj_fl_sessions *s, const char *fqcn, const char *why);

/* Fire-and-forget client_api.abort.  0, or -1 (no session / cannot send). */
int cj_fl_sessions_abort(struct cj_fl_sessions *s, const char *fqcn, const char *reason);

/* client_api.shutdown: fn(arg, fqcn, status, result_source_live) once from the
 * loop: status 0 = answered (result_source_live as the worker said; false
 * clears the relay's barrier), -1 = no valid answer (timeout, cell error, worker
 * gone).  reason NULL = "end of run".  0, or -1 when it cannot be sent (no
 * session): then fn is never called. */
typedef void (*cj_fl_shutdown_fn)(void *arg, const char *fqcn, int status, bool result_source_live);
int cj_fl_sessions_shutdown(struct cj_fl_sessions *s, const char *fqcn, const char *reason, cj_fl_shutdown_fn fn,
                            void *arg);

/* True while the worker owns a live result source (between result_accepted and
 * result_source_settled): do not signal it (doc/protocol/fl-protocols.md §8 step 4). */
bool cj_fl_sessions_in_barrier(const struct cj_fl_sessions *s, const char *fqcn);
/* Workers holding a task or a live result source. */
size_t cj_fl_sessions_busy(const struct cj_fl_sessions *s);
/* The daemon saw bytes move on that worker's link while its result is being
 * pulled: extends the submit_update idle timeout (submit ops progress). */
void cj_fl_sessions_progress(struct cj_fl_sessions *s, const char *fqcn);
/* From now on hello and result_ready are refused ("backend is closed"). */
void cj_fl_sessions_close(struct cj_fl_sessions *s);

/* ---- status (show workers / show metrics) ------------------------------------------ */

struct cj_fl_worker_info {
    const char *fqcn;          /* "" for an unbound launch_token_file record */
    pid_t pid;                 /* 0 unknown */
    const char *state;         /* expected, hello, ready, busy, result, lost */
    bool link_up, stopping;
    double heartbeat_age;      /* seconds since the last valid message; -1 never */
    const char *task;          /* local task id, "" when none */
    uint64_t bytes;            /* client_api payload bytes to and from the worker */
};
typedef void (*cj_fl_worker_fn)(void *arg, const struct cj_fl_worker_info *wi);
/* Calls fn per worker record, in the order they became known; returns the count. */
size_t cj_fl_sessions_workers(const struct cj_fl_sessions *s, cj_fl_worker_fn fn, void *arg);

/* Latest value per metric name: name is the log key, or "key.sub" for each
 * scalar of a map value; value is its text (numbers as Python prints them). */
typedef void (*cj_fl_metric_fn)(void *arg, const char *worker, const char *name, const char *value);
size_t cj_fl_sessions_metrics(const struct cj_fl_sessions *s, cj_fl_metric_fn fn, void *arg);

void cj_fl_sessions_get_stats(const struct cj_fl_sessions *s, struct cj_fl_sessions_stats *st);

#endif
