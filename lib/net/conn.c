/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c — one non-blocking socket, clear or TLS, under a link: bulk reads
 * into refcounted blocks, frame-aligned reference chains, batched writes
 * (see conn.h). */
#include "net/conn.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/err.h>

#include "net/blocks.h"
#include "net/carrier.h"
#include "net/tls.h"

/* A block retires (the next read takes a fresh one) when less than this is
 * left in it: reads stay large, and a retired block wastes at most this. */
#define BLOCK_RETIRE (256u * 1024)

/* SO_RCVLOWAT on a TCP socket (set_rcvlowat): the most a wakeup waits for,
 * and, under TLS, what OpenSSL may hold unseen (read-ahead ciphertext, a
 * partial record) on top of what cbuf and SSL_pending show. */
#define LOWAT_MAX (256 * 1024)
#define LOWAT_TLS_SLACK (64 * 1024)

struct cj_conn {
    evutil_socket_t fd;
    SSL *ssl;
    bool handshaking;
    short hs_wants;                /* EV_READ / EV_WRITE: what the TLS handshake waits for */
    bool write_wants_read;         /* SSL_write asked for input first */
    bool read_wants_write;         /* SSL_read asked to send first */
    int wr_retry;                  /* length of an SSL_write to repeat exactly (0 = none) */
    bool flush_pending;            /* TLS records wait in the write BIO for a writable socket */
    unsigned char *cbuf;           /* TLS: ciphertext read from the socket, not yet given to OpenSSL */
    size_t coff, clen;
    bool ceof;                     /* the socket said EOF (OpenSSL hears it once cbuf is used up) */
    int cerr;                      /* the socket's errno, likewise */
    struct event *rev, *wev, *kick;
    bool rev_on, wev_on;
    struct evbuffer *in, *out, *scratch;
    struct cj_carrier *carrier;    /* NULL: the socket's bytes are the SFM stream */
    struct evbuffer *wire_in, *wire_out; /* with a carrier: the socket's bytes */
    bool carrier_closed;           /* the peer ended the carriage: EOF once the input is handed on */
    size_t low, high, wlow;
    bool reading;                  /* the owner's switch */
    bool tcp;                      /* the socket is TCP: SO_RCVLOWAT applies */
    int lowat;                     /* its SO_RCVLOWAT as last set (0: the kernel's 1) */
    struct cj_block *blk;          /* the block being filled */
    int busy;                      /* nesting of our own callbacks */
    bool freed, ended;
    char err[1024];
    struct cj_conn_counters c;
    struct cj_conn_ops ops;
    void *ctx;
};

/* ---- blocks (blocks.c) ------------------------------------------------------- */

/* The block to read into: the current one while it has room, else a new one. */
static struct cj_block *read_block(struct cj_conn *c)
{
    if (c->blk && CJ_CONN_BLOCK - c->blk->used >= BLOCK_RETIRE) return c->blk;
    if (c->blk) cj_block_unref(c->blk);
    c->blk = cj_block_new();
    return c->blk;
}

/* Appends len bytes at b->data + off to the input: by reference, or copied
 * into a chain of their own when short (see CJ_CONN_SMALL). */
static int add_piece(struct cj_conn *c, struct cj_block *b, size_t off, size_t len)
{
    struct evbuffer *to = c->carrier ? c->wire_in : c->in;
    if (len < CJ_CONN_SMALL) {
        /* Into an empty buffer first: evbuffer_add would size a new chain
         * after the input's last one (a 1 MiB reference) for a few bytes. */
        if (evbuffer_add(c->scratch, b->data + off, len) < 0) return -1;
        return evbuffer_add_buffer(to, c->scratch);
    }
    return cj_block_add_reference(to, b, off, len);
}

/* n new bytes at the block's end go to the input, cut at the low watermark
 * (a carrier copies the SFM bytes out of its wire bytes: no cut). */
static int commit_read(struct cj_conn *c, struct cj_block *b, size_t n)
{
    size_t have = evbuffer_get_length(c->in);
    size_t cut = !c->carrier && c->low > have && c->low - have < n ? c->low - have : n;
    int rc = add_piece(c, b, b->used, cut);
    if (rc == 0 && cut < n) rc = add_piece(c, b, b->used + cut, n - cut);
    b->used += n;
    return rc;
}

