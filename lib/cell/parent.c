/* SPDX-License-Identifier: Apache-2.0 */
/* parent.c — the relay cell's link to its parent, the cell named by me minus
 * its last part (for a job cell <site>.<job>: <site>, FLARE's client parent):
 * starting it, what is routed to it, what it may speak for, and its bound.
 * Connecting and reconnecting are reconnect.c's, shared with the upstream.
 *
 * Bound: the parent link carries control traffic (job status, client
 * commands), so it gets a small queue (PARENT_QUEUE) and is never a reason to
 * pause anyone: while it holds more than that, a message toward the parent is
 * refused like an unroutable one (RETURN, notice or drop, counted in
 * drops_parent_full) and originated ones fail to their caller.  A CP that
 * stops reading thus costs at most PARENT_QUEUE plus one message, and neither
 * the upstream nor the workers wait for it (and it stops answering PINGs, so
 * its link is closed after the heartbeat timeout and reconnected).  The other
 * way, what the parent sends into a full worker or upstream link pauses the
 * parent link only, like any sender (cj_link_throttle). */
#include <stdio.h>
#include <string.h>

#include "cell/router_int.h"
#include "net/addr.h"
#include "wire/fqcn.h"

#define PARENT_QUEUE ((size_t)1 << 20)

/* Called by cj_router_new once the worker links' settings are known: the
 * parent link is local like them and uses their heartbeats. */
void router_parent_init(struct cj_router *r, const struct cj_link_cfg *base_cfg)
{
    struct outlink *o = &r->parent;
    o->r = r;
    o->role = ROLE_PARENT;
    o->what = "parent";
    o->reconnects = &r->c.parent_reconnects;
    o->cfg = *base_cfg;
    o->cfg.name = "parent";
    o->cfg.heartbeat_interval = r->worker_cfg.heartbeat_interval;
    o->cfg.dead_after = r->worker_cfg.dead_after;
    size_t lb = base_cfg->link_buffer ? base_cfg->link_buffer : (size_t)64 << 20;
    o->cfg.link_buffer = lb < PARENT_QUEUE ? lb : PARENT_QUEUE;
    if (cj_fqcn_parent(r->me, o->expect, sizeof o->expect) < 0) o->expect[0] = '\0';
}

int cj_router_parent_start(struct cj_router *r, const struct cj_parent_cfg *cfg, struct cj_err *err)
{
    struct outlink *o = &r->parent;
    struct cj_addr a;
    if (o->state != CJ_UP_DISABLED) return cj_fail(err, CJ_E_INVALID, 0, "the parent link is already started");
    if (!o->expect[0]) return cj_fail(err, CJ_E_INVALID, 0, "cell %s has no parent (a single part)", r->me);
    if (!cfg->url || cj_addr_parse(cfg->url, CJ_EP_TCP, 0, &a, err) < 0) {
        if (!cfg->url) cj_fail(err, CJ_E_INVALID, 0, "parent: no url");
        return -1;
    }
    if (a.ep.kind != CJ_EP_TCP)
        return cj_fail(err, CJ_E_INVALID, 0, "parent %s: only clear tcp:// is supported", cfg->url);
    snprintf(o->url, sizeof o->url, "%s", cfg->url);
    o->tls = NULL;
    o->rmin = cfg->reconnect_min;
    o->rmax = cfg->reconnect_max;
    return outlink_start(o, err);
}

enum cj_upstream_state cj_router_parent_state(const struct cj_router *r) { return r->parent.state; }

/* The parent P and P's descendants that are neither me nor under me: the
 * cells FLARE reaches through the parent (same family, not below me). */
static bool parent_side(const struct cj_router *r, const char *name)
{
    const char *p = r->parent.expect;
    if (!p[0]) return false;
    if (!strcmp(name, p)) return true;
    return cj_fqcn_is_ancestor(p, name) && strcmp(name, r->me) && !cj_fqcn_is_ancestor(r->me, name);
}

/* Routed to the parent link (when one is configured). */
bool router_for_parent(const struct cj_router *r, const char *dest)
{
    return r->parent.state != CJ_UP_DISABLED && parent_side(r, dest);
}

/* What a message arriving on the parent link may give as its cn__origin. */
bool router_parent_origin_ok(const struct cj_router *r, const char *origin) { return parent_side(r, origin); }

bool router_parent_full(const struct cj_link *dst)
{
    return dst && rl(dst) && rl(dst)->role == ROLE_PARENT && cj_link_over(dst);
}
