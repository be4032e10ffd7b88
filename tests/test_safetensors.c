/*
 * test_safetensors.c: the safetensors reader and writer (common/safetensors.c).
 *
 * Rules checked: every dtype round-trips bit for bit with its shape; the writer aligns every
 * tensor to its element size and leaves no temporary or partial file; the reader rejects
 * each kind of malformed file (truncated, absurd or short header length, bad JSON, trailing
 * header bytes, unknown dtype, bad shape, offsets that disagree with the shape, are out of
 * range, overlap, leave a hole or trailing bytes, duplicate names, unknown fields) with
 * MOE_ERR_FORMAT and a message naming the file and the tensor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../common/safetensors.h"
#include "checkpoint_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An image: 8-byte length, the header text, then data_len bytes of value 0xAB. */
static uint8_t *image(const char *header, size_t data_len, size_t *size) {
    size_t h = strlen(header);
    *size = 8 + h + data_len;
    uint8_t *b = malloc(*size);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, 0xAB, data_len);
    return b;
}

/* Parses header + data_len bytes and expects MOE_ERR_FORMAT with every needle in the message. */
static void expect_format_error(const char *header, size_t data_len, const char *needle1,
                                const char *needle2) {
    size_t size;
    uint8_t *b = image(header, data_len, &size);
    moe_st_file f;
    moe_error err = {0};
    moe_status st = moe_st_parse(b, size, "bad.safetensors", &f, &err);
    if (st != MOE_ERR_FORMAT || !strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
        fail_msg("header %s: status %d, message '%s', wanted '%s' and '%s'", header, st, err.msg,
                 needle1, needle2 ? needle2 : "");
    assert_int_equal(f.n_tensors, 0); /* a failed parse leaves nothing behind */
    free(b);
}

static void test_round_trip_every_dtype(void **state) {
    (void)state;
    char dir[512], path[600];
    assert_int_equal(fixture_tempdir(dir, sizeof dir, "st"), 0);
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    moe_st_entry e[MOE_ST_DTYPE_COUNT + 1];
    uint8_t *buf[MOE_ST_DTYPE_COUNT];
    for (int d = 0; d < MOE_ST_DTYPE_COUNT; d++) {
        size_t es = moe_st_dtype_size((moe_st_dtype)d);
        int rows = 1 + d % 3, cols = 3 + d; /* odd byte counts for 1-byte types mix alignments */
        size_t nb = (size_t)rows * (size_t)cols * es;
        buf[d] = malloc(nb);
        for (size_t i = 0; i < nb; i++) buf[d][i] = (uint8_t)(i * 31 + (size_t)d * 7 + 1);
        static char names[MOE_ST_DTYPE_COUNT][32];
        snprintf(names[d], sizeof names[d], "t_%s", moe_st_dtype_name((moe_st_dtype)d));
        e[d] = (moe_st_entry){names[d], (moe_st_dtype)d, 2, {rows, cols}, buf[d]};
    }
    e[MOE_ST_DTYPE_COUNT] = (moe_st_entry){"empty", MOE_ST_F32, 2, {0, 5}, NULL};
    moe_error err = {0};
    assert_int_equal(moe_st_write(path, e, MOE_ST_DTYPE_COUNT + 1, &err), MOE_OK);
    assert_int_equal(fixture_count_entries(dir, false), 0); /* the temporary was renamed away */

    moe_st_file f;
    assert_int_equal(moe_st_open(path, &f, &err), MOE_OK);
    assert_int_equal(f.n_tensors, MOE_ST_DTYPE_COUNT + 1);
    assert_int_equal((uintptr_t)f.data % 8, 0); /* header padded to 8 */
    for (int d = 0; d < MOE_ST_DTYPE_COUNT; d++) {
        const moe_st_tensor *t = moe_st_find(&f, e[d].name);
        assert_non_null(t);
        assert_int_equal(t->dtype, d);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], e[d].shape[0]);
        assert_int_equal(t->shape[1], e[d].shape[1]);
        assert_int_equal(t->numel, (uint64_t)(e[d].shape[0] * e[d].shape[1]));
        assert_int_equal(t->nbytes, t->numel * moe_st_dtype_size((moe_st_dtype)d));
        assert_memory_equal(t->data, buf[d], (size_t)t->nbytes);
        assert_int_equal((uintptr_t)t->data % moe_st_dtype_size((moe_st_dtype)d), 0);
        assert_int_equal(moe_st_dtype_from_name(moe_st_dtype_name((moe_st_dtype)d)), d);
        free(buf[d]);
    }
    const moe_st_tensor *t = moe_st_find(&f, "empty");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 0);
    assert_null(moe_st_find(&f, "absent"));
    moe_st_close(&f);
    fixture_remove_tree(dir);
}

