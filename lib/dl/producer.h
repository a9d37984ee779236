/* SPDX-License-Identifier: Apache-2.0 */
/* producer.h — the download service, producer side (doc/protocol/download.md §2, §3, §5).
 *
 * One producer per stream endpoint: it registers download_service__ /
 * download_service__download and serves the refs added to it.  A ref is a list
 * of items whose sizes are known up front; their bytes are asked for only when
 * a reply is built, by an item callback that appends them to the reply's
 * evbuffer (by reference or from a file: nothing is copied), so a producer
 * never holds item bytes of its own.
 *
 * Each ref is its own transaction (one ref per encoded datum).  Receivers are
 * counted by the request's cn__origin, either in count mode (num_receivers
 * distinct requesters with a final status) or in identity mode (every listed
 * FQCN has a final status).  A confirm-capable receiver becomes final at its
 * accepted confirm (nonce checked), a legacy one at its terminal serve, a
 * cancelling one (after it pulled) as failed.  When every expected receiver is
 * final the ref is FINISHED: completed if all succeeded, failed otherwise; the
 * per-requester outcomes are kept as tombstones (1800 s, bounded) so a late
 * retry gets {"status":"eof"} / {"status":"error"}.  A ref idle (no pull, no
 * accepted confirm) for longer than its timeout expires: TIMED_OUT, receivers
 * without a final status fail closed, no tombstones.
 *
 * Single-threaded: everything runs on the event loop's thread.
 * Logs: one debug line per data reply served; one info line per receiver
 * reaching a final status (ref, receiver FQCN, bytes); one per ref finished. */
#ifndef CJ_DL_PRODUCER_H
#define CJ_DL_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>

/* Kept light: stream/stream.h and dl/dlmsg.h are not included here. */
struct cj_stream_ep;

#ifndef CJ_DL_REF_ID_MAX
#define CJ_DL_REF_ID_MAX 127               /* as in dl/dlmsg.h */
#endif

#define CJ_DL_DEFAULT_TIMEOUT 600.0        /* idle timeout of a ref (s) */
#define CJ_DL_TOMBSTONE_TTL 1800.0         /* from the moment the ref finished (s) */
#define CJ_DL_MAX_TOMBSTONES 4096
#define CJ_DL_MAX_RECEIVERS 256            /* distinct unlisted requesters per ref */

struct cj_dl_producer_cfg {
    uint64_t max_chunk;        /* grouping limit; 0: CJ_DL_MAX_CHUNK (2 MiB) */
    uint64_t datum_min;        /* items this large go as BLOB datums; 0: CJ_DL_DATUM_MIN (10 MiB) */
    double tombstone_ttl;      /* 0: CJ_DL_TOMBSTONE_TTL */
    uint32_t max_tombstones;   /* 0: CJ_DL_MAX_TOMBSTONES; the oldest goes first when full */
    uint32_t max_receivers;    /* 0: CJ_DL_MAX_RECEIVERS; requesters beyond get invalid_request */
    bool confirm_disabled;     /* NVFlare's kill switch off: legacy terminal replies only */
};

enum cj_dl_outcome {
    CJ_DL_OUT_OK = 1,          /* every expected receiver succeeded */
    CJ_DL_OUT_FAILED,          /* all expected receivers final, at least one failed */
    CJ_DL_OUT_TIMEOUT,         /* idle for longer than the ref's timeout */
};

enum cj_dl_rcv_state {
    CJ_DL_RCV_PENDING = 0,     /* no final status yet (maybe awaiting its confirm) */
    CJ_DL_RCV_OK,
    CJ_DL_RCV_FAILED,
};

/* One receiver of a ref, as reported to done and foreach (valid during the call). */
struct cj_dl_receiver_info {
    const char *fqcn;
    enum cj_dl_rcv_state state;
    bool expected;             /* listed in receiver_ids (identity mode) */
    bool pulled;               /* has sent at least one pull */
    bool awaiting_confirm;     /* terminal reply with a nonce served, no confirm yet */
    uint64_t bytes;            /* item bytes served to it (retries included) */
    uint32_t replies;          /* data replies served to it */
};

/* Appends item `index`'s bytes (exactly the size given at add_ref) to out, by
 * reference (evbuffer_add_reference, evbuffer_add_buffer_reference) or from a
 * file (evbuffer_add_file_segment) so nothing is copied.  0, or -1 when the
 * item cannot be produced (the receiver gets {"status":"error"} and fails).
 * Must not add or remove refs. */
typedef int (*cj_dl_item_fn)(void *ctx, size_t index, struct evbuffer *out);

/* The ref finished or expired.  rcv lists every receiver seen (and every listed
 * one).  Called from the event loop; may add or remove other refs; must not
 * free the producer.  The ref is gone when it is called. */
