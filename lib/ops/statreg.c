/* SPDX-License-Identifier: Apache-2.0 */
/* statreg.c — the stats registry's sections and fields (see statreg.h). */
#include "ops/statreg.h"

#include <string.h>

#include "cell/router.h"
#include "util/stats.h"

#define ONE(s, type, m) {{(s), offsetof(type, m)}}, 1
#define SUM(s1, t1, m1, s2, t2, m2) {{(s1), offsetof(t1, m1)}, {(s2), offsetof(t2, m2)}}, 2
#define RELAY(m) ONE(CJ_STAT_RELAY, struct cj_stats, m)
#define ROUTER(m) ONE(CJ_STAT_ROUTER, struct cj_router_counters, m)
#define SESSIONS(m) ONE(CJ_STAT_SESSIONS, struct cj_fl_sessions_stats, m)
#define SPOOL(m) ONE(CJ_STAT_SPOOL, struct cj_spool_stats, m)
#define STAGE(m) ONE(CJ_STAT_STAGE, struct cj_spool_stage_stats, m)
#define C CJ_STAT_COUNTER
#define G CJ_STAT_GAUGE

static const struct cj_stat_field relay_fields[] = {
    {"tasks_in", C, "tasks received from the server", RELAY(tasks_in)},
    {"tasks_out", C, "task_ready delivered to workers", RELAY(tasks_out)},
    {"tasks_failed", C, "tasks reported failed upstream", RELAY(tasks_failed)},
    {"results_in", C, "result_ready received from workers", RELAY(results_in)},
    {"results_out", C, "submit_update sent upstream", RELAY(results_out)},
    {"msgs_up", C, "messages relayed toward the server", ROUTER(up_msgs)},
    {"msgs_down", C, "messages relayed toward workers", ROUTER(down_msgs)},
    {"bytes_up", C, "bytes relayed toward the server (headers and payload)", ROUTER(up_bytes)},
    {"bytes_down", C, "bytes relayed toward workers (headers and payload)", ROUTER(down_bytes)},
    {"refs_passed", C, "download refs passed through", RELAY(refs_passed)},
    {"returns_sent", C, "RETURN and forwarder error notices sent",
     SUM(CJ_STAT_ROUTER, struct cj_router_counters, returns_sent, CJ_STAT_ROUTER, struct cj_router_counters,
         fwd_errors_sent)},
    {"drops", C, "messages dropped (unroutable, looping, spoofed, too big, malformed)",
     SUM(CJ_STAT_RELAY, struct cj_stats, drops, CJ_STAT_ROUTER, struct cj_router_counters, drops)},
    {"reconnects", C, "upstream reconnections", ROUTER(reconnects)},
    {"throttles", C, "senders paused for a full destination", ROUTER(throttles)},
    {"workers_refused", C, "worker connections or HELLOs refused",
     SUM(CJ_STAT_RELAY, struct cj_stats, workers_refused, CJ_STAT_ROUTER, struct cj_router_counters,
         workers_refused)},
    {"stalled_closed", C, "worker links closed for not reading", ROUTER(stalled_closed)},
    {"inflight_lost", C, "worker requests in flight when the upstream was lost (left to their timeout)", ROUTER(inflight_lost)},
    {"inflight_untracked", C, "worker requests in flight not tracked (bound reached)", ROUTER(inflight_untracked)},
    {"holds", C, "links paused while a spool fetch waited for its disk", ROUTER(holds)},
    {"holds_lapsed", C, "link holds lifted after their lapse", ROUTER(holds_lapsed)},
    {"retries", C, "request retries", RELAY(retries)},
    {"sync_waits", C, "__sync_runner__ asked again while the server job was starting (not counted as retries or timeouts)",
     RELAY(sync_waits)},
    {"timeouts", C, "requests timed out", RELAY(timeouts)},
    {"errors", C, "other errors", RELAY(errors)},
};

/* The worker sessions' own counters (tasks_out above is their deliveries):
 * names that could be mistaken for upstream counters carry a worker_ prefix. */
