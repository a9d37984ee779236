/* SPDX-License-Identifier: Apache-2.0 */
/* spool.c — the spool store (see spool.h, doc/protocol/download.md §8).
 *
 * Fetch: the download client streams every item to the sink below.  Each item
 * is a struct sitem from item_begin until its finish (fsync, close, rename) is
 * queued: its bytes wait in `pend` until its file is created and its header
 * is validated (at most the first SP_HDR_MAX bytes are copied for that), then
 * go to the I/O thread as write jobs.  Write completions release the bytes to
 * the client, so ACKs (and with them the source's window) wait for the disk.
 * Several items can be in flight (inline items of one reply arrive back to
 * back); the I/O thread runs every job in order, so the completions of a
 * ref's writes and finishes come back in the order they were queued (the
 * FIFO of struct sjob).
 *
 * Serve: the files are registered as a producer ref whose item_read reads them
 * through the I/O thread.  An item's file is opened on its first read and kept
 * open until the drop; reads that arrive while it opens wait (parked).  Every
 * read is a struct sop, the ctx of its job: a drop forgets it (cj_sio_forget)
 * and answers the producer's token at once (ECANCELED), so no token is left
 * waiting and no callback reaches freed memory.
 *
 * Everything here runs on the loop's thread and never blocks. */
#include "dl/spool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "dl/dlmsg.h"
#include "dl/itemcheck.h"
#include "util/clock.h"
#include "util/log.h"

#define SP_HDR_MAX CJ_ITEM_HDR_MAX         /* bytes of an item buffered to check its header */
#define SP_MAX_ITEMS (1u << 20)           /* items per ref */
#define SP_NAME_MAX 127                   /* a tag or ref id as a path component */

enum fdst { FD_CLOSED = 0, FD_OPENING, FD_OPEN, FD_FAILED };

struct sitem {                            /* an item being written */
    struct sitem *next;
    uint32_t index;
    uint64_t size, got;
    int fd;                               /* -1 until its create answers */
    bool create_asked, created, ended, hdr_ok;
    uint8_t *hdr;                         /* the first bytes, until validated */
    size_t hdr_len, hdr_need;
    struct evbuffer *pend;                /* bytes waiting for the file or the check */
};

struct sjob {                             /* a write or finish job in flight (FIFO) */
    struct sjob *next;
    bool finish;
    uint32_t index;
    uint64_t len;
};

struct sop {                              /* a serving job: an open or a read (its own ctx) */
    struct sop *next;
    struct cj_spool_ref *r;
    bool is_open;
    uint32_t index;
    uint64_t off;
    size_t len;
    cj_dl_got_fn got;
    void *token;
};

struct cj_spool_ref {
    TAILQ_ENTRY(cj_spool_ref) link;
    struct cj_spool *sp;
    char tag[SP_NAME_MAX + 1];
    char source[CJ_DL_FQCN_MAX + 1];
    char ref_id[CJ_DL_REF_ID_MAX + 1];
    char served_id[CJ_DL_REF_ID_MAX + 1];
    int dot;
    const char *ext;
    enum cj_spool_ref_state state;
    char why[600];
    char *dir;                            /* <dir>/<tag>/<ref_id> */
    double t0;
    cj_spool_fetched_fn fetched_fn;
    void *fetched_ctx;
    cj_spool_served_fn served_fn;
    void *served_ctx;
    struct cj_dl_fetch *fetch;
    /* items */
    uint64_t *sizes;
    uint32_t n_items, cap_items;
    uint32_t renamed;                     /* items complete on disk */
    uint64_t bytes;                       /* item bytes of the renamed items */
    uint64_t written;                     /* item bytes written (all items) */
    uint64_t reserved;                    /* counted against max_bytes */
    uint64_t unwritten;                   /* bytes received, not yet written */
    bool behind;                          /* told the owner: unwritten passed CJ_SPOOL_BEHIND */
    struct sitem *q, *q_tail;             /* items whose finish is not queued yet */
    struct sjob *jobs, *jobs_tail;
    bool eof;
    /* serving */
    int *fds;
    uint8_t *fdst;
    struct sop *ops;                      /* opens and reads queued on the I/O thread */
    struct sop *parked;                   /* reads waiting for their file to open */
    uint64_t bytes_served;
};

TAILQ_HEAD(sref_list, cj_spool_ref);

struct cj_spool {
    struct event_base *base;
    struct cj_stream_ep *ep;
    struct cj_dl_producer *prod;
    struct cj_sio *sio;
    struct cj_spool_cfg cfg;
    char *dir;
    struct sref_list refs;
    uint64_t reserved;                    /* item bytes reserved (max_bytes) */
    uint64_t on_disk;                     /* item bytes written */
    struct cj_spool_stats st;
};

