/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_header.c — the cellnet header block decoder, forward rewrite and encoder.
 *
 * Input: a whole SFM frame (the seeds are captured frames) whose DATA prefix
 * gives the header block as bytes [16, 16 + header_len), or else the whole
 * input is taken as a header block.
 *
 * Invariants checked when the block decodes:
 *  - forward rewrite succeeds (or fails only with CJ_E_LIMIT), and its result
 *    decodes, has route_n + 1 entries ending with [me, route_time], the new
 *    cn__from / cn__to / cn__send_time, every other field equal, and every
 *    other entry's bytes identical and in the same order;
 *  - the loop check agrees with a direct route scan;
 *  - re-encoding from the decoded fields decodes to the same fields;
 *  - a RETURN built for it decodes and carries the block verbatim.
 * Whatever the input, forward must never succeed on a block that is not a
 * map with str keys (checked by decoding keys of its output). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/header.h"

#define ME "site-1.J1"
#define NEXT "server"
#define RT 1795315512.0618634
#define SENDT 1795315512.0618792

static const uint64_t REWRITTEN = CJ_HK_BIT(CJ_HK_FROM) | CJ_HK_BIT(CJ_HK_TO) | CJ_HK_BIT(CJ_HK_ROUTE) |
                                  CJ_HK_BIT(CJ_HK_SEND_TIME);

static bool is_rewritten(const struct cj_hdr_entry *e)
{
    return e->hk != CJ_HK_UNKNOWN && (REWRITTEN & CJ_HK_BIT(e->hk));
}

/* Next entry of it that is not one of the four rewritten keys. */
static int next_kept(struct cj_hdr_iter *it, struct cj_hdr_entry *e)
{
    int rc;
    while ((rc = cj_hdr_iter_next(it, e, NULL)) == 1 && is_rewritten(e)) {}
    return rc;
}

static void check_kept_entries(const struct cj_hdr *a, const struct cj_hdr *b)
{
    struct cj_hdr_iter ia, ib;
    struct cj_hdr_entry ea, eb;
    cj_hdr_iter_init(&ia, a);
    cj_hdr_iter_init(&ib, b);
    for (;;) {
        int ra = next_kept(&ia, &ea), rb = next_kept(&ib, &eb);
        if (ra < 0 || rb < 0 || ra != rb) abort();
        if (ra == 0) return;
        if (ea.raw.len != eb.raw.len || memcmp(ea.raw.p, eb.raw.p, ea.raw.len) != 0) abort();
    }
}

static void check_forward(const struct cj_hdr *h)
{
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err err = { 0 };
    int rc = cj_hdr_forward(h->blk, h->len, ME, NEXT, RT, SENDT, &out, &err);
    if (rc) {
        if (rc != -CJ_E_LIMIT || out.size != 0) abort();
        msgpack_sbuffer_destroy(&out);
        return;
    }
    if (out.size > CJ_HDR_MAX_LEN) abort();
    struct cj_hdr f;
    if (cj_hdr_decode(&f, (const uint8_t *)out.data, out.size, &err)) abort();
    if (f.route_n != h->route_n + 1) abort();
    if (strcmp(f.from, ME) || strcmp(f.to, NEXT) || f.send_time != SENDT) abort();
    if (!cj_hdr_route_has(&f, ME)) abort();
    /* last route entry is [me, route_time]; the earlier ones are h's */
    struct cj_route_iter ia, ib;
    const uint8_t *pa, *pb;
    uint32_t na, nb;
    double ta, tb;
    cj_route_iter_init(&ia, h);
    cj_route_iter_init(&ib, &f);
    for (uint32_t i = 0; i < h->route_n; i++) {
        if (!cj_route_iter_next(&ia, &pa, &na, &ta) || !cj_route_iter_next(&ib, &pb, &nb, &tb)) abort();
        if (na != nb || memcmp(pa, pb, na) || memcmp(&ta, &tb, sizeof ta)) abort();
    }
    if (!cj_route_iter_next(&ib, &pb, &nb, &tb) || !mp_str_eq(pb, nb, ME) || tb != RT) abort();
    if (cj_route_iter_next(&ib, &pb, &nb, &tb)) abort();
    /* every other entry identical, in order; other decoded fields unchanged */
    check_kept_entries(h, &f);
    struct cj_hdr g = f;
    memcpy(g.from, h->from, sizeof g.from);
    memcpy(g.to, h->to, sizeof g.to);
    g.send_time = h->send_time;
    g.route_n = h->route_n;
    g.route = h->route;
    g.have = (g.have & ~REWRITTEN) | (h->have & REWRITTEN);
    g.n_entries = h->n_entries;
    if (!cj_hdr_same_fields(h, &g)) abort();
    /* the entry count grows by the keys that were missing */
    uint32_t missing = (uint32_t)__builtin_popcountll(REWRITTEN & ~h->have);
    if (f.n_entries != h->n_entries + missing) abort();
    msgpack_sbuffer_destroy(&out);
}

