/* ws.c — WebSocket carriage of SFM frames (see ws.h). */
#include "net/ws.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wslay/wslay.h>

#include "net/chunks.h"
#include "net/wsupgrade.h"
#include "util/text.h"
#include "wire/frame.h"

enum ws_state { WS_UPGRADE, WS_OPEN, WS_CLOSED };

#define KEY_STOCK 256            /* mask key bytes fetched per getrandom */

struct cj_ws {
    enum cj_ws_role role;
    enum ws_state state;
    wslay_frame_context_ptr fr;
    /* the buffers of the call in progress, for wslay's callbacks */
    struct evbuffer *in, *out;
    uint64_t consumed; /* bytes taken from in since the upgrade: error offsets */
    char host[256];
    char key[CJ_WSUP_KEY_LEN + 1];
    uint64_t max_msg;
    /* the frame being received */
    bool mid_frame;
    uint8_t op;
    bool fin;
    uint64_t flen, foff;
    /* the data message being received (one SFM frame) */
    bool in_msg;
    uint64_t msg_len;
    uint8_t sfm_len[4]; /* its first 4 bytes: the SFM frame's length */
    struct cj_chunks chunks;     /* the SFM bytes, into pooled blocks */
    struct cj_chunks out_chunks; /* a client's masked payloads, likewise */
    /* a control frame's payload */
    uint8_t ctl[125];
    size_t ctl_len;
    /* mask keys for what a client sends */
    uint8_t keys[KEY_STOCK];
    size_t keys_used;
};

/* ---- wslay's callbacks ----------------------------------------------------------------- */

static ssize_t recv_cb(uint8_t *buf, size_t len, int flags, void *user)
{
    struct cj_ws *ws = user;
    int n = evbuffer_remove(ws->in, buf, len);
    if (n > 0) ws->consumed += (uint64_t)n;
    return n > 0 ? n : 0; /* 0: wslay reports WANT_READ */
}

static ssize_t send_cb(const uint8_t *data, size_t len, int flags, void *user)
{
    struct cj_ws *ws = user;
    return evbuffer_add(ws->out, data, len) == 0 ? (ssize_t)len : -1;
}

static int next_key(struct cj_ws *ws, uint8_t key[4])
{
    if (ws->keys_used + 4 > KEY_STOCK) {
        if (cj_random_bytes(ws->keys, KEY_STOCK) < 0) return -1;
        ws->keys_used = 0;
    }
    memcpy(key, ws->keys + ws->keys_used, 4);
    ws->keys_used += 4;
    return 0;
}

static int genmask_cb(uint8_t *buf, size_t len, void *user)
{
    return len == 4 ? next_key(user, buf) : -1;
}

/* ---- life ---------------------------------------------------------------------------- */

struct cj_ws *cj_ws_new(enum cj_ws_role role, const char *host, const char *key)
{
    struct cj_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return NULL;
    static const struct wslay_frame_callbacks cbs = {send_cb, recv_cb, genmask_cb};
    if (wslay_frame_context_init(&ws->fr, &cbs, ws) != 0) {
        free(ws);
        return NULL;
    }
    ws->role = role;
    ws->max_msg = CJ_WS_MAX_MESSAGE;
    ws->keys_used = KEY_STOCK;
    snprintf(ws->host, sizeof ws->host, "%s", host ? host : "");
    if (key) snprintf(ws->key, sizeof ws->key, "%s", key);
    else if (role == CJ_WS_CLIENT && cj_wsup_new_key(ws->key) < 0) {
        cj_ws_free(ws);
        return NULL;
    }
    return ws;
}

void cj_ws_free(struct cj_ws *ws)
{
    if (!ws) return;
    cj_chunks_release(&ws->chunks);
    cj_chunks_release(&ws->out_chunks);
    wslay_frame_context_free(ws->fr);
    free(ws);
}

void cj_ws_set_max_message(struct cj_ws *ws, uint64_t max) { ws->max_msg = max; }

bool cj_ws_is_open(const struct cj_ws *ws) { return ws->state == WS_OPEN; }

int cj_ws_start(struct cj_ws *ws, struct evbuffer *out)
{
    if (ws->role != CJ_WS_CLIENT || ws->state != WS_UPGRADE) return -1;
    return cj_wsup_request(out, ws->host, CJ_WS_PATH, ws->key);
}

/* ---- sending ------------------------------------------------------------------------- */

void cj_ws_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], uint64_t off)
{
    uint8_t k[8];
    for (int i = 0; i < 8; i++) k[i] = key[(off + (uint64_t)i) & 3];
    uint64_t kw;
    memcpy(&kw, k, 8);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        w ^= kw;
        memcpy(dst + i, &w, 8);
    }
    for (; i < n; i++) dst[i] = src[i] ^ k[i & 7]; /* k repeats every 4 bytes */
}

