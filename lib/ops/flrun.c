/* SPDX-License-Identifier: Apache-2.0 */
/* flrun.c — the relay's FL run: wiring of task table, upstream loop, worker
 * sessions, launcher and router events (see flrun.h). */
#include "ops/flrun.h"

#include <event2/event.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell/router.h"
#include "dl/producer.h"
#include "dl/spool.h"
#include "dl/spoolio.h"
#include "fl/creds.h"
#include "fl/dialect.h"
#include "fl/launcher.h"
#include "fl/pipe.h"
#include "fl/session.h"
#include "fl/spoolstage.h"
#include "fl/task.h"
#include "fl/upstream.h"
#include "net/link.h"
#include "ops/joblog.h"
#include "util/clock.h"
#include "util/log.h"

#define PROGRESS_TICK_SECS 1
#define WS(f) ((f)->dialect->workers)
#define STOP_POLL_SECS 0.5

struct cj_flrun {
    struct event_base *base;
    struct cj_router *router;
    struct cj_flrun_cbs cbs;
    struct cj_creds creds;
    struct cj_task_table *tasks;
    struct cj_fl_up *up;
    const struct cj_fl_dialect *dialect;    /* the job's FLARE generation (fl/dialect.h) */
    void *sessions;                         /* its worker side, driven through dialect->workers */
    struct cj_launcher *launcher;
    struct cj_fl_dispatch_ops dispatch;     /* the sessions' ops (or the spool stage's), behind trampolines */
    /* spool mode (doc/protocol/download.md §8): disk I/O thread, the relay's producer, the
     * spool store and the stage between the upstream loop and the sessions */
    bool spool_mode;
    struct cj_sio *sio;
    struct cj_dl_producer *prod;
    struct cj_spool *spool;
    struct cj_spool_stage *stage;
    char spool_dir[CJ_CFG_PATH_MAX + CJ_CFG_NAME_MAX + 2];   /* <spool_dir>/<job_id> */
    struct event *tick;                     /* worker-link progress, stop polling */
    bool started;                           /* upstream loop started (first READY) */
    bool ending;                            /* end of run or drain: stopping workers */
    bool secure;                            /* workers get the delegated token */
    bool ended;
    char end_why[256];
    char *pipe_config;                      /* a launch style's config text (holds the token) */
    char runtime_dir[CJ_CFG_PATH_MAX];
    char connect_url[CJ_CFG_PATH_MAX + 16];
    uint64_t *last_bytes;                   /* per worker link index: bytes out at the last tick */
    char site[CJ_CFG_NAME_MAX], job[CJ_CFG_NAME_MAX], project[128];
    struct cj_joblog *joblog;               /* the job's FLARE log files (not owned), NULL none */
};

/* ---- trampolines: the upstream loop calls the sessions through these ---------- */

static size_t tr_idle(void *ctx)
{
    struct cj_flrun *f = ctx;
    return f->ending || !f->dispatch.idle ? 0 : f->dispatch.idle(f->dispatch.ctx);
}

static int tr_deliver(void *ctx, struct cj_task *t, const uint8_t *p, size_t n, char *why, size_t whysz)
{
    struct cj_flrun *f = ctx;
    if (!f->dispatch.deliver) { snprintf(why, whysz, "no worker sessions"); return -1; }
    return f->dispatch.deliver(f->dispatch.ctx, t, p, n, why, whysz);
}

static void tr_end_run(void *ctx)
{
    struct cj_flrun *f = ctx;
    if (f->dispatch.end_run) f->dispatch.end_run(f->dispatch.ctx);
}

/* ---- ending: results settle, then workers stop, then ended() --------------------- */

static void finish_if_stopped(struct cj_flrun *f)
{
    if (f->ended || !f->ending) return;
    if (f->launcher && cj_launcher_running(f->launcher) > 0) return;
    /* spool mode: results the server is still pulling from the relay */
    if (f->stage && cj_spool_stage_busy(f->stage) > 0) return;
    f->ended = true;
    cj_log_info("run over (%s): workers stopped", f->end_why);
    if (f->cbs.ended) f->cbs.ended(f->cbs.ctx, f->end_why);
}

static void shutdown_one(void *arg, const struct cj_fl_worker_info *wi)
{
    struct cj_flrun *f = arg;
    if (wi->fqcn[0] && wi->link_up) WS(f)->shutdown(f->sessions, wi->fqcn, "end of run", NULL, NULL);
}

/* The sessions report no task and no live result source left: SHUTDOWN to each
 * worker, then the launcher's staged SIGTERM/SIGKILL, shutdown_grace apart. */
