/* Chapter 03 as a library: softmax over the channels of an NCHW tensor, forward and backward,
 * on the chapter's best rung for the shape, dtype and GPU (api.cu says which, and why).
 *
 * Forward y = softmax(x) over C at every (n, h, w); backward dx = y * (dy - sum_c dy * y),
 * from the forward's output y. Pointers are device pointers of type t (DT_FP32, or DT_FP16
 * with fp32 arithmetic), the call is asynchronous on stream s. workspace is device memory of
 * softmax_workspace_bytes(d, t) bytes, zeroed (cudaMemset) before its first use; every call
 * leaves it zeroed again. Calls that may run at the same time (on two streams) need a
 * workspace each; calls in one stream, or captured into one graph in order, may share one. */
#ifndef SOFTMAX_API_H
#define SOFTMAX_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An NCHW tensor. A "row" is the C values at one (n, h, w): they lie H*W elements apart. */
struct softmax_dims {
    int64_t n, c, h, w;
};

size_t softmax_workspace_bytes(struct softmax_dims d, enum dtype t);

void softmax_forward(const void *x, void *y, struct softmax_dims d, enum dtype t,
                     void *workspace, cudaStream_t s);
void softmax_backward(const void *y, const void *dy, void *dx, struct softmax_dims d,
                      enum dtype t, void *workspace, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
