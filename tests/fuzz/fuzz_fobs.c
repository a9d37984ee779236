/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_fobs.c — the FOBS walker, ref datums, Shareable/headers lookup and the
 * __headers__ rewrite.
 *
 * Input: a LOBS payload (its MAIN body is walked and its datums listed), or,
 * when it is not a valid container, a raw msgpack body.  Invariants checked:
 *  - walking reports wrappers whose item pointers lie inside the body;
 *  - listed refs are DOT 3/6 with NUL-free, non-empty, in-bound strings, and
 *    their JSON re-parses to the same values;
 *  - for every Shareable found (the body, or an envelope's "model"/"result"):
 *    setting two headers succeeds, the result is again a Shareable holding both
 *    keys with their values and the expected entry count, every other header
 *    value is byte-identical, the walk verdict and ref counts are unchanged
 *    (when the two keys were new: a replaced value could hide anything),
 *    and setting the same headers again is a no-op. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

struct bounds {
    const uint8_t *lo, *hi;
};

static int bounds_cb(void *ud, const struct cj_fobs_wrapper *w)
{
    const struct bounds *b = ud;
    CHECK(w->kind >= CJ_FOBS_WRAP_NUMPY && w->kind <= CJ_FOBS_WRAP_DATUMREF);
    CHECK(b->lo + w->off < b->hi);
    if (w->item) CHECK(w->item >= b->lo && w->item + w->item_len <= b->hi);
    if (w->is_ref) CHECK(!w->is_native);
    return 0;
}

static void check_refs(const uint8_t *data, size_t size)
{
    struct cj_fobs_ref r[4];
    size_t n;
    struct cj_err err;
    if (cj_fobs_list_refs(data, size, r, 4, &n, &err)) {
        CHECK(err.offset <= size);
        return;
    }
    for (size_t i = 0; i < n && i < 4; i++) {
        CHECK(r[i].dot == 3 || r[i].dot == 6);
        size_t fl = strlen(r[i].fqcn), rl = strlen(r[i].ref_id);
        CHECK(fl > 0 && fl <= CJ_FOBS_FQCN_MAX && rl > 0 && rl <= CJ_FOBS_REF_ID_MAX);
        CHECK(r[i].section_off < size && data[r[i].section_off] == CJ_LOBS_TEXT);
        /* a JSON we write from the parsed values parses back the same (values
         * are NUL-free; escape only '"' and '\\', keep control chars escaped) */
        size_t cap = 64 + 6 * (fl + rl);
        char *js = malloc(cap), *p = js;
        const char *parts[2] = {r[i].fqcn, r[i].ref_id};
        const char *names[2] = {"{\"fqcn\":\"", "\",\"ref_id\":\""};
        for (int k = 0; k < 2; k++) {
            p += strlen(strcpy(p, names[k]));
            for (const char *c = parts[k]; *c; c++) {
                unsigned char ch = (unsigned char)*c;
                if (ch == '"' || ch == '\\') { *p++ = '\\'; *p++ = (char)ch; }
                else if (ch < 0x20) p += sprintf(p, "\\u%04x", ch);
                else *p++ = (char)ch;
            }
        }
        p += strlen(strcpy(p, "\"}"));
        char f2[CJ_FOBS_FQCN_MAX + 1], r2[CJ_FOBS_REF_ID_MAX + 1];
        CHECK(cj_fobs_parse_ref_json((uint8_t *)js, (size_t)(p - js), f2, sizeof f2, r2, sizeof r2, &err) == 0);
        CHECK(strcmp(f2, r[i].fqcn) == 0 && strcmp(r2, r[i].ref_id) == 0);
        free(js);
    }
}

static const char *const K1 = "job_id", *const K2 = "site_name";
static const uint8_t V1[] = {0xa5, 'J', '-', 'f', 'z', '1'};
static const uint8_t V2[] = {0x92, 0xc3, 0xa1, 'S'};   /* any value: [true, "S"] */

static int has_key(const uint8_t *b, struct cj_range h, const char *k)
{
    struct cj_range v;
    struct cj_err err;
    if (!h.len) return 0;
    int rc = cj_fobs_map_get(b + h.off, h.len, k, &v, &err);
    CHECK(rc >= 0);
    return rc;
}

/* Every header of the old map not being set is in the new map with the same bytes. */
static void check_other_headers(const uint8_t *ob, struct cj_range oh, const uint8_t *nb, struct cj_range nh)
{
    if (!oh.len) return;
    struct mp_cur c = {ob + oh.off, 0, oh.len};
    struct cj_err err;
    uint32_t n;
    CHECK(mp_read_map(&c, &n, &err) == 0);
    for (uint32_t i = 0; i < n && i < 64; i++) {
        struct mp_val k;
        size_t kat = c.pos;
        CHECK(mp_next(&c, &k, &err) == 0);
        if (k.kind == MP_ARRAY || k.kind == MP_MAP) { c.pos = kat; CHECK(mp_skip(&c, &err) == 0); }
        size_t vat = c.pos;
        CHECK(mp_skip(&c, &err) == 0);
        if (k.kind != MP_STR || k.len >= 64 || memchr(k.ptr, 0, k.len)) continue;
        char key[64];
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        if (!strcmp(key, K1) || !strcmp(key, K2)) continue;
        struct cj_range nv, ov;
        CHECK(cj_fobs_map_get(nb + nh.off, nh.len, key, &nv, &err) == 1);
        CHECK(cj_fobs_map_get(ob + oh.off, oh.len, key, &ov, &err) == 1);
        (void)vat;
        /* with duplicate keys both sides return the last one */
        CHECK(nv.len == ov.len && memcmp(nb + nh.off + nv.off, ob + oh.off + ov.off, ov.len) == 0);
    }
}

static void check_edit(const uint8_t *b, size_t len)
{
    struct cj_fobs_shareable sh, sh2;
    struct cj_err err;
    if (cj_fobs_find_shareable(b, len, &sh, &err)) return;
    int had1 = has_key(b, sh.headers, K1), had2 = has_key(b, sh.headers, K2);

    struct cj_fobs_kv kv[2] = {{K1, V1, sizeof V1}, {K2, V2, sizeof V2}};
    msgpack_sbuffer out, again;
    msgpack_sbuffer_init(&out);
    msgpack_sbuffer_init(&again);
    CHECK(cj_fobs_set_headers(b, len, kv, 2, &out, &err) == 0);
    const uint8_t *o = (const uint8_t *)out.data;
    CHECK(cj_fobs_find_shareable(o, out.size, &sh2, &err) == 0);
    CHECK(sh2.headers.len > 0);
    CHECK(sh2.headers_n == sh.headers_n + !had1 + !had2);
    CHECK(sh2.data_n == sh.data_n + !sh.headers.len);
    struct cj_range v;
    CHECK(cj_fobs_map_get(o + sh2.headers.off, sh2.headers.len, K1, &v, &err) == 1);
    CHECK(v.len == sizeof V1 && memcmp(o + sh2.headers.off + v.off, V1, sizeof V1) == 0);
    CHECK(cj_fobs_map_get(o + sh2.headers.off, sh2.headers.len, K2, &v, &err) == 1);
    CHECK(v.len == sizeof V2 && memcmp(o + sh2.headers.off + v.off, V2, sizeof V2) == 0);
    check_other_headers(b, sh.headers, o, sh2.headers);
    /* bytes before the headers (or the data map) are copied */
    size_t pre = sh.headers.len ? sh.headers.off : sh.data_off;
    CHECK(memcmp(o, b, pre) == 0);

    /* the walk verdict and, when no replaced value could hide a wrapper, the counts */
    struct cj_fobs_ref_counts c1, c2;
    int w1 = cj_fobs_count_refs(b, len, &c1, &err);
    int w2 = cj_fobs_count_refs(o, out.size, &c2, &err);
    if (!had1 && !had2) {
        CHECK((w1 == 0) == (w2 == 0));
        if (w1 == 0) CHECK(memcmp(&c1, &c2, sizeof c1) == 0);
    }

    CHECK(cj_fobs_set_headers(o, out.size, kv, 2, &again, &err) == 0);
    CHECK(again.size == out.size && memcmp(again.data, out.data, out.size) == 0);
    msgpack_sbuffer_destroy(&out);
    msgpack_sbuffer_destroy(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cj_lobs_section m;
    struct cj_err err;
    const uint8_t *body = data;
    size_t len = size;
    if (cj_lobs_validate(data, size, &m, NULL, 0, NULL, &err) == 0) {
        body = m.value;
        len = m.value_len;
        check_refs(data, size);
    }
    struct bounds bd = {body, body + len};
    int wrc = cj_fobs_walk(body, len, bounds_cb, &bd, &err);
    if (wrc) CHECK(wrc < 0 && err.offset <= len);

    struct cj_fobs_headers h;
    struct cj_fobs_shareable sh;
    if (cj_fobs_find_shareable(body, len, &sh, &err) == 0 && sh.headers.len) {
        CHECK(sh.headers.off + sh.headers.len <= len);
        CHECK(cj_fobs_read_headers(body + sh.headers.off, sh.headers.len, &h, &err) == 0);
        if (h.task_name.len) {
            char name[256];
            (void)cj_fobs_span_str(body + sh.headers.off, h.task_name, name, sizeof name, &err);
        }
    }
    check_edit(body, len);
    const char *env[2] = {"model", "result"};
    for (int i = 0; i < 2; i++) {
        struct cj_range v;
        if (cj_fobs_map_get(body, len, env[i], &v, &err) == 1) check_edit(body + v.off, v.len);
    }
    return 0;
}
