/* SPDX-License-Identifier: Apache-2.0 */
/* test_splice.c — TASK_READY and SUBMIT_UPDATE splices (vectors 07, 12, 13), the
 * small payload builders (14, 15), hostile inputs, and decode-back checks. */
#include "testutil.h"
#include "mpbody.h"
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "util/mp.h"

#define V00 "00_min_dict_one_array_via_downloader.bin"
#define V01 "01_builtin_wrappers.bin"
#define V02 "02_server_task_shareable_via_downloader.bin"
#define V07 "07_relay_spliced_task_ready.bin"
#define V08 "08_large_bytes_blob_datum.bin"
#define V09 "09_trainer_result_ready_flmodel.bin"
#define V12 "12_relay_task_ready_full_splice.bin"
#define V13 "13_relay_submit_update_splice.bin"
#define V14 "14_get_task_request.bin"
#define V15 "15_aux_task_check_request.bin"
#define V16 "16_get_task_reply_try_again.bin"

#define ROOT_ID "11111111-2222-4333-8444-00000000d00d"

static void assert_same_refs(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    struct cj_fobs_ref ra[4], rb[4];
    size_t na, nb;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_list_refs(a, alen, ra, 4, &na, &e), 0);
    assert_int_equal(cj_fobs_list_refs(b, blen, rb, 4, &nb, &e), 0);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na && i < 4; i++) {
        assert_int_equal(ra[i].dot, rb[i].dot);
        assert_string_equal(ra[i].fqcn, rb[i].fqcn);
        assert_string_equal(ra[i].ref_id, rb[i].ref_id);
        assert_memory_equal(ra[i].datum_id, rb[i].datum_id, 16);
    }
}

/* The datum sections of two containers are byte-identical. */
static void assert_same_datums(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    struct cj_lobs_section ma, mb;
    size_t na, nb;
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(a, alen, &ma, NULL, 0, &na, &e), 0);
    assert_int_equal(cj_lobs_validate(b, blen, &mb, NULL, 0, &nb, &e), 0);
    assert_int_equal(na, nb);
    assert_int_equal(alen - ma.total, blen - mb.total);
    assert_memory_equal(a + ma.total, b + mb.total, alen - ma.total);
}

/* ---- TASK_READY ------------------------------------------------------------- */

static void test_task_ready_v07(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = tu_read_vector(V02, &len);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_task_info info;
    struct cj_err e = {0};
    assert_int_equal(cj_splice_task_ready(p, len, "sess-1", "a1b2c3", NULL, NULL, CJ_SPLICE_NO_HEADER_EDIT, &out,
                                          &info, &e), 0);
    assert_sb_is(&out, V07);
    assert_string_equal(info.task_name, "train");
    assert_string_equal(info.task_id, "9b2c0c1e-task");
    assert_int_equal(info.n_datums, 1);
    assert_int_equal(info.main_len, 1021);
    assert_int_equal(p[info.headers.off], 0x85);
    /* the datum moved from 975 to 1031, unchanged */
    assert_memory_equal(out.data + 1031, p + 975, len - 975);
    /* the original body is present verbatim */
    assert_non_null(memmem(out.data, out.size, p + 10, 965));
    assert_same_refs(p, len, (uint8_t *)out.data, out.size);
    msgpack_sbuffer_destroy(&out);
    free(p);
}

