/* SPDX-License-Identifier: Apache-2.0 */
/* router.h — the relay's cell: routing table, forwarding, RETURN, local
 * dispatch, anti-spoofing, backpressure, upstream reconnect (doc/protocol/cellnet.md §2, §6).
 *
 * The router is the cell `me` = <site>.<job>.  It owns:
 *   - the upstream link (active, to the server root) and reconnects it with
 *     exponential back-off and jitter between reconnect_min and reconnect_max;
 *   - optionally the parent link (active, clear tcp, to the parent cell <site>:
 *     FLARE's client parent, the CP), handshaking as me like the upstream, with
 *     its own back-off; a READY naming anyone but <site> fails the attempt;
 *   - worker links (passive): a HELLO is accepted only from a direct child
 *     me.<leaf>; a second connection naming a live child is refused (the first stays);
 *   - local handlers by (channel, topic) for messages addressed to me.
 *
 * Routing of a message with destination D (doc/protocol/cellnet.md §6):
 *   D == me              -> local dispatch (handler by channel/topic)
 *   D == me.leaf[.more]  -> the link of child me.leaf (if connected)
 *   D == <site>, or <site>.x[.more] with <site>.x != me (the CP's other children)
 *                        -> the parent link, when one is configured; when it is
 *                           down the message is unroutable (never the upstream)
 *   anything else        -> upstream
 * Without a parent link, <site> and its children go upstream like anything else.
 * Forwarding rewrites cn__from/cn__to/cn__route/cn__send_time with
 * cj_hdr_forward and moves the same payload evbuffer to the next link as BULK.
 * Refused: loop (next hop already on cn__route and != D), going back out the
 * link it came in on, header over 64 KiB after the rewrite, no link, the
 * parent link over its small bound (its queue is bounded by refusing, never by
 * pausing the upstream or a worker: counted in drops_parent_full).
 * On the parent link, cn__origin must be <site> or one of its descendants
 * other than me and mine; what it sends to me is dispatched here, to my
 * children forwarded down (FLARE lets a CP reach a job's descendants).  An
 * unroutable `req` with cn__reply_expected gets a RETURN on the link it came
 * from; an optional sm__DATA chunk gets an sm__ERROR forwarder notice
 * (doc/protocol/streaming.md §6); anything else is dropped, counted and logged.
 *
 * Worker requests through the upstream (doc/protocol/streaming.md §6, "as a requester"):
 * for each worker link the router remembers up to CJ_ROUTER_INFLIGHT_MAX
 * request streams (sm__DATA chunks with sm__ri) it forwarded to the upstream,
 * until the reply's final chunk (or an error notice with that sm__ri) goes
 * back down that link, or the link closes.  When the upstream is lost, the
 * remembered requests are counted and logged as lost with it and nothing is
 * sent to their workers: as under FLARE's client job, which keeps no record
 * of what it forwards, each requester's own per-request timeout gives it
 * `timeout` and its client retries on the new link (FLARE's download client
 * retries only that return code; doc/protocol/cellnet.md §6).
 *
 * Messages the router originates (replies, RETURNs, notices, and whatever
 * upper layers send with cj_router_send/originate) go out as control frames
 * unless the caller asks for bulk. */
#ifndef CJ_CELL_ROUTER_H
#define CJ_CELL_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "wire/msg.h"
#include "net/link.h"
#include "util/err.h"
#include "wire/header.h"

struct evdns_base;
struct cj_router;

