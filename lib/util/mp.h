/* SPDX-License-Identifier: Apache-2.0 */
/* mp.h — a bounds-checked, zero-copy msgpack cursor.
 *
 * Why not msgpack-c's unpacker for reading: the relay must splice raw byte spans
 * (copy a value verbatim, replace one nested map) and must never allocate in
 * proportion to a count an attacker wrote.  msgpack-c's unpacker builds an object
 * tree in a zone and exposes no byte spans for nested values, so reading goes
 * through this cursor (no allocation at all) and writing goes through msgpack-c's
 * packer (msgpack_sbuffer + msgpack_packer).
 *
 * Every function checks bounds, advances the cursor only on success and returns
 * 0 or a negative cj_errc with err filled (offset = absolute position in base). */
#ifndef CJ_UTIL_MP_H
#define CJ_UTIL_MP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum mp_kind {
    MP_NIL = 1, MP_BOOL, MP_UINT, MP_INT, MP_FLOAT, MP_STR, MP_BIN, MP_ARRAY, MP_MAP, MP_EXT,
};

struct mp_val {
    enum mp_kind kind;
    bool b;              /* MP_BOOL */
    uint64_t u;          /* MP_UINT */
    int64_t i;           /* MP_INT (negative values only) */
    double f;            /* MP_FLOAT (float32 widened) */
    bool f32;            /* MP_FLOAT encoded as float32 */
    uint32_t n;          /* MP_ARRAY / MP_MAP: element / pair count */
    const uint8_t *ptr;  /* MP_STR / MP_BIN / MP_EXT: data */
    uint32_t len;        /* MP_STR / MP_BIN / MP_EXT: data length */
    int8_t ext_type;     /* MP_EXT */
};

struct mp_cur {
    const uint8_t *base; /* start of the whole buffer (offsets in errors are from here) */
    size_t pos;          /* next byte to read */
    size_t end;          /* one past the last readable byte */
};

static inline void mp_cur_init(struct mp_cur *c, const void *buf, size_t len)
{
    c->base = (const uint8_t *)buf;
    c->pos = 0;
    c->end = len;
}

static inline size_t mp_left(const struct mp_cur *c) { return c->end - c->pos; }

/* Reads one value's head: a scalar whole, a container only its header (the
 * elements follow).  Ext types are read (for robustness) but never written. */
int mp_next(struct mp_cur *c, struct mp_val *v, struct cj_err *err);

/* Skips one complete value, however deeply nested, without recursion or
 * allocation; fails on truncation. */
int mp_skip(struct mp_cur *c, struct cj_err *err);

/* Typed readers.  mp_read_int accepts any msgpack int that fits int64. */
int mp_read_map(struct mp_cur *c, uint32_t *n, struct cj_err *err);
int mp_read_array(struct mp_cur *c, uint32_t *n, struct cj_err *err);
int mp_read_str(struct mp_cur *c, const uint8_t **p, uint32_t *len, struct cj_err *err);
int mp_read_bin(struct mp_cur *c, const uint8_t **p, uint32_t *len, struct cj_err *err);
int mp_read_int(struct mp_cur *c, int64_t *out, struct cj_err *err);
int mp_read_uint(struct mp_cur *c, uint64_t *out, struct cj_err *err);
int mp_read_float(struct mp_cur *c, double *out, struct cj_err *err); /* float32/64 only */
int mp_read_bool(struct mp_cur *c, bool *out, struct cj_err *err);

/* True when the str [p, p+len) equals the C string s. */
bool mp_str_eq(const uint8_t *p, uint32_t len, const char *s);

/* Reads a map key's head into k.  A container key (legal msgpack, never a name)
 * is skipped whole, so the cursor is at the value either way; k->kind then says
 * MP_ARRAY or MP_MAP and k is no str. */
int mp_read_key(struct mp_cur *c, struct mp_val *k, struct cj_err *err);

/* True when k is a str equal to s. */
bool mp_key_is(const struct mp_val *k, const char *s);

/* Reads one map entry: its key as mp_read_key does, and *val a cursor over
 * exactly the value's bytes (c left after the value). */
int mp_read_entry(struct mp_cur *c, struct mp_val *k, struct mp_cur *val, struct cj_err *err);

/* Copies a str into buf (max bytes and a NUL): valid UTF-8 without NUL, not
 * empty unless allow_empty.  Errors read "<who>: '<what>' is not a str (offset N)"
 * and the like (CJ_E_TYPE, CJ_E_INVALID, CJ_E_LIMIT), at the str's offset. */
int mp_read_cstr(struct mp_cur *c, char *buf, size_t max, bool allow_empty, const char *who, const char *what,
                 struct cj_err *err);

/* Looks up key (a str) in the map whose header was just read (n pairs follow
 * at c).  On success *val is a cursor over exactly the value's bytes and c is
 * left after the whole map.  Returns 1 found, 0 not found, <0 on error. */
int mp_map_find(struct mp_cur *c, uint32_t n, const char *key, struct mp_cur *val, struct cj_err *err);

/* Like mp_map_find but copies the found value's string into buf (NUL-ended,
 * must fit) — a convenience for small header values. */
int mp_map_find_str(struct mp_cur *c, uint32_t n, const char *key, char *buf, size_t bufsz,
                    struct cj_err *err);

/* ---- writing ---------------------------------------------------------------------------------- */

struct evbuffer;
struct msgpack_sbuffer;

/* Moves what was packed into sb into a new evbuffer without copying it (the
 * evbuffer frees the bytes when it is done with them); sb is left empty either
 * way, so destroying it afterwards is harmless.  NULL when out of memory. */
struct evbuffer *mp_sbuffer_to_evbuffer(struct msgpack_sbuffer *sb);

/* The same into an existing evbuffer (appended); sb is left empty either way.
 * 0, or -1 when out of memory. */
int mp_sbuffer_move(struct evbuffer *out, struct msgpack_sbuffer *sb);

#endif
