/* SPDX-License-Identifier: Apache-2.0 */
/* exitcodes.h — what each exit status of cjrelayd and cjrelayctl means, and
 * each outcome a job ends with (FLARE's JobReturnCode, the exit status of the
 * client job process cjrelay stands in for), in one table: --help and the man
 * pages print it (doc/man/mangen.c).  The codes themselves are the CJ_EXIT_*
 * values of ops/daemon.h, cjrelayctl's CJ_CTL_EXIT_* below and the
 * CJ_JOB_* outcomes of ops/job.h. */
#ifndef CJ_OPS_EXITCODES_H
#define CJ_OPS_EXITCODES_H

#include <stddef.h>

/* cjrelayctl's exit statuses. */
enum { CJ_CTL_EXIT_OK = 0, CJ_CTL_EXIT_ERR = 1, CJ_CTL_EXIT_UNREACHABLE = 2 };

struct cj_exit_code {
    const char *program;    /* "cjrelayd", "cjrelayctl", or "job" (an outcome) */
    int code;
    const char *meaning;    /* one line */
};

extern const struct cj_exit_code cj_exit_codes[];
extern const size_t cj_exit_ncodes;

#endif
