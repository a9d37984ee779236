/* SPDX-License-Identifier: Apache-2.0 */
/* joblog.h — a job's FLARE log files in <workspace>/<job_id>/, as FLARE's own
 * client job leaves them (log.txt, error_log.txt, log.json, log_fl.txt, with
 * the line formats of FLARE's default log configuration).
 *
 * What goes in: the workers' output lines, as the records FLARE's client job
 * makes of its trainer's output (INFO, the ExternalProcessBackend logger), and
 * the daemon's own log lines that name the job (its id as a word), as records
 * of the logger "cjrelayd".  The daemon's log keeps all of them too.
 *
 * The event loop never touches the disk: records are formatted into memory
 * (at most CJ_JOBLOG_PENDING_MAX bytes waiting per job; beyond that records
 * are dropped, counted, and the count is written once the disk has caught
 * up) and one writer thread shared by all jobs writes them.  Each file is
 * rotated as FLARE's RotatingFileHandler does (CJ_JOBLOG_FILE_MAX bytes,
 * CJ_JOBLOG_BACKUPS older copies name.1 .. name.N).  A folder that cannot be
 * written is reported once in the daemon's log, and the job runs on without
 * its files. */
#ifndef CJ_OPS_JOBLOG_H
#define CJ_OPS_JOBLOG_H

#include <stdint.h>

#define CJ_JOBLOG_PENDING_MAX (1024 * 1024)        /* bytes waiting for the disk, per job */
#define CJ_JOBLOG_FILE_MAX (20ull * 1024 * 1024)   /* FLARE's maxBytes */
#define CJ_JOBLOG_BACKUPS 10                       /* FLARE's backupCount */

/* The logger FLARE's client job logs its trainer's output lines with. */
#define CJ_JOBLOG_TRAINER_LOGGER \
    "nvflare.app_common.executors.client_api.external_process_backend.ExternalProcessBackend"
#define CJ_JOBLOG_DAEMON_LOGGER "cjrelayd"

struct cj_joblog;

/* Starts the files of job job_id in dir (created if missing; the files are
 * opened by the writer thread).  NULL when out of memory. */
struct cj_joblog *cj_joblog_open(const char *dir, const char *job_id);

/* A worker's output line (stream 1 stdout, 2 stderr); empty lines are skipped, as FLARE does. */
void cj_joblog_worker_line(struct cj_joblog *jl, int stream, const char *line);

/* One record: level a cj_log level, logger a dotted logger name. */
void cj_joblog_record(struct cj_joblog *jl, int level, const char *logger, const char *msg);

/* No more records: the writer writes what is pending, closes the files and frees jl. */
void cj_joblog_close(struct cj_joblog *jl);

/* Counters since start, for tests and show output. */
struct cj_joblog_counts {
    uint64_t records;   /* records taken */
    uint64_t dropped;   /* records dropped: the disk did not keep up */
};
void cj_joblog_counts(struct cj_joblog_counts *c);

#endif
