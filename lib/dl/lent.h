/* SPDX-License-Identifier: Apache-2.0 */
/* lent.h — an item held in memory and lent to download replies by reference.
 *
 * A producer's item callback (dl/producer.h) appends an item's bytes to a
 * reply without copying them (evbuffer_add_reference).  The reply may still
 * be queued on a link when its owner is done with the item (the task ended,
 * the ref was removed), so the bytes are freed only when the owner has
 * released the item and no reply points at them any more.
 *
 * Single-threaded: lend and release on the event loop's thread (replies are
 * sent from it). */
#ifndef CJ_DL_LENT_H
#define CJ_DL_LENT_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

struct cj_dl_lent;

/* Takes data (malloc'd, len bytes): freed with the item, or at once when this
 * returns NULL (out of memory). */
struct cj_dl_lent *cj_dl_lent_new(uint8_t *data, size_t len);
/* Appends the item's bytes to out by reference.  0, or -1 (out untouched). */
int cj_dl_lent_add(struct cj_dl_lent *it, struct evbuffer *out);
/* The owner is done with it; the bytes go when the last reply does.  NULL is fine. */
void cj_dl_lent_release(struct cj_dl_lent *it);

#endif
