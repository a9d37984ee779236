/* SPDX-License-Identifier: Apache-2.0 */
/* bootstrap.c — bootstrap file writer/reader (see bootstrap.h). */
#include "util/text.h"
#include "fl/bootstrap.h"
#include "util/json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the bootstrap struct ----------------------------------------------------------- */

static void set(char *dst, size_t sz, const char *s) { snprintf(dst, sz, "%s", s); }

void cj_bootstrap_defaults(struct cj_bootstrap *b)
{
    memset(b, 0, sizeof *b);
    b->schema_version = CJ_BOOTSTRAP_SCHEMA_VERSION;
    set(b->execution_mode, sizeof b->execution_mode, CJ_BOOTSTRAP_MODE);
    struct cj_bootstrap_task_exchange *t = &b->task_exchange;
    t->train_with_eval = false;
    set(t->exchange_format, sizeof t->exchange_format, "numpy");
    set(t->server_expected_format, sizeof t->server_expected_format, "numpy");
    set(t->transfer_type, sizeof t->transfer_type, "FULL");
    set(t->train_task_name, sizeof t->train_task_name, "train");
    set(t->eval_task_name, sizeof t->eval_task_name, "validate");
    set(t->submit_model_task_name, sizeof t->submit_model_task_name, "submit_model");
    t->launch_once = true;
}


int cj_bootstrap_new_token(char out[CJ_BOOTSTRAP_TOKEN_LEN + 1])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t r[33];   /* 32 random bytes + one zero byte to round up to 11 groups of 3 */
    if (cj_random_bytes(r, 32)) return -1;
    r[32] = 0;
    size_t o = 0;
    for (size_t i = 0; i < 33; i += 3) {
        uint32_t v = (uint32_t)r[i] << 16 | (uint32_t)r[i + 1] << 8 | r[i + 2];
        char q[4] = {b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63], b64[v & 63]};
        for (int k = 0; k < 4 && o < CJ_BOOTSTRAP_TOKEN_LEN; k++) out[o++] = q[k];
    }
    out[CJ_BOOTSTRAP_TOKEN_LEN] = 0;
    explicit_bzero(r, sizeof r);
    return 0;
}

int cj_bootstrap_check(const struct cj_bootstrap *b, struct cj_err *err)
{
    if (b->schema_version != CJ_BOOTSTRAP_SCHEMA_VERSION)
        return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: schema_version %" PRId64 ", want %d", b->schema_version,
                       CJ_BOOTSTRAP_SCHEMA_VERSION);
    if (strcmp(b->execution_mode, CJ_BOOTSTRAP_MODE))
        return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: execution_mode must be \"%s\"", CJ_BOOTSTRAP_MODE);
    const struct { const char *name, *v; } req[] = {
        {"cj_fqcn", b->cj_fqcn},   {"trainer_fqcn", b->trainer_fqcn}, {"job_id", b->job_id},
        {"site_name", b->site_name}, {"connect_url", b->connect_url}, {"launch_token", b->launch_token},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!req[i].v[0]) return cj_fail(err, CJ_E_MISSING, 0, "bootstrap: %s is empty", req[i].name);
    if (b->cj_pid < 0) return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cj_pid %" PRId64 " is negative", b->cj_pid);
    return 0;
}

/* ---- JSON writing -------------------------------------------------------------------- */

struct jbuf {
    char *p;
    size_t len, cap;
    bool bad;       /* out of memory or a string that is not UTF-8 */
};

static void jput(struct jbuf *jb, const char *s, size_t n)
{
    if (jb->bad) return;
    if (jb->len + n + 1 > jb->cap) {
        size_t cap = jb->cap ? jb->cap : 1024;
        while (jb->len + n + 1 > cap) cap *= 2;
        char *p = malloc(cap);   /* not realloc: the old buffer (with the token) is wiped */
        if (!p) { jb->bad = true; return; }
        if (jb->p) {
            memcpy(p, jb->p, jb->len);
            explicit_bzero(jb->p, jb->cap);
            free(jb->p);
        }
        jb->p = p;
        jb->cap = cap;
    }
    memcpy(jb->p + jb->len, s, n);
    jb->len += n;
    jb->p[jb->len] = 0;
}

static void jputs(struct jbuf *jb, const char *s) { jput(jb, s, strlen(s)); }

