/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_stream_rx.c — the streaming receiver (and the ACK / error paths of
 * the sender and requester) driven by a sequence of messages carved from
 * the input.
 *
 * One endpoint "site-1.J1" (small limits) has a handler on app/blob and one
 * request in flight to "peer0" (its sm__id and sm__ri are known, so inputs
 * can ACK it, fail it or answer it).  Each input record is one of:
 *   data chunk   sm__ header set from input bytes (origin, id, channel/topic,
 *                sm__dt, sm__rs, sm__ri, sm__cs/ws, sm__sq, sm__sz, sm__os,
 *                chunk-0 extras) plus a payload slice of the input
 *   ACK          for the request's stream or another id
 *   error notice on sm__ERROR or sm__ACK, with or without sm__ri / sm__fd
 *   tick         one non-blocking loop turn (deferred sends; the receiver's
 *                timers, which are set to expire at once)
 *   send         another fire-and-forget stream or request
 *   progressive  (sink mode only, instead of some sends) a release of the
 *                sink reply's bytes, or a feed to one of the source replies
 *
 * Sink mode (first input byte >= 0xc0, the byte still counts as an op): the
 * request waits for its reply through a sink (hold_acks when bit 0x20, the
 * sink releasing from inside data when bit 0x10), and requests on app/blob
 * that want a reply get source replies (cj_stream_reply_source) fed by ops.
 *
 * Invariants checked:
 *   - every message the endpoint sends decodes, comes from it, goes where
 *     io was told; ACKs carry sm__os and sm__sq; chunks carry a payload of
 *     cn__payload_len bytes; messages to server.* carry the auth headers;
 *   - a completed blob has exactly sm__sz bytes and the first chunk's headers
 *     (sm__sq 0); a reply handed to the requester has its sm__sz bytes;
 *   - memory: bytes buffered <= bytes reserved <= max_buffered, and stream
 *     states <= max_streams, after every message;
 *   - sink: begin once, before any data; data offsets contiguous from 0 and
 *     within sm__sz; a sink reply reported ok got exactly sm__sz bytes; with
 *     hold_acks no ACK for the sink's stream passes the latest release;
 *   - source: want never from inside reply_source / feed, one at a time,
 *     with the bytes fed so far; a feed past the size is refused;
 *   - everything is freed by cj_stream_free (LeakSanitizer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "stream/stream.h"
#include "util/log.h"
#include "wire/header.h"

#define ME "site-1.J1"
#define MAX_BUFFERED (256u * 1024u)
#define MAX_STREAMS 8u

static const char *const ORIGINS[] = { "peer0", "peer1", "server.J1", "peer0.child" };
static const uint64_t IDS[] = { 1, 2, 1795315509918272ull, UINT64_MAX };
static const uint64_t SIZES[] = {
    0, 1, 100, 1000, 3000, 10000, 65536, 65537, 200000, (uint64_t)1 << 32, ((uint64_t)1 << 32) + 1, 1u << 20,
};
static const int64_t CSWS[][2] = {
    { 1024, 4096 }, { 1024, 1 << 20 }, { 100, 100 }, { 0, 0 }, { 1 << 20, 64 << 20 }, { -1, -1 }, { 7, 1000 },
    { 1, 1 },
};

static struct event_base *g_base;
static struct cj_stream_ep *g_ep;
static uint64_t g_tx_id;
static char g_ri[CJ_STREAM_RI_LEN + 1];
static int g_sends;

/* sink mode */
static bool g_sink_mode, g_hold, g_release_inline, g_in_call;
static uint64_t g_handle;
static struct {
    bool begun, have_id, id_neg;
    uint64_t size, off, released, id;
} g_sink;
struct src_slot {
    bool used, live, want_out;
    uint64_t id, size, fed;
};
static struct src_slot g_src[4];

struct in {
    const uint8_t *p;
    size_t n;
};

static uint8_t take(struct in *f)
{
    if (!f->n) return 0;
    f->n--;
    return *f->p++;
}

static uint16_t take16(struct in *f)
{
    uint16_t hi = take(f);
    return (uint16_t)(hi << 8 | take(f));
}

/* ---- io, handler, callbacks ------------------------------------------------------------ */

static bool has_key(const struct cj_hdr *h, const char *key)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1)
        if (mp_str_eq(e.key, e.key_len, key)) return true;
    return false;
}

