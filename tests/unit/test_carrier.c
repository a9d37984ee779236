/* SPDX-License-Identifier: Apache-2.0 */
/* test_carrier.c — conn.c with a carrier (lib/net/carrier.c) on a real
 * socketpair: two conns, a client and a server side, exchange SFM frames over
 * WebSocket and over gRPC; the owner's pause holds a gRPC sender at the flow-
 * control window (the socket is still read) and a WebSocket sender at the
 * socket; a peer gone is an EOF after its last frame; a refused upgrade is an
 * error naming it. */
#include "sfmcap.h"

#include <sys/socket.h>

#include <event2/event.h>

#include "net/addr.h"
#include "net/carrier.h"
#include "net/conn.h"
#include "net/grpc.h"

struct side {
    struct cj_conn *c;
    struct evbuffer *got;  /* SFM bytes the owner took */
    bool taking;           /* the owner reads */
    int events, last_event;
};

static void on_read(struct cj_conn *c, void *ctx)
{
    struct side *s = ctx;
    if (s->taking) evbuffer_add_buffer(s->got, cj_conn_input(c));
}
static void on_write(struct cj_conn *c, void *ctx) { (void)c; (void)ctx; }
static void on_event(struct cj_conn *c, int what, void *ctx)
{
    (void)c;
    struct side *s = ctx;
    s->events++;
    s->last_event = what;
}
static const struct cj_conn_ops ops = {on_read, on_write, on_event};

struct fx {
    struct event_base *b;
    struct side cl, sv;
};

static void spin(struct event_base *b, int turns)
{
    for (int i = 0; i < turns; i++) event_base_loop(b, EVLOOP_NONBLOCK);
}

static void fx_open(struct fx *f, enum cj_carrier_kind kind)
{
    memset(f, 0, sizeof *f);
    int sv[2];
    f->b = event_base_new();
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cj_sock_tune(sv[0]);
    cj_sock_tune(sv[1]);
    f->cl.got = evbuffer_new(), f->sv.got = evbuffer_new();
    f->cl.taking = f->sv.taking = true;
    f->cl.c = cj_conn_new(f->b, sv[0], NULL, true, &ops, &f->cl);
    f->sv.c = cj_conn_new(f->b, sv[1], NULL, false, &ops, &f->sv);
    assert_int_equal(cj_conn_set_carrier(f->cl.c, cj_carrier_new(kind, false, "server:8002", false)), 0);
    assert_int_equal(cj_conn_set_carrier(f->sv.c, cj_carrier_new(kind, true, NULL, false)), 0);
}

static void fx_close(struct fx *f)
{
    cj_conn_free(f->cl.c), cj_conn_free(f->sv.c);
    evbuffer_free(f->cl.got), evbuffer_free(f->sv.got);
    event_base_free(f->b);
}

static void both_ways(enum cj_carrier_kind kind)
{
    struct fx f;
    fx_open(&f, kind);
    /* the client's first frames go out as soon as the carrier is ready */
    size_t sent = 0;
    for (int i = 0; i < 5; i++) {
        size_t n = i == 4 ? (3u << 20) + 5 : 16u << (i * 3);
        sfm_frame(cj_conn_output(f.cl.c), n, (uint8_t)i);
        sent += n;
    }
    sfm_frame(cj_conn_output(f.sv.c), 100, 0x55);
    for (int i = 0; i < 400 && evbuffer_get_length(f.sv.got) < sent; i++) spin(f.b, 1);
    assert_int_equal(evbuffer_get_length(f.sv.got), sent);
    for (int i = 0; i < 100 && evbuffer_get_length(f.cl.got) < 100; i++) spin(f.b, 1);
    assert_int_equal(evbuffer_get_length(f.cl.got), 100);
    assert_int_equal(f.cl.events + f.sv.events, 0);
    /* the frames arrive whole and in order */
    for (int i = 0; i < 5; i++) {
        uint8_t p[5];
        evbuffer_copyout(f.sv.got, p, 5);
        size_t n = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
        assert_int_equal(n, i == 4 ? (3u << 20) + 5 : 16u << (i * 3));
        assert_int_equal(p[4], i);
        evbuffer_drain(f.sv.got, n);
    }
    fx_close(&f);
}

static void test_websocket_both_ways(void **state) { both_ways(CJ_CARRIER_WS); }
static void test_grpc_both_ways(void **state) { both_ways(CJ_CARRIER_GRPC); }

/* The server's owner pauses: a gRPC client stops at the window with the rest
 * queued, though the server keeps reading its socket; resuming lets it all through. */
