/* SPDX-License-Identifier: Apache-2.0 */
/* commands.h — the status socket's commands, in one table.
 *
 * The line protocol (ops/status.c) parses and checks a command against this
 * table (its name, who may run it, how many arguments it takes), `help` and
 * cjrelayctl's usage print it, and the daemon binds one handler per entry by
 * its enum.  `show` picks one of the show targets, a second table.  A command
 * or target added here shows up in every one of those places. */
#ifndef CJ_OPS_COMMANDS_H
#define CJ_OPS_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

enum cj_cmd {
    CJ_CMD_HELP,
    CJ_CMD_SHOW,
    CJ_CMD_PAUSE,
    CJ_CMD_RESUME,
    CJ_CMD_RELOAD,
    CJ_CMD_SHUTDOWN,
    CJ_CMD_JOB_START,
    CJ_CMD_JOB_STOP,
    CJ_CMD_JOB_WAIT,
    CJ_CMD_COUNT
};

enum cj_access {
    CJ_ACCESS_READ,    /* any client the socket's mode lets in */
    CJ_ACCESS_ADMIN,   /* root, the daemon's own user, [status] admin_group */
};

struct cj_cmd_def {
    const char *name;        /* one word, or two ("job start") */
    enum cj_access access;
    const char *args;        /* the arguments' usage ("[now]"), "" when none; show's
                              * targets are printed before it */
    int min_args, max_args;  /* words after the name */
    bool rest;               /* the last argument is the rest of the line, blanks and
                              * all (a JSON text, a reason in words) */
    const char *help;        /* one line: what it does */
    int max_fds;             /* open files it takes with its line (SCM_RIGHTS), 0: none
                              * (a line bringing any is refused) */
};

enum cj_show {
    CJ_SHOW_INFO,
    CJ_SHOW_STATS,
    CJ_SHOW_WORKERS,
    CJ_SHOW_TASKS,
    CJ_SHOW_REFS,
    CJ_SHOW_CONFIG,
    CJ_SHOW_METRICS,
    CJ_SHOW_JOBS,
    CJ_SHOW_PROMETHEUS,
    CJ_SHOW_COUNT
};

/* What a show target covers when no job is named: the sole job (a daemon
 * with several answers "name one"), or the whole daemon. */
enum cj_show_scope { CJ_SCOPE_SOLE_JOB, CJ_SCOPE_DAEMON };

struct cj_show_def {
    const char *name;
    enum cj_show_scope scope;
    const char *help;
};

extern const struct cj_cmd_def cj_cmds[CJ_CMD_COUNT];
extern const struct cj_show_def cj_shows[CJ_SHOW_COUNT];

/* The entry named name (exact, case-sensitive), or -1. */
int cj_cmd_find(const char *name);
/* Whether word is the first word of a two-word command name ("job"). */
bool cj_cmd_is_prefix(const char *word);
int cj_show_find(const char *name);

/* One command's usage, "shutdown [now]" or "show info|stats|...|metrics [json]"
 * (targets: the show targets joined by '|'; "<what>" instead when !targets),
 * into buf (truncated, always terminated).  Returns buf. */
const char *cj_cmd_usage(enum cj_cmd c, bool targets, char *buf, size_t size);

#endif
