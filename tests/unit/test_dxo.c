/* SPDX-License-Identifier: Apache-2.0 */
/* test_dxo.c — the DXO helper (lib/payload/dxo.h): writer parity with the
 * server task vector 02, reading vectors 02/03/04, write -> read round trips
 * in both formats (and inline), decoding the output with the generic walker
 * and ref lister, and hostile inputs (every truncation and byte flip). */
#include "testutil.h"
#include "payload/dxo.h"
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"

#define V02 "02_server_task_shareable_via_downloader.bin"
#define V03 "03_task_shareable_native.bin"
#define V04 "04_cj_task_ready_lazy_reemit.bin"

#define REF_C9 "11111111-2222-4333-8444-0000000000c9"

/* The MAIN body span of a payload. */
static void main_body(const uint8_t *p, size_t len, size_t *off, size_t *blen)
{
    struct cj_lobs_section m;
    struct cj_err e = {0};
    assert_int_equal(cj_lobs_validate(p, len, &m, NULL, 0, NULL, &e), 0);
    *off = (size_t)(m.value - p);
    *blen = m.value_len;
}

static void assert_name(const struct cj_dxo_tensor *t, const char *want)
{
    char name[256];
    cj_dxo_name(t, name, sizeof name);
    assert_string_equal(name, want);
}

static void assert_item(const struct cj_dxo_tensor *t, const char *want, int64_t idx)
{
    assert_true(t->is_ref);
    assert_int_equal(t->data_len, strlen(want));
    assert_memory_equal(t->data, want, strlen(want));
    assert_int_equal(t->item, idx);
}

/* ---- vector 02 ------------------------------------------------------------------- */

static void read_v02(void **state)
{
    (void)state;
    size_t len, off, blen;
    uint8_t *p = tu_read_vector(V02, &len);
    main_body(p, len, &off, &blen);
    struct cj_dxo_tensor t[4];
    struct cj_dxo_in d = {.tensors = t, .cap = 4};
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d, &e), 0);
    assert_int_equal(d.n_tensors, 2);
    assert_int_equal(d.n_refs, 2);
    assert_int_equal(d.n_native, 0);
    assert_int_equal(d.dot, 3);
    assert_int_equal(d.n_items, 2);
    assert_true(d.has_datum);
    assert_int_equal(d.n_datums, 1);
    assert_string_equal(d.fqcn, "server.job-7f3a");
    assert_string_equal(d.ref_id, REF_C9);
    assert_string_equal(d.kind, "WEIGHTS");
    assert_true(d.has_round);
    assert_int_equal(d.current_round, 3);
    assert_name(&t[0], "fc1.weight");
    assert_name(&t[1], "fc1.bias");
    assert_int_equal(t[0].kind, CJ_FOBS_WRAP_NUMPY);
    assert_item(&t[0], "T0", 0);
    assert_item(&t[1], "T1", 1);
    /* the headers span is the raw __headers__ map: 5 entries, task_name "train" */
    assert_true(d.headers.len > 0);
    struct cj_fobs_headers h;
    assert_int_equal(cj_fobs_read_headers(p + d.headers.off, d.headers.len, &h, &e), 0);
    char name[32];
    assert_int_equal(cj_fobs_span_str(p + d.headers.off, h.task_name, name, sizeof name, &e), 0);
    assert_string_equal(name, "train");
    /* count-then-fill: cap 1 still counts 2 */
    struct cj_dxo_in d1 = {.tensors = t, .cap = 1};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d1, &e), 0);
    assert_int_equal(d1.n_tensors, 2);
    struct cj_dxo_in d0 = {0};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d0, &e), 0);
    assert_int_equal(d0.n_tensors, 2);
    free(p);
}

