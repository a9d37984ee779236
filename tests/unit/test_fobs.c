/* SPDX-License-Identifier: Apache-2.0 */
/* test_fobs.c — FOBS body walker: Shareable/headers lookup, ref datums and their JSON,
 * ref wrappers, the __headers__ rewrite, writers; vectors 00-04, 08-10, 12, 14, 16. */
#include "testutil.h"
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"
#include "util/uuid.h"

#define V00 "00_min_dict_one_array_via_downloader.bin"
#define V01 "01_builtin_wrappers.bin"
#define V02 "02_server_task_shareable_via_downloader.bin"
#define V03 "03_task_shareable_native.bin"
#define V04 "04_cj_task_ready_lazy_reemit.bin"
#define V08 "08_large_bytes_blob_datum.bin"
#define V09 "09_trainer_result_ready_flmodel.bin"
#define V10 "10_cj_submit_update_lazy_reemit.bin"
#define V12 "12_relay_task_ready_full_splice.bin"
#define V14 "14_get_task_request.bin"
#define V16 "16_get_task_reply_try_again.bin"

struct vec {
    uint8_t *buf;
    size_t len;
    struct cj_lobs_section main;
    const uint8_t *body;
    size_t body_len;
};

static void load(struct vec *v, const char *name)
{
    struct cj_err e = {0};
    v->buf = tu_read_vector(name, &v->len);
    if (cj_lobs_validate(v->buf, v->len, &v->main, NULL, 0, NULL, &e)) fail_msg("%s: %s", name, e.msg);
    v->body = v->main.value;
    v->body_len = v->main.value_len;
}

/* The Shareable inside an envelope body (key "model" / "result"), as a sub-buffer. */
static const uint8_t *envelope_value(const struct vec *v, const char *key, size_t *len)
{
    struct cj_range sp;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_map_get(v->body, v->body_len, key, &sp, &e), 1);
    *len = sp.len;
    return v->body + sp.off;
}

static void assert_span_str(const uint8_t *buf, struct cj_range sp, const char *want)
{
    char out[256];
    struct cj_err e = {0};
    assert_true(sp.len > 0);
    assert_int_equal(cj_fobs_span_str(buf, sp, out, sizeof out, &e), 0);
    assert_string_equal(out, want);
}

static void assert_span_hex(const uint8_t *buf, struct cj_range sp, const char *hex)
{
    size_t n;
    uint8_t *want = tu_hex(hex, &n);
    assert_int_equal(sp.len, n);
    assert_memory_equal(buf + sp.off, want, n);
    free(want);
}

/* Collects wrapper reports. */
struct seen {
    int n;
    struct cj_fobs_wrapper w[16];
    char item[16][64];
};

static int seen_cb(void *ud, const struct cj_fobs_wrapper *w)
{
    struct seen *s = ud;
    if (s->n < 16) {
        s->w[s->n] = *w;
        snprintf(s->item[s->n], 64, "%.*s", w->item ? (int)w->item_len : 0, w->item ? (const char *)w->item : "");
    }
    s->n++;
    return 0;
}

static void list_refs(const struct vec *v, struct cj_fobs_ref *r, size_t cap, size_t *n)
{
    struct cj_err e = {0};
    if (cj_fobs_list_refs(v->buf, v->len, r, cap, n, &e)) fail_msg("list_refs: %s", e.msg);
}

/* ---- vectors ---------------------------------------------------------------- */

static void test_v00(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V00);
    struct cj_fobs_ref r[2];
    size_t n;
    list_refs(&v, r, 2, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].dot, 3);
    assert_int_equal(r[0].section_off, 157);
    assert_string_equal(r[0].fqcn, "server.job-7f3a");
    assert_string_equal(r[0].ref_id, "11111111-2222-4333-8444-000000000001");
    char id[37];
    cj_uuid_str(r[0].datum_id, id);
    assert_string_equal(id, "11111111-2222-4333-8444-000000000002");

    struct seen s = {0};
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_walk(v.body, v.body_len, seen_cb, &s, &e), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.w[0].kind, CJ_FOBS_WRAP_NUMPY);
    assert_true(s.w[0].is_ref);
    assert_int_equal(s.w[0].dot, 3);
    assert_string_equal(s.item[0], "T0");
    assert_int_equal(s.w[0].off, 3);   /* body offset 0x0d - 0x0a */

    struct cj_fobs_shareable sh;
    assert_int_equal(cj_fobs_find_shareable(v.body, v.body_len, &sh, &e), -CJ_E_MISSING);
    free(v.buf);
}

static void test_v01(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V01);
    struct cj_fobs_ref_counts c;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_count_refs(v.body, v.body_len, &c, &e), 0);
    struct cj_fobs_ref_counts zero = {0};
    assert_memory_equal(&c, &zero, sizeof c);
    size_t n = 9;
    list_refs(&v, NULL, 0, &n);
    assert_int_equal(n, 0);
    struct cj_range sp;
    assert_int_equal(cj_fobs_map_get(v.body, v.body_len, "f", &sp, &e), 1);
    assert_span_hex(v.body, sp, "cb 3f f8 00 00 00 00 00 00");
    assert_int_equal(cj_fobs_map_get(v.body, v.body_len, "b", &sp, &e), 1);
    assert_span_hex(v.body, sp, "c4 02 00 01");
    assert_int_equal(cj_fobs_map_get(v.body, v.body_len, "nope", &sp, &e), 0);
    free(v.buf);
}

