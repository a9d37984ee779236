/* SPDX-License-Identifier: Apache-2.0 */
/* stream.h — the sm__ streaming layer for the relay's own traffic (doc/protocol/streaming.md).
 *
 * One struct cj_stream_ep per cell.  It is a sender (a blob cut into chunks,
 * window by ACKs), a receiver (reassembly per (cn__origin, sm__id), ACKs,
 * error notices) and a requester/responder (request/reply over return_only,
 * matched by sm__ri).  It never reads or writes a link: everything leaves
 * through io->send and everything addressed to it enters through
 * cj_stream_input, so the router (lib/cell) is the only thing it talks to.
 *
 * Single-threaded: every function runs on the event loop's thread.
 *
 * Ownership of payloads, both ways: the callee takes the CONTENTS of the
 * evbuffer (moving its chains, e.g. evbuffer_add_buffer), the caller keeps the
 * evbuffer OBJECT and frees it.  A blob handed to cj_stream_send /
 * cj_stream_request / cj_stream_reply is the exception: the callee takes the
 * object too (on success and on failure).
 *
 * Callbacks (done, reply, handler) are never called from inside the call
 * that started the operation: a send that completes at once reports from the
 * event loop.  No callback may call cj_stream_free. */
#ifndef CJ_STREAM_STREAM_H
#define CJ_STREAM_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "wire/header.h"

#define CJ_STREAM_CHANNEL "sm__STREAM"
#define CJ_STREAM_TOPIC_DATA "sm__DATA"
#define CJ_STREAM_TOPIC_ACK "sm__ACK"
#define CJ_STREAM_TOPIC_ERROR "sm__ERROR"
#define CJ_STREAM_RETURN_ONLY "return_only"

#define CJ_STREAM_MAX_BLOB ((uint64_t)4 << 30)   /* 4 GiB: the largest sm__sz ever accepted */
#define CJ_STREAM_RI_LEN 36                       /* uuid4 text */

/* ---- the router interface ------------------------------------------------------ */

struct cj_stream_io {
    void *ctx;
    /* Send one message this endpoint originates (chunk, ACK, error notice): a
     * finished header block (copied by the callee) and a payload evbuffer whose
     * contents the callee takes (moves; the object stays the caller's, maybe
     * empty).  control = true for ACKs and error notices (they skip bulk
     * queues).  Returns 0, or -1 when there is no route (the stream then fails).
     * Must not call cj_stream_input on the same endpoint before returning. */
    int (*send)(void *ctx, const char *destination, const uint8_t *hblk, size_t hlen,
                struct evbuffer *payload, bool control);
    /* Optional: the neighbour a message to destination leaves through, written
     * as cn__to (doc/protocol/cellnet.md §2).  NULL, or a NULL answer: cn__to = destination. */
    const char *(*next_hop)(void *ctx, const char *destination);
    /* Optional: true while the way toward destination already holds enough of
     * this cell's bytes (e.g. the link's output queue is over a few chunks).
     * A sender then holds its next data chunk and tries again after
     * CJ_STREAM_BUSY_RETRY_MS, so a fast source (a file) never fills a slow
     * link's queue up to the whole window.  Only streams over two chunks are
     * held; ACKs, error notices and small messages never are. */
    bool (*busy)(void *ctx, const char *destination);
    /* Optional: the relay counters (util/stats.h) this endpoint and the layers
     * over it (FL loop, worker sessions, downloads) count into, one set per
     * relay cell.  NULL: the endpoint keeps its own. */
    struct cj_stats *stats;
};

#define CJ_STREAM_BUSY_RETRY_MS 1

/* ---- limits -------------------------------------------------------------------- */

