/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c — cjrelayd's shell around the data path (see daemon.h). */
#include "ops/daemon.h"
#include "ops/daemon_int.h"

#include <errno.h>
#include <malloc.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/commands.h"
#include "ops/jobs.h"
#include "ops/metricshttp.h"
#include "ops/notify.h"
#include "ops/out.h"
#include "ops/statreg.h"
#include "ops/status.h"
#include "util/clock.h"
#include "util/account.h"
#include "util/log.h"
#include "util/version.h"

#define STATUS_LINE_SECS 5

/* ---- helpers ---------------------------------------------------------------- */

double cj_daemon_uptime(const struct cj_daemon *d)
{
    return cj_now() - d->started;
}

/* Resident set size from /proc (an in-memory file: reading it does not block). */
unsigned long long cj_daemon_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    return rss * (unsigned long long)sysconf(_SC_PAGESIZE);
}

const char *cj_daemon_state_name(const struct cj_daemon *d)
{
    if (d->state == RUN_DRAINING) return "draining";
    if (d->state == RUN_STOPPED) return "stopped";
    return d->paused ? "paused" : "running";
}

/* The one job show and STATUS= speak of when none is named: the INI's, or
 * the only one in the table; NULL when there are several (or none). */
struct cj_job *cj_daemon_sole_job(struct cj_daemon *d)
{
    return d->ini ? d->ini : cj_jobs_count(d->jobs) == 1 ? cj_jobs_at(d->jobs, 0) : NULL;
}

/* Fields summed over every job in the table: one reading of each job's sources. */
static void stat_totals(struct cj_daemon *d, const char *const *names, unsigned long long *out, size_t n)
{
    const struct cj_stat_field *f[8];
    for (size_t k = 0; k < n; k++) {
        f[k] = cj_stat_find(names[k]);
        out[k] = 0;
    }
    for (size_t i = 0; i < cj_jobs_count(d->jobs); i++) {
        struct cj_stat_sources s = {0};
        cj_job_stat_sources(cj_jobs_at(d->jobs, i), &s);
        for (size_t k = 0; k < n; k++)
            if (f[k]) out[k] += cj_stat_value(f[k], &s);
    }
}

size_t cj_daemon_workers(struct cj_daemon *d)
{
    size_t n = 0;
    for (size_t i = 0; i < cj_jobs_count(d->jobs); i++) n += cj_job_workers(cj_jobs_at(d->jobs, i));
    return n;
}

static void send_status_line(struct cj_daemon *d)
{
    char line[256], head[160];
    if (d->ini) snprintf(head, sizeof head, "%s %s; upstream %s", cj_job_fqcn(d->ini), cj_daemon_state_name(d),
                         cj_job_upstream_state(d->ini));
    else snprintf(head, sizeof head, "%s %s; jobs %zu", d->cfg.relay.site, cj_daemon_state_name(d), cj_jobs_live(d->jobs));
    static const char *const names[] = {"tasks_in", "tasks_out", "msgs_up", "msgs_down"};
    unsigned long long v[4];
    stat_totals(d, names, v, 4);
    snprintf(line, sizeof line, "%s; workers %zu; tasks in %llu out %llu; relayed %llu msgs", head, cj_daemon_workers(d),
             v[0], v[1], v[2] + v[3]);
    cj_notify_status(line);
}

/* ---- stopping ------------------------------------------------------------------ */

void cj_daemon_stop_now(struct cj_daemon *d, const char *why)
{
    if (d->state != RUN_STOPPED) cj_log_info("stopping now (%s)", why);
    if (d->jobs) cj_jobs_stop_all(d->jobs, why);   /* harmless after a drain: nothing left to stop */
    d->state = RUN_STOPPED;
    cj_notify_stopping();
    event_base_loopexit(d->base, NULL);
}

/* The end of a drain (or of the run) stops the loop from a timer, so that the
 * status answer that asked for it is sent first. */
static void on_drain_check(evutil_socket_t fd, short what, void *arg)
{
    struct cj_daemon *d = arg;
    cj_daemon_stop_now(d, "drained");
}

/* A timer, so the answer to a status command in progress still goes out. */
static void stop_soon(struct cj_daemon *d)
{
    struct timeval soon = {0, 50 * 1000};
    evtimer_add(d->drain_timer, &soon);
}

void cj_daemon_drain(struct cj_daemon *d, const char *why)
{
    if (d->state != RUN_RUNNING) return;
    cj_log_info("draining (%s): no new tasks; in-flight work finishes, then exit", why);
    d->state = RUN_DRAINING;
    cj_notify_stopping();
    if (cj_jobs_live(d->jobs) == 0) stop_soon(d);
    else cj_jobs_drain_all(d->jobs, why);   /* each ends through on_job_ended */
}

/* A job is over and its workers have stopped.  The INI's job ends the daemon
 * as [relay] on_end_run says (and a fatal error with exit 2); the others end
 * alone, the daemon stays, unless it is draining and this was the last. */
