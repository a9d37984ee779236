/* SPDX-License-Identifier: Apache-2.0 */
/* dxo.h — the DXO-shaped Shareable the simulator serves as a task and the
 * reference worker returns as a result (doc/design.md "Conventions",
 * doc/protocol/payload.md §3-§5).
 *
 * Written shape (one LOBS payload):
 *
 *   MAIN  Shareable{__fobs_data__: {
 *           [__headers__: <raw map given by the caller>,]
 *           DXO: {kind: <DataKind wrapper, "WEIGHTS">,
 *                 data: {name_i: <numpy.ndarray | torch.Tensor wrapper
 *                                 {type: "ref", data: "T<i>"}>, ...},
 *                 meta: {current_round: r}  (or a raw map given by the caller)}}}
 *   TEXT  datum, DOT 3 (numpy) or 6 (torch):
 *         {"fqcn": "<source>", "ref_id": "<ref_id>"}   (json.dumps spacing)
 *
 * With `native` set the tensors are written inline ({type: "native", data:
 * <bin>}) and no datum follows.
 *
 * Reading finds the DXO map inside a Shareable anywhere in a LOBS payload (the
 * MAIN body of a task or submit_update, or the "model"/"result" value of a
 * Client API envelope) and lists its tensors (name, wrapper kind, item id or
 * inline bytes) plus the {fqcn, ref_id} of the payload's datum of their DOT.
 * Nothing is allocated: names, item ids and inline bytes point into the
 * caller's payload; the tensor array is the caller's (count-then-fill). */
#ifndef CJ_PAYLOAD_DXO_H
#define CJ_PAYLOAD_DXO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "payload/fobs.h"
#include "util/err.h"

#define CJ_DXO_KEY "DXO"
#define CJ_DXO_DOT_NUMPY 3
#define CJ_DXO_DOT_TORCH 6

#define CJ_DXO_DATAKIND "nvflare.apis.dxo.DataKind"
#define CJ_DXO_ENUM_DC "nvflare.fuel.utils.fobs.decomposer.EnumTypeDecomposer"
#define CJ_DXO_NUMPY_DC "nvflare.app_common.decomposers.numpy_decomposers.NumpyArrayDecomposer"
#define CJ_DXO_TORCH_DC "nvflare.app_opt.pt.decomposers.TensorDecomposer"
#define CJ_DXO_LAZY_DC "nvflare.fuel.utils.fobs.decomposers.via_downloader.LazyDownloadRefDecomposer"

#define CJ_DXO_KIND_MAX 63        /* DataKind member name */

/* ---- writing -------------------------------------------------------------------- */

struct cj_dxo_out {
    const uint8_t *headers;       /* raw msgpack map written as __headers__; NULL: no __headers__ */
    size_t headers_len;
    uint8_t dot;                  /* CJ_DXO_DOT_NUMPY (numpy.ndarray) or CJ_DXO_DOT_TORCH (torch.Tensor) */
    size_t n_tensors;             /* tensor i is item "T<i>" */
    const char *const *names;     /* n_tensors names; NULL: "layer<i>.weight" */
    const char *kind;             /* DataKind member; NULL: "WEIGHTS" */
    int64_t current_round;        /* meta = {current_round: r} ... */
    const uint8_t *meta;          /* ... unless this raw msgpack map is given (written verbatim) */
    size_t meta_len;
    const char *source;           /* datum "fqcn": the cell serving the items */
    const char *ref_id;           /* datum "ref_id" */
    const uint8_t *datum_id;      /* 16 bytes; NULL: a random uuid4 */
    /* Inline form instead of refs (cjrelay-sim --inline): n_tensors byte
     * strings written as {type: "native", data: <bin>} (numpy: an .npy file,
     * torch: a safetensors blob); no datum, source/ref_id unused. */
    const uint8_t *const *native;
    const size_t *native_len;
};

/* Appends the whole LOBS payload to out (on failure out is left as it was).
 * Refused (CJ_E_INVALID): a dot other than 3/6, no tensors, an empty or
 * missing source/ref_id (ref form), fqcn/ref_id bytes outside printable ASCII
 * (they are written into JSON as is, '"' and '\' escaped), headers/meta that
 * are not exactly one msgpack map. */
int cj_dxo_write(msgpack_sbuffer *out, const struct cj_dxo_out *d, struct cj_err *err);

/* ---- reading -------------------------------------------------------------------- */

struct cj_dxo_tensor {
    const uint8_t *name;          /* the key in DXO.data (not NUL-terminated) */
    uint32_t name_len;
    enum cj_fobs_wrap_kind kind;  /* CJ_FOBS_WRAP_NUMPY / _TORCH / _LAZY */
    bool is_ref;                  /* {type: "ref"} */
    uint8_t dot;                  /* refs: 3 numpy, 6 torch, lazy_dot for LazyDownloadRef */
    const uint8_t *data;          /* ref: the item id "T<n>"; native: the inline bytes */
    uint32_t data_len;
    int64_t item;                 /* ref: n of "T<n>" (decimal, no sign/leading zeros); -1 otherwise */
};

struct cj_dxo_in {
    /* in: the caller's array for the first `cap` tensors (NULL when cap is 0) */
    struct cj_dxo_tensor *tensors;
    size_t cap;
    /* out */
    size_t n_tensors;             /* every tensor in DXO.data (may exceed cap) */
    size_t n_refs, n_native;      /* of them: refs / inline */
    struct cj_range headers;       /* the Shareable's raw __headers__ map (offsets in payload); len 0 absent */
    struct cj_range meta;          /* the raw DXO.meta value; len 0 absent */
    bool has_round;               /* meta.current_round is an int */
    int64_t current_round;
    char kind[CJ_DXO_KIND_MAX + 1]; /* DataKind member ("" when kind is not an enum wrapper) */
    uint8_t dot;                  /* DOT of the refs (0 when there are none) */
    uint64_t n_items;             /* highest n of "T<n>" + 1 among the refs */
    bool has_datum;               /* a datum of that DOT was found */
    size_t n_datums;              /* datums of that DOT in the payload (1 expected) */
    char fqcn[CJ_FOBS_FQCN_MAX + 1];     /* the first such datum's JSON */
    char ref_id[CJ_FOBS_REF_ID_MAX + 1];
};

/* [body_off, body_off + body_len) of payload is the raw Shareable wrapper
 * (the MAIN body value, or a Shareable nested inside it).  payload is the
 * whole LOBS container (its datums are searched).  Set d->tensors and d->cap
 * first; everything else is filled.
 * Errors: not a Shareable (CJ_E_TYPE/CJ_E_MISSING from fobs.h), no "DXO" entry
 * or no DXO.data map (CJ_E_MISSING), a DXO.data value that is not a numpy /
 * torch / LazyDownloadRef wrapper with type ref|native (CJ_E_TYPE), refs of
 * two DOTs, an unknown DOT or a ref whose data is not a str (CJ_E_INVALID),
 * refs without a datum of their DOT (CJ_E_MISSING), a bad datum JSON or
 * container (as fobs.h / lobs.h report them). */
int cj_dxo_read(const uint8_t *payload, size_t len, size_t body_off, size_t body_len, struct cj_dxo_in *d,
                struct cj_err *err);

/* Copies tensor t's name into out as a C string (cut to outsz - 1 bytes). */
void cj_dxo_name(const struct cj_dxo_tensor *t, char *out, size_t outsz);

#endif
