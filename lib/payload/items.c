/* SPDX-License-Identifier: Apache-2.0 */
/* items.c — safetensors and npz download items (see items.h, doc/protocol/download.md §4). */
#include "payload/items.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ---- shared ------------------------------------------------------------------ */

uint32_t items_crc32(uint32_t crc, const void *buf, size_t n)
{
    /* Nibble table for the reflected polynomial 0xEDB88320 (zlib's crc32). */
    static const uint32_t t[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
        0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = crc >> 4 ^ t[crc & 15];
        crc = crc >> 4 ^ t[crc & 15];
    }
    return ~crc;
}

const struct item_tensor *items_find(const struct item_tensor *t, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

size_t items_st_dtype_size(const char *dtype)
{
    static const struct { const char *name; size_t size; } known[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
        {"C64", 8},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(dtype, known[i].name) == 0) return known[i].size;
    return 0;
}

size_t items_npy_descr_size(const char *d)
{
    if (*d == '<' || *d == '>' || *d == '|' || *d == '=') d++;
    char kind = *d;
    size_t n = 0;
    if (!kind) return 0;
    d++;
    if (*d < '0' || *d > '9') return 0;
    for (; *d >= '0' && *d <= '9'; d++) {
        n = n * 10 + (size_t)(*d - '0');
        if (n > (1u << 20)) return 0;
    }
    if (*d && !(*d == '[' && (kind == 'm' || kind == 'M'))) return 0;   /* "<M8[ns]" */
    switch (kind) {
    case 'b': case 'i': case 'u': case 'f': case 'c': case 'S': case 'a': case 'V': case 'm': case 'M':
        return n;
    case 'U':
        return 4 * n;
    }
    return 0;
}

/* nelem = prod(shape) and bytes = nelem * elem_size, refusing overflow. */
static int shape_size(struct item_tensor *t, uint64_t *bytes, size_t at, struct cj_err *err)
{
    uint64_t ne = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(ne, t->shape[i], &ne))
            return cj_fail(err, CJ_E_LIMIT, at, "tensor '%s': element count of its shape overflows", t->name);
    t->nelem = ne;
    if (__builtin_mul_overflow(ne, (uint64_t)t->elem_size, bytes))
        return cj_fail(err, CJ_E_LIMIT, at, "tensor '%s': byte size of its shape overflows", t->name);
    return 0;
}


/* ---- safetensors ----------------------------------------------------------------- */

/* {"dtype": str, "shape": [uint...], "data_offsets": [uint, uint]}, other keys skipped. */
static int st_tensor_info(struct cj_json *j, struct item_tensor *t, uint64_t off[2])
{
    bool have_dtype = false, have_shape = false, have_off = false;
    size_t at = j->pos;
    int rc = cj_json_expect(j, '{');
    if (rc) return rc;
    if (cj_json_peek(j) == '}') j->pos++;
    else for (;;) {
        char key[ITEMS_NAME_MAX];
        if ((rc = cj_json_string(j, key, sizeof key)) || (rc = cj_json_expect(j, ':'))) return rc;
        if (strcmp(key, "dtype") == 0) {
            if (have_dtype) return cj_json_bad(j, "duplicate dtype");
            if ((rc = cj_json_string(j, t->dtype, sizeof t->dtype))) return rc;
            have_dtype = true;
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape) return cj_json_bad(j, "duplicate shape");
            if ((rc = cj_json_expect(j, '['))) return rc;
            if (cj_json_peek(j) == ']') j->pos++;
            else for (;;) {
                if (t->ndim == ITEMS_MAX_DIMS)
                    return cj_fail(j->err, CJ_E_LIMIT, j->pos, "safetensors: tensor '%s' has more than %d dims",
                                   t->name, ITEMS_MAX_DIMS);
                if ((rc = cj_json_uint(j, &t->shape[t->ndim++]))) return rc;
                int c = cj_json_peek(j);
                j->pos++;
                if (c == ']') break;
                if (c != ',') { j->pos--; return cj_json_bad(j, "expected ',' or ']' in shape"); }
            }
            have_shape = true;
        } else if (strcmp(key, "data_offsets") == 0) {
            if (have_off) return cj_json_bad(j, "duplicate data_offsets");
            if ((rc = cj_json_expect(j, '[')) || (rc = cj_json_uint(j, &off[0])) || (rc = cj_json_expect(j, ',')) ||
                (rc = cj_json_uint(j, &off[1])) || (rc = cj_json_expect(j, ']')))
                return rc;
            have_off = true;
        } else if ((rc = cj_json_skip(j, ITEMS_JSON_MAX_DEPTH))) {
            return rc;
        }
        int c = cj_json_peek(j);
        j->pos++;
        if (c == '}') break;
        if (c != ',') { j->pos--; return cj_json_bad(j, "expected ',' or '}'"); }
    }
    if (!have_dtype || !have_shape || !have_off)
        return cj_fail(j->err, CJ_E_MISSING, at, "safetensors: tensor '%s' lacks %s", t->name,
                       !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return 0;
}

