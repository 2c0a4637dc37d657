/* v2, the columns and col2im by atomics: the reference report's method.
 *
 * Idea: turn the gradient into one matrix product and a scatter. col = W^T dY (C R S x N P Q,
 * dgrad.cuh) holds in column (n, p, q) what output (n, :, p, q) sends back through each tap
 * (c, r, s); chapter 05's 16 x 16 tiles (matmul_v3) compute it, after two pack kernels lay W^T
 * and dy (filters first) down for it. Then col2im: a thread per element of col adds it into
 * dx[n, c, p stride + r - pad, q stride + s - pad] with atomicAdd, since up to R S columns
 * land on one element; fp16 sums into an fp32 buffer, rounded into dx by a last kernel.
 * What changed from v1: the multiply-adds run as a GEMM whose tiles serve each loaded element
 * to 16 FMAs. The price is the buffers: col is R S / stride^2 times dx (9x at stride 1), written
 * by the product and read by col2im, and the scatter's atomics, one per element of col:
 *   large 8x32x128x128-64k3s1p1: dy, w and dx are 50.4 MB in fp32; col (288 x 131072) is
 *   151 MB, dy's copy 33.6 MB: about 370 MB of traffic, 89 us at the 4.15 TB/s roof, and
 *   37.7 M atomics onto 4.2 M addresses, 9 a word.
 * Expected: the product's rate, about 8 TFLOP/s with matmul_v3 (large, 4.8 GFLOP: some 600 us),
 * then col2im's atomics, L2 bound: perhaps 40-80 us. About 0.3x cuDNN. Atomics make the order
 * of the sums, and so the last bits of dx, change from run to run.
 * Limits: col holds fewer than 2^31 elements (32-bit indices), else unsupported.
 * Measured (H200): large 1010 us fp32 (0.21x cuDNN, 4.8 TFLOP/s in all), over the 640-680
 * predicted; at stride2, where col is only 2.25x dx, 588 us, faster than v4's 979. */
#include "05-matmul/api.h"
#include "dgrad.cuh"

#define THREADS 256

static int64_t column_count(conv2d_dims d) { return d.n * d.p * d.q; }
static int64_t tap_count(conv2d_dims d) { return d.c * d.r * d.s; }

extern "C" const char *dgrad_col2im_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if ((double)tap_count(d) * (double)column_count(d) >= (double)CONV2D_MAX_ELEMENTS)
        return "the column matrix would hold 2^31 elements or more";
    return NULL;
}

extern "C" size_t dgrad_col2im_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    if (dgrad_col2im_unsupported(d, t))
        return 0;
    const size_t es = dtype_size(t);
    const size_t sums = t == DT_FP16 ? (size_t)(d.n * d.c * d.h * d.w) * sizeof(float) : 0;
    return dgrad_align((size_t)(tap_count(d) * d.k) * es) +
           dgrad_align((size_t)(d.k * column_count(d)) * es) +
           dgrad_align((size_t)(tap_count(d) * column_count(d)) * es) + dgrad_align(sums);
}

dgrad_columns dgrad_columns_of(conv2d_dims d, enum dtype t, void *workspace)
{
    const size_t es = dtype_size(t);
    char *at = (char *)workspace;
    dgrad_columns c;
    c.wt = at;
    at += dgrad_align((size_t)(tap_count(d) * d.k) * es);
    c.dyt = at;
    at += dgrad_align((size_t)(d.k * column_count(d)) * es);
    c.col = at;
    at += dgrad_align((size_t)(tap_count(d) * column_count(d)) * es);
    c.sums = t == DT_FP16 ? (float *)at : NULL;
    return c;
}

/* wt[i][k] = w[k][i]: W (K x C R S as stored) transposed. */
template <typename T>
__global__ void transpose_filters(const T *__restrict__ w, T *__restrict__ wt, int k_count,
                                  int taps)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < k_count * taps;
         e += gridDim.x * blockDim.x) {
        const int i = e / k_count, k = e - i * k_count;
        wt[e] = w[k * taps + i];
    }
}

