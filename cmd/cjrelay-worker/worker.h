/* SPDX-License-Identifier: Apache-2.0 */
/* worker.h — cjrelay-worker, the reference Client API trainer (doc/design.md
 * "Reference worker", doc/protocol/fl-protocols.md §7-§8, doc/protocol/download.md).
 *
 * One process, one event loop, one link to the relay, one stream endpoint:
 *
 *   bootstrap file -> link to connect_url as trainer_fqcn -> client_api.hello
 *   (proof = launch token; retried every 1 s for the connect window) ->
 *   hello_accepted checked as the stock trainer does -> session_ready (same
 *   retries) -> heartbeats every heartbeat_interval -> then, per task:
 *
 *   task_ready (a request from the relay) -> download the model's ref from its
 *   source through the relay -> +1.0f on every float32 element -> reply
 *   task_accepted (only now, like the stock trainer) -> serve the result as a
 *   producer ref of our own (1 receiver) -> result_ready (cn__pass_through) ->
 *   result_accepted -> the server downloads and confirms the ref ->
 *   result_source_settled -> client_api.log "loss" -> next task.
 *
 *   client_api.abort -> exit 1; client_api.shutdown -> reply
 *   {result_source_live} and exit 0 once the result source is not live.
 *
 * Only the relay (cj_fqcn) may talk to us on channel client_api; anything
 * from another origin is refused (cell rc invalid_request) and logged.
 *
 * Memory: while a task runs the worker holds the result items (the model's
 * size) plus the one task item being transformed (twice, while it is made
 * contiguous; items_npz_write needs one more copy of it); task items are
 * dropped as soon as their result item exists, and everything is freed (and
 * given back to the system) between tasks.  An inline model (tensors inside
 * the task) is held whole while its result items are written.
 *
 * Exit codes: see WK_EXIT_* below.
 *
 * Direct mode (--direct URL, for benchmarks): no relay and no session; the
 * worker connects to the server itself as the cell <site>.<job>, asks
 * server.<job> for one task (__sync_runner__, get_task), turns it into the
 * task_ready a relay would have sent (cj_splice_task_ready) and runs the very
 * same download and transform (task.c), timed the same way; then it prints
 * one DIRECT line on stdout and exits 0, without sending a result.  The URL
 * may use any of FLARE's schemes; the TLS ones (stcp, https, grpcs) take the
 * site's certificates from --tls-dir and connect with mutual TLS, the context
 * and the link made as the relay's upstream makes them (net/tls.h, net/link.h).
 *
 * What differs between the two modes is one struct wk_mode, chosen at start:
 * the launched mode's (session.c, and task.c's result) and direct mode's
 * (direct.c).  The rest of the worker calls it instead of asking which mode
 * it is in.
 *
 * Files: main.c (table of contents, command line), run.c (event loop,
 * timers, signals, exit), conn.c (link, stream endpoint I/O), session.c
 * (the launched mode: handshake, heartbeats, watchdogs, abort, shutdown, log),
 * task.c (task_ready, download, transform, result, settle), direct.c (direct
 * mode). */
#ifndef CJ_WORKER_H
#define CJ_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <openssl/ssl.h>

#include "fl/bootstrap.h"
#include "fl/capi.h"
#include "wire/fqcn.h"

struct cj_link;
struct evbuffer;
struct cj_stream_ep;
struct cj_stream_blob;
struct cj_stream_reply;
struct cj_stream_reqctx;
struct cj_dl_producer;
struct wk_task;
struct wk;

/* A task whose download and transform are over (for the mode's task_done). */
struct wk_task_end {
    const char *id;                      /* valid during the call only */
    int64_t round;
    uint64_t bytes;                      /* the model's bytes in */
    double secs;                         /* task in -> model transformed */
};

/* The worker's mode: launched by a relay (wk_launched_mode) or direct
 * (wk_direct_mode, benchmarks).  Set once at start. */
struct wk_mode {
    /* Registers the endpoint's handlers at start (NULL: none).  0 or -1. */
    int (*register_handlers)(struct wk *w);
    /* The "starting" log line. */
    void (*log_start)(const struct wk *w);
    /* The link came up (or back). */
    void (*link_up)(struct wk *w, struct cj_link *l);
    /* The link is gone (w->last_error says why); not called while exiting. */
    void (*link_down)(struct wk *w);
    /* The task is done with its model: all in and transformed (end set, why
     * NULL; the task is still w->task), or failed (end NULL, why set; the
     * task was answered task_failed where there is someone to answer, and
     * freed). */
    void (*task_done)(struct wk *w, const struct wk_task_end *end, const char *why);
};

