/* SPDX-License-Identifier: Apache-2.0 */
/* cjwire — a test cell for the release wire (doc/protocol/streaming.md §11,
 * doc/protocol/download.md §10): the library's stream endpoint and download
 * service against a stock FLARE cell (tests/release/wire.py runs one).
 *
 *   cjwire [OPTIONS] URL NAME COMMAND [ARGS]   connect to URL (tcp://HOST:PORT) as cell NAME
 *                                              and run COMMAND against the target cell:
 *     echo N       streams N random bytes as a request on test/echo; the reply must be the same
 *     bad N        streams N bytes the target cannot decode (sm__pe fobs) on test/echo; success
 *                  = the request fails with comm_error (the target's error notice) within 10 s
 *     pull REF N   downloads ref REF from the target (download service); success = N item bytes
 *     serve N      offers a ref of N bytes (1 MiB items) and asks the target to pull it
 *                  (request test/pull, body the ref id); success = the reply says N bytes and
 *                  the ref finished with every receiver served; then waits --linger
 *   cjwire cpbody JOB STATUS                    print (hex) the payload of the job's
 *                                              admin / train.notify_job_status to its client parent
 *   OPTIONS: --wire28 (cj_stream_set_wire CJ_STREAM_WIRE_2_8), --target FQCN (default
 *            server.<job of NAME>), --timeout SECS (default 60), --linger SECS (default 0: stay
 *            connected that long after the result, answering the target's requests)
 *
 * Prints one result line, "OK <command> ..." or "FAIL <command>: <why>", and exits 0 only on OK. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/client.h"
#include "fl/cpmsg.h"
#include "dl/producer.h"
#include "net/link.h"
#include "stream/stream.h"
#include "util/log.h"
#include "util/parse.h"
#include "wire/fqcn.h"
#include "wire/header.h"
#include "wire/msg.h"

#define ITEM (1u << 20)

enum cmd { C_ECHO, C_BAD, C_PULL, C_SERVE };
static const char *const CMD_NAMES[] = {"echo", "bad", "pull", "serve"};

struct wire {
    struct event_base *base;
    struct cj_link *link;
    struct cj_stream_ep *ep;
    struct cj_dl_producer *prod;
    enum cmd cmd;
    bool wire28;
    char me[CJ_FQCN_MAX + 1], target[CJ_FQCN_MAX + 1], ref[CJ_DL_REF_ID_MAX + 1];
    uint64_t n, got;
    double timeout, linger, t0;
    uint8_t *data;
    struct event *timer, *end;
    bool done, reply_ok, ref_ok, ref_done;
    int status;
    char reply_text[128];
};

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void end_cb(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(((struct wire *)arg)->base);
}

static void finish(struct wire *w, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finish(struct wire *w, bool ok, const char *fmt, ...)
{
    if (w->done) return;
    w->done = true;
    w->status = ok ? 0 : 1;
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s%s", ok ? "OK" : "FAIL", CMD_NAMES[w->cmd], ok ? " " : ": ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    struct timeval tv = {(time_t)w->linger, (suseconds_t)((w->linger - (time_t)w->linger) * 1e6)};
    evtimer_add(w->end, &tv);
}

/* ---- echo, bad ------------------------------------------------------------------------------ */

static bool buf_is(struct evbuffer *b, const uint8_t *want, size_t n)
{
    if (evbuffer_get_length(b) != n) return false;
    uint8_t *p = evbuffer_pullup(b, -1);
    return n == 0 || (p && memcmp(p, want, n) == 0);
}

static void on_echo(void *arg, struct cj_stream_reply *r)
{
    struct wire *w = arg;
    double dt = now_mono() - w->t0;
    if (w->cmd == C_BAD) {
        if (!strcmp(r->return_code, "comm_error") && dt < 10.0)
            finish(w, true, "comm_error after %.2f s: %s", dt, r->error);
        else finish(w, false, "rc=%s after %.2f s (%s)", r->return_code, dt, r->error);
    } else if (strcmp(r->return_code, "ok")) {
        finish(w, false, "rc=%s %s", r->return_code, r->error);
    } else if (!r->data || !buf_is(r->data, w->data, (size_t)w->n)) {
        finish(w, false, "the reply (%zu bytes) differs from the %" PRIu64 " bytes sent",
               r->data ? evbuffer_get_length(r->data) : 0, w->n);
    } else {
        finish(w, true, "%" PRIu64 " bytes each way in %.2f s, reply identical", w->n, dt);
    }
}

