/* v7, filter taps: a thread per (channel, 8 filters), all R S taps of each in registers.
 *
 * Idea: the split GEMMs give a thread an 8 x 8 block of (filter, column) sums and gather each
 * column's tap from x; where dw is small (chapter 10's second layer: 32 x 16 x 3 x 3) few
 * such blocks exist, and each walks its 16-pixel steps one DRAM round trip at a time. Here a
 * block stages a band of output pixels (v6's bands: at most 64, with the x under them, 0 off
 * x, for 16 channels, and dy for 32 filters), and a thread of it, one channel c and 8 filters,
 * adds for each pixel dy[k] times the R S elements of x under it: 8 R S sums (72 at 3x3) fed
 * by 2 wide loads of dy and R S loads of x from shared memory, and db in the threads of
 * channel 0. The block's four groups of 64 threads split a band's pixels and add their sums
 * in a fixed order at the end; a block takes every slices-th band, the next band's loads in
 * flight while this one is summed; the slices go to the workspace and split.cu adds them.
 * What changed from v5: no column tiles and no tap table; a loaded x element serves 8 filters
 * and each of its taps in a thread, and the reduction is cut into as many slices as fill the
 * GPU, each band (up to 64 pixels) a unit, not 256 pixels.
 * Expected: at chapter 10's conv2 at batch 32, 128 bands of one DRAM round trip each plus the
 * second pass: 6-8 us (v5 30.5, cuDNN 24.2); at batch 1024 the FMA units bound it, 72 FMAs to
 * 2 + 9 shared loads: 35-45 us (v5 158, cuDNN 146). Limits: R, S <= 3.
 * Measured (H200, bwd_weight fp32): conv2 11.4 us at batch 32 (2.1x cuDNN), 23.4 at 128, 129 at
 * 1024 (1.14x), fp16 alike; but 14 TFLOP/s at most, not the 45 predicted: the seed 332 us (v3
 * 231) and resnet 762 (v3 313). 174 registers leave one block of 8 warps an SM. */
#include "wgrad.cuh"

#define GROUPS 4
#define GROUP_THREADS 64
#define THREADS (GROUPS * GROUP_THREADS)
#define FILTERS 8         /* a thread's */
#define TILE_FILTERS 32   /* 4 threads of a channel, 8 filters each */
#define TILE_CHANNELS 16  /* GROUP_THREADS / 4 */
#define BAND_PIXELS 64
#define BAND_COLUMNS 32
#define X_SLOTS 8         /* x elements a thread stages a band: at most 2048 floats */
#define DY_STRIDE (TILE_FILTERS + 4) /* a pixel's dy in shared memory, 16-byte aligned */
#define SUMS (FILTERS * (9 + 1))     /* a thread's: 8 x 9 taps, then 8 of db */

extern "C" const char *wgrad_v7_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if (d.r > 3 || d.s > 3)
        return "a filter wider than 3: v7 keeps a thread's 3 x 3 taps in registers";
    return NULL;
}

/* The staged band: x as [channel][x_rows][x_cols] with an odd channel stride (the 16 channels
 * a warp reads fall in 16 banks), dy as [pixel][filter]. After the bands, the same memory holds
 * two groups' sums for the others to add. */
union v7_shared {
    struct {
        float x[X_SLOTS * THREADS + TILE_CHANNELS];
        __align__(16) float dy[BAND_PIXELS * DY_STRIDE];
        int corner[BAND_PIXELS]; /* a pixel's x (channel 0, tap 0, 0) in x */
    } band;
    float sums[2][SUMS][GROUP_THREADS];
};

struct v7_tile {
    int k0, c0, x_channel_stride;
};

/* This thread's loads of band `at` into registers: dy at its pixel for the filters
 * threadIdx.x / 64 + 4u, x at the packed (c, row, column) of each of its slots. */
template <typename T>
__device__ __forceinline__ void v7_load(float g[FILTERS], float xs[X_SLOTS],
                                        const T *__restrict__ x, const T *__restrict__ dy,
                                        conv2d_dims d, band_shape band, band_place at,
                                        v7_tile tile, const int element[X_SLOTS])
{
    const int K = (int)d.k, P = (int)d.p, Q = (int)d.q, C = (int)d.c, H = (int)d.h,
              W = (int)d.w;
    const int i = threadIdx.x % BAND_PIXELS, row = i / band.cols, col = i % band.cols;
    const bool live = i < band.rows * band.cols && at.p0 + row < P && at.q0 + col < Q;
    const int at_pixel = ((at.n * K + tile.k0) * P + at.p0 + row) * Q + at.q0 + col;
#pragma unroll
    for (int u = 0; u < FILTERS; u++) {
        const int k = threadIdx.x / BAND_PIXELS + 4 * u;
        g[u] = wgrad_load_or_zero(dy, at_pixel + k * P * Q, live && tile.k0 + k < K);
    }
#pragma unroll
    for (int u = 0; u < X_SLOTS; u++) {
        const int e = element[u];
        const int c = tile.c0 + (e >> 24), h = at.h0 + ((e >> 12) & 0xfff),
                  w = at.w0 + (e & 0xfff);
        const bool on_x = e >= 0 && c < C && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
        xs[u] = wgrad_load_or_zero(x, ((at.n * C + c) * H + h) * W + w, on_x);
    }
}

