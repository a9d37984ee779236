/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.c — the site daemon's table of jobs (see jobs.h). */
#include "ops/jobs.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fl/creds.h"
#include "net/tlscheck.h"
#include "ops/jobdesc.h"
#include "ops/jobfds.h"
#include "util/account.h"
#include "util/clock.h"
#include "util/log.h"

_Static_assert(CJ_JOBDESC_LINE_MAX <= CJ_STATUS_MAX_LINE, "a job start line must fit the status socket's line");
_Static_assert(CJ_JOBDESC_TLS_FDS == CJ_STATUS_MAX_FDS, "a job start line brings at most its TLS files");

/* Ended jobs kept at once beyond the live ones, whatever job_linger says. */
#define ENDED_KEEP_MAX 256
#define SWEEP_SECS 1

struct slot {
    struct cj_job *job;
    bool ini;               /* the INI's job: kept whole after its end (show tasks, refs) */
    bool ended;             /* its ended() came: release it from the loop */
    time_t started, ended_at;   /* wall clock, for show jobs */
};

struct waiter {
    struct cj_status_wait *w;
    char id[CJ_CFG_NAME_MAX];
};

struct cj_jobs {
    struct event_base *base;
    struct cj_config site;
    struct cj_jobs_cbs cbs;
    char dir[CJ_CFG_PATH_MAX];      /* <dir of the status socket>/jobs */
    struct slot *slots;             /* start order */
    size_t n, cap;
    struct waiter *waiters;
    size_t nwait, capwait;
    struct event *reap;             /* armed when a job ends: its cell goes from the loop */
    int reap_tries;                 /* rounds waited for a job's last words to its client parent */
    struct event *sweep;            /* drops records past job_linger */
};

/* ---- records ---------------------------------------------------------------------- */

static struct slot *slot_of(struct cj_jobs *js, const struct cj_job *j)
{
    for (size_t i = 0; i < js->n; i++)
        if (js->slots[i].job == j) return &js->slots[i];
    return NULL;
}

static void drop_slot(struct cj_jobs *js, size_t i)
{
    cj_job_free(js->slots[i].job);
    memmove(&js->slots[i], &js->slots[i + 1], (js->n - i - 1) * sizeof *js->slots);
    js->n--;
}

static int add_slot(struct cj_jobs *js, struct cj_job *j, bool ini)
{
    if (js->n == js->cap) {
        size_t cap = js->cap ? 2 * js->cap : 8;
        struct slot *s = realloc(js->slots, cap * sizeof *s);
        if (!s) return -1;
        js->slots = s;
        js->cap = cap;
    }
    js->slots[js->n++] = (struct slot){.job = j, .ini = ini, .started = time(NULL)};
    return 0;
}

/* The slot of the newest job with that id, or -1. */
static ssize_t find_slot(const struct cj_jobs *js, const char *id)
{
    for (size_t i = js->n; i-- > 0;)
        if (!strcmp(cj_job_id(js->slots[i].job), id)) return (ssize_t)i;
    return -1;
}

struct cj_job *cj_jobs_find(struct cj_jobs *js, const char *id)
{
    ssize_t i = find_slot(js, id);
    return i < 0 ? NULL : js->slots[i].job;
}

size_t cj_jobs_live(const struct cj_jobs *js)
{
    size_t n = 0;
    for (size_t i = 0; i < js->n; i++) n += cj_job_state(js->slots[i].job) != CJ_JOB_ENDED;
    return n;
}

size_t cj_jobs_count(const struct cj_jobs *js) { return js->n; }
struct cj_job *cj_jobs_at(struct cj_jobs *js, size_t i) { return i < js->n ? js->slots[i].job : NULL; }

/* ---- job wait ------------------------------------------------------------------------- */

static void outcome_text(const struct cj_job *j, char *buf, size_t size)
{
    snprintf(buf, size, "job_id: %s\noutcome: %d\nreason: %s\n", cj_job_id(j), (int)cj_job_outcome(j),
             cj_job_reason(j));
}