static int start_echo(struct wire *w)
{
    struct evbuffer *blob = evbuffer_new();
    if (!blob || !(w->data = malloc(w->n ? (size_t)w->n : 1))) {
        if (blob) evbuffer_free(blob);
        return -1;
    }
    for (size_t off = 0; off < w->n;) {
        ssize_t k = getrandom(w->data + off, (size_t)w->n - off, 0);
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    if (w->cmd == C_BAD && w->n) w->data[0] = 0xc1;   /* never valid msgpack or LOBS */
    evbuffer_add(blob, w->data, (size_t)w->n);
    struct cj_stream_msg m = {.encoding = w->cmd == C_BAD ? "fobs" : "bytes"};
    return cj_stream_request(w->ep, w->target, "test", "echo", &m, blob, w->timeout, on_echo, w, NULL, NULL);
}

/* ---- pull ----------------------------------------------------------------------------------- */

static int on_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct wire *w = ctx;
    w->got += evbuffer_get_length(item);
    evbuffer_free(item);
    return 0;
}

static void on_fetched(void *ctx, bool ok, const char *why)
{
    struct wire *w = ctx;
    if (!ok) finish(w, false, "%s", why);
    else if (w->got != w->n) finish(w, false, "%" PRIu64 " item bytes, expected %" PRIu64, w->got, w->n);
    else finish(w, true, "%" PRIu64 " item bytes of ref %s in %.2f s", w->got, w->ref, now_mono() - w->t0);
}

/* ---- serve ---------------------------------------------------------------------------------- */

static int item_fn(void *ctx, size_t index, struct evbuffer *out)
{
    struct wire *w = ctx;
    uint64_t off = (uint64_t)index * ITEM;
    uint64_t len = w->n - off < ITEM ? w->n - off : ITEM;
    return evbuffer_add_reference(out, w->data + off, (size_t)len, NULL, NULL);
}

static void serve_check(struct wire *w)
{
    if (!w->ref_done || !w->reply_text[0]) return;
    char want[64];
    snprintf(want, sizeof want, "bytes=%" PRIu64, w->n);
    if (!w->reply_ok || strncmp(w->reply_text, want, strlen(want)))
        finish(w, false, "the target said: %s", w->reply_text);
    else if (!w->ref_ok) finish(w, false, "the ref did not finish as served to all (target said %s)", w->reply_text);
    else finish(w, true, "ref %s of %" PRIu64 " bytes pulled by %s in %.2f s (%s)", w->ref, w->n, w->target,
                now_mono() - w->t0, w->reply_text);
}

static void on_ref_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                        const struct cj_dl_receiver_info *rcv, size_t n_rcv)
{
    struct wire *w = ctx;
    w->ref_done = true;
    w->ref_ok = outcome == CJ_DL_OUT_OK && n_rcv == 1 && rcv[0].state == CJ_DL_RCV_OK && rcv[0].bytes == w->n;
    serve_check(w);
}

static void on_pull_reply(void *arg, struct cj_stream_reply *r)
{
    struct wire *w = arg;
    size_t n = r->data ? evbuffer_get_length(r->data) : 0;
    if (n >= sizeof w->reply_text) n = sizeof w->reply_text - 1;
    if (n) evbuffer_remove(r->data, w->reply_text, n);
    w->reply_text[n] = '\0';
    w->reply_ok = !strcmp(r->return_code, "ok");
    if (!w->reply_ok) snprintf(w->reply_text, sizeof w->reply_text, "rc=%s %s", r->return_code, r->error);
    if (!w->ref_done) {   /* the producer settles a legacy receiver at its terminal serve: at most a moment */
        struct timeval tv = {2, 0};
        evtimer_add(w->timer, &tv);
    }
    serve_check(w);
}

