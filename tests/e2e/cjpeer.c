/* SPDX-License-Identifier: Apache-2.0 */
/* cjpeer — a test worker cell for the transport end-to-end tests.
 *
 *   cjpeer freeport [N]                       print N (default 1) free loopback TCP ports
 *   cjpeer [OPTIONS] URL NAME COMMAND [ARGS]  connect to the relay's worker socket URL
 *                                             (unix:PATH or tcp://127.0.0.1:PORT) as cell NAME
 *                                             (<site>.<job>.<leaf>) and run COMMAND:
 *     ping               direct request task/ping to the server job cell; prints the reply
 *     echo N             streams N random bytes to test/echo, checks the reply is the same
 *     blob N             asks test/blob for N bytes; checks every chunk against the pattern as
 *                        it arrives (cmd/cjrelay-sim/pattern.h) and ACKs it, keeping none
 *     stall SECS [N]     asks for N bytes (default 1G), stops reading after the first chunk,
 *                        stays connected for SECS, then leaves
 *     spoof OTHER        handshakes as OTHER (not a child of the relay): success = refused
 *     spoof-origin OTHER sends a ping whose cn__origin is OTHER: success = no answer, and a
 *                        normal ping on the same link still works
 *   cjpeer [OPTIONS] capi MODE BOOTSTRAP      a hostile Client API worker: URL, NAME and launch
 *                                             token come from the bootstrap file (as the relay
 *                                             writes it for a worker it launches):
 *     wrong-token        HELLO with a launch token that is not the file's: success = hello_rejected
 *     results            HELLO, SESSION_READY; RESULT_READY for a task never given ("BOGUS" line);
 *                        then waits for TASK_READY, accepts it, and sends its RESULT_READY twice
 *                        ("FIRST", "SECOND" lines, each with the reply kind and reason);
 *                        success = the bogus and the second result rejected
 *   OPTIONS: --timeout SECS (default 60), --server FQCN (default server.<job of NAME>),
 *            --log-headers FILE (append the header block of each request sent, one
 *            key=value line, as cjrelay-sim --log-headers writes what it receives),
 *            --verbose (library log at info instead of warning)
 *
 * Prints one result line, "OK <command> ..." or "FAIL <command>: <why>", and exits 0 only
 * on OK.  Memory: the blob is checked one chunk (1 MiB) at a time; echo keeps 2 x N. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "../../cmd/cjrelay-sim/hdrline.h"
#include "../../cmd/cjrelay-sim/pattern.h"
#include "wire/msg.h"
#include "fl/bootstrap.h"
#include "fl/capi.h"
#include "net/link.h"
#include "stream/stream.h"
#include "util/log.h"
#include "util/parse.h"
#include "wire/fqcn.h"
#include "wire/header.h"
#include "util/mp.h"
#include "util/uuid.h"

#define ACK_DEFAULT ((uint64_t)4 << 20)
#define SPOOF_QUIET 2.0   /* seconds without an answer to the spoofed ping */

enum cmd { C_PING, C_ECHO, C_BLOB, C_STALL, C_SPOOF, C_SPOOF_ORIGIN, C_CAPI };
static const char *const CMD_NAMES[] = {"ping", "echo", "blob", "stall", "spoof", "spoof-origin", "capi"};

struct peer {
    struct event_base *base;
    struct cj_link *link;
    struct cj_stream_ep *ep;
    enum cmd cmd;
    char me[CJ_FQCN_MAX + 1];        /* the name we connect as */
    char target[CJ_FQCN_MAX + 1];    /* server.<job> */
    char other[CJ_FQCN_MAX + 1];     /* spoof / spoof-origin */
    double timeout, stall_secs;
    uint64_t n;                      /* echo / blob / stall bytes */
    FILE *hlog;
    bool was_up, done;
    int status;                      /* exit status once done */
    double t0;
    struct event *timer, *later;

    char ping_id[CJ_STREAM_RI_LEN + 1];
    bool spoof_phase;                /* spoof-origin: the spoofed ping is out, waiting for silence */

    uint8_t *echo_data;              /* what echo sent */

    /* blob receiver (our own: the stream layer hands over whole blobs only) */
    uint8_t *pattern;
    char blob_ri[CJ_STREAM_RI_LEN + 1];
    bool blob_started, stalled;
    uint64_t blob_id, got, next_sq, last_ack, ack_every;
    struct evbuffer_iovec *vec;
    size_t nvec;

