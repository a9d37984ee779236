/* SPDX-License-Identifier: Apache-2.0 */
/* test_frame.c — SFM prefix codec, stream splitter, HELLO/READY/PING/PONG, counters. */
#include "testutil.h"
#include "wire/frame.h"

/* Prefix fields and payload length of every frames/cap*.bin, from INDEX.txt
 * (reserved and flags are 0 in all of them). */
struct vec {
    const char *name;
    uint32_t length;
    uint16_t header_len;
    uint8_t type;
    uint16_t app_id, stream_id, sequence;
    uint32_t payload_len;
};

static const struct vec vecs[] = {
    {"cap00_hello_site-1.bin", 69, 0, 4, 0, 1, 1, 53},
    {"cap01_ready_server.bin", 69, 0, 5, 0, 1, 1, 53},
    {"cap02_direct_req_task_ping.bin", 353, 323, 1, 1, 17, 2, 14},
    {"cap05_direct_reply_task_ping.bin", 372, 311, 1, 1, 17, 2, 45},
    {"cap06_stream_req_single_chunk.bin", 504, 465, 1, 1, 18, 3, 23},
    {"cap07_stream_ack.bin", 328, 312, 1, 1, 18, 3, 0},
    {"cap08_stream_reply_return_only.bin", 599, 540, 1, 1, 19, 4, 43},
    {"cap17_hello_trainer.bin", 95, 0, 4, 0, 1, 1, 79},
    {"cap19_get_task_req_chunk.bin", 646, 480, 1, 1, 17, 2, 150},
    {"cap21_get_task_reply_chunk.bin", 1153, 554, 1, 1, 18, 3, 583},
    {"cap22_get_task_reply_ack.bin", 339, 323, 1, 1, 18, 3, 0},
    {"cap23_task_ready_chunk.bin", 1306, 517, 1, 1, 17, 2, 773},
    {"cap25_dl_req_at_trainer_link.bin", 622, 533, 1, 1, 18, 3, 73},
    {"cap26_dl_req_after_relay.bin", 629, 540, 1, 1, 19, 4, 73},
    {"cap27_ack_from_server_before_relay.bin", 344, 328, 1, 1, 19, 4, 0},
    {"cap28_ack_from_server_after_relay.bin", 377, 361, 1, 1, 18, 3, 0},
    {"cap54_dl_reply_before_relay.bin", 1225, 587, 1, 1, 26, 11, 622},
    {"cap55_dl_reply_after_relay.bin", 1258, 620, 1, 1, 27, 12, 622},
    {"cap63_dl_reply_eof_before_relay.bin", 687, 583, 1, 1, 28, 13, 88},
    {"cap64_dl_reply_eof_after_relay.bin", 720, 616, 1, 1, 29, 14, 88},
    {"cap67_dl_confirm_at_trainer_link.bin", 624, 488, 1, 1, 29, 14, 120},
    {"cap68_dl_confirm_after_relay.bin", 631, 495, 1, 1, 28, 13, 120},
    {"cap69_task_ready_reply_chunk.bin", 740, 599, 1, 1, 30, 15, 125},
    {"cap73_bye_req.bin", 381, 365, 1, 1, 31, 16, 0},
    {"cap74_bye_reply.bin", 372, 356, 1, 1, 32, 17, 0},
    {"cap75_ping.bin", 17, 0, 6, 0, 30, 15, 1},
    {"cap77_pong.bin", 17, 0, 7, 0, 24, 9, 1},
};
#define NVECS (sizeof vecs / sizeof vecs[0])

static uint8_t *read_frame(const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "frames/%s", name);
    return tu_read_vector(path, len);
}

/* ---- prefix on the captured frames ------------------------------------------ */

