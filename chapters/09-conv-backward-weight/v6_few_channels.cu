/* v6, few channels: one pass over x and dy, each thread holding C R S sums a filter.
 *
 * Idea: where C is small (chapter 10's first layer: C = 1, K = 16, 3x3 on 28x28), dw has few
 * sums (144) and each is N P Q long, so the split GEMMs' 64-column tiles are mostly empty.
 * Here a block takes a band of one image's output rows (at most 1024 pixels, 4 a thread;
 * 28x28 is one band), stages the x under it in shared memory (all C channels, the halo, 0 off
 * x), and each thread adds, for each of the block's F filters, dy[n, k, p, q] times the C R S
 * elements of x under each of its pixels into C R S registers, and dy into one more (db:
 * fused). A pixel's C R S loads from shared memory feed F filters (F = 4 at C R S = 9: 9
 * loads, 36 FMAs). The grid is filter tiles (K / F) x slices, a slice every slices-th band;
 * the sums stay in registers across a slice's bands, then shuffles and shared memory add the
 * block's, they go to the workspace, and each tile's last block adds its slices in a fixed
 * order. A band's dy (4 F loads a thread) is asked for at once, and the next band's x is on
 * its way into registers while this band is summed: about one DRAM round trip a band.
 * What changed from v5: no GEMM tiles and no column table; x and dy read once from DRAM (x
 * again from L2 by each filter tile).
 * Expected: cnn at batch 32 and 128 bound by latency, 4-6 us (cuDNN 31 and 36); at batch
 * 1024, 51 MB of dy (12.5 us at 4.15 TB/s) with 32 KB in flight an SM, 14-20 us against
 * cuDNN's 140. Limits: C <= 4 and C R S <= 36 (the sums are registers).
 * Measured (H200): cnn 10.9 us fp32 (5.07x cuDNN), 10.4 fp16 (1.25x); at batch 1024, 68.1, 61.5. */
#include "wgrad.cuh"

#define WARPS 8
#define THREADS (32 * WARPS)
#define BAND_SLOTS 4   /* output pixels a thread a band: a band is at most 1024 pixels */
#define BAND_COLUMNS 128
#define STAGE_SLOTS 8  /* x elements a thread stages a band: at most 2048 floats, 8 KB */
#define MAX_CHANNELS 4
#define MAX_SUMS 36    /* C R S sums a filter, each thread's */

extern "C" const char *wgrad_v6_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if (d.c > MAX_CHANNELS)
        return "more than 4 channels: v6 is for a network's first layer";
    if (d.c * d.r * d.s > MAX_SUMS)
        return "C R S above 36: v6 keeps C R S sums a filter in each thread's registers";
    if (d.k > WGRAD_COUNTERS)
        return "more than 4096 filters: a tile's counter each (wgrad.cuh)";
    return NULL;
}

/* The filters a block sums: a pixel's C R S loads of x feed each, and F (C R S + 1) sums stay
 * within about 40 registers. */
static __host__ __device__ constexpr int filters_a_block(int sums)
{
    return sums <= 4 ? 8 : sums <= 9 ? 4 : sums <= 18 ? 2 : 1;
}

/* This thread's share of a band's x, into registers: slot u packs (c, row, column) of its
 * element of the staged x as c << 24 | row << 12 | column, or is -1; 0 off x. */
template <typename T>
__device__ __forceinline__ void load_band_x(float xs[STAGE_SLOTS], const T *__restrict__ x,
                                            conv2d_dims d, band_place at,
                                            const int element[STAGE_SLOTS])
{
    const int C = (int)d.c, H = (int)d.h, W = (int)d.w;
#pragma unroll
    for (int u = 0; u < STAGE_SLOTS; u++) {
        const int e = element[u];
        const int c = e >> 24, h = at.h0 + ((e >> 12) & 0xfff), w = at.w0 + (e & 0xfff);
        const bool on_x = e >= 0 && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
        xs[u] = wgrad_load_or_zero(x, ((at.n * C + c) * H + h) * W + w, on_x);
    }
}