static void on_drained(void *arg)
{
    struct cj_flrun *f = arg;
    if (!f->ending) return;
    cj_log_info("all in-flight work settled; stopping the workers");
    WS(f)->workers(f->sessions, shutdown_one, f);
    if (f->launcher) cj_launcher_stop_all(f->launcher, false);
    finish_if_stopped(f);
}

static void start_ending(struct cj_flrun *f, const char *why)
{
    if (f->ending) return;
    f->ending = true;
    snprintf(f->end_why, sizeof f->end_why, "%s", why);
    if (f->launcher) cj_launcher_hold(f->launcher);   /* no relaunch while the run ends */
    if (f->up) cj_fl_up_drain(f->up);
    tr_end_run(f);   /* the sessions call on_drained once nothing is in flight */
}

static void on_end_run(void *ctx, const char *why)
{
    struct cj_flrun *f = ctx;
    cj_log_info("end of run from the server: %s", why);
    start_ending(f, why);
}

static void on_fatal(void *ctx, const char *why)
{
    struct cj_flrun *f = ctx;
    cj_log_error("FL loop cannot go on: %s", why);
    if (f->cbs.fatal) f->cbs.fatal(f->cbs.ctx, why);
}

/* ---- launcher callbacks -------------------------------------------------------------- */

static void on_spawn(void *ctx, const char *fqcn, const char *token, pid_t pid)
{
    struct cj_flrun *f = ctx;
    WS(f)->expect(f->sessions, fqcn, token);
    WS(f)->set_pid(f->sessions, fqcn, pid);
}

