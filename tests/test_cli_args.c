/*
 * test_cli_args.c: the option parser every command uses (harness/cli_args.h).
 *
 * Rules checked: integers and reals are taken whole and within range (trailing text, spaces,
 * hex, "nan", "inf", overflow refused); seeds take decimal or 0x hex, never a sign; choices
 * must match a word; a flag takes no value; an option given twice, unknown, without its
 * value, missing when required, or combined with the option it excludes is refused; --help
 * prints usage on stdout and returns 0; every error is exactly one line on stderr naming the
 * option; control characters and invalid UTF-8 are escaped.
 */
#include "test_support.h"

#include "../harness/cli_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int usage_calls;
static void usage(FILE *f) {
    usage_calls++;
    fprintf(f, "usage: test\n");
}

typedef struct {
    int threads, choice;
    long cases;
    double seconds;
    uint64_t seed;
    const char *name;
    bool flag;
    int tp, ep;
} values;

static cli_option *options(values *v, int *n) {
    static cli_option o[9];
    cli_option init[9] = {
        {.name = "--threads", .kind = CLI_INT, .out = &v->threads, .lo = 0, .hi = CLI_MAX_THREADS},
        {.name = "--mode", .kind = CLI_CHOICE, .out = &v->choice, .choices = "exact,serving"},
        {.name = "--max-cases", .kind = CLI_LONG, .out = &v->cases, .lo = 0, .hi = 1e12},
        {.name = "--seconds", .kind = CLI_REAL, .out = &v->seconds, .lo = 0.001, .hi = 100},
        {.name = "--seed", .kind = CLI_U64, .out = &v->seed},
        {.name = "--name", .kind = CLI_STRING, .out = &v->name, .required = true, .nonempty = true},
        {.name = "--flag", .kind = CLI_FLAG, .out = &v->flag},
        {.name = "--tp", .kind = CLI_INT, .out = &v->tp, .lo = 1, .hi = 1024, .excludes = "--ep"},
        {.name = "--ep", .kind = CLI_INT, .out = &v->ep, .lo = 1, .hi = 1024},
    };
    memcpy(o, init, sizeof o);
    *n = 9;
    return o;
}

/* Parses "--name n" plus args with stderr captured in a file; returns the status, *text the
 * captured stderr (static buffer). */
static int parse(values *v, const char *const *args, const char **text) {
    memset(v, 0, sizeof *v);
    char *argv[16] = {"--name", "n"};
    int argc = 2;
    for (int i = 0; args[i]; i++) argv[argc++] = (char *)args[i];
    int n;
    cli_option *o = options(v, &n);
    FILE *cap = tmpfile();
    assert_non_null(cap);
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    int rc = cli_parse("test", o, n, argc, argv, usage);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    static char buf[4096];
    rewind(cap);
    size_t len = fread(buf, 1, sizeof buf - 1, cap);
    buf[len] = '\0';
    fclose(cap);
    *text = buf;
    return rc;
}

/* args must be refused with one line "inkling-moe test: argument OPT..." holding frag. */
static void refused(const char *const *args, const char *frag) {
    values v;
    const char *text;
    int rc = parse(&v, args, &text);
    int lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    if (rc != 2 || lines != 1 || strncmp(text, "inkling-moe test: argument ", 27) || !strstr(text, frag))
        fail_msg("%s ...: rc %d, %d lines: %s (wanted '%s')", args[0], rc, lines, text, frag);
}

#define REFUSED(frag, ...) refused((const char *const[]){__VA_ARGS__, NULL}, frag)

static void test_good_values(void **state) {
    (void)state;
    values v;
    const char *text;
    const char *args[] = {"--threads", "256", "--mode=serving", "--max-cases", "1000000000000",
                          "--seconds", "2.5e1", "--seed", "0xFFFFFFFFFFFFFFFF", "--flag", "--tp", "4", NULL};
    assert_int_equal(parse(&v, args, &text), -1);
    assert_string_equal(text, "");
    assert_int_equal(v.threads, 256);
    assert_int_equal(v.choice, 1);
    assert_true(v.cases == 1000000000000L);
    assert_true(v.seconds == 25.0);
    assert_true(v.seed == UINT64_MAX);
    assert_true(v.flag);
    assert_int_equal(v.tp, 4);
    assert_string_equal(v.name, "n");
    const char *dec[] = {"--seed", "18446744073709551615", "--threads", "0", NULL};
    assert_int_equal(parse(&v, dec, &text), -1);
    assert_true(v.seed == UINT64_MAX);
}

