/* SPDX-License-Identifier: Apache-2.0 */
/* creds.h — the job credentials the relay sends upstream (doc/protocol/fl-protocols.md §6).
 *
 * Each value comes from the credentials file when it has the key, else from
 * the environment variable, else the default:
 *
 *   value            file key          environment                    default
 *   token            token             NVFLARE_JOB_AUTH_TOKEN         "NA"
 *   token signature  token_signature   NVFLARE_JOB_TOKEN_SIGNATURE    "NA"
 *   ssid             ssid              NVFLARE_JOB_SSID               ""  (flagged)
 *
 * (cellnet: a CJ without credentials sends "NA" for token and signature.)
 *
 * Credentials file formats (chosen by the first non-blank character):
 *  - a JSON object: {"token": "...", "token_signature": "...", "ssid": "..."};
 *    the three keys must be strings when present; other keys are ignored
 *    (a program may have written more);
 *  - otherwise `key = value` lines: blank lines and lines starting with '#' or
 *    ';' are skipped; whitespace around key and value is trimmed; a value may be
 *    wrapped in double quotes (kept verbatim inside); only the three keys above
 *    are allowed (a typo is an error naming file:line, not a silent fallback);
 *    a key given twice is an error.
 * The file must be a regular file that is owner-only (mode & 077 == 0): a file
 * readable by group or others is refused with a message naming the file and its
 * mode.  Values hold no control characters and are at most CJ_CREDS_VALUE_MAX
 * bytes; the empty value in the file counts as absent.
 *
 * Credentials are never logged: messages name keys, files and lines, never a
 * value.  Use cj_creds_redact for anything that must show one, and
 * cj_creds_clear to wipe a struct. */
#ifndef CJ_FL_CREDS_H
#define CJ_FL_CREDS_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define CJ_CREDS_ENV_TOKEN "NVFLARE_JOB_AUTH_TOKEN"
#define CJ_CREDS_ENV_SIGNATURE "NVFLARE_JOB_TOKEN_SIGNATURE"
#define CJ_CREDS_ENV_SSID "NVFLARE_JOB_SSID"
#define CJ_CREDS_NA "NA"
#define CJ_CREDS_VALUE_MAX 4095
#define CJ_CREDS_FILE_MAX (64 * 1024)

enum cj_creds_source { CJ_CREDS_DEFAULT = 0, CJ_CREDS_FILE, CJ_CREDS_ENV, CJ_CREDS_JOB };   /* JOB: a job description */

/* status flags */
#define CJ_CREDS_TOKEN_MISSING 0x1u      /* token is the "NA" default */
#define CJ_CREDS_SIGNATURE_MISSING 0x2u  /* signature is the "NA" default */
#define CJ_CREDS_SSID_MISSING 0x4u       /* ssid is empty: worth a warning (a wrong ssid is authentication_error) */

struct cj_creds {
    char token[CJ_CREDS_VALUE_MAX + 1];
    char signature[CJ_CREDS_VALUE_MAX + 1];
    char ssid[CJ_CREDS_VALUE_MAX + 1];
    enum cj_creds_source token_src, signature_src, ssid_src;
    unsigned flags;                      /* CJ_CREDS_*_MISSING */
};

/* Loads credentials: file (may be NULL or "" for none) first, then the
 * environment, then the defaults.  Fails (and leaves c cleared) when the file
 * cannot be read, is not owner-only, is malformed, or a value is too long or
 * holds control characters (the environment's too). */
int cj_creds_load(const char *file, struct cj_creds *c, struct cj_err *err);

/* Parses credentials file text (either format) into c: only the keys the text
 * has are set (source CJ_CREDS_FILE); name is used in messages. */
int cj_creds_parse(const char *text, size_t len, const char *name, struct cj_creds *c, struct cj_err *err);

/* Safe text for logs: "(empty)", "NA" for the "NA" placeholder, otherwise
 * "<redacted, N bytes>".  Returns out. */
const char *cj_creds_redact(const char *secret, char *out, size_t outsz);

/* One line for logs: "token from file, token_signature from env, ssid missing". */
const char *cj_creds_describe(const struct cj_creds *c, char *out, size_t outsz);

/* Wipes c (explicit_bzero). */
void cj_creds_clear(struct cj_creds *c);

#endif
