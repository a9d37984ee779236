/* SPDX-License-Identifier: Apache-2.0 */
/* test_ws.c — the WebSocket carrier (lib/net/ws.c, wsupgrade.c): FLARE's own
 * http driver's bytes (tests/vectors/transports/http) in pieces of any size give
 * exactly the captured SFM frames; what we send re-parses; frame headers decode
 * in every length form and at every split; every refusal names what the peer did. */
#include "sfmcap.h"

#include "net/ws.h"
#include "net/wsframe.h"
#include "net/wsupgrade.h"

#define CAPTURE_KEY "HzV3lDT22+FOtv14YTRaog=="
#define CAPTURE_ACCEPT "Ve9L/GsSfZ2I12m5FOCqd+sHRbU="

/* Feeds data to ws in pieces (step 0: pseudo-random sizes up to 9000 bytes). */
static int feed(struct cj_ws *ws, const uint8_t *data, size_t len, size_t step, struct evbuffer *sfm,
                struct evbuffer *out, struct cj_err *err)
{
    struct evbuffer *in = evbuffer_new();
    uint32_t seed = 12345;
    int rc = CJ_WS_MORE;
    for (size_t off = 0; off < len && rc == CJ_WS_MORE;) {
        seed = seed * 1103515245u + 12345u;
        size_t n = step ? step : 1 + (seed >> 8) % 9000;
        if (n > len - off) n = len - off;
        evbuffer_add(in, data + off, n);
        off += n;
        rc = cj_ws_read(ws, in, sfm, out, err);
    }
    evbuffer_free(in);
    return rc;
}

static void replay(const char *dir, enum cj_ws_role role, size_t step)
{
    char name[128];
    snprintf(name, sizeof name, "transports/%s/%s", dir, role == CJ_WS_CLIENT ? "s2c.bin" : "c2s.bin");
    size_t len;
    uint8_t *data = tu_read_vector(name, &len);
    struct want w;
    snprintf(name, sizeof name, "transports/%s/%s", dir, role == CJ_WS_CLIENT ? "frames-server.jsonl" : "frames-client.jsonl");
    load_want(name, &w);
    struct cj_ws *ws = cj_ws_new(role, "127.0.0.1:38701", CAPTURE_KEY);
    struct evbuffer *sfm = evbuffer_new(), *out = evbuffer_new();
    struct cj_err err = {0};
    int rc = feed(ws, data, len, step, sfm, out, &err);
    if (rc < 0) fail_msg("%s", err.msg);
    check_frames(sfm, &w);
    if (role == CJ_WS_SERVER) { /* the 101 and nothing else */
        size_t n = evbuffer_get_length(out);
        char *resp = (char *)evbuffer_pullup(out, (ev_ssize_t)n);
        assert_true(n > 12 && memcmp(resp, "HTTP/1.1 101", 12) == 0);
        assert_non_null(memmem(resp, n, CAPTURE_ACCEPT, strlen(CAPTURE_ACCEPT)));
    } else { /* the server ended with CLOSE 1000: answered with ours, masked */
        assert_int_equal(rc, CJ_WS_CLOSED);
        assert_false(cj_ws_is_open(ws));
        uint8_t c[8];
        assert_int_equal(evbuffer_copyout(out, c, sizeof c), 8);
        assert_int_equal(c[0], 0x88);
        assert_int_equal((c[6] ^ c[2]) << 8 | (c[7] ^ c[3]), 1000);
    }
    evbuffer_free(sfm);
    evbuffer_free(out);
    cj_ws_free(ws);
    free(data);
}

static void test_capture_s2c_pieces(void **state)
{
    replay("http", CJ_WS_CLIENT, 0);
    replay("http", CJ_WS_CLIENT, 1);
    replay("http", CJ_WS_CLIENT, 7);
    replay("http", CJ_WS_CLIENT, SIZE_MAX);
}

static void test_capture_c2s_pieces(void **state)
{
    replay("http", CJ_WS_SERVER, 0);
    replay("http", CJ_WS_SERVER, 1);
    replay("http", CJ_WS_SERVER, 7);
    replay("http", CJ_WS_SERVER, SIZE_MAX);
}

