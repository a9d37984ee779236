/* SPDX-License-Identifier: Apache-2.0 */
/* task.c — the relay's table of tasks in flight (see task.h).
 *
 * A task keeps only its ids, a copy of its small __headers__ map and its refs;
 * the task payload itself is read during cj_task_add and never kept. */
#include "util/text.h"
#include "fl/task.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"

/* The refs of a task and of its result: one allocation of one size, freed when
 * the task's tombstone is compacted. */
struct cj_task_body {
    struct cj_ref refs[CJ_TASK_MAX_REFS];
    struct cj_ref result[CJ_TASK_MAX_REFS];
};

/* The headers copy is allocated in size classes (powers of two from 256), so
 * freed copies are reused by the next tasks' instead of splitting the heap. */
#define HEADERS_MIN_ALLOC 256

struct cj_task_table {
    struct cj_task *head;
    struct cj_task **tail;
    size_t n;
    uint64_t finished_seq;   /* last finishing number given */
};

static const char *const STATE_NAMES[] = {
    [CJ_TASK_RECEIVED] = "received",     [CJ_TASK_DELIVERING] = "delivering", [CJ_TASK_ACCEPTED] = "accepted",
    [CJ_TASK_RESULT_IN] = "result_in",   [CJ_TASK_CHECKING] = "checking",     [CJ_TASK_SUBMITTING] = "submitting",
    [CJ_TASK_SUBMITTED] = "submitted",   [CJ_TASK_DONE] = "done",             [CJ_TASK_FAILED] = "failed",
};

static const char *const REF_STATE_NAMES[] = {
    [CJ_REF_PENDING] = "pending", [CJ_REF_COMPLETED] = "completed", [CJ_REF_FAILED] = "failed",
    [CJ_REF_TIMED_OUT] = "timed_out",
};

/* ---- small utilities ------------------------------------------------------------ */


static int local_id(char out[CJ_TASK_ID_LEN + 1]) { return cj_random_hex(out, CJ_TASK_ID_LEN); }

const char *cj_task_state_name(enum cj_task_state s)
{
    return (unsigned)s < sizeof STATE_NAMES / sizeof *STATE_NAMES && STATE_NAMES[s] ? STATE_NAMES[s] : "?";
}

const char *cj_ref_state_name(int s)
{
    return s >= 0 && (size_t)s < sizeof REF_STATE_NAMES / sizeof *REF_STATE_NAMES ? REF_STATE_NAMES[s] : "?";
}

static bool finished(const struct cj_task *t)
{
    return t->state == CJ_TASK_DONE || t->state == CJ_TASK_FAILED;
}

const char *cj_task_refs_text(const struct cj_ref *refs, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    if (!outsz) return out;
    out[0] = '\0';
    if (!n) {
        snprintf(out, outsz, "none");
        return out;
    }
    for (size_t i = 0; i < n && o < outsz; i++) {
        int k = snprintf(out + o, outsz - o, "%s%d:%s/%s(%u items)", i ? ", " : "", refs[i].dot, refs[i].fqcn,
                         refs[i].ref_id, refs[i].items);
        if (k < 0) break;
        o += (size_t)k;
    }
    return out;
}

/* ---- refs ------------------------------------------------------------------------- */

/* Fills refs[] with the DOT 3/6 datums of a LOBS payload.  Items per ref come
 * from the ref wrappers in the MAIN body: a DOT's item count is given to its
 * ref when the payload has one ref of that DOT (NVFlare writes one per DOT),
 * else 0 (unknown). */
static int read_refs(const uint8_t *payload, size_t len, struct cj_ref *refs, size_t *n_refs, char *why,
                     size_t whysz)
{
    struct cj_err e = { 0 };
    struct cj_lobs_section main;
    struct cj_fobs_ref_counts counts;
    struct cj_fobs_ref fr[CJ_TASK_MAX_REFS];
    size_t n = 0;
    *n_refs = 0;
    if (cj_lobs_validate(payload, len, &main, NULL, 0, NULL, &e) ||
        cj_fobs_list_refs(payload, len, NULL, 0, &n, &e)) {
        cj_why(why, whysz, "bad ref datum: %s (at byte %zu)", e.msg, e.offset);
        return -1;
    }
    if (n > CJ_TASK_MAX_REFS) {
        cj_why(why, whysz, "%zu download refs, at most %d can be passed through", n, CJ_TASK_MAX_REFS);
        return -1;
    }
    if (n && cj_fobs_list_refs(payload, len, fr, n, &n, &e)) {
        cj_why(why, whysz, "bad ref datum: %s (at byte %zu)", e.msg, e.offset);
        return -1;
    }
    if (cj_fobs_count_refs(main.value, main.value_len, &counts, &e)) {
        cj_why(why, whysz, "body walk: %s (at byte %zu)", e.msg, e.offset + CJ_LOBS_HDR_LEN);
        return -1;
    }
    size_t per_dot[2] = { 0, 0 };
    for (size_t i = 0; i < n; i++) per_dot[fr[i].dot == 6]++;
    for (size_t i = 0; i < n; i++) {
        struct cj_ref *r = &refs[i];
        memset(r, 0, sizeof *r);
        if (strlen(fr[i].ref_id) >= sizeof r->ref_id) {
            cj_why(why, whysz, "ref_id of %zu bytes (at most %zu)", strlen(fr[i].ref_id), sizeof r->ref_id - 1);
            return -1;
        }
        r->dot = fr[i].dot;
        snprintf(r->fqcn, sizeof r->fqcn, "%s", fr[i].fqcn);
        snprintf(r->ref_id, sizeof r->ref_id, "%s", fr[i].ref_id);
        int d = fr[i].dot == 6;
        r->items = per_dot[d] == 1 ? counts.items[d] : 0;
        r->state = CJ_REF_PENDING;
    }
    *n_refs = n;
    return 0;
}

