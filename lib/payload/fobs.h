/* SPDX-License-Identifier: Apache-2.0 */
/* fobs.h — the parts of a FOBS msgpack body the relay reads or rewrites
 * (doc/protocol/payload.md §2-§7): the Shareable wrapper and its __headers__ map, the JSON of
 * download-ref datums, ref wrappers (for counting), the __headers__ rewrite, and
 * writers for the FLContext and Shareable skeletons.
 *
 * Nothing here builds a tree or allocates (the header rewrite writes into a
 * msgpack_sbuffer).  All reading goes through the bounds-checked mp cursor.
 * A struct cj_range's offset is relative to the buffer the function was given.
 *
 * Duplicate keys: Python's dict keeps the last one, so readers here return the
 * last occurrence of a header key, and the header rewrite replaces every
 * occurrence.  Duplicate __fobs_type__/__fobs_data__/__headers__ keys in the
 * Shareable wrapper are refused as ambiguous. */
#ifndef CJ_PAYLOAD_FOBS_H
#define CJ_PAYLOAD_FOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"

#define CJ_FOBS_TYPE_KEY "__fobs_type__"
#define CJ_FOBS_DATA_KEY "__fobs_data__"
#define CJ_FOBS_DC_KEY "__fobs_dc__"
#define CJ_FOBS_HEADERS_KEY "__headers__"

#define CJ_FOBS_SHAREABLE "nvflare.apis.shareable.Shareable"
#define CJ_FOBS_SHAREABLE_DC "nvflare.fuel.utils.fobs.decomposer.DictDecomposer"
#define CJ_FOBS_FLCONTEXT "nvflare.apis.fl_context.FLContext"
#define CJ_FOBS_FLCONTEXT_DC "nvflare.apis.utils.decomposers.flare_decomposers.ContextDecomposer"
#define CJ_FOBS_NUMPY "numpy.ndarray"
#define CJ_FOBS_TORCH "torch.Tensor"
#define CJ_FOBS_LAZY "nvflare.fuel.utils.fobs.decomposers.via_downloader.LazyDownloadRef"
#define CJ_FOBS_DATUMREF "nvflare.fuel.utils.fobs.datum.DatumRef"

/* Nesting bound of cj_fobs_walk (containers inside containers).  NVFlare bodies
 * nest 10-15 levels; deeper bodies are refused with CJ_E_LIMIT. */
#define CJ_FOBS_MAX_DEPTH 64

/* Most keys one cj_fobs_set_headers call may set. */
#define CJ_FOBS_MAX_SET 32

/* Limits of the strings pulled out of a download-ref datum's JSON. */
#define CJ_FOBS_FQCN_MAX 255
#define CJ_FOBS_REF_ID_MAX 127
/* JSON nesting bound when skipping values of extra keys. */
#define CJ_FOBS_JSON_MAX_DEPTH 64

/* A raw msgpack value inside a buffer, by offset (wire/header.h's struct cj_span
 * is the pointer form used for header blocks).  len 0 means absent. */
struct cj_range {
    size_t off;
    size_t len;
};

/* ---- the Shareable wrapper -------------------------------------------------- */

struct cj_fobs_shareable {
    size_t data_off;       /* the __fobs_data__ map's header byte */
    size_t data_hdr_len;   /* size of that header: 1 (fixmap), 3 (de), 5 (df) */
    size_t data_end;       /* one past the map's last entry */
    uint32_t data_n;       /* entries in the __fobs_data__ map */
    struct cj_range headers; /* the raw __headers__ map; len 0 when absent */
    uint32_t headers_n;    /* its entries */
};

/* [buf, buf+len) must be exactly one msgpack value: a map (keys in any order)
 * whose __fobs_type__ is "nvflare.apis.shareable.Shareable" and whose
 * __fobs_data__ is a map; __headers__ in it, when present, must be a map.
 * Errors: CJ_E_TYPE (not a map / not a Shareable / wrong value types),
 * CJ_E_MISSING (no __fobs_type__ / __fobs_data__), CJ_E_INVALID (trailing
 * bytes, duplicate keys), CJ_E_TRUNCATED. */
