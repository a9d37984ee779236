/* SPDX-License-Identifier: Apache-2.0 */
/* test_spool.c — the spool store (lib/dl/spool.c) with the streaming download
 * client (sink mode) and the producer's item_read mode, on three stream
 * endpoints in one event loop joined by the in-memory io of memnet.h:
 * the source (server.J1, a producer serving items from memory), the relay
 * (site-1.J1: the spool and its producer) and a worker (downloading from the
 * relay with the plain client).  The disk work runs on a real cj_sio thread
 * in a temporary directory.  Nothing here asserts anything about time. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "dl/client.h"
#include "dl/dlmsg.h"
#include "dl/producer.h"
#include "dl/spool.h"
#include "dl/spoolio.h"
#include "payload/items.h"
#include "stream/stream.h"
#include "wire/header.h"

#include "memnet.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define S 0
#define R 1
#define W 2

static const char *const NAMES[] = { "server.J1", "site-1.J1", "site-1.J1.trainer_1" };

/* ---- the in-memory io (memnet.h), dropping or cutting download replies -------------------------- */

struct net {
    struct memnet m;              /* first: RUN_UNTIL and the filter take a struct net for one */
    uint64_t drop_mask;           /* replies from S whose ordinal (at chunk 0) is in the mask are dropped */
    uint64_t cut_mask;            /* ... of these only chunk 0 gets through */
    uint64_t cutting[64];
    int n_cutting;
    int replies_seen;
    uint64_t dropping[64];
    int n_dropping;
};

static enum memnet_act drop_or_cut(struct memnet *m, int from, const struct cj_hdr *h, struct evbuffer *pl)
{
    struct net *n = (struct net *)m;
    if (from != S || strcmp(h->topic, CJ_STREAM_TOPIC_DATA) || strcmp(h->sm_ch, CJ_STREAM_RETURN_ONLY))
        return MEMNET_DELIVER;
    if (h->sm_sq == 0) {
        int k = n->replies_seen++;
        if (k < 64 && (n->drop_mask >> k & 1) && n->n_dropping < 64) n->dropping[n->n_dropping++] = h->sm_id;
        if (k < 64 && (n->cut_mask >> k & 1) && n->n_cutting < 64) n->cutting[n->n_cutting++] = h->sm_id;
    }
    for (int i = 0; i < n->n_cutting; i++)
        if (n->cutting[i] == h->sm_id && h->sm_sq > 0) return MEMNET_DROP;
    for (int i = 0; i < n->n_dropping; i++)
        if (n->dropping[i] == h->sm_id) return MEMNET_DROP;
    return MEMNET_DELIVER;
}

static struct net *net_new(void)
{
    struct net *n = calloc(1, sizeof *n);
    memnet_init(&n->m, 3, NAMES, NULL);
    n->m.filter = drop_or_cut;
    return n;
}

static void net_free(struct net *n)
{
    memnet_fini(&n->m);
    free(n);
}

/* ---- items ---------------------------------------------------------------------------------------- */

#define MAX_ITEMS 8

struct items {
    size_t n;
    uint64_t sizes[MAX_ITEMS];
    uint8_t *data[MAX_ITEMS];
};

/* A safetensors item T<index> of `bytes` U8 data bytes (pattern from seed). */
static void st_item(struct items *it, size_t index, size_t bytes, unsigned seed)
{
    uint8_t *d = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) d[i] = (uint8_t)(i * 131u + seed + (i >> 9));
    char name[16];
    snprintf(name, sizeof name, "T%zu", index);
    uint64_t shape[1] = { bytes };
    struct item_in in = { .name = name, .dtype = "U8", .ndim = 1, .shape = shape, .data = d, .len = bytes };
    struct cj_err e = { 0 };
    uint8_t *out = NULL;
    size_t ol = 0;
    if (items_st_write(&in, 1, &out, &ol, &e)) fail_msg("items_st_write: %s", e.msg);
    free(d);
    it->data[index] = out;
    it->sizes[index] = ol;
    if (index >= it->n) it->n = index + 1;
}

/* Replaces item index with raw bytes (copied). */
static void raw_item(struct items *it, size_t index, const void *p, size_t len)
{
    free(it->data[index]);
    it->data[index] = malloc(len ? len : 1);
    memcpy(it->data[index], p, len);
    it->sizes[index] = len;
    if (index >= it->n) it->n = index + 1;
}