/* ---- events ------------------------------------------------------------------- */

static void set_event(struct event *ev, bool *on, bool want)
{
    if (want == *on) return;
    if (want) event_add(ev, NULL);
    else event_del(ev);
    *on = want;
}

/* A gRPC peer is held by its flow-control window, not by our reading: the
 * socket is read while the owner pauses, and the window bounds the input. */
static bool window_paced(const struct cj_conn *c) { return c->carrier && cj_carrier_window_paced(c->carrier); }

/* What the socket writes from: the owner's output, or the carrier's wire bytes. */
static struct evbuffer *send_buf(const struct cj_conn *c) { return c->carrier ? c->wire_out : c->out; }

static bool wants_read(const struct cj_conn *c)
{
    if (c->ended || c->freed) return false;
    if (c->handshaking) return c->hs_wants == EV_READ;
    if (c->write_wants_read) return true;
    if (window_paced(c)) return true;
    return c->reading && !(c->high && evbuffer_get_length(c->in) >= c->high);
}

static bool wants_write(const struct cj_conn *c)
{
    if (c->ended || c->freed) return false;
    if (c->handshaking) return c->hs_wants == EV_WRITE;
    bool more = evbuffer_get_length(send_buf(c)) > 0 || (c->carrier && cj_carrier_can_send(c->carrier, c->out));
    return c->read_wants_write || c->flush_pending || (more && !c->write_wants_read);
}

/* A frame arriving slowly would wake the loop for every segment (a 20 Mbit/s
 * link delivers one every 0.6 ms), each wakeup a read of 1-2 KiB: tens of
 * seconds of CPU per GiB.  The owner waits for c->low bytes anyway, so the
 * kernel is asked to wake us only once the rest of them (up to LOWAT_MAX) is
 * there.  Never more than the peer has committed to send: the rest of the
 * frame being read, less what is already here (under TLS, less what OpenSSL
 * may hold too); between frames, 1.  Not under a carrier: gRPC's flow-control
 * window could then be smaller than the wait, and neither side would move. */
static void set_rcvlowat(struct cj_conn *c)
{
    if (!c->tcp || c->carrier || c->handshaking) return;
    size_t have = evbuffer_get_length(c->in), want = c->low > have ? c->low - have : 1;
    if (c->ssl) {
        size_t held = (c->clen - c->coff) + (size_t)SSL_pending(c->ssl) + LOWAT_TLS_SLACK;
        want = want > held ? want - held : 1;
    }
    int v = want > LOWAT_MAX ? LOWAT_MAX : (int)want;
    if (v == (c->lowat ? c->lowat : 1)) return;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) c->lowat = v;
}

static void update_events(struct cj_conn *c)
{
    bool rd = wants_read(c);
    if (rd) set_rcvlowat(c);
    set_event(c->rev, &c->rev_on, rd);
    set_event(c->wev, &c->wev_on, wants_write(c));
}

static void really_free(struct cj_conn *c)
{
    if (c->rev) event_free(c->rev);
    if (c->wev) event_free(c->wev);
    if (c->kick) event_free(c->kick);
    if (c->ssl) SSL_free(c->ssl);
    if (c->fd >= 0) close(c->fd);
    if (c->in) evbuffer_free(c->in);
    if (c->out) evbuffer_free(c->out);
    if (c->scratch) evbuffer_free(c->scratch);
    if (c->wire_in) evbuffer_free(c->wire_in);
    if (c->wire_out) evbuffer_free(c->wire_out);
    cj_carrier_free(c->carrier);
    if (c->blk) cj_block_unref(c->blk);
    free(c->cbuf);
    free(c);
    cj_block_pool_trim(true);   /* a link ended: no reason to keep its read memory */
}

static void enter(struct cj_conn *c) { c->busy++; }
static void leave(struct cj_conn *c)
{
    if (--c->busy == 0 && c->freed) really_free(c);
}
static bool gone(const struct cj_conn *c) { return c->freed || c->ended; }

/* The end: no more I/O, one report. */
static void end(struct cj_conn *c, int what)
{
    if (gone(c)) return;
    c->ended = true;
    update_events(c);
    if (c->ops.on_event) c->ops.on_event(c, what, c->ctx);
}

