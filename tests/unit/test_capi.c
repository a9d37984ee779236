/* SPDX-License-Identifier: Apache-2.0 */
/* test_capi.c — Client API bodies: byte parity with vectors 20-28, decode of
 * each back to its fields, generic re-encode parity, HELLO checks in NVFlare's
 * order, hello_accepted checks, hostile inputs. */
#include "testutil.h"
#include "mpbody.h"
#include "fl/capi.h"
#include "payload/lobs.h"

#define SESS "5e55104d0c1e4c7e9a3f00000000a001"
#define TASK "7a5c0de0b1e54f0e8d2c00000000b002"
#define FQCN "site-1.job-7f3a.client_api_trainer_1"
#define PROOF "q6Y0Zc3rXl2oZ5m8A9tK1vW4bN7sH0dJ3fL6pR9uE2g"

static const char *const vectors[] = {
    "20_capi_hello.bin", "21_capi_hello_accepted.bin", "22_capi_hello_rejected.bin", "23_capi_session_ready.bin",
    "24_capi_task_accepted.bin", "25_capi_result_accepted.bin", "26_capi_heartbeat.bin", "27_capi_shutdown.bin",
    "28_capi_log.bin",
};

/* How each vector is decoded: a request kind, or the request a reply answers. */
static const struct { enum cj_capi_kind kind; bool reply; } how[] = {
    {CJ_CAPI_HELLO, false},   {CJ_CAPI_HELLO, true},     {CJ_CAPI_HELLO, true},
    {CJ_CAPI_SESSION_READY, false}, {CJ_CAPI_TASK_READY, true}, {CJ_CAPI_RESULT_READY, true},
    {CJ_CAPI_HEARTBEAT, false}, {CJ_CAPI_SHUTDOWN, false}, {CJ_CAPI_LOG, false},
};

static struct cj_capi_msg *new_msg(void)
{
    struct cj_capi_msg *m = calloc(1, sizeof *m);
    assert_non_null(m);
    return m;
}

static int decode(int idx, const uint8_t *p, size_t len, struct cj_capi_msg *m, struct cj_err *e)
{
    return how[idx].reply ? cj_capi_decode_reply(how[idx].kind, p, len, m, e)
                          : cj_capi_decode_request(how[idx].kind, p, len, m, e);
}

/* ---- encoder parity ---------------------------------------------------------------- */

static void test_encode_vectors(void **state)
{
    (void)state;
    struct cj_err e = {0};
    msgpack_sbuffer sb;
#define ONE(vec, call)                           \
    do {                                         \
        msgpack_sbuffer_init(&sb);               \
        assert_int_equal(call, 0);               \
        assert_sb_is(&sb, vec);                  \
        msgpack_sbuffer_destroy(&sb);            \
    } while (0)
    ONE("20_capi_hello.bin", cj_capi_encode_hello(&sb, FQCN, PROOF, "job-7f3a", "site-1", &e));
    ONE("21_capi_hello_accepted.bin",
        cj_capi_encode_hello_accepted(&sb, SESS, "job-7f3a", "site-1", 5.0, 30.0, false, NULL, NULL, &e));
    ONE("22_capi_hello_rejected.bin", cj_capi_encode_hello_rejected(&sb, "launch token mismatch", &e));
    ONE("23_capi_session_ready.bin", cj_capi_encode_session_ready(&sb, SESS, &e));
    ONE("24_capi_task_accepted.bin", cj_capi_encode_task_accepted(&sb, TASK, &e));
    ONE("25_capi_result_accepted.bin", cj_capi_encode_result_accepted(&sb, &e));
    ONE("26_capi_heartbeat.bin", cj_capi_encode_heartbeat(&sb, SESS, false, &e));
    ONE("27_capi_shutdown.bin", cj_capi_encode_shutdown(&sb, SESS, "shutdown requested", &e));
    struct cj_capi_value v = {.type = CJ_CAPI_V_FLOAT, .f = 0.25};
    struct cj_capi_extra x = {.name = "global_step", .v = {.type = CJ_CAPI_V_INT, .i = 10}};
    ONE("28_capi_log.bin", cj_capi_encode_log(&sb, SESS, "train_loss", &v, "SCALAR", &x, 1, &e));
#undef ONE
}

