/* SPDX-License-Identifier: Apache-2.0 */
/* capi.c — Client API bodies (see capi.h). */
#include "util/text.h"
#include "fl/capi.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload/lobs.h"
#include "util/mp.h"
#include "util/repr.h"

/* ---- kinds and topics ---------------------------------------------------------- */

static const struct kind_info {
    const char *name;
    const char *topic;      /* request: cell topic; reply: reply_topic */
    uint32_t relevant;      /* keys read for this kind */
    uint32_t required;      /* keys that must be there */
} kinds[CJ_CAPI_KIND_COUNT] = {
#define F(x) CJ_CAPI_F_##x
    [CJ_CAPI_NONE] = {"none", NULL, 0, 0},
    [CJ_CAPI_HELLO] = {"hello", CJ_CAPI_T_HELLO,
                       F(TRAINER_FQCN) | F(PROOF) | F(PROTOCOL_VERSION) | F(JOB_ID) | F(SITE_NAME) | F(RANK), 0},
    [CJ_CAPI_SESSION_READY] = {"session_ready", CJ_CAPI_T_SESSION_READY, F(SESSION_ID), F(SESSION_ID)},
    [CJ_CAPI_TASK_READY] = {"task_ready", CJ_CAPI_T_TASK_READY, F(SESSION_ID) | F(TASK_ID) | F(TASK_NAME) | F(BODY),
                            F(SESSION_ID) | F(TASK_ID) | F(TASK_NAME) | F(BODY)},
    [CJ_CAPI_RESULT_READY] = {"result_ready", CJ_CAPI_T_RESULT_READY, F(SESSION_ID) | F(TASK_ID) | F(BODY),
                              F(SESSION_ID) | F(TASK_ID) | F(BODY)},
    [CJ_CAPI_SETTLED] = {"result_source_settled", CJ_CAPI_T_SETTLED, F(SESSION_ID) | F(TASK_ID),
                         F(SESSION_ID) | F(TASK_ID)},
    [CJ_CAPI_HEARTBEAT] = {"heartbeat", CJ_CAPI_T_HEARTBEAT, F(SESSION_ID) | F(SOURCE_LIVE), F(SESSION_ID)},
    [CJ_CAPI_LOG] = {"log", CJ_CAPI_T_LOG, F(SESSION_ID) | F(KEY) | F(VALUE) | F(DATA_TYPE),
                     F(SESSION_ID) | F(KEY) | F(VALUE) | F(DATA_TYPE)},
    [CJ_CAPI_ABORT] = {"abort", CJ_CAPI_T_ABORT, F(SESSION_ID) | F(REASON), F(SESSION_ID)},
    [CJ_CAPI_SHUTDOWN] = {"shutdown", CJ_CAPI_T_SHUTDOWN, F(SESSION_ID) | F(REASON), F(SESSION_ID)},
    [CJ_CAPI_HELLO_ACCEPTED] = {"hello_accepted", "client_api.hello_accepted",
                                F(SESSION_ID) | F(JOB_ID) | F(SITE_NAME) | F(HB_INTERVAL) | F(HB_TIMEOUT) |
                                    F(SECURE_MODE) | F(AUTH_TOKEN) | F(AUTH_SIGNATURE),
                                F(SESSION_ID) | F(JOB_ID) | F(SITE_NAME) | F(HB_INTERVAL) | F(HB_TIMEOUT)},
    [CJ_CAPI_HELLO_REJECTED] = {"hello_rejected", "client_api.hello_rejected", F(REASON), F(REASON)},
    [CJ_CAPI_SESSION_READY_REPLY] = {"session_ready_reply", "client_api.session_ready", F(SESSION_ID), F(SESSION_ID)},
    [CJ_CAPI_ERROR] = {"error", "client_api.error", F(REASON), F(REASON)},
    [CJ_CAPI_TASK_ACCEPTED] = {"task_accepted", "client_api.task_accepted", F(TASK_ID), F(TASK_ID)},
    [CJ_CAPI_TASK_FAILED] = {"task_failed", "client_api.task_failed", F(TASK_ID) | F(REASON), F(REASON)},
    [CJ_CAPI_RESULT_ACCEPTED] = {"result_accepted", "client_api.result_accepted", 0, 0},
    [CJ_CAPI_RESULT_REJECTED] = {"result_rejected", "client_api.result_rejected", F(REASON), F(REASON)},
    [CJ_CAPI_SETTLED_REPLY] = {"result_source_settled_reply", "client_api.result_source_settled", F(TASK_ID),
                               F(TASK_ID)},
    [CJ_CAPI_HEARTBEAT_REPLY] = {"heartbeat_reply", "client_api.heartbeat", F(SESSION_ID), F(SESSION_ID)},
    [CJ_CAPI_SHUTDOWN_REPLY] = {"shutdown_reply", NULL, F(SOURCE_LIVE), F(SOURCE_LIVE)},
#undef F
};

static bool is_request(enum cj_capi_kind k) { return k >= CJ_CAPI_HELLO && k <= CJ_CAPI_SHUTDOWN; }
static bool is_reply(enum cj_capi_kind k) { return k >= CJ_CAPI_HELLO_ACCEPTED && k < CJ_CAPI_KIND_COUNT; }

enum cj_capi_kind cj_capi_kind_from_topic(const char *topic)
{
    if (!topic) return CJ_CAPI_NONE;
    for (int k = CJ_CAPI_HELLO; k <= CJ_CAPI_SHUTDOWN; k++)
        if (!strcmp(kinds[k].topic, topic)) return (enum cj_capi_kind)k;
    return CJ_CAPI_NONE;
}

const char *cj_capi_topic(enum cj_capi_kind kind)
{
    return kind > CJ_CAPI_NONE && kind < CJ_CAPI_KIND_COUNT ? kinds[kind].topic : NULL;
}

const char *cj_capi_kind_name(enum cj_capi_kind kind)
{
    return kind >= CJ_CAPI_NONE && kind < CJ_CAPI_KIND_COUNT ? kinds[kind].name : "unknown";
}

/* The replies a request may get (client_api.error is accepted for every request
 * that has a reply_topic reply, as NVFlare's handlers send it when closed). */
static bool reply_allowed(enum cj_capi_kind request, enum cj_capi_kind reply)
{
    switch (request) {
    case CJ_CAPI_HELLO: return reply == CJ_CAPI_HELLO_ACCEPTED || reply == CJ_CAPI_HELLO_REJECTED;
    case CJ_CAPI_SESSION_READY: return reply == CJ_CAPI_SESSION_READY_REPLY || reply == CJ_CAPI_ERROR;
    case CJ_CAPI_TASK_READY:
        return reply == CJ_CAPI_TASK_ACCEPTED || reply == CJ_CAPI_TASK_FAILED || reply == CJ_CAPI_ERROR;
    case CJ_CAPI_RESULT_READY:
        return reply == CJ_CAPI_RESULT_ACCEPTED || reply == CJ_CAPI_RESULT_REJECTED || reply == CJ_CAPI_ERROR;
    case CJ_CAPI_SETTLED: return reply == CJ_CAPI_SETTLED_REPLY || reply == CJ_CAPI_ERROR;
    case CJ_CAPI_HEARTBEAT: return reply == CJ_CAPI_HEARTBEAT_REPLY || reply == CJ_CAPI_ERROR;
    default: return false;
    }
}

