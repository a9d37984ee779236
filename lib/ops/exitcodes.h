/* exitcodes.h — what each exit status of cjrelayd and cjrelayctl means, in one
 * table: the man pages are generated from it (doc/man/mangen.c), and the codes
 * themselves are the CJ_EXIT_* values of ops/daemon.h and cjrelayctl's
 * CJ_CTL_EXIT_* below. */
#ifndef CJ_OPS_EXITCODES_H
#define CJ_OPS_EXITCODES_H

#include <stddef.h>

/* cjrelayctl's exit statuses. */
enum { CJ_CTL_EXIT_OK = 0, CJ_CTL_EXIT_ERR = 1, CJ_CTL_EXIT_UNREACHABLE = 2 };

struct cj_exit_code {
    const char *program;    /* "cjrelayd" or "cjrelayctl" */
    int code;
    const char *meaning;    /* one line */
};

extern const struct cj_exit_code cj_exit_codes[];
extern const size_t cj_exit_ncodes;

#endif
