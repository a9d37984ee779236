/* SPDX-License-Identifier: Apache-2.0 */
/* cjhostile — a hostile peer for the fault and hostile-input end-to-end tests.
 * Plain blocking sockets and hand-made bytes: it says what a broken or malicious
 * peer says, not what the library would let it say.
 *
 *   cjhostile conn URL KIND [NAME]   connect to the relay's worker socket URL (unix:PATH or
 *                                    tcp://127.0.0.1:PORT), send KIND, wait up to --wait SECS
 *                                    (default 5) for the relay to close the connection.
 *       Before a handshake:
 *         garbage     an HTTP request instead of SFM frames
 *         oversized   a prefix claiming a 4 GiB frame
 *         bighello    a prefix claiming a 1 MiB HELLO (under max_message_size)
 *         shortlen    a prefix whose length (8) is shorter than the prefix itself
 *         hdrlie      a HELLO whose header_len (4000) runs past its length (40)
 *         badhello    a HELLO whose payload is malformed msgpack (map of 3, 1 entry)
 *         truncated   the first 20 bytes of a HELLO, then our side closes (half-close)
 *         data-first  a DATA frame before any HELLO
 *         hello       a well-formed HELLO as NAME (default site-1.J1.hostile)
 *       For the status socket (line protocol):
 *         junk        4 KiB of every byte value 0..255 (NULs, invalid UTF-8, some newlines)
 *         garbage     (as above: an HTTP request is also garbage to the status socket)
 *       After a good HELLO as NAME and the relay's READY:
 *         data-hdrlie a DATA frame whose header_len runs past its length
 *         data-badhdr a DATA frame whose header block is malformed msgpack
 *         data-huge   a DATA frame prefix claiming 3 GiB (over max_message_size)
 *         data-trunc  half a DATA frame, then our side closes
 *         data-big    a DATA frame prefix claiming --size BYTES (default 64M), then junk
 *                     bytes of it in 64 KiB pieces for as long as the relay reads them;
 *                     prints "SENT n bytes" (the relay must refuse a frame above its
 *                     max_message_size at the prefix, before reading or holding any of it)
 *     Prints "READY" when the relay answered the HELLO, then one line:
 *       "CLOSED after T s" (the relay closed: exit 0) or "OPEN after T s" (exit 1), then
 *       "ANSWER <first line the relay sent>" when it sent anything but frames.
 *   cjhostile flood URL N SECS      open N connections (as fast as possible), hold SECS,
 *                                    print "connected K of N", exit 0
 *   cjhostile serve PORT KIND [COUNT]  a fake upstream "server" on 127.0.0.1:PORT (0: any;
 *                                    prints "SERVE READY <port>"); for each of COUNT
 *                                    connections (default: forever) reads what the relay
 *                                    sends first, answers with KIND, closes, prints a line:
 *         garbage     HTTP text instead of READY
 *         oversized   a prefix claiming a 4 GiB frame
 *         badready    a READY whose payload is malformed msgpack
 *         data-badhdr a good READY, then a DATA frame with a malformed header block
 *         data-hdrlie a good READY, then a DATA frame whose header_len runs past its length
 *         plain       for an stcp:// url: a plain SFM READY frame as the answer to the
 *                     TLS ClientHello (a server that does not speak TLS)
 *         tlsmid      for an stcp:// url: the start of a TLS record claiming 16 KiB,
 *                     100 bytes of it, then close (a peer closing mid-record)
 *       For an http:// url (the relay sends a WebSocket upgrade):
 *         ws-refuse   HTTP/1.1 403 Forbidden
 *         ws-badaccept  101 with a Sec-WebSocket-Accept that is not the key's
 *         ws-garbage  a good 101, then a text message
 *         ws-oversized  a good 101, then a binary message header claiming 3 GiB
 *       For a grpc:// url (the relay sends the HTTP/2 preface and its call):
 *         h2-goaway   SETTINGS, the call's 200 answer, a DATA frame holding the start of a
 *                     1 MiB gRPC message, then GOAWAY (INTERNAL_ERROR, "going away")
 *         h2-nowindow SETTINGS with an initial stream window of 0, then silence until
 *                     the relay closes (its HELLO left under HTTP/2's first window; the
 *                     READY it waits for never comes)
 *
 * Bounded memory: fixed buffers only. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "net/wsupgrade.h"

static double wait_secs = 5;
static uint64_t big_size = 64u << 20;

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_url(const char *url)
{
    int fd;
    if (!strncmp(url, "unix:", 5)) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", url + 5);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    } else if (!strncmp(url, "tcp://", 6)) {
        const char *colon = strrchr(url + 6, ':');
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon ? colon + 1 : "0"))};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    } else {
        fprintf(stderr, "cjhostile: bad url %s\n", url);
        return -1;
    }
    if (fd >= 0) close(fd);
    return -1;
}

/* ---- hand-made frames ---------------------------------------------------------------- */

