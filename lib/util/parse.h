/* SPDX-License-Identifier: Apache-2.0 */
/* parse.h — strict parsers for configuration values and command-line options.
 *
 * Every parser takes the whole string (no leading or trailing blanks, no trailing
 * junk), returns 0 and stores the value, or returns -1, leaves *out alone and
 * points *why (when not NULL) at a static sentence saying what was wrong. */
#ifndef CJ_UTIL_PARSE_H
#define CJ_UTIL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest duration accepted, seconds (about 31 years): keeps every later
 * conversion to milliseconds or microseconds far from overflow. */
#define CJ_DURATION_MAX 1e9

/* Seconds, decimals allowed: "10", "0.5", ".25", "3.". No sign, exponent, hex,
 * inf or nan. */
int cj_parse_duration(const char *s, double *out, const char **why);

/* Bytes: digits with an optional K, M or G suffix (powers of 1024, either case):
 * "0", "4096", "64M", "2G". At most INT64_MAX. */
int cj_parse_size(const char *s, int64_t *out, const char **why);

/* A decimal integer with an optional '-': "1", "-3". */
int cj_parse_int(const char *s, long long *out, const char **why);

/* true/false, yes/no, on/off, 1/0 (any case). */
int cj_parse_bool(const char *s, bool *out, const char **why);

/* A file mode in octal, 1 to 5 digits, at most 07777: "0660", "600". */
int cj_parse_mode(const char *s, unsigned *out, const char **why);

/* True when s is valid UTF-8 without control characters (what a config value
 * may contain, so that it can be logged and put into JSON as it is). */
bool cj_text_ok(const char *s);

/* Edit distance between a and b (insert, delete, substitute cost 1).  Strings
 * longer than 64 bytes give a distance of at least their length difference and
 * are compared on their first 64 bytes only. */
size_t cj_levenshtein(const char *a, const char *b);

/* ---- endpoints: unix:PATH, uds://PATH, SCHEME://HOST:PORT ----------------------
 * The schemes are FLARE's (doc/protocol/sfm.md §1): tcp and stcp carry SFM
 * frames bare, http/https in WebSocket messages, grpc/grpcs in gRPC messages;
 * the second of each pair is the TLS one.  uds://PATH is the same Unix socket
 * as unix:/PATH, spelled as the URL of cjrelay_flare's FLARE comm driver
 * (always absolute; "uds://run/x.sock" is /run/x.sock). */

enum cj_ep_kind {
    CJ_EP_UNIX = 1, CJ_EP_TCP = 2, CJ_EP_STCP = 4,
    CJ_EP_HTTP = 8, CJ_EP_HTTPS = 16, CJ_EP_GRPC = 32, CJ_EP_GRPCS = 64,
};
#define CJ_EP_TLS (CJ_EP_STCP | CJ_EP_HTTPS | CJ_EP_GRPCS)
#define CJ_EP_NET (CJ_EP_TCP | CJ_EP_HTTP | CJ_EP_GRPC | CJ_EP_TLS)  /* every network scheme */
#define CJ_EP_CARRIED (CJ_EP_HTTP | CJ_EP_HTTPS | CJ_EP_GRPC | CJ_EP_GRPCS) /* frames inside messages */
#define CJ_EP_PORT0 0x1000u     /* not a kind: in `allowed`, port 0 is accepted (a listener the kernel gives a port) */

/* "unix", "tcp", "stcp", "http", "https", "grpc" or "grpcs". */
const char *cj_ep_scheme(int kind);

/* True for the TLS schemes (stcp, https, grpcs). */
static inline bool cj_ep_tls(int kind) { return (kind & CJ_EP_TLS) != 0; }

#define CJ_EP_ADDR_MAX 256      /* host name (253) or socket path */
#define CJ_SUN_PATH_MAX 107     /* sizeof(sockaddr_un.sun_path) - 1 */

struct cj_endpoint {
    int kind;                   /* enum cj_ep_kind */
    unsigned port;              /* tcp/stcp: 1..65535 */
    char addr[CJ_EP_ADDR_MAX];  /* host without [] for IPv6, or the socket path */
    bool uds;                   /* unix: written uds://PATH, and formatted back so */
};

/* Parses one endpoint whose kind is in the bit set `allowed`.  HOST is a name
 * (letters, digits, '.', '-', '_'), an IPv4 address or [IPv6]. */
int cj_parse_endpoint(const char *s, unsigned allowed, struct cj_endpoint *ep,
                      const char **why);

/* unix: always true; tcp: 127.0.0.0/8, ::1, ::ffff:127.x.x.x or "localhost". */
bool cj_endpoint_is_loopback(const struct cj_endpoint *ep);

/* Canonical text ("tcp://[::1]:80"); snprintf-style return. */
int cj_endpoint_format(const struct cj_endpoint *ep, char *buf, size_t len);

#endif
