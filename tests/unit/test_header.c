/* SPDX-License-Identifier: Apache-2.0 */
/* test_header.c — cellnet header block: decode of every captured DATA frame,
 * the five captured forwarding rewrites (byte-identical), builder parity with
 * the captures, RETURN headers, round trips and hostile input. */
#include "testutil.h"
#include "wire/header.h"

#include <math.h>

/* ---- helpers -------------------------------------------------------------- */

/* A captured frame and its header block (bytes [16, 16 + header_len)). */
struct cap {
    uint8_t *frame;
    size_t flen;
    const uint8_t *blk;
    size_t hlen;
};

static void cap_load(struct cap *c, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "frames/%s.bin", name);
    c->frame = tu_read_vector(path, &c->flen);
    assert_true(c->flen >= 16);
    assert_int_equal(c->frame[6], 1); /* DATA */
    c->hlen = (size_t)c->frame[4] << 8 | c->frame[5];
    assert_true(16 + c->hlen <= c->flen);
    c->blk = c->frame + 16;
}

static void decode_ok(struct cj_hdr *h, const uint8_t *blk, size_t len)
{
    struct cj_err e = { 0 };
    int rc = cj_hdr_decode(h, blk, len, &e);
    if (rc) fail_msg("decode failed: %s (%s at %zu)", e.msg, cj_errc_name(e.code), e.offset);
}

static void expect_decode_err(const uint8_t *blk, size_t len, int code, const char *needle)
{
    struct cj_hdr h;
    struct cj_err e = { 0 };
    int rc = cj_hdr_decode(&h, blk, len, &e);
    if (rc != -code) fail_msg("decode rc %d (%s), want %s", rc, e.msg, cj_errc_name(code));
    assert_int_equal(e.code, code);
    if (needle && !strstr(e.msg, needle)) fail_msg("error '%s' does not name '%s'", e.msg, needle);
}

/* Last route entry of h. */
static void route_last(const struct cj_hdr *h, char *fqcn, double *t)
{
    struct cj_route_iter it;
    const uint8_t *p;
    uint32_t n, seen = 0;
    cj_route_iter_init(&it, h);
    while (cj_route_iter_next(&it, &p, &n, t)) {
        memcpy(fqcn, p, n);
        fqcn[n] = 0;
        seen++;
    }
    assert_int_equal(seen, h->route_n);
}

/* The raw value of an unknown key, or NULL. */
static const struct cj_span *find_entry(const struct cj_hdr *h, const char *key, struct cj_hdr_entry *e)
{
    struct cj_hdr_iter it;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, e, NULL) == 1)
        if (mp_str_eq(e->key, e->key_len, key)) return &e->val;
    return NULL;
}

/* A tiny header-block writer for hostile cases. */
struct w {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};
static void w_init(struct w *w)
{
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
}
static void w_str(struct w *w, const char *s)
{
    msgpack_pack_str(&w->pk, strlen(s));
    msgpack_pack_str_body(&w->pk, s, strlen(s));
}
static void w_kv(struct w *w, const char *k, const char *v)
{
    w_str(w, k);
    w_str(w, v);
}
/* The three required keys (3 entries). */
static void w_required(struct w *w)
{
    w_kv(w, "cn__msg_type", "req");
    w_kv(w, "cn__origin", "site-1.J1.trainer_1");
    w_kv(w, "cn__destination", "server");
}

/* ---- decode of every captured DATA frame ----------------------------------- */

struct expect {
    const char *name;
    enum cj_msg_type type;
    const char *origin, *destination, *from, *to, *channel, *topic;
    uint64_t sm_id; /* 0: no sm__ keys */
    int64_t dt, sq, os;
    int64_t payload_len;
    uint32_t route_n;
};

#define T1 "site-1.J1.trainer_1"
#define RQ CJ_MSG_REQ
#define RP CJ_MSG_REPLY
#define ST "sm__STREAM"
static const struct expect CAPS[] = {
    { "cap02_direct_req_task_ping", RQ, "site-1", "server", "site-1", "server", "task", "ping", 0, 0, 0, 0, 14, 1 },
    { "cap05_direct_reply_task_ping", RP, "server", "site-1", "server", "site-1", "task", "ping", 0, 0, 0, 0, 45, 1 },
    { "cap06_stream_req_single_chunk", RQ, "site-1", "server", "site-1", "server", ST, "sm__DATA", 1795315510291406, 2, 0, 0, 23, 1 },
    { "cap07_stream_ack", RQ, "server", "site-1", "server", "site-1", ST, "sm__ACK", 1795315510291406, 3, 0, 23, 0, 1 },
    { "cap08_stream_reply_return_only", RQ, "server", "site-1", "server", "site-1", ST, "sm__DATA", 1795315509918272, 2, 0, 0, 43, 1 },
    { "cap19_get_task_req_chunk", RQ, "site-1.J1", "server", "site-1.J1", "server", ST, "sm__DATA", 1795315510548639, 2, 0, 0, 150, 1 },
    { "cap21_get_task_reply_chunk", RQ, "server", "site-1.J1", "server", "site-1.J1", ST, "sm__DATA", 1795315509918274, 2, 0, 0, 583, 1 },
    { "cap22_get_task_reply_ack", RQ, "site-1.J1", "server", "site-1.J1", "server", ST, "sm__ACK", 1795315509918274, 3, 0, 583, 0, 1 },
    { "cap23_task_ready_chunk", RQ, "site-1.J1", T1, "site-1.J1", T1, ST, "sm__DATA", 1795315510548640, 2, 0, 0, 773, 1 },
    { "cap25_dl_req_at_trainer_link", RQ, T1, "server", T1, "site-1.J1", ST, "sm__DATA", 1795315512341256, 2, 0, 0, 73, 1 },
    { "cap26_dl_req_after_relay", RQ, T1, "server", "site-1.J1", "server", ST, "sm__DATA", 1795315512341256, 2, 0, 0, 73, 2 },
    { "cap27_ack_from_server_before_relay", RQ, "server", T1, "server", "site-1.J1", ST, "sm__ACK", 1795315512341256, 3, 0, 73, 0, 1 },
    { "cap28_ack_from_server_after_relay", RQ, "server", T1, "site-1.J1", T1, ST, "sm__ACK", 1795315512341256, 3, 0, 73, 0, 2 },
    { "cap54_dl_reply_before_relay", RQ, "server", T1, "server", "site-1.J1", ST, "sm__DATA", 1795315509918277, 2, 0, 0, 622, 1 },
    { "cap55_dl_reply_after_relay", RQ, "server", T1, "site-1.J1", T1, ST, "sm__DATA", 1795315509918277, 2, 0, 0, 622, 2 },
    { "cap63_dl_reply_eof_before_relay", RQ, "server", T1, "server", "site-1.J1", ST, "sm__DATA", 1795315509918278, 2, 0, 0, 88, 1 },
    { "cap64_dl_reply_eof_after_relay", RQ, "server", T1, "site-1.J1", T1, ST, "sm__DATA", 1795315509918278, 2, 0, 0, 88, 2 },
    { "cap67_dl_confirm_at_trainer_link", RQ, T1, "server", T1, "site-1.J1", ST, "sm__DATA", 1795315512341261, 2, 0, 0, 120, 1 },
    { "cap68_dl_confirm_after_relay", RQ, T1, "server", "site-1.J1", "server", ST, "sm__DATA", 1795315512341261, 2, 0, 0, 120, 2 },
    { "cap69_task_ready_reply_chunk", RQ, T1, "site-1.J1", T1, "site-1.J1", ST, "sm__DATA", 1795315512341262, 2, 0, 0, 125, 1 },
    { "cap73_bye_req", RQ, T1, "site-1.J1", T1, "site-1.J1", "cellnet.channel", "bye", 0, 0, 0, 0, 0, 1 },
    { "cap74_bye_reply", RP, "site-1.J1", T1, "site-1.J1", T1, "cellnet.channel", "bye", 0, 0, 0, 0, 0, 1 },
};
#define NCAPS (sizeof CAPS / sizeof CAPS[0])