int cj_jobs_wait(struct cj_jobs *js, const char *id, struct cj_status_wait *w, char *msg, size_t msgsz)
{
    struct cj_job *j = cj_jobs_find(js, id);
    if (!j) { snprintf(msg, msgsz, "no job '%.64s'", id); return 404; }
    if (cj_job_state(j) == CJ_JOB_ENDED) {
        char text[CJ_JOB_REASON_MAX + 128];
        outcome_text(j, text, sizeof text);
        if (!w) { snprintf(msg, msgsz, "%s", text); return 0; }
        cj_status_answer(w, 0, text);   /* the same answer as at the end */
        return CJ_STATUS_DEFERRED;
    }
    if (!w) { snprintf(msg, msgsz, "job %s has not ended; this client cannot wait", id); return 409; }
    if (js->nwait == js->capwait) {
        size_t cap = js->capwait ? 2 * js->capwait : 8;
        struct waiter *nw = realloc(js->waiters, cap * sizeof *nw);
        if (!nw) { snprintf(msg, msgsz, "out of memory"); return 500; }
        js->waiters = nw;
        js->capwait = cap;
    }
    js->waiters[js->nwait].w = w;
    snprintf(js->waiters[js->nwait].id, sizeof js->waiters[js->nwait].id, "%s", id);
    js->nwait++;
    return CJ_STATUS_DEFERRED;
}

void cj_jobs_cancel_wait(struct cj_jobs *js, struct cj_status_wait *w)
{
    for (size_t i = 0; i < js->nwait; i++)
        if (js->waiters[i].w == w) {
            js->waiters[i] = js->waiters[--js->nwait];
            return;
        }
}

static void answer_waiters(struct cj_jobs *js, const struct cj_job *j)
{
    char text[CJ_JOB_REASON_MAX + 128];
    outcome_text(j, text, sizeof text);
    for (size_t i = 0; i < js->nwait;) {
        if (strcmp(js->waiters[i].id, cj_job_id(j))) { i++; continue; }
        struct cj_status_wait *w = js->waiters[i].w;
        js->waiters[i] = js->waiters[--js->nwait];
        cj_status_answer(w, 0, text);
    }
}

/* ---- ending ------------------------------------------------------------------------------ */

static void on_job_ended(void *ctx, struct cj_job *j)
{
    struct cj_jobs *js = ctx;
    struct slot *s = slot_of(js, j);
    if (!s) return;
    s->ended = true;
    s->ended_at = time(NULL);
    answer_waiters(js, j);
    struct timeval now = {0, 0};
    js->reap_tries = 0;
    evtimer_add(js->reap, &now);   /* the cell goes from the loop, not from inside it */
    if (js->cbs.ended) js->cbs.ended(js->cbs.ctx, j);
}

/* Ended jobs let go of their cells; one whose STOPPED to its client parent is
 * still queued waits for it, 0.1 s at a time, 2 s at most. */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct cj_jobs *js = arg;
    bool waiting = false;
    for (size_t i = 0; i < js->n; i++) {
        struct slot *s = &js->slots[i];
        if (s->ended && !s->ini && !cj_job_released(s->job) && cj_job_flushing(s->job) && js->reap_tries < 20) {
            waiting = true;
            continue;
        }
        if (s->ended && !s->ini && !cj_job_released(s->job)) {
            cj_job_release(s->job);
            cj_log_info("job %s: cell closed, record kept %g s", cj_job_id(s->job), js->site.relay.job_linger);
        }
    }
    if (waiting) {
        struct timeval tenth = {0, 100 * 1000};
        js->reap_tries++;
        evtimer_add(js->reap, &tenth);
    }
}

