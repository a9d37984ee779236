/* SPDX-License-Identifier: Apache-2.0 */
/* memnet.h — an in-memory network for the unit tests: up to MEMNET_MAX sm__
 * stream endpoints (lib/stream) in one event loop, joined by an io that
 * delivers each message through the loop (never from inside a send), records
 * every message sent, and lets a test drop, duplicate, hold and release them.
 *
 * Used by the test_stream*.c suites, test_dl, test_spool, test_upstream and test_session.
 * A test that needs state of its own embeds a struct memnet as the first
 * member of its own struct and gets it back in its filter. */
#ifndef CJ_TEST_MEMNET_H
#define CJ_TEST_MEMNET_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "testutil.h"
#include "stream/stream.h"
#include "wire/header.h"

#define MEMNET_MAX 8

/* What a filter decides for one message. */
enum memnet_act { MEMNET_DELIVER, MEMNET_DROP, MEMNET_DUP, MEMNET_HOLD };

struct memnet;
/* Sees each routable message as it is sent (pl holds its payload) and decides its fate. */
typedef enum memnet_act (*memnet_filter_fn)(struct memnet *n, int from, const struct cj_hdr *h,
                                            struct evbuffer *pl);

struct memnet_msg {
    struct memnet_msg *next;
    int to;
    uint8_t *blk;                 /* the header block */
    size_t len;
    struct evbuffer *pl;
};

struct memnet_cap {               /* a message as it was sent, in order */
    int from;
    char dest[256];
    uint8_t *blk;
    size_t len;
    size_t plen;
    bool control;
    uint8_t *pl;                  /* the payload bytes, when keep_pl */
};

struct memnet_port {              /* the io ctx of one endpoint */
    struct memnet *n;
    int from;
};

struct memnet {
    struct event_base *base;
    int count;
    struct cj_stream_ep *ep[MEMNET_MAX];
    char name[MEMNET_MAX][64];
    struct memnet_port port[MEMNET_MAX];
    struct memnet_msg *q, **qt;       /* to deliver at the next turn of the loop */
    struct memnet_msg *held, **ht;    /* held by the filter until memnet_release */
    struct event *kick, *guard;
    memnet_filter_fn filter;          /* NULL: deliver everything */
    bool no_route;                    /* sends fail (-1), as with no link */
    bool keep_pl;                     /* captures keep the payload bytes */
    struct memnet_cap *caps;
    int n_caps, cap_caps;
};

static inline double memnet_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void memnet_decode(struct cj_hdr *h, const uint8_t *blk, size_t len)
{
    struct cj_err e = { 0 };
    if (cj_hdr_decode(h, blk, len, &e)) fail_msg("header does not decode: %s", e.msg);
}

static inline void memnet_push(struct memnet_msg ***tail, struct memnet_msg *m)
{
    m->next = NULL;
    **tail = m;
    *tail = &m->next;
}

static inline void memnet_free_list(struct memnet_msg *m)
{
    while (m) {
        struct memnet_msg *next = m->next;
        evbuffer_free(m->pl);
        free(m->blk);
        free(m);
        m = next;
    }
}

static inline void memnet_deliver(struct memnet *n, struct memnet_msg *m)
{
    struct cj_hdr h;
    memnet_decode(&h, m->blk, m->len);
    cj_stream_input(n->ep[m->to], &h, m->pl);
    assert_int_equal(evbuffer_get_length(m->pl), 0);   /* the endpoint took the contents */
    evbuffer_free(m->pl);
    free(m->blk);
    free(m);
}

static inline void memnet_kick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct memnet *n = arg;
    struct memnet_msg *m = n->q;
    (void)fd, (void)what;
    n->q = NULL;
    n->qt = &n->q;
    while (m) {
        struct memnet_msg *next = m->next;
        memnet_deliver(n, m);
        m = next;
    }
}

/* Keeps the loop turning, so that RUN_UNTIL sees time pass with nothing to deliver. */
static inline void memnet_guard_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

static inline struct memnet_msg *memnet_msg_new(int to, const uint8_t *blk, size_t len, struct evbuffer *pl)
{
    struct memnet_msg *m = calloc(1, sizeof *m);
    m->to = to;
    m->blk = malloc(len);
    memcpy(m->blk, blk, len);
    m->len = len;
    m->pl = pl;
    return m;
}

static inline void memnet_capture(struct memnet *n, int from, const char *dest, const uint8_t *hblk, size_t hlen,
                           struct evbuffer *payload, bool control)
{
    size_t plen = evbuffer_get_length(payload);
    if (n->n_caps == n->cap_caps) {
        n->cap_caps = n->cap_caps ? 2 * n->cap_caps : 64;
        n->caps = realloc(n->caps, n->cap_caps * sizeof *n->caps);
    }
    struct memnet_cap *c = &n->caps[n->n_caps++];
    c->from = from;
    snprintf(c->dest, sizeof c->dest, "%s", dest);
    c->blk = malloc(hlen);
    memcpy(c->blk, hblk, hlen);
    c->len = hlen;
    c->plen = plen;
    c->control = control;
    c->pl = NULL;
    if (n->keep_pl) {
        c->pl = malloc(plen ? plen : 1);
        evbuffer_copyout(payload, c->pl, plen);
    }
}