static void items_free(struct items *it)
{
    for (size_t i = 0; i < MAX_ITEMS; i++) free(it->data[i]);
    memset(it, 0, sizeof *it);
}

/* Three small safetensors items (grouped in one reply) and one of 10.5 MiB (a BLOB datum). */
static void model_items(struct items *it)
{
    memset(it, 0, sizeof *it);
    st_item(it, 0, 100 * KiB, 1);
    st_item(it, 1, 300 * KiB, 2);
    st_item(it, 2, 1000, 3);
    st_item(it, 3, 10 * MiB + 512 * KiB, 4);
}

static int item_fn(void *ctx, size_t index, struct evbuffer *out)
{
    struct items *it = ctx;
    return evbuffer_add_reference(out, it->data[index], (size_t)it->sizes[index], NULL, NULL);
}

/* The source's ref outcome. */
struct srcdone {
    int n;
    enum cj_dl_outcome out;
};

static void src_done(void *ctx, const char *ref_id, enum cj_dl_outcome outcome, const struct cj_dl_receiver_info *rcv,
                     size_t n_rcv)
{
    struct srcdone *d = ctx;
    d->n++;
    d->out = outcome;
}

static struct srcdone sd;
static struct items *src_items;

static void src_done_g(void *ctx, const char *ref_id, enum cj_dl_outcome outcome,
                       const struct cj_dl_receiver_info *rcv, size_t n_rcv)
{
    src_done(&sd, ref_id, outcome, rcv, n_rcv);
}

static void source_ref(struct cj_dl_producer *p, const char *id, struct items *it)
{
    memset(&sd, 0, sizeof sd);
    src_items = it;
    struct cj_dl_ref_cfg c = {
        .ref_id = id, .n_items = it->n, .sizes = it->sizes, .item_fn = item_fn, .num_receivers = 1,
        .done = src_done_g, .ctx = it,
    };
    assert_int_equal(cj_dl_producer_add_ref(p, &c, NULL), 0);
}

/* ---- the relay side: spool, sio ------------------------------------------------------------------ */

struct env {
    struct net *n;
    struct cj_dl_producer *src;   /* on S */
    struct cj_dl_producer *rel;   /* on R */
    struct cj_sio *sio;
    struct cj_spool *sp;
    char dir[256];
};

static struct cj_dl_fetch_cfg fast_cfg(void)
{
    struct cj_dl_fetch_cfg c;
    cj_dl_fetch_cfg_default(&c);
    c.request_timeout = 0.3;
    c.backoff_base = 0.02;
    return c;
}

static bool use_fsync;

static void env_new(struct env *e, uint64_t max_bytes)
{
    memset(e, 0, sizeof *e);
    e->n = net_new();
    e->src = cj_dl_producer_new(e->n->m.base, e->n->m.ep[S], NULL);
    e->rel = cj_dl_producer_new(e->n->m.base, e->n->m.ep[R], NULL);
    assert_non_null(e->src);
    assert_non_null(e->rel);
    e->sio = cj_sio_new(e->n->m.base);
    assert_non_null(e->sio);
    snprintf(e->dir, sizeof e->dir, "/tmp/cjspool-test-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    struct cj_spool_cfg c = { .dir = e->dir, .max_bytes = max_bytes, .fsync = use_fsync, .fetch = fast_cfg() };
    e->sp = cj_spool_new(e->n->m.base, e->n->m.ep[R], e->rel, e->sio, &c);
    assert_non_null(e->sp);
}

static void sio_idle(struct env *e)
{
    struct cj_sio_stats st;
    double end = memnet_now() + 5.0;
    do {
        event_base_loop(e->n->m.base, EVLOOP_ONCE);
        cj_sio_get_stats(e->sio, &st);
    } while (st.jobs_queued && memnet_now() < end);
    settle(e->n, 0.01);
}

static void env_free(struct env *e)
{
    cj_spool_free(e->sp);
    sio_idle(e);
    cj_sio_free(e->sio);
    cj_dl_producer_free(e->src);
    cj_dl_producer_free(e->rel);
    net_free(e->n);
    char why[256];
    cj_spool_rmtree_now(e->dir, why, sizeof why);
}

struct fetched {
    int n;
    bool ok;
    char why[700];
};

static void on_fetched(void *ctx, struct cj_spool_ref *r, bool ok, const char *why)
{
    struct fetched *f = ctx;
    f->n++;
    f->ok = ok;
    snprintf(f->why, sizeof f->why, "%s", why ? why : "(null)");
}

struct served {
    int n;
    enum cj_dl_outcome out;
};

static void on_served(void *ctx, struct cj_spool_ref *r, enum cj_dl_outcome outcome)
{
    struct served *s = ctx;
    s->n++;
    s->out = outcome;
}

static bool path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* The file holds exactly len bytes equal to p. */
static bool file_is(const char *path, const uint8_t *p, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t *buf = malloc(len + 1);
    size_t got = fread(buf, 1, len + 1, f);
    fclose(f);
    bool eq = got == len && memcmp(buf, p, len) == 0;
    free(buf);
    return eq;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) k++;
    closedir(d);
    return k;
}

