/* SPDX-License-Identifier: Apache-2.0 */
/* lobs.h — the LOBS container (doc/protocol/payload.md §1): a MAIN section holding one msgpack
 * body, then zero or more datum sections, back to back, until the payload ends.
 *
 *   MAIN:  64 00 <u64 BE N> <N bytes: one msgpack value>
 *   datum: <65 TEXT|66 BLOB|67 FILE> <dot> <u64 BE 16+L> <16-byte id> <L bytes>
 *
 * Reading never allocates: an iterator hands out sections whose pointers point
 * into the caller's buffer, and the validator fills a caller-provided array.
 * Writing goes into a msgpack_sbuffer (sections are raw byte copies). */
#ifndef CJ_PAYLOAD_LOBS_H
#define CJ_PAYLOAD_LOBS_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"

#define CJ_LOBS_MAIN 0x64
#define CJ_LOBS_TEXT 0x65
#define CJ_LOBS_BLOB 0x66
#define CJ_LOBS_FILE 0x67

#define CJ_LOBS_HDR_LEN 10   /* marker, dot, u64 size */
#define CJ_LOBS_ID_LEN 16    /* datum id (raw UUID bytes) */
#define CJ_LOBS_DATUM_HDR_LEN (CJ_LOBS_HDR_LEN + CJ_LOBS_ID_LEN)

/* The validator refuses containers with more datums than this.  It bounds the
 * O(n^2) datum-id uniqueness check (4096^2/2 = 8.4M 16-byte compares at worst);
 * NVFlare writes one datum per externalised value plus one per download DOT, so
 * real payloads carry a handful. */
#define CJ_LOBS_MAX_DATUMS 4096

struct cj_lobs_section {
    uint8_t marker;         /* CJ_LOBS_MAIN / _TEXT / _BLOB / _FILE */
    uint8_t dot;            /* Datum Object Type (0 for MAIN) */
    size_t offset;          /* of the section's marker byte in the container */
    size_t total;           /* whole section: header (+ id) + value */
    const uint8_t *value;   /* MAIN: the body; datum: the bytes after the id */
    size_t value_len;
    uint8_t id[CJ_LOBS_ID_LEN]; /* datum id; all zero for MAIN */
};

/* The first byte of a section (value pointer minus its header). */
static inline const uint8_t *cj_lobs_section_start(const struct cj_lobs_section *s)
{
    return s->value - (s->marker == CJ_LOBS_MAIN ? CJ_LOBS_HDR_LEN : CJ_LOBS_DATUM_HDR_LEN);
}

struct cj_lobs_iter {
    const uint8_t *buf;
    size_t len;
    size_t pos;
};

void cj_lobs_iter_init(struct cj_lobs_iter *it, const void *buf, size_t len);

/* Next section.  Returns 1 with *s filled, 0 at the clean end of the payload,
 * <0 on error (the iterator then stays put).  Enforces the per-section rules:
 * the first section is MAIN with dot 0 and no later one is, known markers only,
 * size 0 rejected, datum size <= 16 rejected, size bounded by the bytes left.
 * It does not look inside the MAIN body (cj_lobs_validate does). */
int cj_lobs_next(struct cj_lobs_iter *it, struct cj_lobs_section *s, struct cj_err *err);

/* Validates a whole container: every cj_lobs_next rule, a non-empty payload,
 * exactly one msgpack value in the MAIN body with no trailing bytes, at most
 * CJ_LOBS_MAX_DATUMS datums, unique datum ids.
 * main (may be NULL) gets the MAIN section.  The first min(cap, count) datum
 * sections are stored in datums (may be NULL when cap is 0); *n_datums (may be
 * NULL) gets the full count, so a caller can count first and fill second.
 * Returns 0 or a negative cj_errc. */
int cj_lobs_validate(const void *buf, size_t len, struct cj_lobs_section *main,
                     struct cj_lobs_section *datums, size_t cap, size_t *n_datums,
                     struct cj_err *err);

/* ---- writing ---------------------------------------------------------------- */

/* Writes 64 00 <u64 BE body_len>. */
int cj_lobs_write_main_header(msgpack_sbuffer *sb, uint64_t body_len, struct cj_err *err);

/* For bodies whose length is not known up front: cj_lobs_begin_main writes a
 * MAIN header with size 0 and returns its offset in sb; after the body has been
 * written, cj_lobs_end_main patches the size to everything written since. */
int cj_lobs_begin_main(msgpack_sbuffer *sb, size_t *hdr_off, struct cj_err *err);
void cj_lobs_end_main(msgpack_sbuffer *sb, size_t hdr_off);

/* Copies a section (header, id and value) byte for byte. */
int cj_lobs_write_section(msgpack_sbuffer *sb, const struct cj_lobs_section *s, struct cj_err *err);

/* Writes a new datum section.  Refuses an empty value (NVFlare cannot decode a
 * datum of size 16) and a marker that is not TEXT/BLOB/FILE. */
int cj_lobs_write_datum(msgpack_sbuffer *sb, uint8_t marker, uint8_t dot, const uint8_t id[CJ_LOBS_ID_LEN],
                        const void *value, size_t value_len, struct cj_err *err);

/* Validates the container and positions c (over the whole payload) on the MAIN
 * body, for decoders that read a message body with the msgpack cursor. */
struct mp_cur;
int cj_lobs_open_main(const uint8_t *payload, size_t len, struct mp_cur *c, struct cj_err *err);

#endif
