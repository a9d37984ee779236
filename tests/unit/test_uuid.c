/* SPDX-License-Identifier: Apache-2.0 */
/* test_uuid.c — uuid4 generation and the 8-4-4-4-12 text form (lib/util/uuid.c). */
#include "testutil.h"
#include "util/err.h"
#include "util/uuid.h"

static void test_text_round_trip(void **state)
{
    (void)state;
    uint8_t id[16], back[16];
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)(i * 17 + 3);
    char s[37];
    cj_uuid_str(id, s);
    assert_int_equal(strlen(s), 36);
    assert_int_equal(cj_uuid_parse((uint8_t *)s, 36, back), 0);
    assert_memory_equal(id, back, 16);
    assert_int_equal(cj_uuid_parse((const uint8_t *)"11111111-2222-4333-8444-00000000D00D", 36, back), 0);
    assert_int_equal(back[15], 0x0d);
    assert_int_equal(cj_uuid_parse((const uint8_t *)"11111111x2222-4333-8444-00000000d00d", 36, back),
                     -CJ_E_INVALID);
    assert_int_equal(cj_uuid_parse((const uint8_t *)"11111111-2222-4333-8444-00000000d00g", 36, back),
                     -CJ_E_INVALID);
    assert_int_equal(cj_uuid_parse((const uint8_t *)"11111111-2222-4333-8444-00000000d00", 35, back),
                     -CJ_E_INVALID);
}

static void test_uuid4(void **state)
{
    (void)state;
    char a[37], b[37];
    assert_int_equal(cj_uuid4_str(a), 0);
    assert_int_equal(cj_uuid4_str(b), 0);
    assert_int_equal(strlen(a), 36);
    assert_int_equal(a[14], '4');                 /* version 4 */
    assert_non_null(strchr("89ab", a[19]));       /* RFC 4122 variant */
    assert_string_not_equal(a, b);
    uint8_t id[16];
    assert_int_equal(cj_uuid4(id), 0);
    assert_int_equal(id[6] >> 4, 4);
    assert_int_equal(id[8] >> 6, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_round_trip),
        cmocka_unit_test(test_uuid4),
    };
    return cmocka_run_group_tests_name("uuid", tests, NULL, NULL);
}