static const struct cj_stat_field session_fields[] = {
    {"hellos_accepted", C, "worker HELLOs accepted", SESSIONS(hellos_accepted)},
    {"hellos_rejected", C, "worker HELLOs rejected (identity, launch token, ...)", SESSIONS(hellos_rejected)},
    {"worker_tasks_failed", C, "tasks failed because of a worker (task_failed, lost, refused)",
     SESSIONS(tasks_failed)},
    {"results_accepted", C, "result_ready accepted", SESSIONS(results_accepted)},
    {"results_rejected", C, "result_ready rejected (includes the next two)", SESSIONS(results_rejected)},
    {"results_unknown_task", C, "results for a task never given to that worker", SESSIONS(results_unknown_task)},
    {"results_duplicate", C, "second results for the same task", SESSIONS(results_duplicate)},
    {"worker_heartbeats", C, "worker heartbeats answered", SESSIONS(heartbeats)},
    {"worker_logs", C, "worker log messages kept", SESSIONS(logs)},
    {"worker_logs_dropped", C, "worker log messages dropped (invalid)", SESSIONS(logs_dropped)},
    {"workers_lost", C, "workers declared lost", SESSIONS(workers_lost)},
    {"worker_bad_requests", C, "worker requests answered invalid_request", SESSIONS(bad_requests)},
};

static const struct cj_stat_field spool_fields[] = {
    {"spool_refs", G, "refs in the spool", SPOOL(refs)},
    {"spool_fetching", G, "refs being fetched from their source", SPOOL(fetching)},
    {"spool_serving", G, "refs being served from disk", SPOOL(serving)},
    {"spool_bytes_on_disk", G, "item bytes in the spool", SPOOL(bytes_on_disk)},
    {"spool_max_bytes", G, "the spool's byte limit (0: none)", SPOOL(max_bytes)},
    {"spool_fetched_refs", C, "refs fetched whole", SPOOL(fetched_refs)},
    {"spool_fetched_bytes", C, "item bytes fetched", SPOOL(fetched_bytes)},
    {"spool_fetch_failures", C, "fetches failed", SPOOL(fetch_failures)},
    {"spool_served_refs", C, "refs served whole", SPOOL(served_refs)},
    {"spool_served_bytes", C, "item bytes served", SPOOL(served_bytes)},
    {"spool_disk_full", C, "fetches failed for a full disk, quota or spool_max_bytes", SPOOL(disk_full)},
    {"spool_behind", C, "times a fetch fell behind its disk", SPOOL(behind)},
    {"spool_unwritten_peak", G, "most bytes one fetch held received and not yet written", SPOOL(unwritten_peak)},
    {"spool_tasks_spooled", C, "tasks whose refs were all spooled", STAGE(tasks_spooled)},
    {"spool_tasks_failed", C, "tasks failed in the spool stage (fetch, serve, rewrite)", STAGE(tasks_failed)},
    {"spool_tasks_requeued", C, "tasks taken back from a lost worker", STAGE(requeued)},
    {"spool_results_spooled", C, "results spooled and submitted", STAGE(results_spooled)},
    {"spool_results_failed", C, "results failed in the spool stage", STAGE(results_failed)},
};

#define SECTION(name, help, fields) {name, help, fields, sizeof fields / sizeof fields[0]}
const struct cj_stat_section cj_stat_sections[] = {
    SECTION("relay", "tasks, results and messages through the relay cell", relay_fields),
    SECTION("workers", "the worker sessions (Client API)", session_fields),
    SECTION("spool", "spool mode: the spool and its stage", spool_fields),
};
const size_t cj_stat_nsections = sizeof cj_stat_sections / sizeof cj_stat_sections[0];

bool cj_stat_present(const struct cj_stat_field *f, const struct cj_stat_sources *s)
{
    for (int i = 0; i < f->nterms; i++)
        if (!s->src[f->term[i].src]) return false;
    return true;
}

uint64_t cj_stat_value(const struct cj_stat_field *f, const struct cj_stat_sources *s)
{
    uint64_t v = 0;
    for (int i = 0; i < f->nterms; i++) {
        const char *base = s->src[f->term[i].src];
        if (base) v += *(const uint64_t *)(base + f->term[i].off);
    }
    return v;
}

const struct cj_stat_field *cj_stat_find(const char *name)
{
    for (size_t i = 0; i < cj_stat_nsections; i++)
        for (size_t j = 0; j < cj_stat_sections[i].nfields; j++)
            if (strcmp(cj_stat_sections[i].fields[j].name, name) == 0) return &cj_stat_sections[i].fields[j];
    return NULL;
}

void cj_stat_render(const struct cj_stat_sources *s, size_t n, struct cj_out *o)
{
    for (size_t i = 0; i < cj_stat_nsections; i++)
        for (size_t j = 0; j < cj_stat_sections[i].nfields; j++) {
            const struct cj_stat_field *f = &cj_stat_sections[i].fields[j];
            bool present = false;
            uint64_t v = 0;
            for (size_t k = 0; k < n; k++)
                if (cj_stat_present(f, &s[k])) {
                    present = true;
                    v += cj_stat_value(f, &s[k]);
                }
            if (present) cj_out_u64(o, f->name, v);
        }
}
