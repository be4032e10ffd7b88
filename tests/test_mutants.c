/*
 * test_mutants.c: the differential harness catches every planted bug (harness/mutants.c) on
 * smoke cases within a short budget, and never flags the control (the reference's loop with no
 * bug planted). The short form of `make fuzz-selftest`.
 *
 * Rules checked: each mutant is caught within 200 smoke cases it supports (seed 1), with every
 * stage compared and again on its output alone (a path that fills no stage relies on that);
 * the control passes 40 cases; a time box never ends a hunt before FUZZ_HUNT_MIN_CASES cases
 * (routed_only_max needs 29 at seed 1: it is caught with no time at all).
 */
#include "test_support.h"

#include "harness/fuzz.h"
#include "harness/mutants.h"

static fuzz_suite smoke;

static int load_suite(void **state) {
    (void)state;
    moe_error err;
    return fuzz_suite_load("harness/suites", "smoke", &smoke, &err) == MOE_OK ? 0 : -1;
}

static void test_mutant_caught(void **state) {
    const moe_backend *m = moe_mutant_at((int)(intptr_t)*state);
    assert_non_null(m);
    fuzz_case caught;
    fuzz_case_result res;
    long took = fuzz_hunt(m, &smoke, 1, 200, 30.0, false, &caught, &res);
    if (took < 0) fail_msg("%s (%s) survived 200 smoke cases", m->name, m->description);
    long took_out = fuzz_hunt(m, &smoke, 1, 200, 30.0, true, &caught, &res);
    if (took_out < 0) fail_msg("%s (%s) survived 200 smoke cases judged on the output alone", m->name, m->description);
    print_message("%-26s caught after %ld case(s); on the output alone after %ld\n", m->name, took, took_out);
}

static void test_control_never_caught(void **state) {
    (void)state;
    fuzz_case caught;
    fuzz_case_result res;
    long took = fuzz_hunt(moe_mutant_control(), &smoke, 1, 40, 30.0, false, &caught, &res);
    if (took >= 0) {
        char line[512];
        fail_msg("the control was caught on: %s: %s", fuzz_case_format(&caught, line, sizeof line),
                 res.r[fuzz_first_failure(&res)].rep.msg);
    }
}

static void test_time_box_keeps_the_minimum_cases(void **state) {
    (void)state;
    const moe_backend *m = moe_mutant_find("routed_only_max");
    assert_non_null(m);
    fuzz_case caught;
    fuzz_case_result res;
    const long took = fuzz_hunt(m, &smoke, 1, 200, 0.0, false, &caught, &res);
    if (took < 0) fail_msg("%s survived a zero time box: the hunt stopped before %d cases", m->name,
                           FUZZ_HUNT_MIN_CASES);
    assert_true(took > 1 && took <= FUZZ_HUNT_MIN_CASES);
}

#define MUTANT_TEST(i) cmocka_unit_test_prestate(test_mutant_caught, (void *)(intptr_t)(i))

int main(void) {
    const struct CMUnitTest tests[] = {
        MUTANT_TEST(0),  MUTANT_TEST(1),  MUTANT_TEST(2),  MUTANT_TEST(3),  MUTANT_TEST(4),
        MUTANT_TEST(5),  MUTANT_TEST(6),  MUTANT_TEST(7),  MUTANT_TEST(8),  MUTANT_TEST(9),
        MUTANT_TEST(10), MUTANT_TEST(11), MUTANT_TEST(12), MUTANT_TEST(13), MUTANT_TEST(14),
        MUTANT_TEST(15), MUTANT_TEST(16), MUTANT_TEST(17), MUTANT_TEST(18), MUTANT_TEST(19),
        MUTANT_TEST(20), MUTANT_TEST(21), MUTANT_TEST(22), MUTANT_TEST(23),
        cmocka_unit_test(test_control_never_caught),
        cmocka_unit_test(test_time_box_keeps_the_minimum_cases),
    };
    if (moe_mutant_count() != 24) {
        fprintf(stderr, "test_mutants: %d mutants, the table lists 24: update it\n", moe_mutant_count());
        return 1;
    }
    return cmocka_run_group_tests_name("mutants", tests, load_suite, NULL);
}
