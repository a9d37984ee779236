/* SPDX-License-Identifier: Apache-2.0 */
/* test_pipemsg.c — CellPipe's cell headers (lib/fl/pipemsg.c, releases.md
 * §4.4): what the relay writes reads back the same, through a whole cellnet
 * header block; what a release trainer sends (tests/vectors/pipe/, captured
 * from the stock 2.8.1 trainer) reads as its REP / heartbeat; every missing
 * or mistyped header is refused, named; the heartbeat body is FLARE's bytes. */
#include "testutil.h"

#include "fl/pipemsg.h"
#include "payload/lobs.h"
#include "payload/splice.h"
#include "wire/header.h"

/* A request's cellnet block with the pipe headers of in (or, raw, extra entries). */
static size_t block(uint8_t *out, size_t cap, const struct cj_pipe_hdrs *in, const char *raw_key,
                    const void *raw, size_t raw_len)
{
    struct cj_hb b;
    msgpack_sbuffer vals, sb;
    struct cj_stream_hv hv[CJ_PIPE_HDRS];
    size_t n = 0;
    struct cj_err e = {0};
    msgpack_sbuffer_init(&vals);
    msgpack_sbuffer_init(&sb);
    cj_hb_init(&b);
    if (in) {
        assert_int_equal(cj_pipemsg_build(&vals, hv, &n, in), 0);
        for (size_t i = 0; i < n; i++) cj_hb_raw(&b, hv[i].key, hv[i].val, hv[i].len);
    }
    if (raw_key) cj_hb_raw(&b, raw_key, raw, raw_len);
    struct cj_hdr_msg m = {.type = CJ_MSG_REQ, .me = "site-1.J1.site-1_J1_active", .to = "site-1.J1",
                           .destination = "site-1.J1.site-1_J1_passive", .channel = "cell_pipe.task",
                           .topic = "train", .payload_len = 0, .route_time = 1.0, .send_time = 1.0};
    assert_int_equal(cj_hb_cellnet(&b, &m), 0);
    assert_int_equal(cj_hb_finish(&b, &sb, &e), 0);
    assert_true(sb.size <= cap);
    memcpy(out, sb.data, sb.size);
    size_t len = sb.size;
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&vals);
    msgpack_sbuffer_destroy(&sb);
    return len;
}

static int read_block(const uint8_t *blk, size_t len, struct cj_pipe_hdrs *out, struct cj_err *e)
{
    struct cj_hdr h;
    assert_int_equal(cj_hdr_decode(&h, blk, len, e), 0);
    return cj_pipemsg_read(&h, out, e);
}

static void test_roundtrip(void **state)
{
    (void)state;
    uint8_t blk[4096];
    struct cj_pipe_hdrs in = {.rep = true, .start = 1795863516.7762277}, out;
    struct cj_err e = {0};
    strcpy(in.msg_id, "6520a631-3869-4c4e-a75c-e7ca22e3ee04");
    strcpy(in.req_id, "6a84ec25-d87b-4c02-bd01-61d5e3a48409");
    size_t len = block(blk, sizeof blk, &in, NULL, NULL, 0);
    assert_int_equal(read_block(blk, len, &out, &e), 0);
    assert_true(out.rep);
    assert_string_equal(out.msg_id, in.msg_id);
    assert_string_equal(out.req_id, in.req_id);
    assert_true(out.start == in.start);
    assert_int_equal(out.hb_seq, 0);
    struct cj_hdr hd;
    assert_int_equal(cj_hdr_decode(&hd, blk, len, &e), 0);
    assert_false(cj_pipemsg_creds_ok(&hd, "NA", "NA"));   /* none stamped */

    struct cj_pipe_hdrs hb = {.rep = false, .start = 2.5, .hb_seq = 41};
    strcpy(hb.msg_id, "m");
    len = block(blk, sizeof blk, &hb, NULL, NULL, 0);
    assert_int_equal(read_block(blk, len, &out, &e), 0);
    assert_false(out.rep);
    assert_int_equal(out.hb_seq, 41);
    assert_string_equal(out.req_id, "");
    /* no req_id, no hb_seq written when not set */
    msgpack_sbuffer vals;
    struct cj_stream_hv hv[CJ_PIPE_HDRS];
    size_t n;
    msgpack_sbuffer_init(&vals);
    hb.hb_seq = 0;
    assert_int_equal(cj_pipemsg_build(&vals, hv, &n, &hb), 0);
    assert_int_equal(n, 3);
    assert_string_equal(hv[0].key, "cell_pipe.msg_type");
    assert_memory_equal(hv[0].val, "\xa3REQ", 4);
    assert_string_equal(hv[2].key, "cell_pipe.start");
    assert_int_equal(hv[2].len, 9);   /* float64, as time.time() packs */
    msgpack_sbuffer_destroy(&vals);
}

