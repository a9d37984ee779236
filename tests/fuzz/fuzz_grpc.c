/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_grpc.c — the gRPC carrier's input path (lib/net/grpc.c over nghttp2, and
 * lib/net/grpcmsg.c's message reader).
 *
 * Input: byte 0 = flags (bit 0: we are the server; bit 1: feed the rest to the
 * message reader alone; bits 2-7: piece size / 4 + 1), the rest is what the peer
 * sends.  Invariants checked:
 *  - the SFM bytes are the same whether the input comes whole or in pieces (the
 *    message reader also gives the same verdict; nghttp2 may find a broken
 *    frame sequence sooner in pieces, so there the bytes before an error must
 *    agree);
 *  - the SFM bytes split into whole frames by their length prefix (but a last
 *    message still arriving);
 *  - a message reader fed what our own writer made gives back the frame. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/grpc.h"
#include "net/grpcmsg.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

struct run {
    int rc;
    struct evbuffer *sfm;
};

static void run_carrier(bool server, const uint8_t *p, size_t n, size_t piece, struct run *r)
{
    struct cj_grpc *g = cj_grpc_new(server ? CJ_GRPC_SERVER : CJ_GRPC_CLIENT, "h:1", false);
    CHECK(g);
    cj_grpc_set_max_message(g, 1 << 20);
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    r->sfm = evbuffer_new();
    struct cj_err err;
    CHECK(cj_grpc_start(g, out) == 0);
    r->rc = CJ_GRPC_MORE;
    for (size_t off = 0; off < n && r->rc == CJ_GRPC_MORE;) {
        size_t k = n - off < piece ? n - off : piece;
        evbuffer_add(in, p + off, k);
        off += k;
        size_t before = evbuffer_get_length(r->sfm);
        r->rc = cj_grpc_read(g, in, r->sfm, out, &err);
        cj_grpc_consume(g, evbuffer_get_length(r->sfm) - before, out);
        evbuffer_drain(out, evbuffer_get_length(out));
    }
    evbuffer_free(in);
    evbuffer_free(out);
    cj_grpc_free(g);
}

static void run_reader(const uint8_t *p, size_t n, size_t piece, struct run *r)
{
    struct cj_grpcmsg_rx rx;
    struct cj_err err;
    cj_grpcmsg_rx_init(&rx, 1 << 20);
    r->sfm = evbuffer_new();
    r->rc = 0;
    for (size_t off = 0; off < n && r->rc == 0; off += piece)
        r->rc = cj_grpcmsg_feed(&rx, p + off, n - off < piece ? n - off : piece, r->sfm, &err);
    cj_grpcmsg_rx_free(&rx);
}

static void check_frames(struct evbuffer *sfm)
{
    size_t len = evbuffer_get_length(sfm), off = 0;
    uint8_t *b = evbuffer_pullup(sfm, -1);
    while (len - off >= 4) {
        size_t fl = (size_t)b[off] << 24 | (size_t)b[off + 1] << 16 | (size_t)b[off + 2] << 8 | b[off + 3];
        if (fl < 4 || fl > len - off) break; /* a message still arriving */
        /* our writer's message for this frame reads back as the frame */
        uint8_t head[CJ_GRPCMSG_HEAD_MAX];
        size_t h = cj_grpcmsg_head(head, off, fl);
        struct cj_grpcmsg_rx rx;
        struct cj_err err;
        struct evbuffer *back = evbuffer_new();
        cj_grpcmsg_rx_init(&rx, 1 << 20);
        CHECK(cj_grpcmsg_feed(&rx, head, h, back, &err) == 0);
        CHECK(cj_grpcmsg_feed(&rx, b + off, fl, back, &err) == 0);
        CHECK(evbuffer_get_length(back) == fl && memcmp(evbuffer_pullup(back, -1), b + off, fl) == 0);
        cj_grpcmsg_rx_free(&rx);
        evbuffer_free(back);
        off += fl;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    bool server = data[0] & 1, reader = data[0] & 2;
    size_t piece = (size_t)(data[0] >> 2) * 4 + 1;
    struct run whole, pieces;
    if (reader) {
        run_reader(data + 1, size - 1, size, &whole);
        run_reader(data + 1, size - 1, piece, &pieces);
    } else {
        run_carrier(server, data + 1, size - 1, size, &whole);
        run_carrier(server, data + 1, size - 1, piece, &pieces);
    }
    if (reader) CHECK((whole.rc < 0) == (pieces.rc < 0));
    size_t nw = evbuffer_get_length(whole.sfm), np = evbuffer_get_length(pieces.sfm);
    size_t common = nw < np ? nw : np;
    CHECK(common == 0 || memcmp(evbuffer_pullup(whole.sfm, -1), evbuffer_pullup(pieces.sfm, -1), common) == 0);
    if (whole.rc >= 0 && pieces.rc >= 0) CHECK(nw == np);
    if (whole.rc >= 0) check_frames(whole.sfm);
    evbuffer_free(whole.sfm);
    evbuffer_free(pieces.sfm);
    return 0;
}
