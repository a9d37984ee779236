/* SPDX-License-Identifier: Apache-2.0 */
/* parse.c — strict value parsers (durations, sizes, booleans, modes, endpoints).
 *
 * Hand-written on purpose: strtod/strtoll accept blanks, signs, hex, exponents,
 * "inf" and "nan" and depend on the locale; a config value must mean one thing. */
#include "util/parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int bad(const char **why, const char *msg)
{
    if (why) *why = msg;
    return -1;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---- durations --------------------------------------------------------------- */

int cj_parse_duration(const char *s, double *out, const char **why)
{
    const char *p = s, *ip = s;
    size_t nint, nfrac = 0;
    double frac = 0, scale = 1, v = 0;
    if (*p == '-') return bad(why, "must not be negative");
    while (is_digit(*p)) p++;
    nint = (size_t)(p - ip);
    if (*p == '.') {
        for (p++; is_digit(*p); p++, nfrac++) {
            if (nfrac < 15) { frac = frac * 10 + (*p - '0'); scale *= 10; }
        }
    }
    if (*p || nint + nfrac == 0) return bad(why, "expected seconds, e.g. 10 or 0.5");
    while (nint > 0 && *ip == '0') { ip++; nint--; }   /* leading zeros do not count */
    if (nint > 10) return bad(why, "too large (at most 1e9 seconds)");
    for (const char *q = ip; q < ip + nint; q++) v = v * 10 + (*q - '0');
    v += frac / scale;                           /* both exact: one rounding */
    if (v > CJ_DURATION_MAX) return bad(why, "too large (at most 1e9 seconds)");
    *out = v;
    return 0;
}

/* ---- sizes and integers ----------------------------------------------------------- */

static int suffix_shift(char c)
{
    switch (c) {
    case 'k': case 'K': return 10;
    case 'm': case 'M': return 20;
    case 'g': case 'G': return 30;
    default: return -1;
    }
}

/* Reads the digits at *pp into *v (at most INT64_MAX); -1 on overflow. */
static int read_digits(const char **pp, uint64_t *v)
{
    const char *p = *pp;
    uint64_t x = 0;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *pp = p;
    *v = x;
    return 0;
}

int cj_parse_size(const char *s, int64_t *out, const char **why)
{
    const char *p = s;
    uint64_t v;
    if (*p == '-') return bad(why, "must not be negative");
    if (!is_digit(*p)) return bad(why, "expected bytes, e.g. 4096, 64M or 2G");
    if (read_digits(&p, &v) < 0) return bad(why, "too large");
    int shift = 0;
    if (*p) {
        shift = suffix_shift(*p++);
        if (shift < 0 || *p) return bad(why, "expected bytes, e.g. 4096, 64M or 2G");
    }
    if (v > ((uint64_t)INT64_MAX >> shift)) return bad(why, "too large");
    *out = (int64_t)(v << shift);
    return 0;
}

int cj_parse_int(const char *s, long long *out, const char **why)
{
    const char *p = s;
    bool neg = (*p == '-');
    uint64_t v;
    if (neg) p++;
    if (!is_digit(*p)) return bad(why, "expected an integer");
    if (read_digits(&p, &v) < 0) return bad(why, "too large");
    if (*p) return bad(why, "expected an integer");
    *out = neg ? -(long long)v : (long long)v;
    return 0;
}

/* ---- booleans and modes --------------------------------------------------------- */

int cj_parse_bool(const char *s, bool *out, const char **why)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (!strcasecmp(s, yes[i])) { *out = true; return 0; }
        if (!strcasecmp(s, no[i])) { *out = false; return 0; }
    }
    return bad(why, "expected true/false, yes/no, on/off or 1/0");
}

int cj_parse_mode(const char *s, unsigned *out, const char **why)
{
    unsigned v = 0;
    size_t n = 0;
    for (const char *p = s; *p; p++, n++) {
        if (*p < '0' || *p > '7' || n >= 5) return bad(why, "expected an octal mode, e.g. 0660");
        v = v * 8 + (unsigned)(*p - '0');
    }
    if (n == 0) return bad(why, "expected an octal mode, e.g. 0660");
    if (v > 07777) return bad(why, "too large (at most 07777)");
    *out = v;
    return 0;
}

