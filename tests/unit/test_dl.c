/* SPDX-License-Identifier: Apache-2.0 */
/* test_dl.c — the download service: producer (lib/dl/producer.c) and client
 * (lib/dl/client.c) on stream endpoints in one event loop, joined by an
 * in-memory io (memnet.h) that can drop replies and taps what is
 * sent.  Raw requests built with dlmsg.h check the producer byte for byte
 * against vectors 30-37. */
#include "testutil.h"

#include <errno.h>
#include <unistd.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/client.h"
#include "dl/producer.h"
#include "payload/lobs.h"
#include "stream/stream.h"
#include "wire/header.h"

#include "dl/dlmsg.h"

#include "memnet.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define S 0
#define W1 1
#define W2 2
#define W3 3

static const char *const NAMES[] = { "server.J1", "site-1.J1.trainer_1", "site-2.J1.trainer_1", "site-3.J1.trainer_1" };
#define REF_C9 "11111111-2222-4333-8444-0000000000c9"

/* ---- the in-memory io (memnet.h), tapping and dropping download replies ------------------------- */

struct tap {                   /* a chunk 0 seen on the wire: its first bytes */
    int from;
    bool reply;
    uint64_t sm_id;
    uint8_t head[4096];
    size_t len;
};

struct net {
    struct memnet m;           /* first: RUN_UNTIL and the filter take a struct net for one */
    /* drops: replies from S whose ordinal (0-based, counted at chunk 0) is in drop_mask, or all */
    uint64_t drop_mask;
    bool drop_all;
    int replies_seen;
    uint64_t dropping[64];
    int n_dropping;
    struct tap *taps;
    int n_taps, cap_taps;
};

static bool is_dropping(struct net *n, uint64_t id)
{
    for (int i = 0; i < n->n_dropping; i++)
        if (n->dropping[i] == id) return true;
    return false;
}

/* Taps chunk 0 of every data stream; decides whether a reply from S is dropped. */
static enum memnet_act tap_and_filter(struct memnet *m, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    struct net *n = (struct net *)m;
    if (strcmp(h->topic, CJ_STREAM_TOPIC_DATA)) return MEMNET_DELIVER;
    bool reply = !strcmp(h->sm_ch, CJ_STREAM_RETURN_ONLY);
    if (h->sm_sq == 0) {
        if (n->n_taps == n->cap_taps) {
            n->cap_taps = n->cap_taps ? 2 * n->cap_taps : 64;
            n->taps = realloc(n->taps, n->cap_taps * sizeof *n->taps);
        }
        struct tap *t = &n->taps[n->n_taps++];
        t->from = from;
        t->reply = reply;
        t->sm_id = h->sm_id;
        t->len = evbuffer_copyout(pl, t->head, sizeof t->head);
        if (reply && from == S) {
            int k = n->replies_seen++;
            if ((n->drop_all || (k < 64 && (n->drop_mask >> k & 1))) && n->n_dropping < 64)
                n->dropping[n->n_dropping++] = h->sm_id;
        }
    }
    return reply && from == S && is_dropping(n, h->sm_id) ? MEMNET_DROP : MEMNET_DELIVER;
}

static struct net *net_new(int count)
{
    struct net *n = calloc(1, sizeof *n);
    memnet_init(&n->m, count, NAMES, NULL);
    n->m.filter = tap_and_filter;
    return n;
}

static void net_free(struct net *n)
{
    memnet_fini(&n->m);
    free(n->taps);
    free(n);
}

/* Requests sent by `from` on the download topic (chunk 0 taps, in order). */
static int tap_requests(struct net *n, int from, const struct tap **out, int cap)
{
    int k = 0;
    for (int i = 0; i < n->n_taps; i++)
        if (n->taps[i].from == from && !n->taps[i].reply) {
            if (k < cap) out[k] = &n->taps[i];
            k++;
        }
    return k;
}

static const struct tap *tap_reply(struct net *n, int nth)
{
    for (int i = 0; i < n->n_taps; i++)
        if (n->taps[i].from == S && n->taps[i].reply && nth-- == 0) return &n->taps[i];
    return NULL;
}

static bool mem_has(const uint8_t *p, size_t len, const void *needle, size_t nlen)
{
    return nlen <= len && memmem(p, len, needle, nlen) != NULL;
}

static int count_str(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) k++;
    return k;
}

/* ---- item sources (the producer's owner) -------------------------------------------------------- */

static uint8_t *pattern;          /* 12 MiB, item i starts at offset 7 * i */
#define PATTERN_LEN (12 * MiB)

struct items {
    size_t n;
    uint64_t sizes[16];
    const uint8_t *data[16];
    int calls[16];
    int fail_at;                  /* item_fn fails for this index; -1 none */
};

static void items_pattern(struct items *it, size_t n, const uint64_t *sizes)
{
    memset(it, 0, sizeof *it);
    it->n = n;
    it->fail_at = -1;
    for (size_t i = 0; i < n; i++) {
        it->sizes[i] = sizes[i];
        it->data[i] = pattern + 7 * i;
        assert_true(7 * i + sizes[i] <= PATTERN_LEN);
    }
}

static int item_fn(void *ctx, size_t index, struct evbuffer *out)
{
    struct items *it = ctx;
    it->calls[index]++;
    if ((int)index == it->fail_at) return -1;
    /* by reference: the producer never copies the owner's bytes */
    return evbuffer_add_reference(out, it->data[index], (size_t)it->sizes[index], NULL, NULL);
}

struct refdone {
    int n;
    struct items *items;          /* ctx given to add_ref is the items; done finds this through a global */
    enum cj_dl_outcome out;
    char ref[CJ_DL_REF_ID_MAX + 1];
    size_t n_rcv;
    char fqcn[4][64];
    enum cj_dl_rcv_state st[4];
    bool expected[4];
    uint64_t bytes[4];
    double at;
};

static struct refdone rd;

static void ref_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome, const struct cj_dl_receiver_info *rcv,
                     size_t n_rcv)
{
    rd.n++;
    rd.out = outcome;
    rd.at = memnet_now();
    snprintf(rd.ref, sizeof rd.ref, "%s", ref_id);
    rd.n_rcv = n_rcv;
    for (size_t i = 0; i < n_rcv && i < 4; i++) {
        snprintf(rd.fqcn[i], sizeof rd.fqcn[i], "%s", rcv[i].fqcn);
        rd.st[i] = rcv[i].state;
        rd.expected[i] = rcv[i].expected;
        rd.bytes[i] = rcv[i].bytes;
    }
}

/* The receiver entry for fqcn in the last done report, -1 if absent. */
static int rd_find(const char *fqcn)
{
    for (size_t i = 0; i < rd.n_rcv && i < 4; i++)
        if (!strcmp(rd.fqcn[i], fqcn)) return (int)i;
    return -1;
}

