/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_jobdesc.c — the job description (lib/ops/jobdesc.c).  A refusal is one
 * line "<field>: <reason>" and leaves the description cleared; an accepted
 * description keeps its bounds, written back as JSON it parses to the same
 * bytes, and neither the log line nor the job's configuration (or its refusal)
 * changes when only the credentials do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/jobdesc.h"

static struct cj_job_desc d, d2;
static struct cj_config site, job, job2;
static char out[4 * CJ_JOBDESC_MAX];
static size_t olen;

static void check(int ok)
{
    if (!ok) abort();
}

static void emit(const char *s, size_t n)
{
    check(olen + n < sizeof out);
    memcpy(out + olen, s, n);
    olen += n;
}

static void emits(const char *s) { emit(s, strlen(s)); }

static void emit_str(const char *s)
{
    char esc[8];
    emits("\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') { esc[0] = '\\'; esc[1] = (char)*c; emit(esc, 2); }
        else if (*c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", *c); emits(esc); }
        else emit((const char *)c, 1);
    }
    emits("\"");
}

static void emit_key(const char *k, int *n)
{
    if ((*n)++) emits(",");
    emit_str(k);
    emits(":");
}

static const char *allowed(const char *section, const char *name, int v)
{
    return cj_config_find(section, name)->allowed[v];
}

/* The description as JSON, from its fields. */
static void write_back(const struct cj_job_desc *p)
{
    static const struct { unsigned bit; const char *key; size_t off; } strs[] = {
        {CJ_JD_JOB_ID, "job_id", offsetof(struct cj_job_desc, job_id)},
        {CJ_JD_SITE, "site", offsetof(struct cj_job_desc, site)},
        {CJ_JD_SERVER_URL, "server_url", offsetof(struct cj_job_desc, server_url)},
        {CJ_JD_CA_FILE, "ca_file", offsetof(struct cj_job_desc, ca_file)},
        {CJ_JD_CERT_FILE, "cert_file", offsetof(struct cj_job_desc, cert_file)},
        {CJ_JD_KEY_FILE, "key_file", offsetof(struct cj_job_desc, key_file)},
        {CJ_JD_PROJECT, "project_name", offsetof(struct cj_job_desc, project_name)},
        {CJ_JD_PARENT_URL, "parent_url", offsetof(struct cj_job_desc, parent_url)},
        {CJ_JD_WORKSPACE, "workspace", offsetof(struct cj_job_desc, workspace)},
    };
    int n = 0, m;
    olen = 0;
    emits("{");
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (p->has & strs[i].bit) { emit_key(strs[i].key, &n); emit_str((const char *)p + strs[i].off); }
    if (p->has & CJ_JD_SECURITY) { emit_key("connection_security", &n); emit_str(allowed("upstream", "connection_security", p->connection_security)); }
    if (p->has & CJ_JD_MODE) { emit_key("mode", &n); emit_str(allowed("relay", "mode", p->mode)); }
    if (p->has & CJ_JD_CREDENTIALS) {
        emit_key("credentials", &n);
        emits("{\"token\":"); emit_str(p->credentials.token);
        emits(",\"token_signature\":"); emit_str(p->credentials.token_signature);
        emits(",\"ssid\":"); emit_str(p->credentials.ssid);
        emits("}");
    }
    if (p->has & CJ_JD_WORKER) {
        emit_key("worker", &n);
        emits("{");
        m = 0;
        if (p->has & CJ_JD_ARGV) {
            emit_key("argv", &m);
            emits("[");
            for (int i = 0; i < p->worker.argc; i++) { if (i) emits(","); emit_str(cj_jobdesc_arg(p, i)); }
            emits("]");
        }
        if (p->has & CJ_JD_CWD) { emit_key("cwd", &m); emit_str(p->worker.cwd); }
        if (p->has & CJ_JD_ENV) {
            emit_key("env", &m);
            emits("{");
            for (int i = 0; i < p->worker.envc; i++) {
                char name[CJ_JOBDESC_NAME_MAX];
                const char *e = cj_jobdesc_env(p, i), *eq = strchr(e, '=');
                check(eq && (size_t)(eq - e) < sizeof name);
                memcpy(name, e, (size_t)(eq - e));
                name[eq - e] = '\0';
                if (i) emits(",");
                emit_str(name); emits(":"); emit_str(eq + 1);
            }
            emits("}");
        }
        if (p->has & CJ_JD_USER) { emit_key("user", &m); emit_str(p->worker.user); }
        if (p->has & CJ_JD_GROUP) { emit_key("group", &m); emit_str(p->worker.group); }
        if (p->has & CJ_JD_COUNT) { char num[16]; emit_key("count", &m); snprintf(num, sizeof num, "%d", p->worker.count); emits(num); }
        if (p->has & CJ_JD_LISTEN) { emit_key("listen", &m); emit_str(p->worker.listen); }
        emits("}");
    }
    if (p->has & CJ_JD_BOOTSTRAP) {
        emit_key("bootstrap", &n);
        emits("{");
        for (int i = 0; i < p->bootc; i++) {
            const char *raw, *k = cj_jobdesc_boot(p, i, &raw);
            if (i) emits(",");
            emit_str(k); emits(":"); emits(raw);
        }
        emits("}");
    }
    emits("}");
}

static void check_bounds(const struct cj_job_desc *p)
{
    check(p->has & CJ_JD_JOB_ID);
    check(strnlen(p->job_id, sizeof p->job_id) < sizeof p->job_id && p->job_id[0]);
    check(strnlen(p->server_url, sizeof p->server_url) < sizeof p->server_url);
    check(strnlen(p->worker.listen, sizeof p->worker.listen) < sizeof p->worker.listen);
    check(strnlen(p->credentials.token, sizeof p->credentials.token) < sizeof p->credentials.token);
    check(p->worker.argc >= 0 && p->worker.argc <= CJ_JOBDESC_ARGS_MAX);
    check(p->worker.envc >= 0 && p->worker.envc <= CJ_JOBDESC_ENV_MAX);
    check(p->bootc >= 0 && p->bootc <= CJ_JOBDESC_BOOT_MAX);
    check(!(p->has & CJ_JD_ARGV) || p->worker.argc >= 1);
    check(!(p->has & CJ_JD_COUNT) || (p->worker.count >= 1 && p->worker.count <= 64));
}

/* A refusal: one line, "<field>: ...", the description cleared. */
static void check_refusal(const char *why, const struct cj_job_desc *p)
{
    const char *colon = strstr(why, ": ");
    check(colon && colon > why && !strchr(why, '\n'));
    if (!p) return;
    for (size_t i = 0; i < sizeof *p; i++) check(((const unsigned char *)p)[i] == 0);
}

/* Credentials changed: the log line and the configuration stay the same. */
static void check_credentials_unseen(void)
{
    char line[8192], line2[8192], why[512], why2[512];
    cj_jobdesc_describe(&d, line, sizeof line);
    int rc = cj_jobdesc_config(&d, &site, &job, why, sizeof why);
    d2 = d;
    if (d2.has & CJ_JD_CREDENTIALS) {
        memset(d2.credentials.token, 'T', 100);
        d2.credentials.token[100] = '\0';
        snprintf(d2.credentials.ssid, sizeof d2.credentials.ssid, "other");
    }
    cj_jobdesc_describe(&d2, line2, sizeof line2);
    check(!strcmp(line, line2) && !strchr(line, '\n'));
    memset(&job2, 0, sizeof job2);
    int rc2 = cj_jobdesc_config(&d2, &site, &job2, why2, sizeof why2);
    check(rc == rc2);
    if (rc == 0) {
        check(!memcmp(&job, &job2, sizeof job));
        check(!strcmp(job.relay.job_id, d.job_id));
    } else {
        check(!strcmp(why, why2));
        check_refusal(why, NULL);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t n)
{
    char why[512], why2[512];
    if (!site.relay.site[0]) {
        cj_config_defaults(&site);
        strcpy(site.relay.site, "site-1");
        site.relay.spool_allow_tmpfs = true;
    }
    char *copy = malloc(n ? n : 1);   /* exactly n bytes: an over-read is caught */
    memcpy(copy, data, n);
    int rc = cj_jobdesc_parse(copy, n, &d, why, sizeof why);
    free(copy);
    if (rc) {
        check_refusal(why, &d);
        return 0;
    }
    check_bounds(&d);
    write_back(&d);
    check(cj_jobdesc_parse(out, olen, &d2, why2, sizeof why2) == 0);
    check(!memcmp(&d, &d2, sizeof d));
    check_credentials_unseen();
    cj_jobdesc_clear(&d);
    cj_jobdesc_clear(&d2);
    return 0;
}
