/* SPDX-License-Identifier: Apache-2.0 */
/* spoolstage.h — spool mode's FL side (doc/protocol/download.md §8): a stage between the
 * upstream loop and the worker sessions.
 *
 *   upstream loop --dispatch ops--> stage --dispatch ops--> sessions
 *   upstream loop <--submit ops---- stage <--submit ops---- sessions
 *
 * Tasks: deliver() copies the (small, refs only) get_task payload and spools
 * every DOT-3/6 ref with cj_spool_fetch (tag = the local task id).  Once all
 * are on disk and a worker is idle, each is served from the relay's producer
 * (count mode, 1 receiver, a fresh ref id), the payload's ref datums are
 * rewritten to {fqcn: <relay>, ref_id: <served>} (payload/refmap.h) and the
 * sessions' deliver() gets it.  A fetch failure reports the task failed
 * upstream.  A worker lost while holding the task (the sessions' requeue op)
 * gets the task taken back: it is served again under fresh ref ids to the
 * next idle worker, at most max_deliveries times in all.
 *
 * Results: submit() spools the result's refs from the worker (tag
 * <task id>.result; the relay is the worker's one receiver, so the worker's
 * source settles), serves them to the task's receiver_ids (identity mode) or
 * to one receiver, rewrites the result's datums to the relay and submits it
 * upstream.  Download progress of the served result refs extends the submit
 * timeout.
 *
 * Cleanup: a task's spool (its tags) is dropped once the server accepted the
 * result and the served result refs finished, or when the task failed.  The
 * task's own refs go as soon as its result is in.
 *
 * Every spool call that may call back is made from a deferred event, never
 * from inside a spool callback.  Single-threaded (the loop). */
#ifndef CJ_FL_SPOOLSTAGE_H
#define CJ_FL_SPOOLSTAGE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "fl/fl.h"
#include "fl/task.h"

struct event_base;
struct cj_stream_ep;
struct cj_spool;
struct cj_spool_stage;

#define CJ_SPOOL_STAGE_DELIVERIES 3   /* deliveries of one task at most (first + requeues) */

struct cj_spool_stage_cfg {
    struct event_base *base;
    struct cj_stream_ep *ep;          /* the relay's endpoint: its FQCN goes into the rewritten refs */
    struct cj_spool *spool;
    struct cj_task_table *tt;
    unsigned max_deliveries;          /* 0: CJ_SPOOL_STAGE_DELIVERIES */
};

struct cj_spool_stage_stats {
    uint64_t tasks_spooled;           /* tasks whose refs were all spooled */
    uint64_t tasks_failed;            /* failed here (fetch, serve, rewrite) */
    uint64_t requeued;                /* tasks taken back from a lost worker */
    uint64_t results_spooled, results_failed;
    uint64_t in_progress;             /* records held now */
};

/* up: the upstream loop's submit ops (copied).  NULL on bad cfg / no memory. */
struct cj_spool_stage *cj_spool_stage_new(const struct cj_spool_stage_cfg *cfg, const struct cj_fl_submit_ops *up);
/* The sessions' dispatch ops (copied), once they exist. */
void cj_spool_stage_set_workers(struct cj_spool_stage *st, const struct cj_fl_dispatch_ops *down);
/* Drops every record (their spool refs too) without callbacks.  Before the spool. */
void cj_spool_stage_free(struct cj_spool_stage *st);

/* The stage's ops: dispatch for the upstream loop, submit for the sessions. */
void cj_spool_stage_dispatch_ops(struct cj_spool_stage *st, struct cj_fl_dispatch_ops *out);
void cj_spool_stage_submit_ops(struct cj_spool_stage *st, struct cj_fl_submit_ops *out);

/* Tasks with spool work in flight (fetching, waiting for a worker, a result
 * being spooled or submitted, or served to the server shortly after it was
 * accepted): the run does not end while > 0. */
size_t cj_spool_stage_busy(const struct cj_spool_stage *st);

void cj_spool_stage_get_stats(const struct cj_spool_stage *st, struct cj_spool_stage_stats *out);
/* The last task or result that failed in the spool stage and why ("" none), *at when (0 none). */
#define CJ_SPOOL_STAGE_ERROR_MAX 256
const char *cj_spool_stage_last_error(const struct cj_spool_stage *st, time_t *at);

/* The receiver_ids header of a task's raw __headers__ map: up to cap FQCNs
 * into ids.  Returns the count (0 when absent or not a list
 * of str), -1 when it does not fit. */
int cj_spool_stage_receivers(const uint8_t *headers, size_t len, char (*ids)[256], size_t cap);

#endif
