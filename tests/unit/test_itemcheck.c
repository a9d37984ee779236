/* SPDX-License-Identifier: Apache-2.0 */
/* test_itemcheck.c — the spool's item header check (lib/dl/itemcheck.c) on the
 * item vectors 40-43, fed the way the spool feeds it: a buffer of the bytes
 * it may look at, of which only the first `have` have arrived (the rest is
 * garbage, as in the spool's buffer before it fills). */
#include "testutil.h"

#include <stdbool.h>

#include "dl/itemcheck.h"

/* The check of item T<index> (dot) when only its first `have` bytes came. */
static int check_prefix(int dot, const uint8_t *item, size_t size, size_t have, uint32_t index, bool final, char *why,
                        size_t whysz)
{
    size_t room = size < CJ_ITEM_HDR_MAX ? size : CJ_ITEM_HDR_MAX;
    uint8_t *buf = malloc(room);
    memset(buf, 0xEE, room);
    memcpy(buf, item, have < room ? have : room);
    why[0] = '\0';
    int rc = cj_item_check_header(dot, buf, have < room ? have : room, size, index, final, why, whysz);
    free(buf);
    return rc;
}

/* A good item: every prefix, as bytes arrive, answers "need more" or "good",
 * never "bad"; the whole item is good; told the item ended early, the check
 * says why it is bad, or that it is good once the header is in. */
static void good_item(int dot, const char *vector, uint32_t index)
{
    size_t size;
    uint8_t *item = tu_read_vector(vector, &size);
    char why[400];
    bool decided = false;
    for (size_t have = 0; have <= size; have++) {
        int rc = check_prefix(dot, item, size, have, index, false, why, sizeof why);
        if (rc < 0) fail_msg("%s: the first %zu of %zu bytes were refused: %s", vector, have, size, why);
        if (decided) assert_int_equal(rc, 1);   /* once good, good */
        decided = rc == 1;
        int fin = check_prefix(dot, item, size, have, index, true, why, sizeof why);
        assert_int_equal(fin, rc == 1 ? 1 : -1);
        if (fin < 0) assert_true(why[0] != '\0');
    }
    assert_true(decided);
    free(item);
}

static void test_vectors(void **state)
{
    good_item(3, "40_item_T0.npz", 0);        /* numpy < 2: allow_pickle.npy first */
    good_item(3, "41_item_T1.npz", 1);
    good_item(3, "11_download_item_T0.npz", 0);
    good_item(6, "42_item_T0.safetensors", 0);
    good_item(6, "43_two_tensors.safetensors", 0);
}

/* The first member (allow_pickle.npy) not all received: the check waits.  It
 * used to take its offset past the received bytes and read the garbage there
 * (found by fuzz_itemcheck as a heap over-read; in the spool, a valid item
 * whose first 195 bytes straddled two stream chunks could be refused). */
static void test_first_member_partial(void **state)
{
    size_t size;
    uint8_t *item = tu_read_vector("40_item_T0.npz", &size);
    char why[400];
    assert_int_equal(check_prefix(3, item, size, 100, 0, false, why, sizeof why), 0);
    assert_int_equal(check_prefix(3, item, size, 100, 0, true, why, sizeof why), -1);
    assert_non_null(strstr(why, "too short"));
    free(item);
}

/* Bad items are refused with the reason, as soon as the bytes show it. */
static void test_refusals(void **state)
{
    size_t size;
    uint8_t *item = tu_read_vector("40_item_T0.npz", &size);
    char why[400];
    assert_int_equal(check_prefix(3, item, size, size, 1, false, why, sizeof why), -1);   /* not T1.npy */
    assert_non_null(strstr(why, "is not T1.npy"));
    uint8_t *bad = malloc(size);
    memcpy(bad, item, size);
    bad[0] = 'X';
    assert_int_equal(check_prefix(3, bad, size, 30, 0, false, why, sizeof why), -1);
    assert_non_null(strstr(why, "is not a ZIP"));
    memcpy(bad, item, size);
    bad[8] = 8;                                                                             /* deflated */
    assert_int_equal(check_prefix(3, bad, size, 30, 0, false, why, sizeof why), -1);
    assert_non_null(strstr(why, "compressed"));
    free(bad);
    free(item);

    item = tu_read_vector("42_item_T0.safetensors", &size);
    bad = malloc(size);
    memcpy(bad, item, size);
    memset(bad, 0, 8);                                                                      /* header size 0 */
    assert_int_equal(check_prefix(6, bad, size, 8, 0, false, why, sizeof why), -1);
    assert_non_null(strstr(why, "empty header"));
    memcpy(bad, item, size);
    bad[8] = '[';                                                                           /* not an object */
    assert_int_equal(check_prefix(6, bad, size, size, 0, false, why, sizeof why), -1);
    free(bad);
    free(item);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_first_member_partial),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
