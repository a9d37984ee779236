/* SPDX-License-Identifier: Apache-2.0 */
/* config.c — the key table and everything it drives: defaults, parsing (inih),
 * checks, show config, reload.
 *
 * Reading a file: inih splits "name = value" and strips comments, but our own
 * line reader feeds it one physical line at a time.  Debian's inih is built
 * without INI_HANDLER_LINENO and stops at no error, so the reader counts lines,
 * follows [section] headers and reports syntax problems itself; inih only ever
 * sees well-formed key lines (others become blank lines), so the line number the
 * reader last counted is the line of the key the handler is called for. */
#include "ops/config.h"

#include <ctype.h>
#include <ini.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dl/spoolio.h"
#include "fl/dialect.h"
#include "net/addr.h"
#include "ops/out.h"
#include "util/err.h"
#include "util/log.h"

/* ---- the table ---------------------------------------------------------------------- */

static const char *const sections[] = {"relay", "upstream", "workers", "status", "limits", "log", "metrics", NULL};
static const char *const modes[] = {"pass_through", "spool", NULL};         /* enum cj_relay_mode */
static const char *const end_runs[] = {"exit", "wait", NULL};               /* enum cj_on_end_run */
static const char *const securities[] = {"clear", "tls", "mtls", NULL};    /* enum cj_security */

#define KEY(sec, nm) sec, nm, sec "." nm
#define FIELD(f) offsetof(struct cj_config, f), sizeof(((struct cj_config *)0)->f)
#define KiB 1024.0
#define MiB (1024.0 * KiB)
#define GiB (1024.0 * MiB)
#define REQ CJ_CFG_REQUIRED
#define RELOAD true
#define RESTART false

