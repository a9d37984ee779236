/* SPDX-License-Identifier: Apache-2.0 */
/* err.c — filling struct cj_err. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

int cj_fail(struct cj_err *err, int code, size_t offset, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        err->offset = offset;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -code;
}

const char *cj_errc_name(int code)
{
    switch (code) {
    case CJ_OK: return "ok";
    case CJ_E_TRUNCATED: return "truncated";
    case CJ_E_INVALID: return "invalid";
    case CJ_E_LIMIT: return "limit";
    case CJ_E_TYPE: return "type";
    case CJ_E_MISSING: return "missing";
    case CJ_E_NOMEM: return "nomem";
    }
    return "unknown";
}

int cj_why(char *why, size_t whysz, const char *fmt, ...)
{
    if (!why || !whysz) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whysz, fmt, ap);
    va_end(ap);
    return -1;
}
