/* SPDX-License-Identifier: Apache-2.0 */
/* frame.c — SFM prefix codec, stream splitter, HELLO/READY/PING/PONG (see frame.h). */
#include "wire/frame.h"

#include <string.h>

#include "util/mp.h"

/* ---- byte order ----------------------------------------------------------- */

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* ---- types ---------------------------------------------------------------- */

const char *cj_frame_type_name(uint8_t type)
{
    switch (type) {
    case CJ_FRAME_DATA: return "DATA";
    case CJ_FRAME_FRAG: return "FRAG";
    case CJ_FRAME_ACK: return "ACK";
    case CJ_FRAME_HELLO: return "HELLO";
    case CJ_FRAME_READY: return "READY";
    case CJ_FRAME_PING: return "PING";
    case CJ_FRAME_PONG: return "PONG";
    }
    return "unknown";
}

bool cj_frame_type_is_unused(uint8_t type)
{
    return type == CJ_FRAME_FRAG || type == CJ_FRAME_ACK;
}

static bool type_is_known(uint8_t type) { return type >= CJ_FRAME_DATA && type <= CJ_FRAME_PONG; }

/* HELLO, READY, PING, PONG carry no header block. */
static bool type_is_control(uint8_t type) { return type >= CJ_FRAME_HELLO && type <= CJ_FRAME_PONG; }

/* ---- prefix --------------------------------------------------------------- */

void cj_frame_prefix_encode(const struct cj_frame_prefix *p, uint8_t out[CJ_FRAME_PREFIX_LEN])
{
    put32(out, p->length);
    put16(out + 4, p->header_len);
    out[6] = p->type;
    out[7] = p->reserved;
    put16(out + 8, p->flags);
    put16(out + 10, p->app_id);
    put16(out + 12, p->stream_id);
    put16(out + 14, p->sequence);
}

static uint32_t effective_max(uint32_t max_len)
{
    return (max_len == 0 || max_len > CJ_FRAME_MAX_DEFAULT) ? CJ_FRAME_MAX_DEFAULT : max_len;
}

static void prefix_read(const uint8_t *in, struct cj_frame_prefix *p)
{
    p->length = get32(in);
    p->header_len = get16(in + 4);
    p->type = in[6];
    p->reserved = in[7];
    p->flags = get16(in + 8);
    p->app_id = get16(in + 10);
    p->stream_id = get16(in + 12);
    p->sequence = get16(in + 14);
}

/* The reader checks of doc/protocol/sfm.md §6 step 1, then the per-type header rule. */
static int prefix_check(const struct cj_frame_prefix *p, uint32_t max, struct cj_err *err)
{
    if (p->length < CJ_FRAME_PREFIX_LEN)
        return cj_fail(err, CJ_E_INVALID, 0, "frame length %u at offset 0 is below the 16-byte prefix", p->length);
    if (p->length > max)
        return cj_fail(err, CJ_E_LIMIT, 0, "frame length %u at offset 0 exceeds the limit %u", p->length, max);
    if (!type_is_known(p->type))
        return cj_fail(err, CJ_E_INVALID, 6, "frame type %u at offset 6 is unknown", p->type);
    if ((uint32_t)CJ_FRAME_PREFIX_LEN + p->header_len > p->length)
        return cj_fail(err, CJ_E_INVALID, 4, "frame header_len %u at offset 4 does not fit in length %u",
                       p->header_len, p->length);
    if (p->type == CJ_FRAME_DATA && p->header_len == 0)
        return cj_fail(err, CJ_E_MISSING, 4, "DATA frame header_len at offset 4 is 0 (a header map is required)");
    if (type_is_control(p->type) && p->header_len != 0)
        return cj_fail(err, CJ_E_INVALID, 4, "%s frame header_len %u at offset 4 must be 0",
                       cj_frame_type_name(p->type), p->header_len);
    return 0;
}

int cj_frame_prefix_decode(const uint8_t in[CJ_FRAME_PREFIX_LEN], uint32_t max_len,
                           struct cj_frame_prefix *out, struct cj_err *err)
{
    struct cj_frame_prefix p;
    prefix_read(in, &p);
    int rc = prefix_check(&p, effective_max(max_len), err);
    if (rc) return rc;
    *out = p;
    return 0;
}

/* ---- stream splitting ----------------------------------------------------- */

