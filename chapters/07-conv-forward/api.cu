/* Chapter 07's entry point (api.h): the convolution forward on the best rung for the shape.
 *
 * The rules come from the sweep, bench/results/h200/07-conv-forward.csv (the H200, graph
 * replay, cold L2), times in us, fp32 / fp16:
 * - few channels, 3x3 or smaller at stride 1: v7, its input patch in registers (chapter 10's
 *   conv1 at batch 1024: 19.4 / 19.9 against v4's 59.0 / 63.1); in fp16 only for C = 1, since
 *   at C = 3 and 4 its fp16 kernel lost to v4 and v6 (the seed: 7.62 against v4's 6.35);
 * - fp32, 3x3 at stride 1: v6's Winograd (resnet 134 against v4's 217), except for few filters
 *   on few pixels, where its 32-tile blocks leave SMs idle (chapter 10's conv2 at batch 32,
 *   K = 32 on 6,272 pixels: v4 8.46, v6 10.7);
 * - fp16 from compute capability 8.0: v5's tensor cores (resnet 79.9 against v6's 134), except
 *   on the smallest products, below TENSOR_CORE_FLOPS, where its pipeline's start costs more
 *   than it saves: there v6 for 3x3 at stride 1 (the seed: 6.54 against 7.45), v1 for a single
 *   filter (1x3x7x7-1k7s1p3: 9.96 against v4's 11.7) and v4 otherwise (5x7x9x11-3k1s1p0: 4.92
 *   against 6.28);
 * - everything else: v4's implicit GEMM (stride2 fp32: 120 against cuDNN's 199). */
#include <stdio.h>

#include "conv.cuh"

static int64_t output_size(int64_t in, int64_t filter, int64_t stride, int64_t pad)
{
    return (in + 2 * pad - filter) / stride + 1;
}

extern "C" int conv2d_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r,
                              int64_t s, int64_t stride, int64_t pad, struct conv2d_dims *d,
                              char *why, size_t why_len)
{
    if (n < 1 || c < 1 || h < 1 || w < 1 || k < 1 || r < 1 || s < 1) {
        snprintf(why, why_len, "every size must be at least 1 (N %lld, C %lld, H %lld, W %lld, "
                 "K %lld, filter %lldx%lld)", (long long)n, (long long)c, (long long)h,
                 (long long)w, (long long)k, (long long)r, (long long)s);
        return -1;
    }
    if (stride < 1) {
        snprintf(why, why_len, "the stride must be at least 1 (it is %lld)", (long long)stride);
        return -1;
    }
    if (pad < 0) {
        snprintf(why, why_len, "the padding must be at least 0 (it is %lld)", (long long)pad);
        return -1;
    }
    if (r > h + 2 * pad || s > w + 2 * pad) {
        snprintf(why, why_len, "the %lldx%lld filter is larger than the padded %lldx%lld input",
                 (long long)r, (long long)s, (long long)(h + 2 * pad), (long long)(w + 2 * pad));
        return -1;
    }
    struct conv2d_dims e = {n, c, h, w, k, r, s, stride, pad, output_size(h, r, stride, pad),
                            output_size(w, s, stride, pad)};
    const double x = (double)n * c * h * w, wt = (double)k * c * r * s;
    const double y = (double)n * k * e.p * e.q;
    const double most = (double)CONV2D_MAX_ELEMENTS;
    if (x >= most || wt >= most || y >= most) {
        snprintf(why, why_len, "%s holds %.4g elements; each tensor must hold fewer than 2^31",
                 x >= most ? "x" : wt >= most ? "w" : "y", x >= most ? x : wt >= most ? wt : y);
        return -1;
    }
    *d = e;
    return 0;
}

#define SMALL_WINOGRAD_PIXELS 8192 /* v6 loses below this many output pixels at K <= 32 */
#define TENSOR_CORE_FLOPS (1 << 24) /* v5 pays from about this many FLOPs (conv2 at 32: 5.8e7) */
#define TINY_FLOPS (1 << 16)        /* below, v6's and v5's start-up outweigh their speed */

enum conv_rung { V1, V4, V5, V6, V7 };

static double flops_of(struct conv2d_dims d)
{
    return 2.0 * (double)(d.n * d.k * d.p * d.q) * (double)(d.c * d.r * d.s);
}

static bool winograd_takes(struct conv2d_dims d, enum dtype t)
{
    return !conv2d_forward_v6_unsupported(d, t);
}

static enum conv_rung best_fp32(struct conv2d_dims d)
{
    if (d.c <= 4 && d.r <= 3 && d.s <= 3 && d.stride == 1)
        return V7;
    if (winograd_takes(d, DT_FP32) && !(d.k <= 32 && d.n * d.p * d.q <= SMALL_WINOGRAD_PIXELS))
        return V6;
    return V4;
}

static enum conv_rung best_fp16(struct conv2d_dims d)
{
    if (d.c == 1 && d.r <= 3 && d.s <= 3 && d.stride == 1)
        return V7;
    const double flops = flops_of(d);
    if (kl_device_cc() >= 80 && flops >= TENSOR_CORE_FLOPS)
        return V5;
    if (winograd_takes(d, DT_FP16) && flops >= TINY_FLOPS)
        return V6;
    if (kl_device_cc() >= 80 && flops >= TINY_FLOPS)
        return V5;
    return d.k == 1 ? V1 : V4;
}

static enum conv_rung best_rung(struct conv2d_dims d, enum dtype t)
{
    return t == DT_FP32 ? best_fp32(d) : best_fp16(d);
}

extern "C" size_t conv2d_forward_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    return best_rung(d, t) == V6 ? conv2d_winograd_workspace_bytes(d, t) : 0;
}

extern "C" void conv2d_forward(const void *x, const void *w, const void *bias, void *y,
                               struct conv2d_dims d, enum conv2d_activation act, enum dtype t,
                               void *workspace, cudaStream_t s)
{
    switch (best_rung(d, t)) {
    case V1: conv2d_forward_v1(x, w, bias, y, d, act, t, workspace, s); break;
    case V7: conv2d_forward_v7(x, w, bias, y, d, act, t, workspace, s); break;
    case V5: conv2d_forward_v5(x, w, bias, y, d, act, t, workspace, s); break;
    case V6: conv2d_forward_v6(x, w, bias, y, d, act, t, workspace, s); break;
    case V4: conv2d_forward_v4(x, w, bias, y, d, act, t, workspace, s); break;
    }
}

extern "C" size_t conv2d_rung_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    const size_t im2col = conv2d_im2col_workspace_bytes(d, t);
    const size_t winograd = conv2d_winograd_workspace_bytes(d, t);
    return im2col > winograd ? im2col : winograd;
}