    /* capi */
    struct cj_bootstrap bs;
    bool capi_results;               /* mode results (else wrong-token) */
    int capi_step;                   /* 0 hello, 1 session_ready, 2 bogus result, 3 waiting for a task,
                                        4 first result, 5 second result */
    char session_id[CJ_CAPI_ID_MAX + 1];
    char task_id[CJ_CAPI_ID_MAX + 1];
    uint8_t *task_body;
    size_t task_body_len;
    bool bogus_rejected;
    struct cj_capi_msg cm;           /* decoding space (~25 KB: static peer) */
};

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void finish(struct peer *p, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finish(struct peer *p, bool ok, const char *fmt, ...)
{
    if (p->done) return;
    p->done = true;
    p->status = ok ? 0 : 1;
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s%s", ok ? "OK" : "FAIL", CMD_NAMES[p->cmd], ok ? " " : ": ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    event_base_loopbreak(p->base);
}

static const char *relay_name(const struct peer *p)
{
    return p->link ? cj_link_peer(p->link) : "";
}

/* Sends a block this cell built: to the relay, as a control frame unless bulk. */
static int send_block(struct peer *p, const uint8_t *blk, size_t len, struct evbuffer *payload, bool control)
{
    if (!p->link || cj_link_get_state(p->link) != CJ_LINK_UP) return -1;
    return cj_link_send(p->link, blk, len, payload, control);
}

/* Builds hb + m into a block and sends it (control).  hb is destroyed. */
static int send_built(struct peer *p, struct cj_hb *hb, struct cj_hdr_msg *m, struct evbuffer *payload, bool log)
{
    msgpack_sbuffer sb;
    struct cj_err err;
    double t = cj_msg_now();
    m->to = relay_name(p);
    m->route_time = m->send_time = t;
    msgpack_sbuffer_init(&sb);
    cj_hb_cellnet(hb, m);
    int rc = cj_hb_finish(hb, &sb, &err);
    if (rc == 0 && log && p->hlog) hl_line(p->hlog, (const uint8_t *)sb.data, sb.size);
    if (rc == 0) rc = send_block(p, (const uint8_t *)sb.data, sb.size, payload, true);
    else cj_log_error("cjpeer: cannot build a message: %s", err.msg);
    cj_hb_destroy(hb);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ---- ping ----------------------------------------------------------------------------- */

static int send_ping(struct peer *p, const char *origin)
{
    char text[2 * CJ_FQCN_MAX + 16];
    snprintf(text, sizeof text, "ping from %s", origin);
    struct evbuffer *pl = evbuffer_new();
    if (!pl || cj_uuid4_str(p->ping_id) < 0) {
        if (pl) evbuffer_free(pl);
        return -1;
    }
    evbuffer_add(pl, text, strlen(text));
    struct cj_hb hb;
    cj_hb_init(&hb);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = origin, .destination = p->target, .channel = "task", .topic = "ping",
        .req_id = p->ping_id, .reply_expected = true, .payload_encoding = "bytes",
        .payload_len = (int64_t)strlen(text),
    };
    int rc = send_built(p, &hb, &m, pl, true);
    evbuffer_free(pl);
    return rc;
}

static void on_ping_reply(struct peer *p, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    char text[1024];
    size_t n = evbuffer_get_length(m->payload);
    if (n >= sizeof text) n = sizeof text - 1;
    evbuffer_copyout(m->payload, text, n);
    text[n] = '\0';
    if (p->spoof_phase) {
        finish(p, false, "the ping with the spoofed origin %s was answered: %s", p->other, text);
        return;
    }
    if (h->msg_type == CJ_MSG_RETURN) {
        finish(p, false, "RETURN from %s: %s", h->origin, h->return_code);
    } else if (strcmp(h->origin, p->target)) {
        finish(p, false, "reply from %s, not %s", h->origin, p->target);
    } else if (strcmp(h->return_code, "ok")) {
        finish(p, false, "rc=%s", h->return_code);
    } else if (p->cmd == C_SPOOF_ORIGIN) {
        finish(p, true, "the ping with origin %s got no answer; the link still works (%s)", p->other, text);
    } else {
        finish(p, true, "rc=ok in %.3f s: %s", now_mono() - p->t0, text);
    }
}

/* ---- echo ------------------------------------------------------------------------------- */

/* True when buf holds exactly want[0..n). */
static bool buf_equal(struct evbuffer *buf, const uint8_t *want, size_t n)
{
    if (evbuffer_get_length(buf) != n) return false;
    struct evbuffer_ptr pos;
    evbuffer_ptr_set(buf, &pos, 0, EVBUFFER_PTR_SET);
    size_t off = 0;
    while (off < n) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(buf, -1, &pos, &v, 1) < 1 || v.iov_len == 0) return false;
        if (memcmp(v.iov_base, want + off, v.iov_len)) return false;
        off += v.iov_len;
        if (evbuffer_ptr_set(buf, &pos, v.iov_len, EVBUFFER_PTR_ADD) < 0) break;
    }
    return off == n;
}

