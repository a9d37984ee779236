/* test_stream.c — the sm__ streaming layer: endpoints in one event loop joined
 * by the in-memory io of memnet.h, which delivers through the loop and can drop, duplicate,
 * hold and reorder messages; crafted chunks injected straight into a
 * receiver; and builder parity with the captured chunk, ACK and reply.
 * Progressive blobs: sink replies (reordered, duplicated, hold_acks, sink
 * failures) and source replies (odd feed sizes, parity with a blob reply,
 * limits, an owner that stops feeding, cancel). */
#include "testutil.h"
#include "stream/stream.h"
#include "wire/header.h"

#include "memnet.h"

#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#define A 0
#define B 1
#define C 2
#define KiB 1024u
#define MiB (1024u * 1024u)

static struct cj_stream_limits small_limits(void)
{
    struct cj_stream_limits l;
    cj_stream_limits_default(&l);
    return l;
}

/* ---- inspecting what was sent --------------------------------------------------------------- */

static void cap_hdr(struct memnet *n, int i, struct cj_hdr *h)
{
    memnet_decode(h, n->caps[i].blk, n->caps[i].len);
}

/* i-th (0-based) captured message from `from` on topic (and sm__dt, -1 any); -1 if none. */
static int cap_find(struct memnet *n, int from, const char *topic, int dt, int nth)
{
    for (int i = 0; i < n->n_caps; i++) {
        struct cj_hdr h;
        if (from >= 0 && n->caps[i].from != from) continue;
        cap_hdr(n, i, &h);
        if (strcmp(h.topic, topic) != 0) continue;
        if (dt >= 0 && h.sm_dt != dt) continue;
        if (nth-- == 0) return i;
    }
    return -1;
}

static int cap_count(struct memnet *n, int from, const char *topic, int dt)
{
    int k = 0;
    while (cap_find(n, from, topic, dt, k) >= 0) k++;
    return k;
}

static bool has_key(const struct cj_hdr *h, const char *key)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1)
        if (mp_str_eq(e.key, e.key_len, key)) return true;
    return false;
}

static size_t count_key(const struct cj_hdr *h, const char *key)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    size_t k = 0;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1)
        if (mp_str_eq(e.key, e.key_len, key)) k++;
    return k;
}

static bool has_str(const struct cj_hdr *h, const char *key, const char *val)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        if (!mp_str_eq(e.key, e.key_len, key)) continue;
        struct mp_cur c;
        const uint8_t *p;
        uint32_t n;
        mp_cur_init(&c, e.val.p, e.val.len);
        return mp_read_str(&c, &p, &n, NULL) == 0 && mp_str_eq(p, n, val);
    }
    return false;
}

static bool em_is(const struct cj_hdr *h, const char *text)
{
    return h->sm_em.len == strlen(text) && memcmp(h->sm_em.p, text, h->sm_em.len) == 0;
}

static bool em_has(const struct cj_hdr *h, const char *text)
{
    char buf[512];
    size_t n = h->sm_em.len < sizeof buf - 1 ? h->sm_em.len : sizeof buf - 1;
    memcpy(buf, h->sm_em.p, n);
    buf[n] = 0;
    return strstr(buf, text) != NULL;
}

/* ---- recorders -------------------------------------------------------------------------------- */

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(i * 31u + seed + (i >> 12));
}

static struct evbuffer *blob_of(size_t len, unsigned seed)
{
    struct evbuffer *b = evbuffer_new();
    uint8_t *p = malloc(len ? len : 1);
    fill(p, len, seed);
    evbuffer_add(b, p, len);
    free(p);
    return b;
}

static bool data_is(const uint8_t *p, size_t len, unsigned seed)
{
    uint8_t *want = malloc(len ? len : 1);
    fill(want, len, seed);
    bool ok = memcmp(p, want, len) == 0;
    free(want);
    return ok;
}

enum { H_OK, H_FAIL, H_ECHO, H_SILENT };

