/* SPDX-License-Identifier: Apache-2.0 */
/* grpc.h — the gRPC carriage of SFM frames, FLARE's `grpc`/`grpcs` scheme
 * (doc/protocol/sfm.md §1.2): HTTP/2 (nghttp2), one bidirectional call
 * `POST /streamer.Streamer/Stream` open for the life of the link, each SFM frame
 * one gRPC message (grpcmsg.c).
 *
 * I/O-free, like ws.h: bytes the socket delivered go in, SFM bytes and the bytes
 * to send come out, over evbuffers.  Flow control is ours: the windows are large
 * (CJ_GRPC_WINDOW) and a WINDOW_UPDATE is owed only for bytes the link above has
 * taken (cj_grpc_consume), so a paused link stops the server at its window
 * instead of filling our memory.  A DATA frame we send carries queued chains
 * moved, not copied (nghttp2's no-copy data source).  GOAWAY, RST_STREAM, a
 * non-zero grpc-status or the call's end close the carrier with the reason. */
#ifndef CJ_NET_GRPC_H
#define CJ_NET_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "util/err.h"

#define CJ_GRPC_PATH "/streamer.Streamer/Stream"
/* Stream and connection windows we give the peer: bytes it may send ahead of
 * what the link took. */
#define CJ_GRPC_WINDOW (4u * 1024 * 1024)
/* FLARE's message limit: 2 GiB - 2 MiB. */
#define CJ_GRPC_MAX_MESSAGE ((uint64_t)2 * 1024 * 1024 * 1024 - 2 * 1024 * 1024)

enum cj_grpc_role { CJ_GRPC_CLIENT, CJ_GRPC_SERVER };

enum cj_grpc_result {
    CJ_GRPC_MORE = 0,   /* call again with more input */
    CJ_GRPC_CLOSED = 1, /* the call or the connection ended cleanly */
};

struct cj_grpc;

/* A carrier for one connection.  authority is the client's ":authority"
 * ("HOST:PORT"), tls whether ":scheme" is https.  NULL on allocation failure. */
struct cj_grpc *cj_grpc_new(enum cj_grpc_role role, const char *authority, bool tls);
void cj_grpc_free(struct cj_grpc *g);

/* Largest message accepted (default CJ_GRPC_MAX_MESSAGE). */
void cj_grpc_set_max_message(struct cj_grpc *g, uint64_t max);

/* The first bytes: a client's preface, SETTINGS, window and the call's HEADERS;
 * a server's SETTINGS.  0 or -1. */
int cj_grpc_start(struct cj_grpc *g, struct evbuffer *out);

/* Consumes all of in: SFM bytes of received messages to sfm; what HTTP/2 answers
 * (SETTINGS and PING acks, the response headers of a server) to out.  Returns
 * CJ_GRPC_MORE, CJ_GRPC_CLOSED, or -code with err giving the peer's reason. */
int cj_grpc_read(struct cj_grpc *g, struct evbuffer *in, struct evbuffer *sfm, struct evbuffer *out,
                 struct cj_err *err);

/* Queues the first len bytes of src (one SFM frame) as one message and sends
 * what the peer's window allows into out.  0, or -1 when the call is not open. */
int cj_grpc_write(struct cj_grpc *g, struct evbuffer *src, size_t len, struct evbuffer *out);

/* The link took n SFM bytes: window credit (a WINDOW_UPDATE when enough is owed)
 * and any queued data the peer's window now allows, into out. */
void cj_grpc_consume(struct cj_grpc *g, size_t n, struct evbuffer *out);

/* Bytes queued that the peer's window has not let out yet. */
size_t cj_grpc_pending(const struct cj_grpc *g);

/* Ends the call (a server with grpc-status 0) and the connection (GOAWAY). */
void cj_grpc_close(struct cj_grpc *g, struct evbuffer *out);

/* True from the call's start until it or the connection ended. */
bool cj_grpc_is_open(const struct cj_grpc *g);

#endif
