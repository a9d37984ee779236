/* SPDX-License-Identifier: Apache-2.0 */
/* header.c — cellnet header block: decode, forward rewrite, build (see header.h). */
#include "wire/header.h"

#include <stddef.h>
#include <string.h>

/* ==== key table ============================================================= */

/* How a known key's value is checked and stored. */
enum ktype {
    KT_MSGTYPE,  /* str: req / reply / return */
    KT_NAME,     /* str <= CJ_HDR_STR_MAX, no NUL: copied into a char array */
    KT_TEXT,     /* str of any length: span */
    KT_BOOL,
    KT_INT,      /* any int that fits int64 (never float / bool) */
    KT_COUNT,    /* int >= 0 */
    KT_NUM,      /* float or int, stored as double (times) */
    KT_REQID,    /* str, or array of str */
    KT_ROUTE,    /* array of [str, number] */
    KT_MAP,      /* a map, kept as a raw span */
    KT_SMID,     /* any msgpack int, uint64 included */
};

struct kdef {
    const char *name;
    uint32_t len;  /* strlen(name): every header's every key is looked up here */
    enum ktype type;
    size_t off; /* where the value goes in struct cj_hdr */
};

#define K(id, nm, ty, field) [id] = { nm, sizeof nm - 1, ty, offsetof(struct cj_hdr, field) }
static const struct kdef KEYS[CJ_HK__COUNT] = {
    K(CJ_HK_MSG_TYPE, "cn__msg_type", KT_MSGTYPE, msg_type),
    K(CJ_HK_ORIGIN, "cn__origin", KT_NAME, origin),
    K(CJ_HK_DESTINATION, "cn__destination", KT_NAME, destination),
    K(CJ_HK_FROM, "cn__from", KT_NAME, from),
    K(CJ_HK_TO, "cn__to", KT_NAME, to),
    K(CJ_HK_ROUTE, "cn__route", KT_ROUTE, route),
    K(CJ_HK_SEND_TIME, "cn__send_time", KT_NUM, send_time),
    K(CJ_HK_CHANNEL, "cn__channel", KT_NAME, channel),
    K(CJ_HK_TOPIC, "cn__topic", KT_NAME, topic),
    K(CJ_HK_REQ_ID, "cn__req_id", KT_REQID, req_id),
    K(CJ_HK_REPLY_EXPECTED, "cn__reply_expected", KT_BOOL, reply_expected),
    K(CJ_HK_OPTIONAL, "cn__optional", KT_BOOL, optional),
    K(CJ_HK_SECURE, "cn__secure", KT_BOOL, secure),
    K(CJ_HK_RETURN_CODE, "cn__return_code", KT_NAME, return_code),
    K(CJ_HK_ERROR, "cn__error", KT_TEXT, error),
    K(CJ_HK_PAYLOAD_ENCODING, "cn__payload_encoding", KT_NAME, payload_encoding),
    K(CJ_HK_PAYLOAD_LEN, "cn__payload_len", KT_COUNT, payload_len),
    K(CJ_HK_ORIGINAL_HEADERS, "cn__original_headers", KT_MAP, original_headers),
    K(CJ_HK_RETURN_REASON, "cn__return_reason", KT_NAME, return_reason),
    K(CJ_HK_PASS_THROUGH, "cn__pass_through", KT_BOOL, pass_through),
    K(CJ_HK_SM_ID, "sm__id", KT_SMID, sm_id),
    K(CJ_HK_SM_DT, "sm__dt", KT_INT, sm_dt),
    K(CJ_HK_SM_SQ, "sm__sq", KT_COUNT, sm_sq),
    K(CJ_HK_SM_OS, "sm__os", KT_COUNT, sm_os),
    K(CJ_HK_SM_SZ, "sm__sz", KT_COUNT, sm_sz),
    K(CJ_HK_SM_CS, "sm__cs", KT_INT, sm_cs),
    K(CJ_HK_SM_WS, "sm__ws", KT_INT, sm_ws),
    K(CJ_HK_SM_AI, "sm__ai", KT_INT, sm_ai),
    K(CJ_HK_SM_RS, "sm__rs", KT_BOOL, sm_rs),
    K(CJ_HK_SM_OP, "sm__op", KT_BOOL, sm_op),
    K(CJ_HK_SM_CH, "sm__ch", KT_NAME, sm_ch),
    K(CJ_HK_SM_TP, "sm__tp", KT_NAME, sm_tp),
    K(CJ_HK_SM_PE, "sm__pe", KT_NAME, sm_pe),
    K(CJ_HK_SM_RI, "sm__ri", KT_NAME, sm_ri),
    K(CJ_HK_SM_EM, "sm__em", KT_TEXT, sm_em),
    K(CJ_HK_SM_ET, "sm__et", KT_NAME, sm_et),
    K(CJ_HK_SM_FD, "sm__fd", KT_NAME, sm_fd),
};
#undef K

const char *cj_hkey_name(enum cj_hkey k)
{
    return (k >= 0 && k < CJ_HK__COUNT) ? KEYS[k].name : "?";
}

enum cj_hkey cj_hkey_lookup(const uint8_t *name, uint32_t len)
{
    /* Every known key starts with "cn__" or "sm__": a cheap filter for app keys. */
    if (len < 5 || name[2] != '_' || name[3] != '_') return CJ_HK_UNKNOWN;
    for (int k = 0; k < CJ_HK__COUNT; k++)
        if (KEYS[k].len == len && name[4] == (uint8_t)KEYS[k].name[4] && memcmp(name, KEYS[k].name, len) == 0)
            return (enum cj_hkey)k;
    return CJ_HK_UNKNOWN;
}

static const char *const MSG_TYPE_NAMES[] = { "", "req", "reply", "return" };

