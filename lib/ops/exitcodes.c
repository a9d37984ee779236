/* SPDX-License-Identifier: Apache-2.0 */
/* exitcodes.c — the exit status table (see exitcodes.h). */
#include "ops/exitcodes.h"

#include "ops/daemon.h"
#include "ops/job.h"

const struct cj_exit_code cj_exit_codes[] = {
    {"cjrelayd", CJ_EXIT_OK, "a clean end: a drain finished, or the single-job shorthand's run ended "
                             "with on_end_run = exit; also --version, --help, and --check-config "
                             "with no problem"},
    {"cjrelayd", CJ_EXIT_CONFIG, "configuration error: a bad or missing -c, an unknown argument, a "
                                 "configuration with problems (each printed as FILE:LINE)"},
    {"cjrelayd", CJ_EXIT_FATAL, "fatal runtime error: the daemon could not start (sockets, TLS files, "
                                "spool) or the single-job shorthand's job could not go on (e.g. it "
                                "cannot sync with the server)"},
    {"cjrelayctl", CJ_CTL_EXIT_OK, "the daemon answered OK or with data"},
    {"cjrelayctl", CJ_CTL_EXIT_ERR, "the daemon answered ERR (the line says why)"},
    {"cjrelayctl", CJ_CTL_EXIT_UNREACHABLE, "the socket could not be reached, the answer was cut "
                                            "short or did not come within 30 s, or a bad argument"},
    {"job", CJ_JOB_SUCCESS, "the server ended the run"},
    {"job", CJ_JOB_EXECUTION_ERROR, "the FL loop could not go on (e.g. it cannot sync with the server)"},
    {"job", CJ_JOB_ABORTED, "aborted: job stop, a signal to the daemon, or the client parent's abort"},
    {"job", CJ_JOB_EXCEPTION, "no launched worker completed its HELLO within [workers] launch_timeout (the "
                              "reason gives the worker's last error and stderr line); FLARE fails the job"},
    {"job", CJ_JOB_INFRA_ERROR, "the server link never came up within [upstream] first_connect_timeout"},
};
const size_t cj_exit_ncodes = sizeof cj_exit_codes / sizeof cj_exit_codes[0];
