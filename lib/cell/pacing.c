/* SPDX-License-Identifier: Apache-2.0 */
/* pacing.c — how much the relay holds toward a worker: pacing (the upstream
 * waits for a reading worker), the upstream's slack for a worker that is not
 * reading, stalled workers closed, and holds (a link paused while a consumer
 * of this cell's own streams, the spool, is behind on what it brings). */
#include <string.h>

#include "cell/router_int.h"
#include "util/log.h"

/* Pacing.  A worker link's own bound (link_buffer of its cj_link) is r->pace,
 * a few MiB.  When the upstream feeds a worker past it:
 *   - if the worker is reading (it drained a pace's worth within PACE_STALL)
 *     and no other worker may be waiting on the upstream (none had traffic
 *     within PACE_ACTIVE while holding less than half a pace), the upstream
 *     pauses until the worker has drained to half a pace: the sender's window
 *     then waits in the server's socket, not in the relay, so the relay's
 *     memory does not grow with the window or the model;
 *   - otherwise the worker's queue may grow (the upstream's slack) so that a
 *     worker that stops reading, or a slow one, does not stall the others.
 * A pace is lifted as soon as anything else needs the upstream: another
 * worker (or this cell) sends upstream, another worker drains, the paced
 * worker goes away or stops reading (check_stalls). */
static bool worker_reading(struct cj_router *r, struct cj_link *l, double now)
{
    struct rlink *d = rl(l);
    size_t q = cj_link_queued(l);
    uint64_t drained = d->fwd > q ? d->fwd - q : 0;
    if (drained >= d->drain_mark + r->pace) {
        d->drain_mark = drained;
        d->read_at = now;
    }
    /* A worker that has not drained a pace yet gets PACE_STALL from its first
     * bytes to do so: otherwise a worker slow to start (a loaded machine)
     * would take up to a whole window into the relay before pacing began. */
    double since = d->read_at > 0 ? d->read_at : d->fed_at;
    return since > 0 && now - since < PACE_STALL;
}

static bool other_worker_waiting(struct cj_router *r, struct cj_link *dst, double now)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct cj_link *l = r->links[i];
        struct rlink *d = rl(l);
        if (l == dst || !d || d->role != ROLE_WORKER || !d->up) continue;
        if (now - d->active_at < PACE_ACTIVE && cj_link_queued(l) < r->pace / 2) return true;
    }
    return false;
}

static void pace(struct cj_router *r, struct cj_link *up, struct cj_link *dst)
{
    if (r->paced_on || !cj_link_reading(up)) return;
    r->paced_on = dst;
    r->c.throttles++;
    cj_log_debug("router %s: upstream paced for %s (%zu bytes queued toward it)", r->me, rl(dst)->fqcn,
                 cj_link_queued(dst));
    cj_link_pause_reading(up, CJ_LINK_PAUSE_OWNER);
}

void unpace(struct cj_router *r, const char *why)
{
    if (!r->paced_on) return;
    cj_log_debug("router %s: upstream pace for %s lifted: %s (%zu bytes queued toward it)", r->me,
                 rl(r->paced_on) ? rl(r->paced_on)->fqcn : "?", why, cj_link_queued(r->paced_on));
    r->paced_on = NULL;
    if (r->up.link) cj_link_resume_reading(r->up.link, CJ_LINK_PAUSE_OWNER);
}

/* Something went out on the upstream link dst (src: the link it came from,
 * NULL when this cell originated it): unless it is the paced worker's own
 * traffic (its ACKs), someone may wait for an answer: lift the pace. */
void upstream_sent(struct cj_router *r, struct cj_link *dst, struct cj_link *src)
{
    if (r->paced_on && is_upstream(dst) && src != r->paced_on) unpace(r, "traffic toward the upstream");
}

/* A worker link drained below half its bound after being over it. */
void worker_drained(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    if (!r->paced_on || !d) return;
    if (l == r->paced_on || cj_now() - d->active_at < PACE_ACTIVE) unpace(r, l == r->paced_on ? "it drained" : "another worker drained");
}

/* A worker that stops reading must not stall the shared upstream, and with it
 * every other worker.  Unless pacing applies (above), its queue may grow past
 * its bound, up to link_buffer + shared_slack (one sender window: a sender
 * that respects its window cannot fill it), before the upstream pauses; past
 * link_buffer the worker counts as stalled, and a stalled worker that drains
 * nothing for stall_timeout is closed (check_stalls).  True: no throttle. */
