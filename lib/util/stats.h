/* SPDX-License-Identifier: Apache-2.0 */
/* stats.h — a relay cell's shared counters.
 *
 * One struct cj_stats per relay cell; the layers below ops increment its fields
 * through the cell's stream endpoint (cj_stream_relay_stats): the FL loop, the
 * worker sessions, the stream layer and the downloads.  The event loop is
 * single-threaded, so plain integers suffice.  What `show stats`, its JSON
 * form and the systemd STATUS= line print of them, and under which names, is the
 * stats registry's business (ops/statreg.c): a counter added here is shown once
 * it has a row there. */
#ifndef CJ_UTIL_STATS_H
#define CJ_UTIL_STATS_H

#include <stdint.h>

struct cj_stats {
    uint64_t tasks_in;            /* tasks received from the server */
    uint64_t tasks_out;           /* task_ready delivered to workers */
    uint64_t tasks_failed;        /* tasks reported failed upstream */
    uint64_t results_in;          /* result_ready received from workers */
    uint64_t results_out;         /* submit_update sent upstream */
    uint64_t msgs_up;             /* messages relayed toward the server */
    uint64_t msgs_down;           /* messages relayed toward workers */
    uint64_t bytes_up;            /* payload+header bytes relayed toward the server */
    uint64_t bytes_down;          /* payload+header bytes relayed toward workers */
    uint64_t refs_passed;         /* download refs handed to workers or the server */
    uint64_t returns_sent;        /* RETURN / forwarder error notices sent */
    uint64_t drops;               /* messages dropped (unroutable, spoofed, malformed) */
    uint64_t reconnects;          /* upstream reconnections */
    uint64_t throttles;           /* times a sender was paused for a full destination */
    uint64_t workers_refused;     /* worker connections refused (name, token, ...) */
    uint64_t stalled_closed;      /* worker links closed for not reading */
    uint64_t inflight_lost;       /* worker requests in flight through the upstream when it was lost */
    uint64_t inflight_untracked;  /* worker requests through the upstream not remembered (bound) */
    uint64_t holds;               /* links paused while a spool fetch waited for its disk */
    uint64_t holds_lapsed;        /* ... resumed after the lapse with the fetch still behind */
    uint64_t retries;             /* request retries of any kind */
    uint64_t sync_waits;          /* __sync_runner__ asked again: the server job was not up yet (not a failure) */
    uint64_t timeouts;            /* requests that timed out */
    uint64_t errors;              /* other errors logged */
};

#endif