static struct cj_dl_producer *producer(struct net *n, const struct cj_dl_producer_cfg *cfg)
{
    struct cj_dl_producer *p = cj_dl_producer_new(n->m.base, n->m.ep[S], cfg);
    assert_non_null(p);
    return p;
}

static void add_ref(struct cj_dl_producer *p, const char *id, struct items *it, uint32_t num, double timeout,
                    char out[CJ_DL_REF_ID_MAX + 1])
{
    struct cj_dl_ref_cfg c = {
        .ref_id = id, .n_items = it->n, .sizes = it->sizes, .item_fn = item_fn, .num_receivers = num,
        .timeout = timeout, .done = ref_done, .ctx = it,
    };
    assert_int_equal(cj_dl_producer_add_ref(p, &c, out), 0);
}

/* ---- the client side ------------------------------------------------------------------------------ */

struct fetchrec {
    const struct items *src;      /* expected contents (NULL: not checked) */
    int items;
    bool content_ok;
    int done;
    bool ok;
    char why[640];
    struct cj_dl_fetch *f;
    int cancel_at;                /* cj_dl_fetch_cancel from inside the item callback; -1 never */
    int refuse_at;                /* return -1 for this index; -1 never */
    size_t lens[16];
};

static void fetchrec_init(struct fetchrec *r, const struct items *src)
{
    memset(r, 0, sizeof *r);
    r->src = src;
    r->content_ok = true;
    r->cancel_at = r->refuse_at = -1;
}

static int on_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct fetchrec *r = ctx;
    size_t len = evbuffer_get_length(item);
    if (index != (uint64_t)r->items) r->content_ok = false;
    if (index < 16) r->lens[index] = len;
    if (r->src) {
        if (index >= r->src->n || len != r->src->sizes[index] ||
            (len && memcmp(evbuffer_pullup(item, -1), r->src->data[index], len)))
            r->content_ok = false;
    }
    evbuffer_free(item);
    r->items++;
    if ((int)index == r->cancel_at) cj_dl_fetch_cancel(r->f);
    return (int)index == r->refuse_at ? -1 : 0;
}

static void on_fetch_done(void *ctx, bool ok, const char *why)
{
    struct fetchrec *r = ctx;
    r->done++;
    r->ok = ok;
    snprintf(r->why, sizeof r->why, "%s", why ? why : "(null)");
}

static struct cj_dl_fetch_cfg fast_cfg(void)
{
    struct cj_dl_fetch_cfg c;
    cj_dl_fetch_cfg_default(&c);
    c.request_timeout = 0.2;
    c.backoff_base = 0.02;
    return c;
}

static void fetch_cfg(struct net *n, int from, const char *ref, struct fetchrec *r, const struct cj_dl_fetch_cfg *cp)
{
    struct cj_dl_fetch_cfg c = *cp;
    r->f = cj_dl_fetch(n->m.base, n->m.ep[from], NAMES[S], ref, &c, on_item, on_fetch_done, r);
    assert_non_null(r->f);
}

static void fetch(struct net *n, int from, const char *ref, struct fetchrec *r)
{
    struct cj_dl_fetch_cfg c = fast_cfg();
    fetch_cfg(n, from, ref, r, &c);
}

/* ---- raw requests ------------------------------------------------------------------------------------- */

struct rep {
    int n;
    char rc[64];
    uint8_t *data;
    size_t len;
};

static void on_raw_reply(void *arg, struct cj_stream_reply *r)
{
    struct rep *p = arg;
    p->n++;
    snprintf(p->rc, sizeof p->rc, "%s", r->return_code);
    free(p->data);
    p->data = NULL;
    p->len = r->data ? evbuffer_get_length(r->data) : 0;
    p->data = malloc(p->len + 1);
    if (r->data) evbuffer_copyout(r->data, p->data, p->len);
}

static void raw_request(struct net *n, int from, const uint8_t *pl, size_t len, struct rep *out)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, pl, len);
    struct cj_stream_msg m = { .encoding = "fobs" };
    int before = out->n;
    assert_int_equal(cj_stream_request(n->m.ep[from], NAMES[S], CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, b, 2.0, on_raw_reply,
                                       out, NULL, NULL),
                     0);
    RUN_UNTIL(n, out->n > before, 3.0);
    assert_int_equal(out->n, before + 1);
}

static void raw_fire(struct net *n, int from, const uint8_t *pl, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, pl, len);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_send(n->m.ep[from], NAMES[S], CJ_DL_CHANNEL, CJ_DL_TOPIC, &m, NULL, b, NULL, NULL, NULL),
                     0);
    settle(n, 0.03);
}

static void raw_pull(struct net *n, int from, const char *ref, bool capable, const uint8_t *state, size_t slen,
                     struct rep *out)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_pull(&sb, ref, capable, state, slen, NULL), 0);
    raw_request(n, from, (const uint8_t *)sb.data, sb.size, out);
    msgpack_sbuffer_destroy(&sb);
}

