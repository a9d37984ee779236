/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dlreply.c — the download client's incremental reply reader
 * (lib/dl/replyparse.c), as the spool's streaming client drives it.
 *
 * Input: byte 0 and byte 1 seed the piece sizes (1..(byte0+1)*(byte1+1)
 * bytes, varying per piece), the rest is the reply payload, fed piece by
 * piece.  Invariants checked:
 *  - items begin in order 0, 1, ...; data and end only for the current item;
 *    the bytes of an item add up to the size announced at its begin;
 *  - never more item bytes handed out than the input holds, and the fed count
 *    never exceeds the input;
 *  - the release offset is monotone and never past what was fed; releasing
 *    every item byte allows everything fed;
 *  - a reply the reader accepts is also accepted by the whole-payload decoder
 *    (cj_dl_decode_reply), with the same items, byte for byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "dl/dlmsg.h"
#include "dl/replyparse.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

struct rec {
    size_t next;            /* the item expected to begin next */
    bool open;              /* an item has begun and not ended */
    uint64_t size, got;     /* of the open item */
    uint64_t total;         /* item bytes handed out */
    size_t limit;           /* input length */
    uint8_t *copy;          /* every item byte, in order (bounded by the input) */
    size_t copy_len;
    size_t starts[4096];    /* offset in copy of each item (first 4096) */
    uint64_t sizes[4096];
};

static int on_begin(void *arg, size_t i, uint64_t size)
{
    struct rec *r = arg;
    CHECK(!r->open);
    CHECK(i == r->next);
    CHECK(size <= r->limit);
    if (i < 4096) {
        r->starts[i] = r->copy_len;
        r->sizes[i] = size;
    }
    r->open = true;
    r->size = size;
    r->got = 0;
    return 0;
}

static int on_data(void *arg, size_t i, struct evbuffer *piece)
{
    struct rec *r = arg;
    size_t n = evbuffer_get_length(piece);
    CHECK(r->open && i == r->next);
    CHECK(n > 0 && n <= r->size - r->got);
    r->got += n;
    r->total += n;
    CHECK(r->total <= r->limit);
    CHECK(r->copy_len + n <= r->limit);
    CHECK(evbuffer_remove(piece, r->copy + r->copy_len, n) == (int)n);
    r->copy_len += n;
    return 0;
}

static int on_end(void *arg, size_t i)
{
    struct rec *r = arg;
    CHECK(r->open && i == r->next);
    CHECK(r->got == r->size);
    r->open = false;
    r->next++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    unsigned a = data[0], b = data[1];
    const uint8_t *p = data + 2;
    size_t len = size - 2;
    struct rec *r = calloc(1, sizeof *r);
    r->limit = len;
    r->copy = malloc(len ? len : 1);
    struct cj_dl_rp rp;
    struct cj_dl_rp_cb cb = { on_begin, on_data, on_end };
    cj_dl_rp_init(&rp, len, &cb, r);
    struct evbuffer *piece = evbuffer_new();
    size_t pos = 0, k = 0;
    int rc = 0;
    uint64_t last_upto = 0;
    while (pos < len && rc == 0) {
        size_t step = 1 + (size_t)((a * 7u + b * (unsigned)k * 13u + (unsigned)k) % ((a + 1u) * (b + 1u)));
        if (step > len - pos) step = len - pos;
        evbuffer_add(piece, p + pos, step);
        pos += step;
        k++;
        rc = cj_dl_rp_feed(&rp, piece);
        CHECK(rp.fed <= len);
        if (rc == 0) {
            CHECK(evbuffer_get_length(piece) == 0);
            CHECK(rp.fed == pos);
            /* release half of what was handed out: monotone, never past fed */
            uint64_t upto = cj_dl_rp_release_upto(&rp, r->total / 2);
            CHECK(upto <= rp.fed);
            CHECK(upto >= last_upto);
            last_upto = upto;
        }
        evbuffer_drain(piece, evbuffer_get_length(piece));
    }
    if (rc == 0) {
        uint64_t all = cj_dl_rp_release_upto(&rp, r->total);
        CHECK(all == rp.fed);
        CHECK(all >= last_upto);
    }
    if (rc == 0 && cj_dl_rp_finish(&rp) == 0) {
        CHECK(!r->open);
        CHECK(rp.have_main);
        CHECK(r->next == rp.n_items);
        /* the whole-payload decoder agrees, item for item */
        size_t cap = rp.n_items < 4096 ? rp.n_items : 4096;
        struct cj_dl_item_ref *items = calloc(cap ? cap : 1, sizeof *items);
        struct cj_dl_reply whole;
        struct cj_err e = { 0 };
        CHECK(cj_dl_decode_reply(p, len, &whole, items, cap, &e) == 0);
        CHECK(whole.n_items == rp.n_items);
        CHECK(whole.status == rp.r.status);
        for (size_t i = 0; i < cap; i++) {
            CHECK(items[i].resolved);
            CHECK(items[i].len == r->sizes[i]);
            CHECK(memcmp(p + items[i].off, r->copy + r->starts[i], items[i].len) == 0);
        }
        free(items);
    }
    CHECK(r->total <= len);
    cj_dl_rp_clear(&rp);
    evbuffer_free(piece);
    free(r->copy);
    free(r);
    return 0;
}
