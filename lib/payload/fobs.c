/* SPDX-License-Identifier: Apache-2.0 */
/* fobs.c — reading and rewriting FOBS bodies without building a tree (see fobs.h). */
#include "payload/fobs.h"

#include <string.h>

#include "payload/lobs.h"
#include "util/mp.h"
#include "util/text.h"

/* ---- small helpers ---------------------------------------------------------- */

/* Reads one map key: a str key gives *k (kind MP_STR); any other key (even a
 * container) is skipped whole and reported with kind != MP_STR. */
/* Reads a map header at c; fails with CJ_E_TYPE naming `what`. */
static int read_map(struct mp_cur *c, uint32_t *n, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind != MP_MAP) {
        c->pos = at;
        return cj_fail(err, CJ_E_TYPE, at, "fobs: %s at offset %zu is not a map (type byte 0x%02x)", what, at,
                       c->base[at]);
    }
    *n = v.n;
    return 0;
}

/* A cursor over buf[0..len) that starts with a map: its entry count in *n. */
static int open_map(struct mp_cur *c, const uint8_t *buf, size_t len, uint32_t *n, const char *what,
                    struct cj_err *err)
{
    mp_cur_init(c, buf, len);
    return read_map(c, n, what, err);
}

/* ---- the Shareable wrapper -------------------------------------------------- */

/* Scans the __fobs_data__ map at c for __headers__. */
static int find_headers(struct mp_cur *c, struct cj_fobs_shareable *sh, struct cj_err *err)
{
    size_t at = c->pos;
    uint32_t n;
    int rc = read_map(c, &n, "__fobs_data__", err);
    if (rc) return rc;
    sh->data_off = at;
    sh->data_hdr_len = c->pos - at;
    sh->data_n = n;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        size_t kat = c->pos;
        if ((rc = mp_read_key(c, &k, err))) return rc;
        size_t vat = c->pos;
        if ((rc = mp_skip(c, err))) return rc;
        if (!mp_key_is(&k, CJ_FOBS_HEADERS_KEY)) continue;
        if (sh->headers.len)
            return cj_fail(err, CJ_E_INVALID, kat, "fobs: duplicate __headers__ key at offset %zu", kat);
        struct mp_cur hc = {c->base, vat, c->pos};
        if ((rc = read_map(&hc, &sh->headers_n, "__headers__", err))) return rc;
        sh->headers.off = vat;
        sh->headers.len = c->pos - vat;
    }
    sh->data_end = c->pos;
    return 0;
}

int cj_fobs_find_shareable(const uint8_t *buf, size_t len, struct cj_fobs_shareable *sh, struct cj_err *err)
{
    struct mp_cur c;
    uint32_t n;
    memset(sh, 0, sizeof *sh);
    int rc = open_map(&c, buf, len, &n, "Shareable body", err);
    if (rc) return rc;
    bool have_type = false, have_data = false;
    size_t data_at = 0, data_end = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k, v;
        size_t kat = c.pos;
        if ((rc = mp_read_key(&c, &k, err))) return rc;
        size_t vat = c.pos;
        if (mp_key_is(&k, CJ_FOBS_TYPE_KEY)) {
            if (have_type) return cj_fail(err, CJ_E_INVALID, kat, "fobs: duplicate __fobs_type__ at offset %zu", kat);
            have_type = true;
            if ((rc = mp_next(&c, &v, err))) return rc;
            if (v.kind != MP_STR || !mp_str_eq(v.ptr, v.len, CJ_FOBS_SHAREABLE))
                return cj_fail(err, CJ_E_TYPE, vat, "fobs: __fobs_type__ at offset %zu is not %s", vat,
                               CJ_FOBS_SHAREABLE);
            c.pos = vat;
        } else if (mp_key_is(&k, CJ_FOBS_DATA_KEY)) {
            if (have_data) return cj_fail(err, CJ_E_INVALID, kat, "fobs: duplicate __fobs_data__ at offset %zu", kat);
            have_data = true;
            data_at = vat;
        }
        if ((rc = mp_skip(&c, err))) return rc;
        if (data_at == vat) data_end = c.pos;
    }
    if (c.pos != len)
        return cj_fail(err, CJ_E_INVALID, c.pos, "fobs: %zu trailing bytes after the Shareable wrapper (offset %zu)",
                       len - c.pos, c.pos);
    if (!have_type) return cj_fail(err, CJ_E_MISSING, 0, "fobs: body is a map without __fobs_type__ (not a Shareable)");
    if (!have_data) return cj_fail(err, CJ_E_MISSING, 0, "fobs: Shareable wrapper without __fobs_data__");
    struct mp_cur dc = {buf, data_at, data_end};
    return find_headers(&dc, sh, err);
}

