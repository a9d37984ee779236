/* SPDX-License-Identifier: Apache-2.0 */
/* flclient.h — the requests a site cell sends to server.<job>: aux requests
 * (__sync_runner__, __task_check__), the __job_heartbeat__, get_task, and the
 * __rc__ of their replies.
 *
 * The relay's upstream loop, the simulator's --drive site and the worker's
 * direct mode all talk to the server this way; each keeps its own timing and
 * what it does with the answers.  Payloads come from flmsg.h. */
#ifndef CJ_FL_FLCLIENT_H
#define CJ_FL_FLCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "stream/stream.h"

#define CJ_FL_AUX_CHANNEL "aux_communication"
#define CJ_FL_SERVER_CHANNEL "server_command"

/* Who talks to whom: the strings are the caller's and must outlive the client. */
struct cj_fl_client {
    struct cj_stream_ep *ep;
    const char *server;                /* server.<job> */
    const char *site;
    const char *job;
};

/* Sends aux request topic (server_task_id NULL but for __task_check__) on
 * aux_communication; fn gets the reply.  NULL, or why it was not sent. */
const char *cj_fl_client_aux(const struct cj_fl_client *c, const char *topic, const char *server_task_id,
                             double timeout, cj_stream_reply_fn fn, void *arg, uint64_t *handle);

/* __sync_runner__: an aux request whose timeout is expected while the server
 * job starts (cj_stream_msg.patient: not counted in timeouts).  NULL, or why
 * it was not sent. */
const char *cj_fl_client_sync(const struct cj_fl_client *c, double timeout, cj_stream_reply_fn fn, void *arg,
                              uint64_t *handle);

/* Sends get_task on server_command (last_task_id NULL on the first poll) with
 * m's headers and flags (NULL: none).  NULL, or why it was not sent. */
const char *cj_fl_client_get_task(const struct cj_fl_client *c, const char *last_task_id,
                                  const struct cj_stream_msg *m, double timeout, cj_stream_reply_fn fn, void *arg,
                                  uint64_t *handle);

/* Sends a __job_heartbeat__ (fire-and-forget, optional).  0 sent, -1 the
 * request could not be built, 1 it could not be sent. */
int cj_fl_client_heartbeat(const struct cj_fl_client *c);

/* A __job_heartbeat__ that asks for an answer (optional, as FLARE sends it):
 * a live server job answers it, and when the job's cell is gone the server's
 * forwarder error fails it at once (comm_error, "StreamTargetUnreachable: ...").
 * NULL when sent, else why not. */
const char *cj_fl_client_heartbeat_req(const struct cj_fl_client *c, double timeout, cj_stream_reply_fn fn, void *arg,
                                       uint64_t *handle);

/* The __rc__ of a reply's Shareable: "OK" when it has none (as FLARE reads it).
 * -1 with rc "" and why filled when the reply carries no Shareable (a failed or
 * empty reply); the reply's return code is not looked at. */
int cj_fl_client_reply_rc(const struct cj_stream_reply *r, char *rc, size_t rcsz, char *why, size_t whysz);

#endif
