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
 * The saved argmax comes in two forms, and each rung says which it reads or writes:
 *  - "plane index" (int32): h W + w, the position in the (n, c) plane of x. Four bytes an
 *    output, as frameworks keep it (PyTorch: eight).
 *  - "window index" (uint8): r KW + q, the position inside the window. One byte an output,
 *    enough for windows of up to 255 elements (MAXPOOL_MAX_WINDOW: 0xff, the harness's poison
 *    for unwritten outputs, is never a valid index).
 * The forward pass writes y and both forms (a rung that computes only one leaves the other to
 * a cheap conversion kernel that the forward rungs share, maxpool_plane_to_window, so that
 * every rung's outputs can be checked); the backward pass reads dy and one form, and the vendor
 * reads x, y and dy instead, as cuDNN does. */
#ifndef MAXPOOL_H
#define MAXPOOL_H

#include <stdint.h>

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAXPOOL_MAX_WINDOW 255 /* window positions; 0xff marks an index never written */

struct maxpool_dims {
    int64_t n, c, h, w;   /* x */
    int64_t kh, kw, s, p; /* window, stride, padding (the same along both axes) */
    int64_t oh, ow;       /* y */
};

/* Forward: x -> y, plane_idx (int32) and window_idx (uint8), each n c oh ow elements. */
#define MAXPOOL_FORWARD(v)                                                                     \
    void maxpool_forward_##v(const void *x, void *y, int32_t *plane_idx, uint8_t *window_idx,  \
                             struct maxpool_dims d, enum dtype t, cudaStream_t s);
/* Backward: dy and the argmax -> dx (n c h w elements, every one written). */
#define MAXPOOL_BACKWARD(v)                                                                    \
    void maxpool_backward_##v(const void *dy, const int32_t *plane_idx,                        \
                              const uint8_t *window_idx, void *dx, struct maxpool_dims d,      \
                              enum dtype t, cudaStream_t s);
MAXPOOL_FORWARD(v1)
MAXPOOL_FORWARD(v2)
MAXPOOL_FORWARD(v3) /* v2's forward */
MAXPOOL_BACKWARD(v1)
MAXPOOL_BACKWARD(v2)
MAXPOOL_BACKWARD(v3)
#undef MAXPOOL_FORWARD
#undef MAXPOOL_BACKWARD

/* The vendor: cuDNN's max pooling (deterministic). Its backward reads x, y and dy. */
void maxpool_forward_vendor(const void *x, void *y, int32_t *plane_idx, uint8_t *window_idx,
                            struct maxpool_dims d, enum dtype t, cudaStream_t s);
void maxpool_backward_vendor(const void *x, const void *y, const void *dy, void *dx,
                             struct maxpool_dims d, enum dtype t, cudaStream_t s);

/* window_idx from plane_idx, for forward rungs that compute only the plane index. */
void maxpool_plane_to_window(const int32_t *plane_idx, uint8_t *window_idx,
                             struct maxpool_dims d, cudaStream_t s);

/* The classroom kernel (exercise.cu): the forward in fp32, y and the plane index (main.cu
 * derives the window index from it). */
void maxpool_forward_exercise(const float *x, float *y, int32_t *plane_idx,
                              struct maxpool_dims d, cudaStream_t s);

/* The CPU reference (reference.c), reading x through load_as_double. */
void maxpool_forward_reference(const void *x, enum dtype t, struct maxpool_dims d, double *y,
                               int32_t *plane_idx, uint8_t *window_idx);
/* dx from dy (as doubles) and plane indices: a scatter, in output order. */
void maxpool_backward_reference(const double *dy, const int32_t *plane_idx,
                                struct maxpool_dims d, double *dx);

/* The output size and checks: 0, or -1 with a one-line reason. */
int maxpool_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                    int64_t s, int64_t p, struct maxpool_dims *d, char *why, size_t why_len);

extern const struct chapter maxpool_chapter;

#ifdef __cplusplus
}
#endif
#endif
