/* SPDX-License-Identifier: Apache-2.0 */
/* workerlog.c — the workers' client_api LOG data: each value kept as a metric
 * per worker (text as Python prints it), maps (METRICS / SCALARS) flattened to
 * key.sub, and the metrics of the last RETIRED_MAX workers kept after they go,
 * for `show metrics`. */
#include "fl/session_int.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "stream/stream.h"
#include "util/log.h"
#include "util/mp.h"

/* The retired copy keeps only the slots in use: a relaunched worker's spare capacity would
 * otherwise stay allocated for RETIRED_MAX more worker lifetimes. */
void cj_fl_workerlog_retire(struct cj_fl_sessions *s, struct worker *w)
{
    if (!w->n_metrics || !w->fqcn[0]) { free(w->metrics); return; }
    struct retired *r = &s->retired[s->retired_next++ % RETIRED_MAX];
    free(r->metrics);
    snprintf(r->fqcn, sizeof r->fqcn, "%s", w->fqcn);
    if (w->n_metrics < w->cap_metrics) {   /* shrink in place; on failure keep the larger block */
        struct metric *m = realloc(w->metrics, w->n_metrics * sizeof *m);
        if (m) w->metrics = m;
    }
    r->metrics = w->metrics;     /* ownership moves */
    r->n = w->n_metrics;
    w->metrics = NULL;
}

/* A new metric slot, the array grown by doubling up to CJ_FL_MAX_METRICS; NULL when full
 * (or out of memory).  Sized by use, not up front: a slot is ~650 bytes and a worker
 * typically logs one or two names, so 64 slots per worker (41 KB) were mostly waste, and
 * the retired ring kept 8 such arrays: the soak's RSS grew ~32 KB per killed worker until
 * the ring was full. */
static struct metric *new_metric_slot(struct worker *w)
{
    if (w->n_metrics == w->cap_metrics) {
        if (w->cap_metrics >= CJ_FL_MAX_METRICS) return NULL;
        size_t cap = w->cap_metrics ? 2 * w->cap_metrics : 2;
        if (cap > CJ_FL_MAX_METRICS) cap = CJ_FL_MAX_METRICS;
        struct metric *m = realloc(w->metrics, cap * sizeof *m);
        if (!m) return NULL;
        w->metrics = m;
        w->cap_metrics = cap;
    }
    struct metric *slot = &w->metrics[w->n_metrics++];
    memset(slot, 0, sizeof *slot);
    return slot;
}

static void set_metric(struct worker *w, const char *name, const char *value)
{
    struct metric *slot = NULL;
    for (size_t i = 0; i < w->n_metrics; i++)
        if (!strcmp(w->metrics[i].name, name)) slot = &w->metrics[i];
    if (!slot) slot = new_metric_slot(w);
    if (!slot && !w->n_metrics) return;   /* out of memory, nothing to replace */
    if (!slot) {   /* full: the least recently updated name goes */
        slot = &w->metrics[0];
        for (size_t i = 1; i < w->n_metrics; i++)
            if (w->metrics[i].seq < slot->seq) slot = &w->metrics[i];
    }
    copy_str(slot->name, sizeof slot->name, name);
    copy_str(slot->value, sizeof slot->value, value);
    slot->seq = ++w->metric_seq;
}