static void on_echo_reply(void *arg, struct cj_stream_reply *r)
{
    struct peer *p = arg;
    if (strcmp(r->return_code, "ok")) {
        finish(p, false, "rc=%s %s", r->return_code, r->error);
    } else if (!r->data || !buf_equal(r->data, p->echo_data, (size_t)p->n)) {
        finish(p, false, "the reply (%zu bytes) differs from the %" PRIu64 " bytes sent",
               r->data ? evbuffer_get_length(r->data) : 0, p->n);
    } else {
        finish(p, true, "%" PRIu64 " bytes in %.3f s, reply identical", p->n, now_mono() - p->t0);
    }
}

static const uint8_t X_APP_VAL[] = {0xa6, 'c', 'j', 'p', 'e', 'e', 'r'};   /* msgpack "cjpeer" */
static const struct cj_stream_hv X_APP = {"x-app", X_APP_VAL, sizeof X_APP_VAL};

static int start_echo(struct peer *p)
{
    struct evbuffer *blob = evbuffer_new();
    if (!blob || !(p->echo_data = malloc(p->n ? (size_t)p->n : 1))) {
        if (blob) evbuffer_free(blob);
        return -1;
    }
    for (size_t off = 0; off < p->n;) {
        ssize_t k = getrandom(p->echo_data + off, (size_t)p->n - off, 0);
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    evbuffer_add(blob, p->echo_data, (size_t)p->n);
    struct cj_stream_msg m = {.hdrs = &X_APP, .n_hdrs = 1, .encoding = "bytes"};
    return cj_stream_request(p->ep, p->target, "test", "echo", &m, blob, p->timeout, on_echo_reply, p, NULL, NULL);
}

/* ---- blob: our own receiver, one chunk at a time ---------------------------------------- */

static void send_ack(struct peer *p, const char *dest, uint64_t os, uint64_t sq)
{
    struct cj_hb hb;
    cj_hb_init(&hb);
    cj_hb_uint(&hb, "sm__id", p->blob_id);
    cj_hb_int(&hb, "sm__dt", CJ_SM_ACK);
    cj_hb_uint(&hb, "sm__os", os);
    cj_hb_uint(&hb, "sm__sq", sq);
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = p->me, .destination = dest, .channel = CJ_STREAM_CHANNEL,
        .topic = CJ_STREAM_TOPIC_ACK, .optional = true, .payload_encoding = "none", .payload_len = 0,
    };
    if (send_built(p, &hb, &m, NULL, false) < 0) cj_log_warning("cjpeer: cannot send an ACK");
    p->last_ack = os;
}

/* Checks payload (found at blob offset off) against the pattern without copying. */
static int64_t check_payload(struct peer *p, uint64_t off, struct evbuffer *payload)
{
    int n = evbuffer_peek(payload, -1, NULL, NULL, 0);
    if (n <= 0) return -1;
    if ((size_t)n > p->nvec) {
        struct evbuffer_iovec *v = realloc(p->vec, (size_t)n * sizeof *v);
        if (!v) return (int64_t)off;
        p->vec = v;
        p->nvec = (size_t)n;
    }
    struct evbuffer_iovec *ev = p->vec;
    n = evbuffer_peek(payload, -1, NULL, ev, n);
    for (int i = 0; i < n; i++) {
        int64_t bad = sim_pattern_check(p->pattern, off, ev[i].iov_base, ev[i].iov_len);
        if (bad >= 0) return bad;
        off += ev[i].iov_len;
    }
    return -1;
}

static void stall_over(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    finish(p, true, "stopped reading after %" PRIu64 " bytes and stayed connected for %g s", p->got,
           p->stall_secs);
}

