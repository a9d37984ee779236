/* SPDX-License-Identifier: Apache-2.0 */
/* tokenfile.c — [workers] launch_token_file: the launch tokens of workers
 * started by someone else than the relay, read once and bounded (see tokenfile.h). */
#include "fl/tokenfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


void cj_launcher_tokens_clear(struct cj_launch_tokens *t)
{
    if (t) explicit_bzero(t, sizeof *t);
}

static bool tok_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* One line (without its '\n') into out; 0, or -1 with err naming file:line. */
static int token_line(const char *path, unsigned lineno, const char *p, size_t n, struct cj_launch_tokens *out,
                      struct cj_err *err)
{
    while (n && tok_blank(*p)) p++, n--;
    while (n && tok_blank(p[n - 1])) n--;
    if (!n || *p == '#') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f)
            return cj_fail(err, CJ_E_INVALID, 0,
                           "launch_token_file %s:%u: a token is printable ASCII without blanks (character %zu is "
                           "not)", path, lineno, i + 1);
    if (n < CJ_LAUNCHER_TOKEN_MIN || n > CJ_LAUNCHER_TOKEN_MAX)
        return cj_fail(err, CJ_E_INVALID, 0, "launch_token_file %s:%u: the token has %zu characters, not %d..%d",
                       path, lineno, n, CJ_LAUNCHER_TOKEN_MIN, CJ_LAUNCHER_TOKEN_MAX);
    for (size_t k = 0; k < out->n; k++)
        if (strlen(out->tok[k]) == n && !memcmp(out->tok[k], p, n)) return 0;   /* twice counts once */
    if (out->n >= CJ_LAUNCHER_TOKENS_MAX)
        return cj_fail(err, CJ_E_LIMIT, 0, "launch_token_file %s:%u: more than %d tokens", path, lineno,
                       CJ_LAUNCHER_TOKENS_MAX);
    memcpy(out->tok[out->n], p, n);
    out->tok[out->n++][n] = 0;
    return 0;
}

int cj_launcher_parse_tokens(const char *path, const char *buf, size_t len, struct cj_launch_tokens *out,
                             struct cj_err *err)
{
    unsigned lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len;
        if (memchr(buf + i, 0, end - i))
            return cj_fail(err, CJ_E_INVALID, 0, "launch_token_file %s:%u: a NUL byte", path, lineno + 1);
        if (token_line(path, ++lineno, buf + i, end - i, out, err)) return -1;
        i = end + 1;
    }
    if (!out->n) return cj_fail(err, CJ_E_MISSING, 0, "launch_token_file %s: no token in it", path);
    return 0;
}

int cj_launcher_read_tokens(const char *path, struct cj_launch_tokens *out, struct cj_err *err)
{
    memset(out, 0, sizeof *out);
    if (!path || !path[0]) return cj_fail(err, CJ_E_MISSING, 0, "launch_token_file: no path"), -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return cj_fail(err, CJ_E_INVALID, 0, "launch_token_file: cannot open %s: %s", path, strerror(errno)), -1;
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        rc = cj_fail(err, CJ_E_INVALID, 0, "launch_token_file: %s is not a regular file", path);
    } else if (st.st_mode & 077) {
        rc = cj_fail(err, CJ_E_INVALID, 0,
                     "launch_token_file: refusing %s: mode %04o lets group or others read it; it must be owner-only "
                     "(chmod 600 %s)", path, (unsigned)(st.st_mode & 07777), path);
    } else if (st.st_size > CJ_LAUNCHER_TOKEN_FILE_MAX) {
        rc = cj_fail(err, CJ_E_LIMIT, 0, "launch_token_file: %s is over %d bytes", path, CJ_LAUNCHER_TOKEN_FILE_MAX);
    } else if (!(buf = malloc(CJ_LAUNCHER_TOKEN_FILE_MAX + 1))) {
        rc = cj_fail(err, CJ_E_NOMEM, 0, "launch_token_file: out of memory");
    }
    size_t len = 0;
    while (rc == 0) {   /* the file may grow after fstat: read at most the bound, plus one to notice */
        ssize_t r = read(fd, buf + len, CJ_LAUNCHER_TOKEN_FILE_MAX + 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = cj_fail(err, CJ_E_INVALID, 0, "launch_token_file: cannot read %s: %s", path, strerror(errno));
        else if (r == 0) break;
        else if ((len += (size_t)r) > CJ_LAUNCHER_TOKEN_FILE_MAX)
            rc = cj_fail(err, CJ_E_LIMIT, 0, "launch_token_file: %s is over %d bytes", path,
                         CJ_LAUNCHER_TOKEN_FILE_MAX);
    }
    close(fd);
    if (rc == 0) rc = cj_launcher_parse_tokens(path, buf, len, out, err);
    if (buf) {
        explicit_bzero(buf, CJ_LAUNCHER_TOKEN_FILE_MAX + 1);
        free(buf);
    }
    if (rc) cj_launcher_tokens_clear(out);
    return rc ? -1 : 0;
}
