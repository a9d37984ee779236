/* SPDX-License-Identifier: Apache-2.0 */
/* fl.h — the contracts between the relay's FL pieces .
 *
 *   upstream loop (upstream.c)  <-- dispatch ops --  worker sessions (session.c)
 *                               --  submit ops   -->
 *
 * Neither side includes the other: the daemon creates both and connects them
 * with these two small tables of callbacks. */
#ifndef CJ_FL_FL_H
#define CJ_FL_FL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl/task.h"

struct evbuffer;

/* What the upstream loop asks of the worker side. */
struct cj_fl_dispatch_ops {
    void *ctx;
    /* Workers ready to take a task now (pull only when > 0). */
    size_t (*idle)(void *ctx);
    /* Hand task t to an idle worker: splice the get_task reply payload into a
     * task_ready and send it.  0 = handed over; <0 = could not (why filled): the
     * upstream loop then reports the task failed.  The payload is only read
     * during the call. */
    int (*deliver)(void *ctx, struct cj_task *t, const uint8_t *payload, size_t len, char *why, size_t whysz);
    /* The run ended (__end_run__): stop workers after in-flight results settle. */
    void (*end_run)(void *ctx);
};

/* What the worker side asks of the upstream loop. */
typedef void (*cj_fl_submit_done_fn)(void *ctx, struct cj_task *t, bool ok, const char *why);
struct cj_fl_submit_ops {
    void *ctx;
    /* Submit a worker's result for t: __task_check__, then submit_update with the
     * submit_update splice of result_payload (taken: contents moved).  done runs
     * once, when the server answered (ok) or the submission finally failed. */
    int (*submit)(void *ctx, struct cj_task *t, struct evbuffer *result_payload, cj_fl_submit_done_fn done,
                  void *done_ctx);
    /* t cannot be completed (worker died, task_failed, bad result): report it to
     * the server as an EXECUTION_EXCEPTION result so it does not wait it out. */
    void (*failed)(void *ctx, struct cj_task *t, const char *why);
    /* A worker became idle: poll for the next task now. */
    void (*kick)(void *ctx);
    /* Progress of a result download (the server pulling from a worker): extends
     * the submit_update idle timeout. */
    void (*progress)(void *ctx, struct cj_task *t);
    /* May be NULL.  The worker holding t was lost before its result (process
     * gone, silence, link gone, task_ready undeliverable) — not when the worker
     * itself gave the task up.  0 = t will be delivered again (the callee has
     * put it back in a deliverable state: state CJ_TASK_RECEIVED, worker "");
     * the caller then forgets it without reporting anything.  <0 = not
     * requeued: the caller calls failed() as before.  Never delivers from
     * inside the call.  Spool mode uses it (lib/fl/spoolstage.c): its files are
     * still on disk, so another worker can download the task again. */
    int (*requeue)(void *ctx, struct cj_task *t, const char *why);
};

#endif
