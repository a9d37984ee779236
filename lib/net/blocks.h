/* SPDX-License-Identifier: Apache-2.0 */
/* blocks.h — the memory socket bytes and carried payloads live in: refcounted
 * 1 MiB blocks that evbuffer chains reference, recycled through one pool per
 * process.
 *
 * A fresh 1 MiB from malloc is fresh pages the kernel faults in and zeroes
 * (measured: ~48,800 faults per GiB relayed, ~15% of the relay's CPU, when
 * conn.c read into malloc'd chains; ~180,000 per 2 GiB when the WebSocket
 * carrier copied into them).  A bulk transfer recycles a handful of blocks, so
 * a few kept ones remove nearly all of that.  Blocks are mappings of their own,
 * so a block given back really goes back to the system. */
#ifndef CJ_NET_BLOCKS_H
#define CJ_NET_BLOCKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>

#define CJ_BLOCK_SIZE (1024u * 1024)

/* Shared by the chains that reference it and by whoever fills it.  Chains may
 * be freed on another thread (the spool's I/O thread): the count is atomic. */
struct cj_block {
    atomic_size_t refs;
    size_t used;             /* bytes filled so far */
    unsigned char data[];
};

/* A block with one reference and nothing used: from the pool, else mapped. */
struct cj_block *cj_block_new(void);
void cj_block_unref(struct cj_block *b);

/* Appends len bytes at b->data + off to buf as a reference chain (its own
 * reference on b, dropped when libevent frees the chain).  0 or -1. */
int cj_block_add_reference(struct evbuffer *buf, struct cj_block *b, size_t off, size_t len);

/* Empties the pool: always, or only when no block was taken from it since the
 * last call (so a transfer keeps its recycled blocks and an idle process holds
 * none). */
void cj_block_pool_trim(bool always);

#endif