/* section, name | type | default | min, max | allowed | reloadable | flags | doc | field */
static const struct cj_cfg_key keys[] = {
    {KEY("relay", "site"), CJ_T_STR, "", 0, 0, NULL, RESTART, REQ | CJ_CFG_FQCN_PART,
     "first FQCN segment; the relay's cell is <site>.<job_id>", FIELD(relay.site)},
    {KEY("relay", "job_id"), CJ_T_STR, "", 0, 0, NULL, RESTART, CJ_CFG_FQCN_PART,
     "single-job shorthand: the job this daemon runs from the start (second FQCN segment, not site); "
     "empty: jobs come through `job start`", FIELD(relay.job_id)},
    {KEY("relay", "mode"), CJ_T_ENUM, "pass_through", 0, 0, modes, RESTART, 0,
     "pass_through: tensors stream through the relay; spool: they are downloaded into spool_dir first",
     FIELD(relay.mode)},
    {KEY("relay", "spool_dir"), CJ_T_PATH, "/var/lib/cjrelay", 0, 0, NULL, RESTART, 0,
     "spool mode: downloaded tensors live here", FIELD(relay.spool_dir)},
    {KEY("relay", "spool_allow_tmpfs"), CJ_T_BOOL, "false", 0, 0, NULL, RESTART, 0,
     "a tmpfs spool_dir is refused unless this is true", FIELD(relay.spool_allow_tmpfs)},
    {KEY("relay", "spool_max_bytes"), CJ_T_SIZE, "0", 0, 8192 * GiB * KiB, NULL, RELOAD, 0,
     "most bytes the spool may hold; 0 = no limit besides the disk", FIELD(relay.spool_max_bytes)},
    {KEY("relay", "on_end_run"), CJ_T_ENUM, "exit", 0, 0, end_runs, RELOAD, 0,
     "what to do when the server ends the run: exit the daemon, or wait for the next run",
     FIELD(relay.on_end_run)},
    {KEY("relay", "max_jobs"), CJ_T_INT, "16", 1, 256, NULL, RELOAD, 0,
     "jobs running at once; job start refuses more (ERR 503)", FIELD(relay.max_jobs)},
    {KEY("relay", "job_linger"), CJ_T_DURATION, "600", 0, 86400, NULL, RELOAD, 0,
     "how long an ended job's outcome stays for job wait and show jobs", FIELD(relay.job_linger)},
    {KEY("relay", "flare_version"), CJ_T_STR, "2.9", 0, 0, NULL, RESTART, 0,
     "the FLARE version of the jobs' sites (a job description's flare_version overrides it): 2.7.x and 2.8.x "
     "run their trainers through FLARE's CellPipe, 2.9 and later through the client_api cell protocol",
     FIELD(relay.flare_version)},

    {KEY("upstream", "url"), CJ_T_URL, "tcp://127.0.0.1:8002", 0, 0, NULL, RESTART, 0,
     "the FL server, with its project's scheme: tcp|http|grpc://HOST:PORT (clear), stcp|https|grpcs://HOST:PORT (TLS)",
     FIELD(upstream.url)},
    {KEY("upstream", "connection_security"), CJ_T_ENUM, "clear", 0, 0, securities, RESTART, 0,
     "clear (tcp, http, grpc), tls or mtls (stcp, https, grpcs); must match the url's scheme",
     FIELD(upstream.connection_security)},
    {KEY("upstream", "ca_file"), CJ_T_PATH, "", 0, 0, NULL, RESTART, 0,
     "root CA (rootCA.pem) that signed the server's certificate; needed by tls and mtls",
     FIELD(upstream.ca_file)},
    {KEY("upstream", "cert_file"), CJ_T_PATH, "", 0, 0, NULL, RESTART, 0,
     "client certificate (client.crt); needed by mtls", FIELD(upstream.cert_file)},
    {KEY("upstream", "key_file"), CJ_T_PATH, "", 0, 0, NULL, RESTART, 0,
     "client private key (client.key); needed by mtls", FIELD(upstream.key_file)},
    {KEY("upstream", "tls_server_name"), CJ_T_STR, "", 0, 0, NULL, RESTART, 0,
     "grpcs: the name the server certificate must carry, if not the url's host", FIELD(upstream.tls_server_name)},
    {KEY("upstream", "project_name"), CJ_T_STR, "", 0, 0, NULL, RESTART, CJ_CFG_JOB_REQUIRED,
     "the FLARE project name (the startup kit's); a site daemon may leave it to each job's description",
     FIELD(upstream.project_name)},
    {KEY("upstream", "credentials_file"), CJ_T_PATH, "", 0, 0, NULL, RESTART, 0,
     "optional file with token, token_signature, ssid; when empty the env vars "
     "NVFLARE_JOB_AUTH_TOKEN, NVFLARE_JOB_TOKEN_SIGNATURE, NVFLARE_JOB_SSID are used",
     FIELD(upstream.credentials_file)},
    {KEY("upstream", "get_task_interval"), CJ_T_DURATION, "0.5", 0.01, 60, NULL, RELOAD, 0,
     "pause after a \"try again\" answer to a task request", FIELD(upstream.get_task_interval)},
    {KEY("upstream", "connect_timeout"), CJ_T_DURATION, "10", 0.5, 600, NULL, RELOAD, 0,
     "how long one connection attempt to the server may take, TLS handshake included, before it is retried",
     FIELD(upstream.connect_timeout)},
    {KEY("upstream", "hello_timeout"), CJ_T_DURATION, "10", 0.5, 600, NULL, RELOAD, 0,
     "how long the server may take to answer the relay's HELLO with READY once connected",
     FIELD(upstream.hello_timeout)},
    {KEY("upstream", "get_task_timeout"), CJ_T_DURATION, "60", 1, 3600, NULL, RELOAD, 0,
     "how long one task request may wait for the server's answer", FIELD(upstream.get_task_timeout)},
    {KEY("upstream", "download_idle_timeout"), CJ_T_DURATION, "600", 1, 86400, NULL, RELOAD, 0,
     "spool mode: a download request from the server that receives nothing (no stream chunk) this long is "
     "retried; per chunk, never per transfer", FIELD(upstream.download_idle_timeout)},
    {KEY("upstream", "submit_timeout"), CJ_T_DURATION, "60", 1, 86400, NULL, RELOAD, 0,
     "a result submission with no answer and no result bytes moving this long is retried; per chunk, never "
     "per transfer", FIELD(upstream.submit_timeout)},
    {KEY("upstream", "task_check_timeout"), CJ_T_DURATION, "5", 0.5, 600, NULL, RELOAD, 0,
     "how long one __task_check__ before a result submission may wait for the server's answer",
     FIELD(upstream.task_check_timeout)},
    {KEY("upstream", "min_rate"), CJ_T_SIZE, "128K", 0, 16 * GiB, NULL, RELOAD, 0,
     "bytes per second the slowest link to the server still carries; the idle timeouts must cover one "
     "limits.stream_chunk at this rate; 0 = no such check", FIELD(upstream.min_rate)},
    {KEY("upstream", "job_heartbeat_interval"), CJ_T_DURATION, "10", 0.5, 3600, NULL, RELOAD, 0,
     "how often the relay tells the server that the job is alive",
     FIELD(upstream.job_heartbeat_interval)},
    {KEY("upstream", "job_heartbeat_timeout"), CJ_T_DURATION, "60", 0, 86400, NULL, RELOAD, 0,
     "the job ends (its workers stopped) when every answer from the server for this long said its job is "
     "not there; silence never counts; 0 = never; at least job_heartbeat_interval",
     FIELD(upstream.job_heartbeat_timeout)},
    {KEY("upstream", "ping_interval"), CJ_T_DURATION, "60", 0.5, 3600, NULL, RESTART, 0,
     "PING the server after this long without a byte from it; nothing at all (no PONG) for 3 x this "
     "declares the link dead and reconnects", FIELD(upstream.ping_interval)},
    {KEY("upstream", "reconnect_min"), CJ_T_DURATION, "0.5", 0.01, 3600, NULL, RELOAD, 0,
     "first back-off pause after a lost connection; at most reconnect_max",
     FIELD(upstream.reconnect_min)},
    {KEY("upstream", "reconnect_max"), CJ_T_DURATION, "30", 0.1, 86400, NULL, RELOAD, 0,
     "longest back-off pause after a lost connection (the pause doubles up to here)",
     FIELD(upstream.reconnect_max)},
    {KEY("upstream", "first_connect_timeout"), CJ_T_DURATION, "300", 0, 86400, NULL, RELOAD, 0,
     "a job from job start whose server link has not come up this long after its start ends with 104; 0 = wait",
     FIELD(upstream.first_connect_timeout)},

    {KEY("workers", "listen"), CJ_T_LISTEN, "unix:/run/cjrelay/workers.sock", 0, 0, NULL, RESTART, 0,
     "comma-separated unix:PATH, uds://PATH and/or tcp://127.0.0.1:PORT (loopback only); the first is the "
     "connect_url given to launched workers", FIELD(workers.listen)},
    {KEY("workers", "socket_mode"), CJ_T_MODE, "0660", 0, 0777, NULL, RESTART, 0,
     "file mode of the unix: worker sockets", FIELD(workers.socket_mode)},
    {KEY("workers", "command"), CJ_T_STR, "", 0, 0, NULL, RESTART, 0,
     "when set, the relay launches workers with this command line", FIELD(workers.command)},
    {KEY("workers", "count"), CJ_T_INT, "1", 1, 64, NULL, RESTART, 0,
     "how many workers the relay launches when command is set", FIELD(workers.count)},
    {KEY("workers", "launch_token_file"), CJ_T_PATH, "", 0, 0, NULL, RESTART, 0,
     "for workers started by someone else: the file holding their launch token",
     FIELD(workers.launch_token_file)},
    {KEY("workers", "heartbeat_interval"), CJ_T_DURATION, "5", 0.1, 3600, NULL, RELOAD, 0,
     "how often relay and workers exchange heartbeats", FIELD(workers.heartbeat_interval)},
    {KEY("workers", "heartbeat_timeout"), CJ_T_DURATION, "30", 0.5, 86400, NULL, RELOAD, 0,
     "a worker silent this long is declared lost; must be larger than heartbeat_interval",
     FIELD(workers.heartbeat_timeout)},
    {KEY("workers", "shutdown_grace"), CJ_T_DURATION, "10", 0, 3600, NULL, RELOAD, 0,
     "SHUTDOWN, then SIGTERM, then SIGKILL, this far apart", FIELD(workers.shutdown_grace)},
    {KEY("workers", "launch_timeout"), CJ_T_DURATION, "300", 0, 86400, NULL, RELOAD, 0,
     "a launched worker that has not completed its HELLO this long after its launch (relaunches included) "
     "ends the job with 101 and the worker's last error; 0 = relaunch without end",
     FIELD(workers.launch_timeout)},

    {KEY("status", "socket"), CJ_T_PATH, "/run/cjrelay/status.sock", 0, 0, NULL, RESTART,
     REQ | CJ_CFG_SOCKET, "the status socket that cjrelayctl talks to", FIELD(status.socket)},
    {KEY("status", "socket_mode"), CJ_T_MODE, "0660", 0, 0777, NULL, RESTART, 0,
     "file mode of the status socket: who may connect", FIELD(status.socket_mode)},
    {KEY("status", "socket_group"), CJ_T_STR, "", 0, 0, NULL, RESTART, 0,
     "group of the status socket (a name or a gid): with socket_mode 0660 its members may read, not change",
     FIELD(status.socket_group)},
    {KEY("status", "admin_group"), CJ_T_STR, "", 0, 0, NULL, RESTART, 0,
     "a group (a name or a gid) whose members may change things too, as root and the daemon's user may: "
     "FLARE's client parent's account, to start jobs",
     FIELD(status.admin_group)},

    {KEY("limits", "stream_chunk"), CJ_T_SIZE, "1M", 4 * KiB, 64 * MiB, NULL, RESTART, 0,
     "bytes per chunk of a streamed message; at most stream_window", FIELD(limits.stream_chunk)},
    {KEY("limits", "stream_window"), CJ_T_SIZE, "64M", 64 * KiB, 16 * GiB, NULL, RESTART, 0,
     "bytes of one stream that may be in flight unacknowledged", FIELD(limits.stream_window)},
    {KEY("limits", "link_buffer"), CJ_T_SIZE, "64M", 64 * KiB, 16 * GiB, NULL, RELOAD, 0,
     "most bytes queued toward one peer before reading from its sender pauses",
     FIELD(limits.link_buffer)},
    {KEY("limits", "max_message_size"), CJ_T_SIZE, "2G", 1 * MiB, 64 * GiB, NULL, RELOAD, 0,
     "largest message accepted from any peer", FIELD(limits.max_message_size)},
    {KEY("limits", "pacing"), CJ_T_BOOL, "true", 0, 0, NULL, RESTART, 0,
     "hold the upstream while the one busy worker drains, so the relay never holds a sender's window",
     FIELD(limits.pacing)},

    {KEY("log", "level"), CJ_T_ENUM, "info", 0, 0, cj_log_level_names, RELOAD, 0,
     "error | warning | info | debug", FIELD(log.level)},
    {KEY("log", "syslog"), CJ_T_BOOL, "false", 0, 0, NULL, RELOAD, 0,
     "also send every log line to syslog (facility daemon)", FIELD(log.syslog)},

    {KEY("metrics", "listen"), CJ_T_ADDR, "", 0, 0, NULL, RESTART, 0,
     "HOST:PORT where GET /metrics serves the counters to Prometheus (as show prometheus); empty: no endpoint",
     FIELD(metrics.listen)},
};

