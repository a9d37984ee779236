/* SPDX-License-Identifier: Apache-2.0 */
/* test_stream_release.c — the sm__ layer against FLARE 2.7.2 / 2.8.x peers
 * (doc/protocol/streaming.md §11): what holds for every peer (ACKs without
 * sm__sq, no final ACK awaited, an ACK every 4 MiB and at most 16 chunks out of
 * order for a stream without sm__ai / sm__ws, an error notice without sm__ri
 * failing the request whose stream had its sm__id) and what
 * cj_stream_set_wire(ep, CJ_STREAM_WIRE_2_8) changes (receiver errors on
 * sm__ACK only, the window raised over the peer's ACK interval). */
#include "streamfix.h"

/* A 2.8.x receiver's ACK: sm__id, sm__dt 3, sm__os, no sm__sq. */
static void inject_ack28(struct memnet *n, int to, const char *origin, uint64_t id, uint64_t os)
{
    struct cj_hb b;
    msgpack_sbuffer out;
    struct cj_err e = { 0 };
    cj_hb_init(&b);
    msgpack_sbuffer_init(&out);
    cj_hb_uint(&b, "sm__id", id);
    cj_hb_int(&b, "sm__dt", 3);
    cj_hb_uint(&b, "sm__os", os);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .to = n->name[to], .destination = n->name[to], .channel = "sm__STREAM",
        .topic = "sm__ACK", .payload_encoding = "none", .payload_len = 0, .route_time = 1.0, .send_time = 1.0,
    };
    cj_hb_cellnet(&b, &m);
    assert_int_equal(cj_hb_finish(&b, &out, &e), 0);
    struct cj_hdr h;
    memnet_decode(&h, (const uint8_t *)out.data, out.size);
    cj_stream_input(n->ep[to], &h, NULL);
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&out);
}

static enum memnet_act drop_to_b(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return from == A ? MEMNET_DROP : MEMNET_DELIVER;
}

/* Every peer: ACKs without sm__sq move the window; the stream is done when its
 * FINAL chunk is handed on, without any final ACK. */
static void test_acks_without_sq(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].window = 8 * MiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct done d = { 0 };
    uint64_t id;
    n->filter = drop_to_b;   /* B plays no part: the ACKs are a 2.8.x receiver's, injected */
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(24 * MiB, 3), on_done, &d,
                                    &id),
                     0);
    settle(n, 0.05);
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 9);   /* sent - acked <= 8 MiB, then blocked */
    uint64_t os = 0;
    while (d.n == 0 && os < 24 * MiB) {
        os += 5 * MiB;   /* a 2.8.x receiver ACKs once more than 4 MiB were consumed */
        inject_ack28(n, A, NAMES[B], id, os > 24 * MiB ? 24 * MiB : os);
        settle(n, 0.02);
    }
    RUN_UNTIL(n, d.n == 1, 1.0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.status, 0);
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 24);
    /* not reliable */
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &h);
    assert_true(cj_hdr_has(&h, CJ_HK_SM_RS));
    assert_false(h.sm_rs);
    /* done after 15 MiB ACKed: the last chunks needed no ACK */
    assert_true(os < 24 * MiB);
    memnet_free(n);
}

/* Every peer: a stream without sm__ai / sm__ws is ACKed every 4 MiB consumed,
 * each ACK with an integer sm__os. */
static void test_ack_cadence_without_ai(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    uint8_t *c = malloc(MiB);
    fill(c, MiB, 5);
    const uint64_t chunks = 18;
    struct spec s = { .origin = "server.J9", .id = 1795315509918001ull, .sz = chunks * MiB, .bare = true };
    for (uint64_t sq = 0; sq < chunks; sq++) {
        s.sq = sq;
        s.os = sq * MiB;
        s.dt = sq + 1 == chunks ? CJ_SM_FINAL : CJ_SM_CHUNK;
        inject(n, B, &s, c, MiB);
    }
    assert_int_equal(r.n, 1);
    assert_int_equal(r.len, chunks * MiB);
    int acks = cap_count(n, B, "sm__ACK", CJ_SM_ACK);
    uint64_t last = 0;
    for (int k = 0; k < acks; k++) {
        struct cj_hdr h;
        cap_hdr(n, cap_find(n, B, "sm__ACK", CJ_SM_ACK, k), &h);
        assert_true(cj_hdr_has(&h, CJ_HK_SM_OS));
        assert_true((uint64_t)h.sm_os - last <= 4 * MiB);
        assert_string_equal(h.destination, "server.J9");
        last = (uint64_t)h.sm_os;
    }
    assert_int_equal(last, chunks * MiB);
    assert_int_equal(acks, 5);   /* 4, 8, 12, 16 MiB and the final one */
    check_acks_complete(n, B);
    free(c);
    rec_clear(&r);
    memnet_free(n);
}