static size_t put_prefix(uint8_t *o, uint32_t length, uint16_t hlen, uint8_t type, uint16_t app, uint16_t sid,
                         uint16_t seq)
{
    o[0] = (uint8_t)(length >> 24); o[1] = (uint8_t)(length >> 16); o[2] = (uint8_t)(length >> 8); o[3] = (uint8_t)length;
    o[4] = (uint8_t)(hlen >> 8); o[5] = (uint8_t)hlen;
    o[6] = type; o[7] = 0; o[8] = 0; o[9] = 0;
    o[10] = (uint8_t)(app >> 8); o[11] = (uint8_t)app;
    o[12] = (uint8_t)(sid >> 8); o[13] = (uint8_t)sid;
    o[14] = (uint8_t)(seq >> 8); o[15] = (uint8_t)seq;
    return 16;
}

static size_t put_str(uint8_t *o, const char *s)
{
    size_t n = strlen(s);
    if (n > 255) {   /* str16 */
        o[0] = 0xda;
        o[1] = (uint8_t)(n >> 8);
        o[2] = (uint8_t)n;
        memcpy(o + 3, s, n);
        return n + 3;
    }
    o[0] = 0xd9;   /* str8 */
    o[1] = (uint8_t)n;
    memcpy(o + 2, s, n);
    return n + 2;
}

/* A HELLO (type 4) or READY (type 5) frame for name; returns its length. */
static size_t make_hello(uint8_t *o, uint8_t type, const char *name)
{
    uint8_t *p = o + 16;
    *p++ = 0x83;
    p += put_str(p, "endpoint_name");
    p += put_str(p, name);
    p += put_str(p, "timestamp");
    *p++ = 0xcb;   /* float64 1.7e9, big endian */
    double t = (double)time(NULL);
    uint64_t bits;
    memcpy(&bits, &t, 8);
    for (int i = 7; i >= 0; i--) *p++ = (uint8_t)(bits >> (i * 8));
    p += put_str(p, "fqcn");
    p += put_str(p, name);
    size_t len = (size_t)(p - o);
    put_prefix(o, (uint32_t)len, 0, type, 0, 1, 1);
    return len;
}

/* A DATA frame whose header block is 16 bytes of malformed msgpack. */
static size_t make_data_badhdr(uint8_t *o)
{
    static const uint8_t bad[16] = {0x85, 0xa8, 'c', 'n', '_', '_', 'f', 'r', 'o', 'm', 0xc1, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1};
    put_prefix(o, 16 + sizeof bad + 4, sizeof bad, 1, 1, 17, 2);
    memcpy(o + 16, bad, sizeof bad);
    memcpy(o + 16 + sizeof bad, "abcd", 4);
    return 16 + sizeof bad + 4;
}

static int send_all(int fd, const uint8_t *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until the peer closes or secs pass.  Returns 1 closed, 0 still open.
 * *got counts the bytes read; *ready is set when a READY prefix was seen first. */
static char answer[128];   /* the first bytes received (printable ones) */

static int wait_close(int fd, double secs, size_t *got)
{
    double end = now_mono() + secs;
    uint8_t buf[4096];
    for (;;) {
        double left = end - now_mono();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k == 0) return 1;
        if (k < 0) return errno == EINTR || errno == EAGAIN ? 0 : 1;   /* ECONNRESET: closed */
        for (ssize_t j = 0; j < k && *got == 0 && (size_t)j < sizeof answer - 1; j++) {
            if (buf[j] == '\n') break;
            answer[j] = buf[j] >= 0x20 && buf[j] < 0x7f ? (char)buf[j] : '.';
        }
        *got += (size_t)k;
    }
}

/* Reads one whole frame (prefix + up to sizeof buf) within secs; returns its type or -1. */
static int read_frame(int fd, uint8_t *buf, size_t cap, double secs)
{
    double end = now_mono() + secs;
    size_t have = 0, need = 16;
    while (have < need) {
        double left = end - now_mono();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) return -1;
        ssize_t k = recv(fd, buf + have, need - have, 0);
        if (k <= 0) return -1;
        have += (size_t)k;
        if (have == 16) {
            need = ((size_t)buf[0] << 24) | ((size_t)buf[1] << 16) | ((size_t)buf[2] << 8) | buf[3];
            if (need < 16 || need > cap) return -1;
        }
    }
    return buf[6];
}