#define NKEYS (sizeof keys / sizeof *keys)
_Static_assert(NKEYS == CJ_CFG_NKEYS, "CJ_CFG_NKEYS must match the key table");
_Static_assert(sizeof sections / sizeof *sections - 1 <=
               sizeof ((struct cj_config_origin *)0)->section_line / sizeof(int),
               "origin.section_line too small");

const struct cj_cfg_key *cj_config_keys(size_t *n)
{
    if (n) *n = NKEYS;
    return keys;
}

const struct cj_cfg_key *cj_config_find(const char *section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].section, section) && !strcmp(keys[i].name, name)) return &keys[i];
    return NULL;
}

static const struct cj_cfg_key *find_full(const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].key, key)) return &keys[i];
    return NULL;
}

static size_t key_index(const struct cj_cfg_key *k) { return (size_t)(k - keys); }

static int section_index(const char *name)
{
    for (int i = 0; sections[i]; i++)
        if (!strcmp(sections[i], name)) return i;
    return -1;
}

/* ---- types: parse and render ------------------------------------------------------------ */

typedef int (*parse_fn)(const struct cj_cfg_key *k, const char *s, void *field,
                        const char *base, char *why, size_t whysz);
typedef void (*render_fn)(const struct cj_cfg_key *k, const void *field, char *buf, size_t len);

struct type_ops {
    const char *name;
    parse_fn parse;
    render_fn render;
    double (*number)(const void *field);              /* numeric types only */
    void (*fmt)(double v, char *buf, size_t len);     /* a number as the file spells it */
};

static bool fqcn_part_ok(const char *s)
{
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_~-", *s)) return false;
    return true;
}

static int parse_str(const struct cj_cfg_key *k, const char *s, void *field,
                     const char *base, char *why, size_t whysz)
{
    if (strlen(s) >= k->size) return cj_why(why, whysz, "too long (at most %zu bytes)", k->size - 1);
    if ((k->flags & CJ_CFG_FQCN_PART) && !fqcn_part_ok(s))
        return cj_why(why, whysz, "not a valid FQCN part: use only letters, digits, '_', '~' and '-'");
    memcpy(field, s, strlen(s) + 1);
    return 0;
}

static void render_str(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", (const char *)field);
}

static int parse_enum(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    char list[128] = "";
    for (int i = 0; k->allowed[i]; i++) {
        if (!strcasecmp(s, k->allowed[i])) { *(int *)field = i; return 0; }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " | " : "", k->allowed[i]);
    }
    return cj_why(why, whysz, "expected %s", list);
}

static void render_enum(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", k->allowed[*(const int *)field]);
}

static int parse_bool(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    const char *w;
    if (cj_parse_bool(s, field, &w) < 0) return cj_why(why, whysz, "%s", w);
    return 0;
}

static void render_bool(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
}

static int parse_int(const struct cj_cfg_key *k, const char *s, void *field,
                     const char *base, char *why, size_t whysz)
{
    long long v;
    const char *w;
    if (cj_parse_int(s, &v, &w) < 0) return cj_why(why, whysz, "%s", w);
    if (v < INT_MIN || v > INT_MAX) return cj_why(why, whysz, "too large");
    *(int *)field = (int)v;
    return 0;
}

static double num_int(const void *field) { return *(const int *)field; }
static void fmt_int(double v, char *buf, size_t len) { snprintf(buf, len, "%.0f", v); }

static int parse_duration(const struct cj_cfg_key *k, const char *s, void *field,
                          const char *base, char *why, size_t whysz)
{
    const char *w;
    if (cj_parse_duration(s, field, &w) < 0) return cj_why(why, whysz, "%s", w);
    return 0;
}

static double num_double(const void *field) { return *(const double *)field; }
static void fmt_duration(double v, char *buf, size_t len) { snprintf(buf, len, "%.15g", v); }

static int parse_size(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    const char *w;
    if (cj_parse_size(s, field, &w) < 0) return cj_why(why, whysz, "%s", w);
    return 0;
}

static double num_size(const void *field) { return (double)*(const int64_t *)field; }

/* The largest exact suffix: 1048576 -> "1M", 1536 -> "1536". */
static void fmt_size64(int64_t v, char *buf, size_t len)
{
    static const char suffix[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int64_t unit = (int64_t)1 << (10 * (3 - i));
        if (v != 0 && v % unit == 0) { snprintf(buf, len, "%lld%c", (long long)(v / unit), suffix[i]); return; }
    }
    snprintf(buf, len, "%lld", (long long)v);
}

static void fmt_size(double v, char *buf, size_t len) { fmt_size64((int64_t)v, buf, len); }

static int parse_mode(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    const char *w;
    if (cj_parse_mode(s, field, &w) < 0) return cj_why(why, whysz, "%s", w);
    return 0;
}

static double num_mode(const void *field) { return *(const unsigned *)field; }
static void fmt_mode(double v, char *buf, size_t len) { snprintf(buf, len, "%04o", (unsigned)v); }