static void check_02_headers(const uint8_t *b, size_t len, uint32_t want_n)
{
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_find_shareable(b, len, &sh, &e), 0);
    assert_int_equal(sh.headers_n, want_n);
    assert_int_equal(sh.data_n, 2);
    assert_int_equal(sh.data_hdr_len, 1);

    /* keys in wire order */
    const char *order[] = {"__content_type__", "__cookie_jar__", "__task_id__", "task_name", "__peer_ctx__",
                           "job_id", "site_name"};
    struct mp_cur c = {b, sh.headers.off, sh.headers.off + sh.headers.len};
    uint32_t n;
    assert_int_equal(mp_read_map(&c, &n, &e), 0);
    assert_int_equal(n, want_n);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        uint32_t kl;
        assert_int_equal(mp_read_str(&c, &k, &kl, &e), 0);
        assert_true(mp_str_eq(k, kl, order[i]));
        assert_int_equal(mp_skip(&c, &e), 0);
    }
    assert_int_equal(c.pos, sh.headers.off + sh.headers.len);

    struct cj_fobs_headers h;
    const uint8_t *hb = b + sh.headers.off;
    assert_int_equal(cj_fobs_read_headers(hb, sh.headers.len, &h, &e), 0);
    assert_span_str(hb, h.task_name, "train");
    assert_span_str(hb, h.task_id, "9b2c0c1e-task");
    assert_span_hex(hb, h.cookie_jar, "81 ab 5f5f7461736b5f69645f5f ad 39623263306331652d7461736b");
    assert_int_equal(h.current_round.len, 0);
    assert_int_equal(h.receiver_ids.len, 0);
    assert_int_equal(h.wait_time.len, 0);
    assert_true(h.peer_ctx.len > 100);
    struct cj_range sp;
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "__content_type__", &sp, &e), 1);
    assert_span_str(hb, sp, "DXO");
}

static void test_v02(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V02);
    check_02_headers(v.body, v.body_len, 5);

    struct seen s = {0};
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_walk(v.body, v.body_len, seen_cb, &s, &e), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.item[0], "T0");
    assert_string_equal(s.item[1], "T1");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s.w[i].kind, CJ_FOBS_WRAP_NUMPY);
        assert_int_equal(s.w[i].dot, 3);
        assert_true(s.w[i].is_ref);
    }
    /* T0 is fc1.weight: its key precedes the wrapper */
    assert_memory_equal(v.body + s.w[0].off - 10, "fc1.weight", 10);
    assert_memory_equal(v.body + s.w[1].off - 8, "fc1.bias", 8);

    struct cj_fobs_ref_counts c;
    assert_int_equal(cj_fobs_count_refs(v.body, v.body_len, &c, &e), 0);
    assert_int_equal(c.wrappers[0], 2);
    assert_int_equal(c.items[0], 2);
    assert_int_equal(c.wrappers[1], 0);

    struct cj_fobs_ref r[2];
    size_t n;
    list_refs(&v, r, 2, &n);  /* show refs: 1 ref, DOT 3, 2 items */
    assert_int_equal(n, 1);
    assert_int_equal(r[0].dot, 3);
    assert_int_equal(r[0].section_off, 975);
    assert_string_equal(r[0].fqcn, "server.job-7f3a");
    assert_string_equal(r[0].ref_id, "11111111-2222-4333-8444-0000000000c9");
    char id[37];
    cj_uuid_str(r[0].datum_id, id);
    assert_string_equal(id, "11111111-2222-4333-8444-0000000000ca");
    free(v.buf);
}

static void test_v03_native(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V03);
    size_t n = 9;
    list_refs(&v, NULL, 0, &n);
    assert_int_equal(n, 0);
    struct cj_fobs_ref_counts c;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_count_refs(v.body, v.body_len, &c, &e), 0);
    assert_int_equal(c.native, 2);
    assert_int_equal(c.wrappers[0] + c.wrappers[1] + c.other_refs, 0);
    check_02_headers(v.body, v.body_len, 5);
    free(v.buf);
}

