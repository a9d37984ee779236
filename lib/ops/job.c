/* SPDX-License-Identifier: Apache-2.0 */
/* job.c — one job's relay cell (see job.h). */
#include "ops/job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "cell/router.h"
#include "fl/creds.h"
#include "fl/dialect.h"
#include "net/link.h"
#include "net/tls.h"
#include "ops/flrun.h"
#include "ops/jobcp.h"
#include "ops/joblog.h"
#include "stream/stream.h"
#include "util/account.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "wire/frame.h"
#include "wire/msg.h"

struct cj_job {
    struct event_base *base;
    struct cj_config cfg;
    struct cj_job_cbs cbs;
    char fqcn[2 * CJ_CFG_NAME_MAX + 2];
    char upstream_url[CJ_CFG_PATH_MAX];
    struct cj_router *router;     /* the relay cell: links, routing, forwarding */
    SSL_CTX *tls;                 /* upstream client context (tls / mtls), else NULL */
    struct cj_stream_ep *stream;  /* sm__ endpoint for the messages addressed to the cell itself */
    struct cj_flrun *fl;          /* the FL run: task loop, worker sessions, launcher */
    struct cj_jobcp *cp;          /* the link to FLARE's client parent, or NULL */
    struct cj_stats stats;        /* the cell's counters (its stream endpoint's io.stats) */
    enum cj_job_state state;
    bool aborting;                /* told to end: the outcome is ABORTED whatever the run says */
    enum cj_job_outcome outcome;
    char reason[CJ_JOB_REASON_MAX];
    double started, ended_at;
    struct cj_creds creds;        /* the description's credentials (has_creds), wiped at free */
    bool has_creds;
    char dir[CJ_CFG_PATH_MAX];    /* its own runtime directory, "" for none */
    char workspace[CJ_CFG_PATH_MAX];
    struct cj_joblog *joblog;     /* FLARE's log files in <workspace>/<job_id>/, NULL without a workspace */
    double connect_timeout;
    struct event *connect_timer;  /* connect_timeout */
    bool released;                /* the cell is gone; final holds the counters as they ended */
    struct cj_router_counters router_final;
    struct cj_stat_sources final;
};

/* ---- the cell's parts ----------------------------------------------------------- */

static uint32_t max_frame(const struct cj_config *cfg)
{
    /* A message of max_message_size plus its header block must fit in a frame. */
    uint64_t m = (uint64_t)cfg->limits.max_message_size + CJ_HDR_MAX_LEN + CJ_FRAME_PREFIX_LEN;
    return m > CJ_FRAME_MAX_DEFAULT ? CJ_FRAME_MAX_DEFAULT : (uint32_t)m;
}

/* Unix sockets belong to the workers' account when they run as another one:
 * they connect with its rights, and socket_mode gives the owner the access.
 * A uds:// listener serves the trainers this daemon launches: there a peer
 * whose uid (SO_PEERCRED) is not that account's, the daemon's own or root's
 * is refused at accept, whatever the socket's mode lets in; a unix: listener
 * admits whoever its mode admits (workers started by others).
 * A tcp port 0 becomes the port the kernel gave: launched workers' bootstrap
 * files and show config name that one. */
static int open_worker_listeners(struct cj_job *j, const struct cj_account *acc, struct cj_err *err)
{
    struct cj_listen_list *ls = &j->cfg.workers.listen;
    uid_t uids[3] = {geteuid(), 0, acc ? acc->uid : geteuid()};
    for (int i = 0; i < ls->n; i++) {
        char url[CJ_CFG_PATH_MAX + 16];
        unsigned port = 0;
        cj_endpoint_format(&ls->ep[i], url, sizeof url);
        cj_router_set_worker_uids(j->router, uids, ls->ep[i].uds ? 3 : 0);
        if (cj_router_listen(j->router, url, j->cfg.workers.socket_mode, &port, err) != 0) return -1;
        if (ls->ep[i].kind == CJ_EP_TCP && ls->ep[i].port == 0) ls->ep[i].port = port;
        if (acc && ls->ep[i].kind == CJ_EP_UNIX && chown(ls->ep[i].addr, acc->uid, acc->gid) != 0)
            return cj_fail(err, CJ_E_INVALID, 0, "cannot give the worker socket %s to uid %u: %s", ls->ep[i].addr,
                           (unsigned)acc->uid, strerror(errno));
    }
    return 0;
}

