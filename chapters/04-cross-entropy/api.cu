/* Chapter 04's entry points (api.h): a rung by the shape of the problem and the dtype.
 *
 * The rules come from the sweep, bench/results/h200/04-cross-entropy.csv (the H200, graph
 * replay, cold L2); each rung named runs there within 5% of the fastest rung at every shape of
 * the sweep, and the figures in brackets are another rung's time over the chosen one's. v7
 * and v8 hand rows of up to 1024 logits to v3's warp a row, and v8 its gradient passes to v7,
 * so where they are named for those, those kernels run (and the table's api rows say so).
 * - A handful of rows (N <= 32; the sweep's 32x10): v7, which gives short rows to v3, whose
 *   one block of warps writes the loss itself (v6 1.00-1.05x); the fp32 backward v6 (v3 1.14x).
 * - Short rows (C <= 128, 1024x10 and 1024x100): v6's early launch forward and fused (v3
 *   1.12-1.27x); the backward has so little to do that v3's warp wins (v6 1.02-1.20x).
 * - Rows of up to 1024 (x1000): v6's block a row where v3's warps are too few to keep the GPU
 *   busy, v3's warp a row (through v7 or v8) beyond. Forward: v6 to 256 rows in fp32 (v3
 *   1.58x; at 1024 v6 is 1.37x), in fp16 to 1024 rows and from 16384 (v3 1.49x at 1024, 1.17x
 *   at 65536; at 4096 v6 is 1.27x, at 16384 v3 1.03x). Backward: v6 to 256 rows (v3
 *   1.17-1.35x), in fp16 to 1024 (v3 1.20x; in fp32 v6 is 1.14x there). Fused: v6 to 256 rows
 *   (v3 1.9-2.0x), in fp16 to 1024 (v3 1.51x; fp32 v6 1.13x) and from 16384 (65536: v3 1.12x;
 *   4096: v6 1.21x).
 * - 1024x4096: the forward in fp16 v8's spans (v7 1.03x, v6 1.08x), in fp32 v4 (v7 1.04x);
 *   the backward v6 in fp16 (v4 1.11x), v4 in fp32 (v6 1.12x); the fused pass v4 (v6 1.02x
 *   fp16, 1.20x fp32).
 * - 1024x16384: the forward v7 in fp16 (v8 1.05x), v4 in fp32 (v7 1.00x); the backward and
 *   fused pass v4 in fp16 (v7 1.17x and 1.11x), v7 in fp32 (v4 1.02x and 1.04x).
 * - Longer rows (x50257): the forward v8 in fp16 (v7 1.03x at 1024 rows; at 8192 v7 is 3%
 *   ahead), v7 in fp32 (v4 1.00-1.02x); the backward and fused pass v7 (v4 1.10-1.29x).
 * v5 and v6 need sm_90 (clusters); below, v7 runs where v6 would. */
#include "api.h"
#include "cross_entropy.h"
#include "launch.cuh"

#define FEW_ROWS 32
#define SHORT_ROWS 128

typedef void (*ce_rung)(const void *x, const int32_t *labels, float *loss, void *dx,
                        size_t n_rows, size_t n_classes, enum dtype t, void *workspace,
                        cudaStream_t s);

static ce_rung forward_rung(size_t n, size_t c, bool fp16)
{
    if (n <= FEW_ROWS)
        return ce_v7;
    if (c <= SHORT_ROWS)
        return ce_v6;
    if (c <= 1024)
        return fp16 ? (n >= 2048 && n <= 8192 ? ce_v8 : ce_v6) : (n <= 256 ? ce_v6 : ce_v8);
    if (c <= 16384)
        return fp16 ? (c <= 4096 ? ce_v8 : ce_v7) : ce_v4;
    return fp16 ? ce_v8 : ce_v7;
}

static ce_rung backward_rung(size_t n, size_t c, bool fp16)
{
    if (n <= FEW_ROWS)
        return fp16 ? ce_v7 : ce_v6;
    if (c <= SHORT_ROWS)
        return ce_v7;
    if (c <= 1024) {
        if (n <= 256)
            return ce_v6;
        if (n <= 1024)
            return fp16 ? ce_v6 : ce_v7;
        return ce_v7;
    }
    if (c <= 4096)
        return fp16 ? ce_v6 : ce_v4;
    if (c <= 16384)
        return fp16 ? ce_v4 : ce_v7;
    return ce_v7;
}

static ce_rung fused_rung(size_t n, size_t c, bool fp16)
{
    if (n <= FEW_ROWS)
        return ce_v7;
    if (c <= SHORT_ROWS)
        return ce_v6;
    if (c <= 1024) {
        if (n <= 256)
            return ce_v6;
        if (n <= 1024)
            return fp16 ? ce_v6 : ce_v7;
        return fp16 ? (n <= 4096 ? ce_v8 : ce_v6) : ce_v8;
    }
    if (c <= 4096)
        return ce_v4;
    if (c <= 16384)
        return fp16 ? ce_v4 : ce_v8;
    return ce_v8;
}

/* The rung a rule picked, on this GPU. */
static ce_rung on_this_gpu(ce_rung r)
{
    return r == ce_v6 && kl_device_cc() < 90 ? ce_v7 : r;
}

extern "C" size_t cross_entropy_workspace_bytes(struct ce_dims d, enum dtype t)
{
    return ce_workspace_bytes(d.n, d.c, t);
}

extern "C" void cross_entropy_forward(const void *x, const int32_t *labels, float *loss,
                                      struct ce_dims d, enum dtype t, void *workspace,
                                      cudaStream_t s)
{
    const ce_rung r = on_this_gpu(forward_rung(d.n, d.c, t == DT_FP16));
    r(x, labels, loss, NULL, d.n, d.c, t, workspace, s);
}

extern "C" void cross_entropy_backward(const void *x, const int32_t *labels, void *dx,
                                       struct ce_dims d, enum dtype t, void *workspace,
                                       cudaStream_t s)
{
    const ce_rung r = on_this_gpu(backward_rung(d.n, d.c, t == DT_FP16));
    r(x, labels, NULL, dx, d.n, d.c, t, workspace, s);
}

extern "C" void cross_entropy_fused(const void *x, const int32_t *labels, float *loss, void *dx,
                                    struct ce_dims d, enum dtype t, void *workspace,
                                    cudaStream_t s)
{
    const ce_rung r = on_this_gpu(fused_rung(d.n, d.c, t == DT_FP16));
    r(x, labels, loss, dx, d.n, d.c, t, workspace, s);
}
