/* SPDX-License-Identifier: Apache-2.0 */
/* test_stream_reqrep.c — the sm__ streaming layer, request and reply: a
 * request answered with a blob reply, request errors and timeouts, the
 * authentication headers a request carries, and edges of the API. */
#include "streamfix.h"

/* ---- tests --------------------------------------------------------------------------------------- */

static void test_request_reply(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;   /* a multi-chunk reply */
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B], .mode = H_ECHO, .reply_len = 3 * KiB + 1 };
    struct rep p = { 0 };
    char ri[CJ_STREAM_RI_LEN + 1];
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", rec_handler, &r), 0);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "echo", &m, blob_of(500, 8), 1.0,
                                       on_reply, &p, NULL, ri),
                     0);
    assert_int_equal(strlen(ri), 36);
    assert_int_equal(ri[14], '4');
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "ok");
    assert_string_equal(p.enc, "fobs");
    assert_int_equal(p.len, 3 * KiB + 1);
    assert_true(data_is(p.data, p.len, 7));
    /* the request carried sm__ri; the responder saw it */
    assert_true(r.req.has_ri);
    assert_string_equal(r.req.ri, ri);
    assert_string_equal(r.req.origin, NAMES[A]);
    assert_int_equal(r.len, 500);
    assert_true(data_is(r.data, 500, 8));
    /* reply headers (first chunk) */
    struct cj_hdr h;
    memnet_decode(&h, p.hblk, p.hlen);
    assert_string_equal(h.sm_ch, "return_only");
    assert_string_equal(h.sm_tp, "server_command:echo");
    assert_string_equal(h.sm_ri, ri);
    assert_string_equal(h.req_id, "");
    assert_true(cj_hdr_has(&h, CJ_HK_REQ_ID));
    assert_string_equal(h.return_code, "ok");
    assert_int_equal(h.msg_type, CJ_MSG_REQ);
    assert_int_equal(h.sm_sq, 0);
    assert_true(h.sm_op);
    assert_true(h.optional);
    /* A ACKed the reply (4 chunks, final ACK covers it) */
    RUN_UNTIL(n, cap_count(n, A, "sm__ACK", 3) >= 1, 0.5);
    int i = cap_find(n, A, "sm__ACK", 3, cap_count(n, A, "sm__ACK", 3) - 1);
    cap_hdr(n, i, &h);
    assert_int_equal(h.sm_os, 3 * KiB + 1);
    assert_int_equal(h.sm_sq, 3);
    assert_string_equal(h.destination, NAMES[B]);
    check_acks_complete(n, A);
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.requests, 0);

    /* a reply with another return code */
    r.reply_rc = "process_exception";
    r.reply_len = 10;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(5, 1), 1.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_string_equal(p.rc, "process_exception");
    assert_int_equal(p.len, 10);

    /* a reply nobody waits for is received, ACKed and discarded */
    struct spec s = { .origin = NAMES[B], .id = 4242, .sz = 10, .dt = CJ_SM_FINAL, .ch = "return_only",
                      .tp = "server_command:echo", .ri = "00000000-0000-4000-8000-000000000000" };
    uint8_t c[10] = { 0 };
    int acks = cap_count(n, A, "sm__ACK", 3);
    inject(n, A, &s, c, 10);
    assert_int_equal(cap_count(n, A, "sm__ACK", 3), acks + 1);
    assert_int_equal(p.n, 2);
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

static void test_request_errors(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B], .mode = H_FAIL };
    struct rep p = { 0 };
    char ri[CJ_STREAM_RI_LEN + 1];
    double t0 = memnet_now();

    /* no handler at the target: receiver error notice -> comm_error */
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "nothing", NULL, blob_of(10, 1), 1.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "no handler"));
    assert_true(memnet_now() - t0 < 0.5);
    assert_int_equal(cap_count(n, B, "sm__ERROR", 6), 1);
    assert_int_equal(cap_count(n, B, "sm__ACK", 6), 1);

    /* the handler fails: the notice carries its reason */
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "bad", rec_handler, &r), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "bad", NULL, blob_of(10, 1), 1.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "cannot decode the request"));

    /* notices for a pending request: ignored from a stranger, accepted from a
     * forwarder that names the target in sm__fd */
    r.mode = H_SILENT;
    uint64_t handle = 0;
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "slow", rec_handler, &r), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "slow", NULL, blob_of(10, 1), 1.0,
                                       on_reply, &p, &handle, ri),
                     0);
    settle(n, 0.02);
    inject_notice(n, A, "evil.cell", "sm__ERROR", 1, ri, "spoofed", NULL);
    assert_int_equal(p.n, 2);
    inject_notice(n, A, "site-1", "sm__ERROR", 1, ri, "stream forwarding to server.J1 failed: x", NAMES[B]);
    assert_int_equal(p.n, 3);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "forwarding"));

    /* cancelled: no callback */
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "slow", NULL, blob_of(10, 1), 0.05,
                                       on_reply, &p, &handle, NULL),
                     0);
    assert_int_equal(cj_stream_request_cancel(n->ep[A], handle), 0);
    assert_int_equal(cj_stream_request_cancel(n->ep[A], handle), -1);
    settle(n, 0.1);
    assert_int_equal(p.n, 3);

    /* a reply the requester cannot take (over its max_blob) fails the request at once */
    cj_stream_free(n->ep[A]);
    struct cj_stream_limits la = small_limits();
    la.max_blob = 100;
    n->ep[A] = cj_stream_new(n->base, NAMES[A], &(struct cj_stream_io){ .ctx = &n->port[A], .send = memnet_send }, &la);
    r.mode = H_ECHO;
    r.reply_len = 101;
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "big", rec_handler, &r), 0);
    t0 = memnet_now();
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "big", NULL, blob_of(10, 1), 1.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 4, 1.0);
    assert_int_equal(p.n, 4);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "exceeds limit"));
    assert_true(memnet_now() - t0 < 0.5);

    /* no route: the request stream fails -> comm_error */
    n->no_route = true;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "slow", NULL, blob_of(10, 1), 1.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 5, 1.0);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "no route"));
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

