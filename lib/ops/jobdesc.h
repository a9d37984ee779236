/* SPDX-License-Identifier: Apache-2.0 */
/* jobdesc.h — the job description a site daemon's `job start <json>` takes
 * (doc/interface.md, "Job description"): one JSON object read into a bounded
 * struct, checked key by key, and turned into the job's configuration (the
 * site's INI configuration with the description's keys over it).
 *
 * Every error is one line "<field>: <reason>" naming the field with its path
 * ("worker.argv[2]: not a string", "credentials.token: missing", "colour:
 * unknown"); problems of the text as a whole name "description".  Errors never
 * quote a credential, an env value or a bootstrap value.
 *
 * Bounds (the JSON text itself is at most CJ_JOBDESC_MAX bytes, so the status
 * line that carries it, "job start " + JSON, needs CJ_JOBDESC_LINE_MAX bytes:
 * the status socket's line limit, CJ_STATUS_MAX_LINE, must grow to that):
 *   job_id, site                 63 bytes, letters, digits, '_', '~', '-' (the INI's rule)
 *   server_url, parent_url       CJ_JOBDESC_URL_MAX - 1
 *   ca/cert/key_file, workspace,
 *   worker.cwd, worker.listen    CJ_CFG_PATH_MAX - 1, absolute paths
 *   project_name                 CJ_JOBDESC_PROJECT_MAX - 1
 *   credentials.*                CJ_CREDS_VALUE_MAX (fl/creds.h)
 *   worker.user, worker.group    CJ_JOBDESC_ACCOUNT_MAX - 1
 *   worker.argv                  CJ_JOBDESC_ARGS_MAX words, together at most
 *                                CJ_CFG_PATH_MAX - 1 bytes once quoted as [workers] command
 *   worker.env                   CJ_JOBDESC_ENV_MAX entries, CJ_JOBDESC_ENV_TEXT bytes in all
 *   bootstrap                    CJ_JOBDESC_BOOT_MAX entries, CJ_JOBDESC_BOOT_TEXT bytes in all,
 *                                values nested at most CJ_JOBDESC_BOOT_DEPTH deep
 *   keys (env names, bootstrap)  CJ_JOBDESC_NAME_MAX - 1
 *   tls_fds                      an index 0 .. CJ_JOBDESC_TLS_FDS - 1 for each of
 *                                ca_file, cert_file, key_file (not both a path and a
 *                                descriptor for one file)
 *
 * Credentials are wiped by cj_jobdesc_clear (and by a failed parse); nothing
 * here logs or prints them, and cj_jobdesc_describe leaves them out. */
#ifndef CJ_OPS_JOBDESC_H
#define CJ_OPS_JOBDESC_H

#include <stdbool.h>
#include <stddef.h>

#include "fl/creds.h"
#include "ops/config.h"

#define CJ_JOBDESC_MAX          (64 * 1024)             /* bytes of the JSON text */
#define CJ_JOBDESC_LINE_MAX     (CJ_JOBDESC_MAX + 16)   /* "job start " + the JSON + newline */
#define CJ_JOBDESC_URL_MAX      320
#define CJ_JOBDESC_PROJECT_MAX  128                     /* = [upstream] project_name's field */
#define CJ_JOBDESC_ACCOUNT_MAX  64
#define CJ_JOBDESC_NAME_MAX     64
#define CJ_JOBDESC_ARGS_MAX     64
#define CJ_JOBDESC_ENV_MAX      256                     /* a CP's whole environment (doc/interface.md) */
#define CJ_JOBDESC_ENV_TEXT     (32 * 1024)
#define CJ_JOBDESC_BOOT_MAX     32
#define CJ_JOBDESC_BOOT_TEXT    (16 * 1024)
#define CJ_JOBDESC_BOOT_DEPTH   8
#define CJ_JOBDESC_TLS_FDS      3                       /* ca_file, cert_file, key_file */

/* The TLS files' keys, in the order of tls_fd[] and tls_label[]. */
extern const char *const cj_jobdesc_tls_keys[CJ_JOBDESC_TLS_FDS];

/* Which keys the description gave (struct cj_job_desc.has). */
enum {
    CJ_JD_JOB_ID = 1u << 0, CJ_JD_SITE = 1u << 1, CJ_JD_SERVER_URL = 1u << 2,
    CJ_JD_SECURITY = 1u << 3, CJ_JD_CA_FILE = 1u << 4, CJ_JD_CERT_FILE = 1u << 5,
    CJ_JD_KEY_FILE = 1u << 6, CJ_JD_PROJECT = 1u << 7, CJ_JD_PARENT_URL = 1u << 8,
    CJ_JD_CREDENTIALS = 1u << 9, CJ_JD_MODE = 1u << 10, CJ_JD_WORKSPACE = 1u << 11,
    CJ_JD_WORKER = 1u << 12, CJ_JD_BOOTSTRAP = 1u << 13, CJ_JD_TLS_FDS = 1u << 14, CJ_JD_FLARE_VERSION = 1u << 15,
    /* inside "worker" */
    CJ_JD_ARGV = 1u << 16, CJ_JD_CWD = 1u << 17, CJ_JD_ENV = 1u << 18, CJ_JD_USER = 1u << 19,
    CJ_JD_GROUP = 1u << 20, CJ_JD_COUNT = 1u << 21, CJ_JD_LISTEN = 1u << 22, CJ_JD_LAUNCH_TIMEOUT = 1u << 23,
};