static int io_send(void *ctx, const char *dest, const uint8_t *hblk, size_t hlen, struct evbuffer *pl,
                   bool control)
{
    struct cj_hdr h;
    struct cj_err e;
    if (cj_hdr_decode(&h, hblk, hlen, &e)) abort();
    if (strcmp(h.destination, dest) != 0 || strcmp(h.origin, ME) != 0) abort();
    if (strcmp(h.channel, "sm__STREAM") != 0 || h.reply_expected) abort();
    size_t plen = evbuffer_get_length(pl);
    if (strcmp(h.topic, "sm__ACK") == 0 && h.sm_dt == 3) {
        if (!cj_hdr_has(&h, CJ_HK_SM_OS) || !cj_hdr_has(&h, CJ_HK_SM_SQ) || !control || plen) abort();
    }
    if (strcmp(h.topic, "sm__DATA") == 0 && (h.sm_dt == 1 || h.sm_dt == 2)) {
        if (h.payload_len != (int64_t)plen || control) abort();
        if ((uint64_t)h.sm_os + plen > (uint64_t)h.sm_sz) abort();
    }
    if (g_hold && g_sink.have_id && strcmp(h.topic, "sm__ACK") == 0 && h.sm_dt == 3 && strcmp(dest, "peer0") == 0 &&
        h.sm_id == g_sink.id && h.sm_id_neg == g_sink.id_neg && (uint64_t)h.sm_os > g_sink.released)
        abort();   /* hold_acks: never ACK what the owner did not release */
    bool to_server = strncmp(dest, "server", 6) == 0 && (dest[6] == 0 || dest[6] == '.');
    if (has_key(&h, "__token__") != to_server) abort();
    if (plen) evbuffer_drain(pl, plen);
    return strcmp(dest, "peer1") == 0 && (hlen & 1) ? -1 : 0;   /* sometimes no route */
}

static struct evbuffer *blob_of(size_t n)
{
    struct evbuffer *b = evbuffer_new();
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        evbuffer_add(b, z, k);
        n -= k;
    }
    return b;
}

static void src_want(void *arg, uint64_t fed)
{
    struct src_slot *s = arg;
    if (g_in_call || s->want_out || !s->live || fed != s->fed || fed >= s->size) abort();
    s->want_out = true;
}

static void src_done(void *arg, int status, const char *why)
{
    struct src_slot *s = arg;
    if (status && !why) abort();
    if (!status && s->fed != s->size) abort();
    s->live = false;
}

/* A source reply in a free slot; false when there is none. */
static bool reply_source(const struct cj_stream_blob *b)
{
    for (int i = 0; i < 4; i++) {
        struct src_slot *s = &g_src[i];
        if (s->used) continue;
        *s = (struct src_slot){ .used = true, .live = true, .size = b->size % 5000 };
        struct cj_stream_source src = { .size = s->size, .want = src_want, .arg = s };
        g_in_call = true;
        int rc = cj_stream_reply_source(g_ep, &b->req, "ok", NULL, &src, src_done, s, &s->id);
        g_in_call = false;
        if (rc) s->live = false;
        return true;
    }
    return false;
}

static void src_feed(struct in *f)
{
    uint8_t b1 = take(f), b2 = take(f);
    struct src_slot *s = &g_src[b1 & 3];
    if (!s->used) return;
    size_t n = (b1 & 4) ? (size_t)b2 * 37 : (size_t)b2;
    struct evbuffer *e = blob_of(n);
    g_in_call = true;
    int rc = cj_stream_feed(g_ep, s->id, e);
    g_in_call = false;
    if (rc == 0) {
        if (!s->live || s->fed + n > s->size || evbuffer_get_length(e)) abort();
        s->fed += n;
        s->want_out = false;
    } else if (s->live && s->fed + n <= s->size) {
        abort();   /* a live source accepts bytes within its size */
    }
    evbuffer_free(e);
}

static void sink_release(struct in *f)
{
    uint16_t k = take16(f);
    uint64_t upto = (k & 1) ? g_sink.off : (uint64_t)k * 4;   /* what it has, or anything */
    if (upto > g_sink.released) g_sink.released = upto;
    cj_stream_request_release(g_ep, g_handle, upto);
}