/* Tells the owner when r falls behind its disk and when it caught up (or ended). */
static void set_behind(struct cj_spool_ref *r, bool on)
{
    if (r->behind == on) return;
    r->behind = on;
    if (on) r->sp->st.behind++;
    if (r->sp->cfg.behind) r->sp->cfg.behind(r->sp->cfg.behind_ctx, r->source, on);
}

static void count_unwritten(struct cj_spool_ref *r, uint64_t received, uint64_t written)
{
    r->unwritten += received;
    r->unwritten -= written < r->unwritten ? written : r->unwritten;
    if (r->unwritten > r->sp->st.unwritten_peak) r->sp->st.unwritten_peak = r->unwritten;
    if (r->unwritten > CJ_SPOOL_BEHIND) set_behind(r, true);
    else if (r->unwritten <= CJ_SPOOL_CAUGHT_UP) set_behind(r, false);
}

/* r's fetch ended or stopped: nothing of it is waiting for the disk any more. */
static void stop_behind(struct cj_spool_ref *r)
{
    r->unwritten = 0;
    set_behind(r, false);
}

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SP_NAME_MAX || !strcmp(s, ".") || !strcmp(s, "..")) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

static bool disk_full_err(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EFBIG;
}

/* <dir>/chunk_<n>.<ext>[.tmp] */
static void item_path(const struct cj_spool_ref *r, uint32_t index, bool tmp, char *out, size_t n)
{
    snprintf(out, n, "%s/chunk_%" PRIu32 ".%s%s", r->dir, index, r->ext, tmp ? ".tmp" : "");
}

const char *cj_spool_ref_state_name(enum cj_spool_ref_state s)
{
    switch (s) {
    case CJ_SPOOL_FETCHING: return "fetching";
    case CJ_SPOOL_SPOOLED: return "spooled";
    case CJ_SPOOL_SERVING: return "serving";
    case CJ_SPOOL_SERVED: return "served";
    case CJ_SPOOL_FAILED: return "failed";
    }
    return "?";
}

/* ---- fetching: failure and success ------------------------------------------------------------ */

static int count_tag(const struct cj_spool *sp, const struct cj_spool_ref *except, const char *tag)
{
    int n = 0;
    const struct cj_spool_ref *o;
    TAILQ_FOREACH(o, &sp->refs, link)
        if (o != except && !strcmp(o->tag, tag)) n++;
    return n;
}

/* Removes r's directory, and the tag's when no other ref uses it. */
static void remove_dir(struct cj_spool_ref *r)
{
    struct cj_spool *sp = r->sp;
    if (cj_sio_rmtree(sp->sio, r->dir, NULL, NULL))
        cj_log_warning("spool: out of memory removing %s", r->dir);
    if (!count_tag(sp, r, r->tag)) {
        char *t = strdup(r->dir);
        char *slash = t ? strrchr(t, '/') : NULL;
        if (slash) {
            *slash = 0;
            cj_sio_rmtree(sp->sio, t, NULL, NULL);
        }
        free(t);
    }
}

static void unreserve(struct cj_spool_ref *r)
{
    struct cj_spool *sp = r->sp;
    sp->reserved -= r->reserved < sp->reserved ? r->reserved : sp->reserved;
    r->reserved = 0;
    sp->on_disk -= r->written < sp->on_disk ? r->written : sp->on_disk;
    r->written = 0;
}

static void sitem_free(struct sitem *it)
{
    if (it->pend) evbuffer_free(it->pend);
    free(it->hdr);
    free(it);
}

/* Closes the files of the items still being written and forgets them. */
static void drop_items(struct cj_spool_ref *r)
{
    struct sitem *it;
    while ((it = r->q)) {
        r->q = it->next;
        if (it->fd >= 0) cj_sio_close(r->sp->sio, it->fd, NULL, NULL);
        sitem_free(it);
    }
    r->q_tail = NULL;
}

/* The fetch failed (files being removed). */
static void fetch_failed(struct cj_spool_ref *r, const char *why)
{
    struct cj_spool *sp = r->sp;
    if (!r->why[0]) snprintf(r->why, sizeof r->why, "%s", why && why[0] ? why : "download failed");
    r->state = CJ_SPOOL_FAILED;
    sp->st.fetch_failures++;
    stop_behind(r);
    drop_items(r);
    unreserve(r);
    r->bytes = 0;
    remove_dir(r);
    cj_log_warning("spool: ref %s from %s failed after %.1f s: %s", r->ref_id, r->source, cj_now() - r->t0, r->why);
    if (r->fetched_fn) r->fetched_fn(r->fetched_ctx, r, false, r->why);
}