static void raw_confirm(struct net *n, int from, const char *ref, bool success, const char *nonce)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_confirm(&sb, ref, success, nonce, NULL), 0);
    raw_fire(n, from, (const uint8_t *)sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void raw_cancel(struct net *n, int from, const char *ref)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_cancel(&sb, ref, NULL), 0);
    raw_fire(n, from, (const uint8_t *)sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void rep_decode(const struct rep *p, struct cj_dl_reply *r, struct cj_dl_item_ref *items, size_t cap)
{
    struct cj_err e = { 0 };
    assert_string_equal(p->rc, "ok");
    if (cj_dl_decode_reply(p->data, p->len, r, items, cap, &e)) fail_msg("reply does not decode: %s", e.msg);
}

static bool rep_is_vector(const struct rep *p, const char *vec)
{
    size_t vlen;
    uint8_t *v = tu_read_vector(vec, &vlen);
    bool eq = p->len == vlen && memcmp(p->data, v, vlen) == 0;
    free(v);
    return eq;
}

static void reset(void)
{
    memset(&rd, 0, sizeof rd);
}

/* ---- tests ----------------------------------------------------------------------------------------------- */

/* Pull 30 -> exactly reply 31; pull 32 -> EOF with a nonce (vector 33's
 * shape); confirm -> the ref completes; late probes replay vector 37. */
static void test_vector31_eof_confirm(void **state)
{
    reset();
    struct net *n = net_new(3);
    struct cj_dl_producer *p = producer(n, NULL);
    size_t l40, l41, l30, l32;
    uint8_t *v40 = tu_read_vector("40_item_T0.npz", &l40), *v41 = tu_read_vector("41_item_T1.npz", &l41);
    uint8_t *v30 = tu_read_vector("30_dl_pull_first.bin", &l30), *v32 = tu_read_vector("32_dl_pull_next.bin", &l32);
    struct items it = { .n = 2, .sizes = { l40, l41 }, .data = { v40, v41 }, .fail_at = -1 };
    char id[CJ_DL_REF_ID_MAX + 1];
    add_ref(p, REF_C9, &it, 1, 0, id);
    assert_string_equal(id, REF_C9);

    struct rep r = { 0 };
    raw_request(n, W1, v30, l30, &r);
    assert_string_equal(r.rc, "ok");
    assert_true(rep_is_vector(&r, "31_dl_reply_data.bin"));

    raw_request(n, W1, v32, l32, &r);
    struct cj_dl_reply dr;
    rep_decode(&r, &dr, NULL, 0);
    assert_int_equal(dr.status, CJ_DL_STATUS_EOF);
    assert_true(dr.confirm_expected);
    assert_true(dr.has_nonce);
    assert_int_equal(r.len, 88);   /* as vector 33 */
    msgpack_sbuffer sb;            /* same bytes as our own encoding with that nonce: same shape as 33 */
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, dr.confirm_nonce, NULL), 0);
    assert_int_equal(sb.size, r.len);
    assert_memory_equal(sb.data, r.data, r.len);
    msgpack_sbuffer_destroy(&sb);
    assert_int_equal(rd.n, 0);     /* awaiting the confirm */
    assert_true(cj_dl_producer_has_ref(p, REF_C9));

    raw_confirm(n, W1, REF_C9, true, dr.confirm_nonce);
    RUN_UNTIL(n, rd.n == 1, 1.0);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_string_equal(rd.ref, REF_C9);
    assert_int_equal(rd.n_rcv, 1);
    assert_string_equal(rd.fqcn[0], NAMES[W1]);
    assert_int_equal(rd.st[0], CJ_DL_RCV_OK);
    assert_int_equal(rd.bytes[0], l40 + l41);
    assert_false(cj_dl_producer_has_ref(p, REF_C9));

    /* a late repeated EOF probe (and even a first pull) from the same requester: the tombstone */
    raw_request(n, W1, v32, l32, &r);
    assert_true(rep_is_vector(&r, "37_dl_reply_eof_legacy.bin"));
    raw_request(n, W1, v30, l30, &r);
    assert_true(rep_is_vector(&r, "37_dl_reply_eof_legacy.bin"));
    /* anyone else: invalid_request, no body */
    raw_request(n, W2, v30, l30, &r);
    assert_string_equal(r.rc, "invalid_request");
    assert_int_equal(r.len, 0);
    settle(n, 0.02);
    assert_int_equal(rd.n, 1);

    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.data_replies, 1);
    assert_int_equal(st.eof_replies, 3);   /* one served, two replayed */
    assert_int_equal(st.replays, 2);
    assert_int_equal(st.confirms_accepted, 1);
    assert_int_equal(st.invalid_requests, 1);
    assert_int_equal(st.refs_ok, 1);
    assert_int_equal(st.refs_live, 0);
    assert_int_equal(st.tombstones, 1);
    assert_int_equal(st.bytes_served, l40 + l41);
    assert_int_equal(it.calls[0], 1);
    assert_int_equal(it.calls[1], 1);

    free(r.data);
    cj_dl_producer_free(p);
    net_free(n);
    free(v40);
    free(v41);
    free(v30);
    free(v32);
}

/* The client downloads items 40 and 41: one data reply + the EOF probe, confirm sent. */
static void test_fetch_items(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    size_t l40, l41;
    uint8_t *v40 = tu_read_vector("40_item_T0.npz", &l40), *v41 = tu_read_vector("41_item_T1.npz", &l41);
    struct items it = { .n = 2, .sizes = { l40, l41 }, .data = { v40, v41 }, .fail_at = -1 };
    char id[CJ_DL_REF_ID_MAX + 1];
    add_ref(p, NULL, &it, 1, 0, id);
    assert_int_equal(strlen(id), 36);   /* a fresh uuid4 */
    assert_int_equal(id[14], '4');

    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    fetch(n, W1, id, &fr);
    assert_int_equal(fr.done, 0);       /* never from inside cj_dl_fetch */
    RUN_UNTIL(n, fr.done && rd.n, 2.0);
    assert_int_equal(fr.done, 1);
    assert_true(fr.ok);
    assert_string_equal(fr.why, "");
    assert_int_equal(fr.items, 2);
    assert_true(fr.content_ok);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(rd.st[0], CJ_DL_RCV_OK);

    /* requests: first pull (no state), pull with state {0,2}, confirm */
    const struct tap *rq[8];
    assert_int_equal(tap_requests(n, W1, rq, 8), 3);
    size_t l30, l32;
    uint8_t *v30 = tu_read_vector("30_dl_pull_first.bin", &l30), *v32 = tu_read_vector("32_dl_pull_next.bin", &l32);
    /* same bytes as the vectors once the ref id is ours */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    cj_dl_encode_pull(&sb, id, true, NULL, 0, NULL);
    assert_int_equal(rq[0]->len, sb.size);
    assert_memory_equal(rq[0]->head, sb.data, sb.size);
    assert_int_equal(sb.size, l30);
    sb.size = 0;
    msgpack_sbuffer stb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&stb);
    msgpack_packer_init(&pk, &stb, msgpack_sbuffer_write);
    cj_dl_write_item_state(&pk, 0, 2);
    assert_memory_equal(v32 + l32 - stb.size, stb.data, stb.size);   /* vector 32 ends with that state */
    cj_dl_encode_pull(&sb, id, true, (const uint8_t *)stb.data, stb.size, NULL);
    msgpack_sbuffer_destroy(&stb);
    assert_int_equal(rq[1]->len, sb.size);
    assert_memory_equal(rq[1]->head, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    struct cj_dl_request creq;
    assert_int_equal(cj_dl_decode_request(rq[2]->head, rq[2]->len, &creq, NULL), 0);
    assert_int_equal(creq.confirm, CJ_DL_CONFIRM_SUCCESS);
    assert_true(creq.has_nonce);

    cj_dl_producer_free(p);
    net_free(n);
    free(v40);
    free(v41);
    free(v30);
    free(v32);
}