struct rec {
    int n;
    int mode;
    struct cj_stream_ep *ep;
    uint8_t *data;
    size_t len;
    char enc[32];
    struct cj_stream_reqctx req;
    uint8_t *hblk;
    size_t hlen;
    const char *reply_rc;
    size_t reply_len;         /* H_ECHO: reply with this many pattern bytes (seed 7); 0 = echo */
};

static void rec_clear(struct rec *r)
{
    free(r->data);
    free(r->hblk);
    r->data = r->hblk = NULL;
}

static int rec_handler(void *arg, struct cj_stream_blob *b)
{
    struct rec *r = arg;
    rec_clear(r);
    r->n++;
    r->len = evbuffer_get_length(b->data);
    assert_int_equal(r->len, b->size);
    assert_int_equal((int64_t)b->size, b->hdr->sm_sz);
    assert_int_equal(b->hdr->sm_sq, 0);   /* the first chunk's headers */
    r->data = malloc(r->len ? r->len : 1);
    evbuffer_remove(b->data, r->data, r->len);
    snprintf(r->enc, sizeof r->enc, "%s", b->encoding);
    r->req = b->req;
    r->hblk = malloc(b->hlen);
    memcpy(r->hblk, b->hblk, b->hlen);
    r->hlen = b->hlen;
    if (r->mode == H_FAIL) {
        snprintf(b->error, sizeof b->error, "cannot decode the request");
        return -1;
    }
    if (r->mode == H_ECHO) {
        struct evbuffer *out = r->reply_len ? blob_of(r->reply_len, 7) : evbuffer_new();
        if (!r->reply_len) evbuffer_add(out, r->data, r->len);
        struct cj_stream_msg m = { .encoding = "fobs" };
        assert_int_equal(cj_stream_reply(r->ep, &b->req, r->reply_rc, &m, out, NULL, NULL), 0);
    }
    return 0;
}

struct done {
    int n, status;
    char why[256];
};

static void on_done(void *arg, int status, const char *why)
{
    struct done *d = arg;
    d->n++;
    d->status = status;
    snprintf(d->why, sizeof d->why, "%s", why ? why : "");
}

struct rep {
    int n;
    char rc[64], err[256], enc[32];
    uint8_t *data;
    size_t len;
    uint8_t *hblk;
    size_t hlen;
};

static void on_reply(void *arg, struct cj_stream_reply *r)
{
    struct rep *p = arg;
    p->n++;
    snprintf(p->rc, sizeof p->rc, "%s", r->return_code);
    snprintf(p->err, sizeof p->err, "%s", r->error);
    snprintf(p->enc, sizeof p->enc, "%s", r->encoding);
    free(p->data);
    free(p->hblk);
    p->data = p->hblk = NULL;
    p->len = p->hlen = 0;
    if (r->data) {
        p->len = evbuffer_get_length(r->data);
        p->data = malloc(p->len ? p->len : 1);
        evbuffer_copyout(r->data, p->data, p->len);
    }
    if (r->hdr) {
        p->hlen = r->hdr->len;
        p->hblk = malloc(p->hlen);
        memcpy(p->hblk, r->hdr->blk, p->hlen);
    }
}

static void rep_clear(struct rep *p)
{
    free(p->data);
    free(p->hblk);
}

/* ---- crafted chunks ------------------------------------------------------------------------------ */

struct spec {
    const char *origin, *ch, *tp, *ri;
    uint64_t id, sq, os, sz;
    int dt;
    int64_t cs, ws, ai;
    bool rs;
    double rw, rt;
};

