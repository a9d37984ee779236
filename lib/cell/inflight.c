/* inflight.c — the worker requests in flight through the upstream (see
 * router.h): remembered when their first chunk goes upstream, forgotten when
 * the reply settles them, failed with forwarder error notices when the
 * upstream is lost or not connected. */
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

static uint16_t pack_text(struct inflight *f, size_t *at, const char *s)
{
    size_t n = strlen(s) + 1;
    uint16_t off = (uint16_t)*at;
    memcpy(f->text + *at, s, n);
    *at += n;
    return off;
}

/* Remembers the request h (its first chunk, forwarded from worker link l
 * toward the upstream), once per stream; at the bound the oldest is forgotten. */
void inflight_track(struct cj_router *r, struct cj_link *l, const struct cj_hdr *h)
{
    struct rlink *d = rl(l);
    if (!d || d->role != ROLE_WORKER) return;
    bool has_ch = cj_hdr_has(h, CJ_HK_SM_CH), has_tp = cj_hdr_has(h, CJ_HK_SM_TP);
    size_t need = strlen(h->sm_ri) + strlen(h->destination) + strlen(h->origin) + 3 +
                  (has_ch ? strlen(h->sm_ch) + 1 : 0) + (has_tp ? strlen(h->sm_tp) + 1 : 0);
    if (need > INFLIGHT_TEXT) {
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
    size_t at = 0;
    pack_text(slot, &at, h->sm_ri);
    slot->dest = pack_text(slot, &at, h->destination);
    slot->origin = pack_text(slot, &at, h->origin);
    slot->has_ch = has_ch;
    slot->has_tp = has_tp;
    if (has_ch) slot->ch = pack_text(slot, &at, h->sm_ch);
    if (has_tp) slot->tp = pack_text(slot, &at, h->sm_tp);
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

/* Fails every request remembered for worker link l with a forwarder error
 * notice and forgets them; one log line.  The table is taken off the link
 * first: a send that closes l (out of memory) frees its rlink. */
void inflight_fail_link(struct cj_router *r, struct cj_link *l, const char *failure, bool rate_limited)
{
    struct rlink *d = rl(l);
    if (!d || !d->n_inflight) return;
    struct inflight *t = d->inflight;
    unsigned n = d->n_inflight, sent = 0;
    char who[CJ_FQCN_MAX + 1], first_err[256] = "";
    snprintf(who, sizeof who, "%s", d->fqcn);
    d->inflight = NULL;
    d->n_inflight = 0;
    for (unsigned i = 0; i < CJ_ROUTER_INFLIGHT_MAX; i++) {
        struct inflight *f = &t[i];
        if (!f->seq) continue;
        struct notice nt = {
            .origin = f->text + f->origin, .dest = f->text + f->dest, .ri = f->text,
            .ch = f->has_ch ? f->text + f->ch : NULL, .tp = f->has_tp ? f->text + f->tp : NULL,
            .sm_id = f->sm_id, .sm_id_neg = f->sm_id_neg,
        };
        struct cj_err err;
        if (router_send_notice(r, &nt, failure, false, &err) == 0) sent++;
        else if (!first_err[0]) snprintf(first_err, sizeof first_err, "; %u not sent: %s", n - sent, err.msg);
        f->seq = 0;
    }
    r->c.inflight_failed += sent;
    d = rl(l);
    if (d && !d->inflight) d->inflight = t;   /* reused, all slots free */
    else free(t);
    if (rate_limited)
        router_drop_log(r, "router %s: failed %u request%s of %s in flight through the upstream with sm__ERROR notices: %s%s",
                 r->me, sent, sent == 1 ? "" : "s", who, failure, first_err);
    else
        cj_log_warning("router %s: failed %u request%s of %s in flight through the upstream with sm__ERROR notices: "
                       "%s%s", r->me, sent, sent == 1 ? "" : "s", who, failure, first_err);
}

/* Every worker's remembered requests.  Links may go away while notices are
 * sent (their slot in r->links is then reused): look again after each. */
void inflight_fail_all(struct cj_router *r, const char *failure, bool rate_limited)
{
    for (;;) {
        struct cj_link *l = NULL;
        for (size_t i = 0; i < r->n_links && !l; i++)
            if (rl(r->links[i]) && rl(r->links[i])->n_inflight) l = r->links[i];
        if (!l) return;
        inflight_fail_link(r, l, failure, rate_limited);
    }
}
