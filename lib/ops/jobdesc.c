/* SPDX-License-Identifier: Apache-2.0 */
/* jobdesc.c — the job description: parsing with util/json.c's cursor, checks
 * shared with the INI (cj_config_parse_value, cj_config_check), the job's
 * configuration, the log line (see jobdesc.h).
 *
 * The description has a fixed shape (top level, credentials, worker,
 * worker.env, bootstrap), so the parser walks it with one function per level
 * and never recurses on the input; only bootstrap values are free JSON,
 * skipped by the cursor with their nesting capped and kept as raw text. */
#include "ops/jobdesc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl/dialect.h"
#include "util/err.h"
#include "util/json.h"
#include "util/parse.h"

_Static_assert(CJ_JOBDESC_PROJECT_MAX == sizeof(((struct cj_config *)0)->upstream.project_name),
               "project_name bound must be the INI field's");

/* ---- parser state and errors --------------------------------------------------------------- */

struct jd {
    struct cj_json j;
    struct cj_err err;
    struct cj_job_desc *d;
    char path[160];                        /* the field being read: "worker.argv[2]" */
    size_t plen;
    char *why;
    size_t whysz;
    unsigned creds;                        /* CRED_* read so far */
    char s[CJ_CREDS_VALUE_MAX + 1];        /* the string value being read (the longest: a credential) */
};

static const char *where(const struct jd *p) { return p->plen ? p->path : "description"; }

/* Appends ".name" (or "name" at the top, or "[i]" with index >= 0); returns the
 * length to pop back to. */
static size_t push(struct jd *p, const char *name, int index)
{
    size_t saved = p->plen;
    int n = index >= 0 ? snprintf(p->path + p->plen, sizeof p->path - p->plen, "[%d]", index)
                       : snprintf(p->path + p->plen, sizeof p->path - p->plen, "%s%s", p->plen ? "." : "", name);
    if (n > 0) p->plen += (size_t)n < sizeof p->path - p->plen ? (size_t)n : sizeof p->path - 1 - p->plen;
    p->j.who = where(p);
    return saved;
}

static void pop(struct jd *p, size_t saved)
{
    p->plen = saved;
    p->path[saved] = '\0';
    p->j.who = where(p);
}

static int fail(struct jd *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct jd *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cj_why(p->why, p->whysz, "%s: %s", where(p), msg);
}

/* The cursor's error, already "<field>: <what> at offset N". */
static int json_fail(struct jd *p) { return cj_why(p->why, p->whysz, "%s", p->err.msg); }

/* The value at the cursor must start with ch (what names it: "a string"). */
static int want(struct jd *p, int ch, const char *what)
{
    int c = cj_json_peek(&p->j);
    if (c == ch) return 0;
    if (c < 0) return fail(p, "the text ends at offset %zu", p->j.pos);
    return fail(p, "not %s", what);
}

/* A string value into p->s, at most cap - 1 bytes (cap <= sizeof p->s). */
static int read_str(struct jd *p, size_t cap)
{
    if (want(p, '"', "a string")) return -1;
    if (cap > sizeof p->s) cap = sizeof p->s;
    return cj_json_string(&p->j, p->s, cap) ? json_fail(p) : 0;
}

/* A string the INI could hold: no control characters, not empty. */
static int read_text(struct jd *p, size_t cap)
{
    if (read_str(p, cap)) return -1;
    if (!p->s[0]) return fail(p, "empty");
    if (!cj_text_ok(p->s)) return fail(p, "contains control characters");
    return 0;
}

typedef int (*member_fn)(struct jd *p, const char *key);

/* The object at the cursor: fn is called once per member, with the member's
 * key pushed onto the path and the cursor at its value. */
static int walk_object(struct jd *p, member_fn fn)
{
    char key[CJ_JOBDESC_NAME_MAX];
    if (want(p, '{', "an object")) return -1;
    p->j.pos++;
    if (cj_json_peek(&p->j) == '}') { p->j.pos++; return 0; }
    for (;;) {
        if (cj_json_peek(&p->j) < 0) return fail(p, "the text ends inside the object at offset %zu", p->j.pos);
        if (cj_json_string(&p->j, key, sizeof key) || cj_json_expect(&p->j, ':')) return json_fail(p);
        if (!key[0]) return fail(p, "an empty key");
        if (!cj_text_ok(key)) return fail(p, "a key with control characters");
        size_t saved = push(p, key, -1);
        int rc = fn(p, key);
        pop(p, saved);
        if (rc) return rc;
        int c = cj_json_peek(&p->j);
        if (c == ',') { p->j.pos++; continue; }
        if (c == '}') { p->j.pos++; return 0; }
        if (c < 0) return fail(p, "the text ends inside the object at offset %zu", p->j.pos);
        return fail(p, "expected ',' or '}' at offset %zu", p->j.pos);
    }
}

