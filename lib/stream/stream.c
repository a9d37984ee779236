/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c — the streaming endpoint: limits, handler registry, stream ids,
 * auth headers, the helpers that build and send every message the layer
 * originates, and the dispatch of incoming sm__STREAM messages to the
 * receiver (rx.c), the sender (tx.c) and the requester (reqrep.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "stream/internal.h"
#include "util/log.h"

void cj_stream_limits_default(struct cj_stream_limits *l)
{
    l->chunk_size = SM_DEFAULT_CHUNK;
    l->window = SM_DEFAULT_WINDOW;
    l->ack_interval = SM_DEFAULT_ACK;
    l->max_blob = CJ_STREAM_MAX_BLOB;
    l->max_buffered = CJ_STREAM_MAX_BLOB + SM_DEFAULT_WINDOW;   /* one largest blob + room for small ones */
    l->max_streams = 4096;
    l->rx_idle = 300.0;
    l->tx_no_progress = 60.0;
    l->linger = 60.0;
}

/* ---- small helpers ----------------------------------------------------------------- */

double sm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool sm_to_server(const char *d)
{
    return strcmp(d, "server") == 0 || strncmp(d, "server.", 7) == 0;
}

bool sm_name_ok(const char *s)
{
    return s && *s && strlen(s) <= CJ_HDR_STR_MAX;
}

void sm_hlist_clear(struct sm_hlist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->keys[i]);
        free(l->vals[i]);
    }
    free(l->keys);
    free(l->vals);
    free(l->lens);
    memset(l, 0, sizeof *l);
}

int sm_hlist_set_raw(struct sm_hlist *l, const struct cj_stream_hv *hv, size_t n)
{
    struct sm_hlist nl = { 0 };
    if (n) {
        nl.keys = calloc(n, sizeof *nl.keys);
        nl.vals = calloc(n, sizeof *nl.vals);
        nl.lens = calloc(n, sizeof *nl.lens);
        if (!nl.keys || !nl.vals || !nl.lens) goto fail;
    }
    for (; nl.n < n; nl.n++) {
        const struct cj_stream_hv *e = &hv[nl.n];
        if (!e->key || !*e->key || (!e->val && e->len)) goto fail;
        nl.keys[nl.n] = strdup(e->key);
        nl.vals[nl.n] = malloc(e->len ? e->len : 1);
        if (!nl.keys[nl.n] || !nl.vals[nl.n]) {
            nl.n++;
            goto fail;
        }
        if (e->len) memcpy(nl.vals[nl.n], e->val, e->len);
        nl.lens[nl.n] = e->len;
    }
    sm_hlist_clear(l);
    *l = nl;
    return 0;
fail:
    sm_hlist_clear(&nl);
    return -1;
}

bool sm_hlist_has(const struct sm_hlist *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->keys[i], key) == 0) return true;
    return false;
}

void sm_add_headers(struct cj_stream_ep *ep, struct cj_hb *b, const struct sm_hlist *app, const char *destination)
{
    if (app)
        for (size_t i = 0; i < app->n; i++) cj_hb_raw(b, app->keys[i], app->vals[i], app->lens[i]);
    if (!sm_to_server(destination)) return;
    for (size_t i = 0; i < ep->auth.n; i++)
        if (!app || !sm_hlist_has(app, ep->auth.keys[i]))
            cj_hb_raw(b, ep->auth.keys[i], ep->auth.vals[i], ep->auth.lens[i]);
}

int sm_build_msg(struct cj_stream_ep *ep, struct cj_hb *b, const char *destination, const char *topic,
                 const char *payload_encoding, int64_t payload_len, bool optional, msgpack_sbuffer *out,
                 struct cj_err *err)
{
    const char *to = ep->io.next_hop ? ep->io.next_hop(ep->io.ctx, destination) : NULL;
    double now = sm_now();
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ,
        .me = ep->me,
        .to = to && *to ? to : destination,
        .destination = destination,
        .channel = CJ_STREAM_CHANNEL,
        .topic = topic,
        .reply_expected = false,
        .optional = optional,
        .secure = false,
        .payload_encoding = payload_encoding,
        .payload_len = payload_len,
        .route_time = now,
        .send_time = now,
    };
    cj_hb_cellnet(b, &m);
    return cj_hb_finish(b, out, err);
}

int sm_send_msg(struct cj_stream_ep *ep, struct cj_hb *b, const char *destination, const char *topic,
                const char *payload_encoding, int64_t payload_len, bool optional, bool control)
{
    msgpack_sbuffer out;
    struct cj_err err = { 0 };
    msgpack_sbuffer_init(&out);
    int rc = sm_build_msg(ep, b, destination, topic, payload_encoding, payload_len, optional, &out, &err);
    if (rc) {
        cj_log_warning("stream: cannot build %s message to %s: %s", topic, destination, err.msg);
        rc = -2;
    } else {
        rc = ep->io.send(ep->io.ctx, destination, (const uint8_t *)out.data, out.size, ep->scratch, control)
                 ? -1
                 : 0;
    }
    size_t left = evbuffer_get_length(ep->scratch);
    if (left) evbuffer_drain(ep->scratch, left);
    msgpack_sbuffer_destroy(&out);
    return rc;
}

