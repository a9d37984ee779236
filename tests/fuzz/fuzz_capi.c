/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_capi.c — Client API decoders, the bootstrap JSON parser and the
 * credentials parser on arbitrary input.
 *
 * Input: a payload, decoded as every request kind and as the reply to every
 * request kind.  Invariants checked:
 *  - whatever a decoder accepts, cj_capi_encode writes (never refuses), and
 *    that decodes again (same kind) to the same fields;
 *  - HELLO: cj_capi_check_hello fails at the same step for both decodes;
 *  - bootstrap: a parsed file formats and parses again to the same struct;
 *  - credentials: parsed values hold no control characters. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl/bootstrap.h"
#include "fl/capi.h"
#include "fl/creds.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static bool same_value(const struct cj_capi_value *a, const struct cj_capi_value *b)
{
    if (a->type != b->type) return false;
    switch (a->type) {
    case CJ_CAPI_V_INT: return a->i == b->i;
    case CJ_CAPI_V_UINT: return a->u == b->u;
    case CJ_CAPI_V_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case CJ_CAPI_V_BOOL: return a->b == b->b;
    case CJ_CAPI_V_STR: return !strcmp(a->s, b->s);
    default: return true;
    }
}

static void check_same(const struct cj_capi_msg *a, const struct cj_capi_msg *b)
{
    CHECK(a->kind == b->kind);
    CHECK(a->has == b->has);
    uint32_t h = a->has;
    if (h & CJ_CAPI_F_SESSION_ID) CHECK(!strcmp(a->session_id, b->session_id));
    if (h & CJ_CAPI_F_TASK_ID) CHECK(!strcmp(a->task_id, b->task_id));
    if (h & CJ_CAPI_F_TASK_NAME) CHECK(!strcmp(a->task_name, b->task_name));
    if (h & CJ_CAPI_F_JOB_ID) CHECK(!strcmp(a->job_id, b->job_id));
    if (h & CJ_CAPI_F_SITE_NAME) CHECK(!strcmp(a->site_name, b->site_name));
    if (h & CJ_CAPI_F_TRAINER_FQCN) CHECK(!strcmp(a->trainer_fqcn, b->trainer_fqcn));
    if (h & CJ_CAPI_F_REASON) CHECK(!strcmp(a->reason, b->reason) && !b->reason_cut);
    if (h & CJ_CAPI_F_PROOF) CHECK(!strcmp(a->proof, b->proof));
    if (h & CJ_CAPI_F_PROTOCOL_VERSION) CHECK(same_value(&a->protocol_version, &b->protocol_version));
    if (h & CJ_CAPI_F_RANK) CHECK(!strcmp(a->rank, b->rank));
    if (h & CJ_CAPI_F_HB_INTERVAL) CHECK(!memcmp(&a->heartbeat_interval, &b->heartbeat_interval, sizeof(double)));
    if (h & CJ_CAPI_F_HB_TIMEOUT) CHECK(!memcmp(&a->heartbeat_timeout, &b->heartbeat_timeout, sizeof(double)));
    if (h & CJ_CAPI_F_SECURE_MODE) CHECK(a->secure_mode == b->secure_mode);
    if (h & CJ_CAPI_F_AUTH_TOKEN) CHECK(!strcmp(a->auth_token, b->auth_token));
    if (h & CJ_CAPI_F_AUTH_SIGNATURE) CHECK(!strcmp(a->auth_token_signature, b->auth_token_signature));
    if (h & CJ_CAPI_F_SOURCE_LIVE) CHECK(a->result_source_live == b->result_source_live);
    if (h & CJ_CAPI_F_BODY) CHECK(a->body_len == b->body_len && !memcmp(a->body, b->body, a->body_len));
    if (h & CJ_CAPI_F_KEY) CHECK(!strcmp(a->key, b->key));
    if (h & CJ_CAPI_F_VALUE) CHECK(same_value(&a->value, &b->value));
    if (h & CJ_CAPI_F_DATA_TYPE) CHECK(!strcmp(a->data_type, b->data_type));
    CHECK(a->n_extras == b->n_extras && b->n_dropped == 0);
    for (size_t i = 0; i < a->n_extras; i++)
        CHECK(!strcmp(a->extras[i].name, b->extras[i].name) && same_value(&a->extras[i].v, &b->extras[i].v));
}

static struct cj_capi_msg m1, m2;