/* ---- UTF-8 ------------------------------------------------------------------------ */



/* ---- reading ------------------------------------------------------------------------ */

enum ftype { FT_ID, FT_TOKEN, FT_REASON, FT_NUMBER, FT_BOOL, FT_MAP, FT_LOGKEY, FT_SCALAR, FT_RANK, FT_ENUM };

static const struct field_def {
    const char *key;
    uint32_t bit;
    enum ftype type;
    enum cj_capi_kind only;   /* the key means this field only for that kind (model/result) */
} fields[] = {
    {"session_id", CJ_CAPI_F_SESSION_ID, FT_ID, 0},
    {"task_id", CJ_CAPI_F_TASK_ID, FT_ID, 0},
    {"task_name", CJ_CAPI_F_TASK_NAME, FT_ID, 0},
    {"job_id", CJ_CAPI_F_JOB_ID, FT_ID, 0},
    {"site_name", CJ_CAPI_F_SITE_NAME, FT_ID, 0},
    {"trainer_fqcn", CJ_CAPI_F_TRAINER_FQCN, FT_ID, 0},
    {"reason", CJ_CAPI_F_REASON, FT_REASON, 0},
    {"proof", CJ_CAPI_F_PROOF, FT_TOKEN, 0},
    {"protocol_version", CJ_CAPI_F_PROTOCOL_VERSION, FT_SCALAR, 0},
    {"rank", CJ_CAPI_F_RANK, FT_RANK, 0},
    {"heartbeat_interval", CJ_CAPI_F_HB_INTERVAL, FT_NUMBER, 0},
    {"heartbeat_timeout", CJ_CAPI_F_HB_TIMEOUT, FT_NUMBER, 0},
    {"secure_mode", CJ_CAPI_F_SECURE_MODE, FT_BOOL, 0},
    {"auth_token", CJ_CAPI_F_AUTH_TOKEN, FT_TOKEN, 0},
    {"auth_token_signature", CJ_CAPI_F_AUTH_SIGNATURE, FT_TOKEN, 0},
    {"result_source_live", CJ_CAPI_F_SOURCE_LIVE, FT_BOOL, 0},
    {"model", CJ_CAPI_F_BODY, FT_MAP, CJ_CAPI_TASK_READY},
    {"result", CJ_CAPI_F_BODY, FT_MAP, CJ_CAPI_RESULT_READY},
    {"key", CJ_CAPI_F_KEY, FT_LOGKEY, 0},
    {"value", CJ_CAPI_F_VALUE, FT_SCALAR, 0},
    {"data_type", CJ_CAPI_F_DATA_TYPE, FT_ENUM, 0},
};

static const struct field_def *find_field(enum cj_capi_kind kind, const uint8_t *k, uint32_t klen)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if ((kinds[kind].relevant & fields[i].bit) && (!fields[i].only || fields[i].only == kind) &&
            mp_str_eq(k, klen, fields[i].key))
            return &fields[i];
    return NULL;
}

/* A reason: any length, cut to CJ_CAPI_REASON_MAX_CHARS characters. */
static int read_reason(struct mp_cur *c, char *buf, bool *cut, struct cj_err *err)
{
    size_t at = c->pos;
    const uint8_t *p;
    uint32_t len;
    if (mp_read_str(c, &p, &len, err)) return cj_fail(err, CJ_E_TYPE, at, "capi: 'reason' is not a str (offset %zu)", at);
    size_t n = cj_utf8_prefix(p, len, CJ_CAPI_REASON_MAX_CHARS);
    if (n == SIZE_MAX) return cj_fail(err, CJ_E_INVALID, at, "capi: 'reason' is not valid UTF-8 or holds NUL (offset %zu)", at);
    memcpy(buf, p, n);
    buf[n] = 0;
    *cut = n < len;
    return 0;
}

/* int / float / str / bool. */
static int read_scalar(struct mp_cur *c, struct cj_capi_value *v, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_cur save = *c;
    struct mp_val x;
    int rc = mp_next(c, &x, err);
    if (rc) return rc;
    memset(v, 0, offsetof(struct cj_capi_value, s));
    v->s[0] = 0;
    switch (x.kind) {
    case MP_UINT:
        if (x.u <= (uint64_t)INT64_MAX) { v->type = CJ_CAPI_V_INT; v->i = (int64_t)x.u; }
        else { v->type = CJ_CAPI_V_UINT; v->u = x.u; }
        return 0;
    case MP_INT: v->type = CJ_CAPI_V_INT; v->i = x.i; return 0;
    case MP_FLOAT: v->type = CJ_CAPI_V_FLOAT; v->f = x.f; return 0;
    case MP_BOOL: v->type = CJ_CAPI_V_BOOL; v->b = x.b; return 0;
    case MP_STR:
        *c = save;
        v->type = CJ_CAPI_V_STR;
        return mp_read_cstr(c, v->s, CJ_CAPI_LOG_STR_MAX, true, "capi", what, err);
    default:
        return cj_fail(err, CJ_E_TYPE, at, "capi: '%s' is not an int, float, str or bool (offset %zu)", what, at);
    }
}

static int read_number(struct mp_cur *c, double *out, const char *what, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_val x;
    int rc = mp_next(c, &x, err);
    if (rc) return rc;
    if (x.kind == MP_FLOAT) *out = x.f;
    else if (x.kind == MP_UINT) *out = (double)x.u;
    else if (x.kind == MP_INT) *out = (double)x.i;
    else return cj_fail(err, CJ_E_TYPE, at, "capi: '%s' is not a number (offset %zu)", what, at);
    return 0;
}