static int start_serve(struct wire *w)
{
    size_t n_items = (size_t)((w->n + ITEM - 1) / ITEM);
    uint64_t *sizes = calloc(n_items ? n_items : 1, sizeof *sizes);
    if (!sizes || !(w->data = malloc(w->n ? (size_t)w->n : 1))) {
        free(sizes);
        return -1;
    }
    for (uint64_t i = 0; i < w->n; i++) w->data[i] = (uint8_t)(i * 7 + (i >> 20));
    for (size_t i = 0; i < n_items; i++) sizes[i] = w->n - (uint64_t)i * ITEM < ITEM ? w->n - (uint64_t)i * ITEM : ITEM;
    struct cj_dl_ref_cfg rc = {.n_items = n_items, .sizes = sizes, .item_fn = item_fn, .num_receivers = 1,
                               .done = on_ref_done, .ctx = w};
    int rv = cj_dl_producer_add_ref(w->prod, &rc, w->ref);
    free(sizes);
    if (rv) return -1;
    struct evbuffer *body = evbuffer_new();
    if (!body) return -1;
    evbuffer_add(body, w->ref, strlen(w->ref));
    struct cj_stream_msg m = {.encoding = "bytes"};
    return cj_stream_request(w->ep, w->target, "test", "pull", &m, body, w->timeout, on_pull_reply, w, NULL, NULL);
}

/* ---- the link ------------------------------------------------------------------------------- */

static void on_up(struct cj_link *l, void *ctx)
{
    struct wire *w = ctx;
    w->t0 = now_mono();
    int rc = 0;
    switch (w->cmd) {
    case C_ECHO:
    case C_BAD: rc = start_echo(w); break;
    case C_PULL: rc = cj_dl_fetch(w->base, w->ep, w->target, w->ref, NULL, on_item, on_fetched, w) ? 0 : -1; break;
    case C_SERVE: rc = start_serve(w); break;
    }
    if (rc < 0) finish(w, false, "cannot start");
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct wire *w = ctx;
    if (!strcmp(m->hdr.channel, CJ_STREAM_CHANNEL)) cj_stream_input(w->ep, &m->hdr, m->payload);
    else cj_log_warning("cjwire: unexpected %s/%s from %s; dropped", m->hdr.channel, m->hdr.topic, m->hdr.origin);
    cj_msg_free(m);
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    struct wire *w = ctx;
    w->link = NULL;
    finish(w, false, "link down: %s", why);
    event_base_loopbreak(w->base);
}

static const struct cj_link_ops OPS = {.on_up = on_up, .on_msg = on_msg, .on_down = on_down};

static int io_send(void *ctx, const char *destination, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                   bool control)
{
    struct wire *w = ctx;
    if (!w->link || cj_link_get_state(w->link) != CJ_LINK_UP) return -1;
    return cj_link_send(w->link, hblk, hlen, payload, control) < 0 ? -1 : 0;
}

static const char *io_next_hop(void *ctx, const char *destination)
{
    struct wire *w = ctx;
    return w->link ? cj_link_peer(w->link) : NULL;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct wire *w = arg;
    if (w->cmd == C_SERVE && w->reply_text[0]) serve_check(w);
    if (!w->done) finish(w, false, "no result within the time allowed (%s)", w->reply_text);
}