static void on_exit_cb(void *ctx, const char *fqcn, int status, bool stopping)
{
    struct cj_flrun *f = ctx;
    char why[96];
    if (WIFEXITED(status)) snprintf(why, sizeof why, "process exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(why, sizeof why, "process killed by signal %d", WTERMSIG(status));
    else snprintf(why, sizeof why, "process ended (status 0x%x)", status);
    WS(f)->worker_exited(f->sessions, fqcn, why);
    (void)stopping;         /* a worker that dies while the run ends is not replaced either */
    finish_if_stopped(f);   /* does something only once the run is ending */
}

/* A worker through SESSION_READY: its slot's launch_timeout stops counting. */
static void on_ready(void *arg, const char *fqcn)
{
    struct cj_flrun *f = arg;
    if (f->launcher) cj_launcher_session_ready(f->launcher, fqcn);
}

/* No worker came through within launch_timeout: the launcher holds; the
 * workers still running go, and the owner ends the job. */
static void on_gave_up(void *ctx, const char *why)
{
    struct cj_flrun *f = ctx;
    cj_flrun_stop_now(f);
    if (f->cbs.cannot_launch) f->cbs.cannot_launch(f->cbs.ctx, why);
    else if (f->cbs.fatal) f->cbs.fatal(f->cbs.ctx, why);
}

static bool in_barrier(void *ctx, const char *fqcn)
{
    struct cj_flrun *f = ctx;
    return WS(f)->in_barrier(f->sessions, fqcn);
}

/* A worker the sessions gave up on (silent, hung, SIGSTOPped) may still run:
 * its process is stopped (staged SIGTERM, SIGKILL) and, unless the run is
 * ending, a fresh worker (new FQCN and token) replaces it, as after a crash.
 * Workers the relay did not launch (launch_token_file) are not ours to stop:
 * their token is accepted again from a new process. */
static void on_lost(void *arg, const char *fqcn, const char *why)
{
    struct cj_flrun *f = arg;
    (void)why;
    if (!f->launcher || cj_launcher_pid(f->launcher, fqcn) <= 0) return;
    if (f->ending) cj_launcher_stop(f->launcher, fqcn);
    else cj_launcher_restart(f->launcher, fqcn);
}

/* ---- router events ------------------------------------------------------------------ */

static void ev_worker_up(struct cj_router *r, const char *fqcn, struct cj_link *l, void *ctx)
{
    struct cj_flrun *f = ctx;
    WS(f)->link_up(f->sessions, fqcn);
}

static void ev_worker_down(struct cj_router *r, const char *fqcn, const char *why, void *ctx)
{
    struct cj_flrun *f = ctx;
    WS(f)->link_down(f->sessions, fqcn, why);
}

static void ev_upstream_up(struct cj_router *r, const char *peer, void *ctx)
{
    struct cj_flrun *f = ctx;
    if (f->ending) return;
    if (f->started) {   /* a reconnect */
        cj_fl_up_reconnected(f->up);
        return;
    }
    f->started = true;
    if (f->cbs.started) f->cbs.started(f->cbs.ctx);
    cj_fl_up_start(f->up);
    /* doc/protocol/fl-protocols.md §1: workers are launched once the server side is reachable. */
    if (f->launcher && cj_launcher_start(f->launcher) != 0) cj_log_error("cannot launch the workers");
}

/* Bytes moving on a worker link while its result is submitted are the server
 * downloading it: that progress keeps submit_update's idle timeout alive. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct cj_flrun *f = arg;
    struct cj_link *links[CJ_FL_MAX_WORKERS];
    size_t n = cj_router_children(f->router, links, CJ_FL_MAX_WORKERS);
    for (size_t i = 0; i < n && i < CJ_FL_MAX_WORKERS; i++) {
        uint64_t b = cj_link_counters(links[i])->bytes_out + cj_link_counters(links[i])->bytes_in;
        if (b != f->last_bytes[i]) WS(f)->progress(f->sessions, cj_link_peer(links[i]));
        f->last_bytes[i] = b;
    }
    finish_if_stopped(f);
}

/* ---- construction -------------------------------------------------------------------- */

static int make_upstream(struct cj_flrun *f, struct cj_stream_ep *ep, const struct cj_config *cfg, struct cj_err *err)
{
    struct cj_fl_up_cfg uc;
    cj_fl_up_cfg_default(&uc);
    uc.site = f->site;
    uc.job_id = f->job;
    uc.project_name = f->project;
    uc.creds = &f->creds;
    uc.get_task_interval = cfg->upstream.get_task_interval;
    uc.get_task_timeout = cfg->upstream.get_task_timeout;
    uc.submit_timeout = cfg->upstream.submit_timeout;
    uc.task_check_timeout = cfg->upstream.task_check_timeout;
    uc.job_heartbeat_interval = cfg->upstream.job_heartbeat_interval;
    uc.job_heartbeat_timeout = cfg->upstream.job_heartbeat_timeout;
    uc.reconnect_min = cfg->upstream.reconnect_min;
    uc.reconnect_max = cfg->upstream.reconnect_max;
    uc.on_end_run = on_end_run;
    uc.on_fatal = on_fatal;
    uc.cb_ctx = f;
    struct cj_fl_dispatch_ops tr = {.ctx = f, .idle = tr_idle, .deliver = tr_deliver, .end_run = tr_end_run};
    if (!(f->up = cj_fl_up_new(f->base, ep, &uc, f->tasks, &tr)))
        return cj_fail(err, CJ_E_INVALID, 0, "cannot create the upstream FL loop");
    return 0;
}

static int make_sessions(struct cj_flrun *f, struct cj_stream_ep *ep, const struct cj_config *cfg,
                         const struct cj_flrun_opts *opts, struct cj_err *err)
{
    /* Secure mode (delegating the site token to workers) follows TLS upstream, but
     * only when there is a token to delegate (doc/protocol/fl-protocols.md §6). */
    bool have_token = strcmp(f->creds.token, "NA") != 0 && f->creds.token[0] &&
                      strcmp(f->creds.signature, "NA") != 0 && f->creds.signature[0];
    bool secure = cfg->upstream.connection_security != CJ_SEC_CLEAR && have_token;
    if (cfg->upstream.connection_security != CJ_SEC_CLEAR && !have_token)
        cj_log_warning("upstream uses TLS but no token/signature is configured (credentials_file or "
                       "NVFLARE_JOB_*): workers run in non-secure mode, without delegated credentials");
    f->secure = secure;
    struct cj_fl_sessions_cfg sc = {
        .site = f->site, .job_id = f->job,
        .heartbeat_interval = cfg->workers.heartbeat_interval,
        .heartbeat_timeout = cfg->workers.heartbeat_timeout,
        .secure_mode = secure,
        .auth_token = secure ? f->creds.token : NULL,
        .auth_token_signature = secure ? f->creds.signature : NULL,
        .drained = on_drained, .drained_arg = f,
        .lost = on_lost, .lost_arg = f,
        .ready = on_ready, .ready_arg = f,
    };
    struct cj_fl_submit_ops so;
    cj_fl_up_submit_ops(f->up, &so);
    if (f->stage) cj_spool_stage_submit_ops(f->stage, &so);
    struct cj_fl_workers_cfg wc = {.base = f->base, .ep = ep, .router = f->router, .tt = f->tasks, .submit = &so,
                                   .sc = &sc, .site_token = f->creds.token, .site_signature = f->creds.signature,
                                   .extra = opts ? opts->boot_extra : NULL, .extrac = opts ? opts->boot_extrac : 0};
    if (!(f->sessions = WS(f)->create(&wc, err))) return -1;
    WS(f)->dispatch_ops(f->sessions, &f->dispatch);
    if (f->stage) {   /* upstream -> stage -> sessions */
        cj_spool_stage_set_workers(f->stage, &f->dispatch);
        cj_spool_stage_dispatch_ops(f->stage, &f->dispatch);
    }
    return 0;
}

/* Spool mode: the directory checks, leftovers of an earlier run removed (the
 * loop is not running yet, so blocking here is allowed), then the I/O thread,
 * the relay's producer, the store and the stage. */
static void spool_behind(void *ctx, const char *source, bool on);

static int make_spool(struct cj_flrun *f, struct cj_stream_ep *ep, const struct cj_config *cfg, struct cj_err *err)
{
    char why[512];
    if (cfg->relay.mode != CJ_MODE_SPOOL) return 0;
    f->spool_mode = true;
    int rc = cj_spool_fs_check(cfg->relay.spool_dir, cfg->relay.spool_allow_tmpfs, why, sizeof why);
    if (rc != 0) return cj_fail(err, CJ_E_INVALID, 0, "relay.spool_dir: %s", why);
    snprintf(f->spool_dir, sizeof f->spool_dir, "%s/%s", cfg->relay.spool_dir, f->job);
    if (cj_spool_rmtree_now(f->spool_dir, why, sizeof why) != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "cannot remove the leftovers of an earlier run: %s", why);
    if (!(f->sio = cj_sio_new(f->base))) return cj_fail(err, CJ_E_NOMEM, 0, "cannot start the spool I/O thread");
    if (!(f->prod = cj_dl_producer_new(f->base, ep, NULL)))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the relay's download producer");
    struct cj_spool_cfg sc = {
        .dir = f->spool_dir,
        .behind = spool_behind,
        .behind_ctx = f,
        .max_bytes = cfg->relay.spool_max_bytes > 0 ? (uint64_t)cfg->relay.spool_max_bytes : 0,
    };
    cj_dl_fetch_cfg_default(&sc.fetch);
    sc.fetch.request_timeout = cfg->upstream.download_idle_timeout;
    if (!(f->spool = cj_spool_new(f->base, ep, f->prod, f->sio, &sc)))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the spool in %s", f->spool_dir);
    struct cj_fl_submit_ops up;
    cj_fl_up_submit_ops(f->up, &up);
    struct cj_spool_stage_cfg stc = {.base = f->base, .ep = ep, .spool = f->spool, .tt = f->tasks};
    if (!(f->stage = cj_spool_stage_new(&stc, &up))) return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the spool stage");
    cj_log_info("spool mode: tensors are downloaded once into %s (spool_max_bytes %lld) and served to the workers "
                "from there",
                f->spool_dir, (long long)cfg->relay.spool_max_bytes);
    return 0;
}

/* [workers] launch_token_file: each token in it lets one worker started by
 * someone else at a time connect (an any-FQCN session record, re-armed when
 * that worker is gone).  The file must be owner-only; no token is ever logged. */
static int load_launch_tokens(struct cj_flrun *f, const struct cj_config *cfg, struct cj_err *err)
{
    const char *path = cfg->workers.launch_token_file;
    if (!path[0]) return 0;
    struct cj_launch_tokens *lt = malloc(sizeof *lt);
    if (!lt) return cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
    int rc = cj_launcher_read_tokens(path, lt, err);
    for (size_t i = 0; rc == 0 && i < lt->n; i++)
        if (WS(f)->expect(f->sessions, NULL, lt->tok[i]) != 0)
            rc = cj_fail(err, CJ_E_LIMIT, 0, "launch_token_file %s: cannot register token %zu of %zu", path, i + 1,
                         lt->n);
    if (rc == 0)
        cj_log_info("launch_token_file %s: %zu token(s); workers started outside the relay may connect with them",
                    path, lt->n);
    cj_launcher_tokens_clear(lt);
    free(lt);
    return rc ? -1 : 0;
}

/* A worker's output line: into the job's FLARE log files, as FLARE's client job logs it. */
static void on_line(void *ctx, const char *fqcn, int stream, const char *line)
{
    struct cj_flrun *f = ctx;
    cj_joblog_worker_line(f->joblog, stream, line);
}

/* The launch style's config text (the pipe dialect's client_api_config.json),
 * built here, before any fork, from the job's own values. */
static int make_launch_config(struct cj_flrun *f, const struct cj_config *cfg, const struct cj_flrun_opts *opts,
                              struct cj_err *err)
{
    static const char *const sec[] = {[CJ_SEC_CLEAR] = "clear", [CJ_SEC_TLS] = "tls", [CJ_SEC_MTLS] = "mtls"};
    char server[CJ_CFG_PATH_MAX + 16];
    cj_endpoint_format(&cfg->upstream.url, server, sizeof server);
    struct cj_fl_launch_info li = {
        .site = f->site, .job_id = f->job, .auth_token = f->creds.token, .auth_token_signature = f->creds.signature,
        .worker_url = f->connect_url, .server_url = server,
        .server_security = sec[cfg->upstream.connection_security == CJ_SEC_MTLS  ? CJ_SEC_MTLS
                               : cfg->upstream.connection_security == CJ_SEC_TLS ? CJ_SEC_TLS
                                                                                 : CJ_SEC_CLEAR],
        .workspace_dir = opts && opts->workspace ? opts->workspace : "",
        .extra = opts ? opts->boot_extra : NULL, .extrac = opts ? opts->boot_extrac : 0,
    };
    return f->dialect->launch_config(&li, &f->pipe_config, err);
}

static int make_launcher(struct cj_flrun *f, const struct cj_config *cfg, const struct cj_flrun_opts *opts,
                         struct cj_err *err)
{
    if (!cfg->workers.command[0]) return 0;
    if (!f->runtime_dir[0]) {
        char tmp[CJ_CFG_PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", cfg->status.socket);
        snprintf(f->runtime_dir, sizeof f->runtime_dir, "%s", dirname(tmp));
    }
    const struct cj_listen_list *ls = &cfg->workers.listen;
    int at = 0;
    while (f->dialect->tcp_listener && at < ls->n && ls->ep[at].kind != CJ_EP_TCP) at++;
    if (at == ls->n)
        return cj_fail(err, CJ_E_INVALID, 0,
                       "workers.listen: a FLARE %s trainer (flare_version %s) reaches only a tcp:// listener "
                       "(e.g. tcp://127.0.0.1:0)", f->dialect->generation, cfg->relay.flare_version);
    cj_endpoint_format(&ls->ep[at], f->connect_url, sizeof f->connect_url);
    if (f->dialect->launch_config && make_launch_config(f, cfg, opts, err) != 0) return -1;
    struct cj_launcher_cfg lc = {
        .command = cfg->workers.command, .count = cfg->workers.count, .runtime_dir = f->runtime_dir,
        .connect_url = f->connect_url, .site = f->site, .job_id = f->job,
        .secure_mode = f->secure,   /* must match what hello_accepted announces */
        .shutdown_grace = cfg->workers.shutdown_grace,
        .launch_timeout = cfg->workers.launch_timeout,
        .style = f->dialect->launch, .config_text = f->pipe_config,
    };
    if (opts) {
        lc.clean_env = opts->clean_env;
        lc.env = opts->worker_env;
        lc.envc = opts->worker_envc;
        lc.cwd = opts->worker_cwd;
        lc.account = opts->worker_account;
        lc.boot_extra = opts->boot_extra;
        lc.boot_extrac = opts->boot_extrac;
        f->joblog = opts->joblog;
    }
    struct cj_launcher_cbs cbs = {.ctx = f, .on_spawn = on_spawn, .on_exit = on_exit_cb, .in_barrier = in_barrier,
                                  .gave_up = on_gave_up, .on_line = on_line};
    f->launcher = cj_launcher_new(f->base, &lc, &cbs, err);
    return f->launcher ? 0 : -1;
}

struct cj_flrun *cj_flrun_new(struct event_base *base, struct cj_stream_ep *ep, struct cj_router *router,
                              const struct cj_config *cfg, const struct cj_flrun_opts *opts,
                              const struct cj_flrun_cbs *cbs, struct cj_err *err)
{
    struct cj_flrun *f = calloc(1, sizeof *f);
    if (!f) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    f->base = base;
    f->router = router;
    f->cbs = *cbs;
    snprintf(f->site, sizeof f->site, "%s", cfg->relay.site);
    snprintf(f->job, sizeof f->job, "%s", cfg->relay.job_id);
    snprintf(f->project, sizeof f->project, "%s", cfg->upstream.project_name);
    f->last_bytes = calloc(CJ_FL_MAX_WORKERS, sizeof *f->last_bytes);
    if (!f->last_bytes) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); goto fail; }
    if (opts && opts->creds) f->creds = *opts->creds;
    else if (cj_creds_load(cfg->upstream.credentials_file, &f->creds, err) != 0) goto fail;
    if (opts && opts->runtime_dir) snprintf(f->runtime_dir, sizeof f->runtime_dir, "%s", opts->runtime_dir);
    char desc[256];
    cj_log_info("credentials: %s", cj_creds_describe(&f->creds, desc, sizeof desc));
    if (!(f->dialect = cj_fl_dialect_of(cfg->relay.flare_version, err))) goto fail;
    cj_log_info("FLARE %s: the %s dialect (generation %s)", cfg->relay.flare_version, f->dialect->name,
                f->dialect->generation);
    if (!(f->tasks = cj_task_table_new())) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); goto fail; }
    if (make_upstream(f, ep, cfg, err) || make_spool(f, ep, cfg, err) || make_sessions(f, ep, cfg, opts, err) ||
        load_launch_tokens(f, cfg, err) || make_launcher(f, cfg, opts, err))
        goto fail;
    struct cj_router_events ev = {.worker_up = ev_worker_up, .worker_down = ev_worker_down,
                                  .upstream_up = ev_upstream_up};
    cj_router_set_events(router, &ev, f);
    struct timeval tv = {PROGRESS_TICK_SECS, 0};
    f->tick = event_new(base, -1, EV_PERSIST, on_tick, f);
    if (!f->tick || event_add(f->tick, &tv) != 0) { cj_fail(err, CJ_E_NOMEM, 0, "cannot create a timer"); goto fail; }
    return f;
