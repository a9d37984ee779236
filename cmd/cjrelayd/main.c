/* SPDX-License-Identifier: Apache-2.0 */
/* cjrelayd — the relay daemon.
 *
 *   cjrelayd -c FILE                  run in the foreground (systemd runs it so)
 *   cjrelayd -c FILE --check-config   validate FILE, print every problem, exit 0/1
 *   cjrelayd --version
 *
 * Exit status: ops/exitcodes.c (0 clean end, 1 configuration error, 2 fatal
 * runtime error). */
#include <stdio.h>
#include <string.h>

#include "ops/config.h"
#include "ops/daemon.h"
#include "ops/preflight.h"
#include "ops/exitcodes.h"
#include "util/log.h"
#include "util/version.h"

struct args {
    const char *config;
    int check_only;
};

/* The man page's synopsis, options and exit statuses, in short. */
static void usage(FILE *f)
{
    fprintf(f, "usage: cjrelayd -c FILE [--check-config]\n       cjrelayd --version\n"
               "  -c, --config FILE     the configuration file (cjrelay.ini(5))\n"
               "  -t, --check-config    print every problem of FILE with FILE:LINE, then exit\n"
               "  --version             the version and the FLARE wire format it is pinned to\n"
               "signals: HUP reloads; TERM/INT drains (a second one stops at once); QUIT stops at once\n"
               "exit status:\n");
    for (size_t i = 0; i < cj_exit_ncodes; i++)
        if (!strcmp(cj_exit_codes[i].program, "cjrelayd"))
            fprintf(f, "  %d  %s\n", cj_exit_codes[i].code, cj_exit_codes[i].meaning);
    fprintf(f, "see cjrelayd(8), cjrelayctl(8), cjrelay.ini(5)\n");
}

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && i + 1 < argc) a->config = argv[++i];
        else if (!strcmp(argv[i], "--check-config") || !strcmp(argv[i], "-t")) a->check_only = 1;
        else if (!strcmp(argv[i], "--version")) {
            printf("cjrelayd %s\nwire format: %s\n", CJRELAY_VERSION, CJRELAY_NVFLARE_PIN);
            return 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 1; }
        else { fprintf(stderr, "cjrelayd: unknown argument '%s'\n", argv[i]); usage(stderr); return -1; }
    }
    if (!a->config) { fprintf(stderr, "cjrelayd: -c FILE is required\n"); usage(stderr); return -1; }
    return 0;
}

/* Loads the config and checks what it names on this machine (ops/preflight.h);
 * on problems prints each one and returns -1. */
static int load_config(const char *path, bool check_only, struct cj_config *cfg)
{
    struct cj_problems probs;
    if (cj_config_load(path, cfg, &probs) == 0) {
        cj_problems_init(&probs);
        if (cj_preflight(cfg, check_only, &probs) == 0) return 0;
    }
    for (int i = 0; i < probs.n; i++) fprintf(stderr, "%s\n", probs.msg[i]);
    if (probs.dropped) fprintf(stderr, "%s: ... and %d more problem(s)\n", path, probs.dropped);
    fprintf(stderr, "%s: %d problem(s)\n", path, cj_problems_total(&probs));
    return -1;
}

int main(int argc, char **argv)
{
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? CJ_EXIT_OK : CJ_EXIT_CONFIG;

    cj_log_init("cjrelayd");
    struct cj_config cfg;
    if (load_config(a.config, a.check_only, &cfg) != 0) return CJ_EXIT_CONFIG;
    if (a.check_only) { printf("%s: OK\n", a.config); return CJ_EXIT_OK; }

    struct cj_err err = {0};
    struct cj_daemon *d = cj_daemon_new(a.config, &cfg, &err);
    if (!d) { cj_log_error("cannot start: %s", err.msg); return CJ_EXIT_FATAL; }
    rc = cj_daemon_run(d);
    cj_daemon_free(d);
    return rc;
}
