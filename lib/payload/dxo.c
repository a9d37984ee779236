/* SPDX-License-Identifier: Apache-2.0 */
/* dxo.c — the DXO-shaped Shareable of tasks and results (see dxo.h). */
#include "payload/dxo.h"

#include <stdio.h>
#include <string.h>

#include "payload/lobs.h"
#include "util/mp.h"
#include "util/uuid.h"

#define DXO_JSON_MAX (2 * (CJ_FOBS_FQCN_MAX + CJ_FOBS_REF_ID_MAX) + 64)
#define DXO_MAX_ITEM 0x7fffffffLL     /* largest n of "T<n>" accepted */

/* ---- writing -------------------------------------------------------------------- */

static int pack_cstr(msgpack_packer *pk, const char *s)
{
    return cj_fobs_write_str(pk, s);
}

/* True when [p, p+len) is exactly one msgpack map. */
static bool one_map(const uint8_t *p, size_t len)
{
    struct mp_cur c;
    struct mp_val v;
    mp_cur_init(&c, p, len);
    if (mp_next(&c, &v, NULL) < 0 || v.kind != MP_MAP) return false;
    mp_cur_init(&c, p, len);
    return mp_skip(&c, NULL) == 0 && c.pos == len;
}

/* {__fobs_type__: type, __fobs_data__: <the caller writes it next>, ...}: the
 * first three pieces; the caller then writes the data and calls wrapper_end. */
static int wrapper_begin(msgpack_packer *pk, const char *type)
{
    if (msgpack_pack_map(pk, 3) || pack_cstr(pk, CJ_FOBS_TYPE_KEY) || pack_cstr(pk, type) ||
        pack_cstr(pk, CJ_FOBS_DATA_KEY))
        return -1;
    return 0;
}

static int wrapper_end(msgpack_packer *pk, const char *dc)
{
    return pack_cstr(pk, CJ_FOBS_DC_KEY) || pack_cstr(pk, dc) ? -1 : 0;
}

static int write_kind(msgpack_packer *pk, const char *kind)
{
    if (pack_cstr(pk, "kind") || wrapper_begin(pk, CJ_DXO_DATAKIND) || pack_cstr(pk, kind)) return -1;
    return wrapper_end(pk, CJ_DXO_ENUM_DC);
}

static int write_tensor(msgpack_packer *pk, const struct cj_dxo_out *d, size_t i)
{
    char name[64], item[32];
    const char *nm = d->names ? d->names[i] : name;
    if (!d->names) snprintf(name, sizeof name, "layer%zu.weight", i);
    bool numpy = d->dot == CJ_DXO_DOT_NUMPY;
    if (pack_cstr(pk, nm) || wrapper_begin(pk, numpy ? CJ_FOBS_NUMPY : CJ_FOBS_TORCH) || msgpack_pack_map(pk, 2) ||
        pack_cstr(pk, "type"))
        return -1;
    if (d->native) {
        if (pack_cstr(pk, "native") || pack_cstr(pk, "data") || msgpack_pack_bin(pk, d->native_len[i]) ||
            msgpack_pack_bin_body(pk, d->native[i], d->native_len[i]))
            return -1;
    } else {
        snprintf(item, sizeof item, "T%zu", i);
        if (pack_cstr(pk, "ref") || pack_cstr(pk, "data") || pack_cstr(pk, item)) return -1;
    }
    return wrapper_end(pk, numpy ? CJ_DXO_NUMPY_DC : CJ_DXO_TORCH_DC);
}

static int write_meta(msgpack_packer *pk, msgpack_sbuffer *sb, const struct cj_dxo_out *d)
{
    if (pack_cstr(pk, "meta")) return -1;
    if (d->meta) return msgpack_sbuffer_write(sb, (const char *)d->meta, d->meta_len) ? -1 : 0;
    if (msgpack_pack_map(pk, 1) || pack_cstr(pk, "current_round")) return -1;
    return msgpack_pack_int64(pk, d->current_round) ? -1 : 0;
}

static int write_body(msgpack_sbuffer *sb, const struct cj_dxo_out *d)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (cj_fobs_write_shareable_begin(&pk, d->headers ? 2 : 1)) return -1;
    if (d->headers &&
        (pack_cstr(&pk, CJ_FOBS_HEADERS_KEY) || msgpack_sbuffer_write(sb, (const char *)d->headers, d->headers_len)))
        return -1;
    if (pack_cstr(&pk, CJ_DXO_KEY) || msgpack_pack_map(&pk, 3) || write_kind(&pk, d->kind ? d->kind : "WEIGHTS"))
        return -1;
    if (pack_cstr(&pk, "data") || msgpack_pack_map(&pk, (uint32_t)d->n_tensors)) return -1;
    for (size_t i = 0; i < d->n_tensors; i++)
        if (write_tensor(&pk, d, i)) return -1;
    if (write_meta(&pk, sb, d)) return -1;
    return cj_fobs_write_shareable_end(&pk);
}