static struct cj_spool_ref *spool(struct env *e, const char *tag, int dot, const char *ref, struct fetched *fr)
{
    memset(fr, 0, sizeof *fr);
    struct cj_spool_ref *r = cj_spool_fetch(e->sp, tag, dot, NAMES[S], ref, on_fetched, fr);
    assert_non_null(r);
    assert_int_equal(fr->n, 0);
    RUN_UNTIL(e->n, fr->n, 20.0);
    assert_int_equal(fr->n, 1);
    return r;
}

/* ---- the worker side: a plain download from the relay ----------------------------------------------- */

struct wrec {
    const struct items *src;
    int items, done;
    bool ok, content_ok;
    char why[700];
};

static int w_item(void *ctx, uint64_t index, struct evbuffer *item)
{
    struct wrec *w = ctx;
    size_t len = evbuffer_get_length(item);
    if (index != (uint64_t)w->items || index >= w->src->n || len != w->src->sizes[index] ||
        memcmp(evbuffer_pullup(item, -1), w->src->data[index], len))
        w->content_ok = false;
    w->items++;
    evbuffer_free(item);
    return 0;
}

static void w_done(void *ctx, bool ok, const char *why)
{
    struct wrec *w = ctx;
    w->done++;
    w->ok = ok;
    snprintf(w->why, sizeof w->why, "%s", why);
}

static void worker_fetch(struct env *e, const char *id, const struct items *src, struct wrec *w)
{
    memset(w, 0, sizeof *w);
    w->src = src;
    w->content_ok = true;
    struct cj_dl_fetch_cfg c = fast_cfg();
    assert_non_null(cj_dl_fetch(e->n->m.base, e->n->m.ep[W], NAMES[R], id, &c, w_item, w_done, w));
}

/* ---- tests --------------------------------------------------------------------------------------------- */

/* Spool a ref (small items grouped, one >= 10 MiB as a BLOB datum), serve it,
 * a worker downloads it byte-identical, the served ref completes, drop removes
 * the directory. */