/* Ends the fetch with a failure: through the client when it is live (it logs
 * [DOWNLOAD_FAILED], confirms "failed" or cancels, then calls fetch_done). */
__attribute__((format(printf, 2, 3))) static void fail_ref(struct cj_spool_ref *r, const char *fmt, ...)
{
    if (r->state != CJ_SPOOL_FETCHING) return;
    if (!r->why[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->why, sizeof r->why, fmt, ap);
        va_end(ap);
    }
    if (r->fetch) cj_dl_fetch_finish(r->fetch, false, r->why);   /* -> fetch_done (maybe later) */
    else fetch_failed(r, r->why);
}

static void fetch_done(void *ctx, bool ok, const char *why)
{
    struct cj_spool_ref *r = ctx;
    struct cj_spool *sp = r->sp;
    r->fetch = NULL;
    if (r->state != CJ_SPOOL_FETCHING) return;
    if (!ok) {
        fetch_failed(r, why);
        return;
    }
    r->state = CJ_SPOOL_SPOOLED;
    stop_behind(r);
    sp->st.fetched_refs++;
    sp->st.fetched_bytes += r->bytes;
    cj_log_info("spool: ref %s from %s spooled: %" PRIu32 " items, %" PRIu64 " bytes in %.1f s (%s)", r->ref_id, r->source,
                r->n_items, r->bytes, cj_now() - r->t0, r->dir);
    if (r->fetched_fn) r->fetched_fn(r->fetched_ctx, r, true, "");
}

/* After eof: every item renamed and nothing in flight -> confirm success. */
static void check_complete(struct cj_spool_ref *r)
{
    if (r->state != CJ_SPOOL_FETCHING || !r->eof || r->q || r->jobs || r->renamed != r->n_items || !r->fetch) return;
    cj_dl_fetch_finish(r->fetch, true, "");
}

/* ---- fetching: the I/O jobs ------------------------------------------------------------------- */

static void io_failed(struct cj_spool_ref *r, uint32_t index, bool tmp, const char *what, int err)
{
    char path[4200];
    item_path(r, index, tmp, path, sizeof path);
    if (disk_full_err(err)) {
        r->sp->st.disk_full++;
        if (!strcmp(what, "create") && index < r->n_items)
            fail_ref(r, "spool disk full: no room for item T%" PRIu32 " (%" PRIu64 " bytes) at %s: %s", index,
                     r->sizes[index], path, strerror(err));
        else
            fail_ref(r, "spool disk full writing %s: %s", path, strerror(err));
    } else {
        fail_ref(r, "spool cannot %s %s: %s", what, path, strerror(err));
    }
}

static void job_push(struct cj_spool_ref *r, bool finish, uint32_t index, uint64_t len)
{
    struct sjob *j = calloc(1, sizeof *j);
    if (!j) return;   /* only the release amount would be lost; the completion is still counted below */
    j->finish = finish;
    j->index = index;
    j->len = len;
    if (r->jobs_tail) r->jobs_tail->next = j;
    else r->jobs = j;
    r->jobs_tail = j;
}

static struct sjob *job_pop(struct cj_spool_ref *r)
{
    struct sjob *j = r->jobs;
    if (!j) return NULL;
    r->jobs = j->next;
    if (!r->jobs) r->jobs_tail = NULL;
    return j;
}

static void on_written(void *ctx, int err);
static void on_finished(void *ctx, int err);

/* Moves what item it may write to the I/O thread; queues its finish once all is written. */
static void item_flush(struct cj_spool_ref *r, struct sitem *it)
{
    struct cj_spool *sp = r->sp;
    if (!it->created || !it->hdr_ok || r->state != CJ_SPOOL_FETCHING) return;
    size_t n = evbuffer_get_length(it->pend);
    if (n) {
        if (cj_sio_write(sp->sio, it->fd, it->pend, on_written, r)) {
            fail_ref(r, "out of memory writing item T%" PRIu32 " of ref %s", it->index, r->ref_id);
            return;
        }
        job_push(r, false, it->index, n);
    }
    if (!it->ended) return;
    char tmp[4200], fin[4200];
    item_path(r, it->index, true, tmp, sizeof tmp);
    item_path(r, it->index, false, fin, sizeof fin);
    if (cj_sio_finish(sp->sio, it->fd, sp->cfg.fsync, tmp, fin, on_finished, r)) {
        fail_ref(r, "out of memory finishing item T%" PRIu32 " of ref %s", it->index, r->ref_id);
        return;
    }
    job_push(r, true, it->index, it->size);
    it->fd = -1;   /* the finish job closes it */
    /* it is the head of the queue: creates answer in order and items end in order */
    for (struct sitem **pp = &r->q; *pp; pp = &(*pp)->next)
        if (*pp == it) {
            *pp = it->next;
            if (r->q_tail == it) {
                r->q_tail = NULL;
                for (struct sitem *x = r->q; x; x = x->next) r->q_tail = x;
            }
            break;
        }
    sitem_free(it);
}

