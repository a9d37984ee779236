/* SPDX-License-Identifier: Apache-2.0 */
/* dlmsg.c — download-service messages (see dlmsg.h). */
#include "util/text.h"
#include "dl/dlmsg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "payload/lobs.h"
#include "util/mp.h"
#include "util/uuid.h"

/* ---- small helpers ------------------------------------------------------------------ */




int cj_dl_new_nonce(char out[CJ_DL_NONCE_LEN + 1]) { return cj_random_hex(out, CJ_DL_NONCE_LEN); }

bool cj_dl_nonce_valid(const char *s, size_t len)
{
    if (!s || len != CJ_DL_NONCE_LEN) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static int read_nonce(struct mp_cur *c, char out[CJ_DL_NONCE_LEN + 1], struct cj_err *err)
{
    size_t at = c->pos;
    const uint8_t *p;
    uint32_t len;
    if (mp_read_str(c, &p, &len, err)) return cj_fail(err, CJ_E_TYPE, at, "dl: 'confirm_nonce' is not a str (offset %zu)", at);
    if (!cj_dl_nonce_valid((const char *)p, len))
        return cj_fail(err, CJ_E_INVALID, at, "dl: 'confirm_nonce' is not 32 lower-case hex digits (offset %zu)", at);
    memcpy(out, p, len);
    out[len] = 0;
    return 0;
}

/* nil -> absent (len 0); map -> its span; anything else CJ_E_TYPE. */
static int read_state(struct mp_cur *c, struct cj_range *sp, size_t origin, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind == MP_NIL) { *sp = (struct cj_range){0, 0}; return 0; }
    if (v.kind != MP_MAP) return cj_fail(err, CJ_E_TYPE, at, "dl: 'state' is not a map (offset %zu)", at);
    *sp = (struct cj_range){at - origin, c->end - at};
    c->pos = c->end;
    return 0;
}

static int read_bool_or_nil(struct mp_cur *c, bool *out, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind == MP_NIL) { *out = false; return 0; }
    if (v.kind != MP_BOOL) return cj_fail(err, CJ_E_TYPE, at, "dl: '%s' is not a bool (offset %zu)", what, at);
    *out = v.b;
    return 0;
}


/* Iterates the entries of the map at c: for each str key, key and klen and a
 * cursor exactly over the value.  Non-str keys come back with klen = (uint32_t)-1. */
struct map_iter {
    struct mp_cur *c;
    uint32_t left;
};

static int map_begin(struct map_iter *it, struct mp_cur *c, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    uint32_t n = 0;
    it->c = c;
    it->left = 0;
    if (mp_read_map(c, &n, err)) return cj_fail(err, CJ_E_TYPE, at, "dl: %s is not a map (offset %zu)", what, at);
    it->left = n;
    return 0;
}

/* 1 with an entry, 0 at the end, <0 on error. */
static int map_next(struct map_iter *it, const uint8_t **key, uint32_t *klen, struct mp_cur *val, struct cj_err *err)
{
    if (!it->left) return 0;
    it->left--;
    *key = NULL;
    *klen = UINT32_MAX;
    struct mp_val k;
    int rc = mp_read_entry(it->c, &k, val, err);
    if (rc) return rc;
    if (k.kind == MP_STR) { *key = k.ptr; *klen = k.len; }
    return 1;
}

#define KEY(s) (klen != UINT32_MAX && mp_str_eq(key, klen, s))

/* ---- requests ---------------------------------------------------------------------------- */

int cj_dl_decode_request(const uint8_t *payload, size_t len, struct cj_dl_request *r, struct cj_err *err)
{
    memset(r, 0, sizeof *r);
    struct mp_cur c;
    int rc = cj_lobs_open_main(payload, len, &c, err);
    if (rc) return rc;
    struct map_iter it;
    if ((rc = map_begin(&it, &c, "download request body", err))) return rc;
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        if (KEY("ref_id")) {
            /* Anything but a usable str leaves ref_id empty: the producer answers invalid_request. */
            r->ref_id[0] = 0;
            r->ref_id_bad = false;
            struct mp_cur t = v;
            if (mp_read_cstr(&t, r->ref_id, CJ_DL_REF_ID_MAX, true, "dl", "ref_id", NULL)) {
                r->ref_id[0] = 0;
                r->ref_id_bad = true;
            }
        } else if (KEY("confirm_capable")) {
            if ((rc = read_bool_or_nil(&v, &r->confirm_capable, "confirm_capable", err))) return rc;
        } else if (KEY("state")) {
            if ((rc = read_state(&v, &r->state, 0, err))) return rc;
        } else if (KEY("confirm")) {
            struct mp_val x;
            if ((rc = mp_next(&v, &x, err))) return rc;
            if (x.kind == MP_NIL) r->confirm = CJ_DL_CONFIRM_NONE;
            else if (x.kind == MP_STR && mp_str_eq(x.ptr, x.len, "success")) r->confirm = CJ_DL_CONFIRM_SUCCESS;
            else if (x.kind == MP_STR && mp_str_eq(x.ptr, x.len, "failed")) r->confirm = CJ_DL_CONFIRM_FAILED;
            else r->confirm = CJ_DL_CONFIRM_OTHER;
        } else if (KEY("confirm_nonce")) {
            struct mp_val x;
            struct mp_cur t = v;
            if ((rc = mp_next(&t, &x, err))) return rc;
            if (x.kind == MP_NIL) { r->has_nonce = false; r->confirm_nonce[0] = 0; continue; }
            if ((rc = read_nonce(&v, r->confirm_nonce, err))) return rc;
            r->has_nonce = true;
        } else if (KEY("cancel")) {
            struct mp_val x;
            if ((rc = mp_next(&v, &x, err))) return rc;
            r->cancel = x.kind == MP_BOOL && x.b;
        }
    }
    return rc < 0 ? rc : 0;
}