static void test_task_ready_v12(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = tu_read_vector(V02, &len);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_task_info info;
    struct cj_err e = {0};
    assert_int_equal(cj_splice_task_ready(p, len, "5e55104d0c1e4c7e9a3f00000000a001", "7a5c0de0b1e54f0e8d2c00000000b002",
                                          "job-7f3a", "site-1", 0, &out, &info, &e), 0);
    assert_sb_is(&out, V12);
    assert_int_equal(info.main_len, 1108);

    /* decode it back with our own walker */
    const uint8_t *o = (const uint8_t *)out.data;
    struct cj_lobs_section m;
    size_t nd;
    assert_int_equal(cj_lobs_validate(o, out.size, &m, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, 1);
    assert_same_refs(p, len, o, out.size);
    assert_same_datums(p, len, o, out.size);
    struct cj_range sp;
    assert_int_equal(cj_fobs_map_get(m.value, m.value_len, "model", &sp, &e), 1);
    const uint8_t *model = m.value + sp.off;
    struct cj_fobs_shareable sh;
    assert_int_equal(cj_fobs_find_shareable(model, sp.len, &sh, &e), 0);
    assert_int_equal(sh.headers_n, 7);
    struct cj_fobs_ref_counts c0, c1;
    assert_int_equal(cj_fobs_count_refs(p + 10, 965, &c0, &e), 0);
    assert_int_equal(cj_fobs_count_refs(model, sp.len, &c1, &e), 0);
    assert_memory_equal(&c0, &c1, sizeof c0);
    /* everything but the headers map is copied verbatim: the bytes before the
     * headers' count byte, the old entries, and everything after them */
    struct cj_fobs_shareable sh0;
    assert_int_equal(cj_fobs_find_shareable(p + 10, 965, &sh0, &e), 0);
    size_t hs = 10 + sh0.headers.off, he = hs + sh0.headers.len;
    assert_non_null(memmem(o, out.size, p + 10, hs - 10));
    assert_non_null(memmem(o, out.size, p + hs + 1, he - hs - 1));
    assert_non_null(memmem(o, out.size, p + he, 975 - he));
    msgpack_sbuffer_destroy(&out);
    free(p);
}

static void test_task_ready_cap21(void **state)
{
    (void)state;
    /* frames: 16-byte prefix + header + payload; the payload is the tail */
    size_t l21, l23;
    uint8_t *f21 = tu_read_vector("frames/cap21_get_task_reply_chunk.bin", &l21);
    uint8_t *f23 = tu_read_vector("frames/cap23_task_ready_chunk.bin", &l23);
    const uint8_t *p21 = f21 + l21 - 583, *p23 = f23 + l23 - 773;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    if (cj_splice_task_ready(p21, 583, "s", "t", "J1", "site-1", 0, &out, NULL, &e)) fail_msg("%s", e.msg);
    struct cj_fobs_ref a, b;
    size_t na, nb;
    assert_int_equal(cj_fobs_list_refs((uint8_t *)out.data, out.size, &a, 1, &na, &e), 0);
    assert_int_equal(cj_fobs_list_refs(p23, 773, &b, 1, &nb, &e), 0);
    assert_int_equal(na, 1);
    assert_int_equal(nb, 1);
    assert_int_equal(a.dot, b.dot);
    assert_string_equal(a.fqcn, "server");
    assert_string_equal(a.fqcn, b.fqcn);
    assert_string_equal(a.ref_id, "54697e3f-93e1-4554-b97a-be80d870cbda");
    assert_string_equal(a.ref_id, b.ref_id);
    assert_same_datums(p21, 583, (uint8_t *)out.data, out.size);
    msgpack_sbuffer_destroy(&out);
    free(f21);
    free(f23);
}

static void test_task_ready_rejects(void **state)
{
    (void)state;
    const char *bad[] = {V00, V01, V08, V09, V14};   /* plain maps, envelope, Shareable without task_name */
    const int want[] = {-CJ_E_MISSING, -CJ_E_MISSING, -CJ_E_MISSING, -CJ_E_MISSING, -CJ_E_MISSING};
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_write(&out, "keep", 4);
    for (size_t i = 0; i < 5; i++) {
        size_t len;
        uint8_t *p = tu_read_vector(bad[i], &len);
        struct cj_err e = {0};
        int rc = cj_splice_task_ready(p, len, "s", "t", "j", "x", 0, &out, NULL, &e);
        if (rc != want[i]) fail_msg("%s: rc %d (%s)", bad[i], rc, e.msg);
        assert_int_equal(out.size, 4);   /* untouched */
        free(p);
    }
    /* a body that is a Shareable wrapper of another type */
    size_t n;
    uint8_t *p = tu_hex("64 00 0000000000000013 81 ad 5f5f666f62735f747970655f5f a3 78 79 7a", &n);
    struct cj_err e = {0};
    assert_int_equal(cj_splice_task_ready(p, n, "s", "t", "j", "x", 0, &out, NULL, &e), -CJ_E_TYPE);
    free(p);
    /* missing arguments */
    p = tu_read_vector(V02, &n);
    assert_int_equal(cj_splice_task_ready(p, n, NULL, "t", "j", "x", 0, &out, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_splice_task_ready(p, n, "s", "t", NULL, "x", 0, &out, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(out.size, 4);
    /* a try-again reply splices too (the caller checks task_name first) */
    free(p);
    p = tu_read_vector(V16, &n);
    struct cj_task_info info;
    assert_int_equal(cj_splice_read_task(p, n, &info, &e), 0);
    assert_string_equal(info.task_name, "__try_again__");
    assert_string_equal(info.task_id, "");
    free(p);
    msgpack_sbuffer_destroy(&out);
}

/* Every prefix fails cleanly (the one ending right after MAIN is a valid container). */
static void test_task_ready_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = tu_read_vector(V02, &len);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *q = malloc(cut ? cut : 1);
        memcpy(q, p, cut);
        struct cj_err e = {0};
        int rc = cj_splice_task_ready(q, cut, "s", "t", "j", "x", 0, &out, NULL, &e);
        if (cut == 975) {
            assert_int_equal(rc, 0);
            assert_int_equal(out.size, 10 + 46 + 965 + 21);   /* header, envelope, body, 2 headers */
        } else {
            assert_true(rc < 0);
            assert_int_equal(out.size, 0);
        }
        msgpack_sbuffer_clear(&out);
        free(q);
    }
    msgpack_sbuffer_destroy(&out);
    free(p);
}

/* ---- SUBMIT_UPDATE ---------------------------------------------------------- */

static void test_submit_update_v13(void **state)
{
    (void)state;
    size_t l02, l09;
    uint8_t *task = tu_read_vector(V02, &l02);
    uint8_t *res = tu_read_vector(V09, &l09);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    /* task headers given as the whole task payload, name and id explicit */
    assert_int_equal(cj_splice_submit_update(res, l09, task, l02, "train", "9b2c0c1e-task", ROOT_ID, "site-1",
                                             "job-7f3a", &out, &e), 0);
    assert_sb_is(&out, V13);
    assert_same_datums(res, l09, (uint8_t *)out.data, out.size);
    assert_same_refs(res, l09, (uint8_t *)out.data, out.size);

    /* task headers given as the raw map the relay kept; name and id from it */
    struct cj_task_info info;
    assert_int_equal(cj_splice_read_task(task, l02, &info, &e), 0);
    uint8_t *hcopy = malloc(info.headers.len);
    memcpy(hcopy, task + info.headers.off, info.headers.len);
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_splice_submit_update(res, l09, hcopy, info.headers.len, NULL, NULL, ROOT_ID, "site-1",
                                             "job-7f3a", &out, &e), 0);
    assert_sb_is(&out, V13);

    /* the FLContext writer equals the __peer_ctx__ in 13 */
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    assert_int_equal(cj_lobs_validate(out.data, out.size, &m, NULL, 0, NULL, &e), 0);
    assert_int_equal(m.value_len, 1272);
    assert_int_equal(cj_fobs_find_shareable(m.value, m.value_len, &sh, &e), 0);
    const uint8_t *hb = m.value + sh.headers.off;
    assert_int_equal(cj_fobs_read_headers(hb, sh.headers.len, &h, &e), 0);
    msgpack_sbuffer fl;
    msgpack_packer pk;
    msgpack_sbuffer_init(&fl);
    msgpack_packer_init(&pk, &fl, msgpack_sbuffer_write);
    assert_int_equal(cj_fobs_write_flcontext(&pk, "site-1", "job-7f3a"), 0);
    assert_int_equal(h.peer_ctx.len, fl.size);
    assert_memory_equal(hb + h.peer_ctx.off, fl.data, fl.size);
    msgpack_sbuffer_destroy(&fl);

    free(hcopy);
    msgpack_sbuffer_destroy(&out);
    free(task);
    free(res);
}

/* Keys of the result's header map, in order, joined by ','. */
static void header_keys(const msgpack_sbuffer *sb, char *out, size_t outsz)
{
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(sb->data, sb->size, &m, NULL, 0, NULL, &e), 0);
    assert_int_equal(cj_fobs_find_shareable(m.value, m.value_len, &sh, &e), 0);
    struct mp_cur c = {m.value, sh.headers.off, sh.headers.off + sh.headers.len};
    uint32_t n;
    out[0] = 0;
    assert_int_equal(mp_read_map(&c, &n, &e), 0);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        uint32_t kl;
        assert_int_equal(mp_read_str(&c, &k, &kl, &e), 0);
        size_t o = strlen(out);
        snprintf(out + o, outsz - o, "%s%.*s", i ? "," : "", (int)kl, (const char *)k);
        assert_int_equal(mp_skip(&c, &e), 0);
    }
}

