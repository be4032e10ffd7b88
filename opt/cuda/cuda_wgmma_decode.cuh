/*
 * cuda_wgmma_decode.cuh: a lane's packed MXFP4 codes to the bf16 A fragments of wgmma, as the
 * wgmma expert kernels (cuda_experts_wgmma.cu) decode them and the wgmma probe
 * (check/wgmma_probe.cu) times them: the codes' bits as cuda_wgmma_layout.h places them, the
 * scale words as one or two bf16 products, the register sets kept while a wgmma reads them.
 * Why the decode takes these instructions: cuda_experts_wgmma.cu's rules.
 */
#ifndef INKLING_CUDA_WGMMA_DECODE_CUH
#define INKLING_CUDA_WGMMA_DECODE_CUH

#include "cuda_wgmma_layout.h"

#include <stdint.h>

namespace {

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* a times half H (0, 1) of the bf16 pair p, in both of a's halves: the multiply reads the half
 * twice (HMUL2's operand swizzle), so no instruction makes a pair of it. */
template <int H> __device__ __forceinline__ uint32_t mul_bf16x2_by_half(uint32_t a, uint32_t p) {
    uint32_t d;
    if (H == 0)
        asm("{.reg .b16 lo, hi; .reg .b32 q; mov.b32 {lo, hi}, %2; mov.b32 q, {lo, lo};\n"
            " mul.rn.bf16x2 %0, %1, q;}\n" : "=r"(d) : "r"(a), "r"(p));
    else
        asm("{.reg .b16 lo, hi; .reg .b32 q; mov.b32 {lo, hi}, %2; mov.b32 q, {hi, hi};\n"
            " mul.rn.bf16x2 %0, %1, q;}\n" : "=r"(d) : "r"(a), "r"(p));
    return d;
}

/* The scales of a lane's two rows as bf16 pairs, from its scale word sw (bytes 0, 1: rows g,
 * g + 8 of the chunk's first 32 values; bytes 2, 3: of its last 32): row g's pair (byte 0, byte
 * 2) and row g + 8's (byte 1, byte 3). One product: 2^(e - 1), the byte times 2^7 plus 126 << 7
 * (e <= 128); two products: 2^(e - 127) (e = 0: the subnormal 2^-127), exactly. Each pair of
 * one product is a byte permute and a shift-add (a mask for row g's took ptxas three
 * instructions: a shift, a mask and an add). */
__device__ __forceinline__ void scale_pairs_one_product(uint32_t sw, uint32_t &row_g, uint32_t &row_g8) {
    row_g = __byte_perm(sw, 0u, 0x4240u) * 0x80u + 0x3F003F00u;
    row_g8 = __byte_perm(sw, 0u, 0x4341u) * 0x80u + 0x3F003F00u;
}
__device__ __forceinline__ uint32_t scale_two_products(uint32_t sw, int byte) {
    const uint32_t e = (sw >> (8 * byte)) & 0xFFu;
    return e == 0 ? 0x0040u : e << 7;
}
__device__ __forceinline__ void scale_pairs_two_products(uint32_t sw, uint32_t &row_g, uint32_t &row_g8) {
    row_g = scale_two_products(sw, 0) | scale_two_products(sw, 2) << 16;
    row_g8 = scale_two_products(sw, 1) | scale_two_products(sw, 3) << 16;
}

/* One lane word of wgmma_pack_codes' layout to its four A fragment registers, scaled by half
 * BLOCK (the word's 32-value block of the chunk) of its rows' scale pairs: registers 0 and 2 are
 * row g's, 1 and 3 row g + 8's. TWO: the scales are 2^(e - 127), else 2^(e - 1). The sign bits
 * are merged after the product (a sign flip is exact). */
template <bool TWO, int BLOCK>
__device__ __forceinline__ void decode_word(uint32_t w, uint32_t row_g, uint32_t row_g8, uint32_t (&a)[4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const bool own_sign = moe_wg_sign_rot(j) == moe_wg_mag_rot(j);
        const uint32_t kept = own_sign ? MOE_WG_MAG_BITS | MOE_WG_SIGN_BITS : MOE_WG_MAG_BITS;
        uint32_t m = moe_wg_bring(w, moe_wg_mag_rot(j), kept) & kept;
        if (TWO) m = mul_bf16x2(m, 0x7E807E80u); /* 2^126: the code's own value */
        a[j] = mul_bf16x2_by_half<BLOCK>(m, j % 2 == 0 ? row_g : row_g8);
        if (!own_sign) a[j] ^= moe_wg_bring(w, moe_wg_sign_rot(j), MOE_WG_SIGN_BITS) & MOE_WG_SIGN_BITS;
    }
}

/* Keeps v in its registers here (an in-flight wgmma may still read them). */
__device__ __forceinline__ void keep_regs(uint32_t (&a)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; s++)
        asm volatile("" : "+r"(a[s][0]), "+r"(a[s][1]), "+r"(a[s][2]), "+r"(a[s][3])::"memory");
}

/* This warp's A fragments of one chunk from the stage's codes at `codes` (its lane's 16 bytes),
 * decoded and scaled by sw, its row pair's scale word: bytes 0, 1 (rows g, g + 8) for steps 0,
 * 1; bytes 2, 3 for steps 2, 3. two: a lane of the warp has a scale above the one-product
 * limit. */
template <bool TWO>
__device__ __forceinline__ void decode_words_as(const uint32_t (&w)[4], uint32_t sw, uint32_t (&a)[4][4]) {
    uint32_t row_g, row_g8;
    if (TWO) scale_pairs_two_products(sw, row_g, row_g8);
    else scale_pairs_one_product(sw, row_g, row_g8);
    decode_word<TWO, 0>(w[0], row_g, row_g8, a[0]);
    decode_word<TWO, 0>(w[1], row_g, row_g8, a[1]);
    decode_word<TWO, 1>(w[2], row_g, row_g8, a[2]);
    decode_word<TWO, 1>(w[3], row_g, row_g8, a[3]);
}
__device__ __forceinline__ void decode_words(const uint32_t (&w)[4], uint32_t sw, bool two, uint32_t (&a)[4][4]) {
    if (two) decode_words_as<true>(w, sw, a);
    else decode_words_as<false>(w, sw, a);
}
/* f(wg_flag<true>{}) or f(wg_flag<false>{}): a loop that decodes with one choice of products
 * throughout, so that its chunks do not test it each. */
template <bool B> struct wg_flag {
    static constexpr bool value = B;
};
template <typename F> __device__ __forceinline__ void with_products(bool two, F &&f) {
    if (two) f(wg_flag<true>{});
    else f(wg_flag<false>{});
}
/* The same from the stage's codes in shared memory at `codes` (this lane's 16 bytes). */
__device__ __forceinline__ void decode_chunk_at(uint32_t codes, uint32_t sw, bool two, uint32_t (&a)[4][4]) {
    uint32_t w[4];
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(codes)
                 : "memory");
    decode_words(w, sw, two, a);
}
} // namespace

#endif