/* Checks one tensor's offsets against its shape and the data area. */
static int st_check_tensor(struct item_tensor *t, const uint64_t off[2], size_t data_start, size_t dlen,
                           size_t at, struct cj_err *err)
{
    uint64_t bytes;
    t->elem_size = items_st_dtype_size(t->dtype);
    int rc = shape_size(t, &bytes, at, err);
    if (rc) return rc;
    if (off[1] < off[0])
        return cj_fail(err, CJ_E_INVALID, at, "safetensors: tensor '%s' data_offsets [%llu, %llu] decrease", t->name,
                       (unsigned long long)off[0], (unsigned long long)off[1]);
    if (off[1] > dlen)
        return cj_fail(err, CJ_E_TRUNCATED, at, "safetensors: tensor '%s' ends at %llu, past the %zu-byte data area",
                       t->name, (unsigned long long)off[1], dlen);
    if (t->elem_size && off[1] - off[0] != bytes)
        return cj_fail(err, CJ_E_INVALID, at, "safetensors: tensor '%s' spans %llu bytes, its %s shape needs %llu",
                       t->name, (unsigned long long)(off[1] - off[0]), t->dtype, (unsigned long long)bytes);
    t->data_off = data_start + (size_t)off[0];
    t->data_len = (size_t)(off[1] - off[0]);
    t->member_off = t->data_off;
    t->member_len = t->data_len;
    return 0;
}

/* The tensors must tile the data area: total length equal to it, no overlap. */
static int st_check_tiling(const struct item_tensor *t, size_t count, size_t data_start, size_t dlen,
                           struct cj_err *err)
{
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        total += t[i].data_len;
        for (size_t k = 0; k < i; k++)
            if (t[i].data_len && t[k].data_len && t[i].data_off < t[k].data_off + t[k].data_len &&
                t[k].data_off < t[i].data_off + t[i].data_len)
                return cj_fail(err, CJ_E_INVALID, t[i].data_off, "safetensors: tensors '%s' and '%s' overlap",
                               t[k].name, t[i].name);
    }
    if (total != dlen)
        return cj_fail(err, CJ_E_INVALID, data_start, "safetensors: tensors cover %llu of the %zu data bytes",
                       (unsigned long long)total, dlen);
    return 0;
}

int items_st_parse(const uint8_t *p, size_t n, struct item_tensor *out, size_t cap, size_t *count,
                   struct cj_err *err)
{
    *count = 0;
    if (n < 8) return cj_fail(err, CJ_E_TRUNCATED, 0, "safetensors: %zu bytes, the header length needs 8", n);
    uint64_t hn = le64(p);
    if (hn == 0) return cj_fail(err, CJ_E_INVALID, 0, "safetensors: empty header");
    if (hn > ITEMS_ST_MAX_HEADER)
        return cj_fail(err, CJ_E_LIMIT, 0, "safetensors: header of %llu bytes over the %llu limit",
                       (unsigned long long)hn, (unsigned long long)ITEMS_ST_MAX_HEADER);
    if (hn > n - 8)
        return cj_fail(err, CJ_E_TRUNCATED, 0, "safetensors: header size %llu exceeds payload length %zu",
                       (unsigned long long)hn, n);
    size_t hend = 8 + (size_t)hn, dlen = n - hend;
    struct cj_json j = {.p = p, .pos = 8, .end = hend, .who = "safetensors", .err = err};
    int rc;
    if (cj_json_peek(&j) != '{')
        return cj_fail(err, CJ_E_INVALID, j.pos, "safetensors: header must be a JSON object (offset %zu)", j.pos);
    j.pos++;
    if (cj_json_peek(&j) == '}') j.pos++;
    else for (;;) {
        char name[ITEMS_NAME_MAX];
        size_t at = j.pos;
        if ((rc = cj_json_string(&j, name, sizeof name)) || (rc = cj_json_expect(&j, ':'))) return rc;
        if (strcmp(name, "__metadata__") == 0) {
            if (cj_json_peek(&j) != '{') return cj_json_bad(&j, "__metadata__ must be an object");
            if ((rc = cj_json_skip(&j, ITEMS_JSON_MAX_DEPTH))) return rc;
        } else {
            if (!name[0]) return cj_fail(err, CJ_E_INVALID, at, "safetensors: tensor at offset %zu has an empty name", at);
            if (*count == cap)
                return cj_fail(err, CJ_E_LIMIT, at, "safetensors: more than %zu tensors", cap);
            if (items_find(out, *count, name))
                return cj_fail(err, CJ_E_INVALID, at, "safetensors: tensor '%s' named twice", name);
            struct item_tensor *t = &out[*count];
            uint64_t off[2];
            memset(t, 0, sizeof *t);
            memcpy(t->name, name, strlen(name) + 1);
            if ((rc = st_tensor_info(&j, t, off)) || (rc = st_check_tensor(t, off, hend, dlen, at, err)))
                return rc;
            (*count)++;
        }
        int c = cj_json_peek(&j);
        j.pos++;
        if (c == '}') break;
        if (c != ',') { j.pos--; return cj_json_bad(&j, "expected ',' or '}'"); }
    }
    if (cj_json_peek(&j) != -1) return cj_json_bad(&j, "trailing bytes after the header object");
    return st_check_tiling(out, *count, hend, dlen, err);
}

