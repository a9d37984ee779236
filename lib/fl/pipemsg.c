/* SPDX-License-Identifier: Apache-2.0 */
/* pipemsg.c — CellPipe's cell headers, read and written (see pipemsg.h). */
#include "fl/pipemsg.h"

#include <stdio.h>
#include <string.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"
#include "util/repr.h"

#define K_TYPE "cell_pipe.msg_type"
#define K_ID "cell_pipe.msg_id"
#define K_REQ "cell_pipe.req_id"
#define K_START "cell_pipe.start"
#define K_SEQ "cell_pipe.hb_seq"

static bool key_is(const struct cj_hdr_entry *e, const char *k)
{
    return e->key_len == strlen(k) && !memcmp(e->key, k, e->key_len);
}

static int read_id(const struct cj_hdr_entry *e, const char *what, char *out, struct cj_err *err)
{
    struct mp_cur c;
    mp_cur_init(&c, e->val.p, e->val.len);
    return mp_read_cstr(&c, out, CJ_PIPE_ID_MAX, true, "cell_pipe", what, err);   /* out: CJ_PIPE_ID_MAX + 1 */
}

int cj_pipemsg_read(const struct cj_hdr *h, struct cj_pipe_hdrs *out, struct cj_err *err)
{
    memset(out, 0, sizeof *out);
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    bool have_type = false, have_id = false;
    int rc;
    cj_hdr_iter_init(&it, h);
    while ((rc = cj_hdr_iter_next(&it, &e, err)) == 1) {
        struct mp_cur c;
        mp_cur_init(&c, e.val.p, e.val.len);
        if (key_is(&e, K_TYPE)) {
            char t[8];
            if ((rc = mp_read_cstr(&c, t, sizeof t - 1, false, "cell_pipe", K_TYPE, err))) return rc;
            if (strcmp(t, "REQ") && strcmp(t, "REP"))
                return cj_fail(err, CJ_E_INVALID, 0, "%s: '%s' is neither REQ nor REP", K_TYPE, t);
            out->rep = !strcmp(t, "REP");
            have_type = true;
        } else if (key_is(&e, K_ID)) {
            if ((rc = read_id(&e, K_ID, out->msg_id, err))) return rc;
            have_id = true;
        } else if (key_is(&e, K_REQ)) {
            if ((rc = read_id(&e, K_REQ, out->req_id, err))) return rc;
        } else if (key_is(&e, K_START)) {
            if (mp_read_float(&c, &out->start, err)) {
                int64_t i;   /* a float in FLARE, an int from anyone else is taken too */
                mp_cur_init(&c, e.val.p, e.val.len);
                if ((rc = mp_read_int(&c, &i, err))) return cj_fail(err, CJ_E_TYPE, 0, "%s: not a number", K_START);
                out->start = (double)i;
            }
        } else if (key_is(&e, K_SEQ)) {
            if ((rc = mp_read_int(&c, &out->hb_seq, err))) return cj_fail(err, CJ_E_TYPE, 0, "%s: not an int", K_SEQ);
        }
    }
    if (rc < 0) return rc;
    if (!have_type) return cj_fail(err, CJ_E_MISSING, 0, "%s: missing", K_TYPE);
    if (!have_id) return cj_fail(err, CJ_E_MISSING, 0, "%s: missing", K_ID);
    return 0;
}

/* a == b[0..n) without an early exit on the first difference */
static bool same_secret(const uint8_t *a, uint32_t n, const char *b)
{
    size_t bl = strlen(b);
    unsigned char d = (unsigned char)(n != bl);
    for (size_t i = 0; i < n && i < bl; i++) d |= (unsigned char)(a[i] ^ (uint8_t)b[i]);
    return d == 0;
}

bool cj_pipemsg_creds_ok(const struct cj_hdr *h, const char *token, const char *signature)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    bool tok = false, sig = false;
    cj_hdr_iter_init(&it, h);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        bool is_tok = key_is(&e, "__token__"), is_sig = key_is(&e, "__token_signature__");
        if (!is_tok && !is_sig) continue;
        struct mp_cur c;
        const uint8_t *p;
        uint32_t n;
        mp_cur_init(&c, e.val.p, e.val.len);
        if (mp_read_str(&c, &p, &n, NULL)) return false;
        if (is_tok) tok = same_secret(p, n, token);
        else sig = same_secret(p, n, signature);
    }
    return tok && sig;
}

