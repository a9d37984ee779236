/* SPDX-License-Identifier: Apache-2.0 */
/* test_jobcp.c — lib/ops/jobcp: a job's STARTED / STOPPED to its client
 * parent (doc/protocol/site.md §3, §3.1).  The job cell site-1.J1 is a real
 * router with an upstream to a test "server" and its parent link to a test
 * "CP" (site-1), both on loopback TCP: STARTED once per parent link by
 * default; repeated while the job runs with cj_jobcp_set_started_repeat (a
 * FLARE 2.7.2 / 2.8.x CP), never after STOPPED. */
#include "testutil.h"
#include "linkrec.h"

#include <event2/event.h>

#include "cell/router.h"
#include "fl/cpmsg.h"
#include "net/addr.h"
#include "ops/jobcp.h"

struct world {
    struct event_base *base;
    struct event *tick;
    struct cj_router *r;
    struct cj_listener *srv_lst, *cp_lst;
    struct cj_link_cfg srv_cfg, cp_cfg;
    struct rec srv, cp;
    struct cj_jobcp *jc;
};

static void srv_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    struct world *w = ctx;
    struct cj_err err;
    w->srv.link = cj_link_accept(w->base, fd, NULL, peer, &w->srv_cfg, &rec_ops, &w->srv, &err);
    assert_non_null(w->srv.link);
}

static void cp_accept(evutil_socket_t fd, const char *peer, void *ctx)
{
    struct world *w = ctx;
    struct cj_err err;
    w->cp.link = cj_link_accept(w->base, fd, NULL, peer, &w->cp_cfg, &rec_ops, &w->cp, &err);
    assert_non_null(w->cp.link);
}

static struct cj_listener *listen_on(struct world *w, cj_accept_fn fn, char *url, size_t n)
{
    struct cj_err err;
    struct cj_addr a;
    assert_int_equal(cj_addr_parse("tcp://127.0.0.1:0", CJ_EP_TCP, CJ_ADDR_LISTEN, &a, &err), 0);
    struct cj_listener *l = cj_listener_open(w->base, &a, 0, fn, w, &err);
    assert_non_null(l);
    snprintf(url, n, "tcp://127.0.0.1:%u", cj_listener_port(l));
    return l;
}

static void world_init(struct world *w)
{
    struct cj_err err = {0};
    char url[64];
    memset(w, 0, sizeof *w);
    w->base = event_base_new();
    w->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    event_add(w->tick, &tv);
    w->srv_cfg = (struct cj_link_cfg){.name = "test-server", .me = "server", .link_buffer = 1u << 24};
    w->cp_cfg = (struct cj_link_cfg){.name = "test-cp", .me = "site-1", .link_buffer = 1u << 24};
    w->srv_lst = listen_on(w, srv_accept, url, sizeof url);
    struct cj_router_cfg rc = {.me = "site-1.J1", .handshake_timeout = 2};
    assert_non_null(w->r = cj_router_new(w->base, &rc, &err));
    struct cj_upstream_cfg u = {.url = url, .reconnect_min = 0.05, .reconnect_max = 0.2};
    assert_int_equal(cj_router_upstream_start(w->r, &u, &err), 0);
    RUN_UNTIL(w, cj_router_upstream_state(w->r) == CJ_UP_UP, 2);
    assert_int_equal(cj_router_upstream_state(w->r), CJ_UP_UP);
    w->cp_lst = listen_on(w, cp_accept, url, sizeof url);
    struct cj_jobcp_cbs cbs = {0};
    assert_non_null(w->jc = cj_jobcp_new(w->base, w->r, url, "J1", &cbs, &err));
}

static void world_done(struct world *w)
{
    cj_jobcp_free(w->jc);
    cj_router_free(w->r);
    rec_free_link(&w->srv);
    rec_free_link(&w->cp);
    cj_listener_free(w->cp_lst);
    cj_listener_free(w->srv_lst);
    RUN_UNTIL(w, false, 0.01);
    event_free(w->tick);
    event_base_free(w->base);
}

/* How many train.notify_job_status with job_status `status` the CP got. */
static int notices(struct world *w, long status)
{
    int k = 0;
    for (int i = 0; i < w->cp.nmsgs; i++) {
        struct cj_msg *m = w->cp.msgs[i];
        if (strcmp(m->hdr.channel, CJ_CPMSG_CH_ADMIN) || strcmp(m->hdr.topic, CJ_CPMSG_TP_NOTIFY)) continue;
        size_t len = evbuffer_get_length(m->payload);
        uint8_t *p = evbuffer_pullup(m->payload, -1);
        char topic[64], job[64], why[128];
        long st;
        assert_int_equal(cj_cpmsg_admin_read(p, len, topic, sizeof topic, job, sizeof job, &st, why, sizeof why), 0);
        assert_string_equal(job, "J1");
        assert_string_equal(topic, CJ_CPMSG_TP_NOTIFY);
        k += st == status;
    }
    return k;
}

/* The default: STARTED once on the parent link, STOPPED at the end. */
static void test_started_once(void **state)
{
    static struct world w;
    world_init(&w);
    RUN_UNTIL(&w, notices(&w, CJ_CPMSG_STARTED) >= 1, 3);
    RUN_UNTIL(&w, false, 1.0);
    assert_int_equal(notices(&w, CJ_CPMSG_STARTED), 1);
    cj_jobcp_stopped(w.jc);
    RUN_UNTIL(&w, notices(&w, CJ_CPMSG_STOPPED) >= 1, 2);
    assert_int_equal(notices(&w, CJ_CPMSG_STOPPED), 1);
    world_done(&w);
}

/* Repeated every 0.3 s while the job runs; none after STOPPED. */
static void test_started_repeat(void **state)
{
    static struct world w;
    world_init(&w);
    cj_jobcp_set_started_repeat(w.jc, 0.3);
    RUN_UNTIL(&w, notices(&w, CJ_CPMSG_STARTED) >= 3, 5);
    assert_true(notices(&w, CJ_CPMSG_STARTED) >= 3);
    cj_jobcp_stopped(w.jc);
    RUN_UNTIL(&w, notices(&w, CJ_CPMSG_STOPPED) >= 1, 2);
    int started = notices(&w, CJ_CPMSG_STARTED);
    RUN_UNTIL(&w, false, 0.8);
    assert_int_equal(notices(&w, CJ_CPMSG_STARTED), started);
    assert_int_equal(notices(&w, CJ_CPMSG_STOPPED), 1);
    world_done(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_started_once),
        cmocka_unit_test(test_started_repeat),
    };
    return cmocka_run_group_tests_name("jobcp", tests, NULL, NULL);
}
