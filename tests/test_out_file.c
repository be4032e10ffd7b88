/*
 * test_out_file.c: the all-or-nothing output writer (common/out_file.h).
 *
 * Rules checked: a committed file holds exactly the bytes written and no temporary is left;
 * an aborted one leaves nothing; a user's file or a planted symlink at the old fixed name
 * NAME.tmp is never touched; a write past the file size limit (SIGXFSZ ignored) is an error
 * that removes the temporary; SIGTERM during a write removes the temporary and still kills
 * the process by that signal; an existing output is replaced whole; an empty path, a
 * directory, a missing directory are errors naming the path; moe_out_refuse_same catches the
 * same path, a hard link and a symlink to an input, and refuses a non-regular output.
 */
#include "test_support.h"

#include "../common/out_file.h"
#include "checkpoint_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];

static int setup(void **state) {
    (void)state;
    moe_out_guard_signals();
    return fixture_tempdir(dir, sizeof dir, "out");
}

static int teardown(void **state) {
    (void)state;
    fixture_remove_tree(dir);
    return 0;
}

/* A path in the test directory (one of 32 rotating buffers: enough for any one test). */
static const char *in_dir(const char *name) {
    static char path[32][700];
    static int k;
    k = (k + 1) % 32;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* The file's bytes into buf [cap]; returns the length, -1 if it cannot be read. */
static long read_all(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = (long)fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void write_text(const char *path, const char *text) {
    assert_int_equal(fixture_write_text(path, text), 0);
}

static moe_status write_whole(const char *path, const char *text, moe_error *err) {
    return moe_out_write_whole(path, text, strlen(text), err);
}

static void test_commit_and_abort(void **state) {
    (void)state;
    char buf[64];
    moe_error err = {0};
    const char *path = in_dir("a.bin");
    assert_int_equal(write_whole(path, "first", &err), MOE_OK);
    assert_int_equal(read_all(path, buf, sizeof buf), 5);
    assert_memory_equal(buf, "first", 5);
    assert_int_equal(fixture_count_entries(dir, false), 0);
    /* an existing output is replaced whole */
    assert_int_equal(write_whole(path, "second!", &err), MOE_OK);
    assert_int_equal(read_all(path, buf, sizeof buf), 7);
    assert_memory_equal(buf, "second!", 7);
    /* abort after a write: the old file stays, nothing else is there */
    moe_out_file o;
    assert_int_equal(moe_out_open(path, &o, &err), MOE_OK);
    assert_int_equal(fixture_count_entries(dir, false), 1); /* the temporary, hidden */
    assert_int_equal(moe_out_write(&o, "xx", 2, &err), MOE_OK);
    moe_out_abort(&o);
    assert_int_equal(fixture_count_entries(dir, false), 0);
    assert_int_equal(read_all(path, buf, sizeof buf), 7);
    assert_int_equal(fixture_count_entries(dir, true), 1);
    unlink(path);
}

static void test_old_fixed_name_untouched(void **state) {
    (void)state;
    char buf[64];
    moe_error err = {0};
    const char *victim = in_dir("victim"), *out = in_dir("o.bin");
    write_text(victim, "precious");
    write_text(in_dir("user.bin.tmp"), "mine");
    assert_int_equal(symlink(victim, in_dir("o.bin.tmp")), 0);
    assert_int_equal(write_whole(out, "data", &err), MOE_OK);
    write_text(in_dir("user.bin"), "x");
    assert_int_equal(write_whole(in_dir("user.bin"), "new", &err), MOE_OK);
    assert_int_equal(read_all(victim, buf, sizeof buf), 8);
    assert_memory_equal(buf, "precious", 8);
    assert_int_equal(read_all(in_dir("user.bin.tmp"), buf, sizeof buf), 4);
    assert_memory_equal(buf, "mine", 4);
    fixture_remove_tree(dir);
    assert_int_equal(mkdir(dir, 0700), 0);
}

static void test_bad_destinations(void **state) {
    (void)state;
    moe_error err = {0};
    moe_out_file o;
    assert_int_equal(moe_out_open("", &o, &err), MOE_ERR_ARG);
    assert_msg_has(err, "empty");
    assert_int_equal(moe_out_open(dir, &o, &err), MOE_ERR_IO);
    assert_msg_has(err, "is a directory");
    assert_int_equal(moe_out_open(in_dir("sub/"), &o, &err), MOE_ERR_IO);
    assert_msg_has(err, "is a directory");
    const char *missing = in_dir("no/such/out.bin");
    assert_int_equal(moe_out_open(missing, &o, &err), MOE_ERR_IO);
    assert_msg_has(err, missing);
    assert_int_equal(fixture_count_entries(dir, true), 0);
}

/* RLIMIT_FSIZE as `ulimit -f`: with SIGXFSZ ignored the write fails, the temporary goes. */
static void test_file_size_limit(void **state) {
    (void)state;
    struct rlimit old, small = {4096, 0};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    static char big[65536];
    moe_error err = {0};
    moe_out_file o;
    const char *path = in_dir("big.bin");
    moe_status st = moe_out_open(path, &o, &err);
    if (!st) st = moe_out_write(&o, big, sizeof big, &err);
    if (!st) st = moe_out_commit(&o, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(st, MOE_ERR_IO);
    assert_msg_has(err, path);
    assert_msg_has(err, "write failed");
    assert_int_equal(fixture_count_entries(dir, true), 0);
}

/* A child writes part of a file and is terminated: the temporary is gone, the signal kept. */
static void test_signal_removes_temporary(void **state) {
    (void)state;
    static const int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            signal(sigs[i], SIG_DFL); /* a background parent may have left it ignored */
            moe_out_guard_signals();
            moe_out_file o;
            moe_error err = {0};
            if (moe_out_open(in_dir("killed.bin"), &o, &err) || moe_out_write(&o, "half", 4, &err))
                _exit(3);
            raise(sigs[i]);
            _exit(4); /* not reached: the signal's default action ends the process */
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), sigs[i]);
        assert_int_equal(fixture_count_entries(dir, true), 0);
    }
}

