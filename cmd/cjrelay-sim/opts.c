/* SPDX-License-Identifier: Apache-2.0 */
/* opts.c — cjrelay-sim's command line (doc/interface.md "cjrelay-sim"). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sim.h"
#include "util/log.h"
#include "util/parse.h"
#include "util/version.h"
#include "wire/fqcn.h"

static const char USAGE[] =
    "usage: cjrelay-sim --listen SCHEME://HOST:PORT [--tls-dir DIR] --job-id J1[,J2...]\n"
    "                   [--rounds N] [--model-size SIZE] [--tensors N] [--format safetensors|numpy]\n"
    "                   [--isolate] [--inline] [--download-log FILE] [--wait-time SECS]\n"
    "                   [--task-timeout SECS] [--max-failures N] [--fetch-timeout SECS]\n"
    "                   [--vanish-job J@R] [--stall-download N@SECS] [--sync-silent N]\n"
    "                   [--log-headers FILE] [--window SIZE] [--heartbeat SECS] [--log-level LEVEL]\n"
    "                   [--parent tcp://127.0.0.1:PORT [--site NAME] [--job-status-log FILE]\n"
    "                    [--abort-job J@R] [--abort-task J@R]]\n"
    "       cjrelay-sim --drive tcp://HOST:PORT --job-id J1 [--drive-as FQCN] [--drive-fail R]\n"
    "                   [--drive-corrupt R] [--drive-source-failure R] [--drive-parent URL]\n"
    "                   [--rounds/--model-size/--tensors as given to the server]\n"
    "       cjrelay-sim --self-test | --help | --version\n"
    "\n"
    "Plays the FL server: the cells `server` and `server.<job>`.  Prints \"SIM READY <port>\" once\n"
    "listening, then waits for a relay (<site>.<job>) for as long as it takes.\n"
    "\n"
    "  --listen        where the relay connects: tcp, http (WebSocket) or grpc://HOST:PORT, or with\n"
    "                  --tls-dir stcp, https or grpcs://HOST:PORT; port 0 picks a free port (printed in SIM READY)\n"
    "  --tls-dir       rootCA.pem, server.crt, server.key; the TLS schemes require it and client certificates (mtls)\n"
    "  --job-id        the job: this process is the cells server and server.<job>.  Several jobs at once:\n"
    "                  J1,J2,J3 or --job-id repeated (at most 16): the cells server.J1, server.J2, ...\n"
    "                  on the one listener, each with its own rounds, tasks and verification, each\n"
    "                  ending on its own; the simulator exits once every job has ended\n"
    "\n"
    "FL server (doc/protocol/fl-protocols.md, doc/protocol/download.md; values per doc/design.md \"Conventions\"):\n"
    "  --rounds N      tasks to serve and verify (default 3); then get_task answers __end_run__\n"
    "                  and the simulator exits 1 s after that reply went out\n"
    "  --model-size SIZE  total tensor bytes per task, K/M/G allowed (default 64M), split evenly\n"
    "                  over the tensors (each rounded down to 4 bytes; at most 3G per tensor)\n"
    "  --tensors N     tensors per task (default 8): layer<t>.weight, float32, 1-D, item T<t>\n"
    "  --format F      safetensors (default; torch.Tensor wrappers, DOT 6, one safetensors item\n"
    "                  per tensor) or numpy (numpy.ndarray wrappers, DOT 3, one npz item per tensor)\n"
    "  --inline        tensors inside the task payload (\"native\") instead of a download ref\n"
    "                  (the task then holds the whole model; inline bytes are bin, never DOT-0 datums)\n"
    "  --prebuild      build a task's items before the task goes out (held until its ref ends), so a\n"
    "                  download measures the transfer, not the item building (make bench)\n"
    "  --isolate       refuse (invalid_request) download requests whose cn__origin is not a relay\n"
    "                  cell <site>.<job>: workers may not download from the server themselves\n"
    "  --download-log FILE  append one line per download of a task ref this simulator served:\n"
    "                  \"<ref_id> <requester FQCN> <bytes> <ok|failed|incomplete> round=<r> task=<id>\"\n"
    "                  written when the ref finishes, expires, or is dropped (failed task, exit)\n"
    "  --wait-time SECS  __wait_time__ of tasks and __try_again__ replies (default 0.5)\n"
    "  --task-timeout SECS  a task whose result has not arrived after this long fails (default 0:\n"
    "                  never)\n"
    "  --max-failures N  failed rounds (a failed result, a result download that failed, a task\n"
    "                  timeout) are re-issued as new tasks; one more than N is SIM FAIL (default 3)\n"
    "  --fetch-timeout SECS  per-request timeout when downloading results (default 60; 3 retries)\n"
    "  --vanish-job J@R  once round R's task of job J has gone out, the cell server.J disappears, as\n"
    "                  a crashed server job's does: an optional stream chunk for it gets FLARE's\n"
    "                  forwarder error (sm__ERROR, StreamTargetUnreachable, sm__fd server.J), other\n"
    "                  messages a RETURN or nothing; prints SIM VANISHED job=J round=R and keeps\n"
    "                  running (the job never ends: stop the simulator with SIGTERM); repeatable\n"
    "  --stall-download N@SECS  the Nth download request this simulator receives (from 1, any ref)\n"
    "                  and every one in the SECS after it are dropped unanswered, as a server that\n"
    "                  stops sending mid-transfer; then requests are answered again (SIM STALL ...)\n"
    "  --sync-silent N  the first N __sync_runner__ requests go unanswered, as FLARE's server\n"
    "                  leaves them while the server job starts (default 0)\n"
    "  --self-test     check the item writers against lib/payload/items.c, print SELF-TEST OK|FAIL\n"
    "\n"
    "Client parent (doc/protocol/site.md §3; the site's CP, FLARE's internal listener):\n"
    "  --parent URL    also be the cell <site>, listening on clear tcp://HOST:PORT (port 0 picks one,\n"
    "                  printed as SIM PARENT <port>) for its children <site>.<job>.  It answers\n"
    "                  admin/train.notify_job_status (ok, an admin Message reply), sends each child\n"
    "                  client_command/show_stats once after its STARTED (5 s timeout), forwards\n"
    "                  messages between its children, hands those for server and server.<job> to the\n"
    "                  server cells, and RETURNs requests for any other cell\n"
    "  --site NAME     the site, so the parent cell's name (default site-1)\n"
    "  --job-status-log FILE  append one line per notify_job_status: \"<job_id> <status> <from FQCN>\"\n"
    "  --abort-job J@R once round R's task of job J has gone out (its get_task reply sent), send\n"
    "                  client_command/abort (fire-and-forget) to <site>.J; the job then ends as\n"
    "                  aborted when the child's STOPPED arrives, or fails after 10 s without it\n"
    "                  (FLARE's CP waits 10 s, then terminates the job); repeatable\n"
    "  --abort-task J@R  likewise client_command/abort_task {command: abort_task, data: {}}, sent\n"
    "                  only when J reported STARTED (as FLARE's CP); the round goes on; repeatable\n"
    "\n"
    "Stand-in site for tests (no cjrelayd or cjrelay-worker needed):\n"
    "  --drive URL     connect to a simulator as one cell playing relay and worker: sync, poll,\n"
    "                  download and check each task, serve a +1.0 result, __task_check__,\n"
    "                  submit_update; prints DRIVE ... lines, \"DRIVE END rounds=N\" (exit 0) on\n"
    "                  __end_run__, \"DRIVE FAIL <why>\" (exit 1) otherwise\n"
    "  --drive-as FQCN the cell name (default site-1.<job>; a deeper name is not a relay cell)\n"
    "  --drive-fail R  answer round R's first task with an EXECUTION_EXCEPTION result\n"
    "  --drive-corrupt R  change one element of round R's result\n"
    "  --drive-source-failure R  round R's result names a worker cell <me>.sf_trainer that never\n"
    "                  answers; at the server's first pull a sibling cell, then this cell (its\n"
    "                  parent) send download_service__source_failure for it; the next task of\n"
    "                  round R names the same ref again, the third one is normal (the server needs\n"
    "                  --max-failures 2 or more)\n"
    "  --drive-parent URL  also connect to the client parent at URL as the same cell: notify_job_status\n"
    "                  STARTED (2) after __sync_runner__ answered, STOPPED (3) at the end; answers\n"
    "                  client_command show_stats (a map: cell, rounds_done, status), abort (STOPPED,\n"
    "                  then \"DRIVE END aborted rounds=N\"), abort_task (a DRIVE line); others\n"
    "                  invalid_request\n"
    "\n"
    "Transport tests: direct task/ping, stream test/echo, test/blob \"N\" (N pattern bytes).\n"
    "  --log-headers FILE  append each received request's first header block as one key=value line\n"
    "  --window SIZE   stream window of the simulator's replies (default 64M)\n"
    "  --heartbeat SECS  PING a connected client after this many idle seconds (default 0: never)\n"
    "  --log-level L   error|warning|info (default)|debug, on stderr\n"
    "\n"
    "stdout (one line each, stable for scripts):\n"
    "  SIM READY <port>\n"
    "  TASK r task=<id> to=<site FQCN> ref=<ref_id|inline> tensors=N bytes=B\n"
    "  DOWNLOAD ref=<ref_id> by=<FQCN> bytes=B status=<ok|failed|incomplete> round=r\n"
    "  REFUSED download from=<FQCN> ref=<ref_id> (--isolate)\n"
    "  SOURCE_FAILURE from=<FQCN> source=<FQCN> refs=N reason=<text>   (a notice accepted: the refs\n"
    "                  are tombstoned for 1800 s and an active result download of them fails now)\n"
    "  REFUSED source_failure from=<FQCN> source=<FQCN>: <why>   (answered invalid_request)\n"
    "  RESULT r task=<id> ref=<ref_id|inline> from=<FQCN> items=N bytes=B secs=T\n"
    "  ROUND r task=<id> tensors=N bytes=B served_to=<FQCN[,FQCN]|inline|none> result_from=<FQCN>\n"
    "        verified secs=T MiB/s=X       (T: task sent -> result verified; X: (B + result bytes)/T)\n"
    "  ROUND r task=<id> FAILED <why>   (re-issued while --max-failures allows)\n"
    "  SIM OK rounds=N                  (exit 0)\n"
    "  SIM FAIL <why>                   (exit 1: a value or header mismatch, too many failures,\n"
    "                                    a signal during the run; exit 2: could not start)\n"
    "With several jobs, TASK, ROUND and RESULT lines carry \"job=<id>\" after the round, DOWNLOAD\n"
    "lines at the end, and each job ends with one of\n"
    "  SIM DONE job=<id> rounds=N | SIM FAIL job=<id> <why> | SIM ABORTED job=<id> <why>\n"
    "then, once all have ended, SIM OK jobs=N (exit 0) or SIM FAIL jobs=N failed=<id,...> (exit 1).\n"
    "With --parent (one job: SIM OK aborted <why> instead of SIM ABORTED):\n"
    "  SIM PARENT <port>\n"
    "  SIM JOB_STATUS <job> <status> from=<FQCN>\n"
    "  SIM SHOW_STATS <job> rc=<rc> <keys=k1,k2,...|bytes=N|error=<text>>\n"
    "  SIM ABORT <job> round=R to=<FQCN> | SIM ABORT <job> round=R not sent: <why>\n"
    "  SIM ABORT_TASK <job> round=R to=<FQCN> | SIM ABORT_TASK <job> round=R not sent: <why>\n";

enum {
    O_LISTEN = 1, O_TLS_DIR, O_JOB_ID, O_LOG_HEADERS, O_WINDOW, O_HEARTBEAT, O_LOG_LEVEL, O_ROUNDS, O_MODEL_SIZE,
    O_TENSORS, O_FORMAT, O_ISOLATE, O_INLINE, O_PREBUILD, O_DOWNLOAD_LOG, O_WAIT_TIME, O_TASK_TIMEOUT, O_MAX_FAILURES,
    O_FETCH_TIMEOUT, O_SELF_TEST, O_DRIVE, O_DRIVE_AS, O_DRIVE_FAIL, O_DRIVE_CORRUPT, O_DRIVE_SOURCE_FAILURE, O_HELP,
    O_VERSION, O_PARENT, O_SITE, O_JOB_STATUS_LOG, O_ABORT_JOB, O_ABORT_TASK, O_VANISH_JOB, O_STALL_DOWNLOAD, O_DRIVE_PARENT,
    O_SYNC_SILENT,
};

static const struct option LONGOPTS[] = {
    {"listen", required_argument, NULL, O_LISTEN},
    {"tls-dir", required_argument, NULL, O_TLS_DIR},
    {"job-id", required_argument, NULL, O_JOB_ID},
    {"log-headers", required_argument, NULL, O_LOG_HEADERS},
    {"window", required_argument, NULL, O_WINDOW},
    {"heartbeat", required_argument, NULL, O_HEARTBEAT},
    {"log-level", required_argument, NULL, O_LOG_LEVEL},
    {"rounds", required_argument, NULL, O_ROUNDS},
    {"model-size", required_argument, NULL, O_MODEL_SIZE},
    {"tensors", required_argument, NULL, O_TENSORS},
    {"format", required_argument, NULL, O_FORMAT},
    {"isolate", no_argument, NULL, O_ISOLATE},
    {"inline", no_argument, NULL, O_INLINE},
    {"prebuild", no_argument, NULL, O_PREBUILD},
    {"download-log", required_argument, NULL, O_DOWNLOAD_LOG},
    {"wait-time", required_argument, NULL, O_WAIT_TIME},
    {"task-timeout", required_argument, NULL, O_TASK_TIMEOUT},
    {"max-failures", required_argument, NULL, O_MAX_FAILURES},
    {"fetch-timeout", required_argument, NULL, O_FETCH_TIMEOUT},
    {"self-test", no_argument, NULL, O_SELF_TEST},
    {"drive", required_argument, NULL, O_DRIVE},
    {"drive-as", required_argument, NULL, O_DRIVE_AS},
    {"drive-fail", required_argument, NULL, O_DRIVE_FAIL},
    {"drive-corrupt", required_argument, NULL, O_DRIVE_CORRUPT},
    {"drive-source-failure", required_argument, NULL, O_DRIVE_SOURCE_FAILURE},
    {"parent", required_argument, NULL, O_PARENT},
    {"site", required_argument, NULL, O_SITE},
    {"job-status-log", required_argument, NULL, O_JOB_STATUS_LOG},
    {"abort-job", required_argument, NULL, O_ABORT_JOB},
    {"vanish-job", required_argument, NULL, O_VANISH_JOB},
    {"sync-silent", required_argument, NULL, O_SYNC_SILENT},
    {"stall-download", required_argument, NULL, O_STALL_DOWNLOAD},
    {"abort-task", required_argument, NULL, O_ABORT_TASK},
    {"drive-parent", required_argument, NULL, O_DRIVE_PARENT},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "cjrelay-sim: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s", USAGE);
    return -1;
}

static int copy_arg(char *dst, size_t n, const char *opt, const char *val)
{
    if (strlen(val) >= n) return usage_error("%s: value too long (%s)", opt, val);
    strcpy(dst, val);
    return 0;
}

static int positive_long(const char *opt, const char *val, long *out)
{
    long long v;
    const char *why = NULL;
    if (cj_parse_int(val, &v, &why) < 0 || v < 1 || v > 1000000)
        return usage_error("%s: '%s' is not a count from 1 to 1000000", opt, val);
    *out = (long)v;
    return 0;
}

static void defaults(struct sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->window = (uint64_t)64 << 20;
    o->log_level = CJ_LOG_INFO;
    o->rounds = 3;
    o->tensors = 8;
    o->model_size = (int64_t)64 << 20;
    strcpy(o->format, "safetensors");
    o->wait_time = 0.5;
    o->max_failures = 3;
    o->fetch_timeout = 60;
    strcpy(o->site, "site-1");
}

/* A job id: one valid FQCN part, not "server", not given before. */
static int add_job(struct sim_opts *o, const char *id, size_t len)
{
    char j[SIM_JOB_MAX];
    if (len == 0 || len >= sizeof j) return usage_error("--job-id: '%s' is empty or too long%s", id, "");
    memcpy(j, id, len);
    j[len] = '\0';
    if (!cj_fqcn_valid(j) || strchr(j, '.') || !strcmp(j, CJ_FQCN_SERVER))
        return usage_error("--job-id: '%s' is not a valid FQCN part%s", j, "");
    for (size_t i = 0; i < o->n_jobs; i++)
        if (!strcmp(o->job_ids[i], j)) return usage_error("--job-id: '%s' given twice%s", j, "");
    if (o->n_jobs == SIM_MAX_JOBS) return usage_error("--job-id: more than 16 jobs (at '%s')%s", j, "");
    strcpy(o->job_ids[o->n_jobs++], j);
    if (o->n_jobs == 1) strcpy(o->job_id, j);
    return 0;
}

