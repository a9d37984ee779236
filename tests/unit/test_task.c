/* SPDX-License-Identifier: Apache-2.0 */
/* test_task.c — the task table (add / find / states / expire / count), bad
 * payloads refused with a reason, and the payload helpers of the upstream loop
 * checked against vectors 02, 09, 13, 14, 15 and 16. */
#include "testutil.h"
#include "fl/task.h"
#include "fl/flmsg.h"

#include <malloc.h>

#include <event2/buffer.h>
#include <msgpack.h>

#include "payload/lobs.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define REF_C9 "11111111-2222-4333-8444-0000000000c9"
#define REF_385 "11111111-2222-4333-8444-000000000385"
#define ROOT_D00D "11111111-2222-4333-8444-00000000d00d"

static uint8_t *ev_bytes(struct evbuffer *b, size_t *len)
{
    *len = evbuffer_get_length(b);
    uint8_t *p = malloc(*len ? *len : 1);
    evbuffer_copyout(b, p, *len);
    return p;
}

static void assert_ev_equals_vector(struct evbuffer *b, const char *vec)
{
    size_t n, vn;
    uint8_t *got = ev_bytes(b, &n);
    uint8_t *want = tu_read_vector(vec, &vn);
    assert_int_equal(n, vn);
    assert_memory_equal(got, want, vn);
    free(got);
    free(want);
}

static bool is_lower_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static void test_add_vector02(void **state)
{
    size_t len;
    uint8_t *p = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    struct cj_task_table *tt = cj_task_table_new();
    char why[256] = "";
    struct cj_task *t = cj_task_add(tt, p, len, why, sizeof why);
    assert_non_null(t);
    assert_true(is_lower_hex(t->id, CJ_TASK_ID_LEN));
    assert_string_equal(t->server_id, "9b2c0c1e-task");
    assert_string_equal(t->name, "train");
    assert_string_equal(t->worker, "");
    assert_int_equal(t->state, CJ_TASK_RECEIVED);
    assert_int_equal(t->n_refs, 1);
    assert_int_equal(t->refs[0].dot, 3);
    assert_string_equal(t->refs[0].fqcn, "server.job-7f3a");
    assert_string_equal(t->refs[0].ref_id, REF_C9);
    assert_int_equal(t->refs[0].items, 2);
    assert_int_equal(t->refs[0].state, CJ_REF_PENDING);
    /* the raw __headers__ map: 5 entries, a copy (not a pointer into the payload) */
    assert_non_null(t->headers);
    assert_int_equal(t->headers[0], 0x85);
    assert_true(t->headers < p || t->headers >= p + len);
    bool found = false;
    for (size_t i = 0; i + t->headers_len <= len; i++)
        if (memcmp(p + i, t->headers, t->headers_len) == 0) found = true;
    assert_true(found);
    assert_true(t->created > 0 && t->changed == t->created);
    free(p);   /* the task never needs the payload again */

    assert_ptr_equal(cj_task_find(tt, t->id), t);
    assert_ptr_equal(cj_task_find_server(tt, "9b2c0c1e-task"), t);
    assert_null(cj_task_find(tt, "00000000000000000000000000000000"));
    assert_null(cj_task_find_server(tt, "nope"));
    assert_ptr_equal(cj_task_first(tt), t);
    assert_null(t->next);
    assert_int_equal(cj_task_count(tt, false), 1);
    assert_int_equal(cj_task_count(tt, true), 1);
    char rt[256];
    assert_string_equal(cj_task_refs_text(t->refs, t->n_refs, rt, sizeof rt), "3:server.job-7f3a/" REF_C9 "(2 items)");
    assert_string_equal(cj_task_refs_text(NULL, 0, rt, sizeof rt), "none");
    cj_task_table_free(tt);
}