int cj_task_set_result_refs(struct cj_task *t, const uint8_t *result, size_t len, char *why, size_t whysz)
{
    struct cj_ref refs[CJ_TASK_MAX_REFS];
    size_t n;
    if (!t->result_refs) {
        cj_why(why, whysz, "task %s finished long ago: its record no longer holds refs", t->id);
        return -1;
    }
    if (read_refs(result, len, refs, &n, why, whysz)) return -1;
    memcpy(t->result_refs, refs, n * sizeof *refs);
    t->n_result_refs = n;
    return 0;
}

/* ---- the table ---------------------------------------------------------------------- */

struct cj_task_table *cj_task_table_new(void)
{
    struct cj_task_table *tt = calloc(1, sizeof *tt);
    if (tt) tt->tail = &tt->head;
    return tt;
}

static size_t headers_alloc_size(size_t n)
{
    size_t sz = HEADERS_MIN_ALLOC;
    while (sz < n && sz <= SIZE_MAX / 2) sz *= 2;
    return sz < n ? n : sz;
}

/* Keeps only what a late or duplicate message needs: the fixed-size record. */
static void task_compact(struct cj_task *t)
{
    if (!t->body && !t->headers) return;
    free(t->headers);
    t->headers = NULL;
    t->headers_len = 0;
    free(t->body);
    t->body = NULL;
    t->refs = t->result_refs = NULL;
    t->n_refs = t->n_result_refs = 0;
}

static void task_free(struct cj_task *t)
{
    task_compact(t);
    free(t);
}

void cj_task_table_free(struct cj_task_table *tt)
{
    if (!tt) return;
    struct cj_task *t = tt->head;
    while (t) {
        struct cj_task *next = t->next;
        task_free(t);
        t = next;
    }
    free(tt);
}

static bool special_name(const char *name)
{
    return strcmp(name, "__try_again__") == 0 || strcmp(name, "__end_run__") == 0;
}

static struct cj_task *find_in_flight(struct cj_task_table *tt, const char *server_id)
{
    for (struct cj_task *t = tt->head; t; t = t->next)
        if (!finished(t) && strcmp(t->server_id, server_id) == 0) return t;
    return NULL;
}

struct cj_task *cj_task_add(struct cj_task_table *tt, const uint8_t *payload, size_t len, char *why, size_t whysz)
{
    struct cj_task_info info;
    struct cj_err e = { 0 };
    if (cj_splice_read_task(payload, len, &info, &e)) {
        cj_why(why, whysz, "not a task: %s (at byte %zu)", e.msg, e.offset);
        return NULL;
    }
    if (special_name(info.task_name)) {
        cj_why(why, whysz, "not a task: special task %s", info.task_name);
        return NULL;
    }
    if (!info.task_id[0]) {
        cj_why(why, whysz, "task '%s' has no __task_id__", info.task_name);
        return NULL;
    }
    struct cj_task *dup = find_in_flight(tt, info.task_id);
    if (dup) {
        cj_why(why, whysz, "server task %s is already in flight as task %s (%s)", info.task_id, dup->id,
                cj_task_state_name(dup->state));
        return NULL;
    }
    struct cj_task *t = calloc(1, sizeof *t);
    if (!t || !(t->headers = malloc(headers_alloc_size(info.headers.len))) ||
        !(t->body = calloc(1, sizeof *t->body)) || local_id(t->id)) {
        if (t) task_compact(t);
        free(t);
        cj_why(why, whysz, "out of memory or randomness");
        return NULL;
    }
    t->tt = tt;
    t->refs = t->body->refs;
    t->result_refs = t->body->result;
    memcpy(t->headers, payload + info.headers.off, info.headers.len);
    t->headers_len = info.headers.len;
    snprintf(t->server_id, sizeof t->server_id, "%s", info.task_id);
    snprintf(t->name, sizeof t->name, "%s", info.task_name);
    t->state = CJ_TASK_RECEIVED;
    t->created = t->changed = cj_now();
    *tt->tail = t;
    tt->tail = &t->next;
    tt->n++;

    char refs_why[256];
    if (read_refs(payload, len, t->refs, &t->n_refs, refs_why, sizeof refs_why)) {
        cj_task_fail(t, "cannot be passed through: %s", refs_why);
        cj_why(why, whysz, "%s", t->why);
        return t;
    }
    char rt[512];
    cj_log_info("task %s: received '%s' (server task %s), %zu datums, refs %s", t->id, t->name, t->server_id,
                info.n_datums, cj_task_refs_text(t->refs, t->n_refs, rt, sizeof rt));
    return t;
}

