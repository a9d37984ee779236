/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_mpdump.c — the structural dumper on arbitrary containers: no crash, and a
 * successful dump is text with no NUL and no raw control bytes except newlines
 * (a hostile TEXT datum must not forge lines). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/mpdump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cj_err err;
    size_t len = 0;
    char *s = mpdump_lobs_str(data, size, &len, &err);
    if (!s) return 0;
    if (strlen(s) != len) abort();
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != '\n') abort();
    free(s);
    return 0;
}
