/* SPDX-License-Identifier: Apache-2.0 */
/* wsframe.c — the WebSocket frame header codec (see wsframe.h). */
#include "net/wsframe.h"

#include <string.h>

static uint64_t read_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* The extended length of `ext` bytes at p (2 or 8): in range for its form. */
static int extended_length(const uint8_t *p, size_t ext, uint64_t at, struct cj_wsf_head *h, struct cj_err *err)
{
    h->len = read_be(p, ext);
    if (ext == 2 && h->len < 126)
        return cj_fail(err, CJ_E_INVALID, at + 2, "WebSocket frame length %llu in the 16-bit form (under 126 fits the 7 bits)",
                       (unsigned long long)h->len);
    if (ext == 8 && h->len >> 63)
        return cj_fail(err, CJ_E_INVALID, at + 2, "WebSocket frame length with the top bit of its 64-bit form set (0x%016llx)",
                       (unsigned long long)h->len);
    if (ext == 8 && h->len < 65536)
        return cj_fail(err, CJ_E_INVALID, at + 2, "WebSocket frame length %llu in the 64-bit form (under 65536 fits 16 bits)",
                       (unsigned long long)h->len);
    return 0;
}

int cj_wsf_decode(const uint8_t *p, size_t n, uint64_t at, struct cj_wsf_head *h, struct cj_err *err)
{
    if (n < 2) return 0;
    uint8_t len7 = p[1] & 0x7F;
    size_t ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
    bool masked = (p[1] & 0x80) != 0;
    size_t size = 2 + ext + (masked ? 4 : 0);
    if (n < size) return 0;
    h->fin = (p[0] & 0x80) != 0;
    h->rsv = (p[0] >> 4) & 0x7;
    h->opcode = p[0] & 0x0F;
    h->masked = masked;
    h->size = size;
    h->len = len7;
    int r = ext ? extended_length(p + 2, ext, at, h, err) : 0;
    if (r < 0) return r;
    memset(h->key, 0, sizeof h->key);
    if (masked) memcpy(h->key, p + 2 + ext, 4);
    return 1;
}

size_t cj_wsf_encode(uint8_t b[CJ_WSF_MAX_HEAD], const struct cj_wsf_head *h)
{
    size_t n = 0;
    uint8_t m = h->masked ? 0x80 : 0;
    b[n++] = (uint8_t)((h->fin ? 0x80 : 0) | (h->opcode & 0x0F));
    if (h->len < 126) {
        b[n++] = m | (uint8_t)h->len;
    } else if (h->len < 65536) {
        b[n++] = m | 126;
        b[n++] = (uint8_t)(h->len >> 8);
        b[n++] = (uint8_t)h->len;
    } else {
        b[n++] = m | 127;
        for (int s = 56; s >= 0; s -= 8) b[n++] = (uint8_t)(h->len >> s);
    }
    if (h->masked) {
        memcpy(b + n, h->key, 4);
        n += 4;
    }
    return n;
}

const char *cj_wsf_opcode_name(uint8_t opcode)
{
    switch (opcode) {
    case CJ_WSF_CONTINUATION: return "continuation";
    case CJ_WSF_TEXT: return "text";
    case CJ_WSF_BINARY: return "binary";
    case CJ_WSF_CLOSE: return "CLOSE";
    case CJ_WSF_PING: return "PING";
    case CJ_WSF_PONG: return "PONG";
    default: return "reserved";
    }
}