/* Records past job_linger go; so do the oldest beyond ENDED_KEEP_MAX. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct cj_jobs *js = arg;
    double now = cj_now();
    size_t ended = 0;
    for (size_t i = 0; i < js->n; i++) ended += cj_job_released(js->slots[i].job);
    for (size_t i = 0; i < js->n;) {
        struct cj_job *j = js->slots[i].job;
        if (cj_job_released(j) && (now - cj_job_ended_at(j) >= js->site.relay.job_linger || ended > ENDED_KEEP_MAX)) {
            ended--;
            drop_slot(js, i);
        } else {
            i++;
        }
    }
}

/* ---- starting ------------------------------------------------------------------------------ */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    if (remove(path) != 0 && errno != ENOENT) cj_log_warning("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

/* Left by a daemon that did not end cleanly: job directories (bootstrap
 * files, worker sockets) of jobs no one runs any more, and those jobs' spool
 * directories, <spool_dir>/<job_id>/ (only theirs: another daemon may share
 * the spool directory). */
static void clean_stale(const char *dir, const char *spool_dir)
{
    char path[CJ_CFG_PATH_MAX + 320];
    struct stat sb;
    DIR *dp = opendir(dir);
    if (!dp) return;
    for (struct dirent *e; (e = readdir(dp));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        cj_log_warning("removing the stale directory of job %s (%s), left by an earlier daemon", e->d_name, path);
        cj_job_remove_dir(path);
        snprintf(path, sizeof path, "%s/%s", spool_dir, e->d_name);
        if (spool_dir[0] && lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            cj_log_warning("removing the stale spool directory of job %s (%s)", e->d_name, path);
            nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        }
    }
    closedir(dp);
}

struct cj_jobs *cj_jobs_new(struct event_base *base, const struct cj_config *site, const struct cj_jobs_cbs *cbs,
                            struct cj_err *err)
{
    struct cj_jobs *js = calloc(1, sizeof *js);
    if (!js) { cj_fail(err, CJ_E_NOMEM, 0, "out of memory"); return NULL; }
    js->base = base;
    js->site = *site;
    js->cbs = *cbs;
    /* Named after the status socket, which only one live daemon can hold, so
     * two daemons sharing a runtime directory never touch each other's jobs. */
    size_t n = strlen(site->status.socket);
    if (n > 5 && !strcmp(site->status.socket + n - 5, ".sock")) n -= 5;
    if (n + sizeof ".jobs" > sizeof js->dir) {
        cj_fail(err, CJ_E_LIMIT, 0, "status socket path too long for a jobs directory beside it");
        free(js);
        return NULL;
    }
    snprintf(js->dir, sizeof js->dir, "%.*s.jobs", (int)n, site->status.socket);
    /* 0711: a job's workers running under another account (worker.user) must
     * reach their job's directory; nobody but the daemon may list it. */
    if (mkdir(js->dir, 0711) != 0 && errno != EEXIST) {
        cj_fail(err, CJ_E_INVALID, 0, "cannot create %s: %s", js->dir, strerror(errno));
        free(js);
        return NULL;
    }
    clean_stale(js->dir, site->relay.spool_dir);
    js->reap = event_new(base, -1, 0, on_reap, js);
    js->sweep = event_new(base, -1, EV_PERSIST, on_sweep, js);
    struct timeval every = {SWEEP_SECS, 0};
    if (!js->reap || !js->sweep || event_add(js->sweep, &every) != 0) {
        cj_fail(err, CJ_E_NOMEM, 0, "cannot create the job table's events");
        cj_jobs_free(js);
        return NULL;
    }
    return js;
}

void cj_jobs_free(struct cj_jobs *js)
{
    if (!js) return;
    while (js->n) drop_slot(js, js->n - 1);
    free(js->slots);
    free(js->waiters);   /* their clients go with the status socket */
    if (js->reap) event_free(js->reap);
    if (js->sweep) event_free(js->sweep);
    rmdir(js->dir);   /* empty unless another daemon shares it */
    free(js);
}

void cj_jobs_set_site(struct cj_jobs *js, const struct cj_config *site) { js->site = *site; }

struct cj_job *cj_jobs_start_config(struct cj_jobs *js, struct cj_err *err)
{
    struct cj_job_cbs cbs = {.ctx = js, .ended = on_job_ended};
    struct cj_job *j = cj_job_new(js->base, &js->site, NULL, &cbs, err);
    if (j && add_slot(js, j, true) != 0) {
        cj_job_free(j);
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory");
        return NULL;
    }
    return j;
}

/* The job's own directory, and its worker socket there unless the
 * description names a listener. */
static int place_job(struct cj_jobs *js, const struct cj_job_desc *d, struct cj_config *cfg, char *dir, size_t dirsz,
                     char *msg, size_t msgsz)
{
    if ((size_t)snprintf(dir, dirsz, "%s/%s", js->dir, d->job_id) >= dirsz) {
        snprintf(msg, msgsz, "job_id: the job's directory under %s would be too long", js->dir);
        return 400;
    }
    if (d->has & CJ_JD_LISTEN) return 0;
    char url[CJ_CFG_PATH_MAX + 32], why[256];
    snprintf(url, sizeof url, "unix:%s/workers.sock", dir);
    if (cj_config_parse_value("workers.listen", url, &cfg->workers.listen, sizeof cfg->workers.listen, why,
                              sizeof why) != 0) {
        snprintf(msg, msgsz, "worker.listen: the default %s cannot be used: %s", url, why);
        return 400;
    }
    return 0;
}

static void desc_creds(const struct cj_job_desc *d, struct cj_creds *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->token, sizeof c->token, "%s", d->credentials.token);
    snprintf(c->signature, sizeof c->signature, "%s", d->credentials.token_signature);
    snprintf(c->ssid, sizeof c->ssid, "%s", d->credentials.ssid);
    c->token_src = c->signature_src = c->ssid_src = CJ_CREDS_JOB;
    if (!c->ssid[0]) c->flags |= CJ_CREDS_SSID_MISSING;
}

