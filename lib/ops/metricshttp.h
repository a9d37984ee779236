/* SPDX-License-Identifier: Apache-2.0 */
/* metricshttp.h — the Prometheus endpoint ([metrics] listen): libevent's own
 * HTTP server (evhttp) on the daemon's loop, answering GET (and HEAD)
 * /metrics with the text exposition a render callback writes, the one
 * `show prometheus` writes too.  Any other path is 404, any other method 405.
 *
 * Bounded: request headers of at most 8 KiB, a body of at most 4 KiB, a
 * connection silent for 10 s is closed; a failed accept (out of descriptors)
 * pauses accepting for a second rather than spinning; the answer is rendered
 * in memory and written without blocking the loop. */
#ifndef CJ_OPS_METRICSHTTP_H
#define CJ_OPS_METRICSHTTP_H

#include <event2/buffer.h>
#include <event2/event.h>

#include "util/err.h"
#include "util/parse.h"

/* Appends the exposition to out: 0, or -1 out of memory. */
typedef int (*cj_metrics_render_fn)(void *ctx, struct evbuffer *out);

struct cj_metrics_http;

/* Listens on ep (tcp, a numeric host; port 0 = a free port, logged as
 * "listening on http://HOST:PORT/metrics").  NULL with err naming the key and
 * the address when the socket cannot be bound. */
struct cj_metrics_http *cj_metrics_http_new(struct event_base *base, const struct cj_endpoint *ep,
                                            cj_metrics_render_fn render, void *ctx, struct cj_err *err);

/* "http://127.0.0.1:40022/metrics": the port the socket is bound to. */
const char *cj_metrics_http_url(const struct cj_metrics_http *m);

/* Closes the listener and every connection; only once the loop has stopped
 * (a pause after a failed accept may still be pending in the base). */
void cj_metrics_http_free(struct cj_metrics_http *m);

#endif
