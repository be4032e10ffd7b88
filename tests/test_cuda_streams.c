/*
 * test_cuda_streams.c: the CUDA path's stream rule, checked on its sources (no GPU needed).
 *
 * The rule (opt/cuda/cuda_backend.cu, docs/cuda-path.md "Streams and the legacy stream"): every
 * device operation of a layer is queued on one of the layer's own streams. Those streams are
 * created non-blocking, so they do not wait for anything queued on the legacy default stream;
 * a copy or memset issued there races with the layer's kernels. That race once gave NaN outputs
 * about once in ten thousand calls, invisible to compute-sanitizer on any single case.
 *
 * Rules of this test:
 *   - comments and string literals are blanked first, so the rule is judged on code only;
 *   - forbidden: the synchronous copy and memset entry points (cudaMemcpy, cudaMemset, ...),
 *     which run on the legacy stream; a kernel launch without an explicit stream (fewer than four
 *     <<< >>> arguments); an *Async call whose stream argument is 0, NULL, nullptr,
 *     cudaStreamLegacy or cudaStreamPerThread;
 *   - the scanner proves it can fail: each forbidden form, planted in a snippet, is reported.
 */
#include "test_support.h"

#include <ctype.h>
#include <stdbool.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_DIR "opt/cuda"

/* Blanks comments and string/char literals in place (newlines kept, so line numbers hold). */
static void blank_comments_and_strings(char *s) {
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            if (!*p) return;
        } else if (p[0] == '/' && p[1] == '*') {
            *p++ = ' ', *p++ = ' ';
            while (*p && !(p[0] == '*' && p[1] == '/'))
                if (*p != '\n') *p++ = ' ';
                else p++;
            if (!*p) return;
            p[0] = ' ', p[1] = ' ';
            p++;
        } else if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (*p && *p != q) {
                if (*p == '\\' && p[1]) *p++ = ' ';
                if (*p != '\n') *p = ' ';
                p++;
            }
            if (!*p) return;
        }
    }
}

static int line_of(const char *text, const char *at) {
    int line = 1;
    for (const char *p = text; p < at; p++) line += *p == '\n';
    return line;
}

/* Splits the parenthesised argument list starting at open ('(' or the first '<' of "<<<") into
 * top-level arguments; returns the count and copies the last one (trimmed) into last. */
static int count_args(const char *open, const char *close_tok, char *last, size_t last_len) {
    int depth = 0, args = 1;
    const char *arg0 = open + (close_tok[0] == '>' ? 3 : 1), *p = arg0;
    for (; *p; p++) {
        if (depth == 0 && strncmp(p, close_tok, strlen(close_tok)) == 0) break;
        if (*p == '(' || *p == '[' || *p == '{') depth++;
        else if (*p == ')' || *p == ']' || *p == '}') depth--;
        else if (*p == ',' && depth == 0) args++, arg0 = p + 1;
    }
    while (arg0 < p && isspace((unsigned char)*arg0)) arg0++;
    size_t n = (size_t)(p - arg0);
    while (n > 0 && isspace((unsigned char)arg0[n - 1])) n--;
    if (n >= last_len) n = last_len - 1;
    memcpy(last, arg0, n);
    last[n] = '\0';
    return args;
}