int cj_frame_peek(const uint8_t *buf, size_t avail, uint32_t max_len,
                  struct cj_frame_prefix *out, struct cj_err *err)
{
    if (avail < CJ_FRAME_PREFIX_LEN) return 0;
    int rc = cj_frame_prefix_decode(buf, max_len, out, err);
    return rc ? rc : 1;
}

int cj_frame_next(const uint8_t *buf, size_t avail, uint32_t max_len,
                  struct cj_frame_prefix *out, size_t *frame_len, struct cj_err *err)
{
    struct cj_frame_prefix p;
    int rc = cj_frame_peek(buf, avail, max_len, &p, err);
    if (rc < 0) return rc;
    if (rc == 0) { *frame_len = CJ_FRAME_PREFIX_LEN; return 0; }
    *out = p;
    *frame_len = p.length;
    return avail >= p.length;
}

void cj_frame_view_init(struct cj_frame_view *v, const uint8_t *frame, const struct cj_frame_prefix *p)
{
    v->prefix = *p;
    v->header = frame + CJ_FRAME_PREFIX_LEN;
    v->header_len = p->header_len;
    v->payload = v->header + p->header_len;
    v->payload_len = p->length - CJ_FRAME_PREFIX_LEN - p->header_len;
}

/* ---- HELLO / READY: encoding ---------------------------------------------- */

static int copy_name(char *dst, const char *src, const char *what, struct cj_err *err)
{
    size_t n = src ? strlen(src) : 0;
    if (!src) return cj_fail(err, CJ_E_MISSING, 0, "HELLO %s is NULL", what);
    if (n > CJ_FRAME_NAME_MAX)
        return cj_fail(err, CJ_E_LIMIT, 0, "HELLO %s is %zu bytes, limit %d", what, n, CJ_FRAME_NAME_MAX);
    memcpy(dst, src, n + 1);
    return 0;
}

int cj_frame_hello_init(struct cj_frame_hello *h, const char *fqcn, double timestamp, struct cj_err *err)
{
    memset(h, 0, sizeof *h);
    int rc = copy_name(h->endpoint_name, fqcn, "endpoint_name", err);
    if (rc) return rc;
    memcpy(h->fqcn, h->endpoint_name, sizeof h->fqcn);
    h->has_fqcn = true;
    h->timestamp = timestamp;
    return 0;
}

static int pack_kv_str(msgpack_packer *pk, const char *key, const char *val)
{
    size_t kn = strlen(key), vn = strlen(val);
    return msgpack_pack_str_with_body(pk, key, kn) || msgpack_pack_str_with_body(pk, val, vn);
}

/* The struct may have been filled by hand: refuse names the decoder would refuse. */
static int check_name_len(const char *s, size_t cap, const char *what, struct cj_err *err)
{
    if (strnlen(s, cap) >= cap)
        return cj_fail(err, CJ_E_LIMIT, 0, "HELLO %s is longer than %d bytes", what, CJ_FRAME_NAME_MAX);
    return 0;
}

int cj_frame_hello_encode(msgpack_sbuffer *sb, const struct cj_frame_hello *h, struct cj_err *err)
{
    int rc = check_name_len(h->endpoint_name, sizeof h->endpoint_name, "endpoint_name", err);
    if (!rc && h->has_fqcn) rc = check_name_len(h->fqcn, sizeof h->fqcn, "fqcn", err);
    if (rc) return rc;
    size_t start = sb->size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    /* Key order and types as NVFlare writes them: str, float64 (cb), str. */
    int bad = msgpack_pack_map(&pk, h->has_fqcn ? 3 : 2)
           || pack_kv_str(&pk, "endpoint_name", h->endpoint_name)
           || msgpack_pack_str_with_body(&pk, "timestamp", 9)
           || msgpack_pack_double(&pk, h->timestamp)
           || (h->has_fqcn && pack_kv_str(&pk, "fqcn", h->fqcn));
    if (bad) {
        sb->size = start;
        return cj_fail(err, CJ_E_NOMEM, 0, "HELLO encode: out of memory");
    }
    return 0;
}

/* ---- HELLO / READY: decoding ---------------------------------------------- */

/* Prefixes err's message with the key being read, so "expected str at offset
 * 20" becomes "HELLO endpoint_name: expected str at offset 20". */