static void blob_chunk(struct peer *p, const struct cj_hdr *h, struct evbuffer *payload)
{
    const uint64_t need = CJ_HK_BIT(CJ_HK_SM_ID) | CJ_HK_BIT(CJ_HK_SM_SQ) | CJ_HK_BIT(CJ_HK_SM_OS) |
                          CJ_HK_BIT(CJ_HK_SM_SZ) | CJ_HK_BIT(CJ_HK_SM_DT);
    if ((h->have & need) != need) {
        finish(p, false, "reply chunk without the sm__ keys of a data chunk");
        return;
    }
    if (h->sm_dt == CJ_SM_ERROR) {
        finish(p, false, "the sender aborted the reply after %" PRIu64 " bytes: %.*s", p->got, (int)h->sm_em.len,
               (const char *)h->sm_em.p);
        return;
    }
    uint64_t len = evbuffer_get_length(payload);
    if (!p->blob_started) {
        p->blob_started = true;
        p->blob_id = h->sm_id;
        if (cj_hdr_has(h, CJ_HK_RETURN_CODE) && strcmp(h->return_code, "ok")) {
            finish(p, false, "reply rc=%s", h->return_code);
            return;
        }
        if ((uint64_t)h->sm_sz != p->n) {
            finish(p, false, "reply of %" PRId64 " bytes, asked for %" PRIu64, h->sm_sz, p->n);
            return;
        }
        p->ack_every = cj_hdr_has(h, CJ_HK_SM_AI) && h->sm_ai > 0 ? (uint64_t)h->sm_ai : ACK_DEFAULT;
        if (cj_hdr_has(h, CJ_HK_SM_WS) && h->sm_ws > 0 && p->ack_every > (uint64_t)h->sm_ws)
            p->ack_every = (uint64_t)h->sm_ws;
    }
    if (h->sm_id != p->blob_id || (uint64_t)h->sm_sq != p->next_sq || (uint64_t)h->sm_os != p->got ||
        p->got + len > p->n) {
        finish(p, false, "chunk sq=%" PRId64 " os=%" PRId64 " len=%" PRIu64 ", expected sq=%" PRIu64 " os=%" PRIu64,
               h->sm_sq, h->sm_os, len, p->next_sq, p->got);
        return;
    }
    int64_t bad = check_payload(p, p->got, payload);
    if (bad >= 0) {
        finish(p, false, "byte %" PRId64 " differs from the pattern (chunk %" PRIu64 ")", bad, p->next_sq);
        return;
    }
    p->got += len;
    p->next_sq++;
    bool final = h->sm_dt == CJ_SM_FINAL;
    if (final && p->got != p->n) {
        finish(p, false, "FINAL chunk at %" PRIu64 " of %" PRIu64 " bytes", p->got, p->n);
        return;
    }
    if (final || p->got - p->last_ack >= p->ack_every) send_ack(p, h->origin, p->got, p->next_sq - 1);
    if (final) {
        double dt = now_mono() - p->t0;
        finish(p, true, "%" PRIu64 " bytes in %" PRIu64 " chunks, pattern verified, %.2f s (%.0f MiB/s)", p->got,
               p->next_sq, dt, dt > 0 ? (double)p->got / 1048576.0 / dt : 0.0);
        return;
    }
    if (p->cmd == C_STALL && !p->stalled) {
        p->stalled = true;
        cj_link_pause_reading(p->link, CJ_LINK_PAUSE_OWNER);
        struct timeval tv = {(time_t)p->stall_secs, (suseconds_t)((p->stall_secs - (time_t)p->stall_secs) * 1e6)};
        evtimer_assign(p->later, p->base, stall_over, p);
        evtimer_add(p->later, &tv);
        printf("STALLING after %" PRIu64 " bytes for %g s\n", p->got, p->stall_secs);
        fflush(stdout);
    }
}

static int start_blob(struct peer *p)
{
    char text[32];
    if (!(p->pattern = malloc(SIM_PATTERN_LEN)) || cj_uuid4_str(p->blob_ri) < 0) return -1;
    sim_pattern_fill(p->pattern);
    snprintf(text, sizeof text, "%" PRIu64, p->n);
    struct evbuffer *req = evbuffer_new();
    if (!req) return -1;
    evbuffer_add(req, text, strlen(text));
    struct cj_stream_msg m = {.hdrs = &X_APP, .n_hdrs = 1, .encoding = "bytes"};
    /* A request we answer ourselves: sm__ri given, no pending request in the
     * endpoint, so the reply chunks never reach its reassembly. */
    return cj_stream_send(p->ep, p->target, "test", "blob", &m, p->blob_ri, req, NULL, NULL, NULL);
}


/* ---- capi: a hostile Client API worker ------------------------------------------------------ */

static const struct cj_stream_msg FOBS_MSG = {.encoding = "fobs"};
static const char *const CAPI_STEP[] = {"hello", "session_ready", "result_ready (bogus task)", "task_ready",
                                        "result_ready (first)", "result_ready (second)"};

