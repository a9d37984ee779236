/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_frame.c — the SFM splitter, prefix codec and HELLO/PING decoders.
 *
 * Input: byte 0 picks the piece size (1..256), the rest is a byte stream.
 * Invariants checked:
 *  - feeding the stream in pieces through an accumulating buffer yields the
 *    same frames, and stops with the same verdict at the same place, as
 *    splitting the whole buffer at once (for the spec limit and a small one);
 *  - every frame's prefix re-encodes to its original 16 bytes;
 *  - a HELLO payload that decodes re-encodes to one that decodes equal, and
 *    the re-encoding is stable; built HELLO/READY/PING/PONG frames split back;
 *  - a PING/PONG whose payload checks out is byte-equal to the one we build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

struct split {
    size_t *offs;    /* frame start offsets */
    size_t *lens;
    size_t count;
    int end_rc;      /* 0 = ran out of bytes, <0 = error */
    int end_code;    /* err.code when end_rc < 0 */
    size_t end_at;   /* where the splitter stopped */
};

static int hello_equal(const struct cj_frame_hello *a, const struct cj_frame_hello *b)
{
    /* compare the timestamp's bits: NaN must survive too */
    return strcmp(a->endpoint_name, b->endpoint_name) == 0 && a->has_fqcn == b->has_fqcn
        && (!a->has_fqcn || strcmp(a->fqcn, b->fqcn) == 0)
        && memcmp(&a->timestamp, &b->timestamp, sizeof a->timestamp) == 0;
}

/* decode -> encode -> decode gives the same fields; encode is stable. */
static void check_hello_payload(const uint8_t *p, size_t n)
{
    struct cj_frame_hello h, h2, h3;
    struct cj_err e;
    if (cj_frame_hello_decode(p, n, &h, &e) != 0) return;
    msgpack_sbuffer sb, sb2;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_init(&sb2);
    CHECK(cj_frame_hello_encode(&sb, &h, &e) == 0);
    CHECK(cj_frame_hello_decode((const uint8_t *)sb.data, sb.size, &h2, &e) == 0);
    CHECK(hello_equal(&h, &h2));
    CHECK(cj_frame_hello_encode(&sb2, &h2, &e) == 0);
    CHECK(sb.size == sb2.size && memcmp(sb.data, sb2.data, sb.size) == 0);
    /* as a whole frame, too */
    sb2.size = 0;
    CHECK(cj_frame_build_hello(&sb2, CJ_FRAME_READY, 1, 1, &h, &e) == 0);
    struct cj_frame_prefix pre;
    size_t flen;
    CHECK(cj_frame_next((const uint8_t *)sb2.data, sb2.size, 0, &pre, &flen, &e) == 1);
    CHECK(flen == sb2.size && pre.type == CJ_FRAME_READY);
    CHECK(cj_frame_hello_decode((const uint8_t *)sb2.data + 16, flen - 16, &h3, &e) == 0);
    CHECK(hello_equal(&h, &h3));
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&sb2);
}

static void check_heartbeat(const uint8_t *f, const struct cj_frame_view *v)
{
    const struct cj_frame_prefix *p = &v->prefix;
    if (cj_frame_heartbeat_check(v->payload, v->payload_len, NULL) != 0) return;
    if (p->reserved || p->flags || p->app_id) return;
    uint8_t built[CJ_FRAME_HEARTBEAT_LEN];
    cj_frame_build_heartbeat(built, p->type, p->stream_id, p->sequence);
    CHECK(p->length == CJ_FRAME_HEARTBEAT_LEN && memcmp(built, f, sizeof built) == 0);
}

static void check_frame(const uint8_t *f, size_t len, const struct cj_frame_prefix *p)
{
    uint8_t re[CJ_FRAME_PREFIX_LEN];
    struct cj_frame_prefix p2;
    struct cj_frame_view v;
    CHECK(p->length == len);
    cj_frame_prefix_encode(p, re);
    CHECK(memcmp(re, f, sizeof re) == 0);
    CHECK(cj_frame_prefix_decode(re, 0, &p2, NULL) == 0);
    CHECK(memcmp(&p2, p, sizeof p2) == 0);
    cj_frame_view_init(&v, f, p);
    CHECK((size_t)16 + v.header_len + v.payload_len == len);
    if (p->type == CJ_FRAME_DATA) return;
    check_hello_payload(v.payload, v.payload_len);
    if (p->type == CJ_FRAME_PING || p->type == CJ_FRAME_PONG) check_heartbeat(f, &v);
}

static void split_whole(const uint8_t *s, size_t n, uint32_t max, struct split *out)
{
    size_t at = 0;
    out->count = 0;
    out->end_code = 0;
    for (;;) {
        struct cj_frame_prefix p;
        struct cj_err e;
        size_t flen;
        int rc = cj_frame_next(s + at, n - at, max, &p, &flen, &e);
        if (rc != 1) {
            out->end_rc = rc;
            out->end_code = rc < 0 ? e.code : 0;
            if (rc == 0) CHECK(flen > n - at);
            break;
        }
        check_frame(s + at, flen, &p);
        out->offs[out->count] = at;
        out->lens[out->count++] = flen;
        at += flen;
    }
    out->end_at = at;
}

/* Feeds s piece bytes at a time; compares every frame with the whole split. */
static void split_pieces(const uint8_t *s, size_t n, size_t piece, uint32_t max, const struct split *w)
{
    uint8_t *acc = malloc(n + 1);
    size_t have = 0, fed = 0, consumed = 0, k = 0;
    int rc = 0;
    while (fed < n && rc >= 0) {
        size_t add = n - fed < piece ? n - fed : piece;
        memcpy(acc + have, s + fed, add);
        have += add;
        fed += add;
        for (;;) {
            struct cj_frame_prefix p;
            struct cj_err e;
            size_t flen;
            rc = cj_frame_next(acc, have, max, &p, &flen, &e);
            if (rc < 0) {
                CHECK(w->end_rc < 0 && e.code == w->end_code && consumed == w->end_at && k == w->count);
                break;
            }
            if (rc == 0) { CHECK(flen > have); break; }
            CHECK(k < w->count && w->offs[k] == consumed && w->lens[k] == flen);
            CHECK(memcmp(acc, s + consumed, flen) == 0);
            k++;
            consumed += flen;
            memmove(acc, acc + flen, have - flen);
            have -= flen;
        }
    }
    if (rc >= 0) CHECK(w->end_rc == 0 && k == w->count && consumed == w->end_at && have == n - consumed);
    free(acc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t piece = (size_t)data[0] + 1;
    const uint8_t *s = data + 1;
    size_t n = size - 1;
    struct split w;
    w.offs = malloc((n / 16 + 1) * sizeof *w.offs);
    w.lens = malloc((n / 16 + 1) * sizeof *w.lens);
    const uint32_t limits[2] = {CJ_FRAME_MAX_DEFAULT, 512};
    for (int i = 0; i < 2; i++) {
        split_whole(s, n, limits[i], &w);
        split_pieces(s, n, piece, limits[i], &w);
    }
    /* the HELLO decoder on raw bytes too, not only inside valid frames */
    check_hello_payload(s, n);
    free(w.offs);
    free(w.lens);
    return 0;
}
