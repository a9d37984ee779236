/* SPDX-License-Identifier: Apache-2.0 */
/* cpmsg.h — the messages between FLARE's client parent (CP) and its client
 * jobs (doc/protocol/site.md §3): the FOBS payloads both sides write and
 * read.  The relay's job cells use them toward a real CP (ops/jobcp.c), and
 * cjrelay-sim plays the CP with them.  All of them travel as direct cellnet
 * messages (doc/protocol/cellnet.md §2, §7). */
#ifndef CJ_FL_CPMSG_H
#define CJ_FL_CPMSG_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define CJ_CPMSG_CH_ADMIN "admin"                          /* FLARE's CellChannel.CLIENT_MAIN */
#define CJ_CPMSG_CH_COMMAND "client_command"               /* CellChannel.CLIENT_COMMAND */
#define CJ_CPMSG_TP_NOTIFY "train.notify_job_status"       /* TrainingTopic.NOTIFY_JOB_STATUS */
#define CJ_CPMSG_STARTED 2                                 /* ClientStatus.STARTED */
#define CJ_CPMSG_STOPPED 3                                 /* ClientStatus.STOPPED */
#define CJ_CPMSG_PAYLOAD_MAX 65536                         /* bytes of a payload read here */
#define CJ_CPMSG_RID_LEN 36                                /* a uuid4's text */

/* One entry of a map payload: a str value, or an int when s is NULL. */
struct cj_cpmsg_kv {
    const char *key;
    const char *s;
    int64_t i;
};

/* A LOBS payload holding an admin_defs.Message data-class wrapper: {id (a fresh
 * uuid4), topic, body, headers}.  headers: job_id (when not NULL), job_status
 * (when >= 0), _rtnCode (when rtn not NULL), in that order.  0 or -1. */
int cj_cpmsg_admin_write(msgpack_sbuffer *sb, const char *topic, const char *body, const char *job_id, long job_status,
                      const char *rtn);

/* Reads an admin_defs.Message payload: its topic and headers job_id (str) and
 * job_status (int; -1 when absent).  -1 with why naming the field. */
int cj_cpmsg_admin_read(const uint8_t *p, size_t len, char *topic, size_t topicsz, char *job_id, size_t jobsz,
                     long *status, char *why, size_t whysz);

/* A LOBS payload whose body is the map kv[0..n) (n = 0: {}). */
int cj_cpmsg_map_write(msgpack_sbuffer *sb, const struct cj_cpmsg_kv *kv, size_t n);

/* A LOBS payload {"command": command, "data": {}} (the CP's abort_task,
 * show_errors, reset_errors). */
int cj_cpmsg_command_write(msgpack_sbuffer *sb, const char *command);

#endif
