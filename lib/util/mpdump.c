/* SPDX-License-Identifier: Apache-2.0 */
/* mpdump.c — structural text dump of LOBS containers (see mpdump.h). */
#include "util/text.h"
#include "util/mpdump.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/uuid.h"

enum { LOBS_MAIN = 100, LOBS_TEXT = 101, LOBS_BLOB = 102, LOBS_FILE = 103 };

#define SCALAR_MAX (MPDUMP_SHORTEN * 4 + 64)   /* a shortened repr, in bytes */

/* ---- Python repr of str / bytes, cut at MPDUMP_SHORTEN characters ---------- */

/* Collects the first MPDUMP_SHORTEN+1 characters of a repr; that is enough to
 * know whether it must be shortened (Python cuts repr(v)[:80] + "...<len>",
 * counting characters, so a non-ASCII character counts once, whatever its
 * UTF-8 length). */
struct rbuf {
    char s[MPDUMP_SHORTEN * 4 + 16];
    size_t len;     /* bytes in s */
    size_t chars;   /* characters in s */
    size_t cut;     /* bytes of the first MPDUMP_SHORTEN characters */
    bool over;      /* more than MPDUMP_SHORTEN characters */
};

/* Appends one character of k bytes (k <= 4). */
static void rb_char(struct rbuf *b, const char *s, size_t k)
{
    if (b->over) return;
    if (b->chars == MPDUMP_SHORTEN) { b->cut = b->len; b->over = true; return; }
    memcpy(b->s + b->len, s, k);
    b->len += k;
    b->chars++;
}

/* Appends ASCII text (an escape), one character per byte. */
static void rb_put(struct rbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) rb_char(b, s + i, 1);
}

static void rb_putc(struct rbuf *b, char ch) { rb_put(b, &ch, 1); }

static void rb_escape(struct rbuf *b, const char *fmt, unsigned v)
{
    char e[12];
    int k = snprintf(e, sizeof e, fmt, v);
    rb_put(b, e, (size_t)k);
}

/* Python's quote choice: single quotes unless the text holds ' and no ". */
static char py_quote(const uint8_t *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    return sq && !dq ? '"' : '\'';
}

/* Escapes shared by str and bytes repr; returns false when ch needs no escape. */
static bool rb_common_escape(struct rbuf *b, unsigned ch, char q)
{
    if (ch == (unsigned char)q || ch == '\\') { rb_putc(b, '\\'); rb_putc(b, (char)ch); return true; }
    if (ch == '\t') { rb_put(b, "\\t", 2); return true; }
    if (ch == '\n') { rb_put(b, "\\n", 2); return true; }
    if (ch == '\r') { rb_put(b, "\\r", 2); return true; }
    return false;
}

static void repr_bytes(struct rbuf *b, const uint8_t *p, size_t n)
{
    char q = py_quote(p, n);
    rb_putc(b, 'b');
    rb_putc(b, q);
    for (size_t i = 0; i < n && !b->over; i++) {
        if (rb_common_escape(b, p[i], q)) continue;
        if (p[i] < 0x20 || p[i] >= 0x7f) rb_escape(b, "\\x%02x", p[i]);
        else rb_putc(b, (char)p[i]);
    }
    rb_putc(b, q);
}


/* str.isprintable() for one code point.  Exact for ASCII and Latin-1; above
 * that it knows the separators, format characters and private-use ranges but
 * not the unassigned code points (which Python would escape, we print raw). */
static bool py_printable(uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    if (cp <= 0xa0 || cp == 0xad) return false;
    if (cp == 0x1680 || cp == 0x3000 || cp == 0xfeff || cp == 0x180e) return false;
    if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return false;
    if (cp >= 0x205f && cp <= 0x206f) return false;
    if (cp >= 0xd800 && cp <= 0xf8ff) return false;          /* surrogates, private use */
    if ((cp >= 0xfff9 && cp <= 0xfffb) || cp == 0xfffe || cp == 0xffff) return false;
    if (cp >= 0xf0000) return false;                          /* planes 15-16: private use */
    return true;
}

/* Python repr of a str; *cps gets its length in code points (Python's len).
 * Invalid UTF-8 (which Python's msgpack would refuse) shows as \xNN. */
static void repr_str(struct rbuf *b, const uint8_t *p, size_t n, size_t *cps)
{
    char q = py_quote(p, n);
    size_t count = 0;
    rb_putc(b, q);
    for (size_t i = 0; i < n; count++) {
        uint32_t cp;
        size_t k = cj_utf8_decode(p + i, n - i, &cp);
        if (b->over) { i += k ? k : 1; continue; }   /* only counting now */
        if (k == 0) { rb_escape(b, "\\x%02x", p[i]); i++; continue; }
        if (!rb_common_escape(b, cp, q)) {
            if (py_printable(cp)) rb_char(b, (const char *)p + i, k);
            else if (cp <= 0xff) rb_escape(b, "\\x%02x", cp);
            else if (cp <= 0xffff) rb_escape(b, "\\u%04x", cp);
            else rb_escape(b, "\\U%08x", cp);
        }
        i += k;
    }
    rb_putc(b, q);
    *cps = count;
}

