/* numeric.c: MXFP4 and NVFP4 decoding and the counter-based generator (rules in numeric.h). */
#include "numeric.h"

#include <math.h>

int moe_e8m0_max_finite_byte(float code_magnitude_max) {
    /* weight = m * 2^(b-127); the largest b with a finite product. */
    int b = 254;
    while (b > 0 && !isfinite(code_magnitude_max * moe_e8m0_to_f32((uint8_t)b))) b--;
    return b;
}

void moe_mxfp4_decode_row(const uint8_t *packed, const uint8_t *scales, int n, float *out) {
    for (int c = 0; c < n; c++) {
        uint8_t byte = packed[c / 2];
        uint8_t code = (c % 2 == 0) ? (uint8_t)(byte & 0x0Fu) : (uint8_t)(byte >> 4);
        out[c] = moe_e2m1_to_f32(code) * moe_e8m0_to_f32(scales[c / 32]);
    }
}

static float e2m1_element(uint8_t code) { return moe_e2m1_to_f32(code); }
static float e8m0_scale(uint8_t byte) { return moe_e8m0_to_f32(byte); }
static float e4m3_scale(uint8_t byte) { return moe_e4m3_to_f32(byte); }

const moe_block_format moe_format_mxfp4 = {"MXFP4", 32, e2m1_element, e8m0_scale, "E8M0"};
const moe_block_format moe_format_nvfp4 = {"NVFP4", 16, e2m1_element, e4m3_scale, "E4M3"};

void moe_block_decode_row(const moe_block_format *f, const uint8_t *packed,
                          const uint8_t *scales, int n, float *out) {
    for (int c = 0; c < n; c++) {
        uint8_t byte = packed[c / 2];
        uint8_t code = (c % 2 == 0) ? (uint8_t)(byte & 0x0Fu) : (uint8_t)(byte >> 4);
        out[c] = f->element(code) * f->scale(scales[c / f->block]);
    }
}

/* splitmix64's finaliser, applied twice over a mix of the three words: a bijective scramble
 * whose outputs pass the usual statistical batteries for such counter generators. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t moe_rng_hash(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (stream * 0xd6e8feb86659fd93ull));
    return mix64(h ^ (counter * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
}

uint64_t moe_rng_next(moe_rng *r) { return moe_rng_hash(r->seed, r->stream, r->counter++); }

double moe_rng_uniform(moe_rng *r) { return (double)(moe_rng_next(r) >> 11) * 0x1.0p-53; }

double moe_rng_normal(moe_rng *r) {
    double u1 = moe_rng_uniform(r), u2 = moe_rng_uniform(r);
    if (u1 < 0x1.0p-60) u1 = 0x1.0p-60; /* log(0) guard */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int moe_rng_int(moe_rng *r, int lo, int hi) {
    uint64_t span = (uint64_t)((int64_t)hi - (int64_t)lo + 1);
    /* in 64 bits: lo + offset may pass through values an int cannot hold (lo = INT_MIN) */
    return (int)((int64_t)lo + (int64_t)(moe_rng_next(r) % span)); /* bias below 2^-32 here */
}
