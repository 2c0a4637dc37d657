/* v3, im2col and the library's GEMM: what a faster product buys while the buffer stays.
 *
 * Idea: v2's pack, product and finish, with the product handed to chapter 05's entry point,
 * matmul(MATMUL_AB, ...), which picks its best rung for the shape: at large, K x N P Q x depth
 * = 64 x 131072 x 289 (fp32) goes to v7's warp tiles, and 64 x 131072 x 296 (fp16, the depth
 * padded to a multiple of 8) to v10's wgmma; products of up to 2^27 multiply-adds, the seed's
 * among them, stay on v3's 16 x 16 tiles, so at the seed this rung is v2.
 * What changed from v2: one call. The bytes stay those v2 counts (seed 2.95 MB over 0.39;
 * large 370 MB over 50.4 in fp32, 189 over 25.2 in fp16); the product's time is what shrinks.
 * Expected, large: fp32 at v7's rate, perhaps 20-25 TFLOP/s with half of its 128-row tiles
 * idle at K = 64, so 200-250 us, plus v2's 60 us of pack and finish: 0.8-1x cuDNN's 231 us;
 * the buffer's 89 us at the roof is now a third of the time. fp16's product at
 * tensor-core rates takes 15-25 us, mostly reading col once, so pack and finish (45 us of
 * buffer traffic at the roof) are most of some 60-70 us: 2.5-3x cuDNN's 181 us in NCHW fp16.
 * A faster GEMM only makes the buffer's share larger: v4 gathers the column tiles instead.
 * Limits: v2's.
 * Measured (H200): large 330 us fp32 (0.80x cuDNN) and 122 us fp16 (1.79x); at stride2 in
 * fp16, 58.3 us, 2.62x cuDNN and the chapter's fastest there: chapter 05's v10 pays for the
 * buffer where im2col is only 2.3x the input. */
#include "05-matmul/api.h"
#include "conv.cuh"

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    const conv_im2col_plan plan = conv_im2col_plan_of(d, t, workspace, y);
    conv_im2col_pack(x, w, bias, d, plan, t, s);
    const struct matmul_dims product = {d.k, d.n * d.p * d.q, plan.depth};
    matmul(MATMUL_AB, plan.filters, plan.col, plan.product, product, t, s);
    kl_note_rung("v3"); /* matmul noted chapter 05's rung: the row must name this one */
    conv_im2col_finish(plan.product, y, d, act, t, s);
}

CONV2D_FORWARD_LAUNCHER(v3)