static void test_v04_lazy(void **state)
{
    (void)state;
    struct vec v02, v04;
    load(&v02, V02);
    load(&v04, V04);
    struct cj_fobs_ref a, b;
    size_t n;
    list_refs(&v02, &a, 1, &n);
    assert_int_equal(n, 1);
    list_refs(&v04, &b, 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(a.dot, b.dot);
    assert_string_equal(a.fqcn, b.fqcn);
    assert_string_equal(a.ref_id, b.ref_id);
    assert_memory_not_equal(a.datum_id, b.datum_id, 16);   /* new datum id, same JSON */
    char id[37];
    cj_uuid_str(b.datum_id, id);
    assert_string_equal(id, "11111111-2222-4333-8444-000000000192");

    size_t mlen;
    const uint8_t *model = envelope_value(&v04, "model", &mlen);
    check_02_headers(model, mlen, 7);
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_find_shareable(model, mlen, &sh, &e), 0);
    struct cj_range sp;
    assert_int_equal(cj_fobs_map_get(model + sh.headers.off, sh.headers.len, "job_id", &sp, &e), 1);
    assert_span_str(model + sh.headers.off, sp, "job-7f3a");
    assert_int_equal(cj_fobs_map_get(model + sh.headers.off, sh.headers.len, "site_name", &sp, &e), 1);
    assert_span_str(model + sh.headers.off, sp, "site-1");
    assert_int_equal(cj_fobs_read_headers(model + sh.headers.off, sh.headers.len, &h, &e), 0);

    struct seen s = {0};
    assert_int_equal(cj_fobs_walk(v04.body, v04.body_len, seen_cb, &s, &e), 0);
    assert_int_equal(s.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s.w[i].kind, CJ_FOBS_WRAP_LAZY);
        assert_int_equal(s.w[i].dot, 3);
        assert_true(s.w[i].is_ref);
    }
    assert_string_equal(s.item[0], "T0");
    assert_string_equal(s.item[1], "T1");
    /* the envelope itself is not a Shareable */
    assert_true(cj_fobs_find_shareable(v04.body, v04.body_len, &sh, &e) < 0);
    free(v02.buf);
    free(v04.buf);
}

static void test_v08_datumref(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V08);
    size_t n = 9;
    list_refs(&v, NULL, 0, &n);
    assert_int_equal(n, 0);   /* DOT 0 is never a download ref */
    struct seen s = {0};
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_walk(v.body, v.body_len, seen_cb, &s, &e), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.w[0].kind, CJ_FOBS_WRAP_DATUMREF);
    assert_false(s.w[0].is_ref);
    uint8_t id[16];
    assert_int_equal(cj_uuid_parse(s.w[0].item, s.w[0].item_len, id), 0);
    struct cj_lobs_section d;
    size_t nd;
    assert_int_equal(cj_lobs_validate(v.buf, v.len, NULL, &d, 1, &nd, &e), 0);
    assert_int_equal(d.offset, 224);
    assert_memory_equal(id, d.id, 16);
    struct cj_fobs_ref_counts c;
    assert_int_equal(cj_fobs_count_refs(v.body, v.body_len, &c, &e), 0);
    assert_int_equal(c.datum_refs, 1);
    assert_int_equal(c.wrappers[0] + c.wrappers[1], 0);
    free(v.buf);
}

static void test_v09_v10_result(void **state)
{
    (void)state;
    struct vec v09, v10;
    load(&v09, V09);
    load(&v10, V10);
    size_t rlen;
    const uint8_t *res = envelope_value(&v09, "result", &rlen);
    assert_int_equal(res - v09.body, 0x33 - 10);
    assert_int_equal(rlen, v09.body_len - (size_t)(res - v09.body));   /* result is the last entry */
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_find_shareable(res, rlen, &sh, &e), 0);
    assert_int_equal(sh.headers.len, 1);
    assert_int_equal(res[sh.headers.off], 0x80);
    assert_int_equal(sh.headers_n, 0);

    struct cj_fobs_ref a, b;
    size_t n;
    list_refs(&v09, &a, 1, &n);
    assert_int_equal(n, 1);
    assert_string_equal(a.fqcn, "site-1.job-7f3a.client_api_trainer_0");
    assert_string_equal(a.ref_id, "11111111-2222-4333-8444-000000000385");
    char id[37];
    cj_uuid_str(a.datum_id, id);
    assert_string_equal(id, "11111111-2222-4333-8444-000000000386");
    list_refs(&v10, &b, 1, &n);
    assert_string_equal(a.fqcn, b.fqcn);
    assert_string_equal(a.ref_id, b.ref_id);
    cj_uuid_str(b.datum_id, id);
    assert_string_equal(id, "11111111-2222-4333-8444-0000000003ea");

    assert_int_equal(cj_fobs_find_shareable(v10.body, v10.body_len, &sh, &e), 0);
    assert_int_equal(sh.headers_n, 0);
    struct cj_fobs_ref_counts c;
    assert_int_equal(cj_fobs_count_refs(res, rlen, &c, &e), 0);
    assert_int_equal(c.wrappers[0], 2);
    assert_int_equal(c.items[0], 2);
    assert_int_equal(cj_fobs_count_refs(v10.body, v10.body_len, &c, &e), 0);
    assert_int_equal(c.wrappers[0], 2);
    free(v09.buf);
    free(v10.buf);
}

static void test_v16_try_again(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V16);
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_find_shareable(v.body, v.body_len, &sh, &e), 0);
    const uint8_t *hb = v.body + sh.headers.off;
    assert_int_equal(cj_fobs_read_headers(hb, sh.headers.len, &h, &e), 0);
    assert_span_str(hb, h.task_name, "__try_again__");
    assert_span_hex(hb, h.wait_time, "cb 3f f0 00 00 00 00 00 00");
    assert_span_hex(hb, h.task_id, "a0");
    char out[4];
    assert_int_equal(cj_fobs_span_str(hb, h.task_id, out, sizeof out, &e), 0);
    assert_string_equal(out, "");
    assert_int_equal(cj_fobs_span_str(hb, h.task_name, out, sizeof out, &e), -CJ_E_LIMIT);
    assert_int_equal(cj_fobs_span_str(hb, h.wait_time, out, sizeof out, &e), -CJ_E_TYPE);
    free(v.buf);
}

