/* SPDX-License-Identifier: Apache-2.0 */
/* prom.c — the stats registry as a Prometheus text exposition. */
#include "ops/prom.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void cj_prom_name(const struct cj_stat_field *f, char *out, size_t outsz)
{
    const char *suffix = f->kind == CJ_STAT_COUNTER ? "_total" : "";
    /* a unit goes last, before _total: bytes_up is cjrelay_up_bytes_total */
    if (!strncmp(f->name, "bytes_", 6)) snprintf(out, outsz, "cjrelay_%s_bytes%s", f->name + 6, suffix);
    else snprintf(out, outsz, "cjrelay_%s%s", f->name, suffix);
}

/* A HELP text: backslashes and newlines escaped, as the format asks. */
static void add_help(struct evbuffer *buf, const char *name, const char *help)
{
    evbuffer_add_printf(buf, "# HELP %s ", name);
    for (const char *p = help; *p; p++) {
        if (*p == '\\') evbuffer_add(buf, "\\\\", 2);
        else if (*p == '\n') evbuffer_add(buf, "\\n", 2);
        else evbuffer_add(buf, p, 1);
    }
    evbuffer_add(buf, "\n", 1);
}

/* A label value: backslash, double quote and newline escaped. */
static void add_label(struct evbuffer *buf, const char *v)
{
    for (const char *p = v; *p; p++) {
        if (*p == '\\' || *p == '"') { evbuffer_add(buf, "\\", 1); evbuffer_add(buf, p, 1); }
        else if (*p == '\n') evbuffer_add(buf, "\\n", 2);
        else evbuffer_add(buf, p, 1);
    }
}

static void render_field(struct evbuffer *buf, const struct cj_stat_field *f, const struct cj_prom_job *jobs, size_t n)
{
    size_t present = 0;
    for (size_t j = 0; j < n; j++) present += cj_stat_present(f, jobs[j].s);
    if (!present) return;
    char name[128];
    cj_prom_name(f, name, sizeof name);
    add_help(buf, name, f->help);
    evbuffer_add_printf(buf, "# TYPE %s %s\n", name, f->kind == CJ_STAT_COUNTER ? "counter" : "gauge");
    for (size_t j = 0; j < n; j++) {
        if (!cj_stat_present(f, jobs[j].s)) continue;
        evbuffer_add_printf(buf, "%s{job_id=\"", name);
        add_label(buf, jobs[j].id);
        evbuffer_add_printf(buf, "\"} %" PRIu64 "\n", cj_stat_value(f, jobs[j].s));
    }
}

void cj_prom_render(struct evbuffer *buf, const struct cj_prom_job *jobs, size_t n)
{
    evbuffer_add_printf(buf, "# HELP cjrelay_jobs jobs the daemon holds: running, and ended ones still kept for job_linger\n"
                             "# TYPE cjrelay_jobs gauge\ncjrelay_jobs %zu\n", n);
    if (n) {   /* one info sample per job: what it runs, as labels (Prometheus's info idiom) */
        evbuffer_add_printf(buf, "# HELP cjrelay_job_info a job the daemon holds, its FLARE generation in the label flare "
                                 "(2.7-2.8: the release trainer's pipe; 2.9+: the client_api cell protocol)\n"
                                 "# TYPE cjrelay_job_info gauge\n");
        for (size_t j = 0; j < n; j++) {
            evbuffer_add_printf(buf, "cjrelay_job_info{job_id=\"");
            add_label(buf, jobs[j].id);
            evbuffer_add_printf(buf, "\",flare=\"");
            add_label(buf, jobs[j].flare ? jobs[j].flare : "");
            evbuffer_add_printf(buf, "\"} 1\n");
        }
    }
    for (size_t s = 0; s < cj_stat_nsections; s++)
        for (size_t i = 0; i < cj_stat_sections[s].nfields; i++) render_field(buf, &cj_stat_sections[s].fields[i], jobs, n);
}
