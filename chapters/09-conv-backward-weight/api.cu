/* Chapter 09's entry point (api.h): the weight gradient, and the bias gradient where asked, on
 * the best rung for the shape, plus the workspace the rungs share.
 *
 * The rule (bench/results/h200/09-conv-backward-weight.csv, the H200, graph replay, cold L2):
 * - one channel and one filter (the 2D kernel): 2d_v3, one launch reading x and dy once;
 * - filters up to 3 x 3 with 4 channels or more and fewer than 1.6 G multiply-adds: v7, a
 *   thread's taps of 8 filters in registers, db fused. It is 2.6x faster than the split GEMMs
 *   at chapter 10's second layer at batch 32 (11.6 against 30.0 us) and still 1.2x at batch
 *   1024 (0.93 G multiply-adds: 130 against 153), but 1.4x slower at the seed (2.4 G: 334
 *   against 236), where its one block an SM runs out of issue slots and the GEMMs do not. At
 *   4 channels it beats v6 (2x4x32x32-8k3s1p1: 10.1 against 11.2 us);
 * - C <= 4 (chapter 10's first layer): v6, every sum of a filter in registers, db fused (v7's
 *   16-channel tiles would be mostly empty: 21.4 against 11.1 us at 32x1x28x28-16k3s1p1);
 * - otherwise the split implicit GEMM: v4's tensor cores in fp16 where it takes the shape,
 *   else v3's FMA; with db, v5, the same kernels summing db from the dy tiles they hold. */
#include "02-bias-grad/api.h"
#include "wgrad.cuh"

enum wgrad_rung { V3, V4, V5, V6, V7, V2D };

static enum wgrad_rung best_rung(struct conv2d_dims d, enum dtype t, bool with_bias)
{
    if (!wgrad_2d_unsupported(d, t))
        return V2D;
    const double macs = (double)d.k * d.c * d.r * d.s * d.n * d.p * d.q;
    if (d.c >= 4 && macs < 1.6e9 && !wgrad_v7_unsupported(d, t))
        return V7;
    if (!wgrad_v6_unsupported(d, t))
        return V6;
    if (with_bias)
        return V5;
    return t == DT_FP16 && !wgrad_v4_unsupported(d, t) ? V4 : V3;
}

extern "C" void conv2d_backward_weight(const void *x, const void *dy, void *dw, void *db,
                                       struct conv2d_dims d, enum dtype t, void *workspace,
                                       cudaStream_t s)
{
    switch (best_rung(d, t, db != NULL)) {
    case V3: wgrad_v3(x, dy, dw, db, d, t, workspace, s); break;
    case V4: wgrad_v4(x, dy, dw, db, d, t, workspace, s); break;
    case V5: wgrad_v5(x, dy, dw, db, d, t, workspace, s); break;
    case V6: wgrad_v6(x, dy, dw, db, d, t, workspace, s); break;
    case V7: wgrad_v7(x, dy, dw, db, d, t, workspace, s); break;
    case V2D: wgrad_2d_v3(x, dy, dw, db, d, t, workspace, s); break;
    }
}

/* The rungs' workspace: the split rungs' slices and counters, or v2's columns, whichever is
 * larger, then chapter 02's, for the rungs that sum db with bias_grad. */
static struct bias_grad_dims bias_dims(struct conv2d_dims d)
{
    const struct bias_grad_dims b = {d.n, d.k, d.p, d.q};
    return b;
}

static size_t own_bytes(struct conv2d_dims d, enum dtype t)
{
    const size_t split = wgrad_split_workspace_bytes(d, t), v2 = wgrad_v2_workspace_bytes(d, t);
    return wgrad_align(split > v2 ? split : v2);
}

extern "C" size_t wgrad_split_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    const size_t floats = (size_t)wgrad_slice_floats(d);
    return WGRAD_COUNTERS * sizeof(unsigned) +
           wgrad_align((size_t)wgrad_max_slices(d) * floats * sizeof(float));
}

extern "C" size_t wgrad_rung_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    return own_bytes(d, t) + bias_grad_workspace_bytes(bias_dims(d), t);
}

extern "C" void *wgrad_bias_workspace(void *workspace, struct conv2d_dims d, enum dtype t)
{
    return (char *)workspace + own_bytes(d, t);
}

extern "C" void wgrad_bias_unfused(const void *dy, void *db, struct conv2d_dims d, enum dtype t,
                                   void *workspace, cudaStream_t s)
{
    bias_grad(dy, db, bias_dims(d), t, wgrad_bias_workspace(workspace, d, t), s);
}

/* The library's own need: the rungs it calls use the split layout (and bias_grad none, since
 * v5, v6, v7 and 2d_v3 fuse db). */
extern "C" size_t conv2d_backward_weight_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    return wgrad_split_workspace_bytes(d, t);
}