const char *cj_msg_type_name(enum cj_msg_type t)
{
    return (t >= CJ_MSG_REQ && t <= CJ_MSG_RETURN) ? MSG_TYPE_NAMES[t] : "?";
}

/* ==== decoding ================================================================ */

/* Prefixes the message an mp_* call left in err with the key being decoded
 * (key[0..n), not NUL-ended; long keys are cut). */
static int in_key_n(struct cj_err *err, int rc, const void *key, size_t n)
{
    if (!err) return rc;
    char m[sizeof err->msg];
    memcpy(m, err->msg, sizeof m);
    m[sizeof m - 1] = 0;
    return cj_fail(err, -rc, err->offset, "header '%.*s': %s", (int)(n > 48 ? 48 : n), (const char *)key, m);
}

static int in_key(struct cj_err *err, int rc, const char *key)
{
    return in_key_n(err, rc, key, strlen(key));
}

static int bad_type(struct cj_err *err, const char *key, const char *want, const struct mp_cur *c, size_t at)
{
    return cj_fail(err, CJ_E_TYPE, at, "header '%s': expected %s at offset %zu (type byte 0x%02x)", key, want,
                   at, c->base[at]);
}

/* Reads a value's head, naming key in any error. */
static int next_val(struct mp_cur *c, struct mp_val *v, const char *key, struct cj_err *err)
{
    int rc = mp_next(c, v, err);
    return rc ? in_key(err, rc, key) : 0;
}

/* A short string: bounded, no NUL (it becomes a C string), copied into out. */
static int take_name(const struct mp_val *v, const char *key, size_t at, char *out, struct cj_err *err)
{
    if (v->len > CJ_HDR_STR_MAX)
        return cj_fail(err, CJ_E_LIMIT, at, "header '%s': string of %u bytes at offset %zu, limit %d", key, v->len,
                       at, CJ_HDR_STR_MAX);
    if (memchr(v->ptr, 0, v->len))
        return cj_fail(err, CJ_E_INVALID, at, "header '%s': string at offset %zu contains a NUL byte", key, at);
    memcpy(out, v->ptr, v->len);
    out[v->len] = 0;
    return 0;
}

static int want_kind(const struct mp_val *v, enum mp_kind k, const char *what, const char *key,
                     const struct mp_cur *c, size_t at, struct cj_err *err)
{
    return v->kind == k ? 0 : bad_type(err, key, what, c, at);
}

/* An int that fits int64 (msgpack ints only; floats and bools are refused). */
static int take_int(const struct mp_val *v, const char *key, const struct mp_cur *c, size_t at, int64_t *out,
                    struct cj_err *err)
{
    if (v->kind == MP_INT) { *out = v->i; return 0; }
    if (v->kind != MP_UINT) return bad_type(err, key, "int", c, at);
    if (v->u > (uint64_t)INT64_MAX)
        return cj_fail(err, CJ_E_LIMIT, at, "header '%s': int at offset %zu is over int64", key, at);
    *out = (int64_t)v->u;
    return 0;
}

static int take_num(const struct mp_val *v, const char *key, const struct mp_cur *c, size_t at, double *out,
                    struct cj_err *err)
{
    switch (v->kind) {
    case MP_FLOAT: *out = v->f; return 0;
    case MP_UINT: *out = (double)v->u; return 0;
    case MP_INT: *out = (double)v->i; return 0;
    default: return bad_type(err, key, "number", c, at);
    }
}

/* Containers whose count claims more elements than bytes left are lies. */
static int check_count(const struct mp_cur *c, uint64_t need, const char *key, size_t at, struct cj_err *err)
{
    if (need > mp_left(c))
        return cj_fail(err, CJ_E_TRUNCATED, at,
                       "header '%s': container at offset %zu claims %llu values, only %zu bytes left", key, at,
                       (unsigned long long)need, mp_left(c));
    return 0;
}

static int decode_req_id(struct cj_hdr *h, struct mp_cur *c, const struct mp_val *v, size_t at, struct cj_err *err)
{
    const char *key = KEYS[CJ_HK_REQ_ID].name;
    int rc;
    if (v->kind == MP_STR) {
        h->req_id_count = 1;
        rc = take_name(v, key, at, h->req_id, err);
    } else if (v->kind == MP_ARRAY) {
        h->req_id_is_array = true;
        h->req_id_count = v->n;
        if ((rc = check_count(c, v->n, key, at, err))) return rc;
        for (uint32_t i = 0; i < v->n && !rc; i++) {
            struct mp_val e;
            size_t eat = c->pos;
            if ((rc = next_val(c, &e, key, err))) return rc;
            if ((rc = want_kind(&e, MP_STR, "str element", key, c, eat, err))) return rc;
            char tmp[CJ_HDR_STR_MAX + 1];
            rc = take_name(&e, key, eat, i == 0 ? h->req_id : tmp, err);
        }
    } else {
        return bad_type(err, key, "str or array of str", c, at);
    }
    if (rc) return rc;
    h->req_id_raw.p = c->base + at;
    h->req_id_raw.len = (uint32_t)(c->pos - at);
    return 0;
}

/* One route element: [str fqcn, number time]. */
static int decode_route_entry(struct mp_cur *c, struct cj_err *err)
{
    const char *key = KEYS[CJ_HK_ROUTE].name;
    struct mp_val v;
    size_t at = c->pos;
    int rc = next_val(c, &v, key, err);
    if (rc) return rc;
    if (v.kind != MP_ARRAY || v.n != 2) return bad_type(err, key, "[fqcn, time] entry", c, at);
    char fqcn[CJ_HDR_STR_MAX + 1];
    double t;
    at = c->pos;
    if ((rc = next_val(c, &v, key, err))) return rc;
    if ((rc = want_kind(&v, MP_STR, "str fqcn", key, c, at, err))) return rc;
    if ((rc = take_name(&v, key, at, fqcn, err))) return rc;
    at = c->pos;
    if ((rc = next_val(c, &v, key, err))) return rc;
    return take_num(&v, key, c, at, &t, err);
}