/* str(rank) as Python prints it, for str / int / bool / nil / float. */
static int read_rank(struct mp_cur *c, struct cj_capi_msg *m, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_cur save = *c;
    struct mp_val x;
    int rc = mp_next(c, &x, err);
    if (rc) return rc;
    m->rank_is_str = false;
    switch (x.kind) {
    case MP_STR:
        *c = save;
        m->rank_is_str = true;
        return mp_read_cstr(c, m->rank, CJ_CAPI_RANK_MAX, true, "capi", "rank", err);
    case MP_UINT: snprintf(m->rank, sizeof m->rank, "%" PRIu64, x.u); return 0;
    case MP_INT: snprintf(m->rank, sizeof m->rank, "%" PRId64, x.i); return 0;
    case MP_BOOL: snprintf(m->rank, sizeof m->rank, "%s", x.b ? "True" : "False"); return 0;
    case MP_NIL: snprintf(m->rank, sizeof m->rank, "None"); return 0;
    case MP_FLOAT: /* never "0": Python's str(float) always has '.', 'e', "inf" or "nan" */
        snprintf(m->rank, sizeof m->rank, "%.17g", x.f);
        if (!strpbrk(m->rank, ".eni")) strcat(m->rank, ".0");
        return 0;
    default: return cj_fail(err, CJ_E_TYPE, at, "capi: 'rank' has an unusable type (offset %zu)", at);
    }
}

/* data_type: the AnalyticsDataType enum wrapper, or a plain str. */
static int read_enum(struct mp_cur *c, char *name, struct cj_err *err)
{
    size_t at = c->pos;
    struct mp_cur save = *c;
    struct mp_val x;
    int rc = mp_next(c, &x, err);
    if (rc) return rc;
    if (x.kind == MP_STR) {
        *c = save;
        return mp_read_cstr(c, name, CJ_CAPI_DATA_TYPE_MAX, true, "capi", "data_type", err);
    }
    if (x.kind != MP_MAP)
        return cj_fail(err, CJ_E_TYPE, at, "capi: 'data_type' is neither an enum wrapper nor a str (offset %zu)", at);
    bool has_type = false, has_data = false;
    for (uint32_t i = 0; i < x.n; i++) {
        struct mp_val k;
        if ((rc = mp_read_key(c, &k, err))) return rc;
        if (mp_key_is(&k, "__fobs_type__")) {
            const uint8_t *p;
            uint32_t len;
            size_t vat = c->pos;
            if (mp_read_str(c, &p, &len, err) || !mp_str_eq(p, len, CJ_CAPI_ANALYTICS_TYPE))
                return cj_fail(err, CJ_E_INVALID, vat, "capi: 'data_type' wrapper is not %s (offset %zu)",
                               CJ_CAPI_ANALYTICS_TYPE, vat);
            has_type = true;
        } else if (mp_key_is(&k, "__fobs_data__")) {
            if ((rc = mp_read_cstr(c, name, CJ_CAPI_DATA_TYPE_MAX, true, "capi", "data_type.__fobs_data__", err)))
                return rc;
            has_data = true;
        } else if ((rc = mp_skip(c, err))) {
            return rc;
        }
    }
    if (!has_type || !has_data)
        return cj_fail(err, CJ_E_MISSING, at, "capi: 'data_type' wrapper lacks %s (offset %zu)",
                       has_type ? "__fobs_data__" : "__fobs_type__", at);
    return 0;
}

static char *id_field(struct cj_capi_msg *m, uint32_t bit)
{
    switch (bit) {
    case CJ_CAPI_F_SESSION_ID: return m->session_id;
    case CJ_CAPI_F_TASK_ID: return m->task_id;
    case CJ_CAPI_F_TASK_NAME: return m->task_name;
    case CJ_CAPI_F_JOB_ID: return m->job_id;
    case CJ_CAPI_F_SITE_NAME: return m->site_name;
    case CJ_CAPI_F_TRAINER_FQCN: return m->trainer_fqcn;
    case CJ_CAPI_F_PROOF: return m->proof;
    case CJ_CAPI_F_AUTH_TOKEN: return m->auth_token;
    case CJ_CAPI_F_AUTH_SIGNATURE: return m->auth_token_signature;
    }
    return NULL;
}

/* Reads one known field's value from c (a cursor over exactly that value). */
static int read_field(struct mp_cur *c, const struct field_def *f, struct cj_capi_msg *m, struct cj_err *err)
{
    switch (f->type) {
    case FT_ID: return mp_read_cstr(c, id_field(m, f->bit), CJ_CAPI_ID_MAX, true, "capi", f->key, err);
    case FT_TOKEN: return mp_read_cstr(c, id_field(m, f->bit), CJ_CAPI_TOKEN_MAX, true, "capi", f->key, err);
    case FT_LOGKEY: return mp_read_cstr(c, m->key, CJ_CAPI_LOG_KEY_MAX, true, "capi", f->key, err);
    case FT_REASON: return read_reason(c, m->reason, &m->reason_cut, err);
    case FT_RANK: return read_rank(c, m, err);
    case FT_ENUM: return read_enum(c, m->data_type, err);
    case FT_SCALAR:
        return read_scalar(c, f->bit == CJ_CAPI_F_VALUE ? &m->value : &m->protocol_version, f->key, err);
    case FT_NUMBER:
        return read_number(c, f->bit == CJ_CAPI_F_HB_INTERVAL ? &m->heartbeat_interval : &m->heartbeat_timeout,
                           f->key, err);
    case FT_BOOL: {
        size_t at = c->pos;
        bool *dst = f->bit == CJ_CAPI_F_SECURE_MODE ? &m->secure_mode : &m->result_source_live;
        if (mp_read_bool(c, dst, err)) return cj_fail(err, CJ_E_TYPE, at, "capi: '%s' is not a bool (offset %zu)", f->key, at);
        return 0;
    }
    case FT_MAP: {
        size_t at = c->pos;
        struct mp_val x;
        int rc = mp_next(c, &x, err);
        if (rc) return rc;
        if (x.kind != MP_MAP) return cj_fail(err, CJ_E_TYPE, at, "capi: '%s' is not a map (offset %zu)", f->key, at);
        m->body = c->base + at;
        m->body_off = at;
        m->body_len = c->end - at;   /* the cursor spans exactly this value */
        c->pos = c->end;
        return 0;
    }
    }
    return cj_fail(err, CJ_E_INVALID, c->pos, "capi: internal field type");
}

/* A log key that is not one of the four: kept as an extra when its value is a
 * scalar and there is room, else counted as dropped.  Last duplicate wins. */
static void add_extra(struct cj_capi_msg *m, const uint8_t *k, uint32_t klen, struct mp_cur *vc)
{
    struct cj_capi_value v;
    if (klen > CJ_CAPI_LOG_KEY_MAX || cj_utf8_prefix(k, klen, SIZE_MAX) == SIZE_MAX || read_scalar(vc, &v, "extra", NULL)) {
        m->n_dropped++;
        return;
    }
    size_t i;
    for (i = 0; i < m->n_extras; i++)
        if (mp_str_eq(k, klen, m->extras[i].name)) break;
    if (i == m->n_extras) {
        if (m->n_extras == CJ_CAPI_LOG_MAX_EXTRAS) { m->n_dropped++; return; }
        memcpy(m->extras[i].name, k, klen);
        m->extras[i].name[klen] = 0;
        m->n_extras++;
    }
    m->extras[i].v = v;
}