/* ---- conn ---------------------------------------------------------------------------------- */

static int do_conn(const char *url, const char *kind, const char *name)
{
    uint8_t f[1024];
    size_t n = 0;
    int fd = connect_url(url);
    if (fd < 0) {
        printf("CONNECT FAILED %s: %s\n", url, strerror(errno));
        return 2;
    }
    double t0 = now_mono();
    bool after_hello = !strncmp(kind, "data-", 5) && strcmp(kind, "data-first");
    if (after_hello || !strcmp(kind, "hello")) {
        n = make_hello(f, 4, name);
        if (send_all(fd, f, n) < 0) goto closed;
        uint8_t r[1024];
        int t = read_frame(fd, r, sizeof r, wait_secs);
        if (t == 5) {
            printf("READY\n");
            fflush(stdout);
        } else goto closed;
        if (!strcmp(kind, "hello")) n = 0;
    }
    if (!strcmp(kind, "garbage")) {
        const char *g = "GET / HTTP/1.1\r\nHost: relay\r\n\r\n";
        memcpy(f, g, strlen(g));
        n = strlen(g);
    } else if (!strcmp(kind, "oversized")) {
        n = put_prefix(f, 0xfffffff0u, 0, 4, 0, 1, 1);
    } else if (!strcmp(kind, "bighello")) {
        n = put_prefix(f, 1u << 20, 0, 4, 0, 1, 1);
    } else if (!strcmp(kind, "junk")) {
        uint8_t j[4096];
        for (size_t x = 0; x < sizeof j; x++) j[x] = (uint8_t)(x * 7);
        if (send_all(fd, j, sizeof j) < 0) goto closed;
    } else if (!strcmp(kind, "shortlen")) {
        n = put_prefix(f, 8, 0, 4, 0, 1, 1);
    } else if (!strcmp(kind, "hdrlie")) {
        n = make_hello(f, 4, name);
        put_prefix(f, (uint32_t)n, 4000, 4, 0, 1, 1);
    } else if (!strcmp(kind, "badhello")) {
        n = 16;
        f[n++] = 0x83;
        n += put_str(f + n, "endpoint_name");
        n += put_str(f + n, name);
        put_prefix(f, (uint32_t)n, 0, 4, 0, 1, 1);
    } else if (!strcmp(kind, "truncated")) {
        make_hello(f, 4, name);
        n = 20;
    } else if (!strcmp(kind, "data-first") || !strcmp(kind, "data-badhdr")) {
        n = make_data_badhdr(f);
    } else if (!strcmp(kind, "data-hdrlie")) {
        n = make_data_badhdr(f);
        put_prefix(f, (uint32_t)n, 60000, 1, 1, 17, 2);
    } else if (!strcmp(kind, "data-huge")) {
        n = put_prefix(f, 3u << 30, 100, 1, 1, 17, 2);
    } else if (!strcmp(kind, "data-trunc")) {
        n = make_data_badhdr(f) / 2;
    } else if (strcmp(kind, "hello") && strcmp(kind, "data-big")) {
        fprintf(stderr, "cjhostile: unknown kind %s\n", kind);
        close(fd);
        return 2;
    }
    if (!strcmp(kind, "data-big")) {
        n = put_prefix(f, (uint32_t)(big_size > 0xffffffffu ? 0xffffffffu : big_size), 100, 1, 1, 17, 2);
        if (send_all(fd, f, n) < 0) goto closed;
        n = 0;
        uint8_t junk[65536];
        memset(junk, 0x5a, sizeof junk);
        uint64_t sent = 0;
        double end = now_mono() + wait_secs;
        while (sent < big_size && now_mono() < end) {
            struct pollfd pw = {.fd = fd, .events = POLLOUT};
            if (poll(&pw, 1, 100) <= 0) continue;
            if (pw.revents & (POLLERR | POLLHUP)) break;
            size_t k = big_size - sent < sizeof junk ? (size_t)(big_size - sent) : sizeof junk;
            ssize_t w = send(fd, junk, k, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (w <= 0) break;
            sent += (uint64_t)w;
        }
        printf("SENT %llu bytes\n", (unsigned long long)sent);
    }
    if (n && send_all(fd, f, n) < 0) goto closed;
    if (!strcmp(kind, "truncated") || !strcmp(kind, "data-trunc")) shutdown(fd, SHUT_WR);
    size_t got = 0;
    if (wait_close(fd, wait_secs, &got)) goto closed;
    printf("OPEN after %.2f s\n", now_mono() - t0);
    if (answer[0]) printf("ANSWER %s\n", answer);
    close(fd);
    return 1;
closed:
    printf("CLOSED after %.2f s\n", now_mono() - t0);
    if (answer[0]) printf("ANSWER %s\n", answer);
    close(fd);
    return 0;
}

/* ---- flood ----------------------------------------------------------------------------------- */

static int do_flood(const char *url, int n, double secs)
{
    if (n < 1 || n > 4096) n = 1;
    int *fds = calloc((size_t)n, sizeof *fds);
    int ok = 0;
    if (!fds) return 1;
    for (int i = 0; i < n; i++)
        if ((fds[i] = connect_url(url)) >= 0) ok++;
    /* Each also sends half a HELLO, so the relay holds a partial frame for each. */
    uint8_t f[512];
    make_hello(f, 4, "site-1.J1.flood");
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) send_all(fds[i], f, 10);
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    nanosleep(&ts, NULL);
    int still = 0;
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0) continue;
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        uint8_t b[64];
        if (!(poll(&p, 1, 0) == 1 && recv(fds[i], b, sizeof b, MSG_DONTWAIT) <= 0)) still++;
        close(fds[i]);
    }
    printf("connected %d of %d, %d still open after %g s\n", ok, n, still, secs);
    free(fds);
    return 0;
}

