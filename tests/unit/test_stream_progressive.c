/* SPDX-License-Identifier: Apache-2.0 */
/* test_stream_progressive.c — the sm__ streaming layer, progressive blobs:
 * sink replies (reordered, duplicated, hold_acks, sink failures) and source
 * replies (odd feed sizes, parity with a blob reply, limits, an owner that
 * stops feeding, cancel). */
#include "streamfix.h"

/* ---- progressive blobs: sink replies, hold_acks, source replies ---------------------------------- */

struct sinkrec {
    struct cj_stream_ep *ep;
    uint64_t handle;
    int begins, datas;
    uint64_t size, next_off;
    uint8_t *buf;
    int fail_at;              /* data call that returns -1 (0: never) */
    bool fail_begin;
    bool release_inline;      /* hold_acks: release each piece from inside data */
    bool cancel_at_2;         /* cancel the request from inside the 2nd data call */
    char rc[CJ_HDR_STR_MAX + 1];
};

static uint64_t g_released;   /* the latest release given: no ACK from the requester may pass it */

static int sk_begin(void *arg, const struct cj_hdr *h, uint64_t size)
{
    struct sinkrec *s = arg;
    s->begins++;
    assert_int_equal(h->sm_sq, 0);
    assert_int_equal((int64_t)size, h->sm_sz);
    assert_int_equal(s->next_off, 0);
    s->size = size;
    snprintf(s->rc, sizeof s->rc, "%s", cj_hdr_has(h, CJ_HK_RETURN_CODE) ? h->return_code : "ok");
    s->buf = malloc(size ? size : 1);
    return s->fail_begin ? -1 : 0;
}

static int sk_data(void *arg, uint64_t off, struct evbuffer *piece)
{
    struct sinkrec *s = arg;
    size_t len = evbuffer_get_length(piece);
    assert_int_equal(s->begins, 1);
    assert_int_equal(off, s->next_off);   /* in order, no gap, no overlap */
    assert_true(len > 0 && off + len <= s->size);
    evbuffer_remove(piece, s->buf + off, len);
    s->next_off += len;
    s->datas++;
    if (s->fail_at && s->datas == s->fail_at) return -1;
    if (s->cancel_at_2 && s->datas == 2) assert_int_equal(cj_stream_request_cancel(s->ep, s->handle), 0);
    if (s->release_inline) {
        g_released = s->next_off;
        assert_int_equal(cj_stream_request_release(s->ep, s->handle, s->next_off), 0);
    }
    return 0;
}

static void sinkrec_clear(struct sinkrec *s)
{
    free(s->buf);
    s->buf = NULL;
}

/* Every ACK the requester A sends for the reply stays within what the owner released. */
static enum memnet_act check_held_acks(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    if (from == A && strcmp(h->topic, "sm__ACK") == 0 && h->sm_dt == CJ_SM_ACK)
        assert_true((uint64_t)h->sm_os <= g_released);
    return MEMNET_DELIVER;
}

/* The reply's chunks (from B): every third held, every third duplicated. */
static enum memnet_act mix_reply(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    if (from != B || strcmp(h->topic, "sm__DATA") != 0 || strcmp(h->sm_ch, "return_only") != 0) return MEMNET_DELIVER;
    if (h->sm_sq % 3 == 1) return MEMNET_HOLD;
    if (h->sm_sq % 3 == 2) return MEMNET_DUP;
    return MEMNET_DELIVER;
}

