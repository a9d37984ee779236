/* SPDX-License-Identifier: Apache-2.0 */
/* link.h — one SFM connection to a neighbour cell (doc/design.md, doc/protocol/sfm.md).
 *
 * A link owns one cj_conn (net/conn.h: a socket, or OpenSSL over a socket for
 * stcp, read and written in bulk) and does everything below the cellnet message: connect, TLS, the HELLO/READY
 * handshake (active side sends HELLO, passive side answers READY), PING after
 * idle, PONG to every PING, a dead-peer bound, frame splitting, and two output
 * queues.  DATA frames come out as struct cj_msg (cell/msg.h): header block
 * copied and decoded, payload chains moved out of the input buffer.
 *
 * States: connecting -> tls (stcp only) -> handshake -> up -> closed.  Every
 * transition is logged once, with the link's name and peer.
 *
 * Output: control frames (HELLO/READY, PING/PONG, and what the owner sends
 * with control = true: messages the relay originates) go straight to the
 * wire queue (the conn's output).  Bulk frames (control = false:
 * forwarded messages) wait in a link-level queue and move to the wire whole,
 * one frame at a time, only while the wire queue holds less than
 * CJ_LINK_WIRE_LOW.  So a control frame waits behind at most
 * CJ_LINK_WIRE_LOW + one frame, however much bulk traffic is queued.
 *
 * Backpressure: cj_link_queued() = wire queue + bulk queue.  After a send into
 * dst, the owner calls cj_link_throttle(src, dst): when dst holds more than its
 * link_buffer, src stops reading until dst has drained below link_buffer / 2.
 * A source stops before reading its next frame, so a destination holds at most
 * link_buffer + one frame per source.  Input is bounded too: no read starts
 * once the input holds max(one frame, CJ_LINK_READ_AHEAD), and one read adds
 * at most CJ_CONN_BLOCK; frames are handled as soon as they are whole.
 *
 * Lifetime: cj_link_connect/cj_link_attach either fail at once (NULL, err set,
 * no callback) or later report the end of the link exactly once through
 * on_down.  After on_down the owner must drop its pointer: the link is freed
 * when control returns to the event loop.  cj_link_free closes a link without
 * calling on_down (shutdown); it may be called from anywhere, including the
 * link's own callbacks.  No callback is ever made from inside the call that
 * created the link. */
#ifndef CJ_NET_LINK_H
#define CJ_NET_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "wire/msg.h"
#include "util/err.h"

struct evdns_base;
struct cj_link;

#define CJ_LINK_WIRE_LOW (256u * 1024)           /* bulk refills the wire below this */
#define CJ_LINK_HANDSHAKE_FRAME_MAX (64u * 1024) /* largest frame before the link is up */
#define CJ_LINK_READ_AHEAD (1024u * 1024)        /* input held beyond the frame being assembled */
#define CJ_LINK_CTRL_MAX 65536u                  /* longest HELLO/READY/PING/PONG frame accepted */
#define CJ_LINK_HANDSHAKE_TIMEOUT 10.0           /* seconds, when cfg says 0 */
#define CJ_LINK_BUFFER_DEFAULT (64u * 1024 * 1024)
#define CJ_LINK_NAME_MAX 63

enum cj_link_state {
    CJ_LINK_CONNECTING,   /* resolving the name / TCP or unix connect (active side) */
    CJ_LINK_TLS,          /* TLS handshake under way */
    CJ_LINK_HANDSHAKE,    /* active: HELLO sent, waiting for READY; passive: waiting for HELLO */
    CJ_LINK_UP,
    CJ_LINK_CLOSED,
};

struct cj_link_cfg {
    const char *name;            /* for logs ("upstream", "worker"); copied, cut at CJ_LINK_NAME_MAX */
    const char *me;              /* our FQCN, sent in HELLO/READY; copied */
    uint32_t max_frame;          /* reader limit on frame length; 0 = CJ_FRAME_MAX_DEFAULT */
    double handshake_timeout;    /* connect + TLS + HELLO/READY, seconds; 0 = default */
    double hello_timeout;        /* when > 0, an outgoing link's HELLO -> READY has this long of its
                                  * own (handshake_timeout then bounds connect + TLS only) */
    double heartbeat_interval;   /* PING after this long without receiving; 0 = never */
    double dead_after;           /* close after this long without receiving; 0 = never */
    size_t link_buffer;          /* output bound for cj_link_over/throttle; 0 = default */
    bool quiet;                  /* log state changes at debug (the owner reports retries itself) */
    const char *tls_name;        /* grpcs: the name the server's certificate must carry (NULL or "": the
                                  * URL's host); copied */
    int scheme;                  /* cj_link_attach: how the frames are carried (CJ_EP_HTTP, _GRPC, ...;
                                  * 0 = bare, as tcp); cj_link_connect takes its URL's */
};

struct cj_link_counters {
    uint64_t frames_in, bytes_in;       /* every frame, prefix included */
    uint64_t frames_out, bytes_out;     /* put on the wire queue */
    uint64_t msgs_in;                   /* DATA frames delivered to on_msg */
    uint64_t pings_in, pongs_in, pings_out, pongs_out;
    uint64_t frames_dropped;            /* FRAG/ACK, DATA without a required key */
    uint64_t throttled;                 /* times this link's reading was paused for a full destination */
    size_t queued_peak;                 /* highest cj_link_queued() seen */
};

