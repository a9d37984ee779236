/* SPDX-License-Identifier: Apache-2.0 */
/* preflight.c — a configuration's files and programs checked on the machine. */
#include "ops/preflight.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl/launcher.h"
#include "net/tls.h"
#include "net/tlscheck.h"
#include "util/account.h"

struct pf {
    bool full;
    const struct cj_config *cfg;
    struct cj_problems *pb;
    int n;
};

static void add(struct pf *p, const char *key, const char *msg)
{
    const char *file = p->cfg->origin.file[0] ? p->cfg->origin.file : "(defaults)";
    cj_problems_add(p->pb, "%s:%d: %s: %s", file, cj_config_key_line(p->cfg, key), key, msg);
    p->n++;
}

static void tls_report(void *arg, const char *which, const char *msg)
{
    char key[64];
    snprintf(key, sizeof key, "upstream.%s", which);
    add(arg, key, msg);
}

/* The server accepts an mTLS client only when its certificate's CN is the site
 * name (doc/protocol/cellnet.md §9): another certificate could never connect. */
static void check_cn(struct pf *p)
{
    const struct cj_config *c = p->cfg;
    char cn[256], msg[800];
    struct cj_err err = {0};
    if (cj_tls_cert_cn(c->upstream.cert_file, cn, sizeof cn, &err) < 0) return;   /* tlscheck said why */
    if (!strcmp(cn, c->relay.site)) return;
    snprintf(msg, sizeof msg, "the certificate's CN '%s' is not the site name '%s' ([relay] site); the server "
             "refuses such a client", cn, c->relay.site);
    add(p, "upstream.cert_file", msg);
}

static void check_tls(struct pf *p)
{
    const struct cj_config *c = p->cfg;
    if (c->upstream.connection_security == CJ_SEC_CLEAR) return;
    struct cj_tls_files f = {.ca_file = c->upstream.ca_file, .cert_file = c->upstream.cert_file,
                             .key_file = c->upstream.key_file,
                             .mutual = c->upstream.connection_security == CJ_SEC_MTLS, .certain_only = !p->full};
    cj_tls_check_files(&f, tls_report, p);   /* each problem counted as add() reports it */
    if (f.mutual) check_cn(p);
}

static void check_status_group(struct pf *p)
{
    gid_t gid;
    char why[300];
    if (p->cfg->status.socket_group[0] && cj_group_resolve(p->cfg->status.socket_group, &gid, why, sizeof why) != 0)
        add(p, "status.socket_group", strncmp(why, "group: ", 7) ? why : why + 7);
    if (p->cfg->status.admin_group[0] && cj_group_resolve(p->cfg->status.admin_group, &gid, why, sizeof why) != 0)
        add(p, "status.admin_group", strncmp(why, "group: ", 7) ? why : why + 7);
}

static void check_status_dir(struct pf *p)
{
    char dir[CJ_CFG_PATH_MAX], msg[CJ_CFG_PATH_MAX + 160];
    snprintf(dir, sizeof dir, "%s", p->cfg->status.socket);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return;
    snprintf(msg, sizeof msg, "the socket's directory %s %s (the service's RuntimeDirectory= makes /run/cjrelay)",
             dir, errno == ENOENT ? "does not exist" : "is not a directory");
    add(p, "status.socket", msg);
}

/* The command's program, as the launcher will look for it (the daemon's PATH
 * for a bare name). */
static void check_command(struct pf *p)
{
    const struct cj_config *c = p->cfg;
    char msg[CJ_CFG_PATH_MAX + 160];
    if (!c->workers.command[0] || c->workers.count <= 0) return;
    char **argv = NULL;
    int argc = 0;
    struct cj_err err = {0};
    if (cj_launcher_split(c->workers.command, &argv, &argc, &err) != 0) return;   /* config.c reports syntax */
    const char *prog = argc > 0 ? argv[0] : "";
    bool found = false;
    if (strchr(prog, '/')) {
        found = access(prog, X_OK) == 0;
        if (!found) snprintf(msg, sizeof msg, "%s cannot be run: %s", prog, strerror(errno));
    } else {
        const char *path = getenv("PATH") ? getenv("PATH") : CJ_LAUNCHER_DEFAULT_PATH;
        for (const char *cur = path; cur && !found;) {
            char full[PATH_MAX];
            found = cj_launcher_path_next(&cur, prog, full, sizeof full) && access(full, X_OK) == 0;
        }
        if (!found) snprintf(msg, sizeof msg, "%s is not an executable program on the PATH (%s)", prog, path);
    }
    if (!found) add(p, "workers.command", msg);
    cj_launcher_argv_free(argv);
}

int cj_preflight(const struct cj_config *cfg, bool full, struct cj_problems *pb)
{
    struct pf p = {full, cfg, pb, 0};
    check_tls(&p);
    check_status_dir(&p);
    check_status_group(&p);
    check_command(&p);
    return p.n;
}
