/* SPDX-License-Identifier: Apache-2.0 */
/* sim.c — cjrelay-sim: the cells `server` and `server.<job>` (one per --job-id)
 * over passive links, with a stream endpoint for each job cell, the transport
 * test handlers, and the end of each job's run (see sim.h; the FL server is
 * fl.c, the client parent cp.c). */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>

#include "wire/msg.h"
#include "hdrline.h"
#include "model.h"
#include "net/addr.h"
#include "net/link.h"
#include "net/tls.h"
#include "pattern.h"
#include "sim.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/parse.h"
#include "wire/fqcn.h"
#include "wire/header.h"

#define SIM_ROOT CJ_FQCN_SERVER          /* the name in READY */
#define SIM_BLOB_REQ_MAX 32              /* bytes of a test/blob request payload ("1073741824") */

/* A reply stream in flight (echo or blob): reported when done. */
struct served {
    struct sim_job *j;
    char what[16];
    char to[CJ_FQCN_MAX + 1];
    uint64_t bytes;
    double t0;
};

/* ---- links ------------------------------------------------------------------------- */

static void forget_link(struct sim *s, struct cj_link *l)
{
    for (size_t i = 0; i < s->n_links; i++)
        if (s->links[i] == l) {
            memmove(&s->links[i], &s->links[i + 1], (s->n_links - i - 1) * sizeof s->links[0]);
            s->n_links--;
            return;
        }
}

/* The up link toward destination: the one whose peer is the destination or its
 * longest ancestor, among equals the newest; else a child of the parent cell's
 * toward it (a job connected only through its parent). */
struct cj_link *sim_best_link(struct cj_link *const *links, size_t n, const char *dest)
{
    struct cj_link *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = cj_link_peer(links[i]);
        if (cj_link_get_state(links[i]) != CJ_LINK_UP || !p[0]) continue;
        if (strcmp(p, dest) && !cj_fqcn_is_ancestor(p, dest)) continue;
        if (strlen(p) >= best_len) {
            best = links[i];
            best_len = strlen(p);
        }
    }
    return best;
}

static struct cj_link *route_for(struct sim *s, const char *dest)
{
    struct cj_link *best = sim_best_link(s->links, s->n_links, dest);
    return best ? best : sim_cp_route(s, dest);
}

void sim_replace_peer(struct cj_link *const *links, size_t n, struct cj_link *l, const char *peer)
{
    for (size_t i = 0; i < n; i++) {
        struct cj_link *o = links[i];
        if (o != l && cj_link_get_state(o) == CJ_LINK_UP && !strcmp(cj_link_peer(o), peer)) {
            cj_link_close(o, "replaced by a newer connection from %s (%s)", peer, cj_link_addr(l));
            return;
        }
    }
}

static int on_hello(struct cj_link *l, const char *peer, char *why, size_t whysz, void *ctx)
{
    struct sim *s = ctx;
    sim_replace_peer(s->links, s->n_links, l, peer);
    return 0;
}

static void on_up(struct cj_link *l, void *ctx)
{
    (void)ctx;
    cj_log_info("sim: client %s connected from %s%s", cj_link_peer(l), cj_link_addr(l),
                cj_link_is_tls(l) ? " (TLS)" : "");
}

static void on_down(struct cj_link *l, const char *why, void *ctx)
{
    struct sim *s = ctx;
    if (cj_link_peer(l)[0]) cj_log_info("sim: client %s disconnected: %s", cj_link_peer(l), why);
    forget_link(s, l);
}

/* ---- direct messages --------------------------------------------------------------- */