enum cj_dl_action cj_dl_classify(const struct cj_dl_request *r)
{
    if (!r->ref_id[0]) return CJ_DL_ACT_INVALID_REQUEST;
    if (r->confirm != CJ_DL_CONFIRM_NONE) return CJ_DL_ACT_CONFIRM;
    if (r->cancel) return CJ_DL_ACT_CANCEL;
    return CJ_DL_ACT_PULL;
}

enum cj_dl_pull_outcome cj_dl_pull_outcome(bool live, bool settling, enum cj_dl_tombstone tomb)
{
    if (live && !settling) return CJ_DL_SERVE;
    if (tomb == CJ_DL_TOMB_SUCCESS) return CJ_DL_REPLAY_EOF;
    if (tomb == CJ_DL_TOMB_FAILED) return CJ_DL_REPLAY_ERROR;
    return CJ_DL_NO_REF;
}

bool cj_dl_terminal_wants_confirm(bool request_confirm_capable, bool confirm_enabled, bool receiver_final)
{
    return request_confirm_capable && confirm_enabled && !receiver_final;
}

/* ---- replies ----------------------------------------------------------------------------- */

/* {"data": {"datum_id": "<uuid>", "unwrap": true}} */
static int read_datumref_data(struct mp_cur *c, uint8_t id[16], struct cj_err *err)
{
    size_t at = c->pos;
    struct map_iter it;
    int rc = map_begin(&it, c, "DatumRef __fobs_data__", err);
    if (rc) return rc;
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v, inner = {0};
    bool found = false;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1)
        if (KEY("data")) { inner = v; found = true; }
    if (rc < 0) return rc;
    if (!found) return cj_fail(err, CJ_E_MISSING, at, "dl: DatumRef lacks 'data' (offset %zu)", at);
    if ((rc = map_begin(&it, &inner, "DatumRef data", err))) return rc;
    bool has_id = false, unwrap = false;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        if (KEY("datum_id")) {
            const uint8_t *p;
            uint32_t len;
            size_t vat = v.pos;
            if (mp_read_str(&v, &p, &len, err) || cj_uuid_parse(p, len, id))
                return cj_fail(err, CJ_E_INVALID, vat, "dl: DatumRef datum_id is not a uuid str (offset %zu)", vat);
            has_id = true;
        } else if (KEY("unwrap")) {
            size_t vat = v.pos;
            if (mp_read_bool(&v, &unwrap, err))
                return cj_fail(err, CJ_E_TYPE, vat, "dl: DatumRef unwrap is not a bool (offset %zu)", vat);
        }
    }
    if (rc < 0) return rc;
    if (!has_id) return cj_fail(err, CJ_E_MISSING, at, "dl: DatumRef lacks datum_id (offset %zu)", at);
    /* unwrap false would make the datum a msgpack-encoded value, not item bytes. */
    if (!unwrap) return cj_fail(err, CJ_E_INVALID, at, "dl: DatumRef item without unwrap true (offset %zu)", at);
    return 0;
}

/* A DatumRef wrapper map at c (header not yet read). */
static int read_datumref(struct mp_cur *c, uint8_t id[16], struct cj_err *err)
{
    size_t at = c->pos;
    struct map_iter it;
    int rc = map_begin(&it, c, "data item", err);
    if (rc) return rc;
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v, data = {0};
    bool is_ref = false, has_data = false;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        if (KEY(CJ_FOBS_TYPE_KEY)) {
            const uint8_t *p;
            uint32_t len;
            is_ref = !mp_read_str(&v, &p, &len, NULL) && mp_str_eq(p, len, CJ_FOBS_DATUMREF);
        } else if (KEY(CJ_FOBS_DATA_KEY)) {
            data = v;
            has_data = true;
        }
    }
    if (rc < 0) return rc;
    if (!is_ref) return cj_fail(err, CJ_E_TYPE, at, "dl: data item is a map but not a DatumRef wrapper (offset %zu)", at);
    if (!has_data) return cj_fail(err, CJ_E_MISSING, at, "dl: DatumRef lacks __fobs_data__ (offset %zu)", at);
    return read_datumref_data(&data, id, err);
}

