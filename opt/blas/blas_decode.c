/*
 * blas_decode.c: weight rows -> fp32 tiles for the OpenBLAS path (contract.md [formats]).
 *
 * Rules:
 *   - MXFP4: W[r, c] = E2M1(code[r, c]) * 2^(scale[r, c/32] - 127); element 2k in the low
 *     nibble, 2k+1 in the high nibble. Every product is exact in fp32, so the AVX-512 kernel
 *     (a 16-entry in-register table lookup per nibble, times the block scale) and the portable
 *     moe_mxfp4_decode_row give identical bits; which one runs never changes a result;
 *   - NVFP4: W'[r, c] = E2M1(code[r, c]) * E4M3(scale[r, c/16]), exact in fp32 (portable
 *     decoder); the per-expert scale2 is not part of the tile: the caller multiplies the fp32
 *     dot products by it (contract.md [formats], docs/tolerances.md: one more rounding);
 *   - bf16: the upper half of an fp32, exact.
 */
#include "blas_internal.h"

#include "../../common/numeric.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BLAS_X86 1

/* One MXFP4 row of n elements (n a multiple of 32): 16 bytes and one scale per 32 outputs. */
__attribute__((target("avx512f"))) static void decode_row_mxfp4_avx512(const uint8_t *packed,
                                                                         const uint8_t *scales,
                                                                         int n, float *out) {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i low_nibble = _mm512_set1_epi32(0x0F);
    /* Interleave low (element 2k) and high (element 2k+1) results back into column order. */
    const __m512i first_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                                 7, 23);
    const __m512i second_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                                  14, 30, 15, 31);
    for (int b = 0; b < n / 32; b++) {
        __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed + 16 * b)));
        __m512 scale = _mm512_set1_ps(moe_e8m0_to_f32(scales[b]));
        __m512 lo = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(bytes, low_nibble), table), scale);
        __m512 hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table), scale);
        _mm512_storeu_ps(out + 32 * b, _mm512_permutex2var_ps(lo, first_half, hi));
        _mm512_storeu_ps(out + 32 * b + 16, _mm512_permutex2var_ps(lo, second_half, hi));
    }
}
#endif

int blas_decode_has_avx512(void) {
#ifdef BLAS_X86
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}

void blas_decode_rows(const moe_matrix *m, int r0, int n, float *out) {
    const size_t cols = (size_t)m->cols;
    if (!m->mx) {
        const uint16_t *src = m->bf16 + (size_t)r0 * cols;
        for (size_t i = 0; i < (size_t)n * cols; i++) out[i] = moe_bf16_to_f32(src[i]);
        return;
    }
    const moe_block_format *f = moe_matrix_format(m);
    const uint8_t *packed = m->mx + (size_t)r0 * (cols / 2);
    const uint8_t *scales = m->scale + (size_t)r0 * (cols / (size_t)f->block);
    if (f != &moe_format_mxfp4) { /* NVFP4: code * E4M3 scale, exact; scale2 is the caller's */
        for (int i = 0; i < n; i++)
            moe_block_decode_row(f, packed + i * (cols / 2), scales + i * (cols / (size_t)f->block),
                                 m->cols, out + i * cols);
        return;
    }
#ifdef BLAS_X86
    if (blas_decode_has_avx512()) {
        for (int i = 0; i < n; i++)
            decode_row_mxfp4_avx512(packed + i * (cols / 2), scales + i * (cols / 32), m->cols,
                                    out + i * cols);
        return;
    }
#endif
    for (int i = 0; i < n; i++)
        moe_mxfp4_decode_row(packed + i * (cols / 2), scales + i * (cols / 32), m->cols,
                             out + i * cols);
}
