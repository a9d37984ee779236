/* SPDX-License-Identifier: Apache-2.0 */
/* floor.c — make bench's floor: what moving the relay's bytes costs the machine
 * with nothing but read(2)/write(2), so the relay's CPU and syscall figures
 * have something to be measured against in the same run.
 *
 *   floor server N          listens on 127.0.0.1 (port printed as "FLOOR PORT p"),
 *                           takes one connection, writes N bytes, then reads N bytes
 *                           (the server sending a task's tensors, then pulling the result)
 *   floor relay PORT PATH   connects to 127.0.0.1:PORT, listens on the Unix socket PATH,
 *                           takes one connection, and copies bytes both ways with one
 *                           1 MiB buffer per direction (epoll, non-blocking, no framing)
 *                           until both directions ended; then prints
 *                           "FLOOR cpu_user=U cpu_sys=S syscr=R syscw=W bytes=B"
 *   floor client PATH N     connects to PATH, reads N bytes, then writes N bytes (the worker)
 *
 * The relay form also stands between the real simulator and a direct worker
 * (make bench section 7): then the bytes are the very ones cjrelayd moves, and
 * a side that leaves (EOF, a reset, EPIPE) ends that direction, not the floor.
 *
 * With a last argument TLSDIR (tests/unit/tls_certs.sh's files), the server and the
 * relay's upstream speak TLS, mutual as the relay's stcp row: the floor of a relay
 * built on OpenSSL the plain way (its socket BIO with read-ahead, SSL_read and
 * SSL_write of up to 1 MiB), so that the TLS row has one too.
 *
 * The relay's sockets get the buffers cjrelayd gives its own (AF_UNIX SO_SNDBUF
 * 4 MiB, TCP left to autotuning, TCP_NODELAY), so both sides move the same bytes
 * between the same kinds of sockets. */
#include <errno.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define BUF (1024 * 1024)
#define SOCK_BUFFER (4 * 1024 * 1024)

static void die(const char *what)
{
    fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void die_tls(const char *what)
{
    fprintf(stderr, "floor: %s: ", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* A TLS context with TLSDIR's certificates: the server's, or the site's (client). */
static SSL_CTX *tls_ctx(const char *dir, int server)
{
    char ca[512], crt[512], key[512];
    const char *who = server ? "server" : "client";
    snprintf(ca, sizeof ca, "%s/rootCA.pem", dir);
    snprintf(crt, sizeof crt, "%s/%s.crt", dir, who);
    snprintf(key, sizeof key, "%s/%s.key", dir, who);
    SSL_CTX *c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!c || SSL_CTX_use_certificate_file(c, crt, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_load_verify_locations(c, ca, NULL) != 1)
        die_tls("certificates");
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_read_ahead(c, 1);
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return c;
}

/* The blocking handshake on fd; then fd may be made non-blocking. */
static SSL *tls_on(SSL_CTX *c, int fd, int server)
{
    SSL *s = SSL_new(c);
    if (!s || SSL_set_fd(s, fd) != 1 || (server ? SSL_accept(s) : SSL_connect(s)) != 1) die_tls("handshake");
    return s;
}

static void tune(int fd, int fam)
{
    int one = 1, size = SOCK_BUFFER;
    if (fam == AF_INET) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    else setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static int tcp_listen(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        die("tcp listen");
    *port = ntohs(a.sin_port);
    return fd;
}

static int tcp_connect(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("tcp connect");
    tune(fd, AF_INET);
    return fd;
}

static struct sockaddr_un unix_addr(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    return a;
}

/* Blocking: writes n bytes, then reads n bytes (or the other way round). */
static void pump(int fd, SSL *ssl, unsigned long long n, int write_first)
{
    char *b = malloc(BUF);
    if (!b) die("malloc");
    memset(b, 0x5a, BUF);
    for (int phase = 0; phase < 2; phase++) {
        int writing = (phase == 0) == (write_first != 0);
        unsigned long long left = n;
        while (left > 0) {
            size_t want = left < BUF ? (size_t)left : BUF;
            ssize_t r;
            if (ssl) r = writing ? SSL_write(ssl, b, (int)want) : SSL_read(ssl, b, (int)want);
            else r = writing ? write(fd, b, want) : read(fd, b, want);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) die(writing ? "write" : "read (early end)");
            left -= (unsigned long long)r;
        }
    }
    free(b);
    if (ssl) SSL_shutdown(ssl);
}

struct dir {
    int from, to;
    SSL *rssl, *wssl;   /* the TLS of the socket read from / written to, if any */
    int more;           /* TLS: the last fill stopped at a full buffer, OpenSSL may hold more */
    char *buf;
    size_t off, len;
    int eof, done;
};

static void step_write(struct dir *x)
{
    if (x->len > x->off) {
        ssize_t w;
        if (x->wssl) {
            int r = SSL_write(x->wssl, x->buf + x->off, (int)(x->len - x->off));
            w = r > 0 ? r : SSL_get_error(x->wssl, r) == SSL_ERROR_WANT_WRITE ? (errno = EAGAIN, -1) : (errno = EPROTO, -1);
        } else {
            w = write(x->to, x->buf + x->off, x->len - x->off);
        }
        if (w > 0) x->off += (size_t)w;
        else if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) x->off = x->len, x->eof = 1;   /* the reader left */
        else if (w < 0 && errno != EAGAIN) die("relay write");
    }
    if (x->eof && x->len == x->off && !x->done) {
        x->done = 1;
        if (x->wssl) SSL_shutdown(x->wssl);
        shutdown(x->to, SHUT_WR);
    }
}

/* Under TLS, records into the empty buffer until it is full or OpenSSL needs
 * the socket. */
static ssize_t tls_fill(struct dir *x)
{
    size_t got = 0;
    x->more = 0;
    while (got < BUF) {
        int r = SSL_read(x->rssl, x->buf + got, (int)(BUF - got));
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        int e = SSL_get_error(x->rssl, r);
        if (got) break;
        if (e == SSL_ERROR_WANT_READ) return errno = EAGAIN, -1;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) return 0;
        die_tls("relay SSL_read");
    }
    x->more = got == BUF;
    return (ssize_t)got;
}

static void step_read(struct dir *x)
{
    if (x->len != x->off || x->eof) return;
    ssize_t r = x->rssl ? tls_fill(x) : read(x->from, x->buf, BUF);
    if (r > 0) {
        x->off = 0;
        x->len = (size_t)r;
    } else if (r == 0 || errno == ECONNRESET) {
        x->eof = 1;
    } else if (errno != EAGAIN) {
        die("relay read");
    }
    step_write(x);   /* straight on: the other socket is usually writable */
}

/* One buffer per direction: read only into an empty buffer, write what it
 * holds; epoll interest changes only when it must (epoll_ctl costs too). */
static void relay(int a, SSL *assl, int b)
{
    struct dir d[2] = {{a, b, assl, NULL, 0, malloc(BUF), 0, 0, 0, 0}, {b, a, NULL, assl, 0, malloc(BUF), 0, 0, 0, 0}};
    uint32_t cur[2] = {EPOLLIN, EPOLLIN};
    int ep = epoll_create1(0);
    if (ep < 0 || !d[0].buf || !d[1].buf) die("setup");
    fcntl(a, F_SETFL, O_NONBLOCK);
    fcntl(b, F_SETFL, O_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = a};
    epoll_ctl(ep, EPOLL_CTL_ADD, a, &e);
    e.data.fd = b;
    epoll_ctl(ep, EPOLL_CTL_ADD, b, &e);
    while (!(d[0].done && d[1].done)) {
        struct epoll_event evs[4];
        int n = epoll_wait(ep, evs, 4, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int k = evs[i].data.fd == a ? 0 : 1;          /* d[k] reads this fd, d[!k] writes it */
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) step_read(&d[k]);
            if (evs[i].events & (EPOLLOUT | EPOLLERR)) step_write(&d[!k]);
        }
        /* records OpenSSL read ahead raise no epoll event */
        while (d[0].more && d[0].len == d[0].off) step_read(&d[0]);
        for (int k = 0; k < 2; k++) {
            int fd = k ? b : a;
            uint32_t ev = 0;
            if (!d[k].eof && d[k].len == d[k].off) ev |= EPOLLIN;
            if (!d[!k].done && d[!k].len > d[!k].off) ev |= EPOLLOUT;
            if (ev != cur[k]) {
                struct epoll_event m = {.events = ev, .data.fd = fd};
                if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &m) < 0) die("epoll_ctl");
                cur[k] = ev;
            }
        }
    }
}

