/* SPDX-License-Identifier: Apache-2.0 */
/* chainsplit.c — an evbuffer's head moved without a copy (see chainsplit.h). */
#include "net/chainsplit.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SEGS 16 /* chains looked at without a malloc */

struct holder {
    atomic_size_t refs;
    struct evbuffer *chains;
};

static void holder_unref(struct holder *h)
{
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return;
    evbuffer_free(h->chains);
    free(h);
}

static void reference_done(const void *data, size_t len, void *arg)
{
    (void)data; (void)len;
    holder_unref(arg);
}

/* Appends len bytes at p (inside h's chains) to buf as a reference on h. */
static int add_reference(struct evbuffer *buf, const unsigned char *p, size_t len, struct holder *h)
{
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    if (evbuffer_add_reference(buf, p, len, reference_done, h) == 0) return 0;
    holder_unref(h);
    return -1;
}

/* The held bytes out: the first n to dst as references, the rest to src as
 * references, or copied when copy_rest. */
static int hand_out(struct holder *h, size_t n, struct evbuffer *dst, struct evbuffer *src, bool copy_rest)
{
    int k = evbuffer_peek(h->chains, -1, NULL, NULL, 0);
    struct evbuffer_iovec stack[SEGS], *seg = k <= SEGS ? stack : malloc((size_t)k * sizeof *seg);
    if (k <= 0 || !seg) return -1;
    evbuffer_peek(h->chains, -1, NULL, seg, k);
    int rc = 0;
    size_t at = 0;
    for (int i = 0; i < k && rc == 0; i++) {
        const unsigned char *p = seg[i].iov_base;
        size_t len = seg[i].iov_len;
        size_t head = at >= n ? 0 : n - at < len ? n - at : len;
        if (head) rc = add_reference(dst, p, head, h);
        if (rc == 0 && head < len)
            rc = copy_rest ? evbuffer_add(src, p + head, len - head) : add_reference(src, p + head, len - head, h);
        at += len;
    }
    if (seg != stack) free(seg);
    return rc;
}

int cj_chain_split(struct evbuffer *src, size_t n, struct evbuffer *dst, size_t small)
{
    size_t total = evbuffer_get_length(src);
    if (n == 0 || n >= total) return -1;
    struct holder *h = malloc(sizeof *h);
    if (!h) return -1;
    atomic_init(&h->refs, 1); /* ours, until both parts are handed out */
    if (!(h->chains = evbuffer_new())) {
        free(h);
        return -1;
    }
    int rc = evbuffer_add_buffer(h->chains, src);
    if (rc == 0) rc = hand_out(h, n, dst, src, total - n < small);
    holder_unref(h);
    return rc;
}
