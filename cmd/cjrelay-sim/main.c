/* cjrelay-sim — the upstream FL server simulator (interface.md).
 *
 * Table of contents:
 *   sim.h      what the simulator is and does (read this first)
 *   opts.c     the command line: --listen, --tls-dir, --job-id, test options,
 *              the FL flags accepted for issue 5
 *   sim.c      listener, links (passive side, READY as "server"), dispatch of
 *              what is addressed to server.<job>, the ping/echo/blob handlers
 *   pattern.h  the deterministic blob of test/blob (shared with tests/e2e/cjpeer.c)
 *   hdrline.h  a header block as one key=value line (--log-headers; shared too) */
#include "sim.h"

int main(int argc, char **argv)
{
    struct sim_opts o;
    int rc = sim_parse_args(argc, argv, &o);
    if (rc != 0) return rc > 0 ? 0 : 2;
    return sim_run(&o);
}