static void test_vectors_prefix(void **state)
{
    (void)state;
    for (size_t i = 0; i < NVECS; i++) {
        const struct vec *w = &vecs[i];
        size_t n, flen = 0;
        uint8_t *b = read_frame(w->name, &n);
        struct cj_frame_prefix p;
        struct cj_err e = {0};
        assert_int_equal(n, w->length);
        assert_int_equal(cj_frame_next(b, n, CJ_FRAME_MAX_DEFAULT, &p, &flen, &e), 1);
        assert_int_equal(flen, w->length);
        assert_int_equal(p.length, w->length);
        assert_int_equal(p.header_len, w->header_len);
        assert_int_equal(p.type, w->type);
        assert_int_equal(p.reserved, 0);
        assert_int_equal(p.flags, 0);
        assert_int_equal(p.app_id, w->app_id);
        assert_int_equal(p.stream_id, w->stream_id);
        assert_int_equal(p.sequence, w->sequence);
        assert_false(cj_frame_type_is_unused(p.type));
        struct cj_frame_view v;
        cj_frame_view_init(&v, b, &p);
        assert_int_equal(v.payload_len, w->payload_len);
        assert_ptr_equal(v.payload + v.payload_len, b + n);
        uint8_t re[16];
        cj_frame_prefix_encode(&p, re);
        assert_memory_equal(re, b, 16);
        free(b);
    }
}

static void test_view_payload(void **state)
{
    (void)state;
    size_t n, flen, hn;
    uint8_t *b = read_frame("cap02_direct_req_task_ping.bin", &n);
    uint8_t *want = tu_hex("64 00 00 00 00 00 00 00 00 04 81 a1 6e 01", &hn);
    struct cj_frame_prefix p;
    struct cj_frame_view v;
    assert_int_equal(cj_frame_next(b, n, 0, &p, &flen, NULL), 1);
    cj_frame_view_init(&v, b, &p);
    assert_ptr_equal(v.header, b + 16);
    assert_int_equal(v.header_len, 323);
    assert_int_equal(v.header[0], 0xde);  /* map16 */
    assert_int_equal(v.payload_len, hn);
    assert_memory_equal(v.payload, want, hn);
    free(want);
    free(b);
}

/* ---- HELLO / READY ------------------------------------------------------------ */

static void check_hello_vector(const char *file, uint8_t type, const char *name, double ts)
{
    size_t n, flen;
    uint8_t *b = read_frame(file, &n);
    struct cj_frame_prefix p;
    struct cj_frame_view v;
    struct cj_frame_hello h;
    struct cj_err e = {0};
    assert_int_equal(cj_frame_next(b, n, 0, &p, &flen, &e), 1);
    assert_int_equal(p.type, type);
    cj_frame_view_init(&v, b, &p);
    assert_int_equal(cj_frame_hello_decode(v.payload, v.payload_len, &h, &e), 0);
    assert_string_equal(h.endpoint_name, name);
    assert_true(h.has_fqcn);
    assert_string_equal(h.fqcn, h.endpoint_name);
    assert_true(h.timestamp == ts);
    /* our encoder reproduces NVFlare's bytes exactly */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_build_hello(&sb, type, p.stream_id, p.sequence, &h, &e), 0);
    assert_int_equal(sb.size, n);
    assert_memory_equal(sb.data, b, n);
    msgpack_sbuffer_destroy(&sb);
    free(b);
}

static void test_hello_vectors(void **state)
{
    (void)state;
    check_hello_vector("cap00_hello_site-1.bin", CJ_FRAME_HELLO, "site-1", 1795315510.794024);
    check_hello_vector("cap01_ready_server.bin", CJ_FRAME_READY, "server", 1795315510.7988942);
    check_hello_vector("cap17_hello_trainer.bin", CJ_FRAME_HELLO, "site-1.J1.trainer_1", 1795315511.9915597);
}

/* cap00 rebuilt from scratch: hello_init + build_hello with stream 1, seq 1. */
static void test_hello_build_cap00(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = read_frame("cap00_hello_site-1.bin", &n);
    struct cj_frame_hello h;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_hello_init(&h, "site-1", 1795315510.794024, NULL), 0);
    /* appending after existing bytes patches the right prefix */
    msgpack_sbuffer_write(&sb, "xyz", 3);
    assert_int_equal(cj_frame_build_hello(&sb, CJ_FRAME_HELLO, 1, 1, &h, NULL), 0);
    assert_int_equal(sb.size, 3 + 69);
    assert_memory_equal(sb.data + 3, b, 69);
    /* a failed build leaves sb as it was */
    struct cj_err e;
    assert_int_equal(cj_frame_build_hello(&sb, CJ_FRAME_DATA, 1, 1, &h, &e), -CJ_E_INVALID);
    h.endpoint_name[0] = 0;
    memset(h.fqcn, 'a', sizeof h.fqcn);  /* no NUL: over the limit */
    assert_int_equal(cj_frame_build_hello(&sb, CJ_FRAME_READY, 1, 1, &h, &e), -CJ_E_LIMIT);
    assert_int_equal(sb.size, 3 + 69);
    msgpack_sbuffer_destroy(&sb);
    free(b);
}

