/* SPDX-License-Identifier: Apache-2.0 */
/* text.h — UTF-8 checks and random bytes, shared by the codecs that validate
 * peer text (Client API, download service, bootstrap and credential files). */
#ifndef CJ_UTIL_TEXT_H
#define CJ_UTIL_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1-4; n bytes left), 0 if invalid
 * (overlong forms, surrogates and code points past U+10FFFF are invalid, as
 * Python decodes). */
size_t cj_utf8_seq(const uint8_t *p, size_t n);

/* The same, also giving the code point in *cp. */
size_t cj_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp);

/* Writes code point cp (at most U+10FFFF, no surrogate) as 1-4 bytes of UTF-8
 * at o; returns how many. */
size_t cj_utf8_put(uint32_t cp, uint8_t *o);

/* For valid UTF-8 without NUL: the byte length of the first max_chars characters
 * (n when shorter); SIZE_MAX when the text is invalid. */
size_t cj_utf8_prefix(const uint8_t *p, size_t n, size_t max_chars);

/* Fills buf with n bytes from getrandom(2); 0 or -1. */
int cj_random_bytes(void *buf, size_t n);

/* Writes nchars (even) random lower-case hex digits and a NUL into out; 0 or -1. */
int cj_random_hex(char *out, size_t nchars);

#endif
