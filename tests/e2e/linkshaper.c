/* SPDX-License-Identifier: Apache-2.0 */
/* linkshaper — a TCP proxy that makes loopback look like a slow or faulty WAN link.
 *
 * The e2e suites put it between the relay and the simulator: the relay connects to the
 * shaper, the shaper to the server, and every accepted connection's bytes are relayed both
 * ways unchanged (any scheme: tcp, stcp, http/ws, grpc and their TLS forms).  On the way it
 * can cap the rate (a token bucket per direction), add a one-way delay (each chunk read is
 * released DELAY ms after it arrived, so the delay is per byte, not per connection), stall
 * (forward nothing for S seconds, connection kept), reset (RST both sides) or go half-open
 * (stop reading and forwarding both ways, keep both sockets open, never close them) once a
 * direction has forwarded a number of bytes.
 *
 * It prints "SHAPER READY <port>" on stdout once listening; each connection's events go to
 * stderr as "linkshaper <UTC time> conn N: <event> (up U, down D bytes)".  Memory is bounded:
 * a direction holds at most rate x delay + 1 MiB, and stops reading when full.  One process,
 * one epoll loop, non-blocking sockets; it exits after --exit-after seconds.  --help has the flags.
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define READ_MAX (64 * 1024)
#define BUF_SLACK (1024 * 1024)

struct opts {
    const char *listen, *to;
    double rate;                 /* bytes per second, 0: no cap */
    double delay;                /* seconds */
    uint64_t stall_after, stall_every, reset_after, halfopen_after;
    double stall;                /* seconds */
    bool fault_up, fault_down;   /* which direction's byte count triggers the faults */
    int fault_conns;             /* only connections 1..N get faults (0: all) */
    double exit_after;
    size_t segment;              /* most bytes per send (0: no limit) */
};

struct chunk {
    struct chunk *next;
    double due;                  /* monotonic time it may be forwarded */
    size_t len, off;
    char data[];
};

/* One direction: bytes read from fd[src], written to fd[1 - src]. */
struct dir {
    const char *name;            /* "up" (client -> server) or "down" */
    struct chunk *head, *tail;
    size_t queued;
    uint64_t out;                /* bytes forwarded */
    double tokens, refilled;
    double stall_until;          /* 0: not stalled */
    uint64_t next_stall;         /* forwarded count at which the next stall starts (0: none) */
    bool faults;                 /* this direction's count triggers faults */
    bool eof, shut, blocked;     /* source ended; destination's write side shut; EAGAIN */
};

struct conn;
struct side { struct conn *c; int i; };

struct conn {
    int id;
    int fd[2];                   /* 0: accepted client, 1: toward the server */
    struct side side[2];
    uint32_t interest[2];
    bool connected, halfopen, closed;
    struct dir d[2];             /* d[i] reads fd[i] */
    struct conn *next;
};

static struct opts O = {.exit_after = 3600, .fault_up = true, .fault_down = true};
static int ep;
static struct conn *conns;
static int nconns;
static size_t buf_cap;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* "linkshaper 2026-01-01T10:00:00.123Z conn N: what (up U, down D bytes)" on stderr */
static void logc(const struct conn *c, const char *fmt, ...)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32], what[256];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c)
        fprintf(stderr, "linkshaper %s.%03ldZ conn %d: %s (up %llu, down %llu bytes)\n", when, ts.tv_nsec / 1000000,
                c->id, what, (unsigned long long)c->d[0].out, (unsigned long long)c->d[1].out);
    else
        fprintf(stderr, "linkshaper %s.%03ldZ %s\n", when, ts.tv_nsec / 1000000, what);
}

/* ---- sockets ------------------------------------------------------------------------- */

static int resolve(const char *hostport, struct addrinfo **ai)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) return -1;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    return getaddrinfo(host, colon + 1, &hints, ai) == 0 ? 0 : -1;
}

