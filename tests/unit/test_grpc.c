/* SPDX-License-Identifier: Apache-2.0 */
/* test_grpc.c — the gRPC carrier (lib/net/grpc.c, grpcmsg.c): FLARE's own grpc
 * driver's bytes (tests/vectors/transports/grpc) in pieces of any size give
 * exactly the captured SFM frames; our client and server carry frames of every
 * size through HTTP/2 flow control; a paused reader stops the sender at the
 * window; what the peer does wrong is named. */
#include "sfmcap.h"

#include <nghttp2/nghttp2.h>

#include "net/grpc.h"
#include "net/grpcmsg.h"

static void replay(enum cj_grpc_role role, size_t step)
{
    size_t len;
    uint8_t *data = tu_read_vector(role == CJ_GRPC_CLIENT ? "transports/grpc/s2c.bin" : "transports/grpc/c2s.bin", &len);
    struct want w;
    load_want(role == CJ_GRPC_CLIENT ? "transports/grpc/frames-server.jsonl" : "transports/grpc/frames-client.jsonl", &w);
    struct cj_grpc *g = cj_grpc_new(role, "127.0.0.1:1", false);
    struct evbuffer *in = evbuffer_new(), *sfm = evbuffer_new(), *out = evbuffer_new(), *all = evbuffer_new();
    struct cj_err err = {0};
    assert_int_equal(cj_grpc_start(g, out), 0);
    uint32_t seed = 99;
    int rc = CJ_GRPC_MORE;
    for (size_t off = 0; off < len && rc == CJ_GRPC_MORE;) {
        seed = seed * 1103515245u + 12345u;
        size_t n = step ? step : 1 + (seed >> 8) % 70000;
        if (n > len - off) n = len - off;
        evbuffer_add(in, data + off, n);
        off += n;
        rc = cj_grpc_read(g, in, sfm, out, &err);
        size_t got = evbuffer_get_length(sfm);
        evbuffer_remove_buffer(sfm, all, got);
        cj_grpc_consume(g, got, out);
    }
    check_frames(all, &w);
    if (role == CJ_GRPC_SERVER) /* FLARE's client ends by resetting the call */
        assert_true(rc == CJ_GRPC_MORE || (rc < 0 && strstr(err.msg, "reset the call")));
    else
        assert_int_equal(rc, CJ_GRPC_MORE);
    evbuffer_free(in);
    evbuffer_free(sfm);
    evbuffer_free(out);
    evbuffer_free(all);
    cj_grpc_free(g);
    free(data);
}

static void test_capture_s2c_pieces(void **state)
{
    replay(CJ_GRPC_CLIENT, 0);
    replay(CJ_GRPC_CLIENT, 1);
    replay(CJ_GRPC_CLIENT, 9);
    replay(CJ_GRPC_CLIENT, SIZE_MAX);
}

static void test_capture_c2s_pieces(void **state)
{
    replay(CJ_GRPC_SERVER, 0);
    replay(CJ_GRPC_SERVER, 1);
    replay(CJ_GRPC_SERVER, 9);
    replay(CJ_GRPC_SERVER, SIZE_MAX);
}

/* ---- the message codec ------------------------------------------------------------------ */

static int feed_msg(const uint8_t *p, size_t n, struct evbuffer *sfm, struct cj_err *err)
{
    struct cj_grpcmsg_rx rx;
    cj_grpcmsg_rx_init(&rx, 1 << 20);
    for (size_t i = 0; i < n; i++) { /* byte by byte: every state boundary */
        int rc = cj_grpcmsg_feed(&rx, p + i, 1, sfm, err);
        if (rc < 0) {
            cj_grpcmsg_rx_free(&rx);
            return rc;
        }
    }
    cj_grpcmsg_rx_free(&rx);
    return 0;
}

