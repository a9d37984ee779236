/* itemcheck.c — the spool's check of a tensor item's header (see itemcheck.h). */
#include "dl/itemcheck.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_DEPTH 32   /* nesting the safetensors header may use */

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

__attribute__((format(printf, 3, 4))) static int bad(char *why, size_t wn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wn, fmt, ap);
    va_end(ap);
    return -1;
}

/* The compressed size of the member whose local header is at h (zip64 extra honoured). */
static int zip_csize(const uint8_t *h, size_t have_extra, uint64_t *csize, char *why, size_t wn)
{
    uint32_t c32 = le32(h + 18), u32 = le32(h + 22);
    uint16_t nl = le16(h + 26), el = le16(h + 28);
    if (le16(h + 6) & 8) return bad(why, wn, "ZIP member uses a data descriptor (sizes unknown)");
    *csize = c32;
    if (c32 != 0xFFFFFFFFu) return 0;
    const uint8_t *x = h + 30 + nl, *end = x + (el < have_extra ? el : have_extra);
    while (end - x >= 4) {
        uint16_t id = le16(x), sz = le16(x + 2);
        if ((size_t)(end - x - 4) < sz) break;
        if (id == 1) {
            size_t at = u32 == 0xFFFFFFFFu ? 8 : 0;
            if (sz < at + 8) break;
            *csize = le64(x + 4 + at);
            return 0;
        }
        x += 4 + sz;
    }
    return bad(why, wn, "ZIP member sizes are 0xFFFFFFFF without a zip64 extra");
}

/* npz: a stored ZIP whose (first real) member is T<index>.npy; numpy < 2's
 * allow_pickle.npy may come first.  1 ok, 0 need more bytes, -1 bad. */
static int check_npz(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t wn)
{
    char want[32];
    snprintf(want, sizeof want, "T%" PRIu32 ".npy", index);
    size_t pos = 0;
    for (int member = 0; member < 2; member++) {
        bool last = final || have >= size || have >= CJ_ITEM_HDR_MAX;
        if (pos > have || have - pos < 30)   /* pos can be past have: a first member not all received yet */
            return last ? bad(why, wn, "npz item T%" PRIu32 " too short for a ZIP local file header", index) : 0;
        const uint8_t *p = h + pos;
        if (memcmp(p, "PK\x03\x04", 4))
            return bad(why, wn, "npz item T%" PRIu32 " is not a ZIP (no local file header at offset %zu)", index, pos);
        if (le16(p + 8) != 0)
            return bad(why, wn, "npz item T%" PRIu32 " member at offset %zu is compressed (method %u); only stored", index,
                       pos, le16(p + 8));
        size_t nl = le16(p + 26), el = le16(p + 28);
        if (have - pos < 30 + nl + el)
            return last ? bad(why, wn, "npz item T%" PRIu32 " ends inside a ZIP local file header", index) : 0;
        const char *name = (const char *)p + 30;
        if (nl == strlen(want) && !memcmp(name, want, nl)) return 1;
        if (member == 0 && nl == 16 && !memcmp(name, "allow_pickle.npy", 16)) {
            uint64_t csize = 0;
            if (zip_csize(p, el, &csize, why, wn)) return -1;
            if (csize > CJ_ITEM_HDR_MAX || pos + 30 + nl + el + csize >= CJ_ITEM_HDR_MAX)
                return bad(why, wn, "npz item T%" PRIu32 ": allow_pickle.npy member too large (%" PRIu64 " bytes)", index,
                           csize);
            pos += 30 + nl + el + (size_t)csize;
            if (pos > size) return bad(why, wn, "npz item T%" PRIu32 ": first member runs past the item", index);
            continue;
        }
        return bad(why, wn, "npz item T%" PRIu32 ": member '%.*s' is not %s", index, (int)(nl < 64 ? nl : 64), name, want);
    }
    return bad(why, wn, "npz item T%" PRIu32 " has no %s member", index, want);
}

/* A small JSON validator (RFC 8259 syntax), depth-bounded recursion. */
struct js {
    const char *s;
    size_t n, i;
    /* top-level object keys (spans), for the duplicate check */
    size_t keys[2048][2];
    size_t n_keys;
    bool dup;
};

static void js_ws(struct js *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static bool js_string(struct js *j)
{
    if (j->i >= j->n || j->s[j->i] != '"') return false;
    j->i++;
    while (j->i < j->n) {
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c == '"') return true;
        if (c < 0x20) return false;
        if (c == '\\') {
            if (j->i >= j->n) return false;
            char e = j->s[j->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++, j->i++) {
                    char h = j->i < j->n ? j->s[j->i] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
                }
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return false;
            }
        }
    }
    return false;
}

