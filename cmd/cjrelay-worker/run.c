/* SPDX-License-Identifier: Apache-2.0 */
/* run.c — the worker process: its event loop, timers and signals, and the way
 * out (drain the link, then leave the loop) (see worker.h). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "dl/producer.h"
#include "net/link.h"
#include "net/tls.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "worker.h"

#define FLUSH_POLL 0.05   /* s between looks at the link while exiting */
#define FLUSH_QUIET 0.1   /* s without input before closing: the relay's ACK of our last
                             reply then finds the socket open (no reset on its side) */

/* ---- the way out ------------------------------------------------------------------------- */

/* Leaves the loop once what we sent last (a shutdown reply, a task_failed)
 * has reached the socket and the relay has gone quiet, or after WK_FLUSH_MAX. */
static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    struct cj_stream_stats st;
    cj_stream_get_stats(w->ep, &st);
    bool drained = !w->link || cj_link_get_state(w->link) != CJ_LINK_UP ||
                   (st.tx_active == 0 && cj_link_queued(w->link) == 0 && cj_link_rx_idle(w->link) >= FLUSH_QUIET);
    if (drained || cj_now() >= w->exit_deadline) {
        event_base_loopbreak(w->base);
        return;
    }
    struct timeval tv = cj_tv(FLUSH_POLL);
    evtimer_add(w->flush, &tv);
}

void wk_exit(struct wk *w, int code, const char *fmt, ...)
{
    if (w->exiting) return;
    w->exiting = true;
    w->exit_code = code;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cj_log(code ? CJ_LOG_ERROR : CJ_LOG_INFO, "%s; exiting with status %d", msg, code);
    evtimer_del(w->tick);
    evtimer_del(w->hb_timer);
    evtimer_del(w->retry);
    wk_task_drop(w);   /* an unanswered task gets task_failed before we go */
    w->exit_deadline = cj_now() + WK_FLUSH_MAX;
    struct timeval tv = cj_tv(0);
    evtimer_add(w->flush, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    wk_exit(arg, WK_EXIT_FAIL, "signal %s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- timers ------------------------------------------------------------------------------- */

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    if (w->exiting) return;
    if (!w->link) wk_connect(w);
    else wk_session_retry(w);
}

void wk_retry_in(struct wk *w, double secs)
{
    struct timeval tv = cj_tv(secs);
    evtimer_add(w->retry, &tv);   /* re-adding replaces the pending timeout */
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wk *w = arg;
    if (!w->exiting) wk_session_tick(w);
}

/* ---- run ------------------------------------------------------------------------------------ */

static int setup(struct wk *w)
{
    if (!(w->base = event_base_new())) return -1;
    w->m = calloc(1, sizeof *w->m);
    w->ep = wk_endpoint_new(w);
    w->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, w);
    w->hb_timer = event_new(w->base, -1, EV_PERSIST, wk_session_hb_cb, w);
    w->retry = evtimer_new(w->base, retry_cb, w);
    w->flush = evtimer_new(w->base, flush_cb, w);
    w->sig_term = evsignal_new(w->base, SIGTERM, on_signal, w);
    w->sig_int = evsignal_new(w->base, SIGINT, on_signal, w);
    if (!w->m || !w->ep || !w->tick || !w->hb_timer || !w->retry || !w->flush || !w->sig_term || !w->sig_int)
        return -1;
    if (!(w->prod = cj_dl_producer_new(w->base, w->ep, NULL))) return -1;
    if (w->mode->register_handlers && w->mode->register_handlers(w)) return -1;
    evsignal_add(w->sig_term, NULL);
    evsignal_add(w->sig_int, NULL);
    struct timeval tv = cj_tv(WK_PID_POLL);
    evtimer_add(w->tick, &tv);
    return 0;
}

static void teardown(struct wk *w)
{
    wk_task_drop(w);
    if (w->prod) cj_dl_producer_free(w->prod);
    if (w->ep) cj_stream_free(w->ep);   /* pending requests fail; callbacks see w->exiting */
    cj_link_free(w->link);
    struct event *evs[] = {w->tick, w->hb_timer, w->retry, w->flush, w->sig_term, w->sig_int};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) event_free(evs[i]);
    if (w->base) {
        event_base_loop(w->base, EVLOOP_NONBLOCK);   /* a link closing frees itself from the loop */
        event_base_free(w->base);
    }
    free(w->m);
    if (w->tls) cj_tls_ctx_free(w->tls);   /* after the loop: a closing link may still hold an SSL */
    explicit_bzero(w, sizeof *w);   /* the launch token and delegated credentials */
    free(w);
}

int wk_run(const struct wk_opts *o, const struct cj_bootstrap *bs)
{
    struct wk *w = calloc(1, sizeof *w);
    if (!w) {
        cj_log_error("out of memory");
        return WK_EXIT_FAIL;
    }
    w->opts = *o;
    w->bs = *bs;
    w->mode = o->direct[0] ? &wk_direct_mode : &wk_launched_mode;
    w->phase = WK_CONNECTING;
    w->started = cj_now();
    if (o->tls_dir[0] && !(w->tls = wk_direct_tls(o))) {
        w->exiting = true;
        teardown(w);
        return WK_EXIT_USAGE;
    }
    if (setup(w)) {
        cj_log_error("cannot set up the event loop (out of memory?)");
        w->exiting = true;
        teardown(w);
        return WK_EXIT_FAIL;
    }
    /* The stock trainer watches cj_pid only when it is visible at start. */
    w->pid_watch = bs->cj_pid > 0 && (kill((pid_t)bs->cj_pid, 0) == 0 || errno == EPERM);
    if (bs->cj_pid > 0 && !w->pid_watch)
        cj_log_warning("relay pid %lld is not visible; not watching it", (long long)bs->cj_pid);
    w->mode->log_start(w);
    wk_connect(w);
    event_base_dispatch(w->base);
    int code = w->exiting ? w->exit_code : WK_EXIT_FAIL;
    if (!w->exiting) {
        cj_log_error("event loop ended unexpectedly");
        w->exiting = true;
    }
    teardown(w);
    return code;
}
