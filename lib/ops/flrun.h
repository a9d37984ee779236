/* SPDX-License-Identifier: Apache-2.0 */
/* flrun.h — the relay's FL run: the task table, the upstream task loop, the
 * worker sessions and the launcher, connected to each other and to the router.
 * In spool mode also the spool (I/O thread, the relay's producer, the store)
 * and the spool stage between the upstream loop and the sessions
 * (fl/spoolstage.h); the run's spool directory is emptied at start and
 * removed when the run is freed.
 *
 * The upstream loop and the sessions never see each other: each gets the other's
 * operations (fl/fl.h) through small trampolines here, because each needs the
 * other to exist first. */
#ifndef CJ_OPS_FLRUN_H
#define CJ_OPS_FLRUN_H

#include <stdbool.h>
#include <time.h>

#include "ops/config.h"
#include "ops/out.h"
#include "ops/statreg.h"
#include "util/err.h"

struct cj_account;
struct event_base;
struct cj_stream_ep;
struct cj_router;
struct cj_flrun;
struct cj_creds;
struct cj_joblog;

struct cj_flrun_cbs {
    void *ctx;
    void (*ended)(void *ctx, const char *why);   /* run over, workers stopped: exit (or idle) */
    void (*fatal)(void *ctx, const char *why);   /* cannot go on: exit 2 */
    void (*started)(void *ctx);                  /* optional: the server link came up the first time */
    /* optional: no launched worker came through within [workers] launch_timeout; the workers
     * are being stopped and no more are launched */
    void (*cannot_launch)(void *ctx, const char *why);
};

/* What a job started at run time brings beyond its configuration. */
struct cj_flrun_opts {
    const struct cj_creds *creds;   /* the job's credentials; NULL: [upstream] credentials_file, then the
                                       environment */
    const char *runtime_dir;        /* the workers' bootstrap files; NULL: the status socket's directory */
    bool clean_env;                 /* launched workers get PATH, worker_env and the bootstrap path only */
    const char *worker_env;         /* worker_envc "NAME=value" strings, one after the other */
    int worker_envc;
    const struct cj_account *worker_account;   /* launched workers' account; NULL: the daemon's */
    const char *boot_extra;         /* extra bootstrap keys: boot_extrac "key" NUL raw-JSON NUL pairs */
    int boot_extrac;
    const char *worker_cwd;         /* launched workers' working directory; NULL: the daemon's */
    const char *workspace;          /* FLARE's workspace of the job's CP (the pipe trainer's workspace_dir); NULL none */
    struct cj_joblog *joblog;       /* the job's FLARE log files, for the workers' output; NULL none */
};

/* opts may be NULL. */
struct cj_flrun *cj_flrun_new(struct event_base *base, struct cj_stream_ep *ep, struct cj_router *router,
                              const struct cj_config *cfg, const struct cj_flrun_opts *opts,
                              const struct cj_flrun_cbs *cbs, struct cj_err *err);
void cj_flrun_free(struct cj_flrun *f);

void cj_flrun_pause(struct cj_flrun *f);
void cj_flrun_resume(struct cj_flrun *f);
/* Graceful stop: no new tasks, in-flight results finish, workers stop, then ended(). */
void cj_flrun_drain(struct cj_flrun *f, const char *why);
/* Immediate stop of the workers (SIGKILL after nothing). */
void cj_flrun_stop_now(struct cj_flrun *f);

const char *cj_flrun_state(const struct cj_flrun *f);
/* The FLARE generation the run's workers speak ("2.9", "2.7-2.8") and its dialect's name. */
const char *cj_flrun_generation(const struct cj_flrun *f);
const char *cj_flrun_dialect(const struct cj_flrun *f);
/* The FL loop's last failure toward the server job ("" when none), into buf. */
const char *cj_flrun_last_error(const struct cj_flrun *f, char *buf, size_t len);
void cj_flrun_show_workers(struct cj_flrun *f, struct cj_out *o);
/* The launched workers' last launch failure or death, for show info. */
struct cj_workers_failure {
    const char *last_error;   /* "" none; valid until the loop runs again */
    time_t last_error_at;     /* 0 none */
    double relaunch_in;       /* seconds to the nearest pending relaunch, -1 none */
    unsigned failures;        /* failed launches and deaths since each slot's last clean exit */
};
void cj_flrun_workers_failure(const struct cj_flrun *f, struct cj_workers_failure *wf);
/* Spool mode: the last task or result that failed in the spool and why ("" none; *at 0). */
const char *cj_flrun_spool_last_error(const struct cj_flrun *f, time_t *at);
void cj_flrun_show_tasks(struct cj_flrun *f, struct cj_out *o);
/* Pass-through: the refs of the tasks in the table.  Spool mode: the spool's
 * refs instead (tag, state, source, ref_id, served_id, dot, items, bytes on
 * disk, bytes_served, age, why). */
void cj_flrun_show_refs(struct cj_flrun *f, struct cj_out *o);
void cj_flrun_show_metrics(struct cj_flrun *f, struct cj_out *o);

/* Points the stats registry at the run's counting objects: the worker
 * sessions, and in spool mode the spool and its stage (snapshots taken now). */
void cj_flrun_stat_sources(struct cj_flrun *f, struct cj_stat_sources *s);
/* The reloadable settings of the run (spool_max_bytes). */
void cj_flrun_reload(struct cj_flrun *f, const struct cj_config *cfg);

#endif