static void reset_msg(struct cj_capi_msg *m, enum cj_capi_kind kind)
{
    /* The big buffers only need an empty string; clear the rest. */
    m->kind = kind;
    m->has = m->bad = 0;
    m->session_id[0] = m->task_id[0] = m->task_name[0] = m->job_id[0] = m->site_name[0] = 0;
    m->trainer_fqcn[0] = m->reason[0] = m->proof[0] = m->rank[0] = 0;
    m->auth_token[0] = m->auth_token_signature[0] = m->key[0] = m->data_type[0] = 0;
    m->reason_cut = m->rank_is_str = m->secure_mode = m->result_source_live = false;
    memset(&m->protocol_version, 0, offsetof(struct cj_capi_value, s));
    m->protocol_version.s[0] = 0;
    memset(&m->value, 0, offsetof(struct cj_capi_value, s));
    m->value.s[0] = 0;
    m->heartbeat_interval = m->heartbeat_timeout = 0;
    m->body = NULL;
    m->body_len = m->body_off = 0;
    m->n_extras = 0;
    m->n_dropped = 0;
}


/* One pass over the body map at c, reading the keys of m->kind. */
static int decode_fields(struct mp_cur *c, struct cj_capi_msg *m, struct cj_err *err)
{
    enum cj_capi_kind kind = m->kind;
    bool lenient = kind == CJ_CAPI_HELLO;
    size_t at = c->pos;
    uint32_t n;
    if (mp_read_map(c, &n, err))
        return cj_fail(err, CJ_E_TYPE, at, "capi: %s body is not a map (offset %zu)", kinds[kind].name, at);
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        struct mp_cur vc;
        int rc = mp_read_entry(c, &k, &vc, err);   /* non-str keys are legal msgpack; skipped */
        if (rc) return rc;
        if (k.kind != MP_STR) {
            if (kind == CJ_CAPI_LOG) m->n_dropped++;
            continue;
        }
        const struct field_def *f = find_field(kind, k.ptr, k.len);
        if (!f) {
            if (kind == CJ_CAPI_LOG) add_extra(m, k.ptr, k.len, &vc);
            continue;
        }
        m->has &= ~f->bit;
        m->bad &= ~f->bit;
        if ((rc = read_field(&vc, f, m, lenient ? NULL : err))) {
            if (!lenient) return rc;
            m->bad |= f->bit;
            continue;
        }
        if (vc.pos != vc.end)   /* cannot happen: every reader consumes exactly one value */
            return cj_fail(err, CJ_E_INVALID, vc.pos, "capi: '%s' value not fully read (offset %zu)", f->key, vc.pos);
        m->has |= f->bit;
    }
    uint32_t missing = kinds[kind].required & ~m->has;
    if (missing) {
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if ((missing & fields[i].bit) && (!fields[i].only || fields[i].only == kind))
                return cj_fail(err, CJ_E_MISSING, at, "capi: %s body lacks '%s' (offset %zu)", kinds[kind].name,
                               fields[i].key, at);
    }
    return 0;
}

int cj_capi_decode_request(enum cj_capi_kind kind, const uint8_t *payload, size_t len, struct cj_capi_msg *m,
                           struct cj_err *err)
{
    if (!is_request(kind)) return cj_fail(err, CJ_E_INVALID, 0, "capi: %d is not a request kind", (int)kind);
    reset_msg(m, kind);
    struct mp_cur c;
    int rc = cj_lobs_open_main(payload, len, &c, err);
    return rc ? rc : decode_fields(&c, m, err);
}

/* Finds the reply_topic (last occurrence) of the body map at c; c is not moved. */
static int find_reply_kind(const struct mp_cur *c0, enum cj_capi_kind request, enum cj_capi_kind *out,
                           struct cj_err *err)
{
    struct mp_cur c = *c0;
    size_t at = c.pos;
    uint32_t n;
    if (mp_read_map(&c, &n, err)) return cj_fail(err, CJ_E_TYPE, at, "capi: reply body is not a map (offset %zu)", at);
    struct mp_cur topic = {0};
    bool found = false;
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        struct mp_cur v;
        int rc = mp_read_entry(&c, &k, &v, err);
        if (rc) return rc;
        if (mp_key_is(&k, "reply_topic")) {
            topic = v;
            found = true;
        }
    }
    if (request == CJ_CAPI_SHUTDOWN) {   /* {result_source_live}: no reply_topic to read */
        *out = CJ_CAPI_SHUTDOWN_REPLY;
        return 0;
    }
    if (!found) return cj_fail(err, CJ_E_MISSING, at, "capi: reply to %s lacks 'reply_topic'", kinds[request].name);
    const uint8_t *p;
    uint32_t len;
    size_t tat = topic.pos;
    if (mp_read_str(&topic, &p, &len, err))
        return cj_fail(err, CJ_E_TYPE, tat, "capi: 'reply_topic' is not a str (offset %zu)", tat);
    for (int k = CJ_CAPI_HELLO_ACCEPTED; k < CJ_CAPI_KIND_COUNT; k++) {
        if (kinds[k].topic && mp_str_eq(p, len, kinds[k].topic) && reply_allowed(request, (enum cj_capi_kind)k)) {
            *out = (enum cj_capi_kind)k;
            return 0;
        }
    }
    char shown[64];
    size_t sl = len < sizeof shown - 1 ? len : sizeof shown - 1;
    for (size_t i = 0; i < sl; i++) shown[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    shown[sl] = 0;
    return cj_fail(err, CJ_E_INVALID, tat, "capi: unexpected reply_topic '%s%s' in reply to %s (offset %zu)", shown,
                   sl < len ? "..." : "", kinds[request].name, tat);
}

int cj_capi_decode_reply(enum cj_capi_kind request, const uint8_t *payload, size_t len, struct cj_capi_msg *m,
                         struct cj_err *err)
{
    if (!is_request(request) || request == CJ_CAPI_LOG || request == CJ_CAPI_ABORT)
        return cj_fail(err, CJ_E_INVALID, 0, "capi: %s gets no reply", cj_capi_kind_name(request));
    struct mp_cur c;
    int rc = cj_lobs_open_main(payload, len, &c, err);
    if (rc) return rc;
    enum cj_capi_kind kind = CJ_CAPI_NONE;
    if ((rc = find_reply_kind(&c, request, &kind, err))) return rc;
    reset_msg(m, kind);
    return decode_fields(&c, m, err);
}

/* ---- checks -------------------------------------------------------------------------- */