struct cj_task *cj_task_find(struct cj_task_table *tt, const char *local_id)
{
    if (!local_id) return NULL;
    for (struct cj_task *t = tt->head; t; t = t->next)
        if (strcmp(t->id, local_id) == 0) return t;
    return NULL;
}

/* The task in flight with that server id, else the latest finished one. */
struct cj_task *cj_task_find_server(struct cj_task_table *tt, const char *server_id)
{
    if (!server_id) return NULL;
    struct cj_task *last = NULL;
    for (struct cj_task *t = tt->head; t; t = t->next) {
        if (strcmp(t->server_id, server_id) != 0) continue;
        if (!finished(t)) return t;
        last = t;
    }
    return last;
}

static void trim(struct cj_task_table *tt, double now, const struct cj_task *keep);

/* t has just become finished: it gets the next finishing number, and the
 * older tombstones are compacted or dropped (never t). */
static void became_finished(struct cj_task *t)
{
    if (!t->tt) return;
    t->finished_seq = ++t->tt->finished_seq;
    trim(t->tt, t->changed, t);
}

void cj_task_set_state(struct cj_task *t, enum cj_task_state s)
{
    if (t->state == s) return;
    bool was_finished = finished(t);
    cj_log_info("task %s (server task %s, '%s'): %s -> %s", t->id, t->server_id, t->name,
                cj_task_state_name(t->state), cj_task_state_name(s));
    t->state = s;
    t->changed = cj_now();
    if (was_finished && !finished(t)) {
        if (!t->body) cj_log_warning("task %s: back in flight after its tombstone was compacted (no refs)", t->id);
        t->finished_seq = 0;
    } else if (!was_finished && finished(t)) {
        became_finished(t);
    }
}

void cj_task_fail(struct cj_task *t, const char *fmt, ...)
{
    char why[sizeof t->why];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (t->state == CJ_TASK_FAILED) {   /* logged once: later reasons only at debug */
        cj_log_debug("task %s: already failed (%s); also: %s", t->id, t->why, why);
        return;
    }
    char rt[512], rr[512];
    cj_log_error("task %s (server task %s, '%s') failed in state %s: %s; task refs %s; result refs %s", t->id,
                 t->server_id, t->name, cj_task_state_name(t->state), why,
                 cj_task_refs_text(t->refs, t->n_refs, rt, sizeof rt),
                 cj_task_refs_text(t->result_refs, t->n_result_refs, rr, sizeof rr));
    bool was_finished = finished(t);
    memcpy(t->why, why, sizeof why);
    t->state = CJ_TASK_FAILED;
    t->changed = cj_now();
    if (!was_finished) became_finished(t);
}

static void unlink_task(struct cj_task_table *tt, struct cj_task **pp)
{
    struct cj_task *t = *pp;
    *pp = t->next;
    if (tt->tail == &t->next) tt->tail = pp;
    tt->n--;
    task_free(t);
}

/* One pass: drops tombstones past the TTL and those beyond the newest
 * CJ_TASK_MAX_TOMBSTONES (by finishing order), compacts those beyond the
 * newest CJ_TASK_FULL_TOMBSTONES.  keep (may be NULL) is never touched.
 * Finishing numbers are consecutive, so "among the newest N" is
 * finished_seq > last - N, without sorting. */
static void trim(struct cj_task_table *tt, double now, const struct cj_task *keep)
{
    uint64_t last = tt->finished_seq;
    for (struct cj_task **pp = &tt->head; *pp;) {
        struct cj_task *t = *pp;
        if (t == keep || !finished(t) || t->pins) {
            pp = &t->next;
            continue;
        }
        uint64_t age = last >= t->finished_seq ? last - t->finished_seq : 0;   /* 0 = the newest */
        if (now - t->changed >= CJ_TASK_TOMBSTONE_SECS || age >= CJ_TASK_MAX_TOMBSTONES) {
            cj_log_debug("task %s: tombstone dropped (%s)", t->id,
                         age >= CJ_TASK_MAX_TOMBSTONES ? "too many finished tasks" : "expired");
            unlink_task(tt, pp);
            continue;
        }
        if (age >= CJ_TASK_FULL_TOMBSTONES) task_compact(t);
        pp = &t->next;
    }
}

void cj_task_pin(struct cj_task *t)
{
    t->pins++;
}

void cj_task_unpin(struct cj_task *t)
{
    if (t->pins) t->pins--;
}

void cj_task_table_expire(struct cj_task_table *tt, double now)
{
    trim(tt, now, NULL);
}

struct cj_task *cj_task_first(struct cj_task_table *tt)
{
    return tt->head;
}

size_t cj_task_count(const struct cj_task_table *tt, bool in_flight_only)
{
    if (!in_flight_only) return tt->n;
    size_t n = 0;
    for (const struct cj_task *t = tt->head; t; t = t->next) n += !finished(t);
    return n;
}
