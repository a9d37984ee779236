/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_ws.c — the WebSocket carrier's input path (lib/net/ws.c, wsupgrade.c).
 *
 * Input: byte 0 = flags (bit 0: we are the server; bits 1-7: piece size - 1),
 * the rest is what the peer sends (for a client, after a valid 101 the target
 * prepends unless bit 0 of byte 1 is set, so both the upgrade and the framing
 * get reached).  Invariants checked:
 *  - the verdict and the SFM bytes are the same whether the input comes whole
 *    (one chain, payload copied) or in pieces (a chain each, payload moved
 *    as chains where a chain lies inside it);
 *  - the SFM bytes that come out split into whole frames by their length
 *    prefix (but a last message still arriving);
 *  - what a client writes, a server reads back identically (round trip of the
 *    SFM bytes the fuzz input produced);
 *  - a frame header decoded at the start of the peer's bytes encodes back to
 *    the same bytes (lengths are only accepted in their shortest form);
 *  - cutting the peer's bytes, held in chains of the piece size (copies and
 *    references), at a point byte 1 picks (chainsplit.c: the carrier's cut at
 *    a frame's end, which the short inputs here do not reach through it)
 *    gives the bytes before and after in order, and frees them in either
 *    order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/chainsplit.h"
#include "net/ws.h"
#include "net/wsframe.h"
#include "net/wsupgrade.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

#define KEY "HzV3lDT22+FOtv14YTRaog=="

struct run {
    int rc;
    struct evbuffer *sfm, *out;
};

static void run(bool server, const uint8_t *p, size_t n, size_t piece, bool prepend, struct run *r)
{
    struct cj_ws *ws = cj_ws_new(server ? CJ_WS_SERVER : CJ_WS_CLIENT, "h:1", KEY);
    CHECK(ws);
    cj_ws_set_max_message(ws, 1 << 20);
    struct evbuffer *in = evbuffer_new(), *piece_buf = evbuffer_new();
    r->sfm = evbuffer_new();
    r->out = evbuffer_new();
    if (prepend) {
        char acc[CJ_WSUP_ACCEPT_LEN + 1];
        cj_wsup_accept(KEY, acc);
        evbuffer_add_printf(in, "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
                                "Sec-WebSocket-Accept: %s\r\n\r\n", acc);
    }
    struct cj_err err;
    r->rc = CJ_WS_MORE;
    for (size_t off = 0; r->rc == CJ_WS_MORE && (off < n || off == 0);) {
        size_t k = n - off < piece ? n - off : piece;
        evbuffer_add(piece_buf, p + off, k); /* a chain of its own, as conn.c hands them on */
        evbuffer_add_buffer(in, piece_buf);
        off += k;
        r->rc = cj_ws_read(ws, in, r->sfm, r->out, &err);
        if (k == 0) break;
    }
    evbuffer_free(in);
    evbuffer_free(piece_buf);
    cj_ws_free(ws);
}

/* The SFM bytes split into frames by their prefix: every one whole but the
 * last, which may be a message still arriving.  Returns the whole frames' bytes. */
static size_t whole_frames(struct evbuffer *sfm)
{
    size_t len = evbuffer_get_length(sfm), off = 0;
    uint8_t *b = evbuffer_pullup(sfm, -1);
    while (len - off >= 4) {
        size_t fl = (size_t)b[off] << 24 | (size_t)b[off + 1] << 16 | (size_t)b[off + 2] << 8 | b[off + 3];
        if (fl < 4 || fl > len - off) break; /* a message still arriving */
        off += fl;
    }
    return off;
}

/* The frames go client -> server and come out the same. */
static void round_trip(struct evbuffer *sfm, size_t len)
{
    struct cj_ws *c = cj_ws_new(CJ_WS_CLIENT, "h:1", NULL), *s = cj_ws_new(CJ_WS_SERVER, NULL, NULL);
    struct evbuffer *c2s = evbuffer_new(), *s2c = evbuffer_new(), *got = evbuffer_new(), *src = evbuffer_new();
    struct cj_err err;
    CHECK(cj_ws_start(c, c2s) == 0);
    CHECK(cj_ws_read(s, c2s, got, s2c, &err) == CJ_WS_MORE);
    CHECK(cj_ws_read(c, s2c, got, c2s, &err) == CJ_WS_MORE);
    uint8_t *b = evbuffer_pullup(sfm, -1);
    evbuffer_add(src, b, len);
    for (size_t off = 0; off < len;) {
        size_t fl = (size_t)b[off] << 24 | (size_t)b[off + 1] << 16 | (size_t)b[off + 2] << 8 | b[off + 3];
        CHECK(cj_ws_write(c, src, fl, c2s) == 0);
        off += fl;
    }
    CHECK(cj_ws_read(s, c2s, got, s2c, &err) == CJ_WS_MORE);
    CHECK(evbuffer_get_length(got) == len);
    CHECK(len == 0 || memcmp(evbuffer_pullup(got, -1), b, len) == 0);
    evbuffer_free(c2s);
    evbuffer_free(s2c);
    evbuffer_free(got);
    evbuffer_free(src);
    cj_ws_free(c);
    cj_ws_free(s);
}

/* decode -> encode gives the header's bytes back (but RSV bits, which encode never sets). */
static void header_round_trip(const uint8_t *p, size_t n)
{
    struct cj_wsf_head h;
    struct cj_err err;
    int r = cj_wsf_decode(p, n, 0, &h, &err);
    if (r <= 0) {
        CHECK(r == 0 || err.msg[0]);
        return;
    }
    CHECK(h.size >= 2 && h.size <= CJ_WSF_MAX_HEAD && h.size <= n && h.len >> 63 == 0);
    uint8_t b[CJ_WSF_MAX_HEAD];
    CHECK(cj_wsf_encode(b, &h) == h.size);
    b[0] |= (uint8_t)(h.rsv << 4);
    CHECK(memcmp(b, p, h.size) == 0);
}

static void no_release(const void *p, size_t n, void *arg) { (void)p, (void)n, (void)arg; }

static void chain_split(const uint8_t *p, size_t n, size_t piece, uint8_t at)
{
    if (n < 3) return; /* 2 bytes at least after the first is dropped */
    struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();
    evbuffer_add(dst, "x", 1); /* dst already holds something */
    for (size_t off = 0, i = 0; off < n; off += piece, i++) {
        size_t k = n - off < piece ? n - off : piece;
        if (i & 1) evbuffer_add_reference(src, p + off, k, no_release, NULL);
        else evbuffer_add(src, p + off, k);
    }
    evbuffer_drain(src, 1); /* a chain begun part-way */
    size_t len = n - 1, cut = 1 + (len - 1) * at / 256;
    CHECK(cj_chain_split(src, cut, dst, piece) == 0);
    CHECK(evbuffer_get_length(dst) == 1 + cut && evbuffer_get_length(src) == len - cut);
    uint8_t *got = malloc(len + 1);
    CHECK(evbuffer_copyout(dst, got, cut + 1) == (ev_ssize_t)(cut + 1));
    CHECK(evbuffer_copyout(src, got + cut + 1, len - cut) == (ev_ssize_t)(len - cut));
    CHECK(memcmp(got + 1, p + 1, len) == 0);
    free(got);
    if (at & 1) {
        evbuffer_free(dst);
        evbuffer_free(src);
    } else {
        evbuffer_free(src);
        evbuffer_free(dst);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    bool server = data[0] & 1;
    size_t piece = (size_t)(data[0] >> 1) + 1;
    bool prepend = !server && !(data[1] & 1);
    struct run whole, pieces;
    header_round_trip(data + 2, size - 2);
    chain_split(data + 2, size - 2, piece, data[1]);
    run(server, data + 2, size - 2, size, prepend, &whole);
    run(server, data + 2, size - 2, piece, prepend, &pieces);
    CHECK((whole.rc < 0) == (pieces.rc < 0));
    if (whole.rc >= 0) {
        CHECK(whole.rc == pieces.rc);
        size_t n = evbuffer_get_length(whole.sfm);
        CHECK(n == evbuffer_get_length(pieces.sfm));
        CHECK(n == 0 || memcmp(evbuffer_pullup(whole.sfm, -1), evbuffer_pullup(pieces.sfm, -1), n) == 0);
        round_trip(whole.sfm, whole_frames(whole.sfm));
    }
    evbuffer_free(whole.sfm);
    evbuffer_free(whole.out);
    evbuffer_free(pieces.sfm);
    evbuffer_free(pieces.out);
    return 0;
}