extern const struct wk_mode wk_launched_mode;   /* session.c */
extern const struct wk_mode wk_direct_mode;     /* direct.c */

/* Exit codes. */
#define WK_EXIT_OK 0          /* client_api.shutdown (or launch_once false after the first result) */
#define WK_EXIT_FAIL 1        /* client_api.abort, a signal, a fatal runtime error */
#define WK_EXIT_USAGE 2       /* bad command line, bootstrap missing or refused */
#define WK_EXIT_NO_SESSION 3  /* no session within the connect window: relay unreachable, hello
                                 rejected, hello_accepted refused, session_ready refused */
#define WK_EXIT_RELAY_LOST 4  /* relay pid gone, relay silent past heartbeat_timeout, link lost
                                 and not back within the connect window */

#define WK_CONNECT_WINDOW 30.0   /* s: HELLO / SESSION_READY retried every second this long */
#define WK_RETRY_EVERY 1.0       /* s between connect / hello / session_ready attempts */
#define WK_PID_POLL 0.5          /* s between looks at cj_pid (and the watchdogs) */
#define WK_FLUSH_MAX 2.0         /* s an exiting worker waits for its link to drain */

struct wk_opts {
    char bootstrap[4096];        /* --bootstrap FILE, else $NVFLARE_CLIENT_API_BOOTSTRAP */
    double connect_window;       /* --connect-window SECS (tests), default WK_CONNECT_WINDOW */
    int log_level;               /* --log-level */
    char direct[512];            /* --direct URL: no relay (benchmarks); "" = normal */
    char job_id[128];            /* --job-id (direct mode) */
    char site[128];              /* --site (direct mode, default site-1) */
    char cell[256];              /* --cell FQCN (direct mode, default <site>.<job>) */
    bool raw;                    /* --raw (direct mode): items checked and dropped, no transform */
    char tls_dir[4096];          /* --tls-dir DIR (direct mode, a TLS URL): rootCA.pem, client.crt, client.key */
};

enum wk_phase {
    WK_CONNECTING,     /* no link yet (or being re-established before the session) */
    WK_HELLO,          /* link up, HELLO being sent / retried */
    WK_SESSION_READY,  /* hello_accepted, SESSION_READY being sent / retried */
    WK_READY,          /* session up: heartbeats, tasks */
};

struct wk {
    struct event_base *base;
    struct wk_opts opts;
    struct cj_bootstrap bs;
    struct cj_link *link;
    SSL_CTX *tls;                       /* direct mode over a TLS scheme: the client context; else NULL */
    struct cj_stream_ep *ep;
    struct cj_dl_producer *prod;
    struct cj_capi_msg *m;              /* scratch for decoding (large: kept off the stack) */

    enum wk_phase phase;
    char session_id[CJ_CAPI_ID_MAX + 1];
    char auth_token[CJ_CAPI_TOKEN_MAX + 1];      /* secure mode: delegated by hello_accepted */
    char auth_sig[CJ_CAPI_TOKEN_MAX + 1];
    double hb_interval, hb_timeout;     /* from hello_accepted */
    double started;                     /* monotonic start of the current connect window */
    double last_activity;               /* monotonic time of the last valid relay message */
    double link_lost_at;                /* monotonic; 0 while the link is up */
    char last_error[512];               /* why the last connect / handshake attempt failed */
    bool hs_pending;                    /* a HELLO / SESSION_READY request is out */
    uint64_t hs_req;
    double hs_sent;                     /* monotonic time it went out */
    bool hb_pending;
    uint64_t hb_req;
    bool pid_watch;                     /* cj_pid was visible at start */

    struct event *tick;                 /* every WK_PID_POLL: pid, silence, windows */
    struct event *hb_timer;             /* every heartbeat_interval */
    struct event *retry;                /* one-shot: next connect / handshake attempt */
    struct event *flush;                /* exiting: wait for the link to drain */
    struct event *sig_term, *sig_int;