/* Marks bit as given; a second time is a duplicate. */
static int once(struct jd *p, unsigned bit)
{
    if (p->d->has & bit) return fail(p, "duplicate key");
    p->d->has |= bit;
    return 0;
}

/* ---- values checked by the INI's rules ---------------------------------------------------------- */

/* p->s as a value of INI key (into field when not NULL); refused as
 * "<field>: <why>", or "<field>: <prefix> (<why>)". */
static int ini_rule(struct jd *p, const char *key, void *field, size_t size, const char *prefix)
{
    char w[256];
    if (cj_config_parse_value(key, p->s, field, size, w, sizeof w) == 0) return 0;
    return *prefix ? fail(p, "%s (%s)", prefix, w) : fail(p, "%s", w);
}

/* s into dst[cap] (the readers bound s to cap - 1 bytes already). */
static void copy(char *dst, size_t cap, const char *s)
{
    size_t n = strnlen(s, cap - 1);
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static int rd_name(struct jd *p, const char *key, char *dst, size_t cap, const char *what)
{
    if (read_str(p, 256)) return -1;
    if (!p->s[0]) return fail(p, "%s (empty)", what);
    return ini_rule(p, key, dst, cap, what);
}

/* An absolute path of at most CJ_CFG_PATH_MAX - 1 bytes, checked as INI key
 * (when not NULL) would be. */
static int rd_path(struct jd *p, const char *key, char *dst)
{
    if (read_text(p, CJ_CFG_PATH_MAX)) return -1;
    if (p->s[0] != '/') return fail(p, "not an absolute path");
    if (key && ini_rule(p, key, NULL, 0, "")) return -1;
    copy(dst, CJ_CFG_PATH_MAX, p->s);
    return 0;
}

/* "ftp://..." names its scheme; everything else is the INI's [upstream] url rule. */
static int rd_server_url(struct jd *p)
{
    if (read_text(p, CJ_JOBDESC_URL_MAX)) return -1;
    const char *sep = strstr(p->s, "://");
    size_t n = sep ? (size_t)(sep - p->s) : 0;
    if (n && n < 16 && strspn(p->s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") == n) {
        static const char *const known[] = {"tcp", "stcp", "http", "https", "grpc", "grpcs"};
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok |= strlen(known[i]) == n && !memcmp(p->s, known[i], n);
        if (!ok) return fail(p, "scheme '%.*s' not one of tcp, stcp, http, https, grpc, grpcs", (int)n, p->s);
    }
    if (ini_rule(p, "upstream.url", NULL, 0, "")) return -1;
    copy(p->d->server_url, sizeof p->d->server_url, p->s);
    return 0;
}

/* The CP's internal listener: clear TCP on loopback. */
static int rd_parent_url(struct jd *p)
{
    struct cj_endpoint ep;
    const char *w;
    if (read_text(p, CJ_JOBDESC_URL_MAX)) return -1;
    if (cj_parse_endpoint(p->s, CJ_EP_TCP, &ep, &w) < 0) return fail(p, "%s", w);
    if (!cj_endpoint_is_loopback(&ep)) return fail(p, "not a loopback address (127.0.0.0/8, [::1] or localhost)");
    copy(p->d->parent_url, sizeof p->d->parent_url, p->s);
    return 0;
}

/* ---- credentials ---------------------------------------------------------------------------------- */

enum { CRED_TOKEN = 1, CRED_SIGNATURE = 2, CRED_SSID = 4 };

static const struct cred {
    const char *name;
    unsigned bit;
    size_t off;
} creds[] = {
    {"token", CRED_TOKEN, offsetof(struct cj_job_desc, credentials.token)},
    {"token_signature", CRED_SIGNATURE, offsetof(struct cj_job_desc, credentials.token_signature)},
    {"ssid", CRED_SSID, offsetof(struct cj_job_desc, credentials.ssid)},
};
#define NCREDS (sizeof creds / sizeof *creds)

/* A credential: named in errors, never quoted. */
static int on_credential(struct jd *p, const char *key)
{
    for (size_t i = 0; i < NCREDS; i++) {
        if (strcmp(key, creds[i].name)) continue;
        if (p->creds & creds[i].bit) return fail(p, "duplicate key");
        p->creds |= creds[i].bit;
        if (read_str(p, CJ_CREDS_VALUE_MAX + 1)) return -1;
        if (!cj_text_ok(p->s)) return fail(p, "contains control characters");
        if (!p->s[0] && creds[i].bit != CRED_SSID) return fail(p, "empty");
        copy((char *)p->d + creds[i].off, CJ_CREDS_VALUE_MAX + 1, p->s);
        return 0;
    }
    return fail(p, "unknown");
}

static int rd_credentials(struct jd *p)
{
    p->creds = 0;
    if (walk_object(p, on_credential)) return -1;
    for (size_t i = 0; i < NCREDS; i++) {
        if (p->creds & creds[i].bit) continue;
        size_t saved = push(p, creds[i].name, -1);
        fail(p, "missing");
        pop(p, saved);
        return -1;
    }
    return 0;
}

/* ---- worker ----------------------------------------------------------------------------------------- */

/* Appends s and its NUL to a text area of cap bytes holding *used; -1 when full. */
static int append(char *area, size_t cap, size_t *used, const char *s, size_t n)
{
    if (n + 1 > cap - *used) return -1;
    memcpy(area + *used, s, n);
    area[*used + n] = '\0';
    *used += n + 1;
    return 0;
}

/* Bytes in use in an area of count NUL-ended strings. */
static size_t area_used(const char *area, int count)
{
    size_t o = 0;
    for (int i = 0; i < count; i++) o += strlen(area + o) + 1;
    return o;
}

static const char *area_at(const char *area, int count, int i)
{
    if (i < 0 || i >= count) return NULL;
    const char *s = area;
    while (i--) s += strlen(s) + 1;
    return s;
}

/* Characters a POSIX shell word needs no quotes for. */
static const char plain_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./:=@%+,";

/* argv as a [workers] command line: words joined by blanks, a word with any
 * other character in single quotes (a quote inside as '\''), so that
 * cj_launcher_split gives argv back.  Its length, or -1 when cap is too small. */
static long quote_argv(const struct cj_job_desc *d, char *out, size_t cap)
{
    size_t o = 0;
#define PUT(c) do { if (o + 1 >= cap) return -1; out[o++] = (c); } while (0)
    for (int i = 0; i < d->worker.argc; i++) {
        const char *w = cj_jobdesc_arg(d, i);
        bool plain = *w && strspn(w, plain_chars) == strlen(w);
        if (i) PUT(' ');
        if (!plain) PUT('\'');
        for (const char *c = w; *c; c++) {
            if (*c != '\'' || plain) { PUT(*c); continue; }
            PUT('\''); PUT('\\'); PUT('\''); PUT('\'');
        }
        if (!plain) PUT('\'');
    }
#undef PUT
    out[o] = '\0';
    return (long)o;
}

static int rd_argv(struct jd *p)
{
    struct cj_job_desc *d = p->d;
    size_t used = 0;
    if (want(p, '[', "an array")) return -1;
    p->j.pos++;
    if (cj_json_peek(&p->j) == ']') { p->j.pos++; return fail(p, "empty"); }
    for (;;) {
        if (d->worker.argc == CJ_JOBDESC_ARGS_MAX) return fail(p, "more than %d words", CJ_JOBDESC_ARGS_MAX);
        size_t saved = push(p, NULL, d->worker.argc);
        int rc = read_str(p, sizeof p->s);
        if (!rc && !cj_text_ok(p->s)) rc = fail(p, "contains control characters");
        if (!rc && !p->s[0] && d->worker.argc == 0) rc = fail(p, "empty");
        pop(p, saved);
        if (rc) return rc;
        if (append(d->worker.argv, sizeof d->worker.argv, &used, p->s, strlen(p->s)))
            return fail(p, "longer than %d bytes in all", CJ_CFG_COMMAND_MAX - 1);
        d->worker.argc++;
        int c = cj_json_peek(&p->j);
        if (c == ',') { p->j.pos++; continue; }
        if (c == ']') { p->j.pos++; break; }
        if (c < 0) return fail(p, "the text ends inside the array at offset %zu", p->j.pos);
        return fail(p, "expected ',' or ']' at offset %zu", p->j.pos);
    }
    char cmd[CJ_CFG_COMMAND_MAX];
    if (quote_argv(d, cmd, sizeof cmd) < 0)
        return fail(p, "longer than %d bytes as a command line", CJ_CFG_COMMAND_MAX - 1);
    return 0;
}

static bool env_name_ok(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == strlen(s);
}

/* One "NAME": "value" of worker.env.  The value may hold anything but NUL: it
 * is handed to the worker, never logged or shown. */
static int on_env(struct jd *p, const char *key)
{
    struct cj_job_desc *d = p->d;
    size_t kl = strlen(key);
    if (!env_name_ok(key)) return fail(p, "not a valid variable name");
    if (!strcmp(key, "NVFLARE_CLIENT_API_BOOTSTRAP") || !strcmp(key, "CLIENT_API_TYPE"))
        return fail(p, "set by the relay");
    const char *e = d->worker.env;
    for (int i = 0; i < d->worker.envc; i++, e += strlen(e) + 1)
        if (!strncmp(e, key, kl) && e[kl] == '=') return fail(p, "duplicate key");
    if (d->worker.envc == CJ_JOBDESC_ENV_MAX) return fail(p, "more than %d variables", CJ_JOBDESC_ENV_MAX);
    if (read_str(p, sizeof p->s)) return -1;
    size_t used = area_used(d->worker.env, d->worker.envc), vl = strlen(p->s);
    if (kl + 1 + vl + 1 > sizeof d->worker.env - used)
        return fail(p, "worker.env longer than %d bytes in all", CJ_JOBDESC_ENV_TEXT);
    memcpy(d->worker.env + used, key, kl);
    d->worker.env[used + kl] = '=';
    memcpy(d->worker.env + used + kl + 1, p->s, vl + 1);
    d->worker.envc++;
    return 0;
}

/* A user or group: a name ([A-Za-z_][A-Za-z0-9_.-]*, '$' allowed last) or a numeric id. */
static int rd_account(struct jd *p, char *dst)
{
    static const char tail[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-";
    if (read_text(p, CJ_JOBDESC_ACCOUNT_MAX)) return -1;
    size_t n = strlen(p->s);
    bool id = strspn(p->s, "0123456789") == n;
    bool name = strchr(tail, p->s[0]) && !strchr("0123456789.-", p->s[0]) &&
                strspn(p->s, tail) + (p->s[n - 1] == '$') == n;
    if (!id && !name) return fail(p, "not a name or a numeric id");
    copy(dst, CJ_JOBDESC_ACCOUNT_MAX, p->s);
    return 0;
}

static int rd_count(struct jd *p)
{
    uint64_t v;
    char text[32];
    int c = cj_json_peek(&p->j);
    if (c != '-' && (c < '0' || c > '9')) return want(p, '0', "an integer");
    if (cj_json_uint(&p->j, &v)) return json_fail(p);
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    copy(p->s, sizeof p->s, text);
    return ini_rule(p, "workers.count", &p->d->worker.count, sizeof p->d->worker.count, "");
}

/* A number of seconds (FLARE's launch_timeout is a float: 300.0), checked as
 * [workers] launch_timeout's value. */
static int rd_launch_timeout(struct jd *p)
{
    int c = cj_json_peek(&p->j);
    if (c != '-' && (c < '0' || c > '9')) return want(p, '0', "a number");
    size_t start = p->j.pos;
    if (cj_json_skip(&p->j, 1)) return json_fail(p);
    size_t n = p->j.pos - start;
    if (n >= 32) return fail(p, "not a number of seconds");
    memcpy(p->s, p->j.p + start, n);
    p->s[n] = '\0';
    return ini_rule(p, "workers.launch_timeout", &p->d->worker.launch_timeout, sizeof p->d->worker.launch_timeout, "");
}

/* [workers] listen's rule, and unix: paths absolute. */
static int rd_listen(struct jd *p)
{
    if (read_text(p, CJ_CFG_PATH_MAX) || ini_rule(p, "workers.listen", NULL, 0, "")) return -1;
    for (const char *e = p->s; e; e = strchr(e, ',')) {
        e += *e == ',';
        e += strspn(e, " \t");
        if (!strncmp(e, "unix:", 5) && e[5] != '/') return fail(p, "unix: paths must be absolute");
    }
    copy(p->d->worker.listen, sizeof p->d->worker.listen, p->s);
    return 0;
}

static int on_worker(struct jd *p, const char *key)
{
    struct cj_job_desc *d = p->d;
    if (!strcmp(key, "argv")) return once(p, CJ_JD_ARGV) || rd_argv(p) ? -1 : 0;
    if (!strcmp(key, "cwd")) return once(p, CJ_JD_CWD) || rd_path(p, NULL, d->worker.cwd) ? -1 : 0;
    if (!strcmp(key, "env")) return once(p, CJ_JD_ENV) || walk_object(p, on_env) ? -1 : 0;
    if (!strcmp(key, "user")) return once(p, CJ_JD_USER) || rd_account(p, d->worker.user) ? -1 : 0;
    if (!strcmp(key, "group")) return once(p, CJ_JD_GROUP) || rd_account(p, d->worker.group) ? -1 : 0;
    if (!strcmp(key, "count")) return once(p, CJ_JD_COUNT) || rd_count(p) ? -1 : 0;
    if (!strcmp(key, "listen")) return once(p, CJ_JD_LISTEN) || rd_listen(p) ? -1 : 0;
    if (!strcmp(key, "launch_timeout")) return once(p, CJ_JD_LAUNCH_TIMEOUT) || rd_launch_timeout(p) ? -1 : 0;
    return fail(p, "unknown");
}

/* ---- bootstrap -------------------------------------------------------------------------------------- */

/* A key the relay writes itself for a FLARE generation: its bootstrap file
 * (cellapi) or the trainer's client_api_config.json (pipe). */
static bool boot_owned(const char *key)
{
    size_t n;
    const struct cj_fl_dialect *const *rows = cj_fl_dialects(&n);
    for (size_t r = 0; r < n; r++)
        for (int i = 0; rows[r]->owned_keys[i]; i++)
            if (!strcmp(key, rows[r]->owned_keys[i])) return true;
    return false;
}

/* The pipe dialect's exchanges carry the job's keys, never the relay's "pipe". */
static int no_pipe_member(void *ud, const char *key, size_t key_len, const struct cj_json_val *v, struct cj_err *err)
{
    (void)ud;
    (void)v;
    if (key_len == 4 && !memcmp(key, "pipe", 4)) return cj_fail(err, CJ_E_INVALID, 0, "pipe: set by the relay");
    return 0;
}

/* The bootstrap keys whose type the worker's reader checks: read with the
 * typed reader, then the cursor goes back, for the value is kept raw. */
static int boot_type(struct jd *p, const char *key)
{
    int c = cj_json_peek(&p->j), rc = 0;
    size_t at = p->j.pos;
    bool b;
    uint64_t v;
    if (!strcmp(key, "task_exchange") || !strcmp(key, "TASK_EXCHANGE") || !strcmp(key, "METRICS_EXCHANGE"))
        return want(p, '{', "an object");
    if (!strcmp(key, "cuda_empty_cache") && cj_json_bool(&p->j, &b)) {
        p->j.pos = at;
        rc = want(p, 't', "true or false");
    }
    if (!strcmp(key, "memory_gc_rounds")) {        /* an int64: a sign, then digits only */
        size_t digit = at + (c == '-');
        if (digit >= p->j.end || p->j.p[digit] < '0' || p->j.p[digit] > '9') rc = want(p, '0', "an integer");
        else if (p->j.pos = digit, cj_json_uint(&p->j, &v)) rc = json_fail(p);
    }
    p->j.pos = at;
    return rc;
}

static int on_boot(struct jd *p, const char *key)
{
    struct cj_job_desc *d = p->d;
    if (strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != strlen(key))
        return fail(p, "not a valid key (letters, digits and '_')");
    if (boot_owned(key)) return fail(p, "set by the relay");
    for (int i = 0; i < d->bootc; i++)
        if (!strcmp(cj_jobdesc_boot(d, i, NULL), key)) return fail(p, "duplicate key");
    if (d->bootc == CJ_JOBDESC_BOOT_MAX) return fail(p, "more than %d keys", CJ_JOBDESC_BOOT_MAX);
    if (boot_type(p, key)) return -1;
    if (cj_json_peek(&p->j) < 0) return want(p, '"', "a value");
    size_t start = p->j.pos;
    if (cj_json_skip(&p->j, CJ_JOBDESC_BOOT_DEPTH)) return json_fail(p);
    struct cj_err e = {0};
    if ((!strcmp(key, "TASK_EXCHANGE") || !strcmp(key, "METRICS_EXCHANGE")) &&
        cj_json_object_walk((const char *)p->j.p + start, p->j.pos - start, no_pipe_member, NULL, &e))
        return fail(p, "%s", e.msg);
    size_t used = area_used(d->boot, 2 * d->bootc), kl = strlen(key), vl = p->j.pos - start;
    if (kl + 1 + vl + 1 > sizeof d->boot - used) return fail(p, "bootstrap longer than %d bytes in all", CJ_JOBDESC_BOOT_TEXT);
    append(d->boot, sizeof d->boot, &used, key, kl);
    append(d->boot, sizeof d->boot, &used, (const char *)p->j.p + start, vl);
    d->bootc++;
    return 0;
}

/* ---- TLS files passed as open files ------------------------------------------------------------------ */

const char *const cj_jobdesc_tls_keys[CJ_JOBDESC_TLS_FDS] = {"ca_file", "cert_file", "key_file"};
static const unsigned tls_path_bits[CJ_JOBDESC_TLS_FDS] = {CJ_JD_CA_FILE, CJ_JD_CERT_FILE, CJ_JD_KEY_FILE};

/* One "ca_file": 0 of tls_fds: the index of the file's descriptor among those passed with the line. */
static int on_tls_fd(struct jd *p, const char *key)
{
    struct cj_job_desc *d = p->d;
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS; i++) {
        if (strcmp(key, cj_jobdesc_tls_keys[i])) continue;
        if (d->tls_fdmask & (1u << i)) return fail(p, "duplicate key");
        uint64_t v;
        int c = cj_json_peek(&p->j);
        if (c != '-' && (c < '0' || c > '9')) return want(p, '0', "an integer");
        if (cj_json_uint(&p->j, &v)) return json_fail(p);
        if (v >= CJ_JOBDESC_TLS_FDS) return fail(p, "not a descriptor index (0 .. %d)", CJ_JOBDESC_TLS_FDS - 1);
        d->tls_fdmask |= 1u << i;
        d->tls_fd[i] = (int)v;
        return 0;
    }
    return fail(p, "unknown (ca_file, cert_file, key_file)");
}

/* A file comes as a path or as a descriptor, not both. */
static int tls_fds_alone(struct jd *p)
{
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS; i++) {
        if (!(p->d->tls_fdmask & (1u << i)) || !(p->d->has & tls_path_bits[i])) continue;
        push(p, "tls_fds", -1);
        push(p, cj_jobdesc_tls_keys[i], -1);
        return fail(p, "%s is given as a path too", cj_jobdesc_tls_keys[i]);
    }
    return 0;
}

/* ---- the top level ---------------------------------------------------------------------------------- */

static int on_top(struct jd *p, const char *key)
{
    struct cj_job_desc *d = p->d;
    if (!strcmp(key, "job_id"))
        return once(p, CJ_JD_JOB_ID) || rd_name(p, "relay.job_id", d->job_id, sizeof d->job_id, "not a valid job id") ? -1 : 0;
    if (!strcmp(key, "site"))
        return once(p, CJ_JD_SITE) || rd_name(p, "relay.site", d->site, sizeof d->site, "not a valid site name") ? -1 : 0;
    if (!strcmp(key, "server_url")) return once(p, CJ_JD_SERVER_URL) || rd_server_url(p) ? -1 : 0;
    if (!strcmp(key, "connection_security"))
        return once(p, CJ_JD_SECURITY) || read_text(p, 32) ||
               ini_rule(p, "upstream.connection_security", &d->connection_security, sizeof d->connection_security, "") ? -1 : 0;
    if (!strcmp(key, "ca_file")) return once(p, CJ_JD_CA_FILE) || rd_path(p, "upstream.ca_file", d->ca_file) ? -1 : 0;
    if (!strcmp(key, "cert_file")) return once(p, CJ_JD_CERT_FILE) || rd_path(p, "upstream.cert_file", d->cert_file) ? -1 : 0;
    if (!strcmp(key, "key_file")) return once(p, CJ_JD_KEY_FILE) || rd_path(p, "upstream.key_file", d->key_file) ? -1 : 0;
    if (!strcmp(key, "tls_fds")) return once(p, CJ_JD_TLS_FDS) || walk_object(p, on_tls_fd) ? -1 : 0;
    if (!strcmp(key, "project_name"))
        return once(p, CJ_JD_PROJECT) || read_text(p, CJ_JOBDESC_PROJECT_MAX + 1) ||
               ini_rule(p, "upstream.project_name", d->project_name, sizeof d->project_name, "") ? -1 : 0;
    if (!strcmp(key, "parent_url")) return once(p, CJ_JD_PARENT_URL) || rd_parent_url(p) ? -1 : 0;
    if (!strcmp(key, "credentials")) return once(p, CJ_JD_CREDENTIALS) || rd_credentials(p) ? -1 : 0;
    if (!strcmp(key, "mode"))
        return once(p, CJ_JD_MODE) || read_text(p, 32) || ini_rule(p, "relay.mode", &d->mode, sizeof d->mode, "") ? -1 : 0;
    if (!strcmp(key, "flare_version"))
        return once(p, CJ_JD_FLARE_VERSION) || read_text(p, sizeof d->flare_version) ||
               ini_rule(p, "relay.flare_version", d->flare_version, sizeof d->flare_version, "") ? -1 : 0;
    if (!strcmp(key, "workspace")) return once(p, CJ_JD_WORKSPACE) || rd_path(p, NULL, d->workspace) ? -1 : 0;
    if (!strcmp(key, "worker")) return once(p, CJ_JD_WORKER) || walk_object(p, on_worker) ? -1 : 0;
    if (!strcmp(key, "bootstrap")) return once(p, CJ_JD_BOOTSTRAP) || walk_object(p, on_boot) ? -1 : 0;
    return fail(p, "unknown");
}

static int parse(struct jd *p, size_t len)
{
    if (len > CJ_JOBDESC_MAX) return fail(p, "longer than %d bytes", CJ_JOBDESC_MAX);
    int c = cj_json_peek(&p->j);
    if (c < 0) return fail(p, "empty");
    if (c != '{') return fail(p, "not a JSON object");
    if (walk_object(p, on_top)) return -1;
    if (cj_json_peek(&p->j) >= 0) return fail(p, "trailing bytes at offset %zu", p->j.pos);
    if (tls_fds_alone(p)) return -1;
    if (!(p->d->has & CJ_JD_JOB_ID)) {
        push(p, "job_id", -1);
        return fail(p, "missing");
    }
    return 0;
}

int cj_jobdesc_parse(const char *json, size_t len, struct cj_job_desc *out, char *why, size_t whysz)
{
    struct jd *p = malloc(sizeof *p);
    if (!p) return cj_why(why, whysz, "description: out of memory");
    memset(p, 0, sizeof *p);
    p->j = (struct cj_json){.p = (const uint8_t *)json, .pos = 0, .end = len, .who = "description",
                            .err = &p->err, .bad_prefix = ""};
    p->d = out;
    p->why = why;
    p->whysz = whysz;
    cj_jobdesc_clear(out);
    int rc = parse(p, len);
    if (rc) cj_jobdesc_clear(out);
    explicit_bzero(p, sizeof *p);
    free(p);
    return rc ? -1 : 0;
}

/* ---- the job's configuration ----------------------------------------------------------------------- */

/* Each INI key a description key overrides; text_off: the description's text
 * for it (or val_off: the value it holds parsed by the INI key's own rule, so of
 * its field's type); argv is quoted separately. */
#define NONE ((size_t)-1)
#define TXT(f) offsetof(struct cj_job_desc, f), NONE
#define VAL(f) NONE, offsetof(struct cj_job_desc, f)
static const struct override {
    unsigned bit;
    const char *field, *section, *name, *key;
    size_t text_off, val_off;
} overrides[] = {
    {CJ_JD_JOB_ID, "job_id", "relay", "job_id", "relay.job_id", TXT(job_id)},
    {CJ_JD_SERVER_URL, "server_url", "upstream", "url", "upstream.url", TXT(server_url)},
    {CJ_JD_SECURITY, "connection_security", "upstream", "connection_security", "upstream.connection_security",
     VAL(connection_security)},
    {CJ_JD_CA_FILE, "ca_file", "upstream", "ca_file", "upstream.ca_file", TXT(ca_file)},
    {CJ_JD_CERT_FILE, "cert_file", "upstream", "cert_file", "upstream.cert_file", TXT(cert_file)},
    {CJ_JD_KEY_FILE, "key_file", "upstream", "key_file", "upstream.key_file", TXT(key_file)},
    {CJ_JD_PROJECT, "project_name", "upstream", "project_name", "upstream.project_name", TXT(project_name)},
    {CJ_JD_MODE, "mode", "relay", "mode", "relay.mode", VAL(mode)},
    {CJ_JD_FLARE_VERSION, "flare_version", "relay", "flare_version", "relay.flare_version", TXT(flare_version)},
    {CJ_JD_ARGV, "worker.argv", "workers", "command", "workers.command", NONE, NONE},
    {CJ_JD_COUNT, "worker.count", "workers", "count", "workers.count", VAL(worker.count)},
    {CJ_JD_LISTEN, "worker.listen", "workers", "listen", "workers.listen", TXT(worker.listen)},
    {CJ_JD_LAUNCH_TIMEOUT, "worker.launch_timeout", "workers", "launch_timeout", "workers.launch_timeout",
     VAL(worker.launch_timeout)},
};
#define NOVERRIDES (sizeof overrides / sizeof *overrides)

/* The description's field for an INI key, or the key itself. */
static const char *field_for(const char *key)
{
    for (size_t i = 0; i < NOVERRIDES; i++)
        if (!strcmp(overrides[i].key, key)) return overrides[i].field;
    return key;
}

static int apply(const struct cj_job_desc *d, const struct override *o, struct cj_config *c,
                 char *why, size_t whysz)
{
    const struct cj_cfg_key *k = cj_config_find(o->section, o->name);
    char *field = (char *)c + k->off, cmd[CJ_CFG_COMMAND_MAX], w[256];
    const char *text = o->text_off != NONE ? (const char *)d + o->text_off : cmd;
    if (o->val_off != NONE) {
        memcpy(field, (const char *)d + o->val_off, k->size);
    } else {
        if (o->bit == CJ_JD_ARGV && quote_argv(d, cmd, sizeof cmd) < 0)
            return cj_why(why, whysz, "worker.argv: longer than %d bytes as a command line", CJ_CFG_COMMAND_MAX - 1);
        if (cj_config_parse_value(k->key, text, field, k->size, w, sizeof w))
            return cj_why(why, whysz, "%s: %s", o->field, w);
    }
    c->origin.key_line[k - cj_config_keys(NULL)] = 1;
    return 0;
}

/* A TLS file passed as a descriptor: the key shows its label. */
static void apply_tls_fd(const struct cj_job_desc *d, int i, struct cj_config *c)
{
    const struct cj_cfg_key *k = cj_config_find("upstream", cj_jobdesc_tls_keys[i]);
    char *field = (char *)c + k->off;
    if (d->tls_label[i][0]) snprintf(field, k->size, "%s", d->tls_label[i]);
    else snprintf(field, k->size, "fd:%d", d->tls_fd[i]);
    c->origin.key_line[k - cj_config_keys(NULL)] = 1;
}

struct first_problem {
    char *why;
    size_t whysz;
    int n;
};

static void on_problem(void *arg, const char *key, const char *msg)
{
    struct first_problem *f = arg;
    if (f->n++ == 0) cj_why(f->why, f->whysz, "%s: %s", field_for(key), msg);
}

int cj_jobdesc_config(const struct cj_job_desc *d, const struct cj_config *site, struct cj_config *job,
                      char *why, size_t whysz)
{
    if ((d->has & CJ_JD_SITE) && strcmp(d->site, site->relay.site))
        return cj_why(why, whysz, "site: '%s' is not this daemon's site '%s'", d->site, site->relay.site);
    struct cj_config *c = malloc(sizeof *c);
    if (!c) return cj_why(why, whysz, "description: out of memory");
    *c = *site;
    memset(&c->origin, 0, sizeof c->origin);
    copy(c->origin.file, sizeof c->origin.file, "job description");
    int rc = 0;
    for (size_t i = 0; i < NOVERRIDES && !rc; i++)
        if (d->has & overrides[i].bit) rc = apply(d, &overrides[i], c, why, whysz);
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS && !rc; i++)
        if (d->tls_fdmask & (1u << i)) apply_tls_fd(d, i, c);
    struct first_problem f = {why, whysz, 0};
    if (!rc && cj_config_check(c, on_problem, &f)) rc = -1;
    if (!rc) *job = *c;
    free(c);
    return rc;
}