/* A result_ready payload {"result": Shareable{__headers__: H, "x": 1}} from hex of H. */
static uint8_t *result_payload(const char *hdr_hex, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    size_t hn;
    uint8_t *h = tu_hex(hdr_hex, &hn);
    struct cj_err e = {0};
    size_t off;
    assert_int_equal(cj_lobs_begin_main(&sb, &off, &e), 0);
    msgpack_pack_map(&pk, 1);
    cj_fobs_write_str(&pk, "result");
    cj_fobs_write_shareable_begin(&pk, 2);
    cj_fobs_write_str(&pk, "__headers__");
    msgpack_sbuffer_write(&sb, (const char *)h, hn);
    cj_fobs_write_str(&pk, "x");
    msgpack_pack_int(&pk, 1);
    cj_fobs_write_shareable_end(&pk);
    cj_lobs_end_main(&sb, off);
    free(h);
    *len = sb.size;
    return (uint8_t *)sb.data;   /* malloc'd by the sbuffer */
}

static void test_submit_update_order(void **state)
{
    (void)state;
    /* task headers with current_round, cookie jar, task name and id */
    size_t tn;
    uint8_t *th = tu_hex("85 ad 63757272656e745f726f756e64 03"        /* current_round: 3 */
                         "   ae 5f5f636f6f6b69655f6a61725f5f 80"     /* __cookie_jar__: {} */
                         "   a9 7461736b5f6e616d65 a1 54"              /* task_name: "T" */
                         "   ab 5f5f7461736b5f69645f5f a1 49"          /* __task_id__: "I" */
                         "   a1 7a c0", &tn);                          /* z: nil */
    /* the worker's own headers stay; __task_id__ it already had is replaced in place */
    size_t rn;
    uint8_t *r = result_payload("83 a6 5f5f72635f5f a2 4f4b"               /* __rc__: "OK" */
                                "   ab 5f5f7461736b5f69645f5f a1 57"       /* __task_id__: "W" */
                                "   b0 5f5f636f6e74656e745f747970655f5f a3 44584f", &rn);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    assert_int_equal(cj_splice_submit_update(r, rn, th, tn, NULL, NULL, ROOT_ID, "s", "j", &out, &e), 0);
    char keys[512];
    header_keys(&out, keys, sizeof keys);
    assert_string_equal(keys, "__rc__,__task_id__,__content_type__,current_round,__cookie_jar__,__task_name__,"
                              "__msg_root_id__,__peer_ctx__");
    struct cj_lobs_section m;
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    struct cj_range sp;
    assert_int_equal(cj_lobs_validate(out.data, out.size, &m, NULL, 0, NULL, &e), 0);
    assert_int_equal(cj_fobs_find_shareable(m.value, m.value_len, &sh, &e), 0);
    const uint8_t *hb = m.value + sh.headers.off;
    assert_int_equal(cj_fobs_read_headers(hb, sh.headers.len, &h, &e), 0);
    char buf[64];
    assert_int_equal(cj_fobs_span_str(hb, h.task_id, buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "I");
    assert_int_equal(hb[h.current_round.off], 0x03);
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "__task_name__", &sp, &e), 1);
    assert_int_equal(cj_fobs_span_str(hb, sp, buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "T");
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "__msg_root_id__", &sp, &e), 1);
    assert_int_equal(cj_fobs_span_str(hb, sp, buf, sizeof buf, &e), 0);
    assert_string_equal(buf, ROOT_ID);
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "z", &sp, &e), 0);   /* only the listed task keys */

    /* no task headers: name and id must be given */
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_splice_submit_update(r, rn, NULL, 0, NULL, "I", ROOT_ID, "s", "j", &out, &e), -CJ_E_MISSING);
    assert_int_equal(cj_splice_submit_update(r, rn, NULL, 0, "T", NULL, ROOT_ID, "s", "j", &out, &e), -CJ_E_MISSING);
    assert_int_equal(out.size, 0);
    assert_int_equal(cj_splice_submit_update(r, rn, NULL, 0, "T", "I", ROOT_ID, "s", "j", &out, &e), 0);
    header_keys(&out, keys, sizeof keys);
    assert_string_equal(keys, "__rc__,__task_id__,__content_type__,__task_name__,__msg_root_id__,__peer_ctx__");
    free(th);
    free(r);
    msgpack_sbuffer_destroy(&out);
}

