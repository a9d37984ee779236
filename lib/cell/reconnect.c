/* SPDX-License-Identifier: Apache-2.0 */
/* reconnect.c — the outbound links (the upstream to the server root, the
 * parent to the client parent): connecting, their state, and reconnecting
 * with exponential back-off and jitter when one fails or is lost.  What is
 * particular to one of them (events, the upstream's requests in flight, the
 * parent's name) is in the up/down callbacks below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/dns.h>

#include "cell/router_int.h"
#include "net/addr.h"
#include "util/log.h"
#include "wire/fqcn.h"

static double rand01(struct cj_router *r)
{
    r->rng ^= r->rng << 13;   /* xorshift64: jitter only, not security */
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return (double)(r->rng >> 11) / 9007199254740992.0;
}

const char *cj_router_upstream_state_name(enum cj_upstream_state s)
{
    switch (s) {
    case CJ_UP_DISABLED: return "disabled";
    case CJ_UP_CONNECTING: return "connecting";
    case CJ_UP_UP: return "up";
    case CJ_UP_BACKOFF: return "backoff";
    }
    return "?";
}

enum cj_upstream_state cj_router_upstream_state(const struct cj_router *r) { return r->up.state; }

void cj_router_upstream_status(const struct cj_router *r, struct cj_outlink_status *st)
{
    st->last_error = r->up.last_error;
    st->last_error_at = r->up.last_error_at;
    st->attempts = r->up.attempt;
    st->retry_in = r->up.state == CJ_UP_BACKOFF && r->up.retry_at > cj_now() ? r->up.retry_at - cj_now() : 0;
}

struct outlink *router_outlink(struct cj_router *r, const struct cj_link *l)
{
    struct rlink *d = l ? rl(l) : NULL;
    if (!d) return NULL;
    return d->role == ROLE_UPSTREAM ? &r->up : d->role == ROLE_PARENT ? &r->parent : NULL;
}

/* A DATA frame arrived on o's link: the peer answers, the link works. */
void outlink_heard(struct outlink *o)
{
    if (o->proven) return;
    o->proven = true;
    o->attempt = 0;
}

static void outlink_connect(struct outlink *o);

static void outlink_up(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct outlink *o = router_outlink(r, l);
    struct rlink *d = rl(l);
    const char *peer = cj_link_peer(l);
    if (o->expect[0] && strcmp(peer, o->expect)) {   /* handled as a failed attempt: down, back-off */
        cj_link_close(l, "the peer at %s answered as '%s', not as %s '%s'", o->url, peer, o->what, o->expect);
        return;
    }
    d->up = true;
    snprintf(d->fqcn, sizeof d->fqcn, "%s", peer);
    o->state = CJ_UP_UP;
    o->proven = false;
    o->since = cj_now();
    cj_log_info("router %s: %s up (%s at %s)%s", r->me, o->what, d->fqcn, o->url,
                o->cfg.quiet ? " after retrying" : "");
    o->cfg.quiet = false;
    o->last_why[0] = '\0';
    if (o->role == ROLE_UPSTREAM && r->ev.upstream_up) r->ev.upstream_up(r, d->fqcn, r->ev_ctx);
    if (o->role == ROLE_PARENT && r->ev.parent_up) r->ev.parent_up(r, d->fqcn, r->ev_ctx);
}

/* Every transition is logged once: the first failure (or a new reason) at
 * warning, repeats of the same failure only every 20 attempts; the links of
 * retries log at debug. */
static void report_retry(struct outlink *o, const char *why, bool was_up)
{
    bool same = !was_up && !strcmp(why, o->last_why);
    if (!same || o->attempt % 20 == 0)
        cj_log_warning("router %s: %s %s: %s; retrying every %.1f..%.1f s%s", o->r->me, o->what,
                       was_up ? "lost" : "unreachable", why, o->rmin, o->rmax, same ? " (still failing)" : "");
    snprintf(o->last_why, sizeof o->last_why, "%s", why);
    snprintf(o->last_error, sizeof o->last_error, "%s %s", was_up ? "lost:" : "unreachable:", why);
    o->last_error_at = time(NULL);
    o->cfg.quiet = true;
}

static void outlink_backoff(struct outlink *o)
{
    double d = o->rmin;
    for (int i = 0; i < o->attempt && d < o->rmax; i++) d *= 2;
    if (d > o->rmax) d = o->rmax;
    d = d / 2 + rand01(o->r) * d / 2;           /* jitter: [d/2, d] */
    if (d < o->rmin) d = o->rmin;
    if (o->attempt < 64) o->attempt++;
    o->state = CJ_UP_BACKOFF;
    o->retry_at = cj_now() + d;
    cj_log_debug("router %s: %s reconnect in %.2f s (attempt %d)", o->r->me, o->what, d, o->attempt);
    struct timeval tv = cj_tv(d);
    event_add(o->timer, &tv);
}

