/*
 * numeric.h: the number formats every path shares.
 *
 * Rules:
 *   - bf16 is the upper half of an fp32. fp32 -> bf16 rounds to nearest, ties to even;
 *     NaN stays NaN (made quiet, sign kept); +-inf stay +-inf; a finite value that rounds past
 *     the largest bf16 becomes inf, as in IEEE arithmetic.
 *   - E2M1 (FP4): codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign (0x8 is -0).
 *   - E8M0: byte b is 2^(b-127); b = 0 is 2^-127 (an fp32 subnormal, not zero); 0xFF is NaN.
 *   - MXFP4: one E8M0 scale per 32 consecutive elements along the reduction dimension; two
 *     codes per byte, element 2k in the low nibble, element 2k+1 in the high nibble.
 *   - Every decode is exact in fp32: decoding never adds error.
 *
 * A second block format (NVFP4: E4M3 scale per 16 elements, fp32 per-tensor scale) fits the
 * same shape: a block size, a scale decoder and an element decoder; see moe_block_format.
 */
#ifndef INKLING_NUMERIC_H
#define INKLING_NUMERIC_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline float moe_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t moe_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even; overflow carries to inf */
    return (uint16_t)(u >> 16);
}

/* fp32 -> nearest bf16 -> fp32: "rounded to bf16" in the SPEC's precision contracts. */
static inline float moe_round_bf16(float f) { return moe_bf16_to_f32(moe_f32_to_bf16(f)); }

/* code: the low 4 bits are used. */
static inline float moe_e2m1_to_f32(uint8_t code) {
    static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = magnitude[code & 7u];
    return (code & 8u) ? -m : m;
}

/* 2^(b-127) exactly; 0xFF is NaN. */
static inline float moe_e8m0_to_f32(uint8_t b) {
    uint32_t u;
    if (b == 0xFFu) u = 0x7fc00000u;
    else if (b == 0) u = 0x00400000u; /* 2^-127: the fp32 subnormal with only bit 22 set */
    else u = (uint32_t)b << 23;       /* exponent field b, mantissa 0: 2^(b-127) */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Largest E8M0 byte for which code magnitude m_max (in units of E2M1, at most 6) times the
 * scale is finite in fp32. */
int moe_e8m0_max_finite_byte(float code_magnitude_max);

/* Decodes n elements of one MXFP4 row: packed [n/2] bytes, scales [n/32] E8M0 bytes,
 * out [n] fp32. n must be a multiple of 32. */
void moe_mxfp4_decode_row(const uint8_t *packed, const uint8_t *scales, int n, float *out);

/* The description of a block-scaled 4-bit format: enough for decoding and validation. */
typedef struct {
    const char *name;
    int block;                        /* elements per scale */
    float (*element)(uint8_t code);   /* 4-bit code -> value */
    float (*scale)(uint8_t byte);     /* scale byte -> multiplier (NaN if invalid) */
} moe_block_format;

extern const moe_block_format moe_format_mxfp4;

/* ---------------------------------------------------------------- counter-based random numbers */

/* A counter-based generator: the value at (seed, stream, counter) depends on nothing else, so
 * any element of a generated tensor can be recomputed on its own and every path draws the same
 * numbers whatever its order or thread count. */
uint64_t moe_rng_hash(uint64_t seed, uint64_t stream, uint64_t counter);

typedef struct {
    uint64_t seed, stream, counter;
} moe_rng;

static inline moe_rng moe_rng_make(uint64_t seed, uint64_t stream) {
    moe_rng r = {seed, stream, 0};
    return r;
}
uint64_t moe_rng_next(moe_rng *r);
double moe_rng_uniform(moe_rng *r);        /* [0, 1) with 53 random bits */
double moe_rng_normal(moe_rng *r);         /* standard normal (Box-Muller) */
int moe_rng_int(moe_rng *r, int lo, int hi); /* uniform in [lo, hi], inclusive */

#ifdef __cplusplus
}
#endif

#endif /* INKLING_NUMERIC_H */
