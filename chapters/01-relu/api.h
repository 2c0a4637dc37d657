/* Chapter 01 as a library: ReLU forward and backward on the chapter's best rung for the size
 * and dtype (api.cu says which, and why).
 *
 * x, y, dy and dx are device pointers to d.n elements of type t (DT_FP32, or DT_FP16); the
 * call is asynchronous on stream s. There is no workspace and no state between calls, so calls
 * on several streams at once, or captured into one CUDA graph, are safe. */
#ifndef RELU_API_H
#define RELU_API_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relu_dims {
    size_t n; /* elements: ReLU is elementwise, so only their count matters */
};

/* y = max(x, 0) */
void relu_forward(const void *x, void *y, struct relu_dims d, enum dtype t, cudaStream_t s);

/* dx = dy where x > 0, else 0 */
void relu_backward(const void *x, const void *dy, void *dx, struct relu_dims d, enum dtype t,
                   cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
