/* SPDX-License-Identifier: Apache-2.0 */
/* blocks.c — refcounted 1 MiB blocks and their pool (see blocks.h). */
#include "net/blocks.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* Freed blocks kept for reuse: a relayed transfer has a few in flight per
 * direction (socket reads, carried copies, the worker's output). */
#define POOL_MAX 12
#define BLOCK_MAP (sizeof(struct cj_block) + CJ_BLOCK_SIZE)

/* Shared by every connection of the process; a block's last chain may be
 * freed on the spool's I/O thread: a mutex guards the pool. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cj_block *pool[POOL_MAX];
static size_t pool_n;
static uint64_t pool_takes, pool_takes_seen; /* blocks taken from the pool; at the last trim */

static void release(struct cj_block *b)
{
    if (b) munmap(b, BLOCK_MAP);
}

struct cj_block *cj_block_new(void)
{
    struct cj_block *b = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool_n) {
        b = pool[--pool_n];
        pool_takes++;
    }
    pthread_mutex_unlock(&pool_mu);
    if (!b) {
        void *m = mmap(NULL, BLOCK_MAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        b = m;
    }
    atomic_init(&b->refs, 1);
    b->used = 0;
    return b;
}

void cj_block_unref(struct cj_block *b)
{
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    pthread_mutex_lock(&pool_mu);
    if (pool_n < POOL_MAX) {
        pool[pool_n++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    release(b);
}

void cj_block_pool_trim(bool always)
{
    struct cj_block *drop[POOL_MAX];
    size_t n = 0;
    pthread_mutex_lock(&pool_mu);
    if (always || pool_takes == pool_takes_seen) {
        n = pool_n;
        memcpy(drop, pool, n * sizeof *drop);
        pool_n = 0;
    }
    pool_takes_seen = pool_takes;
    pthread_mutex_unlock(&pool_mu);
    for (size_t i = 0; i < n; i++) release(drop[i]);
}

static void chain_done(const void *data, size_t len, void *arg)
{
    (void)data; (void)len;
    cj_block_unref(arg);
}

int cj_block_add_reference(struct evbuffer *buf, struct cj_block *b, size_t off, size_t len)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    if (evbuffer_add_reference(buf, b->data + off, len, chain_done, b) < 0) {
        cj_block_unref(b);
        return -1;
    }
    return 0;
}