bool cj_capi_token_equal(const char *presented, size_t presented_len, const char *expected)
{
    size_t n = strlen(expected);
    if (n == 0 || !presented) return false;
    /* Walk the expected token's length whatever was presented; differences OR in. */
    unsigned diff = presented_len != n;
    for (size_t i = 0; i < n; i++) {
        unsigned char a = i < presented_len ? (unsigned char)presented[i] : 0;
        diff |= a ^ (unsigned char)expected[i];
    }
    return diff == 0;
}

/* Python repr() of a str, cut to fit. */
static void repr_field(char *out, size_t n, const struct cj_capi_msg *m, uint32_t bit, const char *s)
{
    if (m->has & bit) cj_repr_str(out, n, s);
    else snprintf(out, n, "%s", (m->bad & bit) ? "<unusable value>" : "None");
}

void cj_capi_value_text(const struct cj_capi_value *v, bool repr, char *out, size_t n)
{
    switch (v->type) {
    case CJ_CAPI_V_INT: snprintf(out, n, "%" PRId64, v->i); break;
    case CJ_CAPI_V_UINT: snprintf(out, n, "%" PRIu64, v->u); break;
    case CJ_CAPI_V_BOOL: snprintf(out, n, "%s", v->b ? "True" : "False"); break;
    case CJ_CAPI_V_STR:
        if (repr) cj_repr_str(out, n, v->s);
        else snprintf(out, n, "%s", v->s);
        break;
    case CJ_CAPI_V_FLOAT: cj_repr_float(out, n, v->f); break;
    default: snprintf(out, n, "None"); break;
    }
}

static bool version_is_one(const struct cj_capi_value *v)
{
    /* Python's payload.get("protocol_version") != 1: 1, 1.0 and True all equal 1. */
    return (v->type == CJ_CAPI_V_INT && v->i == 1) || (v->type == CJ_CAPI_V_FLOAT && v->f == 1.0) ||
           (v->type == CJ_CAPI_V_BOOL && v->b);
}

static bool field_is(const struct cj_capi_msg *m, uint32_t bit, const char *have, const char *want)
{
    return (m->has & bit) && want && !strcmp(have, want);
}

int cj_capi_check_hello(const struct cj_capi_msg *h, const struct cj_capi_hello_expect *x, char *reason,
                        size_t reasonsz)
{
    char a[300], b[300];
    if (!x->active) {
        snprintf(reason, reasonsz, "no active trainer launch");
        return 1;
    }
    const char *origin = x->origin ? x->origin : "";
    if (!x->trainer_fqcn || strcmp(origin, x->trainer_fqcn) ||
        !field_is(h, CJ_CAPI_F_TRAINER_FQCN, h->trainer_fqcn, x->trainer_fqcn)) {
        cj_repr_str(a, sizeof a, origin);
        repr_field(b, sizeof b, h, CJ_CAPI_F_TRAINER_FQCN, h->trainer_fqcn);
        snprintf(reason, reasonsz, "unexpected trainer identity (origin=%s, claimed=%s)", a, b);
        return 2;
    }
    if (!(h->has & CJ_CAPI_F_PROOF) || !x->launch_token ||
        !cj_capi_token_equal(h->proof, strlen(h->proof), x->launch_token)) {
        snprintf(reason, reasonsz, "launch token mismatch");
        return 3;
    }
    if (!(h->has & CJ_CAPI_F_PROTOCOL_VERSION) || !version_is_one(&h->protocol_version)) {
        if (h->has & CJ_CAPI_F_PROTOCOL_VERSION) cj_capi_value_text(&h->protocol_version, true, a, sizeof a);
        else snprintf(a, sizeof a, "%s", (h->bad & CJ_CAPI_F_PROTOCOL_VERSION) ? "<unusable value>" : "None");
        snprintf(reason, reasonsz, "unsupported protocol version %s (expect %d)", a, CJ_CAPI_PROTOCOL_VERSION);
        return 4;
    }
    if (!field_is(h, CJ_CAPI_F_JOB_ID, h->job_id, x->job_id)) {
        repr_field(a, sizeof a, h, CJ_CAPI_F_JOB_ID, h->job_id);
        snprintf(reason, reasonsz, "job id mismatch: %s", a);
        return 5;
    }
    if (!field_is(h, CJ_CAPI_F_SITE_NAME, h->site_name, x->site_name)) {
        repr_field(a, sizeof a, h, CJ_CAPI_F_SITE_NAME, h->site_name);
        snprintf(reason, reasonsz, "site name mismatch: %s", a);
        return 5;
    }
    if (!(h->has & CJ_CAPI_F_RANK) || strcmp(h->rank, "0")) {
        if (!(h->has & CJ_CAPI_F_RANK)) snprintf(a, sizeof a, "%s", (h->bad & CJ_CAPI_F_RANK) ? "<unusable value>" : "None");
        else if (h->rank_is_str) cj_repr_str(a, sizeof a, h->rank);
        else snprintf(a, sizeof a, "%s", h->rank);
        snprintf(reason, reasonsz, "only rank 0 may connect (got rank %s)", a);
        return 6;
    }
    return 0;
}

int cj_capi_check_hello_accepted(const struct cj_capi_msg *m, bool secure_mode, char *why, size_t whysz)
{
    const char *bad = NULL;
    if (m->kind != CJ_CAPI_HELLO_ACCEPTED) bad = "not a hello_accepted reply";
    else if (!(m->has & CJ_CAPI_F_SESSION_ID) || !m->session_id[0]) bad = "empty session_id";
    else if (!isfinite(m->heartbeat_interval) || m->heartbeat_interval <= 0) bad = "heartbeat_interval must be a finite number > 0";
    else if (!isfinite(m->heartbeat_timeout) || m->heartbeat_timeout < 0) bad = "heartbeat_timeout must be a finite number >= 0";
    else if (m->heartbeat_timeout > 0 && !(m->heartbeat_interval < m->heartbeat_timeout))
        bad = "heartbeat_interval must be below heartbeat_timeout";
    else if (!(m->has & CJ_CAPI_F_SECURE_MODE)) bad = "secure_mode missing";
    else if (m->secure_mode != secure_mode) bad = "secure_mode differs from the bootstrap's";
    else if (secure_mode && (!(m->has & CJ_CAPI_F_AUTH_TOKEN) || !m->auth_token[0] || !strcmp(m->auth_token, "NA")))
        bad = "secure mode without a delegated auth_token";
    else if (secure_mode && (!(m->has & CJ_CAPI_F_AUTH_SIGNATURE) || !m->auth_token_signature[0] ||
                             !strcmp(m->auth_token_signature, "NA")))
        bad = "secure mode without a delegated auth_token_signature";
    if (!bad) return 0;
    snprintf(why, whysz, "%s", bad);
    return -1;
}


int cj_capi_new_session_id(char out[CJ_CAPI_SESSION_ID_LEN + 1])
{
    return cj_random_hex(out, CJ_CAPI_SESSION_ID_LEN);
}

