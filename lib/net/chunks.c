/* SPDX-License-Identifier: Apache-2.0 */
/* chunks.c — carried bytes into pooled blocks (see chunks.h). */
#include "net/chunks.h"

#include <string.h>

int cj_chunks_flush(struct cj_chunks *ch, struct evbuffer *buf)
{
    if (!ch->blk || ch->blk->used == ch->start) return 0;
    size_t off = ch->start, n = ch->blk->used - ch->start;
    ch->start = ch->blk->used;
    if (n < CJ_CHUNKS_SMALL) return evbuffer_add(buf, ch->blk->data + off, n);
    return cj_block_add_reference(buf, ch->blk, off, n);
}

unsigned char *cj_chunks_space(struct cj_chunks *ch, struct evbuffer *buf, size_t *room)
{
    if (!ch->blk || ch->blk->used == CJ_BLOCK_SIZE) {
        if (cj_chunks_flush(ch, buf) < 0) return NULL;
        cj_chunks_release(ch);
        if (!(ch->blk = cj_block_new())) return NULL;
        ch->start = 0;
    }
    *room = CJ_BLOCK_SIZE - ch->blk->used;
    return ch->blk->data + ch->blk->used;
}

void cj_chunks_wrote(struct cj_chunks *ch, size_t n) { ch->blk->used += n; }

int cj_chunks_add(struct cj_chunks *ch, struct evbuffer *buf, const void *p, size_t n)
{
    const unsigned char *s = p;
    while (n) {
        size_t room;
        unsigned char *d = cj_chunks_space(ch, buf, &room);
        if (!d) return -1;
        size_t k = n < room ? n : room;
        memcpy(d, s, k);
        cj_chunks_wrote(ch, k);
        s += k;
        n -= k;
    }
    return 0;
}

void cj_chunks_release(struct cj_chunks *ch)
{
    if (ch->blk) cj_block_unref(ch->blk);
    ch->blk = NULL;
    ch->start = 0;
}