struct cj_router_cfg {
    const char *me;                      /* <site>.<job>: a valid FQCN of 2 parts or more */
    size_t link_buffer;                  /* [limits] link_buffer; 0 = 64 MiB */
    uint32_t max_frame;                  /* reader limit; 0 = sfm default */
    double handshake_timeout;            /* 0 = CJ_LINK_HANDSHAKE_TIMEOUT */
    double worker_heartbeat_interval;    /* [workers] heartbeat_interval; 0 = 5 */
    double worker_heartbeat_timeout;     /* [workers] heartbeat_timeout; 0 = 30 */
    double upstream_heartbeat_interval;  /* 0 = 60 (NVFlare's) */
    double upstream_dead_after;          /* 0 = 3 x upstream_heartbeat_interval */
    double upstream_connect_timeout;     /* connect + TLS toward the server; 0 = handshake_timeout */
    double upstream_hello_timeout;       /* HELLO sent -> READY from the server; 0 = within the above */
    size_t shared_slack;                 /* extra queue a worker link may take from the shared upstream
                                            before the upstream pauses; 0 = link_buffer (use one stream window) */
    double stall_timeout;                /* a worker link over link_buffer that drains nothing for this
                                            long is closed; 0 = worker_heartbeat_timeout */
    bool no_pacing;                      /* [limits] pacing = false (also: environment CJRELAY_PACE=0) */
};

struct cj_upstream_cfg {
    const char *url;                     /* SCHEME://HOST:PORT, any network scheme (util/parse.h) */
    SSL_CTX *tls;                        /* client context for stcp/https/grpcs (net/tls.h), NULL otherwise; not owned */
    const char *tls_name;                /* grpcs: the name the server certificate must carry (NULL: the url's host) */
    struct evdns_base *dns;              /* NULL: the router makes one if the host is a name */
    double reconnect_min, reconnect_max; /* seconds; 0 = 0.5 / 30 */
};

struct cj_parent_cfg {
    const char *url;                     /* tcp://HOST:PORT (clear: FLARE's internal links), the CP's listener */
    double reconnect_min, reconnect_max; /* seconds; 0 = 0.5 / 30 */
};

struct cj_router_counters {
    uint64_t up_msgs, up_bytes;          /* forwarded toward the upstream (header + payload bytes) */
    uint64_t down_msgs, down_bytes;      /* forwarded toward workers */
    uint64_t local_msgs;                 /* addressed to me */
    uint64_t sent_msgs;                  /* originated here (replies, returns, notices, upper layers) */
    uint64_t returns_sent;               /* RETURN messages */
    uint64_t fwd_errors_sent;            /* sm__ERROR forwarder notices */
    uint64_t drops;                      /* every message dropped, whatever the reason (the next four included) */
    uint64_t drops_unroutable, drops_loop, drops_spoof, drops_too_big;
    uint64_t throttles;                  /* sources paused for a full destination */
    uint64_t slack_used;                 /* forwards into a worker over link_buffer taken on the upstream's slack */
    uint64_t stalled_closed;             /* worker links closed for not reading */
    uint64_t reconnects;                 /* upstream connection attempts after the first */
    uint64_t parent_msgs, parent_bytes;  /* forwarded toward the parent (header + payload bytes) */
    uint64_t parent_reconnects;          /* parent connection attempts after the first */
    uint64_t drops_parent_full;          /* toward the parent while its queue was over its bound
                                            (forwarded: also in drops; originated: refused to the caller) */
    uint64_t workers_accepted, workers_refused, workers_replaced;
    uint64_t inflight_lost;              /* worker requests in flight through the upstream when it was lost */
    uint64_t inflight_untracked;         /* worker requests not remembered: the oldest forgotten at
                                            CJ_ROUTER_INFLIGHT_MAX per worker, too long, or out of memory */
    uint64_t holds;                      /* links paused for a consumer behind (cj_router_hold) */
    uint64_t holds_lapsed;               /* ... and resumed after the lapse, still behind */
};

/* Worker requests in flight through the upstream remembered per worker link. */
#define CJ_ROUTER_INFLIGHT_MAX 64

/* Takes msg (free it or hand it on).  msg->from is the link it came on. */
typedef void (*cj_router_handler_fn)(struct cj_router *r, struct cj_msg *msg, void *ctx);

/* Adds headers (auth keys) to a message the router itself creates toward
 * destination: replies (cj_router_reply, bye, "no callback") and sm__ERROR
 * forwarder notices; called before the cellnet keys are added.  Not for
 * RETURNs (NVFlare adds none to them), not for forwarded messages, and not for
 * cj_router_originate/send/send_block (their callers add what they need). */