/* ---- writing ---------------------------------------------------------------------------- */

enum kvt { KV_STR, KV_REASON, KV_DOUBLE, KV_BOOL, KV_VALUE, KV_RAW, KV_ENUM };

struct kv {
    const char *key;
    enum kvt t;
    const char *s;     /* STR / REASON / ENUM */
    size_t max;        /* STR / ENUM: byte limit */
    double d;
    bool b;
    const struct cj_capi_value *v;
    const uint8_t *raw;
    size_t raw_len;
};

/* The fields of one body, borrowed (from a struct cj_capi_msg or from arguments). */
struct view {
    enum cj_capi_kind kind;
    uint32_t has;
    const char *session_id, *task_id, *task_name, *job_id, *site_name, *trainer_fqcn, *reason, *proof, *rank;
    const char *auth_token, *auth_sig, *key, *data_type;
    const struct cj_capi_value *protocol_version, *value;
    double hb_interval, hb_timeout;
    bool secure_mode, live;
    const uint8_t *body;
    size_t body_len;
    const struct cj_capi_extra *extras;
    size_t n_extras;
};

static int check_str(const char *key, const char *s, size_t max, struct cj_err *err)
{
    if (!s) return cj_fail(err, CJ_E_INVALID, 0, "capi: no value for '%s'", key);
    size_t n = strlen(s);
    if (n > max) return cj_fail(err, CJ_E_LIMIT, 0, "capi: '%s' is %zu bytes, limit %zu", key, n, max);
    if (cj_utf8_prefix((const uint8_t *)s, n, SIZE_MAX) == SIZE_MAX)
        return cj_fail(err, CJ_E_INVALID, 0, "capi: '%s' is not valid UTF-8", key);
    return 0;
}

static int check_kv(const struct kv *e, struct cj_err *err)
{
    switch (e->t) {
    case KV_STR:
    case KV_ENUM: return check_str(e->key, e->s, e->max, err);
    case KV_REASON: return check_str(e->key, e->s, SIZE_MAX, err);
    case KV_VALUE:
        if (!e->v || e->v->type == CJ_CAPI_V_NONE) return cj_fail(err, CJ_E_INVALID, 0, "capi: no value for '%s'", e->key);
        if (e->v->type == CJ_CAPI_V_STR) return check_str(e->key, e->v->s, CJ_CAPI_LOG_STR_MAX, err);
        return 0;
    case KV_RAW: {
        /* Exactly one msgpack map. */
        struct mp_cur c;
        struct cj_err e2;
        uint32_t n;
        if (!e->raw) return cj_fail(err, CJ_E_INVALID, 0, "capi: no value for '%s'", e->key);
        mp_cur_init(&c, e->raw, e->raw_len);
        if (mp_read_map(&c, &n, &e2) || (c.pos = 0, mp_skip(&c, &e2)) || c.pos != e->raw_len)
            return cj_fail(err, CJ_E_INVALID, 0, "capi: '%s' is not exactly one msgpack map", e->key);
        return 0;
    }
    default: return 0;
    }
}

static int pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    return msgpack_pack_str_with_body(pk, s, n);
}

