/* Chapter 09 as a library: the convolution's weight gradient, and optionally its bias gradient,
 * NCHW, for every shape chapter 07's forward takes, on the chapter's best rung for the shape and
 * dtype (api.cu says which, and why).
 *
 *   dw[k, c, r, s] = sum over n, p, q of dy[n, k, p, q] x[n, c, p stride + r - pad,
 *                                                          q stride + s - pad]
 *   db[k]          = sum over n, p, q of dy[n, k, p, q]
 *
 * with x read as 0 outside its H x W plane: the d of conv2d_dims_of describes the forward, x is
 * N x C x H x W, dy is N x K x P x Q, dw is K x C x R x S and db has K elements, all packed.
 * db may be NULL (no bias). Pointers are device pointers of type t (DT_FP32, or DT_FP16
 * storage with fp32 sums). The workspace is conv2d_backward_weight_workspace_bytes(d, t) bytes
 * of device memory (NULL where that is 0), owned by the caller, aligned as cudaMalloc aligns
 * it and zeroed (cudaMemset) before its first use; a call leaves its counters (its first
 * 16 KiB) zeroed again, the sums before them being scratch. Calls are
 * asynchronous on stream s; calls on several streams at once need a workspace each, calls in
 * one stream, or captured into one graph in order, may share one. The sums' order is fixed, so
 * the same inputs give the same bits on every call. */
#ifndef CONV2D_BACKWARD_WEIGHT_API_H
#define CONV2D_BACKWARD_WEIGHT_API_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "07-conv-forward/api.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of workspace conv2d_backward_weight needs for d and t (with or without db). */
size_t conv2d_backward_weight_workspace_bytes(struct conv2d_dims d, enum dtype t);

/* x and dy -> dw and, where db is not NULL, db. */
void conv2d_backward_weight(const void *x, const void *dy, void *dw, void *db,
                            struct conv2d_dims d, enum dtype t, void *workspace,
                            cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