static int in_key(struct cj_err *err, int rc, const char *key)
{
    if (err && rc < 0) {
        char tmp[sizeof err->msg];
        memcpy(tmp, err->msg, sizeof tmp);
        cj_fail(err, err->code, err->offset, "HELLO %s: %.160s", key, tmp);
    }
    return rc;
}

static int read_name(struct mp_cur *c, const char *key, char *dst, struct cj_err *err)
{
    size_t at = c->pos;
    const uint8_t *p;
    uint32_t len;
    int rc = mp_read_str(c, &p, &len, err);
    if (rc) return in_key(err, rc, key);
    if (len > CJ_FRAME_NAME_MAX)
        return cj_fail(err, CJ_E_LIMIT, at, "HELLO %s at offset %zu is %u bytes, limit %d",
                       key, at, len, CJ_FRAME_NAME_MAX);
    /* A NUL would cut the C string short and make two names compare equal. */
    if (memchr(p, 0, len))
        return cj_fail(err, CJ_E_INVALID, at, "HELLO %s at offset %zu contains a NUL byte", key, at);
    memcpy(dst, p, len);
    dst[len] = 0;
    return 0;
}

static int read_number(struct mp_cur *c, double *out, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return in_key(err, rc, "timestamp");
    if (v.kind == MP_FLOAT) *out = v.f;
    else if (v.kind == MP_UINT) *out = (double)v.u;
    else if (v.kind == MP_INT) *out = (double)v.i;
    else {
        c->pos = at;
        return cj_fail(err, CJ_E_TYPE, at, "HELLO timestamp at offset %zu is not a number (type byte 0x%02x)",
                       at, c->base[at]);
    }
    return 0;
}

enum { K_NAME = 1, K_TIME = 2, K_FQCN = 4 };

/* Which known key (K_*), if any, k is; 0 for any other key. */
static int known_key(const struct mp_val *k)
{
    if (k->kind != MP_STR) return 0;
    if (mp_str_eq(k->ptr, k->len, "endpoint_name")) return K_NAME;
    if (mp_str_eq(k->ptr, k->len, "timestamp")) return K_TIME;
    if (mp_str_eq(k->ptr, k->len, "fqcn")) return K_FQCN;
    return 0;
}

/* Reads one key (any msgpack value; containers are skipped whole). */
static int read_value(struct mp_cur *c, int key, struct cj_frame_hello *out, struct cj_err *err)
{
    switch (key) {
    case K_NAME: return read_name(c, "endpoint_name", out->endpoint_name, err);
    case K_TIME: return read_number(c, &out->timestamp, err);
    case K_FQCN: return read_name(c, "fqcn", out->fqcn, err);
    }
    /* an extra key: allowed and ignored (doc/protocol/sfm.md §3) */
    return in_key(err, mp_skip(c, err), "extra value");
}

/* Reads the n pairs of the map; *seen collects the known keys found. */
static int read_pairs(struct mp_cur *c, uint32_t n, struct cj_frame_hello *out, int *seen, struct cj_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        size_t at = c->pos;
        struct mp_val k;
        int rc = mp_read_key(c, &k, err);
        if (rc) return in_key(err, rc, "key");
        int key = known_key(&k);
        /* Python keeps the last duplicate, a first-match reader the first:
         * refuse rather than disagree with the peer about who it is. */
        if (key & *seen)
            return cj_fail(err, CJ_E_INVALID, at, "HELLO key at offset %zu is a duplicate", at);
        *seen |= key;
        if ((rc = read_value(c, key, out, err))) return rc;
    }
    return 0;
}

int cj_frame_hello_decode(const uint8_t *payload, size_t len, struct cj_frame_hello *out,
                          struct cj_err *err)
{
    struct cj_frame_hello h;
    struct mp_cur c;
    uint32_t n;
    int seen = 0;
    memset(&h, 0, sizeof h);
    mp_cur_init(&c, payload, len);
    int rc = mp_read_map(&c, &n, err);
    if (rc) return in_key(err, rc, "payload");
    if ((rc = read_pairs(&c, n, &h, &seen, err))) return rc;
    /* NVFlare's msgpack.unpackb refuses trailing data; so do we. */
    if (c.pos != len)
        return cj_fail(err, CJ_E_INVALID, c.pos, "HELLO payload has %zu bytes after the map at offset %zu",
                       len - c.pos, c.pos);
    if (!(seen & K_NAME)) return cj_fail(err, CJ_E_MISSING, 0, "HELLO payload has no endpoint_name");
    if (!(seen & K_TIME)) return cj_fail(err, CJ_E_MISSING, 0, "HELLO payload has no timestamp");
    h.has_fqcn = (seen & K_FQCN) != 0;
    *out = h;
    return 0;
}

