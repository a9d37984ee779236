/* SPDX-License-Identifier: Apache-2.0 */
/* err.h — one error record shared by every decoder.
 *
 * A decoder that fails fills a struct cj_err: a code, the byte offset where the
 * problem was found (relative to the start of the decoder's input), and a message
 * that names what was wrong.  Callers log it; nothing in it is ever freed. */
#ifndef CJ_UTIL_ERR_H
#define CJ_UTIL_ERR_H

#include <stddef.h>

enum cj_errc {
    CJ_OK = 0,
    CJ_E_TRUNCATED,   /* input ends inside a value / frame / section */
    CJ_E_INVALID,     /* a byte or field has a value the format forbids */
    CJ_E_LIMIT,       /* a size or count is over a configured or format limit */
    CJ_E_TYPE,        /* a value has the wrong msgpack type for its key */
    CJ_E_MISSING,     /* a required key or section is absent */
    CJ_E_NOMEM,
};

struct cj_err {
    int code;          /* enum cj_errc */
    size_t offset;     /* where in the input */
    char msg[192];
};

/* Sets err (if not NULL) and returns -code, so a decoder can `return cj_fail(...)`. */
int cj_fail(struct cj_err *err, int code, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

const char *cj_errc_name(int code);

/* The runtime code's error text: formats into why (whysz bytes; nothing when
 * why is NULL or whysz 0) and returns -1, so a function can `return cj_why(...)`. */
int cj_why(char *why, size_t whysz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
