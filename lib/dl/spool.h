/* SPDX-License-Identifier: Apache-2.0 */
/* spool.h — the spool store (doc/protocol/download.md §8): refs downloaded once to disk and
 * served from there to the relay's workers (or, for results, to the server).
 *
 * A spool ref goes FETCHING → SPOOLED → SERVING → gone:
 *   cj_spool_fetch   pulls ref_id from its source with the download client
 *                    (cn__origin = the relay), every item's bytes written
 *                    verbatim as they arrive, through the I/O thread, to
 *                    <dir>/<tag>/<ref_id>/chunk_<n>.<npz|safetensors>.tmp and
 *                    renamed to chunk_<n>.<ext> when complete (n = item index,
 *                    the item id T<n>); the item's header is validated (npz: a
 *                    stored ZIP with a T<n>.npy member; safetensors:
 *                    doc/protocol/download.md §4.2); confirm "success" only once every item
 *                    is on disk.  Nothing is deserialized.
 *   cj_spool_serve   registers the files as a new ref on the relay's producer
 *                    (items read back through the I/O thread, ≤ 1 MiB at a time,
 *                    grouped per §3), with the given receivers and idle timeout.
 *   cj_spool_drop    removes the producer ref and the ref's directory.
 *
 * Failures are clear and leave nothing half-written: a full disk (ENOSPC,
 * EDQUOT, EFBIG) or spool_max_bytes reached fails the fetch with a reason
 * naming the file, the limit and the ref, and the ref's directory is removed.
 *
 * Memory: per fetch, one MAIN section (< 16 MiB) plus the bytes between the
 * network and the disk, bounded by the source's stream window (ACKs wait for
 * the disk); per serve, about two chunks.  Never a whole item.
 *
 * Single-threaded (the loop); the disk work runs on the cj_sio thread. */
#ifndef CJ_DL_SPOOL_H
#define CJ_DL_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "dl/client.h"
#include "dl/producer.h"
#include "dl/spoolio.h"

struct cj_stream_ep;

struct cj_spool_cfg {
    const char *dir;                 /* run-scoped directory, <spool_dir>/<job_id>; created on demand */
    uint64_t max_bytes;              /* most item bytes on disk at once; 0 = no limit */
    bool fsync;                      /* fsync each item file before its rename */
    struct cj_dl_fetch_cfg fetch;    /* retries and timeouts of upstream pulls */
    double serve_timeout;            /* idle timeout of a served ref (s); 0: 600 */
    /* Optional: a fetch has more than CJ_SPOOL_BEHIND bytes received and not
     * yet written (on), or is down to CJ_SPOOL_CAUGHT_UP or has ended (off).
     * The owner stops reading the link toward source meanwhile
     * (cj_router_hold), so what the disk has not taken waits in the sender. */
    void (*behind)(void *ctx, const char *source, bool on);
    void *behind_ctx;
};

#define CJ_SPOOL_BEHIND (4u << 20)
#define CJ_SPOOL_CAUGHT_UP (1u << 20)

enum cj_spool_ref_state {
    CJ_SPOOL_FETCHING = 1,
    CJ_SPOOL_SPOOLED,                /* every item on disk, not served yet */
    CJ_SPOOL_SERVING,
    CJ_SPOOL_SERVED,                 /* the producer ref finished (completed/failed/timed out) */
    CJ_SPOOL_FAILED,                 /* the fetch failed; files removed */
};

struct cj_spool;
struct cj_spool_ref;

/* The fetch ended: ok (state SPOOLED) or not (FAILED, why says why; the files
 * are being removed).  r stays valid until cj_spool_drop. */
typedef void (*cj_spool_fetched_fn)(void *ctx, struct cj_spool_ref *r, bool ok, const char *why);

/* The served ref finished: every receiver final (OK / FAILED) or idle for its
 * timeout (TIMEOUT).  r stays valid until cj_spool_drop. */
typedef void (*cj_spool_served_fn)(void *ctx, struct cj_spool_ref *r, enum cj_dl_outcome outcome);

/* prod: the relay's producer (on ep), sio: the I/O thread.  cfg copied.  NULL
 * on bad arguments or no memory. */