static void test_grpc_pause_holds_at_window(void **state)
{
    struct fx f;
    fx_open(&f, CJ_CARRIER_GRPC);
    cj_conn_set_reading(f.sv.c, false);
    f.sv.taking = false;
    for (int i = 0; i < 16; i++) sfm_frame(cj_conn_output(f.cl.c), 1u << 20, (uint8_t)i);
    spin(f.b, 200);
    size_t held = evbuffer_get_length(cj_conn_input(f.sv.c));
    assert_true(held > 0 && held <= CJ_GRPC_WINDOW);
    assert_true(cj_conn_queued(f.cl.c) >= (16u << 20) - CJ_GRPC_WINDOW - (1u << 20));
    /* the owner takes its input: the window reopens */
    f.sv.taking = true;
    cj_conn_set_reading(f.sv.c, true);
    for (int i = 0; i < 2000 && evbuffer_get_length(f.sv.got) < (16u << 20); i++) {
        evbuffer_add_buffer(f.sv.got, cj_conn_input(f.sv.c)); /* as a link's kick would */
        spin(f.b, 1);
    }
    assert_int_equal(evbuffer_get_length(f.sv.got), 16u << 20);
    assert_int_equal(cj_conn_queued(f.cl.c), 0);
    fx_close(&f);
}

/* A WebSocket server's owner pauses: its socket is not read, so the sender's
 * bytes wait in the kernel and in the client's output, not in the server. */
static void test_websocket_pause_stops_reading(void **state)
{
    struct fx f;
    fx_open(&f, CJ_CARRIER_WS);
    spin(f.b, 20); /* the upgrade */
    cj_conn_set_reading(f.sv.c, false);
    for (int i = 0; i < 24; i++) sfm_frame(cj_conn_output(f.cl.c), 1u << 20, (uint8_t)i);
    spin(f.b, 200);
    assert_int_equal(evbuffer_get_length(cj_conn_input(f.sv.c)), 0);
    assert_true(cj_conn_queued(f.cl.c) > 0);
    cj_conn_set_reading(f.sv.c, true);
    for (int i = 0; i < 2000 && evbuffer_get_length(f.sv.got) < (24u << 20); i++) spin(f.b, 1);
    assert_int_equal(evbuffer_get_length(f.sv.got), 24u << 20);
    fx_close(&f);
}

/* The server goes away after a frame: the client hands the frame on, then EOF. */
static void test_peer_gone_is_eof(void **state)
{
    struct fx f;
    fx_open(&f, CJ_CARRIER_WS);
    spin(f.b, 20);
    sfm_frame(cj_conn_output(f.sv.c), 40, 1);
    spin(f.b, 20);
    assert_int_equal(evbuffer_get_length(f.cl.got), 40);
    cj_conn_free(f.sv.c);
    f.sv.c = NULL;
    spin(f.b, 20);
    assert_int_equal(f.cl.events, 1);
    assert_int_equal(f.cl.last_event, CJ_CONN_EOF);
    fx_close(&f);
}

/* A client whose peer is a plain server answering HTTP/1.1 404. */
static void test_refused_upgrade_is_an_error(void **state)
{
    struct event_base *b = event_base_new();
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct side cl = {.got = evbuffer_new(), .taking = true};
    cl.c = cj_conn_new(b, sv[0], NULL, true, &ops, &cl);
    assert_int_equal(cj_conn_set_carrier(cl.c, cj_carrier_new(CJ_CARRIER_WS, false, "h:1", false)), 0);
    spin(b, 5);
    char req[512];
    assert_true(read(sv[1], req, sizeof req) > 0);
    assert_memory_equal(req, "GET /f3 HTTP/1.1\r\n", 18);
    const char *resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(write(sv[1], resp, strlen(resp)), (ssize_t)strlen(resp));
    spin(b, 5);
    assert_int_equal(cl.last_event, CJ_CONN_ERROR);
    assert_non_null(strstr(cj_conn_error_text(cl.c), "WebSocket: upgrade refused: \"HTTP/1.1 404 Not Found\""));
    cj_conn_free(cl.c);
    close(sv[1]);
    evbuffer_free(cl.got);
    event_base_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_websocket_both_ways),
        cmocka_unit_test(test_grpc_both_ways),
        cmocka_unit_test(test_grpc_pause_holds_at_window),
        cmocka_unit_test(test_websocket_pause_stops_reading),
        cmocka_unit_test(test_peer_gone_is_eof),
        cmocka_unit_test(test_refused_upgrade_is_an_error),
    };
    return cmocka_run_group_tests_name("carrier", tests, NULL, NULL);
}
