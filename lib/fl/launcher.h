/* SPDX-License-Identifier: Apache-2.0 */
/* launcher.h — the relay's worker processes ([workers] command × count;
 * doc/protocol/fl-protocols.md §8).
 *
 * Each launch gets a fresh sequence number (counting from 1), the FQCN
 * <site>.<job>.client_api_trainer_<seq>, a fresh launch token and its own
 * bootstrap file <runtime_dir>/client_api_bootstrap_<seq>.json (0600, written
 * atomically), whose path is passed in NVFLARE_CLIENT_API_BOOTSTRAP;
 * CLIENT_API_TYPE is removed from the environment.  That is the default launch
 * style; a release trainer's style (lib/fl/dialect.h, pipe) instead has a fixed
 * leaf, no token nor bootstrap file, CLIENT_API_TYPE=EX_PROCESS_API and its
 * config/client_api_config.json written by the forked child.  The command is split into
 * words like a POSIX shell would (quotes and backslashes, no expansions) and
 * exec'd without a shell after fork + setsid, so the worker leads its own
 * process group.  Its stdout and stderr are read without blocking and logged
 * line by line, prefixed with the worker's name.  SIGCHLD is a libevent signal
 * event (plus a slow poll as a safety net) reaping with waitpid(WNOHANG).
 *
 * A worker that exits is relaunched after a back-off (restart_min, doubling up
 * to restart_max; back to restart_min after a clean exit or once a worker lived
 * longer than restart_max), unless it is being stopped.  With launch_timeout,
 * a slot that has had no worker through SESSION_READY (cj_launcher_session_ready)
 * for that long since its first launch, or since its worker died or was lost,
 * ends the relaunches: gave_up() is told why (the slot's last error and its
 * worker's last stderr line), as FLARE's executor gives up on a trainer that
 * does not complete its HELLO within its launch_timeout.  Stopping is staged: the owner sends client_api.shutdown
 * first (lib/fl/session.h), then cj_launcher_stop: SIGTERM to the process
 * group (and SIGCONT, so that a SIGSTOPped worker acts on it) after
 * shutdown_grace, SIGKILL after another shutdown_grace; the child is
 * reaped and its bootstrap file removed.
 *
 * Never logged: the token, and the command's arguments beyond argv[0]. */
#ifndef CJ_FL_LAUNCHER_H
#define CJ_FL_LAUNCHER_H

#include <stdbool.h>

#include "util/account.h"
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "fl/tokenfile.h"
#include "util/err.h"

struct event_base;
struct cj_launcher;

/* How a worker is launched: a FLARE generation's way (lib/fl/dialect.h gives
 * one per generation).  NULL in cj_launcher_cfg = cj_launch_style_bootstrap. */
struct cj_launch_style {
    const char *name;
    /* The worker's leaf under <site>.<job> for launch seq (its FQCN is
     * <site>.<job>.<leaf>).  0, or -1 when it does not fit n. */
    int (*leaf)(char *out, size_t n, const char *site, const char *job, unsigned seq);
    /* A launch token and a bootstrap file <runtime_dir>/client_api_bootstrap_<seq>.json
     * whose path goes in NVFLARE_CLIENT_API_BOOTSTRAP (fl/bootstrap.h). */
    bool bootstrap;
    /* "NAME=value" put in the worker's environment (an inherited NAME is
     * dropped first); NULL none. */
    const char *env_set;
    /* A file the worker's forked child writes, relative to the worker's cwd,
     * before exec (0600, atomically: a .tmp beside it, then rename; its
     * directory made 0700 if missing), from cj_launcher_cfg's config_text;
     * NULL none. */
    const char *config_file;
};
/* Today's development-tree workers: client_api_trainer_<seq>, a bootstrap file,
 * CLIENT_API_TYPE removed. */
extern const struct cj_launch_style cj_launch_style_bootstrap;

#define CJ_LAUNCHER_LEAF_PREFIX "client_api_trainer_"
#define CJ_LAUNCHER_MAX_WORKERS 64
#define CJ_LAUNCHER_MAX_ARGS 256
#define CJ_LAUNCHER_LINE_MAX 1024      /* default bound of a logged output line */
#define CJ_LAUNCHER_OUTPUT_MAX 200     /* a worker's last stderr line, as kept for gave_up() */
#define CJ_LAUNCHER_WHY_MAX 512        /* gave_up()'s text */

