/* SPDX-License-Identifier: Apache-2.0 */
/* preflight.h — what starting would refuse, found before the start: the
 * files and programs a configuration names, checked on the machine (the
 * syntax and cross-key rules are config.c's).  cjrelayd --check-config (the
 * units' ExecStartPre) runs it, so a unit does not start, fail and restart
 * forever over a file it could have named. */
#ifndef CJ_OPS_PREFLIGHT_H
#define CJ_OPS_PREFLIGHT_H

#include "ops/config.h"

/* Adds each problem as "FILE:LINE: section.name: what" to pb: the upstream's
 * TLS files (net/tlscheck.h) and, with mtls, the certificate's CN against the
 * site; the status socket's directory; the workers' command (found and
 * executable).  At a start (full false) only what would make it fail for
 * certain; --check-config (full) also the certificates' chain and dates and
 * the key file's mode, whose failures a running daemon logs and retries.
 * Returns how many it added. */
int cj_preflight(const struct cj_config *cfg, bool full, struct cj_problems *pb);

#endif