/* pem: NULL, or the TLS files' texts that replace the files (ca, cert, key). */
static int start_upstream(struct cj_job *j, const struct cj_tls_pem *const *pem, struct cj_err *err)
{
    const struct cj_config *c = &j->cfg;
    cj_endpoint_format(&c->upstream.url, j->upstream_url, sizeof j->upstream_url);
    if (c->upstream.connection_security != CJ_SEC_CLEAR) {
        struct cj_tls_client_opts o = {
            .mode = c->upstream.connection_security == CJ_SEC_MTLS ? CJ_TLS_MUTUAL : CJ_TLS_VERIFY,
            .ca_file = c->upstream.ca_file, .cert_file = c->upstream.cert_file, .key_file = c->upstream.key_file,
            .ca_pem = pem ? pem[0] : NULL, .cert_pem = pem ? pem[1] : NULL, .key_pem = pem ? pem[2] : NULL,
        };
        if (!(j->tls = cj_tls_client_ctx(&o, err))) return -1;
    }
    struct cj_upstream_cfg u = {
        .url = j->upstream_url, .tls = j->tls, .tls_name = c->upstream.tls_server_name,
        .reconnect_min = c->upstream.reconnect_min, .reconnect_max = c->upstream.reconnect_max,
    };
    return cj_router_upstream_start(j->router, &u, err);
}

/* The stream layer sends through the router; the router hands it every
 * sm__STREAM message addressed to the cell. */
static int stream_send(void *ctx, const char *dest, const uint8_t *hblk, size_t hlen, struct evbuffer *payload,
                       bool control)
{
    struct cj_job *j = ctx;
    struct cj_err err;
    return cj_router_send_block(j->router, dest, hblk, hlen, payload, control, &err) == 0 ? 0 : -1;
}

static const char *stream_next_hop(void *ctx, const char *dest)
{
    struct cj_job *j = ctx;
    return cj_router_next_hop_name(j->router, dest);
}

/* The cell's own streams (served spool refs above all) wait while the link
 * toward their destination holds two chunks or more: the file is read only
 * as fast as the peer takes it, never a whole window ahead. */
static bool stream_busy(void *ctx, const char *dest)
{
    struct cj_job *j = ctx;
    const char *why;
    struct cj_link *l = cj_router_next_hop(j->router, dest, &why);
    return l && cj_link_queued(l) >= 2 * (size_t)j->cfg.limits.stream_chunk;
}

static void on_stream_msg(struct cj_router *r, struct cj_msg *msg, void *ctx)
{
    cj_stream_input(ctx, &msg->hdr, msg->payload);
    cj_msg_free(msg);
}

static int start_stream(struct cj_job *j, struct cj_err *err)
{
    const struct cj_config *c = &j->cfg;
    struct cj_stream_limits lim;
    cj_stream_limits_default(&lim);
    lim.chunk_size = (uint32_t)c->limits.stream_chunk;
    lim.window = (uint64_t)c->limits.stream_window;
    lim.max_blob = (uint64_t)c->limits.max_message_size;
    /* The cell's own messages are control traffic (tasks hold refs, not tensors);
     * what it reassembles at once is bounded by one maximal message. */
    lim.max_buffered = (uint64_t)c->limits.max_message_size;
    /* Stream states (live + recently finished, kept `linger` s so late chunks
     * are ignored): the cell's own traffic is a handful of streams per task,
     * so 512 is plenty, and a small table is full after the first rounds —
     * RSS stays flat instead of creeping up for hundreds of rounds. */
    lim.max_streams = 512;
    struct cj_stream_io io = {.ctx = j, .send = stream_send, .next_hop = stream_next_hop, .busy = stream_busy,
                              .stats = &j->stats};
    if (!(j->stream = cj_stream_new(j->base, j->fqcn, &io, &lim)))
        return cj_fail(err, CJ_E_NOMEM, 0, "cannot create the stream endpoint");
    const struct cj_fl_dialect *d = cj_fl_dialect_of(j->cfg.relay.flare_version, NULL);
    if (d) cj_stream_set_wire(j->stream, d->wire);
    return cj_router_handle(j->router, "sm__STREAM", NULL, on_stream_msg, j->stream) == 0
               ? 0 : cj_fail(err, CJ_E_INVALID, 0, "cannot register the stream handler");
}