/* ---- JSON ------------------------------------------------------------------- */

static int pj(const char *json, char *fq, char *ref)
{
    struct cj_err e = {0};
    int rc = cj_fobs_parse_ref_json((const uint8_t *)json, strlen(json), fq, 64, ref, 48, &e);
    if (rc) assert_true(e.msg[0]);
    return rc;
}

static void test_json_accepts(void **state)
{
    (void)state;
    char fq[64], ref[48];
    assert_int_equal(pj("{\"fqcn\":\"a.b\",\"ref_id\":\"r1\"}", fq, ref), 0);
    assert_string_equal(fq, "a.b");
    assert_string_equal(ref, "r1");
    assert_int_equal(pj(" \r\n\t{ \"ref_id\" : \"r2\" , \"fqcn\" : \"x\" } \n", fq, ref), 0);
    assert_string_equal(fq, "x");
    assert_string_equal(ref, "r2");
    assert_int_equal(pj("{\"x\":[1,{\"y\":null,\"z\":[[],{}]},\"s\\\"]\"],\"fqcn\":\"a\",\"n\":-0.5e+3,"
                        "\"t\":true,\"f\":false,\"q\":NaN,\"i\":-Infinity,\"j\":Infinity,\"e\":{},"
                        "\"ref_id\":\"b\",\"k\":0,\"l\":12.25E-2}", fq, ref), 0);
    assert_string_equal(fq, "a");
    assert_string_equal(ref, "b");
    assert_int_equal(pj("{\"fqcn\":\"server.job\\u002d7f3a\\/x\\\\y\\\"z\\n\",\"ref_id\":\"\\u00e9\\ud83d\\ude00\"}",
                        fq, ref), 0);
    assert_string_equal(fq, "server.job-7f3a/x\\y\"z\n");
    assert_string_equal(ref, "\xc3\xa9\xf0\x9f\x98\x80");
    /* raw UTF-8 in values; duplicates: the last wins, as in Python */
    assert_int_equal(pj("{\"fqcn\":\"old\",\"ref_id\":\"\xe2\x82\xac\",\"fqcn\":\"new\"}", fq, ref), 0);
    assert_string_equal(fq, "new");
    assert_string_equal(ref, "\xe2\x82\xac");
    /* a key with a lone surrogate is not "fqcn"; lone surrogates elsewhere are fine */
    assert_int_equal(pj("{\"fqcn\\ud800\":\"zz\",\"fqcn\":\"a\",\"ref_id\":\"b\",\"o\":\"\\udc00\"}", fq, ref), 0);
    assert_string_equal(fq, "a");
    /* exactly at the limits: 63 + NUL, 47 + NUL */
    char big[200];
    snprintf(big, sizeof big, "{\"fqcn\":\"%063d\",\"ref_id\":\"%047d\"}", 0, 0);
    assert_int_equal(pj(big, fq, ref), 0);
    assert_int_equal(strlen(fq), 63);
    assert_int_equal(strlen(ref), 47);
}