struct cj_stream_limits {
    uint32_t chunk_size;       /* sender: bytes per chunk (sm__cs), default 1 MiB */
    uint64_t window;           /* sender: max un-ACKed bytes (sm__ws), default 64 MiB */
    uint64_t ack_interval;     /* sender: sm__ai on chunk 0 (capped at window), default 4 MiB */
    uint64_t max_blob;         /* receiver: largest sm__sz accepted, default and cap 4 GiB */
    uint64_t max_buffered;     /* receiver: sum of sm__sz (+ kept header blocks) of streams being
                                  reassembled; a new stream beyond it is refused. Default 4 GiB +
                                  64 MiB (one largest blob and room for small ones) */
    uint32_t max_streams;      /* receiver: stream states (live + recently finished), default 4096 */
    double rx_idle;            /* receiver: fail a stream after this long without new data, 300 s */
    double tx_no_progress;     /* sender: fail when blocked by the window this long without ACK
                                  progress, 60 s */
    double linger;             /* receiver: how long a finished non-reliable or failed stream is
                                  remembered so late chunks are ignored, 60 s */
};

void cj_stream_limits_default(struct cj_stream_limits *l);

/* ---- headers given by the owner ------------------------------------------------ */

/* An application header: key + its value as raw msgpack bytes (copied as they
 * are into every chunk). */
struct cj_stream_hv {
    const char *key;
    const void *val;
    size_t len;
};

/* A string header (auth values). */
struct cj_stream_kv {
    const char *key;
    const char *val;
};

/* What a sent blob carries besides its bytes. */
struct cj_stream_msg {
    const struct cj_stream_hv *hdrs;  /* application headers copied into every chunk */
    size_t n_hdrs;
    const char *encoding;             /* sm__pe: "fobs", "bytes" or "none"; NULL = "bytes" */
    bool optional;                    /* sm__op and cn__optional */
    bool patient;                     /* a request whose timeout is an expected outcome (waiting for a peer to
                                         come up): not counted in timeouts, logged at debug */
};

/* ---- received blobs ------------------------------------------------------------ */

/* What cj_stream_reply needs to answer a request (copied by value freely). */
struct cj_stream_reqctx {
    bool has_ri;                           /* false: fire-and-forget, no reply possible */
    char origin[CJ_HDR_STR_MAX + 1];       /* the requester (reply destination) */
    char ri[CJ_HDR_STR_MAX + 1];           /* sm__ri */
    char channel[CJ_HDR_STR_MAX + 1];      /* request sm__ch */
    char topic[CJ_HDR_STR_MAX + 1];        /* request sm__tp */
};

struct cj_stream_blob {
    const struct cj_hdr *hdr;     /* the FIRST chunk's headers (sm__sq 0), valid during the call */
    const uint8_t *hblk;          /* that chunk's raw header block, valid during the call */
    size_t hlen;
    struct evbuffer *data;        /* the blob, exactly sm__sz bytes.  The handler takes it by
                                     setting data = NULL; otherwise it is freed after the call */
    uint64_t size;
    const char *encoding;         /* sm__pe ("" when absent) */
    const char *origin;           /* cn__origin */
    uint64_t stream_id;           /* sm__id */
    struct cj_stream_reqctx req;  /* for cj_stream_reply */
    char error[160];              /* a handler returning -1 may say why here */
};

/* Returns 0, or -1 to send the receiver error notice (§6) to the origin (the
 * requester then fails with comm_error). */
typedef int (*cj_stream_handler_fn)(void *arg, struct cj_stream_blob *b);

/* status 0: done (non-reliable: every chunk handed to io); -1: failed, why says why. */
typedef void (*cj_stream_done_fn)(void *arg, int status, const char *why);

/* The outcome of a request. */
struct cj_stream_reply {
    const char *return_code;      /* cn__return_code of the reply ("ok" if absent), or the local
                                     "timeout" / "comm_error" */
    const char *error;            /* cn__error or the local reason; "" when none */
    const struct cj_hdr *hdr;     /* the reply's first-chunk headers; NULL on a local failure */
    struct evbuffer *data;        /* the reply blob, NULL on failure.  Taken by setting data =
                                     NULL; otherwise freed after the call */
    const char *encoding;         /* reply sm__pe; "" on failure */
};
typedef void (*cj_stream_reply_fn)(void *arg, struct cj_stream_reply *r);

