/* Chapter 06 as a library: 2D max pooling, NCHW, any window, stride and padding, forward and
 * backward, on the chapter's best rung for the shape and dtype (api.cu says which, and why).
 *
 *   y[n, c, i, j] = max over the window rows i S - P .. i S - P + KH - 1 and columns
 *                   j S - P .. j S - P + KW - 1 that lie inside x (padding never wins)
 *   dx[n, c, h, w] = sum of dy[n, c, i, j] over the windows whose argmax is (h, w)
 *
 * with OH = (H + 2 P - KH) / S + 1 and OW = (W + 2 P - KW) / S + 1 (floor), P < KH and P < KW, so
 * every window holds at least one element of x; maxpool_dims_of computes them and says what is
 * wrong with a shape. The forward saves each window's argmax packed in maxpool_argmax_bits bits
 * (maxpool_argmax_bytes in all, see maxpool.h for the layout); the backward reads it. Pointers
 * are device pointers of type t (DT_FP32, or DT_FP16); calls are asynchronous on stream s and
 * keep no state, so calls on several streams at once, or captured into one graph, are safe. */
#ifndef MAXPOOL_API_H
#define MAXPOOL_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAXPOOL_MAX_WINDOW 255 /* window positions: each fits an 8-bit field */

struct maxpool_dims {
    int64_t n, c, h, w;   /* x */
    int64_t kh, kw, s, p; /* window, stride, padding (the same along both axes) */
    int64_t oh, ow;       /* y */
    int argmax_bits;      /* 2, 4 or 8: bits of one packed argmax */
};

/* Bits of a packed argmax for windows of `positions` positions. */
static inline int maxpool_argmax_bits(int64_t positions)
{
    return positions <= 4 ? 2 : positions <= 16 ? 4 : 8;
}

/* Bytes of the packed argmax of all n c oh ow outputs. */
static inline int64_t maxpool_argmax_bytes(struct maxpool_dims d)
{
    return (d.n * d.c * d.oh * d.ow * d.argmax_bits + 7) / 8;
}

/* The output size and checks: 0, or -1 with a one-line reason. */
int maxpool_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                    int64_t s, int64_t p, struct maxpool_dims *d, char *why, size_t why_len);

/* x -> y (n c oh ow elements) and the packed argmax. */
void maxpool_forward(const void *x, void *y, uint8_t *argmax, struct maxpool_dims d,
                     enum dtype t, cudaStream_t s);

/* dy and the packed argmax -> dx (n c h w elements, every one written). */
void maxpool_backward(const void *dy, const uint8_t *argmax, void *dx, struct maxpool_dims d,
                      enum dtype t, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