/* ---- decode each vector ------------------------------------------------------------------ */

static void test_decode_vectors(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    struct cj_err e = {0};
    size_t len;
    uint8_t *p;

    p = tu_read_vector(vectors[0], &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_HELLO, p, len, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_HELLO);
    assert_string_equal(m->trainer_fqcn, FQCN);
    assert_string_equal(m->proof, PROOF);
    assert_int_equal(m->protocol_version.type, CJ_CAPI_V_INT);
    assert_int_equal(m->protocol_version.i, 1);
    assert_string_equal(m->job_id, "job-7f3a");
    assert_string_equal(m->site_name, "site-1");
    assert_string_equal(m->rank, "0");
    assert_true(m->rank_is_str);
    assert_int_equal(m->bad, 0);
    free(p);

    p = tu_read_vector(vectors[1], &len);
    assert_int_equal(cj_capi_decode_reply(CJ_CAPI_HELLO, p, len, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_HELLO_ACCEPTED);
    assert_string_equal(m->session_id, SESS);
    assert_string_equal(m->job_id, "job-7f3a");
    assert_string_equal(m->site_name, "site-1");
    assert_true(m->heartbeat_interval == 5.0 && m->heartbeat_timeout == 30.0);
    assert_true((m->has & CJ_CAPI_F_SECURE_MODE) && !m->secure_mode);
    assert_false(m->has & (CJ_CAPI_F_AUTH_TOKEN | CJ_CAPI_F_AUTH_SIGNATURE));
    char why[128];
    assert_int_equal(cj_capi_check_hello_accepted(m, false, why, sizeof why), 0);
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), -1);
    free(p);

    p = tu_read_vector(vectors[2], &len);
    assert_int_equal(cj_capi_decode_reply(CJ_CAPI_HELLO, p, len, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_HELLO_REJECTED);
    assert_string_equal(m->reason, "launch token mismatch");
    assert_false(m->reason_cut);
    free(p);

    p = tu_read_vector(vectors[3], &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_SESSION_READY, p, len, m, &e), 0);
    assert_string_equal(m->session_id, SESS);
    assert_int_equal(m->has, CJ_CAPI_F_SESSION_ID);
    free(p);

    p = tu_read_vector(vectors[4], &len);
    assert_int_equal(cj_capi_decode_reply(CJ_CAPI_TASK_READY, p, len, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_TASK_ACCEPTED);
    assert_string_equal(m->task_id, TASK);
    free(p);

    p = tu_read_vector(vectors[5], &len);
    assert_int_equal(cj_capi_decode_reply(CJ_CAPI_RESULT_READY, p, len, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_RESULT_ACCEPTED);
    assert_int_equal(m->has, 0);
    free(p);

    p = tu_read_vector(vectors[6], &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_HEARTBEAT, p, len, m, &e), 0);
    assert_string_equal(m->session_id, SESS);
    assert_true((m->has & CJ_CAPI_F_SOURCE_LIVE) && !m->result_source_live);
    free(p);

    p = tu_read_vector(vectors[7], &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_SHUTDOWN, p, len, m, &e), 0);
    assert_string_equal(m->session_id, SESS);
    assert_string_equal(m->reason, "shutdown requested");
    free(p);

    p = tu_read_vector(vectors[8], &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_LOG, p, len, m, &e), 0);
    assert_string_equal(m->session_id, SESS);
    assert_string_equal(m->key, "train_loss");
    assert_int_equal(m->value.type, CJ_CAPI_V_FLOAT);
    assert_true(m->value.f == 0.25);
    assert_string_equal(m->data_type, "SCALAR");
    assert_int_equal(m->n_extras, 1);
    assert_string_equal(m->extras[0].name, "global_step");
    assert_int_equal(m->extras[0].v.type, CJ_CAPI_V_INT);
    assert_int_equal(m->extras[0].v.i, 10);
    assert_int_equal(m->n_dropped, 0);
    free(p);
    free(m);
}