__device__ __forceinline__ void v7_stage(v7_shared &sh, const float g[FILTERS],
                                         const float xs[X_SLOTS], band_shape band,
                                         v7_tile tile, const int element[X_SLOTS])
{
    const int i = threadIdx.x % BAND_PIXELS;
#pragma unroll
    for (int u = 0; u < FILTERS; u++)
        sh.band.dy[i * DY_STRIDE + threadIdx.x / BAND_PIXELS + 4 * u] = g[u];
#pragma unroll
    for (int u = 0; u < X_SLOTS; u++) {
        const int e = element[u];
        if (e >= 0)
            sh.band.x[(e >> 24) * tile.x_channel_stride +
                      ((e >> 12) & 0xfff) * band.x_cols + (e & 0xfff)] = xs[u];
    }
}

/* A group's pixels of the staged band: each adds dy[k] x[tap] for its 8 filters and its
 * channel's taps, and the channel-0 threads dy[k] for db. */
template <int R>
__device__ __forceinline__ void v7_sum_band(const v7_shared &sh, float acc[SUMS],
                                            conv2d_dims d, band_shape band, v7_tile tile,
                                            bool sums_bias)
{
    const int group = threadIdx.x / GROUP_THREADS, t = threadIdx.x % GROUP_THREADS;
    const int filters = t % 4 * FILTERS, channel = t / 4;
    const int pixels = band.rows * band.cols, per_group = (pixels + GROUPS - 1) / GROUPS;
    const int first = group * per_group;
    const int last = first + per_group < pixels ? first + per_group : pixels;
    const int filter_rows = (int)d.r, filter_cols = (int)d.s, row = band.x_cols;
    if (tile.c0 + channel >= (int)d.c)
        return; /* past the last channel: its x is not staged */
    const float *x = sh.band.x + channel * tile.x_channel_stride;
    for (int i = first; i < last; i++) {
        float g[FILTERS];
        *(float4 *)&g[0] = *(const float4 *)&sh.band.dy[i * DY_STRIDE + filters];
        *(float4 *)&g[4] = *(const float4 *)&sh.band.dy[i * DY_STRIDE + filters + 4];
        const float *under = x + sh.band.corner[i];
        float v[R * R];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int s = 0; s < R; s++)
                v[r * R + s] = r < filter_rows && s < filter_cols ? under[r * row + s] : 0.f;
#pragma unroll
        for (int f = 0; f < FILTERS; f++) {
#pragma unroll
            for (int j = 0; j < R * R; j++)
                acc[f * 9 + j] = fmaf(g[f], v[j], acc[f * 9 + j]);
            if (sums_bias)
                acc[FILTERS * 9 + f] += g[f];
        }
    }
}

/* The four groups' sums added in a fixed order ((0 + 2) + (1 + 3)) into group 0's registers. */
__device__ __forceinline__ void v7_add_groups(v7_shared &sh, float acc[SUMS])
{
    const int group = threadIdx.x / GROUP_THREADS, t = threadIdx.x % GROUP_THREADS;
    __syncthreads(); /* every group is done with the staged band */
    for (int half = 2; half >= 1; half /= 2) {
        if (group >= half && group < 2 * half)
#pragma unroll
            for (int j = 0; j < SUMS; j++)
                sh.sums[group - half][j][t] = acc[j];
        __syncthreads();
        if (group < half)
#pragma unroll
            for (int j = 0; j < SUMS; j++)
                acc[j] += sh.sums[group][j][t];
        __syncthreads();
    }
}

/* Group 0's sums of the block to dw (one slice) or to its slice's partials. */
template <typename T>
__device__ __forceinline__ void v7_store(const float acc[SUMS], conv2d_dims d, v7_tile tile,
                                         wgrad_slices ws, int slices, T *dw, T *db)
{
    const int t = threadIdx.x, c = tile.c0 + t / 4, k0 = tile.k0 + t % 4 * FILTERS;
    const int C = (int)d.c, K = (int)d.k, R = (int)d.r, S = (int)d.s, weights = K * C * R * S;
    float *mine = ws.partials + (int64_t)blockIdx.y * ws.floats;
#pragma unroll
    for (int f = 0; f < FILTERS; f++) {
        const int k = k0 + f;
        if (k >= K)
            break;
#pragma unroll
        for (int r = 0; r < 3; r++)
#pragma unroll
            for (int s = 0; s < 3; s++) {
                if (r >= R || s >= S || c >= C)
                    continue;
                const int e = ((k * C + c) * R + r) * S + s;
                if (slices == 1)
                    dw[e] = from_float<T>(acc[f * 9 + r * 3 + s]);
                else
                    mine[e] = acc[f * 9 + r * 3 + s];
            }
        if (db && tile.c0 == 0 && t / 4 == 0) {
            if (slices == 1)
                db[k] = from_float<T>(acc[FILTERS * 9 + f]);
            else
                mine[weights + k] = acc[FILTERS * 9 + f];
        }
    }
}