static void test_accept_hash(void **state)
{
    char a[CJ_WSUP_ACCEPT_LEN + 1];
    cj_wsup_accept("dGhlIHNhbXBsZSBub25jZQ==", a); /* RFC 6455 §1.3's example */
    assert_string_equal(a, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    cj_wsup_accept(CAPTURE_KEY, a);
    assert_string_equal(a, CAPTURE_ACCEPT);
    char k1[CJ_WSUP_KEY_LEN + 1], k2[CJ_WSUP_KEY_LEN + 1];
    assert_int_equal(cj_wsup_new_key(k1), 0);
    assert_int_equal(cj_wsup_new_key(k2), 0);
    assert_int_equal(strlen(k1), CJ_WSUP_KEY_LEN);
    assert_string_not_equal(k1, k2);
}

static void test_mask_word_wide(void **state)
{
    uint8_t src[64], dst[64], key[4] = {0x12, 0x34, 0x56, 0x78};
    for (int i = 0; i < 64; i++) src[i] = (uint8_t)(i * 7 + 1);
    for (unsigned off = 0; off < 4; off++)
        for (size_t start = 0; start < 3; start++)
            for (size_t n = 0; n + start <= 40; n++) {
                cj_ws_mask(dst + start, src + start, n, key, off);
                for (size_t i = 0; i < n; i++) assert_int_equal(dst[start + i], src[start + i] ^ key[(off + i) % 4]);
            }
}

/* ---- a client and a server talking ------------------------------------------------------- */

struct pair {
    struct cj_ws *c, *s;
    struct evbuffer *c2s, *s2c, *csfm, *ssfm;
};

static void pair_open(struct pair *p)
{
    p->c = cj_ws_new(CJ_WS_CLIENT, "example:443", NULL);
    p->s = cj_ws_new(CJ_WS_SERVER, NULL, NULL);
    p->c2s = evbuffer_new();
    p->s2c = evbuffer_new();
    p->csfm = evbuffer_new();
    p->ssfm = evbuffer_new();
    struct cj_err err = {0};
    assert_int_equal(cj_ws_start(p->c, p->c2s), 0);
    assert_int_equal(cj_ws_read(p->s, p->c2s, p->ssfm, p->s2c, &err), CJ_WS_MORE);
    assert_true(cj_ws_is_open(p->s));
    assert_int_equal(cj_ws_read(p->c, p->s2c, p->csfm, p->c2s, &err), CJ_WS_MORE);
    assert_true(cj_ws_is_open(p->c));
}

static void pair_close(struct pair *p)
{
    cj_ws_free(p->c);
    cj_ws_free(p->s);
    evbuffer_free(p->c2s);
    evbuffer_free(p->s2c);
    evbuffer_free(p->csfm);
    evbuffer_free(p->ssfm);
}

static void test_round_trip_sizes(void **state)
{
    static const size_t sizes[] = {16, 125, 126, 127, 65535, 65536, 65537, (1u << 20) + 3};
    struct pair p;
    pair_open(&p);
    struct evbuffer *src = evbuffer_new(), *ref = evbuffer_new();
    struct cj_err err = {0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sfm_frame(src, sizes[i], (uint8_t)(0xA0 + i));
        sfm_frame(ref, sizes[i], (uint8_t)(0xA0 + i));
        assert_int_equal(cj_ws_write(p.c, src, sizes[i], p.c2s), 0);
        /* masked on the wire: the payload's fill byte does not show through */
        size_t hdr = sizes[i] < 126 ? 6 : sizes[i] < 65536 ? 8 : 14;
        uint8_t wire[32];
        evbuffer_copyout(p.c2s, wire, hdr + 16);
        assert_int_equal(wire[1] & 0x80, 0x80);
        assert_false(wire[hdr + 8] == (uint8_t)(0xA0 + i) && wire[hdr + 9] == (uint8_t)(0xA0 + i) &&
                     wire[hdr + 10] == (uint8_t)(0xA0 + i) && wire[hdr + 11] == (uint8_t)(0xA0 + i));
        assert_int_equal(cj_ws_read(p.s, p.c2s, p.ssfm, p.s2c, &err), CJ_WS_MORE);
        assert_int_equal(evbuffer_get_length(p.c2s), 0);
        /* and back, unmasked */
        assert_int_equal(cj_ws_write(p.s, p.ssfm, sizes[i], p.s2c), 0);
        evbuffer_copyout(p.s2c, wire, 2);
        assert_int_equal(wire[1] & 0x80, 0);
        assert_int_equal(cj_ws_read(p.c, p.s2c, p.csfm, p.c2s, &err), CJ_WS_MORE);
        assert_int_equal(evbuffer_get_length(p.csfm), sizes[i]);
        assert_memory_equal(evbuffer_pullup(p.csfm, -1), evbuffer_pullup(ref, -1), sizes[i]);
        evbuffer_drain(p.csfm, sizes[i]);
        evbuffer_drain(ref, sizes[i]);
    }
    assert_int_equal(evbuffer_get_length(src), 0);
    evbuffer_free(src);
    evbuffer_free(ref);
    pair_close(&p);
}

/* ---- what the peer does wrong ------------------------------------------------------------- */

/* A client past the upgrade, fed raw frame bytes from a "server". */
static int client_gets(const uint8_t *bytes, size_t n, uint64_t max, struct evbuffer *sfm, struct evbuffer *out,
                       struct cj_err *err)
{
    struct cj_ws *ws = cj_ws_new(CJ_WS_CLIENT, "h:1", CAPTURE_KEY);
    if (max) cj_ws_set_max_message(ws, max);
    struct evbuffer *in = evbuffer_new();
    evbuffer_add_printf(in, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
                            "Sec-WebSocket-Accept: %s\r\n\r\n", CAPTURE_ACCEPT);
    evbuffer_add(in, bytes, n);
    int rc = cj_ws_read(ws, in, sfm, out, err);
    evbuffer_free(in);
    cj_ws_free(ws);
    return rc;
}

static void expect_client_error(const uint8_t *bytes, size_t n, uint64_t max, const char *what, uint16_t close_code)
{
    struct evbuffer *sfm = evbuffer_new(), *out = evbuffer_new();
    struct cj_err err = {0};
    assert_true(client_gets(bytes, n, max, sfm, out, &err) < 0);
    if (!strstr(err.msg, what)) fail_msg("error \"%s\" does not say \"%s\"", err.msg, what);
    uint8_t f[8]; /* the CLOSE we sent: masked, code in the first two payload bytes */
    assert_int_equal(evbuffer_copyout(out, f, 8), 8);
    assert_int_equal(f[0], 0x88);
    assert_int_equal(f[1], 0x82);
    assert_int_equal((f[6] ^ f[2]) << 8 | (f[7] ^ f[3]), close_code);
    evbuffer_free(sfm);
    evbuffer_free(out);
}

static void test_bad_frames(void **state)
{
    const uint8_t text[] = {0x81, 0x02, 'h', 'i'};
    expect_client_error(text, sizeof text, 0, "text message", 1003);
    const uint8_t big[] = {0x82, 0x7E, 0x00, 0xC8}; /* refused on its header alone */
    expect_client_error(big, sizeof big, 100, "over 100 bytes", 1009);
    const uint8_t masked[] = {0x82, 0x84, 1, 2, 3, 4, 0, 0, 0, 4};
    expect_client_error(masked, sizeof masked, 0, "masked frame from the server", 1002);
    const uint8_t rsv[] = {0xC2, 0x00};
    expect_client_error(rsv, sizeof rsv, 0, "reserved bits", 1002);
    const uint8_t op[] = {0x83, 0x00};
    expect_client_error(op, sizeof op, 0, "opcode 3", 1002);
    const uint8_t cont[] = {0x80, 0x00};
    expect_client_error(cont, sizeof cont, 0, "no message open", 1002);
    const uint8_t misaligned[] = {0x82, 0x05, 0, 0, 0, 16, 9}; /* prefix says 16, message has 5 */
    expect_client_error(misaligned, sizeof misaligned, 0, "does not hold one SFM frame", 1002);
    const uint8_t long_ping[] = {0x89, 0x7E, 0x00, 0x80};
    expect_client_error(long_ping, sizeof long_ping, 0, "PING frame of 128 bytes from the server (a control frame carries at most 125)", 1002);
    const uint8_t frag_ping[] = {0x09, 0x00};
    expect_client_error(frag_ping, sizeof frag_ping, 0, "fragmented PING frame from the server", 1002);
    const uint8_t top_bit[] = {0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0x10};
    expect_client_error(top_bit, sizeof top_bit, 0, "top bit of its 64-bit form set", 1002);
    const uint8_t long16[] = {0x82, 0x7E, 0x00, 0x05, 0, 0, 0, 5, 0};
    expect_client_error(long16, sizeof long16, 0, "length 5 in the 16-bit form", 1002);
    const uint8_t nested[] = {0x02, 0x01, 0, 0x82, 0x00};
    expect_client_error(nested, sizeof nested, 0, "new message inside an unfinished fragmented one", 1002);
    const uint8_t ctl_op[] = {0x8B, 0x00};
    expect_client_error(ctl_op, sizeof ctl_op, 0, "opcode 11", 1002);
}

static void test_fragments_ping_close(void **state)
{
    /* one 24-byte SFM frame in three fragments, a PING between the first two */
    uint8_t b[64];
    size_t n = 0;
    uint8_t frame[24] = {0, 0, 0, 24};
    for (int i = 4; i < 24; i++) frame[i] = (uint8_t)i;
    b[n++] = 0x02, b[n++] = 10, memcpy(b + n, frame, 10), n += 10;
    b[n++] = 0x89, b[n++] = 3, memcpy(b + n, "abc", 3), n += 3;
    b[n++] = 0x00, b[n++] = 4, memcpy(b + n, frame + 10, 4), n += 4;
    b[n++] = 0x80, b[n++] = 10, memcpy(b + n, frame + 14, 10), n += 10;
    b[n++] = 0x88, b[n++] = 2, b[n++] = 0x03, b[n++] = 0xE8; /* CLOSE 1000 */
    struct evbuffer *sfm = evbuffer_new(), *out = evbuffer_new();
    struct cj_err err = {0};
    assert_int_equal(client_gets(b, n, 0, sfm, out, &err), CJ_WS_CLOSED);
    assert_int_equal(evbuffer_get_length(sfm), 24);
    assert_memory_equal(evbuffer_pullup(sfm, -1), frame, 24);
    uint8_t o[32]; /* PONG "abc" masked, then CLOSE 1000 masked */
    assert_int_equal(evbuffer_copyout(out, o, sizeof o), 9 + 8);
    assert_int_equal(o[0], 0x8A);
    assert_int_equal(o[1], 0x83);
    for (int i = 0; i < 3; i++) assert_int_equal(o[6 + i] ^ o[2 + i], "abc"[i]);
    assert_int_equal(o[9], 0x88);
    assert_int_equal((o[15] ^ o[11]) << 8 | (o[16] ^ o[12]), 1000);
    evbuffer_free(sfm);
    evbuffer_free(out);
}

/* ---- frame headers (wsframe.c) and the receive path ------------------------------------ */

static void test_header_forms(void **state)
{
    static const uint64_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 70000, (uint64_t)1 << 40, ((uint64_t)1 << 63) - 1};
    static const size_t sizes[] = {2, 2, 2, 4, 4, 4, 10, 10, 10, 10};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int m = 0; m < 2; m++) {
            struct cj_wsf_head h = {.fin = i & 1, .opcode = (uint8_t)(i & 1 ? CJ_WSF_BINARY : CJ_WSF_CONTINUATION),
                                    .masked = m, .key = {9, 8, 7, 6}, .len = lens[i]}, d;
            uint8_t b[CJ_WSF_MAX_HEAD];
            size_t n = cj_wsf_encode(b, &h);
            assert_int_equal(n, sizes[i] + (m ? 4 : 0));
            struct cj_err err = {0};
            for (size_t k = 0; k < n; k++) assert_int_equal(cj_wsf_decode(b, k, 0, &d, &err), 0); /* not whole yet */
            assert_int_equal(cj_wsf_decode(b, n, 0, &d, &err), 1);
            assert_int_equal(d.size, n);
            assert_true(d.len == lens[i]);
            assert_int_equal(d.fin, h.fin);
            assert_int_equal(d.opcode, h.opcode);
            assert_int_equal(d.masked, m);
            assert_int_equal(d.rsv, 0);
            if (m) assert_memory_equal(d.key, h.key, 4);
        }
    /* RSV bits and opcode come through for the carrier to judge */
    const uint8_t rsv[] = {0x7A, 0x00};
    struct cj_wsf_head d;
    assert_int_equal(cj_wsf_decode(rsv, 2, 0, &d, NULL), 1);
    assert_int_equal(d.rsv, 7);
    assert_int_equal(d.opcode, 0xA);
    assert_false(d.fin);
}

