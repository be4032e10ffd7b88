/*
 * cuda_wgmma_layout.h: where the wgmma expert kernels' packed MXFP4 words keep each code's bits
 * (cuda_experts_wgmma.cu: wgmma_pack_codes writes them, decode_word reads them). Plain C, so
 * that tests/test_cuda_layout.c checks the layout on any machine.
 *
 * A lane's 32-bit word holds the 8 E2M1 codes of its four A-fragment registers j = 0..3, two
 * a register (half h = 0: the even reduction index, h = 1: the odd one). decode_word makes
 * register j from the word w by
 *     rotate right by moe_wg_mag_rot(j), keep the magnitude bits 6..8 and 22..24
 *         (and the sign bits 15 and 31 when moe_wg_sign_rot(j) equals moe_wg_mag_rot(j)),
 *     multiply by the scale (bf16 pairs), then
 *     when the two rotations differ, xor in the bits 15 and 31 of w rotated by moe_wg_sign_rot(j),
 * so the code's three magnitude bits land on bf16 bits 8..6 and its sign on bit 15 of its half.
 * A search over all rotations found no layout where every register needs one rotation only;
 * this one needs five rotations and two sign merges for four registers.
 */
#ifndef INKLING_CUDA_WGMMA_LAYOUT_H
#define INKLING_CUDA_WGMMA_LAYOUT_H

#ifdef __CUDACC__
#define MOE_WG_HD __host__ __device__
#else
#define MOE_WG_HD
#endif

#define MOE_WG_MAG_BITS 0x01C001C0u  /* bf16 bits 8..6 of both halves */
#define MOE_WG_SIGN_BITS 0x80008000u /* bf16 bit 15 of both halves */

/* Rotations (right) that bring register j's magnitude bits and its sign bits into place. */
static inline MOE_WG_HD int moe_wg_mag_rot(int j) { return 3 * j; } /* 0, 3, 6, 9 */
static inline MOE_WG_HD int moe_wg_sign_rot(int j) { return j == 0 ? 4 : j == 3 ? 5 : 3 * j; }

/* The bit of the word that holds bit b (0..2: magnitude, 3: sign) of the code of half h of
 * register j. */
static inline MOE_WG_HD int moe_wg_code_bit(int j, int h, int b) {
    return b < 3 ? (6 + 16 * h + b + moe_wg_mag_rot(j)) % 32 : (15 + 16 * h + moe_wg_sign_rot(j)) % 32;
}

#endif /* INKLING_CUDA_WGMMA_LAYOUT_H */