static void test_submit_update_rejects(void **state)
{
    (void)state;
    size_t l02, l09, l00;
    uint8_t *task = tu_read_vector(V02, &l02);
    uint8_t *res = tu_read_vector(V09, &l09);
    uint8_t *v00 = tu_read_vector(V00, &l00);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    /* no "result" key */
    assert_int_equal(cj_splice_submit_update(task, l02, task, l02, "t", "i", ROOT_ID, "s", "j", &out, &e), -CJ_E_MISSING);
    /* "result" that is not a Shareable */
    size_t n;
    uint8_t *p = tu_hex("64 00 000000000000000b 81 a6 726573756c74 92 01 02", &n);
    assert_int_equal(cj_splice_submit_update(p, n, task, l02, "t", "i", ROOT_ID, "s", "j", &out, &e), -CJ_E_TYPE);
    free(p);
    /* body not a map */
    p = tu_hex("64 00 0000000000000001 c0", &n);
    assert_int_equal(cj_splice_submit_update(p, n, task, l02, "t", "i", ROOT_ID, "s", "j", &out, &e), -CJ_E_TYPE);
    free(p);
    /* task headers: not a map, trailing bytes, a non-Shareable task payload */
    assert_int_equal(cj_splice_submit_update(res, l09, (const uint8_t *)"\x92\x01\x02", 3, "t", "i", ROOT_ID, "s", "j",
                                             &out, &e), -CJ_E_INVALID);
    assert_int_equal(cj_splice_submit_update(res, l09, (const uint8_t *)"\x80\xc0", 2, "t", "i", ROOT_ID, "s", "j",
                                             &out, &e), -CJ_E_INVALID);
    assert_int_equal(cj_splice_submit_update(res, l09, v00, l00, "t", "i", ROOT_ID, "s", "j", &out, &e), -CJ_E_MISSING);
    /* missing msg_root_id */
    assert_int_equal(cj_splice_submit_update(res, l09, task, l02, "t", "i", NULL, "s", "j", &out, &e), -CJ_E_INVALID);
    assert_int_equal(out.size, 0);
    /* every prefix of 09 fails except the MAIN-only one */
    for (size_t cut = 0; cut < l09; cut++) {
        uint8_t *q = malloc(cut ? cut : 1);
        memcpy(q, res, cut);
        int rc = cj_splice_submit_update(q, cut, task, l02, "train", "9b2c0c1e-task", ROOT_ID, "site-1", "job-7f3a",
                                         &out, &e);
        if (cut == 949) assert_int_equal(rc, 0);
        else {
            assert_true(rc < 0);
            assert_int_equal(out.size, 0);
        }
        msgpack_sbuffer_clear(&out);
        free(q);
    }
    /* and every prefix of the task payload as task headers */
    for (size_t cut = 0; cut < l02; cut++) {
        int rc = cj_splice_submit_update(res, l09, task, cut, "train", "9b2c0c1e-task", ROOT_ID, "site-1", "job-7f3a",
                                         &out, &e);
        if (cut == 975 || cut == 0) assert_int_equal(rc, 0);
        else assert_true(rc < 0);
        msgpack_sbuffer_clear(&out);
    }
    msgpack_sbuffer_destroy(&out);
    free(task);
    free(res);
    free(v00);
}

