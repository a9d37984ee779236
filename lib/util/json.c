/* SPDX-License-Identifier: Apache-2.0 */
/* json.c — the bounded JSON cursor (see json.h). */
#include "util/json.h"

#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

#define CJ_JSON_DEPTH_CAP 64   /* the deepest max_depth cj_json_skip honours */

int cj_json_bad(struct cj_json *j, const char *what)
{
    const char *prefix = j->bad_prefix ? j->bad_prefix : "invalid JSON header: ";
    return cj_fail(j->err, CJ_E_INVALID, j->pos, "%s: %s%s at offset %zu", j->who, prefix, what, j->pos);
}

static void ws(struct cj_json *j)
{
    while (j->pos < j->end && (j->p[j->pos] == ' ' || j->p[j->pos] == '\t' || j->p[j->pos] == '\n' ||
                               j->p[j->pos] == '\r'))
        j->pos++;
}

/* Skips whitespace; the next byte, or -1 at the end of the header. */
int cj_json_peek(struct cj_json *j)
{
    ws(j);
    return j->pos < j->end ? j->p[j->pos] : -1;
}

int cj_json_expect(struct cj_json *j, char ch)
{
    char what[24];
    if (cj_json_peek(j) != ch) {
        snprintf(what, sizeof what, "expected '%c'", ch);
        return cj_json_bad(j, what);
    }
    j->pos++;
    return 0;
}

static int hex4(struct cj_json *j, uint32_t *v)
{
    if (j->end - j->pos < 4) return cj_json_bad(j, "short \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = j->p[j->pos++], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return cj_json_bad(j, "bad hex digit in \\u escape");
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Reads a string (at the cursor, after whitespace), decoding escapes into out
 * (NUL-ended) unless out is NULL.  Strings must be valid UTF-8. */
int cj_json_string(struct cj_json *j, char *out, size_t cap)
{
    size_t o = 0;
    if (cj_json_peek(j) != '"') return cj_json_bad(j, "expected a string");
    size_t start = j->pos++;
    for (;;) {
        if (j->pos >= j->end) return cj_json_bad(j, "unterminated string");
        uint8_t c = j->p[j->pos], tmp[4];
        size_t k;
        if (c == '"') { j->pos++; break; }
        if (c < 0x20) return cj_json_bad(j, "control character in string");
        if (c == '\\') {
            if (++j->pos >= j->end) return cj_json_bad(j, "unterminated escape");
            uint32_t cp;
            switch (j->p[j->pos++]) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u': {
                int rc = hex4(j, &cp);
                if (rc) return rc;
                if (cp >= 0xdc00 && cp <= 0xdfff) return cj_json_bad(j, "lone low surrogate");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (j->end - j->pos < 2 || j->p[j->pos] != '\\' || j->p[j->pos + 1] != 'u')
                        return cj_json_bad(j, "lone high surrogate");
                    j->pos += 2;
                    if ((rc = hex4(j, &lo))) return rc;
                    if (lo < 0xdc00 || lo > 0xdfff) return cj_json_bad(j, "bad low surrogate");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                break;
            }
            default: j->pos--; return cj_json_bad(j, "unknown escape");
            }
            if (out && cp == 0) return cj_json_bad(j, "NUL in a name");
            k = cj_utf8_put(cp, tmp);
        } else {
            uint32_t cp;
            k = cj_utf8_decode(j->p + j->pos, j->end - j->pos, &cp);
            if (k == 0) return cj_json_bad(j, "invalid UTF-8 in string");
            memcpy(tmp, j->p + j->pos, k);
            j->pos += k;
        }
        if (out) {
            if (k >= cap - o)
                return cj_fail(j->err, CJ_E_LIMIT, start, "%s: string at offset %zu longer than %zu bytes",
                               j->who, start, cap - 1);
            memcpy(out + o, tmp, k);
            o += k;
        }
    }
    if (out) out[o] = 0;
    return 0;
}

