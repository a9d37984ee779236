/* SPDX-License-Identifier: Apache-2.0 */
/* wsupgrade.c — the HTTP/1.1 WebSocket upgrade (see wsupgrade.h). */
#include "net/wsupgrade.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "util/text.h"

static const char WS_GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

int cj_wsup_new_key(char key[CJ_WSUP_KEY_LEN + 1])
{
    unsigned char raw[16];
    if (cj_random_bytes(raw, sizeof raw) < 0) return -1;
    EVP_EncodeBlock((unsigned char *)key, raw, sizeof raw);
    return 0;
}

void cj_wsup_accept(const char *key, char out[CJ_WSUP_ACCEPT_LEN + 1])
{
    unsigned char md[SHA_DIGEST_LENGTH];
    char both[128];
    int n = snprintf(both, sizeof both, "%s%s", key, WS_GUID);
    SHA1((const unsigned char *)both, n > 0 && (size_t)n < sizeof both ? (size_t)n : 0, md);
    EVP_EncodeBlock((unsigned char *)out, md, sizeof md);
}

int cj_wsup_request(struct evbuffer *out, const char *host, const char *path, const char *key)
{
    return evbuffer_add_printf(out,
                               "GET %s HTTP/1.1\r\n"
                               "Host: %s\r\n"
                               "Upgrade: websocket\r\n"
                               "Connection: Upgrade\r\n"
                               "Sec-WebSocket-Key: %s\r\n"
                               "Sec-WebSocket-Version: 13\r\n"
                               "\r\n",
                               path, host, key) < 0 ? -1 : 0;
}

/* ---- the header block ---------------------------------------------------------------- */

struct head {
    char text[CJ_WSUP_MAX_HEAD + 1]; /* the block, NUL-terminated, CRLFs kept */
    size_t len;                      /* bytes of in it takes, blank line included */
};

/* The printable start of the input, for messages: up to n bytes, others as '.'. */
static void quote_start(struct evbuffer *in, char *q, size_t n)
{
    unsigned char raw[64];
    if (n > sizeof raw) n = sizeof raw;
    ev_ssize_t got = evbuffer_copyout(in, raw, n - 1);
    size_t i = 0;
    for (; got > 0 && i < (size_t)got; i++) q[i] = isprint(raw[i]) ? (char)raw[i] : '.';
    q[i] = '\0';
}

/* 1 with the block in h, 0 when in has no blank line yet, -code when it is too long. */
static int read_head(struct evbuffer *in, struct head *h, struct cj_err *err)
{
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(in) <= CJ_WSUP_MAX_HEAD) return 0;
        char q[48];
        quote_start(in, q, sizeof q);
        return cj_fail(err, CJ_E_LIMIT, CJ_WSUP_MAX_HEAD, "no end of the HTTP header in its first %d bytes: \"%s\"",
                       CJ_WSUP_MAX_HEAD, q);
    }
    h->len = (size_t)end.pos + 4;
    if (h->len > CJ_WSUP_MAX_HEAD)
        return cj_fail(err, CJ_E_LIMIT, 0, "HTTP header of %zu bytes (at most %d)", h->len, CJ_WSUP_MAX_HEAD);
    evbuffer_copyout(in, h->text, h->len);
    h->text[h->len] = '\0';
    return 1;
}

/* The value of header name (first occurrence, trimmed) into val; false if absent. */
static bool header(const struct head *h, const char *name, char *val, size_t vlen)
{
    size_t nl = strlen(name);
    const char *line = strstr(h->text, "\r\n");
    while (line && line[2] != '\r') {
        line += 2;
        const char *eol = strstr(line, "\r\n");
        if (!eol) break;
        if ((size_t)(eol - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) v++;
            const char *e = eol;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
            size_t n = (size_t)(e - v) < vlen - 1 ? (size_t)(e - v) : vlen - 1;
            memcpy(val, v, n);
            val[n] = '\0';
            return true;
        }
        line = eol;
    }
    return false;
}

/* True when the comma-separated list holds token (any case). */
static bool has_token(const char *list, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
        if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0) return true;
        p = e;
    }
    return false;
}

/* The first line of the block, for messages. */
static void first_line(const struct head *h, char *out, size_t n)
{
    size_t l = strcspn(h->text, "\r\n");
    if (l > n - 1) l = n - 1;
    for (size_t i = 0; i < l; i++) out[i] = isprint((unsigned char)h->text[i]) ? h->text[i] : '.';
    out[l] = '\0';
}