/* Drops return_only chunks after the first (the reply stalls). */
static enum memnet_act stall_reply(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    if (strcmp(h->topic, "sm__DATA") == 0 && strcmp(h->sm_ch, "return_only") == 0 && h->sm_sq > 0) return MEMNET_DROP;
    return MEMNET_DELIVER;
}

static enum memnet_act drop_acks(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return strcmp(h->topic, "sm__ACK") == 0 ? MEMNET_DROP : MEMNET_DELIVER;
}

static void test_timeouts(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;
    lim[B].rx_idle = 0.1;
    lim[A].chunk_size = KiB;
    lim[A].window = KiB;
    lim[A].ack_interval = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B], .mode = H_SILENT };
    struct rep p = { 0 };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "silent", rec_handler, &r), 0);

    /* stage 2: the target never replies */
    double t0 = memnet_now();
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "silent", NULL, blob_of(10, 1), 0.1, on_reply, &p,
                                       NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "timeout");
    assert_non_null(strstr(p.err, "waiting for the reply"));
    assert_true(memnet_now() - t0 >= 0.09);

    /* stage 1: the request is blocked by the window (ACKs lost) */
    n->filter = drop_acks;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "silent", NULL, blob_of(10 * KiB, 1), 0.1,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_string_equal(p.rc, "timeout");
    assert_non_null(strstr(p.err, "sending the request"));
    settle(n, 0.02);
    assert_int_equal(cap_count(n, A, "sm__DATA", CJ_SM_ERROR), 1);   /* the stream was abandoned */

    /* stage 3: the reply stalls after its first chunk */
    n->filter = stall_reply;
    r.mode = H_ECHO;
    r.reply_len = 4 * KiB;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "silent", NULL, blob_of(10, 1), 0.15, on_reply,
                                       &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 3, 1.0);
    assert_string_equal(p.rc, "timeout");
    assert_non_null(strstr(p.err, "receiving the reply"));

    /* receiver idle timeout: B gets chunk 0 of 2 and nothing more */
    n->filter = NULL;
    uint8_t c[10] = { 0 };
    struct spec s = { .origin = "x.peer", .id = 5, .sz = 20, .ch = "app", .tp = "silent" };
    inject(n, B, &s, c, 10);
    int before = n->n_caps;
    RUN_UNTIL(n, n->n_caps > before, 1.0);
    assert_int_equal(n->n_caps, before + 2);   /* on sm__ERROR and sm__ACK */
    struct cj_hdr h;
    cap_hdr(n, before, &h);
    assert_string_equal(h.topic, "sm__ERROR");
    assert_string_equal(h.destination, "x.peer");
    assert_int_equal(h.sm_id, 5);
    assert_true(em_has(&h, "no data for"));
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_buffered, 0);
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