    bool exiting;
    int exit_code;
    double exit_deadline;
    bool shutdown_asked;                /* client_api.shutdown seen: exit once not live */

    struct wk_task *task;               /* NULL while idle */
    uint64_t tasks_done;

    const struct wk_mode *mode;         /* launched or direct */

    /* direct mode */
    char server[CJ_FQCN_MAX + 1];       /* server.<job> */
    int direct_tries;
};

/* ---- run.c ------------------------------------------------------------------------- */

/* Runs the worker until it exits; returns the exit code. */
int wk_run(const struct wk_opts *o, const struct cj_bootstrap *bs);
/* Arms the one-shot retry timer (replacing an armed one): it reconnects the
 * link, or retries the handshake when the link is up. */
void wk_retry_in(struct wk *w, double secs);
/* Logs why at error (code != 0) or info, then drains the link and leaves the loop. */
void wk_exit(struct wk *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- conn.c ------------------------------------------------------------------------ */

/* The stream endpoint, sending everything over the worker's link.  NULL: no memory. */
struct cj_stream_ep *wk_endpoint_new(struct wk *w);
/* (Re)connects the link now; a failure schedules another attempt. */
void wk_connect(struct wk *w);
/* Copies an evbuffer's bytes into one contiguous block (pullup); "" for empty. */
const uint8_t *wk_bytes(struct evbuffer *b, size_t *n);

/* ---- session.c --------------------------------------------------------------------- */

/* The retry timer fired while the handshake is under way. */
void wk_session_retry(struct wk *w);
/* Every WK_PID_POLL: relay pid, relay silence, connect window. */
void wk_session_tick(struct wk *w);
/* The heartbeat timer (every heartbeat_interval once the session is up). */
void wk_session_hb_cb(evutil_socket_t fd, short what, void *arg);
/* Registers the client_api handlers (abort, shutdown, task_ready via task.c). */
int wk_session_register(struct wk *w);
/* A valid message from the relay arrived. */
void wk_touch(struct wk *w);
/* Is the message from the relay (cn__origin == cj_fqcn)?  If not: logged, and a
 * request is answered with cell rc invalid_request.  Returns true to go on. */
bool wk_from_relay(struct wk *w, struct cj_stream_blob *b, const char *what);
/* Fire-and-forget client_api.log of one scalar metric. */
void wk_log_metric(struct wk *w, const char *key, double value, int64_t step);
/* A task ended (result settled or given up): shut down if asked or not launch_once. */
void wk_session_task_over(struct wk *w);
/* Sends a FOBS request to the relay on channel client_api (delegated auth
 * headers in secure mode, cn__pass_through when asked); sb is consumed.  0 or -1. */
int wk_request(struct wk *w, const char *topic, msgpack_sbuffer *sb, double timeout,
               void (*fn)(void *arg, struct cj_stream_reply *r), void *arg, uint64_t *handle,
               bool pass_through);

/* ---- task.c -------------------------------------------------------------------------- */

/* client_api.task_ready handler (registered by session.c). */
int wk_task_ready(void *arg, struct cj_stream_blob *b);
/* True while our result ref is being served or not yet settled. */
bool wk_task_live(const struct wk *w);
/* Drops the current task (exit paths): cancels the download, removes the ref. */
void wk_task_drop(struct wk *w);
/* The launched mode's task_done: accept the task, serve its result. */
void wk_task_serve_result(struct wk *w, const struct wk_task_end *end, const char *why);
/* Starts a task from a decoded task_ready (m, over the mutable payload p, n):
 * read the model, download and transform it.  req: the request to answer
 * (NULL in direct mode). */
void wk_task_begin(struct wk *w, uint8_t *p, size_t n, const struct cj_capi_msg *m,
                   const struct cj_stream_reqctx *req);

/* ---- direct.c ------------------------------------------------------------------------ */

/* Fills a bootstrap for direct mode (cell <site>.<job> talking to the server at url). */
int wk_direct_bootstrap(const struct wk_opts *o, struct cj_bootstrap *bs);
/* The TLS client context for --tls-dir (mutual TLS, as a provisioned site); NULL
 * when a file is refused (logged, naming it). */
SSL_CTX *wk_direct_tls(const struct wk_opts *o);

#endif
