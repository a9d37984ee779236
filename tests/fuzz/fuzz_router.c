/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_router.c — a real router (cell site-1.J1, no upstream) fed the input as
 * one worker link's byte stream: HELLO, then frames with header blocks and
 * payloads.  The worker side is a raw socketpair end; a second worker
 * (site-1.J1.trainer_2) is a real cj_link, so forwarding has somewhere to go;
 * a local handler takes channel "app" (everything else meets the built-ins).
 *
 * Input: byte 0 = flags
 *   bit 0     prepend a valid HELLO from site-1.J1.trainer_1 (else the input
 *             must carry its own handshake)
 *   bit 1     framed mode: the rest is records [kind][hlen:2][plen:2][header]
 *             [payload] (big endian), each turned into one frame whose prefix
 *             is right (kind 0: DATA, 1: DATA whose prefix header_len lies by
 *             the next byte, 2: PING, 3: PONG, 4: HELLO body as payload, else
 *             the record's bytes raw), so the mutations land in header blocks
 *   bits 2-4  piece size index: the stream is written in pieces of that many
 *             bytes (1, 3, 16, 17, 100, 512, 4096, all), running the loop between
 * and the rest is the stream.  The loop runs until the input is written (or the
 * router stops reading or closes the link) and then until it is quiet, bounded.
 *
 * Invariants checked:
 *   - everything the router writes to the raw worker is a sequence of valid
 *     SFM frames (cj_frame_next never fails on it);
 *   - everything that reaches trainer_2 comes from trainer_1 or under it
 *     (anti-spoofing) and is addressed to trainer_2 or under it;
 *   - messages the local handler gets are addressed to site-1.J1;
 *   - counters: drops >= the sum of the drop reasons; at most one worker
 *     replaced (the raw worker may claim trainer_2's name);
 *     the link count never exceeds two;
 *   - everything is freed after cj_router_free (LeakSanitizer). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "wire/msg.h"
#include "cell/router.h"
#include "net/link.h"
#include "util/log.h"
#include "wire/fqcn.h"
#include "wire/frame.h"
#include "wire/header.h"

#define ME "site-1.J1"
#define T1 "site-1.J1.trainer_1"
#define T2 "site-1.J1.trainer_2"
#define OUT_CAP (1u << 20)       /* router->raw worker bytes kept for checking */
#define QUIET_TURNS 64           /* loop turns after the input, at most */

static const size_t PIECES[8] = {1, 3, 16, 17, 100, 512, 4096, SIZE_MAX};

struct t2 {
    struct cj_link *link;
    int up, down, msgs;
};

struct fz {
    struct event_base *base;
    struct cj_router *r;
    struct t2 t2;
    int rawfd;
    bool raw_closed;             /* the router closed the raw worker's link */
    uint8_t *out;                /* what the router wrote to the raw worker */
    size_t out_len, out_off;     /* out_off: start of the first unchecked frame */
    bool out_overflow;
    int local_msgs;
};

static void die(const char *what)
{
    fprintf(stderr, "fuzz_router: invariant broken: %s\n", what);
    abort();
}

/* ---- trainer_2 (a real link) ---------------------------------------------------- */

static void t2_up(struct cj_link *l, void *ctx) { (void)l; ((struct t2 *)ctx)->up++; }
static void t2_down(struct cj_link *l, const char *why, void *ctx)
{
    (void)l; (void)why;
    struct t2 *t = ctx;
    t->down++;
    t->link = NULL;
}
static void t2_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    (void)l;
    struct t2 *t = ctx;
    t->msgs++;
    const char *o = m->hdr.origin, *d = m->hdr.destination;
    if (strcmp(o, T1) && !cj_fqcn_is_ancestor(T1, o)) die("trainer_2 got a message whose origin is not trainer_1's");
    if (strcmp(d, T2) && !cj_fqcn_is_ancestor(T2, d)) die("trainer_2 got a message not addressed under it");
    cj_msg_free(m);
}
static const struct cj_link_ops t2_ops = {.on_up = t2_up, .on_msg = t2_msg, .on_down = t2_down};

static void local_handler(struct cj_router *r, struct cj_msg *m, void *ctx)
{
    (void)r;
    struct fz *f = ctx;
    f->local_msgs++;
    if (strcmp(m->hdr.destination, ME)) die("local handler got a message not addressed to me");
    cj_msg_free(m);
}

/* ---- the raw worker ------------------------------------------------------------- */

/* Reads what the router wrote and checks it frame by frame. */
static void drain_raw(struct fz *f)
{
    uint8_t buf[65536];
    for (int i = 0; i < 64 && !f->raw_closed; i++) {
        ssize_t k = read(f->rawfd, buf, sizeof buf);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) { f->raw_closed = true; break; }
        if (k < 0) break;
        if (f->out_overflow) continue;
        if (f->out_len + (size_t)k > OUT_CAP) { f->out_overflow = true; continue; }
        memcpy(f->out + f->out_len, buf, (size_t)k);
        f->out_len += (size_t)k;
    }
    while (!f->out_overflow) {
        struct cj_frame_prefix p;
        size_t flen = 0;
        struct cj_err err;
        int rc = cj_frame_next(f->out + f->out_off, f->out_len - f->out_off, 0, &p, &flen, &err);
        if (rc < 0) {
            fprintf(stderr, "at %zu: %s\n", f->out_off, err.msg);
            die("the router wrote a malformed frame to the worker");
        }
        if (rc == 0) break;
        f->out_off += flen;
    }
}