static void on_created(void *ctx, int err, int fd)
{
    struct cj_spool_ref *r = ctx;
    struct sitem *it = r->q;
    while (it && (it->created || !it->create_asked)) it = it->next;
    if (r->state != CJ_SPOOL_FETCHING || !it) {   /* failed meanwhile: nobody writes to it */
        if (fd >= 0) cj_sio_close(r->sp->sio, fd, NULL, NULL);
        return;
    }
    if (err) {
        io_failed(r, it->index, true, "create", err);
        return;
    }
    it->fd = fd;
    it->created = true;
    item_flush(r, it);
}

static void on_written(void *ctx, int err)
{
    struct cj_spool_ref *r = ctx;
    struct sjob *j = job_pop(r);
    uint64_t len = j ? j->len : 0;
    uint32_t index = j ? j->index : 0;
    free(j);
    if (r->state != CJ_SPOOL_FETCHING) return;
    if (err) {
        io_failed(r, index, true, "write", err);
        return;
    }
    r->written += len;
    r->sp->on_disk += len;
    count_unwritten(r, 0, len);
    if (r->fetch) cj_dl_fetch_release(r->fetch, len);   /* may end the fetch (next pull not sent) */
}

static void on_finished(void *ctx, int err)
{
    struct cj_spool_ref *r = ctx;
    struct sjob *j = job_pop(r);
    uint32_t index = j ? j->index : 0;
    uint64_t size = j ? j->len : 0;
    free(j);
    if (r->state != CJ_SPOOL_FETCHING) return;
    if (err) {
        io_failed(r, index, false, "finish", err);
        return;
    }
    r->renamed++;
    r->bytes += size;
    check_complete(r);
}

static void on_mkdir(void *ctx, int err)
{
    struct cj_spool_ref *r = ctx;
    if (err && r->state == CJ_SPOOL_FETCHING) fail_ref(r, "spool cannot create directory %s: %s", r->dir, strerror(err));
}

/* ---- fetching: the sink ----------------------------------------------------------------------- */

static int sink_begin(void *ctx, uint64_t index, uint64_t size)
{
    struct cj_spool_ref *r = ctx;
    struct cj_spool *sp = r->sp;
    if (r->state != CJ_SPOOL_FETCHING) return -1;
    if (index != r->n_items || r->n_items >= SP_MAX_ITEMS) {
        fail_ref(r, "ref %s: item %" PRIu64 " out of order or too many items", r->ref_id, index);
        return -1;
    }
    if (sp->cfg.max_bytes && (size > sp->cfg.max_bytes || sp->reserved > sp->cfg.max_bytes - size)) {
        sp->st.disk_full++;
        fail_ref(r,
                 "spool_max_bytes (%" PRIu64 " bytes) reached: ref %s from %s item T%" PRIu64 " needs %" PRIu64
                 " bytes, %" PRIu64 " already in use",
                 sp->cfg.max_bytes, r->ref_id, r->source, index, size, sp->reserved);
        return -1;
    }
    if (r->n_items == r->cap_items) {
        uint32_t cap = r->cap_items ? 2 * r->cap_items : 16;
        uint64_t *s = realloc(r->sizes, cap * sizeof *s);
        if (!s) {
            fail_ref(r, "out of memory for the items of ref %s", r->ref_id);
            return -1;
        }
        r->sizes = s;
        r->cap_items = cap;
    }
    struct sitem *it = calloc(1, sizeof *it);
    if (it) {
        it->hdr_need = size < SP_HDR_MAX ? (size_t)size : SP_HDR_MAX;
        it->hdr = malloc(it->hdr_need ? it->hdr_need : 1);
        it->pend = evbuffer_new();
    }
    char tmp[4200];
    item_path(r, (uint32_t)index, true, tmp, sizeof tmp);
    if (!it || !it->hdr || !it->pend || cj_sio_create_sized(sp->sio, tmp, size, on_created, r)) {
        if (it) sitem_free(it);
        fail_ref(r, "out of memory for item T%" PRIu64 " of ref %s", index, r->ref_id);
        return -1;
    }
    it->index = (uint32_t)index;
    it->size = size;
    it->fd = -1;
    it->create_asked = true;
    if (r->q_tail) r->q_tail->next = it;
    else r->q = it;
    r->q_tail = it;
    r->sizes[r->n_items++] = size;
    r->reserved += size;
    sp->reserved += size;
    return 0;
}