static int sink_begin(void *arg, const struct cj_hdr *h, uint64_t size)
{
    if (g_sink.begun || g_sink.off || h->sm_sq != 0 || (int64_t)size != h->sm_sz) abort();
    if (strcmp(h->sm_ch, "return_only") != 0 || strcmp(h->origin, "peer0") != 0) abort();
    g_sink.begun = true;
    g_sink.size = size;
    g_sink.have_id = true;
    g_sink.id = h->sm_id;
    g_sink.id_neg = h->sm_id_neg;
    return size % 11 == 5 ? -1 : 0;
}

static int sink_data(void *arg, uint64_t off, struct evbuffer *piece)
{
    size_t n = evbuffer_get_length(piece);
    if (!g_sink.begun || off != g_sink.off || !n || n > g_sink.size - off) abort();
    g_sink.off += n;
    evbuffer_drain(piece, n / 2);   /* the rest is drained by the layer */
    if (g_release_inline && (g_sink.off & 1)) {
        if (g_sink.off > g_sink.released) g_sink.released = g_sink.off;
        if (cj_stream_request_release(g_ep, g_handle, g_sink.off)) abort();   /* still pending */
    }
    return off % 13 == 7 ? -1 : 0;
}

static void on_sink_reply(void *arg, struct cj_stream_reply *r)
{
    if (!r->return_code || !r->error || !r->encoding) abort();
    if (r->data) abort();   /* the bytes went to the sink */
    if (r->hdr && (!g_sink.begun || g_sink.off != (uint64_t)r->hdr->sm_sz)) abort();
    /* The sink's stream is over (or only waits for releases, which cannot pass
     * the check): a later stream may reuse its (origin, sm__id) once forgotten. */
    g_sink.have_id = false;
}

static int handler(void *arg, struct cj_stream_blob *b)
{
    if (evbuffer_get_length(b->data) != b->size || (int64_t)b->size != b->hdr->sm_sz) abort();
    if (b->hdr->sm_sq != 0 || strcmp(b->hdr->sm_ch, "app") != 0) abort();
    if (g_sink_mode && b->req.has_ri && (b->size & 1) && (b->size & 4) && reply_source(b)) {
        /* answered by a source reply */
    } else if (b->req.has_ri && (b->size & 1))
        cj_stream_reply(g_ep, &b->req, (b->size & 2) ? "ok" : "process_exception", NULL, blob_of(b->size % 3000),
                        NULL, NULL);
    if (b->size % 5 == 1) {   /* the handler keeps the blob */
        struct evbuffer *mine = b->data;
        b->data = NULL;
        evbuffer_free(mine);
    }
    return b->size % 7 == 3 ? -1 : 0;
}

static void on_reply(void *arg, struct cj_stream_reply *r)
{
    if (!r->return_code || !r->error || !r->encoding) abort();
    if (r->data) {
        if (!r->hdr || evbuffer_get_length(r->data) != (uint64_t)r->hdr->sm_sz) abort();
        if (strcmp(r->hdr->sm_ch, "return_only") != 0) abort();
    }
}

static void on_done(void *arg, int status, const char *why)
{
    if (status && !why) abort();
}

/* ---- messages ----------------------------------------------------------------------------- */

static void feed(struct cj_hb *b, const char *origin, const char *topic, const uint8_t *payload, size_t len)
{
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .to = ME, .destination = ME, .channel = "sm__STREAM", .topic = topic,
        .payload_encoding = "bytes", .payload_len = (int64_t)len, .route_time = 1.0, .send_time = 2.0,
    };
    msgpack_sbuffer out;
    struct cj_err e;
    msgpack_sbuffer_init(&out);
    cj_hb_cellnet(b, &m);
    if (cj_hb_finish(b, &out, &e) == 0) {
        struct cj_hdr h;
        if (cj_hdr_decode(&h, (const uint8_t *)out.data, out.size, &e)) abort();
        struct evbuffer *pl = evbuffer_new();
        evbuffer_add(pl, payload, len);
        cj_stream_input(g_ep, &h, pl);
        if (evbuffer_get_length(pl)) abort();   /* the contents were taken */
        evbuffer_free(pl);
    }
    msgpack_sbuffer_destroy(&out);
}

static const char *pick_ri(uint8_t k)
{
    switch (k & 3) {
    case 0: return NULL;
    case 1: return g_ri;
    case 2: return "r-1";
    default: return "00000000-0000-4000-8000-000000000000";
    }
}

static void add_id(struct cj_hb *b, uint8_t sel, bool neg)
{
    if (neg) cj_hb_int(b, "sm__id", -(int64_t)(sel + 1));
    else cj_hb_uint(b, "sm__id", IDS[sel & 3]);
}