static int read_items(struct mp_cur *c, size_t origin, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                      size_t cap, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    int rc = mp_next(c, &v, err);
    if (rc) return rc;
    if (v.kind == MP_NIL) { r->has_data = false; r->n_items = 0; return 0; }
    if (v.kind != MP_ARRAY) return cj_fail(err, CJ_E_TYPE, at, "dl: 'data' is not an array (offset %zu)", at);
    r->has_data = true;
    r->n_items = v.n;
    for (uint32_t i = 0; i < v.n; i++) {
        struct cj_dl_item_ref it = {0};
        size_t iat = c->pos;
        struct mp_val x;
        if ((rc = mp_next(c, &x, err))) return rc;
        if (x.kind == MP_BIN) {
            it.resolved = true;
            it.off = (size_t)(x.ptr - c->base) - origin;
            it.len = x.len;
        } else if (x.kind == MP_MAP) {
            c->pos = iat;
            struct mp_cur one = *c;
            if ((rc = mp_skip(c, err))) return rc;
            one.end = c->pos;
            if ((rc = read_datumref(&one, it.datum_id, err))) return rc;
            it.is_datum = true;
        } else {
            return cj_fail(err, CJ_E_TYPE, iat, "dl: data item %u is neither bin nor a DatumRef (offset %zu)", i, iat);
        }
        if (i < cap) items[i] = it;
    }
    return 0;
}

/* The reply body map at c; spans are relative to origin. */
static int decode_reply_at(struct mp_cur *c, size_t origin, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                           size_t cap, struct cj_err *err)
{
    memset(r, 0, sizeof *r);
    size_t at = c->pos;
    struct map_iter it;
    int rc = map_begin(&it, c, "download reply body", err);
    if (rc) return rc;
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        if (KEY("status")) {
            const uint8_t *p;
            uint32_t len;
            size_t vat = v.pos;
            if (mp_read_str(&v, &p, &len, err)) return cj_fail(err, CJ_E_TYPE, vat, "dl: 'status' is not a str (offset %zu)", vat);
            r->status = mp_str_eq(p, len, "ok") ? CJ_DL_STATUS_OK : mp_str_eq(p, len, "eof") ? CJ_DL_STATUS_EOF
                      : mp_str_eq(p, len, "error") ? CJ_DL_STATUS_ERROR : CJ_DL_STATUS_OTHER;
        } else if (KEY("state")) {
            if ((rc = read_state(&v, &r->state, origin, err))) return rc;
        } else if (KEY("data")) {
            if ((rc = read_items(&v, origin, r, items, cap, err))) return rc;
        } else if (KEY("confirm_expected")) {
            if ((rc = read_bool_or_nil(&v, &r->confirm_expected, "confirm_expected", err))) return rc;
        } else if (KEY("confirm_nonce")) {
            if ((rc = read_nonce(&v, r->confirm_nonce, err))) return rc;
            r->has_nonce = true;
        } else if (KEY("cancel_capable")) {
            if ((rc = read_bool_or_nil(&v, &r->cancel_capable, "cancel_capable", err))) return rc;
        }
    }
    if (rc < 0) return rc;
    if (!r->status) return cj_fail(err, CJ_E_MISSING, at, "dl: reply lacks 'status' (offset %zu)", at);
    if ((r->status == CJ_DL_STATUS_OK || r->status == CJ_DL_STATUS_OTHER) && !r->has_data)
        return cj_fail(err, CJ_E_MISSING, at, "dl: data reply lacks 'data' (offset %zu)", at);
    if (r->confirm_expected && !r->has_nonce)
        return cj_fail(err, CJ_E_MISSING, at, "dl: confirm_expected without confirm_nonce (offset %zu)", at);
    return 0;
}

int cj_dl_decode_reply_body(const uint8_t *body, size_t len, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                            size_t cap, struct cj_err *err)
{
    struct mp_cur c;
    mp_cur_init(&c, body, len);
    int rc = decode_reply_at(&c, 0, r, items, cap, err);
    if (rc) return rc;
    if (c.pos != len) return cj_fail(err, CJ_E_INVALID, c.pos, "dl: trailing bytes after the reply body (offset %zu)", c.pos);
    return 0;
}

/* Points a DatumRef item at its BLOB datum section in the payload. */
static int resolve_datum(const uint8_t *payload, size_t len, struct cj_dl_item_ref *item, size_t idx, struct cj_err *err)
{
    struct cj_lobs_iter it;
    struct cj_lobs_section s;
    cj_lobs_iter_init(&it, payload, len);
    int rc;
    while ((rc = cj_lobs_next(&it, &s, err)) == 1) {
        if (s.marker == CJ_LOBS_MAIN || memcmp(s.id, item->datum_id, 16)) continue;
        if (s.marker != CJ_LOBS_BLOB || s.dot != 0)
            return cj_fail(err, CJ_E_TYPE, s.offset, "dl: datum of item %zu is not a DOT-0 BLOB (offset %zu)", idx, s.offset);
        item->off = (size_t)(s.value - payload);
        item->len = s.value_len;
        item->resolved = true;
        return 0;
    }
    if (rc < 0) return rc;
    char u[37];
    cj_uuid_str(item->datum_id, u);
    return cj_fail(err, CJ_E_MISSING, 0, "dl: item %zu refers to datum %s, which the payload lacks", idx, u);
}

