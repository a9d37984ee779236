/* SPDX-License-Identifier: Apache-2.0 */
/* flmsg.c — the FL messages of the upstream loop (see flmsg.h). */
#include "fl/flmsg.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <msgpack.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "util/mp.h"

/* ---- reading replies ------------------------------------------------------------------ */

/* Moves a finished msgpack_sbuffer into out without copying. */
static int move_out(struct evbuffer *out, msgpack_sbuffer *sb, char *why, size_t whysz)
{
    if (mp_sbuffer_move(out, sb) == 0) return 0;
    cj_why(why, whysz, "out of memory");
    return -1;
}

/* The __headers__ map of a LOBS payload's Shareable body: *hdrs NULL when absent. */
static int open_headers(const uint8_t *payload, size_t len, const uint8_t **hdrs, size_t *hlen,
                        struct cj_fobs_headers *h, char *why, size_t whysz)
{
    struct cj_err e = { 0 };
    struct cj_lobs_section main;
    struct cj_fobs_shareable sh;
    *hdrs = NULL;
    *hlen = 0;
    memset(h, 0, sizeof *h);
    if (!payload || !len) {
        cj_why(why, whysz, "empty payload");
        return -1;
    }
    if (cj_lobs_validate(payload, len, &main, NULL, 0, NULL, &e) ||
        cj_fobs_find_shareable(main.value, main.value_len, &sh, &e)) {
        cj_why(why, whysz, "not a Shareable payload: %s", e.msg);
        return -1;
    }
    if (!sh.headers.len) return 0;
    *hdrs = main.value + sh.headers.off;
    *hlen = sh.headers.len;
    if (cj_fobs_read_headers(*hdrs, *hlen, h, &e)) {
        cj_why(why, whysz, "bad __headers__: %s", e.msg);
        return -1;
    }
    return 0;
}

/* A msgpack int or float as a double; < 0 when it is something else. */
static double number_at(const uint8_t *buf, struct cj_range sp)
{
    struct mp_cur c;
    struct mp_val v;
    if (!sp.len) return -1;
    mp_cur_init(&c, buf + sp.off, sp.len);
    if (mp_next(&c, &v, NULL)) return -1;
    if (v.kind == MP_FLOAT) return v.f >= 0 ? v.f : -1;
    if (v.kind == MP_UINT) return (double)v.u;
    return -1;
}

int cj_flmsg_read_reply(const uint8_t *payload, size_t len, struct cj_flmsg_task_reply *r, char *why, size_t whysz)
{
    struct cj_task_info info;
    struct cj_err e = { 0 };
    struct cj_fobs_headers h;
    struct cj_range mg;
    memset(r, 0, sizeof *r);
    r->wait_time = r->min_get_task_timeout = -1;
    if (cj_splice_read_task(payload, len, &info, &e)) {
        cj_why(why, whysz, "bad get_task reply: %s (at byte %zu)", e.msg, e.offset);
        return -1;
    }
    snprintf(r->task_name, sizeof r->task_name, "%s", info.task_name);
    snprintf(r->task_id, sizeof r->task_id, "%s", info.task_id);
    const uint8_t *hb = payload + info.headers.off;
    if (cj_fobs_read_headers(hb, info.headers.len, &h, &e) == 0) r->wait_time = number_at(hb, h.wait_time);
    if (cj_fobs_map_get(hb, info.headers.len, "min_get_task_timeout", &mg, &e) == 1)
        r->min_get_task_timeout = number_at(hb, mg);
    return 0;
}

int cj_flmsg_read_rc(const uint8_t *payload, size_t len, char *rc, size_t rcsz, char *why, size_t whysz)
{
    const uint8_t *hdrs;
    size_t hlen;
    struct cj_fobs_headers h;
    struct cj_err e = { 0 };
    if (open_headers(payload, len, &hdrs, &hlen, &h, why, whysz)) return -1;
    if (!hdrs || !h.rc.len) {
        snprintf(rc, rcsz, "OK");
        return 0;
    }
    if (cj_fobs_span_str(hdrs, h.rc, rc, rcsz, &e)) {
        cj_why(why, whysz, "bad __rc__: %s", e.msg);
        return -1;
    }
    return 0;
}

/* ---- building requests and replies ------------------------------------------------------ */