static void test_duplicate_and_states(void **state)
{
    size_t len;
    uint8_t *p = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    struct cj_task_table *tt = cj_task_table_new();
    char why[256] = "";
    struct cj_task *a = cj_task_add(tt, p, len, why, sizeof why);
    assert_non_null(a);
    /* the same server task again while in flight: refused (its refs must not go to two workers) */
    assert_null(cj_task_add(tt, p, len, why, sizeof why));
    assert_non_null(strstr(why, "already in flight"));
    assert_non_null(strstr(why, a->id));

    cj_task_set_state(a, CJ_TASK_DELIVERING);
    assert_int_equal(a->state, CJ_TASK_DELIVERING);
    double c = a->changed;
    cj_task_set_state(a, CJ_TASK_DELIVERING);   /* no change: no new timestamp */
    assert_true(a->changed == c);
    cj_task_set_state(a, CJ_TASK_DONE);
    assert_int_equal(cj_task_count(tt, true), 0);
    assert_int_equal(cj_task_count(tt, false), 1);

    /* finished: the server may hand the id out again; the new one is found first */
    struct cj_task *b = cj_task_add(tt, p, len, why, sizeof why);
    assert_non_null(b);
    assert_string_not_equal(a->id, b->id);
    assert_ptr_equal(cj_task_find_server(tt, "9b2c0c1e-task"), b);
    assert_ptr_equal(cj_task_first(tt), a);
    assert_ptr_equal(a->next, b);

    cj_task_fail(b, "worker %s died", "w1");
    assert_int_equal(b->state, CJ_TASK_FAILED);
    assert_string_equal(b->why, "worker w1 died");
    cj_task_fail(b, "second reason");
    assert_string_equal(b->why, "worker w1 died");   /* the first failure is kept */
    assert_int_equal(cj_task_count(tt, true), 0);

    /* tombstones: kept until the TTL, then dropped */
    double now = cj_now();
    cj_task_table_expire(tt, now);
    assert_int_equal(cj_task_count(tt, false), 2);
    struct cj_task *c2 = cj_task_add(tt, p, len, why, sizeof why);   /* in flight: never expires */
    assert_non_null(c2);
    char keep[CJ_TASK_ID_LEN + 1];
    strcpy(keep, c2->id);
    cj_task_table_expire(tt, now + CJ_TASK_TOMBSTONE_SECS + 1);
    assert_int_equal(cj_task_count(tt, false), 1);
    assert_ptr_equal(cj_task_first(tt), c2);
    assert_ptr_equal(cj_task_find(tt, keep), c2);
    assert_null(c2->next);
    /* the table still appends correctly after removals */
    cj_task_set_state(c2, CJ_TASK_DONE);
    struct cj_task *d = cj_task_add(tt, p, len, why, sizeof why);
    assert_non_null(d);
    assert_ptr_equal(c2->next, d);
    assert_int_equal(cj_task_count(tt, false), 2);
    free(p);
    cj_task_table_free(tt);
}

/* Found by a soak run: 10,000 tasks added and finished leave at most
 * CJ_TASK_MAX_TOMBSTONES tombstones; the newest CJ_TASK_FULL_TOMBSTONES keep
 * headers and refs, older ones are compacted; recent tombstones still answer
 * lookups (by local and by server id); an in-flight task is never dropped; the
 * heap in use stops growing once the table is full. */
