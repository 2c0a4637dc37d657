/* Chapter 08, the convolution's input gradient: dx = conv^T(dy, w), NCHW, every shape chapter
 * 07 takes (api.h has the formula and the layouts).
 *
 * Every rung has the same launcher: device pointers, the dims of the forward, the dtype, the
 * workspace and the stream. The workspace is dgrad_rung_workspace_bytes(d, t) bytes, the most
 * any rung needs (v2's and v3's column matrix, v5's flipped filters and chapter 07's own
 * workspace), laid out by each rung from its start; rungs that need none ignore it. A
 * rung that cannot take a shape says why in dgrad_vK_unsupported (NULL: it can). */
#ifndef DGRAD_H
#define DGRAD_H

#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DGRAD(v)                                                                               \
    void dgrad_##v(const void *dy, const void *w, void *dx, struct conv2d_dims d, enum dtype t, \
                   void *workspace, cudaStream_t s);
DGRAD(v1)
DGRAD(v2)
DGRAD(v3)
DGRAD(v4)
DGRAD(v5)
DGRAD(v6)
DGRAD(v7)
#undef DGRAD

/* NULL where the rung takes d in dtype t, else why not. */
const char *dgrad_col2im_unsupported(struct conv2d_dims d, enum dtype t); /* v2, v3 */
const char *dgrad_v5_unsupported(struct conv2d_dims d, enum dtype t);
const char *dgrad_v6_unsupported(struct conv2d_dims d, enum dtype t);
const char *dgrad_v7_unsupported(struct conv2d_dims d, enum dtype t);

/* Workspace bytes of the rungs that need one; dgrad_rung_workspace_bytes is their maximum. */
size_t dgrad_col2im_workspace_bytes(struct conv2d_dims d, enum dtype t); /* v2, v3 */
size_t dgrad_v5_workspace_bytes(struct conv2d_dims d, enum dtype t);
size_t dgrad_rung_workspace_bytes(struct conv2d_dims d, enum dtype t);

/* The vendor: cudnnConvolutionBackwardData with the fastest algorithm
 * cudnnFindConvolutionBackwardDataAlgorithmEx returns, on NCHW tensors; vendor_nhwc the same
 * call on NHWC dy and dx and KRSC w (fp16 only), the chapter's bwd_nhwc pass. The launchers
 * note the algorithm's name, which the table prints as what ran. */
void dgrad_vendor(const void *dy, const void *w, void *dx, struct conv2d_dims d, enum dtype t,
                  cudaStream_t s);
void dgrad_vendor_nhwc(const void *dy_nhwc, const void *w_krsc, void *dx_nhwc,
                       struct conv2d_dims d, enum dtype t, cudaStream_t s);
/* NULL where cuDNN takes d (int dimensions), else why not. */
const char *dgrad_vendor_unsupported(struct conv2d_dims d);

/* The classroom kernel (exercise.cu): the direct gather's index test, fp32. */
void dgrad_exercise(const float *dy, const float *w, float *dx, struct conv2d_dims d,
                    cudaStream_t s);

/* The CPU reference (reference.c), reading dy and w through load_as_double and accumulating in
 * double: every element of dx, or, with `every` > 1, the elements whose NCHW index is a
 * multiple of `every` (the others left as they are). */
void dgrad_reference(const void *dy, const void *w, enum dtype t, struct conv2d_dims d,
                     int64_t every, double *dx);

extern const struct chapter dgrad_chapter;

#ifdef __cplusplus
}
#endif
#endif