static int decode_route(struct cj_hdr *h, struct mp_cur *c, const struct mp_val *v, size_t at, struct cj_err *err)
{
    const char *key = KEYS[CJ_HK_ROUTE].name;
    if (v->kind != MP_ARRAY) return bad_type(err, key, "array", c, at);
    int rc = check_count(c, v->n, key, at, err);
    for (uint32_t i = 0; i < v->n && !rc; i++) rc = decode_route_entry(c, err);
    if (rc) return rc;
    h->route_n = v->n;
    h->route.p = c->base + at;
    h->route.len = (uint32_t)(c->pos - at);
    return 0;
}

static int decode_msg_type(struct cj_hdr *h, const struct mp_val *v, const struct mp_cur *c, size_t at,
                           struct cj_err *err)
{
    const char *key = KEYS[CJ_HK_MSG_TYPE].name;
    if (v->kind != MP_STR) return bad_type(err, key, "str", c, at);
    for (int t = CJ_MSG_REQ; t <= CJ_MSG_RETURN; t++)
        if (mp_str_eq(v->ptr, v->len, MSG_TYPE_NAMES[t])) { h->msg_type = (enum cj_msg_type)t; return 0; }
    return cj_fail(err, CJ_E_INVALID, at, "header '%s': unknown message type '%.*s' at offset %zu", key,
                   (int)(v->len > 32 ? 32 : v->len), (const char *)v->ptr, at);
}

/* Decodes the value of known key k at c (the value starts at c->pos). */
static int decode_value(struct cj_hdr *h, enum cj_hkey k, struct mp_cur *c, struct cj_err *err)
{
    const struct kdef *kd = &KEYS[k];
    void *field = (char *)h + kd->off;
    size_t at = c->pos;
    struct mp_val v;
    int rc = next_val(c, &v, kd->name, err);
    if (rc) return rc;

    switch (kd->type) {
    case KT_MSGTYPE: return decode_msg_type(h, &v, c, at, err);
    case KT_NAME:
        if ((rc = want_kind(&v, MP_STR, "str", kd->name, c, at, err))) return rc;
        return take_name(&v, kd->name, at, field, err);
    case KT_TEXT:
        if ((rc = want_kind(&v, MP_STR, "str", kd->name, c, at, err))) return rc;
        ((struct cj_span *)field)->p = v.ptr;
        ((struct cj_span *)field)->len = v.len;
        return 0;
    case KT_BOOL:
        if ((rc = want_kind(&v, MP_BOOL, "bool", kd->name, c, at, err))) return rc;
        *(bool *)field = v.b;
        return 0;
    case KT_INT: return take_int(&v, kd->name, c, at, field, err);
    case KT_COUNT:
        if ((rc = take_int(&v, kd->name, c, at, field, err))) return rc;
        if (*(int64_t *)field < 0)
            return cj_fail(err, CJ_E_INVALID, at, "header '%s': negative value at offset %zu", kd->name, at);
        return 0;
    case KT_NUM: return take_num(&v, kd->name, c, at, field, err);
    case KT_REQID: return decode_req_id(h, c, &v, at, err);
    case KT_ROUTE: return decode_route(h, c, &v, at, err);
    case KT_MAP:
        if ((rc = want_kind(&v, MP_MAP, "map", kd->name, c, at, err))) return rc;
        c->pos = at;
        if ((rc = mp_skip(c, err))) return in_key(err, rc, kd->name);
        ((struct cj_span *)field)->p = c->base + at;
        ((struct cj_span *)field)->len = (uint32_t)(c->pos - at);
        return 0;
    case KT_SMID:
        if (v.kind == MP_UINT) h->sm_id = v.u;
        else if (v.kind == MP_INT) { h->sm_id = (uint64_t)v.i; h->sm_id_neg = true; }
        else return bad_type(err, kd->name, "int", c, at);
        return 0;
    }
    return cj_fail(err, CJ_E_INVALID, at, "header '%s': no decoder", kd->name);
}

/* Reads a map key, which must be a str. */
static int read_key(struct mp_cur *c, struct mp_val *key, struct cj_err *err)
{
    size_t at = c->pos;
    int rc = mp_next(c, key, err);
    if (rc) return in_key(err, rc, "(key)");
    if (key->kind != MP_STR)
        return cj_fail(err, CJ_E_TYPE, at, "header key at offset %zu is not a str (type byte 0x%02x)", at,
                       c->base[at]);
    return 0;
}

static int decode_entry(struct cj_hdr *h, struct mp_cur *c, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val key;
    int rc = read_key(c, &key, err);
    if (rc) return rc;
    enum cj_hkey k = cj_hkey_lookup(key.ptr, key.len);
    if (k == CJ_HK_UNKNOWN) {
        rc = mp_skip(c, err);
        return rc ? in_key_n(err, rc, key.ptr, key.len) : 0;
    }
    if (cj_hdr_has(h, k))
        return cj_fail(err, CJ_E_INVALID, at, "header '%s' appears twice (offset %zu)", KEYS[k].name, at);
    h->have |= CJ_HK_BIT(k);
    return decode_value(h, k, c, err);
}

static int check_required(const struct cj_hdr *h, size_t len, struct cj_err *err)
{
    static const enum cj_hkey req[] = { CJ_HK_MSG_TYPE, CJ_HK_ORIGIN, CJ_HK_DESTINATION };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!cj_hdr_has(h, req[i]))
            return cj_fail(err, CJ_E_MISSING, len, "header block lacks '%s'", KEYS[req[i]].name);
    if (!h->origin[0]) return cj_fail(err, CJ_E_INVALID, 0, "header 'cn__origin' is empty");
    if (!h->destination[0]) return cj_fail(err, CJ_E_INVALID, 0, "header 'cn__destination' is empty");
    return 0;
}