/* A direct reply (doc/protocol/cellnet.md §2) on the link the request came in on. */
static void direct_reply(struct sim *s, const struct cj_msg *req, const char *rc, const char *error,
                         const char *text)
{
    const struct cj_hdr *h = &req->hdr;
    struct evbuffer *payload = evbuffer_new();
    size_t plen = text ? strlen(text) : 0;
    if (!payload || (plen && evbuffer_add(payload, text, plen) < 0)) {
        cj_log_error("sim: out of memory replying to %s", h->origin);
        if (payload) evbuffer_free(payload);
        return;
    }
    struct cj_hb hb;
    struct cj_err err;
    msgpack_sbuffer sb;
    cj_hb_init(&hb);
    msgpack_sbuffer_init(&sb);
    if (error) cj_hb_str(&hb, "cn__error", error);
    double t = cj_msg_now();
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REPLY, .me = h->destination, .to = cj_link_peer(req->from), .destination = h->origin,
        .channel = h->channel, .topic = h->topic, .req_id = h->req_id, .return_code = rc,
        .optional = h->optional, .secure = h->secure, .payload_encoding = plen ? "bytes" : "none",
        .payload_len = (int64_t)plen, .route_time = t, .send_time = t,
    };
    cj_hb_cellnet(&hb, &m);                 /* errors are sticky: cj_hb_finish reports them */
    if (cj_hb_finish(&hb, &sb, &err) < 0)
        cj_log_error("sim: cannot build the reply to %s: %s", h->origin, err.msg);
    else if (cj_link_send(req->from, (const uint8_t *)sb.data, sb.size, payload, true) < 0)
        cj_log_warning("sim: cannot send the reply to %s: link %s is not up", h->origin, cj_link_peer(req->from));
    cj_hb_destroy(&hb);
    msgpack_sbuffer_destroy(&sb);
    evbuffer_free(payload);
}

/* The ping answer carries counters the tests read: the link's heartbeats
 * (the upstream stays alive) and the stream sender's progress. */
static void serve_ping(struct sim *s, struct sim_job *j, const struct cj_msg *m)
{
    const struct cj_link_counters *lc = cj_link_counters(m->from);
    struct cj_stream_stats st;
    char text[2 * CJ_FQCN_MAX + 512];
    cj_stream_get_stats(j->ep, &st);
    snprintf(text, sizeof text,
             "pong from %s to %s: links=%zu pings_out=%" PRIu64 " pongs_in=%" PRIu64 " pings_in=%" PRIu64
             " tx_active=%" PRIu64 " chunks_out=%" PRIu64 " acks_in=%" PRIu64 " blobs_out=%" PRIu64
             " tx_failed=%" PRIu64 " blobs_in=%" PRIu64,
             m->hdr.destination, m->hdr.origin, s->n_links, lc->pings_out, lc->pongs_in, lc->pings_in,
             st.tx_active, st.chunks_out, st.acks_in, st.blobs_out, st.tx_failed, st.blobs_in);
    direct_reply(s, m, "ok", NULL, text);
    s->served++;
    printf("SERVED ping from %s\n", m->hdr.origin);
}

static void log_headers(struct sim *s, const struct cj_msg *m)
{
    if (s->hlog) hl_line(s->hlog, m->hblk, m->hlen);
}

static void direct_request(struct sim *s, struct sim_job *j, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    log_headers(s, m);
    cj_log_info("sim: request %s/%s from %s (via %s)", h->channel, h->topic, h->origin, cj_link_peer(m->from));
    bool want = h->reply_expected;
    if (!strcmp(h->channel, "task") && !strcmp(h->topic, "ping")) {
        if (want) serve_ping(s, j, m);
    } else if (!strcmp(h->channel, "cellnet.channel") && !strcmp(h->topic, "bye")) {
        if (want) direct_reply(s, m, "ok", NULL, NULL);
    } else if (want) {
        direct_reply(s, m, "process_exception", "no callback", NULL);
    }
}

/* Chunk 0 of a stream request: its headers are the request's headers. */
static bool is_request_chunk0(const struct cj_hdr *h)
{
    return !strcmp(h->topic, CJ_STREAM_TOPIC_DATA) && cj_hdr_has(h, CJ_HK_SM_SQ) && h->sm_sq == 0 &&
           cj_hdr_has(h, CJ_HK_SM_DT) && (h->sm_dt == CJ_SM_CHUNK || h->sm_dt == CJ_SM_FINAL) &&
           strcmp(h->sm_ch, CJ_STREAM_RETURN_ONLY);
}

/* --stall-download N@SECS: the Nth download request and every one for SECS
 * after it are dropped unanswered, as a server that stops sending in the
 * middle of a transfer; then they are answered again. */
