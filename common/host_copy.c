/* host_copy.c: one large host copy over a few OpenMP threads (rules in host_copy.h). */
#include "host_copy.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_STREAMING_STORES 1
#endif

#define COPY_PIECE_ALIGN ((size_t)4096)
#define COPY_PIECE_MIN ((size_t)128 << 10) /* smaller pieces cost more in hand-outs than they save */

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
        _mm_sfence(); /* the stores are seen by whoever reads after the team's barrier */
        memcpy(d + body, s + body, n - body);
        return;
    }
#endif
    memcpy(d, s, n);
}

void moe_copy_parallel(void *dst, const void *src, size_t bytes, int threads) {
    if (threads <= 1 || bytes < MOE_COPY_SPLIT_MIN || omp_in_parallel()) {
        if (bytes) copy_piece((char *)dst, (const char *)src, bytes);
        return;
    }
    /* about four pieces a thread, handed out as threads come free: a thread that the system
     * holds up (the CUDA driver's own threads share the cores) no longer delays the copy by a
     * whole share. With one equal share a thread the T = 4096 host call took 7.2-10.0 ms in
     * seven runs, with these pieces 7.30 ms in two (docs/device-notes.md). */
    size_t piece = (bytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    piece = piece < COPY_PIECE_MIN ? COPY_PIECE_MIN : piece;
    piece = (piece + COPY_PIECE_ALIGN - 1) / COPY_PIECE_ALIGN * COPY_PIECE_ALIGN;
    const int pieces = (int)((bytes + piece - 1) / piece);
#pragma omp parallel for num_threads(pieces < threads ? pieces : threads) schedule(dynamic, 1)
    for (int i = 0; i < pieces; i++) {
        const size_t at = (size_t)i * piece, n = bytes - at < piece ? bytes - at : piece;
        copy_piece((char *)dst + at, (const char *)src + at, n);
    }
}