/* ---- ending ---------------------------------------------------------------------- */

/* As FLARE's client job does: <workspace>/<job_id>/_process_rc.txt holds the
 * return code as a bare integer, for the client parent; a file already there
 * (written by a component) wins. */
static void write_rc_file(const struct cj_job *j)
{
    if (!j->workspace[0]) return;
    char dir[CJ_CFG_PATH_MAX + CJ_CFG_NAME_MAX + 2], path[sizeof dir + 32];
    snprintf(dir, sizeof dir, "%s/%s", j->workspace, j->cfg.relay.job_id);
    snprintf(path, sizeof path, "%s/_process_rc.txt", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        cj_log_warning("job %s: cannot create %s: %s", j->cfg.relay.job_id, dir, strerror(errno));
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno != EEXIST) cj_log_warning("job %s: cannot write %s: %s", j->cfg.relay.job_id, path, strerror(errno));
        return;
    }
    char rc[16];
    int n = snprintf(rc, sizeof rc, "%d", (int)j->outcome);
    if (write(fd, rc, (size_t)n) != n) cj_log_warning("job %s: short write to %s", j->cfg.relay.job_id, path);
    close(fd);
}

static void end_job(struct cj_job *j, enum cj_job_outcome outcome, const char *why)
{
    if (j->state == CJ_JOB_ENDED) return;
    j->state = CJ_JOB_ENDED;
    j->ended_at = cj_now();
    j->outcome = j->aborting ? CJ_JOB_ABORTED : outcome;
    snprintf(j->reason, sizeof j->reason, "%s", why);
    cj_log_info("job %s ended: outcome %d (%s)", j->cfg.relay.job_id, (int)j->outcome, j->reason);
    write_rc_file(j);
    if (j->cp) cj_jobcp_stopped(j->cp);
    if (j->cbs.ended) j->cbs.ended(j->cbs.ctx, j);
}

/* The run is over and the workers have stopped. */
static void on_fl_ended(void *ctx, const char *why)
{
    end_job(ctx, CJ_JOB_SUCCESS, why);
}

static void on_fl_started(void *ctx)
{
    struct cj_job *j = ctx;
    if (j->state == CJ_JOB_STARTING) j->state = CJ_JOB_RUNNING;
}

static void on_fl_fatal(void *ctx, const char *why)
{
    struct cj_job *j = ctx;
    cj_log_error("job %s: fatal: %s", j->cfg.relay.job_id, why);
    cj_flrun_stop_now(j->fl);
    end_job(j, CJ_JOB_EXECUTION_ERROR, why);
}

/* No worker came through within launch_timeout (the launcher holds, the
 * workers are being stopped): FLARE's ProcessExitCode.EXCEPTION, which the
 * client parent reports and the server fails the job with, as it does when a
 * stock client job's executor cannot start its trainer. */
static void on_fl_cannot_launch(void *ctx, const char *why)
{
    end_job(ctx, CJ_JOB_EXCEPTION, why);
}

/* The server was never reachable: FLARE's client parent reads 104 as an
 * infrastructure error, not the job's fault. */
static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct cj_job *j = arg;
    if (cj_job_state(j) != CJ_JOB_STARTING) return;
    char why[CJ_CFG_PATH_MAX + 64];
    snprintf(why, sizeof why, "the server %s was not reachable within %g s", j->upstream_url, j->connect_timeout);
    cj_log_error("job %s: %s", j->cfg.relay.job_id, why);
    cj_flrun_stop_now(j->fl);
    end_job(j, CJ_JOB_INFRA_ERROR, why);
}

/* ---- life cycle -------------------------------------------------------------------- */

