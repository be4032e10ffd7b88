/* cuda_stub.c: the "cuda" backend in a build made without nvcc: known by name, never
 * available, with the reason. */
#include "../../common/moe.h"

#include <stdio.h>

static bool stub_available(char *why, size_t why_len) {
    snprintf(why, why_len, "built without the CUDA toolkit (nvcc not found at build time)");
    return false;
}

const moe_backend moe_backend_cuda = {"cuda", "CUDA path (not built)", stub_available,
                                      NULL, NULL, NULL, NULL, NULL, NULL};
const moe_backend moe_backend_cuda_wmma = {"cuda-wmma", "CUDA path, tensor-core experts (not built)",
                                           stub_available, NULL, NULL, NULL, NULL, NULL, NULL};
const moe_backend moe_backend_cuda_gemv = {"cuda-gemv", "CUDA path, GEMV experts (not built)",
                                           stub_available, NULL, NULL, NULL, NULL, NULL, NULL};
const moe_backend moe_backend_cuda_mma = {"cuda-mma", "CUDA path, mma experts (not built)",
                                          stub_available, NULL, NULL, NULL, NULL, NULL, NULL};
const moe_backend moe_backend_cuda_wgmma = {"cuda-wgmma", "CUDA path, wgmma experts (not built)",
                                            stub_available, NULL, NULL, NULL, NULL, NULL, NULL};