/* Keeps what went wrong: OpenSSL's queue, else the errno text. */
static void capture_error(struct cj_conn *c, int err_no)
{
    size_t n = c->ssl ? cj_tls_drain_errors(c->err, sizeof c->err) : 0;
    if (!n) snprintf(c->err, sizeof c->err, "%s", err_no ? strerror(err_no) : "");
}

/* One read(2) from the socket (clear data, or TLS ciphertext into cbuf). */
static ssize_t plain_read(struct cj_conn *c, unsigned char *buf, size_t room)
{
    ssize_t n;
    do n = read(c->fd, buf, room);
    while (n < 0 && errno == EINTR);
    return n;
}

/* ---- TLS -------------------------------------------------------------------- */

/* OpenSSL reads its records from cbuf through this BIO, and cbuf is filled by
 * one read(2) of up to CJ_CONN_TLS_READ: OpenSSL's own socket BIO reads each
 * record's remainder exactly (one read(2) per 16 KiB record, read-ahead or
 * not), which kept TLS links at ~40,000 reads per GiB. */
static int cin_read(BIO *b, char *out, int len)
{
    struct cj_conn *c = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    size_t have = c->clen - c->coff;
    if (have == 0) {
        if (c->ceof) return 0;
        if (c->cerr) {
            errno = c->cerr;
            return -1;
        }
        BIO_set_retry_read(b);
        return -1;
    }
    size_t n = have < (size_t)len ? have : (size_t)len;
    memcpy(out, c->cbuf + c->coff, n);
    c->coff += n;
    return (int)n;
}

static long cin_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num; (void)ptr;
    struct cj_conn *c = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_PENDING: return c ? (long)(c->clen - c->coff) : 0;
    case BIO_CTRL_EOF: return c && c->ceof && c->coff == c->clen;
    case BIO_CTRL_FLUSH: return 1;
    default: return 0;
    }
}

static int cin_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *cin_method;
static void make_cin_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "cjrelay TLS input");
    if (m && BIO_meth_set_read(m, cin_read) && BIO_meth_set_ctrl(m, cin_ctrl) && BIO_meth_set_create(m, cin_create))
        cin_method = m;
}

static BIO *cin_new(struct cj_conn *c)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_cin_method);
    BIO *b = cin_method ? BIO_new(cin_method) : NULL;
    if (b) BIO_set_data(b, c);
    return b;
}

/* OpenSSL used up cbuf: one read(2) refills it.  1: bytes (or they were
 * there); 0: nothing yet; -1: EOF or an error, which OpenSSL hears next. */
static int cin_fill(struct cj_conn *c)
{
    if (c->coff < c->clen) return 1;
    if (c->ceof || c->cerr) return -1;
    ssize_t n = plain_read(c, c->cbuf, CJ_CONN_TLS_READ);
    if (n > 0) {
        c->coff = 0;
        c->clen = (size_t)n;
        c->c.reads++;
        return 1;
    }
    if (n == 0) c->ceof = true;
    else if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    else c->cerr = errno;
    return -1;
}

/* An SSL_* call's failure that is the peer's end, not an error: a
 * close_notify, or a close without one (SSL_OP_IGNORE_UNEXPECTED_EOF, tls.c;
 * a bare EOF below OpenSSL). */
static bool tls_ended(int e, int r, int en)
{
    return e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && (r == 0 || en == 0));
}

/* Bytes OpenSSL can return without the socket: ciphertext left in cbuf, or
 * a record already decrypted.  No epoll event will say so.  (Not
 * SSL_has_pending: it also counts a partial record, which needs the socket,
 * and the kick would spin until the rest arrived.) */
static bool tls_pending(const struct cj_conn *c)
{
    return c->coff < c->clen || SSL_pending(c->ssl) > 0;
}