static int start_cell(struct cj_job *j, const struct cj_job_opts *opts, struct cj_err *err)
{
    const struct cj_config *c = &j->cfg;
    struct cj_router_cfg rc = {
        .me = j->fqcn,
        .link_buffer = (size_t)c->limits.link_buffer,
        .max_frame = max_frame(c),
        .worker_heartbeat_interval = c->workers.heartbeat_interval,
        .worker_heartbeat_timeout = c->workers.heartbeat_timeout,
        .upstream_connect_timeout = c->upstream.connect_timeout,
        .upstream_hello_timeout = c->upstream.hello_timeout,
        .upstream_heartbeat_interval = c->upstream.ping_interval,
        /* One sender window of slack on the shared upstream: a single stream toward
         * a worker that stopped reading never pauses the other workers' traffic. */
        .shared_slack = (size_t)c->limits.stream_window,
        .no_pacing = !c->limits.pacing,
    };
    if (!(j->router = cj_router_new(j->base, &rc, err))) return -1;
    if (start_stream(j, err) != 0 || open_worker_listeners(j, opts ? opts->worker_account : NULL, err) != 0) return -1;
    struct cj_flrun_cbs cbs = {.ctx = j, .ended = on_fl_ended, .fatal = on_fl_fatal, .started = on_fl_started,
                               .cannot_launch = on_fl_cannot_launch};
    struct cj_flrun_opts fo = {.creds = j->has_creds ? &j->creds : NULL, .runtime_dir = j->dir[0] ? j->dir : NULL};
    if (opts) {
        fo.clean_env = opts->clean_env;
        fo.worker_env = opts->worker_env;
        fo.worker_envc = opts->worker_envc;
        fo.worker_cwd = opts->worker_cwd;
        fo.workspace = opts->workspace;
        fo.worker_account = opts->worker_account;
        fo.boot_extra = opts->boot_extra;
        fo.boot_extrac = opts->boot_extrac;
    }
    fo.joblog = j->joblog;
    if (!(j->fl = cj_flrun_new(j->base, j->stream, j->router, &j->cfg, &fo, &cbs, err))) return -1;
    return start_upstream(j, opts ? opts->tls_pem : NULL, err);
}

/* ---- the client parent ------------------------------------------------------------ */

static void cp_abort(void *ctx, const char *why)
{
    cj_job_drain(ctx, why);
}

/* show_stats for the client parent: every counter of the stats registry. */
static size_t cp_stats(void *ctx, struct cj_cpmsg_kv *kv, size_t max)
{
    struct cj_stat_sources s = {0};
    size_t n = 0;
    cj_job_stat_sources(ctx, &s);
    for (size_t i = 0; i < cj_stat_nsections; i++)
        for (size_t k = 0; k < cj_stat_sections[i].nfields && n < max; k++) {
            const struct cj_stat_field *f = &cj_stat_sections[i].fields[k];
            if (cj_stat_present(f, &s)) kv[n++] = (struct cj_cpmsg_kv){f->name, NULL, (int64_t)cj_stat_value(f, &s)};
        }
    return n;
}

static int start_parent(struct cj_job *j, const char *url, struct cj_err *err)
{
    struct cj_jobcp_cbs cbs = {.ctx = j, .abort = cp_abort, .stats = cp_stats};
    if (!(j->cp = cj_jobcp_new(j->base, j->router, url, j->cfg.relay.job_id, &cbs, err))) return -1;
    const struct cj_fl_dialect *d = cj_fl_dialect_of(j->cfg.relay.flare_version, NULL);
    if (d && d->cp_started_repeat > 0) cj_jobcp_set_started_repeat(j->cp, d->cp_started_repeat);
    return 0;
}

size_t cj_job_flushing(const struct cj_job *j)
{
    return j->cp ? cj_jobcp_queued(j->cp) : 0;
}

