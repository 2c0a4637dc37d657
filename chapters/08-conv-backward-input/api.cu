/* Chapter 08's entry point (api.h): the input gradient on the best rung for the shape.
 *
 * The rule comes from the sweep, bench/results/h200/08-conv-backward-input.csv (the H200,
 * graph replay, cold L2), times in us, fp32 / fp16:
 * - few channels (C <= 16) on problems up to FEW_CHANNELS_FLOPS: v7, one launch with a
 *   pixel's channels in registers, where v5 pays a launch for its flipped filter and v4's and
 *   v6's tiles are mostly empty rows (the seed: 5.02 / 4.72 against v5's 7.56 / 8.18); at
 *   chapter 10's layer at batch 32 (5.8e7 FLOPs) v5 wins, 15.5 / 11.3 against 19.4 / 18.5;
 * - stride 1 with a square filter and pad <= R - 1: v5, chapter 07's forward on the flipped
 *   filter (its tensor cores in fp16, its Winograd in fp32);
 * - any other stride: v6's phases (stride2: 189 / 193 against v4's 979 / 888); v1 below
 *   DIRECT_FLOPS at stride 1, v4 past stride 255. Not yet right at small strided grids:
 *   at 2x64x27x27-32k3s2p1 fp32 v6 takes 21.1 and v2 12.8 (v6's 16 blocks). */
#include "dgrad.cuh"

#define FEW_CHANNELS_FLOPS (1 << 25) /* v7 up to here: the seed's 9.4e6, not cnn's 5.8e7 */
#define DIRECT_FLOPS (1 << 20)       /* v1 below, for the stride-1 shapes v5 declines */

enum dgrad_rung { V1, V4, V5, V6, V7 };

static double flops_of(struct conv2d_dims d)
{
    return 2.0 * (double)(d.n * d.k * d.p * d.q) * (double)(d.c * d.r * d.s);
}

static enum dgrad_rung best_rung(struct conv2d_dims d, enum dtype t)
{
    if (!dgrad_v7_unsupported(d, t) && flops_of(d) <= FEW_CHANNELS_FLOPS)
        return V7;
    if (!dgrad_v5_unsupported(d, t))
        return V5;
    if (d.stride == 1 && flops_of(d) < DIRECT_FLOPS)
        return V1;
    return dgrad_v6_unsupported(d, t) ? V4 : V6;
}

extern "C" size_t conv2d_backward_input_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    return best_rung(d, t) == V5 ? dgrad_v5_workspace_bytes(d, t) : 0;
}

extern "C" void conv2d_backward_input(const void *dy, const void *w, void *dx,
                                      struct conv2d_dims d, enum dtype t, void *workspace,
                                      cudaStream_t s)
{
    switch (best_rung(d, t)) {
    case V1: dgrad_v1(dy, w, dx, d, t, workspace, s); break;
    case V4: dgrad_v4(dy, w, dx, d, t, workspace, s); break;
    case V5: dgrad_v5(dy, w, dx, d, t, workspace, s); break;
    case V6: dgrad_v6(dy, w, dx, d, t, workspace, s); break;
    case V7: dgrad_v7(dy, w, dx, d, t, workspace, s); break;
    }
}

extern "C" size_t dgrad_rung_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    const size_t col2im = dgrad_col2im_workspace_bytes(d, t), v5 = dgrad_v5_workspace_bytes(d, t);
    return col2im > v5 ? col2im : v5;
}