struct cj_spool *cj_spool_new(struct event_base *base, struct cj_stream_ep *ep, struct cj_dl_producer *prod,
                              struct cj_sio *sio, const struct cj_spool_cfg *cfg);

/* Cancels fetches, removes producer refs, frees every ref.  Files are left;
 * the owner removes the run's directory (cj_sio_rmtree or cj_spool_rmtree_now). */
void cj_spool_free(struct cj_spool *sp);

/* Changes max_bytes (reload). */
void cj_spool_set_max_bytes(struct cj_spool *sp, uint64_t max_bytes);

/* Starts downloading ref_id (dot 3 or 6) from source into <dir>/<tag>/<ref_id>/.
 * tag groups the refs of one task or result (a path component: [A-Za-z0-9_.-]).
 * fn is called once, from the loop.  NULL on bad arguments (unknown dot, a tag
 * or ref_id unusable as a path component) or when the first pull cannot start. */
struct cj_spool_ref *cj_spool_fetch(struct cj_spool *sp, const char *tag, int dot, const char *source,
                                    const char *ref_id, cj_spool_fetched_fn fn, void *ctx);

/* Serves a spooled ref from the relay's producer: identity mode when n_ids > 0,
 * else count mode with num_receivers.  new_ref_id (CJ_DL_REF_ID_MAX + 1 bytes)
 * gets the ref id to put in the rewritten datum.  Allowed in SPOOLED, SERVING
 * and SERVED: serving again (a task redelivered to another worker after the
 * first one died) registers a fresh ref id from the same files; a previous
 * live producer ref is removed first (its fn not called).  The files stay
 * until cj_spool_drop.  0, or -1 (FETCHING/FAILED, producer refused). */
int cj_spool_serve(struct cj_spool *sp, struct cj_spool_ref *r, uint32_t num_receivers, const char *const *ids,
                   size_t n_ids, cj_spool_served_fn fn, void *ctx, char *new_ref_id);

/* Stops whatever r is doing (fetch cancelled, producer ref removed), removes
 * its directory (and the tag's directory once empty) and frees r.  No callback
 * after this. */
void cj_spool_drop(struct cj_spool *sp, struct cj_spool_ref *r);

/* Accessors (r valid). */
enum cj_spool_ref_state cj_spool_ref_state(const struct cj_spool_ref *r);
const char *cj_spool_ref_state_name(enum cj_spool_ref_state s);
const char *cj_spool_ref_source(const struct cj_spool_ref *r);
const char *cj_spool_ref_id(const struct cj_spool_ref *r);        /* the upstream ref id */
const char *cj_spool_ref_served_id(const struct cj_spool_ref *r); /* "" until served */
uint64_t cj_spool_ref_bytes(const struct cj_spool_ref *r);        /* item bytes on disk */
uint32_t cj_spool_ref_items(const struct cj_spool_ref *r);

/* For show refs: every ref, oldest first. */
struct cj_spool_ref_info {
    const char *tag, *source, *ref_id, *served_id;
    int dot;
    enum cj_spool_ref_state state;
    uint32_t items;
    uint64_t bytes;                  /* on disk (FETCHING: written so far) */
    uint64_t bytes_served;           /* item bytes served to receivers */
    double age;                      /* seconds since the fetch started */
    const char *why;                 /* FAILED: the reason; else "" */
};
typedef void (*cj_spool_visit_fn)(void *arg, const struct cj_spool_ref_info *ri);
void cj_spool_foreach(struct cj_spool *sp, cj_spool_visit_fn fn, void *arg);

struct cj_spool_stats {
    uint64_t refs, fetching, serving;
    uint64_t bytes_on_disk;          /* item bytes in the spool now */
    uint64_t max_bytes;
    uint64_t fetched_refs, fetched_bytes, fetch_failures;
    uint64_t served_refs, served_bytes;
    uint64_t disk_full;              /* fetches failed by ENOSPC/EDQUOT/EFBIG or max_bytes */
    uint64_t behind;                 /* times a fetch fell CJ_SPOOL_BEHIND bytes behind its disk */
    uint64_t unwritten_peak;         /* most bytes one fetch held received and not yet written */
};
void cj_spool_get_stats(const struct cj_spool *sp, struct cj_spool_stats *st);

#endif
