/* SPDX-License-Identifier: Apache-2.0 */
/* test_stream.c — the sm__ streaming layer, blobs one way: endpoints in one
 * event loop joined by memnet.h, which can drop, duplicate, hold and reorder
 * messages; single and multi-chunk blobs, the empty blob, reordering and
 * duplicates, out-of-order and size limits, the window and its ACKs (with an
 * error, without progress, re-acked when reliable). */
#include "streamfix.h"

/* ---- tests --------------------------------------------------------------------------------------- */

static void test_single_chunk(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    struct done d = { 0 };
    uint64_t id = 0;
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", &m, NULL, blob_of(100, 1), on_done, &d, &id),
                     0);
    assert_int_equal(d.n, 0);   /* never from inside the call */
    RUN_UNTIL(n, r.n == 1 && d.n == 1 && cap_count(n, B, "sm__ACK", 3) == 1, 1.0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.len, 100);
    assert_true(data_is(r.data, 100, 1));
    assert_string_equal(r.enc, "fobs");
    assert_false(r.req.has_ri);
    assert_int_equal(d.status, 0);

    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 1);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &h);
    assert_int_equal(h.sm_dt, CJ_SM_FINAL);
    assert_int_equal(h.sm_sq, 0);
    assert_int_equal(h.sm_os, 0);
    assert_int_equal(h.sm_sz, 100);
    assert_int_equal(h.sm_id, id);
    assert_int_equal(h.payload_len, 100);
    assert_true(cj_hdr_has(&h, CJ_HK_SM_AI));
    assert_false(h.sm_rs);
    assert_false(h.reply_expected);
    assert_string_equal(h.payload_encoding, "bytes");
    assert_int_equal(h.msg_type, CJ_MSG_REQ);
    assert_false(cj_hdr_has(&h, CJ_HK_SM_RI));
    assert_false(cj_hdr_has(&h, CJ_HK_REQ_ID));

    int i = cap_find(n, B, "sm__ACK", 3, 0);
    cap_hdr(n, i, &h);
    assert_int_equal(h.sm_id, id);
    assert_int_equal(h.sm_os, 100);
    assert_int_equal(h.sm_sq, 0);
    assert_string_equal(h.destination, NAMES[A]);
    check_acks_complete(n, B);
    rec_clear(&r);
    memnet_free(n);
}

static void test_empty_blob(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, evbuffer_new(), NULL, NULL, NULL),
                     0);
    RUN_UNTIL(n, r.n == 1 && cap_count(n, B, "sm__ACK", 3) == 1, 1.0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.len, 0);
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 1);
    struct cj_hdr h;
    int i = cap_find(n, A, "sm__DATA", CJ_SM_FINAL, 0);
    cap_hdr(n, i, &h);
    assert_int_equal(h.sm_sz, 0);
    assert_int_equal(n->caps[i].plen, 0);
    cap_hdr(n, cap_find(n, B, "sm__ACK", 3, 0), &h);
    assert_int_equal(h.sm_os, 0);
    assert_int_equal(h.sm_sq, 0);
    rec_clear(&r);
    memnet_free(n);
}