/* decode -> cj_capi_encode gives the vector's bytes back. */
static void test_reencode_vectors(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        size_t len;
        uint8_t *p = tu_read_vector(vectors[i], &len);
        struct cj_err e = {0};
        if (decode((int)i, p, len, m, &e)) fail_msg("%s: %s", vectors[i], e.msg);
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        if (cj_capi_encode(&sb, m, &e)) fail_msg("%s: encode: %s", vectors[i], e.msg);
        assert_sb_is(&sb, vectors[i]);
        msgpack_sbuffer_destroy(&sb);
        free(p);
    }
    free(m);
}

/* Every strict prefix of each vector fails, and so does every strict prefix of
 * its body re-wrapped with a matching MAIN header; nothing crashes. */
static void test_truncation(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        size_t len;
        uint8_t *p = tu_read_vector(vectors[i], &len);
        for (size_t cut = 0; cut < len; cut++) {
            struct cj_err e = {0};
            uint8_t *q = malloc(cut ? cut : 1);
            memcpy(q, p, cut);
            if (decode((int)i, q, cut, m, &e) == 0) fail_msg("%s: prefix %zu decoded", vectors[i], cut);
            free(q);
        }
        for (size_t cut = 0; cut < len - CJ_LOBS_HDR_LEN; cut++) {
            struct cj_err e = {0};
            size_t wl;
            uint8_t *w = wrap(p + CJ_LOBS_HDR_LEN, cut, &wl);
            if (decode((int)i, w, wl, m, &e) == 0) fail_msg("%s: body prefix %zu decoded", vectors[i], cut);
            free(w);
        }
        free(p);
    }
    free(m);
}

/* ---- hostile bodies ------------------------------------------------------------------------------ */


static int body_decode(struct body *b, bool reply, enum cj_capi_kind kind, struct cj_capi_msg *m, struct cj_err *e)
{
    size_t len;
    uint8_t *p = wrap(b->sb.data, b->sb.size, &len);
    int rc = reply ? cj_capi_decode_reply(kind, p, len, m, e) : cj_capi_decode_request(kind, p, len, m, e);
    free(p);
    msgpack_sbuffer_destroy(&b->sb);
    return rc;
}