static void check_expect(const struct expect *x, const struct cj_hdr *h)
{
    assert_int_equal(h->msg_type, x->type);
    assert_string_equal(h->origin, x->origin);
    assert_string_equal(h->destination, x->destination);
    assert_string_equal(h->from, x->from);
    assert_string_equal(h->to, x->to);
    assert_string_equal(h->channel, x->channel);
    assert_string_equal(h->topic, x->topic);
    assert_true(cj_hdr_has(h, CJ_HK_PAYLOAD_LEN));
    assert_int_equal(h->payload_len, x->payload_len);
    assert_int_equal(h->route_n, x->route_n);
    assert_true(cj_hdr_has(h, CJ_HK_SEND_TIME));
    assert_true(h->send_time > 1.7e9 && h->send_time < 1.8e9);
    assert_false(h->secure);
    if (!x->sm_id) {
        assert_false(h->have & (CJ_HK_BIT(CJ_HK_SM_ID) | CJ_HK_BIT(CJ_HK_SM_DT) | CJ_HK_BIT(CJ_HK_SM_SQ)));
        return;
    }
    assert_true(cj_hdr_has(h, CJ_HK_SM_ID) && cj_hdr_has(h, CJ_HK_SM_DT));
    assert_true(cj_hdr_has(h, CJ_HK_SM_SQ) && cj_hdr_has(h, CJ_HK_SM_OS));
    assert_false(h->sm_id_neg);
    assert_true(h->sm_id == x->sm_id);
    assert_int_equal(h->sm_dt, x->dt);
    assert_int_equal(h->sm_sq, x->sq);
    assert_int_equal(h->sm_os, x->os);
    assert_false(h->reply_expected);
    if (x->dt == CJ_SM_ACK) {
        assert_string_equal(h->payload_encoding, "none");
        assert_false(cj_hdr_has(h, CJ_HK_SM_SZ));
    } else {
        assert_string_equal(h->payload_encoding, "bytes");
        assert_true(cj_hdr_has(h, CJ_HK_SM_SZ) && cj_hdr_has(h, CJ_HK_SM_CS) && cj_hdr_has(h, CJ_HK_SM_WS));
        assert_int_equal(h->sm_sz, x->payload_len); /* all single-chunk streams */
        assert_int_equal(h->sm_cs, 1048576);
        assert_int_equal(h->sm_ws, 67108864);
        assert_string_equal(h->sm_pe, "fobs");
        assert_true(strlen(h->sm_ri) == 36 || !cj_hdr_has(h, CJ_HK_SM_RI));
    }
}

static void test_decode_captures(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCAPS; i++) {
        struct cap c;
        struct cj_hdr h;
        cap_load(&c, CAPS[i].name);
        decode_ok(&h, c.blk, c.hlen);
        assert_ptr_equal(h.blk, c.blk);
        assert_int_equal(h.len, c.hlen);
        check_expect(&CAPS[i], &h);
        /* payload length in the prefix agrees with cn__payload_len */
        assert_int_equal(c.flen - 16 - c.hlen, (size_t)h.payload_len);
        free(c.frame);
    }
}

static void test_decode_cap02_details(void **state)
{
    (void)state;
    struct cap c;
    struct cj_hdr h;
    struct cj_hdr_entry e;
    cap_load(&c, "cap02_direct_req_task_ping");
    decode_ok(&h, c.blk, c.hlen);
    assert_int_equal(h.n_entries, 16);
    const struct cj_span *xapp = find_entry(&h, "x-app", &e);
    assert_non_null(xapp);
    assert_int_equal(e.hk, CJ_HK_UNKNOWN);
    assert_int_equal(xapp->len, 5);
    assert_memory_equal(xapp->p, "\xa4" "demo", 5);
    assert_ptr_equal(e.raw.p, c.blk + 3); /* first entry, after de 00 10 */
    assert_string_equal(h.req_id, "16081bee-7a46-4328-ad44-54127725df91");
    assert_false(h.req_id_is_array);
    assert_int_equal(h.req_id_count, 1);
    assert_true(h.reply_expected);
    assert_false(h.optional);
    assert_false(h.secure);
    assert_string_equal(h.payload_encoding, "fobs");
    assert_true(h.send_time == 1795315510.8989403);
    char fq[CJ_HDR_STR_MAX + 1];
    double t;
    route_last(&h, fq, &t);
    assert_string_equal(fq, "site-1");
    assert_true(t == 1795315510.8946548);
    assert_true(cj_hdr_route_has(&h, "site-1"));
    assert_false(cj_hdr_route_has(&h, "site-"));
    assert_false(cj_hdr_route_has(&h, "site-1.J1"));
    free(c.frame);
}

static void test_decode_cap08_details(void **state)
{
    (void)state;
    struct cap c;
    struct cj_hdr h;
    struct cj_hdr_entry e;
    cap_load(&c, "cap08_stream_reply_return_only");
    decode_ok(&h, c.blk, c.hlen);
    assert_string_equal(h.return_code, "ok");
    assert_true(cj_hdr_has(&h, CJ_HK_REQ_ID));
    assert_string_equal(h.req_id, "");
    assert_string_equal(h.sm_ri, "c8b9e345-2c13-4b9c-93a5-95741538be49");
    assert_string_equal(h.sm_ch, "return_only");
    assert_string_equal(h.sm_tp, "server_command:echo");
    assert_true(h.sm_rs);
    assert_true(h.sm_op);
    assert_true(h.optional);
    assert_int_equal(h.sm_ai, 4194304);
    assert_false(cj_hdr_has(&h, CJ_HK_REPLY_EXPECTED) && h.reply_expected);
    /* sm__rw / sm__rt are not decoded: kept as unknown entries */
    const struct cj_span *rw = find_entry(&h, "sm__rw", &e);
    assert_non_null(rw);
    assert_int_equal(e.hk, CJ_HK_UNKNOWN);
    assert_memory_equal(rw->p, "\xcb\x40\x14\0\0\0\0\0\0", 9);
    free(c.frame);
}

/* ---- forwarding --------------------------------------------------------------- */