static int open_listener(const char *hostport, int *port)
{
    struct addrinfo *ai;
    if (resolve(hostport, &ai) < 0) return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static int connect_server(void)
{
    struct addrinfo *ai;
    if (resolve(O.to, &ai) < 0) return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void set_interest(struct conn *c, int i, uint32_t ev)
{
    if (c->interest[i] == ev) return;
    struct epoll_event e = {.events = ev, .data.ptr = &c->side[i]};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd[i], &e);
    c->interest[i] = ev;
}

/* ---- connection lifetime ------------------------------------------------------------- */

static void free_queue(struct dir *d)
{
    while (d->head) {
        struct chunk *n = d->head->next;
        free(d->head);
        d->head = n;
    }
    d->tail = NULL;
    d->queued = 0;
}

/* Closes both sides; with rst, SO_LINGER 0 makes each close send a RST. */
static void close_conn(struct conn *c, bool rst)
{
    struct linger lg = {1, 0};
    for (int i = 0; i < 2; i++) {
        if (rst) setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd[i], NULL);
        close(c->fd[i]);
        free_queue(&c->d[i]);
    }
    c->closed = true;
}

/* Half-open: nothing read or forwarded any more, both sockets stay open until exit. */
static void go_halfopen(struct conn *c)
{
    for (int i = 0; i < 2; i++) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd[i], NULL);
        free_queue(&c->d[i]);
    }
    c->halfopen = true;
}

static void init_dir(struct conn *c, struct dir *d, const char *name, bool faults)
{
    d->name = name;
    d->faults = faults && (O.fault_conns == 0 || c->id <= O.fault_conns);
    d->next_stall = d->faults && O.stall > 0 ? O.stall_after : 0;
    d->refilled = mono();
}

static void accept_one(int lfd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) return;
    struct conn *c = calloc(1, sizeof *c);
    if (!c) { close(cfd); return; }
    c->id = ++nconns;
    c->fd[0] = cfd;
    c->fd[1] = connect_server();
    if (c->fd[1] < 0) {
        logc(c, "accepted, but cannot connect to %s: %s; closed", O.to, strerror(errno));
        close(cfd);
        free(c);
        return;
    }
    int one = 1;
    for (int i = 0; i < 2; i++) {
        setsockopt(c->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->side[i] = (struct side){c, i};
        c->interest[i] = i ? EPOLLOUT : EPOLLIN;
        struct epoll_event e = {.events = c->interest[i], .data.ptr = &c->side[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd[i], &e);
    }
    init_dir(c, &c->d[0], "up", O.fault_up);
    init_dir(c, &c->d[1], "down", O.fault_down);
    c->next = conns;
    conns = c;
    logc(c, "accepted%s", c->d[0].faults || c->d[1].faults ? "" : " (no faults on this connection)");
}

/* ---- reading ------------------------------------------------------------------------- */

static void read_into(struct conn *c, int i, double now)
{
    struct dir *d = &c->d[i];
    size_t room = buf_cap - d->queued;
    if (room > READ_MAX) room = READ_MAX;
    if (room == 0 || d->eof) return;
    struct chunk *k = malloc(sizeof *k + room);
    if (!k) return;
    ssize_t n = recv(c->fd[i], k->data, room, 0);
    if (n <= 0) {
        free(k);
        if (n == 0) d->eof = true;
        else if (errno != EAGAIN && errno != EINTR) {
            logc(c, "%s side failed (%s): resetting the other side", i ? "server" : "client", strerror(errno));
            close_conn(c, true);
        }
        return;
    }
    *k = (struct chunk){.due = now + O.delay, .len = (size_t)n};
    if (d->tail) d->tail->next = k;
    else d->head = k;
    d->tail = k;
    d->queued += (size_t)n;
}

static void finish_connect(struct conn *c)
{
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        logc(c, "cannot connect to %s: %s; closing the client", O.to, strerror(err));
        close_conn(c, false);
        return;
    }
    c->connected = true;
}

static void on_event(struct side *s, uint32_t ev, double now)
{
    struct conn *c = s->c;
    if (c->closed || c->halfopen) return;
    if (s->i == 1 && !c->connected) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) finish_connect(c);
        return;
    }
    if (ev & EPOLLOUT) c->d[1 - s->i].blocked = false;
    if (ev & EPOLLIN) read_into(c, s->i, now);
    if ((ev & EPOLLERR) && !c->closed) {   /* reported even when not asked for: never spin on it */
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd[s->i], SOL_SOCKET, SO_ERROR, &err, &el);
        logc(c, "%s side failed (%s): resetting the other side", s->i ? "server" : "client", strerror(err));
        close_conn(c, true);
    } else if ((ev & EPOLLHUP) && !(ev & EPOLLIN)) {
        read_into(c, s->i, now);   /* the peer is gone both ways: take what is left, or its EOF */
    }
}