static void test_hostile(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    struct cj_err e = {0};
    struct body b;

    /* not a map */
    msgpack_sbuffer_init(&b.sb);
    msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);
    msgpack_pack_array(&b.pk, 0);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), -CJ_E_TYPE);

    /* missing key */
    body_init(&b, 1);
    kstr(&b, "reason", "x");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HEARTBEAT, m, &e), -CJ_E_MISSING);
    assert_non_null(strstr(e.msg, "session_id"));

    /* wrong type */
    body_init(&b, 1);
    str(&b, "session_id");
    msgpack_pack_int(&b.pk, 5);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HEARTBEAT, m, &e), -CJ_E_TYPE);
    body_init(&b, 2);
    kstr(&b, "session_id", SESS);
    kstr(&b, "result_source_live", "yes");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HEARTBEAT, m, &e), -CJ_E_TYPE);

    /* oversize id */
    char big[CJ_CAPI_ID_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    body_init(&b, 1);
    kstr(&b, "session_id", big);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_SESSION_READY, m, &e), -CJ_E_LIMIT);
    big[CJ_CAPI_ID_MAX] = 0;   /* exactly at the limit: fine */
    body_init(&b, 1);
    kstr(&b, "session_id", big);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_SESSION_READY, m, &e), 0);

    /* NUL and invalid UTF-8 */
    body_init(&b, 1);
    str(&b, "session_id");
    msgpack_pack_str_with_body(&b.pk, "a\0b", 3);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_SESSION_READY, m, &e), -CJ_E_INVALID);
    body_init(&b, 1);
    str(&b, "session_id");
    msgpack_pack_str_with_body(&b.pk, "\xc3\x28", 2);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_SESSION_READY, m, &e), -CJ_E_INVALID);

    /* extra keys (also non-str keys) tolerated; duplicate keeps the last */
    body_init(&b, 4);
    kstr(&b, "zzz", "extra");
    msgpack_pack_array(&b.pk, 1); msgpack_pack_int(&b.pk, 1); msgpack_pack_nil(&b.pk);
    kstr(&b, "session_id", "first");
    kstr(&b, "session_id", "second");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_SESSION_READY, m, &e), 0);
    assert_string_equal(m->session_id, "second");

    /* reason longer than 1024 characters is cut (at a character boundary) */
    char *longr = malloc(3000);
    for (int i = 0; i < 1500; i++) { longr[2 * i] = (char)0xc3; longr[2 * i + 1] = (char)0xa9; }   /* é */
    longr[2999] = 0;
    longr[2998] = 'x';
    body_init(&b, 2);
    kstr(&b, "reply_topic", "client_api.error");
    kstr(&b, "reason", longr);
    assert_int_equal(body_decode(&b, true, CJ_CAPI_HEARTBEAT, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_ERROR);
    assert_true(m->reason_cut);
    assert_int_equal(strlen(m->reason), 2048);
    free(longr);

    /* replies: unexpected reply_topic, missing reply_topic, reply to a fire-and-forget */
    body_init(&b, 2);
    kstr(&b, "reply_topic", "client_api.task_accepted");
    kstr(&b, "task_id", "t");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_HELLO, m, &e), -CJ_E_INVALID);
    body_init(&b, 1);
    kstr(&b, "task_id", "t");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_TASK_READY, m, &e), -CJ_E_MISSING);
    body_init(&b, 1);
    kstr(&b, "reply_topic", "client_api.heartbeat");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_LOG, m, &e), -CJ_E_INVALID);
    /* heartbeat reply without session_id */
    body_init(&b, 1);
    kstr(&b, "reply_topic", "client_api.heartbeat");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_HEARTBEAT, m, &e), -CJ_E_MISSING);
    /* task_failed without task_id, error in reply to task_ready */
    body_init(&b, 2);
    kstr(&b, "reply_topic", "client_api.task_failed");
    kstr(&b, "reason", "no GPU");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_TASK_READY, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_TASK_FAILED);
    assert_false(m->has & CJ_CAPI_F_TASK_ID);
    /* shutdown reply: no reply_topic needed; result_source_live must be a bool */
    body_init(&b, 1);
    str(&b, "result_source_live");
    msgpack_pack_true(&b.pk);
    assert_int_equal(body_decode(&b, true, CJ_CAPI_SHUTDOWN, m, &e), 0);
    assert_int_equal(m->kind, CJ_CAPI_SHUTDOWN_REPLY);
    assert_true(m->result_source_live);
    body_init(&b, 1);
    str(&b, "result_source_live");
    msgpack_pack_int(&b.pk, 1);
    assert_int_equal(body_decode(&b, true, CJ_CAPI_SHUTDOWN, m, &e), -CJ_E_TYPE);
    /* hello_accepted with int heartbeats, secure mode with tokens */
    body_init(&b, 9);
    kstr(&b, "reply_topic", "client_api.hello_accepted");
    kstr(&b, "session_id", SESS);
    kstr(&b, "job_id", "j");
    kstr(&b, "site_name", "s");
    str(&b, "heartbeat_interval"); msgpack_pack_int(&b.pk, 5);
    str(&b, "heartbeat_timeout"); msgpack_pack_int(&b.pk, 0);
    str(&b, "secure_mode"); msgpack_pack_true(&b.pk);
    kstr(&b, "auth_token", "tok");
    kstr(&b, "auth_token_signature", "NA");
    assert_int_equal(body_decode(&b, true, CJ_CAPI_HELLO, m, &e), 0);
    char why[128];
    assert_true(m->heartbeat_interval == 5.0 && m->heartbeat_timeout == 0.0);
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), -1);
    assert_non_null(strstr(why, "signature"));
    m->heartbeat_timeout = 4;
    strcpy(m->auth_token_signature, "sig");
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), -1);   /* interval >= timeout */
    m->heartbeat_timeout = 0;
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), 0);    /* 0 disables the lease */
    m->heartbeat_interval = 0;
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), -1);

    /* task_ready envelope: model must be a map; the span points at it */
    body_init(&b, 4);
    kstr(&b, "session_id", "s");
    kstr(&b, "task_id", "t");
    kstr(&b, "task_name", "train");
    str(&b, "model"); msgpack_pack_map(&b.pk, 1); kstr(&b, "a", "b");
    {
        size_t len;
        uint8_t *p = wrap(b.sb.data, b.sb.size, &len);
        assert_int_equal(cj_capi_decode_request(CJ_CAPI_TASK_READY, p, len, m, &e), 0);
        assert_int_equal(m->body_len, 5);
        assert_int_equal(m->body[0], 0x81);
        assert_ptr_equal(m->body, p + m->body_off);
        free(p);
        msgpack_sbuffer_destroy(&b.sb);
    }
    body_init(&b, 3);
    kstr(&b, "session_id", "s");
    kstr(&b, "task_id", "t");
    kstr(&b, "result", "not a map");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_RESULT_READY, m, &e), -CJ_E_TYPE);
    free(m);
}

