/* SPDX-License-Identifier: Apache-2.0 */
/* srcfail.h — download_service__source_failure notices (doc/protocol/download.md §2, §7).
 *
 * A worker that dies inside the result barrier of a task takes its live result
 * refs with it.  The sessions then tell the result receivers (the task's
 * receiver_ids, else server.<job>) which refs of which source are gone, so
 * their downloads fail fast instead of timing out.  Each notice is retried on
 * its own timer; the outcome is logged and counted, never reported back. */
#ifndef CJ_FL_SRCFAIL_H
#define CJ_FL_SRCFAIL_H

#include <stdint.h>

#include "fl/task.h"

struct event_base;
struct cj_stream_ep;
struct sf_notice;

/* The notices under way, kept by the sessions (base, ep and job set by them). */
struct cj_fl_srcfail {
    struct event_base *base;
    struct cj_stream_ep *ep;
    const char *job;                  /* the job id (server.<job> is the default receiver) */
    struct sf_notice *notices;
    uint64_t sent, failed;            /* notices delivered, notices given up */
};

/* Source (a worker FQCN) died inside the result barrier of t: sends one notice
 * naming t's pending result refs to each result receiver.  Sending starts from
 * the loop, never inside the caller's chain; nothing is sent when t has no
 * pending result ref. */
void cj_fl_srcfail_send(struct cj_fl_srcfail *sf, const char *source, const struct cj_task *t, const char *why);

/* Drops every notice under way (pending requests cancelled: no callbacks). */
void cj_fl_srcfail_cancel_all(struct cj_fl_srcfail *sf);

#endif
