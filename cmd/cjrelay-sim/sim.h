/* SPDX-License-Identifier: Apache-2.0 */
/* sim.h — cjrelay-sim, the upstream FL server simulator (doc/interface.md).
 *
 * One process plays the server root cell `server` (it answers the relay's
 * HELLO with READY as "server") and the job cell `server.<job>` (doc/protocol/cellnet.md
 * §6 "A simulator ..."), which consumes what is addressed to it.
 *
 * Transport tests (sim.c):
 *   direct  task/ping            -> reply ok, payload "pong ..." with counters
 *   direct  cellnet.channel/bye  -> reply ok
 *   stream  test/echo  (request) -> return_only reply with the same blob
 *   stream  test/blob  (request) -> payload "N": reply with an N-byte pattern
 *                                   blob (pattern.h), built from references to
 *                                   one static buffer, so 1 GiB costs nothing
 *
 * FL server (fl.c; doc/protocol/fl-protocols.md §2-§4, doc/protocol/download.md):
 *   aux_communication/__sync_runner__   -> __rc__ OK
 *   aux_communication/__job_heartbeat__ -> counted (fire-and-forget)
 *   aux_communication/__task_check__    -> OK for a task awaiting its result, else TASK_UNKNOWN
 *   server_command/get_task             -> a round's task (DXO, tensors as a download ref
 *                                          served by this cell), __try_again__ while the
 *                                          site has a task out, __end_run__ after --rounds
 *   server_command/submit_update        -> downloads the result's ref from its FQCN,
 *                                          checks every element == task + 1.0f, replies ok
 *   download_service__/download_service__download -> the producer (lib/dl/producer.h)
 *   download_service__/download_service__source_failure -> from the source's FQCN parent:
 *                                          ok, tombstones, fails the active result download
 *                                          at once; from anyone else invalid_request
 * Tensors and items: model.c (doc/design.md "Conventions").
 *
 * It talks to links and a stream endpoint directly: the router's policy is
 * the relay's, not a server's.
 *
 * Several jobs at once (--job-id J1,J2,...): one struct sim_job each, the cells
 * server.<job> on the one listener, each with its own rounds, ending on its
 * own; `server` is answered by the first job's endpoint.
 *
 * The client parent (--parent, cp.c): the cell <site> on a second, clear TCP
 * listener for the jobs' cells <site>.<job> as its children (doc/protocol/site.md §3).
 *
 * Files: main.c (entry), opts.c (command line), sim.c (listener, links,
 * dispatch, transport handlers, the end of each job), fl.c (the FL server's
 * rounds), verify.c (a result checked element by element), srcfail.c
 * (source-failure notices and tombstones), fl_int.h (what those three share),
 * cp.c (--parent), cpmsg.c/.h (the parent <-> job messages, shared with
 * drive.c), drive.c (--drive), model.c/.h (tensors, items, verification),
 * pattern.h and hdrline.h (shared with the test peer). */
#ifndef CJ_SIM_SIM_H
#define CJ_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "net/addr.h"
#include "net/link.h"
#include "net/tls.h"
#include "stream/stream.h"
#include "util/err.h"
#include "wire/fqcn.h"

#define SIM_PATH_MAX 4096
#define SIM_MAX_LINKS 256
#define SIM_MAX_JOBS 16                  /* --job-id J1,J2,...: jobs served at once */
#define SIM_JOB_MAX 128                  /* bytes of a job id, NUL included */
#define SIM_MAX_TRIGGERS 16              /* --abort-job / --abort-task given at most this often */

/* --abort-job J@R / --abort-task J@R: a client_command sent by the parent cell
 * when round R's task of job J has gone out (cp.c). */
struct sim_trigger {
    char job[SIM_JOB_MAX];
    long round;
};

struct sim_opts {
    char listen[512];            /* --listen tcp://HOST:PORT | stcp://HOST:PORT (port 0: any) */
    char tls_dir[SIM_PATH_MAX];  /* --tls-dir: rootCA.pem server.crt server.key; client certs required */
    char job_id[SIM_JOB_MAX];    /* the first --job-id (the one job of --drive) */
    char job_ids[SIM_MAX_JOBS][SIM_JOB_MAX]; /* every --job-id (J1,J2 or repeated), in order */
    size_t n_jobs;
    char log_headers[SIM_PATH_MAX]; /* --log-headers FILE: one key=value line per received request */
    uint64_t window;             /* --window SIZE: stream window of the replies (sm__ws), default 64M */
    double heartbeat;            /* --heartbeat SECS: PING a client after this long idle; 0 = never */
    int log_level;               /* --log-level error|warning|info|debug */