/* ---- handlers ---------------------------------------------------------------------- */

struct sm_handler *sm_handler_find(struct cj_stream_ep *ep, const char *channel, const char *topic)
{
    for (struct sm_handler *h = ep->handlers; h; h = h->next)
        if (strcmp(h->channel, channel) == 0 && strcmp(h->topic, topic) == 0) return h;
    return NULL;
}

int cj_stream_on(struct cj_stream_ep *ep, const char *channel, const char *topic, cj_stream_handler_fn fn,
                 void *arg)
{
    if (!sm_name_ok(channel) || !sm_name_ok(topic) || strcmp(channel, CJ_STREAM_RETURN_ONLY) == 0) return -1;
    struct sm_handler **pp = &ep->handlers;
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->channel, channel) == 0 && strcmp((*pp)->topic, topic) == 0) break;
    if (*pp && !fn) {
        struct sm_handler *h = *pp;
        *pp = h->next;
        free(h->channel);
        free(h->topic);
        free(h);
        return 0;
    }
    if (*pp) {
        (*pp)->fn = fn;
        (*pp)->arg = arg;
        return 0;
    }
    if (!fn) return 0;
    struct sm_handler *h = calloc(1, sizeof *h);
    if (!h || !(h->channel = strdup(channel)) || !(h->topic = strdup(topic))) {
        if (h) free(h->channel);
        free(h);
        return -1;
    }
    h->fn = fn;
    h->arg = arg;
    h->next = ep->handlers;
    ep->handlers = h;
    return 0;
}

/* ---- auth headers ------------------------------------------------------------------ */

static bool reserved_key(const char *k)
{
    return strncmp(k, "cn__", 4) == 0 || strncmp(k, "sm__", 4) == 0;
}

int cj_stream_set_auth(struct cj_stream_ep *ep, const struct cj_stream_kv *kv, size_t n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct cj_stream_hv *hv = n ? calloc(n, sizeof *hv) : NULL;
    size_t *off = n ? calloc(n, sizeof *off) : NULL;
    int rc = -1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (n && (!hv || !off)) goto out;
    for (size_t i = 0; i < n; i++) {
        if (!kv[i].key || !*kv[i].key || !kv[i].val || reserved_key(kv[i].key)) goto out;
        size_t len = strlen(kv[i].val);
        off[i] = sb.size;
        if (msgpack_pack_str(&pk, len) || msgpack_pack_str_body(&pk, kv[i].val, len)) goto out;
        hv[i].key = kv[i].key;
        hv[i].len = sb.size - off[i];
    }
    for (size_t i = 0; i < n; i++) hv[i].val = sb.data + off[i];
    rc = sm_hlist_set_raw(&ep->auth, hv, n);
out:
    msgpack_sbuffer_destroy(&sb);
    free(hv);
    free(off);
    return rc;
}

/* ---- ids ----------------------------------------------------------------------------- */

static uint64_t random_u64(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint64_t)ts.tv_nsec * 2654435761u ^ (uint64_t)ts.tv_sec;
    }
    return r;
}

uint64_t cj_stream_next_id(struct cj_stream_ep *ep)
{
    return ep->id_next++;
}

/* ---- endpoint ------------------------------------------------------------------------ */

static bool limits_ok(struct cj_stream_limits *l)
{
    if (!l->chunk_size || !l->window) return false;
    if (!l->max_blob || l->max_blob > CJ_STREAM_MAX_BLOB) l->max_blob = CJ_STREAM_MAX_BLOB;
    if (!l->ack_interval) l->ack_interval = SM_DEFAULT_ACK;
    if (l->ack_interval > l->window) l->ack_interval = l->window;
    if (!l->max_streams) l->max_streams = 1;
    return true;
}

struct cj_stream_ep *cj_stream_new(struct event_base *base, const char *me, const struct cj_stream_io *io,
                                   const struct cj_stream_limits *lim)
{
    if (!base || !sm_name_ok(me) || !io || !io->send) return NULL;
    struct cj_stream_ep *ep = calloc(1, sizeof *ep);
    if (!ep) return NULL;
    ep->base = base;
    strcpy(ep->me, me);
    ep->io = *io;
    if (!ep->io.stats) ep->io.stats = &ep->own_stats;
    if (lim) ep->lim = *lim;
    else cj_stream_limits_default(&ep->lim);
    if (!limits_ok(&ep->lim)) goto fail;
    ep->nbuckets = 64;
    while (ep->nbuckets < ep->lim.max_streams / 4 && ep->nbuckets < ((size_t)1 << 20)) ep->nbuckets <<= 1;
    ep->buckets = calloc(ep->nbuckets, sizeof *ep->buckets);
    ep->scratch = evbuffer_new();
    if (!ep->buckets || !ep->scratch) goto fail;
    TAILQ_INIT(&ep->finished);
    TAILQ_INIT(&ep->draining);
    TAILQ_INIT(&ep->tx);
    TAILQ_INIT(&ep->reqs);
    /* NVFlare: µs wall clock at process start + random 0..10^6, then a counter. */
    ep->id_next = (uint64_t)(sm_now() * 1e6) + random_u64() % 1000001u;
    ep->req_next = 1;
    return ep;
fail:
    free(ep->buckets);
    if (ep->scratch) evbuffer_free(ep->scratch);
    free(ep);
    return NULL;
}

