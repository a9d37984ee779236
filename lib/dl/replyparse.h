/* SPDX-License-Identifier: Apache-2.0 */
/* replyparse.h — incremental reader of one download-service reply (internal to
 * lib/dl: the download client's sink mode, and its fuzz target).
 *
 * A reply payload (a LOBS container, doc/protocol/download.md §2-§3) arrives piece by piece.
 * The reader buffers the MAIN section (at most CJ_DL_RP_MAX_MAIN bytes),
 * decodes it with cj_dl_decode_reply_body, then hands every item of `data` to
 * its callbacks in data order: an inline bin item straight out of the buffered
 * MAIN section (a reference to it, not a copy: the block lives until the last
 * consumer of an inline item frees its piece, on whatever thread), a DatumRef item as its BLOB datum section streams in.  Datum
 * sections must come in the order of the DatumRef items that name them (as
 * NVFlare and this project's producer write them); an unknown datum, a datum
 * that is not a DOT-0 BLOB, a missing one, a MAIN section larger than the
 * limit or a section larger than what is left of the reply fails the reply
 * with a reason.  Item bytes are never assembled: a datum piece goes to
 * item_data as it came (contents moved, no copy).
 *
 * Release accounting: cj_dl_rp_release_upto maps "the consumer is done with
 * the first R item bytes of this reply" to a reply offset that may be ACKed:
 * everything the reader has taken in, up to the first item byte of a datum
 * section that is not released yet.  MAIN (inline items included: they are
 * in memory anyway) and framing never hold ACKs back.
 *
 * Bounded: the MAIN buffer, and one record per item (at most
 * CJ_DL_RP_MAX_ITEMS per reply).  No recursion, no loop without progress. */
#ifndef CJ_DL_REPLYPARSE_H
#define CJ_DL_REPLYPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "dl/dlmsg.h"
#include "payload/lobs.h"

#define CJ_DL_RP_MAX_MAIN ((uint64_t)16 << 20)   /* refuse a MAIN section larger than 16 MiB */
#define CJ_DL_RP_MAX_ITEMS 65536                 /* items per reply */

struct cj_dl_rp_block;

struct cj_dl_rp_cb {
    /* Item i (0-based in this reply) starts; size = its bytes.  -1 aborts. */
    int (*item_begin)(void *arg, size_t i, uint64_t size);
    /* Bytes of item i in order (contents taken by the callee).  -1 aborts. */
    int (*item_data)(void *arg, size_t i, struct evbuffer *piece);
    /* Item i's last byte was handed over.  -1 aborts. */
    int (*item_end)(void *arg, size_t i);
};

struct cj_dl_rp_item {
    struct cj_dl_item_ref ref;   /* from the MAIN decode (off relative to the MAIN body) */
    uint64_t cum;                /* item bytes of this reply before this item */
    uint64_t size;               /* inline: len; datum: known once its section header is in */
    uint64_t reply_off;          /* datum: offset of its first byte in the reply (0 until known) */
};

enum cj_dl_rp_phase { RP_MAIN_HDR = 0, RP_MAIN_BODY, RP_SEC_HDR, RP_DATUM_BODY, RP_FAILED };

struct cj_dl_rp {
    struct cj_dl_rp_cb cb;
    void *arg;
    uint64_t total;              /* the reply's size (sm__sz) */
    uint64_t fed;                /* bytes taken in so far */
    enum cj_dl_rp_phase phase;
    uint8_t hdr[CJ_LOBS_DATUM_HDR_LEN];
    size_t hdr_have, hdr_need;
    uint64_t main_len;
    struct cj_dl_rp_block *blk;  /* the MAIN section's body (received into it; shared with the
                                    inline items handed out) */
    bool have_main;              /* decoded: r, state, items valid */
    struct cj_dl_reply r;
    uint8_t *state;              /* copy of the state map (NULL when absent) */
    size_t state_len;
    struct cj_dl_rp_item *items;
    size_t n_items;
    size_t next;                 /* the item to hand out next */
    uint64_t datum_left;         /* bytes of the current datum still to come */
    uint64_t item_bytes;         /* item bytes handed out so far */
    size_t rel_cursor;           /* release accounting: first item not fully released */
    char why[300];
};

/* arg is passed to every callback.  total: the reply's byte count. */
void cj_dl_rp_init(struct cj_dl_rp *p, uint64_t total, const struct cj_dl_rp_cb *cb, void *arg);

/* Takes the contents of piece.  0, or -1 (why set; the reader is then failed
 * and stays failed).  Bytes beyond total fail the reply. */
int cj_dl_rp_feed(struct cj_dl_rp *p, struct evbuffer *piece);

/* The whole reply was fed: 0 when it was complete (MAIN decoded, every item
 * handed out, no section cut short), else -1 with why. */
int cj_dl_rp_finish(struct cj_dl_rp *p);

/* The reply offset up to which ACKs may go once the first `released` item
 * bytes of this reply are consumed (monotone in released). */
uint64_t cj_dl_rp_release_upto(struct cj_dl_rp *p, uint64_t released);

/* Frees what the reader holds (state included); p may be initialised again. */
void cj_dl_rp_clear(struct cj_dl_rp *p);

#endif
