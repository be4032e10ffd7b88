/*
 * blas_fused.c: fused decode-and-dot kernels for small groups of token rows against MXFP4
 * weight rows (contract.md [formats]): no decoded tile is written to memory.
 *
 * Rules:
 *   - activations are bf16 values (the input x, or h rounded to bf16), arranged once per row:
 *     each chunk of BLAS_FUSED_CHUNK columns as its 32 even then its 32 odd columns, so that the
 *     low and high nibbles of the weight bytes meet their activations without a shuffle; a last
 *     chunk of 32 columns is padded with zeros;
 *   - AVX-512 BF16 kernel (vdpbf16ps, fp32 accumulation): E2M1 codes become bf16 by a table
 *     lookup and the E8M0 scale is added to the exponent field, which is exact whenever the
 *     result is a normal bf16. vdpbf16ps treats subnormal inputs as zero and flushes subnormal
 *     results, so the kernel runs only when no input, product or partial sum can be subnormal
 *     or overflow (blas_fused_bf16_exact); then it equals an fp32 accumulation of the exact
 *     products in a fixed order. Otherwise, or on a CPU without AVX512-BF16, the AVX2/FMA
 *     kernel or the portable one runs: both decode exactly to fp32 and accumulate in fp32;
 *   - every output element is one dot product, summed in an order that depends only on the
 *     kernel and the number of columns, never on the thread count or on the other rows.
 */
#include "blas_internal.h"

#include "../../common/numeric.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

/* How far ahead of the weight bytes being decoded the AVX-512 kernel prefetches. */
/* The BF16 kernel loads the scale bytes of BLAS_FUSED_SCALE_GROUP columns at once, into the
 * 16 lanes of a 256-bit register, and blocks token rows by BLAS_FUSED_TOKEN_BLOCK. */
#define SCALE_GROUP_BLOCKS (BLAS_FUSED_SCALE_GROUP / 32)
/* The kernel prefetches the bytes this many rows ahead into L2 (measured on one core: the
 * hardware prefetcher alone streamed 12e9 weights/s, prefetching into L1 17e9, into L2 19-20e9;
 * 2 to 16 rows ahead measured alike). */
#define PREFETCH_ROWS 4
_Static_assert(SCALE_GROUP_BLOCKS == 16 && BLAS_FUSED_TOKEN_BLOCK == 4 && BLAS_FUSED_CHUNK == 64,
               "the BF16 kernel's register layout");

static blas_fused_kernel forced_kernel = BLAS_FUSED_AUTO;

void blas_fused_force_kernel(blas_fused_kernel k) { forced_kernel = k; }

size_t blas_fused_stride(int cols) {
    return (size_t)(cols + BLAS_FUSED_CHUNK - 1) / BLAS_FUSED_CHUNK * BLAS_FUSED_CHUNK;
}

blas_act_range blas_fused_arrange_cols(const float *x, int c0, int c1, uint16_t *out) {
    blas_act_range r = BLAS_ACT_RANGE_EMPTY;
    for (int c = c0; c < c1; c++) {
        uint32_t bits;
        memcpy(&bits, &x[c], sizeof bits);
        const uint16_t b = (uint16_t)(bits >> 16); /* exact: x holds bf16 values */
        const int chunk = c / BLAS_FUSED_CHUNK, within = c % BLAS_FUSED_CHUNK;
        out[(size_t)chunk * BLAS_FUSED_CHUNK + (within & 1) * (BLAS_FUSED_CHUNK / 2) + within / 2] = b;
        const int field = (b >> 7) & 0xFF;
        if ((b & 0x7FFF) == 0) continue;
        if (field == 0 || field == 0xFF) r.plain = false; /* subnormal, inf or NaN */
        if (field - 127 < r.exp_min) r.exp_min = field - 127;
        if (field - 127 > r.exp_max) r.exp_max = field - 127;
    }
    return r;
}

void blas_fused_zero_padding(int cols, uint16_t *out) {
    if (cols % BLAS_FUSED_CHUNK == 0) return;
    /* A last chunk of 32 columns: 16 even ones, then 16 odd ones at half a chunk. */
    uint16_t *last = out + (size_t)(cols / BLAS_FUSED_CHUNK) * BLAS_FUSED_CHUNK;
    memset(last + 16, 0, 16 * sizeof(uint16_t));
    memset(last + BLAS_FUSED_CHUNK / 2 + 16, 0, 16 * sizeof(uint16_t));
}

blas_act_range blas_fused_arrange(const float *x, int cols, uint16_t *out) {
    blas_fused_zero_padding(cols, out);
    return blas_fused_arrange_cols(x, 0, cols, out);
}