static void test_log(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    struct cj_err e = {0};
    struct body b;
    /* plain-str data_type, str value, non-scalar extra dropped, too many extras dropped, duplicate extra last wins */
    body_init(&b, 4 + CJ_CAPI_LOG_MAX_EXTRAS + 3);
    kstr(&b, "session_id", SESS);
    kstr(&b, "key", "note");
    kstr(&b, "value", "hello");
    kstr(&b, "data_type", "TEXT");
    str(&b, "nested"); msgpack_pack_map(&b.pk, 0);
    for (int i = 0; i < CJ_CAPI_LOG_MAX_EXTRAS + 1; i++) {
        char k[16];
        snprintf(k, sizeof k, "x%d", i);
        str(&b, k);
        msgpack_pack_int(&b.pk, i);
    }
    str(&b, "x0"); msgpack_pack_false(&b.pk);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_LOG, m, &e), 0);
    assert_int_equal(m->value.type, CJ_CAPI_V_STR);
    assert_string_equal(m->value.s, "hello");
    assert_string_equal(m->data_type, "TEXT");
    assert_int_equal(m->n_extras, CJ_CAPI_LOG_MAX_EXTRAS);
    assert_int_equal(m->n_dropped, 2);
    assert_string_equal(m->extras[0].name, "x0");
    assert_int_equal(m->extras[0].v.type, CJ_CAPI_V_BOOL);
    /* non-scalar value is refused */
    body_init(&b, 4);
    kstr(&b, "session_id", SESS);
    kstr(&b, "key", "k");
    str(&b, "value"); msgpack_pack_array(&b.pk, 0);
    kstr(&b, "data_type", "SCALAR");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_LOG, m, &e), -CJ_E_TYPE);
    /* an enum wrapper of another type is refused */
    body_init(&b, 4);
    kstr(&b, "session_id", SESS);
    kstr(&b, "key", "k");
    str(&b, "value"); msgpack_pack_uint64(&b.pk, UINT64_MAX);
    str(&b, "data_type"); msgpack_pack_map(&b.pk, 2); kstr(&b, "__fobs_type__", "x.Other"); kstr(&b, "__fobs_data__", "S");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_LOG, m, &e), -CJ_E_INVALID);
    /* uint64 above INT64_MAX round-trips */
    body_init(&b, 4);
    kstr(&b, "session_id", SESS);
    kstr(&b, "key", "k");
    str(&b, "value"); msgpack_pack_uint64(&b.pk, UINT64_MAX);
    kstr(&b, "data_type", "SCALAR");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_LOG, m, &e), 0);
    assert_int_equal(m->value.type, CJ_CAPI_V_UINT);
    assert_true(m->value.u == UINT64_MAX);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_capi_encode(&sb, m, &e), 0);
    struct cj_capi_msg *m2 = new_msg();
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_LOG, (uint8_t *)sb.data, sb.size, m2, &e), 0);
    assert_true(m2->value.type == CJ_CAPI_V_UINT && m2->value.u == UINT64_MAX);
    assert_string_equal(m2->data_type, "SCALAR");
    msgpack_sbuffer_destroy(&sb);
    free(m2);
    free(m);
}