/* dst = src, or base/src when src is relative and a base is known; -1 if too long. */
static int resolve_path(char *dst, size_t cap, const char *src, const char *base)
{
    int n = (src[0] && src[0] != '/' && base && base[0])
                ? snprintf(dst, cap, "%s/%s", base, src)
                : snprintf(dst, cap, "%s", src);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

static int parse_path(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    char tmp[CJ_CFG_PATH_MAX];
    if (resolve_path(tmp, sizeof tmp, s, base) < 0 || strlen(tmp) >= k->size)
        return cj_why(why, whysz, "path too long (at most %zu bytes)", k->size - 1);
    if ((k->flags & CJ_CFG_SOCKET) && strlen(tmp) > CJ_SUN_PATH_MAX)
        return cj_why(why, whysz, "socket path longer than %d bytes (%zu once resolved)", CJ_SUN_PATH_MAX,
                    strlen(tmp));
    memcpy(field, tmp, strlen(tmp) + 1);
    return 0;
}

static int parse_url(const struct cj_cfg_key *k, const char *s, void *field,
                     const char *base, char *why, size_t whysz)
{
    const char *w;
    if (cj_parse_endpoint(s, CJ_EP_NET, field, &w) < 0) return cj_why(why, whysz, "%s", w);
    return 0;
}

static void render_url(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    cj_endpoint_format(field, buf, len);
}

/* One listen entry: an endpoint, unix paths resolved, tcp only on loopback. */
static int parse_listen_entry(const char *item, struct cj_endpoint *e, const char *base,
                              char *why, size_t whysz)
{
    const char *w;
    char tmp[CJ_CFG_PATH_MAX];
    if (cj_parse_endpoint(item, CJ_EP_UNIX | CJ_EP_TCP | CJ_EP_PORT0, e, &w) < 0)
        return cj_why(why, whysz, "'%s': %s", item, w);
    if (e->kind == CJ_EP_TCP && !cj_endpoint_is_loopback(e))
        return cj_why(why, whysz, "'%s' is not a loopback address: workers may only connect over "
                    "127.0.0.0/8, [::1] or localhost", item);
    if (e->kind != CJ_EP_UNIX) return 0;
    if (resolve_path(tmp, sizeof tmp, e->addr, base) < 0 || strlen(tmp) > CJ_SUN_PATH_MAX)
        return cj_why(why, whysz, "'%s': socket path longer than %d bytes once resolved", item, CJ_SUN_PATH_MAX);
    strcpy(e->addr, tmp);
    return 0;
}

static bool same_endpoint(const struct cj_endpoint *a, const struct cj_endpoint *b)
{
    return a->kind == b->kind && a->port == b->port && !strcmp(a->addr, b->addr);
}

static int parse_listen(const struct cj_cfg_key *k, const char *s, void *field,
                        const char *base, char *why, size_t whysz)
{
    struct cj_listen_list l = {0};
    char item[CJ_CFG_PATH_MAX];
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && isspace((unsigned char)*p)) p++, n--;
        while (n && isspace((unsigned char)p[n - 1])) n--;
        if (n == 0) return cj_why(why, whysz, "empty entry in the list");
        if (n >= sizeof item) return cj_why(why, whysz, "entry too long");
        if (l.n == CJ_LISTEN_MAX) return cj_why(why, whysz, "at most %d entries", CJ_LISTEN_MAX);
        memcpy(item, p, n);
        item[n] = '\0';
        if (parse_listen_entry(item, &l.ep[l.n], base, why, whysz) < 0) return -1;
        for (int i = 0; i < l.n; i++)
            if (same_endpoint(&l.ep[i], &l.ep[l.n])) return cj_why(why, whysz, "'%s' is listed twice", item);
        l.n++;
        if (!comma) break;
        p = comma + 1;
    }
    memcpy(field, &l, sizeof l);
    return 0;
}

static void render_listen(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    const struct cj_listen_list *l = field;
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n && o < len; i++) {
        if (i) o += (size_t)snprintf(buf + o, len - o, ", ");
        if (o < len) o += (size_t)cj_endpoint_format(&l->ep[i], buf + o, len - o);
    }
}

/* HOST:PORT of a listener: an IP address (IPv6 in brackets) or localhost, never
 * a name to resolve; port 0 = any free port.  Empty = not set (kind 0). */
static int parse_addr(const struct cj_cfg_key *k, const char *s, void *field,
                      const char *base, char *why, size_t whysz)
{
    struct cj_addr a = {0};
    char url[CJ_EP_ADDR_MAX + 16];
    const char *w;
    if (!*s) { memset(field, 0, sizeof a.ep); return 0; }
    if (strstr(s, "://")) return cj_why(why, whysz, "expected HOST:PORT without a scheme, e.g. 127.0.0.1:9470");
    if ((size_t)snprintf(url, sizeof url, "tcp://%s", s) >= sizeof url) return cj_why(why, whysz, "too long");
    if (cj_parse_endpoint(url, CJ_EP_TCP | CJ_EP_PORT0, &a.ep, &w) < 0)
        return cj_why(why, whysz, "%s", w);
    if (!cj_addr_is_numeric(&a))
        return cj_why(why, whysz, "HOST must be an IP address or localhost (a listener resolves no names)");
    memcpy(field, &a.ep, sizeof a.ep);
    return 0;
}

/* "127.0.0.1:9470", "[::1]:9470", or "" when not set. */
static void render_addr(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    const struct cj_endpoint *e = field;
    if (!e->kind) snprintf(buf, len, "%s", "");
    else snprintf(buf, len, strchr(e->addr, ':') ? "[%s]:%u" : "%s:%u", e->addr, e->port);
}

static void render_number(const struct cj_cfg_key *k, const void *field, char *buf, size_t len);

static const struct type_ops types[] = {
    [CJ_T_STR] = {"string", parse_str, render_str, NULL, NULL},
    [CJ_T_ENUM] = {"enum", parse_enum, render_enum, NULL, NULL},
    [CJ_T_BOOL] = {"bool", parse_bool, render_bool, NULL, NULL},
    [CJ_T_INT] = {"int", parse_int, render_number, num_int, fmt_int},
    [CJ_T_DURATION] = {"duration", parse_duration, render_number, num_double, fmt_duration},
    [CJ_T_SIZE] = {"size", parse_size, render_number, num_size, fmt_size},
    [CJ_T_MODE] = {"mode", parse_mode, render_number, num_mode, fmt_mode},
    [CJ_T_PATH] = {"path", parse_path, render_str, NULL, NULL},
    [CJ_T_URL] = {"url", parse_url, render_url, NULL, NULL},
    [CJ_T_LISTEN] = {"listen-list", parse_listen, render_listen, NULL, NULL},
    [CJ_T_ADDR] = {"address", parse_addr, render_addr, NULL, NULL},
};

static void render_number(const struct cj_cfg_key *k, const void *field, char *buf, size_t len)
{
    if (k->type == CJ_T_SIZE) fmt_size64(*(const int64_t *)field, buf, len);   /* exact */
    else types[k->type].fmt(types[k->type].number(field), buf, len);
}

const char *cj_config_type_name(enum cj_cfg_type t)
{
    return (unsigned)t < sizeof types / sizeof *types ? types[t].name : "?";
}

static void *field_of(struct cj_config *cfg, const struct cj_cfg_key *k) { return (char *)cfg + k->off; }

static const void *cfield_of(const struct cj_config *cfg, const struct cj_cfg_key *k)
{
    return (const char *)cfg + k->off;
}

static void render(const struct cj_config *cfg, const struct cj_cfg_key *k, char *buf, size_t len)
{
    types[k->type].render(k, cfield_of(cfg, k), buf, len);
}

/* Range of a numeric key; true when inside (or the key has none). */
static bool in_range(const struct cj_cfg_key *k, const void *field, char *why, size_t whysz)
{
    const struct type_ops *t = &types[k->type];
    if (!t->number || (k->min == 0 && k->max == 0)) return true;
    double v = t->number(field);
    if (v >= k->min && v <= k->max) return true;
    char lo[32], hi[32];
    t->fmt(k->min, lo, sizeof lo);
    t->fmt(k->max, hi, sizeof hi);
    cj_why(why, whysz, "out of range (allowed %s .. %s)", lo, hi);
    return false;
}