/* A non-negative integer without fraction or exponent (shape, offsets). */
int cj_json_uint(struct cj_json *j, uint64_t *v)
{
    int c = cj_json_peek(j);
    if (c == '-') return cj_json_bad(j, "negative number");
    if (c < '0' || c > '9') return cj_json_bad(j, "expected an integer");
    size_t start = j->pos;
    *v = 0;
    while (j->pos < j->end && j->p[j->pos] >= '0' && j->p[j->pos] <= '9') {
        if (*v > (uint64_t)(INT64_MAX - 9) / 10)
            return cj_fail(j->err, CJ_E_LIMIT, start, "%s: integer at offset %zu too large", j->who, start);
        *v = *v * 10 + (uint64_t)(j->p[j->pos++] - '0');
    }
    if (j->pos - start > 1 && j->p[start] == '0') { j->pos = start; return cj_json_bad(j, "leading zero"); }
    if (j->pos < j->end && (j->p[j->pos] == '.' || j->p[j->pos] == 'e' || j->p[j->pos] == 'E'))
        return cj_json_bad(j, "not an integer");
    return 0;
}

static int literal(struct cj_json *j, const char *word)
{
    size_t n = strlen(word);
    if (j->end - j->pos < n || memcmp(j->p + j->pos, word, n) != 0) return cj_json_bad(j, "unexpected character");
    j->pos += n;
    return 0;
}

int cj_json_bool(struct cj_json *j, bool *v)
{
    int c = cj_json_peek(j);
    if (c != 't' && c != 'f') return cj_json_bad(j, "expected true or false");
    *v = c == 't';
    return literal(j, *v ? "true" : "false");
}

/* Any JSON number, by the grammar. */
static int number(struct cj_json *j)
{
    const uint8_t *p = j->p;
    size_t e = j->end;
#define DIGITS() do { size_t s0 = j->pos; while (j->pos < e && p[j->pos] >= '0' && p[j->pos] <= '9') j->pos++; \
                      if (j->pos == s0) return cj_json_bad(j, "digit expected"); } while (0)
    if (p[j->pos] == '-') j->pos++;
    if (j->pos < e && p[j->pos] == '0') j->pos++;
    else DIGITS();
    if (j->pos < e && p[j->pos] == '.') { j->pos++; DIGITS(); }
    if (j->pos < e && (p[j->pos] == 'e' || p[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < e && (p[j->pos] == '+' || p[j->pos] == '-')) j->pos++;
        DIGITS();
    }
#undef DIGITS
    return 0;
}

static int scalar(struct cj_json *j)
{
    switch (cj_json_peek(j)) {
    case '"': return cj_json_string(j, NULL, 0);
    case 't': return literal(j, "true");
    case 'f': return literal(j, "false");
    case 'n': return literal(j, "null");
    case -1: return cj_json_bad(j, "value expected");
    default:
        if (j->p[j->pos] == '-' || (j->p[j->pos] >= '0' && j->p[j->pos] <= '9')) return number(j);
        return cj_json_bad(j, "unexpected character");
    }
}

/* A key and its ':' inside an object being skipped. */
static int key(struct cj_json *j)
{
    int rc = cj_json_string(j, NULL, 0);
    return rc ? rc : cj_json_expect(j, ':');
}

/* Skips one JSON value of any shape, iteratively, nesting capped. */
int cj_json_skip(struct cj_json *j, int max_depth)
{
    char stack[CJ_JSON_DEPTH_CAP];
    if (max_depth > CJ_JSON_DEPTH_CAP) max_depth = CJ_JSON_DEPTH_CAP;
    int d = 0, rc;
    for (;;) {   /* a value is expected here */
        int c = cj_json_peek(j);
        if (c == '{' || c == '[') {
            if (d == max_depth)
                return cj_fail(j->err, CJ_E_LIMIT, j->pos, "%s: JSON nested deeper than %d at offset %zu",
                               j->who, max_depth, j->pos);
            stack[d++] = (char)c;
            j->pos++;
            if (cj_json_peek(j) != (c == '{' ? '}' : ']')) {
                if (c == '{' && (rc = key(j))) return rc;
                continue;
            }
            j->pos++;
            d--;
        } else if ((rc = scalar(j))) {
            return rc;
        }
        /* a value ended: close finished containers, or move to the next value */
        for (;;) {
            if (d == 0) return 0;
            c = cj_json_peek(j);
            if (c == ',') {
                j->pos++;
                if (stack[d - 1] == '{' && (rc = key(j))) return rc;
                break;
            }
            if (c != (stack[d - 1] == '{' ? '}' : ']')) return cj_json_bad(j, "expected ',' or a closing bracket");
            j->pos++;
            d--;
        }
    }
}