/* Writing the same tree as the server did gives vector 02 byte for byte. */
static void write_v02_parity(void **state)
{
    (void)state;
    size_t len, off, blen;
    uint8_t *p = tu_read_vector(V02, &len);
    main_body(p, len, &off, &blen);
    struct cj_dxo_tensor t[2];
    struct cj_dxo_in d = {.tensors = t, .cap = 2};
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d, &e), 0);
    static const char *const names[] = {"fc1.weight", "fc1.bias"};
    uint8_t id[16];
    size_t idl;
    uint8_t *idp = tu_hex("11111111222243338444 0000000000ca", &idl);
    assert_int_equal(idl, 16);
    memcpy(id, idp, 16);
    free(idp);
    struct cj_dxo_out o = {
        .headers = p + d.headers.off, .headers_len = d.headers.len, .dot = 3, .n_tensors = 2, .names = names,
        .meta = p + d.meta.off, .meta_len = d.meta.len, .source = "server.job-7f3a", .ref_id = REF_C9,
        .datum_id = id,
    };
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dxo_write(&sb, &o, &e), 0);
    assert_int_equal(sb.size, len);
    assert_memory_equal(sb.data, p, len);
    msgpack_sbuffer_destroy(&sb);
    free(p);
}

/* ---- vectors 03 (native) and 04 (TASK_READY with lazy refs) ---------------------- */

static void read_v03_native(void **state)
{
    (void)state;
    size_t len, off, blen;
    uint8_t *p = tu_read_vector(V03, &len);
    main_body(p, len, &off, &blen);
    struct cj_dxo_tensor t[2];
    struct cj_dxo_in d = {.tensors = t, .cap = 2};
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d, &e), 0);
    assert_int_equal(d.n_tensors, 2);
    assert_int_equal(d.n_native, 2);
    assert_int_equal(d.n_refs, 0);
    assert_int_equal(d.dot, 0);
    assert_false(d.has_datum);
    assert_false(t[0].is_ref);
    assert_int_equal(t[0].item, -1);
    assert_true(t[0].data_len > 10);
    assert_memory_equal(t[0].data, "\x93NUMPY", 6);   /* an .npy file inline */
    free(p);
}

/* TASK_READY envelope: the Shareable is the "model" value inside the MAIN body. */
static void read_v04_model(void **state)
{
    (void)state;
    size_t len, off, blen;
    uint8_t *p = tu_read_vector(V04, &len);
    main_body(p, len, &off, &blen);
    struct cj_range model;
    struct cj_err e = {0};
    assert_int_equal(cj_fobs_map_get(p + off, blen, "model", &model, &e), 1);
    struct cj_dxo_tensor t[2];
    struct cj_dxo_in d = {.tensors = t, .cap = 2};
    assert_int_equal(cj_dxo_read(p, len, off + model.off, model.len, &d, &e), 0);
    assert_int_equal(d.n_tensors, 2);
    assert_int_equal(t[0].kind, CJ_FOBS_WRAP_LAZY);
    assert_int_equal(t[0].dot, 3);
    assert_int_equal(d.dot, 3);
    assert_string_equal(d.fqcn, "server.job-7f3a");
    assert_string_equal(d.ref_id, REF_C9);
    assert_name(&t[1], "fc1.bias");
    assert_item(&t[1], "T1", 1);
    /* the whole MAIN body is not a Shareable */
    assert_int_not_equal(cj_dxo_read(p, len, off, blen, &d, &e), 0);
    free(p);
}

/* ---- round trips ----------------------------------------------------------------- */

/* {"__content_type__": "DXO", "__task_id__": "t-1"} */
static void small_headers(msgpack_sbuffer *hb)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(hb);
    msgpack_packer_init(&pk, hb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    cj_fobs_write_str(&pk, "__content_type__");
    cj_fobs_write_str(&pk, "DXO");
    cj_fobs_write_str(&pk, "__task_id__");
    cj_fobs_write_str(&pk, "t-1");
}

