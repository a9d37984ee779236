/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_pipemsg.c — a release trainer's pipe messages as the relay reads them
 * (lib/fl/pipemsg.c, and the two splices of lib/fl/pipe.c).
 *
 * Input: an SFM DATA frame (the seeds: frames of a stock trainer's pipe,
 * tests/vectors/pipe/) whose header block and payload are taken apart, or else
 * the whole input as both a header block and a payload: the block for
 * cj_pipemsg_read, the payload for the task-body and result-wrap splices.
 * Invariants checked:
 *  - whatever cj_pipemsg_read accepts, cj_pipemsg_build writes again, and that
 *    reads back (through a whole block) to the same fields;
 *  - an accepted id is NUL-terminated within CJ_PIPE_ID_MAX bytes;
 *  - cj_splice_wrap_result accepts exactly the payloads the LOBS validator
 *    accepts, and its output validates with the same datums after it;
 *  - cj_splice_task_body's output, when it succeeds, validates;
 *  - cj_pipemsg_metric never writes past its buffers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl/pipemsg.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "wire/header.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static void check_headers(const uint8_t *data, size_t size)
{
    struct cj_hdr h;
    struct cj_pipe_hdrs a, b;
    if (cj_hdr_decode(&h, data, size, NULL) != 0 || cj_pipemsg_read(&h, &a, NULL) != 0) return;
    CHECK(strlen(a.msg_id) <= CJ_PIPE_ID_MAX && strlen(a.req_id) <= CJ_PIPE_ID_MAX);
    msgpack_sbuffer vals, blk;
    struct cj_stream_hv hv[CJ_PIPE_HDRS];
    size_t n;
    msgpack_sbuffer_init(&vals);
    msgpack_sbuffer_init(&blk);
    CHECK(cj_pipemsg_build(&vals, hv, &n, &a) == 0);
    struct cj_hb hb;
    cj_hb_init(&hb);
    for (size_t i = 0; i < n; i++) cj_hb_raw(&hb, hv[i].key, hv[i].val, hv[i].len);
    struct cj_hdr_msg m = {.type = CJ_MSG_REQ, .me = "s.j.s_j_active", .to = "s.j", .destination = "s.j.s_j_passive",
                           .channel = "cell_pipe.task", .topic = "train", .payload_len = 0};
    CHECK(cj_hb_cellnet(&hb, &m) == 0);
    CHECK(cj_hb_finish(&hb, &blk, NULL) == 0);
    struct cj_hdr h2;
    CHECK(cj_hdr_decode(&h2, (const uint8_t *)blk.data, blk.size, NULL) == 0);
    CHECK(cj_pipemsg_read(&h2, &b, NULL) == 0);
    CHECK(a.rep == b.rep && !strcmp(a.msg_id, b.msg_id) && !strcmp(a.req_id, b.req_id) && a.hb_seq == b.hb_seq);
    CHECK(!memcmp(&a.start, &b.start, sizeof a.start) || (a.start != a.start && b.start != b.start));
    cj_hb_destroy(&hb);
    msgpack_sbuffer_destroy(&vals);
    msgpack_sbuffer_destroy(&blk);
}

static void check_splices(const uint8_t *data, size_t size)
{
    struct cj_lobs_section m;
    size_t nd = 0, nd2 = 0;
    bool valid = cj_lobs_validate(data, size, &m, NULL, 0, &nd, NULL) == 0;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int rc = cj_splice_wrap_result(data, size, &out, NULL);
    CHECK((rc == 0) == valid);
    if (rc == 0) {
        CHECK(cj_lobs_validate((const uint8_t *)out.data, out.size, &m, NULL, 0, &nd2, NULL) == 0);
        CHECK(nd2 == nd);
    } else {
        CHECK(out.size == 0);
    }
    char key[16], val[16];
    if (cj_pipemsg_metric(data, size, key, sizeof key, val, sizeof val) == 0) CHECK(strlen(key) < 16 && strlen(val) < 16);
    out.size = 0;
    if (cj_splice_task_body(data, size, "J1", "site-1", &out, NULL, NULL) == 0)
        CHECK(cj_lobs_validate((const uint8_t *)out.data, out.size, &m, NULL, 0, &nd2, NULL) == 0 && nd2 == nd);
    else
        CHECK(out.size == 0);
    msgpack_sbuffer_destroy(&out);
}

/* A private exact-size copy of each part, so the sanitizer sees any overread. */
static void run(void (*fn)(const uint8_t *, size_t), const uint8_t *p, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return;
    memcpy(copy, p, n);
    fn(copy, n);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *blk = data, *pl = data;
    size_t bl = size, pn = size;
    if (size >= 16 && data[6] == 1 && data[7] == 0) {
        uint32_t flen = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
        size_t hl = (size_t)data[4] << 8 | data[5];
        if (flen >= 16 && flen <= size && hl && 16 + hl <= flen) {
            blk = data + 16, bl = hl;
            pl = data + 16 + hl, pn = flen - 16 - hl;
        }
    }
    run(check_headers, blk, bl);
    run(check_splices, pl, pn);
    return 0;
}