static void data_chunk(struct in *f)
{
    uint8_t b1 = take(f), b2 = take(f), sq = take(f), b4 = take(f), b5 = take(f), b6 = take(f);
    const char *origin = ORIGINS[b1 & 3];
    static const char *const CHTP[][2] = { { "app", "blob" }, { "app", "other" }, { "return_only", "app:blob" },
                                           { "app", "blob" } };
    const char *const *ct = CHTP[(b1 >> 5) & 3];
    static const int DT[] = { 1, 2, 6, 4 };
    int dt = DT[b2 & 3];
    bool rs = (b2 >> 2) & 1;
    const char *ri = pick_ri(b2 >> 3);
    const int64_t *cw = CSWS[(b2 >> 5) & 7];
    uint64_t sz = (b4 & 15) < 12 ? SIZES[b4 & 15] : take16(f);
    size_t len = (size_t)b6 * 8 + (b5 >> 4);
    if (len > f->n) len = f->n;
    uint64_t cs = cw[0] > 0 ? (uint64_t)cw[0] : 1024;
    uint64_t os;
    switch (b5 & 3) {
    case 0: os = sq * cs; break;
    case 1: os = take16(f); break;
    case 2: os = sz >= len ? sz - len : 0; break;
    default: os = 0; break;
    }
    if (len > f->n) len = f->n;

    struct cj_hb b;
    cj_hb_init(&b);
    if (ri) cj_hb_str(&b, "sm__ri", ri);
    cj_hb_str(&b, "sm__pe", (b4 & 16) ? "fobs" : "bytes");
    cj_hb_str(&b, "sm__ch", ct[0]);
    cj_hb_str(&b, "sm__tp", ct[1]);
    if (!(b5 & 4)) cj_hb_uint(&b, "sm__sz", sz);
    add_id(&b, (b1 >> 2) & 3, (b1 >> 4) & 1);
    cj_hb_int(&b, "sm__dt", dt);
    cj_hb_uint(&b, "sm__sq", sq);
    if (!(b5 & 8)) cj_hb_uint(&b, "sm__os", os);
    cj_hb_bool(&b, "sm__rs", rs);
    cj_hb_bool(&b, "sm__op", b4 & 32);
    if (cw[0]) cj_hb_int(&b, "sm__cs", cw[0]);
    if (cw[1]) cj_hb_int(&b, "sm__ws", cw[1]);
    if (sq == 0) {
        cj_hb_int(&b, "sm__ai", (b4 & 64) ? 1024 : 4194304);
        if (rs) {
            cj_hb_float(&b, "sm__rw", (b4 & 128) ? 0.0 : -1.0);
            cj_hb_float(&b, "sm__rt", (double)(b6 % 4));
        }
    }
    if (dt == 6) cj_hb_str(&b, "sm__em", "sender gave up");
    if (ct[0][0] == 'r') cj_hb_str(&b, "cn__return_code", (b4 & 16) ? "ok" : "comm_error");
    feed(&b, origin, "sm__DATA", f->p, len);
    f->p += len;
    f->n -= len;
    cj_hb_destroy(&b);
}

static void ack(struct in *f)
{
    uint8_t b1 = take(f), sq = take(f);
    uint16_t os = take16(f);
    struct cj_hb b;
    cj_hb_init(&b);
    cj_hb_uint(&b, "sm__id", (b1 & 4) ? g_tx_id : IDS[b1 & 3]);
    cj_hb_int(&b, "sm__dt", 3);
    if (!(b1 & 8)) cj_hb_uint(&b, "sm__os", (uint64_t)os * ((b1 & 16) ? 64 : 1));
    if (!(b1 & 32)) cj_hb_uint(&b, "sm__sq", sq);
    feed(&b, ORIGINS[(b1 >> 6) & 3], "sm__ACK", NULL, 0);
    cj_hb_destroy(&b);
}

static void notice(struct in *f)
{
    uint8_t b1 = take(f), b2 = take(f);
    struct cj_hb b;
    cj_hb_init(&b);
    add_id(&b, b1 & 3, false);
    if (b1 & 4) {
        cj_hb_uint(&b, "sm__id", 0);   /* a duplicate key: the decoder refuses it */
    }
    cj_hb_int(&b, "sm__dt", 6);
    cj_hb_str(&b, "sm__em", "receiver said no");
    const char *ri = pick_ri(b2);
    if (ri) cj_hb_str(&b, "sm__ri", ri);
    if (b2 & 4) cj_hb_str(&b, "sm__fd", ORIGINS[(b2 >> 3) & 3]);
    if (b2 & 32) cj_hb_str(&b, "sm__et", "StreamError");
    feed(&b, ORIGINS[(b1 >> 3) & 3], (b1 & 64) ? "sm__ERROR" : "sm__ACK", NULL, 0);
    cj_hb_destroy(&b);
}