static void test_multi_chunk(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    struct done d = { 0 };
    const size_t SZ = 5 * MiB + 100;
    assert_int_equal(cj_stream_on(n->ep[B], "app", "big", rec_handler, &r), 0);
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "big", NULL, NULL, blob_of(SZ, 3), on_done, &d, NULL),
                     0);
    RUN_UNTIL(n, r.n == 1 && d.n == 1, 1.5);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.len, SZ);
    assert_true(data_is(r.data, SZ, 3));
    assert_int_equal(d.status, 0);

    /* exactly chunk-size chunks, then the rest */
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 6);
    for (int k = 0; k < 6; k++) {
        struct cj_hdr h;
        int i = cap_find(n, A, "sm__DATA", -1, k);
        cap_hdr(n, i, &h);
        assert_int_equal(h.sm_sq, k);
        assert_int_equal(h.sm_os, (int64_t)k * MiB);
        assert_int_equal(h.sm_dt, k == 5 ? CJ_SM_FINAL : CJ_SM_CHUNK);
        assert_int_equal(n->caps[i].plen, k == 5 ? 100 : MiB);
        assert_int_equal(h.payload_len, (int64_t)n->caps[i].plen);
        assert_int_equal(h.sm_cs, MiB);
        assert_int_equal(h.sm_ws, 64 * MiB);
        assert_int_equal(has_key(&h, "sm__ai"), k == 0);
        assert_false(n->caps[i].control);
    }
    /* ACKs: a progress ACK after 4 MiB (sm__ai 4 MiB), then the final one */
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 2);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, B, "sm__ACK", 3, 0), &h);
    assert_int_equal(h.sm_os, 4 * MiB);
    assert_int_equal(h.sm_sq, 3);
    cap_hdr(n, cap_find(n, B, "sm__ACK", 3, 1), &h);
    assert_int_equal(h.sm_os, SZ);
    assert_int_equal(h.sm_sq, 5);
    check_acks_complete(n, B);

    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);
    rec_clear(&r);
    memnet_free(n);
}

/* Hold every data chunk, release them in reverse order; duplicate them too. */
static enum memnet_act hold_data(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return strcmp(h->topic, "sm__DATA") == 0 ? MEMNET_HOLD : MEMNET_DELIVER;
}

static enum memnet_act dup_data(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return strcmp(h->topic, "sm__DATA") == 0 ? MEMNET_DUP : MEMNET_DELIVER;
}

static void test_reorder_and_duplicates(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].chunk_size = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);

    n->filter = hold_data;
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(10 * KiB + 5, 4), NULL,
                                    NULL, NULL),
                     0);
    settle(n, 0.05);
    assert_int_equal(r.n, 0);
    assert_int_equal(memnet_release(n, true), 11);   /* FINAL first, chunk 0 last */
    RUN_UNTIL(n, r.n == 1, 1.0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.len, 10 * KiB + 5);
    assert_true(data_is(r.data, r.len, 4));
    struct cj_hdr h;
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 1);   /* 4 MiB interval: only the final ACK */
    cap_hdr(n, cap_find(n, B, "sm__ACK", 3, 0), &h);
    assert_int_equal(h.sm_os, 10 * KiB + 5);
    assert_int_equal(h.sm_sq, 10);

    /* every chunk twice: one blob, duplicates counted, no re-ACK (not reliable) */
    n->filter = dup_data;
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(3 * KiB, 5), NULL, NULL,
                                    NULL),
                     0);
    RUN_UNTIL(n, r.n == 2, 1.0);
    settle(n, 0.05);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.len, 3 * KiB);
    assert_true(data_is(r.data, r.len, 5));
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.dup_chunks, 3);
    assert_int_equal(st.blobs_in, 2);
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 2);
    rec_clear(&r);
    memnet_free(n);
}