/* ---- serve ---------------------------------------------------------------------------------- */

/* A 101 answering the upgrade request in req (its key's accept), at o. */
static size_t ws_101(uint8_t *o, const uint8_t *req, size_t reqlen, bool good)
{
    char key[64] = "", acc[CJ_WSUP_ACCEPT_LEN + 1] = "AAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    const char *k = memmem(req, reqlen, "Sec-WebSocket-Key: ", 19);
    if (k) sscanf(k + 19, "%63[^\r]", key);
    if (good) cj_wsup_accept(key, acc);
    return (size_t)sprintf((char *)o, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acc);
}

/* An HTTP/2 frame header at o. */
static size_t h2_head(uint8_t *o, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
    o[0] = (uint8_t)(len >> 16); o[1] = (uint8_t)(len >> 8); o[2] = (uint8_t)len;
    o[3] = type; o[4] = flags;
    o[5] = (uint8_t)(stream >> 24); o[6] = (uint8_t)(stream >> 16); o[7] = (uint8_t)(stream >> 8); o[8] = (uint8_t)stream;
    return 9;
}

/* The gRPC server's side for the h2-* kinds at o. */
static size_t h2_answer(uint8_t *o, const char *kind)
{
    size_t n = 0;
    if (!strcmp(kind, "h2-nowindow")) {  /* SETTINGS_INITIAL_WINDOW_SIZE (4) = 0 */
        n += h2_head(o + n, 6, 4, 0, 0);
        static const uint8_t iv[6] = {0, 4, 0, 0, 0, 0};
        memcpy(o + n, iv, 6);
        return n + 6;
    }
    n += h2_head(o + n, 0, 4, 0, 0);                       /* SETTINGS */
    n += h2_head(o + n, 0, 4, 1, 0);                       /* ACK of the relay's */
    /* HEADERS, END_HEADERS: :status 200 (static 8), content-type (static 31, literal) */
    static const char ct[] = "application/grpc";
    n += h2_head(o + n, 4 + 16, 1, 4, 1);
    o[n++] = 0x88; o[n++] = 0x0f; o[n++] = 0x10; o[n++] = 16;
    memcpy(o + n, ct, 16);
    n += 16;
    /* DATA: the first 100 bytes of a 1 MiB gRPC message: prefix, data field
     * (tag 0x12, length 1048572 as a varint), an SFM prefix of that length */
    n += h2_head(o + n, 105, 0, 0, 1);
    static const uint8_t msg[13] = {0, 0, 0x10, 0, 0, 0x12, 0xfc, 0xff, 0x3f, 0, 0x0f, 0xff, 0xfc};
    memcpy(o + n, msg, 13);
    memset(o + n + 13, 0, 92);
    n += 105;
    /* GOAWAY: last stream 1, INTERNAL_ERROR (2), debug data */
    n += h2_head(o + n, 8 + 10, 7, 0, 0);
    static const uint8_t ga[8] = {0, 0, 0, 1, 0, 0, 0, 2};
    memcpy(o + n, ga, 8);
    memcpy(o + n + 8, "going away", 10);
    return n + 18;
}