static void test_refuse_same(void **state) {
    (void)state;
    moe_error err = {0};
    const char *in = in_dir("in.bin"), *other = in_dir("other.bin");
    write_text(in, "input");
    write_text(other, "other");
    const char *inputs[2] = {in_dir("absent"), in};
    assert_int_equal(moe_out_refuse_same("argument --out", other, inputs, 2, &err), MOE_OK);
    assert_int_equal(moe_out_refuse_same("argument --out", in_dir("new.bin"), inputs, 2, &err), MOE_OK);
    assert_int_equal(moe_out_refuse_same("argument --out", in, inputs, 2, &err), MOE_ERR_ARG);
    assert_msg_has(err, "argument --out");
    assert_msg_has(err, "same file");
    assert_int_equal(link(in, in_dir("hard.bin")), 0);
    assert_int_equal(moe_out_refuse_same("argument --out", in_dir("hard.bin"), inputs, 2, &err),
                     MOE_ERR_ARG);
    assert_int_equal(symlink(in, in_dir("soft.bin")), 0);
    assert_int_equal(moe_out_refuse_same("argument --out", in_dir("soft.bin"), inputs, 2, &err),
                     MOE_ERR_ARG);
    assert_int_equal(moe_out_refuse_same("argument --out", dir, inputs, 2, &err), MOE_ERR_ARG);
    assert_msg_has(err, "not a regular file");
    char buf[16];
    assert_int_equal(read_all(in, buf, sizeof buf), 5);
    assert_memory_equal(buf, "input", 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_and_abort),
        cmocka_unit_test(test_old_fixed_name_untouched),
        cmocka_unit_test(test_bad_destinations),
        cmocka_unit_test(test_file_size_limit),
        cmocka_unit_test(test_signal_removes_temporary),
        cmocka_unit_test(test_refuse_same),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