static void test_spool_serve_drop(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-a", &it);

    struct fetched fr;
    struct cj_spool_ref *r = spool(&e, "task-1", 6, "ref-a", &fr);
    assert_true(fr.ok);
    assert_string_equal(fr.why, "");
    assert_int_equal(cj_spool_ref_state(r), CJ_SPOOL_SPOOLED);
    assert_int_equal(cj_spool_ref_items(r), 4);
    uint64_t total = 0;
    for (size_t i = 0; i < it.n; i++) total += it.sizes[i];
    assert_int_equal(cj_spool_ref_bytes(r), total);
    RUN_UNTIL(e.n, sd.n, 2.0);   /* the source's transaction completes with the relay's confirm */
    assert_int_equal(sd.n, 1);
    assert_int_equal(sd.out, CJ_DL_OUT_OK);

    char refdir[512], path[600];
    snprintf(refdir, sizeof refdir, "%s/task-1/ref-a", e.dir);
    assert_int_equal(count_entries(refdir), 4);   /* no .tmp left */
    for (size_t i = 0; i < it.n; i++) {
        snprintf(path, sizeof path, "%s/chunk_%zu.safetensors", refdir, i);
        assert_true(file_is(path, it.data[i], (size_t)it.sizes[i]));
    }
    struct cj_spool_stats st;
    cj_spool_get_stats(e.sp, &st);
    assert_int_equal(st.fetched_refs, 1);
    assert_int_equal(st.fetched_bytes, total);
    assert_int_equal(st.bytes_on_disk, total);

    /* serve to one worker */
    char id[CJ_DL_REF_ID_MAX + 1];
    struct served sv = { 0 };
    tu_logcap_begin();
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id), 0);
    assert_string_equal(cj_spool_ref_served_id(r), id);
    assert_int_equal(cj_spool_ref_state(r), CJ_SPOOL_SERVING);
    struct wrec w;
    worker_fetch(&e, id, &it, &w);
    RUN_UNTIL(e.n, w.done && sv.n, 20.0);
    char *log = tu_logcap_end();
    assert_int_equal(w.done, 1);
    assert_true(w.ok);
    assert_int_equal(w.items, 4);
    assert_true(w.content_ok);
    assert_int_equal(sv.n, 1);
    assert_int_equal(sv.out, CJ_DL_OUT_OK);
    assert_int_equal(cj_spool_ref_state(r), CJ_SPOOL_SERVED);
    assert_non_null(strstr(log, "served out as"));
    free(log);
    cj_spool_get_stats(e.sp, &st);
    assert_int_equal(st.served_refs, 1);
    assert_int_equal(st.served_bytes, total);

    /* drop: the ref's directory and the (now empty) tag directory go */
    cj_spool_drop(e.sp, r);
    sio_idle(&e);
    assert_false(path_exists(refdir));
    snprintf(path, sizeof path, "%s/task-1", e.dir);
    assert_false(path_exists(path));
    cj_spool_get_stats(e.sp, &st);
    assert_int_equal(st.refs, 0);
    assert_int_equal(st.bytes_on_disk, 0);
    env_free(&e);
    items_free(&it);
}

/* The first reply is lost: the pull times out, is retried, the ref spools. */
static void test_retry_after_timeout(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-r", &it);
    e.n->drop_mask = 1;   /* the first data reply */
    use_fsync = true;     /* and the files are fsynced before their rename */
    struct fetched fr;
    tu_logcap_begin();
    struct cj_spool_ref *r = spool(&e, "task-r", 6, "ref-r", &fr);
    char *log = tu_logcap_end();
    assert_true(fr.ok);
    assert_non_null(strstr(log, "[DOWNLOAD_RETRY] source=server.J1 ref_id=ref-r"));
    assert_non_null(strstr(log, "[DOWNLOAD_RECOVERED] source=server.J1 ref_id=ref-r"));
    free(log);
    char path[600];
    for (size_t i = 0; i < it.n; i++) {
        snprintf(path, sizeof path, "%s/task-r/ref-r/chunk_%zu.safetensors", e.dir, i);
        assert_true(file_is(path, it.data[i], (size_t)it.sizes[i]));
    }
    cj_spool_drop(e.sp, r);
    env_free(&e);
    items_free(&it);
    use_fsync = false;
}

/* spool_max_bytes reached: the fetch fails with a reason naming the limit and
 * the ref, the source's transaction fails, no directory is left. */
static void test_max_bytes(void **state)
{
    struct env e;
    env_new(&e, 1 * MiB);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-m", &it);
    struct fetched fr;
    tu_logcap_begin();
    struct cj_spool_ref *r = spool(&e, "task-m", 6, "ref-m", &fr);
    char *log = tu_logcap_end();
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "spool_max_bytes"));
    assert_non_null(strstr(fr.why, "ref-m"));
    assert_non_null(strstr(log, "[DOWNLOAD_FAILED] source=server.J1 ref_id=ref-m"));
    free(log);
    assert_int_equal(cj_spool_ref_state(r), CJ_SPOOL_FAILED);
    RUN_UNTIL(e.n, sd.n, 2.0);
    assert_int_equal(sd.n, 1);
    assert_int_equal(sd.out, CJ_DL_OUT_FAILED);   /* the relay cancelled */
    sio_idle(&e);
    char path[600];
    snprintf(path, sizeof path, "%s/task-m", e.dir);
    assert_false(path_exists(path));
    struct cj_spool_stats st;
    cj_spool_get_stats(e.sp, &st);
    assert_int_equal(st.disk_full, 1);
    assert_int_equal(st.fetch_failures, 1);
    assert_int_equal(st.bytes_on_disk, 0);
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, NULL, NULL), -1);
    cj_spool_drop(e.sp, r);
    env_free(&e);
    items_free(&it);
}