static void test_sink_reorder_dup(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B], .mode = H_ECHO, .reply_len = 20 * KiB + 7 };
    struct rep p = { 0 };
    struct sinkrec sk = { .ep = n->ep[A] };
    struct cj_stream_sink sink = { .begin = sk_begin, .data = sk_data, .arg = &sk };
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", rec_handler, &r), 0);
    n->filter = mix_reply;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 2.0,
                                            &sink, on_reply, &p, &sk.handle, NULL),
                     0);
    settle(n, 0.05);
    /* chunk 0 went to the sink at once; chunk 1 is held, so nothing more is contiguous */
    assert_int_equal(sk.begins, 1);
    assert_int_equal(sk.next_off, KiB);
    assert_int_equal(p.n, 0);
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[A], &st);
    assert_true(st.rx_buffered > 0);   /* out-of-sequence chunks wait */
    assert_true(memnet_release(n, true) >= 6);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "ok");
    assert_string_equal(p.enc, "fobs");
    assert_null(p.data);               /* the bytes went to the sink */
    assert_non_null(p.hblk);           /* chunk 0's headers */
    struct cj_hdr h;
    memnet_decode(&h, p.hblk, p.hlen);
    assert_int_equal(h.sm_sq, 0);
    assert_string_equal(sk.rc, "ok");
    assert_int_equal(sk.size, 20 * KiB + 7);
    assert_int_equal(sk.next_off, 20 * KiB + 7);
    assert_true(data_is(sk.buf, sk.size, 7));
    cj_stream_get_stats(n->ep[A], &st);
    assert_true(st.dup_chunks >= 6);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);
    assert_int_equal(st.requests, 0);
    /* the final ACK covers the whole reply */
    int i = cap_find(n, A, "sm__ACK", 3, cap_count(n, A, "sm__ACK", 3) - 1);
    cap_hdr(n, i, &h);
    assert_int_equal(h.sm_os, 20 * KiB + 7);
    assert_int_equal(h.sm_sq, 20);
    check_acks_complete(n, A);

    /* an empty reply: begin, no data, then the reply */
    struct sinkrec sk2 = { .ep = n->ep[A] };
    sink.arg = &sk2;
    r.reply_len = 0;
    r.mode = H_ECHO;
    n->filter = NULL;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, evbuffer_new(), 2.0,
                                            &sink, on_reply, &p, &sk2.handle, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.rc, "ok");
    assert_int_equal(sk2.begins, 1);
    assert_int_equal(sk2.datas, 0);
    assert_int_equal(sk2.size, 0);
    sinkrec_clear(&sk);
    sinkrec_clear(&sk2);
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

static int count_acks_from(struct memnet *n, int from, uint64_t id)
{
    int k = 0;
    for (int j = 0, i; (i = cap_find(n, from, "sm__ACK", 3, j)) >= 0; j++) {
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        if ((uint64_t)h.sm_id == id) k++;
    }
    return k;
}