/* ---- forwarding ---------------------------------------------------------------------- */

/* The most tokens a direction saves up: 10 ms of the rate, at least 16 KiB. */
static double burst(void)
{
    return O.rate / 100 > 16384 ? O.rate / 100 : 16384;
}

/* A direction waits for this many tokens (half a burst) before it sends part of a
 * chunk: sending each kilobyte as it accrues costs a wakeup and a send per
 * kilobyte, which at 20 Mbit/s kept the shaper busy on a whole core. */
static double quantum(void)
{
    return O.segment ? (double)O.segment : burst() / 2;
}

static void refill(struct dir *d, double now)
{
    if (O.rate <= 0) return;
    double burst_max = burst();
    d->tokens += (now - d->refilled) * O.rate;
    if (d->tokens > burst_max) d->tokens = burst_max;
    d->refilled = now;
}

/* Bytes d may forward before its next fault fires (UINT64_MAX: no fault ahead). */
static uint64_t to_next_fault(const struct dir *d)
{
    uint64_t lim = UINT64_MAX;
    if (!d->faults) return lim;
    uint64_t at[3] = {O.reset_after, O.halfopen_after, d->next_stall};
    for (int k = 0; k < 3; k++)
        if (at[k] > d->out && at[k] - d->out < lim) lim = at[k] - d->out;
    return lim;
}

/* The fault d's count has just reached, if any; true when the connection is gone. */
static bool fire_faults(struct conn *c, struct dir *d, double now)
{
    if (!d->faults) return false;
    if (O.reset_after && d->out >= O.reset_after) {
        logc(c, "reset after %llu bytes %s: RST to both sides", (unsigned long long)d->out, d->name);
        close_conn(c, true);
        return true;
    }
    if (O.halfopen_after && d->out >= O.halfopen_after) {
        logc(c, "half-open after %llu bytes %s: nothing read or forwarded from now on, sockets kept open",
             (unsigned long long)d->out, d->name);
        go_halfopen(c);
        return true;
    }
    if (d->next_stall && d->out >= d->next_stall) {
        d->stall_until = now + O.stall;
        d->next_stall = O.stall_every ? d->next_stall + O.stall_every : 0;
        logc(c, "stall start after %llu bytes %s: nothing forwarded %s for %g s", (unsigned long long)d->out,
             d->name, d->name, O.stall);
    }
    return false;
}

/* Writes what d may forward now; false when the connection went away. */
static bool forward(struct conn *c, int i, double now)
{
    struct dir *d = &c->d[i];
    if (d->stall_until > 0) {
        if (now < d->stall_until) return true;
        d->stall_until = 0;
        logc(c, "stall end %s: forwarding again", d->name);
    }
    refill(d, now);
    while (d->head && !d->blocked && d->head->due <= now && d->stall_until == 0) {
        size_t n = d->head->len - d->head->off;
        if (O.segment && n > O.segment) n = O.segment;
        if (O.rate > 0 && d->tokens < n) n = d->tokens < quantum() ? 0 : (size_t)d->tokens;
        uint64_t lim = to_next_fault(d);
        if (lim < n) n = (size_t)lim;
        if (n == 0) return true;
        ssize_t w = send(c->fd[1 - i], d->head->data + d->head->off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) { d->blocked = true; return true; }
            logc(c, "writing %s failed (%s): resetting both sides", d->name, strerror(errno));
            close_conn(c, true);
            return false;
        }
        d->head->off += (size_t)w;
        d->out += (uint64_t)w;
        d->queued -= (size_t)w;
        d->tokens -= (double)w;
        if (d->head->off == d->head->len) {
            struct chunk *k = d->head;
            d->head = k->next;
            if (!d->head) d->tail = NULL;
            free(k);
        }
        if (fire_faults(c, d, now)) return false;
    }
    if (!d->head && d->eof && !d->shut) {
        shutdown(c->fd[1 - i], SHUT_WR);
        d->shut = true;
        logc(c, "%s ended: %s side shut for writing", i ? "server" : "client", i ? "client" : "server");
    }
    return true;
}