/* A corrupt safetensors item fails the fetch with §4.2's wording. */
static void test_corrupt_safetensors(void **state)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *want;
    } cases[] = {
        { "\x40\x00\x00\x00\x00\x00\x00\x00{}", 10, "header size exceeds payload length" },
        { "\x00\x00\x00\x00\x00\x00\x00\x00{}", 10, "empty header" },
        { "\x04\x00\x00\x00\x00\x00\x00\x00{\"a\"xxxx", 16, "invalid JSON header" },
        { "\x04\x00\x00\x00\x00\x00\x00\x00[1] abcd", 16, "header must be JSON object" },
        { "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1,\"a\":2}   ", 24, "duplicate key" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct env e;
        env_new(&e, 0);
        struct items it;
        memset(&it, 0, sizeof it);
        st_item(&it, 0, 1000, 5);
        raw_item(&it, 1, cases[k].bytes, cases[k].len);
        source_ref(e.src, "ref-c", &it);
        struct fetched fr;
        struct cj_spool_ref *r = spool(&e, "task-c", 6, "ref-c", &fr);
        assert_false(fr.ok);
        if (!strstr(fr.why, cases[k].want)) fail_msg("case %zu: '%s' lacks '%s'", k, fr.why, cases[k].want);
        assert_non_null(strstr(fr.why, "T1"));
        sio_idle(&e);
        char path[600];
        snprintf(path, sizeof path, "%s/task-c", e.dir);
        assert_false(path_exists(path));
        cj_spool_drop(e.sp, r);
        env_free(&e);
        items_free(&it);
    }
}

/* npz items (vectors 40, 41: numpy < 2 with allow_pickle.npy first) spool;
 * an npz whose member is not T<n>.npy fails. */
static void test_npz(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    memset(&it, 0, sizeof it);
    size_t l40, l41;
    it.data[0] = tu_read_vector("40_item_T0.npz", &l40);
    it.data[1] = tu_read_vector("41_item_T1.npz", &l41);
    it.sizes[0] = l40;
    it.sizes[1] = l41;
    it.n = 2;
    source_ref(e.src, "ref-n", &it);
    struct fetched fr;
    struct cj_spool_ref *r = spool(&e, "task-n", 3, "ref-n", &fr);
    assert_true(fr.ok);
    char path[600];
    snprintf(path, sizeof path, "%s/task-n/ref-n/chunk_1.npz", e.dir);
    assert_true(file_is(path, it.data[1], l41));
    cj_spool_drop(e.sp, r);

    /* the items swapped: item 0 holds T1.npy */
    struct items sw;
    memset(&sw, 0, sizeof sw);
    raw_item(&sw, 0, it.data[1], l41);
    raw_item(&sw, 1, it.data[0], l40);
    source_ref(e.src, "ref-s", &sw);
    r = spool(&e, "task-n", 3, "ref-s", &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "is not T0.npy"));
    cj_spool_drop(e.sp, r);
    sio_idle(&e);
    snprintf(path, sizeof path, "%s/task-n", e.dir);
    assert_false(path_exists(path));
    env_free(&e);
    items_free(&it);
    items_free(&sw);
}

/* Serving again under a new id withdraws the first serve; a file that
 * vanished gives the worker a producer error; drop mid-serve is safe. */
