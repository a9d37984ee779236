/* SPDX-License-Identifier: Apache-2.0 */
/* json.h — a small bounded JSON cursor (RFC 8259) for the JSON that arrives
 * inside binary formats: the safetensors item header, read by the worker and
 * the simulator (payload/items.c) and checked by the spool (dl/itemcheck.c);
 * and the job description of a status command (ops/jobdesc.c).
 *
 * Like util/mp.h it reads in place, never allocates and never recurses:
 * strings are decoded only into a caller's bounded buffer, any value can be
 * skipped with its nesting capped.  Errors go to err with the offset of the
 * fault (absolute in p); j->who names the format in their text:
 * "<who>: invalid JSON header: <what> at offset N" (CJ_E_INVALID), or
 * "<who>: string at offset N longer than M bytes", "<who>: integer at offset N
 * too large", "<who>: JSON nested deeper than D at offset N" (CJ_E_LIMIT). */
#ifndef CJ_UTIL_JSON_H
#define CJ_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct cj_json {
    const uint8_t *p;
    size_t pos, end;       /* next byte; one past the last byte of the JSON text */
    const char *who;       /* the format, for error texts ("safetensors") */
    struct cj_err *err;
    const char *bad_prefix;  /* what a CJ_E_INVALID text puts before <what>; NULL: "invalid JSON header: " */
};

/* A CJ_E_INVALID failure at the cursor: "<who>: invalid JSON header: <what> at offset N"
 * (or with bad_prefix in place of "invalid JSON header: "). */
int cj_json_bad(struct cj_json *j, const char *what);

/* Skips whitespace; the next byte, or -1 at the end of the text. */
int cj_json_peek(struct cj_json *j);

/* Skips whitespace and consumes ch, or fails "expected 'ch'". */
int cj_json_expect(struct cj_json *j, char ch);

/* Reads a string (after whitespace), which must be valid UTF-8 with paired
 * surrogates; decodes its escapes into out (cap bytes with the NUL; a NUL in
 * it is refused) unless out is NULL. */
int cj_json_string(struct cj_json *j, char *out, size_t cap);

/* A non-negative integer without sign, fraction or exponent, below INT64_MAX. */
int cj_json_uint(struct cj_json *j, uint64_t *v);

/* true or false (after whitespace). */
int cj_json_bool(struct cj_json *j, bool *v);

/* Skips one value of any shape, containers nested at most max_depth deep. */
int cj_json_skip(struct cj_json *j, int max_depth);

/* ---- a whole object, member by member (the bootstrap file, the credentials file) ---- */

#define CJ_JSON_MAX_DEPTH 32   /* nesting of a member's value */

enum cj_json_type { CJ_JSON_NULL = 1, CJ_JSON_BOOL, CJ_JSON_NUMBER, CJ_JSON_STRING, CJ_JSON_OBJECT, CJ_JSON_ARRAY };

struct cj_json_val {
    enum cj_json_type type;
    bool b;                 /* BOOL */
    bool is_int;            /* NUMBER written without fraction/exponent and fitting int64 */
    int64_t i;              /* NUMBER when is_int */
    double d;               /* NUMBER */
    const char *s;          /* STRING: decoded UTF-8, NUL-terminated, valid during the callback */
    size_t s_len;
    const char *raw;        /* every type: the value's JSON text in the input */
    size_t raw_len;
};

/* Called per member of the object, in order.  Non-zero stops the walk and is returned. */
typedef int (*cj_json_member_cb)(void *ud, const char *key, size_t key_len, const struct cj_json_val *v,
                                 struct cj_err *err);

/* Walks [json, json+len) with the cursor: optional whitespace, one JSON
 * object, optional whitespace; nothing else (an empty text is CJ_E_TRUNCATED,
 * another value CJ_E_TYPE).  Strings and keys as cj_json_string reads them;
 * a member's value nested at most CJ_JSON_MAX_DEPTH deep; objects and arrays
 * are handed over raw (walk a nested object with another call); a number of
 * more than 127 characters is CJ_E_LIMIT.  Errors read "json: <what> at
 * offset N".  The decoded strings are wiped before it returns. */
int cj_json_object_walk(const char *json, size_t len, cj_json_member_cb cb, void *ud, struct cj_err *err);

#endif
