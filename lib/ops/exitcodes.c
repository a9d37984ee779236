/* exitcodes.c — the exit status table (see exitcodes.h). */
#include "ops/exitcodes.h"

#include "ops/daemon.h"

const struct cj_exit_code cj_exit_codes[] = {
    {"cjrelayd", CJ_EXIT_OK, "clean end: drained after SIGTERM or shutdown, the single-job "
                             "shorthand's run ended (on_end_run = exit), or --check-config found no problem"},
    {"cjrelayd", CJ_EXIT_CONFIG, "configuration error: the file is missing or has problems "
                                 "(each printed with FILE:LINE), or a bad argument"},
    {"cjrelayd", CJ_EXIT_FATAL, "fatal runtime error: the daemon could not start (a socket it could "
                                "not bind, a TLS file it could not load), or the single-job shorthand's "
                                "job failed with an execution error"},
    {"cjrelayctl", CJ_CTL_EXIT_OK, "the daemon answered OK or with data"},
    {"cjrelayctl", CJ_CTL_EXIT_ERR, "the daemon answered ERR (the line says why)"},
    {"cjrelayctl", CJ_CTL_EXIT_UNREACHABLE, "the socket could not be reached, the answer was cut "
                                            "short or did not come within 30 s, or a bad argument"},
};
const size_t cj_exit_ncodes = sizeof cj_exit_codes / sizeof cj_exit_codes[0];