/* Lengths not in their shortest form, and 2^63 or more, are refused (RFC 6455
 * §5.2 requires the minimal form; wslay refused them too). */
static void test_header_refusals(void **state)
{
    static const struct {
        uint8_t b[10];
        size_t n;
        const char *why;
    } cases[] = {
        {{0x82, 126, 0x00, 0x7D}, 4, "length 125 in the 16-bit form"},
        {{0x82, 126, 0x00, 0x00}, 4, "length 0 in the 16-bit form"},
        {{0x82, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, 10, "length 65535 in the 64-bit form"},
        {{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, 10, "top bit of its 64-bit form set"},
        {{0x82, 127, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, 10, "top bit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cj_wsf_head d;
        struct cj_err err = {0};
        assert_true(cj_wsf_decode(cases[i].b, cases[i].n, 100, &d, &err) < 0);
        if (!strstr(err.msg, cases[i].why)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].why);
        assert_int_equal(err.offset, 102);
    }
}

/* A client past the upgrade, to be fed frame bytes. */
static struct cj_ws *open_client(struct evbuffer *out)
{
    struct cj_ws *ws = cj_ws_new(CJ_WS_CLIENT, "h:1", CAPTURE_KEY);
    struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new();
    struct cj_err err = {0};
    evbuffer_add_printf(in, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
                            "Sec-WebSocket-Accept: %s\r\n\r\n", CAPTURE_ACCEPT);
    assert_int_equal(cj_ws_read(ws, in, sfm, out, &err), CJ_WS_MORE);
    assert_true(cj_ws_is_open(ws));
    assert_int_equal(evbuffer_get_length(in), 0);
    evbuffer_free(in);
    evbuffer_free(sfm);
    return ws;
}

/* Appends an unmasked frame to b. */
static void add_frame(struct evbuffer *b, bool fin, uint8_t op, const uint8_t *p, size_t n)
{
    struct cj_wsf_head h = {.fin = fin, .opcode = op, .len = n};
    uint8_t hb[CJ_WSF_MAX_HEAD];
    evbuffer_add(b, hb, cj_wsf_encode(hb, &h));
    evbuffer_add(b, p, n);
}

/* A server's stream with every length form, a message in fragments with a PING
 * and a PONG between them, an empty fragment, and a CLOSE; the SFM bytes it carries. */
static void server_stream(struct evbuffer *wire, struct evbuffer *want)
{
    sfm_frame(want, 100, 0x11);     /* 7-bit */
    sfm_frame(want, 300, 0x22);     /* 16-bit */
    sfm_frame(want, 70000, 0x33);   /* 64-bit */
    sfm_frame(want, 1000, 0x44);    /* in fragments */
    const uint8_t *w = evbuffer_pullup(want, -1);
    add_frame(wire, true, CJ_WSF_BINARY, w, 100);
    add_frame(wire, true, CJ_WSF_BINARY, w + 100, 300);
    add_frame(wire, true, CJ_WSF_BINARY, w + 400, 70000);
    const uint8_t *f = w + 70400;
    add_frame(wire, false, CJ_WSF_BINARY, f, 2); /* the SFM prefix itself split */
    add_frame(wire, true, CJ_WSF_PING, (const uint8_t *)"ping!", 5);
    add_frame(wire, false, CJ_WSF_CONTINUATION, f + 2, 500);
    add_frame(wire, true, CJ_WSF_PONG, NULL, 0);
    add_frame(wire, false, CJ_WSF_CONTINUATION, NULL, 0);
    add_frame(wire, true, CJ_WSF_CONTINUATION, f + 502, 498);
    const uint8_t close[] = {0x03, 0xE8, 'b', 'y', 'e'};
    add_frame(wire, true, CJ_WSF_CLOSE, close, sizeof close);
}

/* What the client answered: a masked PONG "ping!", then a masked CLOSE 1000. */
static void check_answers(struct evbuffer *out)
{
    uint8_t o[19];
    assert_int_equal(evbuffer_get_length(out), 11 + 8);
    evbuffer_copyout(out, o, sizeof o);
    assert_int_equal(o[0], 0x8A);
    assert_int_equal(o[1], 0x85);
    for (int i = 0; i < 5; i++) assert_int_equal(o[6 + i] ^ o[2 + i % 4], "ping!"[i]);
    assert_int_equal(o[11], 0x88);
    assert_int_equal(o[12], 0x82);
    assert_int_equal((o[17] ^ o[13]) << 8 | (o[18] ^ o[14]), 1000);
}

/* The same stream whole, one byte at a time, and cut in two at every point of
 * its first and last stretches: the same SFM bytes and answers each way. */
static void test_split_everywhere(void **state)
{
    struct evbuffer *wire = evbuffer_new(), *want = evbuffer_new();
    server_stream(wire, want);
    size_t n = evbuffer_get_length(wire), wn = evbuffer_get_length(want);
    const uint8_t *w = evbuffer_pullup(wire, -1), *sfm_want = evbuffer_pullup(want, -1);
    for (size_t cut = 0; cut <= n; cut += cut < 600 || cut > n - 1100 ? 1 : 997) {
        for (int bytewise = 0; bytewise < 2 && (cut == 0 || !bytewise); bytewise++) {
            struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new();
            struct cj_ws *ws = open_client(out);
            struct cj_err err = {0};
            int rc = CJ_WS_MORE;
            for (size_t off = 0; off < n && rc == CJ_WS_MORE;) {
                size_t k = bytewise ? 1 : off < cut ? cut - off : n - off;
                evbuffer_add(in, w + off, k);
                off += k;
                rc = cj_ws_read(ws, in, sfm, out, &err);
                if (rc < 0) fail_msg("cut %zu: %s", cut, err.msg);
                assert_true(rc == CJ_WS_MORE || off == n);
            }
            assert_int_equal(rc, CJ_WS_CLOSED);
            assert_int_equal(evbuffer_get_length(sfm), wn);
            assert_memory_equal(evbuffer_pullup(sfm, -1), sfm_want, wn);
            check_answers(out);
            cj_ws_free(ws);
            evbuffer_free(in);
            evbuffer_free(sfm);
            evbuffer_free(out);
        }
    }
    evbuffer_free(wire);
    evbuffer_free(want);
}

static void release_nothing(const void *data, size_t len, void *arg) { (void)data, (void)len, (void)arg; }

/* A server's payload that arrives as a chain of its own reaches the SFM bytes
 * as that same memory, not a copy. */
static void test_payload_moved(void **state)
{
    struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new(), *frame = evbuffer_new();
    struct cj_ws *ws = open_client(out);
    sfm_frame(frame, 200000, 0x5A);
    const uint8_t *p = evbuffer_pullup(frame, -1);
    struct cj_wsf_head h = {.fin = true, .opcode = CJ_WSF_BINARY, .len = 200000};
    uint8_t hb[CJ_WSF_MAX_HEAD];
    evbuffer_add(in, hb, cj_wsf_encode(hb, &h));
    evbuffer_add_reference(in, p, 200000, release_nothing, NULL);
    struct cj_err err = {0};
    assert_int_equal(cj_ws_read(ws, in, sfm, out, &err), CJ_WS_MORE);
    assert_int_equal(evbuffer_get_length(in), 0);
    assert_int_equal(evbuffer_get_length(sfm), 200000);
    struct evbuffer_iovec v;
    assert_int_equal(evbuffer_peek(sfm, -1, NULL, &v, 1), 1);
    assert_ptr_equal(v.iov_base, p);
    assert_int_equal(v.iov_len, 200000);
    cj_ws_free(ws);
    evbuffer_free(sfm); /* the reference goes before the memory it names */
    evbuffer_free(in);
    evbuffer_free(out);
    evbuffer_free(frame);
}

/* Two frames in one chain, as one read brings them: the first payload reaches
 * the SFM bytes as references into that chain (no copy), the second too, and
 * the chain is released only when both are. */
static int released;
static void note_release(const void *data, size_t len, void *arg) { (void)data, (void)len, (void)arg, released++; }

static void test_payload_split(void **state)
{
    struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new();
    struct evbuffer *wire = evbuffer_new(), *want = evbuffer_new();
    struct cj_ws *ws = open_client(out);
    sfm_frame(want, 100000, 0x61);
    sfm_frame(want, 40000, 0x62);
    sfm_frame(want, 50, 0x63); /* small: copied */
    const uint8_t *w = evbuffer_pullup(want, -1);
    add_frame(wire, true, CJ_WSF_BINARY, w, 100000);
    add_frame(wire, true, CJ_WSF_BINARY, w + 100000, 40000);
    add_frame(wire, true, CJ_WSF_BINARY, w + 140000, 50);
    size_t n = evbuffer_get_length(wire);
    const uint8_t *p = evbuffer_pullup(wire, -1);
    released = 0;
    evbuffer_add_reference(in, p, n - 20, note_release, NULL); /* the last frame still arriving */
    struct cj_err err = {0};
    assert_int_equal(cj_ws_read(ws, in, sfm, out, &err), CJ_WS_MORE);
    evbuffer_add(in, p + n - 20, 20);
    assert_int_equal(cj_ws_read(ws, in, sfm, out, &err), CJ_WS_MORE);
    assert_int_equal(evbuffer_get_length(in), 0);
    assert_int_equal(evbuffer_get_length(sfm), 140050);
    struct evbuffer_iovec v[8];
    int k = evbuffer_peek(sfm, -1, NULL, v, 8);
    assert_true(k >= 3 && k <= 8);
    assert_ptr_equal(v[0].iov_base, p + 10); /* after the 64-bit form header */
    assert_int_equal(v[0].iov_len, 100000);
    assert_ptr_equal(v[1].iov_base, p + 10 + 100000 + 4); /* and the 16-bit one */
    assert_int_equal(v[1].iov_len, 40000);
    uint8_t *got = malloc(140050);
    assert_int_equal(evbuffer_copyout(sfm, got, 140050), 140050); /* a pullup would copy and release */
    assert_memory_equal(got, w, 140050);
    free(got);
    assert_int_equal(released, 0);
    evbuffer_drain(sfm, 100000);
    assert_int_equal(released, 0); /* the second frame still refers to the chain */
    evbuffer_drain(sfm, 40050);
    assert_int_equal(released, 1);
    cj_ws_free(ws);
    evbuffer_free(in);
    evbuffer_free(sfm);
    evbuffer_free(out);
    evbuffer_free(wire);
    evbuffer_free(want);
}

static int client_upgrade(const char *response, struct cj_err *err)
{
    struct cj_ws *ws = cj_ws_new(CJ_WS_CLIENT, "h:1", CAPTURE_KEY);
    struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new();
    evbuffer_add(in, response, strlen(response));
    int rc = cj_ws_read(ws, in, sfm, out, err);
    evbuffer_free(in);
    evbuffer_free(sfm);
    evbuffer_free(out);
    cj_ws_free(ws);
    return rc;
}

static void test_refused_upgrades(void **state)
{
    struct cj_err err = {0};
    assert_true(client_upgrade("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", &err) < 0);
    assert_non_null(strstr(err.msg, "upgrade refused: \"HTTP/1.1 404 Not Found\""));
    assert_true(client_upgrade("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYCEoHqDoQqTOE=\r\n\r\n", &err) < 0);
    assert_non_null(strstr(err.msg, "bad Sec-WebSocket-Accept"));
    assert_true(client_upgrade("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n", &err) < 0);
    assert_non_null(strstr(err.msg, "Upgrade: websocket"));
    assert_true(client_upgrade("SSH-2.0-OpenSSH_9.2\r\n\r\n", &err) < 0);
    assert_non_null(strstr(err.msg, "SSH-2.0"));
    /* no blank line within the limit */
    char *junk = malloc(CJ_WSUP_MAX_HEAD + 100);
    memset(junk, 'x', CJ_WSUP_MAX_HEAD + 99);
    junk[CJ_WSUP_MAX_HEAD + 99] = '\0';
    assert_true(client_upgrade(junk, &err) < 0);
    assert_non_null(strstr(err.msg, "no end of the HTTP header"));
    free(junk);
    /* incomplete: nothing decided yet */
    assert_int_equal(client_upgrade("HTTP/1.1 101 Switching", &err), CJ_WS_MORE);
}

static void test_server_refusals(void **state)
{
    static const struct {
        const char *req, *status, *why;
    } cases[] = {
        {"GET /other HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " CAPTURE_KEY
         "\r\nSec-WebSocket-Version: 13\r\n\r\n", "HTTP/1.1 404", "upgrade for /other"},
        {"POST /f3 HTTP/1.1\r\n\r\n", "HTTP/1.1 400", "not a GET upgrade"},
        {"GET /f3 HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " CAPTURE_KEY
         "\r\nSec-WebSocket-Version: 8\r\n\r\n", "HTTP/1.1 426", "version \"8\""},
        {"GET /f3 HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
         "HTTP/1.1 400", "Sec-WebSocket-Key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cj_ws *ws = cj_ws_new(CJ_WS_SERVER, NULL, NULL);
        struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new();
        struct cj_err err = {0};
        evbuffer_add(in, cases[i].req, strlen(cases[i].req));
        assert_true(cj_ws_read(ws, in, sfm, out, &err) < 0);
        if (!strstr(err.msg, cases[i].why)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].why);
        assert_memory_equal(evbuffer_pullup(out, 12), cases[i].status, 12);
        assert_false(cj_ws_is_open(ws));
        evbuffer_free(in);
        evbuffer_free(sfm);
        evbuffer_free(out);
        cj_ws_free(ws);
    }
    /* a client frame must be masked */
    struct pair p;
    pair_open(&p);
    const uint8_t unmasked[] = {0x82, 0x00};
    struct cj_err err = {0};
    evbuffer_add(p.c2s, unmasked, 2);
    assert_true(cj_ws_read(p.s, p.c2s, p.ssfm, p.s2c, &err) < 0);
    assert_non_null(strstr(err.msg, "unmasked frame from the client"));
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_s2c_pieces),
        cmocka_unit_test(test_capture_c2s_pieces),
        cmocka_unit_test(test_accept_hash),
        cmocka_unit_test(test_mask_word_wide),
        cmocka_unit_test(test_round_trip_sizes),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_fragments_ping_close),
        cmocka_unit_test(test_header_forms),
        cmocka_unit_test(test_header_refusals),
        cmocka_unit_test(test_split_everywhere),
        cmocka_unit_test(test_payload_moved),
        cmocka_unit_test(test_payload_split),
        cmocka_unit_test(test_refused_upgrades),
        cmocka_unit_test(test_server_refusals),
    };
    return cmocka_run_group_tests_name("ws", tests, NULL, NULL);
}