/* Checks the header of the item being received: 0 fine or not decidable yet, -1 failed. */
static int item_check(struct cj_spool_ref *r, struct sitem *it, bool final)
{
    char why[400];
    int rc = cj_item_check_header(r->dot, it->hdr, it->hdr_len, it->size, it->index, final, why, sizeof why);
    if (rc < 0) {
        fail_ref(r, "ref %s from %s: %s", r->ref_id, r->source, why);
        return -1;
    }
    if (rc == 0 && final) {
        fail_ref(r, "ref %s from %s: item T%" PRIu32 " ends before its header could be checked", r->ref_id, r->source,
                 it->index);
        return -1;
    }
    if (rc == 1) {
        it->hdr_ok = true;
        free(it->hdr);
        it->hdr = NULL;
    }
    return 0;
}

static int sink_data(void *ctx, uint64_t index, struct evbuffer *piece)
{
    struct cj_spool_ref *r = ctx;
    struct sitem *it = r->q_tail;
    size_t n = evbuffer_get_length(piece);
    if (r->state != CJ_SPOOL_FETCHING || !it || it->index != index || it->ended || n > it->size - it->got) {
        fail_ref(r, "ref %s: item %" PRIu64 " bytes out of place", r->ref_id, index);
        return -1;
    }
    if (!it->hdr_ok && it->hdr_len < it->hdr_need) {
        size_t k = it->hdr_need - it->hdr_len;
        if (k > n) k = n;
        evbuffer_copyout(piece, it->hdr + it->hdr_len, k);
        it->hdr_len += k;
    }
    it->got += n;
    count_unwritten(r, n, 0);
    if (evbuffer_add_buffer(it->pend, piece)) {
        fail_ref(r, "out of memory receiving item T%" PRIu64 " of ref %s", index, r->ref_id);
        return -1;
    }
    if (!it->hdr_ok && item_check(r, it, false)) return -1;
    item_flush(r, it);
    return r->state == CJ_SPOOL_FETCHING ? 0 : -1;
}

static int sink_end(void *ctx, uint64_t index)
{
    struct cj_spool_ref *r = ctx;
    struct sitem *it = r->q_tail;
    if (r->state != CJ_SPOOL_FETCHING || !it || it->index != index || it->got != it->size) {
        fail_ref(r, "ref %s: item %" PRIu64 " ended out of place", r->ref_id, index);
        return -1;
    }
    if (!it->hdr_ok && item_check(r, it, true)) return -1;
    it->ended = true;
    item_flush(r, it);
    return r->state == CJ_SPOOL_FETCHING ? 0 : -1;
}

static void sink_eof(void *ctx)
{
    struct cj_spool_ref *r = ctx;
    r->eof = true;
    check_complete(r);
}

static const struct cj_dl_sink spool_sink = { sink_begin, sink_data, sink_end, sink_eof };

/* ---- the public side: life cycle -------------------------------------------------------------- */

struct cj_spool *cj_spool_new(struct event_base *base, struct cj_stream_ep *ep, struct cj_dl_producer *prod,
                              struct cj_sio *sio, const struct cj_spool_cfg *cfg)
{
    if (!base || !ep || !prod || !sio || !cfg || !cfg->dir || !cfg->dir[0]) return NULL;
    struct cj_spool *sp = calloc(1, sizeof *sp);
    if (!sp || !(sp->dir = strdup(cfg->dir))) {
        free(sp);
        return NULL;
    }
    sp->base = base;
    sp->ep = ep;
    sp->prod = prod;
    sp->sio = sio;
    sp->cfg = *cfg;
    sp->cfg.dir = sp->dir;
    if (!(sp->cfg.serve_timeout > 0)) sp->cfg.serve_timeout = CJ_DL_DEFAULT_TIMEOUT;
    TAILQ_INIT(&sp->refs);
    return sp;
}

void cj_spool_set_max_bytes(struct cj_spool *sp, uint64_t max_bytes)
{
    if (sp) sp->cfg.max_bytes = max_bytes;
}

