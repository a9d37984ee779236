/* SPDX-License-Identifier: Apache-2.0 */
/* streamfix.h — fixtures shared by the test_stream*.c suites of the sm__
 * streaming layer: what was sent (captured headers by topic, keys and error
 * messages), owners that record blobs, replies and completions, crafted chunks,
 * notices and ACKs injected straight into a receiver, and the hold_acks filter.
 * The endpoints run in memnet.h's in-memory network. */
#ifndef CJ_TEST_STREAMFIX_H
#define CJ_TEST_STREAMFIX_H

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

static inline struct cj_stream_limits small_limits(void)
{
    struct cj_stream_limits l;
    cj_stream_limits_default(&l);
    return l;
}

/* ---- inspecting what was sent --------------------------------------------------------------- */

static inline void cap_hdr(struct memnet *n, int i, struct cj_hdr *h)
{
    memnet_decode(h, n->caps[i].blk, n->caps[i].len);
}

/* i-th (0-based) captured message from `from` on topic (and sm__dt, -1 any); -1 if none. */
static inline int cap_find(struct memnet *n, int from, const char *topic, int dt, int nth)
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

static inline int cap_count(struct memnet *n, int from, const char *topic, int dt)
{
    int k = 0;
    while (cap_find(n, from, topic, dt, k) >= 0) k++;
    return k;
}

static inline bool has_key(const struct cj_hdr *h, const char *key)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1)
        if (mp_str_eq(e.key, e.key_len, key)) return true;
    return false;
}

static inline size_t count_key(const struct cj_hdr *h, const char *key)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    size_t k = 0;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1)
        if (mp_str_eq(e.key, e.key_len, key)) k++;
    return k;
}

static inline bool has_str(const struct cj_hdr *h, const char *key, const char *val)
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

static inline bool em_is(const struct cj_hdr *h, const char *text)
{
    return h->sm_em.len == strlen(text) && memcmp(h->sm_em.p, text, h->sm_em.len) == 0;
}

static inline bool em_has(const struct cj_hdr *h, const char *text)
{
    char buf[512];
    size_t n = h->sm_em.len < sizeof buf - 1 ? h->sm_em.len : sizeof buf - 1;
    memcpy(buf, h->sm_em.p, n);
    buf[n] = 0;
    return strstr(buf, text) != NULL;
}

/* ---- recorders -------------------------------------------------------------------------------- */

static inline void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(i * 31u + seed + (i >> 12));
}

static inline struct evbuffer *blob_of(size_t len, unsigned seed)
{
    struct evbuffer *b = evbuffer_new();
    uint8_t *p = malloc(len ? len : 1);
    fill(p, len, seed);
    evbuffer_add(b, p, len);
    free(p);
    return b;
}

static inline bool data_is(const uint8_t *p, size_t len, unsigned seed)
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

static inline void rec_clear(struct rec *r)
{
    free(r->data);
    free(r->hblk);
    r->data = r->hblk = NULL;
}

static inline int rec_handler(void *arg, struct cj_stream_blob *b)
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

static inline void on_done(void *arg, int status, const char *why)
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

static inline void on_reply(void *arg, struct cj_stream_reply *r)
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

static inline void rep_clear(struct rep *p)
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
    bool bare;      /* as FLARE <= 2.8 sends: no sm__rs, sm__cs, sm__ws, sm__ai */
};

static inline void inject(struct memnet *n, int to, const struct spec *s, const uint8_t *data, size_t len)
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
    if (!s->bare) cj_hb_bool(&b, "sm__rs", s->rs);
    cj_hb_bool(&b, "sm__op", false);
    if (!s->bare) cj_hb_int(&b, "sm__cs", s->cs ? s->cs : 1048576);
    if (!s->bare) cj_hb_int(&b, "sm__ws", s->ws ? s->ws : 67108864);
    if (s->sq == 0 && !s->bare) {
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
static inline void inject_notice(struct memnet *n, int to, const char *origin, const char *topic, uint64_t id, const char *ri,
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

static inline void inject_ack(struct memnet *n, int to, const char *origin, uint64_t id, uint64_t os, uint64_t sq)
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
static inline void check_acks_complete(struct memnet *n, int from)
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

static inline enum memnet_act hold_acks(struct memnet *n, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    return strcmp(h->topic, "sm__ACK") == 0 ? MEMNET_HOLD : MEMNET_DELIVER;
}


#endif