/* The first TLS file problem a job's start would hit, as "field: why"
 * (net/tlscheck.h: only the certain ones). */
struct tls_first {
    char *msg;
    size_t msgsz;
    bool found;
};

static void tls_first_report(void *arg, const char *which, const char *why)
{
    struct tls_first *t = arg;
    if (!t->found) snprintf(t->msg, t->msgsz, "%s: %s", which, why);
    t->found = true;
}

/* The same checks for a file passed as a descriptor (fds->given[i]) as for one named by its path. */
static int check_tls_files(const struct cj_config *cfg, const struct cj_jobfds *fds, char *msg, size_t msgsz)
{
    if (cfg->upstream.connection_security == CJ_SEC_CLEAR) return 0;
    struct cj_tls_files f = {.ca_file = cfg->upstream.ca_file, .cert_file = cfg->upstream.cert_file,
                             .key_file = cfg->upstream.key_file,
                             .mutual = cfg->upstream.connection_security == CJ_SEC_MTLS, .certain_only = true,
                             .ca_pem = fds->given[0], .cert_pem = fds->given[1], .key_pem = fds->given[2]};
    struct tls_first t = {msg, msgsz, false};
    return cj_tls_check_files(&f, tls_first_report, &t) ? -1 : 0;
}

static int start_desc(struct cj_jobs *js, const struct cj_job_desc *d, const struct cj_jobfds *fds, char *msg,
                      size_t msgsz)
{
    /* Names are looked up here, once per job start (numeric ids need no lookup). */
    struct cj_account acc;
    char why[300];
    if ((d->has & (CJ_JD_USER | CJ_JD_GROUP)) &&
        cj_account_resolve((d->has & CJ_JD_USER) ? d->worker.user : NULL, (d->has & CJ_JD_GROUP) ? d->worker.group : NULL,
                           &acc, why, sizeof why) != 0) {
        snprintf(msg, msgsz, "worker.%s", why);
        return 400;
    }
    ssize_t old = find_slot(js, d->job_id);
    if (old >= 0 && cj_job_state(js->slots[old].job) != CJ_JOB_ENDED) { snprintf(msg, msgsz, "job %s is running", d->job_id); return 409; }
    if (cj_jobs_live(js) >= (size_t)js->site.relay.max_jobs) {
        snprintf(msg, msgsz, "%zu jobs are running, the most [relay] max_jobs allows", cj_jobs_live(js));
        return 503;
    }
    struct cj_config *cfg = malloc(sizeof *cfg);
    if (!cfg) { snprintf(msg, msgsz, "out of memory"); return 500; }
    char dir[CJ_CFG_PATH_MAX];
    int rc = cj_jobdesc_config(d, &js->site, cfg, msg, msgsz) != 0 ? 400 : place_job(js, d, cfg, dir, sizeof dir, msg,
                                                                                         msgsz);
    if (!rc && check_tls_files(cfg, fds, msg, msgsz) != 0) rc = 400;
    if (rc) { free(cfg); return rc; }
    if (old >= 0) drop_slot(js, (size_t)old);   /* the same id again: the old record goes */
    struct cj_creds creds;
    if (d->has & CJ_JD_CREDENTIALS) desc_creds(d, &creds);
    /* A job's workers start in a clean environment: PATH and what its description gives. */
    struct cj_job_opts opts = {.creds = (d->has & CJ_JD_CREDENTIALS) ? &creds : NULL, .tls_pem = fds->given, .dir = dir,
                               .workspace = (d->has & CJ_JD_WORKSPACE) ? d->workspace : NULL,
                               .connect_timeout = cfg->upstream.first_connect_timeout, .clean_env = true,
                               .worker_env = d->worker.env, .worker_envc = d->worker.envc,
                               .worker_cwd = (d->has & CJ_JD_CWD) ? d->worker.cwd : NULL,
                               .worker_account = (d->has & (CJ_JD_USER | CJ_JD_GROUP)) ? &acc : NULL,
                               .boot_extra = d->boot, .boot_extrac = d->bootc,
                               .parent_url = (d->has & CJ_JD_PARENT_URL) ? d->parent_url : NULL};
    struct cj_job_cbs cbs = {.ctx = js, .ended = on_job_ended};
    struct cj_err err = {0};
    struct cj_job *j = cj_job_new(js->base, cfg, &opts, &cbs, &err);
    cj_creds_clear(&creds);
    free(cfg);
    if (!j) { snprintf(msg, msgsz, "job %s could not start: %s", d->job_id, err.msg); return 500; }
    if (add_slot(js, j, false) != 0) { cj_job_free(j); snprintf(msg, msgsz, "out of memory"); return 500; }
    char line[512];
    cj_jobdesc_describe(d, line, sizeof line);   /* "job <id> site ..." */
    size_t head = strlen("job ") + strlen(d->job_id);
    cj_log_info("job %s started:%s", d->job_id, strlen(line) > head ? line + head : "");
    snprintf(msg, msgsz, "job %s started", d->job_id);
    return 0;
}

