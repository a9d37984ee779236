/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.h — the site daemon's table of jobs.
 *
 * Jobs come from the INI's single-job shorthand ([relay] job_id) or at run
 * time from `job start <json>` (ops/jobdesc.h); each is one relay cell
 * (ops/job.h).  The table enforces [relay] max_jobs, refuses a second job
 * with a live job's id, answers `job wait` when a job ends, and keeps an
 * ended job's record (outcome, reason, counters) for [relay] job_linger
 * seconds after letting go of its cell.  A job started at run time gets its
 * own directory, <status socket without .sock>.jobs/<job_id>/ (bootstrap
 * files, the default worker socket), removed when it ends; a daemon starting
 * up removes what an earlier one left there, and those jobs' spool
 * directories. */
#ifndef CJ_OPS_JOBS_H
#define CJ_OPS_JOBS_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/config.h"
#include "ops/job.h"
#include "ops/out.h"
#include "ops/status.h"
#include "util/err.h"

struct event_base;
struct cj_jobs;

struct cj_jobs_cbs {
    void *ctx;
    /* A job ended (before the table lets go of its cell). */
    void (*ended)(void *ctx, struct cj_job *j);
};

/* site: the daemon's configuration (copied; cj_jobs_set_site after a reload). */
struct cj_jobs *cj_jobs_new(struct event_base *base, const struct cj_config *site, const struct cj_jobs_cbs *cbs,
                            struct cj_err *err);
/* Every job ends now (workers killed) and is freed. */
void cj_jobs_free(struct cj_jobs *js);
void cj_jobs_set_site(struct cj_jobs *js, const struct cj_config *site);

/* The INI's job, from the site configuration itself; NULL with err. */
struct cj_job *cj_jobs_start_config(struct cj_jobs *js, struct cj_err *err);
/* job start <json>, with the nfds open files that came with its line (its
 * tls_fds name them; borrowed, never kept: ops/jobfds.h): 0 with msg "job
 * <id> started", or an ERR code (400 a field named, 409 a live job with that
 * id, 503 the job limit, 500 the job could not start) with msg. */
int cj_jobs_start_json(struct cj_jobs *js, const char *json, const int *fds, int nfds, char *msg, size_t msgsz);
/* job stop <id> [reason]: 0 once stopping, 404 no such job, 409 already ended. */
int cj_jobs_stop(struct cj_jobs *js, const char *id, const char *reason, char *msg, size_t msgsz);
/* job wait <id>: w is answered with the outcome lines ("job_id: ", "outcome: ",
 * "reason: ") at the job's end, or at once when it has ended:
 * CJ_STATUS_DEFERRED.  Without w (no client that can wait): 0 with the lines
 * in msg if it has ended, else 409.  404: no such job. */
int cj_jobs_wait(struct cj_jobs *js, const char *id, struct cj_status_wait *w, char *msg, size_t msgsz);
/* A deferred job wait's client went away. */
void cj_jobs_cancel_wait(struct cj_jobs *js, struct cj_status_wait *w);

struct cj_job *cj_jobs_find(struct cj_jobs *js, const char *id);
/* Jobs not ended yet; all jobs in the table (ended ones lingering too). */
size_t cj_jobs_live(const struct cj_jobs *js);
size_t cj_jobs_count(const struct cj_jobs *js);
/* The i-th job in start order (0 <= i < cj_jobs_count), or NULL. */
struct cj_job *cj_jobs_at(struct cj_jobs *js, size_t i);

/* Each live job drains (ends as aborted once its work settles) / stops now. */
void cj_jobs_drain_all(struct cj_jobs *js, const char *why);
void cj_jobs_stop_all(struct cj_jobs *js, const char *why);

/* show jobs: one row per job. */
void cj_jobs_show(struct cj_jobs *js, struct cj_out *o);

#endif
