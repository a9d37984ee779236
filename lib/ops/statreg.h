/* SPDX-License-Identifier: Apache-2.0 */
/* statreg.h — the stats registry: every counter `show stats` renders, in one
 * table of sections (as redis's INFO sections).
 *
 * A field is a uint64_t read by offset from one of the objects that count —
 * the relay's shared counters (util/stats.h), the router, the worker sessions,
 * the spool and its stage — or the sum of two of them: returns_sent counts
 * RETURNs and forwarder notices, and drops and workers_refused are counted
 * both by the router and by the layers above it.  Each field's kind (counter
 * or gauge) and help line are written here once, for every renderer: show
 * stats in text and JSON, the STATUS= line, and the docs. */
#ifndef CJ_OPS_STATREG_H
#define CJ_OPS_STATREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dl/spool.h"
#include "fl/session.h"
#include "fl/spoolstage.h"
#include "ops/out.h"

enum cj_stat_src {
    CJ_STAT_RELAY,      /* struct cj_stats (util/stats.h) */
    CJ_STAT_ROUTER,     /* struct cj_router_counters (cell/router.h) */
    CJ_STAT_SESSIONS,   /* struct cj_fl_sessions_stats (fl/session.h) */
    CJ_STAT_SPOOL,      /* struct cj_spool_stats (dl/spool.h) */
    CJ_STAT_STAGE,      /* struct cj_spool_stage_stats (fl/spoolstage.h) */
    CJ_STAT_NSRC
};

enum cj_stat_kind {
    CJ_STAT_COUNTER,    /* only grows */
    CJ_STAT_GAUGE,      /* a level now (or a peak) */
};

struct cj_stat_term {
    enum cj_stat_src src;
    size_t off;         /* of a uint64_t in the source's struct */
};

struct cj_stat_field {
    const char *name;
    enum cj_stat_kind kind;
    const char *help;
    struct cj_stat_term term[2];
    int nterms;         /* 1, or 2 for a sum */
};

struct cj_stat_section {
    const char *name;
    const char *help;
    const struct cj_stat_field *fields;
    size_t nfields;
};

extern const struct cj_stat_section cj_stat_sections[];
extern const size_t cj_stat_nsections;

/* One reading of the counting objects: src[s] points at source s's struct, or
 * is NULL where that object does not exist (the spool outside spool mode);
 * the copies of those that hand out snapshots live here. */
struct cj_stat_sources {
    const void *src[CJ_STAT_NSRC];
    struct cj_fl_sessions_stats sessions;
    struct cj_spool_stats spool;
    struct cj_spool_stage_stats stage;
};

/* A field is present when every object it reads exists. */
bool cj_stat_present(const struct cj_stat_field *f, const struct cj_stat_sources *s);
uint64_t cj_stat_value(const struct cj_stat_field *f, const struct cj_stat_sources *s);
/* The field named name in any section, or NULL. */
const struct cj_stat_field *cj_stat_find(const char *name);
/* show stats: every field present in any of the n readings, in table order,
 * as "name: value" with the value summed over them (one job, or several). */
void cj_stat_render(const struct cj_stat_sources *s, size_t n, struct cj_out *o);

#endif
