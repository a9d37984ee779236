/* SPDX-License-Identifier: Apache-2.0 */
/* creds.c — job credentials (see creds.h). */
#include "fl/creds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/json.h"

static const struct {
    const char *key;
    const char *env;
    const char *dflt;
    unsigned missing_flag;
} slots[3] = {
    {"token", CJ_CREDS_ENV_TOKEN, CJ_CREDS_NA, CJ_CREDS_TOKEN_MISSING},
    {"token_signature", CJ_CREDS_ENV_SIGNATURE, CJ_CREDS_NA, CJ_CREDS_SIGNATURE_MISSING},
    {"ssid", CJ_CREDS_ENV_SSID, "", CJ_CREDS_SSID_MISSING},
};

static char *slot_buf(struct cj_creds *c, int i)
{
    return i == 0 ? c->token : i == 1 ? c->signature : c->ssid;
}

static enum cj_creds_source *slot_src(struct cj_creds *c, int i)
{
    return i == 0 ? &c->token_src : i == 1 ? &c->signature_src : &c->ssid_src;
}

static int slot_of(const char *key, size_t klen)
{
    for (int i = 0; i < 3; i++)
        if (strlen(slots[i].key) == klen && !memcmp(slots[i].key, key, klen)) return i;
    return -1;
}

/* A value: at most CJ_CREDS_VALUE_MAX bytes, no control characters (a header
 * value with a newline or NUL would corrupt the headers it goes into). */
static int check_value(const char *v, size_t n, const char *what, const char *where, struct cj_err *err)
{
    if (n > CJ_CREDS_VALUE_MAX)
        return cj_fail(err, CJ_E_LIMIT, 0, "credentials: %s in %s is %zu bytes, limit %d", what, where, n,
                       CJ_CREDS_VALUE_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return cj_fail(err, CJ_E_INVALID, 0, "credentials: %s in %s holds a control character", what, where);
    return 0;
}

static void set_slot(struct cj_creds *c, int i, const char *v, size_t n, enum cj_creds_source src)
{
    char *dst = slot_buf(c, i);
    memcpy(dst, v, n);
    dst[n] = 0;
    *slot_src(c, i) = src;
}

/* ---- JSON form ---------------------------------------------------------------------- */

struct json_ctx {
    struct cj_creds *c;
    const char *name;
};

static int on_member(void *ud, const char *key, size_t klen, const struct cj_json_val *v, struct cj_err *err)
{
    struct json_ctx *jc = ud;
    int i = slot_of(key, klen);
    if (i < 0) return 0;
    if (v->type == CJ_JSON_NULL) return 0;
    if (v->type != CJ_JSON_STRING)
        return cj_fail(err, CJ_E_TYPE, 0, "credentials: %s in %s must be a string", slots[i].key, jc->name);
    int rc = check_value(v->s, v->s_len, slots[i].key, jc->name, err);
    if (rc) return rc;
    if (v->s_len) set_slot(jc->c, i, v->s, v->s_len, CJ_CREDS_FILE);
    else { slot_buf(jc->c, i)[0] = 0; *slot_src(jc->c, i) = CJ_CREDS_DEFAULT; }
    return 0;
}

/* ---- key = value form ---------------------------------------------------------------- */

static bool is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

static int parse_lines(const char *text, size_t len, const char *name, struct cj_creds *c, struct cj_err *err)
{
    bool seen[3] = {false, false, false};
    size_t pos = 0;
    for (int line = 1; pos < len; line++) {
        const char *eol = memchr(text + pos, '\n', len - pos);
        size_t end = eol ? (size_t)(eol - text) : len;
        size_t a = pos, b = end;
        pos = eol ? end + 1 : len;
        while (a < b && is_blank(text[a])) a++;
        while (b > a && is_blank(text[b - 1])) b--;
        if (a == b || text[a] == '#' || text[a] == ';') continue;
        const char *eq = memchr(text + a, '=', b - a);
        if (!eq) return cj_fail(err, CJ_E_INVALID, a, "credentials: %s:%d: expected key = value", name, line);
        size_t ke = (size_t)(eq - text), vs = ke + 1;
        while (ke > a && is_blank(text[ke - 1])) ke--;
        while (vs < b && is_blank(text[vs])) vs++;
        int i = slot_of(text + a, ke - a);
        if (i < 0)
            return cj_fail(err, CJ_E_INVALID, a, "credentials: %s:%d: unknown key '%.*s' (token, token_signature, ssid)",
                           name, line, (int)(ke - a > 40 ? 40 : ke - a), text + a);
        if (seen[i]) return cj_fail(err, CJ_E_INVALID, a, "credentials: %s:%d: %s given twice", name, line, slots[i].key);
        seen[i] = true;
        size_t vlen = b - vs;
        if (vlen >= 2 && text[vs] == '"' && text[b - 1] == '"') { vs++; vlen -= 2; }
        char where[300];
        snprintf(where, sizeof where, "%.250s:%d", name, line);
        int rc = check_value(text + vs, vlen, slots[i].key, where, err);
        if (rc) return rc;
        if (vlen) set_slot(c, i, text + vs, vlen, CJ_CREDS_FILE);
    }
    return 0;
}

int cj_creds_parse(const char *text, size_t len, const char *name, struct cj_creds *c, struct cj_err *err)
{
    if (!name) name = "credentials";
    size_t i = 0;
    while (i < len && (is_blank(text[i]) || text[i] == '\n')) i++;
    if (memchr(text, 0, len)) return cj_fail(err, CJ_E_INVALID, 0, "credentials: %s holds a NUL byte", name);
    if (i < len && text[i] == '{') {
        struct json_ctx jc = {c, name};
        int rc = cj_json_object_walk(text, len, on_member, &jc, err);
        if (rc && err && !strstr(err->msg, name)) {
            char msg[sizeof err->msg];
            size_t ml = strnlen(err->msg, sizeof err->msg - 1);
            memcpy(msg, err->msg, ml);
            msg[ml] = 0;
            snprintf(err->msg, sizeof err->msg, "credentials: %.80s: %.*s", name, (int)ml, msg);
        }
        return rc;
    }
    return parse_lines(text, len, name, c, err);
}

/* ---- loading ---------------------------------------------------------------------------- */

static int read_file(const char *path, struct cj_creds *c, struct cj_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return cj_fail(err, CJ_E_INVALID, 0, "credentials: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return cj_fail(err, CJ_E_INVALID, 0, "credentials: %s is not a regular file", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return cj_fail(err, CJ_E_INVALID, 0,
                       "credentials: refusing %s: mode %04o lets group or others read it; it must be owner-only "
                       "(chmod 600 %s)", path, (unsigned)(st.st_mode & 07777), path);
    }
    if (st.st_size > CJ_CREDS_FILE_MAX) {
        close(fd);
        return cj_fail(err, CJ_E_LIMIT, 0, "credentials: %s is over %d bytes", path, CJ_CREDS_FILE_MAX);
    }
    char *buf = malloc(CJ_CREDS_FILE_MAX + 1);
    if (!buf) {
        close(fd);
        return cj_fail(err, CJ_E_NOMEM, 0, "credentials: out of memory");
    }
    size_t len = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, CJ_CREDS_FILE_MAX + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = cj_fail(err, CJ_E_INVALID, 0, "credentials: cannot read %s: %s", path, strerror(errno)); break; }
        if (r == 0) break;
        len += (size_t)r;
        if (len > CJ_CREDS_FILE_MAX) { rc = cj_fail(err, CJ_E_LIMIT, 0, "credentials: %s is over %d bytes", path, CJ_CREDS_FILE_MAX); break; }
    }
    close(fd);
    if (!rc) rc = cj_creds_parse(buf, len, path, c, err);
    explicit_bzero(buf, CJ_CREDS_FILE_MAX + 1);
    free(buf);
    return rc;
}