static void round_trip(uint8_t dot, size_t n)
{
    msgpack_sbuffer hb, sb;
    small_headers(&hb);
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "junk", 4);      /* appends: what was there stays */
    struct cj_dxo_out o = {
        .headers = (const uint8_t *)hb.data, .headers_len = hb.size, .dot = dot, .n_tensors = n,
        .current_round = 7, .source = "server.J1", .ref_id = "0f0e0d0c-0b0a-4908-8706-050403020100",
    };
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_write(&sb, &o, &e), 0);
    assert_memory_equal(sb.data, "junk", 4);
    const uint8_t *p = (const uint8_t *)sb.data + 4;
    size_t len = sb.size - 4, off, blen;

    /* the generic decoders agree */
    main_body(p, len, &off, &blen);
    struct cj_fobs_ref_counts rc;
    assert_int_equal(cj_fobs_count_refs(p + off, blen, &rc, &e), 0);
    int k = dot == 3 ? 0 : 1;
    assert_int_equal(rc.wrappers[k], n);
    assert_int_equal(rc.items[k], n);
    assert_int_equal(rc.wrappers[1 - k], 0);
    assert_int_equal(rc.other_refs, 0);
    assert_int_equal(rc.native, 0);
    struct cj_fobs_ref refs[2];
    size_t nr;
    assert_int_equal(cj_fobs_list_refs(p, len, refs, 2, &nr, &e), 0);
    assert_int_equal(nr, 1);
    assert_int_equal(refs[0].dot, dot);
    assert_string_equal(refs[0].fqcn, "server.J1");
    assert_string_equal(refs[0].ref_id, "0f0e0d0c-0b0a-4908-8706-050403020100");
    assert_true((refs[0].datum_id[6] & 0xf0) == 0x40);            /* a uuid4 */
    /* the JSON is Python's json.dumps spacing */
    struct cj_lobs_section m, ds;
    size_t nd;
    assert_int_equal(cj_lobs_validate(p, len, &m, &ds, 1, &nd, &e), 0);
    assert_int_equal(nd, 1);
    const char *json = "{\"fqcn\": \"server.J1\", \"ref_id\": \"0f0e0d0c-0b0a-4908-8706-050403020100\"}";
    assert_int_equal(ds.value_len, strlen(json));
    assert_memory_equal(ds.value, json, strlen(json));
    struct cj_fobs_shareable sh;
    assert_int_equal(cj_fobs_find_shareable(p + off, blen, &sh, &e), 0);
    assert_int_equal(sh.headers.len, hb.size);
    assert_memory_equal(p + off + sh.headers.off, hb.data, hb.size);

    /* and dxo_read gives back what was written */
    struct cj_dxo_tensor *t = calloc(n, sizeof *t);
    struct cj_dxo_in d = {.tensors = t, .cap = n};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d, &e), 0);
    assert_int_equal(d.n_tensors, n);
    assert_int_equal(d.n_refs, n);
    assert_int_equal(d.n_items, n);
    assert_int_equal(d.dot, dot);
    assert_string_equal(d.kind, "WEIGHTS");
    assert_true(d.has_round);
    assert_int_equal(d.current_round, 7);
    assert_string_equal(d.fqcn, "server.J1");
    assert_int_equal(d.headers.len, hb.size);
    for (size_t i = 0; i < n; i++) {
        char want[32], item[16];
        snprintf(want, sizeof want, "layer%zu.weight", i);
        snprintf(item, sizeof item, "T%zu", i);
        assert_name(&t[i], want);
        assert_item(&t[i], item, (int64_t)i);
        assert_int_equal(t[i].kind, dot == 3 ? CJ_FOBS_WRAP_NUMPY : CJ_FOBS_WRAP_TORCH);
    }
    free(t);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&hb);
}

static void round_trip_numpy(void **state)
{
    (void)state;
    round_trip(3, 1);
    round_trip(3, 8);
}

static void round_trip_safetensors(void **state)
{
    (void)state;
    round_trip(6, 8);
    round_trip(6, 300);    /* map16 for data, T<3 digits> */
}

static void round_trip_native(void **state)
{
    (void)state;
    static const uint8_t a[] = {1, 2, 3}, b[] = {4};
    const uint8_t *nat[] = {a, b};
    size_t nl[] = {3, 1};
    static const char *const names[] = {"x", "y"};
    struct cj_dxo_out o = {.dot = 6, .n_tensors = 2, .names = names, .kind = "WEIGHT_DIFF", .current_round = 1,
                           .native = nat, .native_len = nl};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_write(&sb, &o, &e), 0);
    const uint8_t *p = (const uint8_t *)sb.data;
    size_t off, blen, nd;
    assert_int_equal(cj_lobs_validate(p, sb.size, NULL, NULL, 0, &nd, &e), 0);
    assert_int_equal(nd, 0);
    main_body(p, sb.size, &off, &blen);
    struct cj_dxo_tensor t[2];
    struct cj_dxo_in d = {.tensors = t, .cap = 2};
    assert_int_equal(cj_dxo_read(p, sb.size, off, blen, &d, &e), 0);
    assert_int_equal(d.n_native, 2);
    assert_int_equal(d.headers.len, 0);
    assert_string_equal(d.kind, "WEIGHT_DIFF");
    assert_false(t[0].is_ref);
    assert_int_equal(t[0].data_len, 3);
    assert_memory_equal(t[0].data, a, 3);
    assert_int_equal(t[1].data_len, 1);
    struct cj_fobs_ref_counts rc;
    assert_int_equal(cj_fobs_count_refs(p + off, blen, &rc, &e), 0);
    assert_int_equal(rc.native, 2);
    msgpack_sbuffer_destroy(&sb);
}

