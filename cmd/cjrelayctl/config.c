/* config.c — cjrelayctl -c FILE: find the status socket in the daemon's INI file.
 * Reads only [status] socket with inih; the daemon validates the rest. */
#include <ini.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

struct want { char *out; size_t outsz; int found; };

static int handler(void *user, const char *section, const char *name, const char *value)
{
    struct want *w = user;
    if (!strcmp(section, "status") && !strcmp(name, "socket")) {
        snprintf(w->out, w->outsz, "%s", value);
        w->found = 1;
    }
    return 1;
}

int ctl_socket_from_config(const char *file, char *out, size_t outsz)
{
    struct want w = {out, outsz, 0};
    int rc = ini_parse(file, handler, &w);
    if (rc < 0) { fprintf(stderr, "cjrelayctl: cannot read %s\n", file); return -1; }
    if (rc > 0) { fprintf(stderr, "cjrelayctl: %s:%d: parse error\n", file, rc); return -1; }
    if (!w.found) { snprintf(out, outsz, "/run/cjrelay/status.sock"); return 0; }
    if (out[0] != '/') {   /* relative paths are relative to the config file, as in the daemon */
        char rel[4096];
        const char *slash = strrchr(file, '/');
        snprintf(rel, sizeof rel, "%s", out);
        if (slash) snprintf(out, outsz, "%.*s/%s", (int)(slash - file), file, rel);
    }
    return 0;
}