int cj_dl_decode_reply(const uint8_t *payload, size_t len, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                       size_t cap, struct cj_err *err)
{
    struct mp_cur c;
    int rc = cj_lobs_open_main(payload, len, &c, err);
    if (rc) return rc;
    if ((rc = decode_reply_at(&c, 0, r, items, cap, err))) return rc;
    size_t n = r->n_items < cap ? r->n_items : cap;
    for (size_t i = 0; i < n; i++)
        if (items[i].is_datum && (rc = resolve_datum(payload, len, &items[i], i, err))) return rc;
    return 0;
}

/* ---- source failure ------------------------------------------------------------------------ */

static int read_ref_ids(struct mp_cur *c, struct cj_dl_source_failure *sf, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val v;
    struct mp_cur arr = *c;
    int rc = mp_next(&arr, &v, err);
    if (rc) return rc;
    sf->tuple_form = false;
    if (v.kind == MP_MAP) {   /* {"__fobs_type__": "tuple", "__fobs_data__": [...], "__fobs_dc__": ...} */
        struct map_iter it;
        struct mp_cur w = *c;
        if ((rc = map_begin(&it, &w, "ref_ids", err))) return rc;
        const uint8_t *key;
        uint32_t klen;
        struct mp_cur x;
        bool is_tuple = false, has_data = false;
        while ((rc = map_next(&it, &key, &klen, &x, err)) == 1) {
            if (KEY(CJ_FOBS_TYPE_KEY)) {
                const uint8_t *p;
                uint32_t len;
                is_tuple = !mp_read_str(&x, &p, &len, NULL) && mp_str_eq(p, len, "tuple");
            } else if (KEY(CJ_FOBS_DATA_KEY)) {
                arr = x;
                has_data = true;
            }
        }
        if (rc < 0) return rc;
        if (!is_tuple || !has_data)
            return cj_fail(err, CJ_E_TYPE, at, "dl: 'ref_ids' is a map but not a tuple wrapper (offset %zu)", at);
        sf->tuple_form = true;
        size_t aat = arr.pos;
        if (mp_next(&arr, &v, err) || v.kind != MP_ARRAY)
            return cj_fail(err, CJ_E_TYPE, aat, "dl: tuple wrapper data is not an array (offset %zu)", aat);
    } else if (v.kind != MP_ARRAY) {
        return cj_fail(err, CJ_E_TYPE, at, "dl: 'ref_ids' is neither a tuple nor an array (offset %zu)", at);
    }
    if (v.n == 0) return cj_fail(err, CJ_E_INVALID, at, "dl: 'ref_ids' is empty (offset %zu)", at);
    if (v.n > CJ_DL_MAX_REF_IDS)
        return cj_fail(err, CJ_E_LIMIT, at, "dl: %u ref_ids, limit %d (offset %zu)", v.n, CJ_DL_MAX_REF_IDS, at);
    for (uint32_t i = 0; i < v.n; i++)
        if ((rc = mp_read_cstr(&arr, sf->ref_ids[i], CJ_DL_REF_ID_MAX, false, "dl", "ref_ids[]", err)))
            return rc;
    sf->n_ref_ids = v.n;
    return 0;
}

int cj_dl_decode_source_failure(const uint8_t *payload, size_t len, struct cj_dl_source_failure *sf,
                                struct cj_err *err)
{
    sf->source_fqcn[0] = 0;
    sf->n_ref_ids = 0;
    sf->tuple_form = false;
    sf->reason[0] = 0;
    sf->reason_cut = false;
    struct mp_cur c;
    int rc = cj_lobs_open_main(payload, len, &c, err);
    if (rc) return rc;
    size_t at = c.pos;
    struct map_iter it;
    if ((rc = map_begin(&it, &c, "source-failure body", err))) return rc;
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v;
    bool has_fqcn = false;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        if (KEY("source_fqcn")) {
            if ((rc = mp_read_cstr(&v, sf->source_fqcn, CJ_DL_FQCN_MAX, false, "dl", "source_fqcn", err)))
                return rc;
            has_fqcn = true;
        } else if (KEY("ref_ids")) {
            if ((rc = read_ref_ids(&v, sf, err))) return rc;
        } else if (KEY("reason")) {
            struct mp_val x;
            struct mp_cur t = v;
            if ((rc = mp_next(&t, &x, err))) return rc;
            if (x.kind == MP_NIL) { sf->reason[0] = 0; sf->reason_cut = false; continue; }
            if (x.kind != MP_STR) return cj_fail(err, CJ_E_TYPE, v.pos, "dl: 'reason' is not a str (offset %zu)", v.pos);
            size_t n = cj_utf8_prefix(x.ptr, x.len, CJ_DL_REASON_MAX_CHARS);
            if (n == SIZE_MAX) return cj_fail(err, CJ_E_INVALID, v.pos, "dl: 'reason' is not valid UTF-8 or holds NUL (offset %zu)", v.pos);
            memcpy(sf->reason, x.ptr, n);
            sf->reason[n] = 0;
            sf->reason_cut = n < x.len;
        }
    }
    if (rc < 0) return rc;
    if (!has_fqcn) return cj_fail(err, CJ_E_MISSING, at, "dl: source-failure notice lacks 'source_fqcn' (offset %zu)", at);
    if (!sf->n_ref_ids) return cj_fail(err, CJ_E_MISSING, at, "dl: source-failure notice lacks 'ref_ids' (offset %zu)", at);
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