int cj_fobs_map_get(const uint8_t *map, size_t len, const char *key, struct cj_range *val, struct cj_err *err)
{
    struct mp_cur c;
    uint32_t n;
    int rc = open_map(&c, map, len, &n, "value", err), found = 0;
    if (rc) return rc;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        if ((rc = mp_read_key(&c, &k, err))) return rc;
        size_t vat = c.pos;
        if ((rc = mp_skip(&c, err))) return rc;
        if (mp_key_is(&k, key)) {
            val->off = vat;
            val->len = c.pos - vat;
            found = 1;
        }
    }
    return found;
}

int cj_fobs_span_str(const uint8_t *buf, struct cj_range sp, char *out, size_t outsz, struct cj_err *err)
{
    struct mp_cur c = {buf, sp.off, sp.off + sp.len};
    const uint8_t *p;
    uint32_t n;
    int rc = mp_read_str(&c, &p, &n, err);
    if (rc) return rc;
    if (n >= outsz)
        return cj_fail(err, CJ_E_LIMIT, sp.off, "fobs: str at offset %zu is %u bytes, limit %zu", sp.off, n,
                       outsz ? outsz - 1 : 0);
    if (memchr(p, 0, n))
        return cj_fail(err, CJ_E_INVALID, sp.off, "fobs: str at offset %zu contains a NUL byte", sp.off);
    memcpy(out, p, n);
    out[n] = 0;
    return 0;
}

int cj_fobs_read_headers(const uint8_t *hdrs, size_t len, struct cj_fobs_headers *h, struct cj_err *err)
{
    static const struct { const char *key; size_t off; } names[] = {
        {"task_name", offsetof(struct cj_fobs_headers, task_name)},
        {"__task_id__", offsetof(struct cj_fobs_headers, task_id)},
        {"__cookie_jar__", offsetof(struct cj_fobs_headers, cookie_jar)},
        {"current_round", offsetof(struct cj_fobs_headers, current_round)},
        {"receiver_ids", offsetof(struct cj_fobs_headers, receiver_ids)},
        {"__wait_time__", offsetof(struct cj_fobs_headers, wait_time)},
        {"__peer_ctx__", offsetof(struct cj_fobs_headers, peer_ctx)},
        {"__rc__", offsetof(struct cj_fobs_headers, rc)},
    };
    struct mp_cur c;
    uint32_t n;
    memset(h, 0, sizeof *h);
    int rc = open_map(&c, hdrs, len, &n, "__headers__", err);
    if (rc) return rc;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        if ((rc = mp_read_key(&c, &k, err))) return rc;
        size_t vat = c.pos;
        if ((rc = mp_skip(&c, err))) return rc;
        if (k.kind != MP_STR) continue;
        for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
            if (!mp_str_eq(k.ptr, k.len, names[j].key)) continue;
            struct cj_range *sp = (struct cj_range *)((char *)h + names[j].off);
            sp->off = vat;
            sp->len = c.pos - vat;
        }
    }
    return 0;
}

/* ---- JSON of a download-ref datum ------------------------------------------- */

struct jr {
    const uint8_t *p;
    size_t len, pos;
    struct cj_err *err;
};

static int jfail(struct jr *j, int code, const char *what)
{
    return cj_fail(j->err, code, j->pos, "ref json: %s at offset %zu", what, j->pos);
}

