/* SPDX-License-Identifier: Apache-2.0 */
/* control.c — the daemon's answers to the status commands: one renderer per
 * show target and one handler per command of ops/commands.c, bound by enum
 * (help and show are the status socket's own). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/commands.h"
#include "ops/daemon_int.h"
#include "ops/metricshttp.h"
#include "ops/prom.h"
#include "ops/statreg.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/version.h"

/* A show target's renderer: j is the job named or the sole one (NULL when
 * several run and none is named, or there is none). */
typedef int (*show_fn)(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz);

/* The server link's last failure, when, and the next attempt: what an
 * operator asks first of an upstream in back-off. */
static void out_time(struct cj_out *o, const char *key, time_t at)
{
    char when[32];
    cj_out_str(o, key, cj_utc_text(at, when, sizeof when));
}

static void show_upstream_failure(const struct cj_job *j, struct cj_out *o)
{
    struct cj_outlink_status st = {.last_error = ""};
    if (j) cj_job_upstream_status(j, &st);
    cj_out_str(o, "upstream_last_error", st.last_error);
    out_time(o, "upstream_last_error_at", st.last_error_at);
    cj_out_u64(o, "upstream_attempts", (uint64_t)st.attempts);
    cj_out_dbl(o, "upstream_retry_in", st.retry_in);
}

/* The launched workers' last failure: a command that cannot run shows here
 * and in show workers, not only in the log. */
static void show_workers_failure(const struct cj_job *j, struct cj_out *o)
{
    struct cj_workers_failure wf = {.last_error = "", .relaunch_in = -1};
    if (j) cj_job_workers_failure(j, &wf);
    cj_out_str(o, "workers_last_error", wf.last_error);
    out_time(o, "workers_last_error_at", wf.last_error_at);
    cj_out_u64(o, "workers_failures", wf.failures);
    cj_out_dbl(o, "workers_relaunch_in", wf.relaunch_in);
}

static void show_spool_failure(const struct cj_job *j, struct cj_out *o)
{
    time_t at = 0;
    cj_out_str(o, "spool_last_error", j ? cj_job_spool_last_error(j, &at) : "");
    out_time(o, "spool_last_error_at", at);
}

static int show_info(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    cj_out_str(o, "version", CJRELAY_VERSION);
    cj_out_u64(o, "pid", (uint64_t)getpid());
    cj_out_dbl(o, "uptime", cj_daemon_uptime(d));
    cj_out_str(o, "fqcn", j ? cj_job_fqcn(j) : d->cfg.relay.site);
    cj_out_str(o, "mode", j ? cj_job_mode(j) : d->cfg.relay.mode == CJ_MODE_SPOOL ? "spool" : "pass_through");
    cj_out_str(o, "state", cj_daemon_state_name(d));
    cj_out_str(o, "upstream", j ? cj_job_upstream_state(j) : "");
    cj_out_str(o, "fl", j ? cj_job_fl_state(j) : "");
    char fl_err[320] = "";
    cj_out_str(o, "fl_last_error", j ? cj_job_fl_last_error(j, fl_err, sizeof fl_err) : "");
    cj_out_str(o, "upstream_url", j ? cj_job_upstream_url(j) : "");
    cj_out_str(o, "upstream_peer", j ? cj_job_upstream_peer(j) : "");
    show_upstream_failure(j, o);
    cj_out_u64(o, "workers", j ? cj_job_workers(j) : cj_daemon_workers(d));
    show_workers_failure(j, o);
    show_spool_failure(j, o);
    cj_out_u64(o, "jobs", cj_jobs_live(d->jobs));
    cj_out_u64(o, "rss_bytes", cj_daemon_rss_bytes());
    cj_out_str(o, "config", d->config_path);
    cj_out_str(o, "metrics", d->metrics ? cj_metrics_http_url(d->metrics) : "");
    return 0;
}

/* One reading of the counters of job j, or of every job when j is NULL:
 * *n readings (jobs[i] is the job read into s[i]); NULL out of memory. */
static struct cj_stat_sources *read_stats(struct cj_daemon *d, struct cj_job *j, size_t *n, struct cj_job ***jobs)
{
    *n = j ? 1 : cj_jobs_count(d->jobs);
    struct cj_stat_sources *s = calloc(*n ? *n : 1, sizeof *s);
    *jobs = calloc(*n ? *n : 1, sizeof **jobs);
    if (!s || !*jobs) {
        free(s);
        free(*jobs);
        return NULL;
    }
    for (size_t i = 0; i < *n; i++) {
        (*jobs)[i] = j ? j : cj_jobs_at(d->jobs, i);
        cj_job_stat_sources((*jobs)[i], &s[i]);
    }
    return s;
}

