/* SPDX-License-Identifier: Apache-2.0 */
/* pipecfg.c — the release trainer's config/client_api_config.json (see
 * pipe.h, releases.md §4.2 and §5): built once, before any fork, into one
 * bounded text that the launcher's child writes. */
#include "fl/pipe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

const char *const cj_fl_pipe_owned_keys[] = {
    "site_name", "job_id", "auth_token", "auth_token_signature", "root_conn_props", "cp_conn_props",
    "relay_conn_props", NULL,
};

int cj_fl_pipe_leaf(char *out, size_t n, const char *site, const char *job, const char *mode)
{
    return (size_t)snprintf(out, n, "%s_%s_%s", site, job, mode) < n ? 0 : -1;
}

/* An appending writer into a fixed buffer; ovf set when it does not fit. */
struct w {
    char *p;
    size_t len, cap;
    bool ovf;
};

static void put(struct w *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct w *w, const char *fmt, ...)
{
    if (w->ovf) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->p + w->len, w->cap - w->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= w->cap - w->len) w->ovf = true;
    else w->len += (size_t)n;
}

static void put_raw(struct w *w, const char *s, size_t n)
{
    if (w->ovf || n >= w->cap - w->len) {
        w->ovf = true;
        return;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
    w->p[w->len] = 0;
}

/* A JSON string. */
static void put_str(struct w *w, const char *s)
{
    put_raw(w, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') put(w, "\\%c", *c);
        else if (*c < 0x20) put(w, "\\u%04x", *c);
        else put_raw(w, (const char *)c, 1);
    }
    put_raw(w, "\"", 1);
}

static void put_conn(struct w *w, const char *key, const char *fqcn, const char *url, const char *sec)
{
    put(w, ",\n  ");
    put_str(w, key);
    put(w, ": {\"fqcn\": ");
    put_str(w, fqcn);
    put(w, ", \"url\": ");
    put_str(w, url);
    put(w, ", \"connection_security\": ");
    put_str(w, sec);
    put(w, "}");
}

static void put_pipe(struct w *w, const struct cj_fl_launch_info *c)
{
    put(w, "\"pipe\": {\"CLASS_NAME\": \"%s\", \"ARG\": {\"mode\": \"ACTIVE\", \"site_name\": ", CJ_FL_PIPE_CELL_PIPE);
    put_str(w, c->site);
    put(w, ", \"token\": ");
    put_str(w, c->job_id);
    put(w, ", \"root_url\": ");
    put_str(w, c->worker_url);
    put(w, ", \"secure_mode\": false, \"workspace_dir\": ");
    put_str(w, c->workspace_dir && c->workspace_dir[0] ? c->workspace_dir : ".");
    put(w, "}}");
}

/* One exchange: the description's object with the relay's "pipe" added. */
struct xchg {
    struct w *w;
    const struct cj_fl_launch_info *c;
    int n;
};

static int copy_member(void *ud, const char *key, size_t key_len, const struct cj_json_val *v, struct cj_err *err)
{
    struct xchg *x = ud;
    if (key_len == 4 && !memcmp(key, "pipe", 4))
        return cj_fail(err, CJ_E_INVALID, 0, "\"pipe\" is the relay's to write");
    put(x->w, "%s", x->n++ ? ", " : "");
    put_str(x->w, key);
    put(x->w, ": ");
    put_raw(x->w, v->raw, v->raw_len);
    return 0;
}

static int put_exchange(struct w *w, const struct cj_fl_launch_info *c, const char *name, const char *raw,
                        struct cj_err *err)
{
    struct xchg x = {w, c, 0};
    put(w, ",\n  ");
    put_str(w, name);
    put(w, ": {");
    if (raw && cj_json_object_walk(raw, strlen(raw), copy_member, &x, err) != 0) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return cj_fail(err, CJ_E_INVALID, 0, "bootstrap.%s: %s", name, why);
    }
    if (!raw) {
        put(w, "\"pipe_channel_name\": \"task\"");
        x.n++;
    }
    put(w, "%s", x.n ? ", " : "");
    put_pipe(w, c);
    put(w, "}");
    return 0;
}

static const char *pair_value(const char *k) { return k + strlen(k) + 1; }