static void test_hello_names_limits(void **state)
{
    (void)state;
    char name[300];
    struct cj_frame_hello h, d;
    struct cj_err e = {0};
    memset(name, 'n', sizeof name);
    name[CJ_FRAME_NAME_MAX] = 0;  /* 255 bytes: fits, encoded as str8 (d9) */
    assert_int_equal(cj_frame_hello_init(&h, name, 1.5, &e), 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_hello_encode(&sb, &h, &e), 0);
    assert_int_equal((uint8_t)sb.data[15], 0xd9);
    assert_int_equal(cj_frame_hello_decode((uint8_t *)sb.data, sb.size, &d, &e), 0);
    assert_string_equal(d.endpoint_name, name);
    assert_string_equal(d.fqcn, name);
    assert_true(d.timestamp == 1.5);
    msgpack_sbuffer_destroy(&sb);
    name[CJ_FRAME_NAME_MAX] = 'n';
    name[CJ_FRAME_NAME_MAX + 1] = 0;  /* 256 bytes */
    assert_int_equal(cj_frame_hello_init(&h, name, 1.5, &e), -CJ_E_LIMIT);
    assert_int_equal(cj_frame_hello_init(&h, NULL, 1.5, &e), -CJ_E_MISSING);
    /* without fqcn: a two-key map that decodes with has_fqcn false */
    assert_int_equal(cj_frame_hello_init(&h, "site-2", 7.0, &e), 0);
    h.has_fqcn = false;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_hello_encode(&sb, &h, &e), 0);
    assert_int_equal((uint8_t)sb.data[0], 0x82);
    assert_int_equal(cj_frame_hello_decode((uint8_t *)sb.data, sb.size, &d, &e), 0);
    assert_false(d.has_fqcn);
    assert_string_equal(d.endpoint_name, "site-2");
    msgpack_sbuffer_destroy(&sb);
}

/* Decodes hex and expects rc; on an error, err.offset must be want_off. */
static void hello_hex(const char *hex, int want_rc, size_t want_off)
{
    size_t n;
    uint8_t *b = tu_hex(hex, &n);
    struct cj_frame_hello h;
    struct cj_err e = {0};
    int rc = cj_frame_hello_decode(b, n, &h, &e);
    if (rc != want_rc) fail_msg("hello %s: rc %d want %d (%s)", hex, rc, want_rc, e.msg);
    if (rc) {
        assert_int_equal(e.offset, want_off);
        assert_true(strstr(e.msg, "HELLO") != NULL);
    }
    free(b);
}

/* "endpoint_name" "timestamp" "fqcn" and some values, as hex fragments */
#define K_NAME "ad 65 6e 64 70 6f 69 6e 74 5f 6e 61 6d 65 "
#define K_TIME "a9 74 69 6d 65 73 74 61 6d 70 "
#define K_FQCN "a4 66 71 63 6e "
#define V_S1   "a2 73 31 "                       /* "s1" */
#define V_T    "cb 41 da c0 95 cd b2 d1 4a "     /* float64 */

static void test_hello_tolerant(void **state)
{
    (void)state;
    hello_hex("83" K_NAME V_S1 K_TIME V_T K_FQCN V_S1, 0, 0);
    /* other key order, int and float32 timestamps, fqcn absent */
    hello_hex("82" K_TIME "cd 01 00" K_NAME V_S1, 0, 0);
    hello_hex("82" K_TIME "ca 3f 80 00 00" K_NAME V_S1, 0, 0);
    hello_hex("82" K_TIME "ff" K_NAME V_S1, 0, 0);
    /* extra keys: str with nested value, int key, array key, nil key */
    hello_hex("86" K_NAME V_S1 "a1 78 92 81 a1 61 c0 90" K_TIME V_T "05 c3" "91 01 c2" "c0 c0", 0, 0);
    /* a str8-encoded key name is the same key */
    hello_hex("82 d9 0d 65 6e 64 70 6f 69 6e 74 5f 6e 61 6d 65" V_S1 K_TIME V_T, 0, 0);
    /* empty name and names with spaces are kept as they are (FQCN check is elsewhere) */
    size_t n;
    uint8_t *b = tu_hex("82" K_NAME "a3 20 61 20" K_TIME V_T, &n);
    struct cj_frame_hello h;
    assert_int_equal(cj_frame_hello_decode(b, n, &h, NULL), 0);
    assert_string_equal(h.endpoint_name, " a ");
    free(b);
}