static bool stall_download(struct sim *s, const struct cj_hdr *h)
{
    const struct sim_opts *o = s->o;
    if (!o->stall_download_at || !is_request_chunk0(h) || strcmp(h->sm_ch, "download_service__")) return false;
    double now = cj_now();
    if (!s->stall_until) {
        if (++s->dl_requests < o->stall_download_at) return false;
        s->stall_until = now + o->stall_download_secs;
        printf("SIM STALL downloads for %g s from request %ld\n", o->stall_download_secs, s->dl_requests);
        fflush(stdout);
    }
    if (now >= s->stall_until) return false;
    cj_log_info("sim: download request from %s dropped (--stall-download, %.1f s left)", h->origin,
                s->stall_until - now);
    return true;
}

/* As FLARE's cells do for an optional sm__DATA chunk they cannot forward: an
 * sm__ERROR to the chunk's origin naming the target (sm__fd), so a requester
 * learns at once that the target cell is not there. */
static bool forward_error(struct cj_link *l, const struct cj_hdr *h, const char *me)
{
    if (!h->optional || strcmp(h->channel, "sm__STREAM") || strcmp(h->topic, "sm__DATA") ||
        !cj_hdr_has(h, CJ_HK_SM_ID))
        return false;
    struct cj_hb hb;
    struct cj_err err;
    msgpack_sbuffer sb;
    char em[CJ_FQCN_MAX + 64];
    cj_hb_init(&hb);
    msgpack_sbuffer_init(&sb);
    if (h->sm_id_neg) cj_hb_int(&hb, "sm__id", (int64_t)h->sm_id);
    else cj_hb_uint(&hb, "sm__id", h->sm_id);
    cj_hb_int(&hb, "sm__dt", CJ_SM_ERROR);
    snprintf(em, sizeof em, "stream forwarding to %s failed: target_unreachable", h->destination);
    cj_hb_str(&hb, "sm__em", em);
    cj_hb_str(&hb, "sm__et", "StreamTargetUnreachable");
    cj_hb_str(&hb, "sm__fd", h->destination);
    if (cj_hdr_has(h, CJ_HK_SM_CH)) cj_hb_str(&hb, "sm__ch", h->sm_ch);
    if (cj_hdr_has(h, CJ_HK_SM_TP)) cj_hb_str(&hb, "sm__tp", h->sm_tp);
    if (cj_hdr_has(h, CJ_HK_SM_RI)) cj_hb_str(&hb, "sm__ri", h->sm_ri);
    double t = cj_msg_now();
    struct cj_hdr_msg hm = {
        .type = CJ_MSG_REQ, .me = me, .to = cj_link_peer(l), .destination = h->origin, .channel = "sm__STREAM",
        .topic = "sm__ERROR", .optional = true, .payload_encoding = "none", .payload_len = 0, .route_time = t,
        .send_time = t,
    };
    cj_hb_cellnet(&hb, &hm);
    if (cj_hb_finish(&hb, &sb, &err) < 0)
        cj_log_error("sim: cannot build the sm__ERROR notice to %s: %s", h->origin, err.msg);
    else if (cj_link_send(l, (const uint8_t *)sb.data, sb.size, NULL, true) < 0)
        cj_log_warning("sim: cannot send the sm__ERROR notice to %s: link %s is not up", h->origin, cj_link_peer(l));
    cj_hb_destroy(&hb);
    msgpack_sbuffer_destroy(&sb);
    return true;
}

