/* SPDX-License-Identifier: Apache-2.0 */
/* uuid.c — random uuid4s and their text form (see uuid.h). */
#include "util/uuid.h"

#include "util/err.h"
#include "util/text.h"

int cj_uuid4(uint8_t id[16])
{
    if (cj_random_bytes(id, 16)) return -1;
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);   /* version 4 */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);   /* RFC 4122 variant */
    return 0;
}

int cj_uuid4_str(char out[CJ_UUID_STR_LEN + 1])
{
    uint8_t id[16];
    if (cj_uuid4(id)) return -1;
    cj_uuid_str(id, out);
    return 0;
}

void cj_uuid_str(const uint8_t id[16], char out[CJ_UUID_STR_LEN + 1])
{
    static const char hx[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = hx[id[i] >> 4];
        out[o++] = hx[id[i] & 15];
    }
    out[o] = 0;
}

static int hex_digit(uint8_t c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int cj_uuid_parse(const uint8_t *s, size_t len, uint8_t id[16])
{
    if (len != CJ_UUID_STR_LEN) return -CJ_E_INVALID;
    size_t o = 0;
    for (size_t i = 0; i < CJ_UUID_STR_LEN;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i++] != '-') return -CJ_E_INVALID;
            continue;
        }
        int hi = hex_digit(s[i]), lo = hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0) return -CJ_E_INVALID;
        id[o++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    return 0;
}
