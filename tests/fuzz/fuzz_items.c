/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_items.c — the safetensors and npz item parsers on arbitrary bytes.
 *
 * Invariants checked on whatever parses:
 *  - every reported span (tensor data, npz member) lies inside the input, an
 *    NPY tensor's data inside its member;
 *  - a known dtype's span is exactly prod(shape) * element size; safetensors
 *    tensors tile the data area;
 *  - an npz that passes with CRC checking also passes without;
 *  - parse -> write -> parse gives the same names, dtypes, shapes and bytes;
 *  - a failure returns -err.code with a known code. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload/items.h"

#define CAP 32
#define CHECK(c) do { if (!(c)) abort(); } while (0)

static void check_err(int rc, const struct cj_err *e)
{
    CHECK(rc < 0 && rc == -e->code && e->code >= CJ_E_TRUNCATED && e->code <= CJ_E_NOMEM);
}

static void check_tensor_size(const struct item_tensor *t)
{
    uint64_t ne = 1;
    for (int d = 0; d < t->ndim; d++) CHECK(!__builtin_mul_overflow(ne, t->shape[d], &ne));
    CHECK(ne == t->nelem);
    if (t->elem_size) CHECK((uint64_t)t->data_len == ne * t->elem_size);
}

/* Rebuilds the parsed tensors with a writer and checks they read back the same. */
static void check_rewrite(const uint8_t *src, const struct item_tensor *t, size_t cnt, bool npz)
{
    struct item_in in[CAP];
    size_t k = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (!t[i].elem_size || (npz && (!t[i].is_npy || t[i].fortran_order || strpbrk(t[i].dtype, "'\\"))))
            continue;   /* the writers only take what they can express */
        in[k++] = (struct item_in){.name = t[i].name, .dtype = t[i].dtype, .ndim = t[i].ndim,
                                   .shape = t[i].shape, .data = src + t[i].data_off, .len = t[i].data_len};
    }
    uint8_t *w;
    size_t wn, c2;
    struct cj_err e;
    struct item_tensor back[CAP];
    int rc = npz ? items_npz_write(in, k, 0, &w, &wn, &e) : items_st_write(in, k, &w, &wn, &e);
    CHECK(rc == 0);
    rc = npz ? items_npz_parse(w, wn, ITEMS_NPZ_CHECK_CRC, back, CAP, &c2, &e) : items_st_parse(w, wn, back, CAP, &c2, &e);
    CHECK(rc == 0 && c2 == k);
    for (size_t i = 0; i < k; i++) {
        const struct item_tensor *b = items_find(back, c2, in[i].name);
        CHECK(b && strcmp(b->dtype, in[i].dtype) == 0 && b->ndim == in[i].ndim && b->data_len == in[i].len);
        for (int d = 0; d < b->ndim; d++) CHECK(b->shape[d] == in[i].shape[d]);
        CHECK(in[i].len == 0 || memcmp(w + b->data_off, in[i].data, in[i].len) == 0);
    }
    free(w);
}

static void fuzz_st(const uint8_t *data, size_t size)
{
    struct item_tensor t[CAP];
    size_t cnt;
    struct cj_err e;
    int rc = items_st_parse(data, size, t, CAP, &cnt, &e);
    if (rc) { check_err(rc, &e); return; }
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = hn << 8 | data[i];
    uint64_t total = 0;
    for (size_t i = 0; i < cnt; i++) {
        CHECK(t[i].data_off >= 8 + hn && t[i].data_off <= size && t[i].data_len <= size - t[i].data_off);
        check_tensor_size(&t[i]);
        total += t[i].data_len;
    }
    CHECK(total == size - 8 - hn);
    check_rewrite(data, t, cnt, false);
}

static void fuzz_npz(const uint8_t *data, size_t size)
{
    struct item_tensor t[CAP], t2[CAP];
    size_t cnt, cnt2;
    struct cj_err e, e2;
    int rc = items_npz_parse(data, size, 0, t, CAP, &cnt, &e);
    int rc_crc = items_npz_parse(data, size, ITEMS_NPZ_CHECK_CRC, t2, CAP, &cnt2, &e2);
    if (rc_crc == 0) CHECK(rc == 0 && cnt2 == cnt);
    else check_err(rc_crc, &e2);
    if (rc) { check_err(rc, &e); return; }
    for (size_t i = 0; i < cnt; i++) {
        CHECK(t[i].member_off <= size && t[i].member_len <= size - t[i].member_off);
        if (!t[i].is_npy) continue;
        CHECK(t[i].data_off >= t[i].member_off &&
              t[i].data_off + t[i].data_len == t[i].member_off + t[i].member_len);
        check_tensor_size(&t[i]);
    }
    check_rewrite(data, t, cnt, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_st(data, size);
    fuzz_npz(data, size);
    return 0;
}
