/* SPDX-License-Identifier: Apache-2.0 */
/* client.h — the download service, consumer side (doc/protocol/download.md §6).
 *
 * cj_dl_fetch pulls one ref from its source cell: a first pull without state,
 * then pulls echoing the last reply's state verbatim, one request in flight.
 * Each data reply's items (inline bin, or DatumRef + BLOB datum section) are
 * handed to the item callback in order, one evbuffer each, and forgotten: at
 * most one reply is held at a time.  A terminal eof ends the download (a
 * confirm "success" with the reply's nonce is sent, fire-and-forget, when the
 * producer asked for one); {"status":"error"} fails it ("producer error ..."),
 * after a confirm "failed".
 *
 * Retries (§6.2): only a request that timed out is retried, with the identical
 * payload (same state), at most max_retries times, after min(base * 2^(n-1),
 * cap) seconds; a good reply resets the count.  Every other non-ok return code
 * (invalid_request, comm_error, process_exception, ...) fails at once.  Log
 * tags: [DOWNLOAD_RETRY], [DOWNLOAD_RECOVERED], [DOWNLOAD_FAILED], each with
 * source, ref_id, attempt and elapsed seconds.  After a failure that was not a
 * terminal reply (or on abort) a cancel is sent if a reply said cancel_capable.
 *
 * Single-threaded: everything runs on the event loop's thread.  Neither
 * callback is ever called from inside cj_dl_fetch or cj_dl_fetch_cancel. */
#ifndef CJ_DL_CLIENT_H
#define CJ_DL_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>

struct cj_stream_ep;   /* stream/stream.h (not included: see producer.h) */

struct cj_dl_fetch_cfg {
    double request_timeout;   /* per-request no-progress timeout (s), default 600 */
    int max_retries;          /* retries after a timeout, default 3 (4 attempts); < 0 = 0 */
    double backoff_base;      /* first backoff (s), default 2: 2, 4, 8, ... */
    double backoff_cap;       /* default 60 */
    bool no_confirm;          /* kill switch: omit confirm_capable, never confirm */
};

void cj_dl_fetch_cfg_default(struct cj_dl_fetch_cfg *c);

/* A FLARE 2.7.2 / 2.8.x producer drops a transaction idle this long (its
 * min_download_timeout; doc/protocol/download.md §10).  On an endpoint set to
 * CJ_STREAM_WIRE_2_8 the request timeout is capped at it: a request waiting
 * longer can only be retried into invalid_request.  Confirm and cancel need no
 * switch: the client sends them only to a producer that asked (confirm_expected,
 * cancel_capable), which a 2.8.x producer never does. */
#define CJ_DL_REF_IDLE_2_8 300.0

/* One item, in order (index 0, 1, ... across the whole ref).  The callback
 * owns item (frees it with evbuffer_free).  Return 0, or -1 to abort the
 * download ("exception when consuming data: ..."; a cancel is sent).  May call
 * cj_dl_fetch_cancel on its own handle (done is then not called). */
typedef int (*cj_dl_fetch_item_fn)(void *ctx, uint64_t index, struct evbuffer *item);

/* The end: ok, or failed with a reason (doc/protocol/download.md §6.3 wording).  The handle
 * is freed right after it returns. */
typedef void (*cj_dl_fetch_done_fn)(void *ctx, bool ok, const char *why);

struct cj_dl_fetch;

/* Starts downloading ref_id from source_fqcn through ep (cfg NULL: defaults;
 * otherwise start from cj_dl_fetch_cfg_default and change fields).  base is
 * ep's event loop (for the backoff timer; stream.h has no accessor for it).
 * NULL on bad arguments or when the first request cannot be started; then no
 * callback is called. */
struct cj_dl_fetch *cj_dl_fetch(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                const char *ref_id, const struct cj_dl_fetch_cfg *cfg, cj_dl_fetch_item_fn item,
                                cj_dl_fetch_done_fn done, void *ctx);

/* Aborts: forgets the request in flight, stops a backoff, sends a cancel if the
 * producer is cancel-capable, frees the handle.  done is not called. */
void cj_dl_fetch_cancel(struct cj_dl_fetch *f);

struct cj_dl_fetch_progress {
    uint64_t items, bytes;    /* handed to the item callback */
    uint64_t requests;        /* pulls sent, retries included */
    uint64_t retries;
    double elapsed;           /* seconds since the start */
    double idle;              /* seconds since the last reply (or the start) */
    double request_timeout;   /* the per-request timeout in force (cfg, capped on the 2.8 wire) */
};

