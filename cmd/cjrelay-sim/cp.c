/* SPDX-License-Identifier: Apache-2.0 */
/* cp.c — `cjrelay-sim --parent URL`: the site's client parent (CP), the cell
 * <site> (--site), listening on clear TCP for its children <site>.<job> as
 * FLARE's CP internal listener does (SFM frames, cellnet HELLO / READY as
 * <site>; doc/protocol/site.md §2-§3, doc/protocol/cellnet.md §6).
 *
 * What it does with a message from a child, by destination D:
 *   D == <site>           consumed: admin/train.notify_job_status recorded
 *                         (--job-status-log, SIM JOB_STATUS) and answered ok with
 *                         an admin Message (another admin topic: ok with an
 *                         error Message "invalid_request", as FLARE's admin
 *                         agent); replies to its own requests matched;
 *                         cellnet.channel/bye ok; another request expecting a
 *                         reply: process_exception "no callback"
 *   server, server.*      handed to the server cells of this process (FLARE's CP
 *                         would forward it up its own server link)
 *   a child or below      forwarded to that child's link (cn__from/to/route rewritten)
 *   anything else         unroutable: RETURN for a request expecting a reply
 * Messages whose cn__origin is not the sending child or below are dropped.
 *
 * What it sends to a child <site>.<job>:
 *   client_command/show_stats  once after the job's STARTED (a request, 5 s timeout),
 *                              the reply summarized in SIM SHOW_STATS
 *   client_command/abort       --abort-job J@R, fire-and-forget when round R's task of
 *                              J has gone out; J ends as aborted at its STOPPED,
 *                              or fails after CP_ABORT_WAIT s without it
 *   client_command/abort_task  --abort-task J@R, fire-and-forget, only after STARTED */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "cpmsg.h"
#include "sim.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/fqcn.h"
#include "wire/header.h"
#include "wire/msg.h"

#define CP_STATS_TIMEOUT 5.0        /* FLARE's job_query_timeout */
#define CP_ABORT_WAIT 10.0          /* FLARE's CP waits this long for the job to end after abort */
#define CP_MAX_PENDING 32           /* show_stats requests in flight */

struct sim_cp;

/* A show_stats request waiting for its reply. */
struct cp_pending {
    bool used;
    char rid[CJ_CPMSG_RID_LEN + 1];
    char to[CJ_FQCN_MAX + 1];
    char job[SIM_JOB_MAX];
    struct event *timer;
};

/* What the parent knows of one of the simulator's jobs. */
struct cp_job {
    struct sim_cp *cp;
    long status;                    /* the last job_status notified; 0 none */
    bool stats_sent;
    bool abort_sent;
    long abort_round;
    double t_abort;
    struct event *abort_wait;
};

struct sim_cp {
    struct sim *s;
    char me[SIM_JOB_MAX];           /* <site> */
    struct evconnlistener *lev;
    struct cj_link_cfg lcfg;
    struct cj_link *links[SIM_MAX_LINKS];
    size_t n_links;
    FILE *slog;                     /* --job-status-log */
    struct cp_pending pend[CP_MAX_PENDING];
    struct cp_job jobs[SIM_MAX_JOBS];
    bool fired_job[SIM_MAX_TRIGGERS], fired_task[SIM_MAX_TRIGGERS];
};

/* ---- routing ------------------------------------------------------------------------- */

struct cj_link *sim_cp_route(struct sim *s, const char *dest)
{
    return s->cp ? sim_best_link(s->cp->links, s->cp->n_links, dest) : NULL;
}

