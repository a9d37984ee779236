/* SPDX-License-Identifier: Apache-2.0 */
/* test_lent.c — lib/dl/lent.c: an item lent to replies by reference lives
 * until its owner released it and the last reply holding it is gone. */
#include "testutil.h"

#include "dl/lent.h"

static uint8_t *bytes(size_t n, uint8_t v)
{
    uint8_t *p = malloc(n);
    assert_non_null(p);
    memset(p, v, n);
    return p;
}

/* Released by its owner while two replies still hold it: they keep the bytes
 * readable (ASan would report a use after free otherwise, LSan a leak if the
 * last reply did not free them). */
static void test_outlives_owner(void **state)
{
    (void)state;
    struct cj_dl_lent *it = cj_dl_lent_new(bytes(4096, 0x5a), 4096);
    assert_non_null(it);
    struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
    assert_int_equal(cj_dl_lent_add(it, a), 0);
    assert_int_equal(cj_dl_lent_add(it, b), 0);
    cj_dl_lent_release(it);
    uint8_t x[4];
    assert_int_equal(evbuffer_copyout(a, x, 4), 4);
    assert_int_equal(x[3], 0x5a);
    evbuffer_free(a);
    assert_int_equal(evbuffer_copyout(b, x, 4), 4);
    assert_int_equal(x[0], 0x5a);
    assert_int_equal(evbuffer_get_length(b), 4096);
    evbuffer_free(b);
}

/* No reply ever took it: the release frees it; NULL is a no-op. */
static void test_release_alone(void **state)
{
    (void)state;
    cj_dl_lent_release(cj_dl_lent_new(bytes(16, 1), 16));
    cj_dl_lent_release(NULL);
}

/* A reply drained part by part frees nothing early. */
static void test_partial_drain(void **state)
{
    (void)state;
    struct cj_dl_lent *it = cj_dl_lent_new(bytes(100, 7), 100);
    struct evbuffer *a = evbuffer_new();
    assert_int_equal(cj_dl_lent_add(it, a), 0);
    evbuffer_drain(a, 40);
    cj_dl_lent_release(it);
    uint8_t x[60];
    assert_int_equal(evbuffer_remove(a, x, sizeof x), 60);
    assert_int_equal(x[59], 7);
    evbuffer_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outlives_owner),
        cmocka_unit_test(test_release_alone),
        cmocka_unit_test(test_partial_drain),
    };
    return cmocka_run_group_tests_name("lent", tests, NULL, NULL);
}
