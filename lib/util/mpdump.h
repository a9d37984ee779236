/* SPDX-License-Identifier: Apache-2.0 */
/* mpdump.h — structural text dump of a LOBS container and its msgpack body.
 *
 * The output reproduces, line for line, the dumps beside the vectors
 * (tests/vectors/NN_*.txt from "section 0:" on), which a Python script wrote
 * from NVFlare's own decoding.  It is used by the vector test (proof that we
 * read every vector as FLARE wrote it) and by diagnostics (`cjrelayctl`).
 *
 * Format, per section:
 *   section K: marker=M dot=D size_field=S datum_id=<uuid|None> body_len=L
 * then, indented by 4, the MAIN body as a tree of Python reprs:
 *   maps   "{" ... "}" on their own lines, entries indented by 2 more,
 *          "'key': <scalar>" or "'key':" followed by the container indented by 2 more;
 *   arrays "[" ... "]", elements indented by 2 more;
 *   scalars as Python repr: 1, -3, 1.5, 1e-05, 'text', b'\x00', True, False, None;
 *   a str/bin whose repr is longer than 80 characters is cut to its first 80
 *   characters followed by "...<len>" (len in code points / bytes);
 * TEXT datums as "    text: <text>" (control bytes and invalid UTF-8 as \xNN),
 * BLOB datums as "    blob: <hex of the first 48 bytes>" + "..." when longer,
 * FILE datums likewise as "    file: ...".
 *
 * Bounded: iterative, nesting capped at MPDUMP_MAX_DEPTH, every read through
 * the mp cursor, no allocation except the output stream. */
#ifndef CJ_UTIL_MPDUMP_H
#define CJ_UTIL_MPDUMP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"
#include "util/mp.h"

#define MPDUMP_MAX_DEPTH 128   /* nested containers; NVFlare bodies go ~12 deep */
#define MPDUMP_SHORTEN 80      /* repr characters kept before "...<len>" */
#define MPDUMP_BLOB_BYTES 48   /* datum bytes shown as hex */

/* Dumps the one value at c (advancing c past it), its brackets at column indent. */
int mpdump_value(FILE *out, struct mp_cur *c, int indent, struct cj_err *err);

/* Dumps a whole LOBS container: every section line and body.  Fails (with
 * what was printed so far left in out) on a malformed container. */
int mpdump_lobs(FILE *out, const uint8_t *p, size_t n, struct cj_err *err);

/* mpdump_lobs into a malloc'd NUL-terminated string (free()); NULL on error
 * (err filled; on an allocation failure err->code is CJ_E_NOMEM). */
char *mpdump_lobs_str(const uint8_t *p, size_t n, size_t *len, struct cj_err *err);

/* Python's repr(float): shortest round-trip digits, "1.0" not "1", exponent
 * form "1e-05" / "1.5e+300" outside 1e-4 <= |x| < 1e16, inf/nan.  sz >= 32. */
void mpdump_float_repr(double x, char *buf, size_t sz);

#endif