/* Reads the map header of a block and checks its count against the bytes left. */
static int open_map(struct mp_cur *c, const uint8_t *blk, size_t len, uint32_t *n, struct cj_err *err)
{
    if (len == 0) return cj_fail(err, CJ_E_TRUNCATED, 0, "header block is empty");
    if (len > CJ_HDR_MAX_LEN)
        return cj_fail(err, CJ_E_LIMIT, 0, "header block is %zu bytes, limit %d", len, CJ_HDR_MAX_LEN);
    mp_cur_init(c, blk, len);
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return in_key(err, rc, "(map)");
    if (v.kind != MP_MAP)
        return cj_fail(err, CJ_E_TYPE, 0, "header block is not a map (type byte 0x%02x)", blk[0]);
    if ((uint64_t)v.n * 2 > mp_left(c))
        return cj_fail(err, CJ_E_TRUNCATED, 0, "header map claims %u entries but only %zu bytes follow", v.n,
                       mp_left(c));
    *n = v.n;
    return 0;
}

int cj_hdr_decode(struct cj_hdr *h, const uint8_t *blk, size_t len, struct cj_err *err)
{
    memset(h, 0, sizeof *h);
    struct mp_cur c;
    uint32_t n;
    int rc = open_map(&c, blk, len, &n, err);
    for (uint32_t i = 0; i < n && !rc; i++) rc = decode_entry(h, &c, err);
    if (rc) return rc;
    if (c.pos != len)
        return cj_fail(err, CJ_E_INVALID, c.pos, "%zu trailing bytes after the header map at offset %zu",
                       len - c.pos, c.pos);
    if ((rc = check_required(h, len, err))) return rc;
    h->blk = blk;
    h->len = len;
    h->n_entries = n;
    return 0;
}

/* ==== iteration ================================================================ */

void cj_hdr_iter_init(struct cj_hdr_iter *it, const struct cj_hdr *h)
{
    struct mp_val v;
    mp_cur_init(&it->c, h->blk, h->len);
    it->left = 0;
    if (h->blk && mp_next(&it->c, &v, NULL) == 0 && v.kind == MP_MAP) it->left = v.n;
}

int cj_hdr_iter_next(struct cj_hdr_iter *it, struct cj_hdr_entry *e, struct cj_err *err)
{
    if (it->left == 0) return 0;
    size_t at = it->c.pos;
    int rc = mp_read_str(&it->c, &e->key, &e->key_len, err);
    if (rc) return rc;
    size_t vat = it->c.pos;
    if ((rc = mp_skip(&it->c, err))) return rc;
    e->hk = cj_hkey_lookup(e->key, e->key_len);
    e->raw.p = it->c.base + at;
    e->raw.len = (uint32_t)(it->c.pos - at);
    e->val.p = it->c.base + vat;
    e->val.len = (uint32_t)(it->c.pos - vat);
    it->left--;
    return 1;
}

void cj_route_iter_init(struct cj_route_iter *it, const struct cj_hdr *h)
{
    struct mp_val v;
    it->left = 0;
    mp_cur_init(&it->c, h->route.p, h->route.len);
    if (h->route.p && mp_next(&it->c, &v, NULL) == 0 && v.kind == MP_ARRAY) it->left = v.n;
}

int cj_route_iter_next(struct cj_route_iter *it, const uint8_t **fqcn, uint32_t *len, double *time)
{
    uint32_t n;
    struct mp_val v;
    if (it->left == 0) return 0;
    if (mp_read_array(&it->c, &n, NULL) || n != 2 || mp_read_str(&it->c, fqcn, len, NULL) ||
        mp_next(&it->c, &v, NULL)) {
        it->left = 0; /* only on a span that did not come from cj_hdr_decode */
        return 0;
    }
    *time = v.kind == MP_FLOAT ? v.f : v.kind == MP_UINT ? (double)v.u : v.kind == MP_INT ? (double)v.i : 0;
    it->left--;
    return 1;
}

bool cj_hdr_route_has(const struct cj_hdr *h, const char *fqcn)
{
    struct cj_route_iter it;
    const uint8_t *p;
    uint32_t n;
    double t;
    cj_route_iter_init(&it, h);
    while (cj_route_iter_next(&it, &p, &n, &t))
        if (mp_str_eq(p, n, fqcn)) return true;
    return false;
}

bool cj_hdr_loop_refused(const struct cj_hdr *h, const char *next_hop)
{
    return strcmp(next_hop, h->destination) != 0 && cj_hdr_route_has(h, next_hop);
}

/* ==== comparison (round-trip tests) ============================================= */