/* ---- command line ----------------------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: cjwire [--wire28] [--target FQCN] [--timeout SECS] [--linger SECS] URL NAME\n"
                    "              echo N | bad N | pull REF N | serve N\n");
    return 2;
}

static int parse_args(struct wire *w, int argc, char **argv, const char **url)
{
    int i = 1;
    w->timeout = 60;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        if (!strcmp(argv[i], "--wire28")) w->wire28 = true;
        else if (!strcmp(argv[i], "--verbose")) cj_log_set_level(CJ_LOG_INFO);
        else if (i + 1 >= argc) return -1;
        else if (!strcmp(argv[i], "--timeout")) {
            if (cj_parse_duration(argv[++i], &w->timeout, NULL) < 0 || w->timeout <= 0) return -1;
        } else if (!strcmp(argv[i], "--linger")) {
            if (cj_parse_duration(argv[++i], &w->linger, NULL) < 0) return -1;
        } else if (!strcmp(argv[i], "--target")) {
            if (strlen(argv[++i]) > CJ_FQCN_MAX) return -1;
            strcpy(w->target, argv[i]);
        } else return -1;
    }
    if (argc - i < 4 || strlen(argv[i + 1]) > CJ_FQCN_MAX || !cj_fqcn_valid(argv[i + 1])) return -1;
    *url = argv[i];
    strcpy(w->me, argv[i + 1]);
    const char *c = argv[i + 2], *a = argv[i + 3];
    int k;
    for (k = 0; k < 4 && strcmp(c, CMD_NAMES[k]); k++) {}
    if (k == 4) return -1;
    w->cmd = (enum cmd)k;
    if (w->cmd == C_PULL) {
        if (argc - i != 5 || strlen(a) > CJ_DL_REF_ID_MAX) return -1;
        strcpy(w->ref, a);
        a = argv[i + 4];
    } else if (argc - i != 4) return -1;
    int64_t n;
    if (cj_parse_size(a, &n, NULL) < 0 || n < 0) return -1;
    w->n = (uint64_t)n;
    if (!w->target[0]) {   /* server.<job> from <site>.<job>[.<leaf>] */
        const char *dot = strchr(w->me, '.');
        if (!dot) return -1;
        const char *end = strchr(dot + 1, '.');
        size_t jl = end ? (size_t)(end - dot - 1) : strlen(dot + 1);
        snprintf(w->target, sizeof w->target, "server.%.*s", (int)jl, dot + 1);
    }
    return 0;
}

/* The notify_job_status payload a job sends its CP (lib/fl/cpmsg.c), as hex. */
static int cpbody(const char *job, const char *status)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (cj_cpmsg_admin_write(&sb, CJ_CPMSG_TP_NOTIFY, "", job, atol(status), NULL)) return 1;
    for (size_t i = 0; i < sb.size; i++) printf("%02x", (unsigned char)sb.data[i]);
    printf("\n");
    msgpack_sbuffer_destroy(&sb);
    return 0;
}

int main(int argc, char **argv)
{
    static struct wire w;
    const char *url = NULL;
    if (argc == 4 && !strcmp(argv[1], "cpbody")) return cpbody(argv[2], argv[3]);
    cj_log_init("cjwire");
    cj_log_set_level(CJ_LOG_WARNING);
    signal(SIGPIPE, SIG_IGN);
    if (parse_args(&w, argc, argv, &url) < 0) return usage();
    w.base = event_base_new();
    struct cj_stream_io io = {.ctx = &w, .send = io_send, .next_hop = io_next_hop};
    if (!w.base || !(w.ep = cj_stream_new(w.base, w.me, &io, NULL)) || !(w.prod = cj_dl_producer_new(w.base, w.ep, NULL)) ||
        !(w.timer = evtimer_new(w.base, on_timeout, &w)) || !(w.end = evtimer_new(w.base, end_cb, &w))) {
        printf("FAIL %s: out of memory\n", CMD_NAMES[w.cmd]);
        return 1;
    }
    if (w.wire28) cj_stream_set_wire(w.ep, CJ_STREAM_WIRE_2_8);
    struct timeval tv = {(time_t)w.timeout, (suseconds_t)((w.timeout - (time_t)w.timeout) * 1e6)};
    evtimer_add(w.timer, &tv);
    struct cj_err err;
    struct cj_link_cfg cfg = {.name = "server", .me = w.me};
    if (!(w.link = cj_link_connect(w.base, NULL, url, NULL, &cfg, &OPS, &w, &err))) {
        printf("FAIL %s: %s\n", CMD_NAMES[w.cmd], err.msg);
        return 1;
    }
    event_base_dispatch(w.base);
    if (!w.done) printf("FAIL %s: event loop ended\n", CMD_NAMES[w.cmd]);
    cj_dl_producer_free(w.prod);
    cj_stream_free(w.ep);
    event_base_loop(w.base, EVLOOP_NONBLOCK);
    cj_link_free(w.link);
    event_free(w.timer);
    event_free(w.end);
    event_base_free(w.base);
    free(w.data);
    return w.done ? w.status : 1;
}
