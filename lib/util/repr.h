/* SPDX-License-Identifier: Apache-2.0 */
/* repr.h — text of values as Python prints them, for messages that must read as
 * FLARE's Python would write them (Client API refusal reasons) and for values
 * shown back to the operator (worker metrics). */
#ifndef CJ_UTIL_REPR_H
#define CJ_UTIL_REPR_H

#include <stddef.h>

/* repr(s) for a str s (UTF-8): quoted with ' unless s holds ' and no ", where
 * Python picks "; backslash, the quote, \t \n \r escaped; other controls and
 * characters Python does not print (C1 controls, format characters, separators
 * other than space, private use, noncharacters) as \xNN, \uNNNN or \UNNNNNNNN.
 * Code points unassigned in some Unicode version are printed as they are (which
 * ones Python escapes depends on its Unicode database).  A text that does not
 * fit ends in "..." before the closing quote; out is always NUL-ended (empty
 * when n < 8). */
void cj_repr_str(char *out, size_t n, const char *s);

/* repr(f) for a float: the shortest text that reads back to f, with ".0" when
 * it would look like an int; "nan", "inf", "-inf". */
void cj_repr_float(char *out, size_t n, double f);

#endif
