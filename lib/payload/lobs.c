/* SPDX-License-Identifier: Apache-2.0 */
/* lobs.c — splitting, validating and writing LOBS containers (see lobs.h). */
#include "payload/lobs.h"

#include <stdio.h>
#include <string.h>

#include "util/mp.h"

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

static const char *marker_name(uint8_t m)
{
    switch (m) {
    case CJ_LOBS_MAIN: return "MAIN";
    case CJ_LOBS_TEXT: return "TEXT";
    case CJ_LOBS_BLOB: return "BLOB";
    case CJ_LOBS_FILE: return "FILE";
    }
    return "unknown";
}

void cj_lobs_iter_init(struct cj_lobs_iter *it, const void *buf, size_t len)
{
    it->buf = (const uint8_t *)buf;
    it->len = len;
    it->pos = 0;
}

/* Checks marker and dot against the section's position (first or not). */
static int check_marker(const struct cj_lobs_iter *it, uint8_t marker, uint8_t dot, struct cj_err *err)
{
    size_t at = it->pos;
    if (at == 0) {
        if (marker != CJ_LOBS_MAIN)
            return cj_fail(err, CJ_E_INVALID, at, "lobs: first section has marker 0x%02x, expected MAIN 0x64", marker);
        if (dot != 0)
            return cj_fail(err, CJ_E_INVALID, at + 1, "lobs: MAIN section has dot %u, expected 0", dot);
        return 0;
    }
    if (marker == CJ_LOBS_MAIN)
        return cj_fail(err, CJ_E_INVALID, at, "lobs: second MAIN section at offset %zu", at);
    if (marker < CJ_LOBS_TEXT || marker > CJ_LOBS_FILE)
        return cj_fail(err, CJ_E_INVALID, at, "lobs: unknown section marker 0x%02x at offset %zu", marker, at);
    return 0;
}

/* Checks the size field against the section kind and the bytes left. */
static int check_size(const struct cj_lobs_iter *it, uint8_t marker, uint64_t size, struct cj_err *err)
{
    size_t at = it->pos;
    size_t left = it->len - at - CJ_LOBS_HDR_LEN;
    if (size == 0)
        return cj_fail(err, CJ_E_INVALID, at + 2, "lobs: %s section at offset %zu has size 0", marker_name(marker), at);
    if (marker != CJ_LOBS_MAIN && size <= CJ_LOBS_ID_LEN)
        return cj_fail(err, CJ_E_INVALID, at + 2,
                       "lobs: %s datum at offset %zu has size %llu (must exceed the 16-byte id)",
                       marker_name(marker), at, (unsigned long long)size);
    if (size > left)
        return cj_fail(err, CJ_E_TRUNCATED, at + 2,
                       "lobs: %s section at offset %zu claims %llu bytes, only %zu left",
                       marker_name(marker), at, (unsigned long long)size, left);
    return 0;
}

int cj_lobs_next(struct cj_lobs_iter *it, struct cj_lobs_section *s, struct cj_err *err)
{
    size_t at = it->pos;
    if (at == it->len) {
        if (at == 0) return cj_fail(err, CJ_E_TRUNCATED, 0, "lobs: empty payload (no MAIN section)");
        return 0;
    }
    if (it->len - at < CJ_LOBS_HDR_LEN)
        return cj_fail(err, CJ_E_TRUNCATED, at, "lobs: section header at offset %zu truncated (%zu of 10 bytes)",
                       at, it->len - at);
    const uint8_t *p = it->buf + at;
    uint8_t marker = p[0], dot = p[1];
    uint64_t size = get_be64(p + 2);
    int rc = check_marker(it, marker, dot, err);
    if (rc) return rc;
    if ((rc = check_size(it, marker, size, err))) return rc;

    memset(s, 0, sizeof *s);
    s->marker = marker;
    s->dot = dot;
    s->offset = at;
    s->total = CJ_LOBS_HDR_LEN + (size_t)size;
    if (marker == CJ_LOBS_MAIN) {
        s->value = p + CJ_LOBS_HDR_LEN;
        s->value_len = (size_t)size;
    } else {
        memcpy(s->id, p + CJ_LOBS_HDR_LEN, CJ_LOBS_ID_LEN);
        s->value = p + CJ_LOBS_DATUM_HDR_LEN;
        s->value_len = (size_t)size - CJ_LOBS_ID_LEN;
    }
    it->pos = at + s->total;
    return 1;
}

/* The MAIN body must be exactly one msgpack value. */
static int check_main_body(const struct cj_lobs_section *m, struct cj_err *err)
{
    struct mp_cur c;
    mp_cur_init(&c, m->value, m->value_len);
    int rc = mp_skip(&c, err);
    if (rc) {
        if (err) {
            err->offset += CJ_LOBS_HDR_LEN;
            size_t n = strlen(err->msg);
            if (n < sizeof err->msg - 1)
                snprintf(err->msg + n, sizeof err->msg - n, " (MAIN body starts at offset 10)");
        }
        return rc;
    }
    if (c.pos != m->value_len)
        return cj_fail(err, CJ_E_INVALID, CJ_LOBS_HDR_LEN + c.pos,
                       "lobs: MAIN body has %zu trailing bytes after its msgpack value (offset %zu)",
                       m->value_len - c.pos, CJ_LOBS_HDR_LEN + c.pos);
    return 0;
}

