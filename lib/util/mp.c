/* SPDX-License-Identifier: Apache-2.0 */
/* mp.c — the msgpack cursor, and handing packed bytes on (see mp.h). */
#include "util/mp.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <msgpack.h>

#include "util/text.h"

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static int need(const struct mp_cur *c, size_t at, size_t n, struct cj_err *err, const char *what)
{
    if (at > c->end || c->end - at < n)
        return cj_fail(err, CJ_E_TRUNCATED, c->pos, "msgpack %s truncated at offset %zu (need %zu bytes, %zu left)",
                       what, c->pos, n, at > c->end ? 0 : c->end - at);
    return 0;
}

/* Reads a length-prefixed payload (str/bin/ext) whose length field has lsize bytes. */
static int read_sized(const struct mp_cur *c, size_t *pos, size_t lsize, struct mp_val *v,
                      struct cj_err *err, const char *what)
{
    int rc = need(c, *pos, lsize, err, what);
    if (rc) return rc;
    const uint8_t *p = c->base + *pos;
    uint32_t len = lsize == 1 ? p[0] : lsize == 2 ? be16(p) : be32(p);
    *pos += lsize;
    if ((rc = need(c, *pos, len, err, what))) return rc;
    v->ptr = c->base + *pos;
    v->len = len;
    *pos += len;
    return 0;
}

