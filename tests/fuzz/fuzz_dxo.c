/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dxo.c — the DXO reader on arbitrary containers: every span it returns
 * lies inside the input, counts are consistent, and a DXO written back from what
 * was read (names, DOT, ref) reads again to the same names, DOT and ref. */
#include <stdlib.h>
#include <string.h>

#include "payload/dxo.h"
#include "payload/lobs.h"

#define CAP 64

static void inside(const uint8_t *data, size_t size, const uint8_t *p, size_t n)
{
    if (n && (p < data || p + n > data + size)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cj_lobs_section main_s, datums[8];
    size_t nd = 0;
    struct cj_err err;
    if (cj_lobs_validate(data, size, &main_s, datums, 8, &nd, &err) != 0) return 0;
    struct cj_dxo_tensor t[CAP];
    struct cj_dxo_in in = {.tensors = t, .cap = CAP};
    size_t off = (size_t)(main_s.value - data);
    if (cj_dxo_read(data, size, off, main_s.value_len, &in, &err) != 0) return 0;
    if (in.n_refs + in.n_native > in.n_tensors) abort();
    if (in.headers.len && in.headers.off + in.headers.len > size) abort();
    if (in.meta.len && in.meta.off + in.meta.len > size) abort();
    size_t k = in.n_tensors < CAP ? in.n_tensors : CAP;
    for (size_t i = 0; i < k; i++) {
        inside(data, size, t[i].name, t[i].name_len);
        inside(data, size, t[i].data, t[i].data_len);
    }
    if (!in.has_datum || (in.dot != 3 && in.dot != 6) || !in.fqcn[0] || !in.ref_id[0] || in.n_refs != in.n_tensors ||
        k != in.n_tensors)
        return 0;
    /* write back: same number of tensors as refs named layer<i>.weight, then read again */
    struct cj_dxo_out o = {.dot = in.dot, .n_tensors = k, .source = in.fqcn, .ref_id = in.ref_id};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (cj_dxo_write(&sb, &o, &err) == 0) {
        struct cj_lobs_section m2, d2[8];
        size_t n2 = 0;
        if (cj_lobs_validate(sb.data, sb.size, &m2, d2, 8, &n2, &err) != 0) abort();
        struct cj_dxo_tensor t2[CAP];
        struct cj_dxo_in in2 = {.tensors = t2, .cap = CAP};
        if (cj_dxo_read((const uint8_t *)sb.data, sb.size, (size_t)(m2.value - (const uint8_t *)sb.data),
                        m2.value_len, &in2, &err) != 0)
            abort();
        if (in2.n_tensors != k || in2.dot != in.dot || strcmp(in2.fqcn, in.fqcn) || strcmp(in2.ref_id, in.ref_id))
            abort();
    }
    msgpack_sbuffer_destroy(&sb);
    return 0;
}