int cj_pipemsg_build(msgpack_sbuffer *vals, struct cj_stream_hv hv[CJ_PIPE_HDRS], size_t *n,
                     const struct cj_pipe_hdrs *in)
{
    msgpack_packer pk;
    size_t off[CJ_PIPE_HDRS + 1];
    const char *keys[CJ_PIPE_HDRS];
    size_t k = 0;
    vals->size = 0;
    msgpack_packer_init(&pk, vals, msgpack_sbuffer_write);
    off[k] = vals->size;
    keys[k++] = K_TYPE;
    if (cj_fobs_write_str(&pk, in->rep ? "REP" : "REQ")) return -1;
    off[k] = vals->size;
    keys[k++] = K_ID;
    if (cj_fobs_write_str(&pk, in->msg_id)) return -1;
    if (in->req_id[0]) {
        off[k] = vals->size;
        keys[k++] = K_REQ;
        if (cj_fobs_write_str(&pk, in->req_id)) return -1;
    }
    off[k] = vals->size;
    keys[k++] = K_START;
    if (msgpack_pack_double(&pk, in->start)) return -1;
    if (in->hb_seq) {
        off[k] = vals->size;
        keys[k++] = K_SEQ;
        if (msgpack_pack_int64(&pk, in->hb_seq)) return -1;
    }
    off[k] = vals->size;
    for (size_t i = 0; i < k; i++)
        hv[i] = (struct cj_stream_hv){keys[i], (const uint8_t *)vals->data + off[i], off[i + 1] - off[i]};
    *n = k;
    return 0;
}

int cj_pipemsg_str_body(msgpack_sbuffer *out, const char *s)
{
    size_t hdr;
    struct cj_err e = {0};
    if (cj_lobs_begin_main(out, &hdr, &e)) return -1;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (cj_fobs_write_str(&pk, s)) return -1;
    cj_lobs_end_main(out, hdr);
    return 0;
}

int cj_pipemsg_metric(const uint8_t *body, size_t n, char *key, size_t ksz, char *val, size_t vsz)
{
    struct mp_cur c;
    struct mp_val v;
    int want = 0;   /* 1: the next value is the key's, 2: the value's */
    bool have_k = false, have_v = false;
    if (n <= CJ_LOBS_HDR_LEN || !ksz || !vsz) return -1;
    mp_cur_init(&c, body + CJ_LOBS_HDR_LEN, n - CJ_LOBS_HDR_LEN);   /* past the LOBS MAIN header */
    for (int guard = 0; guard < 4096 && mp_left(&c) && mp_next(&c, &v, NULL) == 0; guard++) {
        if (want == 1 && v.kind == MP_STR) {
            snprintf(key, ksz, "%.*s", (int)(v.len < ksz ? v.len : ksz - 1), (const char *)v.ptr);
            have_k = true;
        } else if (want == 2) {
            if (v.kind == MP_FLOAT) cj_repr_float(val, vsz, v.f);
            else if (v.kind == MP_UINT) snprintf(val, vsz, "%llu", (unsigned long long)v.u);
            else if (v.kind == MP_INT) snprintf(val, vsz, "%lld", (long long)v.i);
            else if (v.kind == MP_BOOL) snprintf(val, vsz, "%s", v.b ? "True" : "False");
            have_v = have_v || v.kind == MP_FLOAT || v.kind == MP_UINT || v.kind == MP_INT || v.kind == MP_BOOL;
        }
        want = v.kind == MP_STR && v.len == 9 && !memcmp(v.ptr, "track_key", 9)     ? 1
               : v.kind == MP_STR && v.len == 11 && !memcmp(v.ptr, "track_value", 11) ? 2
                                                                                      : 0;
    }
    return have_k && have_v ? 0 : -1;
}