int mp_next(struct mp_cur *c, struct mp_val *v, struct cj_err *err)
{
    int rc = need(c, c->pos, 1, err, "value");
    if (rc) return rc;
    size_t pos = c->pos;
    uint8_t t = c->base[pos++];
    const uint8_t *p = c->base + pos;
    memset(v, 0, sizeof *v);

    if (t <= 0x7f) { v->kind = MP_UINT; v->u = t; goto done; }
    if (t >= 0xe0) { v->kind = MP_INT; v->i = (int8_t)t; goto done; }
    if ((t & 0xf0) == 0x80) { v->kind = MP_MAP; v->n = t & 0x0f; goto done; }
    if ((t & 0xf0) == 0x90) { v->kind = MP_ARRAY; v->n = t & 0x0f; goto done; }
    if ((t & 0xe0) == 0xa0) {
        v->kind = MP_STR;
        v->len = t & 0x1f;
        if ((rc = need(c, pos, v->len, err, "fixstr"))) return rc;
        v->ptr = c->base + pos;
        pos += v->len;
        goto done;
    }
    switch (t) {
    case 0xc0: v->kind = MP_NIL; break;
    case 0xc2: v->kind = MP_BOOL; v->b = false; break;
    case 0xc3: v->kind = MP_BOOL; v->b = true; break;
    case 0xc4: case 0xc5: case 0xc6:
        v->kind = MP_BIN;
        if ((rc = read_sized(c, &pos, (size_t)1 << (t - 0xc4), v, err, "bin"))) return rc;
        break;
    case 0xd9: case 0xda: case 0xdb:
        v->kind = MP_STR;
        if ((rc = read_sized(c, &pos, (size_t)1 << (t - 0xd9), v, err, "str"))) return rc;
        break;
    case 0xc7: case 0xc8: case 0xc9: {
        size_t ls = (size_t)1 << (t - 0xc7);
        v->kind = MP_EXT;
        if ((rc = need(c, pos, ls + 1, err, "ext"))) return rc;
        uint32_t len = ls == 1 ? p[0] : ls == 2 ? be16(p) : be32(p);
        v->ext_type = (int8_t)p[ls];
        pos += ls + 1;
        if ((rc = need(c, pos, len, err, "ext"))) return rc;
        v->ptr = c->base + pos;
        v->len = len;
        pos += len;
        break;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: {
        uint32_t len = 1u << (t - 0xd4);
        v->kind = MP_EXT;
        if ((rc = need(c, pos, 1 + (size_t)len, err, "fixext"))) return rc;
        v->ext_type = (int8_t)p[0];
        v->ptr = p + 1;
        v->len = len;
        pos += 1 + len;
        break;
    }
    case 0xca: {
        if ((rc = need(c, pos, 4, err, "float32"))) return rc;
        uint32_t bits = be32(p);
        float f;
        memcpy(&f, &bits, 4);
        v->kind = MP_FLOAT; v->f = f; v->f32 = true; pos += 4;
        break;
    }
    case 0xcb: {
        if ((rc = need(c, pos, 8, err, "float64"))) return rc;
        uint64_t bits = be64(p);
        memcpy(&v->f, &bits, 8);
        v->kind = MP_FLOAT; pos += 8;
        break;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        size_t n = (size_t)1 << (t - 0xcc);
        if ((rc = need(c, pos, n, err, "uint"))) return rc;
        v->kind = MP_UINT;
        v->u = n == 1 ? p[0] : n == 2 ? be16(p) : n == 4 ? be32(p) : be64(p);
        pos += n;
        break;
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        size_t n = (size_t)1 << (t - 0xd0);
        if ((rc = need(c, pos, n, err, "int"))) return rc;
        int64_t x = n == 1 ? (int8_t)p[0] : n == 2 ? (int16_t)be16(p)
                  : n == 4 ? (int32_t)be32(p) : (int64_t)be64(p);
        if (x >= 0) { v->kind = MP_UINT; v->u = (uint64_t)x; }
        else { v->kind = MP_INT; v->i = x; }
        pos += n;
        break;
    }
    case 0xdc: case 0xde:
        if ((rc = need(c, pos, 2, err, "container"))) return rc;
        v->kind = t == 0xdc ? MP_ARRAY : MP_MAP; v->n = be16(p); pos += 2;
        break;
    case 0xdd: case 0xdf:
        if ((rc = need(c, pos, 4, err, "container"))) return rc;
        v->kind = t == 0xdd ? MP_ARRAY : MP_MAP; v->n = be32(p); pos += 4;
        break;
    default: /* 0xc1: never used */
        return cj_fail(err, CJ_E_INVALID, c->pos, "msgpack: invalid type byte 0x%02x at offset %zu", t, c->pos);
    }
done:
    c->pos = pos;
    return 0;
}

int mp_skip(struct mp_cur *c, struct cj_err *err)
{
    /* Iterative: count the values still owed.  Every value takes at least one
     * byte, so a count above the bytes left is a truncation we can report at
     * once — this bounds the work by the input size whatever counts it claims. */
    struct mp_cur save = *c;
    uint64_t owed = 1;
    while (owed > 0) {
        if (owed > mp_left(c)) {
            size_t at = c->pos;
            *c = save;
            return cj_fail(err, CJ_E_TRUNCATED, at,
                           "msgpack: containers claim %llu more values but only %zu bytes are left (offset %zu)",
                           (unsigned long long)owed, (size_t)(c->end - at), at);
        }
        struct mp_val v;
        int rc = mp_next(c, &v, err);
        if (rc) { *c = save; return rc; }
        owed--;
        if (v.kind == MP_ARRAY) owed += v.n;
        else if (v.kind == MP_MAP) owed += 2ull * v.n;
    }
    return 0;
}

static int read_kind(struct mp_cur *c, struct mp_val *v, enum mp_kind want, const char *name,
                     struct cj_err *err)
{
    struct mp_cur save = *c;
    int rc = mp_next(c, v, err);
    if (rc) return rc;
    if (v->kind != want) {
        *c = save;
        return cj_fail(err, CJ_E_TYPE, save.pos, "msgpack: expected %s at offset %zu (type byte 0x%02x)",
                       name, save.pos, c->base[save.pos]);
    }
    return 0;
}

int mp_read_map(struct mp_cur *c, uint32_t *n, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_MAP, "map", err);
    if (!rc) *n = v.n;
    return rc;
}

int mp_read_array(struct mp_cur *c, uint32_t *n, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_ARRAY, "array", err);
    if (!rc) *n = v.n;
    return rc;
}

int mp_read_str(struct mp_cur *c, const uint8_t **p, uint32_t *len, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_STR, "str", err);
    if (!rc) { *p = v.ptr; *len = v.len; }
    return rc;
}

int mp_read_bin(struct mp_cur *c, const uint8_t **p, uint32_t *len, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_BIN, "bin", err);
    if (!rc) { *p = v.ptr; *len = v.len; }
    return rc;
}

int mp_read_int(struct mp_cur *c, int64_t *out, struct cj_err *err)
{
    struct mp_cur save = *c;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind == MP_INT) { *out = v.i; return 0; }
    if (v.kind == MP_UINT && v.u <= (uint64_t)INT64_MAX) { *out = (int64_t)v.u; return 0; }
    *c = save;
    return cj_fail(err, CJ_E_TYPE, save.pos, "msgpack: expected int at offset %zu", save.pos);
}

int mp_read_uint(struct mp_cur *c, uint64_t *out, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_UINT, "unsigned int", err);
    if (!rc) *out = v.u;
    return rc;
}

