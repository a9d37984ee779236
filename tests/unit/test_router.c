/* SPDX-License-Identifier: Apache-2.0 */
/* test_router.c — lib/cell/router: forwarding with FLARE's header rewrite,
 * RETURN, forwarder notices, loop refusal, anti-spoofing, local dispatch and
 * built-ins, child registration (a live name refused, a silent one replaced), backpressure without
 * head-of-line blocking of control frames, upstream reconnect, worker requests
 * in flight through the upstream counted as lost with it (no notice),
 * the parent link (routing to site-1 and its other children, what it may
 * speak for, down = unroutable and never the upstream, reconnect, a parent
 * answering with another name, its bounded queue).
 * The router is site-1.J1; a test "server" link listens on loopback TCP
 * (port 0); workers are socketpairs (a cj_link or a raw socket). */
#include "testutil.h"
#include "linkrec.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "wire/msg.h"
#include "cell/router.h"
#include "net/addr.h"
#include "net/link.h"
#include "wire/frame.h"
#include "wire/header.h"

#define ME "site-1.J1"
#define T1 "site-1.J1.trainer_1"
#define T2 "site-1.J1.trainer_2"

/* ---- harness ---------------------------------------------------------------------- */

struct world {
    struct event_base *base;
    struct event *tick;
    struct cj_router *r;
    struct cj_listener *srv_lst;
    struct rec srv;                /* the "server" end of the upstream link */
    int srv_accepts;
    struct cj_link_cfg srv_cfg;
    int ups, worker_ups, worker_downs;
    struct cj_listener *par_lst;   /* the "CP" end of the parent link (parent_listen) */
    struct cj_link_cfg par_cfg;
    struct rec par;
    bool par_raw;                  /* accept raw: the test does the handshake by hand (par_fd) */
    int par_fd, par_accepts, parent_ups, parent_downs;
};

static void srv_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    struct world *w = ctx;
    struct cj_err err;
    w->srv_accepts++;
    if (w->srv.link) cj_link_free(w->srv.link);
    w->srv.link = cj_link_accept(w->base, fd, NULL, peer, &w->srv_cfg, &rec_ops, &w->srv, &err);
    assert_non_null(w->srv.link);
}

static void ev_upstream_up(struct cj_router *r, const char *peer, void *ctx)
{
    (void)r; (void)peer;
    ((struct world *)ctx)->ups++;
}
static void ev_parent_up(struct cj_router *r, const char *peer, void *ctx)
{
    (void)r; (void)peer;
    ((struct world *)ctx)->parent_ups++;
}
static void ev_parent_down(struct cj_router *r, const char *why, void *ctx)
{
    (void)r; (void)why;
    ((struct world *)ctx)->parent_downs++;
}
static void ev_worker_up(struct cj_router *r, const char *fqcn, struct cj_link *l, void *ctx)
{
    (void)r; (void)fqcn; (void)l;
    ((struct world *)ctx)->worker_ups++;
}
static void ev_worker_down(struct cj_router *r, const char *fqcn, const char *why, void *ctx)
{
    (void)r; (void)fqcn; (void)why;
    ((struct world *)ctx)->worker_downs++;
}

static double g_stall_timeout;   /* 0 = the router's default */
static double g_worker_hb;       /* 0 = the router's default worker heartbeat interval */

static void world_init(struct world *w, size_t link_buffer)
{
    struct cj_err err;
    memset(w, 0, sizeof *w);
    w->base = event_base_new();
    w->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    event_add(w->tick, &tv);
    w->srv_cfg = (struct cj_link_cfg){.name = "test-server", .me = "server", .link_buffer = 1u << 30};
    struct cj_addr a;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    w->srv_lst = cj_listener_open(w->base, &a, 0, srv_accept, w, &err);
    assert_non_null(w->srv_lst);
    struct cj_router_cfg rc = {.me = ME, .link_buffer = link_buffer, .handshake_timeout = 2,
                               .stall_timeout = g_stall_timeout, .worker_heartbeat_interval = g_worker_hb};
    w->r = cj_router_new(w->base, &rc, &err);
    assert_non_null(w->r);
    struct cj_router_events ev = {.upstream_up = ev_upstream_up, .worker_up = ev_worker_up,
                                  .worker_down = ev_worker_down, .parent_up = ev_parent_up,
                                  .parent_down = ev_parent_down};
    cj_router_set_events(w->r, &ev, w);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", cj_listener_port(w->srv_lst));
    struct cj_upstream_cfg u = {.url = url, .reconnect_min = 0.05, .reconnect_max = 0.2};
    assert_int_equal(cj_router_upstream_start(w->r, &u, &err), 0);
    RUN_UNTIL(w, cj_router_upstream(w->r) && w->srv.up, 2);
    assert_non_null(cj_router_upstream(w->r));
    assert_int_equal(cj_router_upstream_state(w->r), CJ_UP_UP);
    assert_string_equal(cj_link_peer(cj_router_upstream(w->r)), "server");
}

static void world_spin(struct world *w, double secs)
{
    double end = now_mono() + secs;
    while (now_mono() < end) event_base_loop(w->base, EVLOOP_ONCE);
}

static void world_done(struct world *w)
{
    cj_router_free(w->r);
    rec_free_link(&w->srv);
    rec_free_link(&w->par);
    cj_listener_free(w->par_lst);
    if (w->par_raw && w->par_fd >= 0) close(w->par_fd);
    cj_listener_free(w->srv_lst);
    world_spin(w, 0.01);
    event_free(w->tick);
    event_base_free(w->base);
}

static void par_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    struct world *w = ctx;
    struct cj_err err;
    w->par_accepts++;
    if (w->par_raw) {
        if (w->par_fd >= 0) close(w->par_fd);
        w->par_fd = fd;
        return;
    }
    if (w->par.link) cj_link_free(w->par.link);
    w->par.link = cj_link_accept(w->base, fd, NULL, peer, &w->par_cfg, &rec_ops, &w->par, &err);
    assert_non_null(w->par.link);
}

/* A "CP" answering as name on loopback, and the router's parent link to it. */
static void parent_listen(struct world *w, const char *name, bool raw)
{
    struct cj_err err;
    struct cj_addr a;
    w->par_cfg = (struct cj_link_cfg){.name = "test-parent", .me = name, .link_buffer = 1u << 30};
    w->par_raw = raw;
    w->par_fd = -1;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    w->par_lst = cj_listener_open(w->base, &a, 0, par_accept, w, &err);
    assert_non_null(w->par_lst);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", cj_listener_port(w->par_lst));
    struct cj_parent_cfg pc = {.url = url, .reconnect_min = 0.05, .reconnect_max = 0.2};
    assert_int_equal(cj_router_parent_state(w->r), CJ_UP_DISABLED);
    assert_int_equal(cj_router_parent_start(w->r, &pc, &err), 0);
    assert_true(cj_router_parent_start(w->r, &pc, &err) < 0);   /* once only */
}

/* A worker as a cj_link (active) on a socketpair accepted by the router. */
static void worker_link(struct world *w, const char *name, struct rec *rec)
{
    int sv[2];
    struct cj_err err;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    memset(rec, 0, sizeof *rec);
    assert_int_equal(cj_router_accept(w->r, sv[1], "test-pair"), 0);
    struct cj_link_cfg c = {.name = "test-worker", .me = name, .link_buffer = 1u << 30};
    rec->link = cj_link_attach(w->base, sv[0], true, NULL, "test-pair", &c, &rec_ops, rec, &err);
    assert_non_null(rec->link);
    RUN_UNTIL(w, rec->up || rec->down, 2);
}

/* ---- raw worker --------------------------------------------------------------------- */