static void test_hello_garbage(void **state)
{
    (void)state;
    hello_hex("", -CJ_E_TRUNCATED, 0);
    hello_hex("c0", -CJ_E_TYPE, 0);
    hello_hex("93 01 02 03", -CJ_E_TYPE, 0);
    hello_hex("a2 73 31", -CJ_E_TYPE, 0);
    hello_hex("80", -CJ_E_MISSING, 0);
    hello_hex("81" K_TIME V_T, -CJ_E_MISSING, 0);                /* no endpoint_name */
    hello_hex("81" K_NAME V_S1, -CJ_E_MISSING, 0);               /* no timestamp */
    hello_hex("82" K_NAME "01" K_TIME V_T, -CJ_E_TYPE, 15);      /* name is an int */
    hello_hex("82" K_NAME "c4 02 73 31" K_TIME V_T, -CJ_E_TYPE, 15); /* name is bin */
    hello_hex("82" K_NAME V_S1 K_TIME "a1 31", -CJ_E_TYPE, 28);  /* timestamp is a str */
    hello_hex("82" K_NAME V_S1 K_TIME "c0", -CJ_E_TYPE, 28);
    hello_hex("83" K_NAME V_S1 K_TIME V_T K_FQCN "c0", -CJ_E_TYPE, 42); /* fqcn nil */
    hello_hex("82" K_NAME "a3 73 00 31" K_TIME V_T, -CJ_E_INVALID, 15); /* NUL in name */
    hello_hex("83" K_NAME V_S1 K_TIME V_T K_NAME V_S1, -CJ_E_INVALID, 37); /* duplicate */
    hello_hex("82" K_NAME V_S1 K_TIME V_T "c0", -CJ_E_INVALID, 37);      /* trailing byte */
    hello_hex("83" K_NAME V_S1 K_TIME V_T, -CJ_E_TRUNCATED, 37);          /* one pair missing */
    hello_hex("df ff ff ff ff" K_NAME V_S1, -CJ_E_TRUNCATED, 22);         /* huge pair count */
    hello_hex("82" K_NAME "db ff ff ff ff 61" K_TIME V_T, -CJ_E_TRUNCATED, 15); /* huge str32 */
    hello_hex("c1", -CJ_E_INVALID, 0);
}

static void test_hello_huge_name(void **state)
{
    (void)state;
    /* 256- and 70000-byte names are refused with LIMIT at the value's offset */
    size_t sizes[] = {256, 70000};
    for (size_t i = 0; i < 2; i++) {
        size_t len = sizes[i];
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        char *name = malloc(len);
        memset(name, 'x', len);
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str_with_body(&pk, "endpoint_name", 13);
        msgpack_pack_str_with_body(&pk, name, len);
        msgpack_pack_str_with_body(&pk, "timestamp", 9);
        msgpack_pack_double(&pk, 1.0);
        struct cj_frame_hello h;
        struct cj_err e;
        assert_int_equal(cj_frame_hello_decode((uint8_t *)sb.data, sb.size, &h, &e), -CJ_E_LIMIT);
        assert_int_equal(e.offset, 15);
        free(name);
        msgpack_sbuffer_destroy(&sb);
    }
}

static void test_hello_truncated_every_offset(void **state)
{
    (void)state;
    size_t n;
    uint8_t *b = read_frame("cap17_hello_trainer.bin", &n);
    struct cj_frame_hello h;
    for (size_t cut = 16; cut < n; cut++)
        assert_int_equal(cj_frame_hello_decode(b + 16, cut - 16, &h, NULL), -CJ_E_TRUNCATED);
    assert_int_equal(cj_frame_hello_decode(b + 16, n - 16, &h, NULL), 0);
    free(b);
}

