/* SPDX-License-Identifier: Apache-2.0 */
/* text.c — UTF-8 checks and random bytes (see text.h). */
#include "util/text.h"

#include <errno.h>
#include <sys/random.h>

size_t cj_utf8_seq(const uint8_t *p, size_t n)
{
    uint32_t cp;
    return cj_utf8_decode(p, n, &cp);
}

size_t cj_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp_out)
{
    uint8_t c = p[0];
    if (c < 0x80) { *cp_out = c; return 1; }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    *cp_out = cp;
    return len;
}

size_t cj_utf8_put(uint32_t cp, uint8_t *o)
{
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xc0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xe0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (uint8_t)(0xf0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

size_t cj_utf8_prefix(const uint8_t *p, size_t n, size_t max_chars)
{
    size_t i = 0, chars = 0, cut = n;
    while (i < n) {
        if (p[i] == 0) return SIZE_MAX;
        size_t l = cj_utf8_seq(p + i, n - i);
        if (!l) return SIZE_MAX;
        if (chars == max_chars && cut == n) cut = i;
        chars++;
        i += l;
    }
    return cut;
}

int cj_random_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int cj_random_hex(char *out, size_t nchars)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t r[64];
    if (nchars % 2 || nchars / 2 > sizeof r || cj_random_bytes(r, nchars / 2)) return -1;
    for (size_t i = 0; i < nchars / 2; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[nchars] = '\0';
    return 0;
}
