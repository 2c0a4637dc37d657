/* The split implicit GEMM on the ordinary cores, v3's kernel (v5 runs it with db too).
 *
 * A block computes a tile of BM filters by 64 columns (c, r, s) of dw over one slice of the
 * N P Q pixels, 16 pixels a step: it gathers dy's 16 x BM and col's 16 x 64 (x under each
 * column's tap, 0 off x) into shared memory, the next step's into registers meanwhile, and
 * each of its 64 threads adds a TM x 8 block of products (BM = 8 TM: 64 rows, or 32 where
 * K <= 32). col is never stored: a column's tap (c, r, s) is looked up in a table the block
 * builds once. Then the slice's sums go to the workspace, or straight to dw when there is one
 * slice, and the tile's last block (or wgrad_finish_slices) adds the slices in order. With
 * WITH_BIAS the blocks of the first column tile also sum the dy rows they stage: db. */
#ifndef WGRAD_SPLIT_FMA_CUH
#define WGRAD_SPLIT_FMA_CUH

#include "wgrad.cuh"

#define FMA_THREADS 64
#define FMA_BN 64
#define FMA_BK 16
#define FMA_PAD 4 /* a row of 68 floats: stores of one column hit 8 banks, not 1 */

/* The block's place in the grid: blockIdx.x is the tile (row tiles by column tiles), z the
 * slice of pixels [first, end). */
struct fma_place {
    int k0, j0, tile, first, end;
};

template <int TM>
__device__ __forceinline__ fma_place fma_place_of(conv2d_dims d, int per_slice)
{
    const int tiles_n = (int)((wgrad_columns(d) + FMA_BN - 1) / FMA_BN);
    fma_place at;
    at.tile = blockIdx.x;
    at.k0 = blockIdx.x / tiles_n * 8 * TM;
    at.j0 = blockIdx.x % tiles_n * FMA_BN;
    at.first = blockIdx.z * per_slice;
    const int pixels = (int)wgrad_pixels(d);
    at.end = at.first + per_slice < pixels ? at.first + per_slice : pixels;
    return at;
}

/* One step's loads, into registers: this thread's pixel (i0 + threadIdx.x % 16), its 2 TM
 * elements of dy (rows threadIdx.x / 16 + 4u) and 16 of col (columns threadIdx.x / 16 + 4u). */