/* Connects a raw worker socket named name; returns its fd (non-blocking). */
static int raw_worker(struct world *w, const char *name)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    assert_int_equal(cj_router_accept(w->r, sv[1], "raw-pair"), 0);
    struct cj_frame_hello h;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_hello_init(&h, name, 1.7e9, NULL), 0);
    assert_int_equal(cj_frame_build_hello(&sb, CJ_FRAME_HELLO, 1, 1, &h, NULL), 0);
    raw_write(w->base, sv[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    uint8_t buf[512];
    long n = raw_read_frame(w->base, sv[0], buf, sizeof buf, 2);
    assert_true(n > 16);
    assert_int_equal(buf[6], CJ_FRAME_READY);
    return sv[0];
}

/* Reads the next DATA frame from a raw worker (skipping PING/PONG) as a msg. */
static struct cj_msg *raw_read_msg(struct world *w, int fd, double secs)
{
    static uint8_t buf[4 << 20];
    for (;;) {
        long n = raw_read_frame(w->base, fd, buf, sizeof buf, secs);
        if (n <= 0) return NULL;
        if (buf[6] != CJ_FRAME_DATA) continue;
        size_t hl = (size_t)buf[4] << 8 | buf[5];
        struct cj_err err;
        struct cj_msg *m = cj_msg_from_copy(buf + 16, hl, &err);
        assert_non_null(m);
        evbuffer_add(m->payload, buf + 16 + hl, (size_t)n - 16 - hl);
        return m;
    }
}

/* ---- messages ---------------------------------------------------------------------------- */

static struct cj_msg *make_msg(enum cj_msg_type type, const char *origin, const char *to, const char *dest,
                               const char *channel, const char *topic, bool reply_expected, size_t payload_len)
{
    struct cj_hb hb;
    struct cj_err err;
    cj_hb_init(&hb);
    cj_hb_str(&hb, "x-app", "router-test");
    struct evbuffer *p = evbuffer_new();
    for (size_t i = 0; i < payload_len; i++) evbuffer_add(p, "p", 1);
    struct cj_hdr_msg m = {
        .type = type, .me = origin, .to = to, .destination = dest, .channel = channel, .topic = topic,
        .req_id = "6f1d3c2a-0000-4000-8000-000000000001", .reply_expected = reply_expected,
        .payload_encoding = payload_len ? "bytes" : "none", .payload_len = (int64_t)payload_len,
        .route_time = 1795315512.5, .send_time = 1795315512.6,
    };
    struct cj_msg *msg = cj_msg_build(&hb, &m, p, &err);
    if (!msg) fail_msg("build: %s", err.msg);
    cj_hb_destroy(&hb);
    evbuffer_free(p);
    return msg;
}

static struct cj_msg *make_req(const char *origin, const char *to, const char *dest, const char *channel,
                               const char *topic, bool reply_expected, size_t payload_len)
{
    return make_msg(CJ_MSG_REQ, origin, to, dest, channel, topic, reply_expected, payload_len);
}

/* An optional sm__DATA chunk (like a download reply chunk). */
static struct cj_msg *make_chunk(const char *origin, const char *to, const char *dest)
{
    struct cj_hb hb;
    struct cj_err err;
    cj_hb_init(&hb);
    cj_hb_str(&hb, "sm__ri", "7c2e0ef5-d93c-4299-a2dd-2f42d0789953");
    cj_hb_str(&hb, "sm__ch", "return_only");
    cj_hb_str(&hb, "sm__tp", "download_service__:download_service__download");
    cj_hb_uint(&hb, "sm__id", 1795315509918275ull);
    cj_hb_int(&hb, "sm__dt", 1);
    cj_hb_int(&hb, "sm__sq", 0);
    cj_hb_int(&hb, "sm__os", 0);
    struct evbuffer *p = evbuffer_new();
    evbuffer_add(p, "chunk", 5);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .to = to, .destination = dest, .channel = "sm__STREAM",
        .topic = "sm__DATA", .optional = true, .payload_encoding = "bytes", .payload_len = 5,
        .route_time = 1.0, .send_time = 2.0,
    };
    struct cj_msg *msg = cj_msg_build(&hb, &m, p, &err);
    assert_non_null(msg);
    cj_hb_destroy(&hb);
    evbuffer_free(p);
    return msg;
}

/* An sm__STREAM message (topic sm__DATA or sm__ACK) with the given stream
 * keys; ri/ch/tp NULL = absent.  DATA carries 5 payload bytes. */
static struct cj_msg *make_sm(const char *origin, const char *dest, const char *topic, const char *ri, const char *ch,
                              const char *tp, uint64_t id, int dt, int sq, bool optional)
{
    struct cj_hb hb;
    struct cj_err err;
    bool data = !strcmp(topic, "sm__DATA");
    cj_hb_init(&hb);
    if (ri) cj_hb_str(&hb, "sm__ri", ri);
    if (ch) cj_hb_str(&hb, "sm__ch", ch);
    if (tp) cj_hb_str(&hb, "sm__tp", tp);
    cj_hb_uint(&hb, "sm__id", id);
    cj_hb_int(&hb, "sm__dt", dt);
    cj_hb_int(&hb, "sm__sq", sq);
    cj_hb_int(&hb, "sm__os", 5 * sq);
    struct evbuffer *p = evbuffer_new();
    if (data) evbuffer_add(p, "chunk", 5);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .to = ME, .destination = dest, .channel = "sm__STREAM", .topic = topic,
        .optional = optional, .payload_encoding = data ? "bytes" : "none", .payload_len = data ? 5 : 0,
        .route_time = 1.0, .send_time = 2.0,
    };
    struct cj_msg *msg = cj_msg_build(&hb, &m, p, &err);
    assert_non_null(msg);
    cj_hb_destroy(&hb);
    evbuffer_free(p);
    return msg;
}

static bool is_hop_key(enum cj_hkey k)
{
    return k == CJ_HK_FROM || k == CJ_HK_TO || k == CJ_HK_ROUTE || k == CJ_HK_SEND_TIME;
}

/* out = in forwarded by ME to next_hop: every other entry byte-identical and
 * in the same order; route grew by [ME, t] with t in [t0, t1]. */
static void assert_forwarded(const struct cj_hdr *in, const struct cj_hdr *out, const char *next_hop, double t0,
                             double t1)
{
    assert_string_equal(out->from, ME);
    assert_string_equal(out->to, next_hop);
    assert_true(out->send_time >= t0 && out->send_time <= t1);
    assert_int_equal(out->route_n, in->route_n + 1);
    struct cj_route_iter ri, ro;
    const uint8_t *fi, *fo;
    uint32_t li, lo;
    double ti, to;
    cj_route_iter_init(&ri, in);
    cj_route_iter_init(&ro, out);
    for (uint32_t i = 0; i < in->route_n; i++) {
        assert_int_equal(cj_route_iter_next(&ri, &fi, &li, &ti), 1);
        assert_int_equal(cj_route_iter_next(&ro, &fo, &lo, &to), 1);
        assert_int_equal(li, lo);
        assert_memory_equal(fi, fo, li);
        assert_true(ti == to);
    }
    assert_int_equal(cj_route_iter_next(&ro, &fo, &lo, &to), 1);
    assert_int_equal(lo, strlen(ME));
    assert_memory_equal(fo, ME, lo);
    assert_true(to >= t0 && to <= t1);
    struct cj_hdr_iter a, b;
    struct cj_hdr_entry ea, eb;
    cj_hdr_iter_init(&a, in);
    cj_hdr_iter_init(&b, out);
    for (;;) {
        int ra = cj_hdr_iter_next(&a, &ea, NULL), rb = cj_hdr_iter_next(&b, &eb, NULL);
        assert_int_equal(ra, rb);
        if (ra == 0) break;
        assert_int_equal(ea.key_len, eb.key_len);
        assert_memory_equal(ea.key, eb.key, ea.key_len);
        if (is_hop_key(ea.hk)) continue;
        assert_int_equal(ea.raw.len, eb.raw.len);
        assert_memory_equal(ea.raw.p, eb.raw.p, ea.raw.len);
    }
}

/* ---- tests ------------------------------------------------------------------------------- */

/* The captured trainer -> server download request, fed raw into the worker
 * link site-1.J1.trainer_1, comes out on the upstream rewritten (cap25 -> cap26). */