/* Forwards m (taken) to the child link to, as FLARE's cells do (doc/protocol/cellnet.md §6). */
static void forward(struct sim_cp *cp, struct cj_link *from, struct cj_link *to, struct cj_msg *m)
{
    msgpack_sbuffer sb;
    struct cj_err err;
    const char *hop = cj_link_peer(to);
    double now = cj_msg_now();
    msgpack_sbuffer_init(&sb);
    if (cj_hdr_loop_refused(&m->hdr, hop) ||
        cj_hdr_forward(m->hblk, m->hlen, cp->me, hop, now, now, &sb, &err) < 0) {
        sim_unroutable(from, m, cp->me);
    } else if (cj_link_send(to, (const uint8_t *)sb.data, sb.size, m->payload, false) < 0) {
        cj_log_warning("sim: parent: cannot forward %s/%s from %s to %s", m->hdr.channel, m->hdr.topic,
                       m->hdr.origin, hop);
    } else {
        cj_log_debug("sim: parent: %s/%s from %s forwarded to %s", m->hdr.channel, m->hdr.topic, m->hdr.origin, hop);
    }
    msgpack_sbuffer_destroy(&sb);
    cj_msg_free(m);
}

/* ---- show_stats ---------------------------------------------------------------------- */

static void pending_free(struct cp_pending *p)
{
    if (p->timer) event_free(p->timer);
    p->timer = NULL;
    p->used = false;
}

static void on_stats_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cp_pending *p = arg;
    printf("SIM SHOW_STATS %s rc=timeout no reply from %s within %.0f s\n", p->job, p->to, CP_STATS_TIMEOUT);
    pending_free(p);
}