static void check_encode(const struct cj_hdr *h)
{
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int rc = cj_hdr_encode(h, &out, NULL);
    if (rc == 0) {
        struct cj_hdr g;
        if (cj_hdr_decode(&g, (const uint8_t *)out.data, out.size, NULL)) abort();
        if (!cj_hdr_same_fields(h, &g)) abort();
    } else if (rc != -CJ_E_LIMIT) {
        abort(); /* re-encoding can only grow (e.g. int times become float64) */
    }
    msgpack_sbuffer_destroy(&out);
}

static void check_return(const struct cj_hdr *h)
{
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int rc = cj_hdr_build_return(h, ME, "site-1.J1.trainer_1", RT, &out, NULL);
    if (rc == 0) {
        struct cj_hdr r;
        if (cj_hdr_decode(&r, (const uint8_t *)out.data, out.size, NULL)) abort();
        if (r.msg_type != CJ_MSG_RETURN || strcmp(r.destination, h->origin)) abort();
        if (r.original_headers.len != h->len || memcmp(r.original_headers.p, h->blk, h->len)) abort();
        if (!r.req_id_is_array || r.req_id_count != (h->req_id_is_array ? h->req_id_count : 1)) abort();
        if (strcmp(r.req_id, h->req_id)) abort();
    } else if (rc != -CJ_E_LIMIT) {
        abort();
    }
    msgpack_sbuffer_destroy(&out);
}

static void check_loop(const struct cj_hdr *h)
{
    /* next hop = the first route FQCN (if short enough to be a C string) */
    struct cj_route_iter it;
    const uint8_t *p;
    uint32_t n;
    double t;
    cj_route_iter_init(&it, h);
    if (!cj_route_iter_next(&it, &p, &n, &t)) {
        if (cj_hdr_loop_refused(h, "server")) abort(); /* empty route: never a loop */
        return;
    }
    char hop[CJ_HDR_STR_MAX + 1];
    memcpy(hop, p, n);
    hop[n] = 0;
    bool refused = cj_hdr_loop_refused(h, hop);
    if (refused != (strcmp(hop, h->destination) != 0)) abort();
}

/* The block to test: a DATA frame's header block, else the whole input. */
static void pick_block(const uint8_t *data, size_t size, const uint8_t **blk, size_t *len)
{
    *blk = data;
    *len = size;
    if (size < 16 || data[6] != 1 || data[7] != 0) return;
    uint32_t flen = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
    size_t hl = (size_t)data[4] << 8 | data[5];
    if (flen < 16 || flen > size || hl == 0 || 16 + hl > flen) return;
    *blk = data + 16;
    *len = hl;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *blk;
    size_t len;
    pick_block(data, size, &blk, &len);

    /* an exact-size private copy so the sanitizer sees any overread */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return 0;
    memcpy(copy, blk, len);

    struct cj_hdr h;
    struct cj_err err = { 0 };
    if (cj_hdr_decode(&h, copy, len, &err) == 0) {
        check_forward(&h);
        check_encode(&h);
        check_return(&h);
        check_loop(&h);
    } else {
        if (err.code == 0 || err.offset > len || err.msg[0] == 0) abort();
        /* forward works on any map with str keys; when it succeeds, the
         * output must be such a map too (its keys iterate) */
        msgpack_sbuffer out;
        msgpack_sbuffer_init(&out);
        if (cj_hdr_forward(copy, len, ME, NEXT, RT, SENDT, &out, NULL) == 0) {
            struct mp_cur c;
            struct mp_val v;
            mp_cur_init(&c, out.data, out.size);
            if (mp_next(&c, &v, NULL) || v.kind != MP_MAP) abort();
            for (uint32_t i = 0; i < v.n; i++) {
                const uint8_t *k;
                uint32_t kn;
                if (mp_read_str(&c, &k, &kn, NULL) || mp_skip(&c, NULL)) abort();
            }
            if (c.pos != out.size) abort();
        }
        msgpack_sbuffer_destroy(&out);
    }
    free(copy);
    return 0;
}