struct cj_launcher_cfg {
    const char *command;        /* [workers] command */
    int count;                  /* workers kept running: 1..CJ_LAUNCHER_MAX_WORKERS */
    const char *runtime_dir;    /* bootstrap files go here (created 0700 if missing) */
    const char *connect_url;    /* bootstrap connect_url: the first [workers] listen entry */
    const char *site, *job_id;
    bool secure_mode;           /* bootstrap secure_mode (must match the sessions') */
    double shutdown_grace;      /* seconds; 0 = 10 */
    double restart_min, restart_max;   /* back-off seconds; 0 = 1 / 30 */
    double launch_timeout;      /* seconds a slot may go without a worker through SESSION_READY; 0 = no bound */
    size_t line_max;            /* longest logged output line (longer ones are cut); 0 = CJ_LAUNCHER_LINE_MAX */
    /* A job's own worker environment (copied): with clean_env the worker gets
     * only PATH (the daemon's), env's envc "NAME=value" strings (one after the
     * other, each NUL-ended) and the bootstrap path; otherwise the daemon's
     * environment minus the dropped names, and the bootstrap path. */
    bool clean_env;
    const char *env;
    int envc;
    const char *cwd;            /* the worker's working directory; NULL or "": the daemon's */
    /* The account workers run as (copied); NULL: the daemon's.  Their bootstrap
     * files are given to it; the switch happens in the child before the cwd. */
    const struct cj_account *account;
    /* Extra bootstrap keys (copied): boot_extrac pairs "key" NUL raw-JSON NUL,
     * as struct cj_bootstrap's extra. */
    const char *boot_extra;
    int boot_extrac;
    const struct cj_launch_style *style;   /* NULL: cj_launch_style_bootstrap */
    /* The text of style->config_file (copied), built before any fork; NULL for a style without one. */
    const char *config_text;
};

struct cj_launcher_cbs {
    void *ctx;
    /* A worker was started: register it (cj_fl_sessions_expect / _set_pid).  The
     * token is wiped after the call.  Runs before the worker can connect. */
    void (*on_spawn)(void *ctx, const char *fqcn, const char *token, pid_t pid);
    /* The worker process was reaped (status as from waitpid); stopping: it was
     * being stopped (no relaunch follows; false for a lost worker stopped by
     * cj_launcher_restart, which is replaced).  Call cj_fl_sessions_worker_exited:
     * the sessions know whether it held a task. */
    void (*on_exit)(void *ctx, const char *fqcn, int status, bool stopping);
    /* Optional: true while the worker owns a live result source
     * (cj_fl_sessions_in_barrier).  A staged stop (not "now") then waits before
     * SIGTERM, asking again every second (doc/protocol/fl-protocols.md §8 step 4). */
    bool (*in_barrier)(void *ctx, const char *fqcn);
    /* Optional: every output line as logged (stream 1 stdout, 2 stderr). */
    void (*on_line)(void *ctx, const char *fqcn, int stream, const char *line);
    /* Optional: launch_timeout passed for a slot (why: at most CJ_LAUNCHER_WHY_MAX
     * bytes, no token, no argument past argv[0]).  The launcher holds (no more
     * launches, cj_launcher_start refused); the owner ends the run. */
    void (*gave_up)(void *ctx, const char *why);
};

/* Checks cfg (the command must split into at least one word) and sets up SIGCHLD
 * handling on base.  Nothing is started yet.  NULL with err filled. */
struct cj_launcher *cj_launcher_new(struct event_base *base, const struct cj_launcher_cfg *cfg,
                                    const struct cj_launcher_cbs *cbs, struct cj_err *err);
/* Kills (SIGKILL to each group) and reaps whatever still runs, removes the
 * bootstrap files, frees.  No callbacks. */
void cj_launcher_free(struct cj_launcher *l);

/* Starts count workers.  0, or -1 when none could be started (logged; the
 * failed slots retry with back-off). */
int cj_launcher_start(struct cj_launcher *l);