static void test_tombstones_bounded(void **state)
{
    size_t len;
    uint8_t *p = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    struct cj_task_table *tt = cj_task_table_new();
    char why[256] = "";
    int level = cj_log_get_level();
    cj_log_set_level(CJ_LOG_ERROR);   /* 20,000 info lines otherwise */
    /* one task stays in flight the whole time */
    struct cj_task *live = cj_task_add(tt, p, len, why, sizeof why);
    assert_non_null(live);
    char live_id[CJ_TASK_ID_LEN + 1];
    strcpy(live_id, live->id);
    enum { N = 10000 };
    static char ids[N][CJ_TASK_ID_LEN + 1];
    size_t heap_at_2000 = 0;
    uint8_t *q = malloc(len);
    memcpy(q, p, len);
    /* a different server task id for the rest: "9b2c0c1e-task" -> "9b2c0c1e-tas2" */
    int hits = 0;
    for (uint8_t *hit = q; (hit = memmem(hit, len - (size_t)(hit - q), "9b2c0c1e-task", 13)); hits++) hit[12] = '2';
    assert_true(hits > 0);
    for (int i = 0; i < N; i++) {
        struct cj_task *t = cj_task_add(tt, q, len, why, sizeof why);
        if (!t) fail_msg("task %d: %s", i, why);
        strcpy(ids[i], t->id);
        cj_task_set_state(t, CJ_TASK_DELIVERING);
        if (i % 3 == 0) cj_task_fail(t, "worker died");
        else cj_task_set_state(t, CJ_TASK_DONE);
        assert_true(cj_task_count(tt, false) - cj_task_count(tt, true) <= CJ_TASK_MAX_TOMBSTONES);
        if (i == 2000) heap_at_2000 = mallinfo2().uordblks;
    }
    size_t heap_end = mallinfo2().uordblks;
    cj_log_set_level(level);
    /* exactly the cap, plus the task in flight */
    assert_int_equal(cj_task_count(tt, false), CJ_TASK_MAX_TOMBSTONES + 1);
    assert_int_equal(cj_task_count(tt, true), 1);
    assert_ptr_equal(cj_task_find(tt, live_id), live);
    assert_int_equal(live->n_refs, 1);
    assert_non_null(live->headers);
    /* the oldest dropped first */
    assert_null(cj_task_find(tt, ids[0]));
    assert_null(cj_task_find(tt, ids[N - CJ_TASK_MAX_TOMBSTONES - 1]));
    /* every one of the newest answers */
    for (int i = N - CJ_TASK_MAX_TOMBSTONES; i < N; i++) {
        struct cj_task *t = cj_task_find(tt, ids[i]);
        assert_non_null(t);
        assert_int_equal(t->state, i % 3 == 0 ? CJ_TASK_FAILED : CJ_TASK_DONE);
        assert_string_equal(t->server_id, "9b2c0c1e-tas2");
        assert_string_equal(t->name, "train");
        if (i % 3 == 0) assert_string_equal(t->why, "worker died");
        bool full = i >= N - CJ_TASK_FULL_TOMBSTONES;
        assert_true(full ? t->headers != NULL : t->headers == NULL);
        assert_int_equal(t->n_refs, full ? 1 : 0);
        if (full) assert_string_equal(t->refs[0].ref_id, REF_C9);
        char rt[64];
        cj_task_refs_text(t->refs, t->n_refs, rt, sizeof rt);   /* compacted: "none", no crash */
    }
    /* a compacted tombstone refuses result refs instead of writing into freed memory */
    struct cj_task *old = cj_task_find(tt, ids[N - CJ_TASK_MAX_TOMBSTONES]);
    assert_int_equal(cj_task_set_result_refs(old, p, len, why, sizeof why), -1);
    assert_non_null(strstr(why, "no longer holds refs"));
    /* the latest finished one answers a duplicate by server id */
    assert_ptr_equal(cj_task_find_server(tt, "9b2c0c1e-tas2"), cj_task_find(tt, ids[N - 1]));
    assert_ptr_equal(cj_task_find_server(tt, "9b2c0c1e-task"), live);
    /* the heap stops growing once the table is full (0 under ASan's allocator) */
    assert_true(heap_end < heap_at_2000 + 64 * 1024);
    /* arrival order is kept: the task in flight first, then the newest tombstones */
    assert_ptr_equal(cj_task_first(tt), live);
    free(q);
    free(p);
    cj_task_table_free(tt);
}

static void expect_refused(struct cj_task_table *tt, const uint8_t *p, size_t len, const char *text)
{
    char why[256] = "";
    assert_null(cj_task_add(tt, p, len, why, sizeof why));
    assert_true(why[0] != '\0');
    if (text && !strstr(why, text)) fail_msg("reason '%s' lacks '%s'", why, text);
}

static void test_bad_payloads(void **state)
{
    struct cj_task_table *tt = cj_task_table_new();
    size_t len;
    uint8_t junk[] = { 0x64, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0xc0 };
    expect_refused(tt, NULL, 0, "not a task");
    expect_refused(tt, junk, 3, "not a task");
    expect_refused(tt, junk, sizeof junk, "not a task");   /* body nil: not a Shareable */

    uint8_t *v16 = tu_read_vector("16_get_task_reply_try_again.bin", &len);
    expect_refused(tt, v16, len, "__try_again__");
    free(v16);

    uint8_t *v09 = tu_read_vector("09_trainer_result_ready_flmodel.bin", &len);
    expect_refused(tt, v09, len, "not a task");   /* a result_ready body, not a Shareable */
    free(v09);

    uint8_t *v02 = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    expect_refused(tt, v02, len - 1, "not a task");   /* truncated datum */
    expect_refused(tt, v02, 500, "not a task");        /* truncated body */
    free(v02);

    /* a Shareable without __task_id__ (vector 14's body has only __peer_ctx__, no task_name) */
    uint8_t *v14 = tu_read_vector("14_get_task_request.bin", &len);
    expect_refused(tt, v14, len, "task_name");
    free(v14);
    assert_int_equal(cj_task_count(tt, false), 0);

    /* vector 03: the same task with inline tensors: a task with no refs */
    uint8_t *v03 = tu_read_vector("03_task_shareable_native.bin", &len);
    char why[256];
    struct cj_task *t = cj_task_add(tt, v03, len, why, sizeof why);
    assert_non_null(t);
    assert_int_equal(t->n_refs, 0);
    free(v03);
    cj_task_table_free(tt);
}