/* ---- PING / PONG ---------------------------------------------------------------- */

static void test_heartbeat_vectors(void **state)
{
    (void)state;
    size_t n1, n2;
    uint8_t *ping = read_frame("cap75_ping.bin", &n1);
    uint8_t *pong = read_frame("cap77_pong.bin", &n2);
    uint8_t f[CJ_FRAME_HEARTBEAT_LEN];
    cj_frame_build_heartbeat(f, CJ_FRAME_PING, 30, 15);
    assert_int_equal(n1, sizeof f);
    assert_memory_equal(f, ping, sizeof f);
    cj_frame_build_heartbeat(f, CJ_FRAME_PONG, 24, 9);
    assert_int_equal(n2, sizeof f);
    assert_memory_equal(f, pong, sizeof f);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_frame_build_heartbeat_sb(&sb, CJ_FRAME_PING, 30, 15, NULL), 0);
    assert_int_equal(cj_frame_build_heartbeat_sb(&sb, CJ_FRAME_PONG, 24, 9, NULL), 0);
    assert_int_equal(sb.size, 34);
    assert_memory_equal(sb.data, ping, 17);
    assert_memory_equal(sb.data + 17, pong, 17);
    msgpack_sbuffer_destroy(&sb);
    struct cj_err e;
    assert_int_equal(cj_frame_heartbeat_check(ping + 16, 1, &e), 0);
    assert_int_equal(cj_frame_heartbeat_check(ping + 16, 0, &e), -CJ_E_INVALID);
    assert_int_equal(cj_frame_heartbeat_check(ping, 1, &e), -CJ_E_INVALID);
    assert_int_equal(cj_frame_heartbeat_check(ping + 15, 2, &e), -CJ_E_INVALID);
    free(ping);
    free(pong);
}

/* ---- stream splitting -------------------------------------------------------------- */

/* Feeds s to the splitter piece bytes at a time through an accumulating buffer
 * (as the link layer's evbuffer will) and records each frame's stream offset. */
static size_t split_in_pieces(const uint8_t *s, size_t n, size_t piece, size_t *offs, size_t max_frames)
{
    uint8_t *acc = malloc(n);
    size_t have = 0, fed = 0, consumed = 0, count = 0;
    while (fed < n) {
        size_t k = n - fed < piece ? n - fed : piece;
        memcpy(acc + have, s + fed, k);
        have += k;
        fed += k;
        for (;;) {
            struct cj_frame_prefix p;
            size_t flen, need;
            struct cj_err e;
            int rc = cj_frame_next(acc, have, CJ_FRAME_MAX_DEFAULT, &p, &flen, &e);
            if (rc < 0) fail_msg("split error at %zu: %s", consumed, e.msg);
            if (rc == 0) {
                need = flen;
                assert_true(need > have);  /* it asks for more than it has */
                break;
            }
            assert_true(count < max_frames);
            assert_memory_equal(acc, s + consumed, flen);
            offs[count++] = consumed;
            consumed += flen;
            memmove(acc, acc + flen, have - flen);
            have -= flen;
        }
    }
    assert_int_equal(have, 0);
    free(acc);
    return count;
}

static void check_stream(const char *file, const uint32_t *lens, size_t nframes, uint8_t last_type)
{
    size_t n;
    uint8_t *s = tu_read_vector(file, &n);
    size_t want_off[32], off = 0;
    for (size_t i = 0; i < nframes; i++) { want_off[i] = off; off += lens[i]; }
    assert_int_equal(off, n);
    size_t pieces[] = {1, 7, 16, 17, 1000, n};
    for (size_t pi = 0; pi < sizeof pieces / sizeof pieces[0]; pi++) {
        size_t offs[32];
        size_t got = split_in_pieces(s, n, pieces[pi], offs, 32);
        assert_int_equal(got, nframes);
        assert_memory_equal(offs, want_off, nframes * sizeof offs[0]);
    }
    assert_int_equal(s[6], CJ_FRAME_HELLO);
    assert_int_equal(s[want_off[nframes - 1] + 6], last_type);
    free(s);
}

static void test_stream_cj_to_server(void **state)
{
    (void)state;
    static const uint32_t lens[] = {75, 646, 339, 629, 554, 381, 381, 650, 377, 379, 650, 377, 631, 17};
    check_stream("frames/stream_cj_to_server.bin", lens, 14, CJ_FRAME_PONG);
}