blas_act_range blas_act_range_merge(blas_act_range a, blas_act_range b) {
    blas_act_range r = {a.exp_min < b.exp_min ? a.exp_min : b.exp_min,
                        a.exp_max > b.exp_max ? a.exp_max : b.exp_max, a.plain && b.plain};
    return r;
}

blas_scale_range blas_scale_range_of(const moe_matrix *m) {
    blas_scale_range r = {255, 0};
    const size_t n = (size_t)m->rows * (size_t)(m->cols / 32);
    for (size_t i = 0; i < n; i++) {
        if (m->scale[i] < r.min) r.min = m->scale[i];
        if (m->scale[i] > r.max) r.max = m->scale[i];
    }
    return r;
}

bool blas_fused_bf16_exact(blas_scale_range s, blas_act_range a, int cols) {
    if (!a.plain) return false;
    if (a.exp_max == INT_MIN) return true; /* every activation is zero */
    /* Weights c * 2^(s-127), c in {0.5 .. 6}: normal bf16 for 2 <= s <= 252. */
    if (s.min < 2 || s.max > 252) return false;
    /* Every product is a multiple of 2^(exp_min - 7) * 2^(s_min - 128), and so is every partial
     * sum: no nonzero one is below 2^-126 when that unit is at least 2^-126. */
    if (a.exp_min + s.min < 9) return false;
    /* |product| < 2^(exp_max + 1) * 2^(s_max - 124); the sum of cols of them stays below 2^127. */
    int log2_cols = 0;
    while ((1 << log2_cols) < cols) log2_cols++;
    return a.exp_max + s.max + log2_cols <= 250;
}

/* ---------------------------------------------------------------- portable kernel */

/* Column c of an arranged activation row. */
static inline float act_at(const uint16_t *act, int c) {
    const int chunk = c / BLAS_FUSED_CHUNK, within = c % BLAS_FUSED_CHUNK;
    return moe_bf16_to_f32(
        act[(size_t)chunk * BLAS_FUSED_CHUNK + (within & 1) * (BLAS_FUSED_CHUNK / 2) + within / 2]);
}

static void rows_portable(const moe_matrix *m, int r0, int nr, const uint16_t *act, size_t stride,
                          int n, float *out, int ldo) {
    const int cols = m->cols;
    for (int r = 0; r < nr; r++) {
        const uint8_t *packed = m->mx + (size_t)(r0 + r) * (size_t)(cols / 2);
        const uint8_t *scales = m->scale + (size_t)(r0 + r) * (size_t)(cols / 32);
        for (int p = 0; p < n; p++) {
            const uint16_t *a = act + (size_t)p * stride;
            float acc = 0.0f;
            for (int c = 0; c < cols; c++) {
                const uint8_t code = (uint8_t)(packed[c / 2] >> (4 * (c & 1)));
                acc += moe_e2m1_to_f32(code) * moe_e8m0_to_f32(scales[c / 32]) * act_at(a, c);
            }
            out[(size_t)p * ldo + r] = acc;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FUSED_X86 1

/* ---------------------------------------------------------------- AVX2/FMA kernel */

#define AVX2 __attribute__((target("avx2,fma")))

/* 8 columns of one nibble half as fp32: codes [8] (already shifted), times the block scale. */
AVX2 static inline __m256 e2m1_times_scale(__m256i codes, __m256 scale) {
    const __m256 magnitude = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256 v = _mm256_permutevar8x32_ps(magnitude, codes); /* uses the low 3 bits */
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(8)), 28);
    return _mm256_mul_ps(_mm256_xor_ps(v, _mm256_castsi256_ps(sign)), scale);
}

/* 8 arranged bf16 activations as fp32. */
AVX2 static inline __m256 bf16x8(const uint16_t *a) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)a));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

AVX2 static void rows_avx2(const moe_matrix *m, int r0, int nr, const uint16_t *act,
                           size_t stride, int n, float *out, int ldo) {
    const int cols = m->cols, half = BLAS_FUSED_CHUNK / 2;
    for (int r = 0; r < nr; r++) {
        const uint8_t *packed = m->mx + (size_t)(r0 + r) * (size_t)(cols / 2);
        const uint8_t *scales = m->scale + (size_t)(r0 + r) * (size_t)(cols / 32);
        for (int p = 0; p < n; p++) {
            const uint16_t *a = act + (size_t)p * stride;
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            for (int c = 0; c < cols; c += 16) { /* 16 columns: 8 bytes, one block scale */
                const int chunk0 = c / BLAS_FUSED_CHUNK * BLAS_FUSED_CHUNK, w = (c % BLAS_FUSED_CHUNK) / 2;
                __m256 scale = _mm256_set1_ps(moe_e8m0_to_f32(scales[c / 32]));
                __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(packed + c / 2)));
                __m256 lo = e2m1_times_scale(bytes, scale); /* columns c, c+2, ..., c+14 */
                __m256 hi = e2m1_times_scale(_mm256_srli_epi32(bytes, 4), scale);
                acc0 = _mm256_fmadd_ps(lo, bf16x8(a + chunk0 + w), acc0);
                acc1 = _mm256_fmadd_ps(hi, bf16x8(a + chunk0 + half + w), acc1);
            }
            __m256 s = _mm256_add_ps(acc0, acc1);
            __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            q = _mm_add_ps(q, _mm_movehl_ps(q, q));
            q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
            out[(size_t)p * ldo + r] = _mm_cvtss_f32(q);
        }
    }
}