static const char *const PAIRS[][2] = {
    { "cap25_dl_req_at_trainer_link", "cap26_dl_req_after_relay" },
    { "cap27_ack_from_server_before_relay", "cap28_ack_from_server_after_relay" },
    { "cap54_dl_reply_before_relay", "cap55_dl_reply_after_relay" },
    { "cap63_dl_reply_eof_before_relay", "cap64_dl_reply_eof_after_relay" },
    { "cap67_dl_confirm_at_trainer_link", "cap68_dl_confirm_after_relay" },
};
static const size_t PAIR_LENS[][2] = { { 533, 540 }, { 328, 361 }, { 587, 620 }, { 583, 616 }, { 488, 495 } };

static void test_forward_pairs(void **state)
{
    (void)state;
    for (size_t i = 0; i < 5; i++) {
        struct cap b, a;
        struct cj_hdr hb, ha;
        cap_load(&b, PAIRS[i][0]);
        cap_load(&a, PAIRS[i][1]);
        assert_int_equal(b.hlen, PAIR_LENS[i][0]);
        assert_int_equal(a.hlen, PAIR_LENS[i][1]);
        decode_ok(&hb, b.blk, b.hlen);
        decode_ok(&ha, a.blk, a.hlen);
        /* the relay's position and the routing table's next hop */
        assert_string_equal(hb.to, "site-1.J1");
        const char *next = strcmp(hb.destination, "server") == 0 ? "server" : hb.destination;
        assert_string_equal(next, ha.to);
        assert_false(cj_hdr_loop_refused(&hb, next));
        char fq[CJ_HDR_STR_MAX + 1];
        double rt;
        route_last(&ha, fq, &rt);
        assert_string_equal(fq, "site-1.J1");

        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        msgpack_sbuffer_write(&out, "pre", 3); /* appends after what is there */
        struct cj_err e = { 0 };
        int rc = cj_hdr_forward(b.blk, b.hlen, "site-1.J1", next, rt, ha.send_time, &out, &e);
        if (rc) fail_msg("%s: forward failed: %s", PAIRS[i][0], e.msg);
        assert_int_equal(out.size - 3, a.hlen);
        assert_memory_equal(out.data + 3, a.blk, a.hlen);
        /* the payload bytes of the pair are identical too (the relay never touches them) */
        assert_int_equal(b.flen - 16 - b.hlen, a.flen - 16 - a.hlen);
        assert_memory_equal(b.blk + b.hlen, a.blk + a.hlen, b.flen - 16 - b.hlen);
        msgpack_sbuffer_destroy(&out);
        free(b.frame);
        free(a.frame);
    }
}

/* The doubles in INDEX.txt are Python reprs, so they parse to the exact wire values. */
static void test_forward_index_times(void **state)
{
    (void)state;
    struct cap b, a;
    struct cj_hdr ha;
    cap_load(&b, "cap25_dl_req_at_trainer_link");
    cap_load(&a, "cap26_dl_req_after_relay");
    decode_ok(&ha, a.blk, a.hlen);
    char fq[CJ_HDR_STR_MAX + 1];
    double rt;
    route_last(&ha, fq, &rt);
    assert_true(rt == 1795315512.0618634);
    assert_true(ha.send_time == 1795315512.0618792);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_forward(b.blk, b.hlen, "site-1.J1", "server", 1795315512.0618634, 1795315512.0618792,
                                    &out, NULL), 0);
    assert_int_equal(out.size, 540);
    assert_memory_equal(out.data, a.blk, 540);
    msgpack_sbuffer_destroy(&out);
    free(b.frame);
    free(a.frame);
}

static void test_loop_check(void **state)
{
    (void)state;
    struct cap c;
    struct cj_hdr h;
    /* from upstream, route [server], D = trainer: sending it back to server is a loop */
    cap_load(&c, "cap27_ack_from_server_before_relay");
    decode_ok(&h, c.blk, c.hlen);
    assert_true(cj_hdr_loop_refused(&h, "server"));
    assert_false(cj_hdr_loop_refused(&h, T1));
    assert_false(cj_hdr_loop_refused(&h, "site-1"));
    free(c.frame);
    /* route [trainer_1, site-1.J1], D = server */
    cap_load(&c, "cap26_dl_req_after_relay");
    decode_ok(&h, c.blk, c.hlen);
    assert_true(cj_hdr_loop_refused(&h, T1));
    assert_true(cj_hdr_loop_refused(&h, "site-1.J1"));
    assert_false(cj_hdr_loop_refused(&h, "server"));
    free(c.frame);
    /* H == D is allowed even when D is on the route */
    cap_load(&c, "cap69_task_ready_reply_chunk");
    decode_ok(&h, c.blk, c.hlen);
    assert_false(cj_hdr_loop_refused(&h, "site-1.J1"));
    assert_true(cj_hdr_loop_refused(&h, T1));
    free(c.frame);
}

/* Forward rewrite of a header lacking all four keys: they are appended in order. */
static void test_forward_appends_missing(void **state)
{
    (void)state;
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_kv(&w, "x-app", "demo");
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_forward((uint8_t *)w.sb.data, w.sb.size, "site-1.J1", "server", 1.5, 2.5, &out, NULL), 0);
    struct cj_hdr h;
    decode_ok(&h, (uint8_t *)out.data, out.size);
    assert_int_equal(h.n_entries, 8);
    assert_int_equal((uint8_t)out.data[0], 0x88);
    assert_memory_equal(out.data + 1, w.sb.data + 1, w.sb.size - 1); /* old entries unchanged, first */
    assert_string_equal(h.from, "site-1.J1");
    assert_string_equal(h.to, "server");
    assert_int_equal(h.route_n, 1);
    assert_true(h.send_time == 2.5);
    char fq[CJ_HDR_STR_MAX + 1];
    double t;
    route_last(&h, fq, &t);
    assert_string_equal(fq, "site-1.J1");
    assert_true(t == 1.5);
    static const uint8_t tail[] = "\xa8" "cn__from" "\xa9" "site-1.J1" "\xa6" "cn__to" "\xa6" "server"
                                  "\xa9" "cn__route" "\x91\x92\xa9" "site-1.J1" "\xcb\x3f\xf8\0\0\0\0\0\0"
                                  "\xad" "cn__send_time" "\xcb\x40\x04\0\0\0\0\0\0";
    assert_int_equal(out.size, w.sb.size + sizeof tail - 1);
    assert_memory_equal(out.data + w.sb.size, tail, sizeof tail - 1);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&w.sb);
}

/* Route array header growth: fixarray 15 entries -> array16 with 16. */
static void test_forward_route_growth(void **state)
{
    (void)state;
    for (int n = 14; n <= 16; n++) {
        struct w w;
        w_init(&w);
        msgpack_pack_map(&w.pk, 4);
        w_required(&w);
        w_str(&w, "cn__route");
        msgpack_pack_array(&w.pk, (size_t)n);
        for (int i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "hop%d", i);
            msgpack_pack_array(&w.pk, 2);
            w_str(&w, name);
            msgpack_pack_double(&w.pk, i);
        }
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        assert_int_equal(cj_hdr_forward((uint8_t *)w.sb.data, w.sb.size, "me", "server", 9.0, 9.5, &out, NULL), 0);
        struct cj_hdr h;
        decode_ok(&h, (uint8_t *)out.data, out.size);
        assert_int_equal(h.route_n, (uint32_t)n + 1);
        if (n + 1 <= 15) {
            assert_int_equal(h.route.p[0], 0x90 | (n + 1));
        } else {
            assert_int_equal(h.route.p[0], 0xdc);
            assert_int_equal(h.route.p[1] << 8 | h.route.p[2], n + 1);
        }
        assert_true(cj_hdr_route_has(&h, "hop0"));
        assert_true(cj_hdr_route_has(&h, "me"));
        msgpack_sbuffer_destroy(&out);
        msgpack_sbuffer_destroy(&w.sb);
    }
}