static bool span_eq(struct cj_span a, struct cj_span b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static bool routes_eq(const struct cj_hdr *a, const struct cj_hdr *b)
{
    struct cj_route_iter ia, ib;
    const uint8_t *pa, *pb;
    uint32_t na, nb;
    double ta, tb;
    if (a->route_n != b->route_n) return false;
    cj_route_iter_init(&ia, a);
    cj_route_iter_init(&ib, b);
    for (;;) {
        int ra = cj_route_iter_next(&ia, &pa, &na, &ta), rb = cj_route_iter_next(&ib, &pb, &nb, &tb);
        if (ra != rb) return false;
        if (!ra) return true;
        if (na != nb || memcmp(pa, pb, na) != 0 || memcmp(&ta, &tb, sizeof ta) != 0) return false;
    }
}

bool cj_hdr_same_fields(const struct cj_hdr *a, const struct cj_hdr *b)
{
    if (a->have != b->have || a->n_entries != b->n_entries) return false;
    for (int k = 0; k < CJ_HK__COUNT; k++) {
        if (!cj_hdr_has(a, k)) continue;
        const void *fa = (const char *)a + KEYS[k].off, *fb = (const char *)b + KEYS[k].off;
        bool eq = true;
        switch (KEYS[k].type) {
        case KT_MSGTYPE: eq = a->msg_type == b->msg_type; break;
        case KT_NAME: eq = strcmp(fa, fb) == 0; break;
        case KT_TEXT:
        case KT_MAP: eq = span_eq(*(const struct cj_span *)fa, *(const struct cj_span *)fb); break;
        case KT_BOOL: eq = *(const bool *)fa == *(const bool *)fb; break;
        case KT_INT:
        case KT_COUNT: eq = *(const int64_t *)fa == *(const int64_t *)fb; break;
        case KT_NUM: eq = memcmp(fa, fb, sizeof(double)) == 0; break;
        case KT_REQID:
            eq = strcmp(a->req_id, b->req_id) == 0 && a->req_id_is_array == b->req_id_is_array &&
                 a->req_id_count == b->req_id_count && span_eq(a->req_id_raw, b->req_id_raw);
            break;
        case KT_ROUTE: eq = routes_eq(a, b); break;
        case KT_SMID: eq = a->sm_id == b->sm_id && a->sm_id_neg == b->sm_id_neg; break;
        }
        if (!eq) return false;
    }
    return true;
}

/* ==== writing helpers ============================================================ */

static int pk_str(msgpack_packer *pk, const void *s, size_t n)
{
    return (msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n)) ? -CJ_E_NOMEM : 0;
}

static int pk_cstr(msgpack_packer *pk, const char *s)
{
    return pk_str(pk, s, strlen(s));
}

static int pk_route_entry(msgpack_packer *pk, const char *fqcn, double t)
{
    if (msgpack_pack_array(pk, 2) || pk_cstr(pk, fqcn) || msgpack_pack_double(pk, t)) return -CJ_E_NOMEM;
    return 0;
}

static int sb_write(msgpack_sbuffer *sb, const void *p, size_t n)
{
    return (n && msgpack_sbuffer_write(sb, p, n)) ? -CJ_E_NOMEM : 0;
}

/* Drops what was appended to out since start and returns rc (with err set
 * for NOMEM, the only failure a write can have). */
static int undo(msgpack_sbuffer *out, size_t start, int rc, struct cj_err *err)
{
    out->size = start;
    if (rc == -CJ_E_NOMEM) return cj_fail(err, CJ_E_NOMEM, 0, "header: out of memory");
    return rc;
}

static int check_out_len(msgpack_sbuffer *out, size_t start, const char *what, struct cj_err *err)
{
    size_t n = out->size - start;
    if (n <= CJ_HDR_MAX_LEN) return 0;
    out->size = start;
    return cj_fail(err, CJ_E_LIMIT, n, "%s: header block would be %zu bytes, limit %d (unroutable)", what, n,
                   CJ_HDR_MAX_LEN);
}

static int check_name_arg(const char *s, const char *what, struct cj_err *err)
{
    if (!s || !*s) return cj_fail(err, CJ_E_INVALID, 0, "header: %s is empty", what);
    size_t n = strlen(s);
    if (n > CJ_HDR_STR_MAX)
        return cj_fail(err, CJ_E_LIMIT, 0, "header: %s is %zu bytes, limit %d", what, n, CJ_HDR_STR_MAX);
    return 0;
}

/* ==== forwarding rewrite ========================================================== */

enum { F_FROM, F_TO, F_ROUTE, F_SEND, F_N };
static const enum cj_hkey FWD_KEYS[F_N] = { CJ_HK_FROM, CJ_HK_TO, CJ_HK_ROUTE, CJ_HK_SEND_TIME };

struct fwd_slot {
    bool present;
    size_t vstart, vend;  /* the value's bytes */
    size_t elems;         /* cn__route: where the elements start (after the array header) */
    uint32_t route_n;
};

static int fwd_key_index(const uint8_t *p, uint32_t n)
{
    enum cj_hkey k = cj_hkey_lookup(p, n);
    for (int i = 0; i < F_N; i++)
        if (FWD_KEYS[i] == k) return i;
    return -1;
}

/* Pass 1: finds the values of the four rewritten keys, checks the shape. */
static int fwd_scan(const uint8_t *blk, size_t len, struct fwd_slot *s, uint32_t *n, size_t *body,
                    struct cj_err *err)
{
    struct mp_cur c;
    int rc = open_map(&c, blk, len, n, err);
    if (rc) return rc;
    *body = c.pos;
    for (uint32_t i = 0; i < *n; i++) {
        size_t at = c.pos;
        struct mp_val key;
        if ((rc = read_key(&c, &key, err))) return rc;
        int f = fwd_key_index(key.ptr, key.len);
        size_t vstart = c.pos;
        if (f >= 0 && s[f].present)
            return cj_fail(err, CJ_E_INVALID, at, "header '%s' appears twice (offset %zu)", cj_hkey_name(FWD_KEYS[f]),
                           at);
        if (f == F_ROUTE) {
            if ((rc = mp_read_array(&c, &s[f].route_n, err))) return in_key(err, rc, cj_hkey_name(FWD_KEYS[f]));
            s[f].elems = c.pos;
            c.pos = vstart;
        }
        if ((rc = mp_skip(&c, err))) return in_key(err, rc, f >= 0 ? cj_hkey_name(FWD_KEYS[f]) : "(value)");
        if (f >= 0) {
            s[f].present = true;
            s[f].vstart = vstart;
            s[f].vend = c.pos;
        }
    }
    if (c.pos != len)
        return cj_fail(err, CJ_E_INVALID, c.pos, "%zu trailing bytes after the header map at offset %zu",
                       len - c.pos, c.pos);
    return 0;
}

