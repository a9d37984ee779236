/* SPDX-License-Identifier: Apache-2.0 */
/* verify.c — cjrelay-sim's check of a result: the DXO's tensor names, DOT and
 * item map, then every element of every tensor compared with task + 1.0f,
 * inline tensors straight from the payload, refs as their items arrive from
 * the FQCN the result names (model.c has the conventions). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "fl_int.h"
#include "model.h"
#include "util/clock.h"
#include "util/log.h"

static void verify_fail(struct task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verify_fail(struct task *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->fail, sizeof t->fail, fmt, ap);
    va_end(ap);
}

static int on_result_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct task *t = ctx;
    struct sim_fl *fl = t->fl;
    size_t len = evbuffer_get_length(item);
    int rc = -1;
    if (index >= t->n_items || t->item_tensor[index] < 0) {
        verify_fail(t, "result item %" PRIu64 " is not referenced by the result DXO", index);
        goto out;
    }
    long tn = t->item_tensor[index];
    const uint8_t *p = len ? evbuffer_pullup(item, -1) : NULL;
    if (!p) {
        verify_fail(t, "result item T%" PRIu64 " is empty (or no memory)", index);
        goto out;
    }
    float per[SIM_PERIOD];
    char key[32], why[256];
    sim_period(t->round, (size_t)tn, true, per);
    snprintf(key, sizeof key, "T%" PRIu64, index);
    if (sim_item_verify(t->res_dot, p, len, key, fl->nelem, per, why, sizeof why)) {
        verify_fail(t, "result tensor layer%ld.weight (item %s from %s): %s", tn, key, t->res_from, why);
        goto out;
    }
    t->res_items++;
    t->res_bytes += len;
    rc = 0;
out:
    evbuffer_free(item);
    return rc;
}

/* The end of a result download (t->fetch already gone): verified, failed
 * (issued again), or fatal (a wrong element). */
void result_done(struct task *t, bool ok, const char *why)
{
    struct sim_fl *fl = t->fl;
    if (t->fail[0]) {
        sim_finish(fl->job, 1, "round %ld task=%s: %s", t->round, t->id, t->fail);
        return;
    }
    if (!ok) {
        round_failed(t, "downloading result ref %s from %s failed: %s", t->res_ref, t->res_from, why ? why : "?");
        return;
    }
    if (t->res_items != (uint64_t)fl->o->tensors) {
        sim_finish(fl->job, 1, "round %ld task=%s: result ref %s from %s held %" PRIu64 " items, want %ld", t->round,
                   t->id, t->res_ref, t->res_from, t->res_items, fl->o->tensors);
        return;
    }
    round_verified(t);
}

static void on_result_done(void *ctx, bool ok, const char *why)
{
    struct task *t = ctx;
    t->fetch = NULL;
    result_done(t, ok, why);
}

/* layer<t>.weight -> t, or -1. */
static long tensor_of_name(const struct cj_dxo_tensor *d, long n_tensors)
{
    char name[64], tail[16];
    long v;
    int used = 0;
    cj_dxo_name(d, name, sizeof name);
    if (d->name_len >= sizeof name || sscanf(name, "layer%ld%15s%n", &v, tail, &used) != 2 ||
        (size_t)used != strlen(name) || strcmp(tail, ".weight") || v < 0 || v >= n_tensors)
        return -1;
    char canon[64];
    snprintf(canon, sizeof canon, "layer%ld.weight", v);
    return strcmp(canon, name) ? -1 : v;
}

/* Inline result tensors: verified straight from the payload. */
static int verify_inline(struct task *t, const struct cj_dxo_in *d, const struct cj_dxo_tensor *ts, char *why,
                         size_t whysz)
{
    struct sim_fl *fl = t->fl;
    for (size_t i = 0; i < d->n_tensors; i++) {
        long tn = tensor_of_name(&ts[i], fl->o->tensors);
        float per[SIM_PERIOD];
        char w[256];
        sim_period(t->round, (size_t)tn, true, per);
        if (sim_native_verify(fl->dot, ts[i].data, ts[i].data_len, fl->nelem, per, w, sizeof w))
            return snprintf(why, whysz, "inline result tensor layer%ld.weight: %s", tn, w), -1;
        t->res_bytes += ts[i].data_len;
        t->res_items++;
    }
    return 0;
}