/* --job-id J1[,J2...] (may be repeated). */
static int job_list(struct sim_opts *o, const char *arg)
{
    for (const char *p = arg;;) {
        size_t n = strcspn(p, ",");
        if (add_job(o, p, n) < 0) return -1;
        if (!p[n]) return 0;
        p += n + 1;
    }
}

static bool sim_job_listed(const struct sim_opts *o, const char *job)
{
    for (size_t k = 0; k < o->n_jobs; k++)
        if (!strcmp(o->job_ids[k], job)) return true;
    return false;
}

/* --abort-job / --abort-task / --vanish-job J@R. */
static int trigger(const char *opt, const char *arg, struct sim_trigger *t, size_t *n)
{
    const char *at = strrchr(arg, '@');
    long long r;
    const char *why = NULL;
    if (*n == SIM_MAX_TRIGGERS) return usage_error("%s: given more than 16 times%s", opt, "");
    if (!at || at == arg || (size_t)(at - arg) >= sizeof t->job || cj_parse_int(at + 1, &r, &why) < 0 || r < 1 ||
        r > 1000000)
        return usage_error("%s: '%s' is not JOB@ROUND", opt, arg);
    memcpy(t[*n].job, arg, (size_t)(at - arg));
    t[*n].job[at - arg] = '\0';
    t[*n].round = (long)r;
    (*n)++;
    return 0;
}

