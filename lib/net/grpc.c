/* SPDX-License-Identifier: Apache-2.0 */
/* grpc.c — gRPC carriage of SFM frames over nghttp2 (see grpc.h). */
#include "net/grpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "net/grpcmsg.h"

#define MAX_FRAME ((4u << 20) - 1) /* largest frame we accept: grpc-core's own setting */

struct cj_grpc {
    enum cj_grpc_role role;
    nghttp2_session *s;
    int32_t stream;             /* the call; 0 before it exists */
    bool open, ended, failed, closing;
    bool heard;                 /* the peer's first bytes were checked */
    struct cj_err err;          /* the first failure */
    struct evbuffer *out, *sfm; /* the buffers of the call in progress */
    struct evbuffer *pending;   /* messages queued for the peer's window */
    bool deferred;              /* the data source waits for pending */
    uint64_t seq;               /* last sequence number sent */
    struct cj_grpcmsg_rx rx;
    uint64_t owed;              /* SFM bytes received the link has not taken */
    uint64_t overhead;          /* DATA bytes that were not SFM, to credit at once */
    char authority[256];
    bool tls;
    /* what the peer's headers said */
    int status;
    bool grpc_type, path_ok, post;
    char grpc_status[16], grpc_message[128];
};

static const char *peer(const struct cj_grpc *g) { return g->role == CJ_GRPC_CLIENT ? "server" : "client"; }

