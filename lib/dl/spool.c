/* spool.c — the spool store (see spool.h, download.md §8).
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
#include "util/log.h"

#define SP_HDR_MAX 65536u                 /* bytes of an item buffered to check its header */
#define SP_MAX_ITEMS (1u << 20)           /* items per ref */
#define SP_NAME_MAX 127                   /* a tag or ref id as a path component */
#define SP_JSON_DEPTH 32

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

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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

/* ---- item header checks (download.md §4) --------------------------------------------------- */

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

__attribute__((format(printf, 3, 4))) static int bad(char *why, size_t wn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wn, fmt, ap);
    va_end(ap);
    return -1;
}

/* The compressed size of the member whose local header is at h (zip64 extra honoured). */
static int zip_csize(const uint8_t *h, size_t have_extra, uint64_t *csize, char *why, size_t wn)
{
    uint32_t c32 = le32(h + 18), u32 = le32(h + 22);
    uint16_t nl = le16(h + 26), el = le16(h + 28);
    if (le16(h + 6) & 8) return bad(why, wn, "ZIP member uses a data descriptor (sizes unknown)");
    *csize = c32;
    if (c32 != 0xFFFFFFFFu) return 0;
    const uint8_t *x = h + 30 + nl, *end = x + (el < have_extra ? el : have_extra);
    while (end - x >= 4) {
        uint16_t id = le16(x), sz = le16(x + 2);
        if ((size_t)(end - x - 4) < sz) break;
        if (id == 1) {
            size_t at = u32 == 0xFFFFFFFFu ? 8 : 0;
            if (sz < at + 8) break;
            *csize = le64(x + 4 + at);
            return 0;
        }
        x += 4 + sz;
    }
    return bad(why, wn, "ZIP member sizes are 0xFFFFFFFF without a zip64 extra");
}

/* npz: a stored ZIP whose (first real) member is T<index>.npy; numpy < 2's
 * allow_pickle.npy may come first.  1 ok, 0 need more bytes, -1 bad. */
static int check_npz(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t wn)
{
    char want[32];
    snprintf(want, sizeof want, "T%" PRIu32 ".npy", index);
    size_t pos = 0;
    for (int member = 0; member < 2; member++) {
        bool last = final || have >= size || have >= SP_HDR_MAX;
        if (have - pos < 30) return last ? bad(why, wn, "npz item T%" PRIu32 " too short for a ZIP local file header", index) : 0;
        const uint8_t *p = h + pos;
        if (memcmp(p, "PK\x03\x04", 4))
            return bad(why, wn, "npz item T%" PRIu32 " is not a ZIP (no local file header at offset %zu)", index, pos);
        if (le16(p + 8) != 0)
            return bad(why, wn, "npz item T%" PRIu32 " member at offset %zu is compressed (method %u); only stored", index,
                       pos, le16(p + 8));
        size_t nl = le16(p + 26), el = le16(p + 28);
        if (have - pos < 30 + nl + el)
            return last ? bad(why, wn, "npz item T%" PRIu32 " ends inside a ZIP local file header", index) : 0;
        const char *name = (const char *)p + 30;
        if (nl == strlen(want) && !memcmp(name, want, nl)) return 1;
        if (member == 0 && nl == 16 && !memcmp(name, "allow_pickle.npy", 16)) {
            uint64_t csize = 0;
            if (zip_csize(p, el, &csize, why, wn)) return -1;
            if (csize > SP_HDR_MAX || pos + 30 + nl + el + csize >= SP_HDR_MAX)
                return bad(why, wn, "npz item T%" PRIu32 ": allow_pickle.npy member too large (%" PRIu64 " bytes)", index,
                           csize);
            pos += 30 + nl + el + (size_t)csize;
            if (pos > size) return bad(why, wn, "npz item T%" PRIu32 ": first member runs past the item", index);
            continue;
        }
        return bad(why, wn, "npz item T%" PRIu32 ": member '%.*s' is not %s", index, (int)(nl < 64 ? nl : 64), name, want);
    }
    return bad(why, wn, "npz item T%" PRIu32 " has no %s member", index, want);
}

/* A small JSON validator (RFC 8259 syntax), depth-bounded recursion. */
struct js {
    const char *s;
    size_t n, i;
    /* top-level object keys (spans), for the duplicate check */
    size_t keys[2048][2];
    size_t n_keys;
    bool dup;
};

static void js_ws(struct js *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static bool js_string(struct js *j)
{
    if (j->i >= j->n || j->s[j->i] != '"') return false;
    j->i++;
    while (j->i < j->n) {
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c == '"') return true;
        if (c < 0x20) return false;
        if (c == '\\') {
            if (j->i >= j->n) return false;
            char e = j->s[j->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++, j->i++) {
                    char h = j->i < j->n ? j->s[j->i] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
                }
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return false;
            }
        }
    }
    return false;
}

static bool js_digits(struct js *j)
{
    size_t s = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > s;
}