/* --stall-download N@SECS. */
static int stall_arg(struct sim_opts *o, const char *arg)
{
    const char *at = strchr(arg, '@'), *why = NULL;
    long long n;
    char num[32];
    if (!at || (size_t)(at - arg) >= sizeof num) return usage_error("--stall-download: '%s' is not N@SECS%s", arg, "");
    memcpy(num, arg, (size_t)(at - arg));
    num[at - arg] = '\0';
    if (cj_parse_int(num, &n, &why) < 0 || n < 1 || n > 1000000 ||
        cj_parse_duration(at + 1, &o->stall_download_secs, &why) < 0 || o->stall_download_secs <= 0 ||
        o->stall_download_secs > 3600)
        return usage_error("--stall-download: '%s' is not N@SECS (N from 1, SECS up to 3600)%s", arg, "");
    o->stall_download_at = (long)n;
    return 0;
}

static int seconds(const char *opt, const char *val, double lo, double hi, double *out)
{
    const char *why = NULL;
    double v;
    if (cj_parse_duration(val, &v, &why) < 0 || v < lo || v > hi)
        return usage_error("%s: '%s' is not a number of seconds in range", opt, val);
    *out = v;
    return 0;
}

static int one_option(struct sim_opts *o, int c, const char *arg)
{
    const char *why = NULL;
    int64_t size;
    switch (c) {
    case O_LISTEN: return copy_arg(o->listen, sizeof o->listen, "--listen", arg);
    case O_TLS_DIR: return copy_arg(o->tls_dir, sizeof o->tls_dir, "--tls-dir", arg);
    case O_JOB_ID: return job_list(o, arg);
    case O_PARENT:
        if (strncmp(arg, "tcp://", 6)) return usage_error("--parent: '%s' is not a clear tcp:// URL%s", arg, "");
        return copy_arg(o->parent, sizeof o->parent, "--parent", arg);
    case O_SITE:
        if (!cj_fqcn_valid(arg) || strchr(arg, '.') || !strcmp(arg, CJ_FQCN_SERVER) || strlen(arg) >= sizeof o->site)
            return usage_error("--site: '%s' is not a valid site name%s", arg, "");
        return copy_arg(o->site, sizeof o->site, "--site", arg);
    case O_JOB_STATUS_LOG: return copy_arg(o->job_status_log, sizeof o->job_status_log, "--job-status-log", arg);
    case O_ABORT_JOB: return trigger("--abort-job", arg, o->abort_job, &o->n_abort_job);
    case O_ABORT_TASK: return trigger("--abort-task", arg, o->abort_task, &o->n_abort_task);
    case O_VANISH_JOB: return trigger("--vanish-job", arg, o->vanish_job, &o->n_vanish_job);
    case O_STALL_DOWNLOAD: return stall_arg(o, arg);
    case O_SYNC_SILENT: return positive_long("--sync-silent", arg, &o->sync_silent);
    case O_DRIVE_PARENT: return copy_arg(o->drive_parent, sizeof o->drive_parent, "--drive-parent", arg);
    case O_LOG_HEADERS: return copy_arg(o->log_headers, sizeof o->log_headers, "--log-headers", arg);
    case O_WINDOW:
        if (cj_parse_size(arg, &size, &why) < 0 || size < 65536 || size > ((int64_t)16 << 30))
            return usage_error("--window: '%s' is not a size from 64K to 16G%s", arg, "");
        o->window = (uint64_t)size;
        return 0;
    case O_HEARTBEAT:
        if (cj_parse_duration(arg, &o->heartbeat, &why) < 0 || o->heartbeat > 3600)
            return usage_error("--heartbeat: '%s' is not a number of seconds up to 3600%s", arg, "");
        return 0;
    case O_LOG_LEVEL:
        if ((o->log_level = cj_log_level_from_name(arg)) < 0)
            return usage_error("--log-level: '%s' is not error, warning, info or debug%s", arg, "");
        return 0;
    case O_ROUNDS: return positive_long("--rounds", arg, &o->rounds);
    case O_TENSORS: return positive_long("--tensors", arg, &o->tensors);
    case O_MODEL_SIZE:
        if (cj_parse_size(arg, &o->model_size, &why) < 0 || o->model_size < 1)
            return usage_error("--model-size: '%s' %s", arg, why ? why : "must be positive");
        return 0;
    case O_FORMAT:
        if (strcmp(arg, "safetensors") && strcmp(arg, "numpy"))
            return usage_error("--format: '%s' is not safetensors or numpy%s", arg, "");
        return copy_arg(o->format, sizeof o->format, "--format", arg);
    case O_ISOLATE: o->isolate = true; return 0;
    case O_INLINE: o->inline_tensors = true; return 0;
    case O_PREBUILD: o->prebuild = true; return 0;
    case O_DOWNLOAD_LOG:
        return copy_arg(o->download_log, sizeof o->download_log, "--download-log", arg);
    case O_WAIT_TIME: return seconds("--wait-time", arg, 0, 3600, &o->wait_time);
    case O_TASK_TIMEOUT: return seconds("--task-timeout", arg, 0, 1e6, &o->task_timeout);
    case O_FETCH_TIMEOUT: return seconds("--fetch-timeout", arg, 0.1, 1e6, &o->fetch_timeout);
    case O_MAX_FAILURES: {
        long long v;
        if (cj_parse_int(arg, &v, &why) < 0 || v < 0 || v > 1000000)
            return usage_error("--max-failures: '%s' is not a count from 0 to 1000000%s", arg, "");
        o->max_failures = (long)v;
        return 0;
    }
    case O_SELF_TEST: o->self_test = true; return 0;
    case O_DRIVE: return copy_arg(o->drive, sizeof o->drive, "--drive", arg);
    case O_DRIVE_AS:
        if (!cj_fqcn_valid(arg) || strlen(arg) >= sizeof o->drive_as)
            return usage_error("--drive-as: '%s' is not a valid FQCN%s", arg, "");
        return copy_arg(o->drive_as, sizeof o->drive_as, "--drive-as", arg);
    case O_DRIVE_FAIL: return positive_long("--drive-fail", arg, &o->drive_fail);
    case O_DRIVE_CORRUPT: return positive_long("--drive-corrupt", arg, &o->drive_corrupt);
    case O_DRIVE_SOURCE_FAILURE: return positive_long("--drive-source-failure", arg, &o->drive_source_failure);
    default: return usage_error("unknown option%s%s", "", "");
    }
}