/* ---- NPY header (a Python dict literal) ------------------------------------------ */

struct lit {
    const uint8_t *p;
    size_t pos, end;
    struct cj_err *err;
};

static int lit_bad(struct lit *l, const char *what)
{
    return cj_fail(l->err, CJ_E_INVALID, l->pos, "npy: header %s at offset %zu", what, l->pos);
}

static int lit_peek(struct lit *l)
{
    while (l->pos < l->end && (l->p[l->pos] == ' ' || l->p[l->pos] == '\n' || l->p[l->pos] == '\t' ||
                               l->p[l->pos] == '\r'))
        l->pos++;
    return l->pos < l->end ? l->p[l->pos] : -1;
}

static int lit_expect(struct lit *l, char ch)
{
    char what[24];
    if (lit_peek(l) != ch) {
        snprintf(what, sizeof what, "expects '%c'", ch);
        return lit_bad(l, what);
    }
    l->pos++;
    return 0;
}

/* A quoted Python str of printable ASCII, no escapes. */
static int lit_str(struct lit *l, char *out, size_t cap)
{
    int q = lit_peek(l);
    if (q != '\'' && q != '"') return lit_bad(l, "expects a quoted string");
    size_t o = 0;
    for (l->pos++;; l->pos++) {
        if (l->pos >= l->end) return lit_bad(l, "has an unterminated string");
        uint8_t c = l->p[l->pos];
        if (c == q) break;
        if (c < 0x20 || c >= 0x7f || c == '\\') return lit_bad(l, "has an unsupported character in a string");
        if (o + 1 >= cap) return lit_bad(l, "has an over-long string");
        out[o++] = (char)c;
    }
    l->pos++;
    out[o] = 0;
    return 0;
}

static int lit_uint(struct lit *l, uint64_t *v)
{
    int c = lit_peek(l);
    if (c < '0' || c > '9') return lit_bad(l, "expects a dimension");
    *v = 0;
    while (l->pos < l->end && l->p[l->pos] >= '0' && l->p[l->pos] <= '9') {
        if (*v > (uint64_t)(INT64_MAX - 9) / 10)
            return cj_fail(l->err, CJ_E_LIMIT, l->pos, "npy: dimension too large at offset %zu", l->pos);
        *v = *v * 10 + (uint64_t)(l->p[l->pos++] - '0');
    }
    return 0;
}

/* "(d0, d1, ...)" with Python's tuple rules: "()", "(n,)", "(a, b)", "(a, b,)". */
static int lit_shape(struct lit *l, struct item_tensor *t)
{
    int rc = lit_expect(l, '(');
    if (rc) return rc;
    if (lit_peek(l) == ')') { l->pos++; return 0; }
    for (;;) {
        if (t->ndim == ITEMS_MAX_DIMS)
            return cj_fail(l->err, CJ_E_LIMIT, l->pos, "npy: more than %d dims", ITEMS_MAX_DIMS);
        if ((rc = lit_uint(l, &t->shape[t->ndim++]))) return rc;
        int c = lit_peek(l);
        l->pos++;
        if (c == ')') {
            if (t->ndim == 1) { l->pos--; return lit_bad(l, "shape '(n)' is not a tuple"); }
            return 0;
        }
        if (c != ',') { l->pos--; return lit_bad(l, "shape expects ',' or ')'"); }
        if (lit_peek(l) == ')') { l->pos++; return 0; }
    }
}