static void tls_handshake(struct cj_conn *c)
{
    int r, e, en;
    do {
        ERR_clear_error();
        r = SSL_do_handshake(c->ssl);
        e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
        en = errno;
    } while (e == SSL_ERROR_WANT_READ && cin_fill(c) != 0);
    if (r == 1) {
        c->handshaking = false;
        update_events(c);
        if (c->ops.on_event) c->ops.on_event(c, CJ_CONN_CONNECTED, c->ctx);
        /* Application data may have come with the handshake's last flight. */
        if (!gone(c)) event_active(c->kick, 0, 0);
        return;
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->hs_wants = e == SSL_ERROR_WANT_READ ? EV_READ : EV_WRITE;
        update_events(c);
    } else if (tls_ended(e, r, en)) {
        end(c, CJ_CONN_EOF);
    } else {
        capture_error(c, e == SSL_ERROR_SYSCALL ? en : 0);
        end(c, CJ_CONN_ERROR);
    }
}

/* SSL_read records into buf until room is used or OpenSSL needs more input.
 * Like read(2): bytes, 0 at the end, -1 with errno (EAGAIN: nothing yet). */
static ssize_t tls_read(struct cj_conn *c, unsigned char *buf, size_t room)
{
    size_t got = 0;
    while (got < room) {
        size_t want = room - got < INT_MAX ? room - got : INT_MAX;
        ERR_clear_error();
        int r = SSL_read(c->ssl, buf + got, (int)want);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        int e = SSL_get_error(c->ssl, r), en = errno;
        if (e == SSL_ERROR_WANT_READ && cin_fill(c) != 0) continue;   /* more ciphertext, or its end */
        if (got) break;                          /* the condition comes back on the next call */
        if (e == SSL_ERROR_WANT_READ) {
            errno = EAGAIN;
            return -1;
        }
        if (e == SSL_ERROR_WANT_WRITE) {          /* it has something to send first */
            c->read_wants_write = true;
            errno = EAGAIN;
            return -1;
        }
        if (tls_ended(e, r, en)) return 0;
        capture_error(c, e == SSL_ERROR_SYSCALL ? en : 0);
        errno = e == SSL_ERROR_SYSCALL && en ? en : EPROTO;
        return -2;                               /* error text already captured */
    }
    return (ssize_t)got;
}

/* Records OpenSSL wrote into the write BIO go to the socket.  0 when they
 * all went (or wait for a writable socket: flush_pending), -2 on an error. */
static int tls_flush(struct cj_conn *c)
{
    BIO *w = SSL_get_wbio(c->ssl);
    c->flush_pending = false;
    if (BIO_wpending(w) == 0) return 0;
    if (BIO_flush(w) > 0) return 0;
    if (BIO_should_retry(w)) {
        c->flush_pending = true;
        return 0;
    }
    capture_error(c, errno);
    return -2;
}

/* One SSL_write per chain; a retry repeats the same length (OpenSSL's rule).
 * The records collect in the write BIO (CJ_CONN_TLS_WRITE) and leave in one
 * write(2) when it fills or at the flush after the last chain. */
static ssize_t tls_write(struct cj_conn *c)
{
    size_t total = 0;
    struct evbuffer *out = send_buf(c);
    while (evbuffer_get_length(out) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(out, -1, NULL, &v, 1) < 1) break;
        int len = c->wr_retry ? c->wr_retry : (int)(v.iov_len < INT_MAX ? v.iov_len : INT_MAX);
        ERR_clear_error();
        int r = SSL_write(c->ssl, v.iov_base, len);
        if (r > 0) {
            c->wr_retry = 0;
            evbuffer_drain(out, (size_t)r);
            total += (size_t)r;
            c->c.writes++;
            continue;
        }
        int e = SSL_get_error(c->ssl, r), en = errno;
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
            c->wr_retry = len;
            c->write_wants_read = e == SSL_ERROR_WANT_READ;
            break;
        }
        if (total) break;
        capture_error(c, e == SSL_ERROR_SYSCALL ? en : 0);
        return -2;
    }
    if (!c->wr_retry && tls_flush(c) < 0) return -2;
    return (ssize_t)total;
}

/* ---- clear sockets ------------------------------------------------------------- */

/* Every queued chain (up to CJ_CONN_IOV) in one writev.  (The binaries ignore
 * SIGPIPE: a closed peer is an EPIPE to report.  writev rather than sendmsg
 * so that /proc/PID/io counts the writes, as it counts the reads.) */
