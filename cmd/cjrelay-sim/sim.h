/* sim.h — cjrelay-sim, the upstream FL server simulator (interface.md).
 *
 * Version 1 (issue 4) is the transport half: one process plays the server
 * root cell `server` (it answers the relay's HELLO with READY as "server")
 * and the job cell `server.<job>` (cellnet.md §6 "A simulator ..."), which
 * consumes what is addressed to it:
 *
 *   direct  task/ping            -> reply ok, payload "pong ..." with counters
 *   direct  cellnet.channel/bye  -> reply ok
 *   stream  test/echo  (request) -> return_only reply with the same blob
 *   stream  test/blob  (request) -> payload "N": reply with an N-byte pattern
 *                                   blob (pattern.h), built from references to
 *                                   one static buffer, so 1 GiB costs nothing
 *
 * It talks to links and a stream endpoint directly: the router's policy is
 * the relay's, not a server's.  The FL flags (--rounds ...) are accepted and
 * ignored with a note until issue 5 implements them.
 *
 * Files: main.c (entry), opts.c (command line), sim.c (listener, links,
 * dispatch, handlers), pattern.h and hdrline.h (shared with the test peer). */
#ifndef CJ_SIM_SIM_H
#define CJ_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_PATH_MAX 4096

struct sim_opts {
    char listen[512];            /* --listen tcp://HOST:PORT | stcp://HOST:PORT (port 0: any) */
    char tls_dir[SIM_PATH_MAX];  /* --tls-dir: rootCA.pem server.crt server.key; client certs required */
    char job_id[128];            /* --job-id */
    char log_headers[SIM_PATH_MAX]; /* --log-headers FILE: one key=value line per received request */
    uint64_t window;             /* --window SIZE: stream window of the replies (sm__ws), default 64M */
    double heartbeat;            /* --heartbeat SECS: PING a client after this long idle; 0 = never */
    int log_level;               /* --log-level error|warning|info|debug */

    /* FL flags (issue 5): parsed and checked, not used yet. */
    long rounds, tensors;
    int64_t model_size;
    char format[32];
    bool isolate, inline_tensors;
    char download_log[SIM_PATH_MAX];
    bool fl_flags_given;
};

/* Parses argv into o (defaults first).  Returns 0 to run, 1 when --help or
 * --version was printed (exit 0), -1 on a usage error (printed; exit 2). */
int sim_parse_args(int argc, char **argv, struct sim_opts *o);

/* Runs until SIGTERM/SIGINT.  Returns the exit status: 0 after a signal,
 * 2 when the simulator could not start (the reason is logged). */
int sim_run(const struct sim_opts *o);

#endif