/* ---- a whole object ------------------------------------------------------------------ */

/* A number member: its text checked by the grammar, then converted. */
static int number_value(struct cj_json *j, struct cj_json_val *v)
{
    size_t start = j->pos;
    int rc = number(j);
    if (rc) return rc;
    char buf[128];
    size_t n = j->pos - start;
    if (n >= sizeof buf)
        return cj_fail(j->err, CJ_E_LIMIT, start, "%s: number longer than %zu characters at offset %zu", j->who,
                       sizeof buf - 1, start);
    memcpy(buf, j->p + start, n);
    buf[n] = '\0';
    v->type = CJ_JSON_NUMBER;
    v->d = strtod(buf, NULL);
    if (!memchr(buf, '.', n) && !memchr(buf, 'e', n) && !memchr(buf, 'E', n)) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        if (errno == 0) { v->is_int = true; v->i = x; }
    }
    return 0;
}

/* One member's value (whitespace before it skipped); a string is decoded into sbuf (cap bytes). */
static int member_value(struct cj_json *j, struct cj_json_val *v, char *sbuf, size_t cap)
{
    memset(v, 0, sizeof *v);
    int c = cj_json_peek(j), rc;
    size_t start = j->pos;
    switch (c) {
    case '{': case '[':
        v->type = c == '{' ? CJ_JSON_OBJECT : CJ_JSON_ARRAY;
        rc = cj_json_skip(j, CJ_JSON_MAX_DEPTH);
        break;
    case '"':
        v->type = CJ_JSON_STRING;
        rc = cj_json_string(j, sbuf, cap);
        v->s = sbuf;
        v->s_len = rc ? 0 : strlen(sbuf);
        break;
    case 't': case 'f': v->type = CJ_JSON_BOOL; rc = cj_json_bool(j, &v->b); break;
    case 'n': v->type = CJ_JSON_NULL; rc = literal(j, "null"); break;
    case -1: return cj_json_bad(j, "value expected");
    default:
        if (c != '-' && (c < '0' || c > '9')) return cj_json_bad(j, "unexpected character");
        rc = number_value(j, v);
        break;
    }
    if (rc) return rc;
    v->raw = (const char *)j->p + start;
    v->raw_len = j->pos - start;
    return 0;
}

static int walk_members(struct cj_json *j, char *kbuf, char *vbuf, size_t cap, cj_json_member_cb cb, void *ud)
{
    int rc;
    j->pos++;   /* the '{' */
    if (cj_json_peek(j) == '}') { j->pos++; return 0; }
    for (;;) {
        struct cj_json_val v;
        if ((rc = cj_json_string(j, kbuf, cap)) || (rc = cj_json_expect(j, ':')) ||
            (rc = member_value(j, &v, vbuf, cap)))
            return rc;
        if (cb && (rc = cb(ud, kbuf, strlen(kbuf), &v, j->err))) return rc;
        int c = cj_json_peek(j);
        if (c == ',') { j->pos++; continue; }
        if (c == '}') { j->pos++; return 0; }
        if (c < 0) return cj_fail(j->err, CJ_E_TRUNCATED, j->pos, "%s: unterminated object at offset %zu", j->who, j->pos);
        return cj_json_bad(j, "expected ',' or '}'");
    }
}

int cj_json_object_walk(const char *json, size_t len, cj_json_member_cb cb, void *ud, struct cj_err *err)
{
    struct cj_json j = {.p = (const uint8_t *)json, .end = len, .who = "json", .err = err, .bad_prefix = ""};
    int c = cj_json_peek(&j);
    if (c != '{')
        return cj_fail(err, c < 0 ? CJ_E_TRUNCATED : CJ_E_TYPE, j.pos, "json: expected an object at offset %zu", j.pos);
    /* Decoded strings are never longer than their JSON text: one scratch buffer
     * for the key and one for the value, each as large as the input. */
    char *scratch = malloc(2 * len + 2);
    if (!scratch) return cj_fail(err, CJ_E_NOMEM, 0, "json: out of memory");
    int rc = walk_members(&j, scratch, scratch + len + 1, len + 1, cb, ud);
    if (!rc && cj_json_peek(&j) != -1) rc = cj_json_bad(&j, "trailing characters after the object");
    explicit_bzero(scratch, 2 * len + 2);
    free(scratch);
    return rc;
}