/* The endpoints' send op: takes the payload's contents (as a link would) and queues them. */
static inline int memnet_send(void *ctx, const char *dest, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                       bool control)
{
    struct memnet_port *port = ctx;
    struct memnet *n = port->n;
    if (n->no_route) return -1;
    struct cj_hdr h;
    memnet_decode(&h, hblk, hlen);
    assert_string_equal(h.destination, dest);
    memnet_capture(n, port->from, dest, hblk, hlen, payload, control);

    struct evbuffer *pl = evbuffer_new();
    evbuffer_add_buffer(pl, payload);
    int to = -1;
    for (int i = 0; i < n->count; i++)
        if (strcmp(n->name[i], dest) == 0) to = i;
    enum memnet_act act = to < 0 ? MEMNET_DROP : n->filter ? n->filter(n, port->from, &h, pl) : MEMNET_DELIVER;
    if (act == MEMNET_DROP) {
        evbuffer_free(pl);
        return 0;
    }
    if (act == MEMNET_DUP) {
        struct evbuffer *dup = evbuffer_new();
        evbuffer_add(dup, evbuffer_pullup(pl, -1), evbuffer_get_length(pl));
        memnet_push(&n->qt, memnet_msg_new(to, hblk, hlen, dup));
    }
    struct memnet_msg *m = memnet_msg_new(to, hblk, hlen, pl);
    if (act == MEMNET_HOLD) memnet_push(&n->ht, m);
    else memnet_push(&n->qt, m);
    event_active(n->kick, EV_READ, 1);
    return 0;
}

/* Queues the held messages for delivery, in order or reversed; returns how many. */
static inline int memnet_release(struct memnet *n, bool reverse)
{
    struct memnet_msg *m = n->held, *list = NULL;
    int k = 0;
    n->held = NULL;
    n->ht = &n->held;
    if (reverse) {
        while (m) {
            struct memnet_msg *next = m->next;
            m->next = list;
            list = m;
            m = next;
        }
        m = list;
    }
    while (m) {
        struct memnet_msg *next = m->next;
        memnet_push(&n->qt, m);
        m = next;
        k++;
    }
    event_active(n->kick, EV_READ, 1);
    return k;
}

/* Sets up n (zeroed first) with one endpoint per name; lim, if given, has one entry per endpoint. */
static inline void memnet_init(struct memnet *n, int count, const char *const names[], const struct cj_stream_limits *lim)
{
    assert_true(count > 0 && count <= MEMNET_MAX);
    memset(n, 0, sizeof *n);
    n->base = event_base_new();
    n->count = count;
    n->qt = &n->q;
    n->ht = &n->held;
    n->kick = event_new(n->base, -1, 0, memnet_kick_cb, n);
    n->guard = event_new(n->base, -1, EV_PERSIST, memnet_guard_cb, n);
    struct timeval tv = { 0, 5000 };
    event_add(n->guard, &tv);
    for (int i = 0; i < count; i++) {
        snprintf(n->name[i], sizeof n->name[i], "%s", names[i]);
        n->port[i] = (struct memnet_port){ n, i };
        struct cj_stream_io io = { .ctx = &n->port[i], .send = memnet_send };
        n->ep[i] = cj_stream_new(n->base, names[i], &io, lim ? &lim[i] : NULL);
        assert_non_null(n->ep[i]);
    }
}

/* Frees the endpoints, what is still queued or held (undelivered), the captures and the loop. */
static inline void memnet_fini(struct memnet *n)
{
    for (int i = 0; i < n->count; i++) cj_stream_free(n->ep[i]);
    memnet_free_list(n->q);
    memnet_free_list(n->held);
    for (int i = 0; i < n->n_caps; i++) {
        free(n->caps[i].blk);
        free(n->caps[i].pl);
    }
    free(n->caps);
    event_free(n->kick);
    event_free(n->guard);
    event_base_free(n->base);
}

static inline struct memnet *memnet_new(int count, const char *const names[], const struct cj_stream_limits *lim)
{
    struct memnet *n = malloc(sizeof *n);
    memnet_init(n, count, names, lim);
    return n;
}

static inline void memnet_free(struct memnet *n)
{
    memnet_fini(n);
    free(n);
}

/* Turns the loop until cond holds or secs have passed.  n is a struct memnet,
 * or a test's struct that has one as its first member. */
#define RUN_UNTIL(n, cond, secs)                                                                        \
    do {                                                                                                \
        double end_ = memnet_now() + (secs);                                                            \
        while (!(cond) && memnet_now() < end_)                                                          \
            event_base_loop(((struct memnet *)(n))->base, EVLOOP_ONCE);                                 \
    } while (0)

/* Lets the loop run for secs. */
#define settle(n, secs) RUN_UNTIL(n, false, secs)

#endif