/* A header whose rewrite lands exactly on 65 535 bytes passes; one byte more is unroutable. */
static void padded_header(struct w *w, size_t pad)
{
    w_init(w);
    msgpack_pack_map(&w->pk, 8);
    w_required(w);
    w_kv(w, "cn__from", "site-1.J1.trainer_1");
    w_kv(w, "cn__to", "site-1.J1");
    w_str(w, "cn__route");
    msgpack_pack_array(&w->pk, 1);
    msgpack_pack_array(&w->pk, 2);
    w_str(w, "site-1.J1.trainer_1");
    msgpack_pack_double(&w->pk, 1.0);
    w_str(w, "cn__send_time");
    msgpack_pack_double(&w->pk, 1.0);
    w_str(w, "pad");
    /* bin32 keeps the pad's own header at 5 bytes whatever its length */
    uint8_t hdr[5] = { 0xc6, (uint8_t)(pad >> 24), (uint8_t)(pad >> 16), (uint8_t)(pad >> 8), (uint8_t)pad };
    msgpack_sbuffer_write(&w->sb, (const char *)hdr, 5);
    char *zeros = calloc(1, pad ? pad : 1);
    msgpack_sbuffer_write(&w->sb, zeros, pad);
    free(zeros);
}

static int forward_padded(size_t pad, msgpack_sbuffer *out, struct cj_err *e, size_t *in_len)
{
    struct w w;
    padded_header(&w, pad);
    *in_len = w.sb.size;
    int rc = cj_hdr_forward((uint8_t *)w.sb.data, w.sb.size, "site-1.J1", "server", 2.0, 3.0, out, e);
    msgpack_sbuffer_destroy(&w.sb);
    return rc;
}

static void test_forward_limit(void **state)
{
    (void)state;
    msgpack_sbuffer out;
    struct cj_err e = { 0 };
    size_t in;
    /* growth: cn__from -10, cn__to -3, route entry +20 */
    msgpack_sbuffer_init(&out);
    assert_int_equal(forward_padded(1000, &out, &e, &in), 0);
    size_t grow = out.size - in;
    assert_int_equal(grow, 7);
    msgpack_sbuffer_destroy(&out);

    size_t fit = 1000 + (CJ_HDR_MAX_LEN - grow - in);
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "x", 1);
    assert_int_equal(forward_padded(fit, &out, &e, &in), 0);
    assert_int_equal(in, CJ_HDR_MAX_LEN - 7);
    assert_int_equal(out.size - 1, CJ_HDR_MAX_LEN);
    struct cj_hdr h;
    decode_ok(&h, (uint8_t *)out.data + 1, out.size - 1);
    assert_int_equal(h.route_n, 2);
    msgpack_sbuffer_destroy(&out);

    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "x", 1);
    assert_int_equal(forward_padded(fit + 1, &out, &e, &in), -CJ_E_LIMIT);
    assert_int_equal(e.code, CJ_E_LIMIT);
    assert_non_null(strstr(e.msg, "unroutable"));
    assert_int_equal(out.size, 1); /* out left as it was */
    msgpack_sbuffer_destroy(&out);
}

static void expect_forward_err(const uint8_t *blk, size_t len, int code)
{
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = { 0 };
    int rc = cj_hdr_forward(blk, len, "site-1.J1", "server", 1.0, 2.0, &out, &e);
    if (rc != -code) fail_msg("forward rc %d (%s), want %s", rc, e.msg, cj_errc_name(code));
    assert_int_equal(out.size, 0);
    msgpack_sbuffer_destroy(&out);
}

static void test_forward_hostile(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b;
    b = tu_hex("91 a0", &n);
    expect_forward_err(b, n, CJ_E_TYPE);
    free(b);
    b = tu_hex("81 01 02", &n); /* int key */
    expect_forward_err(b, n, CJ_E_TYPE);
    free(b);
    b = tu_hex("81 a1 61 01 00", &n); /* trailing byte */
    expect_forward_err(b, n, CJ_E_INVALID);
    free(b);
    b = tu_hex("82 a8 636e5f5f66726f6d a1 61 a8 636e5f5f66726f6d a1 62", &n); /* cn__from twice */
    expect_forward_err(b, n, CJ_E_INVALID);
    free(b);
    b = tu_hex("81 a9 636e5f5f726f757465 a1 61", &n); /* cn__route not an array */
    expect_forward_err(b, n, CJ_E_TYPE);
    free(b);
    b = tu_hex("81 a9 636e5f5f726f757465 dd ffffffff", &n); /* route count lies */
    expect_forward_err(b, n, CJ_E_TRUNCATED);
    free(b);
    b = tu_hex("de ffff a1 61 01", &n); /* map count lies */
    expect_forward_err(b, n, CJ_E_TRUNCATED);
    free(b);
    expect_forward_err((const uint8_t *)"", 0, CJ_E_TRUNCATED);
    /* bad arguments */
    b = tu_hex("80", &n);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_forward(b, n, "", "server", 0, 0, &out, NULL), -CJ_E_INVALID);
    char big[CJ_HDR_STR_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(cj_hdr_forward(b, n, "me", big, 0, 0, &out, NULL), -CJ_E_LIMIT);
    assert_int_equal(out.size, 0);
    assert_int_equal(cj_hdr_forward(b, n, "me", "server", 0, 0, &out, NULL), 0); /* an empty map is fine */
    assert_int_equal((uint8_t)out.data[0], 0x84);
    msgpack_sbuffer_destroy(&out);
    free(b);
}

/* ---- builder parity with the captures ------------------------------------------------ */

