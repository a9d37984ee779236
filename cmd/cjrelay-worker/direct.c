/* SPDX-License-Identifier: Apache-2.0 */
/* direct.c — direct mode (--direct URL): the worker without a relay, for the
 * benchmark's "direct" column (bench/run.sh).  See worker.h.
 *
 * The worker is the cell <site>.<job> on a link to the server: it sends
 * __sync_runner__ until OK, then get_task until a task comes (a __try_again__
 * is polled again after 0.1 s), builds from the task the task_ready payload a
 * relay would have sent (cj_splice_task_ready, as lib/fl/session.c does) and
 * hands it to wk_task_begin: the download, the transform and the timing are
 * the relay path's own.  Then one line on stdout and exit 0:
 *
 *   DIRECT round=<r> task=<id> bytes=<B> secs=<T> MiB/s=<X>
 *   DIRECT FAIL <why>            (exit 1)
 *
 * No result goes back: the server keeps the task out (the benchmark stops it).
 *
 * Over stcp://, https:// or grpcs:// the worker presents the site's
 * certificate (--tls-dir: rootCA.pem, client.crt, client.key, the layout
 * cjrelay-sim --tls-dir reads on the server side); the link does the rest
 * (ALPN h2 and the host name check on grpcs), as on the relay's upstream. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fl/capi.h"
#include "net/link.h"
#include "net/tls.h"
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "fl/flclient.h"
#include "stream/stream.h"
#include "util/log.h"
#include "worker.h"
#include "util/mp.h"
#include "util/clock.h"

#define DIRECT_SYNC_TRIES 120     /* __sync_runner__ every 0.5 s: a minute */
#define DIRECT_POLL 0.1           /* s between get_task polls while __try_again__ */
#define DIRECT_MAX_TASK ((size_t)64 << 20)

int wk_direct_bootstrap(const struct wk_opts *o, struct cj_bootstrap *bs)
{
    memset(bs, 0, sizeof *bs);
    const char *site = o->site[0] ? o->site : "site-1";
    if (!o->job_id[0]) {
        cj_log_error("--direct needs --job-id");
        return -1;
    }
    snprintf(bs->connect_url, sizeof bs->connect_url, "%s", o->direct);
    snprintf(bs->site_name, sizeof bs->site_name, "%s", site);
    snprintf(bs->job_id, sizeof bs->job_id, "%s", o->job_id);
    int n1 = o->cell[0] ? snprintf(bs->trainer_fqcn, sizeof bs->trainer_fqcn, "%s", o->cell)
                        : snprintf(bs->trainer_fqcn, sizeof bs->trainer_fqcn, "%s.%s", site, o->job_id);
    int n2 = snprintf(bs->cj_fqcn, sizeof bs->cj_fqcn, "%s", CJ_FQCN_SERVER);
    if (n1 < 0 || (size_t)n1 >= sizeof bs->trainer_fqcn || n2 < 0 || !cj_fqcn_valid(bs->trainer_fqcn)) {
        cj_log_error("--cell/--site/--job-id: '%s' is not a valid cell name", bs->trainer_fqcn);
        return -1;
    }
    return 0;
}

SSL_CTX *wk_direct_tls(const struct wk_opts *o)
{
    char ca[sizeof o->tls_dir + 16], crt[sizeof o->tls_dir + 16], key[sizeof o->tls_dir + 16];
    snprintf(ca, sizeof ca, "%s/rootCA.pem", o->tls_dir);
    snprintf(crt, sizeof crt, "%s/client.crt", o->tls_dir);
    snprintf(key, sizeof key, "%s/client.key", o->tls_dir);
    struct cj_tls_client_opts t = {.mode = CJ_TLS_MUTUAL, .ca_file = ca, .cert_file = crt, .key_file = key};
    struct cj_err e = {0};
    SSL_CTX *ctx = cj_tls_client_ctx(&t, &e);
    if (!ctx) cj_log_error("--tls-dir %s: %s", o->tls_dir, e.msg);
    return ctx;
}

/* The worker's requests to the server. */
static struct cj_fl_client fl_client(const struct wk *w)
{
    return (struct cj_fl_client){.ep = w->ep, .server = w->server, .site = w->bs.site_name, .job = w->bs.job_id};
}

static void direct_fail(struct wk *w, const char *why)
{
    printf("DIRECT FAIL %s\n", why);
    fflush(stdout);
    wk_exit(w, WK_EXIT_FAIL, "direct mode: %s", why);
}

/* ---- get_task ------------------------------------------------------------------------ */

static void poll_task(struct wk *w);
static void sync_runner(struct wk *w);

static void later_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    if (w->exiting || w->task) return;
    if (w->phase == WK_READY) poll_task(w);
    else sync_runner(w);
}

static void later(struct wk *w, double secs)
{
    struct timeval tv = cj_tv(secs);
    if (event_base_once(w->base, -1, EV_TIMEOUT, later_cb, w, &tv)) direct_fail(w, "cannot arm a timer");
}