struct cj_job *cj_job_new(struct event_base *base, const struct cj_config *cfg, const struct cj_job_opts *opts,
                          const struct cj_job_cbs *cbs, struct cj_err *err)
{
    struct cj_job *j = calloc(1, sizeof *j);
    if (!j) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    j->base = base;
    j->cfg = *cfg;
    j->cbs = *cbs;
    j->state = CJ_JOB_STARTING;
    j->started = cj_now();
    snprintf(j->fqcn, sizeof j->fqcn, "%s.%s", cfg->relay.site, cfg->relay.job_id);
    if (opts && opts->creds) { j->creds = *opts->creds; j->has_creds = true; }
    if (opts && opts->workspace) {
        snprintf(j->workspace, sizeof j->workspace, "%s", opts->workspace);
        char dir[CJ_CFG_PATH_MAX + CJ_CFG_NAME_MAX + 2];
        snprintf(dir, sizeof dir, "%s/%s", j->workspace, cfg->relay.job_id);
        j->joblog = cj_joblog_open(dir, cfg->relay.job_id);
    }
    if (opts && opts->dir) {
        snprintf(j->dir, sizeof j->dir, "%s", opts->dir);
        if (mkdir(j->dir, 0711) != 0) {   /* the worker socket's own mode decides who connects */
            cj_fail(err, CJ_E_INVALID, 0, "cannot create the job's directory %s: %s", j->dir, strerror(errno));
            j->dir[0] = '\0';
            cj_job_free(j);
            return NULL;
        }
    }
    if (start_cell(j, opts, err) != 0 || (opts && opts->parent_url && start_parent(j, opts->parent_url, err) != 0)) {
        cj_job_free(j);
        return NULL;
    }
    if (opts && opts->connect_timeout > 0) {
        j->connect_timeout = opts->connect_timeout;
        struct timeval tv = cj_tv(opts->connect_timeout);
        if (!(j->connect_timer = evtimer_new(base, on_connect_timeout, j)) || evtimer_add(j->connect_timer, &tv) != 0) {
            cj_fail(err, CJ_E_NOMEM, 0, "cannot create a timer");
            cj_job_free(j);
            return NULL;
        }
    }
    return j;
}

/* The job's runtime directory holds only files of its own (bootstrap files,
 * the worker socket): they go, then the directory. */
void cj_job_remove_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (dp) {
        for (struct dirent *e; (e = readdir(dp));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (unlinkat(dirfd(dp), e->d_name, 0) != 0)
                cj_log_warning("cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
        }
        closedir(dp);
    }
    if (rmdir(dir) != 0 && errno != ENOENT) cj_log_warning("cannot remove %s: %s", dir, strerror(errno));
}

static void free_cell(struct cj_job *j)
{
    cj_jobcp_free(j->cp);
    j->cp = NULL;
    if (j->connect_timer) event_free(j->connect_timer);
    j->connect_timer = NULL;
    cj_flrun_free(j->fl);   /* its workers' output pipes go with it: then the job's log files close */
    cj_joblog_close(j->joblog);
    j->joblog = NULL;
    cj_stream_free(j->stream);
    cj_router_free(j->router);
    if (j->tls) cj_tls_ctx_free(j->tls);
    j->fl = NULL;
    j->stream = NULL;
    j->router = NULL;
    j->tls = NULL;
    if (j->dir[0]) cj_job_remove_dir(j->dir);
    j->dir[0] = '\0';
}

void cj_job_release(struct cj_job *j)
{
    if (j->released) return;
    memset(&j->final, 0, sizeof j->final);
    cj_job_stat_sources(j, &j->final);
    j->router_final = *cj_router_counters(j->router);
    j->final.src[CJ_STAT_ROUTER] = &j->router_final;
    if (j->final.src[CJ_STAT_SESSIONS]) j->final.src[CJ_STAT_SESSIONS] = &j->final.sessions;
    if (j->final.src[CJ_STAT_SPOOL]) j->final.src[CJ_STAT_SPOOL] = &j->final.spool;
    if (j->final.src[CJ_STAT_STAGE]) j->final.src[CJ_STAT_STAGE] = &j->final.stage;
    free_cell(j);
    j->released = true;
}

bool cj_job_released(const struct cj_job *j) { return j->released; }
double cj_job_started(const struct cj_job *j) { return j->started; }
double cj_job_ended_at(const struct cj_job *j) { return j->ended_at; }

void cj_job_free(struct cj_job *j)
{
    if (!j) return;
    free_cell(j);
    cj_creds_clear(&j->creds);
    free(j);
}

/* ---- control ------------------------------------------------------------------------ */

void cj_job_pause(struct cj_job *j) { if (j->fl) cj_flrun_pause(j->fl); }
void cj_job_resume(struct cj_job *j) { if (j->fl) cj_flrun_resume(j->fl); }

void cj_job_drain(struct cj_job *j, const char *why)
{
    if (j->state == CJ_JOB_ENDED) return;
    j->aborting = true;
    j->state = CJ_JOB_STOPPING;
    cj_flrun_drain(j->fl, why);   /* ends through on_fl_ended */
}

void cj_job_stop_now(struct cj_job *j, const char *why)
{
    if (j->state == CJ_JOB_ENDED) return;
    j->aborting = true;
    if (j->fl) cj_flrun_stop_now(j->fl);
    end_job(j, CJ_JOB_ABORTED, why);
}

