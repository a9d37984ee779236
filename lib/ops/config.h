/* SPDX-License-Identifier: Apache-2.0 */
/* config.h — cjrelayd's INI configuration, described by ONE key table.
 *
 * The table in config.c (section, name, type, default, range or allowed values,
 * reloadable, one-line doc) drives everything: defaults, parsing (inih), value
 * and range checks, `show config`, reload diffs, and the test that keeps
 * conf/cjrelay.ini — the documented example — in step with it.
 *
 * Values:  durations are seconds, decimals allowed ("0.5"); sizes are bytes with
 * an optional K, M or G suffix (powers of 1024); booleans true/false, yes/no,
 * on/off, 1/0; modes are octal ("0660").  Relative paths (path keys and
 * unix:PATH listen entries) are resolved against the directory of the config
 * file, so a config file and its certificates can move together.  An empty path
 * means "not set".
 *
 * Problems are collected, not stopped at: every one is a "FILE:LINE: message"
 * string.  A problem about a key that is not in the file (a required key left
 * out) names the line of its [section] header, or the last line when the
 * section is missing too.  A problem about the file as a whole (cannot open it)
 * is "FILE: message". */
#ifndef CJ_OPS_CONFIG_H
#define CJ_OPS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/parse.h"

#define CJ_CFG_NKEYS     53       /* rows in the key table (checked in config.c) */
#define CJ_CFG_PATH_MAX  1024
#define CJ_CFG_NAME_MAX  64       /* site, job_id */
#define CJ_LISTEN_MAX    4
#define CJ_CONFIG_FILE_MAX (1024 * 1024)   /* a bigger config file is refused */
#define CJ_CONFIG_LINE_MAX 16384           /* a longer line (before a comment) is refused */
#define CJ_CFG_COMMAND_MAX 8192            /* workers.command */
#define CJ_CFG_VALUE_TEXT_MAX (CJ_CFG_COMMAND_MAX + 64)   /* any value as text */

/* Enum values; each list is in the order of the allowed values in the table. */
enum cj_relay_mode { CJ_MODE_PASS_THROUGH, CJ_MODE_SPOOL };
enum cj_on_end_run { CJ_END_EXIT, CJ_END_WAIT };
enum cj_security { CJ_SEC_CLEAR, CJ_SEC_TLS, CJ_SEC_MTLS };
/* log.level uses enum cj_log_level from util/log.h. */

struct cj_listen_list {
    int n;
    struct cj_endpoint ep[CJ_LISTEN_MAX];  /* ep[0] is the connect_url for launched workers */
};

/* Where each value came from: for messages about cross-key rules and reload. */
struct cj_config_origin {
    char file[CJ_CFG_PATH_MAX];        /* as given to cj_config_load; "" for defaults */
    int key_line[CJ_CFG_NKEYS];        /* 0 = not in the file (default) */
    int section_line[8];               /* header line of each section, 0 = absent */
    int last_line;
    bool bad[CJ_CFG_NKEYS];            /* the value was rejected (default kept) */
};

