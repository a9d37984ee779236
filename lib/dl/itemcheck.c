/* SPDX-License-Identifier: Apache-2.0 */
/* itemcheck.c — the spool's check of a tensor item's header (see itemcheck.h). */
#include "dl/itemcheck.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload/items.h"
#include "util/json.h"

#define JSON_KEYS_MAX 2048   /* top-level header keys compared for duplicates */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The compressed size of the member whose local header z is at h (zip64 extra honoured). */
static int zip_csize(const uint8_t *h, struct items_zip_local *z, char *why, size_t whysz)
{
    if (z->flags & 8) return cj_why(why, whysz, "ZIP member uses a data descriptor (sizes unknown)");
    if (items_zip64_sizes(h, 30 + (size_t)z->name_len, z->extra_len, z, NULL))
        return cj_why(why, whysz, "ZIP member sizes are 0xFFFFFFFF without a zip64 extra");
    return 0;
}
/* npz: a stored ZIP whose (first real) member is T<index>.npy; numpy < 2's
 * allow_pickle.npy may come first.  1 ok, 0 need more bytes, -1 bad. */
static int check_npz(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t whysz)
{
    char want[32];
    snprintf(want, sizeof want, "T%" PRIu32 ".npy", index);
    size_t pos = 0;
    for (int member = 0; member < 2; member++) {
        bool last = final || have >= size || have >= CJ_ITEM_HDR_MAX;
        if (pos > have || have - pos < 30)   /* pos can be past have: a first member not all received yet */
            return last ? cj_why(why, whysz, "npz item T%" PRIu32 " too short for a ZIP local file header", index) : 0;
        const uint8_t *p = h + pos;
        if (memcmp(p, "PK\x03\x04", 4))
            return cj_why(why, whysz, "npz item T%" PRIu32 " is not a ZIP (no local file header at offset %zu)", index, pos);
        struct items_zip_local z;
        items_zip_local_read(p, &z);
        if (z.method != 0)
            return cj_why(why, whysz, "npz item T%" PRIu32 " member at offset %zu is compressed (method %u); only stored", index,
                       pos, z.method);
        size_t nl = z.name_len, el = z.extra_len;
        if (have - pos < 30 + nl + el)
            return last ? cj_why(why, whysz, "npz item T%" PRIu32 " ends inside a ZIP local file header", index) : 0;
        const char *name = (const char *)p + 30;
        if (nl == strlen(want) && !memcmp(name, want, nl)) return 1;
        if (member == 0 && nl == 16 && !memcmp(name, "allow_pickle.npy", 16)) {
            if (zip_csize(p, &z, why, whysz)) return -1;
            uint64_t csize = z.csize;
            if (csize > CJ_ITEM_HDR_MAX || pos + 30 + nl + el + csize >= CJ_ITEM_HDR_MAX)
                return cj_why(why, whysz, "npz item T%" PRIu32 ": allow_pickle.npy member too large (%" PRIu64 " bytes)", index,
                           csize);
            pos += 30 + nl + el + (size_t)csize;
            if (pos > size) return cj_why(why, whysz, "npz item T%" PRIu32 ": first member runs past the item", index);
            continue;
        }
        return cj_why(why, whysz, "npz item T%" PRIu32 ": member '%.*s' is not %s", index, (int)(nl < 64 ? nl : 64), name, want);
    }
    return cj_why(why, whysz, "npz item T%" PRIu32 " has no %s member", index, want);
}

/* The safetensors header text: valid JSON (*ok), an object (*obj) whose
 * top-level keys (the first JSON_KEYS_MAX, compared as written) are distinct
 * (!*dup).  -1 out of memory. */
static int st_json(const uint8_t *s, size_t n, bool *ok, bool *obj, bool *dup)
{
    struct cj_json j = {.p = s, .pos = 0, .end = n, .who = "safetensors", .err = NULL};
    *ok = *obj = *dup = false;
    if (cj_json_peek(&j) != '{') {
        *ok = cj_json_skip(&j, ITEMS_JSON_MAX_DEPTH) == 0 && cj_json_peek(&j) == -1;
        return 0;
    }
    size_t (*keys)[2] = calloc(JSON_KEYS_MAX, sizeof *keys), n_keys = 0;
    if (!keys) return -1;
    j.pos++;
    if (cj_json_peek(&j) == '}') j.pos++;
    else for (;;) {
        cj_json_peek(&j);
        size_t ks = j.pos;
        if (cj_json_string(&j, NULL, 0)) goto out;
        size_t kl = j.pos - ks;
        for (size_t k = 0; k < n_keys; k++)
            if (keys[k][1] == kl && !memcmp(s + keys[k][0], s + ks, kl)) *dup = true;
        if (n_keys < JSON_KEYS_MAX) {
            keys[n_keys][0] = ks;
            keys[n_keys][1] = kl;
            n_keys++;
        }
        if (cj_json_expect(&j, ':') || cj_json_skip(&j, ITEMS_JSON_MAX_DEPTH - 1)) goto out;
        int c = cj_json_peek(&j);
        j.pos++;
        if (c == '}') break;
        if (c != ',') goto out;
    }
    *ok = cj_json_peek(&j) == -1;
    *obj = true;
out:
    free(keys);
    return 0;
}

/* safetensors (§4.2): 1 ok, 0 need more bytes, -1 bad. */
static int check_st(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t whysz)
{
    if (size < 8) return cj_why(why, whysz, "safetensors item T%" PRIu32 " too short (%" PRIu64 " bytes)", index, size);
    if (have < 8) return final ? cj_why(why, whysz, "safetensors item T%" PRIu32 " too short", index) : 0;
    uint64_t n = le64(h);
    if (n == 0) return cj_why(why, whysz, "safetensors item T%" PRIu32 ": empty header", index);
    if (n > size - 8)
        return cj_why(why, whysz, "safetensors item T%" PRIu32 ": header size exceeds payload length (%" PRIu64 " > %" PRIu64 ")",
                   index, n, size - 8);
    if (n > CJ_ITEM_HDR_MAX - 8)
        return cj_why(why, whysz,
                   "safetensors item T%" PRIu32 ": header of %" PRIu64 " bytes is larger than the %u bytes the spool checks",
                   index, n, CJ_ITEM_HDR_MAX - 8);
    if (have < 8 + n) return final ? cj_why(why, whysz, "safetensors item T%" PRIu32 " ends inside its header", index) : 0;
    bool ok, obj, dup;
    if (st_json(h + 8, (size_t)n, &ok, &obj, &dup)) return cj_why(why, whysz, "out of memory checking item T%" PRIu32, index);
    if (!ok) return cj_why(why, whysz, "safetensors item T%" PRIu32 ": invalid JSON header", index);
    if (!obj) return cj_why(why, whysz, "safetensors item T%" PRIu32 ": header must be JSON object", index);
    if (dup) return cj_why(why, whysz, "safetensors item T%" PRIu32 ": duplicate key in the header", index);
    return 1;
}

int cj_item_check_header(int dot, const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why,
                         size_t whysz)
{
    return dot == 6 ? check_st(h, have, size, index, final, why, whysz) : check_npz(h, have, size, index, final, why, whysz);
}