/* Room for any one field (the largest are a listen list, a path and the worker command). */
union scratch {
    char bytes[sizeof(struct cj_listen_list) + CJ_CFG_PATH_MAX + CJ_CFG_COMMAND_MAX];
    double d;
    int64_t i;
};

/* Parses text as a value of key k into field (k->size bytes, or NULL to check
 * only); on failure the field is unchanged. */
static int parse_into(const struct cj_cfg_key *k, const char *text, void *field,
                      const char *base, char *why, size_t whysz)
{
    union scratch tmp;
    if (!cj_text_ok(text)) return cj_why(why, whysz, "contains control characters or invalid UTF-8");
    if (field) memcpy(tmp.bytes, field, k->size);
    else memset(tmp.bytes, 0, k->size);
    if (types[k->type].parse(k, text, tmp.bytes, base, why, whysz) < 0) return -1;
    if (!in_range(k, tmp.bytes, why, whysz)) return -1;
    if (field) memcpy(field, tmp.bytes, k->size);
    return 0;
}

/* Parses text into the key's field of cfg; on failure the field is unchanged. */
static int set_field(struct cj_config *cfg, const struct cj_cfg_key *k, const char *text,
                     const char *base, char *why, size_t whysz)
{
    return parse_into(k, text, field_of(cfg, k), base, why, whysz);
}

int cj_config_parse_value(const char *key, const char *text, void *field, size_t size,
                          char *why, size_t whysz)
{
    const struct cj_cfg_key *k = find_full(key);
    if (!k) return cj_why(why, whysz, "no config key %s", key);
    if (field && size != k->size) return cj_why(why, whysz, "%s: a field of %zu bytes, not %zu", key, k->size, size);
    return parse_into(k, text, field, NULL, why, whysz);
}

static void render_default(const struct cj_cfg_key *k, char *buf, size_t len)
{
    union scratch tmp;
    char why[256];
    memset(&tmp, 0, sizeof tmp);
    if (types[k->type].parse(k, k->def, tmp.bytes, NULL, why, sizeof why) < 0) snprintf(buf, len, "?");
    else types[k->type].render(k, tmp.bytes, buf, len);
}

void cj_config_defaults(struct cj_config *cfg)
{
    char why[256];
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NKEYS; i++)
        if (set_field(cfg, &keys[i], keys[i].def, NULL, why, sizeof why) < 0)
            cj_log(CJ_LOG_ERROR, "config: bad built-in default for %s: %s", keys[i].key, why);
}

/* ---- problems -------------------------------------------------------------------------------- */

void cj_problems_init(struct cj_problems *p)
{
    p->n = 0;
    p->dropped = 0;
}

void cj_problems_add(struct cj_problems *p, const char *fmt, ...)
{
    if (p->n >= CJ_PROBLEMS_MAX) { p->dropped++; return; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg[p->n++], CJ_PROBLEM_LEN, fmt, ap);
    va_end(ap);
}

int cj_problems_total(const struct cj_problems *p) { return p->n + p->dropped; }

/* ---- loading ------------------------------------------------------------------------------------ */

enum { SEC_NONE = -1, SEC_UNKNOWN = -2 };

struct load {
    struct cj_config *cfg;            /* the working copy */
    struct cj_problems *pb;
    const char *file;
    char base[PATH_MAX];              /* absolute directory of the file */
    const char *buf;                  /* the whole file */
    size_t len, pos;
    int line;                         /* physical line last handed to inih */
    int section;                      /* index into sections[], or SEC_* */
    char *long_value;                 /* the value of a line too long for inih's buffer, or NULL */
};

/* What a long line's value becomes for inih: the handler takes ld->long_value instead. */
#define LONG_VALUE_MARK "\x01"