/* A control frame (PONG, CLOSE) through wslay, masked when we are the client. */
static void send_control(struct cj_ws *ws, uint8_t op, const uint8_t *data, size_t n, struct evbuffer *out)
{
    struct wslay_frame_iocb io = {.fin = 1, .opcode = op, .mask = ws->role == CJ_WS_CLIENT,
                                  .payload_length = n, .data = data, .data_length = n};
    ws->out = out;
    ssize_t r = wslay_frame_send(ws->fr, &io);
    (void)r; /* send_cb takes everything: the frame is whole in out, or out is failing */
    ws->out = NULL;
}

/* The header of a binary message of len bytes; a client's carries key. */
static size_t data_header(uint8_t h[14], uint64_t len, bool masked, const uint8_t key[4])
{
    size_t n = 0;
    uint8_t m = masked ? 0x80 : 0;
    h[n++] = 0x80 | WSLAY_BINARY_FRAME;
    if (len < 126) {
        h[n++] = m | (uint8_t)len;
    } else if (len < 65536) {
        h[n++] = m | 126;
        h[n++] = (uint8_t)(len >> 8);
        h[n++] = (uint8_t)len;
    } else {
        h[n++] = m | 127;
        for (int s = 56; s >= 0; s -= 8) h[n++] = (uint8_t)(len >> s);
    }
    if (masked) {
        memcpy(h + n, key, 4);
        n += 4;
    }
    return n;
}

/* Copies len bytes of src into out masked, in one pass, into pooled blocks
 * (chunks.h); src drained. */
static int move_masked(struct cj_ws *ws, struct evbuffer *src, size_t len, struct evbuffer *out, const uint8_t key[4])
{
    uint64_t off = 0;
    while (off < len) {
        size_t room;
        uint8_t *d = cj_chunks_space(&ws->out_chunks, out, &room);
        struct evbuffer_iovec v;
        if (!d || evbuffer_peek(src, -1, NULL, &v, 1) < 1) return -1;
        size_t n = v.iov_len < room ? v.iov_len : room;
        if (n > len - off) n = (size_t)(len - off);
        cj_ws_mask(d, v.iov_base, n, key, off);
        cj_chunks_wrote(&ws->out_chunks, n);
        evbuffer_drain(src, n);
        off += n;
    }
    return cj_chunks_flush(&ws->out_chunks, out);
}

int cj_ws_write(struct cj_ws *ws, struct evbuffer *src, size_t len, struct evbuffer *out)
{
    if (ws->state != WS_OPEN || evbuffer_get_length(src) < len) return -1;
    uint8_t h[14], key[4] = {0};
    bool masked = ws->role == CJ_WS_CLIENT;
    if (masked && next_key(ws, key) < 0) return -1;
    size_t hn = data_header(h, len, masked, key);
    if (evbuffer_add(out, h, hn) != 0) return -1;
    if (masked) return move_masked(ws, src, len, out, key);
    return evbuffer_remove_buffer(src, out, len) == (int)len ? 0 : -1;
}

void cj_ws_close(struct cj_ws *ws, uint16_t code, struct evbuffer *out)
{
    if (ws->state == WS_CLOSED) return;
    uint8_t c[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    if (ws->state == WS_OPEN) send_control(ws, WSLAY_CONNECTION_CLOSE, c, 2, out);
    ws->state = WS_CLOSED;
}

/* ---- receiving ----------------------------------------------------------------------- */

static const char *peer_side(const struct cj_ws *ws) { return ws->role == CJ_WS_CLIENT ? "server" : "client"; }

/* A protocol error: answered with CLOSE 1002 (1009 for a size), then the carrier is closed. */
static int proto_error(struct cj_ws *ws, struct evbuffer *out, uint16_t code, int rc)
{
    cj_ws_close(ws, code, out);
    return rc;
}

/* The first chunk of a frame: its header's rules. */
static int frame_start(struct cj_ws *ws, const struct wslay_frame_iocb *io, struct evbuffer *sfm,
                       struct evbuffer *out, struct cj_err *err)
{
    uint64_t at = ws->consumed;
    if (io->rsv)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "WebSocket frame with reserved bits %u set (no extension agreed)", io->rsv));
    if (io->mask != (ws->role == CJ_WS_SERVER))
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "%s frame from the %s", io->mask ? "masked" : "unmasked", peer_side(ws)));
    ws->op = io->opcode;
    ws->fin = io->fin;
    ws->flen = io->payload_length;
    ws->foff = 0;
    ws->ctl_len = 0;
    ws->mid_frame = true;
    switch (io->opcode) {
    case WSLAY_PING: case WSLAY_PONG: case WSLAY_CONNECTION_CLOSE:
        return 0; /* wslay checked: fin set, at most 125 bytes */
    case WSLAY_TEXT_FRAME:
        return proto_error(ws, out, 1003, cj_fail(err, CJ_E_INVALID, at, "text message from the %s (FLARE sends each frame as a binary message)", peer_side(ws)));
    case WSLAY_BINARY_FRAME:
        if (ws->in_msg)
            return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "new message inside an unfinished fragmented one"));
        ws->in_msg = true;
        ws->msg_len = 0;
        break;
    case WSLAY_CONTINUATION_FRAME:
        if (!ws->in_msg)
            return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "continuation frame with no message open"));
        break;
    default:
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "WebSocket opcode %u (reserved)", io->opcode));
    }
    if (io->payload_length > ws->max_msg - ws->msg_len)
        return proto_error(ws, out, 1009, cj_fail(err, CJ_E_LIMIT, at, "WebSocket message over %llu bytes",
                                                  (unsigned long long)ws->max_msg));
    return 0;
}