/* {'descr': str, 'fortran_order': bool, 'shape': tuple}, exactly these keys. */
static int npy_dict(struct lit *l, struct item_tensor *t)
{
    bool have_descr = false, have_fo = false, have_shape = false;
    size_t at = l->pos;
    int rc = lit_expect(l, '{');
    if (rc) return rc;
    for (;;) {
        char key[16];
        if (lit_peek(l) == '}') { l->pos++; break; }
        if ((rc = lit_str(l, key, sizeof key)) || (rc = lit_expect(l, ':'))) return rc;
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (lit_peek(l) == '[') return lit_bad(l, "has a structured dtype (unsupported)");
            if ((rc = lit_str(l, t->dtype, sizeof t->dtype))) return rc;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fo) {
            lit_peek(l);
            if (l->end - l->pos >= 4 && memcmp(l->p + l->pos, "True", 4) == 0) { t->fortran_order = true; l->pos += 4; }
            else if (l->end - l->pos >= 5 && memcmp(l->p + l->pos, "False", 5) == 0) l->pos += 5;
            else return lit_bad(l, "fortran_order is not True/False");
            have_fo = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if ((rc = lit_shape(l, t))) return rc;
            have_shape = true;
        } else {
            return lit_bad(l, "has an unexpected or repeated key");
        }
        int c = lit_peek(l);
        l->pos++;
        if (c == '}') break;
        if (c != ',') { l->pos--; return lit_bad(l, "expects ',' or '}'"); }
    }
    if (lit_peek(l) != -1) return lit_bad(l, "has trailing bytes after the dict");
    if (!have_descr || !have_fo || !have_shape)
        return cj_fail(l->err, CJ_E_MISSING, at, "npy: header lacks %s",
                       !have_descr ? "descr" : !have_fo ? "fortran_order" : "shape");
    return 0;
}

/* Parses the NPY file at [m, m + len) of p into t (name already set). */
static int npy_parse(const uint8_t *p, size_t m, size_t len, struct item_tensor *t, struct cj_err *err)
{
    if (len < 10 || memcmp(p + m, "\x93NUMPY", 6) != 0)
        return cj_fail(err, CJ_E_INVALID, m, "npy: member '%s' has no \\x93NUMPY magic", t->name);
    int major = p[m + 6];
    size_t pre, hlen;
    if (major == 1) { pre = 10; hlen = le16(p + m + 8); }
    else if ((major == 2 || major == 3) && len >= 12) { pre = 12; hlen = le32(p + m + 8); }
    else return cj_fail(err, CJ_E_INVALID, m + 6, "npy: member '%s' has format version %d", t->name, major);
    if (hlen > len - pre)
        return cj_fail(err, CJ_E_TRUNCATED, m + 8, "npy: member '%s' header of %zu bytes exceeds the member",
                       t->name, hlen);
    struct lit l = {.p = p, .pos = m + pre, .end = m + pre + hlen, .err = err};
    int rc = npy_dict(&l, t);
    if (rc) return rc;
    const char *kind = t->dtype + (strchr("<>|=", t->dtype[0]) && t->dtype[0] ? 1 : 0);
    if (*kind == 'O')
        return cj_fail(err, CJ_E_INVALID, m, "npy: member '%s' is an object array (needs pickle)", t->name);
    t->elem_size = items_npy_descr_size(t->dtype);
    uint64_t bytes;
    if ((rc = shape_size(t, &bytes, m, err))) return rc;
    t->is_npy = true;
    t->data_off = m + pre + hlen;
    t->data_len = len - pre - hlen;
    if (t->elem_size && t->data_len != bytes)
        return cj_fail(err, CJ_E_INVALID, t->data_off, "npy: member '%s' holds %zu data bytes, its %s shape needs %llu",
                       t->name, t->data_len, t->dtype, (unsigned long long)bytes);
    return 0;
}

/* ---- npz (ZIP, stored members) --------------------------------------------------- */

static const uint8_t SIG_LOCAL[4] = {'P', 'K', 3, 4}, SIG_CENTRAL[4] = {'P', 'K', 1, 2},
                     SIG_END[4] = {'P', 'K', 5, 6};

/* The end-of-central-directory record: searched back from the end, its
 * comment length must reach exactly the end of the input. */
static int zip_find_end(const uint8_t *p, size_t n, size_t *at, struct cj_err *err)
{
    if (n < 22) return cj_fail(err, CJ_E_TRUNCATED, n, "npz: %zu bytes, too short for a ZIP end record", n);
    size_t lo = n - 22 > 65535 ? n - 22 - 65535 : 0;
    for (size_t i = n - 22;; i--) {
        if (memcmp(p + i, SIG_END, 4) == 0 && le16(p + i + 20) == n - i - 22) { *at = i; return 0; }
        if (i == lo) break;
    }
    return cj_fail(err, CJ_E_TRUNCATED, n, "npz: no end-of-central-directory record");
}

void items_zip_local_read(const uint8_t *h, struct items_zip_local *z)
{
    z->flags = le16(h + 6);
    z->method = le16(h + 8);
    z->crc32 = le32(h + 14);
    z->csize = le32(h + 18);
    z->usize = le32(h + 22);
    z->name_len = le16(h + 26);
    z->extra_len = le16(h + 28);
}