struct cj_link_ops {
    /* Handshake complete (peer name known: cj_link_peer). */
    void (*on_up)(struct cj_link *l, void *ctx);
    /* A DATA frame; the callee owns msg (msg->from == l). */
    void (*on_msg)(struct cj_link *l, struct cj_msg *msg, void *ctx);
    /* The link is closed; called once.  Drop every pointer to l. */
    void (*on_down)(struct cj_link *l, const char *why, void *ctx);
    /* Passive side: accept peer_fqcn (already a valid FQCN, not our own name)?
     * 0 = accept; < 0 = refuse, with the reason written to why.  NULL = accept. */
    int (*on_hello)(struct cj_link *l, const char *peer_fqcn, char *why, size_t whysz, void *ctx);
    /* Optional: cj_link_queued fell below link_buffer / 2 after being over it. */
    void (*on_drain)(struct cj_link *l, void *ctx);
};

/* Active link to url (tcp://, stcp://, unix:).  stcp needs tls (a client
 * context from net/tls.h); tcp/unix must have tls NULL.  Host names are
 * resolved with evdns on dns (NULL: only IP literals and localhost). */
struct cj_link *cj_link_connect(struct event_base *base, struct evdns_base *dns, const char *url, SSL_CTX *tls,
                                const struct cj_link_cfg *cfg, const struct cj_link_ops *ops, void *ctx,
                                struct cj_err *err);

/* A link over an already connected socket fd (taken over; closed on failure):
 * active = we send HELLO; passive = we wait for it.  tls non-NULL runs a TLS
 * client (active) or server (passive) handshake first.  peer_addr is for
 * logs (NULL: derived from the socket). */
struct cj_link *cj_link_attach(struct event_base *base, evutil_socket_t fd, bool active, SSL_CTX *tls,
                               const char *peer_addr, const struct cj_link_cfg *cfg,
                               const struct cj_link_ops *ops, void *ctx, struct cj_err *err);

/* Passive link on an accepted socket: cj_link_attach(.., active = false, ..). */
struct cj_link *cj_link_accept(struct event_base *base, evutil_socket_t fd, SSL_CTX *tls, const char *peer_addr,
                               const struct cj_link_cfg *cfg, const struct cj_link_ops *ops, void *ctx,
                               struct cj_err *err);

/* Sends one DATA frame: hblk (copied; 1..65535 bytes) then payload (its
 * chains are MOVED; NULL = none).  control: straight to the wire queue;
 * else the bulk queue.  Fails (-1, nothing sent, payload untouched) unless
 * the link is up, or when the frame would exceed the 32-bit length limit. */
int cj_link_send(struct cj_link *l, const uint8_t *hblk, size_t hlen, struct evbuffer *payload, bool control);

/* Sends msg's header block and payload and frees msg, on success only. */
int cj_link_send_msg(struct cj_link *l, struct cj_msg *msg, bool control);

/* Bytes waiting: wire queue + bulk queue. */
size_t cj_link_queued(const struct cj_link *l);
/* queued > link_buffer. */
bool cj_link_over(const struct cj_link *l);
/* Backpressure after a send into dst: when dst is over its link_buffer, src
 * stops reading until dst drains below half.  Returns true when src was
 * paused.  A src already paused for another destination stays on that one. */
bool cj_link_throttle(struct cj_link *src, struct cj_link *dst);

/* The owner's own pauses (independent of throttling), one bit per reason:
 * the link reads again when every reason is lifted. */
#define CJ_LINK_PAUSE_OWNER 1u   /* the owner's general pause (pacing) */
#define CJ_LINK_PAUSE_HOLD 2u    /* a consumer behind (cj_router_hold) */
void cj_link_pause_reading(struct cj_link *l, unsigned why);
void cj_link_resume_reading(struct cj_link *l, unsigned why);
/* Reading enabled (neither paused by the owner nor throttled)? */
bool cj_link_reading(const struct cj_link *l);

/* Closes the link now (logged with why) and calls on_down(why). */
void cj_link_close(struct cj_link *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Closes without on_down and frees (now, or when the current callback of this
 * link returns).  NULL is fine. */
void cj_link_free(struct cj_link *l);

/* ---- looking at a link ----------------------------------------------------- */

const char *cj_link_name(const struct cj_link *l);
const char *cj_link_peer(const struct cj_link *l);      /* peer FQCN; "" before the handshake */
const char *cj_link_addr(const struct cj_link *l);      /* "tcp://host:port", "unix peer pid 12", ... */
enum cj_link_state cj_link_get_state(const struct cj_link *l);
const char *cj_link_state_name(enum cj_link_state s);
bool cj_link_is_active(const struct cj_link *l);
bool cj_link_is_tls(const struct cj_link *l);
double cj_link_rx_idle(const struct cj_link *l);         /* seconds since anything was received */
double cj_link_up_time(const struct cj_link *l);         /* seconds since up; 0 if not up */
const struct cj_link_counters *cj_link_counters(const struct cj_link *l);
void *cj_link_ctx(const struct cj_link *l);
/* One pointer of owner data (not used by the link). */
void cj_link_set_data(struct cj_link *l, void *data);
void *cj_link_data(const struct cj_link *l);

#endif