/* Staged stop of one worker (after the owner's client_api.shutdown): no
 * relaunch; SIGTERM to its group after shutdown_grace (and once it is out of
 * its result barrier, see in_barrier), SIGKILL after another shutdown_grace.
 * 0, or -1 when no such running worker. */
int cj_launcher_stop(struct cj_launcher *l, const char *fqcn);
/* A worker the sessions declared lost while its process still runs (silent,
 * SIGSTOPped, hung): the staged stop of cj_launcher_stop, after which the slot
 * is relaunched like a crashed worker (new seq, FQCN, token and bootstrap file,
 * after the restart back-off).  on_exit then gets stopping = false.  A plain
 * stop already under way (cj_launcher_stop, cj_launcher_stop_all) is kept: no
 * relaunch.  0, or -1 when no such running worker. */
int cj_launcher_restart(struct cj_launcher *l, const char *fqcn);
/* No relaunch from now on (the run is ending): a worker that exits, or a lost
 * one being stopped, stays down; pending relaunches are cancelled.  Running
 * workers are left alone (stop them with cj_launcher_stop_all).
 * cj_launcher_start lifts it. */
void cj_launcher_hold(struct cj_launcher *l);
/* Every worker: now = false as cj_launcher_stop; now = true: SIGTERM at once,
 * barrier or not, SIGKILL after shutdown_grace (shutdown now, SIGQUIT, a second
 * signal). */
void cj_launcher_stop_all(struct cj_launcher *l, bool now);

/* The running worker fqcn completed its SESSION_READY: its slot's launch_timeout
 * stops counting (until the worker dies or is lost).  Unknown fqcn: nothing. */
void cj_launcher_session_ready(struct cj_launcher *l, const char *fqcn);

/* pid of the running worker fqcn, or 0. */
pid_t cj_launcher_pid(const struct cj_launcher *l, const char *fqcn);
/* One worker slot as status shows it: the running worker or the last one
 * launched, and why its last launch failed or its worker died ("" none). */
#define CJ_LAUNCHER_ERROR_MAX 224
struct cj_launcher_slot_info {
    const char *fqcn;          /* "" before the first launch */
    pid_t pid;                 /* 0: none running */
    const char *last_error;
    time_t last_error_at;      /* 0: none */
    unsigned failures;         /* failed launches and deaths since the last clean exit */
    double relaunch_in;        /* seconds to the pending relaunch, -1 none */
};
typedef void (*cj_launcher_slot_fn)(void *arg, const struct cj_launcher_slot_info *si);
/* Calls fn for each of the count slots, in order. */
void cj_launcher_slots(const struct cj_launcher *l, cj_launcher_slot_fn fn, void *arg);
/* The slot running worker fqcn into *out (valid until the launcher changes);
 * false when no running worker has that name. */
bool cj_launcher_slot_of(const struct cj_launcher *l, const char *fqcn, struct cj_launcher_slot_info *out);
/* Worker processes not yet reaped. */
size_t cj_launcher_running(const struct cj_launcher *l);
/* Launches so far (the last seq used). */
unsigned cj_launcher_launches(const struct cj_launcher *l);

/* A bare command's lookup, as the shell does it, for the launched child (async-
 * signal-safe: string work only) and for --check-config alike.  The next
 * candidate from the PATH list at *cursor: that directory joined with file in
 * out (an empty entry is the working directory); advances *cursor (NULL after
 * the last entry).  false when the entry cannot fit out (skip it). */
#define CJ_LAUNCHER_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"   /* for an environment without PATH */
bool cj_launcher_path_next(const char **cursor, const char *file, char *out, size_t outsz);

/* Splits a command line into words as a POSIX shell would, without any
 * expansion: blanks separate words; '...' keeps everything literally; "..."
 * keeps everything but \" \\ \$ \` and backslash-newline; a backslash outside
 * quotes escapes the next character.  *argv_out is a NULL-terminated array (free
 * with cj_launcher_argv_free).  -1 with err on unterminated quotes, a trailing
 * backslash, no words, more than CJ_LAUNCHER_MAX_ARGS words. */
int cj_launcher_split(const char *cmd, char ***argv_out, int *argc_out, struct cj_err *err);
void cj_launcher_argv_free(char **argv);


#endif
