/*
 * host_copy.h: large host copies split over a few OpenMP threads: a plain copy and a
 * bf16 -> fp32 widening.
 *
 * Why: one core's memcpy moves a few GB/s on a server, under what the bus moves from pinned
 * memory. The CUDA path's host call stages x and out through pinned buffers
 * (opt/cuda/cuda_backend.cu), and at T = 4096 on Inkling-Small (33.5 MB in, 33.5 MB of bf16
 * out widened to 67 MB of fp32) the host's copies are most of what the call adds to the layer
 * (docs/perf-cuda.md).
 *
 * Rules:
 *   - each result is the one a single thread gives (memcpy's; the widening is exact), whatever
 *     the thread count; dst and src must not overlap;
 *   - below MOE_COPY_SPLIT_MIN bytes, or threads <= 1, or inside a parallel region, the calling
 *     thread does the work alone: waking a team costs more than it saves on a small copy;
 *   - the work is cut into contiguous pieces taken by the threads as they come free, so a thread
 *     the system holds up delays one piece, not a share; on x86-64 a piece is written with
 *     non-temporal stores (host_copy.c says why) and fenced before the team's closing barrier,
 *     so whoever reads after the call (a DMA included) sees it;
 *   - OpenMP's team stays asleep between calls (libgomp), so a call pays no thread creation.
 */
#ifndef INKLING_HOST_COPY_H
#define INKLING_HOST_COPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_COPY_SPLIT_MIN ((size_t)256 << 10) /* bytes: below this one thread copies. The host
                                                  call's x at T = 64 (512 kB) took 52-58 us to
                                                  stage on one thread of an H100 host, 27 on a
                                                  team (docs/perf-cuda.md, fifty-eighth run) */
#define MOE_COPY_MAX_THREADS 8 /* threads of a large copy at most; OMP_NUM_THREADS lowers it.
                                  On a 16-core H200 host the host call at T = 4096 took 7.36-7.41
                                  ms with 8 threads, 7.30 with 16 (device-notes): half the cores
                                  give nearly all of it, and the rest stay free for the caller's
                                  threads and the CUDA driver's while the team spins down */

/* The threads a large copy uses here: min(MOE_COPY_MAX_THREADS, OpenMP's thread count). */
int moe_copy_threads(void);

/* memcpy(dst, src, bytes) over at most `threads` threads (rules above): about four pieces a
 * thread, none under 64 kB. */
void moe_copy_parallel(void *dst, const void *src, size_t bytes, int threads);

/* dst[i] = the fp32 number whose upper 16 bits are the bf16 pattern src[i] and whose lower 16
 * are 0 (exact: every bf16 value, NaN payloads and -0 included, widens to the same value),
 * n elements over at most `threads` threads, by the rules above (the split threshold counts
 * dst's bytes). */
void moe_widen_bf16_parallel(float *dst, const uint16_t *src, size_t n, int threads);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_HOST_COPY_H */
