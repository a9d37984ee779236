/* stats.c — the counters and their field table (see stats.h). */
#include "util/stats.h"

struct cj_stats cj_stats;

#define F(name, doc) {#name, offsetof(struct cj_stats, name), doc}
const struct cj_stats_field cj_stats_fields[] = {
    F(tasks_in, "tasks received from the server"),
    F(tasks_out, "task_ready delivered to workers"),
    F(tasks_failed, "tasks reported failed upstream"),
    F(results_in, "result_ready received from workers"),
    F(results_out, "submit_update sent upstream"),
    F(msgs_up, "messages relayed toward the server"),
    F(msgs_down, "messages relayed toward workers"),
    F(bytes_up, "bytes relayed toward the server"),
    F(bytes_down, "bytes relayed toward workers"),
    F(refs_passed, "download refs passed through"),
    F(returns_sent, "RETURN and forwarder error notices sent"),
    F(drops, "messages dropped"),
    F(reconnects, "upstream reconnections"),
    F(throttles, "senders paused for a full destination"),
    F(workers_refused, "worker connections refused"),
    F(stalled_closed, "worker links closed for not reading"),
    F(inflight_failed, "worker requests failed when the upstream was lost"),
    F(inflight_untracked, "worker requests in flight not tracked (bound reached)"),
    F(holds, "links paused while a spool fetch waited for its disk"),
    F(holds_lapsed, "link holds lifted after their lapse"),
    F(retries, "request retries"),
    F(timeouts, "requests timed out"),
    F(errors, "other errors"),
};
#undef F
const size_t cj_stats_nfields = sizeof cj_stats_fields / sizeof cj_stats_fields[0];