/* ---------------------------------------------------------------- AVX-512 BF16 kernel */

#define BF16 __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))

/* Lane constants, lane i first. E2M1 codes as bf16 bit patterns, twice: entries 16..31 take
 * the second block's scale. */
static const uint16_t e2m1_bf16[32] __attribute__((aligned(64))) = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
/* 0 in lanes 0..15 (bytes of block 2k), 1 in lanes 16..31 (block 2k+1). */
static const uint16_t second_half[32] __attribute__((aligned(64))) = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
/* Table entries whose code is not +-0: the ones that take the scale's exponent. */
#define NONZERO_CODES 0xFEFEFEFEu

/* The exponent offsets (s - 127) << 7 of up to 16 scale bytes, one per 16-bit lane. */
BF16 static inline __m512i scale_offsets(const uint8_t *scales, int n_blocks) {
    __mmask16 keep = n_blocks >= 16 ? 0xFFFF : (__mmask16)((1u << n_blocks) - 1u);
    __m256i s = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(keep, scales));
    s = _mm256_slli_epi16(_mm256_sub_epi16(s, _mm256_set1_epi16(127)), 7);
    return _mm512_castsi256_si512(s);
}

/* One weight row's chunk (64 columns, or 32 when tail) as bf16: lo = even, hi = odd columns.
 * offsets: scale_offsets of the row's current group; pick: lanes 0-15 index block 2k, lanes
 * 16-31 block 2k+1 of that group. */
BF16 static inline __attribute__((always_inline)) void
decode_chunk(const uint8_t *bytes, bool tail, __m512i offsets, __m512i pick, __m512i *lo,
             __m512i *hi) {
    const __m512i table = _mm512_load_si512(e2m1_bf16);
    const __m512i second_block = _mm512_slli_epi16(_mm512_load_si512(second_half), 4);
    __m512i codes = tail ? _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(
                               _mm_loadu_si128((const __m128i *)bytes)))
                         : _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)bytes));
    __m512i scaled = _mm512_mask_add_epi16(table, NONZERO_CODES, table,
                                           _mm512_permutexvar_epi16(pick, offsets));
    __m512i lo_idx = _mm512_ternarylogic_epi32(codes, _mm512_set1_epi16(15), second_block, 0xEA);
    __m512i hi_idx = _mm512_or_si512(_mm512_srli_epi16(codes, 4), second_block);
    *lo = _mm512_permutexvar_epi16(lo_idx, scaled);
    *hi = _mm512_permutexvar_epi16(hi_idx, scaled);
}