/* ---- refusals -------------------------------------------------------------------- */

static void write_refusals(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    struct cj_err e = {0};
    struct cj_dxo_out o = {.dot = 3, .n_tensors = 1, .source = "server.J1", .ref_id = "r"};
    struct cj_dxo_out bad = o;
    bad.dot = 4;
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    bad = o;
    bad.n_tensors = 0;
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    bad = o;
    bad.source = "";
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    bad = o;
    bad.ref_id = "a\nb";
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    bad = o;
    bad.headers = (const uint8_t *)"\x92\x01\x02";   /* an array */
    bad.headers_len = 3;
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    bad.headers = (const uint8_t *)"\x80\x80";       /* two values */
    bad.headers_len = 2;
    assert_int_equal(cj_dxo_write(&sb, &bad, &e), -CJ_E_INVALID);
    assert_int_equal(sb.size, 0);
    /* quotes and backslashes are escaped as json.dumps does */
    o.ref_id = "a\"b\\c";
    assert_int_equal(cj_dxo_write(&sb, &o, &e), 0);
    struct cj_dxo_in d = {0};
    size_t off, blen;
    main_body((const uint8_t *)sb.data, sb.size, &off, &blen);
    assert_int_equal(cj_dxo_read((const uint8_t *)sb.data, sb.size, off, blen, &d, &e), 0);
    assert_string_equal(d.ref_id, "a\"b\\c");
    msgpack_sbuffer_destroy(&sb);
}

/* Shareable{DXO: <dxo>} with an optional datum, built by hand. */
static void hand_payload(msgpack_sbuffer *sb, void (*dxo)(msgpack_packer *), uint8_t datum_dot)
{
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    cj_fobs_write_shareable_begin(&pk, 1);
    cj_fobs_write_str(&pk, "DXO");
    dxo(&pk);
    cj_fobs_write_shareable_end(&pk);
    struct cj_err e = {0};
    msgpack_sbuffer_init(sb);
    assert_int_equal(cj_lobs_write_main_header(sb, body.size, &e), 0);
    msgpack_sbuffer_write(sb, body.data, body.size);
    if (datum_dot) {
        static const uint8_t id[16] = {1};
        const char *j = "{\"fqcn\": \"s\", \"ref_id\": \"r\"}";
        assert_int_equal(cj_lobs_write_datum(sb, CJ_LOBS_TEXT, datum_dot, id, j, strlen(j), &e), 0);
    }
    msgpack_sbuffer_destroy(&body);
}

static void tensor(msgpack_packer *pk, const char *name, const char *type, const char *item)
{
    cj_fobs_write_str(pk, name);
    msgpack_pack_map(pk, 3);
    cj_fobs_write_str(pk, "__fobs_type__");
    cj_fobs_write_str(pk, type);
    cj_fobs_write_str(pk, "__fobs_data__");
    msgpack_pack_map(pk, 2);
    cj_fobs_write_str(pk, "type");
    cj_fobs_write_str(pk, "ref");
    cj_fobs_write_str(pk, "data");
    cj_fobs_write_str(pk, item);
    cj_fobs_write_str(pk, "__fobs_dc__");
    cj_fobs_write_str(pk, "x");
}

static void dxo_mixed(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    cj_fobs_write_str(pk, "data");
    msgpack_pack_map(pk, 2);
    tensor(pk, "a", CJ_FOBS_NUMPY, "T0");
    tensor(pk, "b", CJ_FOBS_TORCH, "T0");
}

static void dxo_bad_item(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    cj_fobs_write_str(pk, "data");
    msgpack_pack_map(pk, 1);
    tensor(pk, "a", CJ_FOBS_NUMPY, "T01");
}

static void dxo_unknown_type(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    cj_fobs_write_str(pk, "data");
    msgpack_pack_map(pk, 1);
    tensor(pk, "a", "builtins.dict", "T0");
}