static void test_json_rejects(void **state)
{
    (void)state;
    char fq[64], ref[48], big[200];
    assert_int_equal(pj("", fq, ref), -CJ_E_TRUNCATED);
    assert_int_equal(pj("   ", fq, ref), -CJ_E_TRUNCATED);
    assert_int_equal(pj("[\"fqcn\",\"ref_id\"]", fq, ref), -CJ_E_TYPE);
    assert_int_equal(pj("\"fqcn\"", fq, ref), -CJ_E_TYPE);
    assert_int_equal(pj("\xef\xbb\xbf{\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_TYPE);  /* BOM */
    assert_int_equal(pj("{", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\"", fq, ref), -CJ_E_TRUNCATED);
    assert_int_equal(pj("{\"fqcn\":\"a", fq, ref), -CJ_E_TRUNCATED);
    assert_int_equal(pj("{}", fq, ref), -CJ_E_MISSING);
    assert_int_equal(pj("{\"fqcn\":\"a\"}", fq, ref), -CJ_E_MISSING);
    assert_int_equal(pj("{\"ref_id\":\"a\"}", fq, ref), -CJ_E_MISSING);
    assert_int_equal(pj("{\"FQCN\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_MISSING);
    assert_int_equal(pj("{\"fqcn\":1,\"ref_id\":\"b\"}", fq, ref), -CJ_E_TYPE);
    assert_int_equal(pj("{\"fqcn\":null,\"ref_id\":\"b\"}", fq, ref), -CJ_E_TYPE);
    assert_int_equal(pj("{\"fqcn\":\"\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\",\"ref_id\":\"b\"} x", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\",\"ref_id\":\"b\"}{}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\",\"ref_id\":\"b\",}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\" \"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{'fqcn':'a','ref_id':'b'}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{fqcn:\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\\u0000\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\\ud800\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\\x\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\\u12g4\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\tb\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\xff\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"fqcn\":\"a\xc0\xaf\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);      /* overlong */
    assert_int_equal(pj("{\"fqcn\":\"a\xed\xa0\x80\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);  /* surrogate */
    assert_int_equal(pj("{\"x\":01,\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":1.,\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":+1,\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":[1,],\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":[1}],\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":tru,\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    assert_int_equal(pj("{\"x\":{1:2},\"fqcn\":\"a\",\"ref_id\":\"b\"}", fq, ref), -CJ_E_INVALID);
    snprintf(big, sizeof big, "{\"fqcn\":\"%064d\",\"ref_id\":\"b\"}", 0);
    assert_int_equal(pj(big, fq, ref), -CJ_E_LIMIT);
    snprintf(big, sizeof big, "{\"fqcn\":\"a\",\"ref_id\":\"%048d\"}", 0);
    assert_int_equal(pj(big, fq, ref), -CJ_E_LIMIT);
    /* nesting: 64 levels of extra-member value are fine, 65 are not */
    char deep[400];
    int o = snprintf(deep, sizeof deep, "{\"x\":");
    for (int i = 0; i < 64; i++) deep[o++] = '[';
    for (int i = 0; i < 64; i++) deep[o++] = ']';
    o += snprintf(deep + o, sizeof deep - (size_t)o, ",\"fqcn\":\"a\",\"ref_id\":\"b\"}");
    assert_int_equal(pj(deep, fq, ref), 0);
    o = snprintf(deep, sizeof deep, "{\"x\":");
    for (int i = 0; i < 65; i++) deep[o++] = '[';
    for (int i = 0; i < 65; i++) deep[o++] = ']';
    o += snprintf(deep + o, sizeof deep - (size_t)o, ",\"fqcn\":\"a\",\"ref_id\":\"b\"}");
    assert_int_equal(pj(deep, fq, ref), -CJ_E_LIMIT);
    /* every prefix of a valid JSON fails */
    const char *ok = "{\"x\": [1, {\"y\": \"\\u00e9\"}], \"fqcn\": \"a\", \"ref_id\": \"b\"}";
    for (size_t cut = 0; cut < strlen(ok); cut++) {
        char *p = malloc(cut + 1);
        memcpy(p, ok, cut);
        struct cj_err e = {0};
        assert_true(cj_fobs_parse_ref_json((uint8_t *)p, cut, fq, 64, ref, 48, &e) < 0);
        free(p);
    }
}

static void test_list_refs_rules(void **state)
{
    (void)state;
    size_t n;
    struct cj_err e = {0};
    struct cj_fobs_ref r[3];
    /* DOT 3 TEXT, DOT 6 TEXT, DOT 0 TEXT (not a ref), DOT 4 TEXT (not a ref) */
    uint8_t *b = tu_hex("64 00 0000000000000001 c0"
                        "65 03 0000000000000029 01000000000000000000000000000000 7b226671636e223a2261222c227265665f6964223a2262227d"
                        "65 06 0000000000000029 02000000000000000000000000000000 7b226671636e223a2263222c227265665f6964223a2264227d"
                        "65 00 0000000000000011 03000000000000000000000000000000 78"
                        "65 04 0000000000000011 04000000000000000000000000000000 78", &n);
    size_t len = n;
    assert_int_equal(cj_lobs_validate(b, len, NULL, NULL, 0, NULL, &e), 0);
    assert_int_equal(cj_fobs_list_refs(b, len, r, 3, &n, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].dot, 3);
    assert_string_equal(r[0].fqcn, "a");
    assert_int_equal(r[1].dot, 6);
    assert_string_equal(r[1].ref_id, "d");
    assert_int_equal(r[1].section_off, 62);
    assert_int_equal(cj_fobs_list_refs(b, len, r, 1, &n, &e), 0);   /* count beyond cap */
    assert_int_equal(n, 2);
    /* a DOT-3 datum that is a BLOB, and bad JSON in a DOT-6 datum */
    b[11] = CJ_LOBS_BLOB;
    assert_int_equal(cj_fobs_list_refs(b, len, r, 3, &n, &e), -CJ_E_INVALID);
    b[11] = CJ_LOBS_TEXT;
    b[62 + 26] = '[';
    assert_int_equal(cj_fobs_list_refs(b, len, r, 3, &n, &e), -CJ_E_TYPE);
    assert_int_equal(e.offset, 62 + 26);
    free(b);
}

/* ---- walker limits ---------------------------------------------------------- */

static void test_walk_depth_and_truncation(void **state)
{
    (void)state;
    uint8_t deep[CJ_FOBS_MAX_DEPTH + 2];
    struct cj_err e = {0};
    memset(deep, 0x91, sizeof deep);
    deep[CJ_FOBS_MAX_DEPTH] = 0xc0;   /* 64 arrays around nil */
    assert_int_equal(cj_fobs_walk(deep, CJ_FOBS_MAX_DEPTH + 1, NULL, NULL, &e), 0);
    deep[CJ_FOBS_MAX_DEPTH] = 0x91;
    deep[CJ_FOBS_MAX_DEPTH + 1] = 0xc0;   /* 65 */
    assert_int_equal(cj_fobs_walk(deep, CJ_FOBS_MAX_DEPTH + 2, NULL, NULL, &e), -CJ_E_LIMIT);
    uint8_t two[] = {0xc0, 0xc0};
    assert_int_equal(cj_fobs_walk(two, 2, NULL, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_fobs_walk(two, 0, NULL, NULL, &e), -CJ_E_TRUNCATED);
    uint8_t lying[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0};
    assert_int_equal(cj_fobs_walk(lying, sizeof lying, NULL, NULL, &e), -CJ_E_TRUNCATED);

    struct vec v;
    load(&v, V02);
    for (size_t cut = 0; cut < v.body_len; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, v.body, cut);
        struct cj_fobs_shareable sh;
        assert_true(cj_fobs_walk(p, cut, NULL, NULL, &e) < 0);
        assert_true(cj_fobs_find_shareable(p, cut, &sh, &e) < 0);
        free(p);
    }
    free(v.buf);
}

static int stop_cb(void *ud, const struct cj_fobs_wrapper *w)
{
    (void)w;
    ++*(int *)ud;
    return 42;
}

static void test_walk_stops(void **state)
{
    (void)state;
    struct vec v;
    load(&v, V02);
    int calls = 0;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_walk(v.body, v.body_len, stop_cb, &calls, &e), 42);
    assert_int_equal(calls, 1);
    free(v.buf);
}

static void test_walk_odd_shapes(void **state)
{
    (void)state;
    struct cj_err e = {0};
    size_t n;
    /* container keys, a wrapper whose type key comes after data, torch ref, non-str type */
    uint8_t *b = tu_hex("83 91 01 c0"
                        "   a1 61 82 ad 5f5f666f62735f646174615f5f 82 a4 74797065 a3 726566 a4 64617461 a2 5437"
                        "            ad 5f5f666f62735f747970655f5f ac 746f7263682e54656e736f72"
                        "   a1 62 82 ad 5f5f666f62735f747970655f5f 01 ad 5f5f666f62735f646174615f5f c0", &n);
    struct seen s = {0};
    assert_int_equal(cj_fobs_walk(b, n, seen_cb, &s, &e), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.w[0].kind, CJ_FOBS_WRAP_TORCH);
    assert_int_equal(s.w[0].dot, 6);
    assert_string_equal(s.item[0], "T7");
    struct cj_fobs_ref_counts c;
    assert_int_equal(cj_fobs_count_refs(b, n, &c, &e), 0);
    assert_int_equal(c.wrappers[1], 1);
    assert_int_equal(c.items[1], 8);
    free(b);
}

/* ---- Shareable lookup hostility --------------------------------------------- */

static int find_hex(const char *hex)
{
    size_t n;
    uint8_t *b = tu_hex(hex, &n);
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    int rc = cj_fobs_find_shareable(b, n, &sh, &e);
    free(b);
    return rc;
}

#define T_KEY "ad 5f5f666f62735f747970655f5f"
#define D_KEY "ad 5f5f666f62735f646174615f5f"
#define H_KEY "ab 5f5f686561646572735f5f"
#define SHARE "d9 20 6e76666c6172652e617069732e736861726561626c652e536861726561626c65"

static void test_find_shareable_rules(void **state)
{
    (void)state;
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "80"), 0);
    assert_int_equal(find_hex("82 " D_KEY "81" H_KEY "80" T_KEY SHARE), 0);   /* any key order */
    assert_int_equal(find_hex("83 01 02 " D_KEY "80" T_KEY SHARE), 0);        /* non-str key */
    assert_int_equal(find_hex("92 01 02"), -CJ_E_TYPE);
    assert_int_equal(find_hex("82 " T_KEY "a1 78" D_KEY "80"), -CJ_E_TYPE);
    assert_int_equal(find_hex("82 " T_KEY "01" D_KEY "80"), -CJ_E_TYPE);
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "90"), -CJ_E_TYPE);
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "81" H_KEY "90"), -CJ_E_TYPE);
    assert_int_equal(find_hex("81 " D_KEY "80"), -CJ_E_MISSING);
    assert_int_equal(find_hex("81 " T_KEY SHARE), -CJ_E_MISSING);
    assert_int_equal(find_hex("83 " T_KEY SHARE D_KEY "80" T_KEY SHARE), -CJ_E_INVALID);
    assert_int_equal(find_hex("83 " T_KEY SHARE D_KEY "80" D_KEY "80"), -CJ_E_INVALID);
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "82" H_KEY "80" H_KEY "80"), -CJ_E_INVALID);
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "80 c0"), -CJ_E_INVALID);
    assert_int_equal(find_hex("82 " T_KEY SHARE D_KEY "81"), -CJ_E_TRUNCATED);
}