static void update_interest(struct conn *c)
{
    for (int i = 0; i < 2; i++) {
        uint32_t ev = 0;
        if (i == 1 && !c->connected) ev = EPOLLOUT;
        else {
            if (!c->d[i].eof && c->d[i].queued < buf_cap) ev |= EPOLLIN;
            if (c->d[1 - i].blocked) ev |= EPOLLOUT;
        }
        set_interest(c, i, ev);
    }
}

static void pump(struct conn *c, double now)
{
    if (c->closed || c->halfopen || !c->connected) return;
    for (int i = 0; i < 2; i++)
        if (!forward(c, i, now)) return;
    if (c->d[0].shut && c->d[1].shut) {
        logc(c, "closed by the peers");
        close_conn(c, false);
        return;
    }
    update_interest(c);
}

/* When d next has something to do (0: nothing scheduled). */
static double next_due(const struct dir *d, double now)
{
    if (d->stall_until > 0) return d->stall_until;
    if (!d->head || d->blocked) return 0;
    double t = d->head->due;
    size_t left = d->head->len - d->head->off;
    double want = (double)left < quantum() ? (double)left : quantum();
    if (O.rate > 0 && d->tokens < want) {
        double ready = now + (want - d->tokens) / O.rate;
        if (ready > t) t = ready;
    }
    return t;
}

static int wait_ms(double now, double deadline)
{
    double t = deadline;
    for (struct conn *c = conns; c; c = c->next) {
        if (c->closed || c->halfopen) continue;
        for (int i = 0; i < 2; i++) {
            double n = next_due(&c->d[i], now);
            if (n > 0 && n < t) t = n;
        }
    }
    double ms = (t - now) * 1000;
    if (ms < 0) return 0;
    return ms > 1000 ? 1000 : (int)ms + 1;
}

static void reap_closed(void)
{
    for (struct conn **p = &conns; *p;) {
        if ((*p)->closed) {
            struct conn *dead = *p;
            *p = dead->next;
            free(dead);
        } else {
            p = &(*p)->next;
        }
    }
}

/* ---- options ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fputs("usage: linkshaper --listen HOST:PORT --to HOST:PORT [--rate BITS_PER_S] [--delay MS]\n"
          "                  [--stall-after BYTES --stall SECS [--stall-every BYTES]] [--reset-after BYTES]\n"
          "                  [--half-open-after BYTES] [--dir up|down|both] [--fault-conns N] [--exit-after SECS]\n"
          "                  [--segment BYTES]\n"
          "A TCP proxy shaping each connection from --listen to --to (bytes relayed unchanged, any scheme).\n"
          "  --listen HOST:PORT   where clients connect; port 0 picks one (printed as SHAPER READY <port>)\n"
          "  --to HOST:PORT       the server each accepted connection is relayed to\n"
          "  --rate BITS_PER_S    token-bucket cap per direction, K/M/G allowed (40M = 40 Mbit/s)\n"
          "  --delay MS           one-way delay added per direction: each chunk leaves MS after it arrived\n"
          "  --stall-after BYTES  after this many bytes in a faulted direction, forward nothing that way\n"
          "  --stall SECS           for SECS (connection kept; reading goes on until the buffer is full)\n"
          "  --stall-every BYTES  stall again each BYTES after that (default: once)\n"
          "  --reset-after BYTES  after this many bytes in a faulted direction, RST both sides (SO_LINGER 0)\n"
          "  --half-open-after BYTES  after this many bytes, stop reading and forwarding both ways silently;\n"
          "                       both sockets stay open until the shaper exits\n"
          "  --dir up|down|both   whose byte count triggers the faults: up (client -> server), down, or\n"
          "                       either (default both); rate and delay always apply both ways\n"
          "  --fault-conns N      faults only on the first N accepted connections (default 0: all)\n"
          "  --exit-after SECS    the shaper exits after this long (default 3600)\n"
          "  --segment BYTES      send at most BYTES at a time, spaced by --rate, as a WAN link delivers its\n"
          "                       segments (1448 for Ethernet); the receiver sees one arrival per segment\n"
          "BYTES take K/M/G (powers of 1024).  Each direction holds at most rate x delay + 1 MiB and stops\n"
          "reading when full.  stderr: one line per connection event (accept, stall start/end, reset,\n"
          "half-open, close) with the UTC time, the connection number and the bytes forwarded each way.\n",
          f);
}

/* "16M", "40M", "1.5K": SUFFIX^1024 for sizes (k = 1024) or 1000 for rates */
static double parse_num(const char *s, double k, const char *flag)
{
    char *end;
    double v = strtod(s, &end);
    double m = *end == 'K' || *end == 'k' ? k : *end == 'M' || *end == 'm' ? k * k : *end == 'G' || *end == 'g' ? k * k * k : 1;
    if (m != 1) end++;
    if (end == s || *end || v < 0) {
        fprintf(stderr, "linkshaper: %s: bad number '%s'\n", flag, s);
        exit(2);
    }
    return v * m;
}

