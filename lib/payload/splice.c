/* SPDX-License-Identifier: Apache-2.0 */
/* splice.c — TASK_READY / SUBMIT_UPDATE splices and small payload builders (see splice.h). */
#include "payload/splice.h"

#include <string.h>

#include "payload/lobs.h"
#include "util/mp.h"

#define NOMEM(err) cj_fail(err, CJ_E_NOMEM, 0, "splice: out of memory")

/* Errors from a sub-buffer are reported at container offsets. */
static int shifted(int rc, struct cj_err *err, size_t delta)
{
    if (rc < 0 && err) err->offset += delta;
    return rc;
}

static int put(msgpack_sbuffer *sb, const void *p, size_t n, struct cj_err *err)
{
    if (n && msgpack_sbuffer_write(sb, (const char *)p, n) != 0) return NOMEM(err);
    return 0;
}

/* Leaves out as it was before a failed build. */
static int undo(msgpack_sbuffer *out, size_t start, int rc)
{
    if (rc < 0) out->size = start;
    return rc;
}

/* Validates a container and hands back its MAIN section and datum count. */
static int open_payload(const uint8_t *p, size_t len, struct cj_lobs_section *m, size_t *nd, struct cj_err *err)
{
    if (!p) return cj_fail(err, CJ_E_TRUNCATED, 0, "splice: no payload");
    return cj_lobs_validate(p, len, m, NULL, 0, nd, err);
}

/* ---- TASK_READY ------------------------------------------------------------- */

static int read_task(const uint8_t *payload, size_t len, struct cj_task_info *info, struct cj_lobs_section *mp,
                     struct cj_err *err)
{
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    memset(info, 0, sizeof *info);
    int rc = open_payload(payload, len, &m, &info->n_datums, err);
    if (rc) return rc;
    *mp = m;
    info->main_len = m.value_len;
    if ((rc = shifted(cj_fobs_find_shareable(m.value, m.value_len, &sh, err), err, CJ_LOBS_HDR_LEN))) return rc;
    if (!sh.headers.len) return cj_fail(err, CJ_E_MISSING, CJ_LOBS_HDR_LEN, "splice: task Shareable has no __headers__");
    const uint8_t *hb = m.value + sh.headers.off;
    size_t hoff = CJ_LOBS_HDR_LEN + sh.headers.off;
    if ((rc = shifted(cj_fobs_read_headers(hb, sh.headers.len, &h, err), err, hoff))) return rc;
    if (!h.task_name.len) return cj_fail(err, CJ_E_MISSING, hoff, "splice: task has no task_name header");
    rc = cj_fobs_span_str(hb, h.task_name, info->task_name, sizeof info->task_name, err);
    if (!rc && h.task_id.len) rc = cj_fobs_span_str(hb, h.task_id, info->task_id, sizeof info->task_id, err);
    if ((rc = shifted(rc, err, hoff))) return rc;
    info->headers.off = hoff;
    info->headers.len = sh.headers.len;
    return 0;
}

int cj_splice_read_task(const uint8_t *payload, size_t len, struct cj_task_info *info, struct cj_err *err)
{
    struct cj_lobs_section m;
    return read_task(payload, len, info, &m, err);
}

/* The task body, with or without the job_id / site_name headers. */
static int write_model(const struct cj_lobs_section *m, const char *job_id, const char *site, unsigned flags,
                       msgpack_sbuffer *out, struct cj_err *err)
{
    if (flags & CJ_SPLICE_NO_HEADER_EDIT) return put(out, m->value, m->value_len, err);
    if (!job_id || !site) return cj_fail(err, CJ_E_INVALID, 0, "splice: job_id and site are required");
    msgpack_sbuffer vals;
    msgpack_packer pk;
    msgpack_sbuffer_init(&vals);
    msgpack_packer_init(&pk, &vals, msgpack_sbuffer_write);
    int rc = 0;
    if (cj_fobs_write_str(&pk, job_id)) rc = NOMEM(err);
    size_t split = vals.size;
    if (!rc && cj_fobs_write_str(&pk, site)) rc = NOMEM(err);
    if (!rc) {
        const uint8_t *v = (const uint8_t *)vals.data;
        struct cj_fobs_kv kv[2] = {{"job_id", v, split}, {"site_name", v + split, vals.size - split}};
        rc = shifted(cj_fobs_set_headers(m->value, m->value_len, kv, 2, out, err), err, CJ_LOBS_HDR_LEN);
    }
    msgpack_sbuffer_destroy(&vals);
    return rc;
}

