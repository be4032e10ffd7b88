/*
 * numeric.h: the number formats every path shares.
 *
 * Rules:
 *   - bf16 is the upper half of an fp32. fp32 -> bf16 rounds to nearest, ties to even;
 *     NaN stays NaN (made quiet, sign kept); +-inf stay +-inf; a finite value that rounds past
 *     the largest bf16 becomes inf, as in IEEE arithmetic.
 *   - E2M1 (FP4): codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign (0x8 is -0).
 *   - E8M0: byte b is 2^(b-127); b = 0 is 2^-127 (an fp32 subnormal, not zero); 0xFF is NaN.
 *   - E4M3 (float8_e4m3fn): sign bit 7, exponent bits 6..3 with bias 7, mantissa bits 2..0;
 *     exponent 0 is subnormal, (m/8) * 2^-6; 0x7F and 0xFF are NaN (no inf); largest 448.
 *   - MXFP4: one E8M0 scale per 32 consecutive elements along the reduction dimension; two
 *     codes per byte, element 2k in the low nibble, element 2k+1 in the high nibble.
 *   - NVFP4: the same codes and packing, one E4M3 scale per 16 elements, and one fp32 scale2
 *     per expert that multiplies the block dot products (not part of the row decode here).
 *   - Every decode is exact in fp32: decoding never adds error (an E2M1 value has at most two
 *     significant bits, an E4M3 one at most four, and their product stays in fp32's range).
 *
 * A block format is a block size, a scale decoder and an element decoder: moe_block_format.
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

/* fp32 -> nearest bf16 -> fp32: "rounded to bf16" in the contract's precision contracts. */
static inline float moe_round_bf16(float f) { return moe_bf16_to_f32(moe_f32_to_bf16(f)); }

/* 2^k exactly for -10 <= k <= 5 (the E4M3 exponents). */
static inline float moe_e4m3_pow2(int k) {
    uint32_t u = (uint32_t)(127 + k) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

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

/* Exactly; 0x7F and 0xFF are NaN. */
static inline float moe_e4m3_to_f32(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7Fu) == 0x7Fu) {
        const uint32_t qnan = 0x7fc00000u;
        float f;
        memcpy(&f, &qnan, sizeof f);
        return f;
    }
    /* subnormal (m/8) 2^-6, normal (1 + m/8) 2^(e-7): both m * 2^-9 or (8 + m) * 2^(e-10) */
    float v = e == 0 ? (float)m * 0x1.0p-9f : (float)(8 + m) * moe_e4m3_pow2(e - 10);
    return (b & 0x80u) ? -v : v;
}

/* Largest E8M0 byte for which code magnitude m_max (in units of E2M1, at most 6) times the
 * scale is finite in fp32. */
int moe_e8m0_max_finite_byte(float code_magnitude_max);

/* Decodes n elements of one MXFP4 row: packed [n/2] bytes, scales [n/32] E8M0 bytes,
 * out [n] fp32. n must be a multiple of 32. */
void moe_mxfp4_decode_row(const uint8_t *packed, const uint8_t *scales, int n, float *out);

/* The description of a block-scaled 4-bit format: enough for decoding and validation. */
typedef struct moe_block_format_s {
    const char *name;
    int block;                        /* elements per scale */
    float (*element)(uint8_t code);   /* 4-bit code -> value */
    float (*scale)(uint8_t byte);     /* scale byte -> multiplier (NaN if invalid) */
    const char *scale_name;           /* "E8M0", "E4M3": for messages */
} moe_block_format;

extern const moe_block_format moe_format_mxfp4;
extern const moe_block_format moe_format_nvfp4;

/* Decodes n elements of one row of format f: packed [n/2] bytes, scales [n/f->block],
 * out [n] fp32 = code * scale (NVFP4's scale2 is not applied). n a multiple of f->block. */
void moe_block_decode_row(const moe_block_format *f, const uint8_t *packed,
                          const uint8_t *scales, int n, float *out);

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
