/* SPDX-License-Identifier: Apache-2.0 */
/* srcfail.c — download_service__source_failure notices (see srcfail.h): one
 * notice per result receiver, each retried on its own timer until delivered,
 * refused or out of time. */
#include "fl/srcfail.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <msgpack.h>

#include "dl/dlmsg.h"
#include "fl/capi.h"
#include "fl/spoolstage.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"

/* download_service__source_failure (doc/protocol/download.md §2, §7): per target up to
 * SF_ATTEMPTS attempts of SF_ATTEMPT_SECS, SF_TOTAL_SECS across all targets
 * (the targets are tried side by side), backoff min(0.25 * 2^n, 1) s. */
#define SF_ATTEMPTS 4
#define SF_ATTEMPT_SECS 3.0
#define SF_TOTAL_SECS 10.0
#define SF_MAX_TARGETS 16

/* One notice to one target, alive from the worker's death to its outcome. */
struct sf_notice {
    struct cj_fl_srcfail *sf;
    struct sf_notice *next;
    char target[2 * CJ_CAPI_ID_MAX + 2];
    char source[CJ_CAPI_ID_MAX + 1];
    char task_id[CJ_TASK_ID_LEN + 1];
    uint8_t *body;                       /* the encoded notice, sent again per attempt */
    size_t body_len;
    unsigned attempts;
    double deadline;
    bool in_req;
    uint64_t req;
    struct event *timer;                 /* first send (from the loop) and backoff */
};

static void sf_free(struct sf_notice *n)
{
    struct cj_fl_srcfail *sf = n->sf;
    for (struct sf_notice **pp = &sf->notices; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    if (n->in_req) cj_stream_request_cancel(sf->ep, n->req);
    if (n->timer) event_free(n->timer);
    free(n->body);
    free(n);
}

static bool sf_retryable(const char *rc)
{
    return !strcmp(rc, "timeout") || !strcmp(rc, "comm_error") || !strcmp(rc, "process_exception");
}

static void sf_send(struct sf_notice *n);

/* An attempt's outcome: done, or another attempt after the backoff while
 * attempts and the total time last. */
static void sf_outcome(struct sf_notice *n, const char *rc, const char *error)
{
    double left = n->deadline - cj_now();
    double backoff = fmin(0.25 * pow(2.0, (double)(n->attempts - 1)), 1.0);
    if (!strcmp(rc, "ok")) {
        n->sf->sent++;
        cj_log_info("task %s: source_failure notice for %s delivered to %s (attempt %u)", n->task_id, n->source,
                    n->target, n->attempts);
    } else if (sf_retryable(rc) && n->attempts < SF_ATTEMPTS && left > backoff) {
        struct timeval tv = cj_tv(backoff);
        cj_log_warning("task %s: source_failure notice for %s to %s: attempt %u/%d failed (%s%s%s); retrying in %g s",
                       n->task_id, n->source, n->target, n->attempts, SF_ATTEMPTS, rc, error[0] ? ": " : "", error,
                       backoff);
        if (evtimer_add(n->timer, &tv) == 0) return;
    } else {
        n->sf->failed++;
        cj_log_warning("task %s: source_failure notice for %s to %s not delivered after %u attempt(s): %s%s%s",
                       n->task_id, n->source, n->target, n->attempts, rc, error[0] ? ": " : "", error);
    }
    sf_free(n);
}

static void sf_reply_cb(void *arg, struct cj_stream_reply *r)
{
    struct sf_notice *n = arg;
    n->in_req = false;
    sf_outcome(n, r->return_code, r->error ? r->error : "");
}

static void sf_send(struct sf_notice *n)
{
    struct cj_fl_srcfail *sf = n->sf;
    struct cj_stream_msg m = {.encoding = "fobs"};
    struct evbuffer *eb = evbuffer_new();
    double timeout = fmin(SF_ATTEMPT_SECS, n->deadline - cj_now());
    n->attempts++;
    if (!eb || evbuffer_add(eb, n->body, n->body_len)) {
        if (eb) evbuffer_free(eb);
        sf_outcome(n, "out_of_memory", "");   /* not retried */
        return;
    }
    if (timeout <= 0) {
        evbuffer_free(eb);
        sf_outcome(n, "timeout", "no time left");
        return;
    }
    if (cj_stream_request(sf->ep, n->target, CJ_DL_CHANNEL, CJ_DL_TOPIC_SOURCE_FAILURE, &m, eb, timeout, sf_reply_cb,
                          n, &n->req, NULL)) {
        sf_outcome(n, "comm_error", "cannot send");   /* the blob was taken */
        return;
    }
    n->in_req = true;
}

static void sf_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sf_send(arg);
}