void cj_job_reload(struct cj_job *j, const struct cj_config *cfg)
{
    cj_config_apply_reload(&j->cfg, cfg);
    if (j->fl) cj_flrun_reload(j->fl, &j->cfg);
}

/* ---- state ---------------------------------------------------------------------------- */

const char *cj_job_id(const struct cj_job *j) { return j->cfg.relay.job_id; }
const char *cj_job_fqcn(const struct cj_job *j) { return j->fqcn; }
enum cj_job_outcome cj_job_outcome(const struct cj_job *j) { return j->outcome; }
const char *cj_job_reason(const struct cj_job *j) { return j->reason; }

enum cj_job_state cj_job_state(const struct cj_job *j)
{
    return j->state;
}

const char *cj_job_state_name(enum cj_job_state s)
{
    static const char *const names[] = {"starting", "running", "stopping", "ended"};
    return names[s];
}

const char *cj_job_upstream_state(const struct cj_job *j)
{
    return j->router ? cj_router_upstream_state_name(cj_router_upstream_state(j->router)) : "closed";
}

size_t cj_job_workers(const struct cj_job *j)
{
    return j->router ? cj_router_children(j->router, NULL, 0) : 0;
}

void cj_job_stat_sources(struct cj_job *j, struct cj_stat_sources *s)
{
    if (j->released) {
        *s = j->final;
        return;
    }
    s->src[CJ_STAT_RELAY] = &j->stats;
    s->src[CJ_STAT_ROUTER] = cj_router_counters(j->router);
    cj_flrun_stat_sources(j->fl, s);
}

const char *cj_job_mode(const struct cj_job *j)
{
    return j->cfg.relay.mode == CJ_MODE_SPOOL ? "spool" : "pass_through";
}

const char *cj_job_fl_state(const struct cj_job *j) { return j->fl ? cj_flrun_state(j->fl) : "ended"; }

const char *cj_job_fl_last_error(const struct cj_job *j, char *buf, size_t len)
{
    if (j->fl) return cj_flrun_last_error(j->fl, buf, len);
    snprintf(buf, len, "%s", j->state == CJ_JOB_ENDED && j->outcome != CJ_JOB_SUCCESS ? j->reason : "");
    return buf;
}
const char *cj_job_upstream_url(const struct cj_job *j) { return j->upstream_url; }

/* The FLARE generation the job's workers speak, from its configuration (also once the run is gone). */
const char *cj_job_generation(const struct cj_job *j)
{
    const struct cj_fl_dialect *d = cj_fl_dialect_of(j->cfg.relay.flare_version, NULL);
    return d ? d->generation : "?";
}

const char *cj_job_upstream_peer(const struct cj_job *j)
{
    struct cj_link *up = j->router ? cj_router_upstream(j->router) : NULL;
    return up ? cj_link_peer(up) : "";
}

void cj_job_upstream_status(const struct cj_job *j, struct cj_outlink_status *st)
{
    memset(st, 0, sizeof *st);
    st->last_error = "";
    if (j->router) cj_router_upstream_status(j->router, st);
}

void cj_job_workers_failure(const struct cj_job *j, struct cj_workers_failure *wf)
{
    if (j->fl) cj_flrun_workers_failure(j->fl, wf);
    else *wf = (struct cj_workers_failure){.last_error = "", .relaunch_in = -1};
}

const struct cj_config *cj_job_config(const struct cj_job *j)
{
    return &j->cfg;
}

const char *cj_job_spool_last_error(const struct cj_job *j, time_t *at)
{
    *at = 0;
    return j->fl ? cj_flrun_spool_last_error(j->fl, at) : "";
}

void cj_job_show(struct cj_job *j, enum cj_show what, struct cj_out *o)
{
    if (!j->fl) return;
    switch (what) {
    case CJ_SHOW_WORKERS: cj_flrun_show_workers(j->fl, o); break;
    case CJ_SHOW_TASKS: cj_flrun_show_tasks(j->fl, o); break;
    case CJ_SHOW_REFS: cj_flrun_show_refs(j->fl, o); break;
    case CJ_SHOW_METRICS: cj_flrun_show_metrics(j->fl, o); break;
    default: break;
    }
}
