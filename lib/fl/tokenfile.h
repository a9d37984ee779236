/* SPDX-License-Identifier: Apache-2.0 */
/* tokenfile.h — [workers] launch_token_file: the tokens that workers started
 * outside the relay present in their HELLO (the relay launches none then). */
#ifndef CJ_FL_TOKENFILE_H
#define CJ_FL_TOKENFILE_H

#include <stddef.h>

#include "util/err.h"

#define CJ_LAUNCHER_TOKENS_MAX 64          /* tokens in one file */
#define CJ_LAUNCHER_TOKEN_MIN 16           /* shorter is no secret */
#define CJ_LAUNCHER_TOKEN_MAX 255          /* what a bootstrap file's launch_token holds */
#define CJ_LAUNCHER_TOKEN_FILE_MAX (64 * 1024)

struct cj_launch_tokens {
    size_t n;
    char tok[CJ_LAUNCHER_TOKENS_MAX][CJ_LAUNCHER_TOKEN_MAX + 1];
};

/* Reads a launch token file: one token per line; blank lines and lines whose
 * first non-blank character is '#' are skipped; blanks around a token are
 * trimmed; a token is CJ_LAUNCHER_TOKEN_MIN..CJ_LAUNCHER_TOKEN_MAX printable
 * ASCII characters without blanks; a token given twice counts once.  The file
 * must be a regular file that is owner-only (mode & 077 == 0) and hold at least
 * one token.  0 with out filled, or -1 with err naming the file (and line),
 * never a token; out is wiped then. */
int cj_launcher_read_tokens(const char *path, struct cj_launch_tokens *out, struct cj_err *err);
/* The parsing part of cj_launcher_read_tokens, on the file's bytes (path only
 * names it in errors); out must start empty.  On -1 out may hold the tokens
 * of the lines before the bad one: wipe it. */
int cj_launcher_parse_tokens(const char *path, const char *buf, size_t len, struct cj_launch_tokens *out,
                             struct cj_err *err);
/* Wipes the tokens (explicit_bzero). */
void cj_launcher_tokens_clear(struct cj_launch_tokens *t);

#endif