struct cj_spool_ref *cj_spool_fetch(struct cj_spool *sp, const char *tag, int dot, const char *source,
                                    const char *ref_id, cj_spool_fetched_fn fn, void *ctx)
{
    if (!sp || (dot != 3 && dot != 6) || !name_ok(tag) || !name_ok(ref_id) || !source || !source[0] ||
        strlen(source) > CJ_DL_FQCN_MAX || strlen(ref_id) > CJ_DL_REF_ID_MAX) {
        cj_log_warning("spool: cannot spool ref %s (tag %s, dot %d): bad arguments", ref_id ? ref_id : "(null)",
                       tag ? tag : "(null)", dot);
        return NULL;
    }
    struct cj_spool_ref *o;
    TAILQ_FOREACH(o, &sp->refs, link)
        if (!strcmp(o->tag, tag) && !strcmp(o->ref_id, ref_id)) {
            cj_log_warning("spool: ref %s is already spooled under tag %s", ref_id, tag);
            return NULL;
        }
    struct cj_spool_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t dl = strlen(sp->dir) + strlen(tag) + strlen(ref_id) + 3;
    if (!(r->dir = malloc(dl))) {
        free(r);
        return NULL;
    }
    snprintf(r->dir, dl, "%s/%s/%s", sp->dir, tag, ref_id);
    r->sp = sp;
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    snprintf(r->source, sizeof r->source, "%s", source);
    snprintf(r->ref_id, sizeof r->ref_id, "%s", ref_id);
    r->dot = dot;
    r->ext = dot == 6 ? "safetensors" : "npz";
    r->state = CJ_SPOOL_FETCHING;
    r->fetched_fn = fn;
    r->fetched_ctx = ctx;
    r->t0 = cj_now();
    if (cj_sio_mkdirs(sp->sio, r->dir, 0700, on_mkdir, r)) {
        free(r->dir);
        free(r);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&sp->refs, r, link);
    r->fetch = cj_dl_fetch_sink(sp->base, sp->ep, source, ref_id, &sp->cfg.fetch, &spool_sink, fetch_done, r);
    if (!r->fetch) {
        cj_log_warning("spool: cannot start downloading ref %s from %s", ref_id, source);
        cj_sio_forget(sp->sio, r);
        remove_dir(r);
        TAILQ_REMOVE(&sp->refs, r, link);
        free(r->dir);
        free(r);
        return NULL;
    }
    cj_log_debug("spool: fetching ref %s (dot %d) from %s into %s", ref_id, dot, source, r->dir);
    return r;
}

/* ---- serving ------------------------------------------------------------------------------------ */

static void sop_unlink(struct sop **head, struct sop *o)
{
    for (struct sop **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            o->next = NULL;
            return;
        }
}

static void on_read(void *ctx, int err, struct evbuffer *data)
{
    struct sop *o = ctx;
    struct cj_spool_ref *r = o->r;
    sop_unlink(&r->ops, o);
    if (err || !data) {
        char path[4200];
        item_path(r, o->index, false, path, sizeof path);
        cj_log_warning("spool: reading %s (%zu bytes at %" PRIu64 ") for ref %s failed: %s", path, o->len, o->off,
                       r->served_id, strerror(err ? err : EIO));
    } else {
        r->bytes_served += o->len;
    }
    o->got(o->token, err ? err : (data ? 0 : EIO), data);
    if (data) evbuffer_free(data);
    free(o);
}

static void issue_read(struct cj_spool_ref *r, struct sop *o)
{
    o->next = r->ops;
    r->ops = o;
    if (cj_sio_read(r->sp->sio, r->fds[o->index], o->off, o->len, on_read, o)) {
        sop_unlink(&r->ops, o);
        o->got(o->token, ENOMEM, NULL);
        free(o);
    }
}

static void on_opened(void *ctx, int err, int fd)
{
    struct sop *o = ctx;
    struct cj_spool_ref *r = o->r;
    uint32_t index = o->index;
    sop_unlink(&r->ops, o);
    free(o);
    if (err) {
        char path[4200];
        item_path(r, index, false, path, sizeof path);
        cj_log_warning("spool: cannot open %s for ref %s: %s", path, r->served_id, strerror(err));
        r->fdst[index] = FD_FAILED;
    } else {
        r->fds[index] = fd;
        r->fdst[index] = FD_OPEN;
    }
    struct sop **pp = &r->parked;
    while (*pp) {
        struct sop *w = *pp;
        if (w->index != index) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        w->next = NULL;
        if (err) {
            w->got(w->token, err, NULL);
            free(w);
        } else {
            issue_read(r, w);
        }
    }
}

