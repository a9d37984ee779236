/* SPDX-License-Identifier: Apache-2.0 */
/* cpmsg.h — the messages between a client parent (CP) and its client jobs
 * (doc/protocol/site.md §3) as cjrelay-sim writes and reads them: the parent
 * cell (cp.c) and the stand-in site's parent link (drive.c).  All of them are
 * direct cellnet messages (doc/protocol/cellnet.md §2, §7) with FOBS payloads. */
#ifndef SIM_CJ_CPMSG_H
#define SIM_CJ_CPMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "fl/cpmsg.h"
#include "net/link.h"
#include "wire/header.h"
#include "wire/msg.h"

/* A payload for one output line: "keys=k1,k2" for a map body, "body=<str>" for
 * a str body, else "bytes=N" (N = 0: "empty"). */
void cpmsg_summary(const uint8_t *p, size_t len, const char *encoding, char *out, size_t outsz);

/* Sends a direct request from me to dest over l (the next hop), with payload
 * sb (NULL: none; emptied).  rid: a fresh request id is written there (its
 * buffer CJ_CPMSG_RID_LEN + 1).  0 or -1 (logged). */
int cpmsg_request(struct cj_link *l, const char *me, const char *dest, const char *channel, const char *topic,
                  bool reply_expected, msgpack_sbuffer *sb, char *rid);

/* Answers the direct request req (arrived on l, addressed to the cell that
 * answers) with rc, an optional cn__error and payload sb (NULL: none). */
int cpmsg_reply(struct cj_link *l, const struct cj_hdr *req, const char *rc, const char *error, msgpack_sbuffer *sb);

/* The message's payload as bytes (at most CJ_CPMSG_PAYLOAD_MAX; NULL otherwise). */
const uint8_t *cpmsg_payload(struct cj_msg *m, size_t *len);

#endif