uint32_t cj_stream_chunk_size(const struct cj_stream_ep *ep)
{
    return ep->lim.chunk_size;
}

void cj_stream_free(struct cj_stream_ep *ep)
{
    if (!ep) return;
    ep->closing = true;
    req_free_all(ep);
    tx_free_all(ep);
    rx_free_all(ep);
    while (ep->handlers) cj_stream_on(ep, ep->handlers->channel, ep->handlers->topic, NULL, NULL);
    sm_hlist_clear(&ep->auth);
    evbuffer_free(ep->scratch);
    free(ep->buckets);
    free(ep);
}

void cj_stream_set_wire(struct cj_stream_ep *ep, enum cj_stream_wire wire)
{
    ep->wire = wire;
    if (wire != CJ_STREAM_WIRE_2_8) return;
    /* A 2.8.x receiver ACKs once more than 4 MiB are consumed (and not after
     * the FINAL chunk): a smaller window would wait for an ACK that never comes. */
    uint64_t min = SM_DEFAULT_ACK + 2 * (uint64_t)ep->lim.chunk_size;
    if (ep->lim.window < min) {
        cj_log_info("stream %s: window raised from %llu to %llu bytes for FLARE 2.8 peers", ep->me,
                    (unsigned long long)ep->lim.window, (unsigned long long)min);
        ep->lim.window = min;
    }
}

enum cj_stream_wire cj_stream_get_wire(const struct cj_stream_ep *ep)
{
    return ep->wire;
}

const char *cj_stream_me(const struct cj_stream_ep *ep)
{
    return ep->me;
}

void cj_stream_get_stats(const struct cj_stream_ep *ep, struct cj_stream_stats *st)
{
    *st = ep->st;
    st->rx_active = ep->n_rx - ep->n_rx_finished;
    st->rx_finished = ep->n_rx_finished;
    st->rx_buffered = ep->rx_buffered;
    st->rx_reserved = ep->rx_reserved;
    st->tx_active = ep->n_tx;
    st->requests = ep->n_req;
}

struct cj_stats *cj_stream_relay_stats(struct cj_stream_ep *ep)
{
    return ep->io.stats;
}

/* ---- input dispatch ------------------------------------------------------------------ */

static void drop(struct cj_stream_ep *ep, const struct cj_hdr *h, const char *why)
{
    ep->st.dropped++;
    ep->io.stats->drops++;
    cj_log_debug("stream: dropped %s/%s from %s: %s", h->channel, h->topic, h->origin, why);
}

static void input_error(struct cj_stream_ep *ep, const struct cj_hdr *h)
{
    ep->st.errors_in++;
    if (!cj_hdr_has(h, CJ_HK_SM_ID) && !cj_hdr_has(h, CJ_HK_SM_RI)) {
        drop(ep, h, "error notice without sm__id or sm__ri");
        return;
    }
    /* The stream first (an ACK with sm__em fails it), then the request it carried. */
    if (cj_hdr_has(h, CJ_HK_SM_ID)) tx_input_error(ep, h);
    if (!req_input_error(ep, h))
        cj_log_info("stream: error notice from %s for stream %llu: %.*s", h->origin,
                    (unsigned long long)h->sm_id, (int)(h->sm_em.len > 300 ? 300 : h->sm_em.len),
                    (const char *)h->sm_em.p);
}

void cj_stream_input(struct cj_stream_ep *ep, const struct cj_hdr *h, struct evbuffer *payload)
{
    if (ep->closing) return;
    if (!payload) {   /* a header-only message given without a buffer */
        struct evbuffer *empty = evbuffer_new();
        if (!empty) return;
        cj_stream_input(ep, h, empty);
        evbuffer_free(empty);
        return;
    }
    if (cj_hdr_has(h, CJ_HK_CHANNEL) && strcmp(h->channel, CJ_STREAM_CHANNEL) != 0) {
        drop(ep, h, "not an sm__STREAM message");
    } else if (strcmp(h->topic, CJ_STREAM_TOPIC_DATA) == 0) {
        rx_input_data(ep, h, payload);
    } else if (strcmp(h->topic, CJ_STREAM_TOPIC_ACK) == 0) {
        if (cj_hdr_has(h, CJ_HK_SM_EM) || (cj_hdr_has(h, CJ_HK_SM_DT) && h->sm_dt == CJ_SM_ERROR))
            input_error(ep, h);
        else
            tx_input_ack(ep, h);
    } else if (strcmp(h->topic, CJ_STREAM_TOPIC_ERROR) == 0) {
        input_error(ep, h);
    } else {
        drop(ep, h, "unknown sm__STREAM topic");
    }
    size_t left = evbuffer_get_length(payload);
    if (left) evbuffer_drain(payload, left);
}
