/* SPDX-License-Identifier: Apache-2.0 */
/* msg.h — one cellnet message in flight (doc/design.md "The message object").
 *
 * The raw header block is the truth and is owned by the message (a malloc'd
 * copy, <= 64 KiB); hdr is its decoded view (hdr.blk == hblk).  The payload is
 * an evbuffer whose chains were MOVED out of a link's input buffer, and are
 * moved again into the next link's output: payload bytes are never copied by
 * the relay.  Whoever holds a struct cj_msg owns it and must cj_msg_free it or
 * hand it on (cj_router_* and the link send functions say when they take it). */
#ifndef CJ_WIRE_MSG_H
#define CJ_WIRE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "util/err.h"
#include "wire/header.h"

struct cj_link;

struct cj_msg {
    struct cj_hdr hdr;          /* decoded view of hblk */
    uint8_t *hblk;              /* raw header block (owned) */
    size_t hlen;
    struct evbuffer *payload;   /* payload bytes (owned; never NULL) */
    struct cj_link *from;       /* link it arrived on; NULL when originated here */
};

/* Wall clock, seconds since the epoch (the unit of cn__route and cn__send_time). */
double cj_msg_now(void);

/* A message around a header block that the caller gives away (blk is
 * malloc'd; it is freed on failure too).  The block is decoded with
 * cj_hdr_decode; on error NULL is returned and err says why (err->code
 * CJ_E_MISSING: a required key is absent — the caller drops the message; any
 * other code: the map is malformed — the caller closes the link).  The
 * payload starts empty. */
struct cj_msg *cj_msg_from_block(uint8_t *blk, size_t len, struct cj_err *err);

/* The same with a copy of blk. */
struct cj_msg *cj_msg_from_copy(const uint8_t *blk, size_t len, struct cj_err *err);

/* Builds a message this cell originates: the entries already in hb
 * (application and sm__ keys, auth keys) followed by the cellnet keys of m
 * (cj_hb_cellnet), finished into the block.  payload is moved into the
 * message (NULL = empty); its bytes count is not checked against
 * m->payload_len.  hb is left to the caller to destroy.  NULL with err on
 * failure (payload is then left where it was). */
struct cj_msg *cj_msg_build(struct cj_hb *hb, const struct cj_hdr_msg *m, struct evbuffer *payload,
                            struct cj_err *err);

size_t cj_msg_payload_len(const struct cj_msg *m);

void cj_msg_free(struct cj_msg *m);

#endif