fail:
    cj_flrun_free(f);
    return NULL;
}

/* The stage drops its refs, the store and producer go, the I/O thread finishes
 * its current job; then the run's directory is removed (the loop is over). */
static void free_spool(struct cj_flrun *f)
{
    char why[512];
    cj_spool_stage_free(f->stage);
    if (f->spool) cj_spool_free(f->spool);
    if (f->prod) cj_dl_producer_free(f->prod);
    if (f->sio) cj_sio_free(f->sio);
    if (f->spool_dir[0] && f->sio) {
        if (cj_spool_rmtree_now(f->spool_dir, why, sizeof why) == 0) cj_log_info("spool %s removed", f->spool_dir);
        else cj_log_error("cannot remove the spool %s: %s", f->spool_dir, why);
    }
}

void cj_flrun_free(struct cj_flrun *f)
{
    if (!f) return;
    if (f->router) cj_router_set_events(f->router, &(struct cj_router_events){0}, NULL);
    if (f->tick) event_free(f->tick);
    if (f->launcher) {
        cj_launcher_stop_all(f->launcher, true);
        cj_launcher_free(f->launcher);
    }
    if (f->sessions) WS(f)->destroy(f->sessions);
    if (f->pipe_config) explicit_bzero(f->pipe_config, strlen(f->pipe_config));
    free(f->pipe_config);
    cj_fl_up_free(f->up);
    free_spool(f);
    cj_task_table_free(f->tasks);
    cj_creds_clear(&f->creds);
    free(f->last_bytes);
    free(f);
}