/* Every peer: a stream without sm__ws keeps at most 16 chunks out of order. */
static void test_out_of_order_without_ws(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    uint8_t chunk[100];
    fill(chunk, sizeof chunk, 9);
    struct spec s = { .origin = "server.J9", .id = 78, .sz = 100 * 40, .bare = true };
    for (uint64_t sq = 1; sq <= 16; sq++) {
        s.sq = sq;
        s.os = sq * 100;
        inject(n, B, &s, chunk, sizeof chunk);
    }
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 1);
    assert_int_equal(cap_count(n, B, "sm__ACK", CJ_SM_ERROR), 0);
    s.sq = 17;
    s.os = 1700;
    inject(n, B, &s, chunk, sizeof chunk);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_failed, 1);
    assert_int_equal(cap_count(n, B, "sm__ACK", CJ_SM_ERROR), 1);
    rec_clear(&r);
    memnet_free(n);
}

/* CJ_STREAM_WIRE_2_8: a receiver error goes on sm__ACK only (a 2.8.x cell has
 * no sm__ERROR handler); the development tree's peers get both. */
static void test_receiver_error_on_ack_only(void **state)
{
    for (int wire = 0; wire < 2; wire++) {
        struct memnet *n = memnet_new(2, NAMES, NULL);
        if (wire) cj_stream_set_wire(n->ep[B], CJ_STREAM_WIRE_2_8);
        assert_int_equal(cj_stream_get_wire(n->ep[B]), wire ? CJ_STREAM_WIRE_2_8 : CJ_STREAM_WIRE_DEV);
        uint8_t c[10] = { 0 };
        struct spec s = { .origin = "server.J9", .id = 4242, .sz = 10, .dt = CJ_SM_FINAL, .bare = true };
        inject(n, B, &s, c, sizeof c);   /* no handler for app/blob */
        assert_int_equal(cap_count(n, B, "sm__ERROR", -1), wire ? 0 : 1);
        assert_int_equal(cap_count(n, B, "sm__ACK", CJ_SM_ERROR), 1);
        struct cj_hdr h;
        cap_hdr(n, cap_find(n, B, "sm__ACK", CJ_SM_ERROR, 0), &h);
        assert_int_equal(h.sm_id, 4242);
        assert_string_equal(h.destination, "server.J9");
        assert_true(em_has(&h, "no handler"));
        memnet_free(n);
    }
}

/* Every peer: an sm__ACK with sm__em and no sm__ri, sent after the request
 * stream completed (a 2.8.x handler that cannot decode the body), fails the
 * request whose stream had that sm__id at once, with comm_error; only from the
 * request's target. */
static void test_error_ack_by_stream_id(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B], .mode = H_SILENT };
    struct rep p = { 0 };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "req", rec_handler, &r), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "req", NULL, blob_of(3 * MiB, 4), 30.0, on_reply,
                                       &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, r.n == 1, 1.0);
    assert_int_equal(r.n, 1);
    settle(n, 0.02);
    assert_int_equal(p.n, 0);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &h);
    uint64_t id = h.sm_id;
    inject_notice(n, A, "server.other", "sm__ACK", id, NULL, "cannot decode", NULL);   /* not the target */
    inject_notice(n, A, NAMES[B], "sm__ACK", id + 1000, NULL, "cannot decode", NULL);  /* another stream */
    settle(n, 0.02);
    assert_int_equal(p.n, 0);
    inject_notice(n, A, NAMES[B], "sm__ACK", id, NULL, "callback throws exception: bad body", NULL);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "bad body"));
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.requests, 0);
    rep_clear(&p);
    rec_clear(&r);
    memnet_free(n);
}

/* CJ_STREAM_WIRE_2_8 raises a window smaller than the peer's ACK interval
 * (4 MiB) + 2 chunks; the development wire keeps it. */
static void test_window_raised(void **state)
{
    for (int wire = 0; wire < 2; wire++) {
        struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
        lim[A].window = MiB;
        struct memnet *n = memnet_new(2, NAMES, lim);
        if (wire) cj_stream_set_wire(n->ep[A], CJ_STREAM_WIRE_2_8);
        n->filter = drop_to_b;
        struct done d = { 0 };
        assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(12 * MiB, 3), on_done,
                                        &d, NULL),
                         0);
        settle(n, 0.05);
        /* sends while sent - acked <= window: 2 chunks of 1 MiB, or 7 with 6 MiB */
        assert_int_equal(cap_count(n, A, "sm__DATA", -1), wire ? 7 : 2);
        memnet_free(n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acks_without_sq),
        cmocka_unit_test(test_ack_cadence_without_ai),
        cmocka_unit_test(test_out_of_order_without_ws),
        cmocka_unit_test(test_receiver_error_on_ack_only),
        cmocka_unit_test(test_error_ack_by_stream_id),
        cmocka_unit_test(test_window_raised),
    };
    return cmocka_run_group_tests_name("stream_release", tests, NULL, NULL);
}
