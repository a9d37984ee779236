/* SPDX-License-Identifier: Apache-2.0 */
/* prom.h — the stats registry in Prometheus's text exposition format
 * (`show prometheus`): one family per registry field, named cjrelay_<field>
 * in base units (bytes_up -> cjrelay_up_bytes_total), counters ending in
 * _total, HELP and TYPE from the registry, one sample per job labelled
 * job_id="<id>" (Prometheus keeps job for its scrape). */
#ifndef CJ_OPS_PROM_H
#define CJ_OPS_PROM_H

#include <stddef.h>

#include <event2/buffer.h>

#include "ops/statreg.h"

struct cj_prom_job {
    const char *id;
    const struct cj_stat_sources *s;
    const char *flare;   /* the FLARE generation its workers speak ("2.7-2.8", "2.9+") */
};

/* Appends the exposition of n jobs' readings to buf, and the gauge
 * cjrelay_jobs (how many jobs the daemon holds records of). */
void cj_prom_render(struct evbuffer *buf, const struct cj_prom_job *jobs, size_t n);

/* The metric name of a registry field ("tasks_in", counter ->
 * "cjrelay_tasks_in_total"); out is always NUL-terminated. */
void cj_prom_name(const struct cj_stat_field *f, char *out, size_t outsz);

#endif