void sim_unroutable(struct cj_link *l, const struct cj_msg *m, const char *me)
{
    const struct cj_hdr *h = &m->hdr;
    bool ret = h->msg_type == CJ_MSG_REQ && h->reply_expected;
    if (!ret) {
        bool notice = forward_error(l, h, me);
        cj_log_warning("sim: %s %s/%s from %s for %s: no such cell here%s", cj_msg_type_name(h->msg_type),
                       h->channel, h->topic, h->origin, h->destination,
                       notice ? "; sm__ERROR notice sent" : ", dropped");
        return;
    }
    cj_log_warning("sim: %s %s/%s from %s for %s: no such cell here; RETURN sent", cj_msg_type_name(h->msg_type),
                   h->channel, h->topic, h->origin, h->destination);
    msgpack_sbuffer sb;
    struct cj_err err;
    msgpack_sbuffer_init(&sb);
    if (cj_hdr_build_return(h, me, cj_link_peer(l), cj_msg_now(), &sb, &err) < 0)
        cj_log_error("sim: cannot build the RETURN to %s: %s", h->origin, err.msg);
    else if (cj_link_send(l, (const uint8_t *)sb.data, sb.size, NULL, true) < 0)
        cj_log_warning("sim: cannot send the RETURN to %s: link %s is not up", h->origin, cj_link_peer(l));
    msgpack_sbuffer_destroy(&sb);
}

void sim_vanish_check(struct sim_job *j, long round)
{
    const struct sim_opts *o = j->s->o;
    if (j->vanished) return;
    for (size_t i = 0; i < o->n_vanish_job; i++)
        if (o->vanish_job[i].round == round && !strcmp(o->vanish_job[i].job, j->id)) {
            j->vanished = true;
            cj_log_warning("sim: the cell %s disappears (--vanish-job %s@%ld)", j->cell, j->id, round);
            printf("SIM VANISHED job=%s round=%ld\n", j->id, round);
            fflush(stdout);
            return;
        }
}

struct sim_job *sim_job_by_cell(struct sim *s, const char *fqcn)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!strcmp(s->jobs[i].cell, fqcn)) return &s->jobs[i];
    return NULL;
}

struct sim_job *sim_job_by_id(struct sim *s, const char *id)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!strcmp(s->jobs[i].id, id)) return &s->jobs[i];
    return NULL;
}

void sim_dispatch(struct sim *s, struct cj_link *l, struct cj_msg *m)
{
    const struct cj_hdr *h = &m->hdr;
    cj_log_debug("sim: %s %s/%s origin=%s via %s, %zu payload bytes", cj_msg_type_name(h->msg_type), h->channel,
                 h->topic, h->origin, cj_link_peer(l), cj_msg_payload_len(m));
    struct sim_job *j = strcmp(h->destination, SIM_ROOT) ? sim_job_by_cell(s, h->destination) : &s->jobs[0];
    if (j && j->vanished && strcmp(h->destination, SIM_ROOT)) j = NULL;
    if (!j) {
        sim_unroutable(l, m, SIM_ROOT);
    } else if (!strcmp(h->channel, CJ_STREAM_CHANNEL) && stall_download(s, h)) {
        /* dropped: the server is not sending */
    } else if (!strcmp(h->channel, CJ_STREAM_CHANNEL)) {
        if (is_request_chunk0(h)) {
            log_headers(s, m);
            cj_log_info("sim: stream request %s/%s from %s (via %s), %" PRId64 " bytes", h->sm_ch, h->sm_tp,
                        h->origin, cj_link_peer(l), h->sm_sz);
        }
        if (!strcmp(h->topic, CJ_STREAM_TOPIC_DATA) && sim_fl_isolated(j, h->sm_ch, h->sm_tp, h->origin)) {
            /* --isolate: the same stream, delivered to the refusing handler (sm__tp is
             * checked on every chunk, so every chunk of it is diverted alike) */
            struct cj_hdr *dh = malloc(sizeof *dh);
            if (dh) {
                *dh = *h;
                snprintf(dh->sm_tp, sizeof dh->sm_tp, "%s", SIM_FL_ISOLATED_TOPIC);
                cj_stream_input(j->ep, dh, m->payload);
                free(dh);
            }
        } else {
            cj_stream_input(j->ep, h, m->payload);
        }
    } else if (h->msg_type == CJ_MSG_REQ) {
        direct_request(s, j, m);
    } else {
        cj_log_info("sim: %s %s/%s from %s (rc %s) matches no request of ours; dropped",
                    cj_msg_type_name(h->msg_type), h->channel, h->topic, h->origin, h->return_code);
    }
    cj_msg_free(m);
}