int cj_fl_pipe_config_text(const struct cj_fl_launch_info *c, char **out, struct cj_err *err)
{
    *out = NULL;
    if (!c->site || !c->site[0] || !c->job_id || !c->job_id[0] || !c->worker_url || strncmp(c->worker_url, "tcp://", 6))
        return cj_fail(err, CJ_E_INVALID, 0, "pipe config: a site, a job id and a tcp:// worker listener are needed"),
               -1;
    struct w w = {malloc(CJ_FL_PIPE_CONFIG_MAX), 0, CJ_FL_PIPE_CONFIG_MAX, false};
    if (!w.p) return cj_fail(err, CJ_E_NOMEM, 0, "pipe config: out of memory"), -1;
    w.p[0] = 0;
    char parent[512];
    snprintf(parent, sizeof parent, "%s.%s", c->site, c->job_id);
    const char *task = NULL, *k = c->extra;
    int rc = 0;
    put(&w, "{\n  \"site_name\": ");
    put_str(&w, c->site);
    put(&w, ",\n  \"job_id\": ");
    put_str(&w, c->job_id);
    put(&w, ",\n  \"auth_token\": ");
    put_str(&w, c->auth_token && c->auth_token[0] ? c->auth_token : "NA");
    put(&w, ",\n  \"auth_token_signature\": ");
    put_str(&w, c->auth_token_signature && c->auth_token_signature[0] ? c->auth_token_signature : "NA");
    put_conn(&w, "root_conn_props", "server", c->server_url ? c->server_url : "", c->server_security ? c->server_security : "clear");
    put_conn(&w, "cp_conn_props", parent, c->worker_url, "clear");
    for (int i = 0; !rc && i < c->extrac; i++, k = pair_value(k) + strlen(pair_value(k)) + 1) {
        for (int o = 0; cj_fl_pipe_owned_keys[o]; o++)
            if (!strcmp(k, cj_fl_pipe_owned_keys[o]))
                rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap.%s: set by the relay", k);
        if (rc) break;
        if (!strcmp(k, "TASK_EXCHANGE")) task = pair_value(k);
        if (!strcmp(k, "TASK_EXCHANGE") || !strcmp(k, "METRICS_EXCHANGE")) {
            rc = put_exchange(&w, c, k, pair_value(k), err);
        } else {
            put(&w, ",\n  ");
            put_str(&w, k);
            put(&w, ": %s", pair_value(k));
        }
    }
    if (!rc && !task) rc = put_exchange(&w, c, "TASK_EXCHANGE", NULL, err);
    put(&w, "\n}\n");
    if (!rc && w.ovf) rc = cj_fail(err, CJ_E_LIMIT, 0, "pipe config: longer than %d bytes", CJ_FL_PIPE_CONFIG_MAX);
    if (rc) {
        explicit_bzero(w.p, w.cap);
        free(w.p);
        return -1;
    }
    *out = w.p;
    return 0;
}

static int find_launch_once(void *ud, const char *key, size_t key_len, const struct cj_json_val *v, struct cj_err *err)
{
    (void)err;
    if (key_len == 11 && !memcmp(key, "launch_once", 11) && v->type == CJ_JSON_BOOL) *(bool *)ud = v->b;
    return 0;
}

bool cj_fl_pipe_launch_once(const char *extra, int extrac)
{
    bool once = false;
    const char *k = extra;
    for (int i = 0; k && i < extrac; i++, k = pair_value(k) + strlen(pair_value(k)) + 1)
        if (!strcmp(k, "TASK_EXCHANGE")) {
            struct cj_err err;
            (void)cj_json_object_walk(pair_value(k), strlen(pair_value(k)), find_launch_once, &once, &err);
        }
    return once;
}

/* ---- the launch style ------------------------------------------------------------------------ */

static int pipe_leaf(char *out, size_t n, const char *site, const char *job, unsigned seq)
{
    (void)seq;   /* CellPipe's name is fixed: one trainer per job */
    return cj_fl_pipe_leaf(out, n, site, job, "active");
}

const struct cj_launch_style cj_fl_pipe_launch_style = {
    .name = "pipe", .leaf = pipe_leaf, .bootstrap = false,
    .env_set = "CLIENT_API_TYPE=EX_PROCESS_API", .config_file = CJ_FL_PIPE_CONFIG_FILE,
};