    /* FL server */
    long rounds, tensors;        /* --rounds (3), --tensors (8) */
    int64_t model_size;          /* --model-size (64M), split evenly over the tensors */
    char format[32];             /* --format safetensors (DOT 6, default) | numpy (DOT 3) */
    bool isolate, inline_tensors;
    bool prebuild;                 /* --prebuild: a task's items built before it is sent */
    char download_log[SIM_PATH_MAX];
    double wait_time;            /* --wait-time: __wait_time__ of tasks and __try_again__ (0.5) */
    double task_timeout;         /* --task-timeout: a task without a result this long fails (0: never) */
    long max_failures;           /* --max-failures: failed rounds tolerated (re-issued) before SIM FAIL (3) */
    double fetch_timeout;        /* --fetch-timeout: per-request timeout of result downloads (60) */
    bool self_test;              /* --self-test: check the item writers and exit */

    /* --parent URL: also be the site's client parent cell <site> (cp.c) */
    char parent[512];            /* --parent tcp://HOST:PORT (port 0: any, printed as SIM PARENT) */
    char site[SIM_JOB_MAX];      /* --site NAME (default site-1) */
    char job_status_log[SIM_PATH_MAX]; /* --job-status-log FILE: "<job_id> <status> <from FQCN>" lines */
    struct sim_trigger abort_job[SIM_MAX_TRIGGERS], abort_task[SIM_MAX_TRIGGERS];
    size_t n_abort_job, n_abort_task;
    struct sim_trigger vanish_job[SIM_MAX_TRIGGERS]; /* --vanish-job J@R: the job cell disappears */
    size_t n_vanish_job;
    long sync_silent;            /* --sync-silent N: the first N __sync_runner__ go unanswered (0) */
    long stall_download_at;      /* --stall-download N@SECS: from the Nth download request on ... */
    double stall_download_secs;  /* ... none is answered for SECS (0: no stall) */

    /* --drive URL: be a stand-in site (relay + worker) against a simulator (drive.c) */
    char drive[512];
    char drive_as[CJ_FQCN_MAX + 1]; /* --drive-as FQCN (default site-1.<job>) */
    long drive_fail;             /* --drive-fail R: an EXECUTION_EXCEPTION result for round R's first task */
    long drive_corrupt;          /* --drive-corrupt R: one wrong element in round R's result */
    long drive_source_failure;   /* --drive-source-failure R: round R's result source "dies" (drive.c) */
    char drive_parent[512];      /* --drive-parent URL: also connect to the client parent (drive.c) */
};

struct sim_fl;
struct sim_cp;
struct sim;

/* One job: the cell server.<job>, its stream endpoint and its FL server
 * (fl.c).  Each job has its own rounds, tasks and verification, and ends on
 * its own. */
struct sim_job {
    struct sim *s;
    size_t index;
    char id[SIM_JOB_MAX];
    char cell[CJ_FQCN_MAX + 1];          /* server.<job>: origin of everything the job cell sends */
    char tag[SIM_JOB_MAX + 8];           /* " job=<id>" in output lines when several jobs run, else "" */
    struct cj_stream_ep *ep;
    struct sim_fl *fl;
    bool ended;                          /* its SIM line is out */
    bool vanished;                       /* --vanish-job: its cell is gone, messages to it are unroutable */
    int code;                            /* 0 ok (verified or aborted as asked), 1 failed */
};

struct sim {
    struct event_base *base;
    const struct sim_opts *o;
    SSL_CTX *tls;
    struct evconnlistener *lev;
    unsigned port;
    struct cj_link_cfg lcfg;
    struct cj_link *links[SIM_MAX_LINKS]; /* every link, any state */
    size_t n_links;
    struct sim_job jobs[SIM_MAX_JOBS];   /* jobs[0] also answers what is addressed to `server` */
    size_t n_jobs, n_ended;
    struct sim_cp *cp;                   /* --parent: the client parent cell (cp.c) */
    unsigned parent_port;                /* its listener's port */
    uint8_t *pattern;                    /* SIM_PATTERN_LEN bytes, referenced by every blob reply */
    FILE *hlog;                          /* --log-headers */
    struct event *sig_term, *sig_int;
    uint64_t served;                     /* requests answered */
    long dl_requests;                    /* download requests seen (--stall-download) */
    double stall_until;                  /* --stall-download: none answered before this; 0 not yet */
    int exit_code;                       /* what sim_run returns */
};

/* Parses argv into o (defaults first).  Returns 0 to run, 1 when --help or
 * --version was printed (exit 0), -1 on a usage error (printed; exit 2). */
int sim_parse_args(int argc, char **argv, struct sim_opts *o);

/* Runs until the FL run ends (0 "SIM OK", 1 "SIM FAIL") or SIGTERM/SIGINT (0,
 * or 1 when an FL run was under way).  2 when the simulator could not start. */
int sim_run(const struct sim_opts *o);

/* --drive: runs the stand-in site until __end_run__ (0), a failure (1) or
 * cannot start (2). */
int sim_drive(const struct sim_opts *o);