/* ---- reading and showing ------------------------------------------------------------------------- */

const char *cj_jobdesc_arg(const struct cj_job_desc *d, int i) { return area_at(d->worker.argv, d->worker.argc, i); }

const char *cj_jobdesc_env(const struct cj_job_desc *d, int i) { return area_at(d->worker.env, d->worker.envc, i); }

const char *cj_jobdesc_boot(const struct cj_job_desc *d, int i, const char **raw)
{
    const char *k = i >= 0 && i < d->bootc ? area_at(d->boot, 2 * d->bootc, 2 * i) : NULL;
    if (k && raw) *raw = k + strlen(k) + 1;
    return k;
}

/* An snprintf that appends and keeps counting past the end. */
struct line {
    char *p;
    size_t cap, need;
};

static void put(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct line *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = l->need < l->cap ? l->cap - l->need : 0;
    int n = vsnprintf(room ? l->p + l->need : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) l->need += (size_t)n;
}

static const char *allowed_name(const char *section, const char *name, int v)
{
    const struct cj_cfg_key *k = cj_config_find(section, name);
    for (int i = 0; k && k->allowed[i]; i++)
        if (i == v) return k->allowed[i];
    return "?";
}

size_t cj_jobdesc_describe(const struct cj_job_desc *d, char *buf, size_t len)
{
    struct line l = {buf, len, 0};
    unsigned h = d->has;
    if (len) buf[0] = '\0';
    put(&l, "job %s", d->job_id);
    if (h & CJ_JD_SITE) put(&l, " site %s", d->site);
    if (h & CJ_JD_SERVER_URL) put(&l, " server %s", d->server_url);
    if (h & CJ_JD_SECURITY) put(&l, " security %s", allowed_name("upstream", "connection_security", d->connection_security));
    if (h & CJ_JD_PROJECT) put(&l, " project %s", d->project_name);
    for (int i = 0, n = 0; i < CJ_JOBDESC_TLS_FDS; i++)
        if (d->tls_fdmask & (1u << i)) put(&l, "%s%s", n++ ? "," : " tls_fds ", cj_jobdesc_tls_keys[i]);
    if (h & CJ_JD_PARENT_URL) put(&l, " parent %s", d->parent_url);
    if (h & CJ_JD_MODE) put(&l, " mode %s", allowed_name("relay", "mode", d->mode));
    if (h & CJ_JD_WORKSPACE) put(&l, " workspace %s", d->workspace);
    if (h & CJ_JD_FLARE_VERSION) put(&l, " flare_version %s", d->flare_version);
    if (h & CJ_JD_ARGV) put(&l, " worker %s (+%d args)", cj_jobdesc_arg(d, 0), d->worker.argc - 1);
    if (h & CJ_JD_COUNT) put(&l, " count %d", d->worker.count);
    if (h & CJ_JD_LISTEN) put(&l, " listen %s", d->worker.listen);
    if (h & CJ_JD_LAUNCH_TIMEOUT) put(&l, " launch_timeout %g", d->worker.launch_timeout);
    if (h & CJ_JD_CWD) put(&l, " cwd %s", d->worker.cwd);
    if (h & CJ_JD_USER) put(&l, " user %s", d->worker.user);
    if (h & CJ_JD_GROUP) put(&l, " group %s", d->worker.group);
    if (h & CJ_JD_ENV) put(&l, " env %d", d->worker.envc);
    for (int i = 0; i < d->bootc; i++) put(&l, "%s%s", i ? "," : " bootstrap ", cj_jobdesc_boot(d, i, NULL));
    if (h & CJ_JD_CREDENTIALS) put(&l, " credentials given");
    return l.need;
}

void cj_jobdesc_clear(struct cj_job_desc *d) { explicit_bzero(d, sizeof *d); }
