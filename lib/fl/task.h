/* SPDX-License-Identifier: Apache-2.0 */
/* task.h — the relay's table of tasks in flight, and the refs they carry.
 *
 * A task lives from the get_task reply that brought it to the end of its result
 * (submitted and settled) or its failure.  The table keeps only what the result
 * and the status socket need — ids, the task's small __headers__ map, the refs as
 * (dot, fqcn, ref_id, items) — never the task payload itself.  Finished tasks stay
 * as tombstones so that late or duplicate messages get a clear answer: for
 * CJ_TASK_TOMBSTONE_SECS at most, and only the newest CJ_TASK_MAX_TOMBSTONES
 * (the oldest finished are dropped first).  The newest CJ_TASK_FULL_TOMBSTONES
 * keep everything (a failure report being retried rebuilds its payload from the
 * __headers__ copy; show refs lists their refs); older ones are compacted to
 * the fixed-size record (ids, name, worker, state, why, times): headers and refs
 * freed, n_refs = n_result_refs = 0.  So the table's memory is bounded by a
 * constant plus the tasks in flight, and every allocation but the headers copy
 * has one size (a record, a refs block), which the allocator reuses without
 * fragmenting. */
#ifndef CJ_FL_TASK_H
#define CJ_FL_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CJ_TASK_ID_LEN        32    /* local task id: 32 lower-case hex */
#define CJ_TASK_MAX_REFS      16    /* refs kept per task or result (one DOT-3 + one DOT-6 in practice) */
#define CJ_TASK_TOMBSTONE_SECS 1800
#define CJ_TASK_MAX_TOMBSTONES 64   /* finished tasks kept at most (newest by finishing order): a
                                     * few per worker answer late messages; a small table fills
                                     * early, so RSS is flat after the first rounds */
#define CJ_TASK_FULL_TOMBSTONES 16  /* of those, the newest keep headers and refs */
#define CJ_TASK_STR_MAX       256

enum cj_task_state {
    CJ_TASK_RECEIVED,     /* from the server, not yet handed to a worker */
    CJ_TASK_DELIVERING,   /* task_ready sent; the worker is downloading */
    CJ_TASK_ACCEPTED,     /* task_accepted: the worker trains */
    CJ_TASK_RESULT_IN,    /* result_ready accepted */
    CJ_TASK_CHECKING,     /* __task_check__ in progress */
    CJ_TASK_SUBMITTING,   /* submit_update sent; the server downloads the result */
    CJ_TASK_SUBMITTED,    /* submit_update answered ok; waiting for the worker to settle */
    CJ_TASK_DONE,         /* settled (or nothing to settle) */
    CJ_TASK_FAILED,       /* reported failed upstream, or dropped with a reason */
};

struct cj_ref {
    int dot;                           /* 3 numpy, 6 torch */
    char fqcn[CJ_TASK_STR_MAX];        /* source cell */
    char ref_id[64];
    uint32_t items;
    int state;                         /* enum cj_ref_state */
};

enum cj_ref_state { CJ_REF_PENDING, CJ_REF_COMPLETED, CJ_REF_FAILED, CJ_REF_TIMED_OUT };

struct cj_task_body;
struct cj_task_table;

struct cj_task {
    char id[CJ_TASK_ID_LEN + 1];       /* local id given to the worker */
    char server_id[CJ_TASK_STR_MAX];   /* the server's __task_id__ */
    char name[CJ_TASK_STR_MAX];        /* task_name */
    char worker[CJ_TASK_STR_MAX];      /* worker FQCN ("" until delivered) */
    uint8_t *headers;                  /* raw copy of the task's __headers__ map (owned); NULL once compacted */
    size_t headers_len;
    struct cj_ref *refs;               /* CJ_TASK_MAX_REFS slots in the refs block; NULL once compacted */
    size_t n_refs;
    struct cj_ref *result_refs;        /* likewise */
    size_t n_result_refs;
    enum cj_task_state state;
    char why[256];                     /* failure reason */
    double created, changed;           /* cj_now() seconds (monotonic) */
    struct cj_task *next;
    /* private to task.c */
    struct cj_task_table *tt;
    struct cj_task_body *body;         /* the refs block (one size), NULL once compacted */
    uint64_t finished_seq;             /* finishing order, 0 while in flight */
    unsigned pins;                     /* cj_task_pin: never compacted or dropped while > 0 */
};

struct cj_task_table;

struct cj_task_table *cj_task_table_new(void);
void cj_task_table_free(struct cj_task_table *tt);

/* Creates a task from a get_task reply payload (reads headers and refs; copies
 * only the __headers__ map).  NULL with why filled when the payload is not a task
 * (not a valid Shareable, no task_name, a special task name, no __task_id__) or
 * repeats a server task id still in flight.  A task whose refs cannot be passed
 * through (a bad ref datum, more than CJ_TASK_MAX_REFS) is added in state
 * CJ_TASK_FAILED with why set, so the caller reports it upstream instead of
 * dropping it. */
struct cj_task *cj_task_add(struct cj_task_table *tt, const uint8_t *payload, size_t len, char *why, size_t whysz);

struct cj_task *cj_task_find(struct cj_task_table *tt, const char *local_id);
struct cj_task *cj_task_find_server(struct cj_task_table *tt, const char *server_id);

/* A task becoming finished (DONE or FAILED) may drop or compact OLDER
 * tombstones (never t itself): do not keep pointers to finished tasks across
 * these calls — look them up again by id. */
void cj_task_set_state(struct cj_task *t, enum cj_task_state s);

/* A holder that keeps t across state changes (the upstream's submission or
 * failure report, retried for a while) pins it: a pinned tombstone is neither
 * compacted nor dropped.  Every pin is matched by one unpin. */
void cj_task_pin(struct cj_task *t);
void cj_task_unpin(struct cj_task *t);
void cj_task_fail(struct cj_task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Drops finished tasks older than the tombstone TTL, and the oldest finished
 * beyond CJ_TASK_MAX_TOMBSTONES (also done whenever a task finishes). */
void cj_task_table_expire(struct cj_task_table *tt, double now);

/* Iteration for show tasks / show refs (in arrival order). */
struct cj_task *cj_task_first(struct cj_task_table *tt);
size_t cj_task_count(const struct cj_task_table *tt, bool in_flight_only);

const char *cj_task_state_name(enum cj_task_state s);
const char *cj_ref_state_name(int s);

/* Records the DOT 3/6 refs of a result_ready payload in t->result_refs (items
 * counted from the result Shareable's ref wrappers).  -1 on a compacted tombstone. */
int cj_task_set_result_refs(struct cj_task *t, const uint8_t *result, size_t len, char *why, size_t whysz);

/* "3:server.job-7f3a/<ref_id>(2 items), ..." or "none", for log lines.  Returns out. */
const char *cj_task_refs_text(const struct cj_ref *refs, size_t n, char *out, size_t outsz);

#endif