static int task_ready(const uint8_t *payload, size_t len, const char *session_id, const char *task_id,
                      const char *job_id, const char *site, unsigned flags, msgpack_sbuffer *out,
                      struct cj_task_info *info, struct cj_err *err)
{
    struct cj_lobs_section m;
    size_t hdr;
    int rc = read_task(payload, len, info, &m, err);
    if (rc) return rc;
    if (!session_id || !task_id) return cj_fail(err, CJ_E_INVALID, 0, "splice: session_id and task_id are required");
    if ((rc = cj_lobs_begin_main(out, &hdr, err))) return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 4) || cj_fobs_write_str(&pk, "session_id") || cj_fobs_write_str(&pk, session_id) ||
        cj_fobs_write_str(&pk, "task_id") || cj_fobs_write_str(&pk, task_id) ||
        cj_fobs_write_str(&pk, "task_name") || cj_fobs_write_str(&pk, info->task_name) ||
        cj_fobs_write_str(&pk, "model"))
        return NOMEM(err);
    if ((rc = write_model(&m, job_id, site, flags, out, err))) return rc;
    cj_lobs_end_main(out, hdr);
    info->main_len = out->size - hdr - CJ_LOBS_HDR_LEN;
    return put(out, payload + m.total, len - m.total, err);   /* the datums, verbatim */
}

int cj_splice_task_ready(const uint8_t *payload, size_t len, const char *session_id, const char *task_id,
                         const char *job_id, const char *site, unsigned flags, msgpack_sbuffer *out,
                         struct cj_task_info *info, struct cj_err *err)
{
    struct cj_task_info local;
    size_t start = out->size;
    return undo(out, start, task_ready(payload, len, session_id, task_id, job_id, site, flags, out,
                                       info ? info : &local, err));
}

/* ---- a release trainer's pipe (releases.md §4.4) ------------------------------ */

static int task_body(const uint8_t *payload, size_t len, const char *job_id, const char *site, msgpack_sbuffer *out,
                     struct cj_task_info *info, struct cj_err *err)
{
    struct cj_lobs_section m;
    size_t hdr;
    int rc = read_task(payload, len, info, &m, err);
    if (rc || (rc = cj_lobs_begin_main(out, &hdr, err))) return rc;
    if ((rc = write_model(&m, job_id, site, 0, out, err))) return rc;
    cj_lobs_end_main(out, hdr);
    info->main_len = out->size - hdr - CJ_LOBS_HDR_LEN;
    return put(out, payload + m.total, len - m.total, err);
}

int cj_splice_task_body(const uint8_t *payload, size_t len, const char *job_id, const char *site,
                        msgpack_sbuffer *out, struct cj_task_info *info, struct cj_err *err)
{
    struct cj_task_info local;
    size_t start = out->size;
    return undo(out, start, task_body(payload, len, job_id, site, out, info ? info : &local, err));
}

static int wrap_result(const uint8_t *payload, size_t len, msgpack_sbuffer *out, struct cj_err *err)
{
    struct cj_lobs_section m;
    size_t hdr;
    int rc = open_payload(payload, len, &m, NULL, err);
    if (rc || (rc = cj_lobs_begin_main(out, &hdr, err))) return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 1) || cj_fobs_write_str(&pk, "result")) return NOMEM(err);
    if ((rc = put(out, m.value, m.value_len, err))) return rc;
    cj_lobs_end_main(out, hdr);
    return put(out, payload + m.total, len - m.total, err);
}