/* Appends s as the inside of a JSON string; printable ASCII only. */
static int json_str(char *out, size_t cap, size_t *o, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x20 || ch >= 0x7f) return -1;
        if (*o + 2 >= cap) return -1;
        if (ch == '"' || ch == '\\') out[(*o)++] = '\\';
        out[(*o)++] = (char)ch;
    }
    return 0;
}

/* {"fqcn": "<source>", "ref_id": "<ref_id>"} as Python's json.dumps writes it. */
static int ref_json(const char *source, const char *ref_id, char *out, size_t cap, size_t *len)
{
    size_t o = 0;
    const char *parts[] = {"{\"fqcn\": \"", source, "\", \"ref_id\": \"", ref_id, "\"}"};
    for (size_t i = 0; i < 5; i++) {
        if (i % 2) {
            if (json_str(out, cap, &o, parts[i]) < 0) return -1;
        } else {
            size_t n = strlen(parts[i]);
            if (o + n >= cap) return -1;
            memcpy(out + o, parts[i], n);
            o += n;
        }
    }
    *len = o;
    return 0;
}

static int check_out(const struct cj_dxo_out *d, struct cj_err *err)
{
    if (d->dot != CJ_DXO_DOT_NUMPY && d->dot != CJ_DXO_DOT_TORCH)
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: DOT %u is neither 3 (numpy) nor 6 (torch)", d->dot);
    if (d->n_tensors == 0 || d->n_tensors > UINT32_MAX)
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: %zu tensors (want 1 or more)", d->n_tensors);
    if (!d->native && (!d->source || !d->source[0] || !d->ref_id || !d->ref_id[0]))
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: a ref needs a source fqcn and a ref_id");
    if (d->native && !d->native_len)
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: native tensors without their lengths");
    if (d->headers && !one_map(d->headers, d->headers_len))
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: __headers__ is not exactly one msgpack map");
    if (d->meta && !one_map(d->meta, d->meta_len))
        return cj_fail(err, CJ_E_INVALID, 0, "dxo: meta is not exactly one msgpack map");
    if (d->names)
        for (size_t i = 0; i < d->n_tensors; i++)
            if (!d->names[i]) return cj_fail(err, CJ_E_INVALID, 0, "dxo: tensor %zu has no name", i);
    return 0;
}

int cj_dxo_write(msgpack_sbuffer *out, const struct cj_dxo_out *d, struct cj_err *err)
{
    int rc = check_out(d, err);
    if (rc) return rc;
    char json[DXO_JSON_MAX];
    size_t jlen = 0;
    uint8_t id[16];
    if (!d->native) {
        if (ref_json(d->source, d->ref_id, json, sizeof json, &jlen) < 0)
            return cj_fail(err, CJ_E_INVALID, 0, "dxo: fqcn or ref_id too long or not printable ASCII");
        if (d->datum_id) memcpy(id, d->datum_id, 16);
        else if (cj_uuid4(id) < 0) return cj_fail(err, CJ_E_NOMEM, 0, "dxo: getrandom failed");
    }
    size_t start = out->size, hoff;
    if ((rc = cj_lobs_begin_main(out, &hoff, err))) return rc;
    if (write_body(out, d)) {
        out->size = start;
        return cj_fail(err, CJ_E_NOMEM, 0, "dxo: out of memory writing the body");
    }
    cj_lobs_end_main(out, hoff);
    if (!d->native && (rc = cj_lobs_write_datum(out, CJ_LOBS_TEXT, d->dot, id, json, jlen, err))) {
        out->size = start;
        return rc;
    }
    return 0;
}

/* ---- reading -------------------------------------------------------------------- */

/* Reads a str map key at c; a non-str key is skipped whole (kind != MP_STR). */
/* A value's raw span at c (c advanced past it); offsets absolute in c->base. */
static int value_span(struct mp_cur *c, struct cj_range *sp, struct cj_err *err)
{
    size_t at = c->pos;
    int rc = mp_skip(c, err);
    if (rc) return rc;
    sp->off = at;
    sp->len = c->pos - at;
    return 0;
}