static void on_msg(struct cj_link *l, struct cj_msg *m, void *ctx)
{
    sim_dispatch(ctx, l, m);
}

static const struct cj_link_ops LINK_OPS = {
    .on_up = on_up, .on_msg = on_msg, .on_down = on_down, .on_hello = on_hello,
};

/* ---- the stream endpoint's way out ----------------------------------------------- */

static int io_send(void *ctx, const char *destination, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                   bool control)
{
    struct sim *s = ctx;
    struct cj_link *l = route_for(s, destination);
    if (!l) {
        cj_log_warning("sim: no link toward %s", destination);
        return -1;
    }
    return cj_link_send(l, hblk, hlen, payload, control) < 0 ? -1 : 0;
}

static const char *io_next_hop(void *ctx, const char *destination)
{
    struct cj_link *l = route_for(ctx, destination);
    return l ? cj_link_peer(l) : NULL;
}

/* ---- stream handlers ---------------------------------------------------------------- */

static void served_done(void *arg, int status, const char *why)
{
    struct served *sv = arg;
    double dt = cj_now() - sv->t0;
    if (status == 0) {
        sv->j->s->served++;
        printf("SERVED %s %" PRIu64 " bytes to %s in %.2f s\n", sv->what, sv->bytes, sv->to, dt);
    } else {
        printf("FAILED %s %" PRIu64 " bytes to %s after %.2f s: %s\n", sv->what, sv->bytes, sv->to, dt,
               why ? why : "?");
    }
    free(sv);
}

/* Streams blob (taken) back as the reply to b's request. */
static int reply_blob(struct sim_job *j, struct cj_stream_blob *b, const char *what, struct evbuffer *blob)
{
    struct served *sv = calloc(1, sizeof *sv);
    if (!sv) {
        evbuffer_free(blob);
        snprintf(b->error, sizeof b->error, "out of memory");
        return -1;
    }
    sv->j = j;
    snprintf(sv->what, sizeof sv->what, "%s", what);
    snprintf(sv->to, sizeof sv->to, "%s", b->origin);
    sv->bytes = evbuffer_get_length(blob);
    sv->t0 = cj_now();
    struct cj_stream_msg rm = {.encoding = "bytes"};
    if (cj_stream_reply(j->ep, &b->req, "ok", &rm, blob, served_done, sv) < 0) {
        free(sv);
        snprintf(b->error, sizeof b->error, "cannot start the reply stream");
        return -1;
    }
    return 0;
}

static int on_echo(void *arg, struct cj_stream_blob *b)
{
    struct sim_job *j = arg;
    if (!b->req.has_ri) {
        cj_log_info("sim: test/echo from %s without sm__ri: nothing to answer", b->origin);
        return 0;
    }
    struct evbuffer *blob = b->data;
    b->data = NULL;
    return reply_blob(j, b, "echo", blob);
}

/* payload "N" (a size, K/M/G allowed): N bytes of the pattern, by reference. */
static int on_blob(void *arg, struct cj_stream_blob *b)
{
    struct sim_job *j = arg;
    struct sim *s = j->s;
    char text[SIM_BLOB_REQ_MAX + 1];
    size_t n = evbuffer_get_length(b->data);
    int64_t size = -1;
    const char *why = "too long";
    if (n <= SIM_BLOB_REQ_MAX) {
        evbuffer_copyout(b->data, text, n);
        text[n] = '\0';
        if (cj_parse_size(text, &size, &why) < 0) size = -1;
    }
    if (size < 0 || (uint64_t)size > CJ_STREAM_MAX_BLOB) {
        snprintf(b->error, sizeof b->error, "test/blob wants a size up to 4G, got %zu bytes (%s)", n,
                 why ? why : "out of range");
        return -1;
    }
    if (!b->req.has_ri) return 0;
    struct evbuffer *blob = evbuffer_new();
    if (!blob) return -1;
    for (uint64_t off = 0; off < (uint64_t)size; off += SIM_SEG) {
        uint64_t len = (uint64_t)size - off < SIM_SEG ? (uint64_t)size - off : SIM_SEG;
        if (evbuffer_add_reference(blob, s->pattern + sim_seg_start(off / SIM_SEG), (size_t)len, NULL, NULL) < 0) {
            evbuffer_free(blob);
            snprintf(b->error, sizeof b->error, "out of memory");
            return -1;
        }
    }
    cj_log_info("sim: serving %" PRId64 " pattern bytes to %s", size, b->origin);
    return reply_blob(j, b, "blob", blob);
}