/* ---- counters ------------------------------------------------------------------ */

struct cj_stream_stats {
    uint64_t rx_active;           /* streams being reassembled */
    uint64_t rx_finished;         /* finished/failed stream states kept (re-ACK, late chunks) */
    uint64_t rx_buffered;         /* bytes held: chunks + kept header blocks */
    uint64_t rx_reserved;         /* admission reservation (sum of sm__sz + header blocks) */
    uint64_t tx_active;           /* streams being sent */
    uint64_t requests;            /* requests waiting */
    uint64_t chunks_in, chunks_out, dup_chunks, acks_in, acks_out, errors_in, errors_out;
    uint64_t blobs_in, blobs_out, rx_failed, tx_failed, dropped;
};

/* ---- the endpoint -------------------------------------------------------------- */

struct cj_stream_ep;
struct cj_stats;

/* me: this cell's FQCN.  io is copied.  lim NULL: defaults.  NULL on bad
 * arguments (empty me, no io->send, zero chunk size/window) or no memory. */
struct cj_stream_ep *cj_stream_new(struct event_base *base, const char *me, const struct cj_stream_io *io,
                                   const struct cj_stream_limits *lim);

/* The chunk size this endpoint sends with (owners of source streams align
 * their feeds to it: a chunk then moves whole buffers, copying nothing). */
uint32_t cj_stream_chunk_size(const struct cj_stream_ep *ep);

/* Frees everything.  Pending sends and requests are reported failed
 * ("endpoint closed") first; their callbacks must not use ep. */
void cj_stream_free(struct cj_stream_ep *ep);

/* Headers stamped on every message this endpoint sends to "server" or
 * "server.*" (chunks, ACKs, error notices): client_name, ssid, __token__,
 * __token_signature__ (doc/protocol/cellnet.md §8).  Copied; replaces the previous set;
 * n 0 clears.  A key also given as an application header is not added twice.
 * -1 on a bad list (empty key, key starting cn__/sm__) or no memory. */
int cj_stream_set_auth(struct cj_stream_ep *ep, const struct cj_stream_kv *kv, size_t n);

/* The FLARE generation of the peers this endpoint talks to
 * (doc/protocol/streaming.md §11).  CJ_STREAM_WIRE_DEV, the default: FLARE's
 * development tree (2.9 and later).  CJ_STREAM_WIRE_2_8: FLARE 2.7.2 and 2.8.x,
 * whose cells have no handler for sm__ERROR (a receiver error notice goes on
 * sm__ACK only) and whose receivers ACK only after more than 4 MiB (the window
 * is raised to at least 4 MiB + 2 chunks).  What every peer gets either way:
 * non-reliable sends, ACKs with or without sm__sq, an ACK every 4 MiB of a
 * stream without sm__ai, at most 16 chunks held out of order for a stream
 * without sm__ws, and an error notice without sm__ri failing the request whose
 * stream had its sm__id.  Set it before the first send. */
enum cj_stream_wire { CJ_STREAM_WIRE_DEV = 0, CJ_STREAM_WIRE_2_8 = 1 };
void cj_stream_set_wire(struct cj_stream_ep *ep, enum cj_stream_wire wire);
enum cj_stream_wire cj_stream_get_wire(const struct cj_stream_ep *ep);

/* Registers fn for blobs on (sm__ch, sm__tp); replaces an earlier one; fn NULL
 * removes.  return_only is reserved for replies (-1). */
int cj_stream_on(struct cj_stream_ep *ep, const char *channel, const char *topic, cj_stream_handler_fn fn,
                 void *arg);