static void parse_dir(const char *s)
{
    O.fault_up = !strcmp(s, "up") || !strcmp(s, "both");
    O.fault_down = !strcmp(s, "down") || !strcmp(s, "both");
    if (!O.fault_up && !O.fault_down) {
        fprintf(stderr, "linkshaper: --dir: up, down or both, not '%s'\n", s);
        exit(2);
    }
}

static void parse_opts(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (!strcmp(f, "--help")) { usage(stdout); exit(0); }
        if (a + 1 >= argc) { usage(stderr); exit(2); }
        const char *v = argv[++a];
        if (!strcmp(f, "--listen")) O.listen = v;
        else if (!strcmp(f, "--to")) O.to = v;
        else if (!strcmp(f, "--rate")) O.rate = parse_num(v, 1000, f) / 8;
        else if (!strcmp(f, "--delay")) O.delay = parse_num(v, 1000, f) / 1000;
        else if (!strcmp(f, "--stall-after")) O.stall_after = (uint64_t)parse_num(v, 1024, f);
        else if (!strcmp(f, "--stall")) O.stall = parse_num(v, 1000, f);
        else if (!strcmp(f, "--stall-every")) O.stall_every = (uint64_t)parse_num(v, 1024, f);
        else if (!strcmp(f, "--reset-after")) O.reset_after = (uint64_t)parse_num(v, 1024, f);
        else if (!strcmp(f, "--half-open-after")) O.halfopen_after = (uint64_t)parse_num(v, 1024, f);
        else if (!strcmp(f, "--dir")) parse_dir(v);
        else if (!strcmp(f, "--segment")) O.segment = (size_t)parse_num(v, 1024, f);
        else if (!strcmp(f, "--fault-conns")) O.fault_conns = (int)parse_num(v, 1000, f);
        else if (!strcmp(f, "--exit-after")) O.exit_after = parse_num(v, 1000, f);
        else { fprintf(stderr, "linkshaper: unknown option %s\n", f); usage(stderr); exit(2); }
    }
    if (!O.listen || !O.to) { usage(stderr); exit(2); }
    if (O.stall > 0 && !O.stall_after) O.stall_after = O.stall_every;
    if ((O.stall_after || O.stall_every) && !(O.stall > 0)) {
        fprintf(stderr, "linkshaper: --stall-after/--stall-every need --stall SECS\n");
        exit(2);
    }
    buf_cap = (size_t)(O.rate * O.delay) + BUF_SLACK;
}

int main(int argc, char **argv)
{
    parse_opts(argc, argv);
    int port, lfd = open_listener(O.listen, &port);
    if (lfd < 0) { fprintf(stderr, "linkshaper: cannot listen on %s: %s\n", O.listen, strerror(errno)); return 2; }
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &le);
    printf("SHAPER READY %d\n", port);
    fflush(stdout);
    logc(NULL, "listening on port %d, relaying to %s: rate %g bit/s, delay %g ms, buffer %zu bytes per direction",
         port, O.to, O.rate * 8, O.delay * 1000, buf_cap);
    double deadline = mono() + O.exit_after;
    for (;;) {
        double now = mono();
        if (now >= deadline) {
            logc(NULL, "exiting after %g s (--exit-after)", O.exit_after);
            for (struct conn *c = conns; c; c = c->next)
                if (!c->closed) close_conn(c, false);
            reap_closed();
            return 0;
        }
        struct epoll_event ev[64];
        int n = epoll_wait(ep, ev, 64, wait_ms(now, deadline));
        now = mono();
        for (int k = 0; k < n; k++) {
            if (!ev[k].data.ptr) accept_one(lfd);
            else on_event(ev[k].data.ptr, ev[k].events, now);
        }
        for (struct conn *c = conns; c; c = c->next) pump(c, now);
        reap_closed();
    }
}