/* One job's counters, or with several jobs and none named every job's summed
 * (labelled by a first field, scope). */
static int show_stats(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    size_t n;
    struct cj_job **jobs;
    struct cj_stat_sources *s = read_stats(d, j, &n, &jobs);
    if (!s) { snprintf(msg, msgsz, "out of memory"); return 500; }
    char scope[64];
    if (!j) snprintf(scope, sizeof scope, "all jobs (%zu)", n);
    if (!j || j != d->ini) cj_out_str(o, "scope", j ? cj_job_id(j) : scope);
    cj_stat_render(s, n, o);
    free(jobs);
    free(s);
    return 0;
}

static int show_config(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    static const struct cj_col cols[] = {{"key", 30}, {"value", 34}, {"default", 34}, {"reloadable", 0}};
    cj_out_table_begin(o, "config", cols, 4);
    struct cj_config_row row;
    const struct cj_config *cfg = j ? cj_job_config(j) : &d->cfg;
    for (size_t i = 0; cj_config_row(cfg, i, &row) == 0; i++) {
        cj_out_row_begin(o);
        cj_out_cell_str(o, row.key);
        cj_out_cell_str(o, row.value);
        cj_out_cell_str(o, row.def);
        cj_out_cell_str(o, row.reloadable ? "yes" : "no");
        cj_out_row_end(o);
    }
    cj_out_table_end(o);
    return 0;
}

/* workers, tasks, refs, metrics: one job's table. */
static int show_job_table(struct cj_daemon *d, struct cj_job *j, enum cj_show what, struct cj_out *o, char *msg,
                          size_t msgsz)
{
    if (!j) {
        snprintf(msg, msgsz, "%zu jobs: name one (show %s job ID)", cj_jobs_count(d->jobs), cj_shows[what].name);
        return 400;
    }
    cj_job_show(j, what, o);
    return 0;
}

static int show_workers(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    return show_job_table(d, j, CJ_SHOW_WORKERS, o, msg, msgsz);
}
static int show_tasks(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    return show_job_table(d, j, CJ_SHOW_TASKS, o, msg, msgsz);
}
static int show_refs(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    return show_job_table(d, j, CJ_SHOW_REFS, o, msg, msgsz);
}
static int show_metrics(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    return show_job_table(d, j, CJ_SHOW_METRICS, o, msg, msgsz);
}

static int show_jobs(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    cj_jobs_show(d->jobs, o);
    return 0;
}

/* The Prometheus exposition of job j, or of every job when j is NULL: the one
 * rendering behind show prometheus and GET /metrics.  0, or -1 out of memory. */
static int render_prometheus(struct cj_daemon *d, struct cj_job *j, struct evbuffer *buf)
{
    size_t n;
    struct cj_job **jobs;
    struct cj_stat_sources *s = read_stats(d, j, &n, &jobs);
    if (!s) return -1;
    struct cj_prom_job *pj = calloc(n ? n : 1, sizeof *pj);
    int rc = pj ? 0 : -1;
    for (size_t i = 0; pj && i < n; i++) pj[i] = (struct cj_prom_job){cj_job_id(jobs[i]), &s[i], cj_job_generation(jobs[i])};
    if (pj) cj_prom_render(buf, pj, n);
    free(pj);
    free(jobs);
    free(s);
    return rc;
}

int cj_control_metrics(void *ctx, struct evbuffer *out)
{
    return render_prometheus(ctx, NULL, out);
}

/* The exposition is its own format: written as it is, whatever json asked. */
static int show_prometheus(struct cj_daemon *d, struct cj_job *j, struct cj_out *o, char *msg, size_t msgsz)
{
    if (render_prometheus(d, j, o->buf) == 0) return 0;
    snprintf(msg, msgsz, "out of memory");
    return 500;
}

/* One renderer per show target of ops/commands.c. */
static const show_fn show_handlers[CJ_SHOW_COUNT] = {
    [CJ_SHOW_INFO] = show_info,       [CJ_SHOW_STATS] = show_stats,     [CJ_SHOW_WORKERS] = show_workers,
    [CJ_SHOW_TASKS] = show_tasks,     [CJ_SHOW_REFS] = show_refs,       [CJ_SHOW_CONFIG] = show_config,
    [CJ_SHOW_METRICS] = show_metrics, [CJ_SHOW_JOBS] = show_jobs,     [CJ_SHOW_PROMETHEUS] = show_prometheus,
};