static void test_refused(void **state)
{
    (void)state;
    uint8_t blk[4096];
    struct cj_pipe_hdrs out;
    struct cj_err e = {0};
    size_t len = block(blk, sizeof blk, NULL, "cell_pipe.msg_id", "\xa1x", 2);
    assert_true(read_block(blk, len, &out, &e) < 0);
    assert_non_null(strstr(e.msg, "cell_pipe.msg_type: missing"));
    len = block(blk, sizeof blk, NULL, "cell_pipe.msg_type", "\xa3REQ", 4);
    assert_true(read_block(blk, len, &out, &e) < 0);
    assert_non_null(strstr(e.msg, "cell_pipe.msg_id: missing"));
    struct cj_pipe_hdrs in = {.start = 1};
    strcpy(in.msg_id, "id");
    len = block(blk, sizeof blk, &in, "cell_pipe.hb_seq", "\xa1x", 2);
    assert_true(read_block(blk, len, &out, &e) < 0);
    assert_non_null(strstr(e.msg, "cell_pipe.hb_seq"));
    /* a msg_type that is neither */
    struct cj_hb b;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    cj_hb_init(&b);
    cj_hb_str(&b, "cell_pipe.msg_type", "ACK");
    cj_hb_str(&b, "cell_pipe.msg_id", "x");
    struct cj_hdr_msg m = {.type = CJ_MSG_REQ, .me = "a.b.c", .to = "a.b", .destination = "a.b.d",
                           .channel = "cell_pipe.task", .topic = "t", .payload_len = 0};
    cj_hb_cellnet(&b, &m);
    assert_int_equal(cj_hb_finish(&b, &sb, &e), 0);
    assert_true(read_block((uint8_t *)sb.data, sb.size, &out, &e) < 0);
    assert_non_null(strstr(e.msg, "neither REQ nor REP"));
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&sb);
    /* an id longer than CJ_PIPE_ID_MAX */
    cj_hb_init(&b);
    msgpack_sbuffer_init(&sb);
    char longid[CJ_PIPE_ID_MAX + 2];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    cj_hb_str(&b, "cell_pipe.msg_type", "REP");
    cj_hb_str(&b, "cell_pipe.msg_id", longid);
    cj_hb_cellnet(&b, &m);
    assert_int_equal(cj_hb_finish(&b, &sb, &e), 0);
    assert_true(read_block((uint8_t *)sb.data, sb.size, &out, &e) < 0);
    cj_hb_destroy(&b);
    msgpack_sbuffer_destroy(&sb);
}

/* releases.md §4.4: a heartbeat's body is "" as FOBS: 64 00 00 00 00 00 00 00 00 01 a0. */
static void test_bodies(void **state)
{
    (void)state;
    static const uint8_t hb[] = {0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xa0};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_pipemsg_str_body(&sb, ""), 0);
    assert_int_equal(sb.size, sizeof hb);
    assert_memory_equal(sb.data, hb, sizeof hb);
    sb.size = 0;
    assert_int_equal(cj_pipemsg_str_body(&sb, "end_of_job"), 0);
    assert_int_equal(sb.size, 10 + 1 + 10);
    assert_memory_equal((uint8_t *)sb.data + 10, "\xaa" "end_of_job", 11);
    msgpack_sbuffer_destroy(&sb);
}

/* A captured frame's header block and payload (tests/vectors/pipe/, SFM prefix §2). */
struct frame {
    uint8_t *buf;
    const uint8_t *blk, *payload;
    size_t blk_len, payload_len;
};

static void load(const char *name, struct frame *f)
{
    size_t n;
    f->buf = tu_read_vector(name, &n);
    assert_true(n >= 16);
    uint32_t len = (uint32_t)f->buf[0] << 24 | (uint32_t)f->buf[1] << 16 | (uint32_t)f->buf[2] << 8 | f->buf[3];
    size_t hl = (size_t)f->buf[4] << 8 | f->buf[5];
    assert_int_equal(len, n);
    assert_int_equal(f->buf[6], 1);   /* DATA */
    f->blk = f->buf + 16;
    f->blk_len = hl;
    f->payload = f->buf + 16 + hl;
    f->payload_len = n - 16 - hl;
}

