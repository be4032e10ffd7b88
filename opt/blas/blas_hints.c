/*
 * blas_hints.c: the OpenBLAS path's tiling and threshold constants as shape hints (moe.h), from
 * their one declaration in blas_internal.h. Built with and without OpenBLAS.
 */
#include "blas_internal.h"

#include <stddef.h>

#define BLAS_AS_HINT(name, kind, value, why) {#name, kind, value, why},
const moe_shape_hint blas_shape_hints[] = {BLAS_SHAPE_CONSTANTS(BLAS_AS_HINT){NULL, 0, 0, NULL}};
#undef BLAS_AS_HINT