static void test_bad_numbers(void **state) {
    (void)state;
    REFUSED("--threads", "--threads", "100000");
    REFUSED("is not an integer in [0, 256]", "--threads", "257");
    REFUSED("--threads", "--threads", "-1");
    REFUSED("--threads", "--threads", "abc");
    REFUSED("--threads", "--threads", "4x");
    REFUSED("--threads", "--threads", " 4");
    REFUSED("--threads", "--threads", "0x10");
    REFUSED("--threads", "--threads", "1.0");
    REFUSED("--threads", "--threads", "");
    REFUSED("--threads", "--threads", "99999999999999999999999");
    REFUSED("--max-cases", "--max-cases", "1000000000001");
    REFUSED("--seconds", "--seconds", "nan");
    REFUSED("--seconds", "--seconds", "inf");
    REFUSED("--seconds", "--seconds", "1e999");
    REFUSED("--seconds", "--seconds", "-5");
    REFUSED("--seconds", "--seconds", "0");
    REFUSED("--seconds", "--seconds", "abc");
    REFUSED("--seconds", "--seconds", "5s");
    REFUSED("--seed", "--seed", "xyz");
    REFUSED("--seed", "--seed", "-1");
    REFUSED("--seed", "--seed", "+1");
    REFUSED("--seed", "--seed", "18446744073709551616");
    REFUSED("--seed", "--seed", "0x");
    REFUSED("--mode", "--mode", "fast");
    REFUSED("--mode", "--mode", "exac");
}

static void test_bad_usage(void **state) {
    (void)state;
    REFUSED("--bogus: unknown option", "--bogus");
    REFUSED("--bogus: unknown option", "--bogus=1");
    REFUSED("'stray': unexpected", "stray");
    REFUSED("'-x': unexpected", "-x");
    REFUSED("--threads: needs a value", "--threads");
    REFUSED("--threads: needs a value, got the option --flag", "--threads", "--flag");
    REFUSED("--flag: takes no value", "--flag=1");
    REFUSED("--threads: given twice", "--threads", "1", "--threads=2");
    REFUSED("--tp: cannot be combined with --ep", "--tp", "1", "--ep", "2");
    REFUSED("--tp: cannot be combined with --ep", "--ep", "2", "--tp", "1");
    REFUSED("--name: given twice", "--name", "x");
    values v;
    const char *text;
    char *argv[1] = {"--flag"};
    int n;
    cli_option *o = options(&v, &n);
    (void)text;
    FILE *cap = tmpfile();
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    int rc = cli_parse("test", o, n, 1, argv, usage);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[512];
    rewind(cap);
    size_t len = fread(buf, 1, sizeof buf - 1, cap);
    buf[len] = '\0';
    fclose(cap);
    assert_int_equal(rc, 2);
    assert_string_equal(buf, "inkling-moe test: argument --name: missing (see --help)\n");
}

static void test_help_only_on_request(void **state) {
    (void)state;
    values v;
    const char *text;
    usage_calls = 0;
    fflush(stdout);
    int saved = dup(1);
    FILE *null_out = fopen("/dev/null", "w");
    dup2(fileno(null_out), 1);
    int rc = parse(&v, (const char *const[]){"--threads", "abc", "--help", NULL}, &text);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(null_out);
    assert_int_equal(rc, 0);
    assert_int_equal(usage_calls, 1);
    assert_string_equal(text, "");
    REFUSED("--threads", "--threads", "abc");
    assert_int_equal(usage_calls, 1); /* errors never print usage */
}

static void test_escape(void **state) {
    (void)state;
    char out[128];
    assert_string_equal(cli_escape("evil\nline2\ttab\r", out, sizeof out), "evil\\nline2\\ttab\\x0D");
    assert_string_equal(cli_escape("\x1b[31mred", out, sizeof out), "\\x1B[31mred");
    assert_string_equal(cli_escape("caf\xc3\xa9 \xe2\x82\xac", out, sizeof out), "caf\xc3\xa9 \xe2\x82\xac");
    assert_string_equal(cli_escape("bad \xff\xc3(", out, sizeof out), "bad \\xFF\\xC3(");
    assert_string_equal(cli_escape("c1 \xc2\x85", out, sizeof out), "c1 \\xC2\\x85"); /* NEL */
    assert_string_equal(cli_escape("over \xc0\xaf", out, sizeof out), "over \\xC0\\xAF");
    assert_string_equal(cli_escape("surr \xed\xa0\x80", out, sizeof out), "surr \\xED\\xA0\\x80");
    char small[8];
    cli_escape("\n\n\n\n\n\n", small, sizeof small);
    assert_true(strlen(small) < sizeof small);
    REFUSED("'a\\nb': unexpected", "a\nb");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_values),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_bad_usage),
        cmocka_unit_test(test_help_only_on_request),
        cmocka_unit_test(test_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