/* Adds one prefix entry of h through the typed builder calls. */
static void add_from_fields(struct cj_hb *b, const struct cj_hdr *h, const struct cj_hdr_entry *e)
{
    char key[64];
    assert_true(e->key_len < sizeof key);
    memcpy(key, e->key, e->key_len);
    key[e->key_len] = 0;
    switch (e->hk) {
    case CJ_HK_UNKNOWN: cj_hb_raw(b, key, e->val.p, e->val.len); break;
    case CJ_HK_MSG_TYPE: cj_hb_str(b, key, cj_msg_type_name(h->msg_type)); break;
    case CJ_HK_REQ_ID: cj_hb_str(b, key, h->req_id); break;
    case CJ_HK_RETURN_CODE: cj_hb_str(b, key, h->return_code); break;
    case CJ_HK_SECURE: cj_hb_bool(b, key, h->secure); break;
    case CJ_HK_OPTIONAL: cj_hb_bool(b, key, h->optional); break;
    case CJ_HK_PAYLOAD_LEN: cj_hb_int(b, key, h->payload_len); break;
    case CJ_HK_SM_ID: cj_hb_uint(b, key, h->sm_id); break;
    case CJ_HK_SM_DT: cj_hb_int(b, key, h->sm_dt); break;
    case CJ_HK_SM_SQ: cj_hb_int(b, key, h->sm_sq); break;
    case CJ_HK_SM_OS: cj_hb_int(b, key, h->sm_os); break;
    case CJ_HK_SM_SZ: cj_hb_int(b, key, h->sm_sz); break;
    case CJ_HK_SM_CS: cj_hb_int(b, key, h->sm_cs); break;
    case CJ_HK_SM_WS: cj_hb_int(b, key, h->sm_ws); break;
    case CJ_HK_SM_AI: cj_hb_int(b, key, h->sm_ai); break;
    case CJ_HK_SM_RS: cj_hb_bool(b, key, h->sm_rs); break;
    case CJ_HK_SM_OP: cj_hb_bool(b, key, h->sm_op); break;
    case CJ_HK_SM_CH: cj_hb_str(b, key, h->sm_ch); break;
    case CJ_HK_SM_TP: cj_hb_str(b, key, h->sm_tp); break;
    case CJ_HK_SM_PE: cj_hb_str(b, key, h->sm_pe); break;
    case CJ_HK_SM_RI: cj_hb_str(b, key, h->sm_ri); break;
    default: fail_msg("unexpected prefix key %s", key);
    }
}

/* Every captured message with a one-entry route was built by a stock cell:
 * application / sm__ keys first, then the cellnet keys.  Rebuilding it with
 * the builder (prefix entries, then cj_hb_cellnet) gives the same bytes. */
static void test_builder_matches_captures(void **state)
{
    (void)state;
    int built = 0;
    for (size_t i = 0; i < NCAPS; i++) {
        struct cap c;
        struct cj_hdr h;
        cap_load(&c, CAPS[i].name);
        decode_ok(&h, c.blk, c.hlen);
        if (h.route_n != 1) { free(c.frame); continue; }
        bool stream = strcmp(h.channel, "sm__STREAM") == 0;
        const char *first = h.msg_type == CJ_MSG_REPLY ? "cn__return_code"
                            : stream                   ? "cn__reply_expected"
                                                       : "cn__topic";
        char fq[CJ_HDR_STR_MAX + 1];
        double rt;
        route_last(&h, fq, &rt);
        assert_string_equal(fq, h.origin);

        struct cj_hb b;
        cj_hb_init(&b);
        struct cj_hdr_iter it;
        struct cj_hdr_entry e;
        cj_hdr_iter_init(&it, &h);
        while (cj_hdr_iter_next(&it, &e, NULL) == 1 && !mp_str_eq(e.key, e.key_len, first))
            add_from_fields(&b, &h, &e);
        const struct cj_hdr_msg m = {
            .type = h.msg_type,
            .me = h.origin,
            .to = h.to,
            .destination = h.destination,
            .channel = h.channel,
            .topic = h.topic,
            .req_id = stream ? NULL : h.req_id,
            .return_code = h.return_code,
            .reply_expected = h.reply_expected,
            .optional = h.optional,
            .secure = h.secure,
            .payload_encoding = h.payload_encoding,
            .payload_len = h.payload_len,
            .route_time = rt,
            .send_time = h.send_time,
        };
        assert_int_equal(cj_hb_cellnet(&b, &m), 0);
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        struct cj_err err = { 0 };
        if (cj_hb_finish(&b, &out, &err)) fail_msg("%s: %s", CAPS[i].name, err.msg);
        if (out.size != c.hlen || memcmp(out.data, c.blk, c.hlen) != 0)
            fail_msg("%s: rebuilt header differs (%zu vs %zu bytes)", CAPS[i].name, out.size, c.hlen);
        built++;
        msgpack_sbuffer_destroy(&out);
        cj_hb_destroy(&b);
        free(c.frame);
    }
    assert_int_equal(built, 17);
}

static void test_builder_errors(void **state)
{
    (void)state;
    struct cj_hb b;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = { 0 };

    cj_hb_init(&b); /* a known key twice */
    cj_hb_str(&b, "cn__origin", "a");
    assert_int_equal(cj_hb_str(&b, "cn__origin", "b"), -CJ_E_INVALID);
    assert_int_equal(cj_hb_int(&b, "x", 1), -CJ_E_INVALID); /* sticky */
    assert_int_equal(cj_hb_finish(&b, &out, &e), -CJ_E_INVALID);
    assert_non_null(strstr(e.msg, "cn__origin"));
    assert_int_equal(out.size, 0);
    cj_hb_destroy(&b);

    cj_hb_init(&b); /* missing channel for a request */
    const struct cj_hdr_msg m = { .type = CJ_MSG_REQ, .me = "site-1.J1", .to = "server", .destination = "server" };
    assert_int_equal(cj_hb_cellnet(&b, &m), -CJ_E_INVALID);
    cj_hb_destroy(&b);

    cj_hb_init(&b); /* RETURN goes through cj_hdr_build_return */
    const struct cj_hdr_msg r = { .type = CJ_MSG_RETURN, .me = "a", .to = "b", .destination = "c" };
    assert_int_equal(cj_hb_cellnet(&b, &r), -CJ_E_INVALID);
    cj_hb_destroy(&b);

    cj_hb_init(&b); /* over 65535 bytes */
    char *big = calloc(1, 70000);
    cj_hb_strn(&b, "x", big, 70000);
    assert_int_equal(cj_hb_finish(&b, &out, &e), -CJ_E_LIMIT);
    assert_int_equal(out.size, 0);
    free(big);
    cj_hb_destroy(&b);

    /* a fresh originated request decodes with every field as given */
    cj_hb_init(&b);
    cj_hb_str(&b, "x-app", "demo");
    cj_hb_int(&b, "x-neg", -7);
    cj_hb_float(&b, "x-f", 0.25);
    const struct cj_hdr_msg q = { .type = CJ_MSG_REQ, .me = "site-1.J1", .to = "server", .destination = "server.J1",
                                  .channel = "aux_communication", .topic = "__task_check__", .req_id = "rid",
                                  .reply_expected = true, .payload_encoding = "fobs", .payload_len = 12,
                                  .route_time = 5.0, .send_time = 6.0 };
    assert_int_equal(cj_hb_cellnet(&b, &q), 0);
    assert_int_equal(cj_hb_finish(&b, &out, &e), 0);
    struct cj_hdr h;
    decode_ok(&h, (uint8_t *)out.data, out.size);
    assert_int_equal(h.n_entries, 18);
    assert_string_equal(h.from, "site-1.J1");
    assert_string_equal(h.origin, "site-1.J1");
    assert_string_equal(h.destination, "server.J1");
    assert_string_equal(h.req_id, "rid");
    assert_true(h.reply_expected);
    assert_int_equal(h.payload_len, 12);
    assert_true(h.send_time == 6.0);
    assert_true(cj_hdr_route_has(&h, "site-1.J1"));
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&out);
}

/* ---- RETURN ---------------------------------------------------------------------------- */

