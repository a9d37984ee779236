/* SPDX-License-Identifier: Apache-2.0 */
/* wsupgrade.h — the HTTP/1.1 upgrade that opens a WebSocket (RFC 6455 §4), as
 * FLARE's http driver does it (doc/protocol/sfm.md §1.1): `GET /f3`, version 13,
 * a random 16-byte key, no subprotocol, no extensions; the server answers 101
 * with Sec-WebSocket-Accept = base64(SHA-1(key + the RFC's GUID)).
 *
 * I/O-free, over evbuffers.  The header block is bounded (CJ_WSUP_MAX_HEAD); the
 * bytes after it stay in the input for the framing. */
#ifndef CJ_NET_WSUPGRADE_H
#define CJ_NET_WSUPGRADE_H

#include <event2/buffer.h>

#include "util/err.h"

#define CJ_WSUP_KEY_LEN 24        /* base64 of 16 random bytes */
#define CJ_WSUP_ACCEPT_LEN 28     /* base64 of a SHA-1 digest */
#define CJ_WSUP_MAX_HEAD 8192     /* a longer header block is refused */

/* A fresh random key; 0 or -1. */
int cj_wsup_new_key(char key[CJ_WSUP_KEY_LEN + 1]);

/* The accept value for key. */
void cj_wsup_accept(const char *key, char out[CJ_WSUP_ACCEPT_LEN + 1]);

/* Client: appends the upgrade request for path on host ("HOST:PORT"). */
int cj_wsup_request(struct evbuffer *out, const char *host, const char *path, const char *key);

/* Client: the server's answer at the head of in.  0 = not complete yet (nothing
 * consumed), 1 = switched (the header block consumed), -code = refused or wrong,
 * err quoting the status line and the first bytes, or naming the bad header. */
int cj_wsup_response(struct evbuffer *in, const char *key, struct cj_err *err);

/* Server: the client's request at the head of in for path.  0 = not complete
 * yet, 1 = accepted (101 appended to out, the request consumed), -code = refused
 * (an HTTP error response appended to out) with err saying why. */
int cj_wsup_serve(struct evbuffer *in, const char *path, struct evbuffer *out, struct cj_err *err);

#endif