/* SUMS >= C R S sums a filter (the spare ones are never stored), F filters a block:
 * blockIdx.x is the filter tile (filters k0 to k0 + F - 1), blockIdx.y the slice. */
template <typename T, int SUMS, int F>
__global__ void __launch_bounds__(THREADS, 2)
    wgrad_few_channels(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                       T *__restrict__ db, conv2d_dims d, band_shape band, wgrad_slices ws)
{
    __shared__ float staged[STAGE_SLOTS * THREADS]; /* [c][x_rows][x_cols]: the band's x */
    __shared__ float warp_sums[WARPS][F][SUMS + 1];
    const int K = (int)d.k, P = (int)d.p, Q = (int)d.q, plane = P * Q;
    const int stride = (int)d.stride, taps = (int)(d.r * d.s), crs = (int)d.c * taps;
    const int tile = blockIdx.x, k0 = tile * F, slice = blockIdx.y, slices = gridDim.y;
    const int staged_floats = (int)d.c * band.x_rows * band.x_cols;
    const int64_t bands = d.n * band.down * band.across;

    /* Sum j = (c, r, s) of a pixel reads x at tap_at[j] past the pixel's corner in `staged`. */
    int tap_at[SUMS];
#pragma unroll
    for (int j = 0; j < SUMS; j++) {
        const int c = j / taps, r = j % taps / (int)d.s, s = j % (int)d.s;
        tap_at[j] = j < crs ? (c * band.x_rows + r) * band.x_cols + s : 0;
    }
    /* This thread's pixels of a band, row << 16 | column (or -1), and its elements of the
     * staged x (load_band_x): the same in every band. */
    int pixel[BAND_SLOTS], element[STAGE_SLOTS];
#pragma unroll
    for (int u = 0; u < BAND_SLOTS; u++) {
        const int t = threadIdx.x + u * THREADS;
        pixel[u] = t < band.rows * band.cols ? (t / band.cols) << 16 | t % band.cols : -1;
    }
#pragma unroll
    for (int u = 0; u < STAGE_SLOTS; u++) {
        const int e = threadIdx.x + u * THREADS, cr = e / band.x_cols;
        element[u] = e < staged_floats
                         ? (cr / band.x_rows) << 24 | (cr % band.x_rows) << 12 | e % band.x_cols
                         : -1;
    }

    float acc[F][SUMS + 1] = {}; /* acc[f][SUMS]: the sum of dy, db's */
    for (int64_t b = slice; b < bands; b += slices) {
        const band_place at = band_place_of((int)b, band, d);
        /* The band's dy and x, every load of this thread asked for before any is used. */
        const T *grad = dy + (at.n * K + k0) * plane + at.p0 * Q + at.q0;
        float g[BAND_SLOTS][F], xs[STAGE_SLOTS];
        int corner[BAND_SLOTS];
#pragma unroll
        for (int u = 0; u < BAND_SLOTS; u++) {
            const int i = pixel[u] >> 16, jq = pixel[u] & 0xffff;
            const bool live = pixel[u] >= 0 && at.p0 + i < P && at.q0 + jq < Q;
            corner[u] = live ? (i * band.x_cols + jq) * stride : 0;
#pragma unroll
            for (int f = 0; f < F; f++)
                g[u][f] = wgrad_load_or_zero(grad, f * plane + i * Q + jq, live && k0 + f < K);
        }
        load_band_x(xs, x, d, at, element);
        __syncthreads(); /* every warp is done with the previous band's x */
#pragma unroll
        for (int u = 0; u < STAGE_SLOTS; u++)
            if (element[u] >= 0)
                staged[threadIdx.x + u * THREADS] = xs[u];
        __syncthreads(); /* the band's x is staged */

#pragma unroll
        for (int u = 0; u < BAND_SLOTS; u++) {
            float v[SUMS];
#pragma unroll
            for (int j = 0; j < SUMS; j++)
                v[j] = staged[corner[u] + tap_at[j]];
#pragma unroll
            for (int f = 0; f < F; f++) {
                acc[f][SUMS] += g[u][f];
#pragma unroll
                for (int j = 0; j < SUMS; j++)
                    acc[f][j] = fmaf(g[u][f], v[j], acc[f][j]);
            }
        }
    }

    /* The block's sums: the warps' by shuffles, then theirs in warp order, into the slice's
     * partials: dw[k, c, r, s] at k C R S + j, db[k] after dw's K C R S. */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int j = 0; j <= SUMS; j++) {
            const float sum = wgrad_warp_sum(acc[f][j]);
            if (lane == 0)
                warp_sums[warp][f][j] = sum;
        }
    __syncthreads();
    const int filters = K - k0 < F ? K - k0 : F, weights = K * crs;
    float *mine = ws.partials + (int64_t)slice * ws.floats;
    for (int e = threadIdx.x; e < F * (SUMS + 1); e += THREADS) {
        const int f = e / (SUMS + 1), j = e % (SUMS + 1);
        float total = 0.f;
        for (int from = 0; from < WARPS; from++)
            total += warp_sums[from][f][j];
        if (f < filters && j < crs)
            mine[(k0 + f) * crs + j] = total;
        else if (f < filters && j == SUMS)
            mine[weights + k0 + f] = total;
    }

    if (!wgrad_arrived_last(ws.counters, tile, slices))
        return;
    const int per_filter = crs + (db != NULL); /* a filter's sums to add: dw's, then db's */
    wgrad_add_slices_in_runs<THREADS>(
        ws.partials, slices, ws.floats, filters * per_filter,
        [&](int a) {
            const int k = k0 + a / per_filter, j = a % per_filter;
            return j < crs ? k * crs + j : weights + k;
        },
        [&](int a, float total) {
            const int k = k0 + a / per_filter, j = a % per_filter;
            if (j < crs)
                dw[k * crs + j] = from_float<T>(total);
            else
                db[k] = from_float<T>(total);
        });
}

