/* SPDX-License-Identifier: Apache-2.0 */
/* dialect.h — the FLARE generations a job can run, one row each (releases.md §1).
 *
 *   cellapi  FLARE 2.9 and later (the development tree): ClientAPIExecutor's
 *            client_api.* cell protocol, a bootstrap file (fl/session.h)
 *   pipe     FLARE 2.7.x and 2.8.x: the stock trainer's FlareAgent + CellPipe,
 *            config/client_api_config.json, the pipe messages of TaskExchanger
 *            (fl/pipe.h)
 *
 * A job's generation is fixed when it starts, from its description's
 * flare_version (or [relay] flare_version): cj_fl_dialect_of gives the row,
 * and the rest of the relay only asks the row.  A row says how a worker is
 * launched (a launcher style, fl/launcher.h) and how the worker side is made
 * and driven (a table of operations with the vocabulary of fl/session.h).
 * The task pipeline (fl.h's dispatch and submit ops), the router, the spool
 * and the status code never learn which one a job speaks. */
#ifndef CJ_FL_DIALECT_H
#define CJ_FL_DIALECT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "fl/fl.h"
#include "fl/launcher.h"
#include "fl/session.h"
#include "stream/stream.h"
#include "util/err.h"

struct event_base;
struct cj_stream_ep;
struct cj_router;
struct cj_task_table;

#define CJ_FL_VERSION_MAX 32   /* "2.9.0dev0", "2.8.1" */

/* What the run gives the worker side of any dialect. */
struct cj_fl_workers_cfg {
    struct event_base *base;
    struct cj_stream_ep *ep;            /* the job cell's stream endpoint (<site>.<job>) */
    struct cj_router *router;           /* the job cell's router (a dialect may add a virtual cell) */
    struct cj_task_table *tt;
    const struct cj_fl_submit_ops *submit;
    const struct cj_fl_sessions_cfg *sc;   /* site, job, heartbeats, credentials, callbacks */
    /* The job's own credentials ("NA" or "" when it has none), whatever the
     * upstream's security: a release trainer stamps them on every request. */
    const char *site_token, *site_signature;
    /* The job description's bootstrap keys (as struct cj_fl_launch_info has them):
     * the worker side may read what the trainer was told (the pipe: launch_once). */
    const char *extra;
    int extrac;
};

/* The worker side: each dialect's sessions behind the same operations.  w is
 * what create returned.  The meaning of each is that of the cj_fl_sessions_*
 * function of the same name (fl/session.h). */
struct cj_fl_workers_ops {
    void *(*create)(const struct cj_fl_workers_cfg *c, struct cj_err *err);
    void (*destroy)(void *w);
    void (*dispatch_ops)(void *w, struct cj_fl_dispatch_ops *out);
    int (*expect)(void *w, const char *fqcn, const char *token);
    void (*set_pid)(void *w, const char *fqcn, pid_t pid);
    int (*worker_exited)(void *w, const char *fqcn, const char *why);
    void (*link_up)(void *w, const char *fqcn);
    void (*link_down)(void *w, const char *fqcn, const char *why);
    bool (*in_barrier)(const void *w, const char *fqcn);
    size_t (*busy)(const void *w);
    void (*progress)(void *w, const char *fqcn);
    int (*shutdown)(void *w, const char *fqcn, const char *reason, cj_fl_shutdown_fn fn, void *arg);
    size_t (*workers)(const void *w, cj_fl_worker_fn fn, void *arg);
    size_t (*metrics)(const void *w, cj_fl_metric_fn fn, void *arg);
    void (*get_stats)(const void *w, struct cj_fl_sessions_stats *st);
};

/* What a launch style's config text is made of (the job's own values). */
struct cj_fl_launch_info {
    const char *site, *job_id;
    const char *auth_token, *auth_token_signature;   /* "NA" when none */
    const char *worker_url;        /* the job's worker listener the trainer connects to, port bound */
    const char *server_url;        /* the server: <scheme>://<host:port> */
    const char *server_security;   /* clear, tls, mtls */
    const char *workspace_dir;     /* FLARE's workspace of the job's CP, "" unknown */
    /* The description's bootstrap: n "key" NUL raw-JSON NUL pairs, as
     * struct cj_job_desc keeps them. */
    const char *extra;
    int extrac;
};

struct cj_fl_dialect {
    const char *name;                          /* "cellapi", "pipe" */
    const char *generation;                    /* what status shows: "2.9+", "2.7-2.8" */
    const struct cj_launch_style *launch;      /* how its workers are launched */
    const struct cj_fl_workers_ops *workers;   /* its worker side */
    bool tcp_listener;                         /* its trainers can only reach a tcp:// listener */
    /* The upstream wire of that FLARE (doc/protocol/streaming.md §11): set on the
     * job cell's stream endpoint, and so on its download client and notices. */
    enum cj_stream_wire wire;
    /* Seconds between repeats of STARTED to the client parent until STOPPED; 0 = once
     * per link (a 2.7.2/2.8.x CP records a status only once its own launch
     * bookkeeping exists, and aborts only jobs it saw STARTED: site.md §3.1). */
    double cp_started_repeat;
    /* The text of launch->config_file (malloc'd; holds the token: wipe it), or
     * NULL for a style without one.  0 or -1 with err. */
    int (*launch_config)(const struct cj_fl_launch_info *li, char **text, struct cj_err *err);
    /* Keys of a job description's bootstrap the relay writes itself for this
     * dialect (refused from the description); NULL-ended. */
    const char *const *owned_keys;
};

/* The row for a FLARE version as nvflare.__version__ reports it ("2.7.2",
 * "2.8.1", "2.9.0dev0", "2.10"): major.minor 2.7 or 2.8 -> pipe; 2.9 and later
 * (dev versions included) -> cellapi.  NULL with err for an empty or
 * malformed version or one below 2.7. */
const struct cj_fl_dialect *cj_fl_dialect_of(const char *version, struct cj_err *err);

/* The rows, for documentation and tests: n rows. */
const struct cj_fl_dialect *const *cj_fl_dialects(size_t *n);

#endif