int mp_read_float(struct mp_cur *c, double *out, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_FLOAT, "float", err);
    if (!rc) *out = v.f;
    return rc;
}

int mp_read_bool(struct mp_cur *c, bool *out, struct cj_err *err)
{
    struct mp_val v;
    int rc = read_kind(c, &v, MP_BOOL, "bool", err);
    if (!rc) *out = v.b;
    return rc;
}

bool mp_str_eq(const uint8_t *p, uint32_t len, const char *s)
{
    size_t n = strlen(s);
    return n == len && memcmp(p, s, n) == 0;
}

int mp_read_key(struct mp_cur *c, struct mp_val *k, struct cj_err *err)
{
    struct mp_cur save = *c;
    int rc = mp_next(c, k, err);
    if (rc || (k->kind != MP_ARRAY && k->kind != MP_MAP)) return rc;
    *c = save;
    return mp_skip(c, err);
}

bool mp_key_is(const struct mp_val *k, const char *s)
{
    return k->kind == MP_STR && mp_str_eq(k->ptr, k->len, s);
}

int mp_read_entry(struct mp_cur *c, struct mp_val *k, struct mp_cur *val, struct cj_err *err)
{
    int rc = mp_read_key(c, k, err);
    if (rc) return rc;
    size_t vat = c->pos;
    if ((rc = mp_skip(c, err))) return rc;
    *val = (struct mp_cur){c->base, vat, c->pos};
    return 0;
}

int mp_read_cstr(struct mp_cur *c, char *buf, size_t max, bool allow_empty, const char *who, const char *what,
                 struct cj_err *err)
{
    size_t at = c->pos;
    const uint8_t *p;
    uint32_t len;
    if (mp_read_str(c, &p, &len, err))
        return cj_fail(err, CJ_E_TYPE, at, "%s: '%s' is not a str (offset %zu)", who, what, at);
    if (!len && !allow_empty) return cj_fail(err, CJ_E_INVALID, at, "%s: '%s' is empty (offset %zu)", who, what, at);
    if (len > max)
        return cj_fail(err, CJ_E_LIMIT, at, "%s: '%s' is %u bytes, limit %zu (offset %zu)", who, what, len, max, at);
    if (cj_utf8_prefix(p, len, SIZE_MAX) == SIZE_MAX)
        return cj_fail(err, CJ_E_INVALID, at, "%s: '%s' is not valid UTF-8 or holds NUL (offset %zu)", who, what, at);
    memcpy(buf, p, len);
    buf[len] = 0;
    return 0;
}

int mp_map_find(struct mp_cur *c, uint32_t n, const char *key, struct mp_cur *val, struct cj_err *err)
{
    int found = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        struct mp_cur v;
        int rc = mp_read_entry(c, &k, &v, err);
        if (rc) return rc;
        if (!found && mp_key_is(&k, key)) {
            *val = v;
            found = 1;
        }
    }
    return found;
}

int mp_map_find_str(struct mp_cur *c, uint32_t n, const char *key, char *buf, size_t bufsz,
                    struct cj_err *err)
{
    struct mp_cur v;
    int rc = mp_map_find(c, n, key, &v, err);
    if (rc <= 0) return rc;
    const uint8_t *p;
    uint32_t len;
    if ((rc = mp_read_str(&v, &p, &len, err))) return rc;
    if (len >= bufsz)
        return cj_fail(err, CJ_E_LIMIT, v.pos, "msgpack: value of '%s' is %u bytes, limit %zu", key, len, bufsz - 1);
    memcpy(buf, p, len);
    buf[len] = 0;
    return 1;
}

/* ---- writing ---------------------------------------------------------------------------------- */

static void free_packed(const void *data, size_t len, void *arg)
{
    (void)len, (void)arg;
    free((void *)data);
}

int mp_sbuffer_move(struct evbuffer *out, struct msgpack_sbuffer *sb)
{
    size_t len = sb->size;
    char *data = msgpack_sbuffer_release(sb);   /* sb is empty from here */
    if (len && evbuffer_add_reference(out, data, len, free_packed, NULL) == 0) return 0;
    free(data);
    return len ? -1 : 0;
}

struct evbuffer *mp_sbuffer_to_evbuffer(struct msgpack_sbuffer *sb)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        free(msgpack_sbuffer_release(sb));
        return NULL;
    }
    if (mp_sbuffer_move(b, sb) == 0) return b;
    evbuffer_free(b);
    return NULL;
}