static void serve_one(int fd, const char *kind, int i)
{
    uint8_t in[4096], f[1024];
    size_t n = 0;
    bool tls = !strcmp(kind, "plain") || !strcmp(kind, "tlsmid");
    /* what the relay sends first: a HELLO frame, or a TLS ClientHello */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t k = poll(&p, 1, 5000) == 1 ? recv(fd, in, sizeof in, 0) : -1;
    const char *first = k <= 0 ? "nothing" : in[0] == 0x16 ? "a TLS ClientHello" : k >= 16 && in[6] == 4 ? "a HELLO" : "bytes";
    if (!strcmp(kind, "garbage")) {
        const char *g = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        n = strlen(g);
        memcpy(f, g, n);
    } else if (!strcmp(kind, "oversized")) {
        n = put_prefix(f, 0xfffffff0u, 0, 5, 0, 1, 1);
    } else if (!strcmp(kind, "badready")) {
        n = 16;
        f[n++] = 0x83;
        n += put_str(f + n, "endpoint_name");
        put_prefix(f, (uint32_t)n, 0, 5, 0, 1, 1);
    } else if (!strcmp(kind, "data-badhdr") || !strcmp(kind, "data-hdrlie")) {
        n = make_hello(f, 5, "server");
        size_t m = make_data_badhdr(f + n);
        if (!strcmp(kind, "data-hdrlie")) put_prefix(f + n, (uint32_t)m, 60000, 1, 1, 17, 2);
        n += m;
    } else if (!strcmp(kind, "plain")) {
        n = make_hello(f, 5, "server");
    } else if (!strncmp(kind, "ws-", 3) && k > 0) {
        if (!strcmp(kind, "ws-refuse")) {
            n = (size_t)sprintf((char *)f, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        } else {
            n = ws_101(f, in, (size_t)k, strcmp(kind, "ws-badaccept") != 0);
            if (!strcmp(kind, "ws-garbage")) {
                memcpy(f + n, "\x81\x05hello", 7);
                n += 7;
            } else if (!strcmp(kind, "ws-oversized")) {
                static const uint8_t big[10] = {0x82, 0x7f, 0, 0, 0, 0, 0xc0, 0, 0, 0};
                memcpy(f + n, big, 10);
                memset(f + n + 10, 0, 64); /* the start of its payload */
                n += 74;
            }
        }
    } else if (!strncmp(kind, "h2-", 3)) {
        n = h2_answer(f, kind);
    } else if (!strcmp(kind, "tlsmid")) {
        /* handshake record, TLS 1.2, 16 KiB announced; 100 bytes of it */
        f[0] = 0x16; f[1] = 0x03; f[2] = 0x03; f[3] = 0x40; f[4] = 0x00;
        memset(f + 5, 0x02, 100);
        n = 105;
    }
    send_all(fd, f, n);
    /* let the relay read it before the close (a reset could destroy it) */
    size_t got = 0;
    int closed = wait_close(fd, !strcmp(kind, "h2-nowindow") ? 20 : 2, &got);
    printf("SERVE %d: got %s (%zd bytes), sent %s (%zu bytes)%s, %s\n", i, first, k, kind, n,
           tls ? " over plain TCP" : "", closed ? "relay closed" : "closing");
    fflush(stdout);
    close(fd);
}

static int do_serve(int port, const char *kind, int count)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 16) < 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) < 0) {
        printf("SERVE FAILED: %s\n", strerror(errno));
        return 2;
    }
    printf("SERVE READY %u\n", ntohs(sa.sin_port));
    fflush(stdout);
    for (int i = 1; count <= 0 || i <= count; i++) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        serve_one(fd, kind, i);
    }
    close(ls);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: cjhostile [--wait SECS] [--size BYTES] conn URL KIND [NAME]\n"
                    "       cjhostile flood URL N SECS\n"
                    "       cjhostile serve PORT KIND [COUNT]\n");
    return 2;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int i = 1;
    while (argc > i + 1 && (!strcmp(argv[i], "--wait") || !strcmp(argv[i], "--size"))) {
        if (!strcmp(argv[i], "--wait")) wait_secs = atof(argv[i + 1]);
        else big_size = strtoull(argv[i + 1], NULL, 10);
        i += 2;
    }
    if (argc - i < 1) return usage();
    const char *cmd = argv[i];
    if (!strcmp(cmd, "conn") && (argc - i == 3 || argc - i == 4))
        return do_conn(argv[i + 1], argv[i + 2], argc - i == 4 ? argv[i + 3] : "site-1.J1.hostile");
    if (!strcmp(cmd, "flood") && argc - i == 4) return do_flood(argv[i + 1], atoi(argv[i + 2]), atof(argv[i + 3]));
    if (!strcmp(cmd, "serve") && (argc - i == 3 || argc - i == 4))
        return do_serve(atoi(argv[i + 1]), argv[i + 2], argc - i == 4 ? atoi(argv[i + 3]) : 0);
    return usage();
}
