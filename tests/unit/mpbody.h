/* SPDX-License-Identifier: Apache-2.0 */
/* mpbody.h — msgpack built by hand for the decoder tests of the payload
 * formats: a body (a map being packed) with string keys and values, the body
 * wrapped in a LOBS MAIN section, and built bytes compared with a vector.
 *
 * Used by test_capi, test_dlmsg and test_splice. */
#ifndef CJ_TEST_MPBODY_H
#define CJ_TEST_MPBODY_H

#include <stdint.h>
#include <string.h>

#include <msgpack.h>

#include "testutil.h"
#include "payload/lobs.h"

/* Fails the test unless sb holds exactly the bytes of tests/vectors/<vector>. */
static inline void assert_sb_is(const msgpack_sbuffer *sb, const char *vector)
{
    size_t len;
    uint8_t *want = tu_read_vector(vector, &len);
    if (sb->size != len) fail_msg("%s: built %zu bytes, vector has %zu", vector, sb->size, len);
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)sb->data[i] != want[i])
            fail_msg("%s: first difference at offset %zu (0x%02x, want 0x%02x)", vector, i, (uint8_t)sb->data[i], want[i]);
    free(want);
}

/* Wraps a msgpack body in a MAIN section; returns the malloc'd bytes (free them). */
static inline uint8_t *wrap(const void *body, size_t n, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_lobs_write_main_header(&sb, n, NULL), 0);
    msgpack_sbuffer_write(&sb, body, n);
    *len = sb.size;
    return (uint8_t *)sb.data;
}

/* A hostile or hand-made body: a map of n pairs, packed as the test goes. */
struct body {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static inline void body_init(struct body *b, uint32_t n)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&b->pk, n);
}

static inline void str(struct body *b, const char *s) { msgpack_pack_str_with_body(&b->pk, s, strlen(s)); }
static inline void kstr(struct body *b, const char *k, const char *v) { str(b, k); str(b, v); }

#endif
