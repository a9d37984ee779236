/* SPDX-License-Identifier: Apache-2.0 */
/* uuid.h — random uuid4s and the 8-4-4-4-12 text form, shared by every layer
 * that names something with a uuid (download datum ids, stream request ids,
 * FL message roots, DXO datums). */
#ifndef CJ_UTIL_UUID_H
#define CJ_UTIL_UUID_H

#include <stddef.h>
#include <stdint.h>

#define CJ_UUID_STR_LEN 36   /* text form without the NUL */

/* A random uuid4 (version and RFC 4122 variant bits set); 0, or -1 without randomness. */
int cj_uuid4(uint8_t id[16]);

/* A random uuid4 as lower-case text (out: 37 bytes); 0 or -1. */
int cj_uuid4_str(char out[CJ_UUID_STR_LEN + 1]);

/* The lower-case text of id (out: 37 bytes, NUL-ended). */
void cj_uuid_str(const uint8_t id[16], char out[CJ_UUID_STR_LEN + 1]);

/* Parses 36 bytes of 8-4-4-4-12 hex (either case) into id; 0 or -CJ_E_INVALID. */
int cj_uuid_parse(const uint8_t *s, size_t len, uint8_t id[16]);

#endif
