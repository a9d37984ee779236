/* SPDX-License-Identifier: Apache-2.0 */
/* router_int.h — what the files of the relay cell share (router.c: routing,
 * forwarding, local dispatch; inflight.c: worker requests in flight upstream;
 * pacing.c: pacing, slack, stalls and holds; reconnect.c: the outbound links
 * and their back-off; parent.c: the parent link and what goes to it).  Not part of the API: that is router.h. */
#ifndef CJ_CELL_ROUTER_INT_H
#define CJ_CELL_ROUTER_INT_H

#include <stdbool.h>
#include <time.h>
#include <stdint.h>

#include "cell/router.h"
#include "net/addr.h"
#include "util/clock.h"
#include "wire/fqcn.h"

/* Pacing (see pacing.c): the queue a reading worker may have before the
 * upstream waits for it, how long without draining that much before a worker
 * counts as not reading, and how recent a worker's traffic must be for it to
 * count as possibly waiting on the upstream. */
#define WORKER_PACE ((size_t)2 << 20)
/* CJRELAY_PACE=0 in the environment turns pacing off (the relay then holds up
 * to one sender window per worker, as before pacing): for comparisons (make
 * bench) and as a way back should pacing misbehave somewhere. */
#define PACE_ENV "CJRELAY_PACE"
#define PACE_STALL 5.0         /* seconds */
#define PACE_ACTIVE 1.0        /* seconds */

enum role { ROLE_UPSTREAM = 1, ROLE_WORKER = 2, ROLE_PARENT = 3 };

/* A worker's request in flight through the upstream (see router.h): its
 * stream (sm__id, sm__ri) and, for the log, its cn__destination.  Fixed size:
 * sm__ri and cn__destination packed NUL-terminated into text (a request whose
 * strings do not fit is not remembered, and counted). */
#define INFLIGHT_TEXT 384
struct inflight {
    uint64_t seq;              /* 0: free slot; else the order it was remembered in (oldest: smallest) */
    uint64_t sm_id;
    bool sm_id_neg;
    uint16_t dest;             /* offset of cn__destination in text; sm__ri is at 0 */
    char text[INFLIGHT_TEXT];
};

/* Per-link router data (cj_link_set_data). */
struct rlink {
    enum role role;
    bool up;
    char fqcn[CJ_FQCN_MAX + 1];
    size_t stall_queued;       /* queued bytes when the link was last seen over its bound */
    double stall_since;        /* monotonic time it stopped draining; 0 = not stalled */
    uint64_t fwd;              /* bytes forwarded into this worker link */
    uint64_t drain_mark;       /* drained bytes (fwd - queued) when read_at was last set */
    double read_at;            /* monotonic time it last drained a pace's worth; 0 = never */
    double fed_at;             /* monotonic time a burst of forwards into it began; 0 = none yet */
    double active_at;          /* monotonic time of its last forwarded traffic, either way */
    struct inflight *inflight; /* worker: CJ_ROUTER_INFLIGHT_MAX slots, allocated at its first request */
    unsigned n_inflight;       /* used slots */
    unsigned holds;            /* cj_router_hold: consumers behind on what this link brings */
    double hold_since;         /* monotonic time the link was paused for them; 0 = not paused */
};

struct handler {
    char *channel, *topic;     /* NULL channel: default; NULL topic: any */
    cj_router_handler_fn fn;
    void *ctx;
};

/* An outbound link (the upstream, the parent) and its back-off (reconnect.c). */
struct outlink {
    struct cj_router *r;
    enum role role;
    const char *what;          /* "upstream" or "parent": for logs */
    char url[CJ_ADDR_TEXT_MAX];
    char tls_name[CJ_EP_ADDR_MAX]; /* grpcs: the server certificate's expected name ("" = the url's host) */
    SSL_CTX *tls;
    struct cj_link_cfg cfg;
    char expect[CJ_FQCN_MAX + 1]; /* the name its READY must carry ("" = any) */
    double rmin, rmax;
    int attempt;
    bool proven;               /* a DATA frame arrived since the link came up */
    double since;              /* monotonic time the current link came up */
    enum cj_upstream_state state;
    struct cj_link *link;      /* the current link, any state */
    struct event *timer;
    char last_why[256];        /* reason of the last failure (log once); cleared when up */
    char last_error[256];      /* the last failure, kept after a recovery: show info */
    time_t last_error_at;      /* its wall-clock time, 0 = none yet */
    double retry_at;           /* monotonic time of the next attempt while backing off */
    uint64_t *reconnects;      /* counter of attempts after the first */
};