/* ---- HELLO checks ---------------------------------------------------------------------------- */

static struct cj_capi_hello_expect expect(void)
{
    return (struct cj_capi_hello_expect){true, FQCN, FQCN, PROOF, "job-7f3a", "site-1"};
}

static void test_hello_check(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    struct cj_err e = {0};
    size_t len;
    uint8_t *p = tu_read_vector("20_capi_hello.bin", &len);
    assert_int_equal(cj_capi_decode_request(CJ_CAPI_HELLO, p, len, m, &e), 0);
    free(p);
    char r[512];
    struct cj_capi_hello_expect x = expect();
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 0);

    x.active = false;
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 1);
    assert_string_equal(r, "no active trainer launch");
    x = expect();
    x.origin = "site-1.job-7f3a.other";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 2);
    assert_string_equal(r, "unexpected trainer identity (origin='site-1.job-7f3a.other', claimed='" FQCN "')");
    x = expect();
    x.launch_token = "q6Y0Zc3rXl2oZ5m8A9tK1vW4bN7sH0dJ3fL6pR9uE2h";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 3);
    assert_string_equal(r, "launch token mismatch");
    x.launch_token = "";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 3);
    x = expect();
    x.job_id = "job-other";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 5);
    assert_string_equal(r, "job id mismatch: 'job-7f3a'");
    x = expect();
    x.site_name = "site-2";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 5);
    assert_string_equal(r, "site name mismatch: 'site-1'");

    /* order: identity is checked before the token, the token before the version */
    x = expect();
    x.origin = "other";
    x.launch_token = "wrong";
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 2);

    /* lenient decoding: wrong types become reasons, not errors */
    struct body b;
    body_init(&b, 6);
    kstr(&b, "trainer_fqcn", FQCN);
    str(&b, "proof"); msgpack_pack_int(&b.pk, 7);
    str(&b, "protocol_version"); msgpack_pack_int(&b.pk, 1);
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    str(&b, "rank"); msgpack_pack_int(&b.pk, 0);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    x = expect();
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 3);   /* proof not a str */

    body_init(&b, 5);
    kstr(&b, "trainer_fqcn", FQCN);
    kstr(&b, "proof", PROOF);
    str(&b, "protocol_version"); msgpack_pack_double(&b.pk, 1.0);   /* Python: 1.0 == 1 */
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 6);   /* rank absent: str(None) */
    assert_string_equal(r, "only rank 0 may connect (got rank None)");

    body_init(&b, 6);
    kstr(&b, "trainer_fqcn", FQCN);
    kstr(&b, "proof", PROOF);
    kstr(&b, "protocol_version", "1");
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    kstr(&b, "rank", "0");
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 4);
    assert_string_equal(r, "unsupported protocol version '1' (expect 1)");

    body_init(&b, 6);
    kstr(&b, "trainer_fqcn", FQCN);
    kstr(&b, "proof", PROOF);
    str(&b, "protocol_version"); msgpack_pack_int(&b.pk, 2);
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    str(&b, "rank"); msgpack_pack_int(&b.pk, 0);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 4);
    assert_string_equal(r, "unsupported protocol version 2 (expect 1)");

    body_init(&b, 6);
    kstr(&b, "trainer_fqcn", FQCN);
    kstr(&b, "proof", PROOF);
    str(&b, "protocol_version"); msgpack_pack_int(&b.pk, 1);
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    str(&b, "rank"); msgpack_pack_int(&b.pk, 0);   /* int 0: str(0) == "0" */
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 0);

    body_init(&b, 6);
    kstr(&b, "trainer_fqcn", FQCN);
    kstr(&b, "proof", PROOF);
    str(&b, "protocol_version"); msgpack_pack_int(&b.pk, 1);
    kstr(&b, "job_id", "job-7f3a");
    kstr(&b, "site_name", "site-1");
    str(&b, "rank"); msgpack_pack_double(&b.pk, 0.0);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 6);
    assert_string_equal(r, "only rank 0 may connect (got rank 0.0)");

    /* trainer_fqcn missing: claimed None; an oversize proof is just a mismatch */
    char *huge = malloc(CJ_CAPI_TOKEN_MAX + 10);
    memset(huge, 'q', CJ_CAPI_TOKEN_MAX + 9);
    huge[CJ_CAPI_TOKEN_MAX + 9] = 0;
    body_init(&b, 1);
    kstr(&b, "proof", huge);
    assert_int_equal(body_decode(&b, false, CJ_CAPI_HELLO, m, &e), 0);
    assert_true(m->bad & CJ_CAPI_F_PROOF);
    assert_int_equal(cj_capi_check_hello(m, &x, r, sizeof r), 2);
    assert_string_equal(r, "unexpected trainer identity (origin='" FQCN "', claimed=None)");
    free(huge);
    free(m);
}