static void test_failed_result(void **state)
{
    (void)state;
    size_t l02;
    uint8_t *task = tu_read_vector(V02, &l02);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    assert_int_equal(cj_splice_failed_result("EXECUTION_EXCEPTION", task, l02, NULL, NULL, ROOT_ID, "site-1",
                                             "job-7f3a", &out, &e), 0);
    char keys[256];
    header_keys(&out, keys, sizeof keys);
    assert_string_equal(keys, "__rc__,__cookie_jar__,__task_name__,__task_id__,__msg_root_id__,__peer_ctx__");
    size_t nd;
    assert_int_equal(cj_lobs_validate(out.data, out.size, NULL, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, 0);
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_splice_failed_result("TASK_UNKNOWN", task, l02, NULL, NULL, ROOT_ID, "s", "j", &out, &e),
                     -CJ_E_INVALID);
    assert_int_equal(cj_splice_failed_result("RUN_MISMATCH", task, l02, NULL, NULL, ROOT_ID, "s", "j", &out, &e),
                     -CJ_E_INVALID);
    assert_int_equal(cj_splice_failed_result("UNSAFE_JOB", task, l02, NULL, NULL, ROOT_ID, "s", "j", &out, &e),
                     -CJ_E_INVALID);
    assert_int_equal(out.size, 0);
    msgpack_sbuffer_destroy(&out);
    free(task);
}