/* ---- header rewrite --------------------------------------------------------- */

/* Packs a str value into its own sbuffer (kept alive by the caller). */
static struct cj_fobs_kv kv_str(msgpack_sbuffer *sb, const char *key, const char *val)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    assert_int_equal(cj_fobs_write_str(&pk, val), 0);
    return (struct cj_fobs_kv){key, (const uint8_t *)sb->data, sb->size};
}

static void test_set_headers_v02_to_v12(void **state)
{
    (void)state;
    struct vec v02, v12;
    load(&v02, V02);
    load(&v12, V12);
    msgpack_sbuffer a, b, out;
    struct cj_fobs_kv kv[2] = {kv_str(&a, "job_id", "job-7f3a"), kv_str(&b, "site_name", "site-1")};
    msgpack_sbuffer_init(&out);
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, kv, 2, &out, &e), 0);
    size_t mlen;
    const uint8_t *model = envelope_value(&v12, "model", &mlen);
    assert_int_equal(out.size, mlen);
    assert_int_equal(out.size, v02.body_len + 33);
    assert_memory_equal(out.data, model, mlen);
    check_02_headers((const uint8_t *)out.data, out.size, 7);

    /* the same again, on the output: keys now present are replaced in place */
    msgpack_sbuffer again;
    msgpack_sbuffer_init(&again);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)out.data, out.size, kv, 2, &again, &e), 0);
    assert_int_equal(again.size, out.size);
    assert_memory_equal(again.data, out.data, out.size);

    /* replacing task_name in place keeps the count and position */
    msgpack_sbuffer c;
    struct cj_fobs_kv t = kv_str(&c, "task_name", "eval");
    msgpack_sbuffer_clear(&again);
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, &t, 1, &again, &e), 0);
    assert_int_equal(again.size, v02.body_len - 1);
    struct cj_fobs_shareable sh;
    struct cj_fobs_headers h;
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)again.data, again.size, &sh, &e), 0);
    assert_int_equal(sh.headers_n, 5);
    const uint8_t *hb = (uint8_t *)again.data + sh.headers.off;
    assert_int_equal(cj_fobs_read_headers(hb, sh.headers.len, &h, &e), 0);
    assert_span_str(hb, h.task_name, "eval");
    assert_span_str(hb, h.task_id, "9b2c0c1e-task");

    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
    msgpack_sbuffer_destroy(&c);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&again);
    free(v02.buf);
    free(v12.buf);
}