static void test_out_of_order_limit(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    uint8_t chunk[100];
    fill(chunk, sizeof chunk, 9);
    /* sm__ws / sm__cs = 1: limit max(16, min(2, 1024)) = 16 buffered chunks */
    struct spec s = { .origin = "x.peer", .id = 77, .sz = 100 * 40, .cs = 100, .ws = 100, .ri = "r-1" };
    for (uint64_t sq = 1; sq <= 16; sq++) {
        s.sq = sq;
        s.os = sq * 100;
        inject(n, B, &s, chunk, sizeof chunk);
    }
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 1);
    assert_int_equal(st.rx_buffered, 1600);
    assert_int_equal(st.rx_reserved, 4000);
    assert_int_equal(cap_count(n, B, "sm__ERROR", -1), 0);
    s.sq = 17;
    s.os = 1700;
    inject(n, B, &s, chunk, sizeof chunk);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_failed, 1);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);
    /* the receiver error notice, on sm__ERROR and again on sm__ACK */
    const char *topics[] = { "sm__ERROR", "sm__ACK" };
    for (int t = 0; t < 2; t++) {
        int i = cap_find(n, B, topics[t], CJ_SM_ERROR, 0);
        assert_true(i >= 0);
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        assert_string_equal(h.destination, "x.peer");
        assert_int_equal(h.sm_id, 77);
        assert_true(em_is(&h, "too many out-of-sequence chunks"));
        assert_string_equal(h.sm_ch, "app");
        assert_string_equal(h.sm_tp, "blob");
        assert_string_equal(h.sm_et, "StreamError");
        assert_string_equal(h.sm_ri, "r-1");
        assert_string_equal(h.channel, "sm__STREAM");
        assert_true(n->caps[i].control);
    }
    /* the failed stream stays quiet: later chunks are ignored without a new notice */
    s.sq = 0;
    s.os = 0;
    inject(n, B, &s, chunk, sizeof chunk);
    assert_int_equal(cap_count(n, B, "sm__ERROR", -1), 1);
    assert_int_equal(r.n, 0);

    /* chunks of one stream must agree on sm__ch / sm__tp / sm__ri (found by fuzz_stream_rx) */
    struct spec t1 = { .origin = "x.peer", .id = 78, .sz = 200, .sq = 1, .os = 100, .dt = CJ_SM_FINAL };
    inject(n, B, &t1, chunk, sizeof chunk);
    struct spec t0 = { .origin = "x.peer", .id = 78, .sz = 200, .ch = "return_only", .tp = "app:blob" };
    inject(n, B, &t0, chunk, sizeof chunk);
    assert_int_equal(cap_count(n, B, "sm__ERROR", -1), 2);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, B, "sm__ERROR", -1, 1), &h);
    assert_int_equal(h.sm_id, 78);
    assert_true(em_has(&h, "changes sm__ch"));
    assert_int_equal(r.n, 0);
    memnet_free(n);
}

static void test_size_limits(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].max_blob = MiB;
    lim[B].max_buffered = 100 * KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    uint8_t chunk[10] = { 0 };

    /* sm__sz over max_blob: refused before anything is buffered */
    struct spec s = { .origin = "x.peer", .id = 1, .sz = MiB + 1 };
    inject(n, B, &s, chunk, sizeof chunk);
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, B, "sm__ERROR", 6, 0), &h);
    assert_string_equal(h.sm_et, "BlobSizeError");
    assert_true(em_has(&h, "exceeds limit"));

    /* the endpoint-wide reservation refuses a new stream that does not fit */
    struct spec s2 = { .origin = "x.peer", .id = 2, .sz = 80 * KiB };
    inject(n, B, &s2, chunk, sizeof chunk);
    struct spec s3 = { .origin = "x.peer", .id = 3, .sz = 40 * KiB };
    inject(n, B, &s3, chunk, sizeof chunk);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 1);
    assert_true(st.rx_reserved >= 80 * KiB && st.rx_reserved <= 100 * KiB);
    assert_int_equal(st.rx_buffered - (st.rx_reserved - 80 * KiB), 10);   /* chunk bytes + header block */
    cap_hdr(n, cap_find(n, B, "sm__ERROR", 6, 1), &h);
    assert_int_equal(h.sm_id, 3);
    assert_true(em_has(&h, "buffer limit"));

    /* a chunk that would go past sm__sz fails its stream */
    struct spec s4 = { .origin = "x.peer", .id = 2, .sz = 80 * KiB, .sq = 1, .os = 80 * KiB - 5 };
    inject(n, B, &s4, chunk, sizeof chunk);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_reserved, 0);
    cap_hdr(n, cap_find(n, B, "sm__ERROR", 6, 2), &h);
    assert_string_equal(h.sm_et, "BlobSizeError");

    /* a FINAL that does not end at sm__sz */
    struct spec s5 = { .origin = "x.peer", .id = 5, .sz = 20, .dt = CJ_SM_FINAL };
    inject(n, B, &s5, chunk, sizeof chunk);
    cap_hdr(n, cap_find(n, B, "sm__ERROR", 6, 3), &h);
    assert_int_equal(h.sm_id, 5);

    /* a buffered chunk whose sm__os does not follow on fails the stream when reached */
    struct spec s6 = { .origin = "x.peer", .id = 6, .sz = 30, .sq = 1, .os = 5 };
    inject(n, B, &s6, chunk, sizeof chunk);
    s6.sq = 0;
    s6.os = 0;
    inject(n, B, &s6, chunk, sizeof chunk);
    cap_hdr(n, cap_find(n, B, "sm__ERROR", 6, 4), &h);
    assert_int_equal(h.sm_id, 6);
    assert_true(em_has(&h, "at offset 5, expected 10"));
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);

    /* a request over the receiver's limit fails the requester with comm_error */
    struct rep p = { 0 };
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "app", "blob", NULL, blob_of(2 * MiB, 1), 1.0, on_reply,
                                       &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "BlobSizeError"));
    assert_int_equal(r.n, 0);
    rep_clear(&p);
    memnet_free(n);
}

