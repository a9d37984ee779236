/* SPDX-License-Identifier: Apache-2.0 */
/* cjrelay-sim — the upstream FL server simulator (doc/interface.md).
 *
 * Table of contents:
 *   sim.h      what the simulator is and does (read this first)
 *   opts.c     the command line (every flag is documented in --help)
 *   sim.c      listener, links (passive side, READY as "server"), dispatch of
 *              what is addressed to server.<job> (one per job), the ping/echo/
 *              blob handlers, the end of each job's run
 *   fl.c       the FL server: aux topics, get_task, submit_update, task refs,
 *              result downloads and their verification
 *   model.c    tensor values, download items (safetensors / npz), verification
 *   cp.c       --parent: the site's client parent cell <site> and its children
 *   cpmsg.c    the parent <-> job messages (notify_job_status, client_command)
 *   drive.c    --drive: a stand-in site (relay + worker) for tests
 *   pattern.h  the deterministic blob of test/blob (shared with tests/e2e/cjpeer.c)
 *   hdrline.h  a header block as one key=value line (--log-headers; shared too) */
#include "sim.h"

int main(int argc, char **argv)
{
    struct sim_opts o;
    int rc = sim_parse_args(argc, argv, &o);
    if (rc != 0) return rc > 0 ? 0 : 2;
    return o.drive[0] ? sim_drive(&o) : sim_run(&o);
}
