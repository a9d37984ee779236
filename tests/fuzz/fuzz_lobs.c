/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_lobs.c — the LOBS iterator, validator and writers.
 *
 * Input: a payload.  Invariants checked:
 *  - every error offset lies inside the input;
 *  - the validator and the raw iterator agree on the sections, which tile the
 *    input exactly and respect the framing rules;
 *  - a valid container rebuilt from its spans (MAIN header + body, sections
 *    copied; and again with every datum re-written by cj_lobs_write_datum) is
 *    byte-identical to the input and validates to the same sections;
 *  - count-then-fill gives the same count with and without an array. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload/lobs.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static void check_rebuild(const uint8_t *data, size_t size, const struct cj_lobs_section *m,
                          const struct cj_lobs_section *d, size_t nd, int fresh_datums)
{
    msgpack_sbuffer sb;
    struct cj_err err;
    size_t off;
    msgpack_sbuffer_init(&sb);
    CHECK(cj_lobs_begin_main(&sb, &off, &err) == 0);
    CHECK(msgpack_sbuffer_write(&sb, (const char *)m->value, m->value_len) == 0);
    cj_lobs_end_main(&sb, off);
    for (size_t i = 0; i < nd; i++) {
        if (fresh_datums)
            CHECK(cj_lobs_write_datum(&sb, d[i].marker, d[i].dot, d[i].id, d[i].value, d[i].value_len, &err) == 0);
        else
            CHECK(cj_lobs_write_section(&sb, &d[i], &err) == 0);
    }
    CHECK(sb.size == size);
    CHECK(memcmp(sb.data, data, size) == 0);

    struct cj_lobs_section m2;
    size_t nd2;
    struct cj_lobs_section *d2 = malloc((nd ? nd : 1) * sizeof *d2);
    CHECK(cj_lobs_validate(sb.data, sb.size, &m2, d2, nd, &nd2, &err) == 0);
    CHECK(nd2 == nd);
    CHECK(m2.value_len == m->value_len);
    for (size_t i = 0; i < nd; i++) {
        CHECK(d2[i].offset == d[i].offset && d2[i].total == d[i].total && d2[i].dot == d[i].dot);
        CHECK(memcmp(d2[i].id, d[i].id, 16) == 0);
    }
    free(d2);
    msgpack_sbuffer_destroy(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cj_err err;
    struct cj_lobs_section m, s;
    size_t nd = 0;

    /* the raw iterator: sections tile the input up to the first error */
    struct cj_lobs_iter it;
    size_t n_iter = 0, at = 0;
    int irc;
    cj_lobs_iter_init(&it, data, size);
    while ((irc = cj_lobs_next(&it, &s, &err)) == 1) {
        CHECK(s.offset == at);
        CHECK(s.total >= CJ_LOBS_HDR_LEN + 1 && s.total <= size - at);
        CHECK(cj_lobs_section_start(&s) == data + at);
        CHECK(s.value + s.value_len == data + at + s.total);
        CHECK((n_iter == 0) == (s.marker == CJ_LOBS_MAIN));
        if (s.marker != CJ_LOBS_MAIN) CHECK(s.value_len >= 1);
        at += s.total;
        n_iter++;
    }
    if (irc == 0) CHECK(at == size);
    else CHECK(err.offset <= size && it.pos == at);

    int rc = cj_lobs_validate(data, size, &m, NULL, 0, &nd, &err);
    if (rc) {
        CHECK(rc < 0 && err.offset <= size && err.msg[0]);
        return 0;
    }
    CHECK(irc == 0 && n_iter == nd + 1);
    CHECK(nd <= CJ_LOBS_MAX_DATUMS);

    struct cj_lobs_section *d = malloc((nd ? nd : 1) * sizeof *d);
    size_t nd2 = 0;
    CHECK(cj_lobs_validate(data, size, &m, d, nd, &nd2, &err) == 0 && nd2 == nd);
    if (nd > 1) {   /* a short array still reports the full count */
        CHECK(cj_lobs_validate(data, size, NULL, d, 1, &nd2, &err) == 0 && nd2 == nd);
        CHECK(cj_lobs_validate(data, size, &m, d, nd, &nd2, &err) == 0);
    }
    for (size_t i = 0; i < nd; i++)
        for (size_t j = i + 1; j < nd && j < i + 8; j++) CHECK(memcmp(d[i].id, d[j].id, 16) != 0);
    check_rebuild(data, size, &m, d, nd, 0);
    check_rebuild(data, size, &m, d, nd, 1);
    free(d);
    return 0;
}