static void jstr(struct jbuf *jb, const char *s)
{
    jputs(jb, "\"");
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; jput(jb, esc, 2); i++; continue; }
        if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); jputs(jb, esc); i++; continue; }
        size_t l = cj_utf8_seq(p + i, n - i);
        if (!l) { jb->bad = true; return; }
        jput(jb, (const char *)p + i, l);
        i += l;
    }
    jputs(jb, "\"");
}

static void jkey(struct jbuf *jb, const char *k, bool first)
{
    if (!first) jputs(jb, ", ");
    jstr(jb, k);
    jputs(jb, ": ");
}

static void jkv_str(struct jbuf *jb, const char *k, const char *v, bool first) { jkey(jb, k, first); jstr(jb, v); }
static void jkv_int(struct jbuf *jb, const char *k, int64_t v, bool first)
{
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, v);
    jkey(jb, k, first);
    jputs(jb, num);
}

/* ---- the file's keys: one table for the writer and the reader ---------------------------- */

enum bkind { BK_INT, BK_PID, BK_STR, BK_BOOL, BK_OBJECT };

struct bkey {
    const char *name;
    enum bkind kind;
    size_t off, size;           /* the field in its struct */
    const struct bkey *sub;     /* BK_OBJECT: its keys */
    size_t nsub;
};

#define TX(name, kind, f) {name, kind, offsetof(struct cj_bootstrap_task_exchange, f), \
                           sizeof(((struct cj_bootstrap_task_exchange *)0)->f), NULL, 0}
#define BS(name, kind, f) {name, kind, offsetof(struct cj_bootstrap, f), sizeof(((struct cj_bootstrap *)0)->f), NULL, 0}

static const struct bkey exchange_keys[] = {
    TX("train_with_eval", BK_BOOL, train_with_eval),
    TX("exchange_format", BK_STR, exchange_format),
    TX("server_expected_format", BK_STR, server_expected_format),
    TX("transfer_type", BK_STR, transfer_type),
    TX("train_task_name", BK_STR, train_task_name),
    TX("eval_task_name", BK_STR, eval_task_name),
    TX("submit_model_task_name", BK_STR, submit_model_task_name),
    TX("launch_once", BK_BOOL, launch_once),
};

/* In the order of the spec's table (doc/protocol/fl-protocols.md §8), which is
 * the order the file is written in. */
static const struct bkey file_keys[] = {
    BS("schema_version", BK_INT, schema_version),
    BS("execution_mode", BK_STR, execution_mode),
    BS("connect_url", BK_STR, connect_url),
    BS("cj_fqcn", BK_STR, cj_fqcn),
    BS("cj_pid", BK_PID, cj_pid),
    BS("trainer_fqcn", BK_STR, trainer_fqcn),
    BS("launch_token", BK_STR, launch_token),
    BS("job_id", BK_STR, job_id),
    BS("site_name", BK_STR, site_name),
    BS("secure_mode", BK_BOOL, secure_mode),
    {"task_exchange", BK_OBJECT, offsetof(struct cj_bootstrap, task_exchange), sizeof(struct cj_bootstrap_task_exchange),
     exchange_keys, sizeof exchange_keys / sizeof exchange_keys[0]},
    BS("memory_gc_rounds", BK_INT, memory_gc_rounds),
    BS("cuda_empty_cache", BK_BOOL, cuda_empty_cache),
};
#define NFILE_KEYS (sizeof file_keys / sizeof file_keys[0])
#undef TX
#undef BS

/* The raw JSON value of extra key name, or NULL. */
static const char *extra_value(const char *extra, int extrac, const char *name)
{
    const char *p = extra;
    for (int i = 0; p && i < extrac; i++) {
        const char *raw = p + strlen(p) + 1;
        if (!strcmp(p, name)) return raw;
        p = raw + strlen(raw) + 1;
    }
    return NULL;
}

/* One object: its keys in table order (a cj_pid of 0 is left out), then the
 * extra keys, which replace table keys of the same name. */