static void test_forward_cap25_upstream(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    int fd = raw_worker(&w, T1);
    size_t n;
    uint8_t *f = tu_read_vector("frames/cap25_dl_req_at_trainer_link.bin", &n);
    double t0 = cj_msg_now();
    raw_write(w.base, fd, f, n);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    double t1 = cj_msg_now();
    assert_int_equal(w.srv.nmsgs, 1);
    struct cj_msg *out = w.srv.msgs[0];
    struct cj_hdr in;
    assert_int_equal(cj_hdr_decode(&in, f + 16, 533, NULL), 0);
    assert_forwarded(&in, &out->hdr, "server", t0, t1);
    assert_string_equal(out->hdr.origin, T1);
    assert_string_equal(out->hdr.destination, "server");
    assert_int_equal(out->hlen, 540);          /* as captured in cap26 */
    assert_int_equal(evbuffer_get_length(out->payload), 73);
    assert_memory_equal(evbuffer_pullup(out->payload, -1), f + 16 + 533, 73);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    assert_int_equal(c->up_msgs, 1);
    assert_int_equal(c->up_bytes, 540 + 73);
    assert_int_equal(c->drops, 0);
    free(f);
    close(fd);
    world_done(&w);
}

/* The server's ACK to the trainer (cap27) goes down the worker link. */
static void test_forward_cap27_down(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    int fd = raw_worker(&w, T1);
    size_t n;
    uint8_t *f = tu_read_vector("frames/cap27_ack_from_server_before_relay.bin", &n);
    double t0 = cj_msg_now();
    assert_int_equal(cj_link_send(w.srv.link, f + 16, 328, NULL, true), 0);
    struct cj_msg *out = raw_read_msg(&w, fd, 2);
    double t1 = cj_msg_now();
    assert_non_null(out);
    struct cj_hdr in;
    assert_int_equal(cj_hdr_decode(&in, f + 16, 328, NULL), 0);
    assert_forwarded(&in, &out->hdr, T1, t0, t1);
    assert_int_equal(out->hlen, 361);          /* as captured in cap28 */
    assert_int_equal(cj_router_counters(w.r)->down_msgs, 1);
    cj_msg_free(out);
    free(f);
    close(fd);
    world_done(&w);
}