/* Records the first failure; returns NGHTTP2_ERR_CALLBACK_FAILURE for callbacks. */
__attribute__((format(printf, 2, 3))) static int failf(struct cj_grpc *g, const char *fmt, ...)
{
    if (!g->failed) {
        va_list ap;
        va_start(ap, fmt);
        g->failed = true;
        g->err.code = CJ_E_INVALID;
        g->err.offset = 0;
        vsnprintf(g->err.msg, sizeof g->err.msg, fmt, ap);
        va_end(ap);
    }
    g->open = false;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* ---- nghttp2's callbacks: sending ------------------------------------------------------ */

static ssize_t send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *user)
{
    struct cj_grpc *g = user;
    if (!g->out) return NGHTTP2_ERR_WOULDBLOCK;
    return evbuffer_add(g->out, data, len) == 0 ? (ssize_t)len : NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A DATA frame: its 9-byte header, then the queued chains moved, not copied. */
static int send_data_cb(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user)
{
    struct cj_grpc *g = user;
    if (!g->out) return NGHTTP2_ERR_WOULDBLOCK;
    if (evbuffer_add(g->out, framehd, 9) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (length && evbuffer_remove_buffer(g->pending, g->out, length) != (int)length) return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static ssize_t read_cb(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t length, uint32_t *flags,
                       nghttp2_data_source *source, void *user)
{
    struct cj_grpc *g = user;
    size_t avail = evbuffer_get_length(g->pending);
    if (avail == 0 && g->closing) { /* a server ends the call with trailers */
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const nghttp2_nv t[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE}};
        nghttp2_submit_trailer(s, stream, t, 1);
        return 0;
    }
    if (avail == 0) {
        g->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)(avail < length ? avail : length);
}

/* DATA frames as large as both windows and the peer's frame size allow. */
static ssize_t read_length_cb(nghttp2_session *s, uint8_t type, int32_t stream, int32_t conn_window,
                              int32_t stream_window, uint32_t max_frame, void *user)
{
    ssize_t n = conn_window < stream_window ? conn_window : stream_window;
    if ((uint32_t)n > max_frame) n = max_frame;
    return n > 0 ? n : 1;
}

/* ---- nghttp2's callbacks: receiving ---------------------------------------------------- */

static int data_chunk_cb(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data, size_t len,
                         void *user)
{
    struct cj_grpc *g = user;
    if (stream != g->stream || !g->open) {
        g->overhead += len; /* not the call's: credited and dropped */
        return 0;
    }
    uint64_t before = g->rx.sfm_bytes;
    if (cj_grpcmsg_feed(&g->rx, data, len, g->sfm, &g->err) < 0) {
        g->failed = true;
        g->open = false;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    uint64_t sfm = g->rx.sfm_bytes - before;
    g->owed += sfm;
    g->overhead += len - sfm;
    return 0;
}

static int begin_headers_cb(nghttp2_session *s, const nghttp2_frame *frame, void *user)
{
    struct cj_grpc *g = user;
    if (g->role == CJ_GRPC_SERVER && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        if (g->stream) /* one call per connection, as FLARE makes */
            return nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        g->stream = frame->hd.stream_id;
    }
    return 0;
}

static bool is(const uint8_t *p, size_t n, const char *s) { return n == strlen(s) && memcmp(p, s, n) == 0; }

static int header_cb(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    struct cj_grpc *g = user;
    if (frame->hd.stream_id != g->stream) return 0;
    if (is(name, namelen, "content-type"))
        g->grpc_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0;
    else if (is(name, namelen, ":status"))
        g->status = valuelen == 3 ? atoi((const char *)value) : 0; /* nghttp2 checked: 3 digits */
    else if (is(name, namelen, ":path"))
        g->path_ok = is(value, valuelen, CJ_GRPC_PATH);
    else if (is(name, namelen, ":method"))
        g->post = is(value, valuelen, "POST");
    else if (is(name, namelen, "grpc-status"))
        snprintf(g->grpc_status, sizeof g->grpc_status, "%.*s", (int)(valuelen < 8 ? valuelen : 8), value);
    else if (is(name, namelen, "grpc-message"))
        snprintf(g->grpc_message, sizeof g->grpc_message, "%.*s", (int)(valuelen < 100 ? valuelen : 100), value);
    return 0;
}

/* A server's check of the call: the one path, POST, gRPC content. */
static int request_done(struct cj_grpc *g)
{
    if (!g->path_ok || !g->post || !g->grpc_type) {
        nghttp2_submit_rst_stream(g->s, NGHTTP2_FLAG_NONE, g->stream, NGHTTP2_REFUSED_STREAM);
        return failf(g, "the client's call is not POST %s with application/grpc", CJ_GRPC_PATH);
    }
    const nghttp2_nv nva[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_data_provider prd = {.source.ptr = g, .read_callback = read_cb};
    if (nghttp2_submit_response(g->s, g->stream, nva, 2, &prd) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    g->open = true;
    return 0;
}

/* A client's check of the answer, and of the call's end (trailers). */
static int response_done(struct cj_grpc *g, const nghttp2_frame *frame)
{
    if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE && (g->status != 200 || !g->grpc_type) && !g->grpc_status[0])
        return failf(g, "the server answered the call with :status %d%s", g->status,
                     g->grpc_type ? "" : " and no application/grpc content");
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    g->ended = true;
    g->open = false;
    if (strcmp(g->grpc_status, "0") != 0)
        failf(g, "the server ended the call: grpc-status %s%s%s", g->grpc_status[0] ? g->grpc_status : "missing",
              g->grpc_message[0] ? ", " : "", g->grpc_message);
    return 0;
}

static int frame_recv_cb(nghttp2_session *s, const nghttp2_frame *frame, void *user)
{
    struct cj_grpc *g = user;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (frame->hd.stream_id != g->stream) return 0;
        if (g->role == CJ_GRPC_SERVER) return frame->headers.cat == NGHTTP2_HCAT_REQUEST ? request_done(g) : 0;
        return response_done(g, frame);
    case NGHTTP2_DATA:
        if (frame->hd.stream_id == g->stream && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            g->ended = true; /* the peer finished its side of the call */
            g->open = false;
        }
        return 0;
    case NGHTTP2_RST_STREAM:
        if (frame->hd.stream_id == g->stream)
            failf(g, "the %s reset the call (%s)", peer(g), nghttp2_http2_strerror(frame->rst_stream.error_code));
        return 0;
    case NGHTTP2_GOAWAY:
        if (frame->goaway.error_code == NGHTTP2_NO_ERROR && frame->goaway.last_stream_id >= g->stream)
            return 0; /* a graceful notice: the call goes on until the server ends it */
        failf(g, "the %s sent GOAWAY (%s%s%.*s)", peer(g), nghttp2_http2_strerror(frame->goaway.error_code),
              frame->goaway.opaque_data_len ? ": " : "",
              (int)(frame->goaway.opaque_data_len < 80 ? frame->goaway.opaque_data_len : 80),
              frame->goaway.opaque_data ? (const char *)frame->goaway.opaque_data : "");
        return 0;
    default:
        return 0;
    }
}

static int stream_close_cb(nghttp2_session *s, int32_t stream, uint32_t code, void *user)
{
    struct cj_grpc *g = user;
    if (stream == g->stream) {
        g->ended = true;
        g->open = false;
    }
    return 0;
}

/* ---- life ---------------------------------------------------------------------------- */

struct cj_grpc *cj_grpc_new(enum cj_grpc_role role, const char *authority, bool tls)
{
    struct cj_grpc *g = calloc(1, sizeof *g);
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    if (!g || !(g->pending = evbuffer_new()) || nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
    nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
    nghttp2_session_callbacks_set_data_source_read_length_callback(cbs, read_length_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_chunk_cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, begin_headers_cb);
    nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, frame_recv_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);
    nghttp2_option_set_no_auto_window_update(opt, 1); /* credit follows the link (cj_grpc_consume) */
    int rc = role == CJ_GRPC_CLIENT ? nghttp2_session_client_new2(&g->s, cbs, g, opt)
                                    : nghttp2_session_server_new2(&g->s, cbs, g, opt);
    if (rc != 0) goto fail;
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    g->role = role;
    g->tls = tls;
    snprintf(g->authority, sizeof g->authority, "%s", authority ? authority : "");
    cj_grpcmsg_rx_init(&g->rx, CJ_GRPC_MAX_MESSAGE);
    return g;
fail:
    if (cbs) nghttp2_session_callbacks_del(cbs);
    if (opt) nghttp2_option_del(opt);
    if (g && g->pending) evbuffer_free(g->pending);
    free(g);
    return NULL;
}

void cj_grpc_free(struct cj_grpc *g)
{
    if (!g) return;
    nghttp2_session_del(g->s);
    cj_grpcmsg_rx_free(&g->rx);
    evbuffer_free(g->pending);
    free(g);
}

void cj_grpc_set_max_message(struct cj_grpc *g, uint64_t max) { g->rx.max = max; }

bool cj_grpc_is_open(const struct cj_grpc *g) { return g->open; }

size_t cj_grpc_pending(const struct cj_grpc *g) { return evbuffer_get_length(g->pending); }

/* Runs nghttp2's output into out. */
static int flush(struct cj_grpc *g, struct evbuffer *out)
{
    g->out = out;
    int rc = nghttp2_session_send(g->s);
    g->out = NULL;
    return rc == 0 ? 0 : -1;
}

static int data_source_start(struct cj_grpc *g)
{
    if (!g->deferred) return 0;
    g->deferred = false;
    return nghttp2_session_resume_data(g->s, g->stream);
}

int cj_grpc_start(struct cj_grpc *g, struct evbuffer *out)
{
    const nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, CJ_GRPC_WINDOW},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, MAX_FRAME},
    };
    if (nghttp2_submit_settings(g->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(g->s, NGHTTP2_FLAG_NONE, 0, CJ_GRPC_WINDOW) != 0)
        return -1;
    if (g->role == CJ_GRPC_CLIENT) {
        const char *scheme = g->tls ? "https" : "http";
        const nghttp2_nv nva[] = {
            {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)":scheme", (uint8_t *)scheme, 7, strlen(scheme), NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)":path", (uint8_t *)CJ_GRPC_PATH, 5, strlen(CJ_GRPC_PATH), NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)":authority", (uint8_t *)g->authority, 10, strlen(g->authority), NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"user-agent", (uint8_t *)"cjrelay", 10, 7, NGHTTP2_NV_FLAG_NONE},
        };
        nghttp2_data_provider prd = {.source.ptr = g, .read_callback = read_cb};
        g->stream = nghttp2_submit_request(g->s, NULL, nva, sizeof nva / sizeof nva[0], &prd, NULL);
        if (g->stream < 0) return -1;
        g->open = true;
    }
    return flush(g, out);
}