template <typename T, int SUMS>
static void launch(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                   cudaStream_t s)
{
    constexpr int F = filters_a_block(SUMS);
    const band_shape band = wgrad_band_of(d, d.c, BAND_COLUMNS, BAND_SLOTS * THREADS,
                                          STAGE_SLOTS * THREADS);
    const int64_t tiles = (d.k + F - 1) / F, outputs = F * (d.c * d.r * d.s + 1);
    const auto kernel = wgrad_few_channels<T, SUMS, F>;
    const int per_sm = kl_blocks_per_sm((const void *)kernel, THREADS, 0);
    int slices = wgrad_slices_to_fill(d, tiles, per_sm, (int64_t)band.rows * band.cols);
    /* The last block of a tile reads its tile's slices alone: at most 2^15 floats. */
    if (!wgrad_finish_in_last_block(outputs, slices))
        slices = (int)((INT64_C(1) << 15) / outputs);
    const dim3 grid((unsigned)tiles, (unsigned)slices);
    kernel<<<grid, THREADS, 0, s>>>(x, dy, dw, db, d, band, wgrad_slices_of(d, workspace));
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const int64_t sums = d.c * d.r * d.s;
    if (sums <= 4)
        launch<T, 4>(x, dy, dw, db, d, workspace, s);
    else if (sums <= 9)
        launch<T, 9>(x, dy, dw, db, d, workspace, s);
    else if (sums <= 18)
        launch<T, 18>(x, dy, dw, db, d, workspace, s);
    else if (sums <= 27)
        launch<T, 27>(x, dy, dw, db, d, workspace, s);
    else
        launch<T, 36>(x, dy, dw, db, d, workspace, s);
}

WGRAD_LAUNCHER(v6, 1)