static void inject(struct memnet *n, int to, const struct spec *s, const uint8_t *data, size_t len)
{
    struct cj_hb b;
    msgpack_sbuffer out;
    struct cj_err e = { 0 };
    cj_hb_init(&b);
    msgpack_sbuffer_init(&out);
    if (s->ri) cj_hb_str(&b, "sm__ri", s->ri);
    cj_hb_str(&b, "sm__pe", "bytes");
    cj_hb_str(&b, "sm__ch", s->ch ? s->ch : "app");
    cj_hb_str(&b, "sm__tp", s->tp ? s->tp : "blob");
    cj_hb_uint(&b, "sm__sz", s->sz);
    cj_hb_uint(&b, "sm__id", s->id);
    cj_hb_int(&b, "sm__dt", s->dt ? s->dt : CJ_SM_CHUNK);
    cj_hb_uint(&b, "sm__sq", s->sq);
    cj_hb_uint(&b, "sm__os", s->os);
    cj_hb_bool(&b, "sm__rs", s->rs);
    cj_hb_bool(&b, "sm__op", false);
    cj_hb_int(&b, "sm__cs", s->cs ? s->cs : 1048576);
    cj_hb_int(&b, "sm__ws", s->ws ? s->ws : 67108864);
    if (s->sq == 0) {
        cj_hb_int(&b, "sm__ai", s->ai ? s->ai : 4194304);
        if (s->rs) {
            cj_hb_float(&b, "sm__rw", s->rw);
            cj_hb_float(&b, "sm__rt", s->rt);
        }
    }
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = s->origin, .to = n->name[to], .destination = n->name[to],
        .channel = "sm__STREAM", .topic = "sm__DATA", .payload_encoding = "bytes", .payload_len = (int64_t)len,
        .route_time = 1.0, .send_time = 1.0,
    };
    cj_hb_cellnet(&b, &m);
    assert_int_equal(cj_hb_finish(&b, &out, &e), 0);
    struct cj_hdr h;
    memnet_decode(&h, (const uint8_t *)out.data, out.size);
    struct evbuffer *pl = evbuffer_new();
    evbuffer_add(pl, data, len);
    cj_stream_input(n->ep[to], &h, pl);
    assert_int_equal(evbuffer_get_length(pl), 0);
    evbuffer_free(pl);
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&out);
}

/* An error notice or ACK injected into an endpoint. */
static void inject_notice(struct memnet *n, int to, const char *origin, const char *topic, uint64_t id, const char *ri,
                          const char *em, const char *fd)
{
    struct cj_hb b;
    msgpack_sbuffer out;
    struct cj_err e = { 0 };
    cj_hb_init(&b);
    msgpack_sbuffer_init(&out);
    cj_hb_uint(&b, "sm__id", id);
    cj_hb_int(&b, "sm__dt", 6);
    cj_hb_str(&b, "sm__em", em);
    if (ri) cj_hb_str(&b, "sm__ri", ri);
    if (fd) cj_hb_str(&b, "sm__fd", fd);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .to = n->name[to], .destination = n->name[to], .channel = "sm__STREAM",
        .topic = topic, .payload_encoding = "none", .payload_len = 0, .route_time = 1.0, .send_time = 1.0,
    };
    cj_hb_cellnet(&b, &m);
    assert_int_equal(cj_hb_finish(&b, &out, &e), 0);
    struct cj_hdr h;
    memnet_decode(&h, (const uint8_t *)out.data, out.size);
    struct evbuffer *pl = evbuffer_new();
    cj_stream_input(n->ep[to], &h, pl);
    evbuffer_free(pl);
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&out);
}