/* A log whose value is a map (METRICS / SCALARS): each scalar entry becomes key.sub. */
static int log_map_value(struct worker *w, const uint8_t *p, size_t n, const char *key)
{
    struct mp_cur c, v;
    uint32_t cnt;
    struct cj_err e = {0};
    if (cj_fl_sess_open_main(p, n, &c) || mp_read_map(&c, &cnt, &e) || mp_map_find(&c, cnt, "value", &v, &e) != 1 ||
        mp_read_map(&v, &cnt, &e))
        return -1;
    int kept = 0;
    for (uint32_t i = 0; i < cnt && i < CJ_FL_MAX_METRICS; i++) {
        struct mp_val k, x;
        size_t kat = v.pos;
        if (mp_next(&v, &k, &e)) return -1;
        if (k.kind == MP_ARRAY || k.kind == MP_MAP) {   /* a container key: skip key and value */
            v.pos = kat;
            if (mp_skip(&v, &e) || mp_skip(&v, &e)) return -1;
            continue;
        }
        size_t at = v.pos;
        if (mp_next(&v, &x, &e)) return -1;
        if (x.kind == MP_ARRAY || x.kind == MP_MAP) {
            v.pos = at;
            if (mp_skip(&v, &e)) return -1;
            continue;
        }
        if (k.kind != MP_STR || k.len > CJ_CAPI_LOG_KEY_MAX || memchr(k.ptr, 0, k.len)) continue;
        struct cj_capi_value cv = {0};
        switch (x.kind) {
        case MP_UINT:
            if (x.u > INT64_MAX) { cv.type = CJ_CAPI_V_UINT; cv.u = x.u; }
            else { cv.type = CJ_CAPI_V_INT; cv.i = (int64_t)x.u; }
            break;
        case MP_INT: cv.type = CJ_CAPI_V_INT; cv.i = x.i; break;
        case MP_FLOAT: cv.type = CJ_CAPI_V_FLOAT; cv.f = x.f; break;
        case MP_BOOL: cv.type = CJ_CAPI_V_BOOL; cv.b = x.b; break;
        case MP_STR:
            cv.type = CJ_CAPI_V_STR;
            snprintf(cv.s, sizeof cv.s, "%.*s", (int)(x.len < CJ_FL_METRIC_VALUE_MAX ? x.len : CJ_FL_METRIC_VALUE_MAX),
                     (const char *)x.ptr);
            break;
        default: continue;
        }
        char name[CJ_FL_METRIC_NAME_MAX + 1], val[CJ_FL_METRIC_VALUE_MAX + 1];
        snprintf(name, sizeof name, "%s.%.*s", key, (int)k.len, (const char *)k.ptr);
        cj_capi_value_text(&cv, false, val, sizeof val);
        set_metric(w, name, val);
        kept++;
    }
    return kept;
}

int cj_fl_workerlog_on_log(void *arg, struct cj_stream_blob *b)
{
    struct cj_fl_sessions *s = arg;
    struct cj_capi_msg *m = s->m;
    size_t n;
    const uint8_t *p = cj_fl_sess_blob_bytes(b, &n);
    char reason[160], key[CJ_CAPI_LOG_KEY_MAX + 1];
    struct cj_err e = {0};
    int dec = cj_capi_decode_request(CJ_CAPI_LOG, p, n, m, &e);
    if (dec) {   /* a map value (METRICS) is not a scalar: read the ids leniently */
        m->has = 0;
        if (cj_fl_sess_body_str(p, n, "session_id", m->session_id, sizeof m->session_id))
            m->has |= CJ_CAPI_F_SESSION_ID;
    }
    struct worker *w = s->closed ? NULL : cj_fl_sess_session_of(s, b->origin, m, reason, sizeof reason);
    if (!w) {
        s->st.logs_dropped++;
        cj_log_warning("client_api: dropping LOG data from %s: %s", b->origin, s->closed ? "backend is closed" : reason);
        return 0;
    }
    w->bytes += n;
    if (dec == 0) {
        char val[CJ_FL_METRIC_VALUE_MAX + 1];
        cj_capi_value_text(&m->value, false, val, sizeof val);
        set_metric(w, m->key, val);
    } else if (!cj_fl_sess_body_str(p, n, "key", key, sizeof key) || log_map_value(w, p, n, key) < 0) {
        s->st.logs_dropped++;
        cj_log_warning("client_api: dropping LOG data from %s: %s", b->origin, e.msg);
        return 0;
    }
    s->st.logs++;
    return 0;
}