/* 02 plus 16 extra DOT-3 datums: a task, but too many refs to pass through. */
static void test_too_many_refs_added_failed(void **state)
{
    size_t len;
    uint8_t *v02 = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, (const char *)v02, len);
    struct cj_err e;
    for (int i = 0; i < CJ_TASK_MAX_REFS; i++) {
        uint8_t id[16] = { 0xaa, (uint8_t)i };
        char json[128];
        int n = snprintf(json, sizeof json, "{\"fqcn\": \"server.job-7f3a\", \"ref_id\": \"ref-%d\"}", i);
        assert_int_equal(cj_lobs_write_datum(&sb, CJ_LOBS_TEXT, 3, id, json, (size_t)n, &e), 0);
    }
    struct cj_task_table *tt = cj_task_table_new();
    char why[256] = "";
    struct cj_task *t = cj_task_add(tt, (const uint8_t *)sb.data, sb.size, why, sizeof why);
    assert_non_null(t);   /* kept, so the caller reports it upstream */
    assert_int_equal(t->state, CJ_TASK_FAILED);
    assert_string_equal(t->server_id, "9b2c0c1e-task");
    assert_non_null(strstr(t->why, "17 download refs"));
    assert_non_null(strstr(why, "17 download refs"));
    assert_int_equal(cj_task_count(tt, true), 0);
    /* a failed result can still be built for it */
    struct evbuffer *out = evbuffer_new();
    assert_int_equal(cj_flmsg_failed_payload(out, t, "EXECUTION_EXCEPTION", ROOT_D00D, "site-1", "job-7f3a", why,
                                             sizeof why), 0);
    size_t n;
    uint8_t *fp = ev_bytes(out, &n);
    char rc[64];
    assert_int_equal(cj_flmsg_read_rc(fp, n, rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "EXECUTION_EXCEPTION");
    free(fp);
    evbuffer_free(out);
    cj_task_table_free(tt);
    msgpack_sbuffer_destroy(&sb);
    free(v02);
}

