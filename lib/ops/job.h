/* SPDX-License-Identifier: Apache-2.0 */
/* job.h — one job: the relay cell <site>.<job_id>.
 *
 * A job owns everything a stock client-job process would: its server link and
 * worker listeners (the router), its stream endpoint, its FL run (task loop,
 * worker sessions, launcher, spool), its counters and its configuration.  The
 * daemon owns what jobs share: the event loop, the status socket, signals and
 * timers.  A job ends on its own (the server's end of run, a fatal error) or
 * when told to (drain, stop now); either way it reports once through ended()
 * with a JobReturnCode-compatible outcome, and the daemon frees it. */
#ifndef CJ_OPS_JOB_H
#define CJ_OPS_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "cell/router.h"
#include "ops/commands.h"
#include "ops/config.h"
#include "ops/flrun.h"
#include "ops/out.h"
#include "ops/statreg.h"
#include "util/err.h"

struct cj_account;
struct event_base;
struct cj_job;

/* FLARE's JobReturnCode (doc/protocol/site.md §1): how a job ended. */
enum cj_job_outcome {
    CJ_JOB_SUCCESS = 0,          /* the server ended the run */
    CJ_JOB_EXECUTION_ERROR = 1,  /* the FL loop could not go on */
    CJ_JOB_ABORTED = 9,          /* stopped by the operator, a signal or the client parent */
    CJ_JOB_EXCEPTION = 101,      /* no worker came through within [workers] launch_timeout */
    CJ_JOB_CONFIG_ERROR = 103,
    CJ_JOB_INFRA_ERROR = 104,    /* e.g. the server never reachable */
};

#define CJ_JOB_REASON_MAX 600        /* a job's reason: a worker's error and last stderr line fit */

enum cj_job_state { CJ_JOB_STARTING, CJ_JOB_RUNNING, CJ_JOB_STOPPING, CJ_JOB_ENDED };

/* What a job started at run time brings beyond its configuration (all optional). */
struct cj_tls_pem;

struct cj_job_opts {
    const struct cj_creds *creds;   /* its credentials, else the site's (file, environment) */
    const struct cj_tls_pem *const *tls_pem;   /* NULL, or 3 (ca, cert, key), each NULL or the text loaded in
                                                  place of that [upstream] file (a file passed as a descriptor);
                                                  read during cj_job_new only */
    const char *dir;                /* its own runtime directory (bootstrap files, worker socket):
                                       created 0711 at start, removed when the job is released */
    const char *workspace;          /* FLARE's workspace: <workspace>/<job_id>/_process_rc.txt at the end */
    double connect_timeout;         /* the server link not up this long after the start: the job ends
                                       with 104 (infrastructure error); 0 = it waits */
    bool clean_env;                 /* launched workers: PATH, worker_env and the bootstrap path only */
    const char *worker_env;         /* worker_envc "NAME=value" strings, one after the other */
    int worker_envc;
    const char *worker_cwd;         /* launched workers' working directory; NULL: the daemon's */
    const struct cj_account *worker_account;   /* launched workers' account (and owner of their unix
                                                  sockets and bootstrap files); NULL: the daemon's */
    const char *boot_extra;         /* the description's bootstrap keys: boot_extrac "key" NUL raw-JSON
                                       NUL pairs, written into every worker's bootstrap file */
    int boot_extrac;
    const char *parent_url;         /* FLARE's client parent (tcp://HOST:PORT): the cell links to it as its
                                       child and tells it the job's status (ops/jobcp.h); NULL: none */
};

struct cj_job_cbs {
    void *ctx;
    /* The job is over and its workers have stopped (outcome and reason set).
     * Called once, from the loop; the job may be freed from inside. */
    void (*ended)(void *ctx, struct cj_job *j);
};

/* Starts the job cfg describes (copied): listeners, stream endpoint, FL run,
 * then the server link.  opts may be NULL.  NULL with err set when any part
 * cannot start (nothing of it is left behind). */