static void inject_ack(struct memnet *n, int to, const char *origin, uint64_t id, uint64_t os, uint64_t sq)
{
    struct cj_hb b;
    msgpack_sbuffer out;
    struct cj_err e = { 0 };
    cj_hb_init(&b);
    msgpack_sbuffer_init(&out);
    cj_hb_uint(&b, "sm__id", id);
    cj_hb_int(&b, "sm__dt", 3);
    cj_hb_uint(&b, "sm__os", os);
    cj_hb_uint(&b, "sm__sq", sq);
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

static const char *const NAMES[] = { "site-1.J1", "server.J1", "site-1.J1.w1" };

/* Every ACK sent by `from` carries sm__id, sm__dt 3, sm__os and sm__sq. */
static void check_acks_complete(struct memnet *n, int from)
{
    for (int k = 0, i; (i = cap_find(n, from, "sm__ACK", -1, k)) >= 0; k++) {
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        if (h.sm_dt != CJ_SM_ACK) continue;
        assert_true(cj_hdr_has(&h, CJ_HK_SM_ID));
        assert_true(cj_hdr_has(&h, CJ_HK_SM_OS));
        assert_true(cj_hdr_has(&h, CJ_HK_SM_SQ));
        assert_string_equal(h.payload_encoding, "none");
        assert_false(h.reply_expected);
        assert_true(n->caps[i].control);
    }
}

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

static enum memnet_act hold_acks(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return strcmp(h->topic, "sm__ACK") == 0 ? MEMNET_HOLD : MEMNET_DELIVER;
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

/* ---- captured frames ------------------------------------------------------------------------------ */

struct frame {
    uint8_t *buf;
    size_t len;
    const uint8_t *blk;
    size_t hlen;
    const uint8_t *payload;
    size_t plen;
};

static void frame_load(struct frame *f, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "frames/%s.bin", name);
    f->buf = tu_read_vector(path, &f->len);
    assert_true(f->len >= 16);
    f->hlen = (size_t)f->buf[4] << 8 | f->buf[5];
    assert_true(16 + f->hlen <= f->len);
    f->blk = f->buf + 16;
    f->payload = f->blk + f->hlen;
    f->plen = f->len - 16 - f->hlen;
}

static bool val_eq(struct cj_span a, struct cj_span b)
{
    struct mp_cur ca, cb;
    struct mp_val va, vb;
    mp_cur_init(&ca, a.p, a.len);
    mp_cur_init(&cb, b.p, b.len);
    if (mp_next(&ca, &va, NULL) || mp_next(&cb, &vb, NULL)) return false;
    bool ia = va.kind == MP_UINT || va.kind == MP_INT, ib = vb.kind == MP_UINT || vb.kind == MP_INT;
    if (ia && ib) return va.kind == vb.kind && (va.kind == MP_UINT ? va.u == vb.u : va.i == vb.i);
    if (va.kind == MP_FLOAT && vb.kind == MP_FLOAT) return va.f == vb.f;
    return a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
}

static bool in_list(const uint8_t *k, uint32_t n, const char *const *list)
{
    for (; list && *list; list++)
        if (mp_str_eq(k, n, *list)) return true;
    return false;
}

/* Same key set (minus `absent`, keys the capture has and we do not send) and
 * equal values except for `differ`. */
static void same_keys_values(const struct cj_hdr *cap, const struct cj_hdr *ours, const char *const *differ,
                             const char *const *absent)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    uint32_t matched = 0;
    cj_hdr_iter_init(&it, cap);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        if (in_list(e.key, e.key_len, absent)) continue;
        struct cj_hdr_iter it2;
        struct cj_hdr_entry f;
        bool found = false;
        cj_hdr_iter_init(&it2, ours);
        while (cj_hdr_iter_next(&it2, &f, NULL) == 1) {
            if (f.key_len != e.key_len || memcmp(f.key, e.key, e.key_len) != 0) continue;
            found = true;
            if (!in_list(e.key, e.key_len, differ) && !val_eq(e.val, f.val))
                fail_msg("value of '%.*s' differs from the capture", (int)e.key_len, (const char *)e.key);
        }
        if (!found) fail_msg("key '%.*s' missing", (int)e.key_len, (const char *)e.key);
        matched++;
    }
    if (matched != ours->n_entries) fail_msg("we send %u keys, the capture has %u", ours->n_entries, matched);
}

static struct cj_stream_ep *g_server;

static int cap08_handler(void *arg, struct cj_stream_blob *b)
{
    struct frame *f8 = arg;
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, f8->payload, f8->plen);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_string_equal(b->req.ri, "c8b9e345-2c13-4b9c-93a5-95741538be49");
    assert_int_equal(b->size, 23);
    return cj_stream_reply(g_server, &b->req, "ok", &m, out, NULL, NULL);
}

