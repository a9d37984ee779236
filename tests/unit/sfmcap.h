/* SPDX-License-Identifier: Apache-2.0 */
/* sfmcap.h — shared by the transport tests (test_ws, test_grpc, test_carrier):
 * the frame lists of tests/vectors/transports/ (frames-*.jsonl: length and
 * sha256 of every SFM frame a FLARE cell sent), a check of unwrapped SFM bytes
 * against one, and SFM-shaped test frames.  Header-only. */
#ifndef CJ_TEST_SFMCAP_H
#define CJ_TEST_SFMCAP_H

#include "testutil.h"

#include <event2/buffer.h>
#include <openssl/sha.h>

struct want {
    size_t n;
    size_t len[64];
    char sha[64][65];
};

/* Reads a frames-*.jsonl vector: "len" and "sha256" of each line. */
static inline void load_want(const char *name, struct want *w)
{
    size_t len;
    uint8_t *raw = tu_read_vector(name, &len);
    char *text = malloc(len + 1);
    memcpy(text, raw, len);
    text[len] = '\0';
    free(raw);
    memset(w, 0, sizeof *w);
    for (char *line = strtok(text, "\n"); line && w->n < 64; line = strtok(NULL, "\n")) {
        char *l = strstr(line, "\"len\": "), *s = strstr(line, "\"sha256\": \"");
        assert_non_null(l);
        assert_non_null(s);
        w->len[w->n] = strtoul(l + 7, NULL, 10);
        memcpy(w->sha[w->n], s + 11, 64);
        w->n++;
    }
    free(text);
}

/* Splits sfm into SFM frames (4-byte big-endian total length first) and checks
 * them against w: same count, order, lengths and sha256; sfm is drained. */
static inline void check_frames(struct evbuffer *sfm, const struct want *w)
{
    size_t i = 0;
    while (evbuffer_get_length(sfm) >= 4) {
        uint8_t p[4];
        evbuffer_copyout(sfm, p, 4);
        size_t len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
        assert_true(len >= 16 && evbuffer_get_length(sfm) >= len);
        assert_true(i < w->n);
        assert_int_equal(len, w->len[i]);
        uint8_t md[SHA256_DIGEST_LENGTH];
        char hex[65];
        SHA256(evbuffer_pullup(sfm, (ev_ssize_t)len), len, md);
        for (int k = 0; k < SHA256_DIGEST_LENGTH; k++) sprintf(hex + 2 * k, "%02x", md[k]);
        assert_string_equal(hex, w->sha[i]);
        evbuffer_drain(sfm, len);
        i++;
    }
    assert_int_equal(evbuffer_get_length(sfm), 0);
    assert_int_equal(i, w->n);
}

/* Appends len bytes shaped as one SFM frame: its length in the first 4 bytes,
 * fill after. */
static inline void sfm_frame(struct evbuffer *b, size_t len, uint8_t fill)
{
    uint8_t *x = malloc(len);
    memset(x, fill, len);
    x[0] = (uint8_t)(len >> 24), x[1] = (uint8_t)(len >> 16), x[2] = (uint8_t)(len >> 8), x[3] = (uint8_t)len;
    evbuffer_add(b, x, len);
    free(x);
}

#endif