#define ROUTER_VIRTUAL_MAX 4

struct cj_router {
    struct event_base *base;
    char me[CJ_FQCN_MAX + 1];
    struct {                   /* virtual cells under me (cj_router_virtual) */
        char fqcn[CJ_FQCN_MAX + 1];
        cj_router_handler_fn fn;
        void *ctx;
    } virt[ROUTER_VIRTUAL_MAX];
    struct cj_link_cfg worker_cfg;

    struct cj_link **links;    /* every link, any state */
    size_t n_links, cap_links;

    struct cj_listener **listeners;
    size_t n_listeners;
    int n_worker_uids;
    uid_t worker_uids[CJ_LISTENER_UIDS_MAX];   /* unix workers' accepted uids; none: any */

    struct handler *handlers;
    size_t n_handlers;

    cj_router_stamp_fn stamp;
    void *stamp_ctx;
    struct cj_router_events ev;
    void *ev_ctx;

    struct outlink up, parent; /* parent.state CJ_UP_DISABLED: no parent link configured */
    struct evdns_base *dns;
    bool own_dns;
    uint64_t rng;

    /* drop log limiter */
    double drop_window;
    unsigned drop_lines;
    uint64_t drop_suppressed;

    size_t link_buffer, shared_slack;
    double stall_timeout;
    struct event *stall_timer;
    size_t pace;               /* min(link_buffer, WORKER_PACE) with pacing, else link_buffer: the
                                  worker links' own bound */
    bool pacing;               /* on unless [limits] pacing = false or PACE_ENV is "0" */
    struct cj_link *paced_on;  /* the worker the upstream is paused for (pacing), or NULL */
    uint64_t inflight_seq;     /* last struct inflight.seq given */

    struct cj_router_counters c;
};

/* What a forwarder error notice says about the stream it fails. */
struct notice {
    const char *origin;        /* the stream's cn__origin: where the notice goes */
    const char *dest;          /* the stream's cn__destination (sm__fd) */
    const char *ch, *tp, *ri;  /* NULL: absent */
    uint64_t sm_id;
    bool sm_id_neg;
};

static inline struct rlink *rl(const struct cj_link *l) { return cj_link_data(l); }

static inline bool is_upstream(const struct cj_link *l) { return l && rl(l) && rl(l)->role == ROLE_UPSTREAM; }

/* router.c */
int router_add_link(struct cj_router *r, struct cj_link *l);
void router_remove_link(struct cj_router *r, struct cj_link *l);
void router_rlink_free(struct rlink *d);
void router_drop_log(struct cj_router *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int router_send_notice(struct cj_router *r, const struct notice *n, const char *failure, bool unreachable,
                       struct cj_err *err);
void router_link_msg(struct cj_link *l, struct cj_msg *m, void *ctx);

/* inflight.c */
bool inflight_is_request_start(const struct cj_hdr *h);
bool inflight_ends_request(const struct cj_hdr *h);
void inflight_track(struct cj_router *r, struct cj_link *l, const struct cj_hdr *h);
void inflight_forget(struct rlink *d, const char *ri);
void inflight_lose_all(struct cj_router *r, const char *why);

/* reconnect.c */
int outlink_start(struct outlink *o, struct cj_err *err);
struct outlink *router_outlink(struct cj_router *r, const struct cj_link *l);
void outlink_heard(struct outlink *o);
void outlink_free(struct outlink *o);

/* parent.c */
bool router_for_parent(const struct cj_router *r, const char *dest);
bool router_parent_origin_ok(const struct cj_router *r, const char *origin);
bool router_parent_full(const struct cj_link *dst);
void router_parent_init(struct cj_router *r, const struct cj_link_cfg *base_cfg);

/* pacing.c */
bool upstream_slack(struct cj_router *r, struct cj_link *src, struct cj_link *dst, double now);
void unpace(struct cj_router *r, const char *why);
void upstream_sent(struct cj_router *r, struct cj_link *dst, struct cj_link *src);
void worker_drained(struct cj_link *l, void *ctx);
void check_stalls(evutil_socket_t fd, short what, void *arg);

#endif
