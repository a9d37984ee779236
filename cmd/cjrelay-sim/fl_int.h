/* SPDX-License-Identifier: Apache-2.0 */
/* fl_int.h — what the files of cjrelay-sim's FL server share: fl.c (the
 * rounds: aux topics, get_task, submit_update), verify.c (a result checked
 * element by element) and srcfail.c (source-failure notices and the
 * tombstones they leave).  Private to those files; the interface is sim.h. */
#ifndef SIM_FL_INT_H
#define SIM_FL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <msgpack.h>

#include "dl/client.h"
#include "dl/lent.h"
#include "dl/producer.h"
#include "payload/dxo.h"
#include "payload/fobs.h"
#include "sim.h"
#include "stream/stream.h"

#define MAX_WAITERS 4               /* submit_update copies answered together */
#define ID_LEN 36

enum tstate { T_SENDING, T_ISSUED, T_VERIFYING, T_DONE, T_FAILED };

struct task {
    struct task *next;
    struct sim_fl *fl;
    char id[ID_LEN + 1];
    long round;
    char site[CJ_FQCN_MAX + 1];          /* the get_task's cn__origin */
    enum tstate state;
    double t0;                           /* get_task reply started */
    uint64_t bytes;                      /* the task's tensor bytes (items, or inline tensors) */
    bool inline_model;
    /* the task's ref */
    char ref_id[CJ_DL_REF_ID_MAX + 1];
    bool ref_live;
    char served_to[512];                 /* receivers that pulled, "a,b"; "" unknown yet */
    /* the result */
    struct cj_dl_fetch *fetch;
    struct cj_stream_reqctx waiters[MAX_WAITERS];
    size_t n_waiters;
    char res_from[CJ_FOBS_FQCN_MAX + 1], res_ref[CJ_FOBS_REF_ID_MAX + 1];
    uint8_t res_dot;
    long *item_tensor;                   /* result item index -> tensor t */
    uint64_t n_items, res_items, res_bytes;
    double t_fetch;
    char fail[384];                      /* a verification failure (fatal) */
    struct event *timeout_ev;
    bool reply_pending;                  /* the get_task reply carrying it is being sent */
    struct cj_dl_lent **built;           /* --prebuild: the items, one per tensor */
};

struct sf_tomb;

struct sim_fl {
    struct sim *s;
    struct sim_job *job;                 /* the job whose rounds these are */
    const struct sim_opts *o;
    struct cj_dl_producer *prod;
    uint8_t dot;
    uint64_t nelem;                      /* elements per tensor */
    unsigned char *round_state;          /* [1..rounds]: 0 to issue, 1 out, 2 verified */
    long verified, failures, issued;
    struct task *tasks;
    FILE *dlog;
    struct event *exit_ev;
    bool end_sent;
    bool closing;                        /* sim_fl_stop ran: callbacks do nothing */
    uint64_t polls, syncs, heartbeats, checks;
    /* source-failure tombstones: a ring in insertion (so expiry) order, allocated at the first notice */
    struct sf_tomb *tombs;
    size_t tomb_head, n_tombs;
    uint64_t sf_accepted, sf_refused;
};

/* A request's payload, read by fl.c: the MAIN body and the Shareable's headers. */
struct req {
    const uint8_t *p;                    /* the whole payload */
    size_t len;
    size_t body_off, body_len;           /* the MAIN body */
    const uint8_t *hdrs;                 /* the Shareable's __headers__ map (NULL: none) */
    size_t hdrs_len;
};

/* fl.c */
/* A payload as one contiguous buffer (NULL when too large or no memory). */
const uint8_t *blob_bytes(struct evbuffer *b, size_t max, size_t *len);
/* Streams sb as a fobs reply to rq (rc NULL = ok). */
int send_reply(struct sim_fl *fl, const struct cj_stream_reqctx *rq, const char *rc, const msgpack_sbuffer *sb,
               cj_stream_done_fn done, void *arg);
/* A round that did not verify: issued again unless too many failed. */
void round_failed(struct task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A round whose result verified: its waiters answered, its lines printed. */
void round_verified(struct task *t);

/* verify.c */
/* The result's DXO: names, DOT, item map; then the download (or inline check).
 * -1 with why: fatal (a wrong result) or not (the round is issued again). */
int start_verification(struct task *t, const struct req *r, char *why, size_t whysz, bool *fatal);
/* The end of a result download (t->fetch already gone): verified, failed
 * (issued again), or fatal (a wrong element). */
void result_done(struct task *t, bool ok, const char *why);

/* srcfail.c */
/* The reason (source, ref) was tombstoned with, or NULL when it is not. */
const char *sf_tombstoned(struct sim_fl *fl, const char *source, const char *ref);
/* The download_service__source_failure handler. */
int on_source_failure(void *arg, struct cj_stream_blob *b);

#endif
