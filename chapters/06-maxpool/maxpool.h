/* Chapter 06, max pooling: 2D, NCHW, any window, stride and padding, forward and backward.
 *
 *   y[n, c, i, j] = max over the window rows i S - P .. i S - P + KH - 1 and columns
 *                   j S - P .. j S - P + KW - 1 that lie inside x (padding never wins)
 *   dx[n, c, h, w] = sum of dy[n, c, i, j] over the windows whose argmax is (h, w)
 *
 * with OH = (H + 2 P - KH) / S + 1 and OW = (W + 2 P - KW) / S + 1 (floor), P < KH and P < KW, so
 * every window holds at least one element of x. The argmax is the first maximum in row-major
 * window order; a NaN in the window wins (the first NaN), so NaN propagates to y and its
 * gradient goes to the NaN's position.
 *
 * The saved argmax is the winner's position inside its window, r KW + q, packed in as few bits
 * as the window needs (maxpool_argmax_bits): 2 bits for windows of up to 4 positions (2x2), 4
 * for up to 16 (3x3, 4x4), 8 beyond, up to 255 positions (MAXPOOL_MAX_WINDOW). Output o's field
 * lies at bit (o % per_byte) bits of byte o / per_byte, per_byte = 8 / bits, counting outputs
 * in NCHW order; the unused high bits of the last byte are 0. At 2x2 that is a quarter of a
 * byte an output, against the 4-byte plane index (h W + w) frameworks keep (PyTorch: 8).
 * The forward writes y and the packed argmax; the backward reads dy and the argmax, and the
 * vendor reads x, y and dy instead, as cuDNN does. */
#ifndef MAXPOOL_H
#define MAXPOOL_H

#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward: x -> y (n c oh ow elements) and the packed argmax (maxpool_argmax_bytes). */
#define MAXPOOL_FORWARD(v)                                                                     \
    void maxpool_forward_##v(const void *x, void *y, uint8_t *argmax, struct maxpool_dims d,   \
                             enum dtype t, cudaStream_t s);
/* Backward: dy and the packed argmax -> dx (n c h w elements, every one written). */
#define MAXPOOL_BACKWARD(v)                                                                    \
    void maxpool_backward_##v(const void *dy, const uint8_t *argmax, void *dx,                 \
                              struct maxpool_dims d, enum dtype t, cudaStream_t s);
MAXPOOL_FORWARD(v1)
MAXPOOL_FORWARD(v2)
MAXPOOL_FORWARD(v3) /* v2's forward */
MAXPOOL_FORWARD(v4)
MAXPOOL_BACKWARD(v1)
MAXPOOL_BACKWARD(v2)
MAXPOOL_BACKWARD(v3)
MAXPOOL_BACKWARD(v4)
#undef MAXPOOL_FORWARD
#undef MAXPOOL_BACKWARD

/* The vendor: cuDNN's max pooling (deterministic). Its forward writes y alone (cuDNN keeps no
 * argmax); its backward reads x, y and dy. */
void maxpool_forward_vendor(const void *x, void *y, struct maxpool_dims d, enum dtype t,
                            cudaStream_t s);
void maxpool_backward_vendor(const void *x, const void *y, const void *dy, void *dx,
                             struct maxpool_dims d, enum dtype t, cudaStream_t s);

/* The classroom kernel (exercise.cu): the forward in fp32. */
void maxpool_forward_exercise(const float *x, float *y, uint8_t *argmax, struct maxpool_dims d,
                              cudaStream_t s);

/* The CPU reference (reference.c), reading x through load_as_double. */
void maxpool_forward_reference(const void *x, enum dtype t, struct maxpool_dims d, double *y,
                               int32_t *plane_idx, uint8_t *window_idx);
/* The window positions (one byte an output, as the reference writes them) packed as the
 * forward stores them: maxpool_argmax_bytes(d) bytes. */
void maxpool_pack_argmax(const uint8_t *window_idx, struct maxpool_dims d, uint8_t *packed);
/* dx from dy (as doubles) and plane indices: a scatter, in output order. */
void maxpool_backward_reference(const double *dy, const int32_t *plane_idx,
                                struct maxpool_dims d, double *dx);

extern const struct chapter maxpool_chapter;

#ifdef __cplusplus
}
#endif
#endif