static void test_auth_headers(void **state)
{
    const char *names[] = { "site-1.J1", "server.J1", "site-1.J1.w1" };
    struct memnet *n = memnet_new(3, names, NULL);
    struct rec rb = { .ep = n->ep[B] }, rc = { .ep = n->ep[C] }, ra = { .ep = n->ep[A] };
    const struct cj_stream_kv auth[] = {
        { "client_name", "site-1" }, { "ssid", "ssid-1" }, { "__token__", "tok" }, { "__token_signature__", "sig" },
    };
    const char *keys[] = { "client_name", "ssid", "__token__", "__token_signature__" };
    assert_int_equal(cj_stream_set_auth(n->ep[A], auth, 4), 0);
    const struct cj_stream_kv bad[] = { { "sm__id", "x" } };
    assert_int_equal(cj_stream_set_auth(n->ep[A], bad, 1), -1);
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &rb), 0);
    assert_int_equal(cj_stream_on(n->ep[C], "app", "blob", rec_handler, &rc), 0);
    assert_int_equal(cj_stream_on(n->ep[A], "app", "blob", rec_handler, &ra), 0);

    /* an application header, one of them also an auth key: kept once */
    static const uint8_t demo[] = { 0xa4, 'd', 'e', 'm', 'o' }, site9[] = { 0xa6, 's', 'i', 't', 'e', '-', '9' };
    const struct cj_stream_hv app[] = { { "x-app", demo, sizeof demo }, { "client_name", site9, sizeof site9 } };
    struct cj_stream_msg m = { .hdrs = app, .n_hdrs = 2 };
    assert_int_equal(cj_stream_send(n->ep[A], names[B], "app", "blob", &m, NULL, blob_of(10, 0), NULL, NULL, NULL),
                     0);
    assert_int_equal(cj_stream_send(n->ep[A], names[C], "app", "blob", &m, NULL, blob_of(10, 0), NULL, NULL, NULL),
                     0);
    /* B (server.*) streams to A: A's ACK to the server carries auth; A's error notice too */
    assert_int_equal(cj_stream_send(n->ep[B], names[A], "app", "blob", NULL, NULL, blob_of(10, 0), NULL, NULL, NULL),
                     0);
    assert_int_equal(cj_stream_send(n->ep[B], names[A], "app", "nohandler", NULL, NULL, blob_of(10, 0), NULL, NULL,
                                    NULL),
                     0);
    /* C (a worker) streams to A: A's ACK to the worker has no auth */
    assert_int_equal(cj_stream_send(n->ep[C], names[A], "app", "blob", NULL, NULL, blob_of(10, 0), NULL, NULL, NULL),
                     0);
    RUN_UNTIL(n, rb.n == 1 && rc.n == 1 && ra.n == 2 && cap_count(n, A, "sm__ERROR", 6) == 1, 1.0);
    assert_int_equal(ra.n, 2);

    int seen_server = 0, seen_other = 0;
    for (int i = 0; i < n->n_caps; i++) {
        if (n->caps[i].from != A) continue;
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        bool to_server = strcmp(h.destination, names[B]) == 0;
        bool data = strcmp(h.topic, "sm__DATA") == 0;
        for (int k = 0; k < 4; k++) assert_int_equal(count_key(&h, keys[k]), to_server || (data && k == 0) ? 1 : 0);
        if (data) {
            assert_int_equal(count_key(&h, "x-app"), 1);
            /* the application's client_name wins over the auth one */
            assert_true(has_str(&h, "client_name", "site-9"));
        } else if (to_server) {
            assert_true(has_str(&h, "client_name", "site-1"));
            assert_true(has_str(&h, "__token__", "tok"));
        }
        if (to_server) seen_server++;
        else seen_other++;
    }
    /* to server: 1 chunk, 1 ACK, 2 error notices; to the worker: 1 chunk, 1 ACK */
    assert_int_equal(seen_server, 4);
    assert_int_equal(seen_other, 2);
    rec_clear(&ra);
    rec_clear(&rb);
    rec_clear(&rc);
    memnet_free(n);
}

static void test_api_edges(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct done d = { 0 };
    struct rep p = { 0 };
    /* return_only is for replies */
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "return_only", "x", NULL, NULL, evbuffer_new(), NULL, NULL,
                                    NULL),
                     -1);
    assert_int_equal(cj_stream_on(n->ep[A], "return_only", "x", rec_handler, NULL), -1);
    /* an application header that collides with a stream key */
    static const uint8_t one[] = { 0x01 };
    const struct cj_stream_hv bad[] = { { "sm__id", one, 1 } };
    struct cj_stream_msg m = { .hdrs = bad, .n_hdrs = 1 };
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "x", &m, NULL, evbuffer_new(), on_done, &d, NULL), -1);
    /* a reply needs sm__ri */
    struct cj_stream_reqctx rq = { .has_ri = false };
    assert_int_equal(cj_stream_reply(n->ep[A], &rq, "ok", NULL, evbuffer_new(), NULL, NULL), -1);
    /* ids never repeat */
    uint64_t a = cj_stream_next_id(n->ep[A]), b = cj_stream_next_id(n->ep[A]);
    assert_true(b > a);
    assert_true(a > 1000000000000000ull);
    /* cancel: no callback, the receiver is told */
    uint64_t id;
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "x", NULL, NULL, evbuffer_new(), on_done, &d, &id), 0);
    assert_int_equal(cj_stream_cancel(n->ep[A], id), 0);
    assert_int_equal(cj_stream_cancel(n->ep[A], id), -1);
    settle(n, 0.02);
    assert_int_equal(d.n, 0);
    /* closing the endpoint reports what is pending */
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "x", NULL, NULL, blob_of(10, 0), on_done, &d, NULL), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "x", NULL, blob_of(10, 0), 5.0, on_reply, &p, NULL,
                                       NULL),
                     0);
    cj_stream_free(n->ep[A]);
    n->ep[A] = NULL;
    assert_int_equal(d.n, 1);
    assert_int_equal(d.status, -1);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "comm_error");
    n->ep[A] = cj_stream_new(n->base, NAMES[A], &(struct cj_stream_io){ .ctx = &n->port[A], .send = memnet_send }, NULL);
    rep_clear(&p);
    memnet_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_reply),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_auth_headers),
        cmocka_unit_test(test_api_edges),
    };
    return cmocka_run_group_tests_name("stream_reqrep", tests, NULL, NULL);
}
