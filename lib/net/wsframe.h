/* SPDX-License-Identifier: Apache-2.0 */
/* wsframe.h — the WebSocket frame header (RFC 6455 §5.2), decoded from the
 * bytes that open a frame and encoded for sending.
 *
 *   byte 0   FIN, RSV1..3, opcode (4 bits)
 *   byte 1   MASK, payload length (7 bits: 0..125, or 126 / 127 for the forms below)
 *   2 bytes  the length, big-endian, when the 7 bits say 126 (126..65535)
 *   8 bytes  the length, big-endian, when they say 127 (65536..2^63-1)
 *   4 bytes  the masking key, when MASK is set
 *
 * 2 to 14 bytes in all.  A length must be written in its shortest form (§5.2:
 * "the minimal number of bytes MUST be used"): a longer form is refused, as is
 * a 64-bit length with its top bit set.  The rules that depend on who sends
 * the frame and what is open (masking direction, opcodes, control-frame size,
 * messages) are the carrier's (ws.c). */
#ifndef CJ_NET_WSFRAME_H
#define CJ_NET_WSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define CJ_WSF_MAX_HEAD 14

enum cj_wsf_opcode {
    CJ_WSF_CONTINUATION = 0x0,
    CJ_WSF_TEXT = 0x1,
    CJ_WSF_BINARY = 0x2,
    CJ_WSF_CLOSE = 0x8,
    CJ_WSF_PING = 0x9,
    CJ_WSF_PONG = 0xA,
};

struct cj_wsf_head {
    bool fin;
    uint8_t rsv;    /* RSV1..3 as bits 2..0 */
    uint8_t opcode;
    bool masked;
    uint8_t key[4]; /* when masked */
    uint64_t len;   /* payload bytes */
    size_t size;    /* header bytes, 2..14 */
};

/* Decodes the header at p, n bytes available; at is p's offset in the stream
 * (for errors).  1: h filled; 0: n holds less than the whole header; -code
 * with err naming the length field at fault. */
int cj_wsf_decode(const uint8_t *p, size_t n, uint64_t at, struct cj_wsf_head *h, struct cj_err *err);

/* Writes h's header (fin, opcode, masked, key, len; no RSV bits) into b in the
 * shortest length form; returns its size.  len must be below 2^63. */
size_t cj_wsf_encode(uint8_t b[CJ_WSF_MAX_HEAD], const struct cj_wsf_head *h);

/* Opcodes 0x8..0xF are control frames. */
static inline bool cj_wsf_is_control(uint8_t opcode) { return (opcode & 0x8) != 0; }

/* "CLOSE", "PING", "PONG", "binary", ... for messages. */
const char *cj_wsf_opcode_name(uint8_t opcode);

#endif
