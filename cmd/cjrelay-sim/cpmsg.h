/* cpmsg.h — the messages between a client parent (CP) and its client jobs
 * (doc/protocol/site.md §3) as cjrelay-sim writes and reads them: the parent
 * cell (cp.c) and the stand-in site's parent link (drive.c).  All of them are
 * direct cellnet messages (doc/protocol/cellnet.md §2, §7) with FOBS payloads. */
#ifndef SIM_CPMSG_H
#define SIM_CPMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "net/link.h"
#include "wire/header.h"
#include "wire/msg.h"

#define CPMSG_CH_ADMIN "admin"                          /* FLARE's CellChannel.CLIENT_MAIN */
#define CPMSG_CH_COMMAND "client_command"               /* CellChannel.CLIENT_COMMAND */
#define CPMSG_TP_NOTIFY "train.notify_job_status"       /* TrainingTopic.NOTIFY_JOB_STATUS */
#define CPMSG_STARTED 2                                 /* ClientStatus.STARTED */
#define CPMSG_STOPPED 3                                 /* ClientStatus.STOPPED */
#define CPMSG_PAYLOAD_MAX 65536                         /* bytes of a payload read here */
#define CPMSG_RID_LEN 36                                /* a uuid4's text */

/* One entry of a map payload: a str value, or an int when s is NULL. */
struct cpmsg_kv {
    const char *key;
    const char *s;
    int64_t i;
};

/* A LOBS payload holding an admin_defs.Message data-class wrapper: {id (a fresh
 * uuid4), topic, body, headers}.  headers: job_id (when not NULL), job_status
 * (when >= 0), _rtnCode (when rtn not NULL), in that order.  0 or -1. */
int cpmsg_admin_write(msgpack_sbuffer *sb, const char *topic, const char *body, const char *job_id, long job_status,
                      const char *rtn);

/* Reads an admin_defs.Message payload: its topic and headers job_id (str) and
 * job_status (int; -1 when absent).  -1 with why naming the field. */
int cpmsg_admin_read(const uint8_t *p, size_t len, char *topic, size_t topicsz, char *job_id, size_t jobsz,
                     long *status, char *why, size_t whysz);

/* A LOBS payload whose body is the map kv[0..n) (n = 0: {}). */
int cpmsg_map_write(msgpack_sbuffer *sb, const struct cpmsg_kv *kv, size_t n);

/* A LOBS payload {"command": command, "data": {}} (the CP's abort_task,
 * show_errors, reset_errors). */
int cpmsg_command_write(msgpack_sbuffer *sb, const char *command);

/* A payload for one output line: "keys=k1,k2" for a map body, "body=<str>" for
 * a str body, else "bytes=N" (N = 0: "empty"). */
void cpmsg_summary(const uint8_t *p, size_t len, const char *encoding, char *out, size_t outsz);

/* Sends a direct request from me to dest over l (the next hop), with payload
 * sb (NULL: none; emptied).  rid: a fresh request id is written there (its
 * buffer CPMSG_RID_LEN + 1).  0 or -1 (logged). */
int cpmsg_request(struct cj_link *l, const char *me, const char *dest, const char *channel, const char *topic,
                  bool reply_expected, msgpack_sbuffer *sb, char *rid);

/* Answers the direct request req (arrived on l, addressed to the cell that
 * answers) with rc, an optional cn__error and payload sb (NULL: none). */
int cpmsg_reply(struct cj_link *l, const struct cj_hdr *req, const char *rc, const char *error, msgpack_sbuffer *sb);

/* The message's payload as bytes (at most CPMSG_PAYLOAD_MAX; NULL otherwise). */
const uint8_t *cpmsg_payload(struct cj_msg *m, size_t *len);

#endif
