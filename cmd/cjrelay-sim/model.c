/* SPDX-License-Identifier: Apache-2.0 */
/* model.c — deterministic tensors and their download items (see model.h). */
#include "model.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "payload/items.h"

#define NPZ_LFH 30u          /* local file header, without name and extra */
#define NPZ_EXTRA 20u        /* the forced zip64 extra */
#define NPZ_CDH 46u          /* central directory header, without name */
#define NPZ_EOCD 22u
#define HDR_MAX 256          /* any header this file writes */

/* ---- values ------------------------------------------------------------------------ */

void sim_period(long round, size_t t, bool plus_one, float out[SIM_PERIOD])
{
    float base = (float)(round * 1000 + (long)t);
    for (int j = 0; j < SIM_PERIOD; j++) {
        float v = base + (float)j * 0.001f;   /* float32 math: -std=c11 does not contract */
        out[j] = plus_one ? v + 1.0f : v;
    }
}

/* nelem floats of the periodic sequence at dst (any alignment). */
static void fill(uint8_t *dst, uint64_t nelem, const float period[SIM_PERIOD])
{
    uint64_t first = nelem < SIM_PERIOD ? nelem : SIM_PERIOD, done = first;
    memcpy(dst, period, (size_t)first * 4);
    while (done < nelem) {          /* done stays a multiple of the period */
        uint64_t k = nelem - done < done ? nelem - done : done;
        memcpy(dst + done * 4, dst, (size_t)k * 4);
        done += k;
    }
}

/* The same check: 0 when src holds the sequence, else the first bad element + 1. */
static uint64_t check(const uint8_t *src, uint64_t nelem, const float period[SIM_PERIOD])
{
    uint64_t first = nelem < SIM_PERIOD ? nelem : SIM_PERIOD, done = first;
    if (memcmp(src, period, (size_t)first * 4)) {
        for (uint64_t j = 0; j < first; j++)
            if (memcmp(src + j * 4, &period[j], 4)) return j + 1;
    }
    while (done < nelem) {
        uint64_t k = nelem - done < done ? nelem - done : done;
        if (memcmp(src + done * 4, src, (size_t)k * 4)) {
            for (uint64_t j = 0; j < k; j++)
                if (memcmp(src + (done + j) * 4, src + j * 4, 4)) return done + j + 1;
        }
        done += k;
    }
    return 0;
}

/* ---- CRC-32, slicing by 8 ------------------------------------------------------------ */

static uint32_t crc_tab[8][256];
static bool crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++) crc_tab[s][i] = (crc_tab[s - 1][i] >> 8) ^ crc_tab[0][crc_tab[s - 1][i] & 0xff];
    crc_ready = true;
}

