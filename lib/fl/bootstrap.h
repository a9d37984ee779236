/* SPDX-License-Identifier: Apache-2.0 */
/* bootstrap.h — the worker bootstrap file (doc/protocol/fl-protocols.md §8) and the small
 * JSON object reader it needs (shared with creds.c).
 *
 * The relay writes one JSON object per launch, atomically (a temporary file in
 * the same directory created O_EXCL with mode 0600, written, fsync'd, renamed
 * over the final name, the directory fsync'd), and passes its path in
 * NVFLARE_CLIENT_API_BOOTSTRAP.  cjrelay-worker reads it back.
 *
 * The file holds the launch token: nothing here logs or prints it, error
 * messages name keys and the path, never values of token keys, and buffers
 * that held the JSON are wiped before they are freed. */
#ifndef CJ_FL_BOOTSTRAP_H
#define CJ_FL_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define CJ_BOOTSTRAP_ENV "NVFLARE_CLIENT_API_BOOTSTRAP"
#define CJ_BOOTSTRAP_SCHEMA_VERSION 1
#define CJ_BOOTSTRAP_MODE "external_process"
#define CJ_BOOTSTRAP_TOKEN_LEN 43          /* 32 random bytes, URL-safe base64, no padding */
#define CJ_BOOTSTRAP_MAX_SIZE (64 * 1024)  /* a bootstrap file larger than this is refused */

#define CJ_BOOTSTRAP_URL_MAX 1023
#define CJ_BOOTSTRAP_ID_MAX 255            /* fqcns, job_id, site_name */
#define CJ_BOOTSTRAP_TOKEN_MAX 255         /* launch_token as read */
#define CJ_BOOTSTRAP_NAME_MAX 63           /* task_exchange strings */

struct cj_bootstrap_task_exchange {
    bool train_with_eval;
    char exchange_format[CJ_BOOTSTRAP_NAME_MAX + 1];        /* "numpy", "pytorch", "raw", ... */
    char server_expected_format[CJ_BOOTSTRAP_NAME_MAX + 1]; /* "numpy" */
    char transfer_type[CJ_BOOTSTRAP_NAME_MAX + 1];          /* "FULL" / "DIFF" */
    char train_task_name[CJ_BOOTSTRAP_NAME_MAX + 1];        /* "train" */
    char eval_task_name[CJ_BOOTSTRAP_NAME_MAX + 1];         /* "validate" */
    char submit_model_task_name[CJ_BOOTSTRAP_NAME_MAX + 1]; /* "submit_model" */
    bool launch_once;
};

struct cj_bootstrap {
    int64_t schema_version;                        /* 1 */
    char execution_mode[32];                       /* "external_process" */
    char connect_url[CJ_BOOTSTRAP_URL_MAX + 1];    /* tcp://127.0.0.1:PORT, unix:PATH or uds://PATH */
    char cj_fqcn[CJ_BOOTSTRAP_ID_MAX + 1];         /* <site>.<job_id> */
    int64_t cj_pid;                                /* > 0; 0 = absent (read) / not written */
    char trainer_fqcn[CJ_BOOTSTRAP_ID_MAX + 1];    /* <site>.<job_id>.<leaf> */
    char launch_token[CJ_BOOTSTRAP_TOKEN_MAX + 1];
    char job_id[CJ_BOOTSTRAP_ID_MAX + 1];
    char site_name[CJ_BOOTSTRAP_ID_MAX + 1];
    bool secure_mode;
    struct cj_bootstrap_task_exchange task_exchange;
    int64_t memory_gc_rounds;
    bool cuda_empty_cache;
    /* Written only: extra keys, extrac pairs "key" NUL raw-JSON-value NUL one
     * after the other (a job description's bootstrap object, checked there).
     * Such a key replaces the field of the same name (task_exchange,
     * memory_gc_rounds, cuda_empty_cache); the others follow the table's keys. */
    const char *extra;
    int extrac;
};

/* Schema 1, external_process, task_exchange defaults (train_with_eval false,
 * numpy/numpy, FULL, train/validate/submit_model, launch_once true),
 * memory_gc_rounds 0, cuda_empty_cache false; every other string empty. */
void cj_bootstrap_defaults(struct cj_bootstrap *b);

/* A fresh launch token: 32 bytes from getrandom, URL-safe base64 without
 * padding (43 characters + NUL).  0 or -1. */
int cj_bootstrap_new_token(char out[CJ_BOOTSTRAP_TOKEN_LEN + 1]);

/* The checks a stock trainer makes (and then some): schema_version 1,
 * execution_mode "external_process", non-empty cj_fqcn, trainer_fqcn, job_id,
 * site_name, connect_url, launch_token; cj_pid >= 0. */
int cj_bootstrap_check(const struct cj_bootstrap *b, struct cj_err *err);

/* The JSON text (one object, keys in the order of the spec's table, Python
 * json.dumps style separators, ending in "\n").  *out is malloc'd: wipe it with
 * explicit_bzero before free (it holds the token).  Checks b first. */
int cj_bootstrap_format(const struct cj_bootstrap *b, char **out, size_t *len, struct cj_err *err);

/* Writes path atomically with mode 0600 (see top).  The temporary file is
 * removed on every failure.  Error messages carry the path and errno text. */
int cj_bootstrap_write(const char *path, const struct cj_bootstrap *b, struct cj_err *err);

/* Parses the JSON text: unknown keys ignored, duplicate keys keep the last
 * value, types checked (ints must be integral JSON numbers), strings bounded,
 * then cj_bootstrap_check.  Absent optional keys keep cj_bootstrap_defaults. */
int cj_bootstrap_parse(const char *json, size_t len, struct cj_bootstrap *b, struct cj_err *err);

/* Reads and parses a file (a regular file, at most CJ_BOOTSTRAP_MAX_SIZE). */
int cj_bootstrap_read(const char *path, struct cj_bootstrap *b, struct cj_err *err);

#endif
