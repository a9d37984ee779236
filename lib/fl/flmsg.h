/* SPDX-License-Identifier: Apache-2.0 */
/* flmsg.h — the FL messages of the upstream loop: reading get_task and aux
 * replies, building get_task and aux requests, aux replies, submit_update and
 * failure payloads.
 *
 * Thin wrappers over lib/payload (splice.h, fobs.h) that give their callers
 * (the upstream loop, the simulator, the worker) payloads in evbuffers, so they
 * never handle raw spans.  Outputs are appended to an evbuffer (moved in
 * without a copy where the builder allows); on failure the evbuffer is left as
 * it was and why names the problem (-1 returned). */
#ifndef CJ_FL_FLMSG_H
#define CJ_FL_FLMSG_H

#include <stddef.h>
#include <stdint.h>

#include "fl/task.h"

struct evbuffer;

/* The headers of a get_task reply (doc/protocol/fl-protocols.md §2). */
struct cj_flmsg_task_reply {
    char task_name[CJ_TASK_STR_MAX];    /* task_name ("__try_again__", "__end_run__" or a task) */
    char task_id[CJ_TASK_STR_MAX];      /* __task_id__ ("" when absent) */
    double wait_time;                   /* __wait_time__, < 0 when absent or not a number */
    double min_get_task_timeout;        /* min_get_task_timeout, < 0 when absent or not a number */
};

int cj_flmsg_read_reply(const uint8_t *payload, size_t len, struct cj_flmsg_task_reply *r, char *why, size_t whysz);

/* The __rc__ header of an aux reply; "OK" when the Shareable has none. */
int cj_flmsg_read_rc(const uint8_t *payload, size_t len, char *rc, size_t rcsz, char *why, size_t whysz);

/* get_task request (vector 14; last_task_id NULL on the first poll). */
int cj_flmsg_get_task_request(struct evbuffer *out, const char *site, const char *job_id, const char *last_task_id,
                              char *why, size_t whysz);

/* Aux request (vector 15): server_task_id NULL for __sync_runner__ / __job_heartbeat__. */
int cj_flmsg_aux_request(struct evbuffer *out, const char *topic, const char *server_task_id, const char *site,
                         const char *job_id, char *why, size_t whysz);

/* Aux reply payload: Shareable{__headers__: {__rc__: rc, [__cookie_jar__: the
 * request's, echoed], __peer_ctx__: the relay's FLContext}}.  req may be NULL
 * or unparsable (then no cookie jar). */
int cj_flmsg_aux_reply(struct evbuffer *out, const uint8_t *req, size_t req_len, const char *rc, const char *site,
                       const char *job_id, char *why, size_t whysz);

/* submit_update payload for t (doc/protocol/payload.md §7.3) from the worker's result_ready
 * payload, with t's __headers__, name and server task id. */
int cj_flmsg_submit_payload(struct evbuffer *out, const struct cj_task *t, const uint8_t *result, size_t len,
                            const char *msg_root_id, const char *site, const char *job_id, char *why, size_t whysz);

/* The result for a task that cannot be completed: __rc__ rc (EXECUTION_EXCEPTION)
 * plus the usual result headers; no datums. */
int cj_flmsg_failed_payload(struct evbuffer *out, const struct cj_task *t, const char *rc, const char *msg_root_id,
                            const char *site, const char *job_id, char *why, size_t whysz);

#endif
