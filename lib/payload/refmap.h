/* SPDX-License-Identifier: Apache-2.0 */
/* refmap.h — rewriting the download refs of a LOBS payload (doc/protocol/download.md §8
 * step 2, doc/protocol/payload.md §5): spool mode hands its workers (and the server) the
 * relay's own refs instead of the source's.
 *
 * For each DOT-3/6 TEXT datum whose (fqcn, ref_id) is in the map, the datum's
 * value becomes the JSON NVFlare writes, {"fqcn": "<new>", "ref_id": "<new>"}
 * (Python json.dumps: ", " and ": " separators, that key order), and the
 * section's size is recomputed.  Every other byte — the MAIN body, other
 * datums, datum ids, the order of sections — is copied unchanged.  Rewriting
 * back with the inverse map gives the original bytes when the original JSON
 * was NVFlare's.
 *
 * Nothing is parsed beyond the section framing (cj_lobs_validate) and the ref
 * JSON (cj_fobs_parse_ref_json); nothing is allocated but the output. */
#ifndef CJ_PAYLOAD_REFMAP_H
#define CJ_PAYLOAD_REFMAP_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"

struct evbuffer;

/* Most entries one rewrite takes (a payload has one DOT-3 and one DOT-6 datum
 * in practice; CJ_TASK_MAX_REFS is 16). */
#define CJ_REFMAP_MAX 64

struct cj_refmap_entry {
    const char *fqcn, *ref_id;          /* matched exactly (after JSON unescaping) */
    const char *new_fqcn, *new_ref_id;  /* written; printable ASCII, no control bytes */
};

/* Appends the rewritten payload to out.  n_done (may be NULL) gets the number
 * of datums rewritten.  A map entry that matches no datum is not an error (the
 * caller compares n_done when it cares).  Errors (negative cj_errc, err
 * filled, out left as it was): an invalid container, a DOT-3/6 datum that is
 * not TEXT or whose JSON is not a ref, more than CJ_REFMAP_MAX entries, a new
 * value that is empty, too long (fobs.h limits) or not printable ASCII. */
int cj_refmap_rewrite(const uint8_t *payload, size_t len, const struct cj_refmap_entry *map, size_t n,
                      msgpack_sbuffer *out, size_t *n_done, struct cj_err *err);

/* The same, appended to an evbuffer (the bytes are moved in without a copy). */
int cj_refmap_rewrite_evbuffer(const uint8_t *payload, size_t len, const struct cj_refmap_entry *map, size_t n,
                               struct evbuffer *out, size_t *n_done, struct cj_err *err);

/* The JSON value of a ref datum as NVFlare writes it.  Returns its length, or
 * -1 when it does not fit in outsz (with the NUL) or a value is unusable. */
int cj_refmap_json(const char *fqcn, const char *ref_id, char *out, size_t outsz);

#endif