/* Payload bytes of a data frame: to sfm, the SFM length noted. */
static int data_bytes(struct cj_ws *ws, const uint8_t *p, size_t n, struct evbuffer *sfm)
{
    for (size_t i = 0; i < n && ws->msg_len + i < 4; i++) ws->sfm_len[ws->msg_len + i] = p[i];
    ws->msg_len += n;
    return n ? cj_chunks_add(&ws->chunks, sfm, p, n) : 0;
}

/* A message ended: it must have carried exactly one SFM frame. */
static int message_end(struct cj_ws *ws, struct evbuffer *out, struct cj_err *err)
{
    ws->in_msg = false;
    uint32_t want = ws->msg_len < 4 ? 0 : cj_frame_length(ws->sfm_len);
    if (ws->msg_len < 4 || want != ws->msg_len)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, ws->consumed,
                                                  "WebSocket message of %llu bytes does not hold one SFM frame (its prefix says %u)",
                                                  (unsigned long long)ws->msg_len, want));
    return 0;
}

/* A control frame is whole: PING answered, CLOSE answered and ends the carrier. */
static int control_end(struct cj_ws *ws, struct evbuffer *out)
{
    if (ws->op == WSLAY_PING) send_control(ws, WSLAY_PONG, ws->ctl, ws->ctl_len, out);
    if (ws->op != WSLAY_CONNECTION_CLOSE) return CJ_WS_MORE;
    cj_ws_close(ws, ws->ctl_len >= 2 ? (uint16_t)(ws->ctl[0] << 8 | ws->ctl[1]) : 1000, out);
    return CJ_WS_CLOSED;
}

/* One chunk wslay handed us. */
static int on_chunk(struct cj_ws *ws, const struct wslay_frame_iocb *io, struct evbuffer *sfm,
                    struct evbuffer *out, struct cj_err *err)
{
    int rc;
    if (!ws->mid_frame && (rc = frame_start(ws, io, sfm, out, err)) < 0) return rc;
    bool control = wslay_is_ctrl_frame(ws->op);
    if (control) {
        memcpy(ws->ctl + ws->ctl_len, io->data, io->data_length); /* flen <= 125 */
        ws->ctl_len += io->data_length;
    } else if (data_bytes(ws, io->data, io->data_length, sfm) != 0) {
        return cj_fail(err, CJ_E_NOMEM, ws->consumed, "out of memory for a WebSocket message");
    }
    ws->foff += io->data_length;
    if (ws->foff < ws->flen) return CJ_WS_MORE;
    ws->mid_frame = false;
    if (control) return control_end(ws, out);
    return ws->fin ? message_end(ws, out, err) : CJ_WS_MORE;
}

static int upgrade(struct cj_ws *ws, struct evbuffer *in, struct evbuffer *out, struct cj_err *err)
{
    int r = ws->role == CJ_WS_CLIENT ? cj_wsup_response(in, ws->key, err)
                                     : cj_wsup_serve(in, CJ_WS_PATH, out, err);
    if (r < 0) ws->state = WS_CLOSED;
    if (r == 1) ws->state = WS_OPEN;
    return r;
}

int cj_ws_read(struct cj_ws *ws, struct evbuffer *in, struct evbuffer *sfm, struct evbuffer *out,
               struct cj_err *err)
{
    if (ws->state == WS_UPGRADE) {
        int r = upgrade(ws, in, out, err);
        if (r <= 0) return r;
    }
    ws->in = in;
    int rc = CJ_WS_MORE;
    while (rc == CJ_WS_MORE && ws->state == WS_OPEN) {
        struct wslay_frame_iocb io;
        memset(&io, 0, sizeof io);
        ssize_t r = wslay_frame_recv(ws->fr, &io);
        if (r == WSLAY_ERR_WANT_READ) break;
        if (r < 0) {
            rc = proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, ws->consumed, "bad WebSocket frame from the %s (%s)",
                                                    peer_side(ws), r == WSLAY_ERR_PROTO ? "length or control-frame rule" : "parser error"));
            break;
        }
        rc = on_chunk(ws, &io, sfm, out, err);
    }
    ws->in = NULL;
    if (cj_chunks_flush(&ws->chunks, sfm) < 0 && rc >= 0)
        rc = cj_fail(err, CJ_E_NOMEM, ws->consumed, "out of memory for a WebSocket message");
    if (rc == CJ_WS_MORE && ws->state == WS_CLOSED) rc = CJ_WS_CLOSED;
    return rc;
}