/* blockIdx.x: the tile of 32 filters by 16 channels; blockIdx.y: the slice, every
 * gridDim.y-th band from blockIdx.y on. R: 3 for taps up to 3 x 3, 1 for 1 x 1. */
template <typename T, int R>
__global__ void __launch_bounds__(THREADS, 1)
    wgrad_filter_taps(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                      T *__restrict__ db, conv2d_dims d, band_shape band, wgrad_slices ws)
{
    __shared__ v7_shared sh;
    const int channel_tiles = (int)((d.c + TILE_CHANNELS - 1) / TILE_CHANNELS);
    v7_tile tile;
    tile.k0 = blockIdx.x / channel_tiles * TILE_FILTERS;
    tile.c0 = blockIdx.x % channel_tiles * TILE_CHANNELS;
    tile.x_channel_stride = band.x_rows * band.x_cols | 1;
    const int slice = blockIdx.y, slices = gridDim.y;
    const int64_t bands = d.n * band.down * band.across;

    /* The same in every band: each pixel's corner in the staged x, and this thread's slots of
     * it, c << 24 | row << 12 | column, or -1. */
    for (int i = threadIdx.x; i < BAND_PIXELS; i += THREADS)
        sh.band.corner[i] = (i / band.cols * band.x_cols + i % band.cols) * (int)d.stride;
    const int plane = band.x_rows * band.x_cols;
    int element[X_SLOTS];
#pragma unroll
    for (int u = 0; u < X_SLOTS; u++) {
        const int e = threadIdx.x + u * THREADS, cr = e / band.x_cols;
        element[u] = e < TILE_CHANNELS * plane
                         ? (e / plane) << 24 | (cr % band.x_rows) << 12 | e % band.x_cols
                         : -1;
    }
    const bool sums_bias = db && tile.c0 == 0 && threadIdx.x % GROUP_THREADS / 4 == 0;

    float acc[SUMS] = {}, g[FILTERS], xs[X_SLOTS];
    if (slice < bands)
        v7_load(g, xs, x, dy, d, band, band_place_of(slice, band, d), tile, element);
    for (int64_t b = slice; b < bands; b += slices) {
        __syncthreads(); /* every group is done with the previous band */
        v7_stage(sh, g, xs, band, tile, element);
        __syncthreads();
        if (b + slices < bands)
            v7_load(g, xs, x, dy, d, band, band_place_of((int)(b + slices), band, d), tile,
                    element);
        v7_sum_band<R>(sh, acc, d, band, tile, sums_bias);
    }
    v7_add_groups(sh, acc);
    if (threadIdx.x < GROUP_THREADS)
        v7_store<T>(acc, d, tile, ws, slices, dw, db);
}

/* Slices to give every SM as many blocks as fit (one, at this kernel's registers), within the
 * workspace and the bands; one slice writes dw itself, more leave the adding to split.cu. */
template <typename T, int R>
static void launch(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                   cudaStream_t s)
{
    const int64_t channels = d.c < TILE_CHANNELS ? d.c : TILE_CHANNELS;
    const band_shape band = wgrad_band_of(d, channels, BAND_COLUMNS, BAND_PIXELS,
                                          X_SLOTS * THREADS);
    const int64_t tiles = (d.k + TILE_FILTERS - 1) / TILE_FILTERS *
                          ((d.c + TILE_CHANNELS - 1) / TILE_CHANNELS);
    const int64_t bands = d.n * band.down * band.across;
    const auto kernel = wgrad_filter_taps<T, R>;
    const int per_sm = kl_blocks_per_sm((const void *)kernel, THREADS, 0);
    int64_t slices = wgrad_slices_to_fill(d, tiles, per_sm, 1);
    slices = slices < bands ? slices : bands;
    const dim3 grid((unsigned)tiles, (unsigned)slices);
    const wgrad_slices ws = wgrad_slices_of(d, workspace);
    kernel<<<grid, THREADS, 0, s>>>(x, dy, dw, db, d, band, ws);
    LAUNCH_CHECK();
    if (slices > 1)
        wgrad_finish_slices(ws.partials, (int)slices, d, dw, db,
                            sizeof(T) == 4 ? DT_FP32 : DT_FP16, s);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    if (d.r == 1 && d.s == 1)
        launch<T, 1>(x, dy, dw, db, d, workspace, s);
    else
        launch<T, 3>(x, dy, dw, db, d, workspace, s);
}

WGRAD_LAUNCHER(v7, 1)
