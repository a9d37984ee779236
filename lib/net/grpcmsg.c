/* SPDX-License-Identifier: Apache-2.0 */
/* grpcmsg.c — gRPC messages carrying SFM frames (see grpcmsg.h). */
#include "net/grpcmsg.h"

#include <string.h>

#include "wire/frame.h"

enum { RX_PREFIX, RX_TAG, RX_VARINT, RX_LEN, RX_COPY, RX_SKIP };

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

#define FIELD_SEQ 1
#define FIELD_DATA 2

void cj_grpcmsg_rx_init(struct cj_grpcmsg_rx *rx, uint64_t max)
{
    memset(rx, 0, sizeof *rx);
    rx->state = RX_PREFIX;
    rx->max = max;
}

void cj_grpcmsg_rx_free(struct cj_grpcmsg_rx *rx) { cj_chunks_release(&rx->chunks); }

static size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t cj_grpcmsg_head(uint8_t out[CJ_GRPCMSG_HEAD_MAX], uint64_t seq, size_t sfm_len)
{
    uint8_t body[CJ_GRPCMSG_HEAD_MAX];
    size_t b = 0;
    if (seq) { /* proto3 leaves a zero out */
        body[b++] = FIELD_SEQ << 3 | WT_VARINT;
        b += put_varint(body + b, seq);
    }
    body[b++] = FIELD_DATA << 3 | WT_LEN;
    b += put_varint(body + b, sfm_len);
    uint64_t msg = b + (uint64_t)sfm_len;
    out[0] = 0;
    out[1] = (uint8_t)(msg >> 24), out[2] = (uint8_t)(msg >> 16), out[3] = (uint8_t)(msg >> 8), out[4] = (uint8_t)msg;
    memcpy(out + 5, body, b);
    return 5 + b;
}

/* ---- reading ------------------------------------------------------------------------- */

/* The varint collected in rx->buf (complete: its last byte < 0x80). */
static uint64_t varint_value(const struct cj_grpcmsg_rx *rx)
{
    uint64_t v = 0;
    for (size_t i = 0; i < rx->have; i++) v |= (uint64_t)(rx->buf[i] & 0x7f) << (7 * i);
    return v;
}

/* Collects one varint byte; 1 when complete, 0 when more is needed, -code. */
static int varint_byte(struct cj_grpcmsg_rx *rx, uint8_t b, struct cj_err *err)
{
    if (rx->have == sizeof rx->buf)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf varint longer than 10 bytes in a gRPC message");
    rx->buf[rx->have++] = b;
    return b < 0x80;
}

static int prefix_done(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    if (rx->buf[0] != 0)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "compressed gRPC message (flag %u; no compression was agreed)", rx->buf[0]);
    uint64_t len = (uint64_t)rx->buf[1] << 24 | (uint64_t)rx->buf[2] << 16 | (uint64_t)rx->buf[3] << 8 | rx->buf[4];
    if (len > rx->max)
        return cj_fail(err, CJ_E_LIMIT, rx->offset, "gRPC message of %llu bytes (at most %llu)",
                       (unsigned long long)len, (unsigned long long)rx->max);
    if (len == 0) return cj_fail(err, CJ_E_INVALID, rx->offset, "empty gRPC message (no SFM frame)");
    rx->msg_left = len;
    rx->have = 0;
    rx->data_fields = 0;
    rx->state = RX_TAG;
    return 0;
}

/* The message ended: it must have held exactly one SFM frame. */
static int message_done(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    if (rx->data_fields != 1)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "gRPC message with %d data fields (one SFM frame each)", rx->data_fields);
    rx->state = RX_PREFIX;
    rx->have = 0;
    return 0;
}

static int tag_done(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    uint64_t tag = varint_value(rx);
    rx->field = (int)(tag >> 3);
    rx->have = 0;
    if (tag >> 3 == 0 || tag >> 3 > 536870911)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf field number %llu in a gRPC message", (unsigned long long)(tag >> 3));
    if (((tag & 7) == WT_VARINT || (tag & 7) == WT_LEN) && rx->msg_left == 0)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf field %d runs past its gRPC message", rx->field);
    switch (tag & 7) {
    case WT_VARINT: rx->state = RX_VARINT; return 0;
    case WT_LEN: rx->state = RX_LEN; return 0;
    case WT_I64: rx->field_left = 8; break;
    case WT_I32: rx->field_left = 4; break;
    default:
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf wire type %u (field %d) in a gRPC message", (unsigned)(tag & 7), rx->field);
    }
    if (rx->field_left > rx->msg_left)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf field %d runs past its gRPC message", rx->field);
    rx->state = RX_SKIP;
    return 0;
}