static void send_show_stats(struct sim_cp *cp, struct cj_link *l, const char *to, const char *job)
{
    struct cp_pending *p = NULL;
    for (size_t i = 0; i < CP_MAX_PENDING && !p; i++)
        if (!cp->pend[i].used) p = &cp->pend[i];
    if (!p) {
        cj_log_warning("sim: parent: %d show_stats requests in flight; none sent to %s", CP_MAX_PENDING, to);
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    struct timeval tv = cj_tv(CP_STATS_TIMEOUT);
    snprintf(p->to, sizeof p->to, "%s", to);
    snprintf(p->job, sizeof p->job, "%s", job);
    if (cj_cpmsg_map_write(&sb, NULL, 0) == 0 &&
        cpmsg_request(l, cp->me, to, CJ_CPMSG_CH_COMMAND, "show_stats", true, &sb, p->rid) == 0 &&
        (p->timer = evtimer_new(cp->s->base, on_stats_timeout, p)) && evtimer_add(p->timer, &tv) == 0) {
        p->used = true;
        cj_log_info("sim: parent: show_stats sent to %s", to);
    } else {
        if (p->timer) event_free(p->timer);
        p->timer = NULL;
        printf("SIM SHOW_STATS %s rc=not_sent\n", job);
    }
    msgpack_sbuffer_destroy(&sb);
}

/* A reply or RETURN addressed to the parent: one of its show_stats requests? */
static void on_reply(struct sim_cp *cp, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    for (size_t i = 0; i < CP_MAX_PENDING; i++) {
        struct cp_pending *p = &cp->pend[i];
        if (!p->used || strcmp(p->rid, h->req_id)) continue;
        char sum[640];
        size_t len;
        const uint8_t *b = cpmsg_payload(m, &len);
        if (h->error.len) snprintf(sum, sizeof sum, "error=%.*s", (int)(h->error.len < 200 ? h->error.len : 200),
                                   (const char *)h->error.p);
        else cpmsg_summary(b, b ? len : 0, h->payload_encoding, sum, sizeof sum);
        for (char *q = sum; *q; q++)
            if ((unsigned char)*q < ' ' || *q == 0x7f) *q = '?';
        printf("SIM SHOW_STATS %s rc=%s %s\n", p->job, h->return_code[0] ? h->return_code : "?", sum);
        pending_free(p);
        return;
    }
    cj_log_info("sim: parent: %s %s/%s from %s (rc %s) matches no request of ours; dropped",
                cj_msg_type_name(h->msg_type), h->channel, h->topic, h->origin, h->return_code);
}

/* ---- notify_job_status ------------------------------------------------------------------ */

static void on_abort_wait(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cp_job *cj = arg;
    struct sim_job *j = &cj->cp->s->jobs[cj - cj->cp->jobs];
    sim_finish(j, 1, "abort at round %ld: no STOPPED from %s.%s within %.0f s", cj->abort_round, cj->cp->me, j->id,
               CP_ABORT_WAIT);
}

static void on_notify(struct sim_cp *cp, struct cj_link *l, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    char topic[128], job[SIM_JOB_MAX], why[256];
    long status;
    size_t len;
    const uint8_t *p = cpmsg_payload(m, &len);
    if (!p || cj_cpmsg_admin_read(p, len, topic, sizeof topic, job, sizeof job, &status, why, sizeof why) < 0 ||
        !job[0] || status < 0) {
        if (p && !why[0]) snprintf(why, sizeof why, "no job_id or job_status header");
        cj_log_warning("sim: parent: notify_job_status from %s refused: %s", h->origin,
                       p ? why : "empty or oversized payload");
        if (h->reply_expected) cpmsg_reply(l, h, "process_exception", p ? why : "bad payload", NULL);
        return;
    }
    printf("SIM JOB_STATUS %s %ld from=%s\n", job, status, h->origin);
    cj_log_info("sim: parent: job %s status %ld from %s", job, status, h->origin);
    if (cp->slog) {
        fprintf(cp->slog, "%s %ld %s\n", job, status, h->origin);
        fflush(cp->slog);
    }
    if (h->reply_expected) {
        msgpack_sbuffer sb;
        char body[64], rtopic[160];
        msgpack_sbuffer_init(&sb);
        snprintf(body, sizeof body, "notify status: %ld", status);
        snprintf(rtopic, sizeof rtopic, "reply_%s", topic);
        if (cj_cpmsg_admin_write(&sb, rtopic, body, NULL, -1, "_ok") == 0) cpmsg_reply(l, h, "ok", NULL, &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    struct sim_job *j = sim_job_by_id(cp->s, job);
    if (!j) return;
    struct cp_job *cj = &cp->jobs[j->index];
    cj->status = status;
    if (status == CJ_CPMSG_STARTED && !cj->stats_sent) {
        cj->stats_sent = true;
        send_show_stats(cp, l, h->origin, job);
    }
    if (status == CJ_CPMSG_STOPPED && cj->abort_sent && !j->ended) {
        if (cj->abort_wait) evtimer_del(cj->abort_wait);
        sim_aborted(j, "round=%ld: STOPPED from %s %.1f s after the abort", cj->abort_round, h->origin,
                    cj_now() - cj->t_abort);
    }
}

/* ---- what arrives -------------------------------------------------------------------------- */

static void local(struct sim_cp *cp, struct cj_link *l, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    if (h->msg_type != CJ_MSG_REQ) {
        on_reply(cp, m);
    } else if (!strcmp(h->channel, CJ_CPMSG_CH_ADMIN) && !strcmp(h->topic, CJ_CPMSG_TP_NOTIFY)) {
        on_notify(cp, l, m);
    } else if (!strcmp(h->channel, CJ_CPMSG_CH_ADMIN)) {
        /* the CP's admin agent takes every topic; one without a processor gets an error Message */
        cj_log_info("sim: parent: admin/%s from %s: no processor, invalid_request", h->topic, h->origin);
        if (h->reply_expected) {
            msgpack_sbuffer sb;
            msgpack_sbuffer_init(&sb);
            if (cj_cpmsg_admin_write(&sb, "reply", "invalid_request", NULL, -1, "_error") == 0)
                cpmsg_reply(l, h, "ok", NULL, &sb);
            msgpack_sbuffer_destroy(&sb);
        }
    } else if (!strcmp(h->channel, "cellnet.channel") && !strcmp(h->topic, "bye")) {
        if (h->reply_expected) cpmsg_reply(l, h, "ok", NULL, NULL);
    } else if (h->reply_expected) {
        cj_log_info("sim: parent: %s/%s from %s: no callback", h->channel, h->topic, h->origin);
        cpmsg_reply(l, h, "process_exception", "no callback", NULL);
    } else {
        cj_log_info("sim: parent: %s/%s from %s: not handled here, dropped", h->channel, h->topic, h->origin);
    }
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    struct sim_cp *cp = ctx;
    const struct cj_hdr *h = &m->hdr;
    const char *peer = cj_link_peer(l);
    if (strcmp(h->origin, peer) && !cj_fqcn_is_ancestor(peer, h->origin)) {
        cj_log_warning("sim: parent: %s/%s from child %s claims origin %s: dropped", h->channel, h->topic, peer,
                       h->origin);
        cj_msg_free(m);
        return;
    }
    if (!strcmp(h->destination, cp->me)) {
        local(cp, l, m);
        cj_msg_free(m);
        return;
    }
    if (!strcmp(h->destination, CJ_FQCN_SERVER) || cj_fqcn_is_ancestor(CJ_FQCN_SERVER, h->destination)) {
        sim_dispatch(cp->s, l, m);
        return;
    }
    struct cj_link *to = sim_cp_route(cp->s, h->destination);
    if (to && to != l) {
        forward(cp, l, to, m);
        return;
    }
    sim_unroutable(l, m, cp->me);
    cj_msg_free(m);
}

/* ---- links --------------------------------------------------------------------------- */

static int on_hello(struct cj_link *l, const char *peer, char *why, size_t whysz, void *ctx)
{
    struct sim_cp *cp = ctx;
    if (!cj_fqcn_is_ancestor(cp->me, peer)) {
        snprintf(why, whysz, "%s is not a child of %s", peer, cp->me);
        return -1;
    }
    sim_replace_peer(cp->links, cp->n_links, l, peer);
    return 0;
}

static void on_up(struct cj_link *l, void *ctx)
{
    (void)ctx;
    cj_log_info("sim: parent: child %s connected from %s", cj_link_peer(l), cj_link_addr(l));
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    struct sim_cp *cp = ctx;
    if (cj_link_peer(l)[0]) cj_log_info("sim: parent: child %s disconnected: %s", cj_link_peer(l), why);
    for (size_t i = 0; i < cp->n_links; i++)
        if (cp->links[i] == l) {
            memmove(&cp->links[i], &cp->links[i + 1], (cp->n_links - i - 1) * sizeof cp->links[0]);
            cp->n_links--;
            return;
        }
}

static const struct cj_link_ops LINK_OPS = {
    .on_up = on_up, .on_msg = on_msg, .on_down = on_down, .on_hello = on_hello,
};

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)lev; (void)sa; (void)salen;
    struct sim_cp *cp = arg;
    sim_accept_link(cp->s->base, fd, NULL, &cp->lcfg, &LINK_OPS, cp, cp->links, &cp->n_links, "parent");
}

/* ---- the triggers ----------------------------------------------------------------------- */

/* Sends client_command/topic with payload sb to <site>.<job>, fire-and-forget;
 * NULL, or why it could not. */
static const char *command(struct sim_cp *cp, const char *to, const char *topic, msgpack_sbuffer *sb)
{
    char rid[CJ_CPMSG_RID_LEN + 1];
    struct cj_link *l = sim_cp_route(cp->s, to);
    if (!l) return "not connected to the parent";
    return cpmsg_request(l, cp->me, to, CJ_CPMSG_CH_COMMAND, topic, false, sb, rid) ? "cannot send" : NULL;
}

static void abort_job(struct sim_cp *cp, struct sim_job *j, long round)
{
    struct cp_job *cj = &cp->jobs[j->index];
    char to[CJ_FQCN_MAX + 1];
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    snprintf(to, sizeof to, "%s.%s", cp->me, j->id);
    const char *why = cj_cpmsg_map_write(&sb, NULL, 0) ? "out of memory" : command(cp, to, "abort", &sb);
    msgpack_sbuffer_destroy(&sb);
    if (why) {
        printf("SIM ABORT %s round=%ld not sent: %s %s\n", j->id, round, to, why);
        sim_finish(j, 1, "abort at round %ld: %s %s", round, to, why);
        return;
    }
    printf("SIM ABORT %s round=%ld to=%s\n", j->id, round, to);
    cj->abort_sent = true;
    cj->abort_round = round;
    cj->t_abort = cj_now();
    struct timeval tv = cj_tv(CP_ABORT_WAIT);
    if (!(cj->abort_wait = evtimer_new(cp->s->base, on_abort_wait, cj)) || evtimer_add(cj->abort_wait, &tv))
        cj_log_error("sim: parent: cannot time the abort of %s", j->id);
}

static void abort_task(struct sim_cp *cp, struct sim_job *j, long round)
{
    char to[CJ_FQCN_MAX + 1];
    const char *why = NULL;
    snprintf(to, sizeof to, "%s.%s", cp->me, j->id);
    if (cp->jobs[j->index].status != CJ_CPMSG_STARTED) {
        why = "has not reported STARTED";
    } else {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        why = cj_cpmsg_command_write(&sb, "abort_task") ? "out of memory" : command(cp, to, "abort_task", &sb);
        msgpack_sbuffer_destroy(&sb);
    }
    if (why) printf("SIM ABORT_TASK %s round=%ld not sent: %s %s\n", j->id, round, to, why);
    else printf("SIM ABORT_TASK %s round=%ld to=%s\n", j->id, round, to);
}

void sim_cp_task_out(struct sim_job *j, long round)
{
    struct sim_cp *cp = j->s->cp;
    const struct sim_opts *o = j->s->o;
    if (!cp || j->ended) return;
    for (size_t i = 0; i < o->n_abort_task; i++)
        if (!cp->fired_task[i] && o->abort_task[i].round == round && !strcmp(o->abort_task[i].job, j->id)) {
            cp->fired_task[i] = true;
            abort_task(cp, j, round);
        }
    for (size_t i = 0; i < o->n_abort_job; i++)
        if (!cp->fired_job[i] && o->abort_job[i].round == round && !strcmp(o->abort_job[i].job, j->id)) {
            cp->fired_job[i] = true;
            abort_job(cp, j, round);
        }
}

/* ---- life cycle ------------------------------------------------------------------------ */

int sim_cp_start(struct sim *s, struct cj_err *err)
{
    struct sim_cp *cp = calloc(1, sizeof *cp);
    struct cj_addr a;
    if (!cp) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    s->cp = cp;
    cp->s = s;
    snprintf(cp->me, sizeof cp->me, "%s", s->o->site);
    for (size_t i = 0; i < SIM_MAX_JOBS; i++) cp->jobs[i].cp = cp;
    cp->lcfg = (struct cj_link_cfg){.name = "child", .me = cp->me, .heartbeat_interval = s->o->heartbeat};
    if (s->o->job_status_log[0] && !(cp->slog = fopen(s->o->job_status_log, "a")))
        return cj_fail(err, CJ_E_INVALID, 0, "--job-status-log %s: cannot open", s->o->job_status_log);
    if (sim_parse_listen(s->o->parent, "--parent", &a, err) < 0) return -1;
    if (a.ep.kind != CJ_EP_TCP) return cj_fail(err, CJ_E_INVALID, 0, "--parent: clear tcp:// only");
    if (!(cp->lev = sim_bind(s, &a, on_accept, cp, &s->parent_port, err))) return -1;
    cj_log_info("sim: parent cell %s listening on %s for its children", cp->me, a.text);
    return 0;
}

void sim_cp_free(struct sim *s)
{
    struct sim_cp *cp = s->cp;
    if (!cp) return;
    for (size_t i = 0; i < CP_MAX_PENDING; i++) pending_free(&cp->pend[i]);
    for (size_t i = 0; i < SIM_MAX_JOBS; i++)
        if (cp->jobs[i].abort_wait) event_free(cp->jobs[i].abort_wait);
    while (cp->n_links) cj_link_free(cp->links[--cp->n_links]);
    if (cp->lev) evconnlistener_free(cp->lev);
    if (cp->slog) fclose(cp->slog);
    free(cp);
    s->cp = NULL;
}
