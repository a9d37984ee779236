/* SPDX-License-Identifier: Apache-2.0 */
/* cjrelay-worker — the reference Client API worker (doc/interface.md, doc/design.md).
 *
 *   cjrelay-worker [--bootstrap FILE] [--connect-window SECS] [--log-level LEVEL]
 *   cjrelay-worker --direct URL [--tls-dir DIR] --job-id J [--site S]   (benchmarks: no relay)
 *
 * Table of contents:
 *   worker.h   what the worker does, its state, exit codes (read this first)
 *   main.c     the command line and the bootstrap file (refused: exit 2)
 *   run.c      event loop, timers, signals, the way out (drain the link, then exit)
 *   conn.c     link to the relay (unix: or tcp://), stream endpoint I/O
 *   session.c  the launched mode: link events and reconnects,
 *              client_api.hello / session_ready (retried every 1 s for the
 *              connect window), heartbeats, relay-silence and relay-pid
 *              watchdogs, abort, shutdown, log
 *   task.c     task_ready: DXO, download, +1.0f, task_accepted, result ref,
 *              result_ready, settle, metric
 *   direct.c   direct mode: one task straight from the server, downloaded and
 *              timed like a relayed one (bench/run.sh compares the two) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <sys/stat.h>

#include "fl/bootstrap.h"
#include "net/addr.h"
#include "util/log.h"
#include "util/parse.h"
#include "util/version.h"
#include "wire/fqcn.h"
#include "worker.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cjrelay-worker [--bootstrap FILE] [--connect-window SECS] [--log-level LEVEL]\n"
            "       cjrelay-worker --direct URL [--tls-dir DIR] --job-id JOB [--site SITE] [--cell FQCN] [--raw]\n"
            "                      [--log-level LEVEL]\n"
            "       cjrelay-worker --version | --help\n"
            "  --bootstrap FILE       the bootstrap JSON written by the relay (default: $%s)\n"
            "  --connect-window SECS  how long to retry connect / hello / session_ready, and to\n"
            "                         reconnect a lost link (default %g)\n"
            "  --log-level LEVEL      error | warning | info (default) | debug\n"
            "  --direct URL           benchmarks: no bootstrap, no session; connect to the server at\n"
            "                         URL as the cell SITE.JOB, take one task (get_task), download\n"
            "                         and transform its model as usual, print\n"
            "                         'DIRECT round=R task=ID bytes=B secs=T MiB/s=X', exit 0;\n"
            "                         URL: tcp://, http://, grpc://, or with --tls-dir stcp://,\n"
            "                         https://, grpcs:// (HOST:PORT), or the relay's unix:PATH\n"
            "  --tls-dir DIR          direct mode over a TLS scheme: mutual TLS with DIR/rootCA.pem\n"
            "                         (the CA the server's certificate must chain to), DIR/client.crt\n"
            "                         and DIR/client.key (the site's certificate and key); grpcs also\n"
            "                         checks that the server's certificate names URL's host\n"
            "  --job-id JOB, --site SITE  the job and site in direct mode (SITE default site-1)\n"
            "  --cell FQCN            direct mode's cell name (default SITE.JOB); a child of a relay\n"
            "                         (SITE.JOB.LEAF) with URL the relay's worker socket goes through\n"
            "                         the relay's router instead\n"
            "  --raw                  direct mode: check each item's header and drop it, no transform\n"
            "                         (measures the transfer, not the worker's arithmetic)\n"
            "environment: NVFLARE_NP_STREAMING_PER_REQUEST_TIMEOUT, NVFLARE_TENSOR_STREAMING_PER_REQUEST_TIMEOUT\n"
            "                         a numpy / torch model's download per-request timeout in seconds\n"
            "                         (default 600, as the stock trainer); a request unanswered that\n"
            "                         long is re-sent with the same state (up to 3 times)\n"
            "exit: 0 shutdown, 1 abort or fatal error, 2 usage or bootstrap refused,\n"
            "      3 no session with the relay, 4 relay lost\n",
            CJ_BOOTSTRAP_ENV, WK_CONNECT_WINDOW);
}

/* The --direct URL: a scheme the link speaks, --tls-dir exactly when it is a
 * TLS one.  0, or -1 with the reason printed. */