static void on_job_ended(void *ctx, struct cj_job *j)
{
    struct cj_daemon *d = ctx;
    if (j != d->ini) {
        if (d->state == RUN_DRAINING && cj_jobs_live(d->jobs) == 0) stop_soon(d);
        return;
    }
    if (cj_job_outcome(j) == CJ_JOB_EXECUTION_ERROR || cj_job_outcome(j) == CJ_JOB_EXCEPTION) {
        cj_log_error("fatal: %s", cj_job_reason(j));
        d->exit_code = CJ_EXIT_FATAL;
        cj_daemon_stop_now(d, cj_job_reason(j));
        return;
    }
    if (d->state == RUN_DRAINING || d->cfg.relay.on_end_run == CJ_END_EXIT) {
        stop_soon(d);
        return;
    }
    cj_log_info("run over (%s); on_end_run = wait: staying up idle", cj_job_reason(j));
}

/* ---- reload ------------------------------------------------------------------- */

static void apply_log_settings(const struct cj_config *cfg)
{
    cj_log_set_level(cfg->log.level);
    cj_log_set_syslog(cfg->log.syslog);
}

/* Returns 0, or -1 with the first problem in why. */
int cj_daemon_reload(struct cj_daemon *d, char *why, size_t whysz)
{
    struct cj_config neu;
    struct cj_problems probs;
    cj_notify_reloading();
    cj_log_info("reloading %s", d->config_path);
    if (cj_config_load(d->config_path, &neu, &probs) != 0) {
        for (int i = 0; i < probs.n; i++) cj_log_error("reload: %s", probs.msg[i]);
        cj_log_error("reload failed: %d problem(s); the running configuration is unchanged",
                     cj_problems_total(&probs));
        snprintf(why, whysz, "reload failed, running configuration kept: %s", probs.n ? probs.msg[0] : "?");
        char st[CJ_PROBLEM_LEN + 32];
        snprintf(st, sizeof st, "reload failed: %s", probs.n ? probs.msg[0] : "?");
        cj_notify_status(st);
        cj_notify_ready();
        return -1;
    }
    struct cj_config_change ch[CJ_CFG_NKEYS];
    int n = cj_config_diff(&d->cfg, &neu, ch, CJ_CFG_NKEYS);
    for (int i = 0; i < n; i++) {
        if (ch[i].reloadable) cj_log_info("reload: %s changed", ch[i].key);
        else cj_log_warning("reload: %s changed but needs a restart; keeping the running value", ch[i].key);
    }
    cj_config_apply_reload(&d->cfg, &neu);
    apply_log_settings(&d->cfg);
    cj_jobs_set_site(d->jobs, &d->cfg);
    if (d->ini) cj_job_reload(d->ini, &d->cfg);   /* jobs started at run time keep their settings */
    cj_log_info("reload done: %d key(s) changed", n);
    cj_notify_ready();
    send_status_line(d);
    return 0;
}

/* ---- signals and timers --------------------------------------------------------- */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct cj_daemon *d = arg;
    char why[32];
    snprintf(why, sizeof why, "%s", strsignal((int)sig));
    if (sig == SIGHUP) {
        char msg[CJ_PROBLEM_LEN + 64];
        cj_daemon_reload(d, msg, sizeof msg);
    } else if (sig == SIGQUIT) {
        cj_daemon_stop_now(d, why);
    } else if (d->state == RUN_RUNNING) {
        cj_daemon_drain(d, why);
    } else {
        cj_daemon_stop_now(d, "second stop signal");
    }
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    cj_notify_watchdog();
}

/* Give freed heap pages back to the kernel once a second.  Bulk traffic
 * (1 MiB chunks of many sizes, freed in another order than allocated) leaves
 * glibc's heap fragmented: tens of MiB free but not returnable from the top,
 * so RSS would stay at its high-water mark long after the bytes are gone.
 * malloc_trim(0) releases the free pages anywhere in the heap (madvise) and
 * costs well under a millisecond for a heap of this size. */
static void on_trim_timer(evutil_socket_t fd, short what, void *arg)
{
    malloc_trim(0);
}

static void on_status_timer(evutil_socket_t fd, short what, void *arg)
{
    send_status_line(arg);
}

static int add_signal(struct cj_daemon *d, struct event **ev, int sig)
{
    *ev = evsignal_new(d->base, sig, on_signal, d);
    return *ev && evsignal_add(*ev, NULL) == 0 ? 0 : -1;
}