/* The producer's item_read: bytes [off, off+len) of item `index`. */
static void item_read(void *ctx, size_t index, uint64_t off, size_t len, cj_dl_got_fn got, void *token)
{
    struct cj_spool_ref *r = ctx;
    if (index >= r->n_items || off > r->sizes[index] || len > r->sizes[index] - off || !r->fds) {
        got(token, EINVAL, NULL);
        return;
    }
    if (r->fdst[index] == FD_FAILED) {
        got(token, EIO, NULL);
        return;
    }
    struct sop *o = calloc(1, sizeof *o);
    if (!o) {
        got(token, ENOMEM, NULL);
        return;
    }
    *o = (struct sop){ .r = r, .index = (uint32_t)index, .off = off, .len = len, .got = got, .token = token };
    if (r->fdst[index] == FD_OPEN) {
        issue_read(r, o);
        return;
    }
    o->next = r->parked;
    r->parked = o;
    if (r->fdst[index] == FD_OPENING) return;
    struct sop *op = calloc(1, sizeof *op);
    char path[4200];
    item_path(r, (uint32_t)index, false, path, sizeof path);
    if (op) *op = (struct sop){ .r = r, .is_open = true, .index = (uint32_t)index };
    if (!op || cj_sio_open_read(r->sp->sio, path, on_opened, op)) {
        free(op);
        sop_unlink(&r->parked, o);
        free(o);
        got(token, ENOMEM, NULL);
        return;
    }
    op->next = r->ops;
    r->ops = op;
    r->fdst[index] = FD_OPENING;
}

static const char *outcome_str(enum cj_dl_outcome o)
{
    return o == CJ_DL_OUT_OK ? "completed" : o == CJ_DL_OUT_FAILED ? "failed" : "timed out";
}

static void served_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                        const struct cj_dl_receiver_info *rcv, size_t n_rcv)
{
    struct cj_spool_ref *r = ctx;
    struct cj_spool *sp = r->sp;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n_rcv; i++) bytes += rcv[i].bytes;
    r->state = CJ_SPOOL_SERVED;
    sp->st.served_refs++;
    sp->st.served_bytes += bytes;
    cj_log_info("spool: ref %s (from %s) served out as %s: %s, %zu receivers, %" PRIu64 " bytes", r->ref_id, r->source,
                ref_id, outcome_str(outcome), n_rcv, bytes);
    if (r->served_fn) r->served_fn(r->served_ctx, r, outcome);
}

int cj_spool_serve(struct cj_spool *sp, struct cj_spool_ref *r, uint32_t num_receivers, const char *const *ids,
                   size_t n_ids, cj_spool_served_fn fn, void *ctx, char *new_ref_id)
{
    if (!sp || !r || (r->state != CJ_SPOOL_SPOOLED && r->state != CJ_SPOOL_SERVING && r->state != CJ_SPOOL_SERVED))
        return -1;
    if (!r->fds) {
        size_t n = r->n_items ? r->n_items : 1;
        r->fds = malloc(n * sizeof *r->fds);
        r->fdst = calloc(n, 1);
        if (!r->fds || !r->fdst) {
            free(r->fds);
            free(r->fdst);
            r->fds = NULL;
            r->fdst = NULL;
            return -1;
        }
        for (size_t i = 0; i < n; i++) r->fds[i] = -1;
    }
    if (r->served_id[0] && cj_dl_producer_has_ref(sp->prod, r->served_id)) {
        cj_log_info("spool: ref %s: previous serve as %s withdrawn", r->ref_id, r->served_id);
        cj_dl_producer_remove_ref(sp->prod, r->served_id);
    }
    char id[CJ_DL_REF_ID_MAX + 1];
    struct cj_dl_ref_cfg c = {
        .n_items = r->n_items, .sizes = r->sizes, .item_read = item_read, .num_receivers = num_receivers,
        .receiver_ids = ids, .n_receiver_ids = n_ids, .timeout = sp->cfg.serve_timeout, .done = served_done, .ctx = r,
    };
    if (cj_dl_producer_add_ref(sp->prod, &c, id)) {
        cj_log_warning("spool: the producer refused to serve ref %s", r->ref_id);
        return -1;
    }
    snprintf(r->served_id, sizeof r->served_id, "%s", id);
    if (new_ref_id) memcpy(new_ref_id, id, strlen(id) + 1);
    r->served_fn = fn;
    r->served_ctx = ctx;
    r->state = CJ_SPOOL_SERVING;
    cj_log_info("spool: ref %s (from %s) served as %s: %" PRIu32 " items, %" PRIu64 " bytes, %s %zu", r->ref_id, r->source,
                id, r->n_items, r->bytes, n_ids ? "listed receivers" : "receivers", n_ids ? n_ids : (size_t)num_receivers);
    return 0;
}