static void test_stream_trainer_to_cj(void **state)
{
    (void)state;
    static const uint32_t lens[] = {95, 375, 622, 547, 374, 374, 643, 370, 578, 373, 372, 643, 370, 624,
                                    740, 381};
    check_stream("frames/stream_trainer_to_cj.bin", lens, 16, CJ_FRAME_DATA);
}

/* Every prefix of a stream yields exactly the frames that end inside it, then
 * asks for more; it never returns a frame it does not fully hold. */
static void test_stream_truncated_every_offset(void **state)
{
    (void)state;
    static const uint32_t lens[] = {75, 646, 339, 629, 554, 381, 381, 650, 377, 379, 650, 377, 631, 17};
    size_t n;
    uint8_t *s = tu_read_vector("frames/stream_cj_to_server.bin", &n);
    for (size_t cut = 0; cut < n; cut++) {
        size_t at = 0, flen, ends = 0;
        struct cj_frame_prefix p;
        int rc;
        while ((rc = cj_frame_next(s + at, cut - at, 0, &p, &flen, NULL)) == 1) at += flen;
        assert_int_equal(rc, 0);
        for (size_t i = 0; i < 14 && ends + lens[i] <= cut; i++) ends += lens[i];
        assert_int_equal(at, ends);  /* stopped after the last whole frame */
        if (cut - at < 16) assert_int_equal(flen, 16);
        else assert_int_equal(flen, p.length);
        assert_true(at + flen > cut);
    }
    free(s);
}

static void test_frame_truncated_every_offset(void **state)
{
    (void)state;
    const char *files[] = {"cap00_hello_site-1.bin", "cap02_direct_req_task_ping.bin", "cap07_stream_ack.bin",
                           "cap21_get_task_reply_chunk.bin", "cap75_ping.bin"};
    for (size_t f = 0; f < 5; f++) {
        size_t n;
        uint8_t *b = read_frame(files[f], &n);
        for (size_t cut = 0; cut < n; cut++) {
            /* copy so ASan catches any read past the cut */
            uint8_t *t = malloc(cut ? cut : 1);
            memcpy(t, b, cut);
            struct cj_frame_prefix p;
            size_t flen = 99;
            assert_int_equal(cj_frame_next(t, cut, 0, &p, &flen, NULL), 0);
            assert_int_equal(flen, cut < 16 ? 16 : n);
            assert_int_equal(cj_frame_peek(t, cut, 0, &p, NULL), cut < 16 ? 0 : 1);
            free(t);
        }
        free(b);
    }
}

/* ---- hostile prefixes ------------------------------------------------------------ */

static void mk(uint8_t out[16], uint32_t length, uint16_t hl, uint8_t type)
{
    struct cj_frame_prefix p = {length, hl, type, 0, 0, type == 1, 17, 2};
    cj_frame_prefix_encode(&p, out);
}

static void bad(uint32_t length, uint16_t hl, uint8_t type, uint32_t max, int want, size_t off, const char *word)
{
    uint8_t b[16];
    struct cj_frame_prefix p;
    struct cj_err e = {0};
    mk(b, length, hl, type);
    assert_int_equal(cj_frame_prefix_decode(b, max, &p, &e), want);
    assert_int_equal(e.offset, off);
    if (!strstr(e.msg, word)) fail_msg("message '%s' lacks '%s'", e.msg, word);
    size_t flen;
    assert_int_equal(cj_frame_next(b, 16, max, &p, &flen, NULL), want);
}

static void good(uint32_t length, uint16_t hl, uint8_t type, uint32_t max)
{
    uint8_t b[16];
    struct cj_frame_prefix p;
    struct cj_err e = {0};
    mk(b, length, hl, type);
    if (cj_frame_prefix_decode(b, max, &p, &e)) fail_msg("good prefix refused: %s", e.msg);
    assert_int_equal(p.length, length);
}