/* get_task answered with a task: make it the task_ready a relay sends, start it. */
static void take_task(struct wk *w, const uint8_t *p, size_t len, const struct cj_task_info *info)
{
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    char why[600];
    msgpack_sbuffer_init(&sb);
    if (cj_splice_task_ready(p, len, "direct", info->task_id, w->bs.job_id, w->bs.site_name, 0, &sb, NULL, &e)) {
        msgpack_sbuffer_destroy(&sb);
        snprintf(why, sizeof why, "task %s: cannot build task_ready: %s", info->task_id, e.msg);
        direct_fail(w, why);
        return;
    }
    if (cj_capi_decode_request(CJ_CAPI_TASK_READY, (const uint8_t *)sb.data, sb.size, w->m, &e)) {
        msgpack_sbuffer_destroy(&sb);
        snprintf(why, sizeof why, "task %s: our task_ready does not decode: %s", info->task_id, e.msg);
        direct_fail(w, why);
        return;
    }
    wk_task_begin(w, (uint8_t *)sb.data, sb.size, w->m, NULL);
    msgpack_sbuffer_destroy(&sb);
}

static void on_task(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    char why[600];
    if (w->exiting) return;
    if (strcmp(r->return_code, "ok")) {
        cj_log_info("get_task not answered (%s %s); polling again", r->return_code, r->error);
        later(w, 0.5);
        return;
    }
    size_t len = r->data ? evbuffer_get_length(r->data) : 0;
    const uint8_t *p = len && len <= DIRECT_MAX_TASK ? evbuffer_pullup(r->data, -1) : NULL;
    struct cj_task_info info;
    struct cj_err e = {0};
    if (!p || cj_splice_read_task(p, len, &info, &e)) {
        snprintf(why, sizeof why, "get_task reply does not decode: %s", p ? e.msg : "empty or too large");
        direct_fail(w, why);
        return;
    }
    if (!strcmp(info.task_name, "__try_again__")) {
        later(w, DIRECT_POLL);
        return;
    }
    if (!strcmp(info.task_name, "__end_run__")) {
        direct_fail(w, "the server ended the run before giving a task");
        return;
    }
    take_task(w, p, len, &info);
}

static void poll_task(struct wk *w)
{
    struct cj_fl_client c = fl_client(w);
    if (cj_fl_client_get_task(&c, NULL, NULL, 60, on_task, w, NULL)) direct_fail(w, "cannot send get_task");
}

static void on_sync(void *arg, struct cj_stream_reply *r)
{
    struct wk *w = arg;
    char rc[64];
    if (w->exiting) return;
    cj_fl_client_reply_rc(r, rc, sizeof rc, NULL, 0);
    if (strcmp(r->return_code, "ok") || strcmp(rc, "OK")) {
        if (++w->direct_tries > DIRECT_SYNC_TRIES) direct_fail(w, "__sync_runner__ never answered OK");
        else later(w, 0.5);
        return;
    }
    cj_log_info("direct: synced with %s; asking for a task", w->server);
    w->phase = WK_READY;
    poll_task(w);
}

static void sync_runner(struct wk *w)
{
    struct cj_fl_client c = fl_client(w);
    if (cj_fl_client_aux(&c, "__sync_runner__", NULL, 2.0, on_sync, w, NULL))
        direct_fail(w, "cannot send __sync_runner__");
}

/* The link to the server is up: sync, then poll for a task. */
static void link_up(struct wk *w, struct cj_link *l)
{
    (void)l;
    snprintf(w->server, sizeof w->server, "%s.%.200s", CJ_FQCN_SERVER, w->bs.job_id);
    cj_log_info("direct: connected to %s at %s as %s (no relay)", w->link ? cj_link_peer(w->link) : "?", w->bs.connect_url,
                w->bs.trainer_fqcn);
    w->phase = WK_SESSION_READY;   /* not WK_READY until synced: the connect window applies */
    sync_runner(w);
}

/* A benchmark run: no reconnects. */
static void link_down(struct wk *w)
{
    printf("DIRECT FAIL link to %s lost: %s\n", w->bs.connect_url, w->last_error);
    wk_exit(w, WK_EXIT_RELAY_LOST, "direct mode: the link to the server is gone: %s", w->last_error);
}

/* No relay to answer, no result: the measurement is done (the DIRECT line, exit 0). */
static void task_done(struct wk *w, const struct wk_task_end *end, const char *why)
{
    if (why) {
        printf("DIRECT FAIL %s\n", why);
        wk_exit(w, WK_EXIT_FAIL, "direct mode: the task failed");
        return;
    }
    char id[CJ_CAPI_ID_MAX + 1];
    int64_t round = end->round;
    uint64_t bytes = end->bytes;
    double secs = end->secs;
    snprintf(id, sizeof id, "%s", end->id);
    wk_task_drop(w);   /* nobody to answer: only freed */
    printf("DIRECT round=%" PRId64 " task=%s bytes=%" PRIu64 " secs=%.3f MiB/s=%.1f\n", round, id, bytes, secs,
           secs > 0 ? (double)bytes / (1024.0 * 1024.0) / secs : 0.0);
    fflush(stdout);
    wk_exit(w, WK_EXIT_OK, "direct mode: the model is in (%.1f MiB in %.2f s)", (double)bytes / (1024.0 * 1024.0),
            secs);
}

static void log_start(const struct wk *w)
{
    cj_log_info("starting in direct mode: %s connecting to the server at %s (job %s, no relay)", w->bs.trainer_fqcn,
                w->bs.connect_url, w->bs.job_id);
}

const struct wk_mode wk_direct_mode = {
    .register_handlers = NULL,   /* no session: nothing comes on client_api */
    .log_start = log_start,
    .link_up = link_up,
    .link_down = link_down,
    .task_done = task_done,
};
