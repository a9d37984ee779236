/* SPDX-License-Identifier: Apache-2.0 */
/* fqcn.c — FQCN validation and tree relations (see fqcn.h). */
#include "wire/fqcn.h"

#include <string.h>

static bool part_char_ok(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '~' || c == '-';
}

/* True when the part s[at..at+n) equals an earlier part of s[0..at). */
static bool part_seen_before(const char *s, size_t at, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i <= at; i++) {
        if (i == at || s[i] == '.') {
            if (i < at && i - start == n && memcmp(s + start, s + at, n) == 0) return true;
            start = i + 1;
        }
    }
    return false;
}

int cj_fqcn_check(const char *s, size_t len, struct cj_err *err)
{
    if (!s || len == 0) return cj_fail(err, CJ_E_INVALID, 0, "fqcn: empty name");
    if (len > CJ_FQCN_MAX)
        return cj_fail(err, CJ_E_LIMIT, CJ_FQCN_MAX, "fqcn: name is %zu bytes, limit %d", len, CJ_FQCN_MAX);
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            if (i == start) return cj_fail(err, CJ_E_INVALID, i, "fqcn: empty part at offset %zu", i);
            if (part_seen_before(s, start, i - start))
                return cj_fail(err, CJ_E_INVALID, start, "fqcn: part '%.*s' repeated at offset %zu",
                               (int)(i - start), s + start, start);
            start = i + 1;
        } else if (!part_char_ok((unsigned char)s[i])) {
            return cj_fail(err, CJ_E_INVALID, i, "fqcn: bad character 0x%02x at offset %zu",
                           (unsigned char)s[i], i);
        }
    }
    return 0;
}

bool cj_fqcn_valid(const char *s)
{
    return s && cj_fqcn_check(s, strlen(s), NULL) == 0;
}

int cj_fqcn_gen(const char *s)
{
    if (!s || !*s) return 0;
    int n = 1;
    for (; *s; s++)
        if (*s == '.') n++;
    return n;
}

size_t cj_fqcn_root_len(const char *s)
{
    return s ? strcspn(s, ".") : 0;
}

bool cj_fqcn_is_server(const char *s)
{
    size_t n = cj_fqcn_root_len(s);
    return n == strlen(CJ_FQCN_SERVER) && memcmp(s, CJ_FQCN_SERVER, n) == 0;
}

int cj_fqcn_parent(const char *s, char *out, size_t outsz)
{
    const char *dot = s ? strrchr(s, '.') : NULL;
    if (!dot) return -1;
    size_t n = (size_t)(dot - s);
    if (n + 1 > outsz) return -1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

bool cj_fqcn_is_ancestor(const char *a, const char *b)
{
    if (!a || !b) return false;
    size_t n = strlen(a);
    return n > 0 && strncmp(a, b, n) == 0 && b[n] == '.';
}

bool cj_fqcn_is_direct_child(const char *parent, const char *child, const char **leaf)
{
    if (!cj_fqcn_is_ancestor(parent, child)) return false;
    const char *l = child + strlen(parent) + 1;
    if (!*l || strchr(l, '.')) return false;
    if (leaf) *leaf = l;
    return true;
}
