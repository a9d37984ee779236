/* opts.c — cjrelay-sim's command line (interface.md "cjrelay-sim"). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "util/log.h"
#include "util/parse.h"
#include "util/version.h"
#include "wire/fqcn.h"

static const char USAGE[] =
    "usage: cjrelay-sim --listen tcp://127.0.0.1:PORT|stcp://HOST:PORT [--tls-dir DIR] --job-id J1\n"
    "                   [--log-headers FILE] [--window SIZE] [--heartbeat SECS] [--log-level LEVEL]\n"
    "                   [--rounds N] [--model-size SIZE] [--tensors N] [--format safetensors|numpy]\n"
    "                   [--isolate] [--inline] [--download-log FILE]\n"
    "  --listen        where the relay connects; port 0 picks a free port. Prints \"SIM READY <port>\"\n"
    "  --tls-dir       rootCA.pem, server.crt, server.key; stcp:// requires it and client certificates (mtls)\n"
    "  --job-id        the job: this process is the cells server and server.<job>\n"
    "  --log-headers   append each received request's first header block as one key=value line\n"
    "  --window        stream window of the simulator's replies (default 64M)\n"
    "  --heartbeat     PING a connected client after this many idle seconds (default 0: never)\n"
    "  --rounds ... --download-log   FL flags: accepted, not implemented yet (issue 5)\n";

enum {
    O_LISTEN = 1, O_TLS_DIR, O_JOB_ID, O_LOG_HEADERS, O_WINDOW, O_HEARTBEAT, O_LOG_LEVEL, O_ROUNDS, O_MODEL_SIZE,
    O_TENSORS, O_FORMAT, O_ISOLATE, O_INLINE, O_DOWNLOAD_LOG, O_HELP, O_VERSION,
};

static const struct option LONGOPTS[] = {
    {"listen", required_argument, NULL, O_LISTEN},
    {"tls-dir", required_argument, NULL, O_TLS_DIR},
    {"job-id", required_argument, NULL, O_JOB_ID},
    {"log-headers", required_argument, NULL, O_LOG_HEADERS},
    {"window", required_argument, NULL, O_WINDOW},
    {"heartbeat", required_argument, NULL, O_HEARTBEAT},
    {"log-level", required_argument, NULL, O_LOG_LEVEL},
    {"rounds", required_argument, NULL, O_ROUNDS},
    {"model-size", required_argument, NULL, O_MODEL_SIZE},
    {"tensors", required_argument, NULL, O_TENSORS},
    {"format", required_argument, NULL, O_FORMAT},
    {"isolate", no_argument, NULL, O_ISOLATE},
    {"inline", no_argument, NULL, O_INLINE},
    {"download-log", required_argument, NULL, O_DOWNLOAD_LOG},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "cjrelay-sim: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s", USAGE);
    return -1;
}

static int copy_arg(char *dst, size_t n, const char *opt, const char *val)
{
    if (strlen(val) >= n) return usage_error("%s: value too long (%s)", opt, val);
    strcpy(dst, val);
    return 0;
}

static int positive_long(const char *opt, const char *val, long *out)
{
    long long v;
    const char *why = NULL;
    if (cj_parse_int(val, &v, &why) < 0 || v < 1 || v > 1000000)
        return usage_error("%s: '%s' is not a count from 1 to 1000000", opt, val);
    *out = (long)v;
    return 0;
}

static void defaults(struct sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->window = (uint64_t)64 << 20;
    o->log_level = CJ_LOG_INFO;
    o->rounds = 3;
    o->tensors = 8;
    o->model_size = (int64_t)64 << 20;
    strcpy(o->format, "safetensors");
}

static int one_option(struct sim_opts *o, int c, const char *arg)
{
    const char *why = NULL;
    int64_t size;
    switch (c) {
    case O_LISTEN: return copy_arg(o->listen, sizeof o->listen, "--listen", arg);
    case O_TLS_DIR: return copy_arg(o->tls_dir, sizeof o->tls_dir, "--tls-dir", arg);
    case O_JOB_ID: return copy_arg(o->job_id, sizeof o->job_id, "--job-id", arg);
    case O_LOG_HEADERS: return copy_arg(o->log_headers, sizeof o->log_headers, "--log-headers", arg);
    case O_WINDOW:
        if (cj_parse_size(arg, &size, &why) < 0 || size < 65536 || size > ((int64_t)16 << 30))
            return usage_error("--window: '%s' is not a size from 64K to 16G%s", arg, "");
        o->window = (uint64_t)size;
        return 0;
    case O_HEARTBEAT:
        if (cj_parse_duration(arg, &o->heartbeat, &why) < 0 || o->heartbeat > 3600)
            return usage_error("--heartbeat: '%s' is not a number of seconds up to 3600%s", arg, "");
        return 0;
    case O_LOG_LEVEL:
        if ((o->log_level = cj_log_level_from_name(arg)) < 0)
            return usage_error("--log-level: '%s' is not error, warning, info or debug%s", arg, "");
        return 0;
    case O_ROUNDS: o->fl_flags_given = true; return positive_long("--rounds", arg, &o->rounds);
    case O_TENSORS: o->fl_flags_given = true; return positive_long("--tensors", arg, &o->tensors);
    case O_MODEL_SIZE:
        o->fl_flags_given = true;
        if (cj_parse_size(arg, &o->model_size, &why) < 0 || o->model_size < 1)
            return usage_error("--model-size: '%s' %s", arg, why ? why : "must be positive");
        return 0;
    case O_FORMAT:
        o->fl_flags_given = true;
        if (strcmp(arg, "safetensors") && strcmp(arg, "numpy"))
            return usage_error("--format: '%s' is not safetensors or numpy%s", arg, "");
        return copy_arg(o->format, sizeof o->format, "--format", arg);
    case O_ISOLATE: o->fl_flags_given = true; o->isolate = true; return 0;
    case O_INLINE: o->fl_flags_given = true; o->inline_tensors = true; return 0;
    case O_DOWNLOAD_LOG:
        o->fl_flags_given = true;
        return copy_arg(o->download_log, sizeof o->download_log, "--download-log", arg);
    default: return usage_error("unknown option%s%s", "", "");
    }
}

int sim_parse_args(int argc, char **argv, struct sim_opts *o)
{
    defaults(o);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", LONGOPTS, NULL)) != -1) {
        if (c == O_HELP) {
            fputs(USAGE, stdout);
            return 1;
        }
        if (c == O_VERSION) {
            printf("cjrelay-sim %s\n", CJRELAY_VERSION);
            return 1;
        }
        if (c == '?' || c == ':')
            return usage_error("bad or incomplete option '%s'%s", argv[optind - 1], "");
        if (one_option(o, c, optarg) < 0) return -1;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'%s", argv[optind], "");
    if (!o->listen[0]) return usage_error("--listen is required%s%s", "", "");
    if (!o->job_id[0]) return usage_error("--job-id is required%s%s", "", "");
    if (!cj_fqcn_valid(o->job_id) || strchr(o->job_id, '.') || !strcmp(o->job_id, CJ_FQCN_SERVER))
        return usage_error("--job-id: '%s' is not a valid FQCN part%s", o->job_id, "");
    return 0;
}