/* ---- small payloads ----------------------------------------------------------- */

static void test_builders(void **state)
{
    (void)state;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    assert_int_equal(cj_build_get_task_request(&out, "site-1", "job-7f3a", NULL, &e), 0);
    assert_sb_is(&out, V14);
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_build_aux_request(&out, "__task_check__", "9b2c0c1e-task", "site-1", "job-7f3a", &e), 0);
    assert_sb_is(&out, V15);

    char keys[256];
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_build_get_task_request(&out, "site-1", "job-7f3a", "9b2c0c1e-task", &e), 0);
    header_keys(&out, keys, sizeof keys);
    assert_string_equal(keys, "__peer_ctx__,last_task_id");
    msgpack_sbuffer_clear(&out);
    assert_int_equal(cj_build_aux_request(&out, "__sync_runner__", NULL, "site-1", "job-7f3a", &e), 0);
    header_keys(&out, keys, sizeof keys);
    assert_string_equal(keys, "__topic__,__peer_props__");

    /* builders append */
    msgpack_sbuffer_clear(&out);
    msgpack_sbuffer_write(&out, "xy", 2);
    assert_int_equal(cj_build_get_task_request(&out, "site-1", "job-7f3a", NULL, &e), 0);
    size_t l14;
    uint8_t *v14 = tu_read_vector(V14, &l14);
    assert_int_equal(out.size, l14 + 2);
    assert_memory_equal(out.data + 2, v14, l14);
    free(v14);
    assert_int_equal(cj_build_get_task_request(&out, NULL, "j", NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_build_aux_request(&out, NULL, NULL, "s", "j", &e), -CJ_E_INVALID);
    msgpack_sbuffer_destroy(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_ready_v07),
        cmocka_unit_test(test_task_ready_v12),
        cmocka_unit_test(test_task_ready_cap21),
        cmocka_unit_test(test_task_ready_rejects),
        cmocka_unit_test(test_task_ready_truncated),
        cmocka_unit_test(test_submit_update_v13),
        cmocka_unit_test(test_submit_update_order),
        cmocka_unit_test(test_submit_update_rejects),
        cmocka_unit_test(test_failed_result),
        cmocka_unit_test(test_builders),
    };
    return cmocka_run_group_tests_name("splice", tests, NULL, NULL);
}
