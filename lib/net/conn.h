/* SPDX-License-Identifier: Apache-2.0 */
/* conn.h — the bytes under a link: one non-blocking stream socket, clear or
 * TLS, read in large pieces straight into an input evbuffer and written with
 * one writev per batch of queued chains.
 *
 * Why not a libevent bufferevent: libevent 2.1 reads at most 4096 bytes per
 * read(2) (EVBUFFER_MAX_READ), asks FIONREAD before each, and a bufferevent
 * reads once per wakeup; its writes stop at 16 KiB.  A 1 MiB stream chunk
 * cost ~256 reads, ioctls and epoll wakeups on every link it crossed, and the
 * kernel's share of that was most of the relay's CPU.
 *
 * Reading.  Each read(2) (TLS: each batch of SSL_read records, whose
 * ciphertext came in reads of up to CJ_CONN_TLS_READ) fills up to
 * CJ_CONN_BLOCK bytes of a refcounted block; the bytes enter the input as
 * reference chains (no copy).  A read is cut at the input's low watermark —
 * the end of the frame being assembled — so every frame ends on a chain
 * boundary and moving a frame's payload to another buffer moves chains and
 * copies nothing.  Pieces shorter than CJ_CONN_SMALL are copied into chains of
 * their own instead, so a small message kept for a long time cannot pin a
 * block.  One wakeup reads until the socket is drained (a short read), the
 * owner disables reading, the input reaches the high watermark, or
 * CJ_CONN_BUDGET bytes were read; then the loop serves other connections (the
 * socket stays readable, so the next turn comes back).  on_read runs each
 * time the input holds at least the low watermark.
 *
 * Writing.  What the owner adds to the output is written when the socket is
 * writable: every queued chain (up to CJ_CONN_IOV per call) in one writev;
 * TLS: one SSL_write per chain, the records collected in a write buffer that
 * leaves in one write(2) when full and after the last chain.  on_write runs whenever a write leaves the
 * output at or below the write low watermark (so the owner can refill it).
 *
 * Events (on_event): CJ_CONN_CONNECTED once the TLS handshake is done (clear
 * connections never report it), then at most one of CJ_CONN_EOF or
 * CJ_CONN_ERROR (cj_conn_error_text says what); after that the connection
 * does nothing more until it is freed.  cj_conn_free may be called from inside
 * any callback. */
#ifndef CJ_NET_CONN_H
#define CJ_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "net/blocks.h"

#define CJ_CONN_BLOCK CJ_BLOCK_SIZE       /* bytes one read asks for at most (blocks.h) */
#define CJ_CONN_BUDGET (4u * 1024 * 1024) /* bytes read per wakeup before yielding to the loop */
#define CJ_CONN_SMALL (32u * 1024)       /* shorter pieces are copied, not referenced */
#define CJ_CONN_IOV 64                   /* chains per writev */
/* Ciphertext per read(2) on a TLS link (OpenSSL then takes it record by
 * record from memory). */
#define CJ_CONN_TLS_READ (512u * 1024)
/* Records collect in a write buffer this large before a write(2) (TLS). */
#define CJ_CONN_TLS_WRITE (256u * 1024)

enum { CJ_CONN_CONNECTED = 1, CJ_CONN_EOF = 2, CJ_CONN_ERROR = 4 };

struct cj_conn;

struct cj_conn_ops {
    void (*on_read)(struct cj_conn *c, void *ctx);               /* input >= low watermark */
    void (*on_write)(struct cj_conn *c, void *ctx);              /* output <= write low after a write */
    void (*on_event)(struct cj_conn *c, int what, void *ctx);    /* CJ_CONN_* */
};

struct cj_conn_counters {
    uint64_t reads, bytes_read;          /* read(2) calls that returned data; bytes (TLS: plaintext) */
    uint64_t writes, bytes_written;      /* writev calls (TLS: SSL_write) that took data */
};

/* A connection over the connected socket fd (made non-blocking; owned from
 * now on: closed by cj_conn_free).  ssl non-NULL: TLS over fd (the SSL is
 * owned too), handshake as client or server per tls_client, started from the
 * loop.  Reading starts enabled, watermarks 0 (no limit).  NULL on out of
 * memory (fd and ssl are then the caller's). */
struct cj_conn *cj_conn_new(struct event_base *base, evutil_socket_t fd, SSL *ssl, bool tls_client,
                            const struct cj_conn_ops *ops, void *ctx);
/* Closes the socket, frees everything; no callback after this.  NULL is fine. */
void cj_conn_free(struct cj_conn *c);

struct evbuffer *cj_conn_input(const struct cj_conn *c);
struct evbuffer *cj_conn_output(const struct cj_conn *c);
/* low: on_read runs when the input holds at least this much, and a read ends
 * a chain there.  high: no read starts while the input holds this much (0 =
 * no limit); one read may go past it by at most CJ_CONN_BLOCK. */
void cj_conn_set_read_watermarks(struct cj_conn *c, size_t low, size_t high);
void cj_conn_set_write_low(struct cj_conn *c, size_t low);
/* The owner says the connection has been idle for a while: the block it was
 * filling goes back, and the process's pool of free blocks is emptied when no
 * connection took a block from it since the last such call (so a transfer
 * keeps its recycled blocks, and an idle process holds none). */
void cj_conn_idle(struct cj_conn *c);
/* The owner's switch for reading (the TLS handshake reads regardless). */
void cj_conn_set_reading(struct cj_conn *c, bool on);

/* Output bytes not yet on the socket: the owner's output, and with a carrier
 * its wire bytes and what waits for the peer's window. */
size_t cj_conn_queued(const struct cj_conn *c);
/* Of those, the bytes a carrier holds for the peer's flow-control window. */
size_t cj_conn_held(const struct cj_conn *c);

struct cj_carrier;
/* Puts a carrier (carrier.h) between the socket and the SFM stream: from now
 * on the input holds the SFM bytes it unwraps and the output's whole frames
 * are wrapped by it; its first bytes are queued.  Set once, before any I/O
 * (after cj_conn_new); the conn owns k from then on.  0, or -1 (k is then the
 * caller's). */
int cj_conn_set_carrier(struct cj_conn *c, struct cj_carrier *k);

SSL *cj_conn_ssl(const struct cj_conn *c);
/* Why the connection ended: OpenSSL's error queue ("lib: reason; ...") or the
 * errno text, captured when it happened; "" when nothing was said. */
const char *cj_conn_error_text(const struct cj_conn *c);
const struct cj_conn_counters *cj_conn_counters(const struct cj_conn *c);

#endif