static void test_reserve_and_read_error(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-b", &it);
    struct fetched fr;
    struct cj_spool_ref *r = spool(&e, "task-b", 6, "ref-b", &fr);
    assert_true(fr.ok);

    char id1[CJ_DL_REF_ID_MAX + 1], id2[CJ_DL_REF_ID_MAX + 1];
    struct served sv = { 0 };
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id1), 0);
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id2), 0);
    assert_string_not_equal(id1, id2);
    assert_false(cj_dl_producer_has_ref(e.rel, id1));
    struct wrec w;
    worker_fetch(&e, id1, &it, &w);
    RUN_UNTIL(e.n, w.done, 5.0);
    assert_false(w.ok);
    assert_non_null(strstr(w.why, "invalid_request"));
    worker_fetch(&e, id2, &it, &w);
    RUN_UNTIL(e.n, w.done && sv.n, 20.0);
    assert_true(w.ok);
    assert_true(w.content_ok);
    assert_int_equal(sv.out, CJ_DL_OUT_OK);

    /* the big item's file shrinks to 2 MiB: its reply has started when a read
     * fails, so the stream is cancelled and the worker fails (comm_error) */
    char id3[CJ_DL_REF_ID_MAX + 1], path[600];
    struct cj_dl_producer_stats ps;
    snprintf(path, sizeof path, "%s/task-b/ref-b/chunk_3.safetensors", e.dir);
    assert_int_equal(truncate(path, 2 * MiB), 0);
    memset(&sv, 0, sizeof sv);
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id3), 0);
    worker_fetch(&e, id3, &it, &w);
    RUN_UNTIL(e.n, w.done && sv.n, 20.0);
    assert_false(w.ok);
    assert_non_null(strstr(w.why, "comm_error"));
    assert_int_equal(sv.out, CJ_DL_OUT_FAILED);
    cj_dl_producer_get_stats(e.rel, &ps);
    assert_int_equal(ps.item_errors, 1);

    /* shorter than one read: nothing of the reply was sent, {"status":"error"} */
    memset(&sv, 0, sizeof sv);
    assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id3), 0);
    assert_int_equal(truncate(path, 10), 0);
    worker_fetch(&e, id3, &it, &w);
    RUN_UNTIL(e.n, w.done && sv.n, 20.0);
    assert_false(w.ok);
    assert_non_null(strstr(w.why, "producer error"));
    assert_int_equal(sv.out, CJ_DL_OUT_FAILED);
    cj_dl_producer_get_stats(e.rel, &ps);
    assert_int_equal(ps.item_errors, 2);

    cj_spool_drop(e.sp, r);
    sio_idle(&e);
    env_free(&e);
    items_free(&it);
}

/* A full disk, simulated with RLIMIT_FSIZE (the I/O thread ignores SIGXFSZ, so
 * reserving the item's space fails with EFBIG): the fetch fails naming the item and file, counts
 * disk_full, removes the directory, and the source's transaction fails. */
static void test_disk_full(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-f", &it);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 2 * MiB;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    struct fetched fr;
    struct cj_spool_ref *r = spool(&e, "task-f", 6, "ref-f", &fr);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_false(fr.ok);
    /* the item's space is reserved when its file is created: it fails before any byte is written */
    if (!strstr(fr.why, "spool disk full: no room for item T3 (") ||
        !strstr(fr.why, "/task-f/ref-f/chunk_3.safetensors.tmp: "))
        fail_msg("unexpected reason: %s", fr.why);
    struct cj_spool_stats st;
    cj_spool_get_stats(e.sp, &st);
    assert_int_equal(st.disk_full, 1);
    RUN_UNTIL(e.n, sd.n, 2.0);
    assert_int_equal(sd.out, CJ_DL_OUT_FAILED);
    sio_idle(&e);
    char path[600];
    snprintf(path, sizeof path, "%s/task-f", e.dir);
    assert_false(path_exists(path));
    cj_spool_drop(e.sp, r);
    env_free(&e);
    items_free(&it);
}

/* A timeout in the middle of a reply (the big item's first chunk written, the
 * rest lost): the pull is not retried, the fetch fails, no directory is left. */
