/* SPDX-License-Identifier: Apache-2.0 */
/* testutil.h — helpers shared by the cmocka unit tests. */
#ifndef CJ_TESTUTIL_H
#define CJ_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#ifndef CJ_VECTORS
#define CJ_VECTORS "tests/vectors"
#endif

/* Reads tests/vectors/<name> whole (fails the test if it cannot).  Free with free(). */
static inline uint8_t *tu_read_vector(const char *name, size_t *len)
{
    char path[512];
    const char *dir = getenv("CJ_VECTORS_DIR");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : CJ_VECTORS, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open vector %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(buf);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read %s", path);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Parses hex text (spaces ignored) into a malloc'd buffer. */
static inline uint8_t *tu_hex(const char *hex, size_t *len)
{
    size_t n = strlen(hex), o = 0;
    uint8_t *buf = malloc(n / 2 + 1);
    assert_non_null(buf);
    int hi = -1;
    for (size_t i = 0; i < n; i++) {
        int c = hex[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else continue;
        if (hi < 0) hi = d;
        else { buf[o++] = (uint8_t)(hi << 4 | d); hi = -1; }
    }
    *len = o;
    return buf;
}

/* ---- the log, captured (the log has no hook: its lines go to fd 2) ---------------------------- */

static int tu_logcap_saved = -1;
static FILE *tu_logcap_file;

/* Sends what is written to stderr to a temporary file until tu_logcap_end. */
static inline void tu_logcap_begin(void)
{
    fflush(stderr);
    tu_logcap_file = tmpfile();
    assert_non_null(tu_logcap_file);
    tu_logcap_saved = dup(STDERR_FILENO);
    assert_true(tu_logcap_saved >= 0);
    dup2(fileno(tu_logcap_file), STDERR_FILENO);
}

/* Restores stderr, echoes what was captured, returns it (free it). */
static inline char *tu_logcap_end(void)
{
    fflush(stderr);
    dup2(tu_logcap_saved, STDERR_FILENO);
    close(tu_logcap_saved);
    int fd = fileno(tu_logcap_file);
    off_t len = lseek(fd, 0, SEEK_END);
    char *buf = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
    assert_non_null(buf);
    lseek(fd, 0, SEEK_SET);
    ssize_t r = read(fd, buf, (size_t)(len > 0 ? len : 0));
    if (r > 0) buf[r] = '\0';
    fclose(tu_logcap_file);
    fputs(buf, stderr);
    return buf;
}

#endif
