/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.h — the cjrelayd process: event loop, signals, status socket,
 * systemd notifications and reload, around the relay's data path.
 *
 * Signal ladder: SIGHUP reloads; the first SIGTERM/SIGINT drains (stop pulling
 * tasks, let in-flight work finish, then exit 0); a second one stops at once;
 * SIGQUIT stops at once.  Signals are loop events (evsignal), never handled in
 * signal context. */
#ifndef CJ_OPS_DAEMON_H
#define CJ_OPS_DAEMON_H

#include <stdbool.h>

#include "ops/config.h"
#include "util/err.h"

/* Exit codes (doc/interface.md). */
enum { CJ_EXIT_OK = 0, CJ_EXIT_CONFIG = 1, CJ_EXIT_FATAL = 2 };

struct cj_daemon;

/* Builds the daemon from a loaded configuration (path kept for reloads). */
struct cj_daemon *cj_daemon_new(const char *config_path, const struct cj_config *cfg, struct cj_err *err);

/* Runs the loop until the daemon stops; returns the process exit code. */
int cj_daemon_run(struct cj_daemon *d);

void cj_daemon_free(struct cj_daemon *d);

#endif