static void on_capi_reply(void *arg, struct cj_stream_reply *r);

/* Sends the request of the current step. */
static void capi_send(struct peer *p)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    const char *topic;
    int rc;
    msgpack_sbuffer_init(&sb);
    switch (p->capi_step) {
    case 0: {
        char tok[CJ_CAPI_TOKEN_MAX + 1];
        if (p->capi_results) snprintf(tok, sizeof tok, "%s", p->bs.launch_token);
        else snprintf(tok, sizeof tok, "not-%s", p->bs.launch_token);   /* never printed */
        topic = CJ_CAPI_T_HELLO;
        rc = cj_capi_encode_hello(&sb, p->me, tok, p->bs.job_id, p->bs.site_name, &e);
        break;
    }
    case 1:
        topic = CJ_CAPI_T_SESSION_READY;
        rc = cj_capi_encode_session_ready(&sb, p->session_id, &e);
        break;
    case 2: {
        static const uint8_t empty_map[] = {0x80};
        topic = CJ_CAPI_T_RESULT_READY;
        rc = cj_capi_encode_result_ready(&sb, p->session_id, "cjpeer-no-such-task", empty_map, sizeof empty_map, &e);
        break;
    }
    default:
        topic = CJ_CAPI_T_RESULT_READY;
        rc = cj_capi_encode_result_ready(&sb, p->session_id, p->task_id, p->task_body, p->task_body_len, &e);
        break;
    }
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        finish(p, false, "cannot encode %s: %s", topic, e.msg);
        return;
    }
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    struct cj_stream_msg m = {.encoding = "fobs"};
    if (!eb || cj_stream_request(p->ep, p->bs.cj_fqcn, CJ_CAPI_CHANNEL, topic, &m, eb, 10, on_capi_reply, p, NULL,
                                 NULL))
        finish(p, false, "cannot send %s", topic);
}

static const char *capi_kind_of_step(int step)
{
    return step == 0 ? CJ_CAPI_T_HELLO : step == 1 ? CJ_CAPI_T_SESSION_READY : CJ_CAPI_T_RESULT_READY;
}

static void on_capi_reply(void *arg, struct cj_stream_reply *r)
{
    struct peer *p = arg;
    struct cj_capi_msg *m = &p->cm;
    struct cj_err e = {0};
    if (p->done) return;
    if (strcmp(r->return_code, "ok") || !r->data) {
        finish(p, false, "%s answered rc=%s %s", CAPI_STEP[p->capi_step], r->return_code, r->error);
        return;
    }
    size_t n = evbuffer_get_length(r->data);
    const uint8_t *b = evbuffer_pullup(r->data, -1);
    if (cj_capi_decode_reply(cj_capi_kind_from_topic(capi_kind_of_step(p->capi_step)), b, n, m, &e)) {
        finish(p, false, "%s: undecodable reply: %s", CAPI_STEP[p->capi_step], e.msg);
        return;
    }
    const char *kind = cj_capi_kind_name(m->kind);
    const char *why = m->has & CJ_CAPI_F_REASON ? m->reason : "";
    switch (p->capi_step) {
    case 0:
        if (m->kind != CJ_CAPI_HELLO_ACCEPTED) {
            finish(p, !p->capi_results && m->kind == CJ_CAPI_HELLO_REJECTED, "%s: %s", kind, why);
            return;
        }
        if (!p->capi_results) {
            finish(p, false, "a HELLO with a wrong launch token was accepted");
            return;
        }
        snprintf(p->session_id, sizeof p->session_id, "%s", m->session_id);
        break;
    case 1:
        if (m->kind != CJ_CAPI_SESSION_READY_REPLY) {
            finish(p, false, "session_ready answered %s: %s", kind, why);
            return;
        }
        printf("SESSION %s\n", p->session_id);
        break;
    case 2:
        printf("BOGUS %s: %s\n", kind, why);
        p->bogus_rejected = m->kind == CJ_CAPI_RESULT_REJECTED;
        break;
    case 4:
        printf("FIRST %s: %s\n", kind, why);
        break;
    case 5:
        printf("SECOND %s: %s\n", kind, why);
        fflush(stdout);
        if (p->bogus_rejected && m->kind == CJ_CAPI_RESULT_REJECTED)
            finish(p, true, "the result for a task never given and the second result were rejected");
        else
            finish(p, false, "bogus result %s, second result %s", p->bogus_rejected ? "rejected" : "ACCEPTED", kind);
        return;
    }
    fflush(stdout);
    p->capi_step++;
    if (p->capi_step == 3 && p->task_body) p->capi_step = 4;   /* the task came while the bogus result was out */
    if (p->capi_step != 3) capi_send(p);
}