int sim_parse_args(int argc, char **argv, struct sim_opts *o)
{
    defaults(o);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", LONGOPTS, NULL)) != -1) {
        if (c == O_HELP) {
            fputs(USAGE, stdout);
            return 1;
        }
        if (c == O_VERSION) {
            printf("cjrelay-sim %s\n", CJRELAY_VERSION);
            return 1;
        }
        if (c == '?' || c == ':')
            return usage_error("bad or incomplete option '%s'%s", argv[optind - 1], "");
        if (one_option(o, c, optarg) < 0) return -1;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'%s", argv[optind], "");
    if (o->self_test) return 0;
    if (!o->listen[0] && !o->drive[0]) return usage_error("--listen (or --drive) is required%s%s", "", "");
    if (!o->n_jobs) return usage_error("--job-id is required%s%s", "", "");
    if (o->drive[0] && o->n_jobs > 1) return usage_error("--drive plays one job: give one --job-id%s%s", "", "");
    if (!o->parent[0] && (o->n_abort_job || o->n_abort_task || o->job_status_log[0]))
        return usage_error("--abort-job, --abort-task and --job-status-log need --parent%s%s", "", "");
    for (size_t i = 0; i < o->n_abort_job + o->n_abort_task; i++) {
        const char *j = i < o->n_abort_job ? o->abort_job[i].job : o->abort_task[i - o->n_abort_job].job;
        size_t k = 0;
        while (k < o->n_jobs && strcmp(o->job_ids[k], j)) k++;
        if (k == o->n_jobs)
            return usage_error("--abort-job/--abort-task: '%s' is not one of the --job-id jobs%s", j, "");
    }
    for (size_t i = 0; i < o->n_vanish_job; i++)
        if (!sim_job_listed(o, o->vanish_job[i].job))
            return usage_error("--vanish-job: '%s' is not one of the --job-id jobs%s", o->vanish_job[i].job, "");
    int64_t per = (o->model_size / o->tensors) & ~(int64_t)3;
    if (per < 4 || (uint64_t)per > SIM_MAX_TENSOR_BYTES)
        return usage_error("--model-size / --tensors: %s per tensor is out of range (4 bytes to 3G)",
                           per < 4 ? "less than 4 bytes" : "more than 3G", "");
    return 0;
}