static void dxo_no_data(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    cj_fobs_write_str(pk, "meta");
    msgpack_pack_map(pk, 0);
}

static void dxo_one(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    cj_fobs_write_str(pk, "data");
    msgpack_pack_map(pk, 1);
    tensor(pk, "a", CJ_FOBS_TORCH, "T0");
}

static int read_hand(void (*dxo)(msgpack_packer *), uint8_t datum_dot)
{
    msgpack_sbuffer sb;
    hand_payload(&sb, dxo, datum_dot);
    size_t off, blen;
    main_body((const uint8_t *)sb.data, sb.size, &off, &blen);
    struct cj_dxo_in d = {0};
    struct cj_err e = {0};
    int rc = cj_dxo_read((const uint8_t *)sb.data, sb.size, off, blen, &d, &e);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void read_refusals(void **state)
{
    (void)state;
    assert_int_equal(read_hand(dxo_one, 6), 0);
    assert_int_equal(read_hand(dxo_one, 3), -CJ_E_MISSING);     /* no DOT-6 datum */
    assert_int_equal(read_hand(dxo_one, 0), -CJ_E_MISSING);
    assert_int_equal(read_hand(dxo_mixed, 3), -CJ_E_INVALID);
    assert_int_equal(read_hand(dxo_bad_item, 3), -CJ_E_INVALID);
    assert_int_equal(read_hand(dxo_unknown_type, 3), -CJ_E_TYPE);
    assert_int_equal(read_hand(dxo_no_data, 0), -CJ_E_MISSING);
    /* a Shareable without DXO: vector 14 (get_task request) */
    size_t len, off, blen;
    uint8_t *p = tu_read_vector("14_get_task_request.bin", &len);
    main_body(p, len, &off, &blen);
    struct cj_dxo_in d = {0};
    struct cj_err e = {0};
    assert_int_equal(cj_dxo_read(p, len, off, blen, &d, &e), -CJ_E_MISSING);
    /* a body span outside the payload */
    assert_int_equal(cj_dxo_read(p, len, len, 1, &d, &e), -CJ_E_INVALID);
    free(p);
}

/* Every truncation and every single-byte change of vector 02 is either read or
 * refused cleanly (ASan/UBSan catch the rest); reads stay inside the input. */
static void hostile(void **state)
{
    (void)state;
    size_t len, off, blen;
    uint8_t *p = tu_read_vector(V02, &len);
    main_body(p, len, &off, &blen);
    struct cj_dxo_tensor t[4];
    struct cj_err e;
    for (size_t n = 0; n < len; n++) {
        uint8_t *q = malloc(n ? n : 1);
        memcpy(q, p, n);
        struct cj_dxo_in d = {.tensors = t, .cap = 4};
        size_t bl = off + blen <= n ? blen : (n > off ? n - off : 0);
        (void)cj_dxo_read(q, n, off <= n ? off : n, bl, &d, &e);
        free(q);
    }
    static const uint8_t flips[] = {0x00, 0xff, 0xc0, 0x80, 0xdf, 0x01};
    for (size_t i = 0; i < len; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            uint8_t *q = malloc(len);
            memcpy(q, p, len);
            q[i] = flips[f];
            struct cj_dxo_in d = {.tensors = t, .cap = 4};
            if (cj_dxo_read(q, len, off, blen, &d, &e) == 0) {
                assert_true(d.n_tensors <= 4 || d.cap == 4);
                for (size_t k = 0; k < d.n_tensors && k < 4; k++) {
                    assert_true(t[k].name >= q && t[k].name + t[k].name_len <= q + len);
                    assert_true(t[k].data >= q && t[k].data + t[k].data_len <= q + len);
                }
            }
            free(q);
        }
    }
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(read_v02),
        cmocka_unit_test(write_v02_parity),
        cmocka_unit_test(read_v03_native),
        cmocka_unit_test(read_v04_model),
        cmocka_unit_test(round_trip_numpy),
        cmocka_unit_test(round_trip_safetensors),
        cmocka_unit_test(round_trip_native),
        cmocka_unit_test(write_refusals),
        cmocka_unit_test(read_refusals),
        cmocka_unit_test(hostile),
    };
    return cmocka_run_group_tests_name("dxo", tests, NULL, NULL);
}