static int pack_kv(msgpack_packer *pk, msgpack_sbuffer *sb, const struct kv *e)
{
    int rc = pack_str(pk, e->key, strlen(e->key));
    switch (e->t) {
    case KV_STR: return rc | pack_str(pk, e->s, strlen(e->s));
    case KV_REASON: {
        size_t n = strlen(e->s);
        return rc | pack_str(pk, e->s, cj_utf8_prefix((const uint8_t *)e->s, n, CJ_CAPI_REASON_MAX_CHARS));
    }
    case KV_DOUBLE: return rc | msgpack_pack_double(pk, e->d);
    case KV_BOOL: return rc | (e->b ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    case KV_RAW: return rc | msgpack_sbuffer_write(sb, (const char *)e->raw, e->raw_len);
    case KV_ENUM:
        rc |= msgpack_pack_map(pk, 3);
        rc |= pack_str(pk, "__fobs_type__", 13) | pack_str(pk, CJ_CAPI_ANALYTICS_TYPE, strlen(CJ_CAPI_ANALYTICS_TYPE));
        rc |= pack_str(pk, "__fobs_data__", 13) | pack_str(pk, e->s, strlen(e->s));
        return rc | pack_str(pk, "__fobs_dc__", 11) | pack_str(pk, CJ_CAPI_ENUM_DC, strlen(CJ_CAPI_ENUM_DC));
    case KV_VALUE:
        switch (e->v->type) {
        case CJ_CAPI_V_INT: return rc | msgpack_pack_int64(pk, e->v->i);
        case CJ_CAPI_V_UINT: return rc | msgpack_pack_uint64(pk, e->v->u);
        case CJ_CAPI_V_FLOAT: return rc | msgpack_pack_double(pk, e->v->f);
        case CJ_CAPI_V_BOOL: return rc | (e->v->b ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
        case CJ_CAPI_V_STR: return rc | pack_str(pk, e->v->s, strlen(e->v->s));
        default: return -1;
        }
    }
    return -1;
}

/* Appends 64 00 <len> {kv...} to sb, all or nothing. */
static int write_payload(msgpack_sbuffer *sb, const struct kv *kv, size_t n, struct cj_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = check_kv(&kv[i], err);
        if (rc) return rc;
    }
    size_t save = sb->size, hdr;
    int rc = cj_lobs_begin_main(sb, &hdr, err);
    if (rc) return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int bad = msgpack_pack_map(&pk, (uint32_t)n);
    for (size_t i = 0; i < n && !bad; i++) bad |= pack_kv(&pk, sb, &kv[i]);
    if (bad) {
        sb->size = save;
        return cj_fail(err, CJ_E_NOMEM, save, "capi: out of memory writing a body");
    }
    cj_lobs_end_main(sb, hdr);
    return 0;
}

#define KSTR(k, str, mx) ((struct kv){.key = (k), .t = KV_STR, .s = (str), .max = (mx)})
#define KID(k, str) KSTR(k, str, CJ_CAPI_ID_MAX)
#define KREASON(str) ((struct kv){.key = "reason", .t = KV_REASON, .s = (str)})
#define KTOPIC(kind) KSTR("reply_topic", kinds[kind].topic, SIZE_MAX)

static int encode_view(msgpack_sbuffer *sb, const struct view *v, struct cj_err *err)
{
    struct kv kv[8 + CJ_CAPI_LOG_MAX_EXTRAS];
    size_t n = 0;
    uint32_t has = v->has;
    enum cj_capi_kind k = v->kind;
    if (k <= CJ_CAPI_NONE || k >= CJ_CAPI_KIND_COUNT) return cj_fail(err, CJ_E_INVALID, 0, "capi: bad kind %d", (int)k);
    uint32_t missing = kinds[k].required & ~has;
    if (missing) return cj_fail(err, CJ_E_MISSING, 0, "capi: %s lacks required fields (0x%x)", kinds[k].name, missing);
    if (is_reply(k) && kinds[k].topic) kv[n++] = KTOPIC(k);
    switch (k) {
    case CJ_CAPI_HELLO:
        if (has & CJ_CAPI_F_TRAINER_FQCN) kv[n++] = KID("trainer_fqcn", v->trainer_fqcn);
        if (has & CJ_CAPI_F_PROOF) kv[n++] = KSTR("proof", v->proof, CJ_CAPI_TOKEN_MAX);
        if (has & CJ_CAPI_F_PROTOCOL_VERSION)
            kv[n++] = (struct kv){.key = "protocol_version", .t = KV_VALUE, .v = v->protocol_version};
        if (has & CJ_CAPI_F_JOB_ID) kv[n++] = KID("job_id", v->job_id);
        if (has & CJ_CAPI_F_SITE_NAME) kv[n++] = KID("site_name", v->site_name);
        if (has & CJ_CAPI_F_RANK) kv[n++] = KSTR("rank", v->rank, CJ_CAPI_RANK_MAX);
        break;
    case CJ_CAPI_HELLO_ACCEPTED:
        kv[n++] = KID("session_id", v->session_id);
        kv[n++] = KID("job_id", v->job_id);
        kv[n++] = KID("site_name", v->site_name);
        kv[n++] = (struct kv){.key = "heartbeat_interval", .t = KV_DOUBLE, .d = v->hb_interval};
        kv[n++] = (struct kv){.key = "heartbeat_timeout", .t = KV_DOUBLE, .d = v->hb_timeout};
        if (has & CJ_CAPI_F_SECURE_MODE) kv[n++] = (struct kv){.key = "secure_mode", .t = KV_BOOL, .b = v->secure_mode};
        if (has & CJ_CAPI_F_AUTH_TOKEN) kv[n++] = KSTR("auth_token", v->auth_token, CJ_CAPI_TOKEN_MAX);
        if (has & CJ_CAPI_F_AUTH_SIGNATURE) kv[n++] = KSTR("auth_token_signature", v->auth_sig, CJ_CAPI_TOKEN_MAX);
        break;
    case CJ_CAPI_HELLO_REJECTED:
    case CJ_CAPI_ERROR:
    case CJ_CAPI_RESULT_REJECTED:
        kv[n++] = KREASON(v->reason);
        break;
    case CJ_CAPI_SESSION_READY:
    case CJ_CAPI_SESSION_READY_REPLY:
    case CJ_CAPI_HEARTBEAT_REPLY:
        kv[n++] = KID("session_id", v->session_id);
        break;
    case CJ_CAPI_TASK_READY:
        kv[n++] = KID("session_id", v->session_id);
        kv[n++] = KID("task_id", v->task_id);
        kv[n++] = KID("task_name", v->task_name);
        kv[n++] = (struct kv){.key = "model", .t = KV_RAW, .raw = v->body, .raw_len = v->body_len};
        break;
    case CJ_CAPI_RESULT_READY:
        kv[n++] = KID("session_id", v->session_id);
        kv[n++] = KID("task_id", v->task_id);
        kv[n++] = (struct kv){.key = "result", .t = KV_RAW, .raw = v->body, .raw_len = v->body_len};
        break;
    case CJ_CAPI_TASK_ACCEPTED:
    case CJ_CAPI_SETTLED_REPLY:
        kv[n++] = KID("task_id", v->task_id);
        break;
    case CJ_CAPI_TASK_FAILED:
        if (has & CJ_CAPI_F_TASK_ID) kv[n++] = KID("task_id", v->task_id);
        kv[n++] = KREASON(v->reason);
        break;
    case CJ_CAPI_RESULT_ACCEPTED:
        break;
    case CJ_CAPI_SETTLED:
        kv[n++] = KID("session_id", v->session_id);
        kv[n++] = KID("task_id", v->task_id);
        break;
    case CJ_CAPI_HEARTBEAT:
        kv[n++] = KID("session_id", v->session_id);
        if (has & CJ_CAPI_F_SOURCE_LIVE) kv[n++] = (struct kv){.key = "result_source_live", .t = KV_BOOL, .b = v->live};
        break;
    case CJ_CAPI_ABORT:
    case CJ_CAPI_SHUTDOWN:
        kv[n++] = KID("session_id", v->session_id);
        if (has & CJ_CAPI_F_REASON) kv[n++] = KREASON(v->reason);
        break;
    case CJ_CAPI_SHUTDOWN_REPLY:
        kv[n++] = (struct kv){.key = "result_source_live", .t = KV_BOOL, .b = v->live};
        break;
    case CJ_CAPI_LOG:
        kv[n++] = KID("session_id", v->session_id);
        kv[n++] = KSTR("key", v->key, CJ_CAPI_LOG_KEY_MAX);
        kv[n++] = (struct kv){.key = "value", .t = KV_VALUE, .v = v->value};
        kv[n++] = (struct kv){.key = "data_type", .t = KV_ENUM, .s = v->data_type, .max = CJ_CAPI_DATA_TYPE_MAX};
        if (v->n_extras > CJ_CAPI_LOG_MAX_EXTRAS)
            return cj_fail(err, CJ_E_LIMIT, 0, "capi: %zu log extras, limit %d", v->n_extras, CJ_CAPI_LOG_MAX_EXTRAS);
        for (size_t i = 0; i < v->n_extras; i++) {
            const char *name = v->extras[i].name;
            /* An extra named like one of the four keys would read back as that key. */
            if (!strcmp(name, "session_id") || !strcmp(name, "key") || !strcmp(name, "value") ||
                !strcmp(name, "data_type") || strlen(name) > CJ_CAPI_LOG_KEY_MAX)
                return cj_fail(err, CJ_E_INVALID, 0, "capi: bad log extra name '%.40s'", name);
            for (size_t j = 0; j < i; j++)
                if (!strcmp(name, v->extras[j].name))
                    return cj_fail(err, CJ_E_INVALID, 0, "capi: duplicate log extra '%.40s'", name);
            kv[n++] = (struct kv){.key = name, .t = KV_VALUE, .v = &v->extras[i].v};
        }
        break;
    default:
        return cj_fail(err, CJ_E_INVALID, 0, "capi: cannot encode kind %d", (int)k);
    }
    return write_payload(sb, kv, n, err);
}

int cj_capi_encode(msgpack_sbuffer *sb, const struct cj_capi_msg *m, struct cj_err *err)
{
    struct view v = {
        .kind = m->kind, .has = m->has, .session_id = m->session_id, .task_id = m->task_id,
        .task_name = m->task_name, .job_id = m->job_id, .site_name = m->site_name, .trainer_fqcn = m->trainer_fqcn,
        .reason = m->reason, .proof = m->proof, .rank = m->rank, .auth_token = m->auth_token,
        .auth_sig = m->auth_token_signature, .key = m->key, .data_type = m->data_type,
        .protocol_version = &m->protocol_version, .value = &m->value, .hb_interval = m->heartbeat_interval,
        .hb_timeout = m->heartbeat_timeout, .secure_mode = m->secure_mode, .live = m->result_source_live,
        .body = m->body, .body_len = m->body_len, .extras = m->extras, .n_extras = m->n_extras,
    };
    return encode_view(sb, &v, err);
}

#define ALL(kind) kinds[kind].relevant

int cj_capi_encode_hello(msgpack_sbuffer *sb, const char *trainer_fqcn, const char *proof, const char *job_id,
                         const char *site_name, struct cj_err *err)
{
    static const struct cj_capi_value one = {.type = CJ_CAPI_V_INT, .i = CJ_CAPI_PROTOCOL_VERSION};
    struct view v = {.kind = CJ_CAPI_HELLO, .has = ALL(CJ_CAPI_HELLO), .trainer_fqcn = trainer_fqcn, .proof = proof,
                     .protocol_version = &one, .job_id = job_id, .site_name = site_name, .rank = "0"};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_hello_accepted(msgpack_sbuffer *sb, const char *session_id, const char *job_id,
                                  const char *site_name, double heartbeat_interval, double heartbeat_timeout,
                                  bool secure_mode, const char *auth_token, const char *auth_token_signature,
                                  struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_HELLO_ACCEPTED, .has = kinds[CJ_CAPI_HELLO_ACCEPTED].required | CJ_CAPI_F_SECURE_MODE,
                     .session_id = session_id, .job_id = job_id, .site_name = site_name,
                     .hb_interval = heartbeat_interval, .hb_timeout = heartbeat_timeout, .secure_mode = secure_mode,
                     .auth_token = auth_token, .auth_sig = auth_token_signature};
    if (auth_token) v.has |= CJ_CAPI_F_AUTH_TOKEN;
    if (auth_token_signature) v.has |= CJ_CAPI_F_AUTH_SIGNATURE;
    return encode_view(sb, &v, err);
}

static int encode_reason(msgpack_sbuffer *sb, enum cj_capi_kind k, const char *reason, struct cj_err *err)
{
    struct view v = {.kind = k, .has = CJ_CAPI_F_REASON, .reason = reason};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_hello_rejected(msgpack_sbuffer *sb, const char *reason, struct cj_err *err)
{
    return encode_reason(sb, CJ_CAPI_HELLO_REJECTED, reason, err);
}

int cj_capi_encode_error(msgpack_sbuffer *sb, const char *reason, struct cj_err *err)
{
    return encode_reason(sb, CJ_CAPI_ERROR, reason, err);
}

int cj_capi_encode_result_rejected(msgpack_sbuffer *sb, const char *reason, struct cj_err *err)
{
    return encode_reason(sb, CJ_CAPI_RESULT_REJECTED, reason, err);
}

static int encode_ids(msgpack_sbuffer *sb, enum cj_capi_kind k, const char *session_id, const char *task_id,
                      struct cj_err *err)
{
    struct view v = {.kind = k, .has = kinds[k].required, .session_id = session_id, .task_id = task_id};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_session_ready(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_SESSION_READY, session_id, NULL, err);
}

int cj_capi_encode_session_ready_reply(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_SESSION_READY_REPLY, session_id, NULL, err);
}

int cj_capi_encode_heartbeat_reply(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_HEARTBEAT_REPLY, session_id, NULL, err);
}