/* A Shareable with `n_data` plain entries k0..k(n-1) and, if hdr >= 0, a
 * __headers__ map of `hdr` entries h0.. first. */
static void build_shareable(msgpack_sbuffer *sb, int n_data, int hdr)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    assert_int_equal(cj_fobs_write_shareable_begin(&pk, (uint32_t)(n_data + (hdr >= 0))), 0);
    char k[16];
    if (hdr >= 0) {
        cj_fobs_write_str(&pk, "__headers__");
        msgpack_pack_map(&pk, (size_t)hdr);
        for (int i = 0; i < hdr; i++) {
            snprintf(k, sizeof k, "h%d", i);
            cj_fobs_write_str(&pk, k);
            msgpack_pack_int(&pk, i);
        }
    }
    for (int i = 0; i < n_data; i++) {
        snprintf(k, sizeof k, "k%d", i);
        cj_fobs_write_str(&pk, k);
        msgpack_pack_int(&pk, i);
    }
    assert_int_equal(cj_fobs_write_shareable_end(&pk), 0);
}

static void check_two_keys(const msgpack_sbuffer *out, uint32_t want_hn, uint32_t want_dn)
{
    struct cj_fobs_shareable sh;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)out->data, out->size, &sh, &e), 0);
    assert_int_equal(sh.headers_n, want_hn);
    assert_int_equal(sh.data_n, want_dn);
    const uint8_t *hb = (uint8_t *)out->data + sh.headers.off;
    struct cj_range sp;
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "job_id", &sp, &e), 1);
    assert_span_str(hb, sp, "J");
    assert_int_equal(cj_fobs_map_get(hb, sh.headers.len, "site_name", &sp, &e), 1);
    assert_span_str(hb, sp, "S");
    assert_int_equal(cj_fobs_walk((uint8_t *)out->data, out->size, NULL, NULL, &e), 0);
}