static bool js_number(struct js *j)
{
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') j->i++;
    else if (!js_digits(j)) return false;
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (!js_digits(j)) return false;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (!js_digits(j)) return false;
    }
    return true;
}

static bool js_word(struct js *j, const char *w)
{
    size_t n = strlen(w);
    if (j->n - j->i < n || memcmp(j->s + j->i, w, n)) return false;
    j->i += n;
    return true;
}

static bool js_value(struct js *j, int depth);

static bool js_object(struct js *j, int depth)
{
    j->i++;   /* { */
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
        return true;
    }
    for (;;) {
        js_ws(j);
        size_t ks = j->i;
        if (!js_string(j)) return false;
        if (depth == 1) {
            size_t kl = j->i - ks;
            for (size_t k = 0; k < j->n_keys; k++)
                if (j->keys[k][1] == kl && !memcmp(j->s + j->keys[k][0], j->s + ks, kl)) j->dup = true;
            if (j->n_keys < sizeof j->keys / sizeof j->keys[0]) {
                j->keys[j->n_keys][0] = ks;
                j->keys[j->n_keys][1] = kl;
                j->n_keys++;
            }
        }
        js_ws(j);
        if (j->i >= j->n || j->s[j->i] != ':') return false;
        j->i++;
        if (!js_value(j, depth)) return false;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            continue;
        }
        if (j->i < j->n && j->s[j->i] == '}') {
            j->i++;
            return true;
        }
        return false;
    }
}

static bool js_array(struct js *j, int depth)
{
    j->i++;   /* [ */
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
        return true;
    }
    for (;;) {
        if (!js_value(j, depth)) return false;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            continue;
        }
        if (j->i < j->n && j->s[j->i] == ']') {
            j->i++;
            return true;
        }
        return false;
    }
}

static bool js_value(struct js *j, int depth)
{
    js_ws(j);
    if (j->i >= j->n || depth >= SP_JSON_DEPTH) return false;
    switch (j->s[j->i]) {
    case '{': return js_object(j, depth + 1);
    case '[': return js_array(j, depth + 1);
    case '"': return js_string(j);
    case 't': return js_word(j, "true");
    case 'f': return js_word(j, "false");
    case 'n': return js_word(j, "null");
    default: return js_number(j);
    }
}

/* safetensors (§4.2): 1 ok, 0 need more bytes, -1 bad. */
static int check_st(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t wn)
{
    if (size < 8) return bad(why, wn, "safetensors item T%" PRIu32 " too short (%" PRIu64 " bytes)", index, size);
    if (have < 8) return final ? bad(why, wn, "safetensors item T%" PRIu32 " too short", index) : 0;
    uint64_t n = le64(h);
    if (n == 0) return bad(why, wn, "safetensors item T%" PRIu32 ": empty header", index);
    if (n > size - 8)
        return bad(why, wn, "safetensors item T%" PRIu32 ": header size exceeds payload length (%" PRIu64 " > %" PRIu64 ")",
                   index, n, size - 8);
    if (n > SP_HDR_MAX - 8)
        return bad(why, wn,
                   "safetensors item T%" PRIu32 ": header of %" PRIu64 " bytes is larger than the %u bytes the spool checks",
                   index, n, SP_HDR_MAX - 8);
    if (have < 8 + n) return final ? bad(why, wn, "safetensors item T%" PRIu32 " ends inside its header", index) : 0;
    struct js *j = calloc(1, sizeof *j);
    if (!j) return bad(why, wn, "out of memory checking item T%" PRIu32, index);
    j->s = (const char *)h + 8;
    j->n = (size_t)n;
    bool ok = js_value(j, 0);
    js_ws(j);
    ok = ok && j->i == j->n;
    size_t first = 0;
    while (first < j->n && (j->s[first] == ' ' || j->s[first] == '\t' || j->s[first] == '\n' || j->s[first] == '\r'))
        first++;
    bool obj = ok && first < j->n && j->s[first] == '{';
    bool dup = j->dup;
    free(j);
    if (!ok) return bad(why, wn, "safetensors item T%" PRIu32 ": invalid JSON header", index);
    if (!obj) return bad(why, wn, "safetensors item T%" PRIu32 ": header must be JSON object", index);
    if (dup) return bad(why, wn, "safetensors item T%" PRIu32 ": duplicate key in the header", index);
    return 1;
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
    cj_log_warning("spool: ref %s from %s failed after %.1f s: %s", r->ref_id, r->source, now_mono() - r->t0, r->why);
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
                r->n_items, r->bytes, now_mono() - r->t0, r->dir);
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
    int rc = r->dot == 6 ? check_st(it->hdr, it->hdr_len, it->size, it->index, final, why, sizeof why)
                         : check_npz(it->hdr, it->hdr_len, it->size, it->index, final, why, sizeof why);
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
    r->t0 = now_mono();
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
    double now = now_mono();
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
