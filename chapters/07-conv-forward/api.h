/* Chapter 07 as a library: 2D convolution forward, NCHW, any filter, stride and padding, with
 * the bias and an optional ReLU fused into the store, on the chapter's best rung for the shape
 * and dtype (api.cu says which, and why).
 *
 *   y[n, k, p, q] = act(b[k] + sum over c, r, s of
 *                       x[n, c, p stride + r - pad, q stride + s - pad] w[k, c, r, s])
 *
 * with x read as 0 outside its H x W plane, P = (H + 2 pad - R) / stride + 1 and
 * Q = (W + 2 pad - S) / stride + 1 (floor). x is N x C x H x W, w is K x C x R x S, b has K
 * elements (NULL: no bias), y is N x K x P x Q, all packed. act is the identity or ReLU.
 * conv2d_dims_of computes P and Q and says what is wrong with a shape. Pointers are device
 * pointers of type t (DT_FP32, or DT_FP16 storage with fp32 sums); the workspace is
 * conv2d_forward_workspace_bytes(d, t) bytes of device memory (NULL where that is 0), owned by
 * the caller; calls are asynchronous on stream s and keep no state, so calls on several streams
 * at once (each with its own workspace), or captured into one graph, are safe. */
#ifndef CONV2D_API_H
#define CONV2D_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every tensor (x, w, y) holds fewer elements than this, so that the kernels index in 32 bits
 * within a tensor (cuDNN takes int dimensions too). */
#define CONV2D_MAX_ELEMENTS (INT64_C(1) << 31)

struct conv2d_dims {
    int64_t n, c, h, w;  /* x: n images of c channels of h x w */
    int64_t k, r, s;     /* w: k filters of c x r x s */
    int64_t stride, pad; /* the same along both axes */
    int64_t p, q;        /* y: n x k x p x q */
};

enum conv2d_activation { CONV2D_LINEAR, CONV2D_RELU };

/* The output size and checks (every size at least 1, stride at least 1, padding at least 0,
 * the filter no larger than the padded input, every tensor within CONV2D_MAX_ELEMENTS): 0, or
 * -1 with a one-line reason. */
int conv2d_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
                   int64_t stride, int64_t pad, struct conv2d_dims *d, char *why, size_t why_len);

/* Bytes of workspace conv2d_forward needs for d and t (0 for most shapes). */
size_t conv2d_forward_workspace_bytes(struct conv2d_dims d, enum dtype t);

/* x, w and b (NULL: none) -> y = act(conv(x, w) + b). */
void conv2d_forward(const void *x, const void *w, const void *bias, void *y,
                    struct conv2d_dims d, enum conv2d_activation act, enum dtype t,
                    void *workspace, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