static void test_build_return(void **state)
{
    (void)state;
    struct cap c;
    struct cj_hdr orig, h, oh;
    cap_load(&c, "cap73_bye_req"); /* a direct request with reply_expected */
    decode_ok(&orig, c.blk, c.hlen);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = { 0 };
    assert_int_equal(cj_hdr_build_return(&orig, "site-1.J1", T1, 7.5, &out, &e), 0);
    decode_ok(&h, (uint8_t *)out.data, out.size);
    assert_int_equal(h.msg_type, CJ_MSG_RETURN);
    assert_string_equal(h.return_code, "comm_error");
    assert_int_equal(h.error.len, 14);
    assert_memory_equal(h.error.p, "cannot forward", 14);
    assert_string_equal(h.return_reason, "cant_forward");
    assert_string_equal(h.origin, "site-1.J1");
    assert_string_equal(h.from, "site-1.J1");
    assert_string_equal(h.to, T1);
    assert_string_equal(h.destination, T1); /* the request's origin */
    assert_true(h.req_id_is_array);
    assert_int_equal(h.req_id_count, 1);
    assert_string_equal(h.req_id, orig.req_id);
    assert_int_equal(h.req_id_raw.len, 1 + orig.req_id_raw.len);
    assert_int_equal(h.req_id_raw.p[0], 0x91);
    assert_int_equal(h.route_n, 1);
    assert_true(cj_hdr_route_has(&h, "site-1.J1"));
    assert_string_equal(h.payload_encoding, "none");
    assert_int_equal(h.payload_len, 0);
    assert_true(h.send_time == 7.5);
    static const enum cj_hkey absent[] = { CJ_HK_CHANNEL, CJ_HK_TOPIC, CJ_HK_REPLY_EXPECTED, CJ_HK_SECURE,
                                           CJ_HK_OPTIONAL };
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) assert_false(cj_hdr_has(&h, absent[i]));
    /* cn__original_headers is the original block, verbatim */
    assert_int_equal(h.original_headers.len, c.hlen);
    assert_memory_equal(h.original_headers.p, c.blk, c.hlen);
    decode_ok(&oh, h.original_headers.p, h.original_headers.len);
    assert_string_equal(oh.destination, "site-1.J1");
    /* key order: NVFlare's make_reply + add_headers */
    static const char *order[] = { "cn__return_code", "cn__error", "cn__original_headers", "cn__from", "cn__to",
                                   "cn__origin", "cn__destination", "cn__req_id", "cn__msg_type", "cn__route",
                                   "cn__return_reason", "cn__payload_encoding", "cn__payload_len", "cn__send_time" };
    struct cj_hdr_iter it;
    struct cj_hdr_entry en;
    size_t k = 0;
    cj_hdr_iter_init(&it, &h);
    while (cj_hdr_iter_next(&it, &en, NULL) == 1) assert_true(mp_str_eq(en.key, en.key_len, order[k++]));
    assert_int_equal(k, 14);
    msgpack_sbuffer_destroy(&out);

    /* no cn__req_id in the original: [""] like NVFlare's get_header(REQ_ID, "") */
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 3);
    w_required(&w);
    decode_ok(&orig, (uint8_t *)w.sb.data, w.sb.size);
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_build_return(&orig, "site-1.J1", T1, 1.0, &out, NULL), 0);
    decode_ok(&h, (uint8_t *)out.data, out.size);
    assert_true(h.req_id_is_array);
    assert_string_equal(h.req_id, "");
    assert_int_equal(h.req_id_raw.len, 2);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&w.sb);

    /* a RETURN can never exceed 65535: an original near the limit is refused */
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_str(&w, "pad");
    msgpack_pack_bin(&w.pk, 65400);
    char *zeros = calloc(1, 65400);
    msgpack_pack_bin_body(&w.pk, zeros, 65400);
    free(zeros);
    decode_ok(&orig, (uint8_t *)w.sb.data, w.sb.size);
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_build_return(&orig, "site-1.J1", T1, 1.0, &out, &e), -CJ_E_LIMIT);
    assert_int_equal(out.size, 0);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&w.sb);
    free(c.frame);
}

/* ---- round trips ------------------------------------------------------------------------ */

/* decode -> encode (decoded fields + unknown entries raw) -> decode gives the same
 * fields; for the captures (Python's minimal encodings) even the same bytes. */
static void test_roundtrip_captures(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCAPS; i++) {
        struct cap c;
        struct cj_hdr h, h2;
        cap_load(&c, CAPS[i].name);
        decode_ok(&h, c.blk, c.hlen);
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        struct cj_err e = { 0 };
        if (cj_hdr_encode(&h, &out, &e)) fail_msg("%s: encode: %s", CAPS[i].name, e.msg);
        decode_ok(&h2, (uint8_t *)out.data, out.size);
        assert_true(cj_hdr_same_fields(&h, &h2));
        assert_int_equal(out.size, c.hlen);
        assert_memory_equal(out.data, c.blk, c.hlen);
        msgpack_sbuffer_destroy(&out);
        free(c.frame);
    }
}

/* A header with the less common forms: negative and uint64 sm__id, int times,
 * req_id array, cn__error / sm__em texts, original headers, non-minimal ints. */
static void test_roundtrip_unusual(void **state)
{
    (void)state;
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 12);
    w_required(&w);
    w_str(&w, "sm__id");
    msgpack_pack_int64(&w.pk, -5);
    w_str(&w, "cn__send_time");
    msgpack_pack_uint64(&w.pk, 1795315512);
    w_str(&w, "cn__route"); /* one entry with an int time, one with a float32 */
    msgpack_pack_array(&w.pk, 2);
    msgpack_pack_array(&w.pk, 2);
    w_str(&w, "a");
    msgpack_pack_int64(&w.pk, 7);
    msgpack_pack_array(&w.pk, 2);
    w_str(&w, "b");
    msgpack_pack_float(&w.pk, 0.5f);
    w_str(&w, "cn__req_id");
    msgpack_pack_array(&w.pk, 2);
    w_str(&w, "r1");
    w_str(&w, "r2");
    w_kv(&w, "cn__error", "a long error text");
    w_kv(&w, "sm__em", "stream failed");
    w_str(&w, "cn__original_headers");
    msgpack_pack_map(&w.pk, 1);
    w_kv(&w, "k", "v");
    w_str(&w, "sm__sq"); /* a non-minimal int: cd 00 05 */
    msgpack_sbuffer_write(&w.sb, "\xcd\x00\x05", 3);
    w_str(&w, "x-nested");
    msgpack_pack_map(&w.pk, 1);
    w_str(&w, "deep");
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_nil(&w.pk);

    struct cj_hdr h, h2;
    decode_ok(&h, (uint8_t *)w.sb.data, w.sb.size);
    assert_true(h.sm_id_neg);
    assert_int_equal((int64_t)h.sm_id, -5);
    assert_true(h.send_time == 1795315512.0);
    assert_int_equal(h.route_n, 2);
    assert_true(h.req_id_is_array);
    assert_int_equal(h.req_id_count, 2);
    assert_string_equal(h.req_id, "r1");
    assert_int_equal(h.sm_sq, 5);
    assert_int_equal(h.sm_em.len, 13);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_hdr_encode(&h, &out, NULL), 0);
    decode_ok(&h2, (uint8_t *)out.data, out.size);
    assert_true(cj_hdr_same_fields(&h, &h2));
    /* and a changed field is noticed */
    h2.sm_sq = 6;
    assert_false(cj_hdr_same_fields(&h, &h2));
    msgpack_sbuffer_destroy(&out);

    /* uint64 sm__id above INT64_MAX */
    msgpack_sbuffer_clear(&w.sb);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_str(&w, "sm__id");
    msgpack_pack_uint64(&w.pk, UINT64_MAX);
    decode_ok(&h, (uint8_t *)w.sb.data, w.sb.size);
    assert_false(h.sm_id_neg);
    assert_true(h.sm_id == UINT64_MAX);
    msgpack_sbuffer_destroy(&w.sb);
}