static void jws(struct jr *j)
{
    while (j->pos < j->len) {
        uint8_t ch = j->p[j->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        j->pos++;
    }
}

static int jpeek(const struct jr *j) { return j->pos < j->len ? j->p[j->pos] : -1; }

static int hex4(const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t ch = p[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Appends bytes to a bounded output; counts the full length even past the end. */
struct jout {
    char *buf;
    size_t cap, n;
    bool nul;      /* a decoded NUL was seen */
    bool lone;     /* a lone surrogate escape was seen */
};

static void jput(struct jout *o, const uint8_t *p, size_t n)
{
    if (!o) return;
    for (size_t i = 0; i < n; i++) {
        if (o->buf && o->n < o->cap) o->buf[o->n] = (char)p[i];
        o->n++;
    }
}

static void jput_cp(struct jout *o, uint32_t cp)
{
    uint8_t u[4];
    if (!o) return;
    if (cp == 0) o->nul = true;
    jput(o, u, cj_utf8_put(cp, u));
}

/* One \uXXXX escape (j->pos at the 'u'), combining a surrogate pair. */
static int jescape_u(struct jr *j, struct jout *o)
{
    uint32_t cp, lo;
    if (j->len - j->pos < 5 || hex4(j->p + j->pos + 1, &cp)) return jfail(j, CJ_E_INVALID, "bad \\u escape");
    j->pos += 5;
    if (cp >= 0xd800 && cp <= 0xdbff && j->len - j->pos >= 6 && j->p[j->pos] == '\\' &&
        j->p[j->pos + 1] == 'u' && !hex4(j->p + j->pos + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
        j->pos += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xd800 && cp <= 0xdfff) {
        /* Python accepts a lone surrogate; keep it (as WTF-8) so a key holding
         * one never compares equal to "fqcn", and refuse it in kept values. */
        if (o) o->lone = true;
    }
    jput_cp(o, cp);
    return 0;
}

/* A JSON string at j->pos (the opening quote); decoded into o (may be NULL). */
static int jstring(struct jr *j, struct jout *o)
{
    if (jpeek(j) != '"') return jfail(j, CJ_E_INVALID, "expected a string");
    j->pos++;
    for (;;) {
        if (j->pos >= j->len) return jfail(j, CJ_E_TRUNCATED, "unterminated string");
        uint8_t ch = j->p[j->pos];
        if (ch == '"') { j->pos++; return 0; }
        if (ch < 0x20) return jfail(j, CJ_E_INVALID, "control character in string");
        if (ch != '\\') {
            size_t n = cj_utf8_seq(j->p + j->pos, j->len - j->pos);
            if (!n) return jfail(j, CJ_E_INVALID, "invalid UTF-8 in string");
            jput(o, j->p + j->pos, n);
            j->pos += n;
            continue;
        }
        if (j->pos + 1 >= j->len) return jfail(j, CJ_E_TRUNCATED, "unterminated escape");
        j->pos++;
        uint8_t e = j->p[j->pos], d;
        switch (e) {
        case '"': case '\\': case '/': d = e; break;
        case 'b': d = '\b'; break;
        case 'f': d = '\f'; break;
        case 'n': d = '\n'; break;
        case 'r': d = '\r'; break;
        case 't': d = '\t'; break;
        case 'u': {
            int rc = jescape_u(j, o);
            if (rc) return rc;
            continue;
        }
        default: return jfail(j, CJ_E_INVALID, "bad escape in string");
        }
        jput(o, &d, 1);
        j->pos++;
    }
}

static bool jlit(struct jr *j, const char *s)
{
    size_t n = strlen(s);
    if (j->len - j->pos < n || memcmp(j->p + j->pos, s, n) != 0) return false;
    j->pos += n;
    return true;
}

static bool is_digit(int ch) { return ch >= '0' && ch <= '9'; }

/* A number as Python's json scanner accepts it, or -Infinity. */
static int jnumber(struct jr *j)
{
    if (jpeek(j) == '-') {
        j->pos++;
        if (jlit(j, "Infinity")) return 0;
    }
    if (jpeek(j) == '0') j->pos++;
    else if (is_digit(jpeek(j))) while (is_digit(jpeek(j))) j->pos++;
    else return jfail(j, CJ_E_INVALID, "bad number");
    if (jpeek(j) == '.') {
        j->pos++;
        if (!is_digit(jpeek(j))) return jfail(j, CJ_E_INVALID, "bad number fraction");
        while (is_digit(jpeek(j))) j->pos++;
    }
    if (jpeek(j) == 'e' || jpeek(j) == 'E') {
        j->pos++;
        if (jpeek(j) == '+' || jpeek(j) == '-') j->pos++;
        if (!is_digit(jpeek(j))) return jfail(j, CJ_E_INVALID, "bad number exponent");
        while (is_digit(jpeek(j))) j->pos++;
    }
    return 0;
}

/* A scalar value (string, number, literal); containers are handled by jskip. */
static int jscalar(struct jr *j)
{
    int ch = jpeek(j);
    if (ch == '"') return jstring(j, NULL);
    if (ch == '-' || is_digit(ch)) return jnumber(j);
    if (jlit(j, "true") || jlit(j, "false") || jlit(j, "null") || jlit(j, "NaN") || jlit(j, "Infinity"))
        return 0;
    if (ch < 0) return jfail(j, CJ_E_TRUNCATED, "value expected, input ends");
    return jfail(j, CJ_E_INVALID, "unexpected character");
}

/* Skips one value of any shape without recursion: a stack of open brackets
 * (bounded by CJ_FOBS_JSON_MAX_DEPTH) and two states. */
static int jskip(struct jr *j)
{
    char stack[CJ_FOBS_JSON_MAX_DEPTH];
    int depth = 0, rc;
    for (;;) {
        /* state: a value is expected */
        jws(j);
        int ch = jpeek(j);
        if (ch == '{' || ch == '[') {
            if (depth == CJ_FOBS_JSON_MAX_DEPTH) return jfail(j, CJ_E_LIMIT, "JSON nested too deeply");
            stack[depth++] = (char)ch;
            j->pos++;
            jws(j);
            if (jpeek(j) == (ch == '{' ? '}' : ']')) { j->pos++; depth--; goto after_value; }
            if (ch == '[') continue;
            goto member_key;
        }
        if ((rc = jscalar(j))) return rc;
    after_value:
        for (;;) {
            if (depth == 0) return 0;
            jws(j);
            ch = jpeek(j);
            char top = stack[depth - 1];
            if (ch == ',') { j->pos++; break; }
            if ((ch == '}' && top == '{') || (ch == ']' && top == '[')) { j->pos++; depth--; continue; }
            if (ch < 0) return jfail(j, CJ_E_TRUNCATED, "unterminated container");
            return jfail(j, CJ_E_INVALID, "expected ',' or a closing bracket");
        }
        if (stack[depth - 1] == '[') continue;
    member_key:
        jws(j);
        if ((rc = jstring(j, NULL))) return rc;
        jws(j);
        if (jpeek(j) != ':') return jfail(j, CJ_E_INVALID, "expected ':'");
        j->pos++;
    }
}

/* Reads a member value that must be a non-empty string into out (outsz). */
static int jwanted(struct jr *j, const char *name, char *out, size_t outsz)
{
    size_t at = j->pos;
    if (jpeek(j) != '"')
        return cj_fail(j->err, CJ_E_TYPE, at, "ref json: \"%s\" at offset %zu is not a string", name, at);
    struct jout o = {out, outsz ? outsz - 1 : 0, 0, false, false};
    int rc = jstring(j, &o);
    if (rc) return rc;
    if (o.n > o.cap)
        return cj_fail(j->err, CJ_E_LIMIT, at, "ref json: \"%s\" is %zu bytes, limit %zu", name, o.n, o.cap);
    if (o.n == 0) return cj_fail(j->err, CJ_E_INVALID, at, "ref json: \"%s\" is empty", name);
    if (o.nul || o.lone)
        return cj_fail(j->err, CJ_E_INVALID, at, "ref json: \"%s\" holds a NUL or a lone surrogate", name);
    out[o.n] = 0;
    return 0;
}

int cj_fobs_parse_ref_json(const uint8_t *json, size_t len, char *fqcn, size_t fqcn_sz, char *ref_id,
                           size_t ref_id_sz, struct cj_err *err)
{
    struct jr j = {json, len, 0, err};
    bool have_fqcn = false, have_ref = false;
    int rc;
    jws(&j);
    if (jpeek(&j) != '{') return jfail(&j, jpeek(&j) < 0 ? CJ_E_TRUNCATED : CJ_E_TYPE, "not a JSON object");
    j.pos++;
    jws(&j);
    if (jpeek(&j) == '}') j.pos++;
    else for (;;) {
        char key[8];
        struct jout k = {key, sizeof key - 1, 0, false, false};
        jws(&j);
        if ((rc = jstring(&j, &k))) return rc;
        jws(&j);
        if (jpeek(&j) != ':') return jfail(&j, CJ_E_INVALID, "expected ':'");
        j.pos++;
        jws(&j);
        bool is_fqcn = k.n == 4 && memcmp(key, "fqcn", 4) == 0;
        bool is_ref = k.n == 6 && memcmp(key, "ref_id", 6) == 0;
        if (is_fqcn) { if ((rc = jwanted(&j, "fqcn", fqcn, fqcn_sz))) return rc; have_fqcn = true; }
        else if (is_ref) { if ((rc = jwanted(&j, "ref_id", ref_id, ref_id_sz))) return rc; have_ref = true; }
        else if ((rc = jskip(&j))) return rc;
        jws(&j);
        int ch = jpeek(&j);
        j.pos += ch >= 0;
        if (ch == '}') break;
        if (ch != ',') {
            j.pos -= ch >= 0;
            return jfail(&j, ch < 0 ? CJ_E_TRUNCATED : CJ_E_INVALID, "expected ',' or '}'");
        }
    }
    jws(&j);
    if (j.pos != len) return jfail(&j, CJ_E_INVALID, "trailing data after the JSON object");
    if (!have_fqcn) return cj_fail(err, CJ_E_MISSING, 0, "ref json: no \"fqcn\" member");
    if (!have_ref) return cj_fail(err, CJ_E_MISSING, 0, "ref json: no \"ref_id\" member");
    return 0;
}

int cj_fobs_list_refs(const uint8_t *payload, size_t len, struct cj_fobs_ref *refs, size_t cap,
                      size_t *n_refs, struct cj_err *err)
{
    struct cj_lobs_iter it;
    struct cj_lobs_section s;
    struct cj_fobs_ref tmp;
    size_t n = 0;
    int rc;
    cj_lobs_iter_init(&it, payload, len);
    while ((rc = cj_lobs_next(&it, &s, err)) == 1) {
        if (s.marker == CJ_LOBS_MAIN || (s.dot != 3 && s.dot != 6)) continue;
        if (s.marker != CJ_LOBS_TEXT)
            return cj_fail(err, CJ_E_INVALID, s.offset, "fobs: DOT-%u datum at offset %zu is not TEXT (marker 0x%02x)",
                           s.dot, s.offset, s.marker);
        struct cj_fobs_ref *r = refs && n < cap ? &refs[n] : &tmp;
        memset(r, 0, sizeof *r);
        r->dot = s.dot;
        r->section_off = s.offset;
        memcpy(r->datum_id, s.id, 16);
        rc = cj_fobs_parse_ref_json(s.value, s.value_len, r->fqcn, sizeof r->fqcn, r->ref_id, sizeof r->ref_id, err);
        if (rc) {
            if (err) err->offset += (size_t)(s.value - payload);
            return rc;
        }
        n++;
    }
    if (rc < 0) return rc;
    if (n_refs) *n_refs = n;
    return 0;
}

/* ---- wrapper enumeration ---------------------------------------------------- */

enum { ROLE_NONE, ROLE_TYPE, ROLE_DATA };

struct frame {
    uint64_t left;          /* elements still to read (a map counts keys and values) */
    size_t off;             /* the container's header */
    bool is_map;
    bool is_data;           /* this container is the parent's __fobs_data__ value */
    uint8_t role;           /* map: what the next value is */
    bool has_type, has_data;
    const uint8_t *type;
    uint32_t type_len;
    size_t data_off, data_end;
};

static enum cj_fobs_wrap_kind wrap_kind(const uint8_t *t, uint32_t n)
{
    if (mp_str_eq(t, n, CJ_FOBS_NUMPY)) return CJ_FOBS_WRAP_NUMPY;
    if (mp_str_eq(t, n, CJ_FOBS_TORCH)) return CJ_FOBS_WRAP_TORCH;
    if (mp_str_eq(t, n, CJ_FOBS_LAZY)) return CJ_FOBS_WRAP_LAZY;
    if (mp_str_eq(t, n, CJ_FOBS_DATUMREF)) return CJ_FOBS_WRAP_DATUMREF;
    return 0;
}

/* The str value of key in the map span d (of body); NULL when absent or not a str. */
static const uint8_t *data_str(const uint8_t *body, struct cj_range d, const char *key, uint32_t *n)
{
    struct cj_range v;
    if (cj_fobs_map_get(body + d.off, d.len, key, &v, NULL) != 1) return NULL;
    struct mp_cur c = {body + d.off, v.off, v.off + v.len};
    const uint8_t *p;
    if (mp_read_str(&c, &p, n, NULL)) return NULL;
    return p;
}

/* Fills w from a recognised wrapper's __fobs_data__ (a sub-span of body). */
static void describe_wrapper(const uint8_t *body, struct cj_range d, struct cj_fobs_wrapper *w)
{
    uint32_t n;
    const uint8_t *t;
    if (w->kind == CJ_FOBS_WRAP_DATUMREF) {
        struct cj_range inner;
        if (cj_fobs_map_get(body + d.off, d.len, "data", &inner, NULL) == 1) {
            inner.off += d.off;
            w->item = data_str(body, inner, "datum_id", &w->item_len);
        }
        return;
    }
    if (!(t = data_str(body, d, "type", &n))) return;
    w->is_native = mp_str_eq(t, n, "native");
    if (!(w->is_ref = mp_str_eq(t, n, "ref"))) return;
    w->item = data_str(body, d, "data", &w->item_len);
    if (w->kind == CJ_FOBS_WRAP_NUMPY) w->dot = 3;
    else if (w->kind == CJ_FOBS_WRAP_TORCH) w->dot = 6;
    else {
        struct cj_range v;
        int64_t dot;
        if (cj_fobs_map_get(body + d.off, d.len, "lazy_dot", &v, NULL) == 1) {
            struct mp_cur c = {body + d.off, v.off, v.off + v.len};
            if (!mp_read_int(&c, &dot, NULL) && dot > 0 && dot < 256) w->dot = (uint8_t)dot;
        }
    }
}

/* Called when a map ends: report it if it is a wrapper we know. */
static int end_map(const uint8_t *body, const struct frame *f, cj_fobs_wrapper_cb cb, void *ud)
{
    if (!cb || !f->has_type || !f->has_data) return 0;
    struct cj_fobs_wrapper w = {0};
    if (!(w.kind = wrap_kind(f->type, f->type_len))) return 0;
    w.off = f->off;
    describe_wrapper(body, (struct cj_range){f->data_off, f->data_end - f->data_off}, &w);
    return cb(ud, &w);
}

/* A value (not a key) of map frame f has been read whole or opened. */
static void note_value(struct frame *f, const struct mp_val *v, size_t at, size_t end)
{
    if (f->role == ROLE_TYPE) {
        f->has_type = v->kind == MP_STR;
        f->type = v->ptr;
        f->type_len = v->len;
    } else if (f->role == ROLE_DATA) {
        f->has_data = v->kind != MP_MAP && v->kind != MP_ARRAY; /* containers: set when they end */
        f->data_off = at;
        f->data_end = end;
    }
}

int cj_fobs_walk(const uint8_t *body, size_t len, cj_fobs_wrapper_cb cb, void *ud, struct cj_err *err)
{
    struct frame st[CJ_FOBS_MAX_DEPTH + 1];
    struct mp_cur c;
    int depth = 0, rc;
    mp_cur_init(&c, body, len);
    memset(&st[0], 0, sizeof st[0]);
    st[0].left = 1;   /* the root: a pseudo-array of one value */
    for (;;) {
        struct frame *f = &st[depth];
        if (f->left == 0) {
            if (depth == 0) break;
            if (f->is_map && (rc = end_map(body, f, cb, ud))) return rc;
            struct frame *parent = &st[depth - 1];
            if (f->is_data) { parent->has_data = true; parent->data_end = c.pos; }
            parent->role = ROLE_NONE;
            depth--;
            continue;
        }
        bool is_key = f->is_map && f->left % 2 == 0;
        size_t at = c.pos;
        struct mp_val v;
        if ((rc = mp_next(&c, &v, err))) return rc;
        f->left--;
        if (is_key) f->role = mp_key_is(&v, CJ_FOBS_TYPE_KEY) ? ROLE_TYPE : mp_key_is(&v, CJ_FOBS_DATA_KEY) ? ROLE_DATA : ROLE_NONE;
        else if (f->is_map) note_value(f, &v, at, c.pos);
        if (v.kind != MP_MAP && v.kind != MP_ARRAY) {
            if (!is_key) f->role = ROLE_NONE;
            continue;
        }
        if (depth == CJ_FOBS_MAX_DEPTH)
            return cj_fail(err, CJ_E_LIMIT, at, "fobs: body nests deeper than %d containers (offset %zu)",
                           CJ_FOBS_MAX_DEPTH, at);
        struct frame *child = &st[++depth];
        memset(child, 0, sizeof *child);
        child->is_map = v.kind == MP_MAP;
        child->left = child->is_map ? 2ull * v.n : v.n;
        child->off = at;
        child->is_data = !is_key && f->is_map && f->role == ROLE_DATA;
        if (is_key) f->role = ROLE_NONE;  /* a container key names nothing we track */
    }
    if (c.pos != len)
        return cj_fail(err, CJ_E_INVALID, c.pos, "fobs: %zu trailing bytes after the body (offset %zu)", len - c.pos,
                       c.pos);
    return 0;
}

/* "T<n>" -> n, or -1. */
static long item_index(const uint8_t *p, uint32_t n)
{
    if (!p || n < 2 || n > 10 || p[0] != 'T') return -1;
    long v = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (!is_digit(p[i])) return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static int count_cb(void *ud, const struct cj_fobs_wrapper *w)
{
    struct cj_fobs_ref_counts *c = ud;
    if (w->kind == CJ_FOBS_WRAP_DATUMREF) { c->datum_refs++; return 0; }
    if (w->is_native) { c->native++; return 0; }
    if (!w->is_ref) return 0;
    long idx = item_index(w->item, w->item_len);
    int slot = w->dot == 3 ? 0 : w->dot == 6 ? 1 : -1;
    if (slot < 0 || idx < 0) { c->other_refs++; return 0; }
    c->wrappers[slot]++;
    if ((uint64_t)idx + 1 > c->items[slot]) c->items[slot] = (uint32_t)(idx + 1);
    return 0;
}

int cj_fobs_count_refs(const uint8_t *body, size_t len, struct cj_fobs_ref_counts *c, struct cj_err *err)
{
    memset(c, 0, sizeof *c);
    return cj_fobs_walk(body, len, count_cb, c, err);
}

/* ---- rewriting -------------------------------------------------------------- */

static int put(msgpack_sbuffer *sb, const void *p, size_t n, struct cj_err *err)
{
    if (n && msgpack_sbuffer_write(sb, (const char *)p, n) != 0)
        return cj_fail(err, CJ_E_NOMEM, 0, "fobs: out of memory writing %zu bytes", n);
    return 0;
}

static int check_kv(const struct cj_fobs_kv *kv, size_t n, struct cj_err *err)
{
    if (n > CJ_FOBS_MAX_SET) return cj_fail(err, CJ_E_LIMIT, 0, "fobs: %zu headers to set, limit %d", n, CJ_FOBS_MAX_SET);
    for (size_t i = 0; i < n; i++) {
        struct mp_cur c;
        struct cj_err e2;
        mp_cur_init(&c, kv[i].val, kv[i].val_len);
        if (!kv[i].key || (kv[i].val_len && !kv[i].val) || mp_skip(&c, &e2) || c.pos != kv[i].val_len)
            return cj_fail(err, CJ_E_INVALID, 0, "fobs: value for header '%s' is not one msgpack value",
                           kv[i].key ? kv[i].key : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(kv[i].key, kv[j].key) == 0)
                return cj_fail(err, CJ_E_INVALID, 0, "fobs: header '%s' set twice", kv[i].key);
    }
    return 0;
}

static int set_index(const struct mp_val *k, const struct cj_fobs_kv *kv, size_t n)
{
    if (k->kind != MP_STR) return -1;
    for (size_t i = 0; i < n; i++)
        if (mp_str_eq(k->ptr, k->len, kv[i].key)) return (int)i;
    return -1;
}

/* Writes H': the old header map at hdr (NULL for none) with kv set. */
static int write_headers(const uint8_t *body, const struct cj_fobs_shareable *sh, const struct cj_fobs_kv *kv,
                         size_t n, msgpack_sbuffer *out, struct cj_err *err)
{
    bool present[CJ_FOBS_MAX_SET] = {false};
    struct mp_cur c = {body, sh->headers.off, sh->headers.off + sh->headers.len};
    struct mp_val k;
    uint32_t cnt = 0;
    int rc;
    if (sh->headers.len) {   /* first pass: which keys exist */
        if ((rc = mp_read_map(&c, &cnt, err))) return rc;
        size_t first = c.pos;
        for (uint32_t i = 0; i < cnt; i++) {
            if ((rc = mp_read_key(&c, &k, err)) || (rc = mp_skip(&c, err))) return rc;
            int ix = set_index(&k, kv, n);
            if (ix >= 0) present[ix] = true;
        }
        c.pos = first;
    }
    uint64_t total = cnt;
    for (size_t i = 0; i < n; i++) total += !present[i];
    if (total > UINT32_MAX) return cj_fail(err, CJ_E_LIMIT, sh->headers.off, "fobs: __headers__ would exceed 2^32 entries");
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, (size_t)total)) return cj_fail(err, CJ_E_NOMEM, 0, "fobs: out of memory");
    for (uint32_t i = 0; i < cnt; i++) {   /* second pass: copy or replace in place */
        size_t kat = c.pos;
        if ((rc = mp_read_key(&c, &k, err))) return rc;
        size_t vat = c.pos;
        if ((rc = mp_skip(&c, err))) return rc;
        int ix = set_index(&k, kv, n);
        if (ix < 0) rc = put(out, body + kat, c.pos - kat, err);
        else if (!(rc = put(out, body + kat, vat - kat, err))) rc = put(out, kv[ix].val, kv[ix].val_len, err);
        if (rc) return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (present[i]) continue;
        if (cj_fobs_write_str(&pk, kv[i].key)) return cj_fail(err, CJ_E_NOMEM, 0, "fobs: out of memory");
        if ((rc = put(out, kv[i].val, kv[i].val_len, err))) return rc;
    }
    return 0;
}

int cj_fobs_set_headers(const uint8_t *body, size_t len, const struct cj_fobs_kv *kv, size_t n,
                        msgpack_sbuffer *out, struct cj_err *err)
{
    struct cj_fobs_shareable sh;
    int rc = cj_fobs_find_shareable(body, len, &sh, err);
    if (rc || (rc = check_kv(kv, n, err))) return rc;
    if (sh.headers.len) {
        size_t hs = sh.headers.off, he = hs + sh.headers.len;
        if ((rc = put(out, body, hs, err)) || (rc = write_headers(body, &sh, kv, n, out, err))) return rc;
        return put(out, body + he, len - he, err);
    }
    /* No __headers__: append the entry to the __fobs_data__ map, one more entry. */
    if (sh.data_n == UINT32_MAX) return cj_fail(err, CJ_E_LIMIT, sh.data_off, "fobs: __fobs_data__ map is full");
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    size_t entries = sh.data_off + sh.data_hdr_len;
    if ((rc = put(out, body, sh.data_off, err))) return rc;
    if (msgpack_pack_map(&pk, (size_t)sh.data_n + 1)) return cj_fail(err, CJ_E_NOMEM, 0, "fobs: out of memory");
    if ((rc = put(out, body + entries, sh.data_end - entries, err))) return rc;
    if (cj_fobs_write_str(&pk, CJ_FOBS_HEADERS_KEY)) return cj_fail(err, CJ_E_NOMEM, 0, "fobs: out of memory");
    if ((rc = write_headers(body, &sh, kv, n, out, err))) return rc;
    return put(out, body + sh.data_end, len - sh.data_end, err);
}

/* ---- writers ---------------------------------------------------------------- */

int cj_fobs_write_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    if (msgpack_pack_str(pk, n)) return -1;
    return msgpack_pack_str_body(pk, s, n);
}

/* {"value": v, "mask": 0} */
static int write_prop(msgpack_packer *pk, const char *key, const char *value)
{
    if (cj_fobs_write_str(pk, key) || msgpack_pack_map(pk, 2) || cj_fobs_write_str(pk, "value") ||
        cj_fobs_write_str(pk, value) || cj_fobs_write_str(pk, "mask"))
        return -1;
    return msgpack_pack_int(pk, 0) ? -1 : 0;
}

int cj_fobs_write_flcontext(msgpack_packer *pk, const char *site, const char *job)
{
    if (msgpack_pack_map(pk, 3) || cj_fobs_write_str(pk, CJ_FOBS_TYPE_KEY) ||
        cj_fobs_write_str(pk, CJ_FOBS_FLCONTEXT) || cj_fobs_write_str(pk, CJ_FOBS_DATA_KEY) ||
        msgpack_pack_array(pk, 2) || msgpack_pack_nil(pk) || msgpack_pack_map(pk, 2) ||
        write_prop(pk, "__identity_name__", site) || write_prop(pk, "__run_num__", job) ||
        cj_fobs_write_str(pk, CJ_FOBS_DC_KEY) || cj_fobs_write_str(pk, CJ_FOBS_FLCONTEXT_DC))
        return -1;
    return 0;
}

int cj_fobs_write_shareable_begin(msgpack_packer *pk, uint32_t n_entries)
{
    if (msgpack_pack_map(pk, 3) || cj_fobs_write_str(pk, CJ_FOBS_TYPE_KEY) ||
        cj_fobs_write_str(pk, CJ_FOBS_SHAREABLE) || cj_fobs_write_str(pk, CJ_FOBS_DATA_KEY) ||
        msgpack_pack_map(pk, n_entries))
        return -1;
    return 0;
}

int cj_fobs_write_shareable_end(msgpack_packer *pk)
{
    if (cj_fobs_write_str(pk, CJ_FOBS_DC_KEY) || cj_fobs_write_str(pk, CJ_FOBS_SHAREABLE_DC)) return -1;
    return 0;
}