struct fwd_args {
    const char *me, *next_hop;
    double route_time, send_time;
};

static int fwd_value(msgpack_packer *pk, int f, const uint8_t *blk, const struct fwd_slot *s,
                     const struct fwd_args *a)
{
    switch (f) {
    case F_FROM: return pk_cstr(pk, a->me);
    case F_TO: return pk_cstr(pk, a->next_hop);
    case F_SEND: return msgpack_pack_double(pk, a->send_time) ? -CJ_E_NOMEM : 0;
    default: break;
    }
    uint32_t n = s->present ? s->route_n : 0;
    if (msgpack_pack_array(pk, n + 1)) return -CJ_E_NOMEM;
    if (s->present) {
        int rc = sb_write(pk->data, blk + s->elems, s->vend - s->elems);
        if (rc) return rc;
    }
    return pk_route_entry(pk, a->me, a->route_time);
}

/* Pass 2: copies the block with the four values replaced and the missing keys appended. */
static int fwd_write(const uint8_t *blk, size_t len, const struct fwd_slot *s, uint32_t n, size_t body,
                     const struct fwd_args *a, msgpack_sbuffer *out)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    int order[F_N], present = 0, rc;
    for (int f = 0; f < F_N; f++) {
        if (!s[f].present) continue;
        int j = present++;
        for (; j > 0 && s[order[j - 1]].vstart > s[f].vstart; j--) order[j] = order[j - 1];
        order[j] = f;
    }
    /* Same entry count: keep the original map header bytes; else encode minimally. */
    if (present == F_N) rc = sb_write(out, blk, body);
    else rc = msgpack_pack_map(&pk, n + (uint32_t)(F_N - present)) ? -CJ_E_NOMEM : 0;
    size_t at = body;
    for (int i = 0; i < present && !rc; i++) {
        const struct fwd_slot *sl = &s[order[i]];
        if (!(rc = sb_write(out, blk + at, sl->vstart - at))) rc = fwd_value(&pk, order[i], blk, sl, a);
        at = sl->vend;
    }
    if (!rc) rc = sb_write(out, blk + at, len - at);
    for (int f = 0; f < F_N && !rc; f++)
        if (!s[f].present && !(rc = pk_cstr(&pk, cj_hkey_name(FWD_KEYS[f])))) rc = fwd_value(&pk, f, blk, &s[f], a);
    return rc;
}

int cj_hdr_forward(const uint8_t *blk, size_t len, const char *me, const char *next_hop, double route_time,
                   double send_time, msgpack_sbuffer *out, struct cj_err *err)
{
    struct fwd_slot s[F_N];
    memset(s, 0, sizeof s);
    uint32_t n;
    size_t body;
    int rc;
    if ((rc = check_name_arg(me, "forward: me", err)) || (rc = check_name_arg(next_hop, "forward: next hop", err)))
        return rc;
    if ((rc = fwd_scan(blk, len, s, &n, &body, err))) return rc;
    const struct fwd_args a = { me, next_hop, route_time, send_time };
    size_t start = out->size;
    if ((rc = fwd_write(blk, len, s, n, body, &a, out))) return undo(out, start, rc, err);
    return check_out_len(out, start, "forward", err);
}

/* ==== builder ======================================================================= */

void cj_hb_init(struct cj_hb *b)
{
    memset(b, 0, sizeof *b);
    msgpack_sbuffer_init(&b->body);
    msgpack_packer_init(&b->pk, &b->body, msgpack_sbuffer_write);
}

void cj_hb_destroy(struct cj_hb *b)
{
    msgpack_sbuffer_destroy(&b->body);
    memset(&b->body, 0, sizeof b->body);
}

static int hb_io(struct cj_hb *b, int rc)
{
    if (rc && !b->rc) b->rc = cj_fail(&b->err, CJ_E_NOMEM, b->body.size, "header builder: out of memory");
    return b->rc;
}

/* Writes key (marking a known key added); the value must follow. */
static int hb_key(struct cj_hb *b, const char *key)
{
    if (b->rc) return b->rc;
    size_t n = strlen(key);
    enum cj_hkey k = cj_hkey_lookup((const uint8_t *)key, (uint32_t)n);
    if (k != CJ_HK_UNKNOWN) {
        if (b->have & CJ_HK_BIT(k))
            return b->rc = cj_fail(&b->err, CJ_E_INVALID, b->body.size, "header builder: '%s' added twice", key);
        b->have |= CJ_HK_BIT(k);
    }
    b->n++;
    return hb_io(b, pk_str(&b->pk, key, n));
}

int cj_hb_strn(struct cj_hb *b, const char *key, const void *val, size_t len)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, pk_str(&b->pk, val, len));
}

int cj_hb_str(struct cj_hb *b, const char *key, const char *val)
{
    return cj_hb_strn(b, key, val, strlen(val));
}

int cj_hb_int(struct cj_hb *b, const char *key, int64_t val)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, msgpack_pack_int64(&b->pk, val));
}

int cj_hb_uint(struct cj_hb *b, const char *key, uint64_t val)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, msgpack_pack_uint64(&b->pk, val));
}

int cj_hb_bool(struct cj_hb *b, const char *key, bool val)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, val ? msgpack_pack_true(&b->pk) : msgpack_pack_false(&b->pk));
}

int cj_hb_float(struct cj_hb *b, const char *key, double val)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, msgpack_pack_double(&b->pk, val));
}

int cj_hb_raw(struct cj_hb *b, const char *key, const void *val, size_t len)
{
    if (hb_key(b, key)) return b->rc;
    return hb_io(b, sb_write(&b->body, val, len));
}