/* TASK_READY from the relay: accept it, then send its result twice. */
static int on_capi_task(void *arg, struct cj_stream_blob *b)
{
    struct peer *p = arg;
    struct cj_capi_msg *m = &p->cm;
    struct cj_err e = {0};
    size_t n = evbuffer_get_length(b->data);
    const uint8_t *bytes = evbuffer_pullup(b->data, -1);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (p->capi_step < 2 || p->capi_step > 3 || p->task_body || cj_capi_decode_request(CJ_CAPI_TASK_READY, bytes, n, m, &e) ||
        !(m->has & CJ_CAPI_F_BODY) || !(p->task_body = malloc(m->body_len ? m->body_len : 1))) {
        cj_capi_encode_task_failed(&sb, NULL, "cjpeer: not now", &e);
        struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
        if (eb) cj_stream_reply(p->ep, &b->req, "ok", &FOBS_MSG, eb, NULL, NULL);
        return 0;
    }
    memcpy(p->task_body, m->body, m->body_len);
    p->task_body_len = m->body_len;
    snprintf(p->task_id, sizeof p->task_id, "%s", m->task_id);
    printf("TASK %s\n", p->task_id);
    cj_capi_encode_task_accepted(&sb, p->task_id, &e);
    struct evbuffer *eb = mp_sbuffer_to_evbuffer(&sb);
    if (!eb || cj_stream_reply(p->ep, &b->req, "ok", &FOBS_MSG, eb, NULL, NULL)) {
        finish(p, false, "cannot accept task %s", p->task_id);
        return 0;
    }
    if (p->capi_step == 3) {   /* else on_capi_reply goes on once the bogus result is answered */
        p->capi_step = 4;
        capi_send(p);
    }
    return 0;
}

/* ---- the link ------------------------------------------------------------------------------ */

static bool is_blob_msg(const struct peer *p, const struct cj_hdr *h)
{
    return p->blob_ri[0] && cj_hdr_has(h, CJ_HK_SM_RI) && !strcmp(h->sm_ri, p->blob_ri);
}

static void spoof_quiet(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    p->spoof_phase = false;
    if (send_ping(p, p->me) < 0) finish(p, false, "cannot send the second ping");
}

static void on_up(struct cj_link *l, void *ctx)
{
    struct peer *p = ctx;
    int rc = 0;
    p->was_up = true;
    p->t0 = now_mono();
    switch (p->cmd) {
    case C_PING: rc = send_ping(p, p->me); break;
    case C_ECHO: rc = start_echo(p); break;
    case C_BLOB:
    case C_STALL: rc = start_blob(p); break;
    case C_SPOOF: finish(p, false, "the relay accepted %s (peer %s)", p->me, cj_link_peer(l)); return;
    case C_CAPI: capi_send(p); break;
    case C_SPOOF_ORIGIN: {
        struct timeval tv = {(time_t)SPOOF_QUIET, 0};
        p->spoof_phase = true;
        rc = send_ping(p, p->other);
        evtimer_assign(p->later, p->base, spoof_quiet, p);
        evtimer_add(p->later, &tv);
        break;
    }
    }
    if (rc < 0) finish(p, false, "cannot start %s", CMD_NAMES[p->cmd]);
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct peer *p = ctx;
    const struct cj_hdr *h = &m->hdr;
    if (p->done) {
        cj_msg_free(m);
        return;
    }
    if (!strcmp(h->channel, CJ_STREAM_CHANNEL)) {
        bool err = !strcmp(h->topic, CJ_STREAM_TOPIC_ERROR) ||
                   (!strcmp(h->topic, CJ_STREAM_TOPIC_ACK) && cj_hdr_has(h, CJ_HK_SM_EM));
        if (is_blob_msg(p, h) && err)
            finish(p, false, "error notice from %s: %.*s", h->origin, (int)h->sm_em.len, (const char *)h->sm_em.p);
        else if (is_blob_msg(p, h) && !strcmp(h->topic, CJ_STREAM_TOPIC_DATA))
            blob_chunk(p, h, m->payload);
        else
            cj_stream_input(p->ep, h, m->payload);
    } else if ((h->msg_type == CJ_MSG_REPLY || h->msg_type == CJ_MSG_RETURN) && p->ping_id[0] &&
               !strcmp(h->req_id, p->ping_id)) {
        on_ping_reply(p, m);
    } else {
        cj_log_warning("cjpeer: unexpected %s %s/%s from %s; dropped", cj_msg_type_name(h->msg_type), h->channel,
                       h->topic, h->origin);
    }
    cj_msg_free(m);
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    struct peer *p = ctx;
    p->link = NULL;
    if (p->cmd == C_SPOOF && !p->was_up) finish(p, true, "%s refused by the relay: %s", p->me, why);
    else finish(p, false, "link down: %s", why);
}