static void test_message_codec(void **state)
{
    uint8_t sfm16[16] = {0, 0, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint8_t m[64];
    size_t h = cj_grpcmsg_head(m, 300, 16);
    assert_int_equal(h, 5 + 3 + 2);
    assert_memory_equal(m, "\x00\x00\x00\x00\x15\x08\xac\x02\x12\x10", 10); /* seq 300, data 16 */
    memcpy(m + h, sfm16, 16);
    struct evbuffer *sfm = evbuffer_new();
    struct cj_err err = {0};
    assert_int_equal(feed_msg(m, h + 16, sfm, &err), 0);
    assert_int_equal(evbuffer_get_length(sfm), 16);
    assert_memory_equal(evbuffer_pullup(sfm, -1), sfm16, 16);
    evbuffer_drain(sfm, 16);
    /* seq 0 is left out; unknown fields of every wire type are skipped */
    uint8_t u[] = {0, 0, 0, 0, 33, 0x18, 0x05, 0x22, 0x02, 'h', 'i', 0x2d, 1, 2, 3, 4, 0x31, 1, 2, 3, 4, 5, 6, 7, 8,
                   0x12, 16, 0, 0, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    u[4] = (uint8_t)(sizeof u - 5);
    assert_int_equal(cj_grpcmsg_head(m, 0, 16), 5 + 2);
    assert_int_equal(feed_msg(u, sizeof u, sfm, &err), 0);
    assert_int_equal(evbuffer_get_length(sfm), 16);
    evbuffer_free(sfm);
}

static void expect_msg_error(const uint8_t *p, size_t n, const char *what)
{
    struct evbuffer *sfm = evbuffer_new();
    struct cj_err err = {0};
    assert_true(feed_msg(p, n, sfm, &err) < 0);
    if (!strstr(err.msg, what)) fail_msg("\"%s\" does not say \"%s\"", err.msg, what);
    evbuffer_free(sfm);
}

static void test_message_errors(void **state)
{
    const uint8_t compressed[] = {1, 0, 0, 0, 2, 0x08, 1};
    expect_msg_error(compressed, sizeof compressed, "compressed");
    const uint8_t big[] = {0, 0, 0x20, 0, 0};
    expect_msg_error(big, sizeof big, "at most");
    const uint8_t nodata[] = {0, 0, 0, 0, 2, 0x08, 1};
    expect_msg_error(nodata, sizeof nodata, "0 data fields");
    const uint8_t twodata[] = {0, 0, 0, 0, 12, 0x12, 4, 0, 0, 0, 4, 0x12, 4, 0, 0, 0, 4};
    expect_msg_error(twodata, sizeof twodata, "two data fields");
    const uint8_t longvar[] = {0, 0, 0, 0, 12, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1};
    expect_msg_error(longvar, sizeof longvar, "longer than 10 bytes");
    const uint8_t past[] = {0, 0, 0, 0, 3, 0x12, 9, 0};
    expect_msg_error(past, sizeof past, "runs past");
    const uint8_t group[] = {0, 0, 0, 0, 2, 0x0b, 0};
    expect_msg_error(group, sizeof group, "wire type 3");
    const uint8_t notsfm[] = {0, 0, 0, 0, 7, 0x12, 5, 0, 0, 0, 9, 1};
    expect_msg_error(notsfm, sizeof notsfm, "not one SFM frame");
    const uint8_t empty[] = {0, 0, 0, 0, 0};
    expect_msg_error(empty, sizeof empty, "empty gRPC message");
}

/* ---- client and server ----------------------------------------------------------------- */

struct pair {
    struct cj_grpc *c, *s;
    struct evbuffer *c2s, *s2c, *csfm, *ssfm;
};

static void pair_open(struct pair *p)
{
    p->c = cj_grpc_new(CJ_GRPC_CLIENT, "server:8002", false);
    p->s = cj_grpc_new(CJ_GRPC_SERVER, NULL, false);
    p->c2s = evbuffer_new(), p->s2c = evbuffer_new(), p->csfm = evbuffer_new(), p->ssfm = evbuffer_new();
    struct cj_err err = {0};
    assert_int_equal(cj_grpc_start(p->c, p->c2s), 0);
    assert_int_equal(cj_grpc_start(p->s, p->s2c), 0);
    assert_int_equal(cj_grpc_read(p->s, p->c2s, p->ssfm, p->s2c, &err), CJ_GRPC_MORE);
    assert_true(cj_grpc_is_open(p->s));
    assert_int_equal(cj_grpc_read(p->c, p->s2c, p->csfm, p->c2s, &err), CJ_GRPC_MORE);
    assert_true(cj_grpc_is_open(p->c));
}

static void pair_close(struct pair *p)
{
    cj_grpc_free(p->c), cj_grpc_free(p->s);
    evbuffer_free(p->c2s), evbuffer_free(p->s2c), evbuffer_free(p->csfm), evbuffer_free(p->ssfm);
}

/* Moves bytes both ways until neither side has anything to say; the server's
 * link takes what arrives when take is set. */
static void exchange(struct pair *p, bool take, struct evbuffer *got)
{
    struct cj_err err = {0};
    for (int round = 0; round == 0 || (round < 1000 && (evbuffer_get_length(p->c2s) || evbuffer_get_length(p->s2c))); round++) {
        assert_true(cj_grpc_read(p->s, p->c2s, p->ssfm, p->s2c, &err) >= 0);
        if (take) {
            size_t n = evbuffer_get_length(p->ssfm);
            evbuffer_remove_buffer(p->ssfm, got, n);
            cj_grpc_consume(p->s, n, p->s2c);
        }
        assert_true(cj_grpc_read(p->c, p->s2c, p->csfm, p->c2s, &err) >= 0);
    }
}

static void test_round_trip_and_window(void **state)
{
    static const size_t sizes[] = {16, 100, 16384, 16385, (1u << 20) + 7, 5u << 20};
    struct pair p;
    pair_open(&p);
    struct evbuffer *src = evbuffer_new(), *ref = evbuffer_new(), *got = evbuffer_new();
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sfm_frame(src, sizes[i], (uint8_t)i);
        sfm_frame(ref, sizes[i], (uint8_t)i);
        assert_int_equal(cj_grpc_write(p.c, src, sizes[i], p.c2s), 0);
        total += sizes[i];
    }
    /* the 5 MiB frame cannot pass a 4 MiB window without the reader taking bytes */
    assert_true(cj_grpc_pending(p.c) > 0);
    exchange(&p, true, got);
    assert_int_equal(cj_grpc_pending(p.c), 0);
    assert_int_equal(evbuffer_get_length(got), total);
    assert_memory_equal(evbuffer_pullup(got, -1), evbuffer_pullup(ref, -1), total);
    /* and the server's frames come back to the client */
    sfm_frame(src, 4096, 0x77);
    assert_int_equal(cj_grpc_write(p.s, src, 4096, p.s2c), 0);
    exchange(&p, true, got);
    assert_int_equal(evbuffer_get_length(p.csfm), 4096);
    evbuffer_free(src), evbuffer_free(ref), evbuffer_free(got);
    pair_close(&p);
}

static void test_paused_reader_stops_sender(void **state)
{
    struct pair p;
    pair_open(&p);
    struct evbuffer *src = evbuffer_new(), *got = evbuffer_new();
    for (int i = 0; i < 12; i++) {
        sfm_frame(src, 1u << 20, (uint8_t)i);
        assert_int_equal(cj_grpc_write(p.c, src, 1u << 20, p.c2s), 0);
    }
    exchange(&p, false, got); /* the server's link takes nothing */
    size_t held = evbuffer_get_length(p.ssfm);
    assert_true(held <= CJ_GRPC_WINDOW);
    assert_true(cj_grpc_pending(p.c) >= (12u << 20) - CJ_GRPC_WINDOW - 4096);
    exchange(&p, true, got); /* it resumes: the window reopens and everything passes */
    evbuffer_remove_buffer(p.ssfm, got, evbuffer_get_length(p.ssfm));
    assert_int_equal(evbuffer_get_length(got) , 12u << 20);
    assert_int_equal(cj_grpc_pending(p.c), 0);
    evbuffer_free(src), evbuffer_free(got);
    pair_close(&p);
}

static void test_clean_close(void **state)
{
    struct pair p;
    pair_open(&p);
    struct cj_err err = {0};
    cj_grpc_close(p.s, p.s2c);
    assert_int_equal(cj_grpc_read(p.c, p.s2c, p.csfm, p.c2s, &err), CJ_GRPC_CLOSED);
    assert_false(cj_grpc_is_open(p.c));
    pair_close(&p);
}

/* A raw nghttp2 server answering our client's call as told. */
static ssize_t raw_send(nghttp2_session *s, const uint8_t *d, size_t n, int f, void *u)
{
    evbuffer_add(u, d, n);
    return (ssize_t)n;
}

static int client_vs_raw(const nghttp2_nv *resp, size_t nresp, bool end, int goaway, int32_t last, struct cj_err *err)
{
    struct cj_grpc *c = cj_grpc_new(CJ_GRPC_CLIENT, "h:1", false);
    struct evbuffer *c2s = evbuffer_new(), *s2c = evbuffer_new(), *sfm = evbuffer_new();
    nghttp2_session_callbacks *cbs;
    nghttp2_session *srv;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, raw_send);
    nghttp2_session_server_new(&srv, cbs, s2c);
    nghttp2_submit_settings(srv, NGHTTP2_FLAG_NONE, NULL, 0);
    assert_int_equal(cj_grpc_start(c, c2s), 0);
    size_t n = evbuffer_get_length(c2s);
    assert_int_equal(nghttp2_session_mem_recv(srv, evbuffer_pullup(c2s, -1), n), (ssize_t)n);
    evbuffer_drain(c2s, n);
    if (resp) {
        if (end) nghttp2_submit_headers(srv, NGHTTP2_FLAG_END_STREAM, 1, NULL, resp, nresp, NULL);
        else nghttp2_submit_response(srv, 1, resp, nresp, NULL);
    }
    if (goaway >= 0) nghttp2_submit_goaway(srv, NGHTTP2_FLAG_NONE, last, (uint32_t)goaway, (const uint8_t *)"going", 5);
    nghttp2_session_send(srv);
    int rc = cj_grpc_read(c, s2c, sfm, c2s, err);
    nghttp2_session_del(srv);
    nghttp2_session_callbacks_del(cbs);
    evbuffer_free(c2s), evbuffer_free(s2c), evbuffer_free(sfm);
    cj_grpc_free(c);
    return rc;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

static void test_server_refusals(void **state)
{
    struct cj_err err = {0};
    const nghttp2_nv notfound[] = {NV(":status", "404")};
    assert_true(client_vs_raw(notfound, 1, false, -1, 0, &err) < 0);
    assert_non_null(strstr(err.msg, ":status 404"));
    const nghttp2_nv unimpl[] = {NV(":status", "200"), NV("content-type", "application/grpc"), NV("grpc-status", "12"),
                                 NV("grpc-message", "no such method")};
    assert_true(client_vs_raw(unimpl, 4, true, -1, 0, &err) < 0);
    assert_non_null(strstr(err.msg, "grpc-status 12, no such method"));
    assert_true(client_vs_raw(NULL, 0, false, NGHTTP2_ENHANCE_YOUR_CALM, 1, &err) < 0);
    assert_non_null(strstr(err.msg, "GOAWAY (ENHANCE_YOUR_CALM: going)"));
    /* a graceful GOAWAY that covers the call lets it go on; one that does not ends it */
    assert_int_equal(client_vs_raw(NULL, 0, false, NGHTTP2_NO_ERROR, 1, &err), CJ_GRPC_MORE);
    assert_true(client_vs_raw(NULL, 0, false, NGHTTP2_NO_ERROR, 0, &err) < 0);
    assert_non_null(strstr(err.msg, "GOAWAY (NO_ERROR"));
    /* not HTTP/2 at all */
    struct cj_grpc *c = cj_grpc_new(CJ_GRPC_CLIENT, "h:1", false);
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new(), *sfm = evbuffer_new();
    cj_grpc_start(c, out);
    evbuffer_add_printf(in, "HTTP/1.1 400 Bad Request\r\n\r\n");
    assert_true(cj_grpc_read(c, in, sfm, out, &err) < 0);
    assert_non_null(strstr(err.msg, "does not speak HTTP/2 (first bytes \"HTTP/1.1 400 Bad"));
    evbuffer_free(in), evbuffer_free(out), evbuffer_free(sfm);
    cj_grpc_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_s2c_pieces),
        cmocka_unit_test(test_capture_c2s_pieces),
        cmocka_unit_test(test_message_codec),
        cmocka_unit_test(test_message_errors),
        cmocka_unit_test(test_round_trip_and_window),
        cmocka_unit_test(test_paused_reader_stops_sender),
        cmocka_unit_test(test_clean_close),
        cmocka_unit_test(test_server_refusals),
    };
    return cmocka_run_group_tests_name("grpc", tests, NULL, NULL);
}