static void test_capture_parity(void **state)
{
    struct frame f6, f7, f8;
    frame_load(&f6, "cap06_stream_req_single_chunk");
    frame_load(&f7, "cap07_stream_ack");
    frame_load(&f8, "cap08_stream_reply_return_only");
    struct cj_hdr h6, h7, h8, ours;
    memnet_decode(&h6, f6.blk, f6.hlen);
    memnet_decode(&h7, f7.blk, f7.hlen);
    memnet_decode(&h8, f8.blk, f8.hlen);

    const char *names[] = { "site-1", "server" };
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].ack_interval = 16 * MiB;   /* the capture's requester sent 16 MiB, the server 4 MiB */
    lim[B].ack_interval = 4 * MiB;
    struct memnet *n = memnet_new(2, names, lim);
    g_server = n->ep[B];
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", cap08_handler, &f8), 0);
    n->filter = NULL;

    /* cap06: our request chunk for the same 23-byte blob */
    struct evbuffer *blob = evbuffer_new();
    evbuffer_add(blob, f6.payload, f6.plen);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_send(n->ep[A], "server", "server_command", "echo", &m, h6.sm_ri, blob, NULL, NULL,
                                    NULL),
                     0);
    RUN_UNTIL(n, cap_find(n, A, "sm__DATA", -1, 0) >= 0, 1.0);
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &ours);
    const char *const differ6[] = { "sm__id", "cn__route", "cn__send_time", NULL };
    same_keys_values(&h6, &ours, differ6, NULL);
    settle(n, 0.02);
    int before = n->n_caps;

    /* cap07 / cap08: the captured request itself given to "server" */
    struct evbuffer *pl = evbuffer_new();
    evbuffer_add(pl, f6.payload, f6.plen);
    cj_stream_input(n->ep[B], &h6, pl);
    evbuffer_free(pl);
    RUN_UNTIL(n, cap_count(n, B, "sm__DATA", -1) == 2, 1.0);
    int i7 = -1, i8 = -1;
    for (int i = before; i < n->n_caps; i++) {
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        if (n->caps[i].from != B) continue;
        if (strcmp(h.topic, "sm__ACK") == 0 && h.sm_id == h6.sm_id && i7 < 0) i7 = i;
        if (strcmp(h.topic, "sm__DATA") == 0 && i8 < 0) i8 = i;
    }
    assert_true(i7 >= 0 && i8 >= 0);
    cap_hdr(n, i7, &ours);
    const char *const differ7[] = { "cn__route", "cn__send_time", NULL };
    same_keys_values(&h7, &ours, differ7, NULL);
    assert_int_equal(ours.sm_os, 23);
    assert_int_equal(ours.sm_sq, 0);

    cap_hdr(n, i8, &ours);
    /* We send replies non-reliably (sm__rs false, so no sm__rw / sm__rt): allowed by §7. */
    const char *const differ8[] = { "sm__id", "sm__rs", "cn__route", "cn__send_time", NULL };
    const char *const absent8[] = { "sm__rw", "sm__rt", NULL };
    same_keys_values(&h8, &ours, differ8, absent8);
    assert_false(ours.sm_rs);
    assert_int_equal(n->caps[i8].plen, 43);
    memnet_free(n);
    free(f6.buf);
    free(f7.buf);
    free(f8.buf);
}

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
        cmocka_unit_test(test_request_reply),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_auth_headers),
        cmocka_unit_test(test_api_edges),
        cmocka_unit_test(test_capture_parity),
        cmocka_unit_test(test_sink_reorder_dup),
        cmocka_unit_test(test_sink_hold_acks),
        cmocka_unit_test(test_sink_failures),
        cmocka_unit_test(test_source_pieces),
        cmocka_unit_test(test_source_limits),
    };
    return cmocka_run_group_tests_name("stream", tests, NULL, NULL);
}
