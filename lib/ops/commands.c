/* SPDX-License-Identifier: Apache-2.0 */
/* commands.c — the status command and show target tables (see commands.h). */
#include "ops/commands.h"

#include <stdio.h>
#include <string.h>

const struct cj_cmd_def cj_cmds[CJ_CMD_COUNT] = {
    [CJ_CMD_HELP] = {"help", CJ_ACCESS_READ, "[command]", 0, 1, true,
                     "the command list, or one command's usage and what it does", 0},
    [CJ_CMD_SHOW] = {"show", CJ_ACCESS_READ, "[job ID] [json]", 1, 4, false,
                     "the daemon's state: one target, as text or as one JSON object", 0},
    [CJ_CMD_PAUSE] = {"pause", CJ_ACCESS_ADMIN, "", 0, 0, false, "stop pulling new tasks; work in flight goes on", 0},
    [CJ_CMD_RESUME] = {"resume", CJ_ACCESS_ADMIN, "", 0, 0, false, "pull new tasks again", 0},
    [CJ_CMD_RELOAD] = {"reload", CJ_ACCESS_ADMIN, "", 0, 0, false,
                       "re-read the configuration file, as SIGHUP; a bad file keeps the running one", 0},
    [CJ_CMD_SHUTDOWN] = {"shutdown", CJ_ACCESS_ADMIN, "[now]", 0, 1, false,
                         "drain (no new tasks, work in flight finishes) then exit; now: stop at once", 0},
    [CJ_CMD_JOB_START] = {"job start", CJ_ACCESS_ADMIN, "<json>", 1, 1, true,
                          "start a job from a one-line JSON job description (doc/interface.md); its TLS "
                          "files may come with the line as open files (tls_fds)", 3},
    [CJ_CMD_JOB_STOP] = {"job stop", CJ_ACCESS_ADMIN, "<job_id> [reason]", 1, 2, true,
                         "end a job as aborted: workers stopped, the server told", 0},
    [CJ_CMD_JOB_WAIT] = {"job wait", CJ_ACCESS_READ, "<job_id>", 1, 1, false,
                         "answer once the job has ended: its outcome (a JobReturnCode) and reason", 0},
};

const struct cj_show_def cj_shows[CJ_SHOW_COUNT] = {
    [CJ_SHOW_INFO] = {"info", CJ_SCOPE_SOLE_JOB, "version, pid, uptime, cell name, mode, state, upstream link, memory"},
    [CJ_SHOW_STATS] = {"stats", CJ_SCOPE_SOLE_JOB, "the counters, one name: value each"},
    [CJ_SHOW_WORKERS] = {"workers", CJ_SCOPE_SOLE_JOB, "one row per worker: name, pid, state, heartbeat age, task, bytes, last error; a worker that could not be launched is listed with why"},
    [CJ_SHOW_TASKS] = {"tasks", CJ_SCOPE_SOLE_JOB, "one row per task in the table: ids, name, worker, state, age"},
    [CJ_SHOW_REFS] = {"refs", CJ_SCOPE_SOLE_JOB, "one row per download ref of the tasks (spool mode: the spool's refs)"},
    [CJ_SHOW_CONFIG] = {"config", CJ_SCOPE_DAEMON, "every configuration key: value, default, reloadable (with job ID: the keys that job runs with)"},
    [CJ_SHOW_METRICS] = {"metrics", CJ_SCOPE_SOLE_JOB, "the latest training metrics each worker logged"},
    [CJ_SHOW_JOBS] = {"jobs", CJ_SCOPE_SOLE_JOB, "one row per job: id, state, outcome, reason, server, times, workers"},
    [CJ_SHOW_PROMETHEUS] = {"prometheus", CJ_SCOPE_DAEMON, "the counters in Prometheus's text format, a job label each (json ignored)"},
};

int cj_cmd_find(const char *name)
{
    for (int i = 0; i < CJ_CMD_COUNT; i++)
        if (strcmp(cj_cmds[i].name, name) == 0) return i;
    return -1;
}

bool cj_cmd_is_prefix(const char *word)
{
    size_t n = strlen(word);
    for (int i = 0; i < CJ_CMD_COUNT; i++)
        if (strncmp(cj_cmds[i].name, word, n) == 0 && cj_cmds[i].name[n] == ' ') return true;
    return false;
}

int cj_show_find(const char *name)
{
    for (int i = 0; i < CJ_SHOW_COUNT; i++)
        if (strcmp(cj_shows[i].name, name) == 0) return i;
    return -1;
}

const char *cj_cmd_usage(enum cj_cmd c, bool targets, char *buf, size_t size)
{
    const struct cj_cmd_def *d = &cj_cmds[c];
    size_t n = (size_t)snprintf(buf, size, "%s", d->name);
    if (c == CJ_CMD_SHOW) {
        if (!targets && n < size) n += (size_t)snprintf(buf + n, size - n, " <what>");
        for (int i = 0; targets && i < CJ_SHOW_COUNT && n < size; i++)
            n += (size_t)snprintf(buf + n, size - n, "%c%s", i ? '|' : ' ', cj_shows[i].name);
    }
    if (d->args[0] && n < size) snprintf(buf + n, size - n, " %s", d->args);
    return buf;
}