/* dyt[k][n P Q + pq] = dy[n][k][pq]: the filters first, so that every image is one product. */
template <typename T>
__global__ void filters_first(const T *__restrict__ dy, T *__restrict__ dyt, conv2d_dims d)
{
    const int pq = (int)(d.p * d.q), columns = (int)d.n * pq, elements = (int)d.k * columns;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < elements;
         e += gridDim.x * blockDim.x) {
        const int k = e / columns, j = e - k * columns, n = j / pq;
        dyt[e] = dy[(n * (int)d.k + k) * pq + (j - n * pq)];
    }
}

template <typename T>
static void compute(const T *dy, const T *w, conv2d_dims d, dgrad_columns cols, enum dtype t,
                    cudaStream_t s)
{
    const int taps = (int)tap_count(d);
    transpose_filters<T><<<dgrad_blocks(taps * d.k, THREADS), THREADS, 0, s>>>(w, (T *)cols.wt,
                                                                              (int)d.k, taps);
    LAUNCH_CHECK();
    filters_first<T><<<dgrad_blocks(d.k * column_count(d), THREADS), THREADS, 0, s>>>(
        dy, (T *)cols.dyt, d);
    LAUNCH_CHECK();
    const struct matmul_dims product = {tap_count(d), column_count(d), d.k};
    matmul_v3(cols.wt, cols.dyt, cols.col, product, t, s);
}

void dgrad_columns_compute(const void *dy, const void *w, conv2d_dims d, dgrad_columns cols,
                           enum dtype t, cudaStream_t s)
{
    if (t == DT_FP32)
        compute((const float *)dy, (const float *)w, d, cols, t, s);
    else
        compute((const __half *)dy, (const __half *)w, d, cols, t, s);
}

/* col2im as a scatter: element ((c, r, s), (n, p, q)) of col is added into the input element
 * under tap (r, s) of output (p, q), where that lies inside x. */
template <typename T>
__global__ void col2im_atomic(const T *__restrict__ col, float *__restrict__ sums,
                              conv2d_dims d)
{
    const int pq = (int)(d.p * d.q), columns = (int)d.n * pq, rs = (int)(d.r * d.s);
    const int elements = (int)(d.c * d.r * d.s) * columns;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < elements;
         e += gridDim.x * blockDim.x) {
        const int i = e / columns, j = e - i * columns;
        const int c = i / rs, r = i % rs / (int)d.s, s = i % (int)d.s;
        const int n = j / pq, p = (j - n * pq) / (int)d.q, q = j % (int)d.q;
        const int h = p * (int)d.stride + r - (int)d.pad, x = q * (int)d.stride + s - (int)d.pad;
        if ((unsigned)h < (unsigned)d.h && (unsigned)x < (unsigned)d.w)
            atomicAdd(&sums[((n * (int)d.c + c) * (int)d.h + h) * (int)d.w + x], to_float(col[e]));
    }
}

__global__ void round_sums(const float *__restrict__ sums, __half *__restrict__ dx, int count)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < count; e += gridDim.x * blockDim.x)
        dx[e] = from_float<__half>(sums[e]);
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    const dgrad_columns cols = dgrad_columns_of(d, t, workspace);
    dgrad_columns_compute(dy, w, d, cols, t, s);
    kl_note_rung("v2"); /* matmul_v3 noted chapter 05's rung: the row must name this one */
    const int64_t inputs = d.n * d.c * d.h * d.w;
    float *sums = t == DT_FP32 ? (float *)dx : cols.sums;
    CUDA_CHECK(cudaMemsetAsync(sums, 0, (size_t)inputs * sizeof(float), s));
    col2im_atomic<T><<<dgrad_blocks(tap_count(d) * column_count(d), THREADS), THREADS, 0, s>>>(
        (const T *)cols.col, sums, d);
    LAUNCH_CHECK();
    if (t == DT_FP16) {
        round_sums<<<dgrad_blocks(inputs, THREADS), THREADS, 0, s>>>(sums, (__half *)dx,
                                                                      (int)inputs);
        LAUNCH_CHECK();
    }
}

DGRAD_LAUNCHER(v2)
