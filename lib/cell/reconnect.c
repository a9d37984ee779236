/* reconnect.c — the upstream link: connecting, its state, and reconnecting
 * with exponential back-off and jitter when it fails or is lost. */
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

enum cj_upstream_state cj_router_upstream_state(const struct cj_router *r) { return r->up_state; }

static void upstream_connect(struct cj_router *r);

static void upstream_up(struct cj_link *l, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    d->up = true;
    snprintf(d->fqcn, sizeof d->fqcn, "%s", cj_link_peer(l));
    r->up_state = CJ_UP_UP;
    r->proven = false;
    r->up_since = cj_now();
    cj_log_info("router %s: upstream up (%s at %s)%s", r->me, d->fqcn, r->up_url,
                r->upstream_cfg.quiet ? " after retrying" : "");
    r->upstream_cfg.quiet = false;
    r->last_why[0] = '\0';
    if (r->ev.upstream_up) r->ev.upstream_up(r, d->fqcn, r->ev_ctx);
}

/* Every transition is logged once: the first failure (or a new reason) at
 * warning, repeats of the same failure only every 20 attempts; the links of
 * retries log at debug. */
static void report_retry(struct cj_router *r, const char *why, bool was_up)
{
    bool same = !was_up && !strcmp(why, r->last_why);
    if (!same || r->attempt % 20 == 0)
        cj_log_warning("router %s: upstream %s: %s; retrying every %.1f..%.1f s%s", r->me,
                       was_up ? "lost" : "unreachable", why, r->rmin, r->rmax,
                       same ? " (still failing)" : "");
    snprintf(r->last_why, sizeof r->last_why, "%s", why);
    r->upstream_cfg.quiet = true;
}

static void upstream_backoff(struct cj_router *r)
{
    double d = r->rmin;
    for (int i = 0; i < r->attempt && d < r->rmax; i++) d *= 2;
    if (d > r->rmax) d = r->rmax;
    d = d / 2 + rand01(r) * d / 2;           /* jitter: [d/2, d] */
    if (d < r->rmin) d = r->rmin;
    if (r->attempt < 64) r->attempt++;
    r->up_state = CJ_UP_BACKOFF;
    cj_log_debug("router %s: upstream reconnect in %.2f s (attempt %d)", r->me, d, r->attempt);
    struct timeval tv = cj_tv(d);
    event_add(r->up_timer, &tv);
}

static void upstream_down(struct cj_link *l, const char *why, void *ctx)
{
    struct cj_router *r = ctx;
    struct rlink *d = rl(l);
    bool was_up = d && d->up;
    router_remove_link(r, l);
    cj_link_set_data(l, NULL);
    free(d);
    r->up_link = NULL;
    r->paced_on = NULL;   /* the next upstream link starts reading */
    /* A link that stayed up a while was healthy: start the back-off over.
     * One the server drops right after READY keeps backing off. */
    if (was_up && cj_now() - r->up_since > 2 * r->rmax) r->attempt = 0;
    if (was_up && !r->proven && cj_link_is_tls(l))
        cj_log_warning("router %s: the server closed the link after READY before answering anything; with mtls "
                       "the usual cause is a client certificate whose CN differs from the site name '%.*s'",
                       r->me, (int)cj_fqcn_root_len(r->me), r->me);
    if (r->ev.upstream_down) r->ev.upstream_down(r, why, r->ev_ctx);
    report_retry(r, why, was_up);
    if (was_up) {   /* the replies to the workers' requests in flight will not come */
        char failure[320];
        snprintf(failure, sizeof failure, "the upstream was lost (%.250s)", why);
        inflight_fail_all(r, failure, false);
    }
    upstream_backoff(r);
}

static const struct cj_link_ops upstream_ops = {
    .on_up = upstream_up, .on_msg = router_link_msg, .on_down = upstream_down,
};

static void upstream_connect(struct cj_router *r)
{
    struct cj_err err;
    struct rlink *d = calloc(1, sizeof *d);
    if (!d || router_add_link(r, NULL) < 0) {
        free(d);
        cj_log_error("router %s: out of memory connecting upstream", r->me);
        upstream_backoff(r);
        return;
    }
    r->n_links--;                           /* slot reserved */
    d->role = ROLE_UPSTREAM;
    r->up_state = CJ_UP_CONNECTING;
    struct cj_link *l = cj_link_connect(r->base, r->dns, r->up_url, r->up_tls, &r->upstream_cfg, &upstream_ops, r,
                                        &err);
    if (!l) {
        free(d);
        cj_log_error("router %s: cannot connect upstream: %s", r->me, err.msg);
        upstream_backoff(r);
        return;
    }
    cj_link_set_data(l, d);
    router_add_link(r, l);
    r->up_link = l;
}

static void upstream_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_router *r = arg;
    r->c.reconnects++;
    upstream_connect(r);
}

int cj_router_upstream_start(struct cj_router *r, const struct cj_upstream_cfg *u, struct cj_err *err)
{
    struct cj_addr a;
    if (r->up_state != CJ_UP_DISABLED) return cj_fail(err, CJ_E_INVALID, 0, "the upstream is already started");
    if (cj_addr_parse(u->url, CJ_EP_NET, 0, &a, err) < 0) return -1;
    if (cj_ep_tls(a.ep.kind) != (u->tls != NULL))
        return cj_fail(err, CJ_E_INVALID, 0, "upstream %s: %s", a.text,
                       u->tls ? "TLS needs an stcp://, https:// or grpcs:// url" : "a TLS scheme needs a TLS context");
    snprintf(r->up_url, sizeof r->up_url, "%s", u->url);
    snprintf(r->up_tls_name, sizeof r->up_tls_name, "%s", u->tls_name ? u->tls_name : "");
    r->upstream_cfg.tls_name = r->up_tls_name;
    r->up_tls = u->tls;
    r->rmin = u->reconnect_min > 0 ? u->reconnect_min : 0.5;
    r->rmax = u->reconnect_max > 0 ? u->reconnect_max : 30;
    if (r->rmax < r->rmin) r->rmax = r->rmin;
    r->dns = u->dns;
    if (!r->dns && !cj_addr_is_numeric(&a)) {
        r->dns = evdns_base_new(r->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (!r->dns) return cj_fail(err, CJ_E_INVALID, 0, "cannot set up a DNS resolver for %s", a.ep.addr);
        r->own_dns = true;
    }
    r->up_timer = evtimer_new(r->base, upstream_timer, r);
    if (!r->up_timer) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    upstream_connect(r);
    return 0;
}
