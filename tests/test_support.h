/*
 * test_support.h: what the foundation's cmocka tests share.
 *
 * Rules:
 *   - cmocka needs these system headers before its own;
 *   - expected values in tests are derived in the test, never copied from the code's output:
 *     the helpers here (an independent bf16 rounding, a message check) hold no library code.
 */
#ifndef INKLING_TEST_SUPPORT_H
#define INKLING_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Fails unless the error message holds the fragment (a field, tensor or index name). */
#define assert_msg_has(err, fragment)                                                            \
    do {                                                                                         \
        if (!strstr((err).msg, (fragment)))                                                      \
            fail_msg("message \"%s\" does not name \"%s\"", (err).msg, (fragment));              \
    } while (0)

/* The text of a file, as a command wrote it (static buffer, at most 16 KiB; "" if unreadable). */
static inline const char *test_text_of(const char *path) {
    static char text[16384];
    FILE *f = fopen(path, "rb");
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    return text;
}

/* Round a finite value to the nearest bf16 (8 significant bits), ties to even, computed from
 * the definition with frexpl/rintl in long double (default rounding mode is to-nearest-even).
 * Values beyond the bf16 range are not handled: the tests never produce them. */
static inline long double test_round_bits(long double v, int bits) {
    if (v == 0.0L || !isfinite(v)) return v;
    int e;
    frexpl(v, &e);                    /* v = f * 2^e, 0.5 <= |f| < 1 */
    if (e - 1 < -126) e = -126 + 1;   /* below the normal range the quantum stays 2^(-126-bits+1) */
    long double q = ldexpl(1.0L, e - bits); /* the spacing of bits-bit values near v */
    return rintl(v / q) * q;
}
static inline long double test_round_bf16(long double v) { return test_round_bits(v, 8); }
static inline long double test_round_f32(long double v) { return test_round_bits(v, 24); }

static inline long double test_sigmoid(long double z) { return 1.0L / (1.0L + expl(-z)); }
static inline long double test_silu(long double z) { return z * test_sigmoid(z); }

#endif
