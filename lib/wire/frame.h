/* SPDX-License-Identifier: Apache-2.0 */
/* frame.h — the SFM frame layer: the 16-byte prefix, stream splitting, and the
 * control frames (HELLO, READY, PING, PONG).  See doc/protocol/sfm.md.
 *
 * Nothing here allocates in proportion to a length read off the wire: the
 * splitter only looks at bytes the caller already holds and tells it how many
 * more it needs.  The cellnet header map inside DATA frames is wire/header.c's
 * business; this file only hands out its byte span. */
#ifndef CJ_WIRE_FRAME_H
#define CJ_WIRE_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"

#define CJ_FRAME_PREFIX_LEN 16
/* Reader limit on `length` (doc/protocol/sfm.md §6): 2 GiB - 2 MiB. */
#define CJ_FRAME_MAX_DEFAULT 2145386496u
/* Longest endpoint_name / fqcn accepted in HELLO/READY (bytes, without NUL). */
#define CJ_FRAME_NAME_MAX 255
/* A PING/PONG frame: prefix + msgpack nil. */
#define CJ_FRAME_HEARTBEAT_LEN 17
/* HELLO and READY always travel on stream 1 (doc/protocol/sfm.md §5). */
#define CJ_FRAME_HANDSHAKE_STREAM_ID 1
/* app_id of cellnet DATA frames. */
#define CJ_FRAME_APP_CELLNET 1

enum cj_frame_type {
    CJ_FRAME_DATA = 1,
    CJ_FRAME_FRAG = 2,   /* defined by NVFlare, never sent: log and drop */
    CJ_FRAME_ACK = 3,    /* defined by NVFlare, never sent: log and drop */
    CJ_FRAME_HELLO = 4,
    CJ_FRAME_READY = 5,
    CJ_FRAME_PING = 6,
    CJ_FRAME_PONG = 7,
};

/* The 16-byte prefix, fields in wire order (all big endian on the wire). */
struct cj_frame_prefix {
    uint32_t length;      /* whole frame, prefix included */
    uint16_t header_len;  /* msgpack header block; 0 = none */
    uint8_t type;         /* enum cj_frame_type */
    uint8_t reserved;     /* 0 when we send; not checked on receive */
    uint16_t flags;       /* 0 when we send; not checked on receive */
    uint16_t app_id;
    uint16_t stream_id;
    uint16_t sequence;
};

/* A whole frame cut into its parts (pointers into the caller's bytes). */
struct cj_frame_view {
    struct cj_frame_prefix prefix;
    const uint8_t *header;   /* header_len bytes (DATA: the cellnet header map) */
    uint32_t header_len;
    const uint8_t *payload;  /* length - 16 - header_len bytes */
    uint32_t payload_len;
};

/* HELLO / READY payload (doc/protocol/sfm.md §3). */
struct cj_frame_hello {
    char endpoint_name[CJ_FRAME_NAME_MAX + 1];
    double timestamp;        /* seconds since the epoch */
    bool has_fqcn;
    char fqcn[CJ_FRAME_NAME_MAX + 1];
};

/* Per-connection sender counters (doc/protocol/sfm.md §5). */
struct cj_frame_counters {
    uint16_t stream_id;  /* last stream_id handed out for DATA/PING/PONG */
    uint16_t sequence;   /* last sequence handed out */
};

/* ---- types ---------------------------------------------------------------- */

const char *cj_frame_type_name(uint8_t type);

/* The length a frame gives itself: the prefix's first 4 bytes, big-endian
 * (carriers check that a message holds exactly one frame by it). */
static inline uint32_t cj_frame_length(const uint8_t p[4])
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
/* FRAG and ACK: valid on the wire, but NVFlare never sends them; drop them. */
bool cj_frame_type_is_unused(uint8_t type);

/* ---- prefix --------------------------------------------------------------- */

void cj_frame_prefix_encode(const struct cj_frame_prefix *p, uint8_t out[CJ_FRAME_PREFIX_LEN]);

/* Decodes and validates 16 bytes.  max_len caps `length`; 0 or anything above
 * CJ_FRAME_MAX_DEFAULT means CJ_FRAME_MAX_DEFAULT.  Returns 0 or -cj_errc
 * (err names the field; offsets are from the frame start). */