typedef void (*cj_router_stamp_fn)(struct cj_router *r, struct cj_hb *hb, const char *destination, void *ctx);

/* Upper layers' view of link changes (all optional). */
struct cj_router_events {
    void (*worker_up)(struct cj_router *r, const char *fqcn, struct cj_link *l, void *ctx);
    void (*worker_down)(struct cj_router *r, const char *fqcn, const char *why, void *ctx);
    void (*upstream_up)(struct cj_router *r, const char *peer, void *ctx);
    void (*upstream_down)(struct cj_router *r, const char *why, void *ctx);
    void (*parent_up)(struct cj_router *r, const char *peer, void *ctx);
    void (*parent_down)(struct cj_router *r, const char *why, void *ctx);   /* only after parent_up */
};

enum cj_upstream_state { CJ_UP_DISABLED, CJ_UP_CONNECTING, CJ_UP_UP, CJ_UP_BACKOFF };

struct cj_router *cj_router_new(struct event_base *base, const struct cj_router_cfg *cfg, struct cj_err *err);
/* Closes every link and listener (no callbacks) and frees the router.  Not
 * from inside a router or link callback.  The event base may be freed after. */
void cj_router_free(struct cj_router *r);

const char *cj_router_me(const struct cj_router *r);
struct event_base *cj_router_base(const struct cj_router *r);

/* ---- local dispatch ------------------------------------------------------------- */

/* Handler for messages addressed to me on (channel, topic).  topic NULL =
 * every topic of channel; channel NULL too = the default handler.  A second
 * registration of the same key replaces the first; fn NULL removes it.
 * Lookup order: (channel, topic), (channel, any), default, built-ins
 * (cellnet.channel/bye -> reply ok), then: a request expecting a reply gets
 * process_exception "no callback"; anything else is dropped. */
int cj_router_handle(struct cj_router *r, const char *channel, const char *topic, cj_router_handler_fn fn,
                     void *ctx);
void cj_router_set_stamp(struct cj_router *r, cj_router_stamp_fn fn, void *ctx);
/* A virtual cell: a direct child fqcn of me played in this process (the pipe
 * peer of a release trainer, lib/fl/pipe.c).  Every message whose destination
 * is fqcn is handed to fn (which takes it) instead of a child link; what it
 * sends carries its own cn__origin (cj_router_send_block).  fn NULL removes it.
 * At most 4.  0, or -1 (not a direct child, no room). */
int cj_router_virtual(struct cj_router *r, const char *fqcn, cj_router_handler_fn fn, void *ctx);
void cj_router_set_events(struct cj_router *r, const struct cj_router_events *ev, void *ctx);

/* ---- links ----------------------------------------------------------------------- */

/* Starts (and keeps) the upstream connection.  Once only. */
int cj_router_upstream_start(struct cj_router *r, const struct cj_upstream_cfg *u, struct cj_err *err);
enum cj_upstream_state cj_router_upstream_state(const struct cj_router *r);

/* Why the upstream last failed and when the next attempt is, for show info. */
struct cj_outlink_status {
    const char *last_error;   /* "unreachable: <why>" or "lost: <why>"; "" = never failed */
    time_t last_error_at;     /* wall clock; 0 = never */
    int attempts;             /* failed attempts in the current back-off */
    double retry_in;          /* seconds to the next attempt while backing off, else 0 */
};
void cj_router_upstream_status(const struct cj_router *r, struct cj_outlink_status *st);
const char *cj_router_upstream_state_name(enum cj_upstream_state s);
/* The upstream link when it is up, else NULL. */
struct cj_link *cj_router_upstream(const struct cj_router *r);

/* Starts (and keeps) the link to the parent cell, me minus its last part (the
 * CP of a client job), handshaking as me.  Once only; before or after the
 * upstream.  Its READY must name the parent, else the attempt fails. */
int cj_router_parent_start(struct cj_router *r, const struct cj_parent_cfg *cfg, struct cj_err *err);
/* CJ_UP_DISABLED when no parent link was started; names: cj_router_upstream_state_name. */
enum cj_upstream_state cj_router_parent_state(const struct cj_router *r);
/* The parent link when it is up, else NULL. */
struct cj_link *cj_router_parent(const struct cj_router *r);

