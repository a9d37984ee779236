/* SPDX-License-Identifier: Apache-2.0 */
/* linkrec.h — what the link and router unit tests share: a monotonic clock,
 * RUN_UNTIL over one event loop, a link owner that records what its link did
 * (struct rec with rec_ops), and a raw peer that writes and reads frames by
 * hand on a socket.
 *
 * Used by test_link and test_router.  RUN_UNTIL takes a pointer to any
 * struct with an event_base *base member (the test's env or world). */
#ifndef CJ_TEST_LINKREC_H
#define CJ_TEST_LINKREC_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "testutil.h"
#include "net/link.h"
#include "wire/fqcn.h"
#include "wire/frame.h"
#include "wire/msg.h"

static inline double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A persistent 5 ms timer runs it, so that EVLOOP_ONCE never blocks long. */
static inline void tick_cb(evutil_socket_t fd, short w, void *a) { (void)fd; (void)w; (void)a; }

/* Runs the loop of x (x->base) until cond holds or secs have passed. */
#define RUN_UNTIL(x, cond, secs)                                                      \
    do {                                                                              \
        double end_ = now_mono() + (secs);                                            \
        while (!(cond) && now_mono() < end_) event_base_loop((x)->base, EVLOOP_ONCE); \
    } while (0)

/* ---- a link's owner, recording what it saw ---------------------------------------- */

#define REC_MSGS 256
struct rec {
    struct cj_link *link;
    int up, down, drains, hellos;
    bool refuse;                  /* on_hello refuses the peer */
    char why[1024];               /* the reason of the last on_down */
    char hello[CJ_FQCN_MAX + 1];  /* the name the peer's hello gave */
    struct cj_msg *msgs[REC_MSGS];
    int nmsgs;
};

static inline void rec_up(struct cj_link *l, void *ctx) { (void)l; ((struct rec *)ctx)->up++; }

static inline void rec_down(struct cj_link *l, const char *why, void *ctx)
{
    (void)l;
    struct rec *r = ctx;
    r->down++;
    snprintf(r->why, sizeof r->why, "%s", why);
    r->link = NULL;
}

static inline void rec_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    (void)l;
    struct rec *r = ctx;
    if (r->nmsgs < REC_MSGS) r->msgs[r->nmsgs++] = m;
    else cj_msg_free(m);
}

static inline int rec_hello(struct cj_link *l, const char *peer, char *why, size_t n, void *ctx)
{
    (void)l;
    struct rec *r = ctx;
    r->hellos++;
    snprintf(r->hello, sizeof r->hello, "%s", peer);
    if (r->refuse) {
        snprintf(why, n, "test refuses %s", peer);
        return -1;
    }
    return 0;
}

static inline void rec_drain(struct cj_link *l, void *ctx) { (void)l; ((struct rec *)ctx)->drains++; }

static const struct cj_link_ops rec_ops = {
    .on_up = rec_up, .on_msg = rec_msg, .on_down = rec_down, .on_hello = rec_hello, .on_drain = rec_drain,
};

/* Frees the messages recorded so far. */
static inline void rec_clear(struct rec *r)
{
    for (int i = 0; i < r->nmsgs; i++) cj_msg_free(r->msgs[i]);
    r->nmsgs = 0;
}

/* Frees the messages and the link (if it is still up). */
static inline void rec_free_link(struct rec *r)
{
    rec_clear(r);
    if (r->link) cj_link_free(r->link);
    r->link = NULL;
}

/* ---- a raw peer: frames written and read by hand ----------------------------------- */

/* Writes all of p to fd (made non-blocking), running base while the socket is full. */
static inline void raw_write(struct event_base *base, int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    double end = now_mono() + 5;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
        } else {
            assert_true(k < 0 && (errno == EAGAIN || errno == EINTR));
            assert_true(now_mono() < end);
            event_base_loop(base, EVLOOP_ONCE);
        }
    }
}

/* Reads one whole frame from fd (running base meanwhile).  Returns its
 * length, 0 on EOF or reset, -1 on timeout. */
static inline long raw_read_frame(struct event_base *base, int fd, uint8_t *buf, size_t cap, double secs)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t have = 0, need = CJ_FRAME_PREFIX_LEN;
    double end = now_mono() + secs;
    while (now_mono() < end) {
        ssize_t r = read(fd, buf + have, need - have);
        if (r == 0) return 0;
        if (r > 0) {
            have += (size_t)r;
            if (have == CJ_FRAME_PREFIX_LEN && need == CJ_FRAME_PREFIX_LEN) {
                need = (size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3];
                assert_true(need >= CJ_FRAME_PREFIX_LEN && need <= cap);
            }
            if (have == need) return (long)have;
            continue;
        }
        if (errno == ECONNRESET) return 0;
        event_base_loop(base, EVLOOP_ONCE);
    }
    return -1;
}

#endif