static void test_hostile_lengths(void **state)
{
    (void)state;
    const uint32_t M = CJ_FRAME_MAX_DEFAULT;
    assert_int_equal(M, 2145386496u);
    bad(15, 0, CJ_FRAME_PING, M, -CJ_E_INVALID, 0, "length");
    bad(0, 0, CJ_FRAME_PING, M, -CJ_E_INVALID, 0, "length");
    good(16, 0, CJ_FRAME_PING, M);                       /* no payload: legal at this layer */
    bad(16, 1, CJ_FRAME_DATA, M, -CJ_E_INVALID, 4, "header_len");
    bad(100, 85, CJ_FRAME_DATA, M, -CJ_E_INVALID, 4, "header_len");   /* 16+hl = length+1 */
    good(100, 84, CJ_FRAME_DATA, M);                     /* 16+hl = length: header only */
    bad(16 + 65535 - 1, 65535, CJ_FRAME_DATA, M, -CJ_E_INVALID, 4, "header_len");
    good(16 + 65535, 65535, CJ_FRAME_DATA, M);
    bad(M + 1, 10, CJ_FRAME_DATA, M, -CJ_E_LIMIT, 0, "length");
    good(M, 10, CJ_FRAME_DATA, M);
    bad(0xffffffffu, 10, CJ_FRAME_DATA, M, -CJ_E_LIMIT, 0, "length");
    /* a caller's smaller limit, and 0 / too big meaning the spec limit */
    bad(1025, 10, CJ_FRAME_DATA, 1024, -CJ_E_LIMIT, 0, "1024");
    good(1024, 10, CJ_FRAME_DATA, 1024);
    good(M, 10, CJ_FRAME_DATA, 0);
    bad(M + 1, 10, CJ_FRAME_DATA, 0, -CJ_E_LIMIT, 0, "length");
    bad(M + 1, 10, CJ_FRAME_DATA, 0xffffffffu, -CJ_E_LIMIT, 0, "length");
}

static void test_hostile_types(void **state)
{
    (void)state;
    const uint32_t M = CJ_FRAME_MAX_DEFAULT;
    bad(100, 0, CJ_FRAME_DATA, M, -CJ_E_MISSING, 4, "header_len");
    bad(17, 1, CJ_FRAME_PING, M, -CJ_E_INVALID, 4, "PING");
    bad(17, 1, CJ_FRAME_PONG, M, -CJ_E_INVALID, 4, "PONG");
    bad(100, 5, CJ_FRAME_HELLO, M, -CJ_E_INVALID, 4, "HELLO");
    bad(100, 5, CJ_FRAME_READY, M, -CJ_E_INVALID, 4, "READY");
    bad(100, 0, 0, M, -CJ_E_INVALID, 6, "type");
    bad(100, 0, 8, M, -CJ_E_INVALID, 6, "type");
    bad(100, 0, 255, M, -CJ_E_INVALID, 6, "type");
    /* FRAG and ACK are known but unused: they decode, the caller drops them */
    good(100, 0, CJ_FRAME_FRAG, M);
    good(100, 20, CJ_FRAME_ACK, M);
    assert_true(cj_frame_type_is_unused(CJ_FRAME_FRAG));
    assert_true(cj_frame_type_is_unused(CJ_FRAME_ACK));
    assert_false(cj_frame_type_is_unused(CJ_FRAME_DATA));
    assert_string_equal(cj_frame_type_name(CJ_FRAME_PONG), "PONG");
    assert_string_equal(cj_frame_type_name(9), "unknown");
    /* a bad prefix is reported as soon as 16 bytes are there, whatever follows */
    uint8_t b[20] = {0};
    mk(b, 15, 0, CJ_FRAME_PING);
    struct cj_frame_prefix p;
    size_t flen;
    assert_int_equal(cj_frame_next(b, 15, 0, &p, &flen, NULL), 0);
    assert_int_equal(cj_frame_next(b, 20, 0, &p, &flen, NULL), -CJ_E_INVALID);
    assert_int_equal(cj_frame_peek(b, 16, 0, &p, NULL), -CJ_E_INVALID);
}

