/* SPDX-License-Identifier: Apache-2.0 */
/* srcfail.c — cjrelay-sim's side of source-failure notices (doc/protocol/download.md §2,
 * §6.1 step 1): a notice from the FQCN parent of its source_fqcn (the relay,
 * for its workers) is answered ok, each (source, ref) is tombstoned for
 * SF_TOMB_SECS (at most SF_TOMB_MAX, oldest dropped first), an active result
 * download of one of them fails at once with the notice's reason, and a later
 * result naming a tombstoned ref fails before its first pull (verify.c asks
 * sf_tombstoned).  Any other origin gets invalid_request with cn__error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "dl/dlmsg.h"
#include "fl_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/fqcn.h"

#define SF_TOMB_SECS 1800.0         /* a source-failure tombstone lives this long */
#define SF_TOMB_MAX 4096            /* tombstones kept at most (the oldest goes first) */
#define SF_REASON_KEEP 256          /* bytes of the reason kept with a tombstone */

/* (source, ref) named by an accepted source-failure notice. */
struct sf_tomb {
    char source[CJ_DL_FQCN_MAX + 1];
    char ref[CJ_DL_REF_ID_MAX + 1];
    char reason[SF_REASON_KEEP];
    double until;                        /* monotonic */
};

/* Drops the expired tombstones (the oldest are at the head). */
static void tombs_expire(struct sim_fl *fl, double now)
{
    while (fl->n_tombs && fl->tombs[fl->tomb_head].until <= now) {
        fl->tomb_head = (fl->tomb_head + 1) % SF_TOMB_MAX;
        fl->n_tombs--;
    }
}

static const struct sf_tomb *tomb_find(struct sim_fl *fl, const char *source, const char *ref)
{
    if (!fl->tombs) return NULL;
    tombs_expire(fl, cj_now());
    for (size_t i = 0; i < fl->n_tombs; i++) {
        const struct sf_tomb *tb = &fl->tombs[(fl->tomb_head + i) % SF_TOMB_MAX];
        if (!strcmp(tb->ref, ref) && !strcmp(tb->source, source)) return tb;
    }
    return NULL;
}

/* Tombstones (source, ref) for SF_TOMB_SECS; a full table drops its oldest.  A
 * pair already tombstoned keeps its first expiry.  -1: no memory. */
static int tomb_add(struct sim_fl *fl, const char *source, const char *ref, const char *reason)
{
    if (!fl->tombs && !(fl->tombs = calloc(SF_TOMB_MAX, sizeof *fl->tombs))) return -1;
    if (tomb_find(fl, source, ref)) return 0;
    struct sf_tomb *tb;
    if (fl->n_tombs == SF_TOMB_MAX) {
        tb = &fl->tombs[fl->tomb_head];
        fl->tomb_head = (fl->tomb_head + 1) % SF_TOMB_MAX;
    } else {
        tb = &fl->tombs[(fl->tomb_head + fl->n_tombs++) % SF_TOMB_MAX];
    }
    snprintf(tb->source, sizeof tb->source, "%s", source);
    snprintf(tb->ref, sizeof tb->ref, "%s", ref);
    snprintf(tb->reason, sizeof tb->reason, "%.*s", (int)sizeof tb->reason - 1, reason);
    tb->until = cj_now() + SF_TOMB_SECS;
    return 0;
}

const char *sf_tombstoned(struct sim_fl *fl, const char *source, const char *ref)
{
    const struct sf_tomb *tb = tomb_find(fl, source, ref);
    return tb ? tb->reason : NULL;
}

/* s with control characters replaced, for one stdout line. */
static void printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

/* Answers rq with rc and a cn__error header. */
static void reply_error(struct sim_fl *fl, const struct cj_stream_reqctx *rq, const char *rc, const char *error)
{
    msgpack_sbuffer hv;
    msgpack_packer pk;
    msgpack_sbuffer_init(&hv);
    msgpack_packer_init(&pk, &hv, msgpack_sbuffer_write);
    size_t n = strlen(error);
    struct evbuffer *b = evbuffer_new();
    if (b && msgpack_pack_str(&pk, n) == 0 && msgpack_pack_str_body(&pk, error, n) == 0) {
        struct cj_stream_hv h = {"cn__error", hv.data, hv.size};
        struct cj_stream_msg m = {.hdrs = &h, .n_hdrs = 1, .encoding = "none"};
        if (cj_stream_reply(fl->job->ep, rq, rc, &m, b, NULL, NULL) < 0)
            cj_log_warning("sim: cannot send the %s reply to %s", rq->topic, rq->origin);
        b = NULL;   /* taken */
    }
    if (b) evbuffer_free(b);
    msgpack_sbuffer_destroy(&hv);
}