int cj_hb_route1(struct cj_hb *b, const char *fqcn, double t)
{
    if (hb_key(b, KEYS[CJ_HK_ROUTE].name)) return b->rc;
    return hb_io(b, msgpack_pack_array(&b->pk, 1) || pk_route_entry(&b->pk, fqcn, t));
}

int cj_hb_copy_entries(struct cj_hb *b, const struct cj_hdr *h, uint64_t skip)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    int rc;
    cj_hdr_iter_init(&it, h);
    while (!b->rc && (rc = cj_hdr_iter_next(&it, &e, &b->err)) != 0) {
        if (rc < 0) return b->rc = rc;
        if (e.hk != CJ_HK_UNKNOWN) {
            if (skip & CJ_HK_BIT(e.hk)) continue;
            if (b->have & CJ_HK_BIT(e.hk))
                return b->rc = cj_fail(&b->err, CJ_E_INVALID, b->body.size, "header builder: '%s' added twice",
                                       KEYS[e.hk].name);
            b->have |= CJ_HK_BIT(e.hk);
        }
        b->n++;
        hb_io(b, sb_write(&b->body, e.raw.p, e.raw.len));
    }
    return b->rc;
}

static int hb_arg(struct cj_hb *b, const char *s, const char *what)
{
    if (b->rc) return b->rc;
    int rc = check_name_arg(s, what, &b->err);
    return rc ? (b->rc = rc) : 0;
}

/* Writes one cellnet key of m unless it was added already. */
static int hb_cn_key(struct cj_hb *b, enum cj_hkey k, const struct cj_hdr_msg *m)
{
    const char *key = KEYS[k].name;
    if (b->rc || (b->have & CJ_HK_BIT(k))) return b->rc;
    switch (k) {
    case CJ_HK_RETURN_CODE: return cj_hb_str(b, key, m->return_code ? m->return_code : "ok");
    case CJ_HK_SECURE: return cj_hb_bool(b, key, m->secure);
    case CJ_HK_OPTIONAL: return cj_hb_bool(b, key, m->optional);
    case CJ_HK_REPLY_EXPECTED: return cj_hb_bool(b, key, m->reply_expected);
    case CJ_HK_CHANNEL: return hb_arg(b, m->channel, "channel") ? b->rc : cj_hb_str(b, key, m->channel);
    case CJ_HK_TOPIC: return hb_arg(b, m->topic, "topic") ? b->rc : cj_hb_str(b, key, m->topic);
    case CJ_HK_FROM:
    case CJ_HK_ORIGIN: return cj_hb_str(b, key, m->me);
    case CJ_HK_TO: return cj_hb_str(b, key, m->to);
    case CJ_HK_DESTINATION: return cj_hb_str(b, key, m->destination);
    case CJ_HK_REQ_ID: return m->req_id ? cj_hb_str(b, key, m->req_id) : 0;
    case CJ_HK_MSG_TYPE: return cj_hb_str(b, key, cj_msg_type_name(m->type));
    case CJ_HK_ROUTE: return cj_hb_route1(b, m->me, m->route_time);
    case CJ_HK_PAYLOAD_ENCODING:
        return cj_hb_str(b, key, m->payload_encoding ? m->payload_encoding : "none");
    case CJ_HK_PAYLOAD_LEN: return m->payload_len >= 0 ? cj_hb_int(b, key, m->payload_len) : 0;
    case CJ_HK_SEND_TIME: return cj_hb_float(b, key, m->send_time);
    default: return 0;
    }
}

#define ORDER_END CJ_HK__COUNT
static const enum cj_hkey ORDER_REPLY[] = {
    CJ_HK_RETURN_CODE, CJ_HK_SECURE, CJ_HK_OPTIONAL, CJ_HK_CHANNEL, CJ_HK_TOPIC, CJ_HK_FROM, CJ_HK_TO,
    CJ_HK_ORIGIN, CJ_HK_DESTINATION, CJ_HK_REQ_ID, CJ_HK_MSG_TYPE, CJ_HK_ROUTE, CJ_HK_PAYLOAD_ENCODING,
    CJ_HK_PAYLOAD_LEN, CJ_HK_SEND_TIME, ORDER_END,
};
static const enum cj_hkey ORDER_DIRECT_REQ[] = {
    CJ_HK_TOPIC, CJ_HK_CHANNEL, CJ_HK_DESTINATION, CJ_HK_REQ_ID, CJ_HK_REPLY_EXPECTED, CJ_HK_SECURE,
    CJ_HK_OPTIONAL, CJ_HK_FROM, CJ_HK_TO, CJ_HK_ORIGIN, CJ_HK_MSG_TYPE, CJ_HK_ROUTE, CJ_HK_PAYLOAD_ENCODING,
    CJ_HK_PAYLOAD_LEN, CJ_HK_SEND_TIME, ORDER_END,
};
static const enum cj_hkey ORDER_STREAM_REQ[] = {
    CJ_HK_REPLY_EXPECTED, CJ_HK_OPTIONAL, CJ_HK_SECURE, CJ_HK_TOPIC, CJ_HK_CHANNEL, CJ_HK_DESTINATION,
    CJ_HK_FROM, CJ_HK_TO, CJ_HK_ORIGIN, CJ_HK_MSG_TYPE, CJ_HK_ROUTE, CJ_HK_PAYLOAD_ENCODING,
    CJ_HK_PAYLOAD_LEN, CJ_HK_SEND_TIME, ORDER_END,
};