struct cj_config {
    struct {
        char site[CJ_CFG_NAME_MAX];
        char job_id[CJ_CFG_NAME_MAX];
        int mode;                          /* enum cj_relay_mode */
        char spool_dir[CJ_CFG_PATH_MAX];
        bool spool_allow_tmpfs;
        int64_t spool_max_bytes;           /* 0 = no limit */
        int on_end_run;                    /* enum cj_on_end_run */
        int max_jobs;                      /* jobs running at once (job start refuses more) */
        double job_linger;                 /* seconds an ended job's record stays for job wait, show jobs */
        char flare_version[32];            /* the jobs' FLARE version (lib/fl/dialect.h), CJ_FL_VERSION_MAX */
    } relay;
    struct {
        struct cj_endpoint url;            /* any network scheme: tcp/http/grpc (clear), stcp/https/grpcs (TLS) */
        int connection_security;           /* enum cj_security */
        char ca_file[CJ_CFG_PATH_MAX];
        char cert_file[CJ_CFG_PATH_MAX];
        char key_file[CJ_CFG_PATH_MAX];
        char tls_server_name[256];         /* grpcs: the name the server certificate must carry; "" = url's host */
        char project_name[128];
        char credentials_file[CJ_CFG_PATH_MAX];
        double get_task_interval;          /* seconds */
        double get_task_timeout;
        double connect_timeout;            /* TCP connect + TLS of one attempt */
        double hello_timeout;              /* HELLO sent -> READY */
        double download_idle_timeout;      /* spool pulls: no stream chunk this long */
        double submit_timeout;             /* submit_update: no answer and no result bytes this long */
        double task_check_timeout;
        int64_t min_rate;                  /* bytes/s the idle timeouts must allow one stream chunk at */
        double job_heartbeat_interval;
        double job_heartbeat_timeout;      /* "job not there" answers this long: the job ends; 0 never */
        double ping_interval;              /* link keepalive; dead after 3 x this without a byte */
        double reconnect_min;
        double reconnect_max;
        double first_connect_timeout;      /* run-time jobs: 104 when the server link never came up; 0 = wait */
    } upstream;
    struct {
        struct cj_listen_list listen;
        unsigned socket_mode;
        char command[CJ_CFG_COMMAND_MAX];
        int count;
        char launch_token_file[CJ_CFG_PATH_MAX];
        double heartbeat_interval;
        double heartbeat_timeout;
        double shutdown_grace;
        double launch_timeout;             /* a launched worker slot with no worker through SESSION_READY this
                                              long ends the job (101); 0 = no bound */
    } workers;
    struct {
        char socket[CJ_CFG_PATH_MAX];
        unsigned socket_mode;
        char socket_group[CJ_CFG_NAME_MAX];   /* "" = the daemon's group */
        char admin_group[CJ_CFG_NAME_MAX];    /* "" = no group: only root and the daemon's user are admin */
    } status;
    struct {
        int64_t stream_chunk;
        int64_t stream_window;
        int64_t link_buffer;
        int64_t max_message_size;
        bool pacing;
    } limits;
    struct {
        int level;                         /* enum cj_log_level */
        bool syslog;
    } log;
    struct {
        struct cj_endpoint listen;         /* kind 0: no metrics endpoint; tcp, port 0 = any free port */
    } metrics;
    struct cj_config_origin origin;
};

/* ---- the key table (read-only view, for tests and tools) ---------------------- */

enum cj_cfg_type {
    CJ_T_STR, CJ_T_ENUM, CJ_T_BOOL, CJ_T_INT, CJ_T_DURATION, CJ_T_SIZE,
    CJ_T_MODE, CJ_T_PATH, CJ_T_URL, CJ_T_LISTEN, CJ_T_ADDR,
};

#define CJ_CFG_REQUIRED  1u    /* must not be empty */
#define CJ_CFG_FQCN_PART 2u    /* [A-Za-z0-9_~-]+ */
#define CJ_CFG_SOCKET    4u    /* a Unix socket path: at most 107 bytes once resolved */
#define CJ_CFG_JOB_REQUIRED 8u /* must not be empty once there is a job (job_id set, or a job's description) */

struct cj_cfg_key {
    const char *section, *name;
    const char *key;                   /* "section.name" */
    enum cj_cfg_type type;
    const char *def;                   /* default, as text (parsed like a file value) */
    double min, max;                   /* numeric types; both 0 = no range */
    const char *const *allowed;        /* enum: NULL-terminated values */
    bool reloadable;
    unsigned flags;                    /* CJ_CFG_* */
    const char *doc;                   /* one line */
    size_t off, size;                  /* the field in struct cj_config */
};

const struct cj_cfg_key *cj_config_keys(size_t *n);
const struct cj_cfg_key *cj_config_find(const char *section, const char *name);
const char *cj_config_type_name(enum cj_cfg_type t);

/* ---- problems ------------------------------------------------------------------ */

#define CJ_PROBLEMS_MAX 32
#define CJ_PROBLEM_LEN  320

