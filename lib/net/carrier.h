/* SPDX-License-Identifier: Apache-2.0 */
/* carrier.h — what carries SFM frames on a connection when it is not the bare
 * byte stream of `tcp`/`stcp`: FLARE's WebSocket (`http`/`https`, ws.c) and gRPC
 * (`grpc`/`grpcs`, grpc.c) schemes, behind the one interface conn.c drives.
 *
 * The carrier sits between the socket's bytes (the "wire") and the SFM byte
 * stream the link above reads and writes, so the link layer is the same on
 * every scheme: it reads SFM bytes from its input and writes whole SFM frames
 * to its output, and the carrier wraps and unwraps them.  I/O-free, over
 * evbuffers. */
#ifndef CJ_NET_CARRIER_H
#define CJ_NET_CARRIER_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>

#include "util/err.h"

enum cj_carrier_kind { CJ_CARRIER_WS, CJ_CARRIER_GRPC };

enum cj_carrier_result {
    CJ_CARRIER_MORE = 0,   /* call again with more wire bytes */
    CJ_CARRIER_CLOSED = 1, /* the peer ended the carriage cleanly */
};

struct cj_carrier;

/* A carrier for one connection: the client or the server side; authority is
 * what a client names ("HOST:PORT": WebSocket Host, gRPC :authority), tls
 * whether the scheme is the TLS one.  NULL on allocation failure. */
struct cj_carrier *cj_carrier_new(enum cj_carrier_kind kind, bool server, const char *authority, bool tls);
void cj_carrier_free(struct cj_carrier *k);

/* "WebSocket" or "gRPC", for messages. */
const char *cj_carrier_name(const struct cj_carrier *k);

/* The first bytes to send (a client's upgrade request or HTTP/2 preface and
 * call; a server's HTTP/2 settings).  0 or -1. */
int cj_carrier_start(struct cj_carrier *k, struct evbuffer *wire_out);

/* Takes the wire bytes in wire_in: SFM bytes to sfm, answers (101, acks, PONG,
 * window updates) to wire_out.  CJ_CARRIER_MORE, CJ_CARRIER_CLOSED, or -code
 * with err saying what the peer did. */
int cj_carrier_read(struct cj_carrier *k, struct evbuffer *wire_in, struct evbuffer *sfm, struct evbuffer *wire_out,
                    struct cj_err *err);

/* Wraps every whole SFM frame at the head of sfm_out into wire_out (moved,
 * not copied, where the carrier allows); a frame not whole yet stays.  Nothing
 * moves before the carrier is ready.  0, or -1 (a frame shorter than its own
 * length field, or the carriage closed). */
int cj_carrier_send(struct cj_carrier *k, struct evbuffer *sfm_out, struct evbuffer *wire_out);

/* True once frames can be sent (the upgrade or the call is through). */
bool cj_carrier_ready(const struct cj_carrier *k);

/* True when cj_carrier_send would move something: ready, and a whole frame at
 * the head of sfm_out. */
bool cj_carrier_can_send(const struct cj_carrier *k, struct evbuffer *sfm_out);

/* The link took n SFM bytes from its input (gRPC returns window credit). */
void cj_carrier_taken(struct cj_carrier *k, size_t n, struct evbuffer *wire_out);

/* Bytes accepted by cj_carrier_send that wait inside the carrier for the
 * peer's flow-control window (gRPC); they count toward the link's output. */
size_t cj_carrier_pending(const struct cj_carrier *k);

/* True when the peer is held back by a flow-control window rather than by us
 * not reading (gRPC): the socket is read even while the link pauses, so pings
 * and settings are answered, and the window bounds what piles up. */
bool cj_carrier_window_paced(const struct cj_carrier *k);

/* Ends the carriage politely (WebSocket CLOSE; gRPC trailers or RST_STREAM and GOAWAY). */
void cj_carrier_close(struct cj_carrier *k, struct evbuffer *wire_out);

#endif
