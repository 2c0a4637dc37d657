/* Chapter 08 as a library: the convolution's input gradient, NCHW, for every shape chapter 07's
 * forward takes, on the chapter's best rung for the shape and dtype (api.cu says which, and why).
 *
 *   dx[n, c, h, w] = sum over k, r, s and the (p, q) with p stride + r - pad = h and
 *                    q stride + s - pad = w of dy[n, k, p, q] w[k, c, r, s]
 *
 * the transpose of chapter 07's conv2d_forward (without its bias and activation): the d of
 * conv2d_dims_of describes the forward, dy is N x K x P x Q, w is K x C x R x S and dx is
 * N x C x H x W, all packed. An input pixel no output window covers (past the last window, at
 * a stride that skips it) gets 0. Pointers are device pointers of type t (DT_FP32, or DT_FP16
 * storage with fp32 sums); the workspace is conv2d_backward_input_workspace_bytes(d, t) bytes
 * of device memory (NULL where that is 0), owned by the caller; calls are asynchronous on
 * stream s and keep no state, so calls on several streams at once (each with its own
 * workspace), or captured into one graph, are safe. */
#ifndef CONV2D_BACKWARD_INPUT_API_H
#define CONV2D_BACKWARD_INPUT_API_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "07-conv-forward/api.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of workspace conv2d_backward_input needs for d and t. */
size_t conv2d_backward_input_workspace_bytes(struct conv2d_dims d, enum dtype t);

/* dy and w -> dx = conv^T(dy, w). */
void conv2d_backward_input(const void *dy, const void *w, void *dx, struct conv2d_dims d,
                           enum dtype t, void *workspace, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
