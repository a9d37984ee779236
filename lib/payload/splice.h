/* SPDX-License-Identifier: Apache-2.0 */
/* splice.h — the payloads the relay builds: TASK_READY from a get_task reply
 * (doc/protocol/payload.md §7.2), SUBMIT_UPDATE from a worker's result (§7.3), and the small
 * Shareables it writes from scratch (get_task request, aux requests; §7.4).
 *
 * Splices copy the task/result body and every datum section byte for byte; only
 * the Shareable's __headers__ map and the envelope are written anew.  Inputs are
 * validated whole (cj_lobs_validate) first.  Output is appended to `out`; on
 * failure `out` is left as it was. */
#ifndef CJ_PAYLOAD_SPLICE_H
#define CJ_PAYLOAD_SPLICE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "payload/fobs.h"
#include "util/err.h"

#define CJ_SPLICE_NAME_MAX 255

/* Flag of cj_splice_task_ready: keep the task body verbatim (no job_id /
 * site_name headers): the envelope-only splice of vector 07. */
#define CJ_SPLICE_NO_HEADER_EDIT 0x1u

/* What a get_task reply told us (for the relay's task table). */
struct cj_task_info {
    char task_name[CJ_SPLICE_NAME_MAX + 1];  /* header task_name */
    char task_id[CJ_SPLICE_NAME_MAX + 1];    /* header __task_id__ ("" when absent) */
    struct cj_range headers;   /* the raw __headers__ map, offsets in the input payload:
                                 keep a copy for cj_splice_submit_update */
    size_t n_datums;          /* datum sections copied */
    size_t main_len;          /* MAIN body length of the output */
};

/* Reads a get_task reply payload: validates the container, requires a Shareable
 * body with a str task_name header, fills info.  No output. */
int cj_splice_read_task(const uint8_t *payload, size_t len, struct cj_task_info *info, struct cj_err *err);

/* TASK_READY (doc/protocol/payload.md §7.2): out += 64 00 <len E> E D1..Dk with
 * E = {session_id: S, task_id: T, task_name: N, model: B'}, B' = the task body
 * with headers job_id and site_name set (or B verbatim with
 * CJ_SPLICE_NO_HEADER_EDIT, then job_id/site may be NULL).  info may be NULL.
 * A body that is not a Shareable fails with CJ_E_TYPE / CJ_E_MISSING. */
int cj_splice_task_ready(const uint8_t *payload, size_t len, const char *session_id, const char *task_id,
                         const char *job_id, const char *site, unsigned flags, msgpack_sbuffer *out,
                         struct cj_task_info *info, struct cj_err *err);

/* A release trainer's task body (releases.md §4.4): the get_task reply payload
 * with headers job_id and site_name set (as TaskExchanger does), datums verbatim. */
int cj_splice_task_body(const uint8_t *payload, size_t len, const char *job_id, const char *site,
                        msgpack_sbuffer *out, struct cj_task_info *info, struct cj_err *err);

/* A release trainer's result (its REP's Shareable payload) as the body
 * {"result": V} that cj_splice_submit_update reads: V and the datums copied
 * byte for byte. */
int cj_splice_wrap_result(const uint8_t *payload, size_t len, msgpack_sbuffer *out, struct cj_err *err);

/* SUBMIT_UPDATE (doc/protocol/payload.md §7.3): takes the "result" value V of the worker's
 * result_ready payload (must be a Shareable) and sets, in this order,
 * current_round and __cookie_jar__ (raw copies from the task, when it had
 * them), __task_name__, __task_id__, __msg_root_id__, __peer_ctx__ (the relay's
 * FLContext); out += 64 00 <len V'> V' E1..Em.
 *   task_headers: the task's raw __headers__ map, or the whole task payload
 *                 (recognised by its 0x64 first byte), or NULL/0.
 *   task_name:    NULL = the task's task_name header.
 *   server_task_id: NULL = raw copy of the task's __task_id__ header. */
int cj_splice_submit_update(const uint8_t *result, size_t len, const uint8_t *task_headers, size_t task_headers_len,
                            const char *task_name, const char *server_task_id, const char *msg_root_id,
                            const char *site, const char *job_id, msgpack_sbuffer *out, struct cj_err *err);

/* A result for a task the relay could not deliver (doc/protocol/fl-protocols.md §4):
 * Shareable{__headers__: {__rc__: rc, <the submit_update headers as above>}}, no
 * datums.  rc must not be RUN_MISMATCH, TASK_UNKNOWN or UNSAFE_JOB (the server
 * would abort the job). */
int cj_splice_failed_result(const char *rc, const uint8_t *task_headers, size_t task_headers_len,
                            const char *task_name, const char *server_task_id, const char *msg_root_id,
                            const char *site, const char *job_id, msgpack_sbuffer *out, struct cj_err *err);

/* get_task request (vector 14): Shareable{__headers__: {__peer_ctx__: FLContext,
 * [last_task_id: id]}} as a complete LOBS payload.  last_task_id NULL on the
 * first poll. */
int cj_build_get_task_request(msgpack_sbuffer *out, const char *site, const char *job_id,
                              const char *last_task_id, struct cj_err *err);

/* Aux request (vector 15): Shareable{__headers__: {[__task_id__: id,] __topic__: topic,
 * __peer_props__: {__identity_name__: site, __run_num__: job}}}.  task_id NULL
 * for __sync_runner__ / __job_heartbeat__. */
int cj_build_aux_request(msgpack_sbuffer *out, const char *topic, const char *task_id, const char *site,
                         const char *job_id, struct cj_err *err);

#endif