int cj_splice_wrap_result(const uint8_t *payload, size_t len, msgpack_sbuffer *out, struct cj_err *err)
{
    size_t start = out->size;
    return undo(out, start, wrap_result(payload, len, out, err));
}

/* ---- SUBMIT_UPDATE ---------------------------------------------------------- */

/* The task's header map H, from a raw map or a whole task payload. */
static int task_header_map(const uint8_t *th, size_t len, const uint8_t **map, size_t *map_len, struct cj_err *err)
{
    *map = NULL;
    *map_len = 0;
    if (!th || !len) return 0;
    if (th[0] == CJ_LOBS_MAIN) {   /* a whole payload: a msgpack map never starts with 0x64 */
        struct cj_lobs_section m;
        struct cj_fobs_shareable sh;
        int rc = open_payload(th, len, &m, NULL, err);
        if (rc || (rc = shifted(cj_fobs_find_shareable(m.value, m.value_len, &sh, err), err, CJ_LOBS_HDR_LEN)))
            return rc;
        if (sh.headers.len) {   /* a task without __headers__ has no H */
            *map = m.value + sh.headers.off;
            *map_len = sh.headers.len;
        }
        return 0;
    }
    struct mp_cur c;
    mp_cur_init(&c, th, len);
    int rc = mp_skip(&c, err);
    if (rc) return rc;
    if (c.pos != len || th[0] < 0x80 || (th[0] > 0x8f && th[0] != 0xde && th[0] != 0xdf))
        return cj_fail(err, CJ_E_INVALID, 0, "splice: task headers are not exactly one map");
    *map = th;
    *map_len = len;
    return 0;
}

/* Scratch values for the headers being set; kv pointers are fixed up at the end
 * because the scratch buffer may move while it grows. */
struct hdrset {
    msgpack_sbuffer vals;
    msgpack_packer pk;
    struct cj_fobs_kv kv[8];
    size_t off[8];      /* (size_t)-1: kv[i].val already points at the task's bytes */
    size_t n;
};

static void add_raw(struct hdrset *s, const char *key, const uint8_t *p, size_t n)
{
    s->kv[s->n] = (struct cj_fobs_kv){key, p, n};
    s->off[s->n++] = (size_t)-1;
}

/* Starts a packed value: the caller packs it next, then calls end_packed. */
static void begin_packed(struct hdrset *s, const char *key)
{
    s->kv[s->n] = (struct cj_fobs_kv){key, NULL, 0};
    s->off[s->n] = s->vals.size;
}

static void end_packed(struct hdrset *s)
{
    s->kv[s->n].val_len = s->vals.size - s->off[s->n];
    s->n++;
}

static void fix_pointers(struct hdrset *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->off[i] != (size_t)-1) s->kv[i].val = (const uint8_t *)s->vals.data + s->off[i];
}

/* Fills s with the §7.3 headers, in order.  H is the task's header map (may be NULL). */
static int submit_headers(struct hdrset *s, const uint8_t *H, size_t hlen, const char *task_name,
                          const char *server_task_id, const char *msg_root_id, const char *site,
                          const char *job_id, struct cj_err *err)
{
    struct cj_fobs_headers h;
    memset(&h, 0, sizeof h);
    int rc;
    if (H && (rc = cj_fobs_read_headers(H, hlen, &h, err))) return rc;
    if (!msg_root_id || !site || !job_id)
        return cj_fail(err, CJ_E_INVALID, 0, "splice: msg_root_id, site and job_id are required");
    if (!task_name && !h.task_name.len) return cj_fail(err, CJ_E_MISSING, 0, "splice: no task name (task has no task_name)");
    if (!server_task_id && !h.task_id.len) return cj_fail(err, CJ_E_MISSING, 0, "splice: no task id (task has no __task_id__)");
    if (h.current_round.len) add_raw(s, "current_round", H + h.current_round.off, h.current_round.len);
    if (h.cookie_jar.len) add_raw(s, "__cookie_jar__", H + h.cookie_jar.off, h.cookie_jar.len);
    int bad = 0;
    if (task_name) {
        begin_packed(s, "__task_name__");
        bad |= cj_fobs_write_str(&s->pk, task_name);
        end_packed(s);
    } else {
        add_raw(s, "__task_name__", H + h.task_name.off, h.task_name.len);
    }
    if (server_task_id) {
        begin_packed(s, "__task_id__");
        bad |= cj_fobs_write_str(&s->pk, server_task_id);
        end_packed(s);
    } else {
        add_raw(s, "__task_id__", H + h.task_id.off, h.task_id.len);
    }
    begin_packed(s, "__msg_root_id__");
    bad |= cj_fobs_write_str(&s->pk, msg_root_id);
    end_packed(s);
    begin_packed(s, "__peer_ctx__");
    bad |= cj_fobs_write_flcontext(&s->pk, site, job_id);
    end_packed(s);
    if (bad) return NOMEM(err);
    fix_pointers(s);
    return 0;
}

