/* SPDX-License-Identifier: Apache-2.0 */
/* test_statreg.c — the stats registry (lib/ops/statreg.c): every field names a
 * counter inside its source's struct, names are unique, sums add up, and a
 * field whose object does not exist (the spool outside spool mode) is left out. */
#include "testutil.h"

#include <event2/buffer.h>

#include "cell/router.h"
#include "ops/statreg.h"
#include "util/stats.h"

static const size_t src_size[CJ_STAT_NSRC] = {
    [CJ_STAT_RELAY] = sizeof(struct cj_stats),
    [CJ_STAT_ROUTER] = sizeof(struct cj_router_counters),
    [CJ_STAT_SESSIONS] = sizeof(struct cj_fl_sessions_stats),
    [CJ_STAT_SPOOL] = sizeof(struct cj_spool_stats),
    [CJ_STAT_STAGE] = sizeof(struct cj_spool_stage_stats),
};

static void test_fields_are_sound(void **state)
{
    (void)state;
    size_t n = 0;
    for (size_t i = 0; i < cj_stat_nsections; i++) {
        const struct cj_stat_section *sec = &cj_stat_sections[i];
        assert_true(sec->nfields > 0);
        assert_non_null(sec->help);
        for (size_t j = 0; j < sec->nfields; j++, n++) {
            const struct cj_stat_field *f = &sec->fields[j];
            assert_non_null(f->help);
            assert_true(f->help[0] != '\0');
            assert_true(f->nterms == 1 || f->nterms == 2);
            for (int t = 0; t < f->nterms; t++) {
                assert_true(f->term[t].src < CJ_STAT_NSRC);
                assert_true(f->term[t].off % sizeof(uint64_t) == 0);
                assert_true(f->term[t].off + sizeof(uint64_t) <= src_size[f->term[t].src]);
            }
            assert_ptr_equal(cj_stat_find(f->name), f);   /* unique across sections */
            for (const char *p = f->name; *p; p++) assert_true((*p >= 'a' && *p <= 'z') || *p == '_');
        }
    }
    assert_true(n >= 50);
    assert_null(cj_stat_find("nope"));
}

static void test_values_and_sums(void **state)
{
    (void)state;
    struct cj_stats relay = {.tasks_in = 7, .drops = 2, .workers_refused = 1};
    struct cj_router_counters router = {.up_msgs = 11, .drops = 3, .returns_sent = 4, .fwd_errors_sent = 5,
                                        .workers_refused = 6};
    struct cj_stat_sources s = {0};
    s.src[CJ_STAT_RELAY] = &relay;
    s.src[CJ_STAT_ROUTER] = &router;
    assert_int_equal(cj_stat_value(cj_stat_find("tasks_in"), &s), 7);
    assert_int_equal(cj_stat_value(cj_stat_find("msgs_up"), &s), 11);
    assert_int_equal(cj_stat_value(cj_stat_find("drops"), &s), 5);
    assert_int_equal(cj_stat_value(cj_stat_find("returns_sent"), &s), 9);
    assert_int_equal(cj_stat_value(cj_stat_find("workers_refused"), &s), 7);
    assert_true(cj_stat_present(cj_stat_find("drops"), &s));
    assert_false(cj_stat_present(cj_stat_find("hellos_accepted"), &s));
    assert_false(cj_stat_present(cj_stat_find("spool_refs"), &s));
    assert_int_equal(cj_stat_find("spool_bytes_on_disk")->kind, CJ_STAT_GAUGE);
    assert_int_equal(cj_stat_find("bytes_up")->kind, CJ_STAT_COUNTER);
}

static char *render(const struct cj_stat_sources *s, bool json)
{
    struct evbuffer *buf = evbuffer_new();
    struct cj_out o;
    cj_out_begin(&o, buf, json);
    cj_stat_render(s, 1, &o);
    cj_out_end(&o);
    size_t n = evbuffer_get_length(buf);
    char *text = malloc(n + 1);
    evbuffer_remove(buf, text, n);
    text[n] = '\0';
    evbuffer_free(buf);
    return text;
}

static void test_render_leaves_out_absent_objects(void **state)
{
    (void)state;
    struct cj_stats relay = {.tasks_in = 1};
    struct cj_router_counters router = {0};
    struct cj_stat_sources s = {0};
    s.src[CJ_STAT_RELAY] = &relay;
    s.src[CJ_STAT_ROUTER] = &router;
    char *t = render(&s, false);
    assert_true(strncmp(t, "tasks_in: 1\ntasks_out: 0\n", 25) == 0);
    assert_non_null(strstr(t, "\nerrors: 0\n\n"));
    assert_null(strstr(t, "hellos_accepted"));
    assert_null(strstr(t, "spool_"));
    free(t);
    s.sessions.workers_lost = 3;
    s.src[CJ_STAT_SESSIONS] = &s.sessions;
    s.spool.bytes_on_disk = 1234;
    s.src[CJ_STAT_SPOOL] = &s.spool;
    s.src[CJ_STAT_STAGE] = &s.stage;
    t = render(&s, true);
    assert_non_null(strstr(t, "\"workers_lost\":3,"));
    assert_non_null(strstr(t, "\"spool_bytes_on_disk\":1234,"));
    assert_non_null(strstr(t, "\"spool_results_failed\":0}\n\n"));
    free(t);
}

static void test_render_sums_readings(void **state)
{
    (void)state;
    struct cj_stats a = {.tasks_in = 2}, b = {.tasks_in = 3};
    struct cj_router_counters ra = {.drops = 1}, rb = {.drops = 4};
    struct cj_stat_sources s[2];
    memset(s, 0, sizeof s);
    s[0].src[CJ_STAT_RELAY] = &a;
    s[0].src[CJ_STAT_ROUTER] = &ra;
    s[1].src[CJ_STAT_RELAY] = &b;
    s[1].src[CJ_STAT_ROUTER] = &rb;
    s[1].sessions.workers_lost = 2;
    s[1].src[CJ_STAT_SESSIONS] = &s[1].sessions;   /* present in one reading: shown */
    struct evbuffer *buf = evbuffer_new();
    struct cj_out o;
    cj_out_begin(&o, buf, false);
    cj_stat_render(s, 2, &o);
    cj_out_end(&o);
    char text[4096];
    size_t n = evbuffer_remove(buf, text, sizeof text - 1);
    text[n] = '\0';
    evbuffer_free(buf);
    assert_non_null(strstr(text, "tasks_in: 5\n"));
    assert_non_null(strstr(text, "drops: 5\n"));
    assert_non_null(strstr(text, "workers_lost: 2\n"));
    assert_null(strstr(text, "spool_"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields_are_sound),
        cmocka_unit_test(test_values_and_sums),
        cmocka_unit_test(test_render_leaves_out_absent_objects),
        cmocka_unit_test(test_render_sums_readings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
