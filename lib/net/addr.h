/* SPDX-License-Identifier: Apache-2.0 */
/* addr.h — link addresses: parsing, resolution, connecting and listening sockets.
 *
 * URLs (doc/protocol/sfm.md §1, doc/interface.md): tcp://HOST:PORT, stcp://HOST:PORT (TLS), unix:PATH.
 * The grammar is util/parse.h's cj_parse_endpoint; this file adds what a link
 * needs on top of it: socket addresses, a non-blocking connect, and listeners.
 *
 * Name resolution never blocks the event loop:
 *   - IP literals and "localhost" (-> 127.0.0.1) are resolved on the spot,
 *     numerically (getaddrinfo with AI_NUMERICHOST, no network, no files);
 *   - any other host name is resolved asynchronously with libevent's
 *     evdns_getaddrinfo, each time a connection is attempted (so a reconnect
 *     picks up a changed DNS record).  The caller supplies the evdns_base.
 * Listeners accept numeric hosts only (a listen address is always loopback). */
#ifndef CJ_NET_ADDR_H
#define CJ_NET_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/util.h>

#include "util/err.h"
#include "util/parse.h"

struct evdns_base;

/* Text of an address for logs: "tcp://[::1]:8002", "unix:/run/x.sock". */
#define CJ_ADDR_TEXT_MAX (CJ_EP_ADDR_MAX + 32)

/* cj_addr_parse flags. */
#define CJ_ADDR_LISTEN 1u   /* a listen address: tcp must be loopback, port 0 = any free port */

struct cj_addr {
    struct cj_endpoint ep;            /* kind (CJ_EP_*), host or path, port */
    char text[CJ_ADDR_TEXT_MAX];      /* canonical form, for logs */
};

/* Parses url.  kinds: bit set of CJ_EP_UNIX / CJ_EP_TCP / CJ_EP_STCP accepted.
 * With CJ_ADDR_LISTEN a tcp address must be loopback (127.0.0.0/8, ::1,
 * localhost) and may use port 0.  Returns 0 or -CJ_E_INVALID (err says why). */
int cj_addr_parse(const char *url, unsigned kinds, unsigned flags, struct cj_addr *a,
                  struct cj_err *err);

bool cj_addr_is_loopback(const struct cj_addr *a);

/* True when the address can be turned into a sockaddr without DNS: unix
 * paths, IP literals and "localhost". */
bool cj_addr_is_numeric(const struct cj_addr *a);

/* Fills *ss for a numeric address (see cj_addr_is_numeric).  -CJ_E_INVALID
 * for a host name that needs DNS. */
int cj_addr_sockaddr(const struct cj_addr *a, struct sockaddr_storage *ss, socklen_t *len,
                     struct cj_err *err);

/* ---- asynchronous resolution (host names) ----------------------------------- */

/* Called exactly once, unless cancelled: rc 0 with the first address found,
 * or rc < 0 with why.  May run before cj_addr_resolve returns (then that call
 * returns NULL); otherwise it runs from the event loop. */
typedef void (*cj_addr_resolved_fn)(int rc, const struct sockaddr *sa, socklen_t len, const char *why,
                                    void *ctx);
struct cj_resolve;

/* Numeric addresses are answered at once; names go to evdns_getaddrinfo on
 * dns (NULL dns and a name: rc < 0, "needs a DNS resolver").  Returns a handle
 * while a lookup is under way, else NULL (the callback has already run). */
struct cj_resolve *cj_addr_resolve(struct evdns_base *dns, const struct cj_addr *a, cj_addr_resolved_fn fn,
                                   void *ctx);
/* Stops a lookup under way; its callback will not run. */
void cj_addr_resolve_cancel(struct cj_resolve *r);

/* ---- sockets ------------------------------------------------------------------ */

/* A non-blocking stream socket with connect(2) started (0 = done or under
 * way: wait for writability, then cj_sock_connect_result).  Returns the fd or
 * -1 with err set (errno text). */
evutil_socket_t cj_sock_connect_start(const struct sockaddr *sa, socklen_t len, struct cj_err *err);

/* After the socket became writable: 0 when connected, else the errno of the
 * failed connect (SO_ERROR). */
int cj_sock_connect_result(evutil_socket_t fd);

/* A link's socket options.  TCP: TCP_NODELAY (doc/protocol/sfm.md §1); its buffers are
 * left to the kernel's autotuning (tcp_wmem/tcp_rmem), which setting a size
 * would switch off.  AF_UNIX, where the sender's SO_SNDBUF is all the queue
 * there is (default ~208 KiB): SO_SNDBUF of CJ_SOCK_BUFFER (the kernel caps it
 * at net.core.wmem_max), so that reads of a megabyte find a megabyte. */
#define CJ_SOCK_BUFFER (4 * 1024 * 1024)
void cj_sock_tune(evutil_socket_t fd);

/* "127.0.0.1:40022", "[::1]:40022", "unix:/path (pid 123)": the far end of a
 * connected socket, for logs. */
void cj_sock_peer_text(evutil_socket_t fd, char *buf, size_t n);

/* ---- listeners ------------------------------------------------------------------ */

/* Receives a connected, non-blocking socket; the callee owns fd. */
typedef void (*cj_accept_fn)(evutil_socket_t fd, const char *peer, void *ctx);

struct cj_listener;

/* Listens on a (parsed with CJ_ADDR_LISTEN) address.
 *   unix:PATH: an existing PATH is replaced only when it is a stale socket
 *   (nothing accepts on it); a live socket or a file that is not a socket is
 *   refused.  The socket file gets mode (e.g. 0660; 0 = leave umask's).
 *   tcp: loopback only; port 0 picks a free port (cj_listener_port).
 * Returns NULL with err set on failure. */
struct cj_listener *cj_listener_open(struct event_base *base, const struct cj_addr *a, unsigned mode,
                                     cj_accept_fn fn, void *ctx, struct cj_err *err);
/* Closes the socket and removes a unix socket file this listener created. */
void cj_listener_free(struct cj_listener *l);
unsigned cj_listener_port(const struct cj_listener *l);   /* tcp: bound port; unix: 0 */
const char *cj_listener_text(const struct cj_listener *l); /* "tcp://127.0.0.1:40022" */

#define CJ_LISTENER_UIDS_MAX 4
/* A unix listener accepts only peers whose uid (SO_PEERCRED) is one of
 * uids[0..n); any other is logged and closed at once.  n == 0 (the default):
 * whoever the socket file's mode lets connect.  No effect on tcp. */
void cj_listener_set_peer_uids(struct cj_listener *l, const uid_t *uids, int n);

#endif
