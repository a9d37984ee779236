/* SPDX-License-Identifier: Apache-2.0 */
/* pipe.c — the pipe peer of a release trainer (see pipe.h). */
#include "fl/pipe.h"

static void *pp_create(const struct cj_fl_workers_cfg *c, struct cj_err *err)
{
    (void)c;
    cj_fail(err, CJ_E_INVALID, 0, "the pipe trainer protocol (FLARE 2.7/2.8) is not available yet");
    return NULL;
}

const struct cj_fl_workers_ops cj_fl_pipe_workers_ops = {.create = pp_create};