int items_zip64_sizes(const uint8_t *p, size_t x, size_t xlen, struct items_zip_local *z, struct cj_err *err)
{
    bool want_u = z->usize == 0xffffffffu, want_c = z->csize == 0xffffffffu;
    size_t end = x + xlen;
    while (end - x >= 4) {
        uint16_t tag = le16(p + x), sz = le16(p + x + 2);
        x += 4;
        if (sz > end - x) return cj_fail(err, CJ_E_INVALID, x - 4, "npz: extra field overruns the extra area");
        if (tag == 1) {
            size_t q = x, qe = x + sz;
            if (want_u && qe - q >= 8) { z->usize = le64(p + q); q += 8; want_u = false; }
            if (want_c && qe - q >= 8) { z->csize = le64(p + q); want_c = false; }
        }
        x += sz;
    }
    if (want_u || want_c) return cj_fail(err, CJ_E_INVALID, x, "npz: 32-bit size saturated but no zip64 size");
    return 0;
}
/* Reads one local file header and its data into t; *next = after the data. */
static int zip_member(const uint8_t *p, size_t n, size_t off, unsigned flags, struct item_tensor *t, size_t *next,
                      struct cj_err *err)
{
    if (n - off < 30) return cj_fail(err, CJ_E_TRUNCATED, off, "npz: local header at offset %zu truncated", off);
    const uint8_t *h = p + off;
    struct items_zip_local z;
    items_zip_local_read(h, &z);
    uint16_t gpflags = z.flags, method = z.method, name_len = z.name_len, extra_len = z.extra_len;
    if (gpflags & 0x0009)
        return cj_fail(err, CJ_E_INVALID, off, "npz: member at offset %zu is %s", off,
                       gpflags & 1 ? "encrypted" : "sized by a data descriptor (unsupported)");
    if (method != 0)
        return cj_fail(err, CJ_E_INVALID, off, "npz: member at offset %zu uses compression method %u (only stored)",
                       off, method);
    if ((size_t)name_len + extra_len > n - off - 30)
        return cj_fail(err, CJ_E_TRUNCATED, off, "npz: member name/extra at offset %zu truncated", off);
    if (name_len >= ITEMS_NAME_MAX)
        return cj_fail(err, CJ_E_LIMIT, off, "npz: member name at offset %zu is %u bytes, limit %d", off, name_len,
                       ITEMS_NAME_MAX - 1);
    if (name_len == 0 || memchr(h + 30, 0, name_len))
        return cj_fail(err, CJ_E_INVALID, off, "npz: member at offset %zu has an empty name or one with NUL", off);
    int rc = items_zip64_sizes(p, off + 30 + name_len, extra_len, &z, err);
    if (rc) return rc;
    uint64_t csize = z.csize, usize = z.usize;
    size_t data = off + 30 + name_len + extra_len;
    if (csize != usize)
        return cj_fail(err, CJ_E_INVALID, off, "npz: stored member at offset %zu has csize %llu != usize %llu", off,
                       (unsigned long long)csize, (unsigned long long)usize);
    if (csize > n - data)
        return cj_fail(err, CJ_E_TRUNCATED, data, "npz: member data of %llu bytes at offset %zu truncated",
                       (unsigned long long)csize, data);
    memset(t, 0, sizeof *t);
    memcpy(t->name, h + 30, name_len);
    t->member_off = data;
    t->member_len = (size_t)csize;
    t->crc32 = z.crc32;
    if ((flags & ITEMS_NPZ_CHECK_CRC) && items_crc32(0, p + data, t->member_len) != t->crc32)
        return cj_fail(err, CJ_E_INVALID, off, "npz: member '%s' fails its CRC-32", t->name);
    *next = data + t->member_len;
    if (name_len > 4 && memcmp(t->name + name_len - 4, ".npy", 4) == 0) {
        t->name[name_len - 4] = 0;   /* the key numpy's load gives it */
        return npy_parse(p, data, t->member_len, t, err);
    }
    return 0;
}