static void test_timeout_mid_reply(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct items it;
    model_items(&it);
    source_ref(e.src, "ref-t", &it);
    e.n->cut_mask = 2;   /* the second data reply (the 10.5 MiB item): only chunk 0 arrives */
    struct fetched fr;
    tu_logcap_begin();
    struct cj_spool_ref *r = spool(&e, "task-t", 6, "ref-t", &fr);
    char *log = tu_logcap_end();
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "timeout in the middle of a reply"));
    assert_int_equal(strstr(log, "[DOWNLOAD_RETRY]") != NULL, 0);
    assert_non_null(strstr(log, "[DOWNLOAD_FAILED] source=server.J1 ref_id=ref-t"));
    free(log);
    RUN_UNTIL(e.n, sd.n, 2.0);
    assert_int_equal(sd.out, CJ_DL_OUT_FAILED);   /* cancelled */
    sio_idle(&e);
    char path[600];
    snprintf(path, sizeof path, "%s/task-t", e.dir);
    assert_false(path_exists(path));
    cj_spool_drop(e.sp, r);
    env_free(&e);
    items_free(&it);
}

/* Dropping a ref while a worker downloads it (reads outstanding on the I/O
 * thread): the worker fails, nothing is left, nothing leaks (ASan). */
static void test_drop_mid_serve(void **state)
{
    for (int when = 1; when <= 3; when++) {
        struct env e;
        env_new(&e, 0);
        struct items it;
        model_items(&it);
        source_ref(e.src, "ref-d", &it);
        struct fetched fr;
        struct cj_spool_ref *r = spool(&e, "task-d", 6, "ref-d", &fr);
        assert_true(fr.ok);
        char id[CJ_DL_REF_ID_MAX + 1];
        struct served sv = { 0 };
        assert_int_equal(cj_spool_serve(e.sp, r, 1, NULL, 0, on_served, &sv, id), 0);
        struct wrec w;
        worker_fetch(&e, id, &it, &w);
        struct cj_dl_producer_stats ps;
        do {   /* until the when-th data reply has started */
            event_base_loop(e.n->m.base, EVLOOP_ONCE);
            cj_dl_producer_get_stats(e.rel, &ps);
        } while ((int)ps.data_replies < (when < 3 ? when : 2) && !w.done);
        if (when == 3)
            for (int i = 0; i < 3; i++) event_base_loop(e.n->m.base, EVLOOP_ONCE);
        cj_spool_drop(e.sp, r);
        assert_int_equal(sv.n, 0);
        RUN_UNTIL(e.n, w.done, 5.0);
        assert_int_equal(w.done, 1);
        sio_idle(&e);
        assert_int_equal(count_entries(e.dir), 0);
        env_free(&e);
        items_free(&it);
    }
}

/* The streaming client on its own: a reply mixing inline and datum items
 * ([inline, datum, inline, datum] with datum_min 1000), a sink that releases
 * later (a timer) and answers eof with finish; then a finish(false) after eof
 * confirms "failed". */
struct sinkrec {
    struct event_base *base;
    struct cj_dl_fetch *f;
    const struct items *src;
    uint64_t index, size, got, held;
    int begins, ends, eofs, done;
    bool ok, content_ok, finish_ok;
    char why[700];
    struct event *tm;
    uint8_t *buf;
};

static void sr_release(evutil_socket_t fd, short what, void *arg)
{
    struct sinkrec *s = arg;
    uint64_t h = s->held;
    s->held = 0;
    if (h && s->f) cj_dl_fetch_release(s->f, h);
}

static int sr_begin(void *ctx, uint64_t index, uint64_t size)
{
    struct sinkrec *s = ctx;
    if (index != (uint64_t)s->begins || index >= s->src->n || size != s->src->sizes[index]) s->content_ok = false;
    s->begins++;
    s->index = index;
    s->size = size;
    s->got = 0;
    free(s->buf);
    s->buf = malloc(size ? size : 1);
    return 0;
}

static int sr_data(void *ctx, uint64_t index, struct evbuffer *piece)
{
    struct sinkrec *s = ctx;
    size_t n = evbuffer_get_length(piece);
    if (index != s->index || n > s->size - s->got) {
        s->content_ok = false;
        return -1;
    }
    evbuffer_remove(piece, s->buf + s->got, n);
    s->got += n;
    s->held += n;
    struct timeval tv = { 0, 1000 };
    evtimer_add(s->tm, &tv);
    return 0;
}

static int sr_end(void *ctx, uint64_t index)
{
    struct sinkrec *s = ctx;
    if (s->got != s->size || memcmp(s->buf, s->src->data[index], (size_t)s->size)) s->content_ok = false;
    s->ends++;
    return 0;
}