static void write_object(struct jbuf *jb, const struct bkey *keys, size_t n, const char *base, const char *extra,
                         int extrac)
{
    bool first = true;
    jputs(jb, "{");
    for (size_t i = 0; i < n; i++) {
        const struct bkey *k = &keys[i];
        const char *f = base + k->off;
        if (k->kind == BK_PID && *(const int64_t *)f <= 0) continue;
        if (extra_value(extra, extrac, k->name)) continue;
        if (k->kind == BK_STR) jkv_str(jb, k->name, f, first);
        else if (k->kind == BK_BOOL) { jkey(jb, k->name, first); jputs(jb, *(const bool *)f ? "true" : "false"); }
        else if (k->kind == BK_OBJECT) { jkey(jb, k->name, first); write_object(jb, k->sub, k->nsub, f, NULL, 0); }
        else jkv_int(jb, k->name, *(const int64_t *)f, first);
        first = false;
    }
    const char *p = extra;
    for (int i = 0; p && i < extrac; i++) {
        const char *raw = p + strlen(p) + 1;
        jkey(jb, p, first);
        jputs(jb, raw);
        first = false;
        p = raw + strlen(raw) + 1;
    }
    jputs(jb, "}");
}

int cj_bootstrap_format(const struct cj_bootstrap *b, char **out, size_t *len, struct cj_err *err)
{
    int rc = cj_bootstrap_check(b, err);
    if (rc) return rc;
    struct jbuf jb = {0};
    write_object(&jb, file_keys, NFILE_KEYS, (const char *)b, b->extra, b->extrac);
    jputs(&jb, "\n");
    if (jb.bad) {
        if (jb.p) { explicit_bzero(jb.p, jb.cap); free(jb.p); }
        return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: a string is not valid UTF-8 (or out of memory)");
    }
    *out = jb.p;
    *len = jb.len;
    return 0;
}