/* ---- control ------------------------------------------------------------------------ */

void cj_flrun_pause(struct cj_flrun *f) { cj_fl_up_pause(f->up); }
void cj_flrun_resume(struct cj_flrun *f) { cj_fl_up_resume(f->up); }

void cj_flrun_drain(struct cj_flrun *f, const char *why)
{
    if (f->ended) {   /* the run is already over: nothing to wait for */
        if (f->cbs.ended) f->cbs.ended(f->cbs.ctx, f->end_why);
        return;
    }
    start_ending(f, why);
    /* With no worker session at all there is nothing to settle. */
    if (WS(f)->busy(f->sessions) == 0) on_drained(f);
}

void cj_flrun_stop_now(struct cj_flrun *f)
{
    f->ending = true;
    if (f->launcher) cj_launcher_stop_all(f->launcher, true);
}

const char *cj_flrun_state(const struct cj_flrun *f)
{
    struct cj_fl_up_status st;
    cj_fl_up_get_status(f->up, &st);
    return cj_fl_up_state_name(st.state);
}

const char *cj_flrun_generation(const struct cj_flrun *f) { return f->dialect->generation; }
const char *cj_flrun_dialect(const struct cj_flrun *f) { return f->dialect->name; }

const char *cj_flrun_last_error(const struct cj_flrun *f, char *buf, size_t len)
{
    struct cj_fl_up_status st;
    cj_fl_up_get_status(f->up, &st);
    snprintf(buf, len, "%s", st.last_error);
    return buf;
}