static int on_show(void *ctx, enum cj_show what, const char *job, struct cj_out *o, char *msg, size_t msgsz)
{
    struct cj_daemon *d = ctx;
    struct cj_job *j = NULL;   /* no job named: the whole daemon, or the sole job (cj_shows[].scope) */
    if (job) j = cj_jobs_find(d->jobs, job);
    else if (cj_shows[what].scope == CJ_SCOPE_SOLE_JOB) j = cj_daemon_sole_job(d);
    if (job && !j) { snprintf(msg, msgsz, "no job '%.64s'", job); return 404; }
    return show_handlers[what](d, j, o, msg, msgsz);
}

static int cmd_pause(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg, size_t msgsz)
{
    if (!d->paused) cj_log_info("paused by the status socket: no new tasks will be pulled");
    d->paused = true;
    for (size_t i = 0; i < cj_jobs_count(d->jobs); i++) cj_job_pause(cj_jobs_at(d->jobs, i));
    return 0;
}

static int cmd_resume(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg, size_t msgsz)
{
    if (d->paused) cj_log_info("resumed by the status socket");
    d->paused = false;
    for (size_t i = 0; i < cj_jobs_count(d->jobs); i++) cj_job_resume(cj_jobs_at(d->jobs, i));
    return 0;
}

static int cmd_reload(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg, size_t msgsz)
{
    return cj_daemon_reload(d, msg, msgsz) == 0 ? 0 : 500;
}

static int cmd_shutdown(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg,
                        size_t msgsz)
{
    const char *arg = nargs ? args[0] : NULL;
    if (arg && strcmp(arg, "now") != 0) {
        char usage[64];
        snprintf(msg, msgsz, "unknown option; usage: %s", cj_cmd_usage(CJ_CMD_SHUTDOWN, false, usage, sizeof usage));
        return 400;
    }
    if (arg) cj_daemon_stop_now(d, "shutdown now on the status socket");
    else cj_daemon_drain(d, "shutdown on the status socket");
    return 0;
}

static int cmd_job_start(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg,
                         size_t msgsz)
{
    if (d->state != RUN_RUNNING) { snprintf(msg, msgsz, "the daemon is %s", cj_daemon_state_name(d)); return 503; }
    const int *fds;
    int nfds = cj_status_call_fds(call, &fds);
    return cj_jobs_start_json(d->jobs, args[0], fds, nfds, msg, msgsz);
}

static int cmd_job_stop(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg,
                        size_t msgsz)
{
    return cj_jobs_stop(d->jobs, args[0], nargs > 1 ? args[1] : NULL, msg, msgsz);
}

static int cmd_job_wait(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg,
                        size_t msgsz)
{
    struct cj_status_wait *w = cj_jobs_find(d->jobs, args[0]) ? cj_status_defer(call) : NULL;
    int rc = cj_jobs_wait(d->jobs, args[0], w, msg, msgsz);
    if (rc != CJ_STATUS_DEFERRED && w) cj_status_answer(w, rc, msg);   /* not kept: answered now */
    else if (rc == 0)   /* no client to answer later: one line after OK */
        for (char *p = msg; *p; p++) if (*p == '\n') *p = ' ';
    return rc != CJ_STATUS_DEFERRED && w ? CJ_STATUS_DEFERRED : rc;
}

/* One handler per command of ops/commands.c but help and show, which the
 * status socket answers itself. */
typedef int (*command_fn)(struct cj_daemon *d, char **args, int nargs, struct cj_status_call *call, char *msg,
                          size_t msgsz);
static const command_fn command_handlers[CJ_CMD_COUNT] = {
    [CJ_CMD_PAUSE] = cmd_pause,         [CJ_CMD_RESUME] = cmd_resume,     [CJ_CMD_RELOAD] = cmd_reload,
    [CJ_CMD_SHUTDOWN] = cmd_shutdown,   [CJ_CMD_JOB_START] = cmd_job_start, [CJ_CMD_JOB_STOP] = cmd_job_stop,
    [CJ_CMD_JOB_WAIT] = cmd_job_wait,
};

static int on_command(void *ctx, enum cj_cmd cmd, char **args, int nargs, struct cj_status_call *call, char *msg,
                      size_t msgsz)
{
    if (!command_handlers[cmd]) {
        snprintf(msg, msgsz, "'%s' has no handler in this daemon", cj_cmds[cmd].name);
        return 500;
    }
    return command_handlers[cmd](ctx, args, nargs, call, msg, msgsz);
}

static void on_cancel(void *ctx, struct cj_status_wait *w)
{
    struct cj_daemon *d = ctx;
    cj_jobs_cancel_wait(d->jobs, w);
}

void cj_control_ops(struct cj_daemon *d, struct cj_status_ops *ops)
{
    *ops = (struct cj_status_ops){.ctx = d, .show = on_show, .command = on_command, .cancel = on_cancel};
}
