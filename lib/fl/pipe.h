/* SPDX-License-Identifier: Apache-2.0 */
/* pipe.h — the relay's side of a FLARE 2.7.x / 2.8.x trainer: the stock
 * FlareAgent + CellPipe (releases.md §4-5), one dialect of lib/fl/dialect.h.
 *
 * The trainer's pipe cell is <site>.<job>.<site>_<job>_active, a child of the
 * job's cell on its tcp:// worker listener; the relay plays its peer
 * <site>.<job>.<site>_<job>_passive as a virtual cell and speaks the pipe
 * messages of TaskExchanger on cell_pipe.task and cell_pipe.metric.
 *
 * Launch (cj_fl_pipe_launch_style): the leaf <site>_<job>_active, no launch
 * token, CLIENT_API_TYPE=EX_PROCESS_API, config/client_api_config.json under
 * the worker's cwd written by its child from cj_fl_pipe_config_text. */
#ifndef CJ_FL_PIPE_H
#define CJ_FL_PIPE_H

#include <stdbool.h>
#include <stddef.h>

#include "fl/dialect.h"
#include "fl/launcher.h"

#define CJ_FL_PIPE_CONFIG_FILE "config/client_api_config.json"
#define CJ_FL_PIPE_CELL_PIPE "nvflare.fuel.utils.pipe.cell_pipe.CellPipe"
#define CJ_FL_PIPE_CONFIG_MAX (64 * 1024)   /* bytes of the config text */

extern const struct cj_launch_style cj_fl_pipe_launch_style;
extern const struct cj_fl_workers_ops cj_fl_pipe_workers_ops;
/* Keys of the description's bootstrap the relay writes itself (NULL-ended). */
extern const char *const cj_fl_pipe_owned_keys[];

/* "<site>_<job>_<mode>" (mode "active" or "passive"): CellPipe's leaf. 0 or -1 (too long). */
int cj_fl_pipe_leaf(char *out, size_t n, const char *site, const char *job, const char *mode);

/* The text of config/client_api_config.json (releases.md §4.2, §5): the
 * exchanges of the description with the relay's CellPipe in each ("pipe"),
 * TASK_EXCHANGE defaulted ({"pipe_channel_name": "task"}) when the description
 * has none, and site_name, job_id, auth_token, auth_token_signature,
 * root_conn_props and cp_conn_props.  *out is malloc'd (free after wiping: it
 * holds the token).  0, or -1 with err. */
int cj_fl_pipe_config_text(const struct cj_fl_launch_info *c, char **out, struct cj_err *err);

/* TASK_EXCHANGE.launch_once among the description's bootstrap pairs (extrac
 * "key" NUL raw-JSON NUL): what the trainer reads.  Absent (or not a bool) is
 * false, the trainer's own default (releases.md §4.2): it then exits once the
 * server has downloaded its first result. */
bool cj_fl_pipe_launch_once(const char *extra, int extrac);

#endif