static void test_sink_hold_acks(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;
    lim[B].window = 4 * KiB;
    lim[B].ack_interval = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B], .mode = H_ECHO, .reply_len = 20 * KiB };
    struct rep p = { 0 };
    struct sinkrec sk = { .ep = n->ep[A] };
    struct cj_stream_sink sink = { .begin = sk_begin, .data = sk_data, .arg = &sk, .hold_acks = true };
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", rec_handler, &r), 0);
    g_released = 0;
    n->filter = check_held_acks;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &sink, on_reply, &p, &sk.handle, NULL),
                     0);
    settle(n, 0.05);
    /* nothing released: B stops at its window (sent - acked <= 4 KiB: 5 chunks) */
    assert_int_equal(cap_count(n, B, "sm__DATA", -1), 5);
    assert_int_equal(sk.next_off, 5 * KiB);
    int first = cap_find(n, B, "sm__DATA", -1, 0);
    struct cj_hdr h;
    cap_hdr(n, first, &h);
    uint64_t rid = (uint64_t)h.sm_id;
    assert_int_equal(count_acks_from(n, A, rid), 0);
    settle(n, 0.05);
    assert_int_equal(cap_count(n, B, "sm__DATA", -1), 5);   /* still blocked */

    /* releasing more than was delivered is clamped; releases let B go on */
    g_released = 2 * KiB;
    assert_int_equal(cj_stream_request_release(n->ep[A], sk.handle, 2 * KiB), 0);
    assert_int_equal(count_acks_from(n, A, rid), 1);
    settle(n, 0.05);
    assert_int_equal(cap_count(n, B, "sm__DATA", -1), 7);
    for (int guard = 0; guard < 100 && p.n == 0; guard++) {
        g_released = sk.next_off - (sk.next_off == 20 * KiB ? KiB : 0);   /* keep the last KiB back */
        assert_int_equal(cj_stream_request_release(n->ep[A], sk.handle, g_released), 0);
        settle(n, 0.01);
    }
    /* all bytes went to the sink: the reply is reported, the final ACK still waits */
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "ok");
    assert_null(p.data);
    assert_int_equal(sk.next_off, 20 * KiB);
    assert_true(data_is(sk.buf, sk.size, 7));
    for (int j = 0, i; (i = cap_find(n, A, "sm__ACK", 3, j)) >= 0; j++) {
        cap_hdr(n, i, &h);
        if ((uint64_t)h.sm_id == rid) assert_true((uint64_t)h.sm_os < 20 * KiB);
    }
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.rx_active, 1);      /* draining: waiting for the last release */
    assert_int_equal(st.rx_buffered, 0);
    /* the last release (after the request finished) sends the final ACK */
    g_released = 20 * KiB;
    assert_int_equal(cj_stream_request_release(n->ep[A], sk.handle, 20 * KiB), 0);
    int i = cap_find(n, A, "sm__ACK", 3, cap_count(n, A, "sm__ACK", 3) - 1);
    cap_hdr(n, i, &h);
    assert_int_equal((uint64_t)h.sm_id, rid);
    assert_int_equal(h.sm_os, 20 * KiB);
    assert_int_equal(h.sm_sq, 19);
    assert_int_equal(cj_stream_request_release(n->ep[A], sk.handle, 20 * KiB), -1);   /* gone: harmless */
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.rx_active, 0);
    settle(n, 0.02);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_active, 0);
    assert_int_equal(st.tx_failed, 0);
    check_acks_complete(n, A);

    /* releasing from inside data: behaves like an ordinary request, final ACK at once */
    struct sinkrec sk2 = { .ep = n->ep[A], .release_inline = true };
    sink.arg = &sk2;
    g_released = 0;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &sink, on_reply, &p, &sk2.handle, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_int_equal(p.n, 2);
    assert_true(data_is(sk2.buf, sk2.size, 7));
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.rx_active, 0);
    i = cap_find(n, A, "sm__ACK", 3, cap_count(n, A, "sm__ACK", 3) - 1);
    cap_hdr(n, i, &h);
    assert_int_equal(h.sm_os, 20 * KiB);

    /* an owner that never releases: the request times out (no progress), B's window stalls */
    struct sinkrec sk3 = { .ep = n->ep[A] };
    sink.arg = &sk3;
    g_released = 0;
    double t0 = memnet_now();
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 0.1,
                                            &sink, on_reply, &p, &sk3.handle, NULL),
                     0);
    RUN_UNTIL(n, p.n == 3, 1.0);
    assert_int_equal(p.n, 3);
    assert_string_equal(p.rc, "timeout");
    assert_true(memnet_now() - t0 >= 0.09);
    settle(n, 0.02);
    /* the reply stream failed with it: B was told */
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_active, 0);
    assert_int_equal(st.tx_failed, 1);
    sinkrec_clear(&sk);
    sinkrec_clear(&sk2);
    sinkrec_clear(&sk3);
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

