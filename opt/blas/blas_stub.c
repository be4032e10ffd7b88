/* blas_stub.c: the "blas" backend in a build made without OpenBLAS: known by name, never
 * available, with the reason. */
#include "blas_internal.h"

#include <stdio.h>

static bool stub_available(char *why, size_t why_len) {
    snprintf(why, why_len, "built without OpenBLAS (install libopenblas-dev and rebuild)");
    return false;
}

const moe_backend moe_backend_blas = {"blas", "OpenBLAS CPU path (not built)", stub_available,
                                      NULL, NULL, NULL, NULL, NULL,
                                      blas_shape_hints};