static void test_set_headers_missing_and_size_classes(void **state)
{
    (void)state;
    msgpack_sbuffer a, b, in, out;
    struct cj_fobs_kv kv[2] = {kv_str(&a, "job_id", "J"), kv_str(&b, "site_name", "S")};
    struct cj_err e = {0};
    msgpack_sbuffer_init(&out);

    /* no __headers__: appended as the data map's last entry, count 1 -> 2 */
    build_shareable(&in, 1, -1);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)in.data, in.size, kv, 2, &out, &e), 0);
    check_two_keys(&out, 2, 2);
    struct cj_fobs_shareable sh;
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)out.data, out.size, &sh, &e), 0);
    assert_int_equal((uint8_t)out.data[sh.data_off], 0x82);
    assert_int_equal(sh.headers.off + sh.headers.len, sh.data_end);   /* last entry */
    msgpack_sbuffer_destroy(&in);

    /* no __headers__, data map of 15 entries: fixmap 8f -> de 00 10 */
    msgpack_sbuffer_clear(&out);
    build_shareable(&in, 15, -1);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)in.data, in.size, kv, 2, &out, &e), 0);
    check_two_keys(&out, 2, 16);
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)out.data, out.size, &sh, &e), 0);
    assert_int_equal((uint8_t)out.data[sh.data_off], 0xde);
    assert_int_equal(sh.data_hdr_len, 3);
    msgpack_sbuffer_destroy(&in);

    /* empty data map */
    msgpack_sbuffer_clear(&out);
    build_shareable(&in, 0, -1);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)in.data, in.size, kv, 2, &out, &e), 0);
    check_two_keys(&out, 2, 1);
    msgpack_sbuffer_destroy(&in);

    /* headers of 14 entries + 2 new: 8e -> de 00 10; the old entries keep their bytes */
    msgpack_sbuffer_clear(&out);
    build_shareable(&in, 2, 14);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)in.data, in.size, kv, 2, &out, &e), 0);
    check_two_keys(&out, 16, 3);
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)out.data, out.size, &sh, &e), 0);
    assert_int_equal((uint8_t)out.data[sh.headers.off], 0xde);
    assert_int_equal(out.size, in.size + 2 + 9 + 12);
    msgpack_sbuffer_destroy(&in);

    /* headers of 65535 + 1: de -> df */
    msgpack_sbuffer_clear(&out);
    build_shareable(&in, 0, 65534);
    assert_int_equal(cj_fobs_set_headers((uint8_t *)in.data, in.size, kv, 2, &out, &e), 0);
    assert_int_equal(cj_fobs_find_shareable((uint8_t *)out.data, out.size, &sh, &e), 0);
    assert_int_equal(sh.headers_n, 65536);
    assert_int_equal((uint8_t)out.data[sh.headers.off], 0xdf);
    msgpack_sbuffer_destroy(&in);

    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
    msgpack_sbuffer_destroy(&out);
}

static void test_set_headers_rejects(void **state)
{
    (void)state;
    struct vec v00, v02;
    load(&v00, V00);
    load(&v02, V02);
    msgpack_sbuffer a, out;
    struct cj_fobs_kv kv[2] = {kv_str(&a, "job_id", "J"), {"site_name", (const uint8_t *)"\x92\x01", 2}};
    struct cj_err e = {0};
    msgpack_sbuffer_init(&out);
    assert_int_equal(cj_fobs_set_headers(v00.body, v00.body_len, kv, 1, &out, &e), -CJ_E_MISSING);
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, kv, 2, &out, &e), -CJ_E_INVALID); /* bad value */
    kv[1] = kv[0];
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, kv, 2, &out, &e), -CJ_E_INVALID); /* duplicate */
    kv[1] = (struct cj_fobs_kv){"x", (const uint8_t *)"\xc0\xc0", 2};
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, kv, 2, &out, &e), -CJ_E_INVALID); /* two values */
    assert_int_equal(out.size, 0);
    struct cj_fobs_kv many[CJ_FOBS_MAX_SET + 1];
    for (int i = 0; i <= CJ_FOBS_MAX_SET; i++) many[i] = kv[0];
    assert_int_equal(cj_fobs_set_headers(v02.body, v02.body_len, many, CJ_FOBS_MAX_SET + 1, &out, &e), -CJ_E_LIMIT);
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&out);
    free(v00.buf);
    free(v02.buf);
}

/* ---- writers ---------------------------------------------------------------- */

static void test_writers_v14(void **state)
{
    (void)state;
    struct vec v14;
    load(&v14, V14);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(cj_fobs_write_shareable_begin(&pk, 1), 0);
    cj_fobs_write_str(&pk, "__headers__");
    msgpack_pack_map(&pk, 1);
    cj_fobs_write_str(&pk, "__peer_ctx__");
    assert_int_equal(cj_fobs_write_flcontext(&pk, "site-1", "job-7f3a"), 0);
    assert_int_equal(cj_fobs_write_shareable_end(&pk), 0);
    assert_int_equal(sb.size, v14.body_len);
    assert_memory_equal(sb.data, v14.body, sb.size);
    msgpack_sbuffer_destroy(&sb);
    free(v14.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v00),
        cmocka_unit_test(test_v01),
        cmocka_unit_test(test_v02),
        cmocka_unit_test(test_v03_native),
        cmocka_unit_test(test_v04_lazy),
        cmocka_unit_test(test_v08_datumref),
        cmocka_unit_test(test_v09_v10_result),
        cmocka_unit_test(test_v16_try_again),
        cmocka_unit_test(test_json_accepts),
        cmocka_unit_test(test_json_rejects),
        cmocka_unit_test(test_list_refs_rules),
        cmocka_unit_test(test_walk_depth_and_truncation),
        cmocka_unit_test(test_walk_stops),
        cmocka_unit_test(test_walk_odd_shapes),
        cmocka_unit_test(test_find_shareable_rules),
        cmocka_unit_test(test_set_headers_v02_to_v12),
        cmocka_unit_test(test_set_headers_missing_and_size_classes),
        cmocka_unit_test(test_set_headers_rejects),
        cmocka_unit_test(test_writers_v14),
    };
    return cmocka_run_group_tests_name("fobs", tests, NULL, NULL);
}
