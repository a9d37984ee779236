/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c — the worker's link to the relay (or, in direct mode, the server) and
 * its stream endpoint's I/O: everything the endpoint sends goes over the one
 * link, stream messages for us go to the endpoint; link events go to the mode
 * (see worker.h). */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "wire/msg.h"
#include "net/link.h"
#include "stream/stream.h"
#include "util/log.h"
#include "worker.h"

const uint8_t *wk_bytes(struct evbuffer *b, size_t *n)
{
    *n = b ? evbuffer_get_length(b) : 0;
    if (!*n) return (const uint8_t *)"";
    return evbuffer_pullup(b, -1);
}

/* ---- the stream endpoint's router: everything goes to the relay --------------------------- */

static int io_send(void *ctx, const char *destination, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                   bool control)
{
    (void)destination;
    struct wk *w = ctx;
    if (!w->link || cj_link_get_state(w->link) != CJ_LINK_UP) return -1;
    return cj_link_send(w->link, hblk, hlen, payload, control) < 0 ? -1 : 0;
}

static const char *io_next_hop(void *ctx, const char *destination)
{
    (void)destination;
    struct wk *w = ctx;
    const char *peer = w->link ? cj_link_peer(w->link) : "";
    return peer[0] ? peer : w->bs.cj_fqcn;
}

struct cj_stream_ep *wk_endpoint_new(struct wk *w)
{
    struct cj_stream_io io = {.ctx = w, .send = io_send, .next_hop = io_next_hop};
    return cj_stream_new(w->base, w->bs.trainer_fqcn, &io, NULL);
}

/* ---- the link ------------------------------------------------------------------------------ */

static void on_up(struct cj_link *l, void *ctx)
{
    struct wk *w = ctx;
    w->mode->link_up(w, l);
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    (void)l;
    struct wk *w = ctx;
    const struct cj_hdr *h = &m->hdr;
    if (!w->exiting && !strcmp(h->channel, CJ_STREAM_CHANNEL) && !strcmp(h->destination, w->bs.trainer_fqcn))
        cj_stream_input(w->ep, h, m->payload);
    else if (!w->exiting)
        cj_log_debug("dropped %s/%s from %s to %s (not a stream message for us)", h->channel, h->topic, h->origin,
                     h->destination);
    cj_msg_free(m);
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    (void)l;
    struct wk *w = ctx;
    w->link = NULL;
    if (w->exiting) return;
    snprintf(w->last_error, sizeof w->last_error, "%s", why && *why ? why : "link closed");
    w->mode->link_down(w);
}

static const struct cj_link_ops LINK_OPS = {.on_up = on_up, .on_msg = on_msg, .on_down = on_down};

void wk_connect(struct wk *w)
{
    struct cj_err err = {0};
    struct cj_link_cfg cfg = {.name = "relay", .me = w->bs.trainer_fqcn, .quiet = true};
    if (w->link || w->exiting) return;
    w->link = cj_link_connect(w->base, NULL, w->bs.connect_url, w->tls, &cfg, &LINK_OPS, w, &err);
    if (!w->link) {
        snprintf(w->last_error, sizeof w->last_error, "%s", err.msg);
        wk_retry_in(w, WK_RETRY_EVERY);
    }
}
