/* v2, im2col and a tiled matmul: the reference report's method.
 *
 * Idea: store the column matrix (conv.cuh) and hand the sum to a matrix product. Pack kernels
 * write col with a row of ones under it, and wb = [w | b] (w's K C R S layout is already
 * K x C R S); chapter 05's 16 x 16 shared-memory tiles (matmul_v3) make prod = wb col,
 * K x N P Q, so the bias is summed with the products and the output rounded once; a last kernel
 * moves prod's column (n, pq) to y[n][k][pq] through the activation, in place when N = 1.
 * What changed from v1: the sum runs as a GEMM whose tiles serve each loaded element to 16
 * FMAs, not two loads a multiply-add. The price is the buffers' bytes, over the x, w, b and y
 * the operation needs (fp32; fp16 about halves them, its depth padded to 40 and 296 rows):
 *   seed 2x4x64x64-8k3s1p1 needs 0.39 MB; col (37 x 8192, 1.21 MB) and prod (0.26 MB), each
 *   written and read, add 2.95 MB: 7.5x.
 *   large 8x32x128x128-64k3s1p1 needs 50.4 MB; col (289 x 131072, 151.5 MB) and prod (33.6 MB)
 *   add 370 MB, 7.3x: 89 us at the 4.15 TB/s copy roof. And wb's 16-row tiles read col once
 *   per 16 filters, 4 times at K = 64, from DRAM: col is larger than the L2.
 * Expected: the product's rate. matmul_v3 makes about 8 TFLOP/s: large's 4.8 GFLOP take about
 * 600 us, plus some 60 us to pack and finish, about 0.35x cuDNN; the seed, four small launches,
 * 6-9 us. The buffer is not yet what costs most: v3 keeps it and changes the GEMM.
 * Limits: col and wb hold fewer than 2^31 elements (32-bit indices), else unsupported.
 * Measured (H200): 762 us fp32 at large, 0.34x cuDNN, 6.3 TFLOP/s: the 16x16 tiles, not the
 * buffer, are most of the time (v3 with the same buffer: 330 us). */
#include "05-matmul/api.h"
#include "conv.cuh"

#define PACK_THREADS 256  /* columns of col a block: one output pixel a thread */
#define PACK_ROWS 32      /* rows of col a block: their taps found once, by 32 threads */
#define FINISH_THREADS 256 /* outputs of one y plane a block, at most */
#define GRID_Y_MAX 65535   /* gridDim.y's limit: larger counts loop with a grid stride */

/* Rows of col: C R S taps, the row of ones, and zeros to a multiple of 8 in fp16. */
static int64_t im2col_depth(conv2d_dims d, enum dtype t)
{
    const int64_t rows = d.c * d.r * d.s + 1;
    return t == DT_FP16 ? (rows + 7) / 8 * 8 : rows;
}

static size_t align256(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

/* col[i][j] for rows i0.. of a block: tap i of pixel j, 1 in the row after the taps, 0 below.
 * The block's taps are found once into `taps`, since every thread of it reads the same rows. */
template <typename T>
__global__ void __launch_bounds__(PACK_THREADS)
    conv_im2col(const T *__restrict__ x, T *__restrict__ col, conv2d_dims d, int depth)
{
    __shared__ conv_tap taps[PACK_ROWS];
    const int columns = (int)(d.n * d.p * d.q), filter_taps = (int)(d.c * d.r * d.s);
    const int j = blockIdx.x * PACK_THREADS + threadIdx.x;
    const conv_pixel px = conv_pixel_of(d, j < columns ? j : 0);
    for (int i0 = blockIdx.y * PACK_ROWS; i0 < depth; i0 += gridDim.y * PACK_ROWS) {
        if (threadIdx.x < PACK_ROWS && i0 + (int)threadIdx.x < filter_taps)
            taps[threadIdx.x] = conv_tap_of(d, i0 + (int)threadIdx.x);
        __syncthreads();
        const int rows = min(PACK_ROWS, depth - i0);
        if (j < columns)
            for (int e = 0; e < rows; e++) {
                const int i = i0 + e;
                const float v = i < filter_taps    ? conv_gather(x, d, px, taps[e])
                                : i == filter_taps ? 1.f
                                                   : 0.f;
                col[i * columns + j] = from_float<T>(v);
            }
        __syncthreads(); /* the taps are overwritten next */
    }
}

/* wb[k][i]: w[k][i] for the C R S taps, then b[k] (0 without a bias), then zeros. */
template <typename T>
__global__ void conv_pack_filters(const T *__restrict__ w, const T *__restrict__ bias,
                                  T *__restrict__ wb, conv2d_dims d, int depth)
{
    const int filter_taps = (int)(d.c * d.r * d.s), elements = (int)d.k * depth;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < elements;
         e += gridDim.x * blockDim.x) {
        const int k = e / depth, i = e - k * depth;
        wb[e] = i < filter_taps ? w[k * filter_taps + i]
                : i == filter_taps && bias ? bias[k]
                                           : from_float<T>(0.f);
    }
}

