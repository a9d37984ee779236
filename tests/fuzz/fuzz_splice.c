/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_splice.c — TASK_READY and SUBMIT_UPDATE splices on arbitrary payloads.
 *
 * Input: a payload, used as a get_task reply and as a result_ready payload.
 * Invariants checked:
 *  - a failed splice leaves the output buffer as it was;
 *  - every splice output validates as a LOBS container, its datum sections are
 *    byte-identical to the input's (same tail bytes, same ids), and its refs
 *    list the same as the input's;
 *  - TASK_READY: the envelope carries session_id/task_id/task_name and a model
 *    Shareable with job_id/site_name set; the envelope-only variant holds the
 *    input body verbatim right after the envelope;
 *  - SUBMIT_UPDATE of {"result": <task body>} built from a spliceable task
 *    always succeeds and carries __task_name__, __msg_root_id__, __peer_ctx__,
 *    __task_id__ (and the cookie jar when the task had one);
 *  - the same payload read as a get_task reply (cj_flmsg_read_reply) and as an
 *    aux reply's __rc__ (cj_flmsg_read_rc): 0 with NUL-terminated strings that
 *    fit their buffers, or -1 with a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "fl/flmsg.h"
#include "payload/splice.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

#define ROOT "11111111-2222-4333-8444-00000000d00d"

/* out is a valid container whose datums equal those of in (both valid). */
static void check_datums(const uint8_t *in, size_t in_len, const uint8_t *out, size_t out_len,
                         struct cj_lobs_section *om)
{
    struct cj_lobs_section im;
    size_t ni, no;
    struct cj_err err;
    CHECK(cj_lobs_validate(in, in_len, &im, NULL, 0, &ni, &err) == 0);
    CHECK(cj_lobs_validate(out, out_len, om, NULL, 0, &no, &err) == 0);
    CHECK(ni == no);
    CHECK(in_len - im.total == out_len - om->total);
    CHECK(memcmp(in + im.total, out + om->total, in_len - im.total) == 0);

    struct cj_fobs_ref a[2], b[2];
    size_t na, nb;
    int ra = cj_fobs_list_refs(in, in_len, a, 2, &na, &err);
    int rb = cj_fobs_list_refs(out, out_len, b, 2, &nb, &err);
    CHECK((ra == 0) == (rb == 0));
    if (ra == 0) {
        CHECK(na == nb);
        for (size_t i = 0; i < na && i < 2; i++)
            CHECK(a[i].dot == b[i].dot && !strcmp(a[i].fqcn, b[i].fqcn) && !strcmp(a[i].ref_id, b[i].ref_id) &&
                  !memcmp(a[i].datum_id, b[i].datum_id, 16));
    }
}

static void check_str(const uint8_t *map, size_t len, const char *key, const char *want)
{
    struct cj_range v;
    struct cj_err err;
    char buf[CJ_SPLICE_NAME_MAX + 1];
    CHECK(cj_fobs_map_get(map, len, key, &v, &err) == 1);
    CHECK(cj_fobs_span_str(map, v, buf, sizeof buf, &err) == 0);
    CHECK(strcmp(buf, want) == 0);
}

static int task_ready(const uint8_t *data, size_t size, struct cj_task_info *info)
{
    msgpack_sbuffer out;
    struct cj_err err;
    struct cj_lobs_section om, im;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "pre", 3);
    int rc = cj_splice_task_ready(data, size, "sess", "0123456789abcdef0123456789abcdef", "job-9", "site-9", 0, &out,
                                  info, &err);
    if (rc) {
        CHECK(rc < 0 && out.size == 3);
        msgpack_sbuffer_destroy(&out);
        return rc;
    }
    const uint8_t *o = (const uint8_t *)out.data + 3;
    size_t olen = out.size - 3;
    check_datums(data, size, o, olen, &om);
    CHECK(om.value_len == info->main_len);
    check_str(om.value, om.value_len, "session_id", "sess");
    check_str(om.value, om.value_len, "task_name", info->task_name);
    struct cj_range model;
    struct cj_fobs_shareable sh;
    CHECK(cj_fobs_map_get(om.value, om.value_len, "model", &model, &err) == 1);
    CHECK(cj_fobs_find_shareable(om.value + model.off, model.len, &sh, &err) == 0);
    const uint8_t *hb = om.value + model.off + sh.headers.off;
    check_str(hb, sh.headers.len, "job_id", "job-9");
    check_str(hb, sh.headers.len, "site_name", "site-9");

    /* envelope only: the body follows the envelope verbatim */
    msgpack_sbuffer_clear(&out);
    CHECK(cj_splice_task_ready(data, size, "s", "t", NULL, NULL, CJ_SPLICE_NO_HEADER_EDIT, &out, NULL, &err) == 0);
    CHECK(cj_lobs_validate(data, size, &im, NULL, 0, NULL, &err) == 0);
    check_datums(data, size, (uint8_t *)out.data, out.size, &om);
    CHECK(om.value_len >= im.value_len);
    CHECK(memcmp(om.value + om.value_len - im.value_len, im.value, im.value_len) == 0);
    msgpack_sbuffer_destroy(&out);
    return 0;
}