static void test_reply_reading(void **state)
{
    size_t len;
    char why[256];
    struct cj_flmsg_task_reply r;
    uint8_t *v16 = tu_read_vector("16_get_task_reply_try_again.bin", &len);
    assert_int_equal(cj_flmsg_read_reply(v16, len, &r, why, sizeof why), 0);
    assert_string_equal(r.task_name, "__try_again__");
    assert_string_equal(r.task_id, "");
    assert_true(r.wait_time == 1.0);
    assert_true(r.min_get_task_timeout < 0);
    free(v16);

    uint8_t *v02 = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    assert_int_equal(cj_flmsg_read_reply(v02, len, &r, why, sizeof why), 0);
    assert_string_equal(r.task_name, "train");
    assert_string_equal(r.task_id, "9b2c0c1e-task");
    assert_true(r.wait_time < 0);
    char rc[64];
    assert_int_equal(cj_flmsg_read_rc(v02, len, rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "OK");   /* no __rc__: OK */
    free(v02);

    uint8_t bad[] = { 0x64, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0x80 };
    assert_int_equal(cj_flmsg_read_reply(bad, sizeof bad, &r, why, sizeof why), -1);
    assert_true(why[0] != '\0');
    assert_int_equal(cj_flmsg_read_rc(bad, sizeof bad, rc, sizeof rc, why, sizeof why), -1);
    assert_int_equal(cj_flmsg_read_rc(NULL, 0, rc, sizeof rc, why, sizeof why), -1);
}

static void test_builders_match_vectors(void **state)
{
    char why[256];
    struct evbuffer *b = evbuffer_new();
    assert_int_equal(cj_flmsg_get_task_request(b, "site-1", "job-7f3a", NULL, why, sizeof why), 0);
    assert_ev_equals_vector(b, "14_get_task_request.bin");
    evbuffer_drain(b, evbuffer_get_length(b));

    assert_int_equal(cj_flmsg_aux_request(b, "__task_check__", "9b2c0c1e-task", "site-1", "job-7f3a", why, sizeof why),
                     0);
    assert_ev_equals_vector(b, "15_aux_task_check_request.bin");
    evbuffer_drain(b, evbuffer_get_length(b));

    /* submit_update = vector 13 (09's result with task 02's headers) */
    size_t len, rlen;
    uint8_t *v02 = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    uint8_t *v09 = tu_read_vector("09_trainer_result_ready_flmodel.bin", &rlen);
    struct cj_task_table *tt = cj_task_table_new();
    struct cj_task *t = cj_task_add(tt, v02, len, why, sizeof why);
    assert_non_null(t);
    free(v02);   /* built from the task's own copy of the headers */
    assert_int_equal(cj_flmsg_submit_payload(b, t, v09, rlen, ROOT_D00D, "site-1", "job-7f3a", why, sizeof why), 0);
    assert_ev_equals_vector(b, "13_relay_submit_update_splice.bin");
    evbuffer_drain(b, evbuffer_get_length(b));

    /* the result's refs */
    assert_int_equal(cj_task_set_result_refs(t, v09, rlen, why, sizeof why), 0);
    assert_int_equal(t->n_result_refs, 1);
    assert_int_equal(t->result_refs[0].dot, 3);
    assert_string_equal(t->result_refs[0].fqcn, "site-1.job-7f3a.client_api_trainer_0");
    assert_string_equal(t->result_refs[0].ref_id, REF_385);

    /* bad result: refused with a reason, nothing appended */
    assert_int_equal(cj_flmsg_submit_payload(b, t, v09, 40, ROOT_D00D, "site-1", "job-7f3a", why, sizeof why), -1);
    assert_int_equal(evbuffer_get_length(b), 0);
    assert_non_null(strstr(why, "submit_update"));
    free(v09);

    /* failed result: never a code that would abort the job */
    assert_int_equal(cj_flmsg_failed_payload(b, t, "TASK_UNKNOWN", ROOT_D00D, "site-1", "job-7f3a", why, sizeof why),
                     -1);
    assert_int_equal(evbuffer_get_length(b), 0);
    cj_task_table_free(tt);
    evbuffer_free(b);
}

static void test_aux_reply(void **state)
{
    char why[256], rc[64];
    size_t len, n;
    struct evbuffer *b = evbuffer_new();
    /* to a request with a cookie jar (a task payload has one): echoed */
    uint8_t *v02 = tu_read_vector("02_server_task_shareable_via_downloader.bin", &len);
    assert_int_equal(cj_flmsg_aux_reply(b, v02, len, "TOPIC_UNKNOWN", "site-1", "job-7f3a", why, sizeof why), 0);
    uint8_t *p = ev_bytes(b, &n);
    assert_int_equal(cj_flmsg_read_rc(p, n, rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "TOPIC_UNKNOWN");
    const char jar[] = "\xae__cookie_jar__\x81\xab__task_id__\xad" "9b2c0c1e-task";
    bool found = false;
    for (size_t i = 0; i + sizeof jar - 1 <= n; i++)
        if (memcmp(p + i, jar, sizeof jar - 1) == 0) found = true;
    assert_true(found);
    free(p);
    free(v02);
    evbuffer_drain(b, evbuffer_get_length(b));
    /* without a request */
    assert_int_equal(cj_flmsg_aux_reply(b, NULL, 0, "OK", "site-1", "job-7f3a", why, sizeof why), 0);
    p = ev_bytes(b, &n);
    assert_int_equal(cj_flmsg_read_rc(p, n, rc, sizeof rc, why, sizeof why), 0);
    assert_string_equal(rc, "OK");
    assert_null(memmem(p, n, "__cookie_jar__", 14));
    assert_non_null(memmem(p, n, "__peer_ctx__", 12));
    free(p);
    evbuffer_free(b);
}

static void test_names_and_uuid(void **state)
{
    assert_string_equal(cj_task_state_name(CJ_TASK_RECEIVED), "received");
    assert_string_equal(cj_task_state_name(CJ_TASK_SUBMITTING), "submitting");
    assert_string_equal(cj_task_state_name(CJ_TASK_FAILED), "failed");
    assert_string_equal(cj_task_state_name((enum cj_task_state)99), "?");
    assert_string_equal(cj_ref_state_name(CJ_REF_TIMED_OUT), "timed_out");
    assert_string_equal(cj_ref_state_name(-1), "?");
    char a[37], b[37];
    assert_int_equal(cj_uuid4_str(a), 0);
    assert_int_equal(cj_uuid4_str(b), 0);
    assert_int_equal(strlen(a), 36);
    assert_int_equal(a[14], '4');
    assert_string_not_equal(a, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_vector02),
        cmocka_unit_test(test_duplicate_and_states),
        cmocka_unit_test(test_tombstones_bounded),
        cmocka_unit_test(test_bad_payloads),
        cmocka_unit_test(test_too_many_refs_added_failed),
        cmocka_unit_test(test_reply_reading),
        cmocka_unit_test(test_builders_match_vectors),
        cmocka_unit_test(test_aux_reply),
        cmocka_unit_test(test_names_and_uuid),
    };
    return cmocka_run_group_tests_name("task", tests, NULL, NULL);
}