/* §3 grouping example: replies (0,2) (2,1) (3,1) (4,1) (5,1) (6,1) then EOF. */
static void test_grouping(void **state)
{
    reset();
    struct net *n = net_new(3);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { MiB, MiB / 2, MiB / 2, 3 * MiB, 100, 2 * MiB - 1, 1 };
    struct items it;
    items_pattern(&it, 7, sizes);
    add_ref(p, "grouping", &it, 2, 0, NULL);

    static const uint64_t want[][2] = { { 0, 2 }, { 2, 1 }, { 3, 1 }, { 4, 1 }, { 5, 1 }, { 6, 1 } };
    struct rep r = { 0 };
    uint8_t st[64];
    size_t st_len = 0;
    for (size_t k = 0; k < 6; k++) {
        raw_pull(n, W1, "grouping", false, st_len ? st : NULL, st_len, &r);
        struct cj_dl_reply dr;
        struct cj_dl_item_ref items[8];
        rep_decode(&r, &dr, items, 8);
        assert_int_equal(dr.status, CJ_DL_STATUS_OK);
        assert_true(dr.cancel_capable);
        assert_int_equal(dr.n_items, want[k][1]);
        for (size_t i = 0; i < dr.n_items; i++) {
            assert_int_equal(items[i].len, sizes[want[k][0] + i]);
            assert_memory_equal(r.data + items[i].off, it.data[want[k][0] + i], items[i].len);
        }
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cj_dl_write_item_state(&pk, want[k][0], want[k][1]);
        assert_int_equal(dr.state.len, sb.size);
        assert_memory_equal(r.data + dr.state.off, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        memcpy(st, r.data + dr.state.off, dr.state.len);
        st_len = dr.state.len;
    }
    raw_pull(n, W1, "grouping", false, st, st_len, &r);
    assert_true(rep_is_vector(&r, "37_dl_reply_eof_legacy.bin"));   /* legacy receiver: no nonce */
    assert_int_equal(rd.n, 0);                                      /* one of two receivers final */

    /* the client gets the same 7 items in 6 + 1 requests, and completes the count */
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    fetch(n, W2, "grouping", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 3.0);
    assert_true(fr.ok);
    assert_int_equal(fr.items, 7);
    assert_true(fr.content_ok);
    const struct tap *rq[16];
    assert_int_equal(tap_requests(n, W2, rq, 16), 7 + 1);   /* 7 pulls, 1 confirm */
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(rd.n_rcv, 2);
    free(r.data);
    cj_dl_producer_free(p);
    net_free(n);
}

/* An item of 10 MiB goes as a DatumRef + BLOB datum, one of 10 MiB - 1 inline as bin32. */
static void test_datum_vs_inline(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 10 * MiB, 10 * MiB - 1 };
    struct items it;
    items_pattern(&it, 2, sizes);
    add_ref(p, "big", &it, 1, 0, NULL);
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    fetch(n, W1, "big", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 4.0);
    assert_true(fr.ok);
    assert_int_equal(fr.items, 2);
    assert_true(fr.content_ok);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);

    const struct tap *t0 = tap_reply(n, 0), *t1 = tap_reply(n, 1);
    assert_non_null(t0);
    assert_non_null(t1);
    static const char dref[] = CJ_FOBS_DATUMREF;
    static const uint8_t blob_hdr[] = { 0x66, 0x00, 0, 0, 0, 0, 0, 0xa0, 0x00, 0x10 };   /* BLOB, 16 + 10 MiB */
    static const uint8_t bin32[] = { 0x91, 0xc6, 0x00, 0x9f, 0xff, 0xff };              /* [bin32 10 MiB - 1 */
    assert_true(mem_has(t0->head, t0->len, dref, strlen(dref)));
    assert_true(mem_has(t0->head, t0->len, blob_hdr, sizeof blob_hdr));
    assert_false(mem_has(t1->head, t1->len, dref, strlen(dref)));
    assert_true(mem_has(t1->head, t1->len, bin32, sizeof bin32));
    cj_dl_producer_free(p);
    net_free(n);
}

/* Count mode 2: both receivers complete, done fires once; a third gets
 * invalid_request; a receiver that finished gets eof again from the tombstone. */
static void test_two_receivers(void **state)
{
    reset();
    struct net *n = net_new(4);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 700 * KiB, 900 * KiB, 600 * KiB, 5 };
    struct items it;
    items_pattern(&it, 4, sizes);
    add_ref(p, "two", &it, 2, 0, NULL);
    struct fetchrec a, b;
    fetchrec_init(&a, &it);
    fetchrec_init(&b, &it);
    fetch(n, W1, "two", &a);
    fetch(n, W2, "two", &b);
    RUN_UNTIL(n, a.done && b.done && rd.n, 3.0);
    settle(n, 0.05);
    assert_true(a.ok && b.ok);
    assert_int_equal(a.items, 4);
    assert_int_equal(b.items, 4);
    assert_true(a.content_ok && b.content_ok);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(rd.n_rcv, 2);
    assert_int_equal(rd.st[rd_find(NAMES[W1])], CJ_DL_RCV_OK);
    assert_int_equal(rd.st[rd_find(NAMES[W2])], CJ_DL_RCV_OK);
    uint64_t total = 0;
    for (int i = 0; i < 4; i++) total += sizes[i];
    assert_int_equal(rd.bytes[0], total);
    assert_int_equal(rd.bytes[1], total);

    struct fetchrec c;
    fetchrec_init(&c, &it);
    fetch(n, W3, "two", &c);
    RUN_UNTIL(n, c.done, 1.0);
    assert_int_equal(c.done, 1);
    assert_false(c.ok);
    assert_non_null(strstr(c.why, "invalid_request"));
    assert_int_equal(c.items, 0);

    /* W1 again, from scratch: {"status":"eof"} replayed, no items, no confirm */
    struct fetchrec d;
    fetchrec_init(&d, &it);
    fetch(n, W1, "two", &d);
    RUN_UNTIL(n, d.done, 1.0);
    assert_true(d.ok);
    assert_int_equal(d.items, 0);
    settle(n, 0.02);
    assert_int_equal(rd.n, 1);
    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.replays, 1);
    assert_int_equal(st.confirms_accepted, 2);
    cj_dl_producer_free(p);
    net_free(n);
}

/* A cancel from a receiver that never pulled is ignored; the client's cancel
 * (from inside its item callback) fails its receiver and so the ref; the
 * tombstone then replays {"status":"error"}. */