/* ---- show tables --------------------------------------------------------------------- */

/* "2026-11-27T06:40:01Z trainer_3: cannot exec …", or "" when the slot has none. */
static void error_cell(struct cj_out *o, const char *text, time_t at)
{
    char when[32], cell[CJ_LAUNCHER_ERROR_MAX + 32] = "";
    if (text && text[0] && cj_utc_text(at, when, sizeof when)[0]) snprintf(cell, sizeof cell, "%s %s", when, text);
    cj_out_cell_str(o, cell);
}

struct worker_rows {
    struct cj_out *o;
    const struct cj_flrun *f;
};

static void worker_row(void *arg, const struct cj_fl_worker_info *wi)
{
    struct worker_rows *r = arg;
    struct cj_out *o = r->o;
    cj_out_row_begin(o);
    cj_out_cell_str(o, wi->fqcn);
    cj_out_cell_u64(o, (uint64_t)(wi->pid > 0 ? wi->pid : 0));
    cj_out_cell_str(o, wi->state);
    cj_out_cell_dbl(o, wi->heartbeat_age);
    cj_out_cell_str(o, wi->task);
    cj_out_cell_u64(o, wi->bytes);
    cj_out_cell_str(o, r->f->dialect->generation);
    struct cj_launcher_slot_info si;   /* a worker of ours: its slot's last error ("" for another's) */
    if (r->f->launcher && cj_launcher_slot_of(r->f->launcher, wi->fqcn, &si)) error_cell(o, si.last_error, si.last_error_at);
    else cj_out_cell_str(o, "");
    cj_out_row_end(o);
}

