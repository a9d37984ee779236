/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h — state shared by the files of lib/stream (not for other layers).
 *
 *   stream.c  endpoint, handler registry, ids, message building/sending helpers
 *   rx.c      receiver: reassembly table, ACKs, receiver error notices
 *   tx.c      sender: chunking, window, ACK handling
 *   reqrep.c  request/reply over return_only (sm__ri), uuid4 */
#ifndef CJ_STREAM_INTERNAL_H
#define CJ_STREAM_INTERNAL_H

#include <sys/queue.h>

#include "stream/stream.h"
#include "util/stats.h"
#include "util/clock.h"

#define SM_DEFAULT_CHUNK (1u << 20)
#define SM_DEFAULT_WINDOW ((uint64_t)64 << 20)
#define SM_DEFAULT_ACK ((uint64_t)4 << 20)     /* receiver's interval before chunk 0 (§4.2) */
#define SM_OOO_MIN 16                          /* FLARE's MAX_OUT_SEQ_CHUNKS */
#define SM_OOO_MAX 1024
#define SM_RELIABLE_KEEP_MAX 3600.0            /* cap of sm__rt + sm__rw (§4.9) */
#define SM_RELIABLE_KEEP_DEFAULT 65.0

struct rx_stream;
struct tx_stream;
struct sm_req;

struct sm_handler {
    struct sm_handler *next;
    char *channel, *topic;
    cj_stream_handler_fn fn;
    void *arg;
};

/* Owned copy of a header list: keys and raw msgpack values. */
struct sm_hlist {
    size_t n;
    char **keys;
    uint8_t **vals;
    size_t *lens;
};

TAILQ_HEAD(rx_fifo, rx_stream);
TAILQ_HEAD(tx_list, tx_stream);
TAILQ_HEAD(req_list, sm_req);

struct cj_stream_ep {
    struct event_base *base;
    char me[CJ_HDR_STR_MAX + 1];
    struct cj_stream_io io;
    struct cj_stream_limits lim;
    enum cj_stream_wire wire;         /* the peers' FLARE generation (cj_stream_set_wire) */
    struct sm_hlist auth;
    struct sm_handler *handlers;
    struct evbuffer *scratch;         /* payload of the message being sent */

    uint64_t id_next;                 /* sm__id generator */

    /* receiver table: chained hash on (origin, sm__id) */
    struct rx_stream **buckets;
    size_t nbuckets;                  /* power of two */
    uint32_t n_rx;                    /* every state in the table */
    uint32_t n_rx_finished;           /* of which finished/failed (also on `finished`) */
    struct rx_fifo finished;          /* oldest first: evicted when the table is full */
    struct rx_fifo draining;          /* sink replies fully delivered, final ACK waiting for release */
    uint64_t rx_buffered, rx_reserved;

    struct tx_list tx;
    struct req_list reqs;
    uint32_t n_tx, n_req;
    uint64_t req_next;
    bool closing;

    struct cj_stream_stats st;
    struct cj_stats own_stats;        /* io.stats when the creator gave none */
};

/* ---- stream.c helpers ----------------------------------------------------------- */

double sm_now(void);
bool sm_to_server(const char *destination);
bool sm_name_ok(const char *s);
int sm_hlist_set_raw(struct sm_hlist *l, const struct cj_stream_hv *hv, size_t n);
void sm_hlist_clear(struct sm_hlist *l);
bool sm_hlist_has(const struct sm_hlist *l, const char *key);

/* Adds the application headers, then the auth headers when destination is
 * server / server.* (skipping keys already given). */
void sm_add_headers(struct cj_stream_ep *ep, struct cj_hb *b, const struct sm_hlist *app, const char *destination);

/* Adds the cellnet keys of a stream message (req, reply_expected false, channel
 * sm__STREAM), finishes the block and hands it with the contents of ep->scratch
 * to io->send.  payload_len < 0: cn__payload_len already added.  ep->scratch is
 * empty afterwards.  0, -1 (no route) or -2 (block could not be built; logged). */