/* out += 64 00 <len V'> V' tail, with V' = V with the submit headers set. */
static int write_submit(const uint8_t *V, size_t vlen, size_t v_off, const uint8_t *tail, size_t tail_len,
                        const uint8_t *task_headers, size_t th_len, const char *task_name,
                        const char *server_task_id, const char *msg_root_id, const char *site,
                        const char *job_id, msgpack_sbuffer *out, struct cj_err *err)
{
    const uint8_t *H;
    size_t hlen, hdr;
    struct hdrset s;
    memset(&s, 0, sizeof s);
    msgpack_sbuffer_init(&s.vals);
    msgpack_packer_init(&s.pk, &s.vals, msgpack_sbuffer_write);
    int rc = task_header_map(task_headers, th_len, &H, &hlen, err);
    if (!rc) rc = submit_headers(&s, H, hlen, task_name, server_task_id, msg_root_id, site, job_id, err);
    if (!rc) rc = cj_lobs_begin_main(out, &hdr, err);
    if (!rc) rc = shifted(cj_fobs_set_headers(V, vlen, s.kv, s.n, out, err), err, v_off);
    if (!rc) {
        cj_lobs_end_main(out, hdr);
        rc = put(out, tail, tail_len, err);
    }
    msgpack_sbuffer_destroy(&s.vals);
    return rc;
}

int cj_splice_submit_update(const uint8_t *result, size_t len, const uint8_t *task_headers, size_t task_headers_len,
                            const char *task_name, const char *server_task_id, const char *msg_root_id,
                            const char *site, const char *job_id, msgpack_sbuffer *out, struct cj_err *err)
{
    struct cj_lobs_section m;
    struct cj_range v;
    size_t start = out->size;
    int rc = open_payload(result, len, &m, NULL, err);
    if (rc) return rc;
    rc = shifted(cj_fobs_map_get(m.value, m.value_len, "result", &v, err), err, CJ_LOBS_HDR_LEN);
    if (rc < 0) return rc;
    if (rc == 0) return cj_fail(err, CJ_E_MISSING, CJ_LOBS_HDR_LEN, "splice: result_ready body has no \"result\"");
    rc = write_submit(m.value + v.off, v.len, CJ_LOBS_HDR_LEN + v.off, result + m.total, len - m.total,
                      task_headers, task_headers_len, task_name, server_task_id, msg_root_id, site, job_id, out, err);
    return undo(out, start, rc);
}