/* A launcher slot with no worker because its launch failed or its worker died:
 * shown with why, so an operator sees a worker command that cannot run. */
static void failed_slot_row(void *arg, const struct cj_launcher_slot_info *si)
{
    struct worker_rows *r = arg;
    struct cj_out *o = r->o;
    if (si->pid || !si->last_error[0]) return;
    cj_out_row_begin(o);
    cj_out_cell_str(o, si->fqcn);
    cj_out_cell_u64(o, 0);
    cj_out_cell_str(o, si->relaunch_in >= 0 ? "relaunch" : "down");
    cj_out_cell_dbl(o, -1);
    cj_out_cell_str(o, "");
    cj_out_cell_u64(o, 0);
    cj_out_cell_str(o, r->f->dialect->generation);
    error_cell(o, si->last_error, si->last_error_at);
    cj_out_row_end(o);
}

void cj_flrun_show_workers(struct cj_flrun *f, struct cj_out *o)
{
    static const struct cj_col cols[] = {{"fqcn", 40}, {"pid", 8}, {"state", 10}, {"heartbeat_age", 14},
                                         {"task", 34}, {"bytes", 12}, {"flare", 9}, {"last_error", 0}};
    struct worker_rows r = {.o = o, .f = f};
    cj_out_table_begin(o, "workers", cols, sizeof cols / sizeof cols[0]);
    WS(f)->workers(f->sessions, worker_row, &r);
    if (f->launcher) cj_launcher_slots(f->launcher, failed_slot_row, &r);
    cj_out_table_end(o);
}

/* The workers' most recent launch failure or death, the sum of their failures
 * and the nearest relaunch: what show info gives. */
static void worst_of(void *arg, const struct cj_launcher_slot_info *si)
{
    struct cj_workers_failure *wf = arg;
    wf->failures += si->failures;
    if (si->relaunch_in >= 0 && (wf->relaunch_in < 0 || si->relaunch_in < wf->relaunch_in))
        wf->relaunch_in = si->relaunch_in;
    if (si->last_error[0] && si->last_error_at >= wf->last_error_at)
        wf->last_error = si->last_error, wf->last_error_at = si->last_error_at;
}

const char *cj_flrun_spool_last_error(const struct cj_flrun *f, time_t *at)
{
    *at = 0;
    return f->stage ? cj_spool_stage_last_error(f->stage, at) : "";
}

void cj_flrun_workers_failure(const struct cj_flrun *f, struct cj_workers_failure *wf)
{
    *wf = (struct cj_workers_failure){.last_error = "", .relaunch_in = -1};
    if (f->launcher) cj_launcher_slots(f->launcher, worst_of, wf);
}

void cj_flrun_show_tasks(struct cj_flrun *f, struct cj_out *o)
{
    static const struct cj_col cols[] = {{"task_id", 34}, {"server_task_id", 38}, {"name", 12}, {"worker", 40},
                                         {"state", 11}, {"age", 0}};
    double now = cj_now();
    cj_out_table_begin(o, "tasks", cols, 6);
    for (struct cj_task *t = cj_task_first(f->tasks); t; t = t->next) {
        cj_out_row_begin(o);
        cj_out_cell_str(o, t->id);
        cj_out_cell_str(o, t->server_id);
        cj_out_cell_str(o, t->name);
        cj_out_cell_str(o, t->worker);
        cj_out_cell_str(o, cj_task_state_name(t->state));
        cj_out_cell_dbl(o, now - t->created);
        cj_out_row_end(o);
    }
    cj_out_table_end(o);
}

static void ref_rows(struct cj_out *o, const struct cj_task *t, const struct cj_ref *refs, size_t n, const char *kind,
                     double now)
{
    for (size_t i = 0; i < n; i++) {
        cj_out_row_begin(o);
        cj_out_cell_str(o, refs[i].fqcn);
        cj_out_cell_str(o, refs[i].ref_id);
        cj_out_cell_u64(o, (uint64_t)refs[i].dot);
        cj_out_cell_u64(o, refs[i].items);
        cj_out_cell_str(o, kind);
        cj_out_cell_str(o, t->id);
        cj_out_cell_str(o, cj_ref_state_name(refs[i].state));
        cj_out_cell_dbl(o, now - t->created);
        cj_out_row_end(o);
    }
}