int cj_creds_load(const char *file, struct cj_creds *c, struct cj_err *err)
{
    cj_creds_clear(c);
    int rc = 0;
    if (file && *file && (rc = read_file(file, c, err))) {
        cj_creds_clear(c);
        return rc;
    }
    for (int i = 0; i < 3; i++) {
        if (*slot_src(c, i) == CJ_CREDS_FILE) continue;
        const char *v = getenv(slots[i].env);
        if (v && *v) {
            if ((rc = check_value(v, strlen(v), slots[i].key, slots[i].env, err))) {
                cj_creds_clear(c);
                return rc;
            }
            set_slot(c, i, v, strlen(v), CJ_CREDS_ENV);
        } else {
            set_slot(c, i, slots[i].dflt, strlen(slots[i].dflt), CJ_CREDS_DEFAULT);
            c->flags |= slots[i].missing_flag;
        }
    }
    return 0;
}

const char *cj_creds_redact(const char *secret, char *out, size_t outsz)
{
    if (!outsz) return out;
    if (!secret || !*secret) snprintf(out, outsz, "(empty)");
    else if (!strcmp(secret, CJ_CREDS_NA)) snprintf(out, outsz, "NA");
    else snprintf(out, outsz, "<redacted, %zu bytes>", strlen(secret));
    return out;
}

const char *cj_creds_describe(const struct cj_creds *c, char *out, size_t outsz)
{
    static const char *const src[] = {"missing", "from file", "from env", "from the job description"};
    snprintf(out, outsz, "token %s, token_signature %s, ssid %s", src[c->token_src], src[c->signature_src],
             src[c->ssid_src]);
    return out;
}

void cj_creds_clear(struct cj_creds *c)
{
    explicit_bzero(c, sizeof *c);
}