int cj_fobs_find_shareable(const uint8_t *buf, size_t len, struct cj_fobs_shareable *sh, struct cj_err *err);

/* [map, map+len) must start with a map.  Finds the last entry whose key is the
 * str `key`; returns 1 with *val set, 0 when absent, <0 on error. */
int cj_fobs_map_get(const uint8_t *map, size_t len, const char *key, struct cj_range *val, struct cj_err *err);

/* Copies the str value at sp (in buf) into out as a C string.  Fails with
 * CJ_E_TYPE when not a str, CJ_E_LIMIT when it does not fit, CJ_E_INVALID when
 * it holds a NUL byte. */
int cj_fobs_span_str(const uint8_t *buf, struct cj_range sp, char *out, size_t outsz, struct cj_err *err);

/* The headers the relay reads (doc/protocol/fl-protocols.md §5); absent ones have len 0. */
struct cj_fobs_headers {
    struct cj_range task_name;     /* "task_name" */
    struct cj_range task_id;       /* "__task_id__" */
    struct cj_range cookie_jar;    /* "__cookie_jar__" */
    struct cj_range current_round; /* "current_round" */
    struct cj_range receiver_ids;  /* "receiver_ids" */
    struct cj_range wait_time;     /* "__wait_time__" */
    struct cj_range peer_ctx;      /* "__peer_ctx__" */
    struct cj_range rc;            /* "__rc__" */
};

/* One pass over a raw __headers__ map ([hdrs, hdrs+len) starts with it). */
int cj_fobs_read_headers(const uint8_t *hdrs, size_t len, struct cj_fobs_headers *h, struct cj_err *err);

/* ---- download-ref datums ---------------------------------------------------- */

struct cj_fobs_ref {
    uint8_t dot;                       /* 3 (numpy) or 6 (torch) */
    uint8_t datum_id[16];
    size_t section_off;                /* of the datum section in the payload */
    char fqcn[CJ_FOBS_FQCN_MAX + 1];   /* source cell to download from */
    char ref_id[CJ_FOBS_REF_ID_MAX + 1];
};

/* Parses a datum's JSON: any valid JSON object (RFC 8259 plus Python's NaN /
 * Infinity / -Infinity) with string members "fqcn" and "ref_id"; extra members
 * are skipped, escapes (\uXXXX with surrogate pairs included) decoded, the last
 * duplicate wins as in Python.  Refused: non-objects, invalid UTF-8 or JSON,
 * missing or non-string or empty fqcn/ref_id, values holding NUL, values longer
 * than the buffers (CJ_E_LIMIT), nesting deeper than CJ_FOBS_JSON_MAX_DEPTH. */
int cj_fobs_parse_ref_json(const uint8_t *json, size_t len, char *fqcn, size_t fqcn_sz, char *ref_id,
                           size_t ref_id_sz, struct cj_err *err);

/* Lists the DOT-3 and DOT-6 datums of a LOBS payload with their JSON parsed
 * (never DOT 0 or any other DOT).  A DOT-3/6 datum that is not TEXT is an error.
 * Count-then-fill: the first min(cap, count) refs go to refs (NULL if cap 0),
 * *n_refs gets the count.  Frames sections with cj_lobs_next; run
 * cj_lobs_validate first for the body and id rules. */
int cj_fobs_list_refs(const uint8_t *payload, size_t len, struct cj_fobs_ref *refs, size_t cap,
                      size_t *n_refs, struct cj_err *err);

/* ---- wrapper enumeration ---------------------------------------------------- */

enum cj_fobs_wrap_kind {
    CJ_FOBS_WRAP_NUMPY = 1,  /* numpy.ndarray */
    CJ_FOBS_WRAP_TORCH,      /* torch.Tensor */
    CJ_FOBS_WRAP_LAZY,       /* ...via_downloader.LazyDownloadRef */
    CJ_FOBS_WRAP_DATUMREF,   /* ...fobs.datum.DatumRef (a DOT-0 datum link, not a download ref) */
};