static int len_done(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    uint64_t len = varint_value(rx);
    rx->have = 0;
    if (len > rx->msg_left)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf field %d of %llu bytes runs past its gRPC message", rx->field,
                       (unsigned long long)len);
    rx->field_left = len;
    if (rx->field != FIELD_DATA) {
        rx->state = RX_SKIP;
        return 0;
    }
    if (++rx->data_fields > 1) return cj_fail(err, CJ_E_INVALID, rx->offset, "two data fields in one gRPC message");
    rx->data_len = len;
    rx->state = RX_COPY;
    return 0;
}

/* The data field ended: its bytes must be one SFM frame (the prefix's length). */
static int data_done(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    uint32_t want = rx->data_len < 4 ? 0 : cj_frame_length(rx->sfm_len);
    if (rx->data_len < 4 || want != rx->data_len)
        return cj_fail(err, CJ_E_INVALID, rx->offset, "gRPC message data of %llu bytes is not one SFM frame (its prefix says %u)",
                       (unsigned long long)rx->data_len, want);
    return 0;
}

/* After a field's last byte: next tag, or the message's end. */
static int field_end(struct cj_grpcmsg_rx *rx, struct cj_err *err)
{
    int rc = rx->field == FIELD_DATA && rx->state == RX_COPY ? data_done(rx, err) : 0;
    if (rc < 0) return rc;
    rx->state = RX_TAG;
    return rx->msg_left == 0 ? message_done(rx, err) : 0;
}

/* Copies or skips the bulk of a field; returns bytes taken. */
static size_t take_bulk(struct cj_grpcmsg_rx *rx, const uint8_t *p, size_t n, struct evbuffer *sfm, int *rc)
{
    size_t k = rx->field_left < n ? (size_t)rx->field_left : n;
    if (rx->state == RX_COPY) {
        uint64_t done = rx->data_len - rx->field_left;
        for (size_t i = 0; i < k && done + i < 4; i++) rx->sfm_len[done + i] = p[i];
        if (cj_chunks_add(&rx->chunks, sfm, p, k) != 0) *rc = -CJ_E_NOMEM;
        rx->sfm_bytes += k;
    }
    rx->field_left -= k;
    rx->msg_left -= k;
    return k;
}

int cj_grpcmsg_feed(struct cj_grpcmsg_rx *rx, const uint8_t *p, size_t n, struct evbuffer *sfm, struct cj_err *err)
{
    size_t i = 0;
    int rc = 0;
    while (i < n && rc >= 0) {
        if (rx->state == RX_COPY || rx->state == RX_SKIP) {
            size_t k = take_bulk(rx, p + i, n - i, sfm, &rc);
            i += k;
            rx->offset += k;
            if (rc >= 0 && rx->field_left == 0) rc = field_end(rx, err);
            continue;
        }
        uint8_t b = p[i++];
        rx->offset++;
        if (rx->state == RX_PREFIX) {
            rx->buf[rx->have++] = b;
            if (rx->have == 5) rc = prefix_done(rx, err);
            continue;
        }
        rx->msg_left--; /* a tag or varint byte of the message */
        int r = varint_byte(rx, b, err);
        if (r < 0) return r;
        if (r == 0 && rx->msg_left == 0)
            return cj_fail(err, CJ_E_INVALID, rx->offset, "protobuf varint runs past its gRPC message");
        if (r == 0) continue;
        if (rx->state == RX_TAG) rc = tag_done(rx, err);
        else if (rx->state == RX_LEN) rc = len_done(rx, err);
        else { /* RX_VARINT: seq or an unknown varint field, not used */
            rx->have = 0;
            rc = field_end(rx, err);
            continue;
        }
        if (rc >= 0 && rx->state == RX_COPY && rx->field_left == 0) rc = field_end(rx, err); /* empty data */
        else if (rc >= 0 && rx->state == RX_SKIP && rx->field_left == 0) rc = field_end(rx, err);
        else if (rc >= 0 && rx->state == RX_TAG && rx->msg_left == 0) rc = message_done(rx, err);
    }
    if (cj_chunks_flush(&rx->chunks, sfm) < 0 && rc >= 0) rc = -CJ_E_NOMEM;
    if (rc == -CJ_E_NOMEM) return cj_fail(err, CJ_E_NOMEM, rx->offset, "out of memory for a gRPC message");
    return rc;
}
