/* Chapter 05's entry point (api.h): C = A B, A^T B or A B^T.
 *
 * The rules come from the sweep, bench/results/h200/05-matmul.csv (the H200, graph replay, cold
 * L2). C = A B runs a rung by dtype, GPU and size:
 * - v11 (small tiles, K split over a cluster) for skinny products: M or N under one 128 x 128
 *   tile, the big rungs' 128 x 128 tiles fewer than the SMs (under one wave), and K at least two
 *   of v11's 32-deep steps, so that there is K to split; in fp32 always, in fp16 only up to
 *   2^27 multiply-adds and where N or K is no multiple of 8, the shapes the tensor-core rungs
 *   cannot tile and v3 took before (elsewhere the tensor cores' rate outweighs the idle SMs).
 *   Squarer products under one wave keep the rungs the sweep measured (v7 made 21.4 us at
 *   1024x1568x128 in fp32 where v11 made 22.6-24.8);
 * - else up to 2^27 multiply-adds (512^3), v3's 16 x 16 tiles: their many small blocks fill the
 *   GPU where v7's 128-row tiles leave most SMs idle (fp32 512^3: v7 1.38x; 1023x77x513:
 *   v7 2.36x); so too in fp16 when N or K is no multiple of 8, which the tensor-core rungs
 *   cannot tile (1023x77x513: v8 1.99x, v10 2.52x);
 * - otherwise v7 in fp32 (1000^3: v4 1.37x), and in fp16 v10 on compute capability 9.0 (it
 *   runs v9 itself where the copy engine cannot describe the matrices: 4097^3 makes 1.04x
 *   v8's time there), v9 from 8.0, v8 below.
 * The transposed forms run v11, the one rung that reads a transposed operand along its rows
 * (coalesced): on any GPU, any shape (below compute capability 9.0 without the split). */
#include "api.h"
#include "launch.cuh"
#include "matmul.cuh"

#define SMALL_MACS ((double)(1 << 27))
#define BIG_TILE 128 /* the side of v7's and the tensor-core rungs' block tiles */
#define V11_MIN_K 64 /* two of v11's steps */

/* Whether C = A B goes to v11: the rule above (small: at most SMALL_MACS multiply-adds). */
static bool split_k_pays(struct matmul_dims d, enum dtype t, bool small)
{
    const double big_tiles = (double)matmul_blocks(d.m, BIG_TILE) * matmul_blocks(d.n, BIG_TILE);
    const bool skinny = d.m < BIG_TILE || d.n < BIG_TILE;
    if (!skinny || big_tiles >= kl_sm_count() || d.k < V11_MIN_K)
        return false;
    return t == DT_FP32 || (small && (d.n % 8 || d.k % 8));
}

static void best_ab(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t,
                    cudaStream_t s)
{
    const bool small = (double)d.m * (double)d.n * (double)d.k <= SMALL_MACS;
    if (split_k_pays(d, t, small))
        matmul_v11(MATMUL_AB, a, b, c, d, t, s);
    else if (small && (t == DT_FP32 || d.n % 8 || d.k % 8))
        matmul_v3(a, b, c, d, t, s);
    else if (t == DT_FP32)
        matmul_v7(a, b, c, d, t, s);
    else if (kl_device_cc() == 90)
        matmul_v10(a, b, c, d, t, s);
    else if (kl_device_cc() >= 80)
        matmul_v9(a, b, c, d, t, s);
    else
        matmul_v8(a, b, c, d, t, s);
}

extern "C" void matmul(enum matmul_form form, const void *a, const void *b, void *c,
                       struct matmul_dims d, enum dtype t, cudaStream_t s)
{
    /* Empty products, which no rung's tiling takes: no C to write, or sums of nothing. */
    if (d.m == 0 || d.n == 0)
        return;
    if (d.k == 0) {
        CUDA_CHECK(cudaMemsetAsync(c, 0, (size_t)(d.m * d.n) * dtype_size(t), s));
        return;
    }
    if (form == MATMUL_AB)
        best_ab(a, b, c, d, t, s);
    else
        matmul_v11(form, a, b, c, d, t, s);
}
