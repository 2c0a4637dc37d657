/* v2, im2col and a GEMM: the reference report's method.
 *
 * Idea: write the sum as one matrix product, dw (K x C R S) = dY (K x N P Q) col (N P Q x C R S)
 * (wgrad.cuh), and hand it to chapter 05's 16 x 16 tiles (matmul_v3). Two pack kernels lay the
 * operands down first: dy with its filters first (dY's row k is filter k's gradient over every
 * image) and col, whose row (n, p, q) holds the C R S inputs under that output's window, 0
 * where the window hangs over x's edge.
 * What changed from v1: the products now run on every SM as tiles that serve each loaded
 * element to 16 FMAs, and the long N P Q side is the product's inner dimension, walked by
 * every block in step. The price is the columns: col is R S / stride^2 times x (9x at the
 * seed: 37.7 M elements, 151 MB in fp32), written once and read by every column of tiles, and
 * the product still has only (K / 16) (C R S / 16) = 72 blocks at the seed, one inner loop of
 * 131072 each: the GPU's 132 SMs are half idle, and nothing splits the long side.
 * Expected: the pack kernels move 8.4 MB of x into 151 MB of col, about 50 us; the product at
 * what 72 blocks of matmul_v3 give, perhaps 3 TFLOP/s: about 1.6 ms at the seed.
 * Limits: col holds fewer than 2^31 elements (32-bit indices), else unsupported.
 * Measured (H200): seed 6247 us fp32 (0.77 TFLOP/s, 0.05x cuDNN), 5654 fp16. */
#include "05-matmul/api.h"
#include "wgrad.cuh"

#define THREADS 256

__host__ __device__ static int64_t col_elements(conv2d_dims d)
{
    return wgrad_pixels(d) * wgrad_columns(d);
}

extern "C" const char *wgrad_v2_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if ((double)col_elements(d) >= (double)CONV2D_MAX_ELEMENTS)
        return "the column matrix would hold 2^31 elements or more";
    return NULL;
}

extern "C" size_t wgrad_v2_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    if (wgrad_v2_unsupported(d, t))
        return 0;
    const size_t es = dtype_size(t);
    return wgrad_align((size_t)(d.k * wgrad_pixels(d)) * es) +
           wgrad_align((size_t)col_elements(d) * es);
}

/* dyt[k, (n, p, q)] = dy[n, k, p, q]: a thread an element, in dyt's order, so that writes are
 * contiguous and reads contiguous within a plane. */
template <typename T>
__global__ void filters_first(const T *__restrict__ dy, T *__restrict__ dyt, conv2d_dims d)
{
    const int pq = (int)(d.p * d.q), pixels = (int)wgrad_pixels(d);
    const int total = (int)d.k * pixels;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int k = e / pixels, i = e % pixels;
        dyt[e] = dy[(i / pq * (int)d.k + k) * pq + i % pq];
    }
}

/* col[(n, p, q), (c, r, s)] = x[n, c, p stride + r - pad, q stride + s - pad], 0 off x. */
template <typename T>
__global__ void im2col_rows(const T *__restrict__ x, T *__restrict__ col, conv2d_dims d)
{
    const int taps = (int)wgrad_columns(d), rs = (int)(d.r * d.s);
    const int Q = (int)d.q, P = (int)d.p, H = (int)d.h, W = (int)d.w;
    const int total = (int)col_elements(d);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int j = e % taps, i = e / taps;
        const int c = j / rs, r = j % rs / (int)d.s, s = j % (int)d.s;
        const int q = i % Q, p = i / Q % P, n = i / (Q * P);
        const int h = p * (int)d.stride + r - (int)d.pad, w = q * (int)d.stride + s - (int)d.pad;
        const bool on_x = h >= 0 && h < H && w >= 0 && w < W;
        col[e] = on_x ? x[((n * (int)d.c + c) * H + h) * W + w] : from_float<T>(0.f);
    }
}

static unsigned blocks_for(int64_t items)
{
    const int64_t b = (items + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 * 16 ? b : 65536 * 16);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db;
    T *dyt = (T *)workspace;
    T *col = (T *)((char *)workspace + wgrad_align((size_t)(d.k * wgrad_pixels(d)) * sizeof(T)));
    filters_first<T><<<blocks_for(d.k * wgrad_pixels(d)), THREADS, 0, s>>>(dy, dyt, d);
    LAUNCH_CHECK();
    im2col_rows<T><<<blocks_for(col_elements(d)), THREADS, 0, s>>>(x, col, d);
    LAUNCH_CHECK();
    const struct matmul_dims product = {d.k, wgrad_columns(d), wgrad_pixels(d)};
    matmul_v3(dyt, col, dw, product, sizeof(T) == 4 ? DT_FP32 : DT_FP16, s);
}

WGRAD_LAUNCHER(v2, 0)