/* ---- hostile input -------------------------------------------------------------------- */

static void test_truncation_every_offset(void **state)
{
    (void)state;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    for (size_t i = 0; i < NCAPS; i++) {
        struct cap c;
        cap_load(&c, CAPS[i].name);
        for (size_t n = 0; n < c.hlen; n++) {
            /* a private copy of exactly n bytes, so ASan sees any overread */
            uint8_t *p = malloc(n ? n : 1);
            memcpy(p, c.blk, n);
            struct cj_hdr h;
            struct cj_err e = { 0 };
            if (cj_hdr_decode(&h, p, n, &e) == 0) fail_msg("%s: decoded a %zu-byte prefix", CAPS[i].name, n);
            assert_true(e.offset <= n);
            assert_int_not_equal(e.code, 0);
            assert_true(strlen(e.msg) > 0);
            assert_int_not_equal(cj_hdr_forward(p, n, "site-1.J1", "server", 1, 2, &out, NULL), 0);
            assert_int_equal(out.size, 0);
            free(p);
        }
        free(c.frame);
    }
    msgpack_sbuffer_destroy(&out);
}

static void test_hostile_shapes(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b;
    expect_decode_err((const uint8_t *)"", 0, CJ_E_TRUNCATED, NULL);
    b = tu_hex("91 a0", &n);
    expect_decode_err(b, n, CJ_E_TYPE, "not a map");
    free(b);
    b = tu_hex("a3 616263", &n);
    expect_decode_err(b, n, CJ_E_TYPE, "not a map");
    free(b);
    b = tu_hex("c1", &n);
    expect_decode_err(b, n, CJ_E_INVALID, NULL);
    free(b);
    b = tu_hex("81 01 02", &n); /* int key */
    expect_decode_err(b, n, CJ_E_TYPE, "not a str");
    free(b);
    b = tu_hex("81 c4 01 61 02", &n); /* bin key */
    expect_decode_err(b, n, CJ_E_TYPE, "not a str");
    free(b);
    b = tu_hex("81 91 a0 02", &n); /* array key */
    expect_decode_err(b, n, CJ_E_TYPE, "not a str");
    free(b);
    /* counts that lie */
    b = tu_hex("de ffff a1 61 01", &n);
    expect_decode_err(b, n, CJ_E_TRUNCATED, "claims 65535");
    free(b);
    b = tu_hex("df ffffffff a1 61 01", &n);
    expect_decode_err(b, n, CJ_E_TRUNCATED, NULL);
    free(b);
    b = tu_hex("81 a9 636e5f5f726f757465 dc ffff 92 a1 61 00", &n); /* route */
    expect_decode_err(b, n, CJ_E_TRUNCATED, "cn__route");
    free(b);
    b = tu_hex("81 aa 636e5f5f7265715f6964 dd 7fffffff a1 61", &n); /* req_id array */
    expect_decode_err(b, n, CJ_E_TRUNCATED, "cn__req_id");
    free(b);
    b = tu_hex("81 a5 782d617070 de ffff a1 61 01", &n); /* unknown key's nested map */
    expect_decode_err(b, n, CJ_E_TRUNCATED, "x-app");
    free(b);
    b = tu_hex("81 a5 782d617070 db ffffffff 61", &n); /* str32 longer than the block */
    expect_decode_err(b, n, CJ_E_TRUNCATED, NULL);
    free(b);

    /* trailing bytes after a complete, valid map */
    struct cap c;
    cap_load(&c, "cap07_stream_ack");
    uint8_t *t = malloc(c.hlen + 1);
    memcpy(t, c.blk, c.hlen);
    t[c.hlen] = 0xc0;
    struct cj_hdr h;
    struct cj_err e = { 0 };
    assert_int_equal(cj_hdr_decode(&h, t, c.hlen + 1, &e), -CJ_E_INVALID);
    assert_int_equal(e.offset, c.hlen);
    assert_non_null(strstr(e.msg, "trailing"));
    free(t);
    free(c.frame);

    /* over 65535 bytes */
    uint8_t *big = calloc(1, CJ_HDR_MAX_LEN + 1);
    big[0] = 0x80;
    expect_decode_err(big, CJ_HDR_MAX_LEN + 1, CJ_E_LIMIT, NULL);
    free(big);
}

/* A header with the required keys plus one entry key = raw value (hex). */
static void expect_entry_err(const char *key, const char *val_hex, int code, const char *needle)
{
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_str(&w, key);
    size_t n;
    uint8_t *v = tu_hex(val_hex, &n);
    msgpack_sbuffer_write(&w.sb, (const char *)v, n);
    free(v);
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, code, needle ? needle : key);
    msgpack_sbuffer_destroy(&w.sb);
}