static void problem(struct load *ld, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(struct load *ld, int line, const char *fmt, ...)
{
    char msg[CJ_PROBLEM_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cj_problems_add(ld->pb, "%s:%d: %s", ld->file, line, msg);
}

/* Edit distance under which a name counts as a typo of another. */
static size_t typo_limit(const char *name) { return strlen(name) / 3 + 1; }

static const char *nearest_section(const char *name)
{
    const char *best = NULL;
    size_t bd = typo_limit(name) + 1;
    for (int i = 0; sections[i]; i++) {
        size_t d = cj_levenshtein(name, sections[i]);
        if (d < bd) { bd = d; best = sections[i]; }
    }
    return best;
}

/* Nearest key name; in `section` only, or (NULL) in every section. */
static const struct cj_cfg_key *nearest_key(const char *name, const char *section)
{
    const struct cj_cfg_key *best = NULL;
    size_t bd = typo_limit(name) + 1;
    for (size_t i = 0; i < NKEYS; i++) {
        if (section && strcmp(keys[i].section, section)) continue;
        size_t d = cj_levenshtein(name, keys[i].name);
        if (d < bd) { bd = d; best = &keys[i]; }
    }
    return best;
}

static void unknown_key(struct load *ld, const char *name)
{
    const char *sec = sections[ld->section];
    const struct cj_cfg_key *k = nearest_key(name, sec);
    if (k) {
        problem(ld, ld->line, "unknown key '%s' in [%s] (did you mean '%s'?)", name, sec, k->name);
    } else if ((k = nearest_key(name, NULL)) && !strcmp(k->name, name)) {
        problem(ld, ld->line, "unknown key '%s' in [%s] (it belongs in [%s])", name, sec, k->section);
    } else if (k) {
        problem(ld, ld->line, "unknown key '%s' in [%s] (did you mean '%s' in [%s]?)", name, sec,
                k->name, k->section);
    } else {
        problem(ld, ld->line, "unknown key '%s' in [%s]", name, sec);
    }
}

/* inih's handler: one "name = value" on line ld->line. */
static int set_value(struct load *ld, const char *name, const char *value)
{
    char why[256];
    if (ld->section == SEC_UNKNOWN) return 1;          /* reported at its header */
    if (ld->section == SEC_NONE) {
        problem(ld, ld->line, "key '%s' before any [section] header", cj_text_ok(name) ? name : "?");
        return 1;
    }
    if (!cj_text_ok(name)) {
        problem(ld, ld->line, "key name contains control characters or invalid UTF-8");
        return 1;
    }
    const struct cj_cfg_key *k = cj_config_find(sections[ld->section], name);
    if (!k) { unknown_key(ld, name); return 1; }
    size_t i = key_index(k);
    struct cj_config_origin *o = &ld->cfg->origin;
    if (o->key_line[i]) {
        problem(ld, ld->line, "duplicate key '%s' in [%s] (first set at line %d)", name, k->section,
                o->key_line[i]);
        return 1;
    }
    o->key_line[i] = ld->line;
    if (set_field(ld->cfg, k, value, ld->base, why, sizeof why) < 0) {
        bool cut = strlen(value) > 64;   /* a long value is named by its start: the why must show */
        problem(ld, ld->line, "%s = '%.*s%s': %s", name, cut ? 60 : 64, cj_text_ok(value) ? value : "?",
                cut ? "..." : "", why);
        o->bad[i] = true;
    }
    return 1;
}

/* inih's handler.  A line too long for inih's buffer came as LONG_VALUE_MARK, its value in
 * ld->long_value: taken here, for this line only. */
static int on_value(void *user, const char *section, const char *name, const char *value)
{
    struct load *ld = user;
    char *long_value = ld->long_value;
    ld->long_value = NULL;
    (void)section;                    /* followed by the reader (inih cuts names at 50) */
    int rc = set_value(ld, name, long_value && !strcmp(value, LONG_VALUE_MARK) ? long_value : value);
    free(long_value);
    return rc;
}

/* Where an inline comment starts (inih's rule: ';' after a blank), or n. */
static size_t comment_at(const char *p, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (p[i] == ';' && isspace((unsigned char)p[i - 1])) return i;
    return n;
}

static void section_header(struct load *ld, const char *p, size_t n)
{
    const char *close = memchr(p, ']', n);
    if (!close) { problem(ld, ld->line, "missing ']' in section header"); ld->section = SEC_UNKNOWN; return; }
    for (const char *q = close + 1; q < p + n && *q != ';' && *q != '#'; q++)
        if (!isspace((unsigned char)*q)) {
            problem(ld, ld->line, "unexpected text after ']'");
            break;
        }
    char name[64];
    const char *s = p + 1;
    size_t len = (size_t)(close - s);
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    snprintf(name, sizeof name, "%.*s", (int)len, s);
    ld->section = section_index(name);
    if (ld->section >= 0) {
        ld->cfg->origin.section_line[ld->section] = ld->line;
        return;
    }
    const char *near = nearest_section(name);
    if (!cj_text_ok(name)) problem(ld, ld->line, "section name contains control characters or invalid UTF-8");
    else if (near) problem(ld, ld->line, "unknown section [%s] (did you mean [%s]?)", name, near);
    else problem(ld, ld->line, "unknown section [%s]", name);
    ld->section = SEC_UNKNOWN;
}

/* Decides what inih sees of one physical line p[0..n): a well-formed key line
 * (left blanks removed, so inih never takes it for a continuation line), or
 * nothing.  Headers and malformed lines are dealt with here. */
static void screen_line(struct load *ld, const char *p, size_t n, char *out, int cap)
{
    if (memchr(p, '\0', n)) { problem(ld, ld->line, "NUL byte in line"); return; }
    if (ld->line == 1 && n >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, n -= 3;
    while (n && isspace((unsigned char)*p)) p++, n--;
    while (n && isspace((unsigned char)p[n - 1])) n--;
    if (n == 0 || *p == ';' || *p == '#') return;
    if (*p == '[') { section_header(ld, p, n); return; }
    size_t c = comment_at(p, n);
    if (!memchr(p, '=', c) && !memchr(p, ':', c)) {
        problem(ld, ld->line, "expected 'key = value' or '[section]'");
        return;
    }
    if (n + 2 > (size_t)cap) n = c;                   /* a long comment need not fit */
    if (n + 2 > (size_t)cap) {   /* longer than inih's buffer: the value waits here */
        if (n > CJ_CONFIG_LINE_MAX) {
            problem(ld, ld->line, "line too long (at most %d characters before a comment)", CJ_CONFIG_LINE_MAX);
            return;
        }
        const char *eq = p;
        while (*eq != '=' && *eq != ':') eq++;        /* there is one (above) */
        size_t at = (size_t)(eq - p) + 1;
        while (at < n && isspace((unsigned char)p[at])) at++;
        while (n > at && isspace((unsigned char)p[n - 1])) n--;   /* before a comment */
        free(ld->long_value);
        if (!(ld->long_value = strndup(p + at, n - at))) {
            problem(ld, ld->line, "out of memory");
            return;
        }
        n = (size_t)(eq - p) + 1;
        if (n + sizeof LONG_VALUE_MARK + 1 > (size_t)cap) {
            problem(ld, ld->line, "key name too long");
            return;
        }
        memcpy(out, p, n);
        memcpy(out + n, LONG_VALUE_MARK "\n", sizeof LONG_VALUE_MARK + 1);
        return;
    }
    memcpy(out, p, n);
    out[n] = '\n';
    out[n + 1] = '\0';
}

/* inih's reader: the next physical line, screened. */
static char *next_line(char *str, int num, void *stream)
{
    struct load *ld = stream;
    if (ld->pos >= ld->len || num < 3) return NULL;
    const char *p = ld->buf + ld->pos;
    const char *nl = memchr(p, '\n', ld->len - ld->pos);
    size_t n = nl ? (size_t)(nl - p) : ld->len - ld->pos;
    ld->pos += n + (nl != NULL);
    ld->line++;
    str[0] = '\n';
    str[1] = '\0';
    screen_line(ld, p, n, str, num);
    return str;
}

/* Reads the whole file (bounded); NULL with a problem on failure. */
static char *read_file(struct load *ld, size_t *len)
{
    FILE *f = fopen(ld->file, "rb");
    if (!f) { cj_problems_add(ld->pb, "%s: cannot open: %m", ld->file); return NULL; }
    char *buf = malloc(CJ_CONFIG_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, CJ_CONFIG_FILE_MAX + 1, f) : 0;
    bool err = !buf || ferror(f);
    fclose(f);
    if (err || n > CJ_CONFIG_FILE_MAX) {
        cj_problems_add(ld->pb, "%s: %s", ld->file,
                        err ? "cannot read the file" : "larger than 1 MiB: not a config file");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The absolute directory of the file, for relative paths. */
static void find_base(struct load *ld)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", ld->file);
    const char *dir = dirname(tmp);
    if (!realpath(dir, ld->base)) snprintf(ld->base, sizeof ld->base, "%s", dir);
}

static void count_lines(struct load *ld)
{
    int n = 0;
    for (size_t i = 0; i < ld->len; i++) n += ld->buf[i] == '\n';
    ld->cfg->origin.last_line = n + (ld->len > 0 && ld->buf[ld->len - 1] != '\n');
}

int cj_config_load(const char *path, struct cj_config *cfg, struct cj_problems *pb)
{
    struct load ld = {.pb = pb, .file = path, .section = SEC_NONE};
    cj_problems_init(pb);
    ld.cfg = malloc(sizeof *ld.cfg);
    if (!ld.cfg) { cj_problems_add(pb, "%s: out of memory", path); return -1; }
    cj_config_defaults(ld.cfg);
    snprintf(ld.cfg->origin.file, sizeof ld.cfg->origin.file, "%s", path);
    char *buf = read_file(&ld, &ld.len);
    if (buf) {
        ld.buf = buf;
        find_base(&ld);
        count_lines(&ld);
        int rc = ini_parse_stream(next_line, &ld, on_value, &ld);
        free(ld.long_value);
        if (rc != 0 && cj_problems_total(pb) == 0)
            cj_problems_add(pb, "%s:%d: syntax error", path, rc);
        cj_config_validate(ld.cfg, pb);
        free(buf);
    }
    int ok = cj_problems_total(pb) == 0;
    if (ok) *cfg = *ld.cfg;
    free(ld.cfg);
    return ok ? 0 : -1;
}

/* ---- cross-key rules ---------------------------------------------------------------------------- */

struct vctx {
    const struct cj_config *cfg;
    cj_config_report_fn report;
    void *arg;
    int added;
};

/* The line a problem about key belongs to: where it was set, else its section
 * header, else the end of the file. */
static int line_of(const struct cj_config *cfg, const struct cj_cfg_key *k)
{
    const struct cj_config_origin *o = &cfg->origin;
    if (o->key_line[key_index(k)]) return o->key_line[key_index(k)];
    int s = section_index(k->section);
    return o->section_line[s] ? o->section_line[s] : o->last_line;
}

static bool is_bad(const struct vctx *v, const char *key)
{
    return v->cfg->origin.bad[key_index(find_full(key))];
}

/* A problem about `key`, or when `key` is not in the file, about `other`. */
static void rule_fail(struct vctx *v, const char *key, const char *other, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rule_fail(struct vctx *v, const char *key, const char *other, const char *fmt, ...)
{
    const struct cj_cfg_key *k = find_full(key), *o = other ? find_full(other) : NULL;
    if (o && !v->cfg->origin.key_line[key_index(k)] && v->cfg->origin.key_line[key_index(o)]) k = o;
    char msg[CJ_PROBLEM_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->report(v->arg, k->key, msg);
    v->added++;
}

/* Required keys have no default.  A job's keys (CJ_CFG_JOB_REQUIRED) are
 * required once there is a job: a site daemon (no job_id) may leave them to
 * each job's description. */
static void rule_required(struct vctx *v)
{
    bool job = v->cfg->relay.job_id[0] != '\0';
    for (size_t i = 0; i < NKEYS; i++) {
        const struct cj_cfg_key *k = &keys[i];
        bool required = (k->flags & CJ_CFG_REQUIRED) || (job && (k->flags & CJ_CFG_JOB_REQUIRED));
        if (!required || v->cfg->origin.bad[i]) continue;
        if (*(const char *)cfield_of(v->cfg, k)) continue;
        if (v->cfg->origin.key_line[i]) rule_fail(v, k->key, NULL, "%s must not be empty", k->name);
        else rule_fail(v, k->key, NULL, "[%s] %s is required", k->section, k->name);
    }
}

static void rule_names(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    if (c->relay.site[0] && !strcmp(c->relay.site, c->relay.job_id))
        rule_fail(v, "relay.job_id", "relay.site", "site and job_id must differ (both '%s')", c->relay.site);
}

/* The FLARE version names a generation the relay serves (lib/fl/dialect.h). */
static void rule_flare_version(struct vctx *v)
{
    struct cj_err e = {0};
    if (is_bad(v, "relay.flare_version") || cj_fl_dialect_of(v->cfg->relay.flare_version, &e)) return;
    rule_fail(v, "relay.flare_version", NULL, "%s", e.msg);
}

static void rule_heartbeat(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    if (is_bad(v, "workers.heartbeat_timeout") || is_bad(v, "workers.heartbeat_interval")) return;
    if (c->workers.heartbeat_timeout <= c->workers.heartbeat_interval)
        rule_fail(v, "workers.heartbeat_timeout", "workers.heartbeat_interval",
                  "heartbeat_timeout (%g) must be larger than heartbeat_interval (%g)",
                  c->workers.heartbeat_timeout, c->workers.heartbeat_interval);
}

static void rule_job_heartbeat(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    if (is_bad(v, "upstream.job_heartbeat_timeout") || is_bad(v, "upstream.job_heartbeat_interval")) return;
    double t = c->upstream.job_heartbeat_timeout, i = c->upstream.job_heartbeat_interval;
    if (t > 0 && t < i)
        rule_fail(v, "upstream.job_heartbeat_timeout", "upstream.job_heartbeat_interval",
                  "job_heartbeat_timeout (%g) must be 0 or at least job_heartbeat_interval (%g): one heartbeat "
                  "answer could end the job", t, i);
}

/* An idle timeout reset by each stream chunk must outlast one chunk at the
 * slowest rate the link is meant to carry, or a slow link fails every transfer. */
static void rule_idle_vs_rate(struct vctx *v, const char *key, double timeout)
{
    const struct cj_config *c = v->cfg;
    if (is_bad(v, key) || is_bad(v, "upstream.min_rate") || is_bad(v, "limits.stream_chunk")) return;
    if (c->upstream.min_rate <= 0 || c->limits.stream_chunk > c->limits.stream_window) return;   /* rule_stream's */
    double need = (double)c->limits.stream_chunk / (double)c->upstream.min_rate;
    if (timeout >= need) return;
    char chunk[32], rate[32];
    fmt_size64(c->limits.stream_chunk, chunk, sizeof chunk);
    fmt_size64(c->upstream.min_rate, rate, sizeof rate);
    rule_fail(v, key, "upstream.min_rate",
              "%s (%g s) is shorter than one limits.stream_chunk (%s) takes at upstream.min_rate (%s/s): %.1f s; "
              "raise %s or lower upstream.min_rate", key, timeout, chunk, rate, need, key);
}

static void rule_idle_timeouts(struct vctx *v)
{
    rule_idle_vs_rate(v, "upstream.download_idle_timeout", v->cfg->upstream.download_idle_timeout);
    rule_idle_vs_rate(v, "upstream.submit_timeout", v->cfg->upstream.submit_timeout);
}

static void rule_reconnect(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    if (is_bad(v, "upstream.reconnect_min") || is_bad(v, "upstream.reconnect_max")) return;
    if (c->upstream.reconnect_min > c->upstream.reconnect_max)
        rule_fail(v, "upstream.reconnect_min", "upstream.reconnect_max",
                  "reconnect_min (%g) must not be larger than reconnect_max (%g)",
                  c->upstream.reconnect_min, c->upstream.reconnect_max);
}

static void rule_security(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    const char *sec = securities[c->upstream.connection_security];
    const char *cs = "upstream.connection_security";
    if (is_bad(v, cs) || is_bad(v, "upstream.url")) return;
    bool tls = c->upstream.connection_security != CJ_SEC_CLEAR;
    const char *scheme = cj_ep_scheme(c->upstream.url.kind);
    if (tls && !cj_ep_tls(c->upstream.url.kind))
        rule_fail(v, cs, "upstream.url", "connection_security = %s needs an stcp://, https:// or grpcs:// url, not %s://",
                  sec, scheme);
    if (!tls && cj_ep_tls(c->upstream.url.kind))
        rule_fail(v, cs, "upstream.url", "%s %s:// url needs connection_security = tls or mtls, not clear",
                  c->upstream.url.kind == CJ_EP_GRPCS ? "a" : "an", scheme);
    if (tls && !c->upstream.ca_file[0] && !is_bad(v, "upstream.ca_file"))
        rule_fail(v, cs, "upstream.ca_file", "connection_security = %s needs ca_file", sec);
    if (c->upstream.connection_security != CJ_SEC_MTLS) return;
    if (!c->upstream.cert_file[0] && !is_bad(v, "upstream.cert_file"))
        rule_fail(v, cs, "upstream.cert_file", "connection_security = mtls needs cert_file");
    if (!c->upstream.key_file[0] && !is_bad(v, "upstream.key_file"))
        rule_fail(v, cs, "upstream.key_file", "connection_security = mtls needs key_file");
}

/* mode = spool needs a spool_dir on a disk: tmpfs/ramfs would hold the tensors
 * in memory (and in swap), which is what spooling is meant to avoid, unless
 * spool_allow_tmpfs says so.  Only a statfs (of spool_dir or, before it
 * exists, its nearest existing ancestor); when even that fails it is not a
 * config problem here: creating the spool at start-up reports it with the path. */
static void rule_spool(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    if (c->relay.mode != CJ_MODE_SPOOL || is_bad(v, "relay.spool_dir")) return;
    if (!c->relay.spool_dir[0]) {
        rule_fail(v, "relay.mode", "relay.spool_dir", "mode = spool needs spool_dir");
        return;
    }
    if (is_bad(v, "relay.spool_allow_tmpfs")) return;
    char why[CJ_PROBLEM_LEN];
    if (cj_spool_fs_check(c->relay.spool_dir, c->relay.spool_allow_tmpfs, why, sizeof why) == 1)
        rule_fail(v, "relay.spool_dir", "relay.mode", "%s", why);
}

static void rule_stream(struct vctx *v)
{
    const struct cj_config *c = v->cfg;
    char a[32], b[32];
    if (is_bad(v, "limits.stream_chunk") || is_bad(v, "limits.stream_window")) return;
    if (c->limits.stream_chunk <= c->limits.stream_window) return;
    fmt_size64(c->limits.stream_chunk, a, sizeof a);
    fmt_size64(c->limits.stream_window, b, sizeof b);
    rule_fail(v, "limits.stream_chunk", "limits.stream_window",
              "stream_chunk (%s) must not be larger than stream_window (%s)", a, b);
}

int cj_config_check(const struct cj_config *cfg, cj_config_report_fn report, void *arg)
{
    static void (*const rules[])(struct vctx *) = {
        rule_required, rule_names, rule_flare_version, rule_heartbeat, rule_job_heartbeat, rule_idle_timeouts, rule_reconnect,
        rule_security, rule_spool, rule_stream,
    };
    struct vctx v = {cfg, report, arg, 0};
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) rules[i](&v);
    return v.added;
}

struct file_report {
    const struct cj_config *cfg;
    struct cj_problems *pb;
};

int cj_config_key_line(const struct cj_config *cfg, const char *key)
{
    const struct cj_cfg_key *k = find_full(key);
    return k ? line_of(cfg, k) : cfg->origin.last_line;
}

/* A cross-key problem as "FILE:LINE: message". */
static void report_line(void *arg, const char *key, const char *msg)
{
    const struct file_report *r = arg;
    const char *file = r->cfg->origin.file[0] ? r->cfg->origin.file : "(defaults)";
    cj_problems_add(r->pb, "%s:%d: %s", file, line_of(r->cfg, find_full(key)), msg);
}

int cj_config_validate(const struct cj_config *cfg, struct cj_problems *pb)
{
    struct file_report r = {cfg, pb};
    return cj_config_check(cfg, report_line, &r);
}

/* ---- reload ------------------------------------------------------------------------------------- */

static bool differs(const struct cj_config *a, const struct cj_config *b, const struct cj_cfg_key *k)
{
    char x[CJ_CFG_VALUE_TEXT_MAX], y[CJ_CFG_VALUE_TEXT_MAX];
    render(a, k, x, sizeof x);
    render(b, k, y, sizeof y);
    return strcmp(x, y) != 0;
}

int cj_config_diff(const struct cj_config *old, const struct cj_config *neu,
                   struct cj_config_change *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        if (!differs(old, neu, &keys[i])) continue;
        if (n < max) out[n] = (struct cj_config_change){keys[i].key, keys[i].reloadable};
        n++;
    }
    return n;
}

int cj_config_apply_reload(struct cj_config *running, const struct cj_config *neu)
{
    int changed = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        const struct cj_cfg_key *k = &keys[i];
        if (!k->reloadable) continue;
        changed += differs(running, neu, k);
        memcpy(field_of(running, k), cfield_of(neu, k), k->size);
        running->origin.key_line[i] = neu->origin.key_line[i];
    }
    return changed;
}

/* ---- show config -------------------------------------------------------------------------------- */

int cj_config_row(const struct cj_config *cfg, size_t i, struct cj_config_row *row)
{
    if (i >= NKEYS) return -1;
    row->key = keys[i].key;
    row->reloadable = keys[i].reloadable;
    render(cfg, &keys[i], row->value, sizeof row->value);
    render_default(&keys[i], row->def, sizeof row->def);
    return 0;
}

int cj_config_value_text(const struct cj_config *cfg, const char *key, char *buf, size_t len)
{
    const struct cj_cfg_key *k = find_full(key);
    if (!k) return -1;
    render(cfg, k, buf, len);
    return 0;
}

/* An snprintf that appends and keeps counting past the end. */
struct sbuf {
    char *p;
    size_t cap, need;
};

static void sb_printf(struct sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = sb->need < sb->cap ? sb->cap - sb->need : 0;
    int n = vsnprintf(room ? sb->p + sb->need : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) sb->need += (size_t)n;
}

static void show_text_row(struct sbuf *sb, const struct cj_config_row *r)
{
    sb_printf(sb, "%-32s %-30s %-30s %s\n", r->key, r->value[0] ? r->value : "\"\"",
              r->def[0] ? r->def : "\"\"", r->reloadable ? "yes" : "no");
}

static void show_json_row(struct sbuf *sb, const struct cj_config_row *r, bool first)
{
    char v[2 * sizeof r->value + 8], d[2 * sizeof r->def + 8];
    cj_json_escape(v, sizeof v, r->value);
    cj_json_escape(d, sizeof d, r->def);
    sb_printf(sb, "%s{\"key\":\"%s\",\"value\":\"%s\",\"default\":\"%s\",\"reloadable\":%s}",
              first ? "" : ",", r->key, v, d, r->reloadable ? "true" : "false");
}

size_t cj_config_show(const struct cj_config *cfg, enum cj_show_format fmt, char *out, size_t len)
{
    struct sbuf sb = {out, len, 0};
    struct cj_config_row *r = malloc(sizeof *r);
    if (len) out[0] = '\0';
    if (!r) return 0;
    if (fmt == CJ_SHOW_JSON) sb_printf(&sb, "{\"config\":[");
    else sb_printf(&sb, "%-32s %-30s %-30s %s\n", "key", "value", "default", "reloadable");
    for (size_t i = 0; i < NKEYS; i++) {
        cj_config_row(cfg, i, r);
        if (fmt == CJ_SHOW_JSON) show_json_row(&sb, r, i == 0);
        else show_text_row(&sb, r);
    }
    if (fmt == CJ_SHOW_JSON) sb_printf(&sb, "]}\n");
    free(r);
    return sb.need;
}
