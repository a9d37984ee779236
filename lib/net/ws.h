/* SPDX-License-Identifier: Apache-2.0 */
/* ws.h — the WebSocket carriage of SFM frames, FLARE's `http`/`https` scheme
 * (doc/protocol/sfm.md §1.1).
 *
 * I/O-free: a struct cj_ws turns the bytes a socket delivered into SFM bytes,
 * and SFM frames into the bytes to send, over evbuffers; the caller does the
 * reading and writing.  The HTTP upgrade comes first (wsupgrade.c), then each
 * SFM frame is one binary message.  The concatenation of the messages' payloads
 * is the same SFM byte stream a `tcp` link carries, so the link layer above
 * reads it unchanged.
 *
 * Receiving: frame headers are decoded here (wsframe.c) and the payload of a
 * server's binary frames, which is unmasked, moves from the input to the SFM
 * bytes as evbuffer chains, a chain cut at a frame's end by reference on both
 * sides (chainsplit.h); a run under 32 KiB is copied into pooled blocks
 * (chunks.h).  A client's masked payload is unmasked word-wide while copied.  Control frames (at most 125 bytes) are gathered here too.
 * Sending a data message builds the header here and masks the payload in one
 * word-wide pass while copying it; control frames (PONG, CLOSE) go out through
 * wslay.  A server (cjrelay-sim) sends payload unmasked, moved as evbuffer
 * chains without a copy. */
#ifndef CJ_NET_WS_H
#define CJ_NET_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "util/err.h"

/* FLARE's limit on one message: 2 GiB - 2 MiB. */
#define CJ_WS_MAX_MESSAGE ((uint64_t)2 * 1024 * 1024 * 1024 - 2 * 1024 * 1024)
/* The one path FLARE's http driver serves. */
#define CJ_WS_PATH "/f3"

enum cj_ws_role { CJ_WS_CLIENT, CJ_WS_SERVER };

enum cj_ws_result {
    CJ_WS_MORE = 0,   /* everything usable consumed; call again with more input */
    CJ_WS_CLOSED = 1, /* the peer closed (CLOSE answered in out) */
};

struct cj_ws;

/* A carrier for one connection.  host is the Host header a client sends
 * ("HOST:PORT"); key the Sec-WebSocket-Key it sends, NULL for a fresh random one
 * (a fixed key replays a capture).  NULL on allocation failure. */
struct cj_ws *cj_ws_new(enum cj_ws_role role, const char *host, const char *key);
void cj_ws_free(struct cj_ws *ws);

/* Largest message accepted (default CJ_WS_MAX_MESSAGE). */
void cj_ws_set_max_message(struct cj_ws *ws, uint64_t max);

/* Client: appends the upgrade request to out.  Call once, before any read. */
int cj_ws_start(struct cj_ws *ws, struct evbuffer *out);

/* Consumes bytes from in: the upgrade exchange first (a server answers it into
 * out), then messages.  Binary payload bytes are appended to sfm as they
 * arrive; PONG and CLOSE answers to out.  Returns CJ_WS_MORE, CJ_WS_CLOSED, or
 * -code with err saying what the peer did wrong (a refused upgrade quotes the
 * status line and the first bytes; a bad accept hash, a text message, an
 * oversized or misaligned message, masking the wrong way). */
int cj_ws_read(struct cj_ws *ws, struct evbuffer *in, struct evbuffer *sfm, struct evbuffer *out,
               struct cj_err *err);

/* Moves the first len bytes of src (one whole SFM frame) into out as one binary
 * message.  0, or -1 before the upgrade completed or after a close. */
int cj_ws_write(struct cj_ws *ws, struct evbuffer *src, size_t len, struct evbuffer *out);

/* Appends a CLOSE with the status code (1000 = normal) to out; after it the
 * carrier writes nothing more. */
void cj_ws_close(struct cj_ws *ws, uint16_t code, struct evbuffer *out);

/* True once the upgrade completed and until a close. */
bool cj_ws_is_open(const struct cj_ws *ws);

/* XORs n bytes of src into dst with the 4-byte key, starting at key byte
 * (off % 4); a word at a time. */
void cj_ws_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], uint64_t off);

#endif