/* The open task whose active result download is (source, one of the refs). */
static struct task *sf_victim(struct sim_fl *fl, const struct cj_dl_source_failure *sf)
{
    for (struct task *t = fl->tasks; t; t = t->next) {
        if (!t->fetch || strcmp(t->res_from, sf->source_fqcn)) continue;
        for (size_t i = 0; i < sf->n_ref_ids; i++)
            if (!strcmp(t->res_ref, sf->ref_ids[i])) return t;
    }
    return NULL;
}

int on_source_failure(void *arg, struct cj_stream_blob *b)
{
    struct sim_fl *fl = arg;
    struct cj_dl_source_failure *sf = malloc(sizeof *sf);
    struct cj_err e = {0};
    char why[512], parent[CJ_FQCN_MAX + 1];
    size_t len;
    const uint8_t *p = blob_bytes(b->data, 1 << 20, &len);
    why[0] = '\0';
    if (!sf) {
        snprintf(b->error, sizeof b->error, "out of memory");
        return -1;
    }
    if (!p) snprintf(why, sizeof why, "empty or oversized source_failure notice (%zu bytes)", len);
    else if (cj_dl_decode_source_failure(p, len, sf, &e)) snprintf(why, sizeof why, "bad source_failure notice: %s", e.msg);
    else if (!cj_fqcn_valid(sf->source_fqcn)) snprintf(why, sizeof why, "source_fqcn is not a valid FQCN");
    else if (cj_fqcn_parent(sf->source_fqcn, parent, sizeof parent) || strcmp(parent, b->origin))
        snprintf(why, sizeof why, "origin %s is not the parent of source %s", b->origin, sf->source_fqcn);
    if (why[0]) {
        char src[CJ_DL_FQCN_MAX + 1] = "?";
        if (p && !e.msg[0] && sf->source_fqcn[0]) snprintf(src, sizeof src, "%s", sf->source_fqcn);
        printable(src);
        fl->sf_refused++;
        printf("REFUSED source_failure from=%s source=%s: %s\n", b->origin, src, why);
        cj_log_warning("sim: source_failure notice from %s refused: %s", b->origin, why);
        if (b->req.has_ri) reply_error(fl, &b->req, "invalid_request", why);
        free(sf);
        return 0;
    }
    fl->sf_accepted++;
    const char *reason = sf->reason[0] ? sf->reason : "the source reported a failure (no reason given)";
    size_t failed = 0;
    for (size_t i = 0; i < sf->n_ref_ids; i++)
        if (tomb_add(fl, sf->source_fqcn, sf->ref_ids[i], reason))
            cj_log_error("sim: out of memory: ref %s of %s not tombstoned", sf->ref_ids[i], sf->source_fqcn);
    /* Reply first: the relay's notice is done whatever the rounds do next. */
    if (b->req.has_ri) send_reply(fl, &b->req, NULL, NULL, NULL, NULL);
    char shown[CJ_DL_REASON_BUF];
    snprintf(shown, sizeof shown, "%s", reason);
    printable(shown);
    printf("SOURCE_FAILURE from=%s source=%s refs=%zu reason=%s\n", b->origin, sf->source_fqcn, sf->n_ref_ids, shown);
    /* Each victim leaves the search once its fetch is gone (round_failed or sim_finish). */
    for (struct task *t; !fl->closing && (t = sf_victim(fl, sf));) {
        cj_dl_fetch_cancel(t->fetch);
        t->fetch = NULL;
        failed++;
        cj_log_warning("sim: round %ld: result ref %s from %s: source failure: %s", t->round, t->res_ref,
                       t->res_from, reason);
        snprintf(why, sizeof why, "%.200s (source_failure notice from %s)", shown, b->origin);
        result_done(t, false, why);
    }
    cj_log_info("sim: source_failure from %s for %s: %zu ref(s) tombstoned, %zu active download(s) failed", b->origin,
                sf->source_fqcn, sf->n_ref_ids, failed);
    free(sf);
    return 0;
}