struct cj_job_desc {
    unsigned has;                              /* CJ_JD_* */
    char job_id[CJ_CFG_NAME_MAX];
    char site[CJ_CFG_NAME_MAX];
    char server_url[CJ_JOBDESC_URL_MAX];       /* checked as [upstream] url */
    int connection_security;                   /* enum cj_security */
    char ca_file[CJ_CFG_PATH_MAX];
    char cert_file[CJ_CFG_PATH_MAX];
    char key_file[CJ_CFG_PATH_MAX];
    /* tls_fds: the TLS files that come as open files with the job start line
     * (bit i of tls_fdmask: tls_fd[i] is given, the index of its descriptor
     * among those passed, in the order of cj_jobdesc_tls_keys).  tls_label[i]
     * is set by the caller, from the descriptor, before cj_jobdesc_config: the
     * value the job's configuration shows for the key ("fd:/srv/.../client.key"). */
    unsigned tls_fdmask;
    int tls_fd[CJ_JOBDESC_TLS_FDS];
    char tls_label[CJ_JOBDESC_TLS_FDS][CJ_CFG_PATH_MAX];
    char project_name[CJ_JOBDESC_PROJECT_MAX];
    char parent_url[CJ_JOBDESC_URL_MAX];       /* tcp://HOST:PORT on loopback */
    struct {                                   /* all three, when CJ_JD_CREDENTIALS */
        char token[CJ_CREDS_VALUE_MAX + 1];
        char token_signature[CJ_CREDS_VALUE_MAX + 1];
        char ssid[CJ_CREDS_VALUE_MAX + 1];     /* may be empty */
    } credentials;
    int mode;                                  /* enum cj_relay_mode */
    char workspace[CJ_CFG_PATH_MAX];
    char flare_version[32];                    /* checked as [relay] flare_version (lib/fl/dialect.h) */
    struct {
        int argc;
        char argv[CJ_CFG_COMMAND_MAX];         /* argc words, each NUL-ended, one after the other */
        char cwd[CJ_CFG_PATH_MAX];
        int envc;
        char env[CJ_JOBDESC_ENV_TEXT];         /* envc "NAME=value" strings, each NUL-ended */
        char user[CJ_JOBDESC_ACCOUNT_MAX];     /* a name or a numeric id, not looked up here */
        char group[CJ_JOBDESC_ACCOUNT_MAX];
        int count;                             /* 1..64 ([workers] count's range) */
        char listen[CJ_CFG_PATH_MAX];          /* checked as [workers] listen */
        double launch_timeout;                 /* seconds, checked as [workers] launch_timeout */
    } worker;
    int bootc;
    char boot[CJ_JOBDESC_BOOT_TEXT];           /* bootc pairs: key NUL, raw JSON value NUL */
};

/* Parses json[0..len) (one object, optional blanks around it) into *out.
 * 0, or -1 with why = "<field>: <reason>" and *out cleared.  Unknown keys,
 * duplicate keys, wrong types, values the INI would refuse for the key they
 * override, and trailing bytes are refused; job_id is required. */
int cj_jobdesc_parse(const char *json, size_t len, struct cj_job_desc *out, char *why, size_t whysz);

/* The job's configuration: *site with the description's keys over it
 *   job_id -> [relay] job_id           server_url -> [upstream] url
 *   connection_security, ca_file, cert_file, key_file, project_name -> [upstream] the same
 *   tls_fds.<file> -> [upstream] <file> = tls_label[i] ("fd:<index>" when empty)
 *   mode -> [relay] mode               worker.argv -> [workers] command (quoted)
 *   flare_version -> [relay] flare_version
 *   worker.count, worker.listen, worker.launch_timeout -> [workers] count, listen, launch_timeout
 * (parent_url, credentials, workspace, worker.cwd/env/user/group and bootstrap
 * have no INI key: they stay in the description), checked with the INI's
 * cross-key rules (cj_config_check).  A site other than [relay] site is
 * refused.  job->origin marks the keys the description set (key_line 1), as
 * if it were a file of its own.  0, or -1 with why naming the description's
 * field (or the INI key, for a site setting it cannot change) and *job left
 * as it was.  Left to the caller, who knows the job's place: a per-job
 * worker listener when worker.listen is absent (the site's is kept here), and
 * credentials from the description in place of [upstream] credentials_file
 * and the environment. */
int cj_jobdesc_config(const struct cj_job_desc *d, const struct cj_config *site, struct cj_config *job,
                      char *why, size_t whysz);

/* The i-th word of worker.argv, the i-th "NAME=value" of worker.env, the i-th
 * bootstrap key and its raw JSON value; NULL when i is out of range. */
const char *cj_jobdesc_arg(const struct cj_job_desc *d, int i);
const char *cj_jobdesc_env(const struct cj_job_desc *d, int i);
const char *cj_jobdesc_boot(const struct cj_job_desc *d, int i, const char **raw);

/* One line for the log, without credentials, env values, bootstrap values or
 * argv past argv[0] (as the launcher logs a command):
 * "job J1 site site-1 server grpcs://h:8002 security tls mode spool worker python3 (+2 args) x2 ...".
 * snprintf-style return; always NUL-terminated when len > 0. */
size_t cj_jobdesc_describe(const struct cj_job_desc *d, char *buf, size_t len);

/* Wipes the whole description, credentials included (explicit_bzero). */
void cj_jobdesc_clear(struct cj_job_desc *d);

#endif
