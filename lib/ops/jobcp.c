/* SPDX-License-Identifier: Apache-2.0 */
/* jobcp.c — a job's side of FLARE's client parent (see jobcp.h). */
#include "ops/jobcp.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell/router.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mp.h"
#include "util/uuid.h"
#include "wire/header.h"
#include "wire/msg.h"

#define TICK_SECS 0.2   /* how often the links are looked at for STARTED */
#define STATS_MAX 64

struct cj_jobcp {
    struct cj_router *r;
    struct cj_jobcp_cbs cbs;
    char job_id[64];
    char parent[128];             /* the CP's cell: <site> */
    struct event *tick;           /* STARTED once both links are up */
    struct event *abort_ev;       /* abort from the loop */
    struct cj_link *started_on;   /* the parent link STARTED went out on */
    double repeat;                /* send STARTED again this often (0: never) */
    double started_at;            /* when it last went out */
    bool stopped;
};

/* A direct request to the CP: channel/topic with a FOBS payload (sb, emptied). */
static int send_request(struct cj_jobcp *cp, const char *channel, const char *topic, msgpack_sbuffer *sb)
{
    char rid[CJ_UUID_STR_LEN + 1];
    struct cj_err err = {0};
    struct evbuffer *payload = mp_sbuffer_to_evbuffer(sb);
    if (!payload || cj_uuid4_str(rid)) {
        if (payload) evbuffer_free(payload);
        return -1;
    }
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .destination = cp->parent, .channel = channel, .topic = topic, .req_id = rid,
        .reply_expected = true, .optional = true, .payload_encoding = "fobs",
        .payload_len = (int64_t)evbuffer_get_length(payload),
    };
    struct cj_hb hb;
    cj_hb_init(&hb);
    int rc = cj_router_originate(cp->r, &hb, &m, payload, false, &err);
    if (rc) cj_log_warning("job %s: cannot send %s to the client parent %s: %s", cp->job_id, topic, cp->parent, err.msg);
    evbuffer_free(payload);
    return rc;
}

static int notify(struct cj_jobcp *cp, long status, bool again)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = cj_cpmsg_admin_write(&sb, CJ_CPMSG_TP_NOTIFY, "", cp->job_id, status, NULL);
    if (!rc) rc = send_request(cp, CJ_CPMSG_CH_ADMIN, CJ_CPMSG_TP_NOTIFY, &sb);
    msgpack_sbuffer_destroy(&sb);
    if (!rc && again) cj_log_debug("job %s: told the client parent %s again the job is STARTED", cp->job_id, cp->parent);
    else if (!rc) cj_log_info("job %s: told the client parent %s the job is %s", cp->job_id, cp->parent,
                              status == CJ_CPMSG_STARTED ? "STARTED" : "STOPPED");
    return rc;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct cj_jobcp *cp = arg;
    struct cj_link *pl = cj_router_parent(cp->r);
    if (cp->stopped || !pl || cj_router_upstream_state(cp->r) != CJ_UP_UP) return;
    double now = cj_now();
    if (pl == cp->started_on && !(cp->repeat > 0 && now - cp->started_at >= cp->repeat)) return;
    if (notify(cp, CJ_CPMSG_STARTED, pl == cp->started_on) == 0) {
        cp->started_on = pl;
        cp->started_at = now;
    }
}

void cj_jobcp_set_started_repeat(struct cj_jobcp *cp, double every)
{
    cp->repeat = every > 0 ? every : 0;
}

static void on_abort(evutil_socket_t fd, short what, void *arg)
{
    struct cj_jobcp *cp = arg;
    if (cp->cbs.abort) cp->cbs.abort(cp->cbs.ctx, "aborted by the client parent");
}

/* An answer to a client_command request, when the CP waits for one. */
static void answer(struct cj_jobcp *cp, struct cj_msg *req, msgpack_sbuffer *sb)
{
    if (!req->hdr.reply_expected) return;
    struct cj_err err = {0};
    struct evbuffer *payload = sb && sb->size ? mp_sbuffer_to_evbuffer(sb) : NULL;
    if (cj_router_reply(cp->r, req, NULL, NULL, payload, payload ? "fobs" : NULL, &err) != 0)
        cj_log_warning("job %s: cannot answer the client parent's %s: %s", cp->job_id, req->hdr.topic, err.msg);
    if (payload) evbuffer_free(payload);
}