bool upstream_slack(struct cj_router *r, struct cj_link *src, struct cj_link *dst, double now)
{
    if (!is_upstream(src) || is_upstream(dst) || !rl(dst) || !cj_link_over(dst)) return false;
    size_t q = cj_link_queued(dst);
    if (q > r->link_buffer + r->shared_slack) return false;
    if (r->pacing && worker_reading(r, dst, now) && !other_worker_waiting(r, dst, now)) {
        pace(r, src, dst);
        return true;   /* paused by the pace, not by a throttle */
    }
    if (q > r->link_buffer) r->c.slack_used++;
    return true;
}

/* Holds.  A consumer of this cell's own streams that is behind (the spool,
 * waiting for its disk) stops the link its source's bytes arrive on: they
 * then wait in the peer's socket and window, not here.  A link stays paused
 * at most HOLD_LAPSE s at a time: past that, the stream's window (its ACKs
 * wait for the consumer) bounds what arrives, and everything else on the
 * link (heartbeats, other streams) flows again. */
#define HOLD_LAPSE 2.0

/* A worker's heartbeats wait while its link is held: half its heartbeat
 * interval at most, so that a held worker never looks silent. */
static double hold_lapse(const struct cj_router *r, struct cj_link *l)
{
    double half = r->worker_cfg.heartbeat_interval / 2;
    return is_upstream(l) || half <= 0 || half > HOLD_LAPSE ? HOLD_LAPSE : half;
}

static void hold_lift(struct cj_router *r, struct cj_link *l, bool lapsed)
{
    struct rlink *d = rl(l);
    if (!d || d->hold_since == 0) return;
    if (lapsed) {
        r->c.holds_lapsed++;
        cj_log_debug("router %s: hold on %s lapsed after %.1f s", r->me, d->fqcn, cj_now() - d->hold_since);
    }
    d->hold_since = 0;
    cj_link_resume_reading(l, CJ_LINK_PAUSE_HOLD);
}

int cj_router_hold(struct cj_router *r, const char *source, bool on)
{
    const char *why;
    struct cj_link *l = source ? cj_router_next_hop(r, source, &why) : NULL;
    struct rlink *d = l ? rl(l) : NULL;
    if (!d || !d->up) return -1;
    if (!on) {
        if (d->holds && --d->holds == 0) hold_lift(r, l, false);
        return 0;
    }
    if (d->holds++ == 0) {
        d->hold_since = cj_now();
        r->c.holds++;
        cj_link_pause_reading(l, CJ_LINK_PAUSE_HOLD);
    }
    return 0;
}

static void check_holds(struct cj_router *r, double now)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct rlink *d = rl(r->links[i]);
        if (d && d->hold_since > 0 && now - d->hold_since >= hold_lapse(r, r->links[i])) hold_lift(r, r->links[i], true);
    }
}

void check_stalls(evutil_socket_t fd, short what, void *arg)
{
    struct cj_router *r = arg;
    double now = cj_now();
    if (r->paced_on && !worker_reading(r, r->paced_on, now)) {   /* it stopped reading */
        cj_log_info("router %s: worker %s drained nothing for %.0f s: the upstream is no longer paced for it", r->me,
                    rl(r->paced_on) ? rl(r->paced_on)->fqcn : "?", PACE_STALL);
        unpace(r, "it stopped reading");
    }
    check_holds(r, now);
    for (size_t i = 0; i < r->n_links; i++) {
        struct cj_link *l = r->links[i];
        struct rlink *d = rl(l);
        if (!d || d->role != ROLE_WORKER || !d->up) continue;
        size_t q = cj_link_queued(l);
        bool over = q > r->link_buffer;
        if (!over || q < d->stall_queued) {   /* under the bound, or draining */
            d->stall_since = over ? now : 0;
            d->stall_queued = q;
            continue;
        }
        if (d->stall_since == 0) { d->stall_since = now; d->stall_queued = q; continue; }
        d->stall_queued = q;
        if (now - d->stall_since < r->stall_timeout) continue;
        r->c.stalled_closed++;
        cj_log_warning("router %s: worker %s is not reading: %zu bytes queued toward it, none drained for %.0f s; "
                       "closing its link so the other workers' traffic keeps flowing", r->me, d->fqcn, q,
                       now - d->stall_since);
        d->stall_since = 0;
        cj_link_close(l, "not reading for %.0f s with %zu bytes queued", r->stall_timeout, q);
    }
}