static void test_return_for_unroutable_request(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct rec wk;
    worker_link(&w, T1, &wk);
    assert_int_equal(wk.up, 1);
    /* a request to a worker that is not connected */
    struct cj_msg *req = make_req(T1, ME, "site-1.J1.trainer_9", "task", "ping", true, 3);
    assert_int_equal(cj_link_send_msg(wk.link, req, true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    assert_int_equal(wk.nmsgs, 1);
    const struct cj_hdr *h = &wk.msgs[0]->hdr;
    assert_int_equal(h->msg_type, CJ_MSG_RETURN);
    assert_string_equal(h->return_code, "comm_error");
    assert_string_equal(h->return_reason, "cant_forward");
    assert_string_equal(h->origin, ME);
    assert_string_equal(h->from, ME);
    assert_string_equal(h->destination, T1);
    assert_string_equal(h->to, T1);
    assert_true(h->req_id_is_array);
    assert_string_equal(h->req_id, "6f1d3c2a-0000-4000-8000-000000000001");
    assert_true(cj_hdr_has(h, CJ_HK_ORIGINAL_HEADERS));
    assert_false(cj_hdr_has(h, CJ_HK_CHANNEL));
    const struct cj_router_counters *c = cj_router_counters(w.r);
    assert_int_equal(c->returns_sent, 1);
    assert_int_equal(c->drops_unroutable, 1);

    /* fire-and-forget: dropped and counted, nothing comes back */
    req = make_req(T1, ME, "site-1.J1.trainer_9", "task", "note", false, 0);
    assert_int_equal(cj_link_send_msg(wk.link, req, true), 0);
    RUN_UNTIL(&w, c->drops_unroutable == 2, 2);
    world_spin(&w, 0.05);
    assert_int_equal(c->drops_unroutable, 2);
    assert_int_equal(wk.nmsgs, 1);
    assert_int_equal(c->returns_sent, 1);

    /* an optional stream chunk: sm__ERROR forwarder notice to its origin */
    assert_int_equal(cj_link_send_msg(wk.link, make_chunk(T1, ME, "site-1.J1.trainer_9"), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 2, 2);
    assert_int_equal(wk.nmsgs, 2);
    h = &wk.msgs[1]->hdr;
    assert_string_equal(h->channel, "sm__STREAM");
    assert_string_equal(h->topic, "sm__ERROR");
    assert_int_equal(h->sm_dt, CJ_SM_ERROR);
    assert_true(h->sm_id == 1795315509918275ull);
    assert_string_equal(h->sm_fd, "site-1.J1.trainer_9");
    assert_string_equal(h->sm_et, "StreamTargetUnreachable");
    assert_string_equal(h->sm_ri, "7c2e0ef5-d93c-4299-a2dd-2f42d0789953");
    assert_string_equal(h->sm_ch, "return_only");
    assert_true(h->optional);
    assert_string_equal(h->destination, T1);
    assert_string_equal(h->origin, ME);
    assert_int_equal(c->fwd_errors_sent, 1);
    rec_free_link(&wk);
    world_done(&w);
}

/* From the upstream, a destination that is not under me would go straight
 * back to the server, which is on the route: refused, RETURN to the server. */
static void test_loop_refused(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct cj_msg *req = make_req("server.J1", ME, "site-2.J1", "task", "ping", true, 0);
    assert_int_equal(cj_link_send_msg(w.srv.link, req, true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    assert_int_equal(w.srv.msgs[0]->hdr.msg_type, CJ_MSG_RETURN);
    assert_string_equal(w.srv.msgs[0]->hdr.destination, "server.J1");
    assert_string_equal(w.srv.msgs[0]->hdr.to, "server");
    const struct cj_router_counters *c = cj_router_counters(w.r);
    assert_int_equal(c->drops_loop, 1);
    assert_int_equal(c->returns_sent, 1);
    assert_int_equal(c->up_msgs, 0);
    /* FLARE's rule proper: a worker's request toward server.J1 whose route
     * already holds "server" (the next hop, not the destination) */
    struct rec wk;
    worker_link(&w, T1, &wk);
    struct cj_msg *orig = make_req(T1, ME, "server.J1", "task", "ping", true, 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_hdr_forward(orig->hblk, orig->hlen, "server", ME, 3.0, 3.0, &sb, NULL), 0);
    cj_msg_free(orig);
    tu_logcap_begin();
    assert_int_equal(cj_link_send(wk.link, (const uint8_t *)sb.data, sb.size, NULL, true), 0);
    msgpack_sbuffer_destroy(&sb);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    char *log = tu_logcap_end();
    assert_non_null(strstr(log, "loop: next hop server is already on cn__route; RETURN sent to " T1));
    free(log);
    assert_int_equal(wk.nmsgs, 1);
    assert_int_equal(wk.msgs[0]->hdr.msg_type, CJ_MSG_RETURN);
    assert_int_equal(c->drops_loop, 2);
    assert_int_equal(c->returns_sent, 2);
    rec_free_link(&wk);

    /* a RETURN or reply that cannot be delivered is dropped, never returned */
    struct cj_msg *rep = make_msg(CJ_MSG_REPLY, "server.J1", ME, "site-1.J1.gone", "task", "ping", false, 0);
    assert_int_equal(cj_link_send_msg(w.srv.link, rep, true), 0);
    RUN_UNTIL(&w, c->drops == 3, 2);
    assert_int_equal(c->drops, 3);
    assert_int_equal(c->returns_sent, 2);
    world_done(&w);
}

static void test_anti_spoof(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct rec wk;
    worker_link(&w, T1, &wk);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    /* a worker speaking for its sibling */
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T2, ME, "server", "task", "ping", true, 0), true), 0);
    RUN_UNTIL(&w, c->drops_spoof == 1, 2);
    assert_int_equal(c->drops_spoof, 1);
    /* its descendant is fine */
    assert_int_equal(
        cj_link_send_msg(wk.link, make_req(T1 ".sub", ME, "server", "task", "ping", false, 0), true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    assert_string_equal(w.srv.msgs[0]->hdr.origin, T1 ".sub");
    /* the upstream claiming to be one of my workers, or me */
    assert_int_equal(cj_link_send_msg(w.srv.link, make_req(T1, ME, T1, "task", "ping", false, 0), true), 0);
    assert_int_equal(cj_link_send_msg(w.srv.link, make_req(ME, ME, T1, "task", "ping", false, 0), true), 0);
    RUN_UNTIL(&w, c->drops_spoof == 3, 2);
    world_spin(&w, 0.05);
    assert_int_equal(c->drops_spoof, 3);
    assert_int_equal(wk.nmsgs, 0);
    assert_int_equal(c->returns_sent, 0);       /* spoofed requests get no RETURN */
    rec_free_link(&wk);
    world_done(&w);
}

static int handled;
static char handled_topic[CJ_HDR_STR_MAX + 1];
static void test_handler(struct cj_router *r, struct cj_msg *m, void *ctx)
{
    (void)r;
    handled += ctx ? *(int *)ctx : 1;
    snprintf(handled_topic, sizeof handled_topic, "%s", m->hdr.topic);
    cj_msg_free(m);
}

static void test_local_dispatch_and_builtins(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    int ten = 10;
    assert_int_equal(cj_router_handle(w.r, "client_api", "client_api.hello", test_handler, &ten), 0);
    assert_int_equal(cj_router_handle(w.r, "client_api", NULL, test_handler, NULL), 0);
    int fd = raw_worker(&w, T1);
    struct rec wk;
    worker_link(&w, T2, &wk);

    assert_int_equal(cj_link_send_msg(wk.link, make_req(T2, ME, ME, "client_api", "client_api.hello", false, 4), true),
                     0);
    RUN_UNTIL(&w, handled == 10, 2);
    assert_int_equal(handled, 10);
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T2, ME, ME, "client_api", "client_api.log", false, 0), true), 0);
    RUN_UNTIL(&w, handled == 11, 2);
    assert_string_equal(handled_topic, "client_api.log");

    /* cellnet.channel/bye (the captured request): reply ok */
    size_t n;
    uint8_t *bye = tu_read_vector("frames/cap73_bye_req.bin", &n);
    raw_write(w.base, fd, bye, n);
    struct cj_msg *rep = raw_read_msg(&w, fd, 2);
    assert_non_null(rep);
    assert_int_equal(rep->hdr.msg_type, CJ_MSG_REPLY);
    assert_string_equal(rep->hdr.return_code, "ok");
    assert_string_equal(rep->hdr.channel, "cellnet.channel");
    assert_string_equal(rep->hdr.topic, "bye");
    assert_string_equal(rep->hdr.req_id, "d43d6032-e514-4bb1-b976-e1305001cd65");
    assert_string_equal(rep->hdr.origin, ME);
    assert_string_equal(rep->hdr.destination, T1);
    assert_string_equal(rep->hdr.to, T1);
    assert_string_equal(rep->hdr.payload_encoding, "none");
    assert_true(rep->hdr.optional);             /* copied from the request, like cap74 */
    assert_int_equal(rep->hdr.route_n, 1);
    cj_msg_free(rep);
    free(bye);

    /* no handler, reply expected: process_exception "no callback" */
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T2, ME, ME, "admin", "x", true, 0), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    assert_int_equal(wk.nmsgs, 1);
    assert_string_equal(wk.msgs[0]->hdr.return_code, "process_exception");
    assert_int_equal(wk.msgs[0]->hdr.error.len, strlen("no callback"));
    assert_memory_equal(wk.msgs[0]->hdr.error.p, "no callback", 11);

    /* originating: to the server through the table */
    struct cj_hb hb;
    struct cj_err err;
    cj_hb_init(&hb);
    struct cj_hdr_msg m = {.type = CJ_MSG_REQ, .destination = "server.J1", .channel = "aux_communication",
                           .topic = "t", .payload_encoding = "none", .payload_len = 0};
    assert_int_equal(cj_router_originate(w.r, &hb, &m, NULL, false, &err), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    assert_string_equal(w.srv.msgs[0]->hdr.origin, ME);
    assert_string_equal(w.srv.msgs[0]->hdr.from, ME);
    assert_string_equal(w.srv.msgs[0]->hdr.to, "server");
    assert_int_equal(w.srv.msgs[0]->hdr.route_n, 1);
    /* a finished block through cj_router_send_block (the stream layer's io->send) */
    assert_string_equal(cj_router_next_hop_name(w.r, "server.J1"), "server");
    assert_string_equal(cj_router_next_hop_name(w.r, T2), T2);
    assert_null(cj_router_next_hop_name(w.r, ME));
    struct cj_msg *blk = make_req(ME, "server", "server.J1", "sm__STREAM", "sm__ACK", false, 0);
    struct evbuffer *pl = evbuffer_new();
    evbuffer_add(pl, "xyz", 3);
    assert_int_equal(cj_router_send_block(w.r, "server.J1", blk->hblk, blk->hlen, pl, true, &err), 0);
    assert_int_equal(evbuffer_get_length(pl), 0);
    assert_true(cj_router_send_block(w.r, ME, blk->hblk, blk->hlen, pl, true, &err) < 0);
    evbuffer_free(pl);
    cj_msg_free(blk);
    RUN_UNTIL(&w, w.srv.nmsgs == 2, 2);
    assert_int_equal(w.srv.nmsgs, 2);
    assert_string_equal(w.srv.msgs[1]->hdr.topic, "sm__ACK");
    assert_int_equal(evbuffer_get_length(w.srv.msgs[1]->payload), 3);
    /* unroutable originate fails at once */
    cj_hb_init(&hb);
    m.destination = "site-1.J1.nobody";
    assert_true(cj_router_originate(w.r, &hb, &m, NULL, false, &err) < 0);
    assert_non_null(strstr(err.msg, "not connected"));

    close(fd);
    rec_free_link(&wk);
    world_done(&w);
}

static void test_child_registration(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct rec a, b, bad;
    worker_link(&w, T1, &a);
    assert_int_equal(a.up, 1);
    struct cj_link *first = cj_router_child(w.r, T1);
    assert_non_null(first);
    /* the same name again while the first connection is alive: refused */
    const struct cj_router_counters *c = cj_router_counters(w.r);
    tu_logcap_begin();
    worker_link(&w, T1, &b);
    RUN_UNTIL(&w, b.down == 1, 2);
    char *log = tu_logcap_end();
    assert_int_equal(b.up, 0);
    assert_non_null(strstr(log, "'" T1 "' is taken by a live connection"));
    free(log);
    assert_ptr_equal(cj_router_child(w.r, T1), first);
    assert_int_equal(a.down, 0);
    assert_int_equal(c->workers_refused, 1);
    rec_free_link(&b);
    /* the first closes: the name is free for a reconnect */
    rec_free_link(&a);
    RUN_UNTIL(&w, cj_router_child(w.r, T1) == NULL, 2);
    worker_link(&w, T1, &b);
    assert_int_equal(b.up, 1);
    struct cj_link *kids[4];
    assert_int_equal(cj_router_children(w.r, kids, 4), 1);
    /* messages now reach the new connection */
    assert_int_equal(cj_link_send_msg(w.srv.link, make_req("server.J1", ME, T1, "t", "x", false, 0), true), 0);
    RUN_UNTIL(&w, b.nmsgs == 1, 2);
    assert_int_equal(b.nmsgs, 1);
    /* not a child: refused */
    worker_link(&w, "site-1.J2.w", &bad);
    RUN_UNTIL(&w, bad.down == 1, 2);
    assert_int_equal(bad.up, 0);
    assert_int_equal(c->workers_refused, 2);
    worker_link(&w, "site-1", &bad);
    RUN_UNTIL(&w, bad.down == 1, 2);
    assert_int_equal(c->workers_refused, 3);
    worker_link(&w, T1 ".deeper", &bad);
    RUN_UNTIL(&w, bad.down == 1, 2);
    assert_int_equal(c->workers_refused, 4);
    assert_int_equal(w.worker_ups, 2);
    assert_int_equal(w.worker_downs, 1);
    assert_int_equal(c->workers_replaced, 0);
    rec_free_link(&b);
    world_done(&w);
}

/* A connection that went silent (no answer to PINGs for two heartbeat
 * intervals) gives its name to a new connection: the reconnect case. */
static void test_silent_link_replaced(void **state)
{
    (void)state;
    struct world w;
    g_worker_hb = 0.2;
    world_init(&w, 0);
    g_worker_hb = 0;
    int silent = raw_worker(&w, T1);   /* never answers a PING */
    struct cj_link *first = cj_router_child(w.r, T1);
    assert_non_null(first);
    world_spin(&w, 0.6);
    struct rec b;
    worker_link(&w, T1, &b);
    assert_int_equal(b.up, 1);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    assert_int_equal(c->workers_replaced, 1);
    assert_ptr_not_equal(cj_router_child(w.r, T1), first);
    assert_int_equal(cj_link_send_msg(w.srv.link, make_req("server.J1", ME, T1, "t", "x", false, 0), true), 0);
    RUN_UNTIL(&w, b.nmsgs == 1, 2);
    assert_int_equal(b.nmsgs, 1);
    rec_free_link(&b);
    close(silent);
    world_done(&w);
}

static void test_listen_unix(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct cj_err err;
    char url[128];
    snprintf(url, sizeof url, "unix:/tmp/cj_test_router_%ld.sock", (long)getpid());
    assert_int_equal(cj_router_listen(w.r, url, 0600, NULL, &err), 0);
    assert_true(cj_router_listen(w.r, "tcp://0.0.0.0:0", 0, NULL, &err) < 0);   /* not loopback */
    unsigned port = 0;
    assert_int_equal(cj_router_listen(w.r, "tcp://127.0.0.1:0", 0, &port, &err), 0);
    assert_true(port > 0);
    struct rec a = {0}, b = {0};
    struct cj_link_cfg c = {.name = "test-worker", .me = T1};
    a.link = cj_link_connect(w.base, NULL, url, NULL, &c, &rec_ops, &a, &err);
    char turl[64];
    snprintf(turl, sizeof turl, "tcp://127.0.0.1:%u", port);
    c.me = T2;
    b.link = cj_link_connect(w.base, NULL, turl, NULL, &c, &rec_ops, &b, &err);
    RUN_UNTIL(&w, a.up && b.up, 2);
    assert_int_equal(a.up + b.up, 2);
    assert_non_null(cj_router_child(w.r, T1));
    assert_non_null(cj_router_child(w.r, T2));
    /* worker to worker through the relay */
    assert_int_equal(cj_link_send_msg(a.link, make_req(T1, ME, T2, "t", "x", false, 10), false), 0);
    RUN_UNTIL(&w, b.nmsgs == 1, 2);
    assert_int_equal(b.nmsgs, 1);
    assert_string_equal(b.msgs[0]->hdr.from, ME);
    assert_int_equal(b.msgs[0]->hdr.route_n, 2);
    rec_free_link(&a);
    rec_free_link(&b);
    world_done(&w);
}

/* A worker whose peer does not read: the upstream feeding it stops reading
 * (its queue stays within link_buffer + one frame), while PING/PONG on another
 * worker link and that worker's own traffic still flow.  When the slow peer
 * reads again, everything arrives and the upstream resumes. */
static void test_backpressure(void **state)
{
    (void)state;
    /* More than the worker socket's kernel buffer (CJ_SOCK_BUFFER, doubled by
     * the kernel) can hold, so the relay's own queue fills. */
    enum { LINK_BUFFER = 256 * 1024, CHUNK = 128 * 1024, NCHUNKS = 2 * (2 * CJ_SOCK_BUFFER) / CHUNK };
    struct world w;
    world_init(&w, LINK_BUFFER);
    int slow = raw_worker(&w, T1);
    int fast = raw_worker(&w, T2);
    struct cj_link *up = cj_router_upstream(w.r);
    for (int i = 0; i < NCHUNKS; i++)
        assert_int_equal(cj_link_send_msg(w.srv.link, make_req("server.J1", ME, T1, "t", "bulk", false, CHUNK), false),
                         0);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    struct cj_link *to_slow = cj_router_child(w.r, T1);
    assert_non_null(to_slow);
    /* Throttles come and go while the kernel's buffer still takes bytes; once it
     * is full the relay's queue stays over the bound and the upstream paused. */
    RUN_UNTIL(&w, c->throttles > 0 && !cj_link_reading(up) && cj_link_queued(to_slow) > LINK_BUFFER, 5);
    assert_true(c->throttles > 0);
    assert_false(cj_link_reading(up));
    world_spin(&w, 0.1);
    assert_false(cj_link_reading(up));
    assert_true(c->down_msgs < NCHUNKS);        /* the rest waits upstream, not in the relay */

    /* control traffic on another link still flows */
    size_t n;
    uint8_t *ping = tu_read_vector("frames/cap75_ping.bin", &n);
    uint8_t buf[256];
    raw_write(w.base, fast, ping, n);
    long got = raw_read_frame(w.base, fast, buf, sizeof buf, 1);
    assert_int_equal(got, 17);
    assert_int_equal(buf[6], CJ_FRAME_PONG);
    free(ping);
    /* and so does the other worker's traffic toward the server */
    struct cj_msg *m = make_req(T2, ME, "server", "t", "hb", false, 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint8_t pre[16];
    struct cj_frame_prefix p = {.length = (uint32_t)(16 + m->hlen), .header_len = (uint16_t)m->hlen,
                                .type = CJ_FRAME_DATA, .app_id = 1, .stream_id = 17, .sequence = 2};
    cj_frame_prefix_encode(&p, pre);
    raw_write(w.base, fast, pre, 16);
    raw_write(w.base, fast, m->hblk, m->hlen);
    cj_msg_free(m);
    msgpack_sbuffer_destroy(&sb);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    assert_string_equal(w.srv.msgs[0]->hdr.topic, "hb");

    /* the slow peer reads now: everything arrives, in order, and the bound held */
    for (int i = 0; i < NCHUNKS; i++) {
        struct cj_msg *d = raw_read_msg(&w, slow, 3);
        assert_non_null(d);
        assert_int_equal(evbuffer_get_length(d->payload), CHUNK);
        cj_msg_free(d);
        size_t peak = cj_link_counters(to_slow)->queued_peak;
        /* link_buffer, plus the upstream's slack (default: one more link_buffer)
         * before the shared upstream pauses, plus the frame in flight. */
        assert_true(peak <= 2 * LINK_BUFFER + CHUNK + 1024);
    }
    assert_int_equal(c->down_msgs, NCHUNKS);
    RUN_UNTIL(&w, cj_link_reading(up), 1);
    assert_true(cj_link_reading(up));
    assert_true(cj_link_counters(to_slow)->queued_peak > LINK_BUFFER);   /* the bound was actually reached */
    close(slow);
    close(fast);
    world_done(&w);
}

/* A worker that never reads, with more queued toward it than link_buffer plus the
 * upstream's slack: the upstream pauses, and once the worker has drained nothing
 * for stall_timeout its link is closed, which releases the upstream. */
static void test_stalled_worker_closed(void **state)
{
    (void)state;
    /* More than the worker socket's kernel buffer (CJ_SOCK_BUFFER, doubled by
     * the kernel) can hold, so the relay's own queue fills. */
    enum { LINK_BUFFER = 256 * 1024, CHUNK = 128 * 1024, NCHUNKS = 2 * (2 * CJ_SOCK_BUFFER) / CHUNK };
    struct world w;
    g_stall_timeout = 1;
    world_init(&w, LINK_BUFFER);
    g_stall_timeout = 0;
    int slow = raw_worker(&w, T1);
    struct cj_link *up = cj_router_upstream(w.r);
    for (int i = 0; i < NCHUNKS; i++)
        assert_int_equal(cj_link_send_msg(w.srv.link, make_req("server.J1", ME, T1, "t", "bulk", false, CHUNK), false),
                         0);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    struct cj_link *to_slow = cj_router_child(w.r, T1);
    assert_non_null(to_slow);
    RUN_UNTIL(&w, c->throttles > 0 && !cj_link_reading(up) && cj_link_queued(to_slow) > LINK_BUFFER, 5);
    assert_false(cj_link_reading(up));
    RUN_UNTIL(&w, c->stalled_closed > 0, 5);
    assert_int_equal(c->stalled_closed, 1);
    RUN_UNTIL(&w, cj_router_child(w.r, T1) == NULL && cj_link_reading(up), 2);
    assert_null(cj_router_child(w.r, T1));
    assert_true(cj_link_reading(up));       /* the upstream reads again */
    close(slow);
    world_done(&w);
}

/* cj_router_hold: a consumer behind stops the link toward its source, holds
 * are counted, and a hold lapses after a couple of seconds. */
static void test_hold(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct rec t1;
    worker_link(&w, T1, &t1);
    struct cj_link *up = cj_router_upstream(w.r), *wl = cj_router_child(w.r, T1);
    assert_non_null(wl);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    assert_int_equal(cj_router_hold(w.r, "server.J1", true), 0);
    assert_false(cj_link_reading(up));
    assert_true(cj_link_reading(wl));
    assert_int_equal(cj_router_hold(w.r, T1, true), 0);
    assert_int_equal(cj_router_hold(w.r, T1, true), 0);
    assert_false(cj_link_reading(wl));
    assert_int_equal(cj_router_hold(w.r, T1, false), 0);
    assert_false(cj_link_reading(wl));       /* one holder left */
    assert_int_equal(cj_router_hold(w.r, T1, false), 0);
    assert_true(cj_link_reading(wl));
    assert_int_equal(cj_router_hold(w.r, "server.J1", false), 0);
    assert_true(cj_link_reading(up));
    assert_int_equal(c->holds, 2);
    assert_int_equal(cj_router_hold(w.r, ME ".nobody", true), -1);   /* no link toward it */
    /* a message sent while the upstream is held arrives once it is lifted */
    assert_int_equal(cj_router_hold(w.r, "server.J1", true), 0);
    assert_int_equal(cj_link_send_msg(w.srv.link, make_req("server.J1", ME, T1, "t", "held", false, 64), false), 0);
    world_spin(&w, 0.2);
    assert_int_equal(t1.nmsgs, 0);
    RUN_UNTIL(&w, t1.nmsgs == 1, 4);          /* the hold lapses (HOLD_LAPSE 2 s) */
    assert_int_equal(t1.nmsgs, 1);
    assert_true(cj_link_reading(up));
    assert_int_equal(c->holds_lapsed, 1);
    assert_int_equal(cj_router_hold(w.r, "server.J1", false), 0);   /* the holder lets go: nothing to undo */
    assert_true(cj_link_reading(up));
    rec_free_link(&t1);
    world_done(&w);
}

static void test_upstream_reconnect(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    assert_int_equal(w.ups, 1);
    /* the server drops the connection */
    cj_link_free(w.srv.link);
    w.srv.link = NULL;
    w.srv.up = 0;
    RUN_UNTIL(&w, cj_router_upstream_state(w.r) != CJ_UP_UP, 2);
    assert_true(cj_router_upstream_state(w.r) == CJ_UP_BACKOFF || cj_router_upstream_state(w.r) == CJ_UP_CONNECTING);
    assert_null(cj_router_upstream(w.r));
    /* meanwhile a request toward the server is unroutable */
    struct rec wk;
    worker_link(&w, T1, &wk);
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, "server", "task", "ping", true, 0), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    assert_int_equal(wk.nmsgs, 1);
    assert_int_equal(wk.msgs[0]->hdr.msg_type, CJ_MSG_RETURN);
    /* it comes back */
    RUN_UNTIL(&w, cj_router_upstream(w.r) && w.srv.up, 3);
    assert_int_equal(cj_router_upstream_state(w.r), CJ_UP_UP);
    assert_int_equal(w.ups, 2);
    assert_true(cj_router_counters(w.r)->reconnects >= 1);
    assert_string_equal(cj_router_upstream_state_name(CJ_UP_BACKOFF), "backoff");
    rec_free_link(&wk);
    world_done(&w);
}


#define DL_CH "download_service__"
#define DL_TP "download_service__download"
#define RI_A "0b7a3c1e-1111-4000-8000-00000000000a"
#define RI_B "0b7a3c1e-1111-4000-8000-00000000000b"
#define RI_C "0b7a3c1e-1111-4000-8000-00000000000c"
#define RI_D "0b7a3c1e-1111-4000-8000-00000000000d"

/* doc/protocol/cellnet.md §6: a worker's requests in flight through the upstream
 * when it is lost are counted and logged as lost with it, once each however
 * many chunks, and nothing is sent to the worker (its own per-request timeout
 * retries them, as under FLARE's client job); a request whose reply's final
 * chunk went down, a fire-and-forget stream and the worker's own reply streams
 * are not counted.  With the upstream down, a worker's ACK or new request
 * toward it is dropped, and nothing is sent back either. */
static void test_inflight_lost_on_upstream_loss(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    struct rec wk;
    worker_link(&w, T1, &wk);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    struct cj_msg *out[] = {
        make_sm(T1, "server.J1", "sm__DATA", RI_A, DL_CH, DL_TP, 101, CJ_SM_FINAL, 0, false),   /* one chunk */
        make_sm(T1, "server.J1", "sm__DATA", RI_B, DL_CH, DL_TP, 102, CJ_SM_CHUNK, 0, false),   /* two chunks */
        make_sm(T1, "server.J1", "sm__DATA", RI_B, DL_CH, DL_TP, 102, CJ_SM_CHUNK, 0, false),   /* chunk 0 again */
        make_sm(T1, "server.J1", "sm__DATA", RI_B, DL_CH, DL_TP, 102, CJ_SM_FINAL, 1, false),
        make_sm(T1, "server.J1", "sm__DATA", RI_C, DL_CH, DL_TP, 103, CJ_SM_FINAL, 0, false),   /* answered */
        make_sm(T1, "server.J1", "sm__DATA", NULL, "client_api", "log", 104, CJ_SM_FINAL, 0, false),
        make_sm(T1, "server.J1", "sm__DATA", RI_D, "return_only", "a:b", 105, CJ_SM_FINAL, 0, true),
    };
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) assert_int_equal(cj_link_send_msg(wk.link, out[i], true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 7, 2);
    assert_int_equal(w.srv.nmsgs, 7);
    /* the server: a reply chunk for A (not final), the final (only) chunk of C's reply */
    assert_int_equal(cj_link_send_msg(w.srv.link,
                                      make_sm("server.J1", T1, "sm__DATA", RI_A, "return_only", DL_CH ":" DL_TP, 9001,
                                              CJ_SM_CHUNK, 0, true), true), 0);
    assert_int_equal(cj_link_send_msg(w.srv.link,
                                      make_sm("server.J1", T1, "sm__DATA", RI_C, "return_only", DL_CH ":" DL_TP, 9002,
                                              CJ_SM_FINAL, 0, true), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 2, 2);
    assert_int_equal(wk.nmsgs, 2);
    rec_clear(&wk);

    /* the server goes away */
    tu_logcap_begin();
    cj_link_free(w.srv.link);
    w.srv.link = NULL;
    w.srv.up = 0;
    RUN_UNTIL(&w, c->inflight_lost == 2, 2);
    world_spin(&w, 0.05);
    char *log = tu_logcap_end();
    assert_non_null(strstr(log, "2 requests of " T1 " in flight through the upstream lost with it"));
    assert_non_null(strstr(log, "the first " RI_A " to server.J1"));
    free(log);
    assert_int_equal(wk.nmsgs, 0);
    assert_int_equal(c->inflight_lost, 2);
    assert_int_equal(c->fwd_errors_sent, 0);
    assert_int_equal(c->inflight_untracked, 0);

    /* upstream down (it reconnects after 0.05..0.2 s: look before): the
     * worker's ACK and a new (not optional) request toward it are dropped,
     * nothing comes back.  On a loaded machine it may be back already: then
     * there is nothing to see. */
    if (cj_router_upstream(w.r)) {
        rec_free_link(&wk);
        world_done(&w);
        return;
    }
    uint64_t drops = c->drops;
    assert_int_equal(cj_link_send_msg(wk.link, make_sm(T1, "server.J1", "sm__ACK", NULL, NULL, NULL, 9001, CJ_SM_ACK, 0,
                                                       false), true), 0);
    assert_int_equal(cj_link_send_msg(wk.link, make_sm(T1, "server.J1", "sm__DATA", RI_D, DL_CH, DL_TP, 106,
                                                       CJ_SM_FINAL, 0, false), true), 0);
    RUN_UNTIL(&w, c->drops == drops + 2, 1);
    world_spin(&w, 0.05);
    assert_int_equal(wk.nmsgs, 0);
    assert_int_equal(c->inflight_lost, 2);
    assert_int_equal(c->fwd_errors_sent, 0);
    rec_free_link(&wk);
    world_done(&w);
}

/* At most CJ_ROUTER_INFLIGHT_MAX requests per worker: the oldest are
 * forgotten (counted); a worker link that closes forgets its own. */
static void test_inflight_bound(void **state)
{
    (void)state;
    enum { EXTRA = 6, N = CJ_ROUTER_INFLIGHT_MAX + EXTRA };
    struct world w;
    world_init(&w, 0);
    struct rec wk, gone;
    worker_link(&w, T1, &wk);
    worker_link(&w, T2, &gone);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    char ri[64];
    for (int i = 0; i < N; i++) {
        snprintf(ri, sizeof ri, "req-%03d", i);
        assert_int_equal(cj_link_send_msg(wk.link, make_sm(T1, "server.J1", "sm__DATA", ri, DL_CH, DL_TP,
                                                           1000 + (uint64_t)i, CJ_SM_FINAL, 0, false), true), 0);
    }
    assert_int_equal(cj_link_send_msg(gone.link, make_sm(T2, "server.J1", "sm__DATA", "t2-req", DL_CH, DL_TP, 7,
                                                         CJ_SM_FINAL, 0, false), true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == N + 1, 3);
    assert_int_equal(w.srv.nmsgs, N + 1);
    assert_int_equal(c->inflight_untracked, EXTRA);
    rec_free_link(&gone);
    RUN_UNTIL(&w, w.worker_downs == 1, 2);
    assert_int_equal(w.worker_downs, 1);

    tu_logcap_begin();
    cj_link_free(w.srv.link);
    w.srv.link = NULL;
    w.srv.up = 0;
    RUN_UNTIL(&w, c->inflight_lost == CJ_ROUTER_INFLIGHT_MAX, 3);
    world_spin(&w, 0.05);
    char *log = tu_logcap_end();
    snprintf(ri, sizeof ri, "the first req-%03d to server.J1", EXTRA);   /* the oldest were forgotten */
    assert_non_null(strstr(log, ri));
    assert_null(strstr(log, "t2-req"));
    free(log);
    assert_int_equal(wk.nmsgs, 0);
    assert_int_equal(c->inflight_lost, CJ_ROUTER_INFLIGHT_MAX);   /* none for the closed worker */
    rec_free_link(&wk);
    world_done(&w);
}

/* ---- the parent link ----------------------------------------------------------------------- */

#define SITE "site-1"
#define SIB "site-1.J2"

static void assert_hop(struct world *w, const char *dest, const char *hop)
{
    const char *h = cj_router_next_hop_name(w->r, dest);
    if (!hop) assert_null(h);
    else assert_string_equal(h ? h : "(none)", hop);
}

/* The routing table with and without a parent link: the parent, a sibling and
 * a sibling's child go to the parent; my children, the server, other sites
 * and the server's job cells as before. */
static void test_parent_routing(void **state)
{
    (void)state;
    struct world w;
    struct cj_err err;
    world_init(&w, 0);
    struct rec wk;
    worker_link(&w, T1, &wk);
    assert_hop(&w, SITE, "server");   /* no parent configured: exactly as before */
    assert_hop(&w, SIB, "server");
    struct cj_parent_cfg bad = {.url = "stcp://127.0.0.1:1"};
    assert_true(cj_router_parent_start(w.r, &bad, &err) < 0);   /* clear tcp only */
    parent_listen(&w, SITE, false);
    RUN_UNTIL(&w, cj_router_parent(w.r) && w.par.up, 2);
    assert_int_equal(cj_router_parent_state(w.r), CJ_UP_UP);
    assert_string_equal(cj_link_peer(cj_router_parent(w.r)), SITE);
    assert_string_equal(w.par.hello, ME);                        /* it handshakes as this cell */
    assert_int_equal(w.parent_ups, 1);
    assert_hop(&w, SITE, SITE);
    assert_hop(&w, SIB, SITE);
    assert_hop(&w, SIB ".trainer_1", SITE);
    assert_hop(&w, T1, T1);
    assert_hop(&w, T1 ".sub", T1);
    assert_hop(&w, T2, NULL);                                    /* my child, not connected */
    assert_hop(&w, ME, NULL);
    assert_hop(&w, "server", "server");
    assert_hop(&w, "server.J1", "server");
    assert_hop(&w, "site-2", "server");
    assert_hop(&w, "site-10.J1", "server");                      /* not under site-1 */

    const struct cj_router_counters *c = cj_router_counters(w.r);
    /* a worker to a sibling job: through the parent, rewritten by this cell */
    struct cj_msg *m = make_req(T1, ME, SIB, "task", "ping", true, 7);
    assert_int_equal(cj_link_send_msg(wk.link, m, true), 0);
    RUN_UNTIL(&w, w.par.nmsgs == 1, 2);
    assert_int_equal(w.par.nmsgs, 1);
    assert_string_equal(w.par.msgs[0]->hdr.destination, SIB);
    assert_string_equal(w.par.msgs[0]->hdr.from, ME);
    assert_string_equal(w.par.msgs[0]->hdr.to, SITE);
    assert_int_equal(c->parent_msgs, 1);
    assert_true(c->parent_bytes > 7);
    assert_int_equal(w.srv.nmsgs, 0);
    rec_clear(&w.par);
    /* the CP to my worker: forwarded down (FLARE routes a CP's message for a
     * job's descendant through the job cell) */
    assert_int_equal(cj_link_send_msg(w.par.link, make_req(SITE, ME, T1, "task", "x", false, 0), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    assert_int_equal(wk.nmsgs, 1);
    assert_string_equal(wk.msgs[0]->hdr.origin, SITE);
    /* the CP to me: dispatched here; the "no callback" reply goes back to the parent */
    uint64_t local = c->local_msgs;
    assert_int_equal(cj_link_send_msg(w.par.link, make_req(SITE, ME, ME, "client_command", "show_stats", true, 0),
                                      true), 0);
    RUN_UNTIL(&w, w.par.nmsgs == 1, 2);
    assert_int_equal(c->local_msgs, local + 1);
    assert_int_equal(w.par.nmsgs, 1);
    assert_int_equal(w.par.msgs[0]->hdr.msg_type, CJ_MSG_REPLY);
    assert_string_equal(w.par.msgs[0]->hdr.destination, SITE);
    rec_clear(&w.par);
    /* a sibling (through the CP) to the server: forwarded on the upstream */
    assert_int_equal(cj_link_send_msg(w.par.link, make_req(SIB, ME, "server", "task", "y", false, 0), true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    /* anti-spoofing on the parent link: me, my children, the server, another site */
    assert_int_equal(c->drops_spoof, 0);
    const char *bad_origins[] = {ME, T1, "server", "site-2"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(cj_link_send_msg(w.par.link, make_req(bad_origins[i], ME, ME, "task", "z", true, 0), true), 0);
    RUN_UNTIL(&w, c->drops_spoof == 4, 2);
    world_spin(&w, 0.05);
    assert_int_equal(c->drops_spoof, 4);
    assert_int_equal(w.par.nmsgs, 0);
    /* what this cell originates toward the parent goes there too */
    struct cj_hb hb;
    cj_hb_init(&hb);
    struct cj_hdr_msg hm = {.type = CJ_MSG_REQ, .destination = SITE, .channel = "admin",
                            .topic = "train.notify_job_status", .payload_encoding = "none"};
    assert_int_equal(cj_router_originate(w.r, &hb, &hm, NULL, false, &err), 0);
    RUN_UNTIL(&w, w.par.nmsgs == 1, 2);
    assert_int_equal(w.par.nmsgs, 1);
    assert_string_equal(w.par.msgs[0]->hdr.topic, "train.notify_job_status");
    rec_free_link(&wk);
    world_done(&w);
}

/* The parent link lost: what goes to the parent side is unroutable (RETURN,
 * drop) and never goes to the server instead; then it reconnects. */
static void test_parent_down_and_reconnect(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    parent_listen(&w, SITE, false);
    RUN_UNTIL(&w, cj_router_parent(w.r) && w.par.up, 2);
    struct rec wk;
    worker_link(&w, T1, &wk);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    cj_link_free(w.par.link);   /* the CP closes */
    w.par.link = NULL;
    w.par.up = 0;
    RUN_UNTIL(&w, cj_router_parent_state(w.r) != CJ_UP_UP, 2);
    assert_null(cj_router_parent(w.r));
    assert_int_equal(w.parent_downs, 1);
    assert_int_equal(cj_router_upstream_state(w.r), CJ_UP_UP);   /* the other link does not care */
    uint64_t drops = c->drops_unroutable;
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, SITE, "admin", "q", true, 0), true), 0);
    RUN_UNTIL(&w, wk.nmsgs == 1, 2);
    assert_int_equal(wk.nmsgs, 1);
    assert_int_equal(wk.msgs[0]->hdr.msg_type, CJ_MSG_RETURN);
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, SIB, "admin", "n", false, 0), true), 0);
    RUN_UNTIL(&w, c->drops_unroutable == drops + 2, 2);
    assert_int_equal(c->drops_unroutable, drops + 2);
    assert_int_equal(c->inflight_lost, 0);                        /* the upstream's requests are not concerned */
    struct cj_err err;
    struct cj_hb hb;
    cj_hb_init(&hb);
    struct cj_hdr_msg hm = {.type = CJ_MSG_REQ, .destination = SITE, .channel = "admin", .topic = "s",
                            .payload_encoding = "none"};
    assert_true(cj_router_originate(w.r, &hb, &hm, NULL, false, &err) < 0);
    assert_non_null(strstr(err.msg, "parent link is not connected"));
    world_spin(&w, 0.02);
    assert_int_equal(w.srv.nmsgs, 0);                            /* never the server instead */
    RUN_UNTIL(&w, cj_router_parent(w.r) && w.par.up, 3);
    assert_int_equal(cj_router_parent_state(w.r), CJ_UP_UP);
    assert_int_equal(w.parent_ups, 2);
    assert_true(c->parent_reconnects >= 1);
    assert_int_equal(c->reconnects, 0);                          /* the upstream's own count */
    rec_free_link(&wk);
    world_done(&w);
}

/* A parent answering with another name is refused, and retried. */
static void test_parent_wrong_name(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 0);
    parent_listen(&w, "site-2", false);
    RUN_UNTIL(&w, w.par_accepts >= 2, 3);
    assert_true(w.par_accepts >= 2);
    assert_null(cj_router_parent(w.r));
    assert_int_not_equal(cj_router_parent_state(w.r), CJ_UP_UP);
    assert_int_equal(w.parent_ups, 0);
    assert_true(cj_router_counters(w.r)->parent_reconnects >= 1);
    assert_hop(&w, SITE, NULL);
    world_done(&w);
}

/* A parent that stops reading: its queue stays bounded (messages toward it
 * refused and counted), and neither the worker nor the upstream is paused. */
static void test_parent_full(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 64 << 10);
    parent_listen(&w, SITE, true);
    RUN_UNTIL(&w, w.par_fd >= 0, 2);
    assert_true(w.par_fd >= 0);
    fcntl(w.par_fd, F_SETFL, O_NONBLOCK);
    uint8_t buf[512];
    long n = raw_read_frame(w.base, w.par_fd, buf, sizeof buf, 2);   /* the HELLO */
    assert_true(n > 16);
    assert_int_equal(buf[6], CJ_FRAME_HELLO);
    struct cj_frame_hello h;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_hello_init(&h, SITE, 1.7e9, NULL), 0);
    assert_int_equal(cj_frame_build_hello(&sb, CJ_FRAME_READY, 1, 1, &h, NULL), 0);
    raw_write(w.base, w.par_fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    RUN_UNTIL(&w, cj_router_parent(w.r), 2);
    assert_non_null(cj_router_parent(w.r));
    struct rec wk;
    worker_link(&w, T1, &wk);
    const struct cj_router_counters *c = cj_router_counters(w.r);
    for (int i = 0; i < 24 && !c->drops_parent_full; i++) {       /* the CP reads nothing */
        assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, SIB, "x", "big", false, 1 << 20), false), 0);
        world_spin(&w, 0.05);
    }
    assert_true(c->drops_parent_full >= 1);
    assert_true(c->drops >= c->drops_parent_full);
    assert_true(cj_link_queued(cj_router_parent(w.r)) < (64 << 10) + (2 << 20));
    /* the worker is still read, the server link still carries its traffic */
    assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, "server", "task", "ping", false, 0), true), 0);
    RUN_UNTIL(&w, w.srv.nmsgs == 1, 2);
    assert_int_equal(w.srv.nmsgs, 1);
    /* the kernel may have taken more of the queue meanwhile (its buffers grow): fill it again */
    for (int i = 0; i < 24 && !cj_link_over(cj_router_parent(w.r)); i++) {
        assert_int_equal(cj_link_send_msg(wk.link, make_req(T1, ME, SIB, "x", "big", false, 1 << 20), false), 0);
        world_spin(&w, 0.05);
    }
    assert_true(cj_link_over(cj_router_parent(w.r)));
    struct cj_err err;
    struct cj_hb hb;
    cj_hb_init(&hb);
    struct cj_hdr_msg hm = {.type = CJ_MSG_REQ, .destination = SITE, .channel = "admin", .topic = "s",
                            .payload_encoding = "none"};
    assert_true(cj_router_originate(w.r, &hb, &hm, NULL, false, &err) < 0);
    assert_non_null(strstr(err.msg, "full"));
    rec_free_link(&wk);
    world_done(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_cap25_upstream),
        cmocka_unit_test(test_forward_cap27_down),
        cmocka_unit_test(test_return_for_unroutable_request),
        cmocka_unit_test(test_loop_refused),
        cmocka_unit_test(test_anti_spoof),
        cmocka_unit_test(test_local_dispatch_and_builtins),
        cmocka_unit_test(test_child_registration),
        cmocka_unit_test(test_silent_link_replaced),
        cmocka_unit_test(test_listen_unix),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_stalled_worker_closed),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_upstream_reconnect),
        cmocka_unit_test(test_inflight_lost_on_upstream_loss),
        cmocka_unit_test(test_inflight_bound),
        cmocka_unit_test(test_parent_routing),
        cmocka_unit_test(test_parent_down_and_reconnect),
        cmocka_unit_test(test_parent_wrong_name),
        cmocka_unit_test(test_parent_full),
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
