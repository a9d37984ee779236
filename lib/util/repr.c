/* SPDX-License-Identifier: Apache-2.0 */
/* repr.c — Python's repr() of str and float (see repr.h). */
#include "util/repr.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

/* Assigned code points past ASCII that str.isprintable() rejects: the C1
 * controls and NBSP, format characters (Cf), separators other than space (Zs,
 * Zl, Zp), surrogates and private use (Cs, Co). */
static const uint32_t unprintable[][2] = {
    {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},     {0x6dd, 0x6dd},
    {0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},     {0x1680, 0x1680},   {0x180e, 0x180e},
    {0x2000, 0x200f},   {0x2028, 0x202f},   {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},
    {0xd800, 0xf8ff},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
    {0x13430, 0x13438}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001}, {0xe0020, 0xe007f},
    {0xf0000, 0xffffd}, {0x100000, 0x10fffd},
};

static bool printable(uint32_t cp)
{
    if (cp < 0x80) return cp >= 0x20 && cp != 0x7f;
    if ((cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) == 0xfffe) return false;   /* noncharacters */
    for (size_t i = 0; i < sizeof unprintable / sizeof unprintable[0]; i++)
        if (cp >= unprintable[i][0] && cp <= unprintable[i][1]) return false;
    return true;
}

/* The text of one character inside quotes q; returns its length (at most 10). */
static size_t escape_char(const uint8_t *p, size_t len, uint32_t cp, char q, char tmp[12])
{
    if (cp == '\\' || cp == (uint32_t)q) return (size_t)snprintf(tmp, 12, "\\%c", (char)cp);
    if (cp == '\n') return (size_t)snprintf(tmp, 12, "\\n");
    if (cp == '\t') return (size_t)snprintf(tmp, 12, "\\t");
    if (cp == '\r') return (size_t)snprintf(tmp, 12, "\\r");
    if (printable(cp)) {
        memcpy(tmp, p, len);
        return len;
    }
    if (cp < 0x100) return (size_t)snprintf(tmp, 12, "\\x%02x", (unsigned)cp);
    if (cp < 0x10000) return (size_t)snprintf(tmp, 12, "\\u%04x", (unsigned)cp);
    return (size_t)snprintf(tmp, 12, "\\U%08x", (unsigned)cp);
}

void cj_repr_str(char *out, size_t n, const char *s)
{
    if (n < 8) {
        if (n) out[0] = 0;
        return;
    }
    char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
    const uint8_t *p = (const uint8_t *)s;
    size_t left = strlen(s), o = 0;
    out[o++] = q;
    while (left) {
        uint32_t cp;
        size_t len = cj_utf8_decode(p, left, &cp), l;
        char tmp[12];
        if (len) {
            l = escape_char(p, len, cp, q, tmp);
        } else {   /* not UTF-8 (callers validate first): the byte as \xNN */
            len = 1;
            l = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", *p);
        }
        if (o + l + 5 > n) {   /* room for "...", the quote and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, tmp, l);
        o += l;
        p += len;
        left -= len;
    }
    out[o++] = q;
    out[o] = 0;
}

void cj_repr_float(char *out, size_t n, double f)
{
    if (isnan(f)) {
        snprintf(out, n, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, n, "%sinf", f < 0 ? "-" : "");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {   /* shortest text that reads back */
        snprintf(out, n, "%.*g", prec, f);
        if (strtod(out, NULL) == f) break;
    }
    if (!strpbrk(out, ".e") && strlen(out) + 3 <= n) strcat(out, ".0");
}