static const struct cj_link_ops OPS = {.on_up = on_up, .on_msg = on_msg, .on_down = on_down};

static int io_send(void *ctx, const char *destination, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                   bool control)
{
    struct peer *p = ctx;
    if (p->hlog) {   /* log the first chunk of each request */
        struct cj_hdr h;
        if (cj_hdr_decode(&h, hblk, hlen, NULL) == 0 && !strcmp(h.topic, CJ_STREAM_TOPIC_DATA) &&
            cj_hdr_has(&h, CJ_HK_SM_SQ) && h.sm_sq == 0)
            hl_line(p->hlog, hblk, hlen);
    }
    return send_block(p, hblk, hlen, payload, control) < 0 ? -1 : 0;
}

static const char *io_next_hop(void *ctx, const char *destination)
{
    const char *r = relay_name(ctx);
    return r[0] ? r : NULL;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    finish(p, false, "no result within %g s (link %s)", p->timeout,
           p->link ? cj_link_state_name(cj_link_get_state(p->link)) : "down");
}

/* ---- command line ---------------------------------------------------------------------------- */

static int freeport(int n)
{
    int fds[64];
    if (n < 1 || n > 64) n = 1;
    for (int i = 0; i < n; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) < 0 ||
            getsockname(fds[i], (struct sockaddr *)&sa, &len) < 0)
            return 1;
        printf("%u\n", ntohs(sa.sin_port));
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: cjpeer freeport [N]\n"
                    "       cjpeer [--timeout SECS] [--server FQCN] [--log-headers FILE] [--verbose] URL NAME\n"
                    "              ping | echo N | blob N | stall SECS [N] | spoof OTHER | spoof-origin OTHER\n"
                    "       cjpeer [--timeout SECS] [--verbose] capi wrong-token|results BOOTSTRAP\n");
    return 2;
}