static int check_direct_url(const struct wk_opts *o)
{
    struct cj_addr addr;
    struct cj_err err = {0};
    if (cj_addr_parse(o->direct, CJ_EP_NET | CJ_EP_UNIX, 0, &addr, &err) < 0) {
        fprintf(stderr, "cjrelay-worker: --direct %s: %s\n", o->direct, err.msg);
        return -1;
    }
    bool tls = cj_ep_tls(addr.ep.kind);
    if (tls && !o->tls_dir[0]) {
        fprintf(stderr, "cjrelay-worker: --direct %s: a TLS scheme needs --tls-dir DIR (rootCA.pem, client.crt, "
                        "client.key)\n", o->direct);
        return -1;
    }
    if (!tls && o->tls_dir[0]) {
        fprintf(stderr, "cjrelay-worker: --tls-dir needs a TLS --direct URL (stcp://, https:// or grpcs://), not %s\n",
                o->direct);
        return -1;
    }
    return 0;
}

/* 0 to run, 1 to exit 0 (--help, --version), -1 usage error (printed). */
static int parse_args(int argc, char **argv, struct wk_opts *o)
{
    *o = (struct wk_opts){.connect_window = WK_CONNECT_WINDOW, .log_level = CJ_LOG_INFO};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char *why = NULL;
        if (!strcmp(a, "--version")) {
            printf("cjrelay-worker %s\n", CJRELAY_VERSION);
            return 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--raw")) {
            o->raw = true;
            continue;
        } else if (!v) {
            fprintf(stderr, "cjrelay-worker: %s: unknown option or missing value\n", a);
            return -1;
        } else if (!strcmp(a, "--bootstrap")) {
            if (!*v || strlen(v) >= sizeof o->bootstrap) {
                fprintf(stderr, "cjrelay-worker: --bootstrap: empty or too long path\n");
                return -1;
            }
            snprintf(o->bootstrap, sizeof o->bootstrap, "%s", v);
        } else if (!strcmp(a, "--tls-dir")) {
            if (!*v || strlen(v) >= sizeof o->tls_dir) {
                fprintf(stderr, "cjrelay-worker: --tls-dir: empty or too long path\n");
                return -1;
            }
            snprintf(o->tls_dir, sizeof o->tls_dir, "%s", v);
        } else if (!strcmp(a, "--connect-window")) {
            if (cj_parse_duration(v, &o->connect_window, &why) < 0 || o->connect_window <= 0) {
                fprintf(stderr, "cjrelay-worker: --connect-window %s: %s\n", v, why ? why : "must be > 0");
                return -1;
            }
        } else if (!strcmp(a, "--direct") || !strcmp(a, "--job-id") || !strcmp(a, "--site") ||
                   !strcmp(a, "--cell")) {
            char *dst = !strcmp(a, "--direct")   ? o->direct
                        : !strcmp(a, "--job-id") ? o->job_id
                        : !strcmp(a, "--site")   ? o->site
                                                 : o->cell;
            size_t cap = !strcmp(a, "--direct")   ? sizeof o->direct
                         : !strcmp(a, "--job-id") ? sizeof o->job_id
                         : !strcmp(a, "--site")   ? sizeof o->site
                                                  : sizeof o->cell;
            if (!*v || strlen(v) >= cap) {
                fprintf(stderr, "cjrelay-worker: %s: empty or too long\n", a);
                return -1;
            }
            snprintf(dst, cap, "%s", v);
        } else if (!strcmp(a, "--log-level")) {
            if ((o->log_level = cj_log_level_from_name(v)) < 0) {
                fprintf(stderr, "cjrelay-worker: --log-level %s: use error, warning, info or debug\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "cjrelay-worker: %s: unknown option\n", a);
            return -1;
        }
        i++;
    }
    if ((o->raw || o->tls_dir[0]) && !o->direct[0]) {
        fprintf(stderr, "cjrelay-worker: %s needs --direct\n", o->raw ? "--raw" : "--tls-dir");
        return -1;
    }
    return o->direct[0] ? check_direct_url(o) : 0;
}

/* Reads and checks the bootstrap as the stock trainer's flare.init() would,
 * plus what this worker needs (a unix:, uds:// or tcp:// connect_url, valid FQCNs).
 * Messages name keys and the path, never the token. */
static int load_bootstrap(const struct wk_opts *o, struct cj_bootstrap *bs)
{
    const char *path = o->bootstrap[0] ? o->bootstrap : getenv(CJ_BOOTSTRAP_ENV);
    const char *api = getenv("CLIENT_API_TYPE");
    struct cj_err err = {0};
    struct cj_addr addr;
    if (!path || !*path) {
        cj_log_error("no bootstrap file: pass --bootstrap FILE or set %s (the relay sets it when it launches "
                     "workers); refusing to start",
                     CJ_BOOTSTRAP_ENV);
        return -1;
    }
    if (api && *api && strcmp(api, "CELL_API")) {
        cj_log_error("CLIENT_API_TYPE is '%s', not CELL_API: refusing to start (the relay removes it)", api);
        return -1;
    }
    if (cj_bootstrap_read(path, bs, &err)) {
        cj_log_error("bootstrap file %s refused: %s; refusing to start", path, err.msg);
        return -1;
    }
    if (cj_addr_parse(bs->connect_url, CJ_EP_TCP | CJ_EP_UNIX, 0, &addr, &err) < 0) {
        cj_log_error("bootstrap file %s refused: connect_url: %s (want unix:PATH or tcp://HOST:PORT, or uds://PATH); refusing to "
                     "start",
                     path, err.msg);
        return -1;
    }
    if (!cj_fqcn_valid(bs->cj_fqcn) || !cj_fqcn_valid(bs->trainer_fqcn)) {
        cj_log_error("bootstrap file %s refused: %s is not a valid FQCN; refusing to start", path,
                     cj_fqcn_valid(bs->cj_fqcn) ? "trainer_fqcn" : "cj_fqcn");
        return -1;
    }
    if (!cj_fqcn_is_direct_child(bs->cj_fqcn, bs->trainer_fqcn, NULL))
        cj_log_warning("trainer_fqcn %s is not a child of the relay %s: the relay will likely refuse it",
                       bs->trainer_fqcn, bs->cj_fqcn);
    return 0;
}

/* Under a relay run by systemd the worker inherits JOURNAL_STREAM, but its
 * stderr is the relay's pipe, not the journal: keep the human prefixes
 * (timestamp, name, pid, level) unless stderr really is that stream. */
static void check_journal_stream(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js) return;
    if (sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) != 0 || (unsigned long long)st.st_dev != dev ||
        (unsigned long long)st.st_ino != ino)
        unsetenv("JOURNAL_STREAM");
}

int main(int argc, char **argv)
{
    check_journal_stream();
    struct wk_opts o;
    static struct cj_bootstrap bs;
    cj_log_init("cjrelay-worker");
    signal(SIGPIPE, SIG_IGN);
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        if (rc < 0) usage(stderr);
        return rc > 0 ? WK_EXIT_OK : WK_EXIT_USAGE;
    }
    cj_log_set_level(o.log_level);
    if (o.direct[0] ? wk_direct_bootstrap(&o, &bs) : load_bootstrap(&o, &bs)) return WK_EXIT_USAGE;
    rc = wk_run(&o, &bs);
    explicit_bzero(&bs, sizeof bs);
    return rc;
}