uint32_t sim_crc32(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    if (!crc_ready) crc_init();
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_tab[7][a & 0xff] ^ crc_tab[6][(a >> 8) & 0xff] ^ crc_tab[5][(a >> 16) & 0xff] ^ crc_tab[4][a >> 24] ^
              crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^ crc_tab[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* ---- headers --------------------------------------------------------------------------- */

static void put_u16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The NPY v1.0 header numpy 1.24 writes for a 1-D <f4 array of n elements
 * (as items.c's npy_write): dict, 21 - digits spare spaces, padding, "\n". */
static size_t npy_header(uint64_t n, uint8_t out[HDR_MAX])
{
    char d[160];
    int dl = snprintf(d, sizeof d, "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRIu64 ",), }", n);
    int digits = snprintf(NULL, 0, "%" PRIu64, n);
    for (int i = digits; i < 21; i++) d[dl++] = ' ';
    size_t hlen = (size_t)dl + 1, pad = 64 - (10 + hlen) % 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put_u16(out + 8, (unsigned)(hlen + pad));
    memcpy(out + 10, d, (size_t)dl);
    memset(out + 10 + dl, ' ', pad);
    out[10 + dl + pad] = '\n';
    return 10 + hlen + pad;
}

/* u64 N + the compact JSON header of one F32 tensor `key`, padded to 8. */
static size_t st_header(const char *key, uint64_t n, uint8_t out[HDR_MAX])
{
    char j[HDR_MAX];
    int jl = snprintf(j, sizeof j, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64 "],\"data_offsets\":[0,%" PRIu64 "]}}",
                      key, n, n * 4);
    while ((8 + jl) % 8) j[jl++] = ' ';
    put_u64(out, (uint64_t)jl);
    memcpy(out + 8, j, (size_t)jl);
    return 8 + (size_t)jl;
}

static void key_of(size_t t, char key[24])
{
    snprintf(key, 24, "T%zu", t);
}

uint64_t sim_item_size(int dot, size_t t, uint64_t nelem)
{
    uint8_t h[HDR_MAX];
    char key[24];
    key_of(t, key);
    if (dot == SIM_DOT_TORCH) return st_header(key, nelem, h) + nelem * 4;
    uint64_t name = strlen(key) + 4;
    return NPZ_LFH + name + NPZ_EXTRA + npy_header(nelem, h) + nelem * 4 + NPZ_CDH + name + NPZ_EOCD;
}

/* ---- items ----------------------------------------------------------------------------- */

/* malloc, asking for transparent huge pages on a big item's body: a 1 GiB
 * model built in 4 KiB pages cost the simulator ~350,000 page faults, with
 * the advice ~100,000-130,000 (measured with --prebuild; the kernel grants
 * huge pages as it can).  Freed with free(). */
static uint8_t *item_alloc(size_t n)
{
    uint8_t *p = malloc(n);
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (p && n >= 4 * huge) {
        uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
        if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);   /* advice only: failure is harmless */
    }
#endif
    return p;
}

static uint8_t *st_build(const char *key, uint64_t nelem, const float period[SIM_PERIOD], size_t *len)
{
    uint8_t h[HDR_MAX];
    size_t hl = st_header(key, nelem, h);
    uint8_t *p = item_alloc(hl + nelem * 4);
    if (!p) return NULL;
    memcpy(p, h, hl);
    fill(p + hl, nelem, period);
    *len = hl + (size_t)nelem * 4;
    return p;
}

static uint8_t *npz_build(const char *key, uint64_t nelem, const float period[SIM_PERIOD], size_t *len)
{
    uint8_t h[HDR_MAX];
    char name[32];
    size_t nl = (size_t)snprintf(name, sizeof name, "%s.npy", key), hl = npy_header(nelem, h);
    uint64_t member = hl + nelem * 4, cd_off = NPZ_LFH + nl + NPZ_EXTRA + member, total = cd_off + NPZ_CDH + nl + NPZ_EOCD;
    uint8_t *p = item_alloc((size_t)total);
    if (!p) return NULL;
    uint8_t *m = p + NPZ_LFH + nl + NPZ_EXTRA;
    memcpy(m, h, hl);
    fill(m + hl, nelem, period);
    uint32_t crc = sim_crc32(0, m, (size_t)member);
    /* local file header: version 20, flags 0, stored, time 0, date 0x21 (1980-01-01) */
    memcpy(p, "PK\x03\x04", 4);
    put_u16(p + 4, 20); put_u16(p + 6, 0); put_u16(p + 8, 0); put_u16(p + 10, 0); put_u16(p + 12, 0x21);
    put_u32(p + 14, crc); put_u32(p + 18, (uint32_t)member); put_u32(p + 22, (uint32_t)member);
    put_u16(p + 26, (unsigned)nl); put_u16(p + 28, NPZ_EXTRA);
    memcpy(p + NPZ_LFH, name, nl);
    uint8_t *x = p + NPZ_LFH + nl;
    put_u16(x, 1); put_u16(x + 2, 16); put_u64(x + 4, member); put_u64(x + 12, member);
    /* central directory: made by 0x0314, ext attr 0o600 << 16, offset 0 */
    uint8_t *c = p + cd_off;
    memcpy(c, "PK\x01\x02", 4);
    put_u16(c + 4, 0x0314); put_u16(c + 6, 20); put_u16(c + 8, 0); put_u16(c + 10, 0); put_u16(c + 12, 0);
    put_u16(c + 14, 0x21);
    put_u32(c + 16, crc); put_u32(c + 20, (uint32_t)member); put_u32(c + 24, (uint32_t)member);
    put_u16(c + 28, (unsigned)nl); put_u16(c + 30, 0); put_u16(c + 32, 0); put_u16(c + 34, 0); put_u16(c + 36, 0);
    put_u32(c + 38, 0x01800000u); put_u32(c + 42, 0);
    memcpy(c + NPZ_CDH, name, nl);
    uint8_t *e = c + NPZ_CDH + nl;
    memcpy(e, "PK\x05\x06", 4);
    put_u16(e + 4, 0); put_u16(e + 6, 0); put_u16(e + 8, 1); put_u16(e + 10, 1);
    put_u32(e + 12, (uint32_t)(NPZ_CDH + nl)); put_u32(e + 16, (uint32_t)cd_off); put_u16(e + 20, 0);
    *len = (size_t)total;
    return p;
}

uint8_t *sim_item_build(int dot, size_t t, uint64_t nelem, const float period[SIM_PERIOD], size_t *len)
{
    char key[24];
    key_of(t, key);
    return dot == SIM_DOT_TORCH ? st_build(key, nelem, period, len) : npz_build(key, nelem, period, len);
}

uint8_t *sim_native_build(int dot, uint64_t nelem, const float period[SIM_PERIOD], size_t *len)
{
    if (dot == SIM_DOT_TORCH) return st_build("t", nelem, period, len);
    uint8_t h[HDR_MAX];
    size_t hl = npy_header(nelem, h);
    uint8_t *p = malloc(hl + (size_t)nelem * 4);
    if (!p) return NULL;
    memcpy(p, h, hl);
    fill(p + hl, nelem, period);
    *len = hl + (size_t)nelem * 4;
    return p;
}

/* ---- verification ---------------------------------------------------------------------- */

/* The tensor's shape, dtype and data against the expectation. */
static int check_tensor(const struct item_tensor *t, const uint8_t *p, const char *dtype, uint64_t nelem,
                        const float period[SIM_PERIOD], char *why, size_t whysz)
{
    if (strcmp(t->dtype, dtype))
        return cj_why(why, whysz, "tensor '%s' has dtype %s, want %s", t->name, t->dtype, dtype);
    if (t->ndim != 1 || t->shape[0] != nelem || t->data_len != nelem * 4)
        return cj_why(why, whysz, "tensor '%s' has %d dims and %" PRIu64 " elements, want 1-D %" PRIu64, t->name, t->ndim,
                   t->nelem, nelem);
    uint64_t at = check(p + t->data_off, nelem, period);
    if (at) {
        float got, want = period[(at - 1) % SIM_PERIOD];
        memcpy(&got, p + t->data_off + (at - 1) * 4, 4);
        return cj_why(why, whysz, "tensor '%s' element %" PRIu64 " is %.9g, want %.9g", t->name, at - 1, (double)got,
                   (double)want);
    }
    return 0;
}

/* The tensor named key, or the only tensor (NULL when neither). */
static const struct item_tensor *pick(const struct item_tensor *t, size_t n, const char *key)
{
    const struct item_tensor *f = items_find(t, n, key);
    if (f) return f;
    const struct item_tensor *only = NULL;
    for (size_t i = 0; i < n; i++) {
        if (t[i].is_npy || t[i].dtype[0] == 'F') {
            if (only && strcmp(t[i].name, "allow_pickle")) return NULL;
            if (strcmp(t[i].name, "allow_pickle")) only = &t[i];
        }
    }
    return only;
}

int sim_item_verify(int dot, const uint8_t *p, size_t n, const char *key, uint64_t nelem,
                    const float period[SIM_PERIOD], char *why, size_t whysz)
{
    struct item_tensor t[4];
    size_t count = 0;
    struct cj_err e = {0};
    if (dot == SIM_DOT_TORCH) {
        if (items_st_parse(p, n, t, 4, &count, &e)) return cj_why(why, whysz, "item %s: bad safetensors: %s", key, e.msg);
        const struct item_tensor *f = pick(t, count, key);
        if (!f) return cj_why(why, whysz, "item %s: no tensor %s among %zu", key, key, count);
        return check_tensor(f, p, "F32", nelem, period, why, whysz);
    }
    if (items_npz_parse(p, n, 0, t, 4, &count, &e)) return cj_why(why, whysz, "item %s: bad npz: %s", key, e.msg);
    const struct item_tensor *f = pick(t, count, key);
    if (!f || !f->is_npy) return cj_why(why, whysz, "item %s: no member %s.npy among %zu", key, key, count);
    if (f->fortran_order) return cj_why(why, whysz, "item %s: fortran_order", key);
    if (sim_crc32(0, p + f->member_off, f->member_len) != f->crc32)
        return cj_why(why, whysz, "item %s: member %s.npy fails its CRC-32", key, f->name);
    return check_tensor(f, p, "<f4", nelem, period, why, whysz);
}

int sim_native_verify(int dot, const uint8_t *p, size_t n, uint64_t nelem, const float period[SIM_PERIOD], char *why,
                      size_t whysz)
{
    if (dot == SIM_DOT_TORCH) return sim_item_verify(dot, p, n, "t", nelem, period, why, whysz);
    /* an .npy file: magic, v1/v2 header naming <f4 and (n,), then exactly n floats */
    if (n < 12 || memcmp(p, "\x93NUMPY", 6) || (p[6] != 1 && p[6] != 2))
        return cj_why(why, whysz, "inline numpy tensor is not an .npy file");
    size_t hl = p[6] == 1 ? 10 + (size_t)(p[8] | p[9] << 8) : 12 + (size_t)(p[8] | p[9] << 8 | p[10] << 16 | (uint32_t)p[11] << 24);
    if (hl > n || n - hl != nelem * 4) return cj_why(why, whysz, "inline .npy holds %zu data bytes, want %" PRIu64, n, nelem * 4);
    char want[64];
    snprintf(want, sizeof want, "'shape': (%" PRIu64 ",)", nelem);
    if (!memmem(p, hl, "'descr': '<f4'", 14) || !memmem(p, hl, want, strlen(want)) ||
        !memmem(p, hl, "'fortran_order': False", 22))
        return cj_why(why, whysz, "inline .npy header is not <f4 %s", want);
    struct item_tensor t = {.ndim = 1, .shape = {nelem}, .nelem = nelem, .data_off = hl, .data_len = n - hl};
    strcpy(t.name, "inline");
    strcpy(t.dtype, "<f4");
    return check_tensor(&t, p, "<f4", nelem, period, why, whysz);
}

/* ---- self test ----------------------------------------------------------------------- */

static int selftest_one(int dot, size_t t, uint64_t nelem, char *why, size_t whysz)
{
    float per[SIM_PERIOD];
    sim_period(3, t, false, per);
    float *data = malloc((size_t)nelem * 4);
    if (!data) return cj_why(why, whysz, "out of memory");
    fill((uint8_t *)data, nelem, per);
    char key[24];
    key_of(t, key);
    uint64_t shape[1] = {nelem};
    struct item_in in = {.name = key, .dtype = dot == SIM_DOT_TORCH ? "F32" : "<f4", .ndim = 1, .shape = shape,
                         .data = data, .len = (size_t)nelem * 4};
    uint8_t *ref = NULL, *mine = NULL;
    size_t rl = 0, ml = 0;
    struct cj_err e = {0};
    int rc = dot == SIM_DOT_TORCH ? items_st_write(&in, 1, &ref, &rl, &e) : items_npz_write(&in, 1, 0, &ref, &rl, &e);
    if (rc) { rc = cj_why(why, whysz, "items writer: %s", e.msg); goto out; }
    mine = sim_item_build(dot, t, nelem, per, &ml);
    if (!mine) { rc = cj_why(why, whysz, "out of memory"); goto out; }
    if (ml != rl || ml != sim_item_size(dot, t, nelem) || memcmp(mine, ref, rl)) {
        rc = cj_why(why, whysz, "DOT %d item %s of %" PRIu64 " elements differs from items.c's (%zu vs %zu bytes)", dot, key,
                 nelem, ml, rl);
        goto out;
    }
    if (sim_item_verify(dot, mine, ml, key, nelem, per, why, whysz)) { rc = -1; goto out; }
    float plus[SIM_PERIOD];
    sim_period(3, t, true, plus);
    if (!sim_item_verify(dot, mine, ml, key, nelem, plus, why, whysz)) {
        rc = cj_why(why, whysz, "the verifier accepts values without +1");
        goto out;
    }
    mine[ml - (dot == SIM_DOT_TORCH ? 1 : NPZ_CDH + strlen(key) + 4 + NPZ_EOCD + 1)] ^= 1;   /* last data byte */
    if (!sim_item_verify(dot, mine, ml, key, nelem, per, why, whysz)) {
        rc = cj_why(why, whysz, "the verifier accepts a flipped bit (DOT %d, %" PRIu64 " elements)", dot, nelem);
        goto out;
    }
    free(mine);
    mine = sim_native_build(dot, nelem, per, &ml);
    if (!mine || sim_native_verify(dot, mine, ml, nelem, per, why, whysz)) { rc = mine ? -1 : cj_why(why, whysz, "oom"); goto out; }
    rc = 0;
out:
    free(data);
    free(ref);
    free(mine);
    return rc;
}

int sim_model_selftest(char *why, size_t whysz)
{
    static const uint64_t sizes[] = {1, 999, 1000, 1001, 2000, 12345, 262144};
    static const size_t tensors[] = {0, 7, 10, 123};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (size_t k = 0; k < sizeof tensors / sizeof tensors[0]; k++)
                if (selftest_one(d ? SIM_DOT_TORCH : SIM_DOT_NUMPY, tensors[k], sizes[i], why, whysz)) return -1;
    /* the CRC agrees with items.c's */
    uint8_t buf[1031];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 131 + 7);
    if (sim_crc32(0, buf, sizeof buf) != items_crc32(0, buf, sizeof buf)) return cj_why(why, whysz, "CRC-32 differs");
    return 0;
}