static ssize_t plain_write(struct cj_conn *c, size_t *want)
{
    struct evbuffer_iovec v[CJ_CONN_IOV];
    struct iovec iov[CJ_CONN_IOV];
    struct evbuffer *out = send_buf(c);
    int n = evbuffer_peek(out, -1, NULL, v, CJ_CONN_IOV);
    if (n > CJ_CONN_IOV) n = CJ_CONN_IOV;
    *want = 0;
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = v[i].iov_base;
        iov[i].iov_len = v[i].iov_len;
        *want += v[i].iov_len;
    }
    ssize_t w;
    do w = writev(c->fd, iov, n);
    while (w < 0 && errno == EINTR);
    if (w > 0) {
        evbuffer_drain(out, (size_t)w);
        c->c.writes++;
    }
    return w;
}

/* ---- the read and write loops ----------------------------------------------------- */

static void fail_io(struct cj_conn *c, ssize_t rc, int en)
{
    if (rc != -2) capture_error(c, en);
    end(c, CJ_CONN_ERROR);
}

/* What the carrier answered a peer it refuses (an HTTP error, a CLOSE, a
 * GOAWAY) goes out once, best effort, before the connection ends: the peer's
 * operator then reads why. */
static void send_last_words(struct cj_conn *c)
{
    size_t want;
    if (evbuffer_get_length(c->wire_out) == 0) return;
    if (c->ssl) (void)tls_write(c);
    else (void)plain_write(c, &want);
}

/* The carrier turns the wire bytes read into SFM bytes (and answers); false
 * when that ended the connection. */
static bool unwrap_input(struct cj_conn *c)
{
    struct cj_err err = {0};
    int rc = cj_carrier_read(c->carrier, c->wire_in, c->in, c->wire_out, &err);
    if (rc < 0) {
        snprintf(c->err, sizeof c->err, "%s: %s", cj_carrier_name(c->carrier), err.msg);
        send_last_words(c);
        end(c, CJ_CONN_ERROR);
        return false;
    }
    if (rc == CJ_CARRIER_CLOSED) c->carrier_closed = true;
    return true;
}

/* The peer closed before the carriage was set up: say so, with the start of
 * what it sent that was not understood. */
static void note_early_close(struct cj_conn *c)
{
    unsigned char b[48];
    char q[sizeof b + 1];
    ev_ssize_t n = evbuffer_copyout(c->wire_in, b, sizeof b);
    for (ev_ssize_t i = 0; i < n; i++) q[i] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '.';
    q[n > 0 ? n : 0] = '\0';
    snprintf(c->err, sizeof c->err, "%s: the peer closed before the %s was set up%s%s%s", cj_carrier_name(c->carrier),
             cj_carrier_name(c->carrier)[0] == 'W' ? "WebSocket" : "gRPC call", n > 0 ? " (it sent \"" : "", q,
             n > 0 ? "\")" : " (it sent nothing)");
}

static void do_read(struct cj_conn *c)
{
    size_t budget = CJ_CONN_BUDGET;
    enter(c);
    while (!gone(c) && (c->reading || window_paced(c)) && budget > 0) {
        if (c->high && !window_paced(c) && evbuffer_get_length(c->in) >= c->high) break;
        struct cj_block *b = read_block(c);
        if (!b) {
            fail_io(c, -1, ENOMEM);
            break;
        }
        size_t room = CJ_CONN_BLOCK - b->used;
        ssize_t n = c->ssl ? tls_read(c, b->data + b->used, room) : plain_read(c, b->data + b->used, room);
        if (n == 0) {
            if (c->carrier && !cj_carrier_ready(c->carrier)) note_early_close(c);
            end(c, CJ_CONN_EOF);
            break;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) fail_io(c, n, errno);
            break;
        }
        if (!c->ssl) c->c.reads++;              /* TLS: counted in cin_fill */
        c->c.bytes_read += (uint64_t)n;
        if (commit_read(c, b, (size_t)n) < 0) {
            fail_io(c, -1, ENOMEM);
            break;
        }
        budget = (size_t)n < budget ? budget - (size_t)n : 0;
        if (c->carrier && !unwrap_input(c)) break;
        if (c->reading && evbuffer_get_length(c->in) >= c->low && c->ops.on_read) c->ops.on_read(c, c->ctx);
        if (c->carrier_closed && !gone(c)) {
            snprintf(c->err, sizeof c->err, "the peer closed the %s carriage", cj_carrier_name(c->carrier));
            end(c, CJ_CONN_EOF);
        }
        if ((size_t)n < room) break;             /* the socket is drained */
    }
    /* Records OpenSSL already holds raise no epoll event: come back for them.
     * And what reading made it write (an alert, a key update) must go out. */
    if (!gone(c) && c->ssl) {
        if (c->reading && tls_pending(c)) event_active(c->kick, 0, 0);
        if (BIO_wpending(SSL_get_wbio(c->ssl)) > 0) c->flush_pending = true;
    }
    if (!gone(c)) update_events(c);
    leave(c);
}