struct w {
    msgpack_sbuffer *sb;
    msgpack_packer pk;
    size_t save, hdr;
    int bad;
};

static int w_begin(struct w *w, msgpack_sbuffer *sb, uint32_t nkeys, struct cj_err *err)
{
    w->sb = sb;
    w->save = sb->size;
    w->bad = 0;
    int rc = cj_lobs_begin_main(sb, &w->hdr, err);
    if (rc) return rc;
    msgpack_packer_init(&w->pk, sb, msgpack_sbuffer_write);
    w->bad |= msgpack_pack_map(&w->pk, nkeys);
    return 0;
}

static void w_str(struct w *w, const char *s) { w->bad |= msgpack_pack_str_with_body(&w->pk, s, strlen(s)); }
static void w_strn(struct w *w, const char *s, size_t n) { w->bad |= msgpack_pack_str_with_body(&w->pk, s, n); }
static void w_true(struct w *w) { w->bad |= msgpack_pack_true(&w->pk); }
static void w_raw(struct w *w, const uint8_t *p, size_t n) { w->bad |= msgpack_sbuffer_write(w->sb, (const char *)p, n); }

static int w_end(struct w *w, struct cj_err *err)
{
    if (w->bad) {
        w->sb->size = w->save;
        return cj_fail(err, CJ_E_NOMEM, w->save, "dl: out of memory writing a message");
    }
    cj_lobs_end_main(w->sb, w->hdr);
    return 0;
}

static int check_ref_id(const char *ref_id, struct cj_err *err)
{
    size_t n = ref_id ? strlen(ref_id) : 0;
    if (!n) return cj_fail(err, CJ_E_INVALID, 0, "dl: empty ref_id");
    if (n > CJ_DL_REF_ID_MAX) return cj_fail(err, CJ_E_LIMIT, 0, "dl: ref_id is %zu bytes, limit %d", n, CJ_DL_REF_ID_MAX);
    if (cj_utf8_prefix((const uint8_t *)ref_id, n, SIZE_MAX) == SIZE_MAX)
        return cj_fail(err, CJ_E_INVALID, 0, "dl: ref_id is not valid UTF-8");
    return 0;
}

static int check_nonce(const char *nonce, struct cj_err *err)
{
    if (!nonce || !cj_dl_nonce_valid(nonce, strlen(nonce)))
        return cj_fail(err, CJ_E_INVALID, 0, "dl: nonce is not 32 lower-case hex digits");
    return 0;
}

/* Exactly one msgpack map. */
static int check_state(const uint8_t *state, size_t len, struct cj_err *err)
{
    struct mp_cur c;
    uint32_t n;
    struct cj_err e2;
    mp_cur_init(&c, state, len);
    if (mp_read_map(&c, &n, &e2) || (c.pos = 0, mp_skip(&c, &e2)) || c.pos != len)
        return cj_fail(err, CJ_E_INVALID, 0, "dl: state is not exactly one msgpack map");
    return 0;
}

int cj_dl_encode_pull(msgpack_sbuffer *sb, const char *ref_id, bool confirm_capable, const uint8_t *state,
                      size_t state_len, struct cj_err *err)
{
    int rc = check_ref_id(ref_id, err);
    if (rc) return rc;
    bool has_state = state && state_len;
    if (has_state && (rc = check_state(state, state_len, err))) return rc;
    struct w w;
    if ((rc = w_begin(&w, sb, 1 + confirm_capable + has_state, err))) return rc;
    w_str(&w, "ref_id");
    w_str(&w, ref_id);
    if (confirm_capable) { w_str(&w, "confirm_capable"); w_true(&w); }
    if (has_state) { w_str(&w, "state"); w_raw(&w, state, state_len); }
    return w_end(&w, err);
}

int cj_dl_encode_terminal(msgpack_sbuffer *sb, enum cj_dl_status status, const char *nonce, struct cj_err *err)
{
    if (status != CJ_DL_STATUS_EOF && status != CJ_DL_STATUS_ERROR)
        return cj_fail(err, CJ_E_INVALID, 0, "dl: a terminal reply is eof or error");
    int rc;
    if (nonce && (rc = check_nonce(nonce, err))) return rc;
    struct w w;
    if ((rc = w_begin(&w, sb, nonce ? 3 : 1, err))) return rc;
    w_str(&w, "status");
    w_str(&w, status == CJ_DL_STATUS_EOF ? "eof" : "error");
    if (nonce) {
        w_str(&w, "confirm_expected");
        w_true(&w);
        w_str(&w, "confirm_nonce");
        w_str(&w, nonce);
    }
    return w_end(&w, err);
}