/* Every message with cn__channel sm__STREAM addressed to this cell (chunks,
 * ACKs, error notices).  h->blk must stay valid during the call; the contents
 * of payload are taken. */
void cj_stream_input(struct cj_stream_ep *ep, const struct cj_hdr *h, struct evbuffer *payload);

/* A fresh sm__id (doc/protocol/streaming.md §3.2): µs wall clock at creation + random
 * 0..10^6, then +1 per stream; never repeats for this endpoint. */
uint64_t cj_stream_next_id(struct cj_stream_ep *ep);

/* Streams blob (taken) to destination as (channel, topic), fire-and-forget
 * unless ri is given (sm__ri).  done (may be NULL) is called once from the
 * loop.  *id_out (may be NULL) gets the sm__id.  0, or -1 on bad arguments
 * (blob over max_blob, names too long, channel return_only — replies go
 * through cj_stream_reply —, a header block that cannot be built); then done
 * is never called. */
int cj_stream_send(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                   const struct cj_stream_msg *m, const char *ri, struct evbuffer *blob, cj_stream_done_fn done,
                   void *arg, uint64_t *id_out);

/* Stops a stream being sent (a sender error notice tells the receiver); its
 * done callback is not called.  0, or -1 when id is not being sent. */
int cj_stream_cancel(struct cj_stream_ep *ep, uint64_t id);

/* Streams blob (taken) as a request with a fresh uuid4 sm__ri and calls fn
 * once with the reply or a local failure: "timeout" after `timeout` seconds
 * without progress in any stage (sending, waiting for the first reply chunk,
 * receiving the reply), "comm_error" when the stream fails or the target (or
 * a forwarder naming it in sm__fd) sends an error notice.  *handle_out (may be
 * NULL) gets a handle for cj_stream_request_cancel; ri_out (may be NULL,
 * else CJ_STREAM_RI_LEN + 1 bytes) the sm__ri.  0 or -1 (fn never called). */
int cj_stream_request(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                      const struct cj_stream_msg *m, struct evbuffer *blob, double timeout, cj_stream_reply_fn fn,
                      void *arg, uint64_t *handle_out, char *ri_out);

/* Forgets a pending request without calling its callback. 0 or -1 (unknown). */
int cj_stream_request_cancel(struct cj_stream_ep *ep, uint64_t handle);

/* Streams the reply blob (taken) to rq->origin on return_only /
 * "<channel>:<topic>" with rq->ri, cn__req_id "" and cn__return_code rc
 * (NULL = "ok"), sm__op true.  m->encoding etc. as for cj_stream_send.
 * -1 when rq has no sm__ri or the send cannot start. */
int cj_stream_reply(struct cj_stream_ep *ep, const struct cj_stream_reqctx *rq, const char *rc,
                    const struct cj_stream_msg *m, struct evbuffer *blob, cj_stream_done_fn done, void *arg);

/* ---- progressive blobs (spool mode: replies bigger than memory should hold) ---- */

/* A reply received piece by piece instead of assembled.  begin (may be NULL)
 * is called once, when the reply's chunk 0 is in (its headers:
 * cn__return_code etc.; size = sm__sz), before any data; data (required) then
 * gets the reply's bytes in order as soon as they are contiguous (contents
 * taken; offset = the piece's first byte in the blob; never empty pieces).
 * Either returning -1 fails the request (comm_error, a receiver error notice
 * to the sender, fn called with the reason).  When the last byte has been
 * handed to data, fn is called as for an assembled reply but with data NULL
 * (hdr = chunk 0's headers).  Both are called from inside cj_stream_input;
 * they may call cj_stream_request_release and cj_stream_request_cancel (the
 * reply stream then fails with an error notice to the sender, fn not called).
 * The request's timeout still applies: arriving bytes (and, with hold_acks,
 * releases) are progress.  A request that ends early (timeout, cancel) fails
 * its reply stream too.  Chunks waiting ahead of a gap are held by the layer
 * (at most the sender's window + 2 chunks, reserved from max_buffered instead
 * of sm__sz).
 *
 * hold_acks: the receiver ACKs no byte the owner has not released with
 * cj_stream_request_release, so the sender's window (not this process's
 * memory) bounds what is in flight while the owner writes to a slow disk.
 * Only sm__os is held: an ACK's sm__sq still names the last chunk received
 * contiguously (§5), so a reliable sender does not retransmit what merely
 * waits for the disk.  ACKs keep the normal interval (sm__ai) over the
 * released offset.  The final ACK also waits for the release of the last
 * byte, even when fn has already been called. */