/* ---- drop and free ------------------------------------------------------------------------------ */

/* Stops everything r has in flight; files stay.  No callback afterwards. */
static void ref_stop(struct cj_spool_ref *r)
{
    struct cj_spool *sp = r->sp;
    r->fetched_fn = NULL;
    r->served_fn = NULL;
    stop_behind(r);
    if (r->fetch) {
        struct cj_dl_fetch *f = r->fetch;
        r->fetch = NULL;
        cj_dl_fetch_cancel(f);
    }
    if (r->served_id[0] && cj_dl_producer_has_ref(sp->prod, r->served_id))
        cj_dl_producer_remove_ref(sp->prod, r->served_id);
    /* outstanding reads: their jobs are forgotten and their tokens answered now */
    struct sop *o;
    while ((o = r->ops)) {
        r->ops = o->next;
        cj_sio_forget(sp->sio, o);
        if (!o->is_open) o->got(o->token, ECANCELED, NULL);
        free(o);
    }
    while ((o = r->parked)) {
        r->parked = o->next;
        o->got(o->token, ECANCELED, NULL);
        free(o);
    }
    cj_sio_forget(sp->sio, r);   /* mkdir, creates (their fds closed by the thread), writes, finishes */
    drop_items(r);
    struct sjob *j;
    while ((j = job_pop(r))) free(j);
    if (r->fds)
        for (uint32_t i = 0; i < r->n_items; i++)
            if (r->fdst[i] == FD_OPEN) cj_sio_close(sp->sio, r->fds[i], NULL, NULL);
}

static void ref_free(struct cj_spool_ref *r)
{
    free(r->sizes);
    free(r->fds);
    free(r->fdst);
    free(r->dir);
    free(r);
}

void cj_spool_drop(struct cj_spool *sp, struct cj_spool_ref *r)
{
    if (!sp || !r) return;
    ref_stop(r);
    unreserve(r);
    remove_dir(r);
    cj_log_debug("spool: ref %s (%s) dropped, %s removed", r->ref_id, cj_spool_ref_state_name(r->state), r->dir);
    TAILQ_REMOVE(&sp->refs, r, link);
    ref_free(r);
}

void cj_spool_free(struct cj_spool *sp)
{
    if (!sp) return;
    struct cj_spool_ref *r;
    while ((r = TAILQ_FIRST(&sp->refs))) {
        ref_stop(r);
        TAILQ_REMOVE(&sp->refs, r, link);
        ref_free(r);
    }
    free(sp->dir);
    free(sp);
}

/* ---- accessors ------------------------------------------------------------------------------------ */

enum cj_spool_ref_state cj_spool_ref_state(const struct cj_spool_ref *r)
{
    return r->state;
}

const char *cj_spool_ref_source(const struct cj_spool_ref *r)
{
    return r->source;
}

const char *cj_spool_ref_id(const struct cj_spool_ref *r)
{
    return r->ref_id;
}

const char *cj_spool_ref_served_id(const struct cj_spool_ref *r)
{
    return r->served_id;
}

uint64_t cj_spool_ref_bytes(const struct cj_spool_ref *r)
{
    return r->state == CJ_SPOOL_FETCHING ? r->written : r->bytes;
}

uint32_t cj_spool_ref_items(const struct cj_spool_ref *r)
{
    return r->n_items;
}

void cj_spool_foreach(struct cj_spool *sp, cj_spool_visit_fn fn, void *arg)
{
    double now = cj_now();
    struct cj_spool_ref *r;
    TAILQ_FOREACH(r, &sp->refs, link) {
        struct cj_spool_ref_info ri = {
            .tag = r->tag, .source = r->source, .ref_id = r->ref_id, .served_id = r->served_id, .dot = r->dot,
            .state = r->state, .items = r->n_items, .bytes = cj_spool_ref_bytes(r), .bytes_served = r->bytes_served,
            .age = now - r->t0, .why = r->state == CJ_SPOOL_FAILED ? r->why : "",
        };
        fn(arg, &ri);
    }
}

void cj_spool_get_stats(const struct cj_spool *sp, struct cj_spool_stats *st)
{
    *st = sp->st;
    st->refs = st->fetching = st->serving = 0;
    const struct cj_spool_ref *r;
    TAILQ_FOREACH(r, &sp->refs, link) {
        st->refs++;
        st->fetching += r->state == CJ_SPOOL_FETCHING;
        st->serving += r->state == CJ_SPOOL_SERVING;
    }
    st->bytes_on_disk = sp->on_disk;
    st->max_bytes = sp->cfg.max_bytes;
}
