/* SPDX-License-Identifier: Apache-2.0 */
/* inflight.c — the worker requests in flight through the upstream (see
 * router.h): remembered when their first chunk goes upstream, forgotten when
 * the reply settles them, counted and logged as lost when the upstream is
 * lost (their requesters' own timeouts retry them, as under FLARE's client job). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell/router_int.h"
#include "util/log.h"

/* The first chunk of a request stream (doc/protocol/streaming.md §7: sm__ri, not a reply);
 * a reliable sender's retransmission of it is told apart in inflight_track. */
bool inflight_is_request_start(const struct cj_hdr *h)
{
    return cj_hdr_has(h, CJ_HK_SM_RI) && cj_hdr_has(h, CJ_HK_SM_ID) && !strcmp(h->channel, "sm__STREAM") &&
           !strcmp(h->topic, "sm__DATA") && strcmp(h->sm_ch, "return_only") != 0 &&
           !(cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR) && (!cj_hdr_has(h, CJ_HK_SM_SQ) || h->sm_sq == 0);
}

/* A message toward the requester that settles the request with its sm__ri:
 * the reply's final chunk, or an error notice. */
bool inflight_ends_request(const struct cj_hdr *h)
{
    if (!cj_hdr_has(h, CJ_HK_SM_RI) || strcmp(h->channel, "sm__STREAM") != 0) return false;
    if ((cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR) || !strcmp(h->topic, "sm__ERROR") ||
        (!strcmp(h->topic, "sm__ACK") && cj_hdr_has(h, CJ_HK_SM_EM)))
        return true;
    return !strcmp(h->topic, "sm__DATA") && !strcmp(h->sm_ch, "return_only") && cj_hdr_has(h, CJ_HK_SM_DT) &&
           h->sm_dt == CJ_SM_FINAL;
}

/* Remembers the request h (its first chunk, forwarded from worker link l
 * toward the upstream), once per stream; at the bound the oldest is forgotten. */
void inflight_track(struct cj_router *r, struct cj_link *l, const struct cj_hdr *h)
{
    struct rlink *d = rl(l);
    if (!d || d->role != ROLE_WORKER) return;
    size_t ri = strlen(h->sm_ri) + 1, dest = strlen(h->destination) + 1;
    if (ri + dest > INFLIGHT_TEXT) {
        r->c.inflight_untracked++;
        cj_log_debug("router %s: request %s of %s not remembered: its names are too long", r->me, h->sm_ri, d->fqcn);
        return;
    }
    if (!d->inflight && !(d->inflight = calloc(CJ_ROUTER_INFLIGHT_MAX, sizeof *d->inflight))) {
        r->c.inflight_untracked++;
        return;
    }
    struct inflight *slot = NULL, *oldest = NULL;
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &d->inflight[i];
        if (!f->seq) {
            if (!slot) slot = f;
            continue;
        }
        if (f->sm_id == h->sm_id && f->sm_id_neg == h->sm_id_neg && !strcmp(f->text, h->sm_ri)) return;   /* again */
        if (!oldest || f->seq < oldest->seq) oldest = f;
    }
    if (!slot) {
        slot = oldest;
        d->n_inflight--;
        r->c.inflight_untracked++;
        cj_log_debug("router %s: %s has %d requests in flight upstream: forgot the oldest (%s)", r->me, d->fqcn,
                     CJ_ROUTER_INFLIGHT_MAX, slot->text);
    }
    memcpy(slot->text, h->sm_ri, ri);
    memcpy(slot->text + ri, h->destination, dest);
    slot->dest = (uint16_t)ri;
    slot->sm_id = h->sm_id;
    slot->sm_id_neg = h->sm_id_neg;
    slot->seq = ++r->inflight_seq;
    d->n_inflight++;
}

void inflight_forget(struct rlink *d, const char *ri)
{
    for (unsigned i = 0; d->n_inflight && i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &d->inflight[i];
        if (f->seq && !strcmp(f->text, ri)) {
            f->seq = 0;
            d->n_inflight--;
            return;
        }
    }
}

/* Forgets every request remembered for worker d, counting them as lost;
 * one log line naming the first.  Their replies went down with the upstream:
 * FLARE's client job keeps no record of what it forwards, so its trainer's
 * request simply goes unanswered and its own per-request timeout retries it
 * (doc/protocol/cellnet.md §6).  The relay does the same, and says so. */
static void lose_link(struct cj_router *r, struct rlink *d, const char *why)
{
    unsigned n = d->n_inflight;
    const struct inflight *first = NULL;
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        const struct inflight *f = &d->inflight[i];
        if (f->seq && (!first || f->seq < first->seq)) first = f;
    }
    cj_log_warning("router %s: %u request%s of %s in flight through the upstream lost with it (%s), the first %s to %s: "
                   "left to the requester's own timeout and retry", r->me, n, n == 1 ? "" : "s", d->fqcn, why,
                   first ? first->text : "?", first ? first->text + first->dest : "?");
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) d->inflight[i].seq = 0;
    d->n_inflight = 0;
    r->c.inflight_lost += n;
}

/* The upstream is lost: every worker's remembered requests are lost with it. */
void inflight_lose_all(struct cj_router *r, const char *why)
{
    for (size_t i = 0; i < r->n_links; i++) {
        struct rlink *d = rl(r->links[i]);
        if (d && d->n_inflight) lose_link(r, d, why);
    }
}
