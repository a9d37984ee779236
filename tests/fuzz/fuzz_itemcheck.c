/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_itemcheck.c — the spool's item header check (lib/dl/itemcheck.c).
 *
 * Input: byte 0 = flags (bit 0: safetensors, else npz; bit 1: the item is
 * longer than the bytes given; bits 4-7: the item's index), bytes 1-2 = where
 * to cut for the partial check, then the item's first bytes.
 * Invariants checked:
 *  - every answer is 1, 0 or -1, and -1 comes with a reason;
 *  - 0 (need more) is never the answer when the check was told no more bytes
 *    come, when it has the whole item, or when it has CJ_ITEM_HDR_MAX bytes;
 *  - an answer given on a prefix (arriving bytes are checked as they come) is
 *    the answer on all the bytes: nothing later overturns it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dl/itemcheck.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static int check(int dot, const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final)
{
    char why[400];
    why[0] = '\0';
    int rc = cj_item_check_header(dot, h, have, size, index, final, why, sizeof why);
    CHECK(rc == 1 || rc == 0 || rc == -1);
    if (rc < 0) CHECK(why[0] && strlen(why) < sizeof why);
    if (final || have >= size || have >= CJ_ITEM_HDR_MAX) CHECK(rc != 0);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    int dot = data[0] & 1 ? 6 : 3;
    bool longer = data[0] & 2;
    uint32_t index = data[0] >> 4;
    size_t cut = (size_t)(data[1] << 8 | data[2]);
    const uint8_t *item = data + 3;
    size_t len = size - 3;
    uint64_t item_size = longer ? (uint64_t)len + 1 + cut * 4099u : len;
    if (cut > len) cut = len;

    /* the bytes arrive: a check on the first `cut`, then on all (the last one final when the item is whole) */
    int part = check(dot, item, cut, item_size, index, false);
    int all = check(dot, item, len, item_size, index, !longer);
    if (part != 0) CHECK(all == part);
    /* the item ends early: told final, the check decides on what it has */
    check(dot, item, cut, item_size, index, true);
    return 0;
}