struct cj_problems {
    int n;
    int dropped;                       /* problems beyond CJ_PROBLEMS_MAX, counted only */
    char msg[CJ_PROBLEMS_MAX][CJ_PROBLEM_LEN];
};

void cj_problems_init(struct cj_problems *p);
void cj_problems_add(struct cj_problems *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int cj_problems_total(const struct cj_problems *p);     /* n + dropped */

/* ---- loading, checking, reloading, showing ---------------------------------------- */

/* Every key at its default (site and job_id empty: they have none). */
void cj_config_defaults(struct cj_config *cfg);

/* Reads and validates path.  *problems is emptied first (no need to init it).
 * On success (0) *cfg holds the new configuration.  On any problem (-1) every
 * problem found is in *problems and *cfg is NOT touched — so a bad reload keeps
 * the running configuration. */
int cj_config_load(const char *path, struct cj_config *cfg, struct cj_problems *problems);

/* Cross-key rules (timeouts against intervals, TLS settings against the URL, ...).
 * cj_config_load runs it; returns how many problems it added. */
int cj_config_validate(const struct cj_config *cfg, struct cj_problems *problems);

/* The same rules, each problem handed to report with the key it is about
 * ("section.name": of the keys a rule relates, one that cfg->origin says was
 * set, the rule's first otherwise) and its text without a place; returns how
 * many.  cj_config_validate is this with "FILE:LINE: " in front. */
typedef void (*cj_config_report_fn)(void *arg, const char *key, const char *msg);
/* The line of cfg's file that key ("section.name") is on, else its section's
 * header, else the file's last line. */
int cj_config_key_line(const struct cj_config *cfg, const char *key);
int cj_config_check(const struct cj_config *cfg, cj_config_report_fn report, void *arg);

/* Parses text as the file's value of key ("section.name") would be: its type's
 * syntax, range and flags (a relative path stays relative).  Into field (size
 * bytes: the key's field in struct cj_config) when field is not NULL, else
 * only checked.  0, or -1 with why (the field is then unchanged). */
int cj_config_parse_value(const char *key, const char *text, void *field, size_t size,
                          char *why, size_t whysz);

struct cj_config_change {
    const char *key;                   /* "section.name" (static) */
    bool reloadable;
};

/* Keys whose value differs between old and new; returns how many (at most max
 * are written to out; there are never more than CJ_CFG_NKEYS). */
int cj_config_diff(const struct cj_config *old, const struct cj_config *neu,
                   struct cj_config_change *out, int max);

/* Copies every reloadable key from neu into running, leaving the others as they
 * are; returns how many reloadable values changed. */
int cj_config_apply_reload(struct cj_config *running, const struct cj_config *neu);

/* One row of `show config`, each cell as text (the value as the file would
 * spell it: "64M", "0.5", "0660"). */
struct cj_config_row {
    const char *key;
    char value[CJ_CFG_VALUE_TEXT_MAX];
    char def[CJ_CFG_VALUE_TEXT_MAX];
    bool reloadable;
};

/* Fills row i (0 <= i < CJ_CFG_NKEYS); -1 when i is out of range. */
int cj_config_row(const struct cj_config *cfg, size_t i, struct cj_config_row *row);

/* Renders a key's current value (as in the row); -1 for an unknown key. */
int cj_config_value_text(const struct cj_config *cfg, const char *key, char *buf, size_t len);

enum cj_show_format { CJ_SHOW_TEXT, CJ_SHOW_JSON };

/* `show config`: text is a header line and one aligned row per key ("key value
 * default reloadable"; an empty value shows as ""); JSON is one line
 * {"config":[{"key":..,"value":..,"default":..,"reloadable":true},..]} with every
 * value as a string.  snprintf-style: returns the length the whole answer needs
 * (no trailing empty line), writes at most len bytes, always NUL-terminated. */
size_t cj_config_show(const struct cj_config *cfg, enum cj_show_format fmt,
                      char *out, size_t len);

#endif
