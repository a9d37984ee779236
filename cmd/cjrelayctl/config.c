/* SPDX-License-Identifier: Apache-2.0 */
/* config.c — cjrelayctl -c FILE: find the status socket in the daemon's INI file.
 * Reads only [status] socket, by the daemon's rules (';' or '#' starts a
 * comment line, ';' after a blank an inline comment, '=' or ':' separates
 * key and value), with lines of any length the daemon takes; it validates the rest. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ops/config.h"

/* p[0..n) without the blanks around it */
static void trim(const char **p, size_t *n)
{
    while (*n && isspace((unsigned char)**p)) (*p)++, (*n)--;
    while (*n && isspace((unsigned char)(*p)[*n - 1])) (*n)--;
}

/* Looks at one line; 1 when it is [status] socket (value into out). */
static int look(const char *p, size_t n, char *section, size_t secsz, char *out, size_t outsz)
{
    trim(&p, &n);
    if (!n || *p == ';' || *p == '#') return 0;
    if (*p == '[') {
        const char *end = memchr(p, ']', n);
        size_t len = end ? (size_t)(end - p - 1) : 0;
        const char *s = p + 1;
        trim(&s, &len);
        snprintf(section, secsz, "%.*s", (int)len, s);
        return 0;
    }
    for (size_t i = 1; i < n; i++)   /* an inline comment */
        if (p[i] == ';' && isspace((unsigned char)p[i - 1])) { n = i; break; }
    size_t k = strcspn(p, "=:");
    if (k >= n || strcmp(section, "status")) return 0;
    const char *name = p, *value = p + k + 1;
    size_t nlen = k, vlen = n - k - 1;
    trim(&name, &nlen);
    trim(&value, &vlen);
    if (nlen != 6 || memcmp(name, "socket", 6)) return 0;
    snprintf(out, outsz, "%.*s", (int)vlen, value);
    return 1;
}

int ctl_socket_from_config(const char *file, char *out, size_t outsz)
{
    FILE *f = fopen(file, "r");
    if (!f) { fprintf(stderr, "cjrelayctl: cannot read %s\n", file); return -1; }
    char *line = NULL, section[64] = "";
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, found = 0, rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (n > CJ_CONFIG_FILE_MAX) {   /* the daemon refuses such a file */
            fprintf(stderr, "cjrelayctl: %s:%d: line longer than the whole file may be (1 MiB)\n", file, lineno);
            rc = -1;
            break;
        }
        if (look(line, (size_t)n, section, sizeof section, out, outsz)) found = 1;
    }
    free(line);
    fclose(f);
    if (rc) return rc;
    if (!found) { snprintf(out, outsz, "/run/cjrelay/status.sock"); return 0; }
    if (out[0] != '/') {   /* relative paths are relative to the config file, as in the daemon */
        char rel[4096];
        const char *slash = strrchr(file, '/');
        snprintf(rel, sizeof rel, "%s", out);
        if (slash) snprintf(out, outsz, "%.*s/%s", (int)(slash - file), file, rel);
    }
    return 0;
}