static void test_prefix_roundtrip(void **state)
{
    (void)state;
    /* reserved and flags are not checked on receive but must survive */
    const struct cj_frame_prefix ps[] = {
        {69, 0, 4, 0, 0, 0, 1, 1},
        {CJ_FRAME_MAX_DEFAULT, 65535, 1, 0xff, 0xffff, 0xffff, 0xffff, 0xffff},
        {16 + 300, 300, 1, 7, 0x8000, 1, 0, 0},
        {17, 0, 7, 0, 0x1234, 0, 0x8001, 0x7ffe},
        {40, 24, 3, 1, 0x4000, 2, 3, 4},
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        uint8_t b[16], b2[16];
        struct cj_frame_prefix d, d2;
        cj_frame_prefix_encode(&ps[i], b);
        assert_int_equal(cj_frame_prefix_decode(b, 0, &d, NULL), 0);
        assert_memory_equal(&d, &ps[i], sizeof d);
        cj_frame_prefix_encode(&d, b2);
        assert_memory_equal(b, b2, 16);
        assert_int_equal(cj_frame_prefix_decode(b2, 0, &d2, NULL), 0);
        assert_memory_equal(&d, &d2, sizeof d);
    }
    /* field placement, byte by byte */
    size_t n;
    uint8_t *want = tu_hex("01 02 03 04 05 06 01 07 08 09 0a 0b 0c 0d 0e 0f", &n);
    struct cj_frame_prefix p = {0x01020304, 0x0506, 1, 7, 0x0809, 0x0a0b, 0x0c0d, 0x0e0f};
    uint8_t b[16];
    cj_frame_prefix_encode(&p, b);
    assert_memory_equal(b, want, 16);
    free(want);
}

/* ---- counters -------------------------------------------------------------------- */

static void test_counters_match_capture(void **state)
{
    (void)state;
    size_t n, at = 0, flen;
    uint8_t *s = tu_read_vector("frames/stream_cj_to_server.bin", &n);
    struct cj_frame_counters c;
    struct cj_frame_prefix p;
    cj_frame_counters_init(&c);
    int frames = 0;
    while (cj_frame_next(s + at, n - at, 0, &p, &flen, NULL) == 1) {
        uint16_t sid, seq;
        cj_frame_counters_next(&c, p.type, &sid, &seq);
        assert_int_equal(sid, p.stream_id);
        assert_int_equal(seq, p.sequence);
        at += flen;
        frames++;
    }
    assert_int_equal(frames, 14);
    assert_int_equal(at, n);
    free(s);
}

static void test_counters_wrap(void **state)
{
    (void)state;
    struct cj_frame_counters c;
    uint16_t sid, seq;
    cj_frame_counters_init(&c);
    cj_frame_counters_next(&c, CJ_FRAME_READY, &sid, &seq);
    assert_int_equal(sid, 1);
    assert_int_equal(seq, 1);
    cj_frame_counters_next(&c, CJ_FRAME_PING, &sid, &seq);
    assert_int_equal(sid, 17);
    assert_int_equal(seq, 2);
    c.stream_id = 0xfffe;
    c.sequence = 0xfffe;
    cj_frame_counters_next(&c, CJ_FRAME_DATA, &sid, &seq);
    assert_int_equal(sid, 0xffff);
    assert_int_equal(seq, 0xffff);
    cj_frame_counters_next(&c, CJ_FRAME_DATA, &sid, &seq);
    assert_int_equal(sid, 0);
    assert_int_equal(seq, 0);
    cj_frame_counters_next(&c, CJ_FRAME_PONG, &sid, &seq);
    assert_int_equal(sid, 1);
    assert_int_equal(seq, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_prefix),
        cmocka_unit_test(test_view_payload),
        cmocka_unit_test(test_hello_vectors),
        cmocka_unit_test(test_hello_build_cap00),
        cmocka_unit_test(test_hello_names_limits),
        cmocka_unit_test(test_hello_tolerant),
        cmocka_unit_test(test_hello_garbage),
        cmocka_unit_test(test_hello_huge_name),
        cmocka_unit_test(test_hello_truncated_every_offset),
        cmocka_unit_test(test_heartbeat_vectors),
        cmocka_unit_test(test_stream_cj_to_server),
        cmocka_unit_test(test_stream_trainer_to_cj),
        cmocka_unit_test(test_stream_truncated_every_offset),
        cmocka_unit_test(test_frame_truncated_every_offset),
        cmocka_unit_test(test_hostile_lengths),
        cmocka_unit_test(test_hostile_types),
        cmocka_unit_test(test_prefix_roundtrip),
        cmocka_unit_test(test_counters_match_capture),
        cmocka_unit_test(test_counters_wrap),
    };
    return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
