/* SPDX-License-Identifier: Apache-2.0 */
/* test_stream_capture.c — the sm__ streaming layer against captured frames:
 * the chunk, ACK and reply our builders make carry the keys and values of
 * the ones captured between stock FLARE cells (but for ids and times). */
#include "streamfix.h"

/* ---- captured frames ------------------------------------------------------------------------------ */

struct frame {
    uint8_t *buf;
    size_t len;
    const uint8_t *blk;
    size_t hlen;
    const uint8_t *payload;
    size_t plen;
};

static void frame_load(struct frame *f, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "frames/%s.bin", name);
    f->buf = tu_read_vector(path, &f->len);
    assert_true(f->len >= 16);
    f->hlen = (size_t)f->buf[4] << 8 | f->buf[5];
    assert_true(16 + f->hlen <= f->len);
    f->blk = f->buf + 16;
    f->payload = f->blk + f->hlen;
    f->plen = f->len - 16 - f->hlen;
}

static bool val_eq(struct cj_span a, struct cj_span b)
{
    struct mp_cur ca, cb;
    struct mp_val va, vb;
    mp_cur_init(&ca, a.p, a.len);
    mp_cur_init(&cb, b.p, b.len);
    if (mp_next(&ca, &va, NULL) || mp_next(&cb, &vb, NULL)) return false;
    bool ia = va.kind == MP_UINT || va.kind == MP_INT, ib = vb.kind == MP_UINT || vb.kind == MP_INT;
    if (ia && ib) return va.kind == vb.kind && (va.kind == MP_UINT ? va.u == vb.u : va.i == vb.i);
    if (va.kind == MP_FLOAT && vb.kind == MP_FLOAT) return va.f == vb.f;
    return a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
}

static bool in_list(const uint8_t *k, uint32_t n, const char *const *list)
{
    for (; list && *list; list++)
        if (mp_str_eq(k, n, *list)) return true;
    return false;
}

/* Same key set (minus `absent`, keys the capture has and we do not send) and
 * equal values except for `differ`. */
static void same_keys_values(const struct cj_hdr *cap, const struct cj_hdr *ours, const char *const *differ,
                             const char *const *absent)
{
    struct cj_hdr_iter it;
    struct cj_hdr_entry e;
    uint32_t matched = 0;
    cj_hdr_iter_init(&it, cap);
    while (cj_hdr_iter_next(&it, &e, NULL) == 1) {
        if (in_list(e.key, e.key_len, absent)) continue;
        struct cj_hdr_iter it2;
        struct cj_hdr_entry f;
        bool found = false;
        cj_hdr_iter_init(&it2, ours);
        while (cj_hdr_iter_next(&it2, &f, NULL) == 1) {
            if (f.key_len != e.key_len || memcmp(f.key, e.key, e.key_len) != 0) continue;
            found = true;
            if (!in_list(e.key, e.key_len, differ) && !val_eq(e.val, f.val))
                fail_msg("value of '%.*s' differs from the capture", (int)e.key_len, (const char *)e.key);
        }
        if (!found) fail_msg("key '%.*s' missing", (int)e.key_len, (const char *)e.key);
        matched++;
    }
    if (matched != ours->n_entries) fail_msg("we send %u keys, the capture has %u", ours->n_entries, matched);
}

static struct cj_stream_ep *g_server;

static int cap08_handler(void *arg, struct cj_stream_blob *b)
{
    struct frame *f8 = arg;
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, f8->payload, f8->plen);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_string_equal(b->req.ri, "c8b9e345-2c13-4b9c-93a5-95741538be49");
    assert_int_equal(b->size, 23);
    return cj_stream_reply(g_server, &b->req, "ok", &m, out, NULL, NULL);
}

static void test_capture_parity(void **state)
{
    struct frame f6, f7, f8;
    frame_load(&f6, "cap06_stream_req_single_chunk");
    frame_load(&f7, "cap07_stream_ack");
    frame_load(&f8, "cap08_stream_reply_return_only");
    struct cj_hdr h6, h7, h8, ours;
    memnet_decode(&h6, f6.blk, f6.hlen);
    memnet_decode(&h7, f7.blk, f7.hlen);
    memnet_decode(&h8, f8.blk, f8.hlen);

    const char *names[] = { "site-1", "server" };
    struct cj_stream_limits lim[2] = { small_limits(), small_limits() };
    lim[A].ack_interval = 16 * MiB;   /* the capture's requester sent 16 MiB, the server 4 MiB */
    lim[B].ack_interval = 4 * MiB;
    struct memnet *n = memnet_new(2, names, lim);
    g_server = n->ep[B];
    assert_int_equal(cj_stream_on(n->ep[B], "server_command", "echo", cap08_handler, &f8), 0);
    n->filter = NULL;

    /* cap06: our request chunk for the same 23-byte blob */
    struct evbuffer *blob = evbuffer_new();
    evbuffer_add(blob, f6.payload, f6.plen);
    struct cj_stream_msg m = { .encoding = "fobs" };
    assert_int_equal(cj_stream_send(n->ep[A], "server", "server_command", "echo", &m, h6.sm_ri, blob, NULL, NULL,
                                    NULL),
                     0);
    RUN_UNTIL(n, cap_find(n, A, "sm__DATA", -1, 0) >= 0, 1.0);
    cap_hdr(n, cap_find(n, A, "sm__DATA", -1, 0), &ours);
    const char *const differ6[] = { "sm__id", "cn__route", "cn__send_time", NULL };
    same_keys_values(&h6, &ours, differ6, NULL);
    settle(n, 0.02);
    int before = n->n_caps;

    /* cap07 / cap08: the captured request itself given to "server" */
    struct evbuffer *pl = evbuffer_new();
    evbuffer_add(pl, f6.payload, f6.plen);
    cj_stream_input(n->ep[B], &h6, pl);
    evbuffer_free(pl);
    RUN_UNTIL(n, cap_count(n, B, "sm__DATA", -1) == 2, 1.0);
    int i7 = -1, i8 = -1;
    for (int i = before; i < n->n_caps; i++) {
        struct cj_hdr h;
        cap_hdr(n, i, &h);
        if (n->caps[i].from != B) continue;
        if (strcmp(h.topic, "sm__ACK") == 0 && h.sm_id == h6.sm_id && i7 < 0) i7 = i;
        if (strcmp(h.topic, "sm__DATA") == 0 && i8 < 0) i8 = i;
    }
    assert_true(i7 >= 0 && i8 >= 0);
    cap_hdr(n, i7, &ours);
    const char *const differ7[] = { "cn__route", "cn__send_time", NULL };
    same_keys_values(&h7, &ours, differ7, NULL);
    assert_int_equal(ours.sm_os, 23);
    assert_int_equal(ours.sm_sq, 0);

    cap_hdr(n, i8, &ours);
    /* We send replies non-reliably (sm__rs false, so no sm__rw / sm__rt): allowed by §7. */
    const char *const differ8[] = { "sm__id", "sm__rs", "cn__route", "cn__send_time", NULL };
    const char *const absent8[] = { "sm__rw", "sm__rt", NULL };
    same_keys_values(&h8, &ours, differ8, absent8);
    assert_false(ours.sm_rs);
    assert_int_equal(n->caps[i8].plen, 43);
    memnet_free(n);
    free(f6.buf);
    free(f7.buf);
    free(f8.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_parity),
    };
    return cmocka_run_group_tests_name("stream_capture", tests, NULL, NULL);
}