static void test_sink_failures(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;
    lim[B].window = 2 * KiB;   /* B is still sending when A fails the reply */
    lim[B].ack_interval = KiB;
    struct memnet *n = memnet_new(2, NAMES, lim);
    struct rec r = { .ep = n->ep[B], .mode = H_ECHO, .reply_len = 10 * KiB };
    struct rep p = { 0 };
    struct cj_stream_stats st;
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", rec_handler, &r), 0);

    /* data returns -1: the request fails (comm_error), the sender is told and fails */
    struct sinkrec sk = { .ep = n->ep[A], .fail_at = 3 };
    struct cj_stream_sink sink = { .begin = sk_begin, .data = sk_data, .arg = &sk };
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &sink, on_reply, &p, &sk.handle, NULL),
                     0);
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "sink refused"));
    assert_int_equal(sk.datas, 3);
    settle(n, 0.02);
    assert_int_equal(sk.datas, 3);   /* nothing more after the failure */
    assert_true(cap_count(n, A, "sm__ERROR", -1) >= 1);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_failed, 1);
    assert_int_equal(st.tx_active, 0);
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.rx_buffered, 0);
    assert_int_equal(st.rx_reserved, 0);

    /* begin returns -1: the same, no data at all */
    struct sinkrec sk2 = { .ep = n->ep[A], .fail_begin = true };
    sink.arg = &sk2;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &sink, on_reply, &p, &sk2.handle, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 1.0);
    assert_string_equal(p.rc, "comm_error");
    settle(n, 0.02);
    assert_int_equal(sk2.datas, 0);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_failed, 2);

    /* the owner cancels the request from inside data: no callback, the sender is told */
    struct sinkrec sk3 = { .ep = n->ep[A], .cancel_at_2 = true };
    sink.arg = &sk3;
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &sink, on_reply, &p, &sk3.handle, NULL),
                     0);
    settle(n, 0.1);
    assert_int_equal(p.n, 2);
    assert_int_equal(sk3.datas, 2);
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_failed, 3);
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.rx_buffered, 0);

    /* a sink without data is refused */
    struct cj_stream_sink bad = { .begin = sk_begin };
    assert_int_equal(cj_stream_request_sink(n->ep[A], NAMES[B], "server_command", "echo", NULL, blob_of(10, 1), 1.0,
                                            &bad, on_reply, &p, NULL, NULL),
                     -1);
    assert_int_equal(cj_stream_request_release(n->ep[A], 999999, 1), -1);
    sinkrec_clear(&sk);
    sinkrec_clear(&sk2);
    sinkrec_clear(&sk3);
    rec_clear(&r);
    rep_clear(&p);
    memnet_free(n);
}

/* ---- source replies ------------------------------------------------------------------------------ */

static void fill_at(uint8_t *p, uint64_t off, size_t len, unsigned seed)
{
    for (size_t k = 0; k < len; k++) {
        uint64_t i = off + k;
        p[k] = (uint8_t)(i * 31u + seed + (i >> 12));
    }
}

enum { SRC_SYNC, SRC_MIXED, SRC_NEVER };

struct src_owner {
    struct cj_stream_ep *ep;
    struct event_base *base;
    uint64_t id, size, fed, stall_after;
    const size_t *pieces;
    size_t n_pieces, k;
    int mode, wants, handled, reply_rc;
    bool outstanding, in_call, oversize_probe;
    struct event *later;
    struct done d;
};

static void src_feed_next(struct src_owner *o)
{
    size_t len = o->pieces[o->k++ % o->n_pieces];
    if (len > o->size - o->fed) len = (size_t)(o->size - o->fed);
    uint8_t *buf = malloc(len ? len : 1);
    fill_at(buf, o->fed, len, 9);
    struct evbuffer *e = evbuffer_new();
    evbuffer_add(e, buf, len);
    free(buf);
    o->outstanding = false;
    o->in_call = true;
    assert_int_equal(cj_stream_feed(o->ep, o->id, e), 0);
    o->in_call = false;
    assert_int_equal(evbuffer_get_length(e), 0);
    evbuffer_free(e);
    o->fed += len;
    if (o->oversize_probe && o->fed == o->size) {   /* one byte more is refused */
        struct evbuffer *x = evbuffer_new();
        evbuffer_add(x, "x", 1);
        assert_int_equal(cj_stream_feed(o->ep, o->id, x), -1);
        evbuffer_free(x);
    }
}

static void src_later_cb(evutil_socket_t fd, short what, void *arg)
{
    src_feed_next(arg);
}

