/*
 * cuda_layer.h: the CUDA path's forward call for a caller whose tensors already live on the GPU,
 * as a serving engine's do. Exists only in builds made with nvcc (MOE_HAVE_CUDA); C and C++.
 * docs/cuda-path.md, "Tensors already on the device".
 *
 * Rules:
 *   - layer is a moe_layer made on a CUDA backend (cuda, cuda-wmma, cuda-gemv) without the
 *     strict non-finite policy (that policy reads x on the host); anything else is refused;
 *   - x_dev [T, D] bf16 and out_dev [T, D] fp32, row-major, are memory of the layer's device;
 *     out_dev receives what moe_layer_forward writes to out, bit for bit (the same kernels and
 *     cuBLASLt plans; an x_dev not 256-byte aligned is first copied on the device);
 *   - stream is the caller's: the layer's work starts after what the caller queued on it before
 *     the call, and what the caller queues on it after the call starts after the layer has
 *     written out_dev; the call returns without waiting. x_dev must stay unchanged until then;
 *   - stream NULL: x_dev must be complete when the call is made (nothing is queued on the legacy
 *     default stream, and the layer's streams do not wait for it); the call returns once
 *     out_dev holds the result;
 *   - calls on one layer run in call order; the first call at a T larger than any before
 *     allocates the workspace (waiting for the layer's earlier work), as moe_layer_forward does.
 */
#ifndef INKLING_CUDA_LAYER_H
#define INKLING_CUDA_LAYER_H

#include "../../common/moe.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

moe_status moe_cuda_forward_device(moe_layer *layer, int T, const uint16_t *x_dev,
                                   float *out_dev, cudaStream_t stream, moe_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_CUDA_LAYER_H */
