/* SPDX-License-Identifier: Apache-2.0 */
/* items.h — tensor download items: safetensors and npz (doc/protocol/download.md §4).
 *
 * The relay never looks inside items (it forwards or spools them verbatim);
 * these parsers and writers are for the simulator and the test worker, which
 * produce items and verify the tensors they receive.
 *
 * Parsers never allocate and never copy tensor data: they report spans (byte
 * offsets into the caller's buffer) that are always inside the input.  They
 * check everything a hostile item could lie about: sizes against the input,
 * prod(shape) * element size against the data span (with overflow checks),
 * offsets that overlap or leave gaps, nesting depth of the JSON header. */
#ifndef CJ_PAYLOAD_ITEMS_H
#define CJ_PAYLOAD_ITEMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define ITEMS_MAX_DIMS 8
#define ITEMS_NAME_MAX 256                        /* tensor / member name, NUL included */
#define ITEMS_ST_MAX_HEADER ((uint64_t)100 << 20) /* safetensors JSON header limit (100 MiB) */
#define ITEMS_JSON_MAX_DEPTH 32                   /* nesting inside the safetensors header */

struct item_tensor {
    char name[ITEMS_NAME_MAX]; /* safetensors key; npz key (member name without ".npy") */
    char dtype[16];            /* safetensors dtype ("F32") or NPY descr ("<f4") */
    size_t elem_size;          /* bytes per element; 0 = dtype unknown (size not checked) */
    int ndim;
    uint64_t shape[ITEMS_MAX_DIMS];
    uint64_t nelem;            /* prod(shape); 1 for a 0-d array */
    size_t data_off;           /* absolute span of the raw tensor bytes in the input */
    size_t data_len;
    /* npz only */
    bool is_npy;               /* the member is an NPY array (false: other member, tolerated,
                                  only name/member span/crc are set) */
    bool fortran_order;
    size_t member_off;         /* span of the member's stored bytes (the NPY file) */
    size_t member_len;
    uint32_t crc32;            /* CRC-32 from the local file header */
};

/* Parses a safetensors item: u64 LE N, N bytes of JSON header, data.  Tensors
 * are returned in header order (which carries no meaning: look up by name).
 * The tensors must tile the data area exactly (no overlap, no gap), as the
 * safetensors library requires.  More than cap tensors is CJ_E_LIMIT. */
int items_st_parse(const uint8_t *p, size_t n, struct item_tensor *out, size_t cap, size_t *count,
                   struct cj_err *err);

/* items_npz_parse flags */
#define ITEMS_NPZ_CHECK_CRC 1u  /* verify each member's CRC-32 */

/* Parses an npz item: a ZIP of stored members, walked by local file headers
 * (zip64 extra honoured), closed by an end-of-central-directory record that
 * must agree with the walk.  Members named *.npy get their NPY header parsed;
 * other members are listed with is_npy false.  More than cap members is
 * CJ_E_LIMIT. */
int items_npz_parse(const uint8_t *p, size_t n, unsigned flags, struct item_tensor *out, size_t cap,
                    size_t *count, struct cj_err *err);

/* The fixed 30 bytes of a ZIP local file header (signature at h[0..3] not checked). */
struct items_zip_local {
    uint16_t flags, method, name_len, extra_len;
    uint32_t crc32;
    uint64_t csize, usize;    /* 32-bit sizes; 0xFFFFFFFF: look in the zip64 extra */
};
void items_zip_local_read(const uint8_t *h, struct items_zip_local *z);

/* Replaces the saturated (0xFFFFFFFF) sizes of z with those of the zip64 extra
 * field (tag 1) found in the xlen extra bytes at p + x.  0, or -CJ_E_INVALID
 * when a field overruns the extra area or a saturated size has no zip64 value. */
int items_zip64_sizes(const uint8_t *p, size_t x, size_t xlen, struct items_zip_local *z, struct cj_err *err);

/* The tensor named name, or NULL. */
const struct item_tensor *items_find(const struct item_tensor *t, size_t count, const char *name);

/* Bytes per element of a safetensors dtype ("F32" -> 4), 0 if unknown. */
size_t items_st_dtype_size(const char *dtype);

/* Bytes per element of an NPY descr ("<f4" -> 4, "|b1" -> 1), 0 if unknown. */
size_t items_npy_descr_size(const char *descr);

/* CRC-32 (ZIP / zlib polynomial); start with crc = 0. */
uint32_t items_crc32(uint32_t crc, const void *p, size_t n);

/* One tensor for the writers. */
struct item_in {
    const char *name;       /* safetensors key / npz key (".npy" is appended) */
    const char *dtype;      /* safetensors: "F32" ...; npz: NPY descr "<f4" ... */
    int ndim;               /* 0..ITEMS_MAX_DIMS */
    const uint64_t *shape;
    const void *data;       /* raw little-endian C-order bytes */
    size_t len;             /* must equal prod(shape) * element size */
};

/* Builds a safetensors item (compact JSON in the given order, fields dtype,
 * shape, data_offsets, padded with spaces so 8 + N is a multiple of 8, data
 * concatenated in the given order).  *out is malloc'd. */
int items_st_write(const struct item_in *in, size_t n, uint8_t **out, size_t *outlen, struct cj_err *err);

/* items_npz_write flags */
#define ITEMS_NPZ_NUMPY124 1u   /* first write numpy < 2's bogus allow_pickle.npy member (0-d bool
                                   False), as NVFlare's numpy producer does (vectors 11, 40, 41) */

/* Builds an npz item exactly as numpy 1.24's savez does: stored members with
 * a forced zip64 extra, NPY v1.0 headers with numpy's growth padding and
 * 64-byte alignment, central directory and end record.  *out is malloc'd. */
int items_npz_write(const struct item_in *in, size_t n, unsigned flags, uint8_t **out, size_t *outlen,
                    struct cj_err *err);

#endif