static void src_want(void *arg, uint64_t fed)
{
    struct src_owner *o = arg;
    assert_false(o->in_call);       /* never from inside reply_source / feed */
    assert_false(o->outstanding);   /* one want at a time */
    assert_int_equal(fed, o->fed);
    assert_true(fed < o->size);
    o->outstanding = true;
    o->wants++;
    if (o->mode == SRC_NEVER || (o->stall_after && o->fed >= o->stall_after)) return;
    if (o->mode == SRC_MIXED && o->wants % 2 == 0) {
        struct timeval tv = { 0, 1000 };
        evtimer_add(o->later, &tv);
        return;
    }
    src_feed_next(o);
}

static int src_handler(void *arg, struct cj_stream_blob *b)
{
    struct src_owner *o = arg;
    o->handled++;
    struct cj_stream_source src = { .size = o->size, .want = src_want, .arg = o };
    struct cj_stream_msg m = { .encoding = "fobs" };
    o->in_call = true;
    int rc = cj_stream_reply_source(o->ep, &b->req, "ok", &m, &src, on_done, &o->d, &o->id);
    o->in_call = false;
    assert_int_equal(rc, 0);
    return 0;
}

static struct src_owner *src_owner_new(struct memnet *n, uint64_t size, const size_t *pieces, size_t n_pieces, int mode)
{
    struct src_owner *o = calloc(1, sizeof *o);
    o->ep = n->ep[B];
    o->base = n->base;
    o->size = size;
    o->pieces = pieces;
    o->n_pieces = n_pieces;
    o->mode = mode;
    o->later = evtimer_new(n->base, src_later_cb, o);
    return o;
}

static void src_owner_free(struct src_owner *o)
{
    event_free(o->later);
    free(o);
}

/* The payloads of B's reply chunks (captured from index `from_cap`), concatenated per chunk. */
struct chunkseq {
    int n;
    size_t lens[64];
    uint8_t *data[64];
};

static void collect_chunks(struct memnet *n, int from_cap, struct chunkseq *cs)
{
    memset(cs, 0, sizeof *cs);
    for (int i = from_cap; i < n->n_caps; i++) {
        struct cj_hdr h;
        if (n->caps[i].from != B) continue;
        cap_hdr(n, i, &h);
        if (strcmp(h.topic, "sm__DATA") != 0 || strcmp(h.sm_ch, "return_only") != 0) continue;
        assert_true(cs->n < 64);
        assert_int_equal(h.sm_sq, cs->n);
        cs->lens[cs->n] = n->caps[i].plen;
        cs->data[cs->n] = n->caps[i].pl;
        cs->n++;
    }
}