template <typename T, int TM>
__device__ __forceinline__ void fma_load(const T *__restrict__ x, const T *__restrict__ dy,
                                         conv2d_dims d, fma_place at, int i0, const int *tap_c,
                                         const int *tap_r, const int *tap_s, float a[2 * TM],
                                         float b[16])
{
    const int i = i0 + threadIdx.x % FMA_BK, row = threadIdx.x / FMA_BK;
    const int PQ = (int)(d.p * d.q), H = (int)d.h, W = (int)d.w;
    const bool live = i < at.end;
    const int n = live ? i / PQ : 0, pq = i % PQ;
    const int hb = pq / (int)d.q * (int)d.stride - (int)d.pad;
    const int wb = pq % (int)d.q * (int)d.stride - (int)d.pad;
    const T *grad = dy + (int64_t)n * d.k * PQ + pq;
    const T *image = x + (int64_t)n * d.c * H * W;
#pragma unroll
    for (int u = 0; u < 2 * TM; u++) {
        const int k = at.k0 + row + 4 * u;
        a[u] = live && k < (int)d.k ? to_float(grad[k * PQ]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 16; u++) {
        const int jj = row + 4 * u, h = hb + tap_r[jj], w = wb + tap_s[jj];
        const bool on_x = live && tap_c[jj] >= 0 && h >= 0 && h < H && w >= 0 && w < W;
        b[u] = on_x ? to_float(image[(tap_c[jj] * H + h) * W + w]) : 0.f;
    }
}

template <int TM>
__device__ __forceinline__ void fma_store(float (*as)[8 * TM + FMA_PAD],
                                          float (*bs)[FMA_BN + FMA_PAD], const float a[2 * TM],
                                          const float b[16])
{
    const int ii = threadIdx.x % FMA_BK, row = threadIdx.x / FMA_BK;
#pragma unroll
    for (int u = 0; u < 2 * TM; u++)
        as[ii][row + 4 * u] = a[u];
#pragma unroll
    for (int u = 0; u < 16; u++)
        bs[ii][row + 4 * u] = b[u];
}

/* The slice's sums of this thread's TM x 8 block: to dw when there is one slice, else to the
 * slice's partials; the same for db's rows in the first column tile. */
template <typename T, int TM, bool WITH_BIAS>
__device__ __forceinline__ void fma_store_sums(const float acc[TM][8], float bias, conv2d_dims d,
                                               fma_place at, wgrad_slices ws, int slices,
                                               T *dw, T *db)
{
    const int weights = (int)(d.k * wgrad_columns(d)), columns = (int)wgrad_columns(d);
    float *mine = ws.partials + (int64_t)blockIdx.z * ws.floats;
    const int tm = threadIdx.x / 8, tn = threadIdx.x % 8;
#pragma unroll
    for (int a = 0; a < TM; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const int k = at.k0 + tm * TM + a, j = at.j0 + tn * 8 + b;
            if (k >= (int)d.k || j >= columns)
                continue;
            if (slices == 1)
                dw[k * columns + j] = from_float<T>(acc[a][b]);
            else
                mine[k * columns + j] = acc[a][b];
        }
    const int k = at.k0 + threadIdx.x;
    if (WITH_BIAS && at.j0 == 0 && threadIdx.x < 8 * TM && k < (int)d.k) {
        if (slices == 1)
            db[k] = from_float<T>(bias);
        else
            mine[weights + k] = bias;
    }
}

/* The tile's last block: every element of the tile, its slices added in order. */
template <typename T, int TM, bool WITH_BIAS>
__device__ __forceinline__ void fma_add_slices(conv2d_dims d, fma_place at, wgrad_slices ws,
                                               int slices, T *dw, T *db)
{
    const int weights = (int)(d.k * wgrad_columns(d)), columns = (int)wgrad_columns(d);
    for (int e = threadIdx.x; e < 8 * TM * FMA_BN; e += FMA_THREADS) {
        const int k = at.k0 + e / FMA_BN, j = at.j0 + e % FMA_BN;
        if (k < (int)d.k && j < columns)
            dw[k * columns + j] =
                from_float<T>(wgrad_sum_slices(ws.partials, slices, ws.floats, k * columns + j));
    }
    const int k = at.k0 + threadIdx.x;
    if (WITH_BIAS && at.j0 == 0 && threadIdx.x < 8 * TM && k < (int)d.k)
        db[k] = from_float<T>(wgrad_sum_slices(ws.partials, slices, ws.floats, weights + k));
}

template <typename T, int TM, bool WITH_BIAS>
__global__ void __launch_bounds__(FMA_THREADS)
    wgrad_split_fma(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                    T *__restrict__ db, conv2d_dims d, wgrad_slices ws, int slices,
                    int per_slice, bool finish_here)
{
    constexpr int BM = 8 * TM;
    __shared__ __align__(16) float as[2][FMA_BK][BM + FMA_PAD];
    __shared__ __align__(16) float bs[2][FMA_BK][FMA_BN + FMA_PAD];
    __shared__ int tap_c[FMA_BN], tap_r[FMA_BN], tap_s[FMA_BN];
    const fma_place at = fma_place_of<TM>(d, per_slice);
    for (int jj = threadIdx.x; jj < FMA_BN; jj += FMA_THREADS) {
        const int j = at.j0 + jj, rs = (int)(d.r * d.s);
        tap_c[jj] = j < (int)wgrad_columns(d) ? j / rs : -1;
        tap_r[jj] = j % rs / (int)d.s;
        tap_s[jj] = j % (int)d.s;
    }
    __syncthreads();

    float acc[TM][8] = {}, bias = 0.f, a[2 * TM], b[16];
    const int tm = threadIdx.x / 8, tn = threadIdx.x % 8;
    fma_load<T, TM>(x, dy, d, at, at.first, tap_c, tap_r, tap_s, a, b);
    fma_store<TM>(as[0], bs[0], a, b);
    __syncthreads();
    int buf = 0;
    for (int i0 = at.first; i0 < at.end; i0 += FMA_BK) {
        const bool more = i0 + FMA_BK < at.end;
        if (more)
            fma_load<T, TM>(x, dy, d, at, i0 + FMA_BK, tap_c, tap_r, tap_s, a, b);
#pragma unroll
        for (int kk = 0; kk < FMA_BK; kk++) {
            float av[TM], bv[8];
#pragma unroll
            for (int u = 0; u < TM; u += 4)
                *(float4 *)&av[u] = *(const float4 *)&as[buf][kk][tm * TM + u];
            *(float4 *)&bv[0] = *(const float4 *)&bs[buf][kk][tn * 8];
            *(float4 *)&bv[4] = *(const float4 *)&bs[buf][kk][tn * 8 + 4];
#pragma unroll
            for (int u = 0; u < TM; u++)
#pragma unroll
                for (int v = 0; v < 8; v++)
                    acc[u][v] = fmaf(av[u], bv[v], acc[u][v]);
        }
        if (WITH_BIAS && at.j0 == 0 && threadIdx.x < BM)
#pragma unroll
            for (int kk = 0; kk < FMA_BK; kk++)
                bias += as[buf][kk][threadIdx.x];
        if (more)
            fma_store<TM>(as[buf ^ 1], bs[buf ^ 1], a, b);
        __syncthreads();
        buf ^= 1;
    }

    fma_store_sums<T, TM, WITH_BIAS>(acc, bias, d, at, ws, slices, dw, db);
    if (slices > 1 && finish_here && wgrad_arrived_last(ws.counters, at.tile, slices))
        fma_add_slices<T, TM, WITH_BIAS>(d, at, ws, slices, dw, db);
}

/* The launch: the tile height by K, the slices to give every SM as many blocks as fit at
 * once (one wave), and the second pass in the last blocks or as a kernel of its own. */
template <typename T, int TM, bool WITH_BIAS>
static void launch_split_fma_tm(const T *x, const T *dy, T *dw, T *db, conv2d_dims d,
                                void *workspace, cudaStream_t s)
{
    const int64_t tiles = (d.k + 8 * TM - 1) / (8 * TM) *
                          ((wgrad_columns(d) + FMA_BN - 1) / FMA_BN);
    const int fit = kl_blocks_per_sm((const void *)wgrad_split_fma<T, TM, WITH_BIAS>,
                                     FMA_THREADS, 0);
    int slices = wgrad_slices_to_fill(d, tiles, fit, 16 * FMA_BK);
    const int64_t pixels = wgrad_pixels(d);
    const int per_slice = (int)((pixels + slices - 1) / slices + FMA_BK - 1) / FMA_BK * FMA_BK;
    slices = (int)((pixels + per_slice - 1) / per_slice);
    const bool finish_here =
        tiles <= WGRAD_COUNTERS && wgrad_finish_in_last_block(8 * TM * (FMA_BN + 1), slices);
    const wgrad_slices ws = wgrad_slices_of(d, workspace);
    const dim3 grid((unsigned)tiles, 1, (unsigned)slices);
    wgrad_split_fma<T, TM, WITH_BIAS><<<grid, FMA_THREADS, 0, s>>>(x, dy, dw, db, d, ws, slices,
                                                                   per_slice, finish_here);
    LAUNCH_CHECK();
    if (slices > 1 && !finish_here)
        wgrad_finish_slices(ws.partials, slices, d, dw, WITH_BIAS ? db : NULL,
                            sizeof(T) == 4 ? DT_FP32 : DT_FP16, s);
}

template <typename T, bool WITH_BIAS>
static void launch_split_fma(const T *x, const T *dy, T *dw, T *db, conv2d_dims d,
                             void *workspace, cudaStream_t s)
{
    if (d.k <= 32)
        launch_split_fma_tm<T, 4, WITH_BIAS>(x, dy, dw, db, d, workspace, s);
    else
        launch_split_fma_tm<T, 8, WITH_BIAS>(x, dy, dw, db, d, workspace, s);
}

#endif
