/* SPDX-License-Identifier: Apache-2.0 */
/* pattern.h — the deterministic blob the simulator serves on test/blob, shared
 * (header only) with the test peer tests/e2e/cjpeer.c, which checks it.
 *
 * A blob of N bytes is cut into segments of SIM_SEG bytes (the stream chunk
 * size, so each chunk is one segment).  Segment k is SIM_SEG bytes of one
 * static pattern buffer starting at sim_seg_start(k); the buffer is
 * SIM_SEG + SIM_SPAN pseudo-random bytes.  So the whole blob costs one
 * static buffer (evbuffer_add_reference per segment, no copy), yet every
 * segment differs from its neighbours: a chunk that arrived duplicated,
 * reordered or shifted by any amount does not compare equal. */
#ifndef CJ_SIM_PATTERN_H
#define CJ_SIM_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SIM_SEG ((uint64_t)1 << 20)
#define SIM_SPAN 65536u
#define SIM_PATTERN_LEN ((size_t)SIM_SEG + SIM_SPAN)

/* Fills p[0..SIM_PATTERN_LEN) with xorshift64* output from a fixed seed. */
static inline void sim_pattern_fill(uint8_t *p)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < SIM_PATTERN_LEN; i += 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1Dull;
        for (size_t k = 0; k < 8 && i + k < SIM_PATTERN_LEN; k++) p[i + k] = (uint8_t)(v >> (8 * k));
    }
}

/* Where segment seg starts in the pattern buffer (40503 is odd: distinct
 * starts for 65536 consecutive segments, i.e. 64 GiB). */
static inline size_t sim_seg_start(uint64_t seg)
{
    return (size_t)((seg * 40503u) % SIM_SPAN);
}

/* The expected bytes at blob offset off: a pointer into the pattern and how
 * many bytes are valid from there (up to the end of off's segment). */
static inline const uint8_t *sim_pattern_at(const uint8_t *pat, uint64_t off, size_t *avail)
{
    uint64_t seg = off / SIM_SEG, in = off % SIM_SEG;
    *avail = (size_t)(SIM_SEG - in);
    return pat + sim_seg_start(seg) + in;
}

/* Compares data[0..len), found at blob offset off, with the pattern.  Returns
 * -1 when equal, else the blob offset of the first differing byte. */
static inline int64_t sim_pattern_check(const uint8_t *pat, uint64_t off, const uint8_t *data, size_t len)
{
    while (len) {
        size_t avail;
        const uint8_t *want = sim_pattern_at(pat, off, &avail);
        size_t k = len < avail ? len : avail;
        if (memcmp(want, data, k)) {
            for (size_t i = 0; i < k; i++)
                if (want[i] != data[i]) return (int64_t)(off + i);
        }
        off += k;
        data += k;
        len -= k;
    }
    return -1;
}

#endif
