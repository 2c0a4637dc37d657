/* 2d_v3, one pass: the pixels split across the GPU, all R S sums of a thread in registers.
 *
 * Idea: split the reduction, not the taps. The N P Q pixels are cut into slices of
 * consecutive pixels, a block a slice, as many as fill the SMs (wgrad_slices_to_fill: 128
 * slices of 1024 pixels at seed-2d); each of a block's 256 threads takes 4 pixels of its slice
 * and adds, for each, dy[n, p, q] times the R S elements of x under it into R S registers, and
 * dy itself into one more (db: fused). It asks for all 4 pixels' loads before it adds any, so
 * it waits for one DRAM round trip, not four; a pixel's R S loads of x hit L1 but for the
 * first. The block adds its threads' sums by warp shuffles, then shared memory, and stores
 * them in the workspace as its slice's; the last block to arrive (an integer counter) adds
 * the slices, 256 threads at once, in an order fixed by the shape, and writes dw and db.
 * R S is a template at 1x1, 3x3, 5x5 and 7x7; other filters go 16 taps a tile, tiles across
 * blocks, each tile with its own counter.
 * What changed from 2d_v2: 128 blocks instead of R S; x and dy read once instead of R S
 * times; the second pass in the same launch, since in CUDA-graph replay a launch costs about
 * 2 us, more than this kernel's work.
 * Expected: seed-2d reads 2 x 512 KB (fp32), 0.25 us at 4.15 TB/s, so it is bound by latency:
 * the launch, one DRAM round trip, the fence and the counter, a few L2 round trips of the
 * second pass: 2.5-3.5 us, 7-9x cuDNN's 23.4 us in fp32 and 26.4 in fp16; the tiny shapes
 * (1x1x1x1-1k1) about the same, the launch.
 * Measured (H200): seed-2d 6.71 us fp32 (5.21x cuDNN), 6.68 fp16 (4.15x). */
#include "wgrad.cuh"

#define THREADS 256
#define WARPS (THREADS / 32)
#define TILE_TAPS 16 /* taps a tile for the filter sizes not instantiated */

/* Pixels a thread loads before it adds: as many as keep the loaded x near 36 registers. */
static __host__ __device__ constexpr int pixels_a_thread(int taps)
{
    return taps <= 9 ? 4 : taps <= 25 ? 2 : 1;
}

/* R = S = 0: any filter, TILE_TAPS taps a tile, blockIdx.x the tile. blockIdx.y is the
 * slice: pixels [first, end) of the N P Q. */