static void another_send(struct in *f)
{
    if (g_sink_mode && f->n && (f->p[0] & 8)) {   /* progressive ops instead */
        if (f->p[0] & 16) src_feed(f);
        else sink_release(f);
        return;
    }
    uint8_t b1 = take(f), b2 = take(f);
    if (g_sends >= 4) return;
    g_sends++;
    const char *dest = ORIGINS[b1 & 3];
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (b1 & 4)
        cj_stream_request(g_ep, dest, "app", "blob", &m, blob_of((size_t)b2 * 16), (b1 >> 4) ? 5.0 : 1e-9,
                          on_reply, NULL, NULL, NULL);
    else
        cj_stream_send(g_ep, dest, "app", "blob", &m, pick_ri(b1 >> 4), blob_of((size_t)b2 * 16), on_done, NULL,
                       NULL);
}

static void check_bounds(void)
{
    struct cj_stream_stats st;
    cj_stream_get_stats(g_ep, &st);
    if (st.rx_buffered > st.rx_reserved || st.rx_reserved > MAX_BUFFERED) abort();
    if (st.rx_active + st.rx_finished > MAX_STREAMS) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_base) {
        g_base = event_base_new();
        cj_log_set_level(CJ_LOG_ERROR);   /* failures are expected here; logging them is slow */
    }
    struct cj_stream_limits lim;
    cj_stream_limits_default(&lim);
    lim.chunk_size = 1024;
    lim.window = 2048;
    lim.ack_interval = 1024;
    lim.max_blob = 200000;
    lim.max_buffered = MAX_BUFFERED;
    lim.max_streams = MAX_STREAMS;
    /* Timers fire on the next tick (libevent's clock is coarse: a timeout must
     * be 0 to expire within one non-blocking loop turn). */
    lim.rx_idle = 0;
    lim.tx_no_progress = 0;
    lim.linger = 0;
    struct cj_stream_io io = { .ctx = NULL, .send = io_send };
    g_ep = cj_stream_new(g_base, ME, &io, &lim);
    if (!g_ep) abort();
    const struct cj_stream_kv auth[] = {
        { "client_name", "site-1" }, { "ssid", "s" }, { "__token__", "t" }, { "__token_signature__", "g" },
    };
    if (cj_stream_set_auth(g_ep, auth, 4) || cj_stream_on(g_ep, "app", "blob", handler, NULL)) abort();
    g_sends = 0;
    memset(&g_sink, 0, sizeof g_sink);
    memset(g_src, 0, sizeof g_src);
    g_sink_mode = size && data[0] >= 0xc0;
    g_hold = g_sink_mode && (data[0] & 0x20);
    g_release_inline = g_sink_mode && (data[0] & 0x10);
    struct cj_stream_sink sink = { .begin = sink_begin, .data = sink_data, .hold_acks = g_hold };
    struct cj_stream_msg m = { .encoding = "fobs" };
    if (cj_stream_request_sink(g_ep, "peer0", "app", "blob", &m, blob_of(3000), 5.0, g_sink_mode ? &sink : NULL,
                               g_sink_mode ? on_sink_reply : on_reply, NULL, &g_handle, g_ri))
        abort();
    g_tx_id = cj_stream_next_id(g_ep) - 1;      /* ids are sequential: the request's stream */
    event_base_loop(g_base, EVLOOP_NONBLOCK);   /* the request's first chunks go out */

    struct in f = { data, size };
    for (int k = 0; f.n && k < 4096; k++) {
        uint8_t op = take(&f);
        switch (op & 7) {
        case 0: case 1: case 2: case 3: data_chunk(&f); break;
        case 4: ack(&f); break;
        case 5: notice(&f); break;
        case 6: event_base_loop(g_base, EVLOOP_NONBLOCK); break;
        default: another_send(&f); break;
        }
        check_bounds();
    }
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    check_bounds();
    cj_stream_free(g_ep);
    g_ep = NULL;
    return 0;
}