int cj_capi_encode_task_accepted(msgpack_sbuffer *sb, const char *task_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_TASK_ACCEPTED, NULL, task_id, err);
}

int cj_capi_encode_settled(msgpack_sbuffer *sb, const char *session_id, const char *task_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_SETTLED, session_id, task_id, err);
}

int cj_capi_encode_settled_reply(msgpack_sbuffer *sb, const char *task_id, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_SETTLED_REPLY, NULL, task_id, err);
}

int cj_capi_encode_result_accepted(msgpack_sbuffer *sb, struct cj_err *err)
{
    return encode_ids(sb, CJ_CAPI_RESULT_ACCEPTED, NULL, NULL, err);
}

int cj_capi_encode_task_failed(msgpack_sbuffer *sb, const char *task_id, const char *reason, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_TASK_FAILED, .has = CJ_CAPI_F_REASON, .task_id = task_id, .reason = reason};
    if (task_id) v.has |= CJ_CAPI_F_TASK_ID;
    return encode_view(sb, &v, err);
}

int cj_capi_encode_task_ready(msgpack_sbuffer *sb, const char *session_id, const char *task_id,
                              const char *task_name, const uint8_t *model, size_t model_len, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_TASK_READY, .has = ALL(CJ_CAPI_TASK_READY), .session_id = session_id,
                     .task_id = task_id, .task_name = task_name, .body = model, .body_len = model_len};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_result_ready(msgpack_sbuffer *sb, const char *session_id, const char *task_id,
                                const uint8_t *result, size_t result_len, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_RESULT_READY, .has = ALL(CJ_CAPI_RESULT_READY), .session_id = session_id,
                     .task_id = task_id, .body = result, .body_len = result_len};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_heartbeat(msgpack_sbuffer *sb, const char *session_id, bool result_source_live,
                             struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_HEARTBEAT, .has = ALL(CJ_CAPI_HEARTBEAT), .session_id = session_id,
                     .live = result_source_live};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_log(msgpack_sbuffer *sb, const char *session_id, const char *key,
                       const struct cj_capi_value *value, const char *data_type,
                       const struct cj_capi_extra *extras, size_t n_extras, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_LOG, .has = ALL(CJ_CAPI_LOG), .session_id = session_id, .key = key,
                     .value = value, .data_type = data_type, .extras = extras, .n_extras = n_extras};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_abort(msgpack_sbuffer *sb, const char *session_id, const char *reason, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_ABORT, .has = ALL(CJ_CAPI_ABORT), .session_id = session_id, .reason = reason};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_shutdown(msgpack_sbuffer *sb, const char *session_id, const char *reason, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_SHUTDOWN, .has = ALL(CJ_CAPI_SHUTDOWN), .session_id = session_id,
                     .reason = reason};
    return encode_view(sb, &v, err);
}

int cj_capi_encode_shutdown_reply(msgpack_sbuffer *sb, bool result_source_live, struct cj_err *err)
{
    struct view v = {.kind = CJ_CAPI_SHUTDOWN_REPLY, .has = CJ_CAPI_F_SOURCE_LIVE, .live = result_source_live};
    return encode_view(sb, &v, err);
}