/* Weight rows [rb] (1 or 2) times activation rows [nb] (1..4): out[p * ldo + r]. */
BF16 static inline __attribute__((always_inline)) void
dot_block(const uint8_t *const *packed, const uint8_t *const *scales, int rb, const uint16_t *act,
          size_t stride, int nb, int cols, float *out, int ldo) {
    __m512 acc[2][4];
    const int n_chunks = (cols + BLAS_FUSED_CHUNK - 1) / BLAS_FUSED_CHUNK, n_blocks = cols / 32;
    const __m512i pick0 = _mm512_load_si512(second_half);
    __m512i offsets[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < 4; p++) acc[r][p] = _mm512_setzero_ps();
    __m512i pick = pick0;
    for (int ch = 0; ch < n_chunks; ch++) {
        const int block = 2 * ch, k = ch % (SCALE_GROUP_BLOCKS / 2);
        if (k == 0) {
            for (int r = 0; r < rb; r++) {
                offsets[r] = scale_offsets(scales[r] + block, n_blocks - block);
                _mm_prefetch((const char *)scales[r] + (size_t)PREFETCH_ROWS * n_blocks + block, _MM_HINT_T1);
            }
            pick = pick0;
        }
        const bool tail = block + 1 == n_blocks;
        for (int r = 0; r < rb; r++)
            _mm_prefetch((const char *)packed[r] + (size_t)PREFETCH_ROWS * (cols / 2) +
                             (size_t)ch * (BLAS_FUSED_CHUNK / 2),
                         _MM_HINT_T1);
        __m512i lo[2], hi[2];
#pragma GCC unroll 2
        for (int r = 0; r < rb; r++)
            decode_chunk(packed[r] + (size_t)ch * (BLAS_FUSED_CHUNK / 2), tail, offsets[r], pick,
                         &lo[r], &hi[r]);
        pick = _mm512_add_epi16(pick, _mm512_set1_epi16(2));
#pragma GCC unroll 4
        for (int p = 0; p < nb; p++) {
            const uint16_t *a = act + (size_t)p * stride + (size_t)ch * BLAS_FUSED_CHUNK;
            __m512bh even = (__m512bh)_mm512_loadu_si512(a);
            __m512bh odd = (__m512bh)_mm512_loadu_si512(a + BLAS_FUSED_CHUNK / 2);
#pragma GCC unroll 2
            for (int r = 0; r < rb; r++) {
                acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)lo[r], even);
                acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)hi[r], odd);
            }
        }
    }
    for (int r = 0; r < rb; r++)
        for (int p = 0; p < nb; p++) out[(size_t)p * ldo + r] = _mm512_reduce_add_ps(acc[r][p]);
}

BF16 static void rows_bf16(const moe_matrix *m, int r0, int nr, const uint16_t *act,
                           size_t stride, int n, float *out, int ldo) {
    const int cols = m->cols;
    for (int r = 0; r < nr; r += 2) {
        const int rb = nr - r < 2 ? 1 : 2;
        const uint8_t *packed[2], *scales[2];
        for (int i = 0; i < 2; i++) {
            const size_t row = (size_t)(r0 + r + (i < rb ? i : 0));
            packed[i] = m->mx + row * (size_t)(cols / 2);
            scales[i] = m->scale + row * (size_t)(cols / 32);
        }
        for (int p0 = 0; p0 < n; p0 += 4) {
            const uint16_t *a = act + (size_t)p0 * stride;
            float *o = out + (size_t)p0 * ldo + r;
            switch ((n - p0 < 4 ? n - p0 : 4) + 4 * (rb - 1)) {
            case 1: dot_block(packed, scales, 1, a, stride, 1, cols, o, ldo); break;
            case 2: dot_block(packed, scales, 1, a, stride, 2, cols, o, ldo); break;
            case 3: dot_block(packed, scales, 1, a, stride, 3, cols, o, ldo); break;
            case 4: dot_block(packed, scales, 1, a, stride, 4, cols, o, ldo); break;
            case 5: dot_block(packed, scales, 2, a, stride, 1, cols, o, ldo); break;
            case 6: dot_block(packed, scales, 2, a, stride, 2, cols, o, ldo); break;
            case 7: dot_block(packed, scales, 2, a, stride, 3, cols, o, ldo); break;
            default: dot_block(packed, scales, 2, a, stride, 4, cols, o, ldo); break;
            }
        }
    }
}
#endif

/* ---------------------------------------------------------------- dispatch */

blas_fused_kernel blas_fused_kernel_for(bool bf16_exact) {
#ifdef FUSED_X86
    const bool has_bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
    const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    blas_fused_kernel k = has_bf16 && bf16_exact ? BLAS_FUSED_BF16
                          : has_avx2             ? BLAS_FUSED_AVX2
                                                 : BLAS_FUSED_PORTABLE;
    if (forced_kernel == BLAS_FUSED_PORTABLE) return BLAS_FUSED_PORTABLE;
    if (forced_kernel == BLAS_FUSED_AVX2 && has_avx2) return BLAS_FUSED_AVX2;
    return k;
#else
    (void)bf16_exact;
    return BLAS_FUSED_PORTABLE;
#endif
}

void blas_fused_rows(const moe_matrix *m, blas_scale_range sr, int r0, int nr,
                     const uint16_t *act, int n, blas_act_range ar, float *out, int ldo) {
    const size_t stride = blas_fused_stride(m->cols);
    switch (blas_fused_kernel_for(blas_fused_bf16_exact(sr, ar, m->cols))) {
#ifdef FUSED_X86
    case BLAS_FUSED_BF16: rows_bf16(m, r0, nr, act, stride, n, out, ldo); return;
    case BLAS_FUSED_AVX2: rows_avx2(m, r0, nr, act, stride, n, out, ldo); return;
#endif
    default: rows_portable(m, r0, nr, act, stride, n, out, ldo); return;
    }
}