/* Submits `result` against the task headers th; checks the output when it works. */
static int submit(const uint8_t *result, size_t len, const uint8_t *th, size_t th_len, const char *name,
                  const char *id, int cookie_expected)
{
    msgpack_sbuffer out;
    struct cj_err err;
    struct cj_lobs_section om;
    msgpack_sbuffer_init(&out);
    int rc = cj_splice_submit_update(result, len, th, th_len, name, id, ROOT, "site-9", "job-9", &out, &err);
    if (rc) {
        CHECK(rc < 0 && out.size == 0);
        msgpack_sbuffer_destroy(&out);
        return rc;
    }
    check_datums(result, len, (uint8_t *)out.data, out.size, &om);
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    struct cj_range v;
    CHECK(cj_fobs_find_shareable(om.value, om.value_len, &sh, &err) == 0);
    const uint8_t *hb = om.value + sh.headers.off;
    CHECK(cj_fobs_read_headers(hb, sh.headers.len, &h, &err) == 0);
    check_str(hb, sh.headers.len, "__msg_root_id__", ROOT);
    if (name) check_str(hb, sh.headers.len, "__task_name__", name);
    else CHECK(cj_fobs_map_get(hb, sh.headers.len, "__task_name__", &v, &err) == 1);
    if (id) check_str(hb, sh.headers.len, "__task_id__", id);
    else CHECK(h.task_id.len > 0);
    CHECK(h.peer_ctx.len > 0);
    if (cookie_expected) CHECK(h.cookie_jar.len > 0);
    msgpack_sbuffer_destroy(&out);
    return 0;
}

/* {"result": <the task's MAIN body>} + the task's datums. */
static void submit_derived(const uint8_t *data, size_t size, const struct cj_task_info *info)
{
    struct cj_lobs_section m;
    struct cj_err err;
    struct cj_fobs_headers h;
    CHECK(cj_lobs_validate(data, size, &m, NULL, 0, NULL, &err) == 0);
    CHECK(cj_fobs_read_headers(data + info->headers.off, info->headers.len, &h, &err) == 0);
    msgpack_sbuffer r;
    msgpack_packer pk;
    size_t off;
    msgpack_sbuffer_init(&r);
    msgpack_packer_init(&pk, &r, msgpack_sbuffer_write);
    CHECK(cj_lobs_begin_main(&r, &off, &err) == 0);
    msgpack_pack_map(&pk, 1);
    cj_fobs_write_str(&pk, "result");
    msgpack_sbuffer_write(&r, (const char *)m.value, m.value_len);
    cj_lobs_end_main(&r, off);
    msgpack_sbuffer_write(&r, (const char *)data + m.total, size - m.total);
    /* headers as the whole task payload, then as the kept raw map */
    CHECK(submit((uint8_t *)r.data, r.size, data, size, info->task_name, "srv-id", h.cookie_jar.len > 0) == 0);
    int rc = submit((uint8_t *)r.data, r.size, data + info->headers.off, info->headers.len, NULL, NULL,
                    h.cookie_jar.len > 0);
    CHECK((rc == 0) == (h.task_id.len > 0));
    msgpack_sbuffer_destroy(&r);
}

/* The FL layer's readers of server replies, on the same bytes. */
static void task_readers(const uint8_t *data, size_t size)
{
    struct cj_flmsg_task_reply r;
    char why[256], rc[64];
    why[0] = '\0';
    if (cj_flmsg_read_reply(data, size, &r, why, sizeof why) == 0) {
        CHECK(strlen(r.task_name) < sizeof r.task_name && strlen(r.task_id) < sizeof r.task_id);
        CHECK(r.wait_time == -1 || r.wait_time >= 0);   /* absent, not a number or negative: -1 */
        CHECK(r.min_get_task_timeout == -1 || r.min_get_task_timeout >= 0);
    } else {
        CHECK(why[0] && strlen(why) < sizeof why);
    }
    why[0] = '\0';
    if (cj_flmsg_read_rc(data, size, rc, sizeof rc, why, sizeof why) == 0) CHECK(strlen(rc) < sizeof rc);
    else CHECK(why[0] && strlen(why) < sizeof why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    task_readers(data, size);
    struct cj_task_info info;
    if (task_ready(data, size, &info) == 0) submit_derived(data, size, &info);
    /* the input as a result_ready payload, against a fixed task header map */
    static const uint8_t th[] = {0x82, 0xa9, 't', 'a', 's', 'k', '_', 'n', 'a', 'm', 'e', 0xa1, 'T',
                                 0xab, '_', '_', 't', 'a', 's', 'k', '_', 'i', 'd', '_', '_', 0xa1, 'I'};
    submit(data, size, th, sizeof th, NULL, NULL, 0);
    submit(data, size, NULL, 0, "T", "I", 0);
    return 0;
}