static void test_cancel(void **state)
{
    reset();
    struct net *n = net_new(3);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1536 * KiB, 1536 * KiB, 1536 * KiB };
    struct items it;
    items_pattern(&it, 3, sizes);
    add_ref(p, "cancel-me", &it, 1, 0, NULL);

    raw_cancel(n, W2, "cancel-me");
    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.cancels_ignored, 1);
    assert_true(cj_dl_producer_has_ref(p, "cancel-me"));

    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    fr.cancel_at = 0;
    fetch(n, W1, "cancel-me", &fr);
    RUN_UNTIL(n, rd.n, 2.0);
    settle(n, 0.05);
    assert_int_equal(fr.items, 1);
    assert_int_equal(fr.done, 0);            /* done is not called after a cancel */
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);
    assert_int_equal(rd.st[rd_find(NAMES[W1])], CJ_DL_RCV_FAILED);
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.cancels, 1);

    struct rep r = { 0 };
    raw_pull(n, W1, "cancel-me", true, NULL, 0, &r);
    struct cj_dl_reply dr;
    rep_decode(&r, &dr, NULL, 0);
    assert_int_equal(dr.status, CJ_DL_STATUS_ERROR);
    assert_false(dr.confirm_expected);
    free(r.data);

    /* a cancel from outside, during a download: the producer sees it as well */
    reset();
    add_ref(p, "cancel-2", &it, 1, 0, NULL);
    n->replies_seen = 0;
    n->drop_mask = 1u << 1;   /* the reply to the second pull is lost: the client waits */
    fetchrec_init(&fr, &it);
    fetch(n, W2, "cancel-2", &fr);
    RUN_UNTIL(n, fr.items >= 1, 2.0);
    settle(n, 0.03);
    assert_int_equal(fr.done, 0);
    cj_dl_fetch_cancel(fr.f);
    RUN_UNTIL(n, rd.n, 2.0);
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);
    assert_int_equal(fr.done, 0);
    cj_dl_producer_free(p);
    net_free(n);
}

/* A dropped data reply: the client retries after a timeout with the identical
 * pull (same state) and recovers. */
static void test_retry_recovered(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1536 * KiB, 1536 * KiB, 1536 * KiB };
    struct items it;
    items_pattern(&it, 3, sizes);
    add_ref(p, "retry", &it, 1, 0, NULL);
    n->drop_mask = 1u << 1;   /* the reply to the second pull (state {0,1}) */
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    tu_logcap_begin();
    fetch(n, W1, "retry", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 3.0);
    char *log = tu_logcap_end();
    assert_true(fr.ok);
    assert_int_equal(fr.items, 3);
    assert_true(fr.content_ok);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(count_str(log, "[DOWNLOAD_RETRY]"), 1);
    assert_int_equal(count_str(log, "[DOWNLOAD_RECOVERED]"), 1);
    assert_int_equal(count_str(log, "[DOWNLOAD_FAILED]"), 0);
    assert_non_null(strstr(log, "[DOWNLOAD_RETRY] source=server.J1 ref_id=retry attempt=2/4 elapsed="));
    assert_non_null(strstr(log, "[DOWNLOAD_RECOVERED] source=server.J1 ref_id=retry attempt=2 elapsed="));
    free(log);
    /* pulls: none, {0,1}, {0,1} again (identical bytes), {1,1}, {2,1}; then the confirm */
    const struct tap *rq[16];
    assert_int_equal(tap_requests(n, W1, rq, 16), 6);
    assert_int_equal(rq[1]->len, rq[2]->len);
    assert_memory_equal(rq[1]->head, rq[2]->head, rq[1]->len);
    assert_true(rq[1]->len != rq[3]->len || memcmp(rq[1]->head, rq[3]->head, rq[1]->len) != 0);
    assert_int_equal(it.calls[1], 2);   /* item 1 produced again for the retry */
    cj_dl_producer_free(p);
    net_free(n);
}

/* Every reply lost: 4 attempts (3 retries), then [DOWNLOAD_FAILED]. */
static void test_retry_exhausted(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1000 };
    struct items it;
    items_pattern(&it, 1, sizes);
    add_ref(p, "lost", &it, 1, 0, NULL);
    n->drop_all = true;
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    tu_logcap_begin();
    double t0 = memnet_now();
    fetch(n, W1, "lost", &fr);
    RUN_UNTIL(n, fr.done, 3.0);
    double took = memnet_now() - t0;
    char *log = tu_logcap_end();
    assert_int_equal(fr.done, 1);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "error requesting data from server.J1 after"));
    assert_non_null(strstr(fr.why, "timeout"));
    assert_int_equal(count_str(log, "[DOWNLOAD_RETRY]"), 3);
    assert_int_equal(count_str(log, "[DOWNLOAD_FAILED]"), 1);
    assert_non_null(strstr(log, "[DOWNLOAD_FAILED] source=server.J1 ref_id=lost attempt=4 elapsed="));
    free(log);
    const struct tap *rq[16];
    assert_int_equal(tap_requests(n, W1, rq, 16), 4);
    for (int i = 1; i < 4; i++) assert_memory_equal(rq[0]->head, rq[i]->head, rq[0]->len);
    /* 4 timeouts of 0.2 s and backoffs 0.02 + 0.04 + 0.08 */
    assert_true(took >= 4 * 0.2 + 0.14 - 0.01);
    cj_dl_producer_free(p);
    net_free(n);
}

/* An unknown ref fails at once with invalid_request, without retries. */
static void test_unknown_ref(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    struct fetchrec fr;
    fetchrec_init(&fr, NULL);
    tu_logcap_begin();
    fetch(n, W1, "no-such-ref", &fr);
    RUN_UNTIL(n, fr.done, 1.0);
    char *log = tu_logcap_end();
    assert_int_equal(fr.done, 1);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "invalid_request"));
    assert_int_equal(count_str(log, "[DOWNLOAD_RETRY]"), 0);
    assert_int_equal(count_str(log, "[DOWNLOAD_FAILED]"), 1);
    free(log);
    const struct tap *rq[4];
    assert_int_equal(tap_requests(n, W1, rq, 4), 1);   /* no cancel: nothing said cancel_capable */
    cj_dl_producer_free(p);
    net_free(n);
}

/* A fetch through an endpoint on the 2.8 wire waits at most the 2.8.x
 * producer's transaction lifetime (300 s) per request; the development wire
 * keeps the configured 600 s.  Either way no confirm or cancel goes to a
 * producer that never asked for one (doc/protocol/download.md §10). */
static void test_wire28_request_timeout(void **state)
{
    for (int wire = 0; wire < 2; wire++) {
        reset();
        struct net *n = net_new(2);
        if (wire) cj_stream_set_wire(n->m.ep[W1], CJ_STREAM_WIRE_2_8);
        struct fetchrec fr;
        fetchrec_init(&fr, NULL);
        struct cj_dl_fetch_cfg c;
        cj_dl_fetch_cfg_default(&c);
        fr.f = cj_dl_fetch(n->m.base, n->m.ep[W1], NAMES[S], "no-such-ref", &c, on_item, on_fetch_done, &fr);
        assert_non_null(fr.f);
        struct cj_dl_fetch_progress pr;
        cj_dl_fetch_get_progress(fr.f, &pr);
        assert_true(pr.request_timeout == (wire ? CJ_DL_REF_IDLE_2_8 : 600.0));
        n->drop_all = true;   /* nobody answers: abort it */
        cj_dl_fetch_cancel(fr.f);
        settle(n, 0.05);
        const struct tap *rq[4];
        assert_int_equal(tap_requests(n, W1, rq, 4), 1);   /* the pull only: no cancel (never cancel_capable) */
        net_free(n);
    }
}