static void test_dtype_names(void **state) {
    (void)state;
    static const struct {
        const char *name;
        size_t size;
    } want[] = {{"BF16", 2}, {"F16", 2}, {"F32", 4}, {"F64", 8}, {"I32", 4}, {"I64", 8}, {"U8", 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int d = moe_st_dtype_from_name(want[i].name);
        assert_true(d >= 0);
        assert_int_equal(moe_st_dtype_size((moe_st_dtype)d), want[i].size);
    }
    assert_int_equal(moe_st_dtype_from_name("bf16"), -1); /* names are case-sensitive */
    assert_int_equal(moe_st_dtype_from_name("F4"), -1);
}

static void test_valid_minimal(void **state) {
    (void)state;
    size_t size;
    uint8_t *b = image("{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}   ",
                       6, &size);
    moe_st_file f;
    moe_error err = {0};
    assert_int_equal(moe_st_parse(b, size, "ok", &f, &err), MOE_OK);
    assert_int_equal(f.n_tensors, 2);
    const moe_st_tensor *a = moe_st_find(&f, "a");
    assert_non_null(a);
    assert_int_equal(a->ndim, 0);
    assert_int_equal(a->numel, 1);
    assert_ptr_equal(moe_st_find(&f, "b")->data, (const uint8_t *)a->data + 4);
    moe_st_close(&f);
    free(b);
}

static void test_malformed_headers(void **state) {
    (void)state;
    const char *ok_entry = "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}";
    char h[512];
    /* syntax */
    expect_format_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]", 4, "not valid JSON", NULL);
    expect_format_error("[1,2]", 0, "does not start with '{'", NULL);
    snprintf(h, sizeof h, "{%s} xyz", ok_entry);
    expect_format_error(h, 4, "bytes after its JSON", NULL);
    /* dtype */
    expect_format_error("{\"w\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "tensor w", "unknown dtype 'Q4'");
    expect_format_error("{\"w\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "tensor w", "unknown dtype");
    /* shape */
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4, "tensor w", "shape[0]");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4, "tensor w", "shape[0]");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "tensor w", "shape is not");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "tensor w", "dimensions");
    expect_format_error("{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "tensor w", "absurdly large");
    /* offsets */
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "tensor w", "need 16");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}}", 8, "tensor w", "data_offsets");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "tensor w", "end before begin");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3, "tensor w", "out of range");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1000000,1000004]}}", 4, "tensor w", "out of range");
    expect_format_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, "tensor b", "overlap tensor a");
    expect_format_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "overlap", NULL);
    expect_format_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, "tensor a", "hole");
    snprintf(h, sizeof h, "{%s}", ok_entry);
    expect_format_error(h, 5, "1 trailing bytes", NULL);
    /* structure */
    snprintf(h, sizeof h, "{%s,%s}", ok_entry, ok_entry);
    expect_format_error(h, 4, "tensor a", "twice");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}", 4, "tensor w", "unknown header field 'x'");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, "tensor w", "data_offsets");
    expect_format_error("{\"w\":5}", 0, "tensor w", "not an object");
    expect_format_error("{\"__metadata__\":{\"format\":1}}", 0, "__metadata__", "format");
    expect_format_error("{\"__metadata__\":[]}", 0, "__metadata__", NULL);
}

static void test_bad_lengths(void **state) {
    (void)state;
    moe_st_file f;
    moe_error err = {0};
    uint8_t small[5] = {0};
    assert_int_equal(moe_st_parse(small, sizeof small, "f", &f, &err), MOE_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
    uint8_t hdr[16] = {0};
    hdr[0] = 1; /* header length 1 */
    assert_int_equal(moe_st_parse(hdr, sizeof hdr, "f", &f, &err), MOE_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "absurd"));
    memset(hdr, 0, sizeof hdr);
    hdr[5] = 1; /* 2^40 */
    assert_int_equal(moe_st_parse(hdr, sizeof hdr, "f", &f, &err), MOE_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "absurd"));
    memset(hdr, 0, sizeof hdr);
    hdr[0] = 100; /* 100 header bytes announced, 8 present */
    assert_int_equal(moe_st_parse(hdr, sizeof hdr, "f", &f, &err), MOE_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
}

/* A real file cut short anywhere fails cleanly, naming the file. */
static void test_truncated_files(void **state) {
    (void)state;
    char dir[512], path[600], cut[600];
    assert_int_equal(fixture_tempdir(dir, sizeof dir, "st"), 0);
    snprintf(path, sizeof path, "%s/full.safetensors", dir);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    moe_st_entry e = {"v", MOE_ST_F32, 2, {8, 8}, v};
    moe_error err = {0};
    assert_int_equal(moe_st_write(path, &e, 1, &err), MOE_OK);
    FILE *in = fopen(path, "rb");
    uint8_t bytes[1024];
    size_t n = fread(bytes, 1, sizeof bytes, in);
    fclose(in);
    for (size_t keep = 0; keep < n; keep += 7) {
        FILE *o = fopen(cut, "wb");
        assert_int_equal(fwrite(bytes, 1, keep, o), keep);
        fclose(o);
        moe_st_file f;
        moe_status st = moe_st_open(cut, &f, &err);
        if (st != MOE_ERR_FORMAT || !strstr(err.msg, "cut.safetensors"))
            fail_msg("cut at %zu: status %d '%s'", keep, st, err.msg);
    }
    moe_st_file f;
    snprintf(cut, sizeof cut, "%s/absent.safetensors", dir);
    assert_int_equal(moe_st_open(cut, &f, &err), MOE_ERR_IO);
    assert_non_null(strstr(err.msg, "absent.safetensors"));
    fixture_remove_tree(dir);
}

static void test_writer_failures_leave_nothing(void **state) {
    (void)state;
    char dir[512], path[600];
    assert_int_equal(fixture_tempdir(dir, sizeof dir, "st"), 0);
    uint8_t b[4] = {1, 2, 3, 4};
    moe_st_entry e[2] = {{"a", MOE_ST_U8, 1, {4}, b}, {"a", MOE_ST_U8, 1, {4}, b}};
    moe_error err = {0};
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    assert_int_equal(moe_st_write(path, e, 2, &err), MOE_ERR_ARG);
    assert_non_null(strstr(err.msg, "tensor a"));
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/no/such/dir/out.safetensors", dir);
    assert_int_equal(moe_st_write(path, e, 1, &err), MOE_ERR_IO);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_equal(fixture_count_entries(dir, true), 0); /* nothing created */
    fixture_remove_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_dtype),
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_valid_minimal),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_truncated_files),
        cmocka_unit_test(test_writer_failures_leave_nothing),
    };
    return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
