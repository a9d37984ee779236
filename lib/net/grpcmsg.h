/* SPDX-License-Identifier: Apache-2.0 */
/* grpcmsg.h — the gRPC messages of FLARE's `grpc` scheme (doc/protocol/sfm.md §1.2):
 * each is the 5-byte gRPC prefix (0 = not compressed, then the u32 big-endian
 * length) and the protobuf `Frame { int32 seq = 1; bytes data = 2; }` whose data
 * is one whole SFM frame.
 *
 * The reader is incremental: it takes the bytes of HTTP/2 DATA frames as they
 * come, in any pieces, and appends each message's data to an SFM evbuffer as it
 * arrives, never holding a message.  Unknown protobuf fields are skipped, as
 * protobuf requires; a compressed message, a group, a varint over 10 bytes, a
 * field running past its message, a message without data or whose data is not
 * one SFM frame are refused, naming what was wrong. */
#ifndef CJ_NET_GRPCMSG_H
#define CJ_NET_GRPCMSG_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "net/chunks.h"
#include "util/err.h"

/* Bytes the writer puts before an SFM frame: prefix 5 + seq tag and varint 11 +
 * data tag and length varint 6. */
#define CJ_GRPCMSG_HEAD_MAX 22

struct cj_grpcmsg_rx {
    int state;
    uint8_t buf[10];       /* a prefix or varint being collected */
    size_t have;
    uint64_t max;          /* largest message accepted */
    uint64_t msg_left;     /* bytes of the current message not read yet */
    uint64_t field_left;   /* bytes of the field being copied or skipped */
    int field;             /* its number (2 = data) */
    uint64_t data_len;     /* the data field's length */
    uint8_t sfm_len[4];    /* its first 4 bytes */
    int data_fields;       /* data fields seen in this message */
    uint64_t offset;       /* bytes fed so far, for error offsets */
    uint64_t sfm_bytes;    /* data bytes handed to sfm so far */
    struct cj_chunks chunks; /* they go into pooled blocks */
};

/* A reader accepting messages up to max bytes. */
void cj_grpcmsg_rx_init(struct cj_grpcmsg_rx *rx, uint64_t max);

/* Gives back the block the reader holds. */
void cj_grpcmsg_rx_free(struct cj_grpcmsg_rx *rx);

/* Takes n bytes of message stream; appends data bytes to sfm.  0, or -code. */
int cj_grpcmsg_feed(struct cj_grpcmsg_rx *rx, const uint8_t *p, size_t n, struct evbuffer *sfm, struct cj_err *err);

/* The bytes before an SFM frame of sfm_len bytes sent with sequence number seq;
 * returns their count (at most CJ_GRPCMSG_HEAD_MAX). */
size_t cj_grpcmsg_head(uint8_t out[CJ_GRPCMSG_HEAD_MAX], uint64_t seq, size_t sfm_len);

#endif