static void sr_eof(void *ctx)
{
    struct sinkrec *s = ctx;
    s->eofs++;
    cj_dl_fetch_finish(s->f, s->finish_ok, s->finish_ok ? "" : "the disk said no");
}

static void sr_done(void *ctx, bool ok, const char *why)
{
    struct sinkrec *s = ctx;
    s->done++;
    s->ok = ok;
    s->f = NULL;
    snprintf(s->why, sizeof s->why, "%s", why);
}

static void test_client_sink_mixed(void **state)
{
    for (int k = 0; k < 2; k++) {
        struct net *n = net_new();
        struct cj_dl_producer_cfg pc = { .datum_min = 1000 };
        struct cj_dl_producer *src = cj_dl_producer_new(n->m.base, n->m.ep[S], &pc);
        struct items it;
        memset(&it, 0, sizeof it);
        st_item(&it, 0, 10, 1);
        st_item(&it, 1, 5000, 2);
        st_item(&it, 2, 20, 3);
        st_item(&it, 3, 3000, 4);
        source_ref(src, "mixed", &it);
        struct sinkrec s = { .base = n->m.base, .src = &it, .content_ok = true, .finish_ok = k == 0 };
        s.tm = evtimer_new(n->m.base, sr_release, &s);
        static const struct cj_dl_sink sink = { sr_begin, sr_data, sr_end, sr_eof };
        struct cj_dl_fetch_cfg c = fast_cfg();
        s.f = cj_dl_fetch_sink(n->m.base, n->m.ep[R], NAMES[S], "mixed", &c, &sink, sr_done, &s);
        assert_non_null(s.f);
        RUN_UNTIL(n, s.done && sd.n, 5.0);
        assert_int_equal(s.done, 1);
        assert_int_equal(s.begins, 4);
        assert_int_equal(s.ends, 4);
        assert_int_equal(s.eofs, 1);
        assert_true(s.content_ok);
        assert_int_equal(sd.n, 1);
        if (k == 0) {
            assert_true(s.ok);
            assert_int_equal(sd.out, CJ_DL_OUT_OK);
        } else {
            assert_false(s.ok);
            assert_string_equal(s.why, "the disk said no");
            assert_int_equal(sd.out, CJ_DL_OUT_FAILED);   /* confirm "failed" */
        }
        event_free(s.tm);
        free(s.buf);
        cj_dl_producer_free(src);
        net_free(n);
        items_free(&it);
    }
}

/* Bad arguments. */
static void test_api_edges(void **state)
{
    struct env e;
    env_new(&e, 0);
    struct fetched fr;
    assert_null(cj_spool_fetch(e.sp, "../x", 6, NAMES[S], "r", on_fetched, &fr));
    assert_null(cj_spool_fetch(e.sp, "t", 6, NAMES[S], "a/b", on_fetched, &fr));
    assert_null(cj_spool_fetch(e.sp, "t", 4, NAMES[S], "r", on_fetched, &fr));
    assert_null(cj_spool_fetch(e.sp, "t", 6, "", "r", on_fetched, &fr));
    assert_null(cj_spool_fetch(e.sp, "..", 6, NAMES[S], "r", on_fetched, &fr));
    /* an unknown ref at the source: fails, directory removed */
    struct cj_spool_ref *r = spool(&e, "t", 6, "nope", &fr);
    assert_false(fr.ok);
    assert_non_null(strstr(fr.why, "invalid_request"));
    assert_int_equal(cj_spool_ref_state(r), CJ_SPOOL_FAILED);
    cj_spool_drop(e.sp, r);
    sio_idle(&e);
    assert_int_equal(count_entries(e.dir), 0);
    env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spool_serve_drop),
        cmocka_unit_test(test_retry_after_timeout),
        cmocka_unit_test(test_max_bytes),
        cmocka_unit_test(test_corrupt_safetensors),
        cmocka_unit_test(test_npz),
        cmocka_unit_test(test_reserve_and_read_error),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_timeout_mid_reply),
        cmocka_unit_test(test_drop_mid_serve),
        cmocka_unit_test(test_client_sink_mixed),
        cmocka_unit_test(test_api_edges),
    };
    return cmocka_run_group_tests_name("spool", tests, NULL, NULL);
}