struct cj_fobs_wrapper {
    enum cj_fobs_wrap_kind kind;
    size_t off;              /* of the wrapper map in the body */
    bool is_ref;             /* tensor kinds: __fobs_data__.type == "ref" */
    bool is_native;          /* tensor kinds: __fobs_data__.type == "native" */
    uint8_t dot;             /* refs: 3 numpy, 6 torch, lazy_dot for LazyDownloadRef (0 if absent/bad) */
    const uint8_t *item;     /* refs: the "T<n>" str; DatumRef: the datum_id str; else NULL */
    uint32_t item_len;
};

/* Called for each recognised wrapper, innermost first (a wrapper is reported when
 * its map ends).  A non-zero return stops the walk and is returned. */
typedef int (*cj_fobs_wrapper_cb)(void *ud, const struct cj_fobs_wrapper *w);

/* Walks [body, body+len), which must be exactly one msgpack value, iteratively
 * with at most CJ_FOBS_MAX_DEPTH nested containers, and reports every numpy /
 * torch / LazyDownloadRef / DatumRef wrapper (cb may be NULL: validate only). */
int cj_fobs_walk(const uint8_t *body, size_t len, cj_fobs_wrapper_cb cb, void *ud, struct cj_err *err);

struct cj_fobs_ref_counts {
    uint32_t wrappers[2];  /* ref wrappers with dot 3 / dot 6 */
    uint32_t items[2];     /* distinct items per dot: highest n of "T<n>" + 1 (ids are dense) */
    uint32_t other_refs;   /* ref wrappers with another or unknown dot, or a bad item id */
    uint32_t native;       /* inline tensors */
    uint32_t datum_refs;   /* DatumRef wrappers */
};

int cj_fobs_count_refs(const uint8_t *body, size_t len, struct cj_fobs_ref_counts *c, struct cj_err *err);

/* ---- rewriting -------------------------------------------------------------- */

struct cj_fobs_kv {
    const char *key;
    const uint8_t *val;   /* exactly one raw msgpack value */
    size_t val_len;
};

/* Appends to out the Shareable body [body, body+len) with its __headers__ map
 * rebuilt (doc/protocol/payload.md §7.1): a key being set keeps its position and gets the new
 * value, the other entries are copied byte for byte, keys not present are
 * appended in the given order, and the map's count prefix is re-encoded
 * minimally.  Without __headers__, the entry is appended to the __fobs_data__
 * map and that map's count prefix re-encoded.  Everything else is copied.
 * Keys must be distinct; at most CJ_FOBS_MAX_SET; values must be one msgpack
 * value each. */
int cj_fobs_set_headers(const uint8_t *body, size_t len, const struct cj_fobs_kv *kv, size_t n,
                        msgpack_sbuffer *out, struct cj_err *err);

/* ---- writers ---------------------------------------------------------------- */

/* Packs a C string as a msgpack str. */
int cj_fobs_write_str(msgpack_packer *pk, const char *s);

/* The relay's FLContext wrapper (doc/protocol/payload.md §7.3):
 * {__fobs_type__: FLContext, __fobs_data__: [nil, {__identity_name__: {value: site, mask: 0},
 *  __run_num__: {value: job, mask: 0}}], __fobs_dc__: ContextDecomposer}. */
int cj_fobs_write_flcontext(msgpack_packer *pk, const char *site, const char *job);

/* Shareable skeleton: _begin writes the wrapper's first two keys and the
 * __fobs_data__ map header for n_entries; the caller writes the entries; _end
 * writes the __fobs_dc__ entry. */
int cj_fobs_write_shareable_begin(msgpack_packer *pk, uint32_t n_entries);
int cj_fobs_write_shareable_end(msgpack_packer *pk);

#endif