/* The result's DXO: names, DOT, item map; then the download (or inline check). */
int start_verification(struct task *t, const struct req *r, char *why, size_t whysz, bool *fatal)
{
    struct sim_fl *fl = t->fl;
    size_t n = (size_t)fl->o->tensors;
    struct cj_dxo_tensor *ts = calloc(n, sizeof *ts);
    struct cj_dxo_in d = {.tensors = ts, .cap = n};
    struct cj_err e = {0};
    int rc = -1;
    *fatal = true;
    if (!ts) { snprintf(why, whysz, "out of memory"); goto out; }
    if (cj_dxo_read(r->p, r->len, r->body_off, r->body_len, &d, &e)) {
        snprintf(why, whysz, "the result does not decode as a DXO: %s", e.msg);
        goto out;
    }
    if (d.n_tensors != n) { snprintf(why, whysz, "the result holds %zu tensors, want %zu", d.n_tensors, n); goto out; }
    unsigned char *seen = calloc(n, 1);
    if (!seen) { snprintf(why, whysz, "out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) {
        long tn = tensor_of_name(&ts[i], (long)n);
        char name[64];
        cj_dxo_name(&ts[i], name, sizeof name);
        if (tn < 0 || seen[tn]++) {
            snprintf(why, whysz, "result tensor '%s' is not one of layer0..%zu.weight (or repeated)", name, n - 1);
            free(seen);
            goto out;
        }
    }
    free(seen);
    t->state = T_VERIFYING;
    t->t_fetch = cj_now();
    if (d.n_native == n) {
        snprintf(t->res_from, sizeof t->res_from, "%s", t->site);   /* inline: the submitter */
        if (verify_inline(t, &d, ts, why, whysz) == 0) {
            round_verified(t);
            rc = 0;
        }
        goto out;
    }
    if (d.n_refs != n) { snprintf(why, whysz, "the result mixes %zu refs and %zu inline tensors", d.n_refs, d.n_native); goto out; }
    if (d.dot != fl->dot) { snprintf(why, whysz, "the result's refs are DOT %u, the task's DOT %u", d.dot, fl->dot); goto out; }
    if (d.n_items != n) { snprintf(why, whysz, "the result's refs name %" PRIu64 " items, want %zu", d.n_items, n); goto out; }
    if (!(t->item_tensor = malloc(n * sizeof *t->item_tensor))) { snprintf(why, whysz, "out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) t->item_tensor[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if (t->item_tensor[ts[i].item] >= 0) {
            snprintf(why, whysz, "result item T%" PRId64 " is referenced twice", ts[i].item);
            goto out;
        }
        t->item_tensor[ts[i].item] = tensor_of_name(&ts[i], (long)n);
    }
    t->n_items = n;
    t->res_dot = d.dot;
    snprintf(t->res_from, sizeof t->res_from, "%s", d.fqcn);
    snprintf(t->res_ref, sizeof t->res_ref, "%s", d.ref_id);
    const char *tomb_reason = sf_tombstoned(fl, d.fqcn, d.ref_id);
    if (tomb_reason) {   /* doc/protocol/download.md §6.1 step 1: fail before the first request */
        *fatal = false;
        char msg[1024];
        snprintf(msg, sizeof msg, "downloading result ref %s from %s failed: %s (tombstoned by a source_failure "
                 "notice; no request sent)", d.ref_id, d.fqcn, tomb_reason);
        snprintf(why, whysz, "%.*s", (int)whysz - 1, msg);
        goto out;
    }
    struct cj_dl_fetch_cfg fc;
    cj_dl_fetch_cfg_default(&fc);
    fc.request_timeout = fl->o->fetch_timeout;
    cj_log_info("sim: round %ld: downloading result ref %s (%zu items) from %s", t->round, d.ref_id, n, d.fqcn);
    if (!(t->fetch = cj_dl_fetch(fl->s->base, fl->job->ep, d.fqcn, d.ref_id, &fc, on_result_item, on_result_done, t))) {
        *fatal = false;
        snprintf(why, whysz, "cannot start downloading result ref %s from %s", d.ref_id, d.fqcn);
        goto out;
    }
    rc = 0;
out:
    free(ts);
    return rc;
}