static void expect_entry_ok(const char *key, const char *val_hex)
{
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_str(&w, key);
    size_t n;
    uint8_t *v = tu_hex(val_hex, &n);
    msgpack_sbuffer_write(&w.sb, (const char *)v, n);
    free(v);
    struct cj_hdr h;
    decode_ok(&h, (uint8_t *)w.sb.data, w.sb.size);
    msgpack_sbuffer_destroy(&w.sb);
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_entry_err("sm__id", "cb 3ff0000000000000", CJ_E_TYPE, NULL);  /* float */
    expect_entry_err("sm__id", "ca 3f800000", CJ_E_TYPE, NULL);          /* float32 */
    expect_entry_err("sm__id", "c3", CJ_E_TYPE, NULL);                   /* bool */
    expect_entry_err("sm__id", "a1 31", CJ_E_TYPE, NULL);                /* str */
    expect_entry_err("sm__sq", "cb 0000000000000000", CJ_E_TYPE, NULL);
    expect_entry_err("sm__os", "c2", CJ_E_TYPE, NULL);
    expect_entry_err("sm__dt", "c0", CJ_E_TYPE, NULL);
    expect_entry_err("sm__sz", "cf ffffffffffffffff", CJ_E_LIMIT, NULL); /* over int64 */
    expect_entry_err("sm__sq", "ff", CJ_E_INVALID, NULL);                /* negative */
    expect_entry_err("cn__payload_len", "d0 80", CJ_E_INVALID, NULL);
    expect_entry_err("sm__rs", "01", CJ_E_TYPE, NULL);
    expect_entry_err("cn__reply_expected", "01", CJ_E_TYPE, NULL);
    expect_entry_err("cn__secure", "a4 74727565", CJ_E_TYPE, NULL);
    expect_entry_err("cn__from", "05", CJ_E_TYPE, NULL);
    expect_entry_err("cn__channel", "c4 01 61", CJ_E_TYPE, NULL);        /* bin, not str */
    expect_entry_err("cn__send_time", "a1 31", CJ_E_TYPE, NULL);
    expect_entry_err("cn__route", "a1 61", CJ_E_TYPE, NULL);
    expect_entry_err("cn__route", "91 91 a1 61", CJ_E_TYPE, NULL);       /* [["a"]] */
    expect_entry_err("cn__route", "91 93 a1 61 00 00", CJ_E_TYPE, NULL); /* 3 elements */
    expect_entry_err("cn__route", "91 92 01 00", CJ_E_TYPE, NULL);       /* [[1, 0]] */
    expect_entry_err("cn__route", "91 92 a1 61 a1 62", CJ_E_TYPE, NULL); /* [["a", "b"]] */
    expect_entry_err("cn__route", "91 a1 61", CJ_E_TYPE, NULL);          /* ["a"] */
    expect_entry_err("cn__req_id", "05", CJ_E_TYPE, NULL);
    expect_entry_err("cn__req_id", "92 a1 61 05", CJ_E_TYPE, NULL);
    expect_entry_err("cn__original_headers", "91 00", CJ_E_TYPE, NULL);
    expect_entry_err("cn__error", "05", CJ_E_TYPE, NULL);
    expect_entry_err("cn__to", "a3 61 00 62", CJ_E_INVALID, "NUL");
    expect_entry_err("cn__origin", "a0", CJ_E_INVALID, NULL); /* (duplicate: w_required has it) */
    /* accepted forms */
    expect_entry_ok("sm__id", "d3 8000000000000000");
    expect_entry_ok("sm__cs", "ff");                        /* non-positive: stored, NVFlare ignores it */
    expect_entry_ok("cn__send_time", "ca 3f800000");
    expect_entry_ok("cn__req_id", "90");
    expect_entry_ok("cn__error", "db 00000003 616263");
    expect_entry_ok("x-anything", "c7 01 05 00");           /* unknown keys are not typed */
    expect_entry_ok("cn__encrypted", "c3");

    /* required keys and their types */
    struct w w;
    static const char *names[] = { "cn__msg_type", "cn__origin", "cn__destination" };
    for (int skip = 0; skip < 3; skip++) {
        w_init(&w);
        msgpack_pack_map(&w.pk, 2);
        for (int k = 0; k < 3; k++)
            if (k != skip) w_kv(&w, names[k], k == 0 ? "req" : "server");
        expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_MISSING, names[skip]);
        msgpack_sbuffer_destroy(&w.sb);
    }
    w_init(&w); /* cn__origin as int */
    msgpack_pack_map(&w.pk, 3);
    w_kv(&w, "cn__msg_type", "req");
    w_str(&w, "cn__origin");
    msgpack_pack_int(&w.pk, 1);
    w_kv(&w, "cn__destination", "server");
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_TYPE, "cn__origin");
    msgpack_sbuffer_destroy(&w.sb);
    w_init(&w); /* unknown message type */
    msgpack_pack_map(&w.pk, 3);
    w_kv(&w, "cn__msg_type", "request");
    w_kv(&w, "cn__origin", "a");
    w_kv(&w, "cn__destination", "b");
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_INVALID, "cn__msg_type");
    msgpack_sbuffer_destroy(&w.sb);
    w_init(&w); /* empty destination */
    msgpack_pack_map(&w.pk, 3);
    w_kv(&w, "cn__msg_type", "reply");
    w_kv(&w, "cn__origin", "a");
    w_kv(&w, "cn__destination", "");
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_INVALID, "cn__destination");
    msgpack_sbuffer_destroy(&w.sb);
}

static void test_oversize_strings(void **state)
{
    (void)state;
    char s[CJ_HDR_STR_MAX + 2];
    memset(s, 'a', sizeof s);
    for (int extra = 0; extra <= 1; extra++) {
        memset(s, 'a', sizeof s);
        s[CJ_HDR_STR_MAX + extra] = 0; /* 255 bytes, then 256 */
        static const char *keys[] = { "cn__origin", "cn__destination", "cn__to", "cn__topic", "sm__ri", "sm__fd" };
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            struct w w;
            w_init(&w);
            msgpack_pack_map(&w.pk, 3);
            w_kv(&w, "cn__msg_type", "req");
            w_kv(&w, "cn__origin", strcmp(keys[k], "cn__origin") ? "a" : s);
            w_kv(&w, "cn__destination", strcmp(keys[k], "cn__destination") ? "b" : s);
            if (strcmp(keys[k], "cn__origin") && strcmp(keys[k], "cn__destination")) {
                w.sb.data[0] = (char)0x84;
                w_kv(&w, keys[k], s);
            }
            struct cj_hdr h;
            struct cj_err e = { 0 };
            int rc = cj_hdr_decode(&h, (uint8_t *)w.sb.data, w.sb.size, &e);
            if (extra == 0) {
                if (rc) fail_msg("%s: %s", keys[k], e.msg);
            } else {
                assert_int_equal(rc, -CJ_E_LIMIT);
                assert_non_null(strstr(e.msg, keys[k]));
            }
            msgpack_sbuffer_destroy(&w.sb);
        }
    }
    /* the route's FQCNs are bounded too */
    memset(s, 'a', sizeof s);
    s[CJ_HDR_STR_MAX + 1] = 0;
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_str(&w, "cn__route");
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_array(&w.pk, 2);
    w_str(&w, s);
    msgpack_pack_double(&w.pk, 1.0);
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_LIMIT, "cn__route");
    msgpack_sbuffer_destroy(&w.sb);
}

static void test_duplicates(void **state)
{
    (void)state;
    struct w w;
    w_init(&w);
    msgpack_pack_map(&w.pk, 4);
    w_required(&w);
    w_kv(&w, "cn__destination", "site-1");
    expect_decode_err((uint8_t *)w.sb.data, w.sb.size, CJ_E_INVALID, "twice");
    msgpack_sbuffer_destroy(&w.sb);
    /* unknown keys may repeat: they are passed through untouched */
    w_init(&w);
    msgpack_pack_map(&w.pk, 5);
    w_required(&w);
    w_kv(&w, "x-app", "a");
    w_kv(&w, "x-app", "b");
    struct cj_hdr h;
    decode_ok(&h, (uint8_t *)w.sb.data, w.sb.size);
    assert_int_equal(h.n_entries, 5);
    msgpack_sbuffer_destroy(&w.sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_captures),
        cmocka_unit_test(test_decode_cap02_details),
        cmocka_unit_test(test_decode_cap08_details),
        cmocka_unit_test(test_forward_pairs),
        cmocka_unit_test(test_forward_index_times),
        cmocka_unit_test(test_loop_check),
        cmocka_unit_test(test_forward_appends_missing),
        cmocka_unit_test(test_forward_route_growth),
        cmocka_unit_test(test_forward_limit),
        cmocka_unit_test(test_forward_hostile),
        cmocka_unit_test(test_builder_matches_captures),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_build_return),
        cmocka_unit_test(test_roundtrip_captures),
        cmocka_unit_test(test_roundtrip_unusual),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_hostile_shapes),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_oversize_strings),
        cmocka_unit_test(test_duplicates),
    };
    return cmocka_run_group_tests_name("header", tests, NULL, NULL);
}