struct cj_job *cj_job_new(struct event_base *base, const struct cj_config *cfg, const struct cj_job_opts *opts,
                          const struct cj_job_cbs *cbs, struct cj_err *err);
void cj_job_free(struct cj_job *j);
/* An ended job lets go of its cell (links, listeners, workers' files, spool,
 * runtime directory) and keeps its record: id, outcome, reason, times and
 * its counters as they ended.  Never from inside ended(). */
void cj_job_release(struct cj_job *j);
bool cj_job_released(const struct cj_job *j);
/* Bytes the job still has queued toward its client parent (STOPPED): its cell
 * is released once they are out. */
size_t cj_job_flushing(const struct cj_job *j);
/* Removes a job's runtime directory and the files in it (it holds no others). */
void cj_job_remove_dir(const char *dir);
/* cj_now() at start and at the end (0 while running). */
double cj_job_started(const struct cj_job *j);
double cj_job_ended_at(const struct cj_job *j);

const char *cj_job_id(const struct cj_job *j);
const char *cj_job_fqcn(const struct cj_job *j);
enum cj_job_state cj_job_state(const struct cj_job *j);
const char *cj_job_state_name(enum cj_job_state s);
/* Valid once ended. */
enum cj_job_outcome cj_job_outcome(const struct cj_job *j);
const char *cj_job_reason(const struct cj_job *j);

/* Stop / restart pulling new tasks. */
void cj_job_pause(struct cj_job *j);
void cj_job_resume(struct cj_job *j);
/* Graceful end as an abort: no new tasks, in-flight results finish, workers stop. */
void cj_job_drain(struct cj_job *j, const char *why);
/* Immediate end as an abort: workers killed. */
void cj_job_stop_now(struct cj_job *j, const char *why);
/* Reloadable settings changed in cfg (limits, intervals, spool_max_bytes). */
void cj_job_reload(struct cj_job *j, const struct cj_config *cfg);

/* The upstream link's state name; the number of connected workers. */
const char *cj_job_upstream_state(const struct cj_job *j);
size_t cj_job_workers(const struct cj_job *j);
/* For the stats registry: the relay counters, the router's and the FL run's. */
void cj_job_stat_sources(struct cj_job *j, struct cj_stat_sources *s);
/* For show info: "pass_through" or "spool"; the FL loop's state; the server
 * URL; the upstream link's peer address ("" while down). */
const char *cj_job_mode(const struct cj_job *j);
const char *cj_job_fl_state(const struct cj_job *j);
/* The FL loop's last failure; once the job's cell is released, the reason it
 * ended with when that was not a success ("" when none). */
const char *cj_job_fl_last_error(const struct cj_job *j, char *buf, size_t len);
const char *cj_job_upstream_url(const struct cj_job *j);
/* The FLARE generation its workers speak: "2.7-2.8" (pipe) or "2.9+" (cellapi), lib/fl/dialect.h. */
const char *cj_job_generation(const struct cj_job *j);
const char *cj_job_upstream_peer(const struct cj_job *j);
/* Its server link's last failure and next attempt (zeroed when it has no cell). */
void cj_job_upstream_status(const struct cj_job *j, struct cj_outlink_status *st);
/* Its launched workers' last launch failure or death (none when it has no FL run). */
void cj_job_workers_failure(const struct cj_job *j, struct cj_workers_failure *wf);
/* The configuration it runs with: the site's keys with its description's over them. */
const struct cj_config *cj_job_config(const struct cj_job *j);
/* Spool mode: its last task or result that failed in the spool ("" none; *at 0). */
const char *cj_job_spool_last_error(const struct cj_job *j, time_t *at);
/* show workers | tasks | refs | metrics for this job. */
void cj_job_show(struct cj_job *j, enum cj_show what, struct cj_out *o);

#endif