/* ---- listener -------------------------------------------------------------------------- */

void sim_accept_link(struct event_base *base, evutil_socket_t fd, SSL_CTX *tls, const struct cj_link_cfg *cfg,
                     const struct cj_link_ops *ops, void *ctx, struct cj_link **links, size_t *n, const char *who)
{
    struct cj_err err;
    char peer[128];
    if (*n == SIM_MAX_LINKS) {
        cj_log_warning("sim: %s: %d connections already; refusing another", who, SIM_MAX_LINKS);
        evutil_closesocket(fd);
        return;
    }
    cj_sock_peer_text(fd, peer, sizeof peer);
    struct cj_link *l = cj_link_accept(base, fd, tls, peer, cfg, ops, ctx, &err);
    if (!l) {
        cj_log_error("sim: %s: cannot accept a connection from %s: %s", who, peer, err.msg);
        return;
    }
    links[(*n)++] = l;
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)lev; (void)sa; (void)salen;
    struct sim *s = arg;
    sim_accept_link(s->base, fd, s->tls, &s->lcfg, &LINK_OPS, s, s->links, &s->n_links, "server");
}

int sim_parse_listen(const char *url, const char *opt, struct cj_addr *a, struct cj_err *err)
{
    char u[512];
    const char *why = NULL;
    bool port0 = false;
    if (strlen(url) >= sizeof u) return cj_fail(err, CJ_E_INVALID, 0, "%s: URL too long", opt);
    snprintf(u, sizeof u, "%s", url);
    size_t n = strlen(u);
    if (n >= 2 && !strcmp(u + n - 2, ":0")) {   /* cj_parse_endpoint wants 1..65535 */
        u[n - 1] = '1';
        port0 = true;
    }
    memset(a, 0, sizeof *a);
    if (cj_parse_endpoint(u, CJ_EP_NET, &a->ep, &why) < 0)
        return cj_fail(err, CJ_E_INVALID, 0, "%s '%s': %s", opt, url, why);
    if (port0) a->ep.port = 0;
    cj_endpoint_format(&a->ep, a->text, sizeof a->text);
    return 0;
}

struct evconnlistener *sim_bind(struct sim *s, struct cj_addr *a, evconnlistener_cb cb, void *arg, unsigned *port,
                                struct cj_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (cj_addr_sockaddr(a, &ss, &len, err) < 0) return NULL;
    struct evconnlistener *lev = evconnlistener_new_bind(
        s->base, cb, arg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 64,
        (struct sockaddr *)&ss, (int)len);
    if (!lev) {
        cj_fail(err, CJ_E_INVALID, 0, "cannot listen on %s: %s", a->text, strerror(errno));
        return NULL;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    if (getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&got, &gl) == 0)
        *port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                               : ((struct sockaddr_in6 *)&got)->sin6_port);
    a->ep.port = *port;
    cj_endpoint_format(&a->ep, a->text, sizeof a->text);
    return lev;
}

/* --listen: any network scheme (tcp, stcp, http, https, grpc, grpcs), any host
 * literal, port 0 = any free port. */
