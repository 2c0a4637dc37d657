/* Chapter 07, convolution forward: y = act(conv(x, w) + b), NCHW, any filter, stride and
 * padding (api.h has the formula and the layouts).
 *
 * Every rung has the same launcher: device pointers, the dims, the activation, the dtype, the
 * workspace and the stream. The workspace is conv2d_rung_workspace_bytes(d, t) bytes, the most
 * any rung needs (the column matrix of v2 and v3, the transformed filters of v6), laid out by
 * each rung from its start; rungs that need none ignore it. A rung that cannot take a shape
 * says why in conv2d_forward_vK_unsupported (NULL: it can), and main.cu lists it as
 * unsupported there. */
#ifndef CONV2D_H
#define CONV2D_H

#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CONV2D_FORWARD(v)                                                                      \
    void conv2d_forward_##v(const void *x, const void *w, const void *bias, void *y,           \
                            struct conv2d_dims d, enum conv2d_activation act, enum dtype t,    \
                            void *workspace, cudaStream_t s);
CONV2D_FORWARD(v1)
CONV2D_FORWARD(v2)
CONV2D_FORWARD(v3)
CONV2D_FORWARD(v4)
CONV2D_FORWARD(v5)
CONV2D_FORWARD(v6)
CONV2D_FORWARD(v7)
#undef CONV2D_FORWARD

/* NULL where the rung takes d in dtype t, else why not. */
const char *conv2d_forward_im2col_unsupported(struct conv2d_dims d, enum dtype t); /* v2, v3 */
const char *conv2d_forward_v5_unsupported(struct conv2d_dims d, enum dtype t);
const char *conv2d_forward_v6_unsupported(struct conv2d_dims d, enum dtype t);
const char *conv2d_forward_v7_unsupported(struct conv2d_dims d, enum dtype t);

/* Workspace bytes of the rungs that need one; conv2d_rung_workspace_bytes is their maximum. */
size_t conv2d_im2col_workspace_bytes(struct conv2d_dims d, enum dtype t); /* v2, v3 */
size_t conv2d_winograd_workspace_bytes(struct conv2d_dims d, enum dtype t); /* v6 */
size_t conv2d_rung_workspace_bytes(struct conv2d_dims d, enum dtype t);

/* The vendor: cuDNN's fastest algorithm for the shape (cudnnFindConvolutionForwardAlgorithm,
 * within its own workspace), then cudnnAddTensor for the bias, on NCHW tensors. vendor_nhwc is
 * the same call on NHWC x and y and KRSC w (fp16 only), the chapter's fwd_nhwc pass. The
 * launchers note the algorithm's name, which the table prints as what ran. */
void conv2d_forward_vendor(const void *x, const void *w, const void *bias, void *y,
                           struct conv2d_dims d, enum dtype t, cudaStream_t s);
void conv2d_forward_vendor_nhwc(const void *x_nhwc, const void *w_krsc, const void *bias,
                                void *y_nhwc, struct conv2d_dims d, enum dtype t,
                                cudaStream_t s);
/* NULL where cuDNN takes d (int dimensions), else why not. */
const char *conv2d_vendor_unsupported(struct conv2d_dims d);

/* The classroom kernel (exercise.cu): the implicit GEMM's gather, fp32. */
void conv2d_forward_exercise(const float *x, const float *w, const float *bias, float *y,
                             struct conv2d_dims d, cudaStream_t s);

/* The CPU reference (reference.c), reading x, w and b (NULL: none) through load_as_double and
 * accumulating in double: every output, or, with `every` > 1, the outputs whose NKPQ index is a
 * multiple of `every` (the others left as they are), for shapes whose full reference would take
 * minutes. */
void conv2d_forward_reference(const void *x, const void *w, const void *bias, enum dtype t,
                              struct conv2d_dims d, enum conv2d_activation act, int64_t every,
                              double *y);

extern const struct chapter conv2d_chapter;

#ifdef __cplusplus
}
#endif
#endif