int cj_splice_failed_result(const char *rc_name, const uint8_t *task_headers, size_t task_headers_len,
                            const char *task_name, const char *server_task_id, const char *msg_root_id,
                            const char *site, const char *job_id, msgpack_sbuffer *out, struct cj_err *err)
{
    static const char *const forbidden[] = {"RUN_MISMATCH", "TASK_UNKNOWN", "UNSAFE_JOB"};
    if (!rc_name || !*rc_name) return cj_fail(err, CJ_E_INVALID, 0, "splice: no return code");
    for (size_t i = 0; i < sizeof forbidden / sizeof *forbidden; i++)
        if (strcmp(rc_name, forbidden[i]) == 0)
            return cj_fail(err, CJ_E_INVALID, 0, "splice: refusing to send %s (the server would abort the job)", rc_name);
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    size_t start = out->size;
    int rc = 0;
    if (cj_fobs_write_shareable_begin(&pk, 1) || cj_fobs_write_str(&pk, CJ_FOBS_HEADERS_KEY) ||
        msgpack_pack_map(&pk, 1) || cj_fobs_write_str(&pk, "__rc__") || cj_fobs_write_str(&pk, rc_name) ||
        cj_fobs_write_shareable_end(&pk))
        rc = NOMEM(err);
    if (!rc)
        rc = write_submit((const uint8_t *)body.data, body.size, 0, NULL, 0, task_headers, task_headers_len,
                          task_name, server_task_id, msg_root_id, site, job_id, out, err);
    msgpack_sbuffer_destroy(&body);
    return undo(out, start, rc);
}

/* ---- small payloads ----------------------------------------------------------- */

/* Writes a whole payload: MAIN header, Shareable{__headers__: <n_headers entries
 * written by fill>}, no datums. */
typedef int (*fill_fn)(msgpack_packer *pk, const char *const *a);

static int build_shareable_payload(msgpack_sbuffer *out, size_t n_headers, fill_fn fill, const char *const *a,
                                   struct cj_err *err)
{
    size_t start = out->size, hdr;
    int rc = cj_lobs_begin_main(out, &hdr, err);
    if (rc) return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (cj_fobs_write_shareable_begin(&pk, 1) || cj_fobs_write_str(&pk, CJ_FOBS_HEADERS_KEY) ||
        msgpack_pack_map(&pk, n_headers) || fill(&pk, a) || cj_fobs_write_shareable_end(&pk))
        return undo(out, start, NOMEM(err));
    cj_lobs_end_main(out, hdr);
    return 0;
}

/* a = {site, job, last_task_id or NULL} */
static int fill_get_task(msgpack_packer *pk, const char *const *a)
{
    if (cj_fobs_write_str(pk, "__peer_ctx__") || cj_fobs_write_flcontext(pk, a[0], a[1])) return -1;
    if (a[2] && (cj_fobs_write_str(pk, "last_task_id") || cj_fobs_write_str(pk, a[2]))) return -1;
    return 0;
}

int cj_build_get_task_request(msgpack_sbuffer *out, const char *site, const char *job_id,
                              const char *last_task_id, struct cj_err *err)
{
    if (!site || !job_id) return cj_fail(err, CJ_E_INVALID, 0, "splice: site and job_id are required");
    const char *a[3] = {site, job_id, last_task_id};
    return build_shareable_payload(out, last_task_id ? 2 : 1, fill_get_task, a, err);
}

/* a = {topic, task_id or NULL, site, job} */
static int fill_aux(msgpack_packer *pk, const char *const *a)
{
    if (a[1] && (cj_fobs_write_str(pk, "__task_id__") || cj_fobs_write_str(pk, a[1]))) return -1;
    if (cj_fobs_write_str(pk, "__topic__") || cj_fobs_write_str(pk, a[0]) ||
        cj_fobs_write_str(pk, "__peer_props__") || msgpack_pack_map(pk, 2) ||
        cj_fobs_write_str(pk, "__identity_name__") || cj_fobs_write_str(pk, a[2]) ||
        cj_fobs_write_str(pk, "__run_num__") || cj_fobs_write_str(pk, a[3]))
        return -1;
    return 0;
}

int cj_build_aux_request(msgpack_sbuffer *out, const char *topic, const char *task_id, const char *site,
                         const char *job_id, struct cj_err *err)
{
    if (!topic || !site || !job_id) return cj_fail(err, CJ_E_INVALID, 0, "splice: topic, site and job_id are required");
    const char *a[4] = {topic, task_id, site, job_id};
    return build_shareable_payload(out, task_id ? 3 : 2, fill_aux, a, err);
}