static int open_listener(struct sim *s, struct cj_err *err)
{
    struct cj_addr a;
    if (sim_parse_listen(s->o->listen, "--listen", &a, err) < 0) return -1;
    bool tls = cj_ep_tls(a.ep.kind);
    if (tls != (s->o->tls_dir[0] != 0))
        return cj_fail(err, CJ_E_INVALID, 0, tls ? "%s:// needs --tls-dir" : "--tls-dir needs an stcp://, https:// or grpcs:// address",
                       cj_ep_scheme(a.ep.kind));
    s->lcfg.scheme = a.ep.kind;   /* http/https: WebSocket, grpc/grpcs: gRPC, as the server's drivers */
    if (tls) {
        char crt[SIM_PATH_MAX + 16], key[SIM_PATH_MAX + 16], ca[SIM_PATH_MAX + 16];
        snprintf(crt, sizeof crt, "%s/server.crt", s->o->tls_dir);
        snprintf(key, sizeof key, "%s/server.key", s->o->tls_dir);
        snprintf(ca, sizeof ca, "%s/rootCA.pem", s->o->tls_dir);
        if (!(s->tls = cj_tls_server_ctx(crt, key, ca, true, err))) return -1;
        if (a.ep.kind == CJ_EP_GRPCS) cj_tls_server_alpn_h2(s->tls);
    }
    if (!(s->lev = sim_bind(s, &a, on_accept, s, &s->port, err))) return -1;
    cj_log_info("sim: listening on %s%s as %s and %s%s", a.text,
                tls ? ", TLS with client certificates required" : "", SIM_ROOT, s->jobs[0].cell,
                s->n_jobs > 1 ? " (and the other jobs' cells)" : "");
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct sim *s = arg;
    cj_log_info("sim: signal %d: stopping", (int)sig);
    for (size_t i = 0; i < s->n_jobs; i++) {
        struct sim_job *j = &s->jobs[i];
        if (j->ended || !sim_fl_in_progress(j)) continue;
        long done, rounds;
        sim_fl_progress(j, &done, &rounds);
        sim_finish(j, 1, "stopped by signal %d after %ld of %ld rounds", (int)sig, done, rounds);
    }
    event_base_loopbreak(s->base);
}

/* The last job ended: the summary line when there were several. */
static void all_ended(struct sim *s)
{
    if (s->n_jobs > 1) {
        char failed[SIM_MAX_JOBS * SIM_JOB_MAX] = "";
        size_t o = 0;
        for (size_t i = 0; i < s->n_jobs; i++)
            if (s->jobs[i].code) {
                int k = snprintf(failed + o, sizeof failed - o, "%s%s", o ? "," : "", s->jobs[i].id);
                if (k > 0 && (size_t)k < sizeof failed - o) o += (size_t)k;
            }
        if (failed[0]) printf("SIM FAIL jobs=%zu failed=%s\n", s->n_jobs, failed);
        else printf("SIM OK jobs=%zu\n", s->n_jobs);
        cj_log_info("sim: every job ended%s%s", failed[0] ? "; failed: " : ", all verified", failed);
    }
    if (s->cp) {   /* the parent's last replies (a STOPPED answered just now) get out first */
        struct timeval tv = cj_tv(0.3);
        event_base_loopexit(s->base, &tv);
    } else {
        event_base_loopbreak(s->base);
    }
}

/* word: DONE, FAIL or ABORTED (the line with several jobs). */
static void job_end(struct sim_job *j, int code, const char *word, const char *why)
{
    struct sim *s = j->s;
    if (j->ended) return;
    j->ended = true;
    j->code = code;
    s->n_ended++;
    if (code) s->exit_code = 1;
    if (s->n_jobs > 1) printf("SIM %s job=%s %s\n", word, j->id, why);
    else printf("SIM %s %s\n", code ? "FAIL" : "OK", why);
    if (code) cj_log_error("sim: job %s: SIM FAIL %s", j->id, why);
    else cj_log_info("sim: job %s: SIM %s %s", j->id, word, why);
    if (s->n_ended == s->n_jobs) all_ended(s);
}

void sim_finish(struct sim_job *j, int code, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    job_end(j, code, code ? "FAIL" : "DONE", why);
}

void sim_aborted(struct sim_job *j, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    int n = j->s->n_jobs > 1 ? 0 : snprintf(why, sizeof why, "aborted ");
    va_start(ap, fmt);
    vsnprintf(why + n, sizeof why - (size_t)n, fmt, ap);
    va_end(ap);
    job_end(j, 0, "ABORTED", why);
}

