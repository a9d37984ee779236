/* SPDX-License-Identifier: Apache-2.0 */
/* hdrline.h — a cellnet header block as one line of key=value pairs, in the
 * block's key order.  Written by cjrelay-sim --log-headers (what arrived) and
 * by tests/e2e/cjpeer --log-headers (what was sent), so a test can compare the
 * two line by line (header only; both include it).
 *
 * Values: str as is, with '%', '=', ',', ':', '[', ']', '{', '}', blanks,
 * control and non-ASCII bytes written %XX, and "" for the empty string; ints
 * in decimal; floats %.17g (round-trip exact); true/false; nil; bin as
 * b:<hex of up to 32 bytes>[...<len>]; arrays [a,b]; maps {k:v,k:v}.
 * Nesting deeper than HL_MAX_DEPTH fails (returns -1); nothing allocates. */
#ifndef CJ_SIM_HDRLINE_H
#define CJ_SIM_HDRLINE_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "util/mp.h"

#define HL_MAX_DEPTH 16

static inline void hl_bytes(FILE *f, const uint8_t *p, uint32_t n)
{
    static const char special[] = "%=,:[]{}\"";
    if (n == 0) fputs("\"\"", f);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t ch = p[i];
        bool esc = ch <= 0x20 || ch >= 0x7f;
        for (const char *s = special; !esc && *s; s++) esc = ch == (uint8_t)*s;
        if (esc) fprintf(f, "%%%02X", ch);
        else fputc(ch, f);
    }
}

static inline void hl_scalar(FILE *f, const struct mp_val *v)
{
    switch (v->kind) {
    case MP_NIL: fputs("nil", f); break;
    case MP_BOOL: fputs(v->b ? "true" : "false", f); break;
    case MP_UINT: fprintf(f, "%" PRIu64, v->u); break;
    case MP_INT: fprintf(f, "%" PRId64, v->i); break;
    case MP_FLOAT: fprintf(f, "%.17g", v->f); break;
    case MP_STR: hl_bytes(f, v->ptr, v->len); break;
    case MP_BIN:
        fputs("b:", f);
        for (uint32_t i = 0; i < v->len && i < 32; i++) fprintf(f, "%02x", v->ptr[i]);
        if (v->len > 32) fprintf(f, "...%" PRIu32, v->len);
        break;
    case MP_EXT: fprintf(f, "ext%d:%" PRIu32, (int)v->ext_type, v->len); break;
    default: fputs("?", f); break;
    }
}

/* One value at c (advanced past it), containers included, without recursion. */
static inline int hl_value(FILE *f, struct mp_cur *c)
{
    struct { uint32_t total, left; bool map; } st[HL_MAX_DEPTH];
    int d = 0;
    for (;;) {
        if (d > 0) {                      /* the next element of the open container */
            uint32_t idx = st[d - 1].total - st[d - 1].left;
            if (idx > 0) fputc(st[d - 1].map && idx % 2 ? ':' : ',', f);
            st[d - 1].left--;
        }
        struct mp_val v;
        if (mp_next(c, &v, NULL) < 0) return -1;
        if (v.kind == MP_ARRAY || v.kind == MP_MAP) {
            if (d == HL_MAX_DEPTH) return -1;
            bool map = v.kind == MP_MAP;
            uint64_t total = map ? (uint64_t)v.n * 2 : v.n;
            if (total > mp_left(c)) return -1;   /* every element takes a byte at least */
            st[d].total = st[d].left = (uint32_t)total;
            st[d].map = map;
            d++;
            fputc(map ? '{' : '[', f);
        } else {
            hl_scalar(f, &v);
        }
        while (d > 0 && st[d - 1].left == 0) {
            fputc(st[d - 1].map ? '}' : ']', f);
            d--;
        }
        if (d == 0) return 0;
    }
}

/* Writes "k=v k=v ...\n" for the header map blk[0..len).  0, or -1 when the
 * block is not a map with str keys (what was written stays, ending in " ?"). */
static inline int hl_line(FILE *f, const uint8_t *blk, size_t len)
{
    struct mp_cur c;
    uint32_t n;
    mp_cur_init(&c, blk, len);
    if (mp_read_map(&c, &n, NULL) < 0) goto bad;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        uint32_t kl;
        if (mp_read_str(&c, &k, &kl, NULL) < 0) goto bad;
        if (i) fputc(' ', f);
        hl_bytes(f, k, kl);
        fputc('=', f);
        if (hl_value(f, &c) < 0) goto bad;
    }
    fputc('\n', f);
    fflush(f);
    return 0;
bad:
    fputs(" ?\n", f);
    fflush(f);
    return -1;
}

#endif