/* A cursor over exactly the span sp of base (sp absolute in base). */
static void span_cur(struct mp_cur *c, const uint8_t *base, struct cj_range sp)
{
    c->base = base;
    c->pos = sp.off;
    c->end = sp.off + sp.len;
}

static int read_map_at(struct mp_cur *c, uint32_t *n, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind != MP_MAP) return cj_fail(err, CJ_E_TYPE, at, "dxo: %s at offset %zu is not a map", what, at);
    *n = v.n;
    return 0;
}

/* The spans of DXO.kind, .data and .meta (the last occurrence of each). */
struct dxo_parts {
    struct cj_range kind, data, meta;
};

static int dxo_parts(const uint8_t *p, struct cj_range dxo, struct dxo_parts *pt, struct cj_err *err)
{
    struct mp_cur c;
    uint32_t n = 0;
    span_cur(&c, p, dxo);
    int rc = read_map_at(&c, &n, "DXO", err);
    memset(pt, 0, sizeof *pt);
    for (uint32_t i = 0; !rc && i < n; i++) {
        struct mp_val k;
        struct cj_range v;
        if ((rc = mp_read_key(&c, &k, err)) || (rc = value_span(&c, &v, err))) break;
        if (mp_key_is(&k, "kind")) pt->kind = v;
        else if (mp_key_is(&k, "data")) pt->data = v;
        else if (mp_key_is(&k, "meta")) pt->meta = v;
    }
    if (!rc && !pt->data.len) rc = cj_fail(err, CJ_E_MISSING, dxo.off, "dxo: the DXO map has no \"data\"");
    return rc;
}

/* kind: the member name of an enum wrapper; anything else leaves "". */
static void read_kind(const uint8_t *p, struct cj_range sp, char *out)
{
    struct mp_cur c, v;
    uint32_t n = 0;
    const uint8_t *s;
    uint32_t sl;
    out[0] = '\0';
    if (!sp.len) return;
    span_cur(&c, p, sp);
    if (mp_read_map(&c, &n, NULL) < 0 || mp_map_find(&c, n, CJ_FOBS_DATA_KEY, &v, NULL) != 1) return;
    if (mp_read_str(&v, &s, &sl, NULL) < 0 || sl > CJ_DXO_KIND_MAX) return;
    memcpy(out, s, sl);
    out[sl] = '\0';
}

/* meta.current_round when it is an int. */
static void read_round(const uint8_t *p, struct cj_range sp, struct cj_dxo_in *d)
{
    struct mp_cur c, v;
    uint32_t n = 0;
    if (!sp.len) return;
    span_cur(&c, p, sp);
    if (mp_read_map(&c, &n, NULL) < 0 || mp_map_find(&c, n, "current_round", &v, NULL) != 1) return;
    d->has_round = mp_read_int(&v, &d->current_round, NULL) == 0;
}