/* Spool mode: the spool's refs (task refs under the task id, result refs
 * under <task id>.result), with their state and bytes on disk. */
static void spool_ref_row(void *arg, const struct cj_spool_ref_info *ri)
{
    struct cj_out *o = arg;
    cj_out_row_begin(o);
    cj_out_cell_str(o, ri->tag);
    cj_out_cell_str(o, cj_spool_ref_state_name(ri->state));
    cj_out_cell_str(o, ri->source);
    cj_out_cell_str(o, ri->ref_id);
    cj_out_cell_str(o, ri->served_id);
    cj_out_cell_u64(o, (uint64_t)ri->dot);
    cj_out_cell_u64(o, ri->items);
    cj_out_cell_u64(o, ri->bytes);
    cj_out_cell_u64(o, ri->bytes_served);
    cj_out_cell_dbl(o, ri->age);
    cj_out_cell_str(o, ri->why ? ri->why : "");
    cj_out_row_end(o);
}

static void show_spool_refs(struct cj_flrun *f, struct cj_out *o)
{
    static const struct cj_col cols[] = {{"tag", 42}, {"state", 9}, {"source", 40}, {"ref_id", 38},
                                         {"served_id", 38}, {"dot", 4}, {"items", 6}, {"bytes", 12},
                                         {"bytes_served", 13}, {"age", 8}, {"why", 0}};
    cj_out_table_begin(o, "refs", cols, 11);
    cj_spool_foreach(f->spool, spool_ref_row, o);
    cj_out_table_end(o);
}

void cj_flrun_show_refs(struct cj_flrun *f, struct cj_out *o)
{
    if (f->spool) {
        show_spool_refs(f, o);
        return;
    }
    static const struct cj_col cols[] = {{"source", 40}, {"ref_id", 38}, {"dot", 4}, {"items", 6}, {"kind", 7},
                                         {"task_id", 34}, {"state", 10}, {"age", 0}};
    double now = cj_now();
    cj_out_table_begin(o, "refs", cols, 8);
    for (struct cj_task *t = cj_task_first(f->tasks); t; t = t->next) {
        ref_rows(o, t, t->refs, t->n_refs, "task", now);
        ref_rows(o, t, t->result_refs, t->n_result_refs, "result", now);
    }
    cj_out_table_end(o);
}

static void metric_row(void *arg, const char *worker, const char *name, const char *value)
{
    struct cj_out *o = arg;
    cj_out_row_begin(o);
    cj_out_cell_str(o, worker);
    cj_out_cell_str(o, name);
    cj_out_cell_str(o, value);
    cj_out_row_end(o);
}

void cj_flrun_show_metrics(struct cj_flrun *f, struct cj_out *o)
{
    static const struct cj_col cols[] = {{"worker", 40}, {"name", 30}, {"value", 0}};
    cj_out_table_begin(o, "metrics", cols, 3);
    WS(f)->metrics(f->sessions, metric_row, o);
    cj_out_table_end(o);
}

/* ---- the counters the stats registry reads ---------------------------------------------- */

void cj_flrun_stat_sources(struct cj_flrun *f, struct cj_stat_sources *s)
{
    if (!f) return;
    if (f->sessions) {
        WS(f)->get_stats(f->sessions, &s->sessions);
        s->src[CJ_STAT_SESSIONS] = &s->sessions;
    }
    if (f->spool) {
        cj_spool_get_stats(f->spool, &s->spool);
        cj_spool_stage_get_stats(f->stage, &s->stage);
        s->src[CJ_STAT_SPOOL] = &s->spool;
        s->src[CJ_STAT_STAGE] = &s->stage;
    }
}

/* ---- spool mode ---------------------------------------------------------------------------- */

/* A spool fetch is behind its disk: stop reading the link its bytes come on. */
static void spool_behind(void *ctx, const char *source, bool on)
{
    struct cj_flrun *f = ctx;
    cj_log_debug("spool: fetch from %s %s", source, on ? "behind its disk: reading from it held" : "caught up");
    cj_router_hold(f->router, source, on);
}

void cj_flrun_reload(struct cj_flrun *f, const struct cj_config *cfg)
{
    if (!f || !f->spool) return;
    cj_spool_set_max_bytes(f->spool, cfg->relay.spool_max_bytes > 0 ? (uint64_t)cfg->relay.spool_max_bytes : 0);
}