static bool is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Counts (and when verbose, prints) every violation of the stream rule in code (already blanked); returns their count. */
static int stream_rule_violations(const char *name, const char *code, bool verbose) {
    static const char *const legacy_calls[] = {"cudaMemcpy", "cudaMemset", "cudaMemcpy2D",
                                               "cudaMemcpy3D", "cudaMemcpyToSymbol",
                                               "cudaMemcpyFromSymbol", "cudaMemset2D",
                                               "cudaMemset3D", "cudaMemcpyPeer"};
    static const char *const default_streams[] = {"0", "NULL", "nullptr", "cudaStreamLegacy",
                                                  "cudaStreamPerThread", "(cudaStream_t)0"};
    int bad = 0;
    char last[128];
    for (const char *p = code; *p; p++) {
        if (!is_ident_char(*p) || (p > code && is_ident_char(p[-1]))) {
            if (strncmp(p, "<<<", 3) == 0) {
                int n = count_args(p, ">>>", last, sizeof last);
                if (n < 4) {
                    if (verbose) print_error("%s:%d: kernel launch with %d launch arguments: name the stream\n",
                                name, line_of(code, p), n);
                    bad++;
                }
                p += 2;
            }
            continue;
        }
        const char *e = p;
        while (is_ident_char(*e)) e++;
        const char *q = e;
        while (isspace((unsigned char)*q)) q++;
        size_t len = (size_t)(e - p);
        if (*q == '(') {
            for (size_t i = 0; i < sizeof legacy_calls / sizeof legacy_calls[0]; i++)
                if (len == strlen(legacy_calls[i]) && strncmp(p, legacy_calls[i], len) == 0) {
                    if (verbose) print_error("%s:%d: %s runs on the legacy default stream: use the Async form "
                                "on a layer stream\n", name, line_of(code, p), legacy_calls[i]);
                    bad++;
                }
            if (len > 5 && strncmp(p, "cuda", 4) == 0 && strncmp(e - 5, "Async", 5) == 0) {
                count_args(q, ")", last, sizeof last);
                for (size_t i = 0; i < sizeof default_streams / sizeof default_streams[0]; i++)
                    if (strcmp(last, default_streams[i]) == 0) {
                        if (verbose) print_error("%s:%d: %.*s on the default stream (%s)\n", name,
                                    line_of(code, p), (int)len, p, last);
                        bad++;
                    }
            }
        }
        p = e - 1;
    }
    return bad;
}

static int violations_in_snippet(const char *snippet) {
    char *code = strdup(snippet);
    assert_non_null(code);
    blank_comments_and_strings(code);
    int n = stream_rule_violations("snippet", code, false);
    free(code);
    return n;
}

/* The scanner reports each forbidden form and passes the allowed ones. */
static void test_scanner_catches_planted_violations(void **state) {
    (void)state;
    assert_int_equal(violations_in_snippet("cudaMemset(ws, 0xFF, n);"), 1);
    assert_int_equal(violations_in_snippet("e = cudaMemcpy (d, h, n, cudaMemcpyHostToDevice);"), 1);
    assert_int_equal(violations_in_snippet("k<<<grid, block>>>(a, b);"), 1);
    assert_int_equal(violations_in_snippet("k<<<dim3(f(a, b), 2), 64, 0>>>(a);"), 1);
    assert_int_equal(violations_in_snippet("cudaMemsetAsync(p, 0, n, 0);"), 1);
    assert_int_equal(violations_in_snippet("cudaMemcpyAsync(d, h, n, k, cudaStreamLegacy);"), 1);
    assert_int_equal(violations_in_snippet("cudaEventRecord(ev, NULL); cudaMemset2D(a,b,c,d,e);"), 1);
    /* allowed: Async on a named stream, four launch arguments, the names in comments/strings */
    assert_int_equal(violations_in_snippet("cudaMemsetAsync(p, 0, n, s->routed);"), 0);
    assert_int_equal(violations_in_snippet("k<<<dim3(T, f(a, b)), 64, smem, stream>>>(x);"), 0);
    assert_int_equal(violations_in_snippet("/* cudaMemset(a) */ // cudaMemcpy(b)\n"
                                           "fail(\"cudaMemset(%d)\", 1);"),
                     0);
    assert_int_equal(violations_in_snippet("my_cudaMemset(a); cudaMemsetAsyncX(b, 0);"), 0);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) buf[n] = '\0';
    else free(buf), buf = NULL;
    fclose(f);
    return buf;
}

/* Every .cu file of the CUDA path obeys the rule (run from the repository root, as make does). */
static void test_cuda_sources_use_layer_streams(void **state) {
    (void)state;
    DIR *dir = opendir(CUDA_DIR);
    if (!dir) fail_msg("cannot open %s: run the tests from the repository root", CUDA_DIR);
    int files = 0, bad = 0;
    for (struct dirent *de; (de = readdir(dir)) != NULL;) {
        size_t n = strlen(de->d_name);
        if (n < 4 || strcmp(de->d_name + n - 3, ".cu") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", CUDA_DIR, de->d_name);
        char *code = read_file(path);
        if (!code) fail_msg("cannot read %s", path);
        blank_comments_and_strings(code);
        bad += stream_rule_violations(path, code, true);
        free(code);
        files++;
    }
    closedir(dir);
    print_message("checked %d CUDA source files\n", files);
    assert_true(files >= 5);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scanner_catches_planted_violations),
        cmocka_unit_test(test_cuda_sources_use_layer_streams),
    };
    return cmocka_run_group_tests_name("cuda_streams", tests, NULL, NULL);
}
