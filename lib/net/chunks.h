/* SPDX-License-Identifier: Apache-2.0 */
/* chunks.h — bytes a carrier copies (the SFM payload it unwraps, a WebSocket
 * client's masked output) written into pooled blocks (blocks.h) and handed to
 * an evbuffer as reference chains.
 *
 * Left to itself libevent sizes a chain after the piece being added: wslay's
 * 4 KiB pieces make 4 KiB chains, 1 MiB pieces make 1 MiB chains that malloc
 * maps fresh and unmaps on free, so every one refills with new pages (about
 * 180,000 page faults per 2 GiB over WebSocket, a third of the relay's CPU).
 * Pooled blocks are reused instead.  A short run (under CJ_CHUNKS_SMALL) is
 * copied into a chain of its own, so a small message kept for long does not
 * pin a block.
 *
 * Usage: cj_chunks_space / cj_chunks_wrote as often as needed, then
 * cj_chunks_flush before the buffer is read by anyone else. */
#ifndef CJ_NET_CHUNKS_H
#define CJ_NET_CHUNKS_H

#include <stddef.h>

#include <event2/buffer.h>

#include "net/blocks.h"

#define CJ_CHUNKS_SMALL (32u * 1024)

struct cj_chunks {
    struct cj_block *blk; /* the block being filled */
    size_t start;         /* where its bytes not yet handed to a buffer begin */
};

/* Room to write into (at least 1 byte, at most CJ_BLOCK_SIZE); NULL out of
 * memory.  *room says how much.  Bytes written before are handed to buf
 * first when the block has to change. */
unsigned char *cj_chunks_space(struct cj_chunks *ch, struct evbuffer *buf, size_t *room);

/* n bytes were written at the space given. */
void cj_chunks_wrote(struct cj_chunks *ch, size_t n);

/* Copies n bytes of p (space, memcpy, wrote).  0, or -1 out of memory. */
int cj_chunks_add(struct cj_chunks *ch, struct evbuffer *buf, const void *p, size_t n);

/* Hands the bytes written so far to buf.  0 or -1. */
int cj_chunks_flush(struct cj_chunks *ch, struct evbuffer *buf);

/* Drops the block (after a last flush). */
void cj_chunks_release(struct cj_chunks *ch);

#endif