/* With a carrier: the owner's whole frames go into the wire bytes. */
static bool wrap_output(struct cj_conn *c)
{
    if (!c->carrier || cj_carrier_send(c->carrier, c->out, c->wire_out) == 0) return true;
    snprintf(c->err, sizeof c->err, "%s: a frame could not be carried", cj_carrier_name(c->carrier));
    end(c, CJ_CONN_ERROR);
    return false;
}

static void do_write(struct cj_conn *c)
{
    enter(c);
    bool ok = wrap_output(c);
    while (ok && !gone(c) && (evbuffer_get_length(send_buf(c)) > 0 || c->flush_pending)) {
        size_t want = 0;
        ssize_t w = c->ssl ? tls_write(c) : plain_write(c, &want);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) fail_io(c, w, errno);
            break;
        }
        c->c.bytes_written += (uint64_t)w;
        bool full = c->ssl ? c->wr_retry != 0 || c->flush_pending : (size_t)w < want;
        if (cj_conn_queued(c) <= c->wlow && c->ops.on_write) c->ops.on_write(c, c->ctx);
        if (!gone(c)) ok = wrap_output(c);
        if (full) break;
    }
    if (!gone(c)) update_events(c);
    leave(c);
}

static void read_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_conn *c = arg;
    enter(c);                        /* do_write may end (and the owner free) c before do_read */
    if (c->handshaking) {
        tls_handshake(c);
    } else {
        if (c->write_wants_read) {
            c->write_wants_read = false;
            do_write(c);
        }
        if (!gone(c)) do_read(c);
    }
    leave(c);
}

static void write_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_conn *c = arg;
    enter(c);
    if (c->handshaking) {
        tls_handshake(c);
    } else {
        do_write(c);
        if (c->read_wants_write && !gone(c)) {
            c->read_wants_write = false;
            do_read(c);
        }
    }
    leave(c);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what;
    struct cj_conn *c = arg;
    enter(c);
    if (c->handshaking) tls_handshake(c);
    else do_read(c);
    leave(c);
}

/* Output added: make sure the write event is armed. */
static void output_changed(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    struct cj_conn *c = arg;
    if (info->n_added && !c->wev_on) update_events(c);
}

/* Input drained below the high watermark: reading may start again.  A
 * carrier hears how much the owner took (gRPC's window credit). */
static void input_changed(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    struct cj_conn *c = arg;
    if (!info->n_deleted) return;
    if (c->carrier && !gone(c)) {
        cj_carrier_taken(c->carrier, info->n_deleted, c->wire_out);
        if (!c->wev_on) update_events(c);
    }
    if (!c->rev_on) update_events(c);
}

/* ---- API ----------------------------------------------------------------------------- */