int sm_send_msg(struct cj_stream_ep *ep, struct cj_hb *b, const char *destination, const char *topic,
                const char *payload_encoding, int64_t payload_len, bool optional, bool control);
/* The block only (appended to out): 0 or <0 with err filled. */
int sm_build_msg(struct cj_stream_ep *ep, struct cj_hb *b, const char *destination, const char *topic,
                 const char *payload_encoding, int64_t payload_len, bool optional, msgpack_sbuffer *out,
                 struct cj_err *err);

struct sm_handler *sm_handler_find(struct cj_stream_ep *ep, const char *channel, const char *topic);

/* ---- rx.c ------------------------------------------------------------------------- */

void rx_input_data(struct cj_stream_ep *ep, const struct cj_hdr *h, struct evbuffer *payload);
void rx_free_all(struct cj_stream_ep *ep);
/* The request is gone: a plain reply stream goes on unclaimed; a sink stream
 * fails (error notice), since nobody takes its bytes any more. */
void rx_unbind_req(struct rx_stream *s);
/* hold_acks: the owner consumed bytes [0, upto) of the sink stream. */
void rx_release_upto(struct rx_stream *s, uint64_t upto);
/* The same for a sink stream whose request already finished (fully delivered,
 * final ACK waiting): 0, or -1 when no such stream has that request handle. */
int rx_release_handle(struct cj_stream_ep *ep, uint64_t handle, uint64_t upto);

/* Receiver error notice (§6): on sm__ERROR and again on sm__ACK to origin. */
void rx_send_error(struct cj_stream_ep *ep, const char *origin, uint64_t id, bool id_neg, const char *ch,
                   const char *tp, const char *ri, const char *et, const char *em);

/* ---- tx.c ------------------------------------------------------------------------- */

/* Starts a stream; is_reply adds cn__return_code rc and cn__req_id "".  The
 * bytes are blob (taken), or come from src (blob NULL) piece by piece. */
struct tx_stream *tx_start(struct cj_stream_ep *ep, const char *destination, const char *channel,
                           const char *topic, const struct cj_stream_msg *m, const char *ri, bool is_reply,
                           const char *rc, struct evbuffer *blob, const struct cj_stream_source *src,
                           cj_stream_done_fn done, void *arg);
void tx_input_ack(struct cj_stream_ep *ep, const struct cj_hdr *h);
/* An sm__ERROR naming one of our streams (origin or sm__fd = its destination). */
void tx_input_error(struct cj_stream_ep *ep, const struct cj_hdr *h);
void tx_set_req(struct tx_stream *t, struct sm_req *r);
uint64_t tx_id(const struct tx_stream *t);
/* Stops t (sender error notice if it had started); no callback. */
void tx_abort(struct tx_stream *t, const char *why);
void tx_free_all(struct cj_stream_ep *ep);

/* ---- reqrep.c ---------------------------------------------------------------------- */

/* A return_only stream opened: the pending request it answers, or NULL. */
struct sm_req *req_match_reply(struct cj_stream_ep *ep, const char *origin, const char *ri);
void req_bind_rx(struct sm_req *r, struct rx_stream *s);
/* The request's sink (NULL: the reply is assembled) and its handle. */
const struct cj_stream_sink *req_sink(const struct sm_req *r);
uint64_t req_handle(const struct sm_req *r);
void req_on_rx_progress(struct sm_req *r);
/* The reply is complete: hblk (chunk 0 block) and data are handed over
 * (data NULL for a sink reply: its bytes went to sink->data). */
void req_on_reply(struct sm_req *r, const struct cj_hdr *h, struct evbuffer *data);
void req_on_rx_failed(struct sm_req *r, const char *why);
void req_on_tx_progress(struct sm_req *r);
void req_on_tx_done(struct sm_req *r);
void req_on_tx_failed(struct sm_req *r, const char *why);
/* An sm__ERROR / sm__ACK-with-sm__em naming a request by sm__ri, or by the sm__id
 * of its stream when it has no sm__ri: true when it failed the request. */
bool req_input_error(struct cj_stream_ep *ep, const struct cj_hdr *h);
void req_free_all(struct cj_stream_ep *ep);

#endif