/* What the stock 2.8.1 trainer sent (captured by tests/e2e/pipe/capture.py). */
static void test_stock_trainer(void **state)
{
    (void)state;
    static const uint8_t empty[] = {0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xa0};
    struct frame f;
    struct cj_pipe_hdrs h;
    struct cj_hdr hd;
    struct cj_err e = {0};

    load("pipe/281_trainer_heartbeat_task.bin", &f);
    assert_int_equal(cj_hdr_decode(&hd, f.blk, f.blk_len, &e), 0);
    assert_int_equal(cj_pipemsg_read(&hd, &h, &e), 0);
    assert_false(h.rep);
    assert_int_equal(h.hb_seq, 1);
    assert_string_equal(h.msg_id, "b1fa7095-7120-4e8b-a1e3-843f6ea6e41e");
    assert_true(h.start > 1.7e9);
    assert_string_equal(hd.origin, "site-1.J1.site-1_J1_active");
    /* the site's credentials, stamped by CellPipe's outgoing filter ("NA": the job had none) */
    assert_true(cj_pipemsg_creds_ok(&hd, "NA", "NA"));
    assert_false(cj_pipemsg_creds_ok(&hd, "NA", "NAX"));
    assert_false(cj_pipemsg_creds_ok(&hd, "N", "NA"));
    assert_false(cj_pipemsg_creds_ok(&hd, "tok", "NA"));
    assert_int_equal(f.payload_len, sizeof empty);   /* the heartbeat body, as releases.md §4.4 gives it */
    assert_memory_equal(f.payload, empty, sizeof empty);
    free(f.buf);

    load("pipe/281_trainer_heartbeat_metric.bin", &f);
    assert_int_equal(cj_hdr_decode(&hd, f.blk, f.blk_len, &e), 0);
    assert_int_equal(cj_pipemsg_read(&hd, &h, &e), 0);
    assert_int_equal(h.hb_seq, 1);
    free(f.buf);

    load("pipe/281_trainer_metric.bin", &f);
    assert_int_equal(cj_hdr_decode(&hd, f.blk, f.blk_len, &e), 0);
    assert_int_equal(cj_pipemsg_read(&hd, &h, &e), 0);
    assert_false(h.rep);
    assert_int_equal(h.hb_seq, 0);
    assert_string_equal(h.req_id, "");
    char key[64], val[64];   /* flare.log("round", 1.0, SCALAR) */
    assert_int_equal(cj_pipemsg_metric(f.payload, f.payload_len, key, sizeof key, val, sizeof val), 0);
    assert_string_equal(key, "round");
    assert_string_equal(val, "1.0");
    assert_int_equal(cj_pipemsg_metric(f.payload, 40, key, sizeof key, val, sizeof val), -1);   /* cut */
    free(f.buf);

    /* the REP: its result Shareable's refs to the trainer's cell, wrapped for the submission verbatim */
    load("pipe/281_trainer_rep_result.bin", &f);
    assert_int_equal(cj_hdr_decode(&hd, f.blk, f.blk_len, &e), 0);
    assert_int_equal(cj_pipemsg_read(&hd, &h, &e), 0);
    assert_true(h.rep);
    assert_string_equal(h.msg_id, "100e15aa-6f8b-43cc-a91e-cacaad848b98");
    assert_string_equal(h.req_id, "80ff3767-c0c5-4d77-81cf-dec52a0646a4");
    struct cj_lobs_section m, m2;
    size_t nd = 0, nd2 = 0;
    assert_int_equal(cj_lobs_validate(f.payload, f.payload_len, &m, NULL, 0, &nd, &e), 0);
    assert_true(nd >= 1);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_splice_wrap_result(f.payload, f.payload_len, &sb, &e), 0);
    assert_int_equal(cj_lobs_validate(sb.data, sb.size, &m2, NULL, 0, &nd2, &e), 0);
    assert_int_equal(nd2, nd);
    assert_int_equal(m2.value_len, m.value_len + 1 + 7);   /* 81 a6 "result" + the body */
    assert_memory_equal(m2.value + 8, m.value, m.value_len);
    assert_memory_equal((const uint8_t *)sb.data + m2.total, f.payload + m.total, f.payload_len - m.total);
    msgpack_sbuffer_destroy(&sb);
    free(f.buf);

    /* the pipe ACK: return_only, ok, sm__pe none, no body */
    load("pipe/281_trainer_pipe_ack.bin", &f);
    assert_int_equal(cj_hdr_decode(&hd, f.blk, f.blk_len, &e), 0);
    assert_true(cj_pipemsg_read(&hd, &h, &e) < 0);   /* a reply carries no cell_pipe headers */
    assert_int_equal(f.payload_len, 0);
    free(f.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_bodies),
        cmocka_unit_test(test_stock_trainer),
    };
    return cmocka_run_group_tests_name("pipemsg", tests, NULL, NULL);
}