/* Job i: its cell, its stream endpoint with the transport handlers, its FL server. */
static int setup_job(struct sim *s, size_t i, const struct cj_stream_limits *lim, struct cj_err *err)
{
    struct sim_job *j = &s->jobs[i];
    j->s = s;
    j->index = i;
    snprintf(j->id, sizeof j->id, "%s", s->o->job_ids[i]);
    snprintf(j->cell, sizeof j->cell, "%s.%s", SIM_ROOT, j->id);
    if (s->n_jobs > 1) snprintf(j->tag, sizeof j->tag, " job=%s", j->id);
    struct cj_stream_io io = {.ctx = s, .send = io_send, .next_hop = io_next_hop};
    if (!(j->ep = cj_stream_new(s->base, j->cell, &io, lim)))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the stream endpoint of %s", j->cell);
    if (cj_stream_on(j->ep, "test", "echo", on_echo, j) < 0 || cj_stream_on(j->ep, "test", "blob", on_blob, j) < 0)
        return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    return sim_fl_setup(j, err);
}

static int setup(struct sim *s, struct cj_err *err)
{
    const struct sim_opts *o = s->o;
    s->n_jobs = o->n_jobs;
    s->lcfg = (struct cj_link_cfg){.name = "client", .me = SIM_ROOT, .heartbeat_interval = o->heartbeat};
    if (!(s->base = event_base_new())) return cj_fail(err, CJ_E_NOMEM, 0, "event_base_new failed");
    if (!(s->pattern = malloc(SIM_PATTERN_LEN))) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    sim_pattern_fill(s->pattern);
    if (o->log_headers[0] && !(s->hlog = fopen(o->log_headers, "a")))
        return cj_fail(err, CJ_E_INVALID, 0, "--log-headers %s: %s", o->log_headers, strerror(errno));
    struct cj_stream_limits lim;
    cj_stream_limits_default(&lim);
    lim.window = o->window;
    for (size_t i = 0; i < s->n_jobs; i++)
        if (setup_job(s, i, &lim, err) < 0) return -1;
    s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
    if (!s->sig_term || !s->sig_int || event_add(s->sig_term, NULL) < 0 || event_add(s->sig_int, NULL) < 0)
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot watch signals");
    if (open_listener(s, err) < 0) return -1;
    return o->parent[0] ? sim_cp_start(s, err) : 0;
}

static void teardown(struct sim *s)
{
    sim_cp_free(s);
    for (size_t i = 0; i < s->n_jobs; i++) {
        struct sim_job *j = &s->jobs[i];
        sim_fl_stop(j);                  /* before the endpoint: fetches and refs use it */
        if (j->ep) cj_stream_free(j->ep); /* reports replies in flight as failed */
        j->ep = NULL;
        sim_fl_free(j);
    }
    while (s->n_links) cj_link_free(s->links[--s->n_links]);
    if (s->lev) evconnlistener_free(s->lev);
    if (s->tls) cj_tls_ctx_free(s->tls);
    if (s->sig_term) event_free(s->sig_term);
    if (s->sig_int) event_free(s->sig_int);
    if (s->hlog) fclose(s->hlog);
    if (s->base) event_base_free(s->base);
    free(s->pattern);
}

/* --self-test: the item writers against lib/payload/items.c. */
static int self_test(void)
{
    char why[256];
    if (sim_model_selftest(why, sizeof why) < 0) {
        printf("SELF-TEST FAIL %s\n", why);
        return 1;
    }
    printf("SELF-TEST OK\n");
    return 0;
}

int sim_run(const struct sim_opts *o)
{
    struct sim s;
    struct cj_err err;
    memset(&s, 0, sizeof s);
    s.o = o;
    cj_log_init("cjrelay-sim");
    cj_log_set_level(o->log_level);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (o->self_test) return self_test();
    if (setup(&s, &err) < 0) {
        cj_log_error("sim: %s", err.msg);
        printf("SIM FAIL %s\n", err.msg);
        teardown(&s);
        return 2;
    }
    printf("SIM READY %u\n", s.port);
    if (s.cp) printf("SIM PARENT %u\n", s.parent_port);
    event_base_dispatch(s.base);
    cj_log_info("sim: stopped after serving %" PRIu64 " requests", s.served);
    teardown(&s);
    return s.exit_code;
}