int cj_dl_encode_confirm(msgpack_sbuffer *sb, const char *ref_id, bool success, const char *nonce,
                         struct cj_err *err)
{
    int rc = check_ref_id(ref_id, err);
    if (rc || (rc = check_nonce(nonce, err))) return rc;
    struct w w;
    if ((rc = w_begin(&w, sb, 3, err))) return rc;
    w_str(&w, "ref_id");
    w_str(&w, ref_id);
    w_str(&w, "confirm");
    w_str(&w, success ? "success" : "failed");
    w_str(&w, "confirm_nonce");
    w_str(&w, nonce);
    return w_end(&w, err);
}

int cj_dl_encode_cancel(msgpack_sbuffer *sb, const char *ref_id, struct cj_err *err)
{
    int rc = check_ref_id(ref_id, err);
    if (rc) return rc;
    struct w w;
    if ((rc = w_begin(&w, sb, 2, err))) return rc;
    w_str(&w, "ref_id");
    w_str(&w, ref_id);
    w_str(&w, "cancel");
    w_true(&w);
    return w_end(&w, err);
}

int cj_dl_encode_source_failure(msgpack_sbuffer *sb, const char *source_fqcn, const char *const *ref_ids,
                                size_t n_ref_ids, const char *reason, struct cj_err *err)
{
    size_t fl = source_fqcn ? strlen(source_fqcn) : 0;
    if (!fl || fl > CJ_DL_FQCN_MAX || cj_utf8_prefix((const uint8_t *)source_fqcn, fl, SIZE_MAX) == SIZE_MAX)
        return cj_fail(err, CJ_E_INVALID, 0, "dl: bad source_fqcn");
    if (n_ref_ids == 0 || n_ref_ids > CJ_DL_MAX_REF_IDS)
        return cj_fail(err, CJ_E_LIMIT, 0, "dl: %zu ref_ids, want 1..%d", n_ref_ids, CJ_DL_MAX_REF_IDS);
    int rc;
    for (size_t i = 0; i < n_ref_ids; i++)
        if ((rc = check_ref_id(ref_ids[i], err))) return rc;
    if (!reason) reason = "";
    size_t rl = cj_utf8_prefix((const uint8_t *)reason, strlen(reason), CJ_DL_REASON_MAX_CHARS);
    if (rl == SIZE_MAX) return cj_fail(err, CJ_E_INVALID, 0, "dl: reason is not valid UTF-8");
    struct w w;
    if ((rc = w_begin(&w, sb, 3, err))) return rc;
    w_str(&w, "source_fqcn");
    w_str(&w, source_fqcn);
    w_str(&w, "ref_ids");
    w.bad |= msgpack_pack_map(&w.pk, 3);
    w_str(&w, CJ_FOBS_TYPE_KEY);
    w_str(&w, "tuple");
    w_str(&w, CJ_FOBS_DATA_KEY);
    w.bad |= msgpack_pack_array(&w.pk, (uint32_t)n_ref_ids);
    for (size_t i = 0; i < n_ref_ids; i++) w_str(&w, ref_ids[i]);
    w_str(&w, CJ_FOBS_DC_KEY);
    w_str(&w, CJ_DL_TUPLE_DC);
    w_str(&w, "reason");
    w_strn(&w, reason, rl);
    return w_end(&w, err);
}

/* ---- data replies -------------------------------------------------------------------------- */

