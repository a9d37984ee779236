/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "payload/refmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    struct cj_fobs_ref refs[8];
    size_t nr = 0;
    struct cj_err e = {0};
    msgpack_sbuffer a, b, c;
    msgpack_sbuffer_init(&a); msgpack_sbuffer_init(&b); msgpack_sbuffer_init(&c);
    if (cj_fobs_list_refs(d, n, refs, 8, &nr, &e) != 0) nr = 0;
    if (nr > 8) nr = 8;
    char ids[8][40];
    struct cj_refmap_entry fwd[8], back[8];
    for (size_t i = 0; i < nr; i++) {
        snprintf(ids[i], sizeof ids[i], "zz-fuzz-relay-new-%zu", i);
        fwd[i] = (struct cj_refmap_entry){refs[i].fqcn, refs[i].ref_id, "site-1.J1", ids[i]};
        back[i] = (struct cj_refmap_entry){"site-1.J1", ids[i], refs[i].fqcn, refs[i].ref_id};
    }
    size_t done = 0;
    int rc = cj_refmap_rewrite(d, n, fwd, nr, &a, &done, &e);
    if (rc == 0) {
        if (cj_lobs_validate(a.data, a.size, NULL, NULL, 0, NULL, &e) != 0) abort();
        struct cj_fobs_ref r2[8];
        size_t n2 = 0;
        if (cj_fobs_list_refs((uint8_t *)a.data, a.size, r2, 8, &n2, &e) != 0) abort();
        /* duplicates (same fqcn/ref in two datums) may rewrite more than nr */
        for (size_t i = 0; i < n2 && i < 8; i++)
            if (strcmp(r2[i].fqcn, "site-1.J1") && nr) {
                /* an unusable new value never gets here; refs whose fqcn/id were unprintable fail rc */
            }
        size_t d2;
        int rb = cj_refmap_rewrite((uint8_t *)a.data, a.size, back, nr, &b, &d2, &e);
        if (rb == 0) {
            size_t d3;
            if (cj_refmap_rewrite((uint8_t *)b.data, b.size, fwd, nr, &c, &d3, &e) != 0) abort();
            if (c.size != a.size || memcmp(c.data, a.data, a.size)) abort();
        }
    } else if (a.size != 0) abort();
    msgpack_sbuffer_destroy(&a); msgpack_sbuffer_destroy(&b); msgpack_sbuffer_destroy(&c);
    return 0;
}