/* ---- atomic write ---------------------------------------------------------------------- */

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int cj_bootstrap_write(const char *path, const struct cj_bootstrap *b, struct cj_err *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: path %s names a directory", path);
    if (slash) {
        size_t dl = slash == path ? 1 : (size_t)(slash - path);
        if (dl >= sizeof dir) return cj_fail(err, CJ_E_LIMIT, 0, "bootstrap: path too long");
        memcpy(dir, path, dl);
        dir[dl] = 0;
    } else {
        strcpy(dir, ".");
    }
    char *json;
    size_t len;
    int rc = cj_bootstrap_format(b, &json, &len, err);
    if (rc) return rc;

    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        uint32_t r;
        if (cj_random_bytes(&r, sizeof r)) { rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: getrandom failed"); goto out; }
        int n = snprintf(tmp, sizeof tmp, "%s/.%s.tmp-%08x", dir, base, r);
        if (n < 0 || (size_t)n >= sizeof tmp) { rc = cj_fail(err, CJ_E_LIMIT, 0, "bootstrap: path too long"); goto out; }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) {
            rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot create %s: %s", tmp, strerror(errno));
            goto out;
        }
    }
    if (fd < 0) { rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot create a temporary file in %s", dir); goto out; }
    /* The umask may have cleared bits of 0600; set it exactly. */
    if (fchmod(fd, 0600) || write_all(fd, json, len) || fsync(fd)) {
        rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto out;
    }
    if (close(fd)) {
        rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path)) {
        rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    /* Make the rename durable (best effort: some file systems refuse fsync on a directory). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
out:
    explicit_bzero(json, len);
    free(json);
    return rc;
}

/* ---- parsing -------------------------------------------------------------------------- */

static int want_type(const struct cj_json_val *v, enum cj_json_type t, const char *key, struct cj_err *err)
{
    static const char *const names[] = {"", "null", "a bool", "a number", "a string", "an object", "an array"};
    if (v->type != t)
        return cj_fail(err, CJ_E_TYPE, (size_t)0, "bootstrap: %s must be %s, not %s", key, names[t], names[v->type]);
    return 0;
}

static int get_str(const struct cj_json_val *v, const char *key, char *dst, size_t sz, struct cj_err *err)
{
    int rc = want_type(v, CJ_JSON_STRING, key, err);
    if (rc) return rc;
    if (v->s_len >= sz) return cj_fail(err, CJ_E_LIMIT, 0, "bootstrap: %s is %zu bytes, limit %zu", key, v->s_len, sz - 1);
    memcpy(dst, v->s, v->s_len + 1);
    return 0;
}

static int get_int(const struct cj_json_val *v, const char *key, int64_t *dst, struct cj_err *err)
{
    int rc = want_type(v, CJ_JSON_NUMBER, key, err);
    if (rc) return rc;
    if (!v->is_int) return cj_fail(err, CJ_E_TYPE, 0, "bootstrap: %s must be an integer", key);
    *dst = v->i;
    return 0;
}

static int get_bool(const struct cj_json_val *v, const char *key, bool *dst, struct cj_err *err)
{
    int rc = want_type(v, CJ_JSON_BOOL, key, err);
    if (!rc) *dst = v->b;
    return rc;
}

/* Walking one object of the file: its key table and the struct it fills. */
struct walk {
    const struct bkey *keys;
    size_t n;
    char *base;
    const char *prefix;         /* "" or "task_exchange." for error texts */
    unsigned seen;              /* bit i: keys[i] was in the object */
};

static int on_member(void *ud, const char *key, size_t klen, const struct cj_json_val *v, struct cj_err *err)
{
    struct walk *w = ud;
    for (size_t i = 0; i < w->n; i++) {
        const struct bkey *k = &w->keys[i];
        if (klen != strlen(k->name) || memcmp(key, k->name, klen)) continue;
        char name[64];
        char *f = w->base + k->off;
        snprintf(name, sizeof name, "%s%s", w->prefix, k->name);
        w->seen |= 1u << i;
        switch (k->kind) {
        case BK_STR: return get_str(v, name, f, k->size, err);
        case BK_BOOL: return get_bool(v, name, (bool *)f, err);
        case BK_INT: return get_int(v, name, (int64_t *)f, err);
        case BK_PID:
            if (v->type == CJ_JSON_NULL) { *(int64_t *)f = 0; return 0; }
            return get_int(v, name, (int64_t *)f, err);
        case BK_OBJECT: {
            int rc = want_type(v, CJ_JSON_OBJECT, name, err);
            struct walk sub = {k->sub, k->nsub, f, "task_exchange.", 0};
            return rc ? rc : cj_json_object_walk(v->raw, v->raw_len, on_member, &sub, err);
        }
        }
    }
    return 0;   /* unknown keys are tolerated */
}

int cj_bootstrap_parse(const char *json, size_t len, struct cj_bootstrap *b, struct cj_err *err)
{
    cj_bootstrap_defaults(b);
    b->execution_mode[0] = 0;
    b->schema_version = 0;
    struct walk w = {file_keys, NFILE_KEYS, (char *)b, "", 0};
    int rc = cj_json_object_walk(json, len, on_member, &w, err);
    if (rc) return rc;
    if (!(w.seen & 1u << 0)) return cj_fail(err, CJ_E_MISSING, 0, "bootstrap: schema_version is missing");
    if (!(w.seen & 1u << 1)) return cj_fail(err, CJ_E_MISSING, 0, "bootstrap: execution_mode is missing");
    return cj_bootstrap_check(b, err);
}

int cj_bootstrap_read(const char *path, struct cj_bootstrap *b, struct cj_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return cj_fail(err, CJ_E_INVALID, 0, "bootstrap: %s is not a regular file", path);
    }
    if (st.st_size > CJ_BOOTSTRAP_MAX_SIZE) {
        close(fd);
        return cj_fail(err, CJ_E_LIMIT, 0, "bootstrap: %s is %lld bytes, limit %d", path, (long long)st.st_size,
                       CJ_BOOTSTRAP_MAX_SIZE);
    }
    char *buf = malloc(CJ_BOOTSTRAP_MAX_SIZE + 1);
    if (!buf) {
        close(fd);
        return cj_fail(err, CJ_E_NOMEM, 0, "bootstrap: out of memory");
    }
    size_t len = 0;
    int rc = 0;
    for (;;) {   /* read to EOF, refusing a file that grew past the limit */
        ssize_t r = read(fd, buf + len, CJ_BOOTSTRAP_MAX_SIZE + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = cj_fail(err, CJ_E_INVALID, 0, "bootstrap: cannot read %s: %s", path, strerror(errno)); break; }
        if (r == 0) break;
        len += (size_t)r;
        if (len > CJ_BOOTSTRAP_MAX_SIZE) { rc = cj_fail(err, CJ_E_LIMIT, 0, "bootstrap: %s is over %d bytes", path, CJ_BOOTSTRAP_MAX_SIZE); break; }
    }
    close(fd);
    if (!rc) {
        rc = cj_bootstrap_parse(buf, len, b, err);
        if (rc && err) {   /* say which file */
            char msg[sizeof err->msg];
            size_t ml = strnlen(err->msg, sizeof err->msg - 1);
            memcpy(msg, err->msg, ml);
            msg[ml] = 0;
            snprintf(err->msg, sizeof err->msg, "%.*s (%.*s)", (int)ml, msg, 120, path);
        }
    }
    explicit_bzero(buf, CJ_BOOTSTRAP_MAX_SIZE + 1);
    free(buf);
    return rc;
}
