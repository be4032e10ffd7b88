/* host_copy.c: large host copies over a few OpenMP threads (rules in host_copy.h). */
#include "host_copy.h"

#include "numeric.h"

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_STREAMING_STORES 1
#endif

#define COPY_PIECE_ALIGN ((size_t)4096)
#define COPY_PIECE_MIN ((size_t)64 << 10) /* smaller pieces cost more in hand-outs than they save */

int moe_copy_threads(void) {
    const int n = omp_get_max_threads();
    return n < 1 ? 1 : n > MOE_COPY_MAX_THREADS ? MOE_COPY_MAX_THREADS : n;
}

/* One thread's piece: on x86-64 by non-temporal stores, so the destination's lines are not
 * read before they are written (a third less memory traffic than ordinary stores; glibc's
 * memcpy streams only pieces larger than a share of the last-level cache, and a team's pieces
 * are smaller). Measured on the staging copies: docs/device-notes.md. */
static void copy_piece(char *d, const char *s, size_t n) {
#ifdef HAVE_STREAMING_STORES
    if (n >= 4096) {
        const size_t head = (16 - ((uintptr_t)d & 15u)) & 15u;
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        const size_t body = n & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
            const __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
            const __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_stream_si128((__m128i *)(d + i), a);
            _mm_stream_si128((__m128i *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(d + i + 48), e);
        }
        _mm_sfence(); /* the stores are seen by whoever reads after the piece */
        memcpy(d + body, s + body, n - body);
        return;
    }
#endif
    memcpy(d, s, n);
}

/* n bf16 patterns -> fp32, by non-temporal stores where dst can be aligned (as copy_piece). */
static void widen_piece(float *d, const uint16_t *s, size_t n) {
    size_t i = 0;
#ifdef HAVE_STREAMING_STORES
    if (((uintptr_t)d & 3u) == 0) {
        for (; i < n && ((uintptr_t)(d + i) & 15u); i++) d[i] = moe_bf16_to_f32(s[i]);
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
            _mm_stream_si128((__m128i *)(d + i), _mm_unpacklo_epi16(zero, v));
            _mm_stream_si128((__m128i *)(d + i + 4), _mm_unpackhi_epi16(zero, v));
        }
        _mm_sfence();
    }
#endif
    for (; i < n; i++) d[i] = moe_bf16_to_f32(s[i]);
}

/* One job's units [at, at + n): bytes of a copy, or elements of a widening. */
typedef struct {
    char *dst;
    const char *src;
    bool widen;
} piece_job;

static void run_piece(const piece_job *j, size_t at, size_t n) {
    if (j->widen)
        widen_piece((float *)j->dst + at, (const uint16_t *)j->src + at, n);
    else
        copy_piece(j->dst + at, j->src + at, n);
}

/* Units [0, total) in pieces of `piece` (the last one shorter) over at most `threads`
 * threads, taken as they come free. */
static void run_pieces(const piece_job *j, size_t total, size_t piece, int threads) {
    if (total == 0) return;
    if (piece == 0) piece = total;
    const size_t pieces = (total + piece - 1) / piece;
    if (threads <= 1 || pieces <= 1 || omp_in_parallel()) {
        for (size_t i = 0; i < pieces; i++) {
            const size_t at = i * piece;
            run_piece(j, at, total - at < piece ? total - at : piece);
        }
        return;
    }
    const int team = (size_t)threads < pieces ? threads : (int)pieces;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (long i = 0; i < (long)pieces; i++) {
        const size_t at = (size_t)i * piece;
        run_piece(j, at, total - at < piece ? total - at : piece);
    }
}

/* The piece of a split job of `bytes` bytes: about four a thread (so a thread the system
 * holds up delays one piece, not a share: with one equal share a thread the T = 4096 host call
 * took 7.2-10.0 ms in seven runs, with these pieces 7.30 ms in two, docs/device-notes.md), at
 * least COPY_PIECE_MIN, a multiple of COPY_PIECE_ALIGN; `bytes` itself below the split. */
static size_t split_piece(size_t bytes, int threads) {
    if (threads <= 1 || bytes < MOE_COPY_SPLIT_MIN) return bytes ? bytes : 1;
    size_t piece = (bytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    piece = piece < COPY_PIECE_MIN ? COPY_PIECE_MIN : piece;
    return (piece + COPY_PIECE_ALIGN - 1) / COPY_PIECE_ALIGN * COPY_PIECE_ALIGN;
}

void moe_copy_parallel(void *dst, const void *src, size_t bytes, int threads) {
    const piece_job j = {(char *)dst, (const char *)src, false};
    run_pieces(&j, bytes, split_piece(bytes, threads), threads);
}

void moe_widen_bf16_parallel(float *dst, const uint16_t *src, size_t n, int threads) {
    const piece_job j = {(char *)dst, (const char *)src, true};
    /* pieces cut on dst's bytes (a multiple of 4096 each): whole 4-byte elements */
    run_pieces(&j, n, split_piece(n * sizeof(float), threads) / sizeof(float), threads);
}