/* Idle expiry: activity resets the timer; expiry fails the pending receivers
 * closed, reports TIMEOUT and leaves no tombstone. */
static void test_idle_expiry(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 100, 200 };
    struct items it;
    items_pattern(&it, 2, sizes);
    double t0 = memnet_now();
    add_ref(p, "idle", &it, 1, 0.3, NULL);
    settle(n, 0.15);
    struct rep r = { 0 };
    double touched = memnet_now();                      /* the producer's activity is at or after this */
    raw_pull(n, W1, "idle", true, NULL, 0, &r);
    RUN_UNTIL(n, rd.n, t0 + 0.4 - memnet_now());
    assert_int_equal(rd.n, 0);                    /* past the first deadline, still live */
    RUN_UNTIL(n, rd.n, 1.5);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_TIMEOUT);
    assert_true(rd.at - touched > 0.3);
    assert_int_equal(rd.st[rd_find(NAMES[W1])], CJ_DL_RCV_FAILED);
    raw_pull(n, W1, "idle", true, NULL, 0, &r);
    assert_string_equal(r.rc, "invalid_request");
    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.refs_timed_out, 1);
    assert_int_equal(st.tombstones, 0);

    /* the same ref never pulled: expires after its timeout too */
    reset();
    add_ref(p, "idle-2", &it, 1, 0.1, NULL);
    RUN_UNTIL(n, rd.n, 1.0);
    assert_int_equal(rd.out, CJ_DL_OUT_TIMEOUT);
    assert_int_equal(rd.n_rcv, 0);
    free(r.data);
    cj_dl_producer_free(p);
    net_free(n);
}

/* A confirm with the wrong nonce is dropped; with the right one it counts,
 * and "failed" after EOF makes the outcome failed. */
static void test_nonce_mismatch(void **state)
{
    reset();
    struct net *n = net_new(3);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 10 };
    struct items it;
    items_pattern(&it, 1, sizes);
    add_ref(p, "nonce", &it, 1, 0, NULL);
    struct rep r = { 0 };
    /* an unsolicited confirm before any terminal serve: dropped */
    raw_confirm(n, W1, "nonce", true, "0123456789abcdef0123456789abcdef");
    raw_pull(n, W1, "nonce", true, NULL, 0, &r);
    struct cj_dl_reply dr;
    struct cj_dl_item_ref items[1];
    rep_decode(&r, &dr, items, 1);
    uint8_t st[32];
    memcpy(st, r.data + dr.state.off, dr.state.len);
    raw_pull(n, W1, "nonce", true, st, dr.state.len, &r);
    rep_decode(&r, &dr, NULL, 0);
    assert_true(dr.confirm_expected);
    char wrong[CJ_DL_NONCE_LEN + 1];
    memcpy(wrong, dr.confirm_nonce, sizeof wrong);
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    raw_confirm(n, W1, "nonce", true, wrong);
    raw_confirm(n, W2, "nonce", true, dr.confirm_nonce);   /* right nonce, wrong requester */
    struct cj_dl_producer_stats s;
    cj_dl_producer_get_stats(p, &s);
    assert_int_equal(s.confirms_dropped, 3);
    assert_int_equal(s.confirms_accepted, 0);
    assert_int_equal(rd.n, 0);
    raw_confirm(n, W1, "nonce", false, dr.confirm_nonce);
    RUN_UNTIL(n, rd.n, 1.0);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);
    raw_confirm(n, W1, "nonce", true, dr.confirm_nonce);   /* late: the ref is gone, ignored */
    assert_int_equal(rd.n, 1);
    raw_pull(n, W1, "nonce", true, NULL, 0, &r);            /* failed requester: error replayed */
    rep_decode(&r, &dr, NULL, 0);
    assert_int_equal(dr.status, CJ_DL_STATUS_ERROR);
    free(r.data);
    cj_dl_producer_free(p);
    net_free(n);
}

/* Identity mode: an unlisted receiver downloads but cannot complete the ref. */
static void test_identity_mode(void **state)
{
    reset();
    struct net *n = net_new(3);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1000, 2000 };
    struct items it;
    items_pattern(&it, 2, sizes);
    const char *ids[] = { NAMES[W1] };
    struct cj_dl_ref_cfg c = {
        .ref_id = "ident", .n_items = 2, .sizes = it.sizes, .item_fn = item_fn, .receiver_ids = ids,
        .n_receiver_ids = 1, .done = ref_done, .ctx = &it,
    };
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), 0);
    struct fetchrec b;
    fetchrec_init(&b, &it);
    fetch(n, W2, "ident", &b);
    RUN_UNTIL(n, b.done, 1.0);
    settle(n, 0.03);
    assert_true(b.ok);
    assert_int_equal(rd.n, 0);
    struct fetchrec a;
    fetchrec_init(&a, &it);
    fetch(n, W1, "ident", &a);
    RUN_UNTIL(n, a.done && rd.n, 1.0);
    assert_true(a.ok);
    assert_int_equal(rd.n, 1);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(rd.n_rcv, 2);
    int i1 = rd_find(NAMES[W1]), i2 = rd_find(NAMES[W2]);
    assert_true(rd.expected[i1]);
    assert_false(rd.expected[i2]);
    cj_dl_producer_free(p);
    net_free(n);
}

/* The owner cannot produce an item: {"status":"error"}, the client fails with
 * "producer error", the ref fails. */
static void test_producer_error(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1536 * KiB, 1536 * KiB };
    struct items it;
    items_pattern(&it, 2, sizes);
    it.fail_at = 1;
    add_ref(p, "broken", &it, 1, 0, NULL);
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    fetch(n, W1, "broken", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 2.0);
    assert_false(fr.ok);
    assert_int_equal(fr.items, 1);
    assert_non_null(strstr(fr.why, "producer error after"));
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);

    /* a consumer that refuses an item: failed, cancel sent, the ref fails too */
    reset();
    it.fail_at = -1;
    add_ref(p, "refused", &it, 1, 0, NULL);
    fetchrec_init(&fr, &it);
    fr.refuse_at = 0;
    fetch(n, W1, "refused", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 2.0);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "exception when consuming data"));
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);
    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.cancels, 1);
    assert_int_equal(st.item_errors, 1);
    cj_dl_producer_free(p);
    net_free(n);
}