static void upstream_lost(struct cj_router *r, struct cj_link *l, const char *why, bool was_up)
{
    r->paced_on = NULL;   /* the next upstream link starts reading */
    if (was_up && !r->up.proven && cj_link_is_tls(l))
        cj_log_warning("router %s: the server closed the link after READY before answering anything; with mtls "
                       "the usual cause is a client certificate whose CN differs from the site name '%.*s'",
                       r->me, (int)cj_fqcn_root_len(r->me), r->me);
    if (r->ev.upstream_down) r->ev.upstream_down(r, why, r->ev_ctx);
}

static void outlink_down(struct cj_link *l, const char *why, void *ctx)
{
    struct cj_router *r = ctx;
    struct outlink *o = router_outlink(r, l);
    struct rlink *d = rl(l);
    bool was_up = d && d->up;
    router_remove_link(r, l);
    cj_link_set_data(l, NULL);
    router_rlink_free(d);
    o->link = NULL;
    /* A link that stayed up a while was healthy: start the back-off over.
     * One the peer drops right after READY keeps backing off. */
    if (was_up && cj_now() - o->since > 2 * o->rmax) o->attempt = 0;
    if (o->role == ROLE_UPSTREAM) upstream_lost(r, l, why, was_up);
    if (o->role == ROLE_PARENT && was_up && r->ev.parent_down) r->ev.parent_down(r, why, r->ev_ctx);
    report_retry(o, why, was_up);
    if (was_up && o->role == ROLE_UPSTREAM) inflight_lose_all(r, why);   /* their replies will not come */
    outlink_backoff(o);
}

static const struct cj_link_ops outlink_ops = {
    .on_up = outlink_up, .on_msg = router_link_msg, .on_down = outlink_down,
};

static void outlink_connect(struct outlink *o)
{
    struct cj_router *r = o->r;
    struct cj_err err;
    struct rlink *d = calloc(1, sizeof *d);
    if (!d || router_add_link(r, NULL) < 0) {
        free(d);
        cj_log_error("router %s: out of memory connecting the %s link", r->me, o->what);
        outlink_backoff(o);
        return;
    }
    r->n_links--;                           /* slot reserved */
    d->role = o->role;
    o->state = CJ_UP_CONNECTING;
    struct cj_link *l = cj_link_connect(r->base, r->dns, o->url, o->tls, &o->cfg, &outlink_ops, r, &err);
    if (!l) {
        free(d);
        cj_log_error("router %s: cannot connect the %s link: %s", r->me, o->what, err.msg);
        outlink_backoff(o);
        return;
    }
    cj_link_set_data(l, d);
    router_add_link(r, l);
    o->link = l;
}

static void outlink_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct outlink *o = arg;
    (*o->reconnects)++;
    outlink_connect(o);
}

/* o's url, tls, expect and cfg are set: starts connecting.  rmin/rmax 0 =
 * 0.5 / 30 s.  The router's resolver is made here if the host is a name. */
int outlink_start(struct outlink *o, struct cj_err *err)
{
    struct cj_router *r = o->r;
    struct cj_addr a;
    if (cj_addr_parse(o->url, CJ_EP_NET, 0, &a, err) < 0) return -1;
    o->rmin = o->rmin > 0 ? o->rmin : 0.5;
    o->rmax = o->rmax > 0 ? o->rmax : 30;
    if (o->rmax < o->rmin) o->rmax = o->rmin;
    if (!r->dns && !cj_addr_is_numeric(&a)) {
        r->dns = evdns_base_new(r->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (!r->dns) return cj_fail(err, CJ_E_INVALID, 0, "cannot set up a DNS resolver for %s", a.ep.addr);
        r->own_dns = true;
    }
    o->timer = evtimer_new(r->base, outlink_timer, o);
    if (!o->timer) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    outlink_connect(o);
    return 0;
}

void outlink_free(struct outlink *o)
{
    if (o->timer) event_free(o->timer);
    o->timer = NULL;
}

int cj_router_upstream_start(struct cj_router *r, const struct cj_upstream_cfg *u, struct cj_err *err)
{
    struct cj_addr a;
    struct outlink *o = &r->up;
    if (o->state != CJ_UP_DISABLED) return cj_fail(err, CJ_E_INVALID, 0, "the upstream is already started");
    if (cj_addr_parse(u->url, CJ_EP_NET, 0, &a, err) < 0) return -1;
    if (cj_ep_tls(a.ep.kind) != (u->tls != NULL))
        return cj_fail(err, CJ_E_INVALID, 0, "upstream %s: %s", a.text,
                       u->tls ? "TLS needs an stcp://, https:// or grpcs:// url" : "a TLS scheme needs a TLS context");
    snprintf(o->url, sizeof o->url, "%s", u->url);
    snprintf(o->tls_name, sizeof o->tls_name, "%s", u->tls_name ? u->tls_name : "");
    o->cfg.tls_name = o->tls_name;
    o->tls = u->tls;
    o->rmin = u->reconnect_min;
    o->rmax = u->reconnect_max;
    if (u->dns && !r->own_dns) r->dns = u->dns;
    return outlink_start(o, err);
}