static void roundtrip(enum cj_capi_kind kind, bool reply, const uint8_t *data, size_t size)
{
    struct cj_err err;
    int rc = reply ? cj_capi_decode_reply(kind, data, size, &m1, &err) : cj_capi_decode_request(kind, data, size, &m1, &err);
    if (rc) {
        CHECK(rc < 0);
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    CHECK(cj_capi_encode(&sb, &m1, &err) == 0);
    rc = reply ? cj_capi_decode_reply(kind, (uint8_t *)sb.data, sb.size, &m2, &err)
               : cj_capi_decode_request(kind, (uint8_t *)sb.data, sb.size, &m2, &err);
    CHECK(rc == 0);
    check_same(&m1, &m2);
    if (kind == CJ_CAPI_HELLO && !reply) {
        struct cj_capi_hello_expect x = {true, m1.trainer_fqcn, "site-1.job-7f3a.client_api_trainer_1",
                                         "q6Y0Zc3rXl2oZ5m8A9tK1vW4bN7sH0dJ3fL6pR9uE2g", "job-7f3a", "site-1"};
        char r1[512], r2[512];
        CHECK(cj_capi_check_hello(&m1, &x, r1, sizeof r1) == cj_capi_check_hello(&m2, &x, r2, sizeof r2));
    }
    if (m1.kind == CJ_CAPI_HELLO_ACCEPTED) {
        char w1[128], w2[128];
        CHECK(cj_capi_check_hello_accepted(&m1, m1.secure_mode, w1, sizeof w1) ==
              cj_capi_check_hello_accepted(&m2, m2.secure_mode, w2, sizeof w2));
    }
    msgpack_sbuffer_destroy(&sb);
}

static void same_bootstrap(const struct cj_bootstrap *a, const struct cj_bootstrap *b)
{
    CHECK(a->schema_version == b->schema_version && !strcmp(a->execution_mode, b->execution_mode));
    CHECK(!strcmp(a->connect_url, b->connect_url) && !strcmp(a->cj_fqcn, b->cj_fqcn));
    CHECK(a->cj_pid == b->cj_pid && !strcmp(a->trainer_fqcn, b->trainer_fqcn));
    CHECK(!strcmp(a->launch_token, b->launch_token) && !strcmp(a->job_id, b->job_id));
    CHECK(!strcmp(a->site_name, b->site_name) && a->secure_mode == b->secure_mode);
    const struct cj_bootstrap_task_exchange *x = &a->task_exchange, *y = &b->task_exchange;
    CHECK(x->train_with_eval == y->train_with_eval && x->launch_once == y->launch_once);
    CHECK(!strcmp(x->exchange_format, y->exchange_format) && !strcmp(x->transfer_type, y->transfer_type));
    CHECK(!strcmp(x->server_expected_format, y->server_expected_format));
    CHECK(!strcmp(x->train_task_name, y->train_task_name) && !strcmp(x->eval_task_name, y->eval_task_name));
    CHECK(!strcmp(x->submit_model_task_name, y->submit_model_task_name));
    CHECK(a->memory_gc_rounds == b->memory_gc_rounds && a->cuda_empty_cache == b->cuda_empty_cache);
}

static void bootstrap(const uint8_t *data, size_t size)
{
    static struct cj_bootstrap a, b;
    struct cj_err err;
    if (cj_bootstrap_parse((const char *)data, size, &a, &err)) return;
    char *json;
    size_t len;
    CHECK(cj_bootstrap_format(&a, &json, &len, &err) == 0);
    CHECK(cj_bootstrap_parse(json, len, &b, &err) == 0);
    same_bootstrap(&a, &b);
    free(json);
}

static void creds(const uint8_t *data, size_t size)
{
    static struct cj_creds c;
    struct cj_err err;
    cj_creds_clear(&c);
    if (cj_creds_parse((const char *)data, size, "fuzz", &c, &err)) return;
    const char *v[3] = {c.token, c.signature, c.ssid};
    for (int i = 0; i < 3; i++)
        for (const char *p = v[i]; *p; p++) CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int k = CJ_CAPI_HELLO; k <= CJ_CAPI_SHUTDOWN; k++) {
        roundtrip((enum cj_capi_kind)k, false, data, size);
        roundtrip((enum cj_capi_kind)k, true, data, size);
    }
    bootstrap(data, size);
    creds(data, size);
    return 0;
}