/* ---- data ---------------------------------------------------------------------------- */

/* A server's first frame must be SETTINGS; anything else (an HTTP/1.1 answer, a
 * TLS alert in clear) is named with its first bytes rather than waited on.
 * 1 = checked, 0 = too few bytes yet, -1 = refused. */
static int check_first_bytes(struct cj_grpc *g, struct evbuffer *in)
{
    uint8_t b[32];
    ev_ssize_t n = evbuffer_copyout(in, b, sizeof b);
    if (n < 4) return 0;
    if (b[3] == NGHTTP2_SETTINGS) return 1;
    char q[sizeof b + 1];
    for (ev_ssize_t i = 0; i < n; i++) q[i] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '.';
    q[n] = '\0';
    failf(g, "the server does not speak HTTP/2 (first bytes \"%s\")", q);
    return -1;
}

int cj_grpc_read(struct cj_grpc *g, struct evbuffer *in, struct evbuffer *sfm, struct evbuffer *out,
                 struct cj_err *err)
{
    if (g->role == CJ_GRPC_CLIENT && !g->heard) {
        int r = check_first_bytes(g, in);
        if (r == 0) return CJ_GRPC_MORE;
        g->heard = true;
    }
    g->sfm = sfm;
    g->out = out; /* acks nghttp2 writes while receiving go straight out */
    while (evbuffer_get_length(in) && !g->failed) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
        ssize_t r = nghttp2_session_mem_recv(g->s, v.iov_base, v.iov_len);
        if (r < 0) failf(g, "bad HTTP/2 from the %s (%s)", peer(g), nghttp2_strerror((int)r));
        evbuffer_drain(in, v.iov_len);
    }
    g->sfm = NULL;
    if (g->overhead) {
        nghttp2_session_consume_connection(g->s, g->overhead);
        if (g->stream && nghttp2_session_find_stream(g->s, g->stream)) nghttp2_session_consume_stream(g->s, g->stream, g->overhead);
        g->overhead = 0;
    }
    if (!g->failed && flush(g, out) < 0) failf(g, "HTTP/2 output to the %s failed", peer(g));
    if (g->failed) { /* a GOAWAY tells the peer; the owner sends it before closing */
        nghttp2_session_terminate_session(g->s, NGHTTP2_PROTOCOL_ERROR);
        flush(g, out);
    }
    g->out = NULL;
    if (g->failed) {
        if (err) *err = g->err;
        return -g->err.code;
    }
    return g->ended ? CJ_GRPC_CLOSED : CJ_GRPC_MORE;
}