static bool js_digits(struct js *j)
{
    size_t s = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > s;
}

static bool js_number(struct js *j)
{
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') j->i++;
    else if (!js_digits(j)) return false;
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (!js_digits(j)) return false;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (!js_digits(j)) return false;
    }
    return true;
}

static bool js_word(struct js *j, const char *w)
{
    size_t n = strlen(w);
    if (j->n - j->i < n || memcmp(j->s + j->i, w, n)) return false;
    j->i += n;
    return true;
}

static bool js_value(struct js *j, int depth);

static bool js_object(struct js *j, int depth)
{
    j->i++;   /* { */
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
        return true;
    }
    for (;;) {
        js_ws(j);
        size_t ks = j->i;
        if (!js_string(j)) return false;
        if (depth == 1) {
            size_t kl = j->i - ks;
            for (size_t k = 0; k < j->n_keys; k++)
                if (j->keys[k][1] == kl && !memcmp(j->s + j->keys[k][0], j->s + ks, kl)) j->dup = true;
            if (j->n_keys < sizeof j->keys / sizeof j->keys[0]) {
                j->keys[j->n_keys][0] = ks;
                j->keys[j->n_keys][1] = kl;
                j->n_keys++;
            }
        }
        js_ws(j);
        if (j->i >= j->n || j->s[j->i] != ':') return false;
        j->i++;
        if (!js_value(j, depth)) return false;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            continue;
        }
        if (j->i < j->n && j->s[j->i] == '}') {
            j->i++;
            return true;
        }
        return false;
    }
}

static bool js_array(struct js *j, int depth)
{
    j->i++;   /* [ */
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
        return true;
    }
    for (;;) {
        if (!js_value(j, depth)) return false;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            j->i++;
            continue;
        }
        if (j->i < j->n && j->s[j->i] == ']') {
            j->i++;
            return true;
        }
        return false;
    }
}

static bool js_value(struct js *j, int depth)
{
    js_ws(j);
    if (j->i >= j->n || depth >= JSON_DEPTH) return false;
    switch (j->s[j->i]) {
    case '{': return js_object(j, depth + 1);
    case '[': return js_array(j, depth + 1);
    case '"': return js_string(j);
    case 't': return js_word(j, "true");
    case 'f': return js_word(j, "false");
    case 'n': return js_word(j, "null");
    default: return js_number(j);
    }
}

/* safetensors (§4.2): 1 ok, 0 need more bytes, -1 bad. */
static int check_st(const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why, size_t wn)
{
    if (size < 8) return bad(why, wn, "safetensors item T%" PRIu32 " too short (%" PRIu64 " bytes)", index, size);
    if (have < 8) return final ? bad(why, wn, "safetensors item T%" PRIu32 " too short", index) : 0;
    uint64_t n = le64(h);
    if (n == 0) return bad(why, wn, "safetensors item T%" PRIu32 ": empty header", index);
    if (n > size - 8)
        return bad(why, wn, "safetensors item T%" PRIu32 ": header size exceeds payload length (%" PRIu64 " > %" PRIu64 ")",
                   index, n, size - 8);
    if (n > CJ_ITEM_HDR_MAX - 8)
        return bad(why, wn,
                   "safetensors item T%" PRIu32 ": header of %" PRIu64 " bytes is larger than the %u bytes the spool checks",
                   index, n, CJ_ITEM_HDR_MAX - 8);
    if (have < 8 + n) return final ? bad(why, wn, "safetensors item T%" PRIu32 " ends inside its header", index) : 0;
    struct js *j = calloc(1, sizeof *j);
    if (!j) return bad(why, wn, "out of memory checking item T%" PRIu32, index);
    j->s = (const char *)h + 8;
    j->n = (size_t)n;
    bool ok = js_value(j, 0);
    js_ws(j);
    ok = ok && j->i == j->n;
    size_t first = 0;
    while (first < j->n && (j->s[first] == ' ' || j->s[first] == '\t' || j->s[first] == '\n' || j->s[first] == '\r'))
        first++;
    bool obj = ok && first < j->n && j->s[first] == '{';
    bool dup = j->dup;
    free(j);
    if (!ok) return bad(why, wn, "safetensors item T%" PRIu32 ": invalid JSON header", index);
    if (!obj) return bad(why, wn, "safetensors item T%" PRIu32 ": header must be JSON object", index);
    if (dup) return bad(why, wn, "safetensors item T%" PRIu32 ": duplicate key in the header", index);
    return 1;
}

int cj_item_check_header(int dot, const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why,
                         size_t wn)
{
    return dot == 6 ? check_st(h, have, size, index, final, why, wn) : check_npz(h, have, size, index, final, why, wn);
}