int cj_flmsg_get_task_request(struct evbuffer *out, const char *site, const char *job_id, const char *last_task_id,
                              char *why, size_t whysz)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    int rc = cj_build_get_task_request(&sb, site, job_id, last_task_id, &e);
    if (rc) cj_why(why, whysz, "get_task request: %s", e.msg);
    else rc = move_out(out, &sb, why, whysz);
    msgpack_sbuffer_destroy(&sb);
    return rc ? -1 : 0;
}

int cj_flmsg_aux_request(struct evbuffer *out, const char *topic, const char *server_task_id, const char *site,
                         const char *job_id, char *why, size_t whysz)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    int rc = cj_build_aux_request(&sb, topic, server_task_id, site, job_id, &e);
    if (rc) cj_why(why, whysz, "aux request %s: %s", topic ? topic : "(null)", e.msg);
    else rc = move_out(out, &sb, why, whysz);
    msgpack_sbuffer_destroy(&sb);
    return rc ? -1 : 0;
}

int cj_flmsg_aux_reply(struct evbuffer *out, const uint8_t *req, size_t req_len, const char *rc, const char *site,
                       const char *job_id, char *why, size_t whysz)
{
    const uint8_t *hdrs = NULL;
    size_t hlen = 0;
    struct cj_fobs_headers h;
    memset(&h, 0, sizeof h);
    if (req && req_len && open_headers(req, req_len, &hdrs, &hlen, &h, NULL, 0)) hdrs = NULL;
    bool jar = hdrs && h.cookie_jar.len;
    if (!rc || !site || !job_id) {
        cj_why(why, whysz, "aux reply: rc, site and job_id are required");
        return -1;
    }
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct cj_err e = { 0 };
    size_t hdr;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int r = cj_lobs_begin_main(&sb, &hdr, &e);
    if (!r && (cj_fobs_write_shareable_begin(&pk, 1) || cj_fobs_write_str(&pk, CJ_FOBS_HEADERS_KEY) ||
               msgpack_pack_map(&pk, jar ? 3 : 2) || cj_fobs_write_str(&pk, "__rc__") || cj_fobs_write_str(&pk, rc)))
        r = -1;
    if (!r && jar &&
        (cj_fobs_write_str(&pk, "__cookie_jar__") ||
         msgpack_sbuffer_write(&sb, (const char *)hdrs + h.cookie_jar.off, h.cookie_jar.len)))
        r = -1;
    if (!r && (cj_fobs_write_str(&pk, "__peer_ctx__") || cj_fobs_write_flcontext(&pk, site, job_id) ||
               cj_fobs_write_shareable_end(&pk)))
        r = -1;
    if (!r) {
        cj_lobs_end_main(&sb, hdr);
        r = move_out(out, &sb, why, whysz);
    } else {
        cj_why(why, whysz, "aux reply: out of memory");
    }
    msgpack_sbuffer_destroy(&sb);
    return r ? -1 : 0;
}

int cj_flmsg_submit_payload(struct evbuffer *out, const struct cj_task *t, const uint8_t *result, size_t len,
                            const char *msg_root_id, const char *site, const char *job_id, char *why, size_t whysz)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    /* NULL name and id: raw copies of the task's own task_name / __task_id__ values */
    int rc = cj_splice_submit_update(result, len, t->headers, t->headers_len, NULL, NULL, msg_root_id, site, job_id,
                                     &sb, &e);
    if (rc) cj_why(why, whysz, "submit_update splice: %s (at byte %zu)", e.msg, e.offset);
    else rc = move_out(out, &sb, why, whysz);
    msgpack_sbuffer_destroy(&sb);
    return rc ? -1 : 0;
}

int cj_flmsg_failed_payload(struct evbuffer *out, const struct cj_task *t, const char *rc_name, const char *msg_root_id,
                            const char *site, const char *job_id, char *why, size_t whysz)
{
    msgpack_sbuffer sb;
    struct cj_err e = { 0 };
    msgpack_sbuffer_init(&sb);
    int rc = cj_splice_failed_result(rc_name, t->headers, t->headers_len, NULL, NULL, msg_root_id, site, job_id, &sb,
                                     &e);
    if (rc) cj_why(why, whysz, "failed result: %s", e.msg);
    else rc = move_out(out, &sb, why, whysz);
    msgpack_sbuffer_destroy(&sb);
    return rc ? -1 : 0;
}