static void test_source_pieces(void **state)
{
    struct memnet *n = memnet_new(2, NAMES, NULL);   /* default 1 MiB chunks */
    n->keep_pl = true;
    static const size_t pieces[] = { 1, MiB + 3, 7, 65536, 2 * MiB + 1, 333333, 1, MiB };
    uint64_t size = 6 * MiB + 12345;
    struct src_owner *o = src_owner_new(n, size, pieces, 8, SRC_MIXED);
    o->oversize_probe = true;
    struct rep p = { 0 };
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "get", src_handler, o), 0);
    int cap0 = n->n_caps;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "get", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 1 && o->d.n == 1, 5.0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.rc, "ok");
    assert_string_equal(p.enc, "fobs");
    assert_int_equal(p.len, size);
    assert_true(data_is(p.data, p.len, 9));
    assert_int_equal(o->d.n, 1);
    assert_int_equal(o->d.status, 0);
    assert_int_equal(o->fed, size);
    assert_true(o->wants >= 5);
    struct cj_hdr h;
    int i0 = cap_find(n, B, "sm__DATA", -1, 0);
    cap_hdr(n, i0, &h);
    assert_int_equal(h.sm_sz, (int64_t)size);   /* the size was known up front */
    assert_string_equal(h.return_code, "ok");
    assert_string_equal(h.sm_ch, "return_only");
    assert_string_equal(h.sm_tp, "server_command:get");
    struct chunkseq src_seq;
    collect_chunks(n, cap0, &src_seq);
    assert_int_equal(src_seq.n, 7);

    /* the same bytes as a whole blob reply give the same chunk payloads */
    struct rec r = { .ep = n->ep[B], .mode = H_SILENT };
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "blob", rec_handler, &r), 0);
    int cap1 = n->n_caps;
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "blob", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, r.n == 1, 1.0);
    assert_int_equal(cj_stream_reply(n->ep[B], &r.req, "ok", &(struct cj_stream_msg){ .encoding = "fobs" },
                                     blob_of(size, 9), NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 2, 5.0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.len, size);
    assert_true(data_is(p.data, p.len, 9));
    struct chunkseq blob_seq;
    collect_chunks(n, cap1, &blob_seq);
    assert_int_equal(blob_seq.n, src_seq.n);
    for (int k = 0; k < src_seq.n; k++) {
        assert_int_equal(blob_seq.lens[k], src_seq.lens[k]);
        assert_memory_equal(blob_seq.data[k], src_seq.data[k], src_seq.lens[k]);
    }

    /* an empty source: one FINAL chunk, no want */
    struct src_owner *e = src_owner_new(n, 0, pieces, 8, SRC_SYNC);
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "empty", src_handler, e), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "empty", NULL, blob_of(1, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, p.n == 3 && e->d.n == 1, 1.0);
    assert_int_equal(p.len, 0);
    assert_string_equal(p.rc, "ok");
    assert_int_equal(e->wants, 0);
    assert_int_equal(e->d.status, 0);
    src_owner_free(e);
    rec_clear(&r);
    rep_clear(&p);
    src_owner_free(o);
    memnet_free(n);
}