int items_npz_parse(const uint8_t *p, size_t n, unsigned flags, struct item_tensor *out, size_t cap,
                    size_t *count, struct cj_err *err)
{
    *count = 0;
    /* a ZIP starts with a local header, or is empty (just the end record) */
    if (n < 4 || (memcmp(p, SIG_LOCAL, 4) != 0 && memcmp(p, SIG_END, 4) != 0))
        return cj_fail(err, CJ_E_INVALID, 0, "npz: bad magic (no ZIP local file header at offset 0)");
    size_t eocd = 0, off = 0;
    int rc = zip_find_end(p, n, &eocd, err);
    if (rc) return rc;
    while (off < eocd && eocd - off >= 4 && memcmp(p + off, SIG_LOCAL, 4) == 0) {
        if (*count == cap) return cj_fail(err, CJ_E_LIMIT, off, "npz: more than %zu members", cap);
        struct item_tensor *t = &out[*count];
        if ((rc = zip_member(p, n, off, flags, t, &off, err))) return rc;
        if (items_find(out, *count, t->name))
            return cj_fail(err, CJ_E_INVALID, t->member_off, "npz: member '%s' appears twice", t->name);
        (*count)++;
    }
    /* The walk must end where the central directory starts, before the end record. */
    const uint8_t *e = p + eocd;
    uint16_t entries = le16(e + 10);
    uint32_t cd_size = le32(e + 12), cd_off = le32(e + 16);
    if (off > eocd) return cj_fail(err, CJ_E_INVALID, eocd, "npz: member data overlaps the end record");
    if (off < eocd && memcmp(p + off, SIG_CENTRAL, 4) != 0)
        return cj_fail(err, CJ_E_INVALID, off, "npz: offset %zu is neither a local header nor the central directory",
                       off);
    if (entries != 0xffff && entries != *count)
        return cj_fail(err, CJ_E_INVALID, eocd, "npz: end record lists %u members, %zu found", entries, *count);
    if (cd_off != 0xffffffffu && cd_size != 0xffffffffu && (cd_off != off || (uint64_t)cd_off + cd_size != eocd))
        return cj_fail(err, CJ_E_INVALID, eocd, "npz: central directory at %u+%u does not sit between %zu and %zu",
                       cd_off, cd_size, off, eocd);
    return 0;
}

/* ---- writers ----------------------------------------------------------------------- */

struct wb {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

static void wb_put(struct wb *b, const void *s, size_t n)
{
    if (b->oom || n == 0) return;   /* n == 0: s may be NULL (an empty tensor) */
    if (n > b->cap - b->len) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc - b->len < n) {
            if (nc > SIZE_MAX / 2) { b->oom = true; return; }
            nc *= 2;
        }
        uint8_t *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void wb_str(struct wb *b, const char *s) { wb_put(b, s, strlen(s)); }

static void wb_fmt(struct wb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wb_fmt(struct wb *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    wb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void wb_u16(struct wb *b, unsigned v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    wb_put(b, x, 2);
}

static void wb_u32(struct wb *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wb_put(b, x, 4);
}

static void wb_u64(struct wb *b, uint64_t v)
{
    wb_u32(b, (uint32_t)v);
    wb_u32(b, (uint32_t)(v >> 32));
}

static int wb_done(struct wb *b, uint8_t **out, size_t *outlen, struct cj_err *err)
{
    if (b->oom) {
        free(b->p);
        return cj_fail(err, CJ_E_NOMEM, 0, "items: out of memory building an item");
    }
    *out = b->p;
    *outlen = b->len;
    return 0;
}

/* Checks writer input all[idx]: name, dims, len == prod(shape) * elem_size.
 * suffix: bytes the format adds to the name (".npy" in an npz). */
static int check_in(const struct item_in *all, size_t idx, size_t elem, size_t suffix, struct cj_err *err)
{
    const struct item_in *in = &all[idx];
    struct item_tensor t = {.ndim = in->ndim, .elem_size = elem};
    uint64_t bytes;
    if (!in->name || !in->name[0] || strlen(in->name) + suffix >= ITEMS_NAME_MAX)
        return cj_fail(err, CJ_E_INVALID, idx, "items: tensor %zu has an empty or over-long name", idx);
    if (elem == 0)
        return cj_fail(err, CJ_E_INVALID, idx, "items: tensor '%s' has unknown dtype '%s'", in->name,
                       in->dtype ? in->dtype : "(null)");
    if (in->ndim < 0 || in->ndim > ITEMS_MAX_DIMS)
        return cj_fail(err, CJ_E_LIMIT, idx, "items: tensor '%s' has %d dims", in->name, in->ndim);
    snprintf(t.name, sizeof t.name, "%s", in->name);
    if (in->ndim) memcpy(t.shape, in->shape, sizeof t.shape[0] * (size_t)in->ndim);
    int rc = shape_size(&t, &bytes, idx, err);
    if (rc) return rc;
    if (bytes != in->len || (in->len && !in->data))
        return cj_fail(err, CJ_E_INVALID, idx, "items: tensor '%s' has %zu data bytes, its shape needs %llu",
                       in->name, in->len, (unsigned long long)bytes);
    for (size_t k = 0; k < idx; k++)
        if (strcmp(all[k].name, in->name) == 0)
            return cj_fail(err, CJ_E_INVALID, idx, "items: tensor '%s' given twice", in->name);
    return 0;
}

/* A JSON string as serde_json writes it. */
static void wb_json_str(struct wb *b, const char *s)
{
    wb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { wb_put(b, "\\", 1); wb_put(b, s, 1); }
        else if (c == '\n') wb_str(b, "\\n");
        else if (c == '\r') wb_str(b, "\\r");
        else if (c == '\t') wb_str(b, "\\t");
        else if (c == '\b') wb_str(b, "\\b");
        else if (c == '\f') wb_str(b, "\\f");
        else if (c < 0x20) wb_fmt(b, "\\u%04x", c);
        else wb_put(b, s, 1);
    }
    wb_put(b, "\"", 1);
}

int items_st_write(const struct item_in *in, size_t n, uint8_t **out, size_t *outlen, struct cj_err *err)
{
    *out = NULL;
    *outlen = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = check_in(in, i, in[i].dtype ? items_st_dtype_size(in[i].dtype) : 0, 0, err);
        if (rc) return rc;
        if (strcmp(in[i].name, "__metadata__") == 0)
            return cj_fail(err, CJ_E_INVALID, i, "items: '__metadata__' is not a tensor name");
    }
    struct wb h = {0}, b = {0};
    uint64_t off = 0;
    wb_put(&h, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i) wb_put(&h, ",", 1);
        wb_json_str(&h, in[i].name);
        wb_fmt(&h, ":{\"dtype\":\"%s\",\"shape\":[", in[i].dtype);
        for (int d = 0; d < in[i].ndim; d++) wb_fmt(&h, d ? ",%llu" : "%llu", (unsigned long long)in[i].shape[d]);
        wb_fmt(&h, "],\"data_offsets\":[%llu,", (unsigned long long)off);
        off += in[i].len;
        wb_fmt(&h, "%llu]}", (unsigned long long)off);
    }
    wb_put(&h, "}", 1);
    while ((8 + h.len) % 8) wb_put(&h, " ", 1);
    if (h.oom) { free(h.p); return cj_fail(err, CJ_E_NOMEM, 0, "items: out of memory"); }
    wb_u64(&b, h.len);
    wb_put(&b, h.p, h.len);
    free(h.p);
    for (size_t i = 0; i < n; i++) wb_put(&b, in[i].data, in[i].len);
    return wb_done(&b, out, outlen, err);
}

