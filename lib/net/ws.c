/* SPDX-License-Identifier: Apache-2.0 */
/* ws.c — WebSocket carriage of SFM frames (see ws.h). */
#include "net/ws.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wslay/wslay.h>

#include "net/chainsplit.h"
#include "net/chunks.h"
#include "net/wsframe.h"
#include "net/wsupgrade.h"
#include "util/text.h"
#include "wire/frame.h"

enum ws_state { WS_UPGRADE, WS_OPEN, WS_CLOSED };

#define KEY_STOCK 256            /* mask key bytes fetched per getrandom */

struct cj_ws {
    enum cj_ws_role role;
    enum ws_state state;
    wslay_frame_context_ptr fr;  /* writes the control frames */
    struct evbuffer *out;        /* the buffer of the call in progress, for wslay's send_cb */
    uint64_t consumed; /* bytes taken from in since the upgrade: error offsets */
    char host[256];
    char key[CJ_WSUP_KEY_LEN + 1];
    uint64_t max_msg;
    /* the frame being received: its header, payload bytes taken so far */
    bool mid_frame;
    struct cj_wsf_head fh;
    uint64_t foff;
    /* the data message being received (one SFM frame) */
    bool in_msg;
    uint64_t msg_len;
    uint8_t sfm_len[4]; /* its first 4 bytes: the SFM frame's length */
    struct cj_chunks chunks;     /* SFM bytes copied (not moved as chains), into pooled blocks */
    struct cj_chunks out_chunks; /* a client's masked payloads, likewise */
    /* a control frame's payload */
    uint8_t ctl[125];
    /* mask keys for what a client sends */
    uint8_t keys[KEY_STOCK];
    size_t keys_used;
};

/* ---- wslay's callbacks ----------------------------------------------------------------- */

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
    static const struct wslay_frame_callbacks cbs = {send_cb, NULL, genmask_cb};
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
    struct cj_wsf_head h = {.fin = true, .opcode = CJ_WSF_BINARY, .masked = ws->role == CJ_WS_CLIENT, .len = len};
    if (h.masked && next_key(ws, h.key) < 0) return -1;
    uint8_t b[CJ_WSF_MAX_HEAD];
    if (evbuffer_add(out, b, cj_wsf_encode(b, &h)) != 0) return -1;
    if (h.masked) return move_masked(ws, src, len, out, h.key);
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

/* A control frame's own rules (§5.5): whole (FIN) and at most 125 bytes. */
static int control_start(struct cj_ws *ws, struct evbuffer *out, struct cj_err *err)
{
    const struct cj_wsf_head *h = &ws->fh;
    const char *name = cj_wsf_opcode_name(h->opcode);
    if (h->opcode != CJ_WSF_PING && h->opcode != CJ_WSF_PONG && h->opcode != CJ_WSF_CLOSE)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, ws->consumed, "WebSocket opcode %u (reserved)", h->opcode));
    if (!h->fin)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, ws->consumed,
                                                  "fragmented %s frame from the %s (a control frame comes whole)", name, peer_side(ws)));
    if (h->len > sizeof ws->ctl)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, ws->consumed,
                                                  "%s frame of %llu bytes from the %s (a control frame carries at most 125)",
                                                  name, (unsigned long long)h->len, peer_side(ws)));
    return 0;
}

/* A data frame's place in the message (one SFM frame) and its size. */
static int data_start(struct cj_ws *ws, struct evbuffer *out, struct cj_err *err)
{
    const struct cj_wsf_head *h = &ws->fh;
    uint64_t at = ws->consumed;
    switch (h->opcode) {
    case CJ_WSF_TEXT:
        return proto_error(ws, out, 1003, cj_fail(err, CJ_E_INVALID, at, "text message from the %s (FLARE sends each frame as a binary message)", peer_side(ws)));
    case CJ_WSF_BINARY:
        if (ws->in_msg)
            return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "new message inside an unfinished fragmented one"));
        ws->in_msg = true;
        ws->msg_len = 0;
        break;
    case CJ_WSF_CONTINUATION:
        if (!ws->in_msg)
            return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "continuation frame with no message open"));
        break;
    default:
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "WebSocket opcode %u (reserved)", h->opcode));
    }
    if (h->len > ws->max_msg - ws->msg_len)
        return proto_error(ws, out, 1009, cj_fail(err, CJ_E_LIMIT, at, "WebSocket message over %llu bytes",
                                                  (unsigned long long)ws->max_msg));
    return 0;
}

/* The header of the next frame, once whole in in: decoded, checked, taken.
 * 1: a frame is open; 0: its header has not all arrived; <0 refused. */
static int frame_start(struct cj_ws *ws, struct evbuffer *in, struct evbuffer *out, struct cj_err *err)
{
    uint8_t b[CJ_WSF_MAX_HEAD];
    ev_ssize_t n = evbuffer_copyout(in, b, sizeof b);
    int r = cj_wsf_decode(b, n > 0 ? (size_t)n : 0, ws->consumed, &ws->fh, err);
    if (r < 0) return proto_error(ws, out, 1002, r);
    if (r == 0) return 0;
    const struct cj_wsf_head *h = &ws->fh;
    uint64_t at = ws->consumed;
    if (h->rsv)
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "WebSocket frame with reserved bits %u set (no extension agreed)", h->rsv));
    if (h->masked != (ws->role == CJ_WS_SERVER))
        return proto_error(ws, out, 1002, cj_fail(err, CJ_E_INVALID, at, "%s frame from the %s", h->masked ? "masked" : "unmasked", peer_side(ws)));
    r = cj_wsf_is_control(h->opcode) ? control_start(ws, out, err) : data_start(ws, out, err);
    if (r < 0) return r;
    evbuffer_drain(in, h->size);
    ws->consumed += h->size;
    ws->foff = 0;
    ws->mid_frame = true;
    return 1;
}