static void test_source_limits(void **state)
{
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[B].chunk_size = KiB;
    lim[B].tx_no_progress = 0.1;
    struct memnet *n = memnet_new(2, NAMES, lim);
    static const size_t pieces[] = { 1500 };
    struct rep p = { 0 };

    /* feed checks: beyond the size, unknown ids, blob streams */
    struct src_owner *o = src_owner_new(n, 10, pieces, 1, SRC_NEVER);
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "get", src_handler, o), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "get", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, o->wants == 1, 1.0);
    assert_int_equal(o->wants, 1);
    struct evbuffer *x = evbuffer_new();
    evbuffer_add(x, "0123456789A", 11);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, x), -1);   /* 11 > 10 */
    assert_int_equal(evbuffer_get_length(x), 11);               /* nothing taken */
    assert_int_equal(cj_stream_feed(n->ep[B], o->id + 1000, x), -1);
    evbuffer_drain(x, 5);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, x), 0);    /* 6 bytes */
    evbuffer_add(x, "abcde", 5);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, x), -1);   /* 6 + 5 > 10 */
    evbuffer_drain(x, 1);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, x), 0);    /* exactly 10 */
    o->fed = 10;
    o->outstanding = false;
    RUN_UNTIL(n, p.n == 1, 1.0);
    assert_int_equal(p.len, 10);
    assert_memory_equal(p.data, "56789Abcde", 10);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, x), -1);   /* finished */
    evbuffer_free(x);
    uint64_t bid;
    assert_int_equal(cj_stream_send(n->ep[B], NAMES[A], "app", "blob", NULL, NULL, blob_of(10, 1), NULL, NULL, &bid),
                     0);
    struct evbuffer *y = evbuffer_new();
    assert_int_equal(cj_stream_feed(n->ep[B], bid, y), -1);     /* not a source stream */
    evbuffer_free(y);
    src_owner_free(o);

    /* an owner that stops feeding fails the stream after tx_no_progress; the requester is told */
    o = src_owner_new(n, 10 * KiB, pieces, 1, SRC_SYNC);
    o->stall_after = 3000;
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "get", src_handler, o), 0);
    double t0 = memnet_now();
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "get", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, o->d.n == 1 && p.n == 2, 1.0);
    assert_int_equal(o->d.n, 1);
    assert_int_equal(o->d.status, -1);
    assert_non_null(strstr(o->d.why, "fed no bytes"));
    assert_true(memnet_now() - t0 >= 0.09);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.rc, "comm_error");
    assert_non_null(strstr(p.err, "fed no bytes"));
    assert_int_equal(cap_count(n, B, "sm__DATA", CJ_SM_ERROR), 1);
    assert_int_equal(cap_count(n, B, "sm__DATA", CJ_SM_CHUNK), 2);   /* 3000 bytes fed: two whole chunks */
    src_owner_free(o);

    /* cancel mid-source: no done, the requester fails, later feeds are refused */
    o = src_owner_new(n, 10 * KiB, pieces, 1, SRC_SYNC);
    o->stall_after = 4000;
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "get", src_handler, o), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "get", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, o->fed >= 4000 && o->outstanding, 1.0);
    settle(n, 0.01);
    assert_int_equal(cj_stream_cancel(n->ep[B], o->id), 0);
    RUN_UNTIL(n, p.n == 3, 1.0);
    assert_int_equal(p.n, 3);
    assert_string_equal(p.rc, "comm_error");
    settle(n, 0.15);   /* past tx_no_progress: nothing else fires */
    assert_int_equal(o->d.n, 0);
    struct evbuffer *z = evbuffer_new();
    evbuffer_add(z, "a", 1);
    assert_int_equal(cj_stream_feed(n->ep[B], o->id, z), -1);
    evbuffer_free(z);
    struct cj_stream_stats st;
    cj_stream_get_stats(n->ep[B], &st);
    assert_int_equal(st.tx_active, 0);
    cj_stream_get_stats(n->ep[A], &st);
    assert_int_equal(st.rx_active, 0);
    assert_int_equal(st.requests, 0);

    /* bad arguments */
    struct cj_stream_reqctx rq = { .has_ri = true, .origin = "site-1.J1", .ri = "r", .channel = "c", .topic = "t" };
    struct cj_stream_source big = { .size = CJ_STREAM_MAX_BLOB + 1, .want = src_want, .arg = o };
    struct cj_stream_source nowant = { .size = 5 };
    assert_int_equal(cj_stream_reply_source(n->ep[B], &rq, NULL, NULL, &big, NULL, NULL, NULL), -1);
    assert_int_equal(cj_stream_reply_source(n->ep[B], &rq, NULL, NULL, &nowant, NULL, NULL, NULL), -1);
    assert_int_equal(cj_stream_reply_source(n->ep[B], &rq, NULL, NULL, NULL, NULL, NULL, NULL), -1);
    rq.has_ri = false;
    nowant.want = src_want;
    assert_int_equal(cj_stream_reply_source(n->ep[B], &rq, NULL, NULL, &nowant, NULL, NULL, NULL), -1);

    /* a pending source stream is reported failed when the endpoint closes */
    struct src_owner *q = src_owner_new(n, 10 * KiB, pieces, 1, SRC_NEVER);
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "get", src_handler, q), 0);
    assert_int_equal(cj_stream_request(n->ep[A], NAMES[B], "server_command", "get", NULL, blob_of(10, 1), 2.0,
                                       on_reply, &p, NULL, NULL),
                     0);
    RUN_UNTIL(n, q->wants == 1, 1.0);
    cj_stream_free(n->ep[B]);
    n->ep[B] = NULL;
    assert_int_equal(q->d.n, 1);
    assert_int_equal(q->d.status, -1);
    n->count = 1;
    src_owner_free(q);
    src_owner_free(o);
    rep_clear(&p);
    memnet_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sink_reorder_dup),
        cmocka_unit_test(test_sink_hold_acks),
        cmocka_unit_test(test_sink_failures),
        cmocka_unit_test(test_source_pieces),
        cmocka_unit_test(test_source_limits),
    };
    return cmocka_run_group_tests_name("stream_progressive", tests, NULL, NULL);
}