/* ---- text ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at p, 0 when invalid (overlong, surrogate,
 * above U+10FFFF, truncated). */
static size_t utf8_seq(const unsigned char *p)
{
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (n == 0 || p[0] > 0xf4) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0;     /* overlong */
    if (n == 3 && p[0] == 0xed && p[1] >= 0xa0) return 0;    /* surrogate */
    if (n == 4 && p[0] == 0xf0 && p[1] < 0x90) return 0;     /* overlong */
    if (n == 4 && p[0] == 0xf4 && p[1] >= 0x90) return 0;    /* > U+10FFFF */
    return n;
}

bool cj_text_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p < 0x20 || *p == 0x7f) return false;
        size_t n = utf8_seq(p);
        if (n == 0) return false;
        p += n;
    }
    return true;
}

size_t cj_levenshtein(const char *a, const char *b)
{
    enum { MAXL = 64 };
    size_t la = strlen(a), lb = strlen(b);
    size_t extra = (la > lb ? la - lb : lb - la);
    if (la > MAXL || lb > MAXL) {
        la = la > MAXL ? MAXL : la;
        lb = lb > MAXL ? MAXL : lb;
    } else {
        extra = 0;
    }
    size_t row[MAXL + 1];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];                    /* row[i-1][j-1] */
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > extra ? row[lb] : extra;
}

/* ---- endpoints --------------------------------------------------------------------- */

static bool host_name_ok(const char *h)
{
    if (!*h) return false;
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_') return false;
    return true;
}

/* "PORT" (1..65535, or 0 with port0) and nothing after it. */
static int parse_port(const char *p, bool port0, unsigned *port, const char **why)
{
    unsigned v = 0;
    size_t n = 0;
    for (; is_digit(*p) && n < 6; p++, n++) v = v * 10 + (unsigned)(*p - '0');
    if (n == 0 || *p || (v == 0 && !port0) || v > 65535)
        return bad(why, port0 ? "expected :PORT (0..65535; 0: any free port) at the end"
                              : "expected :PORT (1..65535) at the end");
    *port = v;
    return 0;
}

/* "HOST:PORT" or "[V6]:PORT" after the scheme. */
static int parse_host_port(const char *hp, bool port0, struct cj_endpoint *e, const char **why)
{
    const char *end, *rest;
    struct in6_addr a6;
    if (*hp == '[') {
        end = strchr(hp, ']');
        if (!end) return bad(why, "missing ']' after an IPv6 address");
        hp++;
        rest = end + 1;
    } else {
        end = strrchr(hp, ':');
        if (!end) return bad(why, "missing :PORT");
        rest = end;
    }
    size_t n = (size_t)(end - hp);
    if (n == 0) return bad(why, "missing host");
    if (n > 253) return bad(why, "host name too long");
    memcpy(e->addr, hp, n);
    e->addr[n] = '\0';
    if (hp[-1] == '[') {
        if (inet_pton(AF_INET6, e->addr, &a6) != 1) return bad(why, "invalid IPv6 address");
    } else if (strchr(e->addr, ':')) {
        return bad(why, "an IPv6 address needs brackets: [::1]:PORT");
    } else if (!host_name_ok(e->addr)) {
        return bad(why, "invalid host name");
    }
    if (*rest != ':') return bad(why, "missing :PORT");
    return parse_port(rest + 1, port0, &e->port, why);
}

/* uds://PATH, FLARE's spelling of a Unix socket (a comm driver's URL): the
 * path is always absolute, its leading slashes optional ("uds://run/x.sock"
 * and "uds:///run/x.sock" name /run/x.sock); '?' and '#' would end a URL's
 * path, so they are refused. */