/* The result receivers of t: its receiver_ids (count), else 0: server.<job>. */
static size_t sf_targets(const struct cj_fl_srcfail *sf, const struct cj_task *t, char (*ids)[256], size_t cap)
{
    int n = t->headers ? cj_spool_stage_receivers(t->headers, t->headers_len, ids, cap) : 0;
    if (n < 0) cj_log_warning("task %s: more than %zu receiver_ids; the source_failure notice goes to server.%s",
                              t->id, cap, sf->job);
    return n > 0 ? (size_t)n : 0;
}

void cj_fl_srcfail_send(struct cj_fl_srcfail *sf, const char *source, const struct cj_task *t, const char *why)
{
    const char *ids[CJ_TASK_MAX_REFS];
    size_t n_ids = 0;
    for (size_t i = 0; i < t->n_result_refs; i++) {
        const struct cj_ref *r = &t->result_refs[i];
        if (r->state != CJ_REF_PENDING) continue;   /* a ref naming another cell was warned about at result_ready */
        bool dup = false;
        for (size_t k = 0; k < n_ids; k++) dup |= !strcmp(ids[k], r->ref_id);
        if (!dup) ids[n_ids++] = r->ref_id;
    }
    if (!n_ids) {
        cj_log_info("task %s: no live result refs of %s: no source_failure notice", t->id, source);
        return;
    }
    if (cj_stream_get_wire(sf->ep) == CJ_STREAM_WIRE_2_8) {   /* no handler there: a stream error back */
        cj_log_info("task %s: %s died holding live result refs; FLARE 2.8 receivers take no source_failure notice, "
                    "their downloads end by their own timeout", t->id, source);
        return;
    }
    char reason[512];
    snprintf(reason, sizeof reason, "source %s died before its result was downloaded: %s", source, why);
    msgpack_sbuffer sb;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&sb);
    if (cj_dl_encode_source_failure(&sb, source, ids, n_ids, reason, &e)) {
        cj_log_error("task %s: cannot encode a source_failure notice: %s", t->id, e.msg);
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    static char targets[SF_MAX_TARGETS][256];   /* the loop is single-threaded; off the stack */
    size_t n_recv = sf_targets(sf, t, targets, SF_MAX_TARGETS);
    size_t n_targets = n_recv ? n_recv : 1;
    static const struct timeval zero = {0, 0};
    double deadline = cj_now() + SF_TOTAL_SECS;
    for (size_t i = 0; i < n_targets; i++) {
        struct sf_notice *n = calloc(1, sizeof *n);
        if (!n || !(n->body = malloc(sb.size)) || !(n->timer = evtimer_new(sf->base, sf_timer_cb, n))) {
            if (n) free(n->body);
            free(n);
            cj_log_error("task %s: out of memory: no source_failure notice", t->id);
            continue;
        }
        n->sf = sf;
        memcpy(n->body, sb.data, sb.size);
        n->body_len = sb.size;
        n->deadline = deadline;
        int k = n_recv ? snprintf(n->target, sizeof n->target, "%s", targets[i])
                       : snprintf(n->target, sizeof n->target, "server.%s", sf->job);
        if (k < 0 || (size_t)k >= sizeof n->target) n->target[0] = 0;   /* cannot happen: sizes fit */
        snprintf(n->source, sizeof n->source, "%s", source);
        snprintf(n->task_id, sizeof n->task_id, "%s", t->id);
        n->next = sf->notices;
        sf->notices = n;
        evtimer_add(n->timer, &zero);
        char rt[1024];
        cj_log_info("task %s: sending download_service__source_failure to %s: source %s, ref_ids %s", t->id,
                    n->target, n->source, cj_task_refs_text(t->result_refs, t->n_result_refs, rt, sizeof rt));
    }
    msgpack_sbuffer_destroy(&sb);
}

void cj_fl_srcfail_cancel_all(struct cj_fl_srcfail *sf)
{
    while (sf->notices) sf_free(sf->notices);
}