static void test_token_and_session(void **state)
{
    (void)state;
    assert_true(cj_capi_token_equal("abc", 3, "abc"));
    assert_false(cj_capi_token_equal("abd", 3, "abc"));
    assert_false(cj_capi_token_equal("ab", 2, "abc"));
    assert_false(cj_capi_token_equal("abcd", 4, "abc"));
    assert_false(cj_capi_token_equal("", 0, ""));
    char a[33], b[33];
    assert_int_equal(cj_capi_new_session_id(a), 0);
    assert_int_equal(cj_capi_new_session_id(b), 0);
    assert_int_equal(strlen(a), 32);
    for (int i = 0; i < 32; i++) assert_non_null(strchr("0123456789abcdef", a[i]));
    assert_string_not_equal(a, b);
    assert_int_equal(cj_capi_kind_from_topic("client_api.result_source_settled"), CJ_CAPI_SETTLED);
    assert_int_equal(cj_capi_kind_from_topic("client_api.nope"), CJ_CAPI_NONE);
    assert_string_equal(cj_capi_topic(CJ_CAPI_SETTLED_REPLY), "client_api.result_source_settled");
    assert_null(cj_capi_topic(CJ_CAPI_SHUTDOWN_REPLY));
}

/* The other encoders read back, and refuse what they could not read back. */
static void test_encoders_roundtrip(void **state)
{
    (void)state;
    struct cj_capi_msg *m = new_msg();
    struct cj_err e = {0};
    msgpack_sbuffer sb;
#define RT(req, reply, call)                                                                 \
    do {                                                                                     \
        msgpack_sbuffer_init(&sb);                                                           \
        assert_int_equal(call, 0);                                                           \
        int rc_ = reply ? cj_capi_decode_reply(req, (uint8_t *)sb.data, sb.size, m, &e)      \
                        : cj_capi_decode_request(req, (uint8_t *)sb.data, sb.size, m, &e);   \
        if (rc_) fail_msg("%s", e.msg);                                                      \
        msgpack_sbuffer_destroy(&sb);                                                        \
    } while (0)
    RT(CJ_CAPI_TASK_READY, true, cj_capi_encode_task_failed(&sb, "t1", "bad task", &e));
    assert_true(m->kind == CJ_CAPI_TASK_FAILED && !strcmp(m->task_id, "t1") && !strcmp(m->reason, "bad task"));
    RT(CJ_CAPI_RESULT_READY, true, cj_capi_encode_result_rejected(&sb, "a result was already accepted for this task", &e));
    assert_int_equal(m->kind, CJ_CAPI_RESULT_REJECTED);
    RT(CJ_CAPI_SETTLED, false, cj_capi_encode_settled(&sb, SESS, TASK, &e));
    assert_true(!strcmp(m->session_id, SESS) && !strcmp(m->task_id, TASK));
    RT(CJ_CAPI_SETTLED, true, cj_capi_encode_settled_reply(&sb, TASK, &e));
    assert_true(m->kind == CJ_CAPI_SETTLED_REPLY && !strcmp(m->task_id, TASK));
    RT(CJ_CAPI_SETTLED, true, cj_capi_encode_error(&sb, "no live result source matching task_id 'x'", &e));
    assert_int_equal(m->kind, CJ_CAPI_ERROR);
    RT(CJ_CAPI_HEARTBEAT, true, cj_capi_encode_heartbeat_reply(&sb, SESS, &e));
    assert_true(m->kind == CJ_CAPI_HEARTBEAT_REPLY && !strcmp(m->session_id, SESS));
    RT(CJ_CAPI_SESSION_READY, true, cj_capi_encode_session_ready_reply(&sb, SESS, &e));
    assert_int_equal(m->kind, CJ_CAPI_SESSION_READY_REPLY);
    RT(CJ_CAPI_ABORT, false, cj_capi_encode_abort(&sb, SESS, "worker lost", &e));
    assert_string_equal(m->reason, "worker lost");
    RT(CJ_CAPI_SHUTDOWN, true, cj_capi_encode_shutdown_reply(&sb, true, &e));
    assert_true(m->kind == CJ_CAPI_SHUTDOWN_REPLY && m->result_source_live);
    RT(CJ_CAPI_HELLO, true, cj_capi_encode_hello_accepted(&sb, SESS, "j", "s", 5, 30, true, "tok", "sig", &e));
    assert_true(m->secure_mode && !strcmp(m->auth_token, "tok") && !strcmp(m->auth_token_signature, "sig"));
    char why[64];
    assert_int_equal(cj_capi_check_hello_accepted(m, true, why, sizeof why), 0);
    static const uint8_t model[] = {0x81, 0xa1, 'a', 0x01};
    RT(CJ_CAPI_TASK_READY, false, cj_capi_encode_task_ready(&sb, SESS, TASK, "train", model, sizeof model, &e));
    assert_int_equal(m->body_len, sizeof model);
    assert_memory_equal(m->body, model, sizeof model);
    RT(CJ_CAPI_RESULT_READY, false, cj_capi_encode_result_ready(&sb, SESS, TASK, model, sizeof model, &e));
    assert_string_equal(m->task_id, TASK);
#undef RT
    /* refusals leave sb as it was */
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "pre", 3);
    assert_int_equal(cj_capi_encode_session_ready(&sb, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_capi_encode_session_ready(&sb, "\xff", &e), -CJ_E_INVALID);
    char big[CJ_CAPI_ID_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(cj_capi_encode_task_accepted(&sb, big, &e), -CJ_E_LIMIT);
    assert_int_equal(cj_capi_encode_task_ready(&sb, SESS, TASK, "train", (const uint8_t *)"\x81", 1, &e), -CJ_E_INVALID);
    struct cj_capi_value none = {0};
    assert_int_equal(cj_capi_encode_log(&sb, SESS, "k", &none, "SCALAR", NULL, 0, &e), -CJ_E_INVALID);
    struct cj_capi_value one = {.type = CJ_CAPI_V_INT, .i = 1};
    struct cj_capi_extra clash = {.name = "value", .v = {.type = CJ_CAPI_V_INT}};
    assert_int_equal(cj_capi_encode_log(&sb, SESS, "k", &one, "SCALAR", &clash, 1, &e), -CJ_E_INVALID);
    assert_int_equal(sb.size, 3);
    /* a reason longer than the limit is cut on the way out */
    char *longr = malloc(2001);
    memset(longr, 'r', 2000);
    longr[2000] = 0;
    assert_int_equal(cj_capi_encode_error(&sb, longr, &e), 0);
    assert_int_equal(cj_capi_decode_reply(CJ_CAPI_HEARTBEAT, (uint8_t *)sb.data + 3, sb.size - 3, m, &e), 0);
    assert_int_equal(strlen(m->reason), CJ_CAPI_REASON_MAX_CHARS);
    assert_false(m->reason_cut);
    free(longr);
    msgpack_sbuffer_destroy(&sb);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_vectors),    cmocka_unit_test(test_decode_vectors),
        cmocka_unit_test(test_reencode_vectors),  cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_hostile),           cmocka_unit_test(test_log),
        cmocka_unit_test(test_hello_check),       cmocka_unit_test(test_token_and_session),
        cmocka_unit_test(test_encoders_roundtrip),
    };
    return cmocka_run_group_tests_name("capi", tests, NULL, NULL);
}