int cj_frame_prefix_decode(const uint8_t in[CJ_FRAME_PREFIX_LEN], uint32_t max_len,
                           struct cj_frame_prefix *out, struct cj_err *err);

/* ---- stream splitting ----------------------------------------------------- */

/* buf holds the first avail bytes of the stream (a frame starts at buf[0]).
 * Returns 0 = fewer than 16 bytes, wait; 1 = *out is a valid prefix, wait
 * until avail >= out->length; <0 = malformed, close the connection. */
int cj_frame_peek(const uint8_t *buf, size_t avail, uint32_t max_len,
                  struct cj_frame_prefix *out, struct cj_err *err);

/* Like cj_frame_peek, but returns 1 only when the whole frame is in buf; then
 * *frame_len = out->length.  On 0, *frame_len = how many bytes the caller
 * must hold before calling again: 16, or (with *out already filled) the
 * frame's length. */
int cj_frame_next(const uint8_t *buf, size_t avail, uint32_t max_len,
                  struct cj_frame_prefix *out, size_t *frame_len, struct cj_err *err);

/* Cuts a frame that cj_frame_next returned 1 for into header and payload. */
void cj_frame_view_init(struct cj_frame_view *v, const uint8_t *frame, const struct cj_frame_prefix *p);

/* ---- HELLO / READY -------------------------------------------------------- */

/* Fills h for a sender whose endpoint_name and fqcn are both `fqcn`. */
int cj_frame_hello_init(struct cj_frame_hello *h, const char *fqcn, double timestamp, struct cj_err *err);

/* Appends the payload map {endpoint_name, timestamp, fqcn} (fqcn only if
 * has_fqcn) to sb, in NVFlare's key order. */
int cj_frame_hello_encode(msgpack_sbuffer *sb, const struct cj_frame_hello *h, struct cj_err *err);

/* Decodes a HELLO/READY payload.  Extra keys are ignored; endpoint_name (str)
 * and timestamp (int or float) are required, fqcn (str) is optional.  Names
 * longer than CJ_FRAME_NAME_MAX, names containing NUL, duplicate known keys
 * and bytes after the map are errors.  Offsets are from the payload start.
 * Whether the name is a valid FQCN is the caller's check (doc/protocol/cellnet.md §5). */
int cj_frame_hello_decode(const uint8_t *payload, size_t len, struct cj_frame_hello *out,
                          struct cj_err *err);

/* Appends a whole HELLO or READY frame (type) to sb. */
int cj_frame_build_hello(msgpack_sbuffer *sb, uint8_t type, uint16_t stream_id, uint16_t sequence,
                         const struct cj_frame_hello *h, struct cj_err *err);

/* ---- PING / PONG ---------------------------------------------------------- */

/* Writes a whole 17-byte PING or PONG frame (type) into out. */
void cj_frame_build_heartbeat(uint8_t out[CJ_FRAME_HEARTBEAT_LEN], uint8_t type, uint16_t stream_id,
                              uint16_t sequence);

/* Appends the same 17 bytes to sb.  Returns 0 or -CJ_E_NOMEM. */
int cj_frame_build_heartbeat_sb(msgpack_sbuffer *sb, uint8_t type, uint16_t stream_id, uint16_t sequence,
                                struct cj_err *err);

/* Checks a PING/PONG payload is exactly msgpack nil (c0).  NVFlare ignores
 * the payload, so a caller may choose to only log a failure. */
int cj_frame_heartbeat_check(const uint8_t *payload, size_t len, struct cj_err *err);

/* ---- counters ------------------------------------------------------------- */

/* stream_id counter at 16 (first DATA gets 17), sequence at 0 (first frame gets 1). */
void cj_frame_counters_init(struct cj_frame_counters *c);

/* Numbers the next frame sent on the connection: HELLO/READY get stream_id 1
 * without touching the stream counter; every other type pre-increments it.
 * Both counters wrap at 16 bits (0 can occur after the wrap). */
void cj_frame_counters_next(struct cj_frame_counters *c, uint8_t type, uint16_t *stream_id,
                            uint16_t *sequence);

#endif