/* ---- whole control frames ------------------------------------------------- */

static void control_prefix(struct cj_frame_prefix *p, uint8_t type, uint32_t length, uint16_t stream_id,
                           uint16_t sequence)
{
    memset(p, 0, sizeof *p);
    p->length = length;
    p->type = type;
    p->stream_id = stream_id;
    p->sequence = sequence;
}

int cj_frame_build_hello(msgpack_sbuffer *sb, uint8_t type, uint16_t stream_id, uint16_t sequence,
                         const struct cj_frame_hello *h, struct cj_err *err)
{
    if (type != CJ_FRAME_HELLO && type != CJ_FRAME_READY)
        return cj_fail(err, CJ_E_INVALID, 0, "build_hello: type %u is not HELLO or READY", type);
    size_t start = sb->size;
    uint8_t pre[CJ_FRAME_PREFIX_LEN] = {0};
    /* Reserve the prefix, write the payload, then fill in the real length. */
    if (msgpack_sbuffer_write(sb, (const char *)pre, sizeof pre))
        return cj_fail(err, CJ_E_NOMEM, 0, "build_hello: out of memory");
    int rc = cj_frame_hello_encode(sb, h, err);
    if (rc) { sb->size = start; return rc; }
    struct cj_frame_prefix p;
    control_prefix(&p, type, (uint32_t)(sb->size - start), stream_id, sequence);
    cj_frame_prefix_encode(&p, (uint8_t *)sb->data + start);
    return 0;
}

void cj_frame_build_heartbeat(uint8_t out[CJ_FRAME_HEARTBEAT_LEN], uint8_t type, uint16_t stream_id,
                              uint16_t sequence)
{
    struct cj_frame_prefix p;
    control_prefix(&p, type, CJ_FRAME_HEARTBEAT_LEN, stream_id, sequence);
    cj_frame_prefix_encode(&p, out);
    out[CJ_FRAME_PREFIX_LEN] = 0xc0;  /* msgpack nil: what NVFlare sends */
}

int cj_frame_build_heartbeat_sb(msgpack_sbuffer *sb, uint8_t type, uint16_t stream_id, uint16_t sequence,
                                struct cj_err *err)
{
    uint8_t f[CJ_FRAME_HEARTBEAT_LEN];
    cj_frame_build_heartbeat(f, type, stream_id, sequence);
    if (msgpack_sbuffer_write(sb, (const char *)f, sizeof f))
        return cj_fail(err, CJ_E_NOMEM, 0, "build_heartbeat: out of memory");
    return 0;
}

int cj_frame_heartbeat_check(const uint8_t *payload, size_t len, struct cj_err *err)
{
    if (len != 1)
        return cj_fail(err, CJ_E_INVALID, 0, "PING/PONG payload is %zu bytes, expected 1 (c0)", len);
    if (payload[0] != 0xc0)
        return cj_fail(err, CJ_E_INVALID, 0, "PING/PONG payload byte 0x%02x at offset 0 is not nil (c0)",
                       payload[0]);
    return 0;
}

/* ---- counters ------------------------------------------------------------- */

void cj_frame_counters_init(struct cj_frame_counters *c)
{
    c->stream_id = 16;
    c->sequence = 0;
}

void cj_frame_counters_next(struct cj_frame_counters *c, uint8_t type, uint16_t *stream_id,
                            uint16_t *sequence)
{
    /* uint16_t arithmetic is the `& 0xFFFF` wrap of doc/protocol/sfm.md §5. */
    c->sequence = (uint16_t)(c->sequence + 1);
    *sequence = c->sequence;
    if (type == CJ_FRAME_HELLO || type == CJ_FRAME_READY) {
        *stream_id = CJ_FRAME_HANDSHAKE_STREAM_ID;
        return;
    }
    c->stream_id = (uint16_t)(c->stream_id + 1);
    *stream_id = c->stream_id;
}