/* Datum ids must be unique.  O(n^2) over the (already framed) sections, n is
 * capped by CJ_LOBS_MAX_DATUMS.  first_datum is the offset after MAIN. */
static int check_unique_ids(const uint8_t *buf, size_t len, size_t first_datum, struct cj_err *err)
{
    struct cj_lobs_iter a = {buf, len, first_datum};
    struct cj_lobs_section sa, sb;
    while (cj_lobs_next(&a, &sa, NULL) == 1) {
        struct cj_lobs_iter b = a;
        while (cj_lobs_next(&b, &sb, NULL) == 1) {
            if (memcmp(sa.id, sb.id, CJ_LOBS_ID_LEN) == 0)
                return cj_fail(err, CJ_E_INVALID, sb.offset + CJ_LOBS_HDR_LEN,
                               "lobs: datum id at offset %zu repeats the id of the datum at offset %zu",
                               sb.offset + CJ_LOBS_HDR_LEN, sa.offset);
        }
    }
    return 0;
}

int cj_lobs_validate(const void *buf, size_t len, struct cj_lobs_section *main,
                     struct cj_lobs_section *datums, size_t cap, size_t *n_datums,
                     struct cj_err *err)
{
    struct cj_lobs_iter it;
    struct cj_lobs_section m, s;
    cj_lobs_iter_init(&it, buf, len);
    int rc = cj_lobs_next(&it, &m, err);
    if (rc < 0) return rc;
    if ((rc = check_main_body(&m, err))) return rc;
    size_t first_datum = it.pos, n = 0;
    while ((rc = cj_lobs_next(&it, &s, err)) == 1) {
        if (n == CJ_LOBS_MAX_DATUMS)
            return cj_fail(err, CJ_E_LIMIT, s.offset, "lobs: more than %d datum sections (offset %zu)",
                           CJ_LOBS_MAX_DATUMS, s.offset);
        if (datums && n < cap) datums[n] = s;
        n++;
    }
    if (rc < 0) return rc;
    if ((rc = check_unique_ids(it.buf, len, first_datum, err))) return rc;
    if (main) *main = m;
    if (n_datums) *n_datums = n;
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

static int put(msgpack_sbuffer *sb, const void *p, size_t n, struct cj_err *err)
{
    if (n && msgpack_sbuffer_write(sb, (const char *)p, n) != 0)
        return cj_fail(err, CJ_E_NOMEM, sb->size, "lobs: out of memory writing %zu bytes", n);
    return 0;
}

int cj_lobs_write_main_header(msgpack_sbuffer *sb, uint64_t body_len, struct cj_err *err)
{
    uint8_t h[CJ_LOBS_HDR_LEN] = {CJ_LOBS_MAIN, 0};
    put_be64(h + 2, body_len);
    return put(sb, h, sizeof h, err);
}

int cj_lobs_begin_main(msgpack_sbuffer *sb, size_t *hdr_off, struct cj_err *err)
{
    *hdr_off = sb->size;
    return cj_lobs_write_main_header(sb, 0, err);
}

void cj_lobs_end_main(msgpack_sbuffer *sb, size_t hdr_off)
{
    put_be64((uint8_t *)sb->data + hdr_off + 2, sb->size - hdr_off - CJ_LOBS_HDR_LEN);
}

int cj_lobs_write_section(msgpack_sbuffer *sb, const struct cj_lobs_section *s, struct cj_err *err)
{
    return put(sb, cj_lobs_section_start(s), s->total, err);
}

int cj_lobs_write_datum(msgpack_sbuffer *sb, uint8_t marker, uint8_t dot, const uint8_t id[CJ_LOBS_ID_LEN],
                        const void *value, size_t value_len, struct cj_err *err)
{
    if (marker < CJ_LOBS_TEXT || marker > CJ_LOBS_FILE)
        return cj_fail(err, CJ_E_INVALID, sb->size, "lobs: cannot write a datum with marker 0x%02x", marker);
    if (value_len == 0)
        return cj_fail(err, CJ_E_INVALID, sb->size, "lobs: refusing to write an empty datum (size 16)");
    uint8_t h[CJ_LOBS_DATUM_HDR_LEN];
    h[0] = marker;
    h[1] = dot;
    put_be64(h + 2, (uint64_t)value_len + CJ_LOBS_ID_LEN);
    memcpy(h + CJ_LOBS_HDR_LEN, id, CJ_LOBS_ID_LEN);
    int rc = put(sb, h, sizeof h, err);
    return rc ? rc : put(sb, value, value_len, err);
}

int cj_lobs_open_main(const uint8_t *payload, size_t len, struct mp_cur *c, struct cj_err *err)
{
    struct cj_lobs_section main;
    int rc = cj_lobs_validate(payload, len, &main, NULL, 0, NULL, err);
    if (rc) return rc;
    c->base = payload;
    c->pos = main.offset + CJ_LOBS_HDR_LEN;
    c->end = c->pos + main.value_len;
    return 0;
}