/* An NPY v1.0 (v2.0 if the header needs it) file exactly as numpy 1.24 writes
 * it: sorted-key dict repr, spare spaces for growing axis 0 (21 - digits of
 * shape[0]), padded with spaces and "\n" so the data starts 64-aligned. */
static void npy_write(struct wb *b, const struct item_in *in)
{
    struct wb d = {0};
    wb_fmt(&d, "{'descr': '%s', 'fortran_order': False, 'shape': (", in->dtype);
    for (int i = 0; i < in->ndim; i++) wb_fmt(&d, i ? ", %llu" : "%llu", (unsigned long long)in->shape[i]);
    wb_str(&d, in->ndim == 1 ? ",), }" : "), }");
    if (in->ndim > 0) {
        char digits[24];
        int k = snprintf(digits, sizeof digits, "%llu", (unsigned long long)in->shape[0]);
        for (int i = k; i < 21; i++) wb_put(&d, " ", 1);
    }
    size_t hlen = d.len + 1;
    int major = 1;
    size_t pad = 64 - (10 + hlen) % 64;
    if (hlen + pad > 65535) { major = 2; pad = 64 - (12 + hlen) % 64; }
    wb_put(b, "\x93NUMPY", 6);
    uint8_t ver[2] = {(uint8_t)major, 0};
    wb_put(b, ver, 2);
    if (major == 1) wb_u16(b, (unsigned)(hlen + pad));
    else wb_u32(b, (uint32_t)(hlen + pad));
    if (d.oom) b->oom = true;
    else wb_put(b, d.p, d.len);
    free(d.p);
    for (size_t i = 0; i < pad; i++) wb_put(b, " ", 1);
    wb_put(b, "\n", 1);
    wb_put(b, in->data, in->len);
}

/* Python's zipfile: stored, date 1980-01-01, zip64 extra forced by numpy,
 * UTF-8 flag for non-ASCII names. */
static unsigned zip_name_flags(const char *name)
{
    for (; *name; name++)
        if ((unsigned char)*name >= 0x80) return 0x800;
    return 0;
}