static void on_command(struct cj_router *r, struct cj_msg *msg, void *ctx)
{
    struct cj_jobcp *cp = ctx;
    const char *topic = msg->hdr.topic;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (!strcmp(topic, "abort")) {
        cj_log_info("job %s: client_command abort from %s", cp->job_id, msg->hdr.origin);
        event_active(cp->abort_ev, EV_TIMEOUT, 0);
        answer(cp, msg, NULL);
    } else if (!strcmp(topic, "show_stats")) {
        struct cj_cpmsg_kv kv[STATS_MAX];
        size_t n = cp->cbs.stats ? cp->cbs.stats(cp->cbs.ctx, kv, STATS_MAX) : 0;
        if (cj_cpmsg_map_write(&sb, kv, n) == 0) answer(cp, msg, &sb);
    } else if (!strcmp(topic, "show_errors")) {
        if (cj_cpmsg_map_write(&sb, NULL, 0) == 0) answer(cp, msg, &sb);   /* no errors kept */
    } else {
        if (!strcmp(topic, "abort_task"))
            cj_log_warning("job %s: client_command abort_task from %s: the task stays with its worker", cp->job_id,
                           msg->hdr.origin);
        else cj_log_info("job %s: client_command %s from %s acknowledged", cp->job_id, topic, msg->hdr.origin);
        answer(cp, msg, NULL);   /* reset_errors, configure_job_log, abort_task */
    }
    msgpack_sbuffer_destroy(&sb);
    cj_msg_free(msg);
}

struct cj_jobcp *cj_jobcp_new(struct event_base *base, struct cj_router *r, const char *url, const char *job_id,
                              const struct cj_jobcp_cbs *cbs, struct cj_err *err)
{
    struct cj_jobcp *cp = calloc(1, sizeof *cp);
    if (!cp) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    cp->r = r;
    cp->cbs = *cbs;
    snprintf(cp->job_id, sizeof cp->job_id, "%s", job_id);
    snprintf(cp->parent, sizeof cp->parent, "%s", cj_router_me(r));
    char *dot = strrchr(cp->parent, '.');
    if (dot) *dot = '\0';
    struct cj_parent_cfg pc = {.url = url};
    struct timeval tv = cj_tv(TICK_SECS);
    if (!(cp->tick = event_new(base, -1, EV_PERSIST, on_tick, cp)) || !(cp->abort_ev = event_new(base, -1, 0, on_abort, cp)) ||
        event_add(cp->tick, &tv) != 0) {
        cj_fail(err, CJ_E_NOMEM, 0, "cannot create the client parent's events");
        cj_jobcp_free(cp);
        return NULL;
    }
    if (cj_router_parent_start(r, &pc, err) != 0 ||
        cj_router_handle(r, CJ_CPMSG_CH_COMMAND, NULL, on_command, cp) != 0) {
        if (!err->msg[0]) cj_fail(err, CJ_E_INVALID, 0, "cannot register the client_command handler");
        cj_jobcp_free(cp);
        return NULL;
    }
    return cp;
}

void cj_jobcp_stopped(struct cj_jobcp *cp)
{
    if (cp->stopped) return;
    cp->stopped = true;
    if (cj_router_parent(cp->r)) notify(cp, CJ_CPMSG_STOPPED, false);
}

size_t cj_jobcp_queued(const struct cj_jobcp *cp)
{
    struct cj_link *pl = cj_router_parent(cp->r);
    return pl ? cj_link_queued(pl) : 0;
}

void cj_jobcp_free(struct cj_jobcp *cp)
{
    if (!cp) return;
    if (cp->r) cj_router_handle(cp->r, CJ_CPMSG_CH_COMMAND, NULL, NULL, NULL);
    if (cp->tick) event_free(cp->tick);
    if (cp->abort_ev) event_free(cp->abort_ev);
    free(cp);
}