static void report(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    unsigned long long syscr = 0, syscw = 0, rchar = 0;
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    while (f && fgets(line, sizeof line, f)) {
        sscanf(line, "syscr: %llu", &syscr);
        sscanf(line, "syscw: %llu", &syscw);
        sscanf(line, "rchar: %llu", &rchar);
    }
    if (f) fclose(f);
    printf("FLOOR cpu_user=%.3f cpu_sys=%.3f syscr=%llu syscw=%llu bytes=%llu\n",
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, syscr,
           syscw, rchar);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);   /* a peer that left is an EPIPE */
    const char *tls = NULL;
    if (argc >= 4 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "relay")) && argc == (argv[1][0] == 's' ? 4 : 5))
        tls = argv[--argc];
    if (argc == 3 && !strcmp(argv[1], "server")) {
        unsigned port;
        int l = tcp_listen(&port);
        printf("FLOOR PORT %u\n", port);
        fflush(stdout);
        int fd = accept(l, NULL, NULL);
        if (fd < 0) die("accept");
        tune(fd, AF_INET);
        pump(fd, tls ? tls_on(tls_ctx(tls, 1), fd, 1) : NULL, strtoull(argv[2], NULL, 10), 1);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "relay")) {
        int up = tcp_connect((unsigned)atoi(argv[2]));
        SSL *ussl = tls ? tls_on(tls_ctx(tls, 0), up, 0) : NULL;
        struct sockaddr_un a = unix_addr(argv[3]);
        unlink(argv[3]);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0) die("unix listen");
        printf("FLOOR LISTENING\n");
        fflush(stdout);
        int down = accept(l, NULL, NULL);
        if (down < 0) die("accept");
        tune(down, AF_UNIX);
        relay(up, ussl, down);
        unlink(argv[3]);
        report();
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "client")) {
        struct sockaddr_un a = unix_addr(argv[2]);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("unix connect");
        tune(fd, AF_UNIX);
        pump(fd, NULL, strtoull(argv[3], NULL, 10), 0);
        return 0;
    }
    fprintf(stderr, "usage: floor server N [TLSDIR] | floor relay PORT PATH [TLSDIR] | floor client PATH N\n");
    return 2;
}