int cj_hb_cellnet(struct cj_hb *b, const struct cj_hdr_msg *m)
{
    if (hb_arg(b, m->me, "me") || hb_arg(b, m->to, "to") || hb_arg(b, m->destination, "destination"))
        return b->rc;
    const enum cj_hkey *order;
    if (m->type == CJ_MSG_REPLY) order = ORDER_REPLY;
    else if (m->type == CJ_MSG_REQ) order = m->req_id ? ORDER_DIRECT_REQ : ORDER_STREAM_REQ;
    else return b->rc = cj_fail(&b->err, CJ_E_INVALID, 0, "header builder: use cj_hdr_build_return for RETURN");
    for (; *order != ORDER_END && !b->rc; order++) hb_cn_key(b, *order, m);
    return b->rc;
}

int cj_hb_finish(struct cj_hb *b, msgpack_sbuffer *out, struct cj_err *err)
{
    if (b->rc) {
        if (err) *err = b->err;
        return b->rc;
    }
    size_t start = out->size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, b->n) ? -CJ_E_NOMEM : sb_write(out, b->body.data, b->body.size);
    if (rc) return undo(out, start, rc, err);
    return check_out_len(out, start, "build", err);
}

int cj_hdr_build_return(const struct cj_hdr *orig, const char *me, const char *to, double now,
                        msgpack_sbuffer *out, struct cj_err *err)
{
    static const uint8_t EMPTY_STR[] = { 0xa0 };
    static const uint8_t ONE[] = { 0x91 };
    struct cj_hb b;
    cj_hb_init(&b);
    hb_arg(&b, me, "me");
    hb_arg(&b, to, "to");
    cj_hb_str(&b, "cn__return_code", "comm_error");
    cj_hb_str(&b, "cn__error", "cannot forward");
    cj_hb_raw(&b, "cn__original_headers", orig->blk, orig->len);
    cj_hb_str(&b, "cn__from", me ? me : "");
    cj_hb_str(&b, "cn__to", to ? to : "");
    cj_hb_str(&b, "cn__origin", me ? me : "");
    cj_hb_str(&b, "cn__destination", orig->origin);
    /* NVFlare: [req_id] with req_id = get_header(REQ_ID, "").  An id that is
     * already an array of str is copied as it is rather than nested, since a
     * requester matches each element against its pending requests. */
    if (orig->req_id_is_array) {
        cj_hb_raw(&b, "cn__req_id", orig->req_id_raw.p, orig->req_id_raw.len);
    } else {
        cj_hb_raw(&b, "cn__req_id", ONE, 1);
        if (cj_hdr_has(orig, CJ_HK_REQ_ID)) hb_io(&b, sb_write(&b.body, orig->req_id_raw.p, orig->req_id_raw.len));
        else hb_io(&b, sb_write(&b.body, EMPTY_STR, 1));
    }
    cj_hb_str(&b, "cn__msg_type", "return");
    cj_hb_route1(&b, me ? me : "", now);
    cj_hb_str(&b, "cn__return_reason", "cant_forward");
    cj_hb_str(&b, "cn__payload_encoding", "none");
    cj_hb_int(&b, "cn__payload_len", 0);
    cj_hb_float(&b, "cn__send_time", now);
    int rc = cj_hb_finish(&b, out, err);
    cj_hb_destroy(&b);
    return rc;
}

/* ==== re-encoding from decoded fields ================================================ */

static int enc_route(msgpack_packer *pk, const struct cj_hdr *h)
{
    struct cj_route_iter it;
    const uint8_t *p;
    uint32_t n;
    double t;
    if (msgpack_pack_array(pk, h->route_n)) return -CJ_E_NOMEM;
    cj_route_iter_init(&it, h);
    while (cj_route_iter_next(&it, &p, &n, &t))
        if (msgpack_pack_array(pk, 2) || pk_str(pk, p, n) || msgpack_pack_double(pk, t)) return -CJ_E_NOMEM;
    return 0;
}

static int enc_value(msgpack_packer *pk, const struct cj_hdr *h, enum cj_hkey k)
{
    const void *f = (const char *)h + KEYS[k].off;
    const struct cj_span *sp = f;
    switch (KEYS[k].type) {
    case KT_MSGTYPE: return pk_cstr(pk, cj_msg_type_name(h->msg_type));
    case KT_NAME: return pk_cstr(pk, f);
    case KT_TEXT: return pk_str(pk, sp->p, sp->len);
    case KT_BOOL: return (*(const bool *)f ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ? -CJ_E_NOMEM : 0;
    case KT_INT:
    case KT_COUNT: return msgpack_pack_int64(pk, *(const int64_t *)f) ? -CJ_E_NOMEM : 0;
    case KT_NUM: return msgpack_pack_double(pk, *(const double *)f) ? -CJ_E_NOMEM : 0;
    case KT_REQID: return sb_write(pk->data, h->req_id_raw.p, h->req_id_raw.len);
    case KT_MAP: return sb_write(pk->data, sp->p, sp->len);
    case KT_ROUTE: return enc_route(pk, h);
    case KT_SMID:
        return (h->sm_id_neg ? msgpack_pack_int64(pk, (int64_t)h->sm_id) : msgpack_pack_uint64(pk, h->sm_id))
                   ? -CJ_E_NOMEM
                   : 0;
    }
    return -CJ_E_INVALID;
}

int cj_hdr_encode(const struct cj_hdr *h, msgpack_sbuffer *out, struct cj_err *err)
{
    size_t start = out->size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    int rc = msgpack_pack_map(&pk, h->n_entries) ? -CJ_E_NOMEM : 0;
    cj_hdr_iter_init(&it, h);
    while (!rc && (rc = cj_hdr_iter_next(&it, &e, err)) == 1) {
        if (e.hk == CJ_HK_UNKNOWN) rc = sb_write(out, e.raw.p, e.raw.len);
        else if (!(rc = pk_str(&pk, e.key, e.key_len))) rc = enc_value(&pk, h, e.hk);
    }
    if (rc) return undo(out, start, rc, err);
    return check_out_len(out, start, "encode", err);
}