/* Upgrade: websocket and Connection: upgrade, shared by both sides' checks. */
static int check_upgrade_headers(const struct head *h, struct cj_err *err)
{
    char v[256];
    if (!header(h, "Upgrade", v, sizeof v) || strcasecmp(v, "websocket") != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "no \"Upgrade: websocket\" header");
    if (!header(h, "Connection", v, sizeof v) || !has_token(v, "upgrade"))
        return cj_fail(err, CJ_E_INVALID, 0, "no \"Connection: upgrade\" header");
    return 0;
}

/* ---- client: the server's answer ------------------------------------------------------ */

int cj_wsup_response(struct evbuffer *in, const char *key, struct cj_err *err)
{
    struct head h;
    int r = read_head(in, &h, err);
    if (r <= 0) return r;
    char status[96];
    first_line(&h, status, sizeof status);
    int code = 0;
    if (sscanf(h.text, "HTTP/1.%*1[01] %3d", &code) != 1 || code != 101) {
        char q[48];
        quote_start(in, q, sizeof q);
        return cj_fail(err, CJ_E_INVALID, 0, "upgrade refused: \"%s\" (first bytes \"%s\")", status, q);
    }
    if ((r = check_upgrade_headers(&h, err)) < 0) return r;
    char got[64], want[CJ_WSUP_ACCEPT_LEN + 1];
    cj_wsup_accept(key, want);
    if (!header(&h, "Sec-WebSocket-Accept", got, sizeof got))
        return cj_fail(err, CJ_E_MISSING, 0, "101 without Sec-WebSocket-Accept");
    if (strcmp(got, want) != 0)
        return cj_fail(err, CJ_E_INVALID, 0, "bad Sec-WebSocket-Accept \"%.40s\" (expected \"%s\")", got, want);
    if (header(&h, "Sec-WebSocket-Extensions", got, sizeof got))
        return cj_fail(err, CJ_E_INVALID, 0, "the server chose extension \"%.40s\", none was offered", got);
    evbuffer_drain(in, h.len);
    return 1;
}

/* ---- server: the client's request ------------------------------------------------------ */

static int refuse(struct evbuffer *out, const char *status, int rc)
{
    evbuffer_add_printf(out, "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
    return rc;
}

int cj_wsup_serve(struct evbuffer *in, const char *path, struct evbuffer *out, struct cj_err *err)
{
    struct head h;
    int r = read_head(in, &h, err);
    if (r == 0) return 0;
    if (r < 0) return refuse(out, "431 Request Header Fields Too Large", r);
    char method[8], target[256], line[96];
    first_line(&h, line, sizeof line);
    if (sscanf(h.text, "%7s %255s HTTP/1.1\r", method, target) != 2 || strcmp(method, "GET") != 0)
        return refuse(out, "400 Bad Request", cj_fail(err, CJ_E_INVALID, 0, "not a GET upgrade: \"%s\"", line));
    if (strcmp(target, path) != 0)
        return refuse(out, "404 Not Found", cj_fail(err, CJ_E_INVALID, 0, "upgrade for %.64s, served: %s", target, path));
    if ((r = check_upgrade_headers(&h, err)) < 0) return refuse(out, "400 Bad Request", r);
    char v[64] = "";
    if (!header(&h, "Sec-WebSocket-Version", v, sizeof v) || strcmp(v, "13") != 0)
        return refuse(out, "426 Upgrade Required\r\nSec-WebSocket-Version: 13",
                      cj_fail(err, CJ_E_INVALID, 0, "WebSocket version \"%.16s\", not 13", v));
    if (!header(&h, "Sec-WebSocket-Key", v, sizeof v) || strlen(v) != CJ_WSUP_KEY_LEN)
        return refuse(out, "400 Bad Request", cj_fail(err, CJ_E_INVALID, 0, "no 24-character Sec-WebSocket-Key"));
    char accept[CJ_WSUP_ACCEPT_LEN + 1];
    cj_wsup_accept(v, accept);
    evbuffer_drain(in, h.len);
    evbuffer_add_printf(out,
                        "HTTP/1.1 101 Switching Protocols\r\n"
                        "Upgrade: websocket\r\n"
                        "Connection: Upgrade\r\n"
                        "Sec-WebSocket-Accept: %s\r\n"
                        "\r\n",
                        accept);
    return 1;
}
