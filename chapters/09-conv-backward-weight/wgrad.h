/* Chapter 09, the convolution's weight gradient: dw = dy (x) x and db = sum dy, NCHW, every
 * shape chapter 07 takes (api.h has the formulas and the layouts).
 *
 * Every rung has the same launcher: device pointers, the dims of the forward, the dtype, the
 * workspace and the stream. db may be NULL (the bwd_weight pass); where it is not (the
 * bwd_weight_bias pass), a rung that does not fuse the bias sums it afterwards with chapter
 * 02's bias_grad, a second pass over dy, which is what fusing saves. The workspace is
 * wgrad_rung_workspace_bytes(d, t) bytes, zeroed before a rung's first launch, its counters
 * left zeroed by every rung: the split rungs' slice sums and arrival counters (wgrad.cuh),
 * or v2's columns, then chapter 02's workspace. A rung that cannot take a shape says why in
 * wgrad_vK_unsupported (NULL: it can). */
#ifndef WGRAD_H
#define WGRAD_H

#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WGRAD(v)                                                                               \
    void wgrad_##v(const void *x, const void *dy, void *dw, void *db, struct conv2d_dims d,     \
                   enum dtype t, void *workspace, cudaStream_t s);
WGRAD(v1)
WGRAD(v2)
WGRAD(v3)
WGRAD(v4)
WGRAD(v5)
WGRAD(v6)
WGRAD(v7)
WGRAD(2d_v1)
WGRAD(2d_v2)
WGRAD(2d_v3)
#undef WGRAD

/* NULL where the rung takes d in dtype t, else why not. */
const char *wgrad_v2_unsupported(struct conv2d_dims d, enum dtype t);
const char *wgrad_v4_unsupported(struct conv2d_dims d, enum dtype t);
const char *wgrad_v6_unsupported(struct conv2d_dims d, enum dtype t);
const char *wgrad_v7_unsupported(struct conv2d_dims d, enum dtype t);
const char *wgrad_2d_unsupported(struct conv2d_dims d, enum dtype t); /* 2d_v1 to 2d_v3 */

/* Workspace bytes: each rung's own part (laid out from the workspace's start), and the whole,
 * the largest own part followed by chapter 02's (wgrad_bias_workspace finds it). */
size_t wgrad_v2_workspace_bytes(struct conv2d_dims d, enum dtype t);
size_t wgrad_split_workspace_bytes(struct conv2d_dims d, enum dtype t); /* v3-v7, 2d_v3 */
size_t wgrad_rung_workspace_bytes(struct conv2d_dims d, enum dtype t);
void *wgrad_bias_workspace(void *workspace, struct conv2d_dims d, enum dtype t);

/* db by chapter 02's bias_grad (its workspace from wgrad_bias_workspace): the unfused rungs'. */
void wgrad_bias_unfused(const void *dy, void *db, struct conv2d_dims d, enum dtype t,
                        void *workspace, cudaStream_t s);

/* The vendor: cudnnConvolutionBackwardFilter with the fastest algorithm
 * cudnnFindConvolutionBackwardFilterAlgorithmEx returns, on NCHW tensors, then, where db is
 * not NULL, cudnnConvolutionBackwardBias; vendor_nhwc the same on NHWC x and dy and a KRSC dw
 * (fp16 only), the chapter's bwd_weight_nhwc pass. The launchers note the algorithm's name,
 * which the table prints as what ran. */
void wgrad_vendor(const void *x, const void *dy, void *dw, void *db, struct conv2d_dims d,
                  enum dtype t, cudaStream_t s);
void wgrad_vendor_nhwc(const void *x_nhwc, const void *dy_nhwc, void *dw_krsc,
                       struct conv2d_dims d, enum dtype t, cudaStream_t s);
/* NULL where cuDNN takes d (int dimensions), else why not. */
const char *wgrad_vendor_unsupported(struct conv2d_dims d);

/* The classroom kernel (exercise.cu): v1's sum for one weight, fp32, no bias. */
void wgrad_exercise(const float *x, const float *dy, float *dw, struct conv2d_dims d,
                    cudaStream_t s);

/* The CPU reference (reference.c), reading x and dy through load_as_double and accumulating in
 * double: every element of dw, or, with `every` > 1, the elements whose KCRS index is a
 * multiple of `every` (the others left as they are); and all of db where it is not NULL. */
void wgrad_reference(const void *x, const void *dy, enum dtype t, struct conv2d_dims d,
                     int64_t every, double *dw, double *db);

extern const struct chapter wgrad_chapter;

#ifdef __cplusplus
}
#endif
#endif