static void test_window(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].chunk_size = KiB;
    lim[A].window = 4 * KiB;
    lim[A].ack_interval = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B] };
    struct done d = { 0 };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    n->filter = hold_acks;
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(20 * KiB, 2), on_done, &d,
                                    NULL),
                     0);
    settle(n, 0.05);
    /* sends while sent - acked <= window: 5 chunks, then blocked */
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 5);
    assert_int_equal(d.n, 0);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &h);
    assert_int_equal(h.sm_ws, 4 * KiB);
    assert_int_equal(h.sm_ai, KiB);
    /* an ACK from anyone but the receiver is ignored */
    uint64_t id = h.sm_id;
    inject_ack(n, A, "evil.cell", id, 4 * KiB, 3);
    settle(n, 0.02);
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 5);
    /* ACKs flow again: the rest goes out */
    n->filter = NULL;
    assert_true(memnet_release(n, false) >= 1);
    RUN_UNTIL(n, r.n == 1 && d.n == 1, 1.0);
    assert_int_equal(d.status, 0);
    assert_int_equal(r.len, 20 * KiB);
    assert_true(data_is(r.data, r.len, 2));
    assert_int_equal(cap_count(n, A, "sm__DATA", -1), 20);
    check_acks_complete(n, B);
    rec_clear(&r);
    memnet_free(n);
}

/* An ACK carrying sm__em fails the stream being sent. */
static void test_ack_with_error(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].chunk_size = KiB;
    lim[A].window = 2 * KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B] };
    struct done d = { 0 };
    uint64_t id;
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    n->filter = hold_acks;
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(10 * KiB, 2), on_done, &d,
                                    &id),
                     0);
    settle(n, 0.02);
    assert_int_equal(d.n, 0);
    inject_notice(n, A, "evil.cell", "sm__ACK", id, NULL, "go away", NULL);   /* not the receiver */
    settle(n, 0.02);
    assert_int_equal(d.n, 0);
    inject_notice(n, A, NAMES[B], "sm__ACK", id, NULL, "disk full", NULL);
    RUN_UNTIL(n, d.n == 1, 1.0);
    assert_int_equal(d.status, -1);
    assert_non_null(strstr(d.why, "disk full"));
    /* ACKs for finished or unknown streams are tolerated */
    inject_ack(n, A, NAMES[B], id, 3 * KiB, 2);
    inject_ack(n, A, NAMES[B], 12345, 3 * KiB, 2);
    settle(n, 0.02);
    assert_int_equal(d.n, 1);
    memnet_free(n);
}