int cj_dl_write_item_state(msgpack_packer *pk, uint64_t start, uint64_t count)
{
    return msgpack_pack_map(pk, 2) | msgpack_pack_str_with_body(pk, "start", 5) | msgpack_pack_uint64(pk, start) |
           msgpack_pack_str_with_body(pk, "count", 5) | msgpack_pack_uint64(pk, count);
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

void cj_dl_datum_header(uint8_t hdr[26], const uint8_t id[16], uint64_t len)
{
    hdr[0] = CJ_LOBS_BLOB;
    hdr[1] = 0;
    put_be64(hdr + 2, len + CJ_LOBS_ID_LEN);
    memcpy(hdr + CJ_LOBS_HDR_LEN, id, CJ_LOBS_ID_LEN);
}

struct plan {
    msgpack_sbuffer *sb;
    struct cj_dl_piece *pieces;
    size_t cap, n;
    size_t framed;    /* sb bytes [framed, sb->size) not yet listed */
};

/* Lists the framing bytes written since the last piece. */
static void flush_framing(struct plan *pl)
{
    size_t end = pl->sb->size;
    if (end == pl->framed) return;
    struct cj_dl_piece *last = pl->n ? &pl->pieces[pl->n - 1] : NULL;
    if (last && last->item < 0 && last->off + last->len == pl->framed) last->len += end - pl->framed;
    else pl->pieces[pl->n++] = (struct cj_dl_piece){-1, pl->framed, end - pl->framed};
    pl->framed = end;
}

static void add_item_piece(struct plan *pl, size_t i, uint64_t len)
{
    flush_framing(pl);
    pl->pieces[pl->n++] = (struct cj_dl_piece){(int64_t)i, 0, len};
}

static void pack_datumref(msgpack_packer *pk, const uint8_t id[16], int *bad)
{
    char u[37];
    cj_uuid_str(id, u);
    *bad |= msgpack_pack_map(pk, 3);
    *bad |= msgpack_pack_str_with_body(pk, CJ_FOBS_TYPE_KEY, strlen(CJ_FOBS_TYPE_KEY));
    *bad |= msgpack_pack_str_with_body(pk, CJ_FOBS_DATUMREF, strlen(CJ_FOBS_DATUMREF));
    *bad |= msgpack_pack_str_with_body(pk, CJ_FOBS_DATA_KEY, strlen(CJ_FOBS_DATA_KEY));
    *bad |= msgpack_pack_map(pk, 1);
    *bad |= msgpack_pack_str_with_body(pk, "data", 4);
    *bad |= msgpack_pack_map(pk, 2);
    *bad |= msgpack_pack_str_with_body(pk, "datum_id", 8);
    *bad |= msgpack_pack_str_with_body(pk, u, 36);
    *bad |= msgpack_pack_str_with_body(pk, "unwrap", 6);
    *bad |= msgpack_pack_true(pk);
    *bad |= msgpack_pack_str_with_body(pk, CJ_FOBS_DC_KEY, strlen(CJ_FOBS_DC_KEY));
    *bad |= msgpack_pack_str_with_body(pk, CJ_DL_DATUMREF_DC, strlen(CJ_DL_DATUMREF_DC));
}

int cj_dl_plan_data_reply(msgpack_sbuffer *sb, uint64_t start, const uint64_t *sizes, size_t n,
                          const struct cj_dl_reply_opts *opts, struct cj_dl_piece *pieces, size_t cap,
                          size_t *n_pieces, struct cj_err *err)
{
    static const struct cj_dl_reply_opts defaults = {.cancel_capable = true};
    const struct cj_dl_reply_opts *o = opts ? opts : &defaults;
    uint64_t datum_min = o->datum_min ? o->datum_min : CJ_DL_DATUM_MIN;
    if (datum_min > (uint64_t)UINT32_MAX + 1) datum_min = (uint64_t)UINT32_MAX + 1;   /* bin32 limit */
    if (cap < CJ_DL_MAX_PIECES(n)) return cj_fail(err, CJ_E_LIMIT, 0, "dl: room for %zu pieces, need %zu", cap, CJ_DL_MAX_PIECES(n));
    if (n > UINT32_MAX) return cj_fail(err, CJ_E_LIMIT, 0, "dl: %zu items in one reply", n);
    int rc;
    if (o->raw_state && (rc = check_state(o->raw_state, o->raw_state_len, err))) return rc;
    uint64_t n_datums = 0;
    for (size_t i = 0; i < n; i++) n_datums += sizes[i] >= datum_min;
    if (n_datums > CJ_LOBS_MAX_DATUMS)
        return cj_fail(err, CJ_E_LIMIT, 0, "dl: %llu datum items, limit %d", (unsigned long long)n_datums, CJ_LOBS_MAX_DATUMS);
    uint8_t (*ids)[16] = n_datums ? malloc((size_t)n_datums * 16) : NULL;
    if (n_datums && !ids) return cj_fail(err, CJ_E_NOMEM, 0, "dl: out of memory");

    size_t save = sb->size, hdr;
    if ((rc = cj_lobs_begin_main(sb, &hdr, err))) { free(ids); return rc; }
    struct plan pl = {sb, pieces, cap, 0, save};
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int bad = 0;
    size_t body_start = sb->size;
    uint64_t inline_bytes = 0, d = 0;
    bad |= msgpack_pack_map(&pk, o->cancel_capable ? 4 : 3);
    bad |= msgpack_pack_str_with_body(&pk, "status", 6) | msgpack_pack_str_with_body(&pk, "ok", 2);
    bad |= msgpack_pack_str_with_body(&pk, "state", 5);
    if (o->raw_state) bad |= msgpack_sbuffer_write(sb, (const char *)o->raw_state, o->raw_state_len);
    else bad |= cj_dl_write_item_state(&pk, start, n);
    bad |= msgpack_pack_str_with_body(&pk, "data", 4) | msgpack_pack_array(&pk, (uint32_t)n);
    for (size_t i = 0; i < n && !bad; i++) {
        if (sizes[i] >= datum_min) {
            if (o->new_id) o->new_id(o->ud, ids[d]);
            else if (cj_uuid4(ids[d])) { bad = 1; break; }
            pack_datumref(&pk, ids[d++], &bad);
        } else {
            bad |= msgpack_pack_bin(&pk, (uint32_t)sizes[i]);
            add_item_piece(&pl, i, sizes[i]);
            inline_bytes += sizes[i];
        }
    }
    if (o->cancel_capable) bad |= msgpack_pack_str_with_body(&pk, "cancel_capable", 14) | msgpack_pack_true(&pk);
    if (!bad) {
        put_be64((uint8_t *)sb->data + hdr + 2, (uint64_t)(sb->size - body_start) + inline_bytes);
        d = 0;
        for (size_t i = 0; i < n && !bad; i++) {
            if (sizes[i] < datum_min) continue;
            uint8_t h[CJ_LOBS_DATUM_HDR_LEN];
            cj_dl_datum_header(h, ids[d++], sizes[i]);
            bad |= msgpack_sbuffer_write(sb, (const char *)h, sizeof h);
            add_item_piece(&pl, i, sizes[i]);
        }
        flush_framing(&pl);
    }
    free(ids);
    if (bad) {
        sb->size = save;
        return cj_fail(err, CJ_E_NOMEM, save, "dl: out of memory (or no random) writing a data reply");
    }
    *n_pieces = pl.n;
    return 0;
}

int cj_dl_encode_data_reply(msgpack_sbuffer *out, uint64_t start, const struct cj_dl_item *items, size_t n,
                            const struct cj_dl_reply_opts *opts, struct cj_err *err)
{
    uint64_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
    struct cj_dl_piece *pieces = malloc(CJ_DL_MAX_PIECES(n) * sizeof *pieces);
    msgpack_sbuffer fr;
    msgpack_sbuffer_init(&fr);
    int rc = 0;
    size_t np = 0, save = out->size;
    if (!sizes || !pieces) { rc = cj_fail(err, CJ_E_NOMEM, 0, "dl: out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) sizes[i] = items[i].len;
    if ((rc = cj_dl_plan_data_reply(&fr, start, sizes, n, opts, pieces, CJ_DL_MAX_PIECES(n), &np, err))) goto done;
    for (size_t i = 0; i < np; i++) {
        const struct cj_dl_piece *p = &pieces[i];
        const char *src = p->item < 0 ? fr.data + p->off : (const char *)items[p->item].p;
        if (p->len && msgpack_sbuffer_write(out, src, (size_t)p->len)) {
            out->size = save;
            rc = cj_fail(err, CJ_E_NOMEM, save, "dl: out of memory writing a data reply");
            break;
        }
    }
done:
    msgpack_sbuffer_destroy(&fr);
    free(pieces);
    free(sizes);
    return rc;
}

/* ---- state and grouping -------------------------------------------------------------------- */

int cj_dl_next_start(const uint8_t *buf, struct cj_range state, uint64_t *start, struct cj_err *err)
{
    *start = 0;
    if (!state.len) return 0;
    struct mp_cur c = {buf, state.off, state.off + state.len};
    struct map_iter it = {0};
    int rc = map_begin(&it, &c, "state", err);
    if (rc) return rc;
    if (!it.left) return 0;   /* an empty state is falsy: start over */
    const uint8_t *key;
    uint32_t klen;
    struct mp_cur v;
    uint64_t s = 0, n = 0;
    bool has_s = false, has_n = false;
    while ((rc = map_next(&it, &key, &klen, &v, err)) == 1) {
        bool is_s = KEY("start"), is_n = KEY("count");
        if (!is_s && !is_n) continue;
        struct mp_val x;
        size_t vat = v.pos;
        if ((rc = mp_next(&v, &x, err))) return rc;
        if (x.kind == MP_INT)
            return cj_fail(err, CJ_E_INVALID, vat, "dl: state %s is negative (offset %zu)", is_s ? "start" : "count", vat);
        if (x.kind != MP_UINT)
            return cj_fail(err, CJ_E_TYPE, vat, "dl: state %s is not an int (offset %zu)", is_s ? "start" : "count", vat);
        if (is_s) { s = x.u; has_s = true; }
        else { n = x.u; has_n = true; }
    }
    if (rc < 0) return rc;
    if (!has_s || !has_n)
        return cj_fail(err, CJ_E_MISSING, state.off, "dl: state lacks '%s' (offset %zu)", has_s ? "count" : "start", state.off);
    if (s > UINT64_MAX - n) return cj_fail(err, CJ_E_LIMIT, state.off, "dl: state start + count overflows");
    *start = s + n;
    return 0;
}

/* total + x < max, without overflow. */
static bool fits(uint64_t total, uint64_t x, uint64_t max) { return total < max && x < max - total; }

int cj_dl_group(const uint64_t *sizes, const uint64_t *estimates, size_t n_items, uint64_t start,
                uint64_t max_chunk, size_t *count)
{
    *count = 0;
    if (start >= n_items) return 0;
    uint64_t total = 0;
    size_t k = 0;
    for (size_t i = (size_t)start; i < n_items; i++) {
        if (k && estimates && estimates[i] != CJ_DL_SIZE_UNKNOWN && !fits(total, estimates[i], max_chunk)) break;
        if (k && !fits(total, sizes[i], max_chunk)) break;   /* item i is sent first next time */
        total = sizes[i] > UINT64_MAX - total ? UINT64_MAX : total + sizes[i];
        k++;
    }
    *count = k;
    return 1;
}
