/* SPDX-License-Identifier: Apache-2.0 */
/* daemon_int.h — the daemon's insides, shared by daemon.c (loop, signals,
 * timers, reload, life cycle) and control.c (its answers to the status
 * commands).  Not for other files. */
#ifndef CJ_OPS_DAEMON_INT_H
#define CJ_OPS_DAEMON_INT_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>

#include "ops/config.h"
#include "ops/jobs.h"
#include "ops/status.h"

enum run_state { RUN_RUNNING, RUN_DRAINING, RUN_STOPPED };

struct cj_daemon {
    struct event_base *base;
    char config_path[CJ_CFG_PATH_MAX];
    struct cj_config cfg;
    struct cj_status *status;
    struct cj_metrics_http *metrics;   /* [metrics] listen, or NULL */
    struct cj_jobs *jobs;         /* every job: the INI's and those started at run time */
    struct cj_job *ini;           /* the job [relay] job_id names, or NULL */
    struct event *sig_hup, *sig_term, *sig_int, *sig_quit;
    struct event *watchdog_timer, *status_timer, *drain_timer, *trim_timer;
    enum run_state state;
    bool paused;
    int exit_code;
    double started;               /* cj_now() at start */
};


double cj_daemon_uptime(const struct cj_daemon *d);
/* Resident set size from /proc (an in-memory file: reading it does not block). */
unsigned long long cj_daemon_rss_bytes(void);
const char *cj_daemon_state_name(const struct cj_daemon *d);
/* The one job show and STATUS= speak of when none is named: the INI's, or
 * the only one in the table; NULL when there are several (or none). */
struct cj_job *cj_daemon_sole_job(struct cj_daemon *d);
/* Workers connected, over every job. */
size_t cj_daemon_workers(struct cj_daemon *d);
/* Every job stops now and the loop ends. */
void cj_daemon_stop_now(struct cj_daemon *d, const char *why);
/* Every job drains; the loop ends when the last has ended. */
void cj_daemon_drain(struct cj_daemon *d, const char *why);
/* Re-reads the configuration file: 0, or -1 with the first problem in why
 * (the running configuration kept). */
int cj_daemon_reload(struct cj_daemon *d, char *why, size_t whysz);

/* The status socket's callbacks (control.c). */
void cj_control_ops(struct cj_daemon *d, struct cj_status_ops *ops);
/* Every job's counters in Prometheus's text format, as show prometheus
 * writes them (a cj_metrics_render_fn; ctx is the daemon). */
int cj_control_metrics(void *ctx, struct evbuffer *out);

#endif
