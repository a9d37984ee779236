/* SPDX-License-Identifier: Apache-2.0 */
/* session_int.h — what the files of the worker sessions share (session.c the
 * session state machine, workerlog.c the workers' LOG data and metrics): the
 * sessions object, the worker record and the helpers both read bodies with.
 * Private to lib/fl/session*.c and workerlog.c; the interface is session.h. */
#ifndef CJ_FL_SESSION_INT_H
#define CJ_FL_SESSION_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "fl/capi.h"
#include "fl/session.h"
#include "fl/srcfail.h"

struct cj_stream_blob;
struct mp_cur;

enum wstate { W_EXPECTED, W_HELLO, W_READY, W_LOST };

struct metric {
    char name[CJ_FL_METRIC_NAME_MAX + 1];
    char value[CJ_FL_METRIC_VALUE_MAX + 1];
    uint64_t seq;                       /* last update, to replace the oldest when full */
};

/* Metrics of workers that are gone, so `show metrics` still has the last values
 * after a run's workers stopped (bounded: the last RETIRED_MAX workers). */
#define RETIRED_MAX 8
struct retired {
    char fqcn[CJ_CAPI_ID_MAX + 1];
    struct metric *metrics;
    size_t n;
};

struct worker {
    struct cj_fl_sessions *s;
    char fqcn[CJ_CAPI_ID_MAX + 1];       /* "" while an any-FQCN record is unbound */
    bool any_fqcn;                       /* launch_token_file record, not bound yet */
    bool from_token_file;                /* bound from such a record: re-armed when lost */
    char token[CJ_CAPI_TOKEN_MAX + 1];   /* launch token: wiped when the record goes */
    enum wstate state;
    char session_id[CJ_CAPI_SESSION_ID_LEN + 1];
    pid_t pid;
    bool link_up, stopping;
    double last_seen;                    /* last valid message, -1 never */
    double expected_at;                  /* when the record was made */
    double idle_since;
    /* the one task this worker holds ("" none), from task_ready to settle/failure */
    char task_id[CJ_TASK_ID_LEN + 1];
    bool task_req_pending;               /* task_ready waiting for its reply */
    uint64_t task_req;
    bool result_accepted;                /* result_ready accepted for task_id */
    bool source_live;                    /* between result_accepted and result_source_settled */
    bool submit_answered, submit_ok;     /* the submit ops' done for task_id */
    /* client_api.shutdown in flight */
    bool shut_pending;
    uint64_t shut_req;
    cj_fl_shutdown_fn shut_fn;
    void *shut_arg;
    uint64_t bytes;
    struct metric *metrics;              /* n_metrics used of cap_metrics (grows on demand) */
    size_t n_metrics, cap_metrics;
    uint64_t metric_seq;
    struct worker *next;
};

struct cj_fl_sessions {
    struct event_base *base;
    struct cj_stream_ep *ep;
    struct cj_task_table *tt;
    struct cj_fl_submit_ops sub;
    char site[CJ_CAPI_ID_MAX + 1];
    char job[CJ_CAPI_ID_MAX + 1];
    char me[2 * CJ_CAPI_ID_MAX + 2];
    double hb_interval, hb_timeout, task_timeout, shutdown_timeout, launch_timeout;
    bool secure;
    char auth_token[CJ_CAPI_TOKEN_MAX + 1];
    char auth_sig[CJ_CAPI_TOKEN_MAX + 1];
    void (*drained)(void *arg);
    void *drained_arg;
    void (*lost)(void *arg, const char *fqcn, const char *why);
    void *lost_arg;
    void (*ready)(void *arg, const char *fqcn);
    void *ready_arg;
    bool draining, drained_fired, closed;
    struct event *tick, *drain_ev;
    struct worker *workers;
    size_t n_workers;
    struct cj_capi_msg *m;               /* scratch for handlers (~25 KB, off the stack) */
    struct cj_fl_sessions_stats st;
    struct retired retired[RETIRED_MAX];   /* ring, oldest replaced */
    size_t retired_next;
    struct cj_fl_srcfail sf;               /* source-failure notices under way */
};

static inline void copy_str(char *dst, size_t sz, const char *src)
{
    snprintf(dst, sz, "%s", src ? src : "");
}

/* session.c */
const uint8_t *cj_fl_sess_blob_bytes(struct cj_stream_blob *b, size_t *n);
int cj_fl_sess_open_main(const uint8_t *p, size_t n, struct mp_cur *c);
bool cj_fl_sess_body_str(const uint8_t *p, size_t n, const char *key, char *buf, size_t sz);
struct worker *cj_fl_sess_session_of(struct cj_fl_sessions *s, const char *origin, const struct cj_capi_msg *m,
                                     char *reason, size_t reasonsz);

/* workerlog.c */
int cj_fl_workerlog_on_log(void *arg, struct cj_stream_blob *b);   /* the client_api LOG handler */
void cj_fl_workerlog_retire(struct cj_fl_sessions *s, struct worker *w);

#endif
