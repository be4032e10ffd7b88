/*
 * cuda_wgmma_layout.h: where the wgmma expert kernels' packed MXFP4 words keep each code's bits
 * (cuda_experts_wgmma.cu: wgmma_pack_codes writes them, decode_word reads them), and which
 * activation pieces of a stage each thread copies (moe_wg_act_*, below). Plain C, so that
 * tests/test_cuda_layout.c checks both on any machine.
 *
 * A lane's 32-bit word holds the 8 E2M1 codes of its four A-fragment registers j = 0..3, two
 * a register (half h = 0: the even reduction index, h = 1: the odd one). decode_word makes
 * register j from the word w by
 *     bringing w's bits moe_wg_mag_rot(j) places to the right (moe_wg_bring), keeping the
 *         magnitude bits 6..8 and 22..24 (and the sign bits 15 and 31 when moe_wg_sign_rot(j)
 *         equals moe_wg_mag_rot(j)),
 *     multiplying by the scale (bf16 pairs), then
 *     when the two differ, xoring in the bits 15 and 31 of w brought moe_wg_sign_rot(j) places,
 * so the code's three magnitude bits land on bf16 bits 8..6 and its sign on bit 15 of its half.
 * Where none of the kept bits wraps around, the rotation is a right shift, and where all of
 * them do, a left shift, which the compiler may put on the multiply pipe (IMAD.SHL): the
 * integer pipe, the decode's limit (docs/perf-cuda.md), then takes one shift, four masks and two
 * sign merges a word, and the multiply pipe four shifts. An exhaustive search over every
 * placement of the rotations found none with fewer integer-pipe instructions; with rotations
 * alone the fewest are eleven.
 */
#ifndef INKLING_CUDA_WGMMA_LAYOUT_H
#define INKLING_CUDA_WGMMA_LAYOUT_H

#ifdef __CUDACC__
#define MOE_WG_HD __host__ __device__
#else
#define MOE_WG_HD
#endif

#include <stdint.h>

#ifdef __cplusplus /* the kernels size their arrays by these */
#define MOE_WG_CONSTEXPR constexpr
#else
#define MOE_WG_CONSTEXPR
#endif

#define MOE_WG_MAG_BITS 0x01C001C0u  /* bf16 bits 8..6 of both halves */
#define MOE_WG_SIGN_BITS 0x80008000u /* bf16 bit 15 of both halves */

/* Rotations (right) that bring register j's magnitude bits and its sign bits into place. */
static inline MOE_WG_HD int moe_wg_mag_rot(int j) { return j == 0 ? 0 : j == 1 ? 3 : j == 2 ? 26 : 29; }
static inline MOE_WG_HD int moe_wg_sign_rot(int j) { return j == 0 ? 0 : j == 1 ? 30 : j == 2 ? 31 : 29; }

/* w rotated right by n (0..31) on the bits of `kept` (the rest is masked off after): a right
 * shift when none of them wraps around, a left shift when all do. */
static inline MOE_WG_HD uint32_t moe_wg_bring(uint32_t w, int n, uint32_t kept) {
    if (n == 0) return w;
    const uint32_t wrapping = kept & ~(0xFFFFFFFFu >> n); /* bits t with t + n >= 32 */
    if (wrapping == 0) return w >> n;
    if (wrapping == kept) return w << (32 - n);
    return (w >> n) | (w << (32 - n));
}

/* The bit of the word that holds bit b (0..2: magnitude, 3: sign) of the code of half h of
 * register j. */
static inline MOE_WG_HD int moe_wg_code_bit(int j, int h, int b) {
    return b < 3 ? (6 + 16 * h + b + moe_wg_mag_rot(j)) % 32 : (15 + 16 * h + moe_wg_sign_rot(j)) % 32;
}

/* The activation copies of one pipeline stage (cuda_experts_wgmma.cu, load_stage): cps chunks
 * of bn tile rows of 8 16-byte pieces, piece idx = (chunk, row, column) = (idx / (8 bn),
 * idx / 8 % bn, idx % 8); thread tid of `threads` copies pieces tid + i * threads. A thread
 * keeps its copies as moe_wg_act_places places (source and destination of the piece
 * tid + q * threads, q < places), and copy i is place moe_wg_act_place(i) moved on by
 * moe_wg_act_chunk(i) chunks:
 *     where the threads divide into whole chunks' pieces, one place, copy i the
 *         (threads / (8 bn))-th chunk after the previous;
 *     where a chunk's pieces divide into the threads, 8 bn / threads places, the same in
 *         every chunk;
 *     else one place a copy. */
static inline MOE_WG_HD MOE_WG_CONSTEXPR int moe_wg_act_places(int bn, int threads, int cps) {
    const int chunk_pieces = 8 * bn;
    if (threads % chunk_pieces == 0) return 1;
    if (chunk_pieces % threads == 0) return chunk_pieces / threads;
    return (cps * chunk_pieces + threads - 1) / threads;
}
static inline MOE_WG_HD MOE_WG_CONSTEXPR int moe_wg_act_place(int bn, int threads, int cps, int i) {
    return threads % (8 * bn) == 0 ? 0 : i % moe_wg_act_places(bn, threads, cps);
}
static inline MOE_WG_HD MOE_WG_CONSTEXPR int moe_wg_act_chunk(int bn, int threads, int cps, int i) {
    const int chunk_pieces = 8 * bn;
    if (threads % chunk_pieces == 0) return i * (threads / chunk_pieces);
    if (chunk_pieces % threads == 0) return i / moe_wg_act_places(bn, threads, cps);
    return 0;
}

#endif /* INKLING_CUDA_WGMMA_LAYOUT_H */