typedef void (*cj_dl_ref_done_fn)(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                                  const struct cj_dl_receiver_info *rcv, size_t n_rcv);

/* Asynchronous item source (spool mode: bytes come from disk through the I/O
 * thread).  Asks for bytes [off, off+len) of item `index` (len <= 1 MiB); the
 * owner answers once, now or later, with got(token, err, data) — data's
 * contents taken, exactly len bytes, or err != 0 (the receiver then gets
 * {"status":"error"} for that pull if nothing was sent yet, else the reply
 * stream is cancelled).  The producer never asks for more than one range of
 * one reply at a time, and streams each reply with cj_stream_reply_source, so
 * at most a couple of MiB of item bytes per reply are in memory.
 * got may be called from inside item_read; with err, data may be NULL.  The
 * token stays valid until got is called, even after the ref was removed,
 * finished or the producer freed (it then only frees itself): the owner must
 * call got exactly once for every item_read.  The first range of a reply is
 * asked for before the reply stream starts, so an item that cannot be read at
 * all still gets {"status":"error"}. */
typedef void (*cj_dl_got_fn)(void *token, int err, struct evbuffer *data);
typedef void (*cj_dl_item_read_fn)(void *ctx, size_t index, uint64_t off, size_t len, cj_dl_got_fn got,
                                   void *token);

struct cj_dl_ref_cfg {
    const char *ref_id;               /* NULL: a fresh uuid4 string */
    size_t n_items;
    const uint64_t *sizes;            /* n_items sizes (copied) */
    cj_dl_item_fn item_fn;            /* one of item_fn and item_read */
    cj_dl_item_read_fn item_read;
    /* Receivers: identity mode when n_receiver_ids > 0 (FQCNs copied), else count
     * mode with num_receivers (0: the ref can never complete; it expires). */
    uint32_t num_receivers;
    const char *const *receiver_ids;
    size_t n_receiver_ids;
    double timeout;                   /* idle timeout (s); 0: CJ_DL_DEFAULT_TIMEOUT */
    cj_dl_ref_done_fn done;           /* may be NULL */
    void *ctx;                        /* for item_fn and done */
};

struct cj_dl_producer_stats {
    uint64_t refs_live, tombstones;
    uint64_t refs_ok, refs_failed, refs_timed_out, refs_removed;
    uint64_t pulls, data_replies, eof_replies, error_replies, replays, invalid_requests;
    uint64_t confirms_accepted, confirms_dropped, cancels, cancels_ignored;
    uint64_t bytes_served;            /* item bytes in data replies */
    uint64_t item_errors;             /* item callbacks that failed */
};

struct cj_dl_ref_info {
    const char *ref_id;
    size_t n_items;
    uint64_t total_bytes;             /* sum of the item sizes */
    uint32_t num_receivers;           /* count mode; 0 in identity mode */
    double idle;                      /* seconds since the last activity */
    double timeout;
    const struct cj_dl_receiver_info *rcv;
    size_t n_rcv;
};
typedef void (*cj_dl_ref_visit_fn)(void *arg, const struct cj_dl_ref_info *ri);

struct cj_dl_producer;

/* Registers the handler on ep (replacing any earlier one for that topic).
 * cfg NULL: defaults.  NULL on no memory or a failed registration. */
struct cj_dl_producer *cj_dl_producer_new(struct event_base *base, struct cj_stream_ep *ep,
                                          const struct cj_dl_producer_cfg *cfg);

/* Unregisters the handler and frees every ref (done not called) and tombstone. */
void cj_dl_producer_free(struct cj_dl_producer *p);

/* Adds a ref; its idle timer starts now.  ref_id_out (may be NULL, else
 * CJ_DL_REF_ID_MAX + 1 bytes) gets the ref id.  0, or -1 on bad arguments (no
 * sizes or item_fn with items, a ref_id empty or too long, a duplicate live
 * ref_id, an empty receiver FQCN) or no memory. */
int cj_dl_producer_add_ref(struct cj_dl_producer *p, const struct cj_dl_ref_cfg *cfg,
                           char ref_id_out[CJ_DL_REF_ID_MAX + 1]);

/* Drops a live ref at once (delete: no done, no tombstones; later pulls get
 * invalid_request).  0, or -1 when not live. */
int cj_dl_producer_remove_ref(struct cj_dl_producer *p, const char *ref_id);

/* True while ref_id is live (not finished, expired or removed). */
bool cj_dl_producer_has_ref(const struct cj_dl_producer *p, const char *ref_id);

/* Calls fn for every live ref (for the status socket).  fn must not add or remove refs. */
void cj_dl_producer_foreach(struct cj_dl_producer *p, cj_dl_ref_visit_fn fn, void *arg);

void cj_dl_producer_get_stats(const struct cj_dl_producer *p, struct cj_dl_producer_stats *st);

#endif