template <typename T, int R, int S>
__global__ void __launch_bounds__(THREADS)
    wgrad_2d_one_pass(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                      T *__restrict__ db, conv2d_dims d, wgrad_slices ws)
{
    constexpr bool any_size = R == 0;
    constexpr int TAPS = any_size ? TILE_TAPS : R * S, UNROLL = pixels_a_thread(TAPS);
    __shared__ float warp_sums[WARPS][TAPS + 1];
    const int taps = (int)(d.r * d.s), width = any_size ? (int)d.s : S;
    const int tile = blockIdx.x, tap0 = any_size ? tile * TAPS : 0;
    const int slice = blockIdx.y, slices = gridDim.y;
    const int H = (int)d.h, W = (int)d.w, Q = (int)d.q, plane = (int)(d.p * d.q);
    const int stride = (int)d.stride, pad = (int)d.pad;
    const int64_t pixels = wgrad_pixels(d);
    const int64_t first = pixels * slice / slices, end = pixels * (slice + 1) / slices;

    /* This tile's taps: constants when R and S are. */
    int tap_r[TAPS], tap_s[TAPS];
#pragma unroll
    for (int j = 0; j < TAPS; j++) {
        tap_r[j] = (tap0 + j) / width;
        tap_s[j] = (tap0 + j) % width;
    }

    float acc[TAPS + 1] = {}; /* acc[TAPS]: the sum of dy, db's */
    for (int64_t base = first + threadIdx.x; base < end; base += UNROLL * THREADS) {
        float g[UNROLL], v[UNROLL][TAPS];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const bool live = base + u * THREADS < end;
            const int i = live ? (int)(base + u * THREADS) : 0; /* dy's index: K = 1 */
            const int n = i / plane, pq = i - n * plane, p = pq / Q, q = pq - p * Q;
            const int h0 = p * stride - pad, w0 = q * stride - pad;
            const T *image = x + n * H * W;
            g[u] = wgrad_load_or_zero(dy, i, live);
#pragma unroll
            for (int j = 0; j < TAPS; j++) {
                const int h = h0 + tap_r[j], w = w0 + tap_s[j];
                const bool on_x = live && tap0 + j < taps && (unsigned)h < (unsigned)H &&
                                  (unsigned)w < (unsigned)W;
                v[u][j] = wgrad_load_or_zero(image, h * W + w, on_x);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            acc[TAPS] += g[u];
#pragma unroll
            for (int j = 0; j < TAPS; j++)
                acc[j] = fmaf(g[u], v[u][j], acc[j]);
        }
    }

    /* The block's sums: the warps' by shuffles, then theirs in warp order. */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j <= TAPS; j++) {
        const float sum = wgrad_warp_sum(acc[j]);
        if (lane == 0)
            warp_sums[warp][j] = sum;
    }
    __syncthreads();
    const int tile_taps = taps - tap0 < TAPS ? taps - tap0 : TAPS;
    float *mine = ws.partials + (int64_t)slice * ws.floats;
    if ((int)threadIdx.x <= TAPS) {
        const int e = threadIdx.x;
        float total = 0.f;
        for (int from = 0; from < WARPS; from++)
            total += warp_sums[from][e];
        if (e < tile_taps)
            mine[tap0 + e] = total; /* dw[0, 0, r, s] is element r S + s = tap */
        else if (e == TAPS && tile == 0)
            mine[taps] = total; /* db[0], after dw's K C R S = R S */
    }

    if (!wgrad_arrived_last(ws.counters, tile, slices))
        return;
    const int count = tile_taps + (db != NULL && tile == 0);
    wgrad_add_slices_in_runs<THREADS>(
        ws.partials, slices, ws.floats, count,
        [&](int a) { return a < tile_taps ? tap0 + a : taps; },
        [&](int a, float total) {
            if (a < tile_taps)
                dw[tap0 + a] = from_float<T>(total);
            else
                db[0] = from_float<T>(total);
        });
}

template <typename T, int R, int S>
static void launch(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                   cudaStream_t s)
{
    constexpr int TAPS = R == 0 ? TILE_TAPS : R * S;
    const int64_t tiles = R == 0 ? (d.r * d.s + TAPS - 1) / TAPS : 1;
    const auto kernel = wgrad_2d_one_pass<T, R, S>;
    const int per_sm = kl_blocks_per_sm((const void *)kernel, THREADS, 0);
    int slices = wgrad_slices_to_fill(d, tiles, per_sm, THREADS * pixels_a_thread(TAPS));
    /* The last block of a tile reads its tile's slices alone: at most 2^15 floats. */
    if (!wgrad_finish_in_last_block(TAPS + 1, slices))
        slices = (int)((INT64_C(1) << 15) / (TAPS + 1));
    const dim3 grid((unsigned)tiles, (unsigned)slices);
    kernel<<<grid, THREADS, 0, s>>>(x, dy, dw, db, d, wgrad_slices_of(d, workspace));
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const int64_t side = d.r == d.s ? d.r : 0;
    if (side == 1)
        launch<T, 1, 1>(x, dy, dw, db, d, workspace, s);
    else if (side == 3)
        launch<T, 3, 3>(x, dy, dw, db, d, workspace, s);
    else if (side == 5)
        launch<T, 5, 5>(x, dy, dw, db, d, workspace, s);
    else if (side == 7)
        launch<T, 7, 7>(x, dy, dw, db, d, workspace, s);
    else
        launch<T, 0, 0>(x, dy, dw, db, d, workspace, s);
}

WGRAD_LAUNCHER(2d_v3, 1)