int cj_grpc_write(struct cj_grpc *g, struct evbuffer *src, size_t len, struct evbuffer *out)
{
    if (!g->open || g->closing || evbuffer_get_length(src) < len) return -1;
    uint8_t head[CJ_GRPCMSG_HEAD_MAX];
    size_t hn = cj_grpcmsg_head(head, ++g->seq, len);
    if (evbuffer_add(g->pending, head, hn) != 0 || evbuffer_remove_buffer(src, g->pending, len) != (int)len) return -1;
    if (data_source_start(g) != 0) return -1;
    return flush(g, out);
}

void cj_grpc_consume(struct cj_grpc *g, size_t n, struct evbuffer *out)
{
    if (n > g->owed) n = (size_t)g->owed;
    if (n && g->stream && !g->failed) {
        g->owed -= n;
        if (nghttp2_session_find_stream(g->s, g->stream)) nghttp2_session_consume(g->s, g->stream, n);
        else nghttp2_session_consume_connection(g->s, n);
    }
    if (!g->failed) flush(g, out);
}

void cj_grpc_close(struct cj_grpc *g, struct evbuffer *out)
{
    if (g->open && g->role == CJ_GRPC_SERVER) {
        g->closing = true;
        g->deferred = true;
        data_source_start(g);
    } else if (g->open) {
        nghttp2_submit_rst_stream(g->s, NGHTTP2_FLAG_NONE, g->stream, NGHTTP2_CANCEL);
    }
    flush(g, out);
    nghttp2_session_terminate_session(g->s, NGHTTP2_NO_ERROR);
    flush(g, out);
    g->open = false;
}
