/* Chapter 05 as a library: C = op(A) op(B), row-major, any M, N, K, on the chapter's best rung
 * for the shape, dtype and GPU (api.cu says which, and why). M or N of 0 writes nothing; K of 0
 * makes C zeros.
 *
 * C is m x n. MATMUL_AB: A is m x k, B k x n. MATMUL_ATB: C = A^T B with A stored k x m (the
 * weight gradient's shape). MATMUL_ABT: C = A B^T with B stored n x k (the input gradient's).
 * a, b and c are device pointers of type t (DT_FP32, or DT_FP16 with fp32 accumulation); the
 * call is asynchronous on stream s. There is no workspace and no state that changes results
 * between calls, so calls on several streams at once, or captured into one CUDA graph, are
 * safe. */
#ifndef MATMUL_API_H
#define MATMUL_API_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct matmul_dims {
    int64_t m, n, k;
};

enum matmul_form { MATMUL_AB, MATMUL_ATB, MATMUL_ABT };

void matmul(enum matmul_form form, const void *a, const void *b, void *c, struct matmul_dims d,
            enum dtype t, cudaStream_t s);

/* C = A B on rung v3 alone, 16 x 16 shared-memory tiles, whatever the shape: the reference
 * report's method, which the convolution chapters time as their im2col rung's product. */
void matmul_v3(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t,
               cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