static void test_window_no_progress(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].chunk_size = KiB;
    lim[A].window = 2 * KiB;
    lim[A].ack_interval = KiB;
    lim[A].tx_no_progress = 0.1;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B] };
    struct done d = { 0 };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    n->filter = hold_acks;
    double t0 = memnet_now();
    assert_int_equal(cj_stream_send(n->ep[A], NAMES[B], "app", "blob", NULL, NULL, blob_of(10 * KiB, 2), on_done, &d,
                                    NULL),
                     0);
    RUN_UNTIL(n, d.n == 1, 1.0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.status, -1);
    assert_non_null(strstr(d.why, "no ACK progress"));
    assert_true(memnet_now() - t0 >= 0.09);
    /* the sender told the receiver (sm__dt 6 on sm__DATA); it dropped the stream quietly */
    settle(n, 0.02);
    assert_int_equal(cap_count(n, A, "sm__DATA", CJ_SM_ERROR), 1);
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(cap_count(n, B, "sm__ERROR", -1), 0);
    assert_int_equal(r.n, 0);
    memnet_free(n);
}

static void test_reliable_reack(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);
    struct rec r = { .ep = n->ep[B] };
    assert_int_equal(cj_stream_on(n->ep[B], "app", "blob", rec_handler, &r), 0);
    uint8_t c[60];
    fill(c, sizeof c, 0);
    struct spec s = { .origin = "x.peer", .id = 1795315509918272ull, .sz = 60, .rs = true, .rw = 0.05, .rt = 0.1,
                      .cs = 40 };
    inject(n, B, &s, c, 40);
    /* a duplicate of chunk 0 while active: re-ACK of the current state */
    inject(n, B, &s, c, 40);
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 1);
    struct cj_hdr h;
    cap_hdr(n, cap_find(n, B, "sm__ACK", 3, 0), &h);
    assert_int_equal(h.sm_os, 40);
    assert_int_equal(h.sm_sq, 0);
    s.sq = 1;
    s.os = 40;
    s.dt = CJ_SM_FINAL;
    inject(n, B, &s, c + 40, 20);
    assert_int_equal(r.n, 1);
    assert_true(data_is(r.data, 60, 0));
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 2);
    /* the sender retransmits its FINAL chunk after completion: re-ACKed, not a new stream */
    inject(n, B, &s, c + 40, 20);
    assert_int_equal(r.n, 1);
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), 3);
    for (int k = 1; k <= 2; k++) {
        cap_hdr(n, cap_find(n, B, "sm__ACK", 3, k), &h);
        assert_int_equal(h.sm_os, 60);
        assert_int_equal(h.sm_sq, 1);
        assert_int_equal(h.sm_id, 1795315509918272ull);
    }
    /* kept sm__rw + sm__rt = 0.15 s, then forgotten */
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.rx_finished, 1);
    RUN_UNTIL(n, (cj_stream_get_stats(n->ep[B], &st), st.rx_finished == 0), 1.0);
    assert_int_equal(st.rx_finished, 0);

    /* a non-reliable stream: duplicates after completion are ignored without ACK */
    struct spec u = { .origin = "x.peer", .id = 9, .sz = 20, .dt = CJ_SM_FINAL };
    inject(n, B, &u, c, 20);
    int acks = cap_count(n, B, "sm__ACK", 3);
    inject(n, B, &u, c, 20);
    assert_int_equal(cap_count(n, B, "sm__ACK", 3), acks);
    assert_int_equal(r.n, 2);
    rec_clear(&r);
    memnet_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_chunk),
        cmocka_unit_test(test_empty_blob),
        cmocka_unit_test(test_multi_chunk),
        cmocka_unit_test(test_reorder_and_duplicates),
        cmocka_unit_test(test_out_of_order_limit),
        cmocka_unit_test(test_size_limits),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_ack_with_error),
        cmocka_unit_test(test_window_no_progress),
        cmocka_unit_test(test_reliable_reack),
    };
    return cmocka_run_group_tests_name("stream", tests, NULL, NULL);
}