/* ---- fl.c ---------------------------------------------------------------------------- */

/* Registers the FL handlers and the download producer on j->ep. */
int sim_fl_setup(struct sim_job *j, struct cj_err *err);
/* Teardown in two steps around cj_stream_free: stop (needs the endpoint:
 * cancels downloads, drops refs, frees the producer; later callbacks do
 * nothing), then free. */
void sim_fl_stop(struct sim_job *j);
void sim_fl_free(struct sim_job *j);

/* --isolate: true when a download-service message from origin must be refused
 * (the origin is not a relay cell <site>.<job>).  sim.c then diverts it to
 * SIM_FL_ISOLATED_TOPIC, whose handler answers invalid_request. */
bool sim_fl_isolated(const struct sim_job *j, const char *channel, const char *topic, const char *origin);
#define SIM_FL_ISOLATED_TOPIC "download_service__isolated"

/* True between the first task and the end of the run. */
bool sim_fl_in_progress(const struct sim_job *j);
/* "k of N rounds verified" for the signal message. */
void sim_fl_progress(const struct sim_job *j, long *verified, long *rounds);

/* ---- sim.c --------------------------------------------------------------------------- */

/* Ends job j once: with one job "SIM OK <why>" (code 0) or "SIM FAIL <why>" (1);
 * with several "SIM DONE job=<id> <why>" or "SIM FAIL job=<id> <why>", and
 * after the last one "SIM OK jobs=N" or "SIM FAIL jobs=N failed=<ids>".  The
 * event loop stops when every job has ended. */
void sim_finish(struct sim_job *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Ends job j as aborted on purpose (--abort-job): "SIM ABORTED job=<id> <why>"
 * (one job: "SIM OK aborted <why>"); counts as a success. */
void sim_aborted(struct sim_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --vanish-job: once round R's task of job j has gone out, the cell
 * server.<job> disappears as a crashed server job's would: what is sent to it
 * is unroutable from then on ("SIM VANISHED job=<id> round=R"). */
void sim_vanish_check(struct sim_job *j, long round);
/* The job whose cell is fqcn, or whose id is id (NULL: none). */
struct sim_job *sim_job_by_cell(struct sim *s, const char *fqcn);
struct sim_job *sim_job_by_id(struct sim *s, const char *id);
/* Takes m (arrived on l, from the server listener or a child of the parent
 * cell) for the server cells: consumed by `server` / `server.<job>`, else
 * unroutable (sim_unroutable). */
void sim_dispatch(struct sim *s, struct cj_link *l, struct cj_msg *m);
/* A message no cell of this process can take: a RETURN (doc/protocol/cellnet.md §2)
 * on the link it came in on for a request expecting a reply, the forwarder
 * error notice (doc/protocol/streaming.md §6) for an optional stream chunk,
 * else dropped; logged either way.  me: the cell that could not forward it. */
void sim_unroutable(struct cj_link *l, const struct cj_msg *m, const char *me);

/* url (--listen, --parent) as an address; port 0 kept (any free port). */
int sim_parse_listen(const char *url, const char *opt, struct cj_addr *a, struct cj_err *err);
/* A listener on a calling cb(arg) for each connection; *port the port it got
 * (a->text then names it). */
struct evconnlistener *sim_bind(struct sim *s, struct cj_addr *a, evconnlistener_cb cb, void *arg, unsigned *port,
                                struct cj_err *err);

/* ---- cp.c: --parent ------------------------------------------------------------------- */

/* Opens the parent listener and hosts the cell <site>; prints SIM PARENT <port>. */
int sim_cp_start(struct sim *s, struct cj_err *err);
void sim_cp_free(struct sim *s);
/* The link toward dest among the parent's children (NULL: none). */
struct cj_link *sim_cp_route(struct sim *s, const char *dest);
/* Round r's task of job j went out: the --abort-job / --abort-task triggers. */
void sim_cp_task_out(struct sim_job *j, long round);

/* As FLARE does: a newer connection naming a connected peer replaces the
 * older link (closed), among links[0..n) (sim.c's listener and cp.c's). */
void sim_replace_peer(struct cj_link *const *links, size_t n, struct cj_link *l, const char *peer);

/* Accepts fd as a link of the simulator's (TLS when tls), appended to
 * links[0..*n); refused (closed) at SIM_MAX_LINKS.  who names the listener
 * in the log. */
void sim_accept_link(struct event_base *base, evutil_socket_t fd, SSL_CTX *tls, const struct cj_link_cfg *cfg,
                     const struct cj_link_ops *ops, void *ctx, struct cj_link **links, size_t *n, const char *who);

/* Among links[0..n), the up link whose peer is dest or its longest ancestor
 * (among equals the newest), or NULL. */
struct cj_link *sim_best_link(struct cj_link *const *links, size_t n, const char *dest);

#endif