/* Writes the (possibly shortened) repr into out (size >= SCALAR_MAX). */
static void rb_finish(const struct rbuf *b, size_t vlen, char *out, size_t sz)
{
    if (b->over) snprintf(out, sz, "%.*s...<%zu>", (int)b->cut, b->s, vlen);
    else snprintf(out, sz, "%.*s", (int)b->len, b->s);
}

/* ---- Python repr of float --------------------------------------------------- */

void mpdump_float_repr(double x, char *buf, size_t sz)
{
    if (isnan(x)) { snprintf(buf, sz, "nan"); return; }
    if (isinf(x)) { snprintf(buf, sz, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { snprintf(buf, sz, signbit(x) ? "-0.0" : "0.0"); return; }

    /* Shortest correctly rounded digit string that reads back as x. */
    char tmp[40];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX: collect digits and the decimal exponent. */
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg) s++;
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') dig[nd++] = *s;
    int e10 = atoi(s + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    int decpt = e10 + 1;   /* x = 0.d1d2... * 10^decpt, as Python's float_repr_style */

    char o[64];
    int k = 0;
    if (neg) o[k++] = '-';
    if (decpt <= -4 || decpt > 16) {
        o[k++] = dig[0];
        if (nd > 1) { o[k++] = '.'; memcpy(o + k, dig + 1, (size_t)nd - 1); k += nd - 1; }
        k += snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    } else if (decpt <= 0) {
        o[k++] = '0'; o[k++] = '.';
        for (int i = 0; i < -decpt; i++) o[k++] = '0';
        memcpy(o + k, dig, (size_t)nd); k += nd;
    } else if (decpt >= nd) {
        memcpy(o + k, dig, (size_t)nd); k += nd;
        for (int i = nd; i < decpt; i++) o[k++] = '0';
        o[k++] = '.'; o[k++] = '0';
    } else {
        memcpy(o + k, dig, (size_t)decpt); k += decpt;
        o[k++] = '.';
        memcpy(o + k, dig + decpt, (size_t)(nd - decpt)); k += nd - decpt;
    }
    o[k] = 0;
    snprintf(buf, sz, "%s", o);
}

/* ---- scalars and the tree ----------------------------------------------------- */


static void format_scalar(const struct mp_val *v, char *out, size_t sz)
{
    struct rbuf b = {.len = 0};
    size_t cps;
    switch (v->kind) {
    case MP_NIL: snprintf(out, sz, "None"); break;
    case MP_BOOL: snprintf(out, sz, v->b ? "True" : "False"); break;
    case MP_UINT: snprintf(out, sz, "%llu", (unsigned long long)v->u); break;
    case MP_INT: snprintf(out, sz, "%lld", (long long)v->i); break;
    case MP_FLOAT: mpdump_float_repr(v->f, out, sz); break;
    case MP_STR: repr_str(&b, v->ptr, v->len, &cps); rb_finish(&b, cps, out, sz); break;
    case MP_BIN: repr_bytes(&b, v->ptr, v->len); rb_finish(&b, v->len, out, sz); break;
    case MP_EXT: {   /* never written by FOBS; shown as msgpack-python's ExtType */
        char data[MPDUMP_SHORTEN + 32];   /* bytes repr is ASCII: 80 + "...<len>" fits */
        repr_bytes(&b, v->ptr, v->len);
        rb_finish(&b, v->len, data, sizeof data);
        snprintf(out, sz, "ExtType(code=%d, data=%s)", v->ext_type, data);
        break;
    }
    default: snprintf(out, sz, "?"); break;   /* containers are not scalars */
    }
}

struct frame {
    bool map;
    bool want_key;   /* map: the next value read is a key */
    uint64_t left;   /* elements (array) or pairs (map) still to print */
    int bi;          /* column of this container's brackets */
};

int mpdump_value(FILE *out, struct mp_cur *c, int indent, struct cj_err *err)
{
    struct frame st[MPDUMP_MAX_DEPTH];
    int depth = 0;
    char key[SCALAR_MAX + 8], sc[SCALAR_MAX + 16];
    bool have_key = false;

    do {   /* every pass consumes at least one byte, so this ends with the input */
        struct mp_cur at = *c;
        struct mp_val v;
        int rc = mp_next(c, &v, err);
        if (rc) return rc;
        bool container = v.kind == MP_MAP || v.kind == MP_ARRAY;
        struct frame *top = depth ? &st[depth - 1] : NULL;

        if (top && top->want_key) {
            /* A container key is legal msgpack but unhashable in Python; name it only. */
            if (container) {
                *c = at;
                if ((rc = mp_skip(c, err))) return rc;
                snprintf(key, sizeof key, v.kind == MP_MAP ? "<map>" : "<array>");
            } else {
                format_scalar(&v, key, sizeof key);
            }
            top->want_key = false;
            have_key = true;
            continue;
        }

        int col = top ? top->bi + 2 : indent;
        bool done = true;
        if (container) {
            char open = v.kind == MP_MAP ? '{' : '[', close = v.kind == MP_MAP ? '}' : ']';
            int bi = col;
            if (have_key) { fprintf(out, "%*s%s:\n", col, "", key); bi = col + 2; }
            fprintf(out, "%*s%c\n", bi, "", open);
            if (v.n == 0) {
                fprintf(out, "%*s%c\n", bi, "", close);
            } else {
                if (depth == MPDUMP_MAX_DEPTH)
                    return cj_fail(err, CJ_E_LIMIT, at.pos, "mpdump: nesting deeper than %d at offset %zu",
                                   MPDUMP_MAX_DEPTH, at.pos);
                st[depth++] = (struct frame){.map = v.kind == MP_MAP, .want_key = v.kind == MP_MAP,
                                             .left = v.n, .bi = bi};
                done = false;
            }
        } else {
            format_scalar(&v, sc, sizeof sc);
            if (have_key) fprintf(out, "%*s%s: %s\n", col, "", key, sc);
            else fprintf(out, "%*s%s\n", col, "", sc);
        }
        have_key = false;

        /* A value is complete: count it in its container, closing finished ones. */
        while (done && depth > 0) {
            struct frame *f = &st[depth - 1];
            if (--f->left > 0) { f->want_key = f->map; break; }
            fprintf(out, "%*s%c\n", f->bi, "", f->map ? '}' : ']');
            depth--;
        }
    } while (depth > 0);
    return 0;
}

/* ---- LOBS sections ------------------------------------------------------------ */

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static void dump_datum(FILE *out, int marker, const uint8_t *v, size_t len)
{
    if (marker == LOBS_TEXT) {
        /* Raw like Python's print, except that control bytes and invalid UTF-8
         * show as \xNN: a hostile datum must not forge dump lines or embed NULs. */
        fputs("    text: ", out);
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            size_t k = cj_utf8_decode(v + i, len - i, &cp);
            if (k == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
                fprintf(out, "\\x%02x", v[i]);
                i++;
            } else {
                fwrite(v + i, 1, k, out);
                i += k;
            }
        }
        fputc('\n', out);
        return;
    }
    fputs(marker == LOBS_BLOB ? "    blob: " : "    file: ", out);
    size_t shown = len < MPDUMP_BLOB_BYTES ? len : MPDUMP_BLOB_BYTES;
    for (size_t i = 0; i < shown; i++) fprintf(out, "%02x", v[i]);
    fputs(len > shown ? "...\n" : "\n", out);
}

int mpdump_lobs(FILE *out, const uint8_t *p, size_t n, struct cj_err *err)
{
    if (n == 0) return cj_fail(err, CJ_E_TRUNCATED, 0, "lobs: empty container");
    size_t off = 0;
    for (int k = 0; off < n; k++) {
        if (n - off < 10)
            return cj_fail(err, CJ_E_TRUNCATED, off, "lobs: section %d header truncated at offset %zu", k, off);
        int marker = p[off], dot = p[off + 1];
        uint64_t size = be64(p + off + 2);
        if (k == 0 && marker != LOBS_MAIN)
            return cj_fail(err, CJ_E_INVALID, off, "lobs: first section has marker %d, not MAIN (100)", marker);
        if (k > 0 && (marker < LOBS_TEXT || marker > LOBS_FILE))
            return cj_fail(err, CJ_E_INVALID, off, "lobs: section %d has marker %d at offset %zu", k, marker, off);
        if (size > n - off - 10)
            return cj_fail(err, CJ_E_TRUNCATED, off, "lobs: section %d size %llu exceeds the %zu bytes left",
                           k, (unsigned long long)size, n - off - 10);
        if (size == 0 || (k > 0 && size <= 16))
            return cj_fail(err, CJ_E_INVALID, off, "lobs: section %d size %llu too small", k,
                           (unsigned long long)size);
        size_t body = off + 10, blen = (size_t)size;
        char id[40] = "None";
        if (k > 0) { cj_uuid_str(p + body, id); body += 16; blen -= 16; }
        fprintf(out, "section %d: marker=%d dot=%d size_field=%llu datum_id=%s body_len=%zu\n", k, marker, dot,
                (unsigned long long)size, id, blen);
        if (k == 0) {
            struct mp_cur c;
            mp_cur_init(&c, p, body + blen);
            c.pos = body;
            int rc = mpdump_value(out, &c, 4, err);
            if (rc) return rc;
            if (c.pos != body + blen)
                return cj_fail(err, CJ_E_INVALID, c.pos, "lobs: %zu trailing bytes after the main body at offset %zu",
                               body + blen - c.pos, c.pos);
        } else {
            dump_datum(out, marker, p + body, blen);
        }
        off = body + blen;
    }
    return 0;
}

char *mpdump_lobs_str(const uint8_t *p, size_t n, size_t *len, struct cj_err *err)
{
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    if (!f) { cj_fail(err, CJ_E_NOMEM, 0, "mpdump: open_memstream failed"); return NULL; }
    int rc = mpdump_lobs(f, p, n, err);
    if (fclose(f) != 0 && rc == 0) rc = cj_fail(err, CJ_E_NOMEM, 0, "mpdump: out of memory");
    if (rc) { free(buf); return NULL; }
    if (len) *len = sz;
    return buf;
}