struct cj_stream_sink {
    int (*begin)(void *arg, const struct cj_hdr *hdr, uint64_t size);
    int (*data)(void *arg, uint64_t offset, struct evbuffer *piece);
    void *arg;
    bool hold_acks;
};

/* cj_stream_request with a sink (NULL sink: exactly cj_stream_request). */
int cj_stream_request_sink(struct cj_stream_ep *ep, const char *destination, const char *channel, const char *topic,
                           const struct cj_stream_msg *m, struct evbuffer *blob, double timeout,
                           const struct cj_stream_sink *sink, cj_stream_reply_fn fn, void *arg, uint64_t *handle_out,
                           char *ri_out);

/* hold_acks: bytes [0, upto) of the reply are consumed; ACKs may cover them
 * (upto is capped at the bytes handed to data; releases never go back).
 * Works before the reply starts (nothing to do), while it arrives, and after
 * fn while the final ACK still waits for it.  0, or -1 for an unknown handle
 * (finished requests whose reply needs no more releases included: harmless). */
int cj_stream_request_release(struct cj_stream_ep *ep, uint64_t handle, uint64_t upto);

/* A blob sent piece by piece: the sender knows its size up front (sm__sz) and
 * asks the owner for bytes as the window lets it send.  want is called from
 * the loop (never from inside cj_stream_reply_source or cj_stream_feed) when
 * the bytes held but not yet sent fall under two chunks and fewer than size
 * bytes have been fed; it is not called again until the next feed, so at most
 * one want is outstanding.  The owner answers, now or later, with
 * cj_stream_feed; or stops with cj_stream_cancel (done not called).  The
 * chunks are the ones a whole blob of the same bytes would give (a chunk
 * leaves once all its bytes were fed).  want may be NULL only when size is 0. */
struct cj_stream_source {
    uint64_t size;
    void (*want)(void *arg, uint64_t fed);
    void *arg;
};

/* cj_stream_reply for a source instead of a whole blob.  done as for
 * cj_stream_reply (also on failure: window stalled, endpoint closed, and "the
 * owner fed no bytes for <tx_no_progress> s" when the stream could send but
 * had no bytes that long).  *id_out gets the stream id for feed/cancel.  -1
 * (done never called) on the arguments cj_stream_reply refuses, src NULL,
 * size over max_blob, or no want for a non-empty source. */
int cj_stream_reply_source(struct cj_stream_ep *ep, const struct cj_stream_reqctx *rq, const char *rc,
                           const struct cj_stream_msg *m, const struct cj_stream_source *src, cj_stream_done_fn done,
                           void *arg, uint64_t *id_out);

/* Appends more bytes (contents taken) to a source stream; may send chunks at
 * once (never calls want or done from inside).  -1, nothing taken, when id is
 * not a live source stream or the bytes would go beyond its size. */
int cj_stream_feed(struct cj_stream_ep *ep, uint64_t id, struct evbuffer *more);

void cj_stream_get_stats(const struct cj_stream_ep *ep, struct cj_stream_stats *st);
/* The relay counters this endpoint counts into (io.stats, or its own). */
struct cj_stats *cj_stream_relay_stats(struct cj_stream_ep *ep);
const char *cj_stream_me(const struct cj_stream_ep *ep);

#endif
