/* Chapter 03's entry points (api.h): a rung by the shape of the rows.
 *
 * A row is the C values at one (n, h, w), H W elements apart. The rules come from the sweep,
 * bench/results/h200/03-softmax.csv (the H200, graph replay, cold L2); each rung named runs
 * there within 5% of the fastest rung, and the figures in brackets are the next choice's time
 * over the chosen one's.
 * - A handful of rows (N H W <= 64, 8x10x1x1): the launch is the cost, and v6's early launch
 *   wins (v5, the same kernel launched plainly: 1.46-1.50x forward, 1.43-1.69x backward).
 * - Contiguous rows (H W = 1): up to 8 values v1's thread a row (v3: 1.37-1.56x at 2^21 rows
 *   of 8); up to 32767, the forward's v3 (warps a row; 8192 values: v4 and v6 within 1%); longer,
 *   v7's pipelined forward (fp16 at 32768: v3 1.07x). The backward's v3 up to 128 values,
 *   beyond v4 (which takes rows up to its shared memory and gives longer ones to v2).
 * - Strided rows 2 to 255 apart (1 < H W < 256), more than 32 channels: v8's images on chip
 *   while a GPU's worth of clusters holds them (the forward to C 512 in fp32 and 1000 in fp16:
 *   at 128x512x14x14 v9 is 1.06x), else v9's stream of images (32x2048x14x14: v8 1.14-1.57x);
 *   the fp32 backward at 14x14 prefers v3's strips (128x512: v8 1.06x; 64x1000: 1.15x).
 * - Strided rows further apart (H W >= 256): v3's strips; the fp16 backward by channels: v1 to
 *   8 (v3 1.18x at 2048x8x32x32), v2 to 16 (the seed's 10: v3 1.22x), v6 to 64 (256x64x32x32:
 *   v3 1.20x), beyond v4.
 * v5, v6, v8 and v9 need sm_90; below, v3 runs where they would (and v4 and v7 where they
 * fall back to it themselves). */
#include "api.h"
#include "launch.cuh"
#include "softmax.h"

#define FEW_ROWS 64

extern "C" size_t softmax_workspace_bytes(struct softmax_dims d, enum dtype t)
{
    (void)t;
    return softmax_v9_workspace_bytes(d);
}

extern "C" void softmax_forward(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                void *workspace, cudaStream_t s)
{
    const int64_t hw = d.h * d.w, rows = d.n * hw;
    const bool hopper = kl_device_cc() >= 90;
    if (rows <= FEW_ROWS && hopper)
        softmax_forward_v6(x, y, d, t, s);
    else if (hw == 1 && d.c <= 8)
        softmax_forward_v1(x, y, d, t, s);
    else if (hw == 1 && d.c >= 32768)
        softmax_forward_v7(x, y, d, t, s);
    else if (hw > 1 && hw < 256 && d.c > 32 && hopper) {
        if (d.c <= (t == DT_FP16 ? 1000 : 512))
            softmax_forward_v8(x, y, d, t, s);
        else
            softmax_forward_v9(x, y, d, t, workspace, s);
    } else if (hw > 1 && d.c > 512)
        softmax_forward_v7(x, y, d, t, s);
    else
        softmax_forward_v3(x, y, d, t, s);
}

/* The fp16 backward over strided rows at least 256 apart, by channels. */
static void backward_fp16_far_apart(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, bool hopper,
                                    cudaStream_t s)
{
    if (d.c <= 8)
        softmax_backward_v1(y, dy, dx, d, t, s);
    else if (d.c <= 16)
        softmax_backward_v2(y, dy, dx, d, t, s);
    else if (d.c <= 64 && hopper)
        softmax_backward_v6(y, dy, dx, d, t, s);
    else
        softmax_backward_v4(y, dy, dx, d, t, s);
}

extern "C" void softmax_backward(const void *y, const void *dy, void *dx, struct softmax_dims d,
                                 enum dtype t, void *workspace, cudaStream_t s)
{
    const int64_t hw = d.h * d.w, rows = d.n * hw;
    const bool hopper = kl_device_cc() >= 90;
    if (rows <= FEW_ROWS && hopper)
        softmax_backward_v6(y, dy, dx, d, t, s);
    else if (hw == 1 && d.c <= 8)
        softmax_backward_v1(y, dy, dx, d, t, s);
    else if (hw == 1)
        d.c <= 128 ? softmax_backward_v3(y, dy, dx, d, t, s)
                   : softmax_backward_v4(y, dy, dx, d, t, s);
    else if (hw >= 256 && t == DT_FP16)
        backward_fp16_far_apart(y, dy, dx, d, t, hopper, s);
    else if (hw >= 256 || d.c <= 32 || !hopper)
        softmax_backward_v3(y, dy, dx, d, t, s);
    else if (d.c > 1024 || (t == DT_FP16 && d.c > 512))
        softmax_backward_v9(y, dy, dx, d, t, workspace, s);
    else if (t == DT_FP32 && hw >= 128)
        softmax_backward_v3(y, dy, dx, d, t, s);
    else
        softmax_backward_v8(y, dy, dx, d, t, s);
}