/* Bad arguments and a duplicate live ref id. */
static void test_api_edges(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 10 };
    struct items it;
    items_pattern(&it, 1, sizes);
    add_ref(p, "dup", &it, 1, 0, NULL);
    struct cj_dl_ref_cfg c = { .ref_id = "dup", .n_items = 1, .sizes = it.sizes, .item_fn = item_fn, .ctx = &it };
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), -1);
    c.ref_id = "";
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), -1);
    c.ref_id = "x";
    c.item_fn = NULL;
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), -1);
    assert_int_equal(cj_dl_producer_remove_ref(p, "dup"), 0);
    assert_int_equal(cj_dl_producer_remove_ref(p, "dup"), -1);
    assert_null(cj_dl_fetch(n->m.base, n->m.ep[W1], NAMES[S], "", NULL, on_item, on_fetch_done, NULL));
    assert_null(cj_dl_fetch(n->m.base, n->m.ep[W1], NAMES[S], "r", NULL, NULL, on_fetch_done, NULL));
    /* a request without ref_id: invalid_request */
    struct rep r = { 0 };
    size_t l;
    uint8_t *v37 = tu_read_vector("37_dl_reply_eof_legacy.bin", &l);   /* a map without ref_id */
    raw_request(n, W1, v37, l, &r);
    assert_string_equal(r.rc, "invalid_request");
    free(v37);
    free(r.data);
    cj_dl_producer_free(p);
    net_free(n);
}

/* A fake producer answering pulls with crafted payloads, in order. */
struct fake {
    struct cj_stream_ep *ep;
    msgpack_sbuffer replies[4];
    int n, next;
    int confirms;
};

static int fake_handler(void *arg, struct cj_stream_blob *b)
{
    struct fake *f = arg;
    if (!b->req.has_ri) {
        f->confirms++;
        return 0;
    }
    struct evbuffer *out = evbuffer_new();
    if (f->next < f->n) evbuffer_add(out, f->replies[f->next].data, f->replies[f->next].size);
    f->next++;
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_reply(f->ep, &b->req, NULL, &m, out, NULL, NULL), 0);
    return 0;
}

/* A data reply with two items as BLOB datums (datum_min 1). */
static void two_datum_reply(msgpack_sbuffer *sb, size_t *main_len)
{
    struct cj_dl_item items[2] = { { (const uint8_t *)"AAAAA", 5 }, { (const uint8_t *)"BBBBBBB", 7 } };
    struct cj_dl_reply_opts o = { .datum_min = 1, .cancel_capable = true };
    msgpack_sbuffer_init(sb);
    assert_int_equal(cj_dl_encode_data_reply(sb, 0, items, 2, &o, NULL), 0);
    const uint8_t *d = (const uint8_t *)sb->data;
    uint64_t n = 0;
    for (int i = 2; i < 10; i++) n = n << 8 | d[i];
    *main_len = 10 + (size_t)n;
    assert_int_equal(sb->size, *main_len + (26 + 5) + (26 + 7));
}

static void fake_run(struct net *n, struct fake *f, struct fetchrec *fr)
{
    f->next = 0;
    fetchrec_init(fr, NULL);
    fetch(n, W1, "fake", fr);
    RUN_UNTIL(n, fr->done, 2.0);
    assert_int_equal(fr->done, 1);
    for (int i = 0; i < f->n; i++) msgpack_sbuffer_destroy(&f->replies[i]);
    f->n = 0;
}

/* The client reads DatumRef items whose sections come in any order, and fails
 * cleanly on truncated or missing datum sections and on a reply without state. */
static void test_client_bad_replies(void **state)
{
    struct net *n = net_new(2);
    struct fake f = { .ep = n->m.ep[S] };
    assert_int_equal(cj_stream_on(n->m.ep[S], CJ_DL_CHANNEL, CJ_DL_TOPIC, fake_handler, &f), 0);
    struct fetchrec fr;
    size_t ml, l37;
    uint8_t *v37 = tu_read_vector("37_dl_reply_eof_legacy.bin", &l37);

    /* datum sections in reverse order, then EOF with a nonce */
    msgpack_sbuffer in_order;
    two_datum_reply(&in_order, &ml);
    msgpack_sbuffer_init(&f.replies[0]);
    msgpack_sbuffer_write(&f.replies[0], in_order.data, ml);
    msgpack_sbuffer_write(&f.replies[0], in_order.data + ml + 31, 33);
    msgpack_sbuffer_write(&f.replies[0], in_order.data + ml, 31);
    msgpack_sbuffer_init(&f.replies[1]);
    assert_int_equal(cj_dl_encode_terminal(&f.replies[1], CJ_DL_STATUS_EOF, "0123456789abcdef0123456789abcdef", NULL), 0);
    f.n = 2;
    fake_run(n, &f, &fr);
    assert_true(fr.ok);
    assert_int_equal(fr.items, 2);
    assert_int_equal(fr.lens[0], 5);
    assert_int_equal(fr.lens[1], 7);
    settle(n, 0.03);
    assert_int_equal(f.confirms, 1);

    /* in order, straight: the same */
    msgpack_sbuffer_init(&f.replies[0]);
    msgpack_sbuffer_write(&f.replies[0], in_order.data, in_order.size);
    msgpack_sbuffer_init(&f.replies[1]);
    msgpack_sbuffer_write(&f.replies[1], (const char *)v37, l37);
    f.n = 2;
    fake_run(n, &f, &fr);
    assert_true(fr.ok);
    assert_int_equal(fr.items, 2);

    /* the last datum cut short */
    msgpack_sbuffer_init(&f.replies[0]);
    msgpack_sbuffer_write(&f.replies[0], in_order.data, in_order.size - 3);
    f.n = 1;
    fake_run(n, &f, &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "bad datum section"));
    assert_int_equal(fr.items, 0);

    /* the second datum missing */
    msgpack_sbuffer_init(&f.replies[0]);
    msgpack_sbuffer_write(&f.replies[0], in_order.data, ml + 31);
    f.n = 1;
    fake_run(n, &f, &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "lacks"));

    /* not a LOBS payload at all */
    msgpack_sbuffer_init(&f.replies[0]);
    msgpack_sbuffer_write(&f.replies[0], "\x64\x00\x00", 3);
    f.n = 1;
    fake_run(n, &f, &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "exception when consuming data"));

    /* a data reply without a state */
    static const char body[] = "\x82\xa6" "status" "\xa2" "ok" "\xa4" "data" "\x91\xc4\x01" "Z";
    msgpack_sbuffer_init(&f.replies[0]);
    assert_int_equal(cj_lobs_write_main_header(&f.replies[0], sizeof body - 1, NULL), 0);
    msgpack_sbuffer_write(&f.replies[0], body, sizeof body - 1);
    f.n = 1;
    fake_run(n, &f, &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "without a state"));

    msgpack_sbuffer_destroy(&in_order);
    free(v37);
    net_free(n);
}

/* ---- item_read: asynchronous item sources ----------------------------------------------------- */

#define AR_MAX 16