static int setup_events(struct cj_daemon *d, struct cj_err *err)
{
    if (add_signal(d, &d->sig_hup, SIGHUP) || add_signal(d, &d->sig_term, SIGTERM) ||
        add_signal(d, &d->sig_int, SIGINT) || add_signal(d, &d->sig_quit, SIGQUIT))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot install signal events");
    d->drain_timer = evtimer_new(d->base, on_drain_check, d);
    d->status_timer = event_new(d->base, -1, EV_PERSIST, on_status_timer, d);
    struct timeval st = {STATUS_LINE_SECS, 0};
    d->trim_timer = event_new(d->base, -1, EV_PERSIST, on_trim_timer, d);
    struct timeval one = {1, 0};
    if (!d->drain_timer || !d->status_timer || event_add(d->status_timer, &st) != 0 || !d->trim_timer ||
        event_add(d->trim_timer, &one) != 0)
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot create timers");
    uint64_t wd = cj_notify_watchdog_usec();
    if (wd) {
        d->watchdog_timer = event_new(d->base, -1, EV_PERSIST, on_watchdog, d);
        struct timeval half = {(time_t)(wd / 2 / 1000000), (suseconds_t)(wd / 2 % 1000000)};
        if (!d->watchdog_timer || event_add(d->watchdog_timer, &half) != 0)
            return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the watchdog timer");
    }
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------ */

/* [status] socket_group: the socket's group, so its members may read with
 * socket_mode's group bits (changes stay root's and the daemon's). */
static int give_status_socket(const struct cj_config *cfg, struct cj_err *err)
{
    gid_t gid;
    char why[300];
    if (!cfg->status.socket_group[0]) return 0;
    if (cj_group_resolve(cfg->status.socket_group, &gid, why, sizeof why) != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "[status] socket_%s", why);
    if (chown(cfg->status.socket, (uid_t)-1, gid) != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot give the status socket %s to group %s: %s", cfg->status.socket,
                       cfg->status.socket_group, strerror(errno));
    return 0;
}

/* [status] admin_group: its members are admin of the status socket too. */
static int set_admin_group(struct cj_status *st, const struct cj_config *cfg, struct cj_err *err)
{
    gid_t gid;
    char why[300];
    if (!cfg->status.admin_group[0]) return 0;
    if (cj_group_resolve(cfg->status.admin_group, &gid, why, sizeof why) != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "[status] admin_%s", why);
    cj_status_set_admin_group(st, gid);
    return 0;
}

struct cj_daemon *cj_daemon_new(const char *config_path, const struct cj_config *cfg, struct cj_err *err)
{
    struct cj_daemon *d = calloc(1, sizeof *d);
    if (!d) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    snprintf(d->config_path, sizeof d->config_path, "%s", config_path);
    d->cfg = *cfg;
    d->started = cj_now();
    apply_log_settings(&d->cfg);
    signal(SIGPIPE, SIG_IGN);
    cj_notify_init();
    d->base = event_base_new();
    if (!d->base) { cj_fail(err, CJ_E_NOMEM, 0, "event_base_new failed"); free(d); return NULL; }
    if (setup_events(d, err) != 0) { cj_daemon_free(d); return NULL; }
    struct cj_status_ops ops;
    cj_control_ops(d, &ops);
    d->status = cj_status_new(d->base, d->cfg.status.socket, (mode_t)d->cfg.status.socket_mode, &ops, err);
    if (d->status && (give_status_socket(&d->cfg, err) != 0 || set_admin_group(d->status, &d->cfg, err) != 0 ||
                      (d->cfg.metrics.listen.kind &&
                       !(d->metrics = cj_metrics_http_new(d->base, &d->cfg.metrics.listen, cj_control_metrics, d, err))))) {
        cj_daemon_free(d);
        return NULL;
    }
    struct cj_jobs_cbs cbs = {.ctx = d, .ended = on_job_ended};
    if (!d->status || !(d->jobs = cj_jobs_new(d->base, &d->cfg, &cbs, err)) ||
        (d->cfg.relay.job_id[0] && !(d->ini = cj_jobs_start_config(d->jobs, err)))) {
        cj_daemon_free(d);
        return NULL;
    }
    return d;
}

int cj_daemon_run(struct cj_daemon *d)
{
    if (d->ini)
        cj_log_info("cjrelayd %s started as %s (pid %d, %s mode), status socket %s", CJRELAY_VERSION,
                    cj_job_fqcn(d->ini), (int)getpid(), cj_job_mode(d->ini), d->cfg.status.socket);
    else
        cj_log_info("cjrelayd %s started for site %s (pid %d), no job yet: waiting for job start on %s",
                    CJRELAY_VERSION, d->cfg.relay.site, (int)getpid(), d->cfg.status.socket);
    cj_notify_ready();
    send_status_line(d);
    event_base_dispatch(d->base);
    cj_log_info("stopped (exit %d)", d->exit_code);
    return d->exit_code;
}

void cj_daemon_free(struct cj_daemon *d)
{
    if (!d) return;
    cj_status_free(d->status);
    cj_metrics_http_free(d->metrics);
    cj_jobs_free(d->jobs);
    struct event *evs[] = {d->sig_hup, d->sig_term, d->sig_int, d->sig_quit,
                           d->watchdog_timer, d->status_timer, d->drain_timer, d->trim_timer};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) event_free(evs[i]);
    if (d->base) event_base_free(d->base);
    free(d);
}