/* The first 4 bytes of a message (the SFM frame's length), from the next n
 * payload bytes at the head of in. */
static void note_prefix(struct cj_ws *ws, struct evbuffer *in, size_t n)
{
    if (ws->msg_len >= 4) return;
    uint8_t p[4];
    size_t k = 4 - (size_t)ws->msg_len < n ? 4 - (size_t)ws->msg_len : n;
    evbuffer_copyout(in, p, k);
    if (ws->fh.masked) cj_ws_mask(p, p, k, ws->fh.key, ws->foff);
    memcpy(ws->sfm_len + ws->msg_len, p, k);
}

/* Copies n payload bytes from in to sfm through pooled blocks (chunks.h),
 * unmasked in the same pass when the frame is masked. */
static int copy_payload(struct cj_ws *ws, struct evbuffer *in, size_t n, struct evbuffer *sfm)
{
    uint64_t off = ws->foff;
    while (n > 0) {
        size_t room;
        uint8_t *d = cj_chunks_space(&ws->chunks, sfm, &room);
        if (!d) return -1;
        int k = evbuffer_remove(in, d, n < room ? n : room);
        if (k <= 0) return -1;
        if (ws->fh.masked) cj_ws_mask(d, d, (size_t)k, ws->fh.key, off);
        cj_chunks_wrote(&ws->chunks, (size_t)k);
        off += (uint64_t)k;
        n -= (size_t)k;
    }
    return 0;
}

/* Moves n unmasked payload bytes from in to sfm without copying them: all of
 * in as its own chains, or the first n as references on them (chainsplit.h).
 * A run under CJ_CHUNKS_SMALL is copied into pooled blocks instead, so a small
 * message kept long pins no large block. */
static int move_payload(struct cj_ws *ws, struct evbuffer *in, size_t n, struct evbuffer *sfm)
{
    if (n < CJ_CHUNKS_SMALL) return copy_payload(ws, in, n, sfm);
    if (cj_chunks_flush(&ws->chunks, sfm) < 0) return -1; /* what was copied goes first */
    if (n == evbuffer_get_length(in)) return evbuffer_add_buffer(sfm, in);
    return cj_chain_split(in, n, sfm, CJ_CHUNKS_SMALL);
}

/* Payload bytes of a data frame: to sfm, the SFM length noted. */
static int data_bytes(struct cj_ws *ws, struct evbuffer *in, size_t n, struct evbuffer *sfm)
{
    note_prefix(ws, in, n);
    ws->msg_len += n;
    return ws->fh.masked ? copy_payload(ws, in, n, sfm) : move_payload(ws, in, n, sfm);
}

/* Payload bytes of a control frame: kept, unmasked, until it is whole. */
static void control_bytes(struct cj_ws *ws, struct evbuffer *in, size_t n)
{
    uint8_t *d = ws->ctl + ws->foff; /* foff + n <= len <= 125 */
    evbuffer_remove(in, d, n);
    if (ws->fh.masked) cj_ws_mask(d, d, n, ws->fh.key, ws->foff);
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
    size_t n = (size_t)ws->fh.len;
    if (ws->fh.opcode == CJ_WSF_PING) send_control(ws, WSLAY_PONG, ws->ctl, n, out);
    if (ws->fh.opcode != CJ_WSF_CLOSE) return CJ_WS_MORE;
    cj_ws_close(ws, n >= 2 ? (uint16_t)(ws->ctl[0] << 8 | ws->ctl[1]) : 1000, out);
    return CJ_WS_CLOSED;
}

/* What has arrived of the open frame's payload; its end when all of it has. */
static int frame_payload(struct cj_ws *ws, struct evbuffer *in, struct evbuffer *sfm, struct evbuffer *out,
                         struct cj_err *err)
{
    uint64_t left = ws->fh.len - ws->foff;
    size_t have = evbuffer_get_length(in);
    size_t n = left < have ? (size_t)left : have;
    bool control = cj_wsf_is_control(ws->fh.opcode);
    if (control) control_bytes(ws, in, n);
    else if (n && data_bytes(ws, in, n, sfm) != 0)
        return cj_fail(err, CJ_E_NOMEM, ws->consumed, "out of memory for a WebSocket message");
    ws->foff += n;
    ws->consumed += n;
    if (ws->foff < ws->fh.len) return CJ_WS_MORE;
    ws->mid_frame = false;
    if (control) return control_end(ws, out);
    return ws->fh.fin ? message_end(ws, out, err) : CJ_WS_MORE;
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
    int rc = CJ_WS_MORE;
    while (rc == CJ_WS_MORE && ws->state == WS_OPEN) {
        if (!ws->mid_frame) {
            int r = frame_start(ws, in, out, err);
            if (r <= 0) {
                rc = r;
                break;
            }
        }
        rc = frame_payload(ws, in, sfm, out, err);
        if (rc == CJ_WS_MORE && ws->mid_frame) break; /* the rest of the frame has not arrived */
    }
    if (cj_chunks_flush(&ws->chunks, sfm) < 0 && rc >= 0)
        rc = cj_fail(err, CJ_E_NOMEM, ws->consumed, "out of memory for a WebSocket message");
    if (rc == CJ_WS_MORE && ws->state == WS_CLOSED) rc = CJ_WS_CLOSED;
    return rc;
}
