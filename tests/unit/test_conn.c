/* SPDX-License-Identifier: Apache-2.0 */
/* test_conn.c — lib/net/conn.c over a real socketpair: big reads, a read cut
 * at the low watermark (so a frame's end is a chain end), the high watermark
 * and the owner's switch stopping reads, batched writes, EOF. */
#include "testutil.h"

#include <errno.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "net/addr.h"
#include "net/conn.h"

struct seen {
    int reads, writes, events;
    int last_event;
    bool stop_after_first;
};

static void on_read(struct cj_conn *c, void *ctx)
{
    struct seen *s = ctx;
    s->reads++;
    if (s->stop_after_first) cj_conn_set_reading(c, false);
}
static void on_write(struct cj_conn *c, void *ctx) { (void)c; ((struct seen *)ctx)->writes++; }
static void on_event(struct cj_conn *c, int what, void *ctx)
{
    (void)c;
    struct seen *s = ctx;
    s->events++;
    s->last_event = what;
}
static const struct cj_conn_ops ops = {on_read, on_write, on_event};

/* Writes n pattern bytes into fd (blocking, from the test's side). */
static void fill(int fd, size_t n)
{
    static uint8_t buf[65536];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)i;
    while (n) {
        ssize_t w = write(fd, buf, n < sizeof buf ? n : sizeof buf);
        assert_true(w > 0);
        n -= (size_t)w;
    }
}

static void spin(struct event_base *b, int turns)
{
    for (int i = 0; i < turns; i++) event_base_loop(b, EVLOOP_NONBLOCK);
}

/* A conn over one end of a socketpair (no TLS); the test talks on sv[1]. */
struct fx {
    struct event_base *b;
    int sv[2];
    struct seen s;
    struct cj_conn *c;
};

static void fx_open(struct fx *f, const struct cj_conn_ops *o, void *ctx)
{
    memset(f, 0, sizeof *f);
    f->b = event_base_new();
    assert_non_null(f->b);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->sv), 0);
    cj_sock_tune(f->sv[0]);
    cj_sock_tune(f->sv[1]);   /* room for 3 MiB at once either way */
    f->c = cj_conn_new(f->b, f->sv[0], NULL, false, o, ctx ? ctx : &f->s);
    assert_non_null(f->c);
}

/* c NULL: the test freed it; sv[1] -1: the test closed it. */
static void fx_close(struct fx *f)
{
    cj_conn_free(f->c);
    if (f->sv[1] >= 0) close(f->sv[1]);
    event_base_free(f->b);
}

static void test_big_reads_cut_at_low(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, &ops, NULL);
    const size_t frame = CJ_CONN_BLOCK + 300;      /* a 1 MiB stream chunk and its header */
    cj_conn_set_read_watermarks(f.c, frame, 0);
    fill(f.sv[1], 3 * CJ_CONN_BLOCK);
    spin(f.b, 10);
    struct evbuffer *in = cj_conn_input(f.c);
    assert_int_equal(evbuffer_get_length(in), 3 * CJ_CONN_BLOCK);
    /* a few big reads, not one per 4 KiB */
    assert_true(cj_conn_counters(f.c)->reads <= 8);
    assert_int_equal(cj_conn_counters(f.c)->bytes_read, 3 * CJ_CONN_BLOCK);
    assert_true(f.s.reads >= 1);
    /* the frame's end is a chain boundary */
    struct evbuffer_iovec v[16];
    int n = evbuffer_peek(in, (ev_ssize_t)frame, NULL, v, 16);
    size_t sum = 0;
    for (int i = 0; i < n && i < 16; i++) sum += v[i].iov_len;
    assert_int_equal(sum, frame);
    /* and the bytes are the ones written, in order */
    uint8_t head[4];
    evbuffer_copyout(in, head, 4);
    assert_int_equal(head[3], 3);
    fx_close(&f);
}

static void test_high_watermark_and_switch(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, &ops, NULL);
    cj_conn_set_read_watermarks(f.c, 1, 64 * 1024);
    fill(f.sv[1], 3 * CJ_CONN_BLOCK);
    spin(f.b, 10);
    struct evbuffer *in = cj_conn_input(f.c);
    /* no read starts at or past high; one read adds at most a block */
    assert_true(evbuffer_get_length(in) >= 64 * 1024);
    assert_true(evbuffer_get_length(in) < 64 * 1024 + CJ_CONN_BLOCK);
    /* draining below high lets reading go on */
    evbuffer_drain(in, evbuffer_get_length(in));
    spin(f.b, 10);
    assert_true(evbuffer_get_length(in) > 0);
    /* the owner's switch: nothing more is read while it is off */
    cj_conn_set_reading(f.c, false);
    evbuffer_drain(in, evbuffer_get_length(in));
    spin(f.b, 10);
    assert_int_equal(evbuffer_get_length(in), 0);
    cj_conn_set_reading(f.c, true);
    spin(f.b, 10);
    assert_true(evbuffer_get_length(in) > 0);
    fx_close(&f);
}

static void test_writes_batched_and_eof(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, &ops, NULL);
    struct evbuffer *out = cj_conn_output(f.c);
    /* 64 separate 16 KiB chains: one writev takes them all */
    static uint8_t piece[16384];
    for (int i = 0; i < 64; i++) {
        struct evbuffer *one = evbuffer_new();
        evbuffer_add(one, piece, sizeof piece);
        evbuffer_add_buffer(out, one);
        evbuffer_free(one);
    }
    spin(f.b, 5);
    assert_int_equal(evbuffer_get_length(out), 0);
    assert_true(cj_conn_counters(f.c)->writes <= 2);
    assert_true(f.s.writes >= 1);                 /* on_write: the output fell to its low mark */
    static uint8_t sink[1 << 20];
    size_t got = 0;
    while (got < sizeof sink) {
        ssize_t r = read(f.sv[1], sink, sizeof sink - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    /* the peer closes: one EOF event, no more I/O */
    close(f.sv[1]);
    f.sv[1] = -1;
    spin(f.b, 5);
    assert_int_equal(f.s.events, 1);
    assert_int_equal(f.s.last_event, CJ_CONN_EOF);
    fx_close(&f);
}

/* cj_conn_free from inside on_read: the read loop stops, nothing is touched after. */
static void free_on_read(struct cj_conn *c, void *ctx)
{
    ((struct seen *)ctx)->reads++;
    cj_conn_free(c);
}

static void test_free_inside_callback(void **state)
{
    (void)state;
    static const struct cj_conn_ops fops = {free_on_read, NULL, NULL};
    struct fx f;
    fx_open(&f, &fops, NULL);
    cj_conn_set_read_watermarks(f.c, 1, 0);
    fill(f.sv[1], 2 * CJ_CONN_BLOCK);
    spin(f.b, 5);
    f.c = NULL;                                   /* freed by its callback */
    assert_int_equal(f.s.reads, 1);
    /* the socket was closed with it */
    char x;
    assert_true(read(f.sv[1], &x, 1) <= 0);      /* EOF, or ECONNRESET: it left bytes unread */
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_big_reads_cut_at_low),
        cmocka_unit_test(test_high_watermark_and_switch),
        cmocka_unit_test(test_writes_batched_and_eof),
        cmocka_unit_test(test_free_inside_callback),
    };
    return cmocka_run_group_tests_name("conn", tests, NULL, NULL);
}