struct areads {
    struct items *it;
    struct event *tm;
    bool hold;                    /* answer only when told */
    int n;                        /* outstanding */
    cj_dl_got_fn got[AR_MAX];
    void *tok[AR_MAX];
    size_t idx[AR_MAX];
    uint64_t off[AR_MAX];
    size_t len[AR_MAX];
    int reads;
    size_t max_len;
    int fail_index;               /* reads of this item at or after fail_off fail; -1 none */
    uint64_t fail_off;
};

static void ar_answer(struct areads *a)
{
    int n = a->n;
    a->n = 0;
    for (int i = 0; i < n; i++) {
        if ((int)a->idx[i] == a->fail_index && a->off[i] >= a->fail_off) {
            a->got[i](a->tok[i], EIO, NULL);
            continue;
        }
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, a->it->data[a->idx[i]] + a->off[i], a->len[i]);
        a->got[i](a->tok[i], 0, b);
        evbuffer_free(b);
    }
}

static void ar_timer(evutil_socket_t fd, short what, void *arg)
{
    struct areads *a = arg;
    if (!a->hold) ar_answer(a);
}

static void ar_read(void *ctx, size_t index, uint64_t off, size_t len, cj_dl_got_fn got, void *token)
{
    struct areads *a = ctx;
    assert_true(a->n < AR_MAX);
    a->got[a->n] = got;
    a->tok[a->n] = token;
    a->idx[a->n] = index;
    a->off[a->n] = off;
    a->len[a->n] = len;
    a->n++;
    a->reads++;
    if (len > a->max_len) a->max_len = len;
    assert_true(off + len <= a->it->sizes[index]);
    struct timeval tv = { 0, 200 };
    evtimer_add(a->tm, &tv);
}

static void ar_ref(struct cj_dl_producer *p, const char *id, struct areads *a)
{
    struct cj_dl_ref_cfg c = {
        .ref_id = id, .n_items = a->it->n, .sizes = a->it->sizes, .item_read = ar_read, .num_receivers = 1,
        .done = ref_done, .ctx = a,
    };
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), 0);
}

/* Items read asynchronously in <= 1 MiB ranges, one at a time: downloaded
 * byte for byte (grouped, and the 11 MiB one as a BLOB datum). */
static void test_item_read(void **state)
{
    reset();
    struct net *n = net_new(2);
    struct cj_dl_producer *p = producer(n, NULL);
    const uint64_t sizes[] = { 1536 * KiB, 100, 11 * MiB };
    struct items it;
    items_pattern(&it, 3, sizes);
    struct areads a = { .it = &it, .fail_index = -1 };
    a.tm = evtimer_new(n->m.base, ar_timer, &a);
    ar_ref(p, "async", &a);
    struct fetchrec fr;
    fetchrec_init(&fr, &it);
    struct cj_dl_fetch_cfg slow = fast_cfg();   /* no timeout test here: a loaded machine may stall 0.2 s */
    slow.request_timeout = 5.0;
    fetch_cfg(n, W1, "async", &fr, &slow);
    RUN_UNTIL(n, fr.done && rd.n, 20.0);
    assert_true(fr.ok);
    assert_int_equal(fr.items, 3);
    assert_true(fr.content_ok);
    assert_int_equal(rd.out, CJ_DL_OUT_OK);
    assert_int_equal(a.max_len, 1 * MiB);
    /* the 11 MiB datum: its first read ends on the stream's first chunk
     * boundary (after the reply's framing), then 1 MiB reads follow chunks */
    assert_int_equal(a.reads, 2 + 1 + 12);
    struct cj_dl_producer_stats st;
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.bytes_served, sizes[0] + sizes[1] + sizes[2]);
    assert_int_equal(st.item_errors, 0);

    /* the first read of a reply fails: {"status":"error"}, the client fails with a producer error */
    reset();
    a.fail_index = 0;
    a.fail_off = 0;
    ar_ref(p, "async-err", &a);
    fetchrec_init(&fr, &it);
    fetch(n, W1, "async-err", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 5.0);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "producer error after"));
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);

    /* a read fails once the reply is under way: the reply stream is cancelled */
    reset();
    a.fail_index = 2;
    a.fail_off = 3 * MiB;
    ar_ref(p, "async-cut", &a);
    fetchrec_init(&fr, &it);
    fetch(n, W1, "async-cut", &fr);
    RUN_UNTIL(n, fr.done && rd.n, 5.0);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "comm_error"));
    assert_int_equal(rd.out, CJ_DL_OUT_FAILED);
    cj_dl_producer_get_stats(p, &st);
    assert_int_equal(st.item_errors, 2);

    /* a read outstanding when the ref is removed, then when the producer is freed:
     * answering later is harmless (ASan) */
    a.fail_index = -1;
    a.hold = true;
    ar_ref(p, "async-rm", &a);
    fetchrec_init(&fr, &it);
    fetch(n, W1, "async-rm", &fr);
    RUN_UNTIL(n, a.n > 0, 2.0);
    assert_int_equal(a.n, 1);
    assert_int_equal(cj_dl_producer_remove_ref(p, "async-rm"), 0);
    ar_answer(&a);
    RUN_UNTIL(n, fr.done, 3.0);
    assert_false(fr.ok);
    ar_ref(p, "async-free", &a);
    fetchrec_init(&fr, &it);
    fetch(n, W1, "async-free", &fr);
    RUN_UNTIL(n, a.n > 0, 2.0);
    assert_int_equal(a.n, 1);
    cj_dl_producer_free(p);
    ar_answer(&a);
    RUN_UNTIL(n, fr.done, 3.0);
    assert_false(fr.ok);
    event_free(a.tm);
    net_free(n);
}

static int setup(void **state)
{
    pattern = malloc(PATTERN_LEN);
    for (size_t i = 0; i < PATTERN_LEN; i++) pattern[i] = (uint8_t)(i * 31u + (i >> 12) + (i >> 20));
    return 0;
}

static int teardown(void **state)
{
    free(pattern);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector31_eof_confirm),
        cmocka_unit_test(test_fetch_items),
        cmocka_unit_test(test_grouping),
        cmocka_unit_test(test_datum_vs_inline),
        cmocka_unit_test(test_two_receivers),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_retry_recovered),
        cmocka_unit_test(test_retry_exhausted),
        cmocka_unit_test(test_unknown_ref),
        cmocka_unit_test(test_wire28_request_timeout),
        cmocka_unit_test(test_idle_expiry),
        cmocka_unit_test(test_nonce_mismatch),
        cmocka_unit_test(test_identity_mode),
        cmocka_unit_test(test_producer_error),
        cmocka_unit_test(test_api_edges),
        cmocka_unit_test(test_client_bad_replies),
        cmocka_unit_test(test_item_read),
    };
    return cmocka_run_group_tests_name("dl", tests, setup, teardown);
}
