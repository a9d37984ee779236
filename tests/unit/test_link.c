/* SPDX-License-Identifier: Apache-2.0 */
/* test_link.c — lib/net: addresses, listeners, links (handshake both ways,
 * refusals, PING/PONG, heartbeat and dead peer, frame splitting, control vs
 * bulk output), TLS (mtls, wrong CA, expired, missing client certificate; the files' texts
 * loaded from memory).
 * Real sockets (socketpair, AF_UNIX, loopback TCP on port 0), one event loop
 * per test. */
#include "testutil.h"
#include "linkrec.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "wire/msg.h"
#include "net/addr.h"
#include "net/link.h"
#include "net/tls.h"
#include "util/log.h"
#include "wire/frame.h"
#include "wire/header.h"

/* ---- harness ------------------------------------------------------------------- */

struct env {
    struct event_base *base;
    struct event *tick;     /* keeps EVLOOP_ONCE from blocking long */
};

static void env_init(struct env *e)
{
    e->base = event_base_new();
    assert_non_null(e->base);
    e->tick = event_new(e->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    event_add(e->tick, &tv);
}

static void env_spin(struct env *e, double secs)
{
    double end = now_mono() + secs;
    while (now_mono() < end) event_base_loop(e->base, EVLOOP_ONCE);
}

static void env_done(struct env *e)
{
    env_spin(e, 0.02);        /* let reapers run */
    event_free(e->tick);
    event_base_free(e->base);
}

static struct cj_link_cfg cfg_named(const char *name, const char *me)
{
    struct cj_link_cfg c = {.name = name, .me = me, .handshake_timeout = 2};
    return c;
}

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

/* ---- raw peer (the test writing frames by hand) ---------------------------------- */

static void raw_hello(struct env *e, int fd, uint8_t type, const char *name)
{
    struct cj_frame_hello h;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    memset(&h, 0, sizeof h);
    snprintf(h.endpoint_name, sizeof h.endpoint_name, "%s", name);
    snprintf(h.fqcn, sizeof h.fqcn, "%s", name);
    h.has_fqcn = true;
    h.timestamp = 1.5e9;
    assert_int_equal(cj_frame_build_hello(&sb, type, 1, 1, &h, NULL), 0);
    raw_write(e->base, fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* True when the peer closed fd (read gives EOF or reset) within secs. */
static bool raw_eof(struct env *e, int fd, double secs)
{
    uint8_t b[4096];
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    double end = now_mono() + secs;
    while (now_mono() < end) {
        ssize_t r = read(fd, b, sizeof b);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
        if (r < 0) event_base_loop(e->base, EVLOOP_ONCE);
    }
    return false;
}

/* A small originated message origin -> dest with a payload. */
static struct cj_msg *make_msg(const char *me, const char *to, const char *dest, const char *payload)
{
    struct cj_hb hb;
    struct cj_err err;
    cj_hb_init(&hb);
    cj_hb_str(&hb, "x-app", "test");
    struct evbuffer *p = evbuffer_new();
    evbuffer_add(p, payload, strlen(payload));
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = me, .to = to, .destination = dest, .channel = "task", .topic = "ping",
        .req_id = "11111111-2222-3333-4444-555555555555", .reply_expected = true,
        .payload_encoding = "bytes", .payload_len = (int64_t)strlen(payload), .route_time = 1.0, .send_time = 2.0,
    };
    struct cj_msg *msg = cj_msg_build(&hb, &m, p, &err);
    cj_hb_destroy(&hb);
    evbuffer_free(p);
    assert_non_null(msg);
    return msg;
}

static bool payload_is(const struct cj_msg *m, const char *text)
{
    size_t n = evbuffer_get_length(m->payload);
    if (n != strlen(text)) return false;
    return !memcmp(evbuffer_pullup(m->payload, -1), text, n);
}

/* ---- addresses ---------------------------------------------------------------------- */

static void test_addr_parse(void **state)
{
    (void)state;
    struct cj_addr a;
    struct cj_err err;
    assert_int_equal(cj_addr_parse("tcp://server.example.com:8002", CJ_EP_TCP | CJ_EP_STCP, 0, &a, &err), 0);
    assert_int_equal(a.ep.kind, CJ_EP_TCP);
    assert_int_equal(a.ep.port, 8002);
    assert_false(cj_addr_is_numeric(&a));
    assert_false(cj_addr_is_loopback(&a));
    assert_int_equal(cj_addr_parse("stcp://10.0.0.1:443", CJ_EP_TCP | CJ_EP_STCP, 0, &a, &err), 0);
    assert_int_equal(a.ep.kind, CJ_EP_STCP);
    assert_true(cj_addr_is_numeric(&a));
    assert_int_equal(cj_addr_parse("unix:/run/x.sock", CJ_EP_UNIX, 0, &a, &err), 0);
    assert_string_equal(a.ep.addr, "/run/x.sock");
    assert_string_equal(a.text, "unix:/run/x.sock");
    assert_int_equal(cj_addr_parse("uds:///run/x:0", CJ_EP_UNIX, CJ_ADDR_LISTEN, &a, &err), 0);   /* a path, no port */
    assert_string_equal(a.ep.addr, "/run/x:0");
    assert_string_equal(a.text, "uds://run/x:0");
    /* listen addresses: loopback only, port 0 allowed */
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    assert_int_equal(a.ep.port, 0);
    assert_int_equal(cj_addr_parse("tcp://127.3.2.1:9000", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    assert_int_equal(cj_addr_parse("tcp://[::1]:9000", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    assert_int_equal(cj_addr_parse("tcp://localhost:9000", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    assert_true(cj_addr_parse("tcp://0.0.0.0:9000", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err) < 0);
    assert_non_null(strstr(err.msg, "loopback"));
    assert_true(cj_addr_parse("tcp://10.1.2.3:9000", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err) < 0);
    assert_true(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, 0, &a, &err) < 0);   /* port 0 only for listens */
    assert_true(cj_addr_parse("udp://1.2.3.4:5", CJ_EP_TCP, 0, &a, &err) < 0);
    assert_true(cj_addr_parse("unix:/x", CJ_EP_TCP, 0, &a, &err) < 0);
    /* numeric sockaddr */
    struct sockaddr_storage ss;
    socklen_t len;
    assert_int_equal(cj_addr_parse("tcp://localhost:80", CJ_EP_TCP, 0, &a, &err), 0);
    assert_int_equal(cj_addr_sockaddr(&a, &ss, &len, &err), 0);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(cj_addr_parse("tcp://name.invalid:80", CJ_EP_TCP, 0, &a, &err), 0);
    assert_true(cj_addr_sockaddr(&a, &ss, &len, &err) < 0);
}

static int accepted_fd = -1;
static void keep_fd(evutil_socket_t fd, const char *peer, void *ctx)
{
    (void)peer; (void)ctx;
    if (accepted_fd >= 0) close(accepted_fd);
    accepted_fd = fd;
}

static void test_listener_unix_stale_and_live(void **state)
{
    (void)state;
    struct env e;
    env_init(&e);
    char dir[] = "/tmp/cj_test_lst.XXXXXX", url[128];
    assert_non_null(mkdtemp(dir));
    snprintf(url, sizeof url, "unix:%s/w.sock", dir);
    struct cj_addr a;
    struct cj_err err;
    assert_int_equal(cj_addr_parse(url, CJ_EP_UNIX, CJ_ADDR_LISTEN, &a, &err), 0);

    /* a stale socket file (bound, nobody listening) is replaced */
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    snprintf(su.sun_path, sizeof su.sun_path, "%s/w.sock", dir);
    assert_int_equal(bind(s, (struct sockaddr *)&su, sizeof su), 0);
    close(s);
    struct cj_listener *l = cj_listener_open(e.base, &a, 0660, keep_fd, NULL, &err);
    assert_non_null(l);
    struct stat st;
    assert_int_equal(stat(su.sun_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0660);

    /* a live one is refused */
    struct cj_listener *l2 = cj_listener_open(e.base, &a, 0660, keep_fd, NULL, &err);
    assert_null(l2);
    assert_non_null(strstr(err.msg, "in use"));

    /* it accepts */
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&su, sizeof su), 0);
    RUN_UNTIL(&e, accepted_fd >= 0, 2);
    assert_true(accepted_fd >= 0);
    close(accepted_fd);
    accepted_fd = -1;
    close(c);

    cj_listener_free(l);
    assert_true(stat(su.sun_path, &st) < 0);       /* removed */

    /* a regular file in the way is refused */
    int f = open(su.sun_path, O_CREAT | O_WRONLY, 0600);
    close(f);
    assert_null(cj_listener_open(e.base, &a, 0660, keep_fd, NULL, &err));
    assert_non_null(strstr(err.msg, "not a socket"));
    unlink(su.sun_path);
    rmdir(dir);
    env_done(&e);
}

/* ---- handshake ---------------------------------------------------------------------- */

static void test_handshake_socketpair(void **state)
{
    (void)state;
    struct env e;
    env_init(&e);
    int sv[2];
    pair(sv);
    struct rec ra = {0}, rp = {0};
    struct cj_err err;
    struct cj_link_cfg ca = cfg_named("worker-side", "site-1.J1.w1"), cp = cfg_named("relay-side", "site-1.J1");
    ra.link = cj_link_attach(e.base, sv[0], true, NULL, "sp-a", &ca, &rec_ops, &ra, &err);
    rp.link = cj_link_accept(e.base, sv[1], NULL, "sp-p", &cp, &rec_ops, &rp, &err);
    assert_non_null(ra.link);
    assert_non_null(rp.link);
    assert_int_equal(ra.up + rp.up, 0);            /* nothing happens inside the create calls */
    RUN_UNTIL(&e, ra.up && rp.up, 2);
    assert_int_equal(ra.up, 1);
    assert_int_equal(rp.up, 1);
    assert_int_equal(rp.hellos, 1);
    assert_string_equal(rp.hello, "site-1.J1.w1");
    assert_string_equal(cj_link_peer(ra.link), "site-1.J1");
    assert_string_equal(cj_link_peer(rp.link), "site-1.J1.w1");
    assert_int_equal(cj_link_get_state(ra.link), CJ_LINK_UP);
    assert_true(cj_link_is_active(ra.link));
    assert_false(cj_link_is_active(rp.link));

    /* messages both ways, control and bulk */
    assert_int_equal(cj_link_send_msg(ra.link, make_msg("site-1.J1.w1", "site-1.J1", "server", "hello up"), true), 0);
    assert_int_equal(cj_link_send_msg(rp.link, make_msg("site-1.J1", "site-1.J1.w1", "site-1.J1.w1", "down"), false), 0);
    RUN_UNTIL(&e, ra.nmsgs == 1 && rp.nmsgs == 1, 2);
    assert_int_equal(rp.nmsgs, 1);
    assert_int_equal(ra.nmsgs, 1);
    assert_string_equal(rp.msgs[0]->hdr.destination, "server");
    assert_string_equal(rp.msgs[0]->hdr.channel, "task");
    assert_true(payload_is(rp.msgs[0], "hello up"));
    assert_ptr_equal(rp.msgs[0]->from, rp.link);
    assert_true(payload_is(ra.msgs[0], "down"));
    const struct cj_link_counters *c = cj_link_counters(rp.link);
    assert_int_equal(c->msgs_in, 1);
    assert_int_equal(c->frames_in, 2);             /* HELLO + DATA */
    assert_int_equal(c->frames_out, 2);            /* READY + DATA */

    /* closing one side: the other sees the peer close */
    cj_link_close(ra.link, "test done");
    assert_int_equal(ra.down, 1);
    RUN_UNTIL(&e, rp.down == 1, 2);
    assert_int_equal(rp.down, 1);
    assert_non_null(strstr(rp.why, "peer closed"));
    rec_clear(&ra);
    rec_clear(&rp);
    env_done(&e);
}

static struct rec srv_rec;
static struct cj_link_cfg srv_cfg;
static SSL_CTX *srv_tls;
static struct event_base *srv_base;
static void srv_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    (void)ctx;
    struct cj_err err;
    srv_rec.link = cj_link_accept(srv_base, fd, srv_tls, peer, &srv_cfg, &rec_ops, &srv_rec, &err);
    assert_non_null(srv_rec.link);
}

static void connect_via_listener(const char *listen_url, const char *scheme)
{
    struct env e;
    env_init(&e);
    struct cj_addr a;
    struct cj_err err;
    memset(&srv_rec, 0, sizeof srv_rec);
    srv_cfg = cfg_named("server-side", "server");
    srv_tls = NULL;
    srv_base = e.base;
    assert_int_equal(cj_addr_parse(listen_url, CJ_EP_TCP | CJ_EP_UNIX, CJ_ADDR_LISTEN, &a, &err), 0);
    struct cj_listener *lst = cj_listener_open(e.base, &a, 0600, srv_accept, NULL, &err);
    assert_non_null(lst);
    char url[256];
    if (a.ep.kind == CJ_EP_UNIX) snprintf(url, sizeof url, "%s", listen_url);
    else snprintf(url, sizeof url, "%s://127.0.0.1:%u", scheme, cj_listener_port(lst));
    struct rec rc = {0};
    struct cj_link_cfg cc = cfg_named("upstream", "site-1.J1");
    rc.link = cj_link_connect(e.base, NULL, url, NULL, &cc, &rec_ops, &rc, &err);
    assert_non_null(rc.link);
    assert_int_equal(cj_link_get_state(rc.link), CJ_LINK_CONNECTING);
    RUN_UNTIL(&e, rc.up && srv_rec.up, 2);
    assert_int_equal(rc.up, 1);
    assert_int_equal(srv_rec.up, 1);
    assert_string_equal(cj_link_peer(rc.link), "server");
    assert_string_equal(cj_link_peer(srv_rec.link), "site-1.J1");
    rec_free_link(&rc);
    rec_free_link(&srv_rec);
    cj_listener_free(lst);
    env_done(&e);
}

static void test_handshake_tcp_and_unix(void **state)
{
    (void)state;
    connect_via_listener("tcp://127.0.0.1:0", "tcp");
    char path[128];
    snprintf(path, sizeof path, "unix:/tmp/cj_test_link_%ld.sock", (long)getpid());
    connect_via_listener(path, NULL);
}

static void test_connect_refused_and_unresolvable(void **state)
{
    (void)state;
    struct env e;
    env_init(&e);
    struct cj_err err;
    /* a port nobody listens on: take one from a listener, then close it */
    struct cj_addr a;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    struct cj_listener *lst = cj_listener_open(e.base, &a, 0, keep_fd, NULL, &err);
    unsigned port = cj_listener_port(lst);
    cj_listener_free(lst);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", port);
    struct rec r = {0};
    struct cj_link_cfg c = cfg_named("upstream", "site-1.J1");
    r.link = cj_link_connect(e.base, NULL, url, NULL, &c, &rec_ops, &r, &err);
    assert_non_null(r.link);
    RUN_UNTIL(&e, r.down, 2);
    assert_int_equal(r.down, 1);
    assert_non_null(strstr(r.why, "refused"));
    /* a host name without a resolver */
    memset(&r, 0, sizeof r);
    r.link = cj_link_connect(e.base, NULL, "tcp://relay.invalid:80", NULL, &c, &rec_ops, &r, &err);
    assert_non_null(r.link);
    RUN_UNTIL(&e, r.down, 2);
    assert_non_null(strstr(r.why, "DNS"));
    /* stcp without TLS / TLS without stcp: refused at once */
    assert_null(cj_link_connect(e.base, NULL, "stcp://127.0.0.1:1", NULL, &c, &rec_ops, &r, &err));
    env_done(&e);
}

/* A passive link and a raw socket playing the active side. */
struct raw_env {
    struct env e;
    int raw;
    struct rec r;
};

static void raw_setup(struct raw_env *x, const struct cj_link_cfg *cfg)
{
    env_init(&x->e);
    int sv[2];
    pair(sv);
    memset(&x->r, 0, sizeof x->r);
    struct cj_err err;
    x->r.link = cj_link_accept(x->e.base, sv[1], NULL, "raw", cfg, &rec_ops, &x->r, &err);
    assert_non_null(x->r.link);
    x->raw = sv[0];
}

static void raw_handshake(struct raw_env *x, const char *name)
{
    uint8_t buf[256];
    raw_hello(&x->e, x->raw, CJ_FRAME_HELLO, name);
    long n = raw_read_frame(x->e.base, x->raw, buf, sizeof buf, 2);
    assert_true(n > CJ_FRAME_PREFIX_LEN);
    assert_int_equal(buf[6], CJ_FRAME_READY);
    struct cj_frame_hello h;
    assert_int_equal(cj_frame_hello_decode(buf + 16, (size_t)n - 16, &h, NULL), 0);
    assert_string_equal(h.endpoint_name, "site-1.J1");
    assert_int_equal(x->r.up, 1);
}

static void raw_teardown(struct raw_env *x)
{
    close(x->raw);
    rec_free_link(&x->r);
    env_done(&x->e);
}

static void expect_refused(const char *name, bool refuse_in_callback, const char *why_part)
{
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    x.r.refuse = refuse_in_callback;
    raw_hello(&x.e, x.raw, CJ_FRAME_HELLO, name);
    assert_true(raw_eof(&x.e, x.raw, 2));
    assert_int_equal(x.r.up, 0);
    assert_int_equal(x.r.down, 1);
    assert_non_null(strstr(x.r.why, "HELLO refused"));
    assert_non_null(strstr(x.r.why, why_part));
    raw_teardown(&x);
}

static void test_hello_refused(void **state)
{
    (void)state;
    expect_refused("bad name", false, "not a valid FQCN");
    expect_refused("site-1.site-1", false, "not a valid FQCN");
    expect_refused("site-1.J1", false, "our own name");
    expect_refused("site-2.J1.w", true, "test refuses site-2.J1.w");
}

static void test_data_before_handshake(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    size_t n;
    uint8_t *f = tu_read_vector("frames/cap25_dl_req_at_trainer_link.bin", &n);
    raw_write(x.e.base, x.raw, f, n);
    assert_true(raw_eof(&x.e, x.raw, 2));
    assert_int_equal(x.r.nmsgs, 0);
    assert_non_null(strstr(x.r.why, "before the handshake"));
    free(f);
    raw_teardown(&x);
}

static void test_handshake_timeout(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    c.handshake_timeout = 0.15;
    raw_setup(&x, &c);
    assert_true(raw_eof(&x.e, x.raw, 2));
    assert_non_null(strstr(x.r.why, "handshake not completed"));
    assert_non_null(strstr(x.r.why, "HELLO"));
    raw_teardown(&x);
}

static void test_ping_pong(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    size_t n;
    uint8_t *ping = tu_read_vector("frames/cap75_ping.bin", &n);
    assert_int_equal(n, 17);
    uint8_t buf[64];
    for (int i = 0; i < 3; i++) {
        raw_write(x.e.base, x.raw, ping, n);
        long got = raw_read_frame(x.e.base, x.raw, buf, sizeof buf, 2);
        assert_int_equal(got, 17);
        assert_int_equal(buf[6], CJ_FRAME_PONG);
        assert_int_equal(buf[16], 0xc0);
        assert_int_equal(buf[11], 0);              /* app_id 0 */
    }
    assert_int_equal(cj_link_counters(x.r.link)->pings_in, 3);
    assert_int_equal(cj_link_counters(x.r.link)->pongs_out, 3);
    /* FRAG is logged and dropped; the link stays */
    uint8_t frag[17];
    memcpy(frag, ping, 17);
    frag[6] = CJ_FRAME_FRAG;
    raw_write(x.e.base, x.raw, frag, 17);
    raw_write(x.e.base, x.raw, ping, 17);
    assert_int_equal(raw_read_frame(x.e.base, x.raw, buf, sizeof buf, 2), 17);
    assert_int_equal(cj_link_counters(x.r.link)->frames_dropped, 1);
    assert_int_equal(cj_link_get_state(x.r.link), CJ_LINK_UP);
    free(ping);
    raw_teardown(&x);
}

/* One frame written a byte at a time (the loop running between bytes) is
 * delivered once, whole. */
static void test_frame_split_across_writes(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    size_t n;
    uint8_t *f = tu_read_vector("frames/cap25_dl_req_at_trainer_link.bin", &n);
    for (size_t i = 0; i < n; i++) {
        raw_write(x.e.base, x.raw, f + i, 1);
        event_base_loop(x.e.base, EVLOOP_NONBLOCK);
        if (i + 1 < n) assert_int_equal(x.r.nmsgs, 0);
    }
    RUN_UNTIL(&x.e, x.r.nmsgs == 1, 2);
    env_spin(&x.e, 0.02);
    assert_int_equal(x.r.nmsgs, 1);
    struct cj_msg *m = x.r.msgs[0];
    assert_int_equal(m->hlen, 533);
    assert_memory_equal(m->hblk, f + 16, 533);
    assert_int_equal(evbuffer_get_length(m->payload), 73);
    assert_memory_equal(evbuffer_pullup(m->payload, -1), f + 16 + 533, 73);
    assert_string_equal(m->hdr.origin, "site-1.J1.trainer_1");
    free(f);
    raw_teardown(&x);
}

/* A whole captured trainer -> relay byte stream (HELLO + 15 DATA frames), fed
 * in 7-byte pieces. */
static void test_captured_stream(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    size_t n;
    uint8_t *s = tu_read_vector("frames/stream_trainer_to_cj.bin", &n);
    for (size_t i = 0; i < n; i += 7) {
        raw_write(x.e.base, x.raw, s + i, n - i < 7 ? n - i : 7);
        event_base_loop(x.e.base, EVLOOP_NONBLOCK);
    }
    RUN_UNTIL(&x.e, x.r.nmsgs == 15, 2);
    assert_int_equal(x.r.up, 1);
    assert_int_equal(x.r.nmsgs, 15);
    assert_int_equal(cj_link_counters(x.r.link)->bytes_in, n);
    free(s);
    raw_teardown(&x);
}

static void test_malformed_and_missing_headers(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    /* a map without cn__origin: dropped, link kept */
    uint8_t f1[64];
    const uint8_t map[] = {0x81, 0xa1, 'a', 0x01};
    struct cj_frame_prefix p = {.length = 16 + sizeof map, .header_len = sizeof map, .type = CJ_FRAME_DATA,
                                .app_id = 1, .stream_id = 17, .sequence = 2};
    cj_frame_prefix_encode(&p, f1);
    memcpy(f1 + 16, map, sizeof map);
    raw_write(x.e.base, x.raw, f1, p.length);
    RUN_UNTIL(&x.e, cj_link_counters(x.r.link)->frames_dropped == 1, 2);
    assert_int_equal(cj_link_counters(x.r.link)->frames_dropped, 1);
    assert_int_equal(cj_link_get_state(x.r.link), CJ_LINK_UP);
    /* not a map: the link closes, naming the problem */
    const uint8_t junk[] = {0x01, 0x02, 0x03};
    p.length = 16 + sizeof junk;
    p.header_len = sizeof junk;
    cj_frame_prefix_encode(&p, f1);
    memcpy(f1 + 16, junk, sizeof junk);
    raw_write(x.e.base, x.raw, f1, p.length);
    assert_true(raw_eof(&x.e, x.raw, 2));
    assert_non_null(strstr(x.r.why, "malformed header block"));
    /* an oversized frame length is refused at the prefix */
    raw_teardown(&x);

    c.max_frame = 4096;
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    p.length = 5000;
    p.header_len = 10;
    cj_frame_prefix_encode(&p, f1);
    raw_write(x.e.base, x.raw, f1, 16);
    assert_true(raw_eof(&x.e, x.raw, 2));
    assert_non_null(strstr(x.r.why, "malformed frame"));
    raw_teardown(&x);
}

static void test_heartbeat_and_dead_peer(void **state)
{
    (void)state;
    /* two links with a short interval keep each other alive with PING/PONG */
    struct env e;
    env_init(&e);
    int sv[2];
    pair(sv);
    struct rec ra = {0}, rp = {0};
    struct cj_err err;
    struct cj_link_cfg ca = cfg_named("a", "site-1.J1.w1"), cp = cfg_named("p", "site-1.J1");
    ca.heartbeat_interval = cp.heartbeat_interval = 0.05;
    ca.dead_after = cp.dead_after = 0.3;
    ra.link = cj_link_attach(e.base, sv[0], true, NULL, NULL, &ca, &rec_ops, &ra, &err);
    rp.link = cj_link_accept(e.base, sv[1], NULL, NULL, &cp, &rec_ops, &rp, &err);
    env_spin(&e, 0.6);
    assert_int_equal(ra.down + rp.down, 0);
    assert_true(cj_link_counters(ra.link)->pings_out >= 2);
    assert_true(cj_link_counters(ra.link)->pongs_in >= 1);
    rec_free_link(&ra);
    rec_free_link(&rp);
    env_done(&e);

    /* a peer that goes silent after the handshake is declared dead */
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    c.heartbeat_interval = 0.05;
    c.dead_after = 0.2;
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    uint8_t buf[64];
    long got = raw_read_frame(x.e.base, x.raw, buf, sizeof buf, 1);   /* it PINGs us first */
    assert_int_equal(got, 17);
    assert_int_equal(buf[6], CJ_FRAME_PING);
    RUN_UNTIL(&x.e, x.r.down, 2);
    assert_non_null(strstr(x.r.why, "presumed dead"));
    raw_teardown(&x);
}

/* Bulk frames queue behind the link; a control frame sent after many of them
 * reaches the wire ahead of most. */
static void test_control_overtakes_bulk(void **state)
{
    (void)state;
    struct raw_env x;
    struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
    raw_setup(&x, &c);
    raw_handshake(&x, "site-1.J1.trainer_1");
    enum { NBULK = 40, CHUNK = 64 * 1024 };
    static char big[CHUNK];
    memset(big, 'b', sizeof big);
    for (int i = 0; i < NBULK; i++) {
        struct evbuffer *p = evbuffer_new();
        evbuffer_add(p, big, sizeof big);
        struct cj_msg *m = make_msg("site-1.J1", "site-1.J1.trainer_1", "site-1.J1.trainer_1", "x");
        assert_int_equal(cj_link_send(x.r.link, m->hblk, m->hlen, p, false), 0);
        assert_int_equal(evbuffer_get_length(p), 0);      /* moved */
        evbuffer_free(p);
        cj_msg_free(m);
    }
    size_t q = cj_link_queued(x.r.link);
    assert_true(q > (size_t)NBULK * CHUNK);
    struct cj_msg *ctl = make_msg("site-1.J1", "site-1.J1.trainer_1", "site-1.J1.trainer_1", "CONTROL");
    assert_int_equal(cj_link_send_msg(x.r.link, ctl, true), 0);
    /* read everything back: where is the control frame? */
    static uint8_t buf[CHUNK + 4096];
    int pos = -1, frames = 0;
    uint16_t last_seq = 1;   /* READY had sequence 1 */
    for (;;) {
        long n = raw_read_frame(x.e.base, x.raw, buf, sizeof buf, 2);
        assert_true(n > 0);
        uint16_t seq = (uint16_t)(buf[14] << 8 | buf[15]);
        assert_int_equal(seq, (uint16_t)(last_seq + 1));   /* sequence in wire order */
        last_seq = seq;
        if (n < 4096) pos = frames;
        frames++;
        if (frames == NBULK + 1) break;
    }
    assert_true(pos >= 0);
    /* behind at most WIRE_LOW + one frame of bulk */
    assert_true(pos <= (int)(CJ_LINK_WIRE_LOW / CHUNK) + 2);
    raw_teardown(&x);
}

/* Mutated copies of a real frame (bytes flipped anywhere, prefix included):
 * each is delivered, dropped or closes the link with a reason; never a crash
 * (this runs under ASan/UBSan in make check). */
static void test_mutated_frames(void **state)
{
    (void)state;
    size_t n;
    uint8_t *f = tu_read_vector("frames/cap25_dl_req_at_trainer_link.bin", &n);
    uint8_t *g = malloc(n);
    unsigned seed = 12345;
    int delivered = 0, closed = 0, dropped = 0;
    for (int it = 0; it < 60; it++) {
        memcpy(g, f, n);
        int flips = 1 + (int)(rand_r(&seed) % 4);
        for (int k = 0; k < flips; k++) g[rand_r(&seed) % n] ^= (uint8_t)(1 + rand_r(&seed) % 255);
        struct raw_env x;
        struct cj_link_cfg c = cfg_named("worker", "site-1.J1");
        c.max_frame = 1 << 20;
        raw_setup(&x, &c);
        raw_handshake(&x, "site-1.J1.trainer_1");
        raw_write(x.e.base, x.raw, g, n);
        RUN_UNTIL(&x.e, x.r.nmsgs || x.r.down || cj_link_counters(x.r.link)->frames_dropped, 0.05);
        if (x.r.nmsgs) delivered++;
        else if (x.r.down) closed++;
        else dropped++;
        raw_teardown(&x);
    }
    fprintf(stderr, "mutated frames: %d delivered, %d dropped or waiting, %d closed the link\n", delivered, dropped,
            closed);
    assert_true(closed > 0);
    free(g);
    free(f);
}

/* ---- TLS ----------------------------------------------------------------------------- */

static char cert_dir[64];
static bool have_certs;

static int tls_group_setup(void **state)
{
    (void)state;
    snprintf(cert_dir, sizeof cert_dir, "/tmp/cj_test_tls.XXXXXX");
    if (!mkdtemp(cert_dir)) return -1;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "sh tests/unit/tls_certs.sh %s", cert_dir);
    have_certs = system(cmd) == 0;
    if (!have_certs) fprintf(stderr, "tls_certs.sh failed (is openssl installed?): TLS tests skipped\n");
    return 0;
}

static int tls_group_teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cert_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *cf(const char *name)
{
    static char paths[8][160];
    static int i;
    char *p = paths[i++ % 8];
    snprintf(p, 160, "%s/%s", cert_dir, name);
    return p;
}

/* When set, tls_run's client loads these texts (ca, cert, key) in place of its files. */
static const struct cj_tls_pem *const *run_pem;

struct tls_result {
    int client_up, server_up;
    char client_why[1024], server_why[1024];
    char *log;
};

/* Server requires a client cert signed by rootCA (when require); the client
 * uses (ca, cert, key); the result says who came up and why links closed. */
static void tls_run(int mode, const char *ca, const char *cert, const char *key, bool require, struct tls_result *res)
{
    struct env e;
    struct cj_err err;
    env_init(&e);
    memset(res, 0, sizeof *res);
    memset(&srv_rec, 0, sizeof srv_rec);
    srv_cfg = cfg_named("sim", "server");
    srv_base = e.base;
    srv_tls = cj_tls_server_ctx(cf("server.crt"), cf("server.key"), cf("rootCA.pem"), require, &err);
    assert_non_null(srv_tls);
    struct cj_tls_client_opts o = {.mode = mode, .ca_file = ca, .cert_file = cert, .key_file = key};
    if (run_pem) {
        o.ca_pem = run_pem[0];
        o.cert_pem = run_pem[1];
        o.key_pem = run_pem[2];
    }
    SSL_CTX *cli = cj_tls_client_ctx(&o, &err);
    if (!cli) fail_msg("client ctx: %s", err.msg);
    struct cj_addr a;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    struct cj_listener *lst = cj_listener_open(e.base, &a, 0, srv_accept, NULL, &err);
    char url[64];
    snprintf(url, sizeof url, "stcp://127.0.0.1:%u", cj_listener_port(lst));
    struct rec rc = {0};
    struct cj_link_cfg cc = cfg_named("upstream", "site-1.J1");
    tu_logcap_begin();
    rc.link = cj_link_connect(e.base, NULL, url, cli, &cc, &rec_ops, &rc, &err);
    assert_non_null(rc.link);
    RUN_UNTIL(&e, (rc.up && srv_rec.up) || (rc.down && (srv_rec.down || !srv_rec.link)), 3);
    env_spin(&e, 0.05);
    res->log = tu_logcap_end();
    res->client_up = rc.up && !rc.down;
    res->server_up = srv_rec.up && !srv_rec.down;
    snprintf(res->client_why, sizeof res->client_why, "%s", rc.why);
    snprintf(res->server_why, sizeof res->server_why, "%s", srv_rec.why);
    if (res->client_up) {
        assert_true(cj_link_is_tls(rc.link));
        assert_int_equal(cj_link_send_msg(rc.link, make_msg("site-1.J1", "server", "server", "over tls"), true), 0);
        RUN_UNTIL(&e, srv_rec.nmsgs == 1, 2);
        assert_int_equal(srv_rec.nmsgs, 1);
        assert_true(payload_is(srv_rec.msgs[0], "over tls"));
    }
    rec_free_link(&rc);
    rec_free_link(&srv_rec);
    cj_listener_free(lst);
    env_done(&e);
    cj_tls_ctx_free(cli);
    cj_tls_ctx_free(srv_tls);
    srv_tls = NULL;
}

static void tls_expect_refused(struct tls_result *res, const char *client_text)
{
    assert_false(res->client_up);
    if (!strstr(res->client_why, client_text)) fail_msg("client why: %s", res->client_why);
    /* the failure is in the log, with the link name */
    char needle[160];
    snprintf(needle, sizeof needle, "link upstream (stcp://127.0.0.1:");
    const char *line = strstr(res->log, needle);
    assert_non_null(line);
    assert_non_null(strstr(res->log, client_text));
    free(res->log);
}

static void test_tls_mtls_ok(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct tls_result res;
    /* client.key is "BEGIN RSA PRIVATE KEY", server.key "BEGIN PRIVATE KEY" */
    tls_run(CJ_TLS_MUTUAL, cf("rootCA.pem"), cf("client.crt"), cf("client.key"), true, &res);
    assert_true(res.client_up);
    assert_true(res.server_up);
    assert_non_null(strstr(res.log, "TLS established"));
    assert_non_null(strstr(res.log, "peer CN=server"));
    free(res.log);
    /* tls (verify only) against a server that asks for no client cert */
    tls_run(CJ_TLS_VERIFY, cf("rootCA.pem"), NULL, NULL, false, &res);
    assert_true(res.client_up);
    free(res.log);
}

static void test_tls_wrong_ca(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct tls_result res;
    /* client cert signed by another CA: the server refuses it */
    tls_run(CJ_TLS_MUTUAL, cf("rootCA.pem"), cf("wrong.crt"), cf("client.key"), true, &res);
    tls_expect_refused(&res, "unknown ca");
    assert_false(res.server_up);
    /* the server's certificate does not verify against our ca_file */
    tls_run(CJ_TLS_MUTUAL, cf("wrongCA.pem"), cf("client.crt"), cf("client.key"), true, &res);
    tls_expect_refused(&res, "certificate verify failed");
    assert_false(res.server_up);
}

static void test_tls_expired_client_cert(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct tls_result res;
    tls_run(CJ_TLS_MUTUAL, cf("rootCA.pem"), cf("expired.crt"), cf("client.key"), true, &res);
    tls_expect_refused(&res, "certificate expired");
    assert_false(res.server_up);
    if (!strstr(res.server_why, "expired")) fail_msg("server why: %s", res.server_why);
}

static void test_tls_missing_client_cert(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct tls_result res;
    tls_run(CJ_TLS_VERIFY, cf("rootCA.pem"), NULL, NULL, true, &res);
    tls_expect_refused(&res, "certificate required");
    assert_false(res.server_up);
}

static void test_tls_bad_files(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct cj_err err;
    struct cj_tls_client_opts o = {.mode = CJ_TLS_MUTUAL, .ca_file = cf("rootCA.pem"), .cert_file = cf("client.crt"),
                                   .key_file = cf("server.key")};
    assert_null(cj_tls_client_ctx(&o, &err));
    fprintf(stderr, "mismatched key: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "server.key"));
    assert_non_null(strstr(err.msg, "mismatch"));
    o.ca_file = cf("nope.pem");
    assert_null(cj_tls_client_ctx(&o, &err));
    assert_non_null(strstr(err.msg, "nope.pem"));
}

/* A certificate file's text, as a job start reads one from an open file. */
static struct cj_tls_pem pem_of(const char *name, char *buf, size_t size, const char *label)
{
    FILE *f = fopen(cf(name), "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (struct cj_tls_pem){buf, n, label};
}

/* The TLS files' texts in memory (files passed as descriptors): the same
 * handshakes and refusals as with the files, no path opened. */
static void test_tls_from_memory(void **state)
{
    (void)state;
    if (!have_certs) skip();
    static char ca[8192], cert[16384], key[8192], other[8192];
    struct cj_tls_pem p[3] = {pem_of("rootCA.pem", ca, sizeof ca, "fd:ca"), pem_of("client.crt", cert, sizeof cert, "fd:crt"),
                              pem_of("client.key", key, sizeof key, "fd:key")};
    const struct cj_tls_pem *set[3] = {&p[0], &p[1], &p[2]};
    struct tls_result res;
    run_pem = set;
    tls_run(CJ_TLS_MUTUAL, "/nonexistent/ca", "/nonexistent/crt", "/nonexistent/key", true, &res);
    assert_true(res.client_up);
    assert_true(res.server_up);
    free(res.log);
    /* a chain after the leaf, as SSL_CTX_use_certificate_chain_file takes it */
    size_t n = strlen(cert);
    snprintf(cert + n, sizeof cert - n, "%s", ca);
    p[1].len = strlen(cert);
    tls_run(CJ_TLS_MUTUAL, NULL, NULL, NULL, true, &res);
    assert_true(res.client_up);
    free(res.log);
    /* an expired certificate is the server's to refuse, as from a file */
    p[1] = pem_of("expired.crt", cert, sizeof cert, "fd:crt");
    tls_run(CJ_TLS_MUTUAL, NULL, NULL, NULL, true, &res);
    tls_expect_refused(&res, "certificate expired");
    run_pem = NULL;
    /* a key that does not match, text that is no PEM: refused, named by the texts' names */
    struct cj_err err;
    p[1] = pem_of("client.crt", cert, sizeof cert, "fd:crt");
    p[2] = pem_of("server.key", other, sizeof other, "fd:key");
    struct cj_tls_client_opts o = {.mode = CJ_TLS_MUTUAL, .ca_pem = &p[0], .cert_pem = &p[1], .key_pem = &p[2]};
    assert_null(cj_tls_client_ctx(&o, &err));
    if (!strstr(err.msg, "fd:key") || !strstr(err.msg, "mismatch")) fail_msg("mismatch: %s", err.msg);
    p[2] = (struct cj_tls_pem){"not a key", 9, "fd:key"};
    assert_null(cj_tls_client_ctx(&o, &err));
    if (!strstr(err.msg, "cannot load private key fd:key")) fail_msg("no key: %s", err.msg);
    p[0] = (struct cj_tls_pem){"", 0, "fd:ca"};
    assert_null(cj_tls_client_ctx(&o, &err));
    if (!strstr(err.msg, "cannot load CA file fd:ca")) fail_msg("no CA: %s", err.msg);
}

/* A server that accepts TCP but never answers the TLS handshake (FLARE's
 * single-threaded accept can look like this): our handshake time is bounded. */
static void test_tls_handshake_timeout(void **state)
{
    (void)state;
    if (!have_certs) skip();
    struct env e;
    struct cj_err err;
    env_init(&e);
    struct cj_addr a;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    struct cj_listener *lst = cj_listener_open(e.base, &a, 0, keep_fd, NULL, &err);
    struct cj_tls_client_opts o = {.mode = CJ_TLS_MUTUAL, .ca_file = cf("rootCA.pem"), .cert_file = cf("client.crt"),
                                   .key_file = cf("client.key")};
    SSL_CTX *cli = cj_tls_client_ctx(&o, &err);
    assert_non_null(cli);
    char url[64];
    snprintf(url, sizeof url, "stcp://127.0.0.1:%u", cj_listener_port(lst));
    struct rec r = {0};
    struct cj_link_cfg c = cfg_named("upstream", "site-1.J1");
    c.handshake_timeout = 0.2;
    r.link = cj_link_connect(e.base, NULL, url, cli, &c, &rec_ops, &r, &err);
    assert_non_null(r.link);
    RUN_UNTIL(&e, r.down, 2);
    assert_int_equal(r.down, 1);
    assert_non_null(strstr(r.why, "TLS handshake"));
    if (accepted_fd >= 0) close(accepted_fd);
    accepted_fd = -1;
    cj_listener_free(lst);
    env_done(&e);
    cj_tls_ctx_free(cli);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_parse),
        cmocka_unit_test(test_listener_unix_stale_and_live),
        cmocka_unit_test(test_handshake_socketpair),
        cmocka_unit_test(test_handshake_tcp_and_unix),
        cmocka_unit_test(test_connect_refused_and_unresolvable),
        cmocka_unit_test(test_hello_refused),
        cmocka_unit_test(test_data_before_handshake),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_ping_pong),
        cmocka_unit_test(test_frame_split_across_writes),
        cmocka_unit_test(test_captured_stream),
        cmocka_unit_test(test_malformed_and_missing_headers),
        cmocka_unit_test(test_heartbeat_and_dead_peer),
        cmocka_unit_test(test_control_overtakes_bulk),
        cmocka_unit_test(test_mutated_frames),
        cmocka_unit_test(test_tls_mtls_ok),
        cmocka_unit_test(test_tls_wrong_ca),
        cmocka_unit_test(test_tls_expired_client_cert),
        cmocka_unit_test(test_tls_missing_client_cert),
        cmocka_unit_test(test_tls_bad_files),
        cmocka_unit_test(test_tls_from_memory),
        cmocka_unit_test(test_tls_handshake_timeout),
    };
    return cmocka_run_group_tests_name("link", tests, tls_group_setup, tls_group_teardown);
}
