/* SPDX-License-Identifier: Apache-2.0 */
/* replyparse.c — incremental reader of one download-service reply (see replyparse.h). */
#include "dl/replyparse.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload/fobs.h"
#include "util/uuid.h"

/* The decoded MAIN body.  Inline items go out as references into it; the
 * consumer may free them on another thread (the spool's I/O thread), hence
 * the atomic count. */
struct cj_dl_rp_block {
    int refs;
    size_t len;
    uint8_t data[];
};

static void blk_unref(struct cj_dl_rp_block *b)
{
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) free(b);
}

static void blk_piece_done(const void *data, size_t len, void *arg)
{
    blk_unref(arg);
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

__attribute__((format(printf, 2, 3))) static int rp_fail(struct cj_dl_rp *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    p->phase = RP_FAILED;
    return -1;
}

void cj_dl_rp_init(struct cj_dl_rp *p, uint64_t total, const struct cj_dl_rp_cb *cb, void *arg)
{
    memset(p, 0, sizeof *p);
    p->cb = *cb;
    p->arg = arg;
    p->total = total;
    p->phase = RP_MAIN_HDR;
    p->hdr_need = CJ_LOBS_HDR_LEN;
}

void cj_dl_rp_clear(struct cj_dl_rp *p)
{
    blk_unref(p->blk);
    p->blk = NULL;
    free(p->state);
    free(p->items);
    p->state = NULL;
    p->items = NULL;
    p->n_items = 0;
    p->have_main = false;
}

/* Hands out inline items from the decoded MAIN body until the next DatumRef
 * item (or the end).  0 or -1. */
static int deliver_inline(struct cj_dl_rp *p)
{
    while (p->next < p->n_items && !p->items[p->next].ref.is_datum) {
        size_t i = p->next;
        struct cj_dl_rp_item *it = &p->items[i];
        size_t off = it->ref.off, len = it->ref.len;
        if (off > p->blk->len || len > p->blk->len - off)
            return rp_fail(p, "inline item %zu lies outside the MAIN body", i);
        it->cum = p->item_bytes;
        it->size = len;
        if (p->cb.item_begin(p->arg, i, len)) return rp_fail(p, "item %zu refused by the consumer", i);
        if (len) {
            struct evbuffer *x = evbuffer_new();
            __atomic_add_fetch(&p->blk->refs, 1, __ATOMIC_RELAXED);
            if (!x || evbuffer_add_reference(x, p->blk->data + off, len, blk_piece_done, p->blk)) {
                blk_unref(p->blk);
                if (x) evbuffer_free(x);
                return rp_fail(p, "out of memory handing out item %zu", i);
            }
            p->item_bytes += len;
            int rc = p->cb.item_data(p->arg, i, x);
            evbuffer_free(x);
            if (rc) return rp_fail(p, "item %zu refused by the consumer", i);
        }
        p->next++;
        if (p->cb.item_end(p->arg, i)) return rp_fail(p, "item %zu refused by the consumer", i);
    }
    return 0;
}

/* The MAIN body is complete: decode it, keep the state, list the items. */
static int decode_main(struct cj_dl_rp *p)
{
    size_t n = p->blk->len;
    const uint8_t *body = p->blk->data;
    struct cj_err e = { 0 };
    if (cj_dl_decode_reply_body(body, n, &p->r, NULL, 0, &e)) return rp_fail(p, "%s", e.msg);
    if (p->r.n_items > CJ_DL_RP_MAX_ITEMS)
        return rp_fail(p, "reply carries %zu items, more than %d", p->r.n_items, CJ_DL_RP_MAX_ITEMS);
    size_t k = p->r.n_items;
    struct cj_dl_item_ref *refs = calloc(k ? k : 1, sizeof *refs);
    p->items = calloc(k ? k : 1, sizeof *p->items);
    if (!refs || !p->items) {
        free(refs);
        return rp_fail(p, "out of memory for %zu items", k);
    }
    if (cj_dl_decode_reply_body(body, n, &p->r, refs, k, &e)) {
        free(refs);
        return rp_fail(p, "%s", e.msg);
    }
    for (size_t i = 0; i < k; i++) p->items[i].ref = refs[i];
    free(refs);
    p->n_items = k;
    if (p->r.state.len) {
        if (!(p->state = malloc(p->r.state.len))) return rp_fail(p, "out of memory");
        memcpy(p->state, body + p->r.state.off, p->r.state.len);
        p->state_len = p->r.state.len;
    }
    p->have_main = true;
    return deliver_inline(p);
}

/* A datum section header is complete. */
static int datum_header(struct cj_dl_rp *p)
{
    const uint8_t *h = p->hdr;
    uint64_t at = p->fed - CJ_LOBS_DATUM_HDR_LEN, size = be64(h + 2);
    char u[37];
    cj_uuid_str(h + CJ_LOBS_HDR_LEN, u);
    if (h[0] != CJ_LOBS_TEXT && h[0] != CJ_LOBS_BLOB && h[0] != CJ_LOBS_FILE)
        return rp_fail(p, "bad section marker 0x%02x at offset %" PRIu64, h[0], at);
    if (size <= CJ_LOBS_ID_LEN || size - CJ_LOBS_ID_LEN > p->total - p->fed)
        return rp_fail(p, "datum %s at offset %" PRIu64 " declares %" PRIu64 " bytes, the reply has %" PRIu64 " left",
                       u, at, size, p->total - at - CJ_LOBS_HDR_LEN);
    if (p->next >= p->n_items) return rp_fail(p, "unknown datum %s at offset %" PRIu64 " (no item refers to it)", u, at);
    struct cj_dl_rp_item *it = &p->items[p->next];
    if (memcmp(it->ref.datum_id, h + CJ_LOBS_HDR_LEN, CJ_LOBS_ID_LEN)) {
        char w[37];
        cj_uuid_str(it->ref.datum_id, w);
        return rp_fail(p, "datum %s at offset %" PRIu64 " is not the one item %zu refers to (%s)", u, at, p->next, w);
    }
    if (h[0] != CJ_LOBS_BLOB || h[1] != 0)
        return rp_fail(p, "datum of item %zu is not a DOT-0 BLOB (marker 0x%02x, dot %u)", p->next, h[0], h[1]);
    it->size = size - CJ_LOBS_ID_LEN;
    it->cum = p->item_bytes;
    it->reply_off = p->fed;
    p->datum_left = it->size;
    p->phase = RP_DATUM_BODY;
    if (p->cb.item_begin(p->arg, p->next, it->size)) return rp_fail(p, "item %zu refused by the consumer", p->next);
    return 0;
}

/* Copies header bytes from piece; 1 when the header is complete. */
static int take_header(struct cj_dl_rp *p, struct evbuffer *piece)
{
    size_t k = p->hdr_need - p->hdr_have, len = evbuffer_get_length(piece);
    if (k > len) k = len;
    evbuffer_remove(piece, p->hdr + p->hdr_have, k);
    p->hdr_have += k;
    p->fed += k;
    return p->hdr_have == p->hdr_need;
}

static int step(struct cj_dl_rp *p, struct evbuffer *piece)
{
    size_t len = evbuffer_get_length(piece);
    switch (p->phase) {
    case RP_MAIN_HDR:
        if (!take_header(p, piece)) return 0;
        if (p->hdr[0] != CJ_LOBS_MAIN || p->hdr[1] != 0)
            return rp_fail(p, "reply is not a LOBS payload (first bytes %02x %02x)", p->hdr[0], p->hdr[1]);
        p->main_len = be64(p->hdr + 2);
        if (p->main_len == 0 || p->main_len > p->total - p->fed)
            return rp_fail(p, "reply MAIN section of %" PRIu64 " bytes in a %" PRIu64 "-byte payload", p->main_len,
                           p->total);
        if (p->main_len > CJ_DL_RP_MAX_MAIN)
            return rp_fail(p, "reply MAIN section of %" PRIu64 " bytes is over the %" PRIu64 "-byte limit", p->main_len,
                           CJ_DL_RP_MAX_MAIN);
        /* Received straight into the block (bounded by CJ_DL_RP_MAX_MAIN and the reply's size). */
        if (!(p->blk = malloc(sizeof *p->blk + (size_t)p->main_len)))
            return rp_fail(p, "out of memory for a %" PRIu64 "-byte MAIN section", p->main_len);
        p->blk->refs = 1;
        p->blk->len = 0;
        p->phase = RP_MAIN_BODY;
        return 0;
    case RP_MAIN_BODY: {
        size_t want = (size_t)p->main_len - p->blk->len, k = len < want ? len : want;
        if (evbuffer_remove(piece, p->blk->data + p->blk->len, k) != (int)k) return rp_fail(p, "cannot read MAIN");
        p->blk->len += k;
        p->fed += k;
        if (p->blk->len < p->main_len) return 0;
        p->phase = RP_SEC_HDR;
        p->hdr_have = 0;
        p->hdr_need = CJ_LOBS_DATUM_HDR_LEN;
        return decode_main(p);
    }
    case RP_SEC_HDR:
        if (!take_header(p, piece)) return 0;
        p->hdr_have = 0;
        return datum_header(p);
    case RP_DATUM_BODY: {
        size_t k = p->datum_left < len ? (size_t)p->datum_left : len;
        struct evbuffer *x = evbuffer_new();
        if (!x || evbuffer_remove_buffer(piece, x, k) != (int)k) {
            if (x) evbuffer_free(x);
            return rp_fail(p, "out of memory handing out item %zu", p->next);
        }
        p->fed += k;
        p->item_bytes += k;
        p->datum_left -= k;
        int rc = p->cb.item_data(p->arg, p->next, x);
        evbuffer_free(x);
        if (rc) return rp_fail(p, "item %zu refused by the consumer", p->next);
        if (p->datum_left) return 0;
        size_t i = p->next++;
        p->phase = RP_SEC_HDR;
        if (p->cb.item_end(p->arg, i)) return rp_fail(p, "item %zu refused by the consumer", i);
        return deliver_inline(p);
    }
    case RP_FAILED:
        break;
    }
    return -1;
}

int cj_dl_rp_feed(struct cj_dl_rp *p, struct evbuffer *piece)
{
    if (p->phase == RP_FAILED) return -1;
    size_t len = evbuffer_get_length(piece);
    if (len > p->total - p->fed)
        return rp_fail(p, "reply longer than its announced %" PRIu64 " bytes", p->total);
    while (evbuffer_get_length(piece) > 0) {
        size_t before = evbuffer_get_length(piece);
        if (step(p, piece)) return -1;
        if (evbuffer_get_length(piece) == before)   /* no progress: never loop */
            return rp_fail(p, "reader stuck at offset %" PRIu64, p->fed);
    }
    return 0;
}

int cj_dl_rp_finish(struct cj_dl_rp *p)
{
    if (p->phase == RP_FAILED) return -1;
    if (p->fed != p->total) return rp_fail(p, "reply cut short: %" PRIu64 " of %" PRIu64 " bytes", p->fed, p->total);
    if (p->phase == RP_MAIN_HDR || p->phase == RP_MAIN_BODY)
        return rp_fail(p, "reply of %" PRIu64 " bytes ends inside its MAIN section", p->total);
    if (p->phase == RP_DATUM_BODY || p->hdr_have)
        return rp_fail(p, "bad datum section: reply ends inside one at offset %" PRIu64, p->fed);
    if (p->next < p->n_items) return rp_fail(p, "item %zu refers to a datum the reply lacks", p->next);
    return 0;
}

uint64_t cj_dl_rp_release_upto(struct cj_dl_rp *p, uint64_t released)
{
    if (released > p->item_bytes) released = p->item_bytes;
    while (p->rel_cursor < p->next && released >= p->items[p->rel_cursor].cum + p->items[p->rel_cursor].size)
        p->rel_cursor++;
    for (size_t i = p->rel_cursor; i < p->n_items; i++) {
        const struct cj_dl_rp_item *it = &p->items[i];
        bool begun = i < p->next || (i == p->next && p->phase == RP_DATUM_BODY);
        if (!begun) break;
        if (!it->ref.is_datum) continue;   /* inline: in memory already, holds nothing back */
        if (released >= it->cum + it->size) continue;
        uint64_t upto = it->reply_off + (released > it->cum ? released - it->cum : 0);
        return upto < p->fed ? upto : p->fed;
    }
    return p->fed;
}