static int parse_size_arg(const char *s, uint64_t *out)
{
    int64_t v;
    if (cj_parse_size(s, &v, NULL) < 0 || (uint64_t)v > CJ_STREAM_MAX_BLOB) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_command(struct peer *p, int argc, char **argv)
{
    const char *c = argv[0];
    int i;
    for (i = 0; i < (int)(sizeof CMD_NAMES / sizeof CMD_NAMES[0]); i++)
        if (!strcmp(c, CMD_NAMES[i])) break;
    if (i == (int)(sizeof CMD_NAMES / sizeof CMD_NAMES[0])) return -1;
    p->cmd = (enum cmd)i;
    switch (p->cmd) {
    case C_PING: return argc == 1 ? 0 : -1;
    case C_ECHO:
    case C_BLOB: return argc == 2 ? parse_size_arg(argv[1], &p->n) : -1;
    case C_STALL:
        if (argc < 2 || argc > 3 || cj_parse_duration(argv[1], &p->stall_secs, NULL) < 0) return -1;
        p->n = (uint64_t)1 << 30;
        return argc == 3 ? parse_size_arg(argv[2], &p->n) : 0;
    case C_CAPI: {
        struct cj_err e = {0};
        if (argc != 3 || (strcmp(argv[1], "results") && strcmp(argv[1], "wrong-token"))) return -1;
        p->capi_results = !strcmp(argv[1], "results");
        if (cj_bootstrap_read(argv[2], &p->bs, &e)) {
            fprintf(stderr, "cjpeer: bootstrap %s: %s\n", argv[2], e.msg);
            return -1;
        }
        return 0;
    }
    case C_SPOOF:
    case C_SPOOF_ORIGIN:
        if (argc != 2 || strlen(argv[1]) > CJ_FQCN_MAX || !cj_fqcn_valid(argv[1])) return -1;
        strcpy(p->other, argv[1]);
        return 0;
    }
    return -1;
}

static int parse_args(struct peer *p, int argc, char **argv, const char **url, const char **hlog)
{
    int i = 1;
    p->timeout = 60;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        if (!strcmp(argv[i], "--verbose")) cj_log_set_level(CJ_LOG_INFO);
        else if (i + 1 >= argc) return -1;
        else if (!strcmp(argv[i], "--timeout")) {
            if (cj_parse_duration(argv[++i], &p->timeout, NULL) < 0 || p->timeout <= 0) return -1;
        } else if (!strcmp(argv[i], "--server")) {
            if (strlen(argv[++i]) > CJ_FQCN_MAX) return -1;
            strcpy(p->target, argv[i]);
        } else if (!strcmp(argv[i], "--log-headers")) *hlog = argv[++i];
        else return -1;
    }
    if (argc - i >= 1 && !strcmp(argv[i], "capi")) {   /* URL and NAME from the bootstrap file */
        static char url_buf[CJ_BOOTSTRAP_URL_MAX + 1];
        if (parse_command(p, argc - i, argv + i) < 0) return -1;
        snprintf(url_buf, sizeof url_buf, "%s", p->bs.connect_url);
        *url = url_buf;
        snprintf(p->me, sizeof p->me, "%s", p->bs.trainer_fqcn);
        snprintf(p->target, sizeof p->target, "%s", p->bs.cj_fqcn);
        return 0;
    }
    if (argc - i < 3 || strlen(argv[i + 1]) > CJ_FQCN_MAX || !cj_fqcn_valid(argv[i + 1])) return -1;
    *url = argv[i];
    strcpy(p->me, argv[i + 1]);
    if (parse_command(p, argc - i - 2, argv + i + 2) < 0) return -1;
    if (!p->target[0]) {   /* server.<second part of NAME> */
        const char *dot = strchr(p->me, '.');
        const char *end = dot ? strchr(dot + 1, '.') : NULL;
        if (!dot) return -1;
        size_t jl = end ? (size_t)(end - dot - 1) : strlen(dot + 1);
        snprintf(p->target, sizeof p->target, "server.%.*s", (int)jl, dot + 1);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct peer p;
    const char *url = NULL, *hlog = NULL;
    cj_log_init("cjpeer");
    cj_log_set_level(CJ_LOG_WARNING);
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "freeport")) return freeport(argc > 2 ? atoi(argv[2]) : 1);
    if (parse_args(&p, argc, argv, &url, &hlog) < 0) return usage();
    if (hlog && !(p.hlog = fopen(hlog, "a"))) {
        perror(hlog);
        return 2;
    }
    p.base = event_base_new();
    p.timer = evtimer_new(p.base, on_timeout, &p);
    p.later = calloc(1, event_get_struct_event_size());
    struct cj_stream_io io = {.ctx = &p, .send = io_send, .next_hop = io_next_hop};
    p.ep = cj_stream_new(p.base, p.me, &io, NULL);
    if (p.cmd == C_CAPI && p.ep && cj_stream_on(p.ep, CJ_CAPI_CHANNEL, CJ_CAPI_T_TASK_READY, on_capi_task, &p)) {
        printf("FAIL capi: cannot register the task_ready handler\n");
        return 1;
    }
    struct cj_err err;
    struct cj_link_cfg cfg = {.name = "relay", .me = p.cmd == C_SPOOF ? p.other : p.me};
    if (p.cmd == C_SPOOF) strcpy(p.me, p.other);
    if (!p.base || !p.timer || !p.later || !p.ep) {
        printf("FAIL %s: out of memory\n", CMD_NAMES[p.cmd]);
        return 1;
    }
    struct timeval tv = {(time_t)p.timeout, (suseconds_t)((p.timeout - (time_t)p.timeout) * 1e6)};
    evtimer_add(p.timer, &tv);
    if (!(p.link = cj_link_connect(p.base, NULL, url, NULL, &cfg, &OPS, &p, &err))) {
        printf("FAIL %s: %s\n", CMD_NAMES[p.cmd], err.msg);
        return 1;
    }
    event_base_dispatch(p.base);
    if (!p.done) printf("FAIL %s: event loop ended\n", CMD_NAMES[p.cmd]);
    event_base_loop(p.base, EVLOOP_NONBLOCK);   /* a link that went down is freed from the loop */
    cj_stream_free(p.ep);
    cj_link_free(p.link);
    if (event_initialized(p.later)) event_del(p.later);
    event_free(p.timer);
    free(p.later);
    event_base_free(p.base);
    free(p.echo_data);
    free(p.pattern);
    free(p.vec);
    free(p.task_body);
    explicit_bzero(p.bs.launch_token, sizeof p.bs.launch_token);
    if (p.hlog) fclose(p.hlog);
    return p.done ? p.status : 1;
}