static int parse_uds_path(const char *rest, struct cj_endpoint *e, const char **why)
{
    while (*rest == '/') rest++;
    if (!*rest) return bad(why, "empty socket path");
    if (strpbrk(rest, "?#")) return bad(why, "a uds:// socket path cannot hold '?' or '#'");
    if (strlen(rest) + 1 > CJ_SUN_PATH_MAX) return bad(why, "socket path longer than 107 bytes");
    e->addr[0] = '/';
    strcpy(e->addr + 1, rest);
    e->uds = true;
    return 0;
}

/* The one table of URL schemes: prefix, kind, the refusal when not allowed. */
static const struct {
    const char *name, *prefix;
    int kind;
    const char *refused;
} SCHEMES[] = {
    {"unix", "unix:", CJ_EP_UNIX, "unix: is not allowed here"},
    {"uds", "uds://", CJ_EP_UNIX, "uds:// is not allowed here"},
    {"tcp", "tcp://", CJ_EP_TCP, "tcp:// is not allowed here"},
    {"stcp", "stcp://", CJ_EP_STCP, "stcp:// is not allowed here"},
    {"http", "http://", CJ_EP_HTTP, "http:// is not allowed here"},
    {"https", "https://", CJ_EP_HTTPS, "https:// is not allowed here"},
    {"grpc", "grpc://", CJ_EP_GRPC, "grpc:// is not allowed here"},
    {"grpcs", "grpcs://", CJ_EP_GRPCS, "grpcs:// is not allowed here"},
};
#define N_SCHEMES (sizeof SCHEMES / sizeof SCHEMES[0])

const char *cj_ep_scheme(int kind)
{
    for (size_t i = 0; i < N_SCHEMES; i++)
        if (SCHEMES[i].kind == kind) return SCHEMES[i].name;
    return "?";
}

int cj_parse_endpoint(const char *s, unsigned allowed, struct cj_endpoint *ep,
                      const char **why)
{
    struct cj_endpoint e = {0};
    const char *rest = NULL;
    size_t i = 0;
    for (; i < N_SCHEMES; i++)
        if (!strncmp(s, SCHEMES[i].prefix, strlen(SCHEMES[i].prefix))) break;
    if (i == N_SCHEMES)
        return bad(why, allowed & (CJ_EP_NET & ~(unsigned)(CJ_EP_TCP | CJ_EP_STCP))
                            ? "expected unix:PATH or tcp, stcp, http, https, grpc or grpcs://HOST:PORT"
                            : "expected unix:PATH, tcp://HOST:PORT or stcp://HOST:PORT");
    e.kind = SCHEMES[i].kind;
    rest = s + strlen(SCHEMES[i].prefix);
    if (!(allowed & (unsigned)e.kind)) return bad(why, SCHEMES[i].refused);
    if (!strcmp(SCHEMES[i].name, "uds")) {
        if (parse_uds_path(rest, &e, why) < 0) return -1;
    } else if (e.kind == CJ_EP_UNIX) {
        if (!*rest) return bad(why, "empty socket path");
        if (strlen(rest) > CJ_SUN_PATH_MAX) return bad(why, "socket path longer than 107 bytes");
        strcpy(e.addr, rest);
    } else if (parse_host_port(rest, (allowed & CJ_EP_PORT0) != 0, &e, why) < 0) {
        return -1;
    }
    *ep = e;
    return 0;
}

bool cj_endpoint_is_loopback(const struct cj_endpoint *ep)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (ep->kind == CJ_EP_UNIX) return true;
    if (!strcasecmp(ep->addr, "localhost")) return true;
    if (inet_pton(AF_INET, ep->addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, ep->addr, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

int cj_endpoint_format(const struct cj_endpoint *ep, char *buf, size_t len)
{
    const char *scheme = cj_ep_scheme(ep->kind);
    if (ep->kind == CJ_EP_UNIX && ep->uds) return snprintf(buf, len, "uds://%s", ep->addr + (ep->addr[0] == '/'));
    if (ep->kind == CJ_EP_UNIX) return snprintf(buf, len, "unix:%s", ep->addr);
    if (strchr(ep->addr, ':')) return snprintf(buf, len, "%s://[%s]:%u", scheme, ep->addr, ep->port);
    return snprintf(buf, len, "%s://%s:%u", scheme, ep->addr, ep->port);
}