/* y[n][k][pq] = act(prod[k][n P Q + pq]): a block row per y plane (n, k), so the division
 * into n and k is a thread's once a plane. prod and y are the same buffer when N = 1. */
template <typename T>
__global__ void conv_im2col_reorder(const T *prod, T *y, conv2d_dims d, conv2d_activation act)
{
    const int pq = (int)(d.p * d.q), columns = (int)d.n * pq, planes = (int)(d.n * d.k);
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= pq)
        return;
    for (int plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const int n = plane / (int)d.k, k = plane - n * (int)d.k;
        const float v = to_float(prod[k * columns + n * pq + e]);
        y[plane * pq + e] = from_float<T>(conv_epilogue(v, (const T *)nullptr, k, act));
    }
}

static unsigned grid_y(int64_t rows)
{
    return (unsigned)(rows < GRID_Y_MAX ? rows : GRID_Y_MAX);
}

extern "C" const char *conv2d_forward_im2col_unsupported(struct conv2d_dims d, enum dtype t)
{
    const int64_t depth = im2col_depth(d, t);
    if (depth * d.n * d.p * d.q >= CONV2D_MAX_ELEMENTS)
        return "the column matrix would hold 2^31 elements or more (32-bit indices)";
    if (depth * d.k >= CONV2D_MAX_ELEMENTS)
        return "the packed filters would hold 2^31 elements or more (32-bit indices)";
    return NULL;
}

/* col, wb and, unless N = 1, prod. 0 where the rungs cannot take the shape: no room is
 * asked for a product that will not run. */
extern "C" size_t conv2d_im2col_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    if (conv2d_forward_im2col_unsupported(d, t))
        return 0;
    const size_t es = dtype_size(t), depth = (size_t)im2col_depth(d, t);
    const size_t pixels = (size_t)(d.n * d.p * d.q);
    const size_t prod = d.n == 1 ? 0 : align256((size_t)d.k * pixels * es);
    return align256(depth * pixels * es) + align256((size_t)d.k * depth * es) + prod;
}

conv_im2col_plan conv_im2col_plan_of(conv2d_dims d, enum dtype t, void *workspace, void *y)
{
    const size_t es = dtype_size(t);
    conv_im2col_plan plan;
    plan.depth = im2col_depth(d, t);
    plan.col = workspace;
    plan.filters = (char *)workspace + align256((size_t)(plan.depth * d.n * d.p * d.q) * es);
    plan.product = d.n == 1 ? y : (char *)plan.filters + align256((size_t)(d.k * plan.depth) * es);
    return plan;
}

template <typename T>
static void pack(const T *x, const T *w, const T *bias, conv2d_dims d, conv_im2col_plan plan,
                 cudaStream_t s)
{
    const int depth = (int)plan.depth;
    const dim3 grid(conv_blocks(d.n * d.p * d.q, PACK_THREADS),
                    grid_y((plan.depth + PACK_ROWS - 1) / PACK_ROWS));
    conv_im2col<T><<<grid, PACK_THREADS, 0, s>>>(x, (T *)plan.col, d, depth);
    LAUNCH_CHECK();
    conv_pack_filters<T><<<conv_blocks(d.k * plan.depth, 256), 256, 0, s>>>(
        w, bias, (T *)plan.filters, d, depth);
    LAUNCH_CHECK();
}

void conv_im2col_pack(const void *x, const void *w, const void *bias, conv2d_dims d,
                      conv_im2col_plan plan, enum dtype t, cudaStream_t s)
{
    if (t == DT_FP32)
        pack((const float *)x, (const float *)w, (const float *)bias, d, plan, s);
    else
        pack((const __half *)x, (const __half *)w, (const __half *)bias, d, plan, s);
}

void conv_im2col_finish(const void *product, void *y, conv2d_dims d, conv2d_activation act,
                        enum dtype t, cudaStream_t s)
{
    if (product == y && act == CONV2D_LINEAR)
        return; /* N = 1: the product is y already */
    const int64_t pq = d.p * d.q;
    const int threads = pq < FINISH_THREADS ? (int)(pq + 31) / 32 * 32 : FINISH_THREADS;
    const dim3 grid(conv_blocks(pq, threads), grid_y(d.n * d.k));
    if (t == DT_FP32)
        conv_im2col_reorder<float><<<grid, threads, 0, s>>>((const float *)product, (float *)y,
                                                            d, act);
    else
        conv_im2col_reorder<__half><<<grid, threads, 0, s>>>((const __half *)product,
                                                             (__half *)y, d, act);
    LAUNCH_CHECK();
}

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    const conv_im2col_plan plan = conv_im2col_plan_of(d, t, workspace, y);
    conv_im2col_pack(x, w, bias, d, plan, t, s);
    const struct matmul_dims product = {d.k, d.n * d.p * d.q, plan.depth};
    matmul_v3(plan.filters, plan.col, plan.product, product, t, s);
    kl_note_rung("v2"); /* matmul_v3 noted chapter 05's rung: the row must name this one */
    conv_im2col_finish(plan.product, y, d, act, t, s);
}

CONV2D_FORWARD_LAUNCHER(v2)