int items_npz_write(const struct item_in *in, size_t n, unsigned flags, uint8_t **out, size_t *outlen,
                    struct cj_err *err)
{
    static const uint8_t false_byte = 0;
    const struct item_in allow_pickle = {.name = "allow_pickle", .dtype = "|b1", .ndim = 0, .data = &false_byte,
                                         .len = 1};
    size_t extra = (flags & ITEMS_NPZ_NUMPY124) ? 1 : 0, total = n + extra;
    *out = NULL;
    *outlen = 0;
    if (total > 0xfffe) return cj_fail(err, CJ_E_LIMIT, 0, "items: %zu members, over the ZIP limit", total);
    for (size_t i = 0; i < n; i++) {
        const char *ds = in[i].dtype;
        if (ds && (strpbrk(ds, "'\\") || strlen(ds) >= 16))
            return cj_fail(err, CJ_E_INVALID, i, "items: descr of tensor %zu is not a plain string", i);
        int rc = check_in(in, i, ds ? items_npy_descr_size(ds) : 0, 4, err);
        if (rc) return rc;
        if (extra && strcmp(in[i].name, "allow_pickle") == 0)
            return cj_fail(err, CJ_E_INVALID, i, "items: 'allow_pickle' is taken by ITEMS_NPZ_NUMPY124");
    }
    uint32_t *crcs = calloc(total ? total : 1, sizeof *crcs), *offs = calloc(total ? total : 1, sizeof *offs),
             *sizes = calloc(total ? total : 1, sizeof *sizes);
    struct wb b = {0}, m = {0};
    int rc = 0;
    if (!crcs || !offs || !sizes) { rc = cj_fail(err, CJ_E_NOMEM, 0, "items: out of memory"); goto out; }
    for (size_t k = 0; k < total && !b.oom; k++) {
        const struct item_in *t = extra ? (k == 0 ? &allow_pickle : &in[k - 1]) : &in[k];
        char name[ITEMS_NAME_MAX];
        snprintf(name, sizeof name, "%s.npy", t->name);
        m.len = 0;
        npy_write(&m, t);
        if (m.oom) break;
        if ((uint64_t)b.len + 30 + strlen(name) + 20 + m.len > 0xfffffffeu) {
            rc = cj_fail(err, CJ_E_LIMIT, k, "items: npz over 4 GiB (zip64 offsets not supported)");
            goto out;
        }
        crcs[k] = items_crc32(0, m.p, m.len);
        offs[k] = (uint32_t)b.len;
        sizes[k] = (uint32_t)m.len;
        wb_put(&b, "PK\x03\x04", 4);
        wb_u16(&b, 20); wb_u16(&b, zip_name_flags(name)); wb_u16(&b, 0); wb_u16(&b, 0); wb_u16(&b, 0x21);
        wb_u32(&b, crcs[k]); wb_u32(&b, sizes[k]); wb_u32(&b, sizes[k]);
        wb_u16(&b, (unsigned)strlen(name)); wb_u16(&b, 20);
        wb_str(&b, name);
        wb_u16(&b, 1); wb_u16(&b, 16); wb_u64(&b, m.len); wb_u64(&b, m.len);
        wb_put(&b, m.p, m.len);
    }
    if (m.oom) b.oom = true;
    size_t cd_off = b.len;
    for (size_t k = 0; k < total && !b.oom; k++) {
        const struct item_in *t = extra ? (k == 0 ? &allow_pickle : &in[k - 1]) : &in[k];
        char name[ITEMS_NAME_MAX];
        snprintf(name, sizeof name, "%s.npy", t->name);
        wb_put(&b, "PK\x01\x02", 4);
        wb_u16(&b, 0x0314); wb_u16(&b, 20); wb_u16(&b, zip_name_flags(name)); wb_u16(&b, 0); wb_u16(&b, 0);
        wb_u16(&b, 0x21);
        wb_u32(&b, crcs[k]); wb_u32(&b, sizes[k]); wb_u32(&b, sizes[k]);
        wb_u16(&b, (unsigned)strlen(name)); wb_u16(&b, 0); wb_u16(&b, 0); wb_u16(&b, 0); wb_u16(&b, 0);
        wb_u32(&b, 0x01800000u);   /* 0o600 << 16 */
        wb_u32(&b, offs[k]);
        wb_str(&b, name);
    }
    if (b.len > 0xffffffffu) { rc = cj_fail(err, CJ_E_LIMIT, 0, "items: npz over 4 GiB"); goto out; }
    size_t cd_size = b.len - cd_off;
    wb_put(&b, "PK\x05\x06", 4);
    wb_u16(&b, 0); wb_u16(&b, 0); wb_u16(&b, (unsigned)total); wb_u16(&b, (unsigned)total);
    wb_u32(&b, (uint32_t)cd_size); wb_u32(&b, (uint32_t)cd_off); wb_u16(&b, 0);
out:
    free(m.p);
    free(crcs);
    free(offs);
    free(sizes);
    if (rc) { free(b.p); return rc; }
    return wb_done(&b, out, outlen, err);
}