/* A worker connection (accepted socket; the router owns fd from now on). */
int cj_router_accept(struct cj_router *r, evutil_socket_t fd, const char *peer_addr);
/* Listens on a worker address (unix:PATH or loopback tcp://; port 0 allowed)
 * and accepts into cj_router_accept.  mode: unix socket file mode (0 = umask).
 * Returns the bound port for tcp (0 for unix) in *port if not NULL. */
int cj_router_listen(struct cj_router *r, const char *url, unsigned mode, unsigned *port, struct cj_err *err);

/* The uids a unix worker listener accepts (SO_PEERCRED), for listeners
 * opened after this call; n == 0: any peer the socket's mode admits. */
void cj_router_set_worker_uids(struct cj_router *r, const uid_t *uids, int n);

/* The up link of child `fqcn` (a direct child of me), or NULL. */
struct cj_link *cj_router_child(const struct cj_router *r, const char *fqcn);
/* Up worker links: fills out[0..max) and returns how many there are in all. */
size_t cj_router_children(const struct cj_router *r, struct cj_link **out, size_t max);

/* Next hop for destination: the link and its peer name (what cn__to must
 * say), or NULL when unroutable (*why says why) or when dest == me. */
struct cj_link *cj_router_next_hop(const struct cj_router *r, const char *dest, const char **why);

/* The peer name of that next hop (what cn__to must say), or NULL. */
const char *cj_router_next_hop_name(const struct cj_router *r, const char *dest);

/* ---- messages --------------------------------------------------------------------- */

/* A message that arrived on a link (msg->from set) or is injected: routes it.
 * Takes msg. */
void cj_router_input(struct cj_router *r, struct cj_msg *msg);

/* Sends a message this cell built (headers final, cn__to already the next
 * hop).  dest == me is dispatched locally.  Takes msg, also on failure
 * (-1, err: unroutable or the link refused it). */
int cj_router_send(struct cj_router *r, struct cj_msg *msg, bool bulk, struct cj_err *err);

/* Sends a finished header block (copied) and payload (contents moved; the
 * evbuffer object stays the caller's; NULL = none) that this cell originates
 * toward destination, as control or bulk.  For the stream layer's io->send.
 * Never dispatches locally: destination == me fails.  -1 with err when there
 * is no route or the link refused the frame (payload then untouched). */
int cj_router_send_block(struct cj_router *r, const char *destination, const uint8_t *hblk, size_t hlen,
                         struct evbuffer *payload, bool control, struct cj_err *err);

/* Builds and sends a message from hb (application/sm__/auth keys already
 * added; the cellnet keys are added here, the stamp hook is NOT called) and m.  The router
 * fills m->me, m->to (next hop) and zero times (now); payload is moved
 * (NULL = none).  hb is destroyed.  -1 with err when unroutable or on a
 * build error (payload then left as it was). */
int cj_router_originate(struct cj_router *r, struct cj_hb *hb, const struct cj_hdr_msg *m,
                        struct evbuffer *payload, bool bulk, struct cj_err *err);

/* A direct reply to req (doc/protocol/cellnet.md §2): return_code (NULL = "ok"), error
 * text (NULL = none), payload (moved; NULL = none) with its encoding (NULL =
 * "none" / "bytes" when there is a payload). */
int cj_router_reply(struct cj_router *r, const struct cj_msg *req, const char *return_code, const char *error,
                    struct evbuffer *payload, const char *payload_encoding, struct cj_err *err);

const struct cj_router_counters *cj_router_counters(const struct cj_router *r);

/* A consumer of this cell's own streams from `source` is behind (on) or
 * caught up (off): the link toward source stops reading while any consumer
 * holds it, at most a couple of seconds at a time (then the stream's window
 * bounds what arrives).  Holds are counted per link; a hold on a link that
 * goes away goes with it.  -1: no live link toward source. */
int cj_router_hold(struct cj_router *r, const char *source, bool on);

#endif