struct cj_conn *cj_conn_new(struct event_base *base, evutil_socket_t fd, SSL *ssl, bool tls_client,
                            const struct cj_conn_ops *ops, void *ctx)
{
    struct cj_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = -1;
    c->reading = true;
    if (ops) c->ops = *ops;
    c->ctx = ctx;
    c->in = evbuffer_new();
    c->out = evbuffer_new();
    c->scratch = evbuffer_new();
    c->rev = event_new(base, fd, EV_READ | EV_PERSIST, read_ready, c);
    c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, write_ready, c);
    c->kick = event_new(base, -1, 0, kick_cb, c);
    if (!c->in || !c->out || !c->scratch || !c->rev || !c->wev || !c->kick ||
        !evbuffer_add_cb(c->out, output_changed, c) || !evbuffer_add_cb(c->in, input_changed, c)) {
        really_free(c);
        return NULL;
    }
    evutil_make_socket_nonblocking(fd);
    int proto = 0;
    socklen_t plen = sizeof proto;
    c->tcp = getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &plen) == 0 && proto == IPPROTO_TCP;
    if (ssl) {
        /* Reads: our cbuf through cin_read.  Writes: through a buffer, so
         * records leave in big write(2)s instead of one per 16 KiB record. */
        c->cbuf = malloc(CJ_CONN_TLS_READ);
        BIO *cin = cin_new(c), *sock = BIO_new_socket((int)fd, BIO_NOCLOSE), *wbuf = BIO_new(BIO_f_buffer());
        if (!c->cbuf || !cin || !sock || !wbuf || BIO_set_write_buffer_size(wbuf, CJ_CONN_TLS_WRITE) != 1) {
            BIO_free(cin);
            BIO_free(sock);
            BIO_free(wbuf);
            really_free(c);
            return NULL;
        }
        BIO_push(wbuf, sock);
        SSL_set_bio(ssl, cin, wbuf);
        c->fd = fd;
        c->ssl = ssl;
        /* OpenSSL takes what cbuf holds in one go rather than record by record,
         * and keeps its buffers (released when empty, they come back as fresh
         * pages on the next record). */
        SSL_set_read_ahead(ssl, 1);
        SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
        SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        if (tls_client) SSL_set_connect_state(ssl);
        else SSL_set_accept_state(ssl);
        c->handshaking = true;
        event_active(c->kick, 0, 0);
    } else {
        c->fd = fd;
        update_events(c);
    }
    return c;
}

void cj_conn_free(struct cj_conn *c)
{
    if (!c) return;
    if (!c->freed) {
        c->freed = true;
        update_events(c);
        if (c->kick) event_del(c->kick);
    }
    if (c->busy == 0) really_free(c);
}

struct evbuffer *cj_conn_input(const struct cj_conn *c) { return c->in; }
struct evbuffer *cj_conn_output(const struct cj_conn *c) { return c->out; }
SSL *cj_conn_ssl(const struct cj_conn *c) { return c->ssl; }
const char *cj_conn_error_text(const struct cj_conn *c) { return c->err; }
const struct cj_conn_counters *cj_conn_counters(const struct cj_conn *c) { return &c->c; }

size_t cj_conn_queued(const struct cj_conn *c)
{
    size_t q = evbuffer_get_length(c->out);
    if (c->carrier) q += evbuffer_get_length(c->wire_out) + cj_carrier_pending(c->carrier);
    return q;
}

size_t cj_conn_held(const struct cj_conn *c) { return c->carrier ? cj_carrier_pending(c->carrier) : 0; }

int cj_conn_set_carrier(struct cj_conn *c, struct cj_carrier *k)
{
    if (c->carrier || !k) return -1;
    c->wire_in = evbuffer_new();
    c->wire_out = evbuffer_new();
    if (!c->wire_in || !c->wire_out || cj_carrier_start(k, c->wire_out) < 0) return -1;
    c->carrier = k;
    if (c->lowat > 1) {   /* the carrier's frames are not ours to wait for (set_rcvlowat) */
        int one = 1;
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one) == 0) c->lowat = 1;
    }
    if (!gone(c) && !c->handshaking) update_events(c);
    return 0;
}

void cj_conn_set_read_watermarks(struct cj_conn *c, size_t low, size_t high)
{
    c->low = low;
    c->high = high;
    if (!gone(c)) update_events(c);
}

void cj_conn_set_write_low(struct cj_conn *c, size_t low) { c->wlow = low; }

void cj_conn_idle(struct cj_conn *c)
{
    /* The block being filled, when nothing else holds part of it. */
    if (c->blk && atomic_load_explicit(&c->blk->refs, memory_order_acquire) == 1) {
        cj_block_unref(c->blk);
        c->blk = NULL;
    }
    cj_block_pool_trim(false);
}

void cj_conn_set_reading(struct cj_conn *c, bool on)
{
    if (c->reading == on) return;
    c->reading = on;
    if (gone(c)) return;
    update_events(c);
    if (on && c->ssl && !c->handshaking && tls_pending(c)) event_active(c->kick, 0, 0);
}