/* n of "T<n>", or -1. */
static int64_t item_index(const uint8_t *s, uint32_t len)
{
    if (len < 2 || len > 11 || s[0] != 'T' || (s[1] == '0' && len > 2)) return -1;
    int64_t v = 0;
    for (uint32_t i = 1; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v > DXO_MAX_ITEM ? -1 : v;
}

/* {type: "ref"|"native", data: str|bin, [lazy_dot: int]} of a tensor wrapper. */
static int read_tensor_data(struct mp_cur *c, struct cj_dxo_tensor *t, struct cj_err *err)
{
    uint32_t n = 0;
    int rc = read_map_at(c, &n, "tensor __fobs_data__", err);
    bool has_type = false, has_data = false;
    int64_t lazy_dot = -1;
    size_t at = c->pos;
    for (uint32_t i = 0; !rc && i < n; i++) {
        struct mp_val k, v;
        if ((rc = mp_read_key(c, &k, err))) break;
        size_t vat = c->pos;
        if (mp_key_is(&k, "type") || mp_key_is(&k, "data") || mp_key_is(&k, "lazy_dot")) {
            if ((rc = mp_next(c, &v, err))) break;
            if (v.kind == MP_ARRAY || v.kind == MP_MAP) {
                c->pos = vat;
                return cj_fail(err, CJ_E_TYPE, vat, "dxo: tensor field at offset %zu is a container", vat);
            }
            if (mp_key_is(&k, "type")) {
                if (v.kind != MP_STR) return cj_fail(err, CJ_E_TYPE, vat, "dxo: tensor type is not a str");
                has_type = true;
                t->is_ref = mp_str_eq(v.ptr, v.len, "ref");
                if (!t->is_ref && !mp_str_eq(v.ptr, v.len, "native"))
                    return cj_fail(err, CJ_E_TYPE, vat, "dxo: tensor type at offset %zu is neither ref nor native", vat);
            } else if (mp_key_is(&k, "data")) {
                if (v.kind != MP_STR && v.kind != MP_BIN)
                    return cj_fail(err, CJ_E_TYPE, vat, "dxo: tensor data at offset %zu is neither str nor bin", vat);
                has_data = true;
                t->data = v.ptr;
                t->data_len = v.len;
                t->item = v.kind == MP_STR ? item_index(v.ptr, v.len) : -1;
            } else {
                lazy_dot = v.kind == MP_UINT && v.u < 256 ? (int64_t)v.u : 0;
            }
        } else {
            rc = mp_skip(c, err);
        }
    }
    if (rc) return rc;
    if (!has_type || !has_data)
        return cj_fail(err, CJ_E_MISSING, at, "dxo: tensor at offset %zu lacks \"type\" or \"data\"", at);
    if (t->kind == CJ_FOBS_WRAP_LAZY) t->dot = lazy_dot > 0 ? (uint8_t)lazy_dot : 0;
    if (t->is_ref && t->item < 0)
        return cj_fail(err, CJ_E_INVALID, at, "dxo: tensor ref at offset %zu is not an item id T<n>", at);
    return 0;
}

/* One tensor wrapper at c. */
static int read_tensor(struct mp_cur *c, struct cj_dxo_tensor *t, struct cj_err *err)
{
    size_t at = c->pos;
    uint32_t n = 0;
    int rc = read_map_at(c, &n, "tensor wrapper", err);
    struct cj_range data = {0, 0};
    t->kind = 0;
    for (uint32_t i = 0; !rc && i < n; i++) {
        struct mp_val k;
        struct cj_range v;
        if ((rc = mp_read_key(c, &k, err)) || (rc = value_span(c, &v, err))) break;
        if (mp_key_is(&k, CJ_FOBS_DATA_KEY)) data = v;
        if (!mp_key_is(&k, CJ_FOBS_TYPE_KEY)) continue;
        struct mp_cur vc;
        const uint8_t *s;
        uint32_t sl;
        span_cur(&vc, c->base, v);
        if (mp_read_str(&vc, &s, &sl, NULL) < 0) return cj_fail(err, CJ_E_TYPE, v.off, "dxo: __fobs_type__ not a str");
        if (mp_str_eq(s, sl, CJ_FOBS_NUMPY)) t->kind = CJ_FOBS_WRAP_NUMPY, t->dot = CJ_DXO_DOT_NUMPY;
        else if (mp_str_eq(s, sl, CJ_FOBS_TORCH)) t->kind = CJ_FOBS_WRAP_TORCH, t->dot = CJ_DXO_DOT_TORCH;
        else if (mp_str_eq(s, sl, CJ_FOBS_LAZY)) t->kind = CJ_FOBS_WRAP_LAZY;
        else t->kind = 0;
    }
    if (rc) return rc;
    if (!t->kind || !data.len)
        return cj_fail(err, CJ_E_TYPE, at, "dxo: DXO.data value at offset %zu is not a numpy/torch/lazy-ref wrapper", at);
    struct mp_cur dc;
    span_cur(&dc, c->base, data);
    return read_tensor_data(&dc, t, err);
}

/* Folds tensor t into the totals (DOT agreement, item count). */
static int account_tensor(struct cj_dxo_in *d, const struct cj_dxo_tensor *t, size_t at, struct cj_err *err)
{
    if (!t->is_ref) {
        d->n_native++;
        return 0;
    }
    if (t->dot != CJ_DXO_DOT_NUMPY && t->dot != CJ_DXO_DOT_TORCH)
        return cj_fail(err, CJ_E_INVALID, at, "dxo: tensor ref at offset %zu has DOT %u (want 3 or 6)", at, t->dot);
    if (d->dot && d->dot != t->dot)
        return cj_fail(err, CJ_E_INVALID, at, "dxo: refs of DOT %u and %u in one DXO", d->dot, t->dot);
    d->dot = t->dot;
    d->n_refs++;
    if ((uint64_t)t->item + 1 > d->n_items) d->n_items = (uint64_t)t->item + 1;
    return 0;
}

static int read_data(const uint8_t *p, struct cj_range sp, struct cj_dxo_in *d, struct cj_err *err)
{
    struct mp_cur c;
    uint32_t n = 0;
    span_cur(&c, p, sp);
    int rc = read_map_at(&c, &n, "DXO.data", err);
    for (uint32_t i = 0; !rc && i < n; i++) {
        struct cj_dxo_tensor t;
        memset(&t, 0, sizeof t);
        size_t kat = c.pos;
        const uint8_t *name;
        uint32_t nl;
        if ((rc = mp_read_str(&c, &name, &nl, err))) {
            c.pos = kat;
            return cj_fail(err, CJ_E_TYPE, kat, "dxo: DXO.data key at offset %zu is not a str", kat);
        }
        t.name = name;
        t.name_len = nl;
        size_t at = c.pos;
        if ((rc = read_tensor(&c, &t, err)) || (rc = account_tensor(d, &t, at, err))) break;
        if (d->n_tensors < d->cap) d->tensors[d->n_tensors] = t;
        d->n_tensors++;
    }
    return rc;
}

/* The first TEXT datum of DOT d->dot and how many there are. */
static int find_datum(const uint8_t *payload, size_t len, struct cj_dxo_in *d, struct cj_err *err)
{
    struct cj_lobs_iter it;
    struct cj_lobs_section s;
    int rc;
    cj_lobs_iter_init(&it, payload, len);
    while ((rc = cj_lobs_next(&it, &s, err)) == 1) {
        if (s.marker == CJ_LOBS_MAIN || s.dot != d->dot) continue;
        if (s.marker != CJ_LOBS_TEXT)
            return cj_fail(err, CJ_E_INVALID, s.offset, "dxo: DOT-%u datum at offset %zu is not TEXT", s.dot, s.offset);
        if (d->n_datums++) continue;
        if ((rc = cj_fobs_parse_ref_json(s.value, s.value_len, d->fqcn, sizeof d->fqcn, d->ref_id, sizeof d->ref_id,
                                         err)))
            return rc;
        d->has_datum = true;
    }
    if (rc < 0) return rc;
    if (!d->has_datum)
        return cj_fail(err, CJ_E_MISSING, 0, "dxo: %zu refs but no DOT-%u datum in the payload", d->n_refs, d->dot);
    return 0;
}

static void reset_in(struct cj_dxo_in *d)
{
    struct cj_dxo_tensor *t = d->tensors;
    size_t cap = d->cap;
    memset(d, 0, sizeof *d);
    d->tensors = t;
    d->cap = t ? cap : 0;
}

int cj_dxo_read(const uint8_t *payload, size_t len, size_t body_off, size_t body_len, struct cj_dxo_in *d,
                struct cj_err *err)
{
    reset_in(d);
    if (body_off > len || body_len > len - body_off)
        return cj_fail(err, CJ_E_INVALID, body_off, "dxo: body span [%zu, +%zu) outside the %zu-byte payload",
                       body_off, body_len, len);
    int rc = cj_lobs_validate(payload, len, NULL, NULL, 0, NULL, err);
    if (rc) return rc;
    const uint8_t *body = payload + body_off;
    struct cj_fobs_shareable sh;
    if ((rc = cj_fobs_find_shareable(body, body_len, &sh, err))) {
        if (err) err->offset += body_off;
        return rc;
    }
    if (sh.headers.len) d->headers = (struct cj_range){body_off + sh.headers.off, sh.headers.len};
    struct cj_range dxo;
    size_t map_off = body_off + sh.data_off;
    if ((rc = cj_fobs_map_get(payload + map_off, body_off + sh.data_end - map_off, CJ_DXO_KEY, &dxo, err)) < 0)
        return rc;
    if (rc == 0) return cj_fail(err, CJ_E_MISSING, map_off, "dxo: the Shareable has no \"DXO\" entry");
    dxo.off += map_off;
    struct dxo_parts pt;
    if ((rc = dxo_parts(payload, dxo, &pt, err))) return rc;
    read_kind(payload, pt.kind, d->kind);
    d->meta = pt.meta;
    read_round(payload, pt.meta, d);
    if ((rc = read_data(payload, pt.data, d, err))) return rc;
    return d->n_refs ? find_datum(payload, len, d, err) : 0;
}

void cj_dxo_name(const struct cj_dxo_tensor *t, char *out, size_t outsz)
{
    if (!outsz) return;
    size_t n = t->name_len < outsz - 1 ? t->name_len : outsz - 1;
    memcpy(out, t->name, n);
    out[n] = '\0';
}
