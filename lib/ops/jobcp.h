/* SPDX-License-Identifier: Apache-2.0 */
/* jobcp.h — a job's side of FLARE's client parent (CP): what a stock client
 * job says to and answers its parent (doc/protocol/site.md §3).
 *
 * The job's cell keeps a link to the CP (cell/router.h, the parent link).
 * Once both the parent link and the server link are up, it sends
 * admin / train.notify_job_status STARTED (2), again after each reconnect of
 * the parent link (the CP only records the status); at the end STOPPED (3).
 * It answers the CP's client_command requests: abort (the job ends as
 * aborted), show_stats (the job's counters), show_errors (none kept),
 * reset_errors and configure_job_log (acknowledged), abort_task
 * (acknowledged; the task stays with its worker).  For a 2.7.2 / 2.8.x CP,
 * STARTED can be repeated (cj_jobcp_set_started_repeat). */
#ifndef CJ_OPS_JOBCP_H
#define CJ_OPS_JOBCP_H

#include <stdbool.h>
#include <stddef.h>

#include "fl/cpmsg.h"
#include "util/err.h"

struct event_base;
struct cj_router;
struct cj_jobcp;

struct cj_jobcp_cbs {
    void *ctx;
    /* client_command abort: end the job as aborted (from the loop, not inside a router call). */
    void (*abort)(void *ctx, const char *why);
    /* show_stats: up to max name/value pairs of the job's counters into kv; returns how many. */
    size_t (*stats)(void *ctx, struct cj_cpmsg_kv *kv, size_t max);
};

/* Starts the parent link to url (tcp://HOST:PORT) on the job's router and
 * registers the client_command handlers.  NULL with err. */
struct cj_jobcp *cj_jobcp_new(struct event_base *base, struct cj_router *r, const char *url, const char *job_id,
                              const struct cj_jobcp_cbs *cbs, struct cj_err *err);
/* Sends STARTED again every `every` seconds while the job runs (0, the
 * default: once per parent link).  For a FLARE 2.7.2 / 2.8.x CP: it records a
 * status only once its launch bookkeeping for the job exists, answering ok
 * either way, and it can abort only a job it saw STARTED
 * (doc/protocol/site.md §3.1). */
void cj_jobcp_set_started_repeat(struct cj_jobcp *cp, double every);
/* STOPPED to the CP (when its link is up); no STARTED after this. */
void cj_jobcp_stopped(struct cj_jobcp *cp);
/* Bytes still queued toward the CP (a job waits for them before its cell goes). */
size_t cj_jobcp_queued(const struct cj_jobcp *cp);
void cj_jobcp_free(struct cj_jobcp *cp);

#endif