void cj_dl_fetch_get_progress(const struct cj_dl_fetch *f, struct cj_dl_fetch_progress *p);

/* ---- streaming to a sink (spool mode) ------------------------------------------------
 *
 * For items too big to hold: the reply is received piece by piece
 * (cj_stream_request_sink with hold_acks), its MAIN section (small: inline
 * items are < 10 MiB, refs and state) is buffered and decoded, and every
 * item's bytes — inline bin or BLOB datum section — go to the sink in order as
 * they arrive, never assembled.  The consumer tells the client what it has
 * consumed (written) with cj_dl_fetch_release; only released bytes are ACKed
 * upstream, so the source's window bounds the bytes in memory.
 *
 * At EOF the client does not confirm by itself: it calls sink->eof and waits
 * for cj_dl_fetch_finish(f, ok, why), which sends the confirm (success only
 * when ok: every item safely on disk) and then calls done.
 *
 * Details (implementation choices the callers may rely on):
 * - Datum sections must come in the order of the DatumRef items that name
 *   them (NVFlare's and this project's producers write them so); an unknown,
 *   missing or non-BLOB datum, a MAIN section over 16 MiB, more than 65536
 *   items in one reply or sizes that do not add up fail the download
 *   ("exception when consuming data: bad reply from <src>: ...").
 * - Release accounting: framing and the MAIN section (inline items included:
 *   they are in memory anyway, at most 16 MiB) are released by the client
 *   itself; only the bytes of datum items wait for cj_dl_fetch_release.  The
 *   consumer still counts every item byte (inline ones too) in its releases.
 * - The next pull is sent only once every item byte delivered so far has been
 *   released, so at most one reply's bytes are between the network and the
 *   disk.
 * - Retries: a pull that timed out before any item of its reply reached the
 *   sink is retried as in whole-reply mode; one that timed out after an
 *   item_begin fails the download ("... timeout in the middle of a reply ...;
 *   a pull cannot be restarted mid-reply"), since the sink cannot un-write.
 * - Callbacks may call cj_dl_fetch_cancel and cj_dl_fetch_finish on their own
 *   handle (acted on when the callback returns). */
struct cj_dl_sink {
    /* Item `index` starts; size = its byte count.  -1 aborts (why in the reason). */
    int (*item_begin)(void *ctx, uint64_t index, uint64_t size);
    /* Bytes of the current item, in order (contents taken).  -1 aborts. */
    int (*item_data)(void *ctx, uint64_t index, struct evbuffer *piece);
    /* The current item's last byte was handed over.  -1 aborts. */
    int (*item_end)(void *ctx, uint64_t index);
    /* The producer said eof: answer with cj_dl_fetch_finish. */
    void (*eof)(void *ctx);
};

/* As cj_dl_fetch, items going to sink (copied) instead of an item callback. */
struct cj_dl_fetch *cj_dl_fetch_sink(struct event_base *base, struct cj_stream_ep *ep, const char *source_fqcn,
                                     const char *ref_id, const struct cj_dl_fetch_cfg *cfg,
                                     const struct cj_dl_sink *sink, cj_dl_fetch_done_fn done, void *ctx);

/* The consumer is done with `bytes` more item bytes (cumulative over the whole
 * download, in the order handed to item_data): they may be ACKed.  When this
 * completes a reply's releases the next pull is sent; if it cannot be sent,
 * done(ctx, false, ...) is called from inside this call. */
void cj_dl_fetch_release(struct cj_dl_fetch *f, uint64_t bytes);

/* After sink->eof: ok sends confirm "success" (when the producer asked for a
 * confirm) and calls done(ctx, true, ""); !ok sends confirm "failed" (or a
 * cancel), logs [DOWNLOAD_FAILED] with why and calls done(ctx, false, why).
 * Also allowed before eof (sink mode only), with ok false: the consumer gives
 * up with its own reason (e.g. a write error): the request in flight is
 * forgotten, a cancel sent (if cancel_capable), [DOWNLOAD_FAILED] logged with
 * why, done(ctx, false, why) called.  From inside a sink callback it takes
 * effect when the callback returns (which should then return -1).
 * The handle is freed after done returns. */
void cj_dl_fetch_finish(struct cj_dl_fetch *f, bool ok, const char *why);

#endif