int cj_jobs_start_json(struct cj_jobs *js, const char *json, const int *fds, int nfds, char *msg, size_t msgsz)
{
    struct cj_job_desc *d = malloc(sizeof *d);
    if (!d) { snprintf(msg, msgsz, "out of memory"); return 500; }
    struct cj_jobfds files;
    int rc = cj_jobdesc_parse(json, strlen(json), d, msg, msgsz) != 0 ? 400 : cj_jobfds_read(d, fds, nfds, &files, msg, msgsz);
    if (!rc) {
        rc = start_desc(js, d, &files, msg, msgsz);
        cj_jobfds_free(&files);
    }
    if (rc) cj_log_warning("job start refused (%d): %s", rc, msg);
    cj_jobdesc_clear(d);
    free(d);
    return rc;
}

/* ---- stopping ------------------------------------------------------------------------------- */

int cj_jobs_stop(struct cj_jobs *js, const char *id, const char *reason, char *msg, size_t msgsz)
{
    struct cj_job *j = cj_jobs_find(js, id);
    if (!j) { snprintf(msg, msgsz, "no job '%.64s'", id); return 404; }
    if (cj_job_state(j) == CJ_JOB_ENDED) { snprintf(msg, msgsz, "job %s has ended already", id); return 409; }
    char why[300];
    snprintf(why, sizeof why, "job stop%s%.256s", reason && reason[0] ? ": " : "", reason ? reason : "");
    if (cj_job_state(j) == CJ_JOB_STOPPING) {   /* a second stop, as a second SIGTERM: no more waiting */
        cj_log_info("job %s: %s again while it drains: stopping now", id, why);
        cj_job_stop_now(j, why);
        return 0;
    }
    cj_log_info("job %s: %s", id, why);
    cj_job_drain(j, why);
    return 0;
}

void cj_jobs_drain_all(struct cj_jobs *js, const char *why)
{
    for (size_t i = 0; i < js->n; i++)
        if (cj_job_state(js->slots[i].job) != CJ_JOB_ENDED) cj_job_drain(js->slots[i].job, why);
}

void cj_jobs_stop_all(struct cj_jobs *js, const char *why)
{
    for (size_t i = 0; i < js->n; i++) cj_job_stop_now(js->slots[i].job, why);
}

/* ---- show jobs -------------------------------------------------------------------------------- */

static const char *wall(time_t t, char *buf, size_t size)
{
    return cj_utc_text(t, buf, size)[0] ? buf : "-";
}

void cj_jobs_show(struct cj_jobs *js, struct cj_out *o)
{
    static const struct cj_col cols[] = {{"job_id", 38}, {"state", 9}, {"outcome", 8}, {"workers", 8},
                                         {"flare", 12}, {"started", 21}, {"ended", 21}, {"server", 32},
                                         {"reason", 0}};
    cj_out_table_begin(o, "jobs", cols, 9);
    for (size_t i = 0; i < js->n; i++) {
        struct slot *s = &js->slots[i];
        enum cj_job_state st = cj_job_state(s->job);
        char t1[32], t2[32], rc[16];
        snprintf(rc, sizeof rc, st == CJ_JOB_ENDED ? "%d" : "-", (int)cj_job_outcome(s->job));
        cj_out_row_begin(o);
        cj_out_cell_str(o, cj_job_id(s->job));
        cj_out_cell_str(o, cj_job_state_name(st));
        cj_out_cell_str(o, rc);
        cj_out_cell_u64(o, cj_job_workers(s->job));
        cj_out_cell_str(o, cj_job_generation(s->job));
        cj_out_cell_str(o, wall(s->started, t1, sizeof t1));
        cj_out_cell_str(o, wall(s->ended_at, t2, sizeof t2));
        cj_out_cell_str(o, cj_job_upstream_url(s->job));
        cj_out_cell_str(o, st == CJ_JOB_ENDED ? cj_job_reason(s->job) : "");
        cj_out_row_end(o);
    }
    cj_out_table_end(o);
}
