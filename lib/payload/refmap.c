/* SPDX-License-Identifier: Apache-2.0 */
/* refmap.c — rewriting the download-ref datums of a LOBS payload (see refmap.h). */
#include "payload/refmap.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"

/* A value we write into JSON: non-empty printable ASCII within limit.  '"' and
 * '\\' are escaped on output; nothing else needs to be. */
static bool usable(const char *s, size_t limit)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > limit) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
    return true;
}

/* Appends s as a JSON string body (without quotes).  false when it does not fit. */
static bool put_json_str(char *out, size_t outsz, size_t *o, const char *s)
{
    for (; *s; s++) {
        bool esc = *s == '"' || *s == '\\';
        if (*o + 1 + esc >= outsz) return false;
        if (esc) out[(*o)++] = '\\';
        out[(*o)++] = *s;
    }
    return true;
}

static bool put_lit(char *out, size_t outsz, size_t *o, const char *lit)
{
    size_t n = strlen(lit);
    if (*o + n >= outsz) return false;
    memcpy(out + *o, lit, n);
    *o += n;
    return true;
}

int cj_refmap_json(const char *fqcn, const char *ref_id, char *out, size_t outsz)
{
    size_t o = 0;
    if (!out || !outsz || !usable(fqcn, CJ_FOBS_FQCN_MAX) || !usable(ref_id, CJ_FOBS_REF_ID_MAX)) return -1;
    if (!put_lit(out, outsz, &o, "{\"fqcn\": \"") || !put_json_str(out, outsz, &o, fqcn) ||
        !put_lit(out, outsz, &o, "\", \"ref_id\": \"") || !put_json_str(out, outsz, &o, ref_id) ||
        !put_lit(out, outsz, &o, "\"}"))
        return -1;
    out[o] = 0;
    return (int)o;
}

static const struct cj_refmap_entry *lookup(const struct cj_refmap_entry *map, size_t n, const char *fqcn,
                                            const char *ref_id)
{
    for (size_t i = 0; i < n; i++)
        if (map[i].fqcn && map[i].ref_id && !strcmp(map[i].fqcn, fqcn) && !strcmp(map[i].ref_id, ref_id))
            return &map[i];
    return NULL;
}

/* One datum section: rewritten when it is a mapped ref, else copied. */
static int put_datum(const struct cj_lobs_section *s, const struct cj_refmap_entry *map, size_t n,
                     msgpack_sbuffer *out, size_t *n_done, struct cj_err *err)
{
    if (s->dot != 3 && s->dot != 6) return cj_lobs_write_section(out, s, err);
    if (s->marker != CJ_LOBS_TEXT)
        return cj_fail(err, CJ_E_INVALID, s->offset, "refmap: DOT-%u datum is not TEXT (marker 0x%02x)", s->dot,
                       s->marker);
    char fqcn[CJ_FOBS_FQCN_MAX + 1], ref_id[CJ_FOBS_REF_ID_MAX + 1];
    struct cj_err je = {0};
    if (cj_fobs_parse_ref_json(s->value, s->value_len, fqcn, sizeof fqcn, ref_id, sizeof ref_id, &je))
        return cj_fail(err, je.code ? je.code : CJ_E_INVALID, s->offset + CJ_LOBS_DATUM_HDR_LEN + je.offset,
                       "refmap: DOT-%u datum at %zu: %s", s->dot, s->offset, je.msg);
    const struct cj_refmap_entry *m = lookup(map, n, fqcn, ref_id);
    if (!m) return cj_lobs_write_section(out, s, err);
    char json[2 * (CJ_FOBS_FQCN_MAX + CJ_FOBS_REF_ID_MAX) + 64];
    int jl = cj_refmap_json(m->new_fqcn, m->new_ref_id, json, sizeof json);
    if (jl < 0)
        return cj_fail(err, CJ_E_INVALID, s->offset, "refmap: unusable new fqcn/ref_id for ref %s of %s", ref_id,
                       fqcn);
    int rc = cj_lobs_write_datum(out, CJ_LOBS_TEXT, s->dot, s->id, json, (size_t)jl, err);
    if (rc == 0) (*n_done)++;
    return rc;
}

int cj_refmap_rewrite(const uint8_t *payload, size_t len, const struct cj_refmap_entry *map, size_t n,
                      msgpack_sbuffer *out, size_t *n_done, struct cj_err *err)
{
    size_t done = 0, start = out ? out->size : 0;
    if (n_done) *n_done = 0;
    if (!payload || !out || (n && !map)) return cj_fail(err, CJ_E_INVALID, 0, "refmap: bad arguments");
    if (n > CJ_REFMAP_MAX) return cj_fail(err, CJ_E_LIMIT, 0, "refmap: %zu map entries (most %d)", n, CJ_REFMAP_MAX);
    int rc = cj_lobs_validate(payload, len, NULL, NULL, 0, NULL, err);
    if (rc) return rc;
    struct cj_lobs_iter it;
    struct cj_lobs_section s;
    cj_lobs_iter_init(&it, payload, len);
    while ((rc = cj_lobs_next(&it, &s, err)) == 1) {
        rc = s.marker == CJ_LOBS_MAIN ? cj_lobs_write_section(out, &s, err) : put_datum(&s, map, n, out, &done, err);
        if (rc) break;
    }
    if (rc < 0) {
        out->size = start;   /* nothing half-written stays */
        return rc;
    }
    if (n_done) *n_done = done;
    return 0;
}

int cj_refmap_rewrite_evbuffer(const uint8_t *payload, size_t len, const struct cj_refmap_entry *map, size_t n,
                               struct evbuffer *out, size_t *n_done, struct cj_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = cj_refmap_rewrite(payload, len, map, n, &sb, n_done, err);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    bool moved = !sb.size || (out && mp_sbuffer_move(out, &sb) == 0);
    msgpack_sbuffer_destroy(&sb);   /* empty once moved */
    if (moved) return 0;
    if (n_done) *n_done = 0;
    return cj_fail(err, CJ_E_NOMEM, 0, "refmap: out of memory");
}
