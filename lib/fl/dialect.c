/* SPDX-License-Identifier: Apache-2.0 */
/* dialect.c — the table of FLARE generations (see dialect.h): the cellapi row
 * over the client_api sessions (session.c), the pipe row over the pipe peer
 * (pipe.c), and the version -> row rule. */
#include "fl/dialect.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "fl/pipe.h"

/* ---- cellapi: the client_api sessions as they are ---------------------------------------- */

static void *ca_create(const struct cj_fl_workers_cfg *c, struct cj_err *err)
{
    struct cj_fl_sessions *s = cj_fl_sessions_new(c->base, c->ep, c->sc, c->tt, c->submit);
    if (!s) cj_fail(err, CJ_E_INVALID, 0, "cannot create the worker sessions");
    return s;
}
static void ca_destroy(void *w) { cj_fl_sessions_free(w); }
static void ca_dispatch_ops(void *w, struct cj_fl_dispatch_ops *out) { cj_fl_sessions_dispatch_ops(w, out); }
static int ca_expect(void *w, const char *fqcn, const char *token) { return cj_fl_sessions_expect(w, fqcn, token); }
static void ca_set_pid(void *w, const char *fqcn, pid_t pid) { cj_fl_sessions_set_pid(w, fqcn, pid); }
static int ca_exited(void *w, const char *fqcn, const char *why) { return cj_fl_sessions_worker_exited(w, fqcn, why); }
static void ca_link_up(void *w, const char *fqcn) { cj_fl_sessions_link_up(w, fqcn); }
static void ca_link_down(void *w, const char *fqcn, const char *why) { cj_fl_sessions_link_down(w, fqcn, why); }
static bool ca_in_barrier(const void *w, const char *fqcn) { return cj_fl_sessions_in_barrier(w, fqcn); }
static size_t ca_busy(const void *w) { return cj_fl_sessions_busy(w); }
static void ca_progress(void *w, const char *fqcn) { cj_fl_sessions_progress(w, fqcn); }
static int ca_shutdown(void *w, const char *fqcn, const char *reason, cj_fl_shutdown_fn fn, void *arg)
{
    return cj_fl_sessions_shutdown(w, fqcn, reason, fn, arg);
}
static size_t ca_workers(const void *w, cj_fl_worker_fn fn, void *arg) { return cj_fl_sessions_workers(w, fn, arg); }
static size_t ca_metrics(const void *w, cj_fl_metric_fn fn, void *arg) { return cj_fl_sessions_metrics(w, fn, arg); }
static void ca_stats(const void *w, struct cj_fl_sessions_stats *st) { cj_fl_sessions_get_stats(w, st); }

static const struct cj_fl_workers_ops cellapi_workers = {
    .create = ca_create, .destroy = ca_destroy, .dispatch_ops = ca_dispatch_ops, .expect = ca_expect,
    .set_pid = ca_set_pid, .worker_exited = ca_exited, .link_up = ca_link_up, .link_down = ca_link_down,
    .in_barrier = ca_in_barrier, .busy = ca_busy, .progress = ca_progress, .shutdown = ca_shutdown,
    .workers = ca_workers, .metrics = ca_metrics, .get_stats = ca_stats,
};

/* Keys the relay writes into every bootstrap file (fl/bootstrap.h). */
static const char *const cellapi_owned[] = {
    "schema_version", "execution_mode", "connect_url", "cj_fqcn", "cj_pid", "trainer_fqcn",
    "launch_token", "job_id", "site_name", "secure_mode", NULL,
};

/* ---- the table ------------------------------------------------------------------------------ */

static const struct cj_fl_dialect cellapi = {
    .name = "cellapi", .generation = "2.9+", .launch = &cj_launch_style_bootstrap,
    .workers = &cellapi_workers, .tcp_listener = false, .owned_keys = cellapi_owned,
    .wire = CJ_STREAM_WIRE_DEV, .cp_started_repeat = 0,
};

static const struct cj_fl_dialect pipe_row = {
    .name = "pipe", .generation = "2.7-2.8", .launch = &cj_fl_pipe_launch_style,
    .workers = &cj_fl_pipe_workers_ops, .tcp_listener = true, .owned_keys = cj_fl_pipe_owned_keys,
    .launch_config = cj_fl_pipe_config_text, .wire = CJ_STREAM_WIRE_2_8, .cp_started_repeat = 5.0,
};

static const struct cj_fl_dialect *const rows[] = {&cellapi, &pipe_row};

const struct cj_fl_dialect *const *cj_fl_dialects(size_t *n)
{
    *n = sizeof rows / sizeof *rows;
    return rows;
}

/* "<digits>.<digits>" at the front of v; -1 when it is not there. */
static int major_minor(const char *v, long *major, long *minor)
{
    char *end;
    if (!isdigit((unsigned char)v[0])) return -1;
    *major = strtol(v, &end, 10);
    if (*end != '.' || !isdigit((unsigned char)end[1])) return -1;
    *minor = strtol(end + 1, &end, 10);
    if (*end && *end != '.' && !isalpha((unsigned char)*end) && *end != '+' && *end != '-') return -1;
    return 0;
}

const struct cj_fl_dialect *cj_fl_dialect_of(const char *version, struct cj_err *err)
{
    long ma, mi;
    if (!version || !version[0]) {
        cj_fail(err, CJ_E_INVALID, 0, "empty (a FLARE version such as 2.8.1 or 2.9.0)");
        return NULL;
    }
    if (strlen(version) >= CJ_FL_VERSION_MAX || major_minor(version, &ma, &mi) != 0) {
        cj_fail(err, CJ_E_INVALID, 0, "'%.40s' is not a FLARE version (MAJOR.MINOR[.PATCH...], e.g. 2.8.1)", version);
        return NULL;
    }
    if (ma < 2 || (ma == 2 && mi < 7)) {
        cj_fail(err, CJ_E_INVALID, 0, "FLARE %s is not supported (2.7 and later)", version);
        return NULL;
    }
    if (ma == 2 && mi <= 8) return &pipe_row;
    return &cellapi;
}