static void turn(struct fz *f)
{
    event_base_loop(f->base, EVLOOP_NONBLOCK);
    drain_raw(f);
}

/* Writes n bytes in pieces; false once the peer is gone or stuck. */
static bool feed(struct fz *f, const uint8_t *p, size_t n, size_t piece)
{
    int stuck = 0;
    while (n > 0) {
        size_t want = n < piece ? n : piece;
        ssize_t k = send(f->rawfd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            stuck = 0;
        } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (++stuck > QUIET_TURNS) return false;   /* the router stopped reading (backpressure or closing) */
        } else {
            return false;                              /* EPIPE / ECONNRESET: the router closed the link */
        }
        turn(f);
    }
    return true;
}

/* ---- input to stream ------------------------------------------------------------ */

struct sbuf {
    uint8_t *p;
    size_t n, cap;
};

static void sb_add(struct sbuf *s, const void *p, size_t n)
{
    if (n == 0) return;
    if (s->n + n > s->cap) {
        size_t cap = (s->cap ? s->cap * 2 : 1024);
        while (cap < s->n + n) cap *= 2;
        uint8_t *q = realloc(s->p, cap);
        if (!q) abort();
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
}

static void add_hello(struct sbuf *s, uint8_t type, const char *name)
{
    struct cj_frame_hello h;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (cj_frame_hello_init(&h, name, 1.7e9, NULL) != 0 || cj_frame_build_hello(&sb, type, 1, 1, &h, NULL) != 0)
        abort();
    sb_add(s, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void add_frame(struct sbuf *s, uint8_t type, uint16_t app, const uint8_t *h, size_t hl, int lie,
                      const uint8_t *pl, size_t pn, uint16_t seq)
{
    uint8_t pre[CJ_FRAME_PREFIX_LEN];
    long hlen = (long)hl + lie;
    struct cj_frame_prefix p = {.length = (uint32_t)(CJ_FRAME_PREFIX_LEN + hl + pn),
                                .header_len = (uint16_t)(hlen < 0 ? 0 : hlen > 65535 ? 65535 : hlen),
                                .type = type, .app_id = app, .stream_id = (uint16_t)(16 + seq), .sequence = seq};
    cj_frame_prefix_encode(&p, pre);
    sb_add(s, pre, sizeof pre);
    sb_add(s, h, hl);
    sb_add(s, pl, pn);
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* Framed mode: records -> frames with consistent prefixes. */
static void build_framed(struct sbuf *s, const uint8_t *d, size_t n)
{
    uint16_t seq = 1;
    while (n >= 5) {
        uint8_t kind = d[0];
        size_t hl = rd16(d + 1), pn = rd16(d + 3);
        d += 5, n -= 5;
        if (hl > n) hl = n;
        if (pn > n - hl) pn = n - hl;
        const uint8_t *h = d, *pl = d + hl;
        d += hl + pn, n -= hl + pn;
        seq++;
        switch (kind) {
        case 0: add_frame(s, CJ_FRAME_DATA, CJ_FRAME_APP_CELLNET, h, hl, 0, pl, pn, seq); break;
        case 1: {
            int lie = n ? (int8_t)d[0] : 1;
            if (n) d++, n--;
            add_frame(s, CJ_FRAME_DATA, CJ_FRAME_APP_CELLNET, h, hl, lie ? lie : 1, pl, pn, seq);
            break;
        }
        case 2: add_frame(s, CJ_FRAME_PING, 0, NULL, 0, 0, (const uint8_t *)"\xc0", 1, seq); break;
        case 3: add_frame(s, CJ_FRAME_PONG, 0, NULL, 0, 0, (const uint8_t *)"\xc0", 1, seq); break;
        case 4: add_frame(s, CJ_FRAME_HELLO, 0, NULL, 0, 0, pl, pn, 1); break;
        default: sb_add(s, h, hl); sb_add(s, pl, pn); break;
        }
    }
}

/* ---- one run --------------------------------------------------------------------- */

static void setup(struct fz *f)
{
    struct cj_err err;
    memset(f, 0, sizeof *f);
    f->rawfd = -1;
    f->base = event_base_new();
    f->out = malloc(OUT_CAP);
    if (!f->base || !f->out) abort();
    struct cj_router_cfg rc = {.me = ME, .link_buffer = 1u << 20, .max_frame = 1u << 20, .handshake_timeout = 5};
    f->r = cj_router_new(f->base, &rc, &err);
    if (!f->r) { fprintf(stderr, "%s\n", err.msg); abort(); }
    if (cj_router_handle(f->r, "app", NULL, local_handler, f) != 0) abort();

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    if (cj_router_accept(f->r, sv[1], "fuzz-t2") != 0) abort();
    struct cj_link_cfg c = {.name = "fuzz-t2", .me = T2, .link_buffer = 1u << 30};
    f->t2.link = cj_link_attach(f->base, sv[0], true, NULL, "fuzz-t2", &c, &t2_ops, &f->t2, &err);
    if (!f->t2.link) { fprintf(stderr, "%s\n", err.msg); abort(); }
    for (int i = 0; i < 200 && !cj_router_child(f->r, T2); i++) event_base_loop(f->base, EVLOOP_NONBLOCK);
    if (!cj_router_child(f->r, T2)) die("trainer_2 did not come up");

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    f->rawfd = sv[0];
    if (cj_router_accept(f->r, sv[1], "fuzz-raw") != 0) abort();
}

static void check_counters(const struct fz *f)
{
    const struct cj_router_counters *c = cj_router_counters(f->r);
    if (c->drops < c->drops_unroutable + c->drops_loop + c->drops_spoof + c->drops_too_big)
        die("drops below the sum of its reasons");
    /* The raw worker may say HELLO as trainer_2: the router then replaces the
     * real trainer_2 (documented: a reconnecting worker takes its name back). */
    if (c->workers_replaced > 1) die("more than one worker replaced (there are only two connections)");
    struct cj_link *kids[4];
    if (cj_router_children(f->r, kids, 4) > 2) die("more than two worker links");
}

static void teardown(struct fz *f)
{
    check_counters(f);
    cj_router_free(f->r);
    if (f->t2.link) cj_link_free(f->t2.link);
    if (f->rawfd >= 0) close(f->rawfd);
    for (int i = 0; i < 8; i++) event_base_loop(f->base, EVLOOP_NONBLOCK);
    event_base_free(f->base);
    free(f->out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {
        once = true;
        cj_log_set_level(CJ_LOG_ERROR);   /* the router logs every drop; keep the fuzzer's output readable */
    }
    if (size == 0 || size > (1u << 20)) return 0;
    uint8_t flags = data[0];
    data++, size--;

    struct sbuf s = {0};
    if (flags & 1) add_hello(&s, CJ_FRAME_HELLO, T1);
    if (flags & 2) build_framed(&s, data, size);
    else sb_add(&s, data, size);

    struct fz f;
    setup(&f);
    size_t piece = PIECES[(flags >> 2) & 7];
    if (s.n) feed(&f, s.p, s.n, piece);
    for (int i = 0; i < QUIET_TURNS; i++) {
        turn(&f);
        check_counters(&f);
    }
    teardown(&f);
    free(s.p);
    return 0;
}
