/* v5, a row shared by a thread-block cluster: small blocks, many per SM, merged on chip.
 *
 * Idea: v3 and v4 give a long row (or a strip of strided rows) to ONE block as large as the row
 * needs: at `large` a 1024-thread block per SM (or two of 512), which loads, then stops loading
 * while it reduces, then stores. Here a row is split across a cluster of B <= 8 blocks of at
 * most 256 threads (an sm_90 feature): each block keeps its slice in registers, summarises it
 * (v4's merge, one exp per value), and the B blocks exchange one summary each through
 * distributed shared memory after one cluster barrier, merged in rank order so every block
 * gets the same bits. A block leaves only after a second cluster barrier says no sibling still
 * reads its shared memory. An SM then holds four to eight blocks at different phases: while
 * one reduces, the others' loads are in flight.
 * The mapping: contiguous rows take G <= 256 threads a block, up to 32 values a thread forward
 * (16 of y and 16 of dy backward), B blocks a row; at 8x10x1x1 a 32-thread block per row of 10,
 * one value a lane. Strided rows (C > 32) take a cluster per tile of 32 neighbouring positions,
 * lane l owning position l and the cluster's warps splitting the channels, up to 16 a lane.
 * What changed from v4: the unit of work is a cluster of small blocks, not one large block; no
 * shared-memory staging (the row is spread over up to 8 SMs' registers instead).
 * Expected: 88% of the roof or more at `large`, fp16 included; 85% or more at 64x1000x14x14 (8
 * blocks of 256 threads a tile, 3584 blocks), against one 1024-thread block an SM in v3; at
 * 8x10x1x1 a launch floor plus one DRAM round trip.
 * Limits: compute capability 9.0 (main.cu's rung table says so). Contiguous rows over 65536
 * values forward or 32768 backward, strided rows over 1024 channels or of at most 32, and grids
 * past 2^31 blocks go to v4.
 * Measured (H200): short of the prediction but at 8x10x1x1 (1.92 us, v3 2.16): `large` forward
 * 93.8% fp32, 67.7% fp16; 64x1000x14x14 46.6% against v3's 57.4% (NOTES.md has why). */
#include "cluster.cuh"
#include "launch.cuh"
#include "softmax.cuh"
#include "softmax.h"

#define ROW_THREADS 256
#define MAX_CLUSTER 8
#define FWD_VALUES 32 /* of the row per thread, forward */
#define BWD_VALUES 16 /* of y and of dy per thread, backward */
#define COLUMN_WARPS 8
#define COLUMN_VALUES 16 /* channels per lane, strided rows */

/* ---- contiguous rows: block `rank` of the cluster owns elements [rank slice, rank slice +
 * slice) of row blockIdx.x / B, in softmax.cuh's pack layout; slice = P G W. ---- */

template <typename T, int P>
__global__ void __launch_bounds__(ROW_THREADS)
    softmax_forward_rows_cluster(const T *__restrict__ x, T *__restrict__ y, int C, int slice,
                                 bool vec)
{
    constexpr int W = pack16<T>::width;
    __shared__ softmax_stats part[32], published[1], combined[1];
    kl_let_next_grid_start();
    const unsigned B = cluster_blocks(), rank = cluster_rank();
    const int first = (int)rank * slice, n = min(C - first, slice);
    const size_t start = (size_t)(blockIdx.x / B) * (size_t)C + (size_t)first;
    kl_wait_for_previous_grid();

    float v[P][W];
#pragma unroll
    for (int p = 0; p < P; p++)
        softmax_load_pack(x + start, p, n, vec, true, SOFTMAX_NO_VALUE, v[p]);
    softmax_stats mine = {SOFTMAX_NO_VALUE, 0.f};
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int j = 0; j < W; j++)
            mine.max = fmaxf(mine.max, v[p][j]);
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int j = 0; j < W; j++) {
            v[p][j] = softmax_exp(v[p][j] - mine.max);
            mine.sum += v[p][j];
        }
    softmax_stats row = softmax_row_reduce(part, mine, softmax_merge_op());
    if (B > 1) {
        if (threadIdx.x == 0)
            published[0] = row;
        cluster_combine(published, 1, softmax_merge_op(), combined);
        row = combined[0];
    }
    const float scale = softmax_exp(mine.max - row.max) / row.sum;
#pragma unroll
    for (int p = 0; p < P; p++) {
#pragma unroll
        for (int j = 0; j < W; j++)
            v[p][j] *= scale;
        softmax_store_pack(y + start, p, n, vec, true, v[p]);
    }
    if (B > 1)
        cluster_wait_readers();
}

template <typename T, int P>
__global__ void __launch_bounds__(ROW_THREADS)
    softmax_backward_rows_cluster(const T *__restrict__ y, const T *__restrict__ dy,
                                  T *__restrict__ dx, int C, int slice, bool vec)
{
    constexpr int W = pack16<T>::width;
    __shared__ float part[32], published[1], combined[1];
    kl_let_next_grid_start();
    const unsigned B = cluster_blocks(), rank = cluster_rank();
    const int first = (int)rank * slice, n = min(C - first, slice);
    const size_t start = (size_t)(blockIdx.x / B) * (size_t)C + (size_t)first;
    kl_wait_for_previous_grid();

    float yv[P][W], dyv[P][W];
#pragma unroll
    for (int p = 0; p < P; p++) {
        softmax_load_pack(y + start, p, n, vec, true, 0.f, yv[p]);
        softmax_load_pack(dy + start, p, n, vec, true, 0.f, dyv[p]);
    }
    float dot = 0.f;
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int j = 0; j < W; j++)
            dot += yv[p][j] * dyv[p][j];
    dot = softmax_row_reduce(part, dot, softmax_sum_op());
    if (B > 1) {
        if (threadIdx.x == 0)
            published[0] = dot;
        cluster_combine(published, 1, softmax_sum_op(), combined);
        dot = combined[0];
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
#pragma unroll
        for (int j = 0; j < W; j++)
            yv[p][j] *= dyv[p][j] - dot;
        softmax_store_pack(dx + start, p, n, vec, true, yv[p]);
    }
    if (B > 1)
        cluster_wait_readers();
}

/* ---- strided rows: cluster `tile` owns positions tile_s .. tile_s + 31 of image n; lane l
 * position tile_s + l; warp w of block rank r channels g, g + groups, ... with g = r warps + w
 * and groups = B warps. ---- */

struct column_tile {
    size_t start;      /* element (n, c = g, s) */
    size_t step;       /* between a lane's channels: groups S */
    int g, groups;
    bool live;         /* the lane's position is inside the image */
};

__device__ __forceinline__ column_tile column_tile_of(int C, int S, int tiles_per_image)
{
    const unsigned B = cluster_blocks(), rank = cluster_rank(), tile = blockIdx.x / B;
    const unsigned n = tile / tiles_per_image;
    const int s = (int)(tile - n * tiles_per_image) * 32 + (int)threadIdx.x;
    column_tile ct;
    ct.groups = (int)(B * blockDim.y);
    ct.g = (int)(rank * blockDim.y + threadIdx.y);
    ct.live = s < S;
    ct.start = ((size_t)n * C + (size_t)ct.g) * (size_t)S + (size_t)s;
    ct.step = (size_t)ct.groups * (size_t)S;
    return ct;
}

/* op over the warps of the block for each lane (part holds 32 values per warp), then over the
 * cluster; every thread gets its position's result. */
template <typename V, typename Op>
__device__ __forceinline__ V column_combine(V (*part)[32], V *published, V *combined, V mine,
                                            Op op)
{
    part[threadIdx.y][threadIdx.x] = mine;
    __syncthreads();
    V acc = part[0][threadIdx.x];
    for (int w = 1; w < (int)blockDim.y; w++)
        acc = op(acc, part[w][threadIdx.x]);
    if (cluster_blocks() == 1)
        return acc;
    if (threadIdx.y == 0)
        published[threadIdx.x] = acc;
    cluster_combine(published, 32, op, combined);
    return combined[threadIdx.x];
}

template <typename T, int K>
__global__ void __launch_bounds__(COLUMN_WARPS * 32)
    softmax_forward_columns_cluster(const T *__restrict__ x, T *__restrict__ y, int C, int S,
                                    int tiles_per_image)
{
    __shared__ softmax_stats part[COLUMN_WARPS][32], published[32], combined[32];
    kl_let_next_grid_start();
    const column_tile ct = column_tile_of(C, S, tiles_per_image);
    kl_wait_for_previous_grid();

    float v[K];
#pragma unroll
    for (int k = 0; k < K; k++)
        v[k] = ct.live && ct.g + k * ct.groups < C ? to_float(x[ct.start + k * ct.step])
                                                   : SOFTMAX_NO_VALUE;
    softmax_stats mine = {SOFTMAX_NO_VALUE, 0.f};
#pragma unroll
    for (int k = 0; k < K; k++)
        mine.max = fmaxf(mine.max, v[k]);
#pragma unroll
    for (int k = 0; k < K; k++) {
        v[k] = softmax_exp(v[k] - mine.max);
        mine.sum += v[k];
    }
    const softmax_stats row = column_combine(part, published, combined, mine, softmax_merge_op());
    const float scale = softmax_exp(mine.max - row.max) / row.sum;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (ct.live && ct.g + k * ct.groups < C)
            y[ct.start + k * ct.step] = from_float<T>(v[k] * scale);
    if (cluster_blocks() > 1)
        cluster_wait_readers();
}

template <typename T, int K>
__global__ void __launch_bounds__(COLUMN_WARPS * 32)
    softmax_backward_columns_cluster(const T *__restrict__ y, const T *__restrict__ dy,
                                     T *__restrict__ dx, int C, int S, int tiles_per_image)
{
    __shared__ float part[COLUMN_WARPS][32], published[32], combined[32];
    kl_let_next_grid_start();
    const column_tile ct = column_tile_of(C, S, tiles_per_image);
    kl_wait_for_previous_grid();

    float yv[K], dyv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const bool in = ct.live && ct.g + k * ct.groups < C;
        yv[k] = in ? to_float(y[ct.start + k * ct.step]) : 0.f;
        dyv[k] = in ? to_float(dy[ct.start + k * ct.step]) : 0.f;
    }
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
        dot += yv[k] * dyv[k];
    dot = column_combine(part, published, combined, dot, softmax_sum_op());
#pragma unroll
    for (int k = 0; k < K; k++)
        if (ct.live && ct.g + k * ct.groups < C)
            dx[ct.start + k * ct.step] = from_float<T>(yv[k] * (dyv[k] - dot));
    if (cluster_blocks() > 1)
        cluster_wait_readers();
}

/* ---- plans and launchers ---- */

struct row_plan {
    int packs_per_thread, threads, blocks_per_row, slice;
};

/* Contiguous rows: as few packs per thread as keep blocks at ROW_THREADS or below, then as many
 * blocks per row as the row needs. False when the row needs more than MAX_CLUSTER blocks. */
static bool plan_rows(int C, size_t esize, int max_values, struct row_plan *rp)
{
    const int W = (int)(16 / esize), packs = (C + W - 1) / W, max_packs = max_values / W;
    int P = 1;
    while (P < max_packs && P * ROW_THREADS < packs)
        P *= 2;
    int G = (packs + P - 1) / P;
    G = G > ROW_THREADS ? ROW_THREADS : (G + 31) / 32 * 32;
    rp->packs_per_thread = P;
    rp->threads = G;
    rp->blocks_per_row = (packs + P * G - 1) / (P * G);
    rp->slice = P * G * W;
    return rp->blocks_per_row <= MAX_CLUSTER;
}

/* Strided rows: warps per block and blocks per cluster so that each lane holds at most
 * COLUMN_VALUES channels; `k` is that count, rounded up to a power of two. */
struct column_plan {
    int warps, blocks, k;
};

static bool plan_columns(int C, struct column_plan *cp)
{
    const int groups = (C + COLUMN_VALUES - 1) / COLUMN_VALUES;
    cp->warps = groups < COLUMN_WARPS ? groups : COLUMN_WARPS;
    cp->blocks = (groups + cp->warps - 1) / cp->warps;
    if (cp->blocks > MAX_CLUSTER)
        return false;
    const int per_lane = (C + cp->warps * cp->blocks - 1) / (cp->warps * cp->blocks);
    cp->k = 1;
    while (cp->k < per_lane)
        cp->k *= 2;
    return true;
}

#define PICK_K(K, LAUNCH)                                                                      \
    do {                                                                                       \
        switch (K) {                                                                           \
        case 1: case 2: LAUNCH(2); break;                                                      \
        case 4: LAUNCH(4); break;                                                              \
        case 8: LAUNCH(8); break;                                                              \
        default: LAUNCH(16); break;                                                            \
        }                                                                                      \
    } while (0)

/* Returns false for the shapes left to v4. */
template <typename T>
static bool forward(const T *x, T *y, struct softmax_dims d, bool early, cudaStream_t s)
{
    const int C = (int)d.c, S = (int)(d.h * d.w);
    if (S == 1) {
        struct row_plan rp;
        const bool vec = C * sizeof(T) % 16 == 0 && aligned16(x) && aligned16(y);
        if (!plan_rows(C, sizeof(T), FWD_VALUES, &rp) || d.n * rp.blocks_per_row > 0x7fffffff)
            return false;
        const struct kl_launch_opts o = {(unsigned)rp.blocks_per_row, early};
        const dim3 grid((unsigned)(d.n * rp.blocks_per_row)), block(rp.threads);
#define LAUNCH_ROWS(P)                                                                         \
    kl_launch(softmax_forward_rows_cluster<T, P>, grid, block, 0, s, o, x, y, C, rp.slice, vec)
        constexpr int max_packs = FWD_VALUES / pack16<T>::width;
        if (rp.packs_per_thread == max_packs)
            LAUNCH_ROWS(max_packs);
        else if (rp.packs_per_thread == 4)
            LAUNCH_ROWS(4 < max_packs ? 4 : max_packs);
        else if (rp.packs_per_thread == 2)
            LAUNCH_ROWS(2);
        else
            LAUNCH_ROWS(1);
#undef LAUNCH_ROWS
        return true;
    }
    struct column_plan cp;
    const int64_t tiles = d.n * ((S + 31) / 32);
    if (C <= 32 || !plan_columns(C, &cp) || tiles * cp.blocks > 0x7fffffff)
        return false;
    const struct kl_launch_opts o = {(unsigned)cp.blocks, early};
    const dim3 grid((unsigned)(tiles * cp.blocks)), block(32, cp.warps);
#define LAUNCH_COLUMNS(K)                                                                      \
    kl_launch(softmax_forward_columns_cluster<T, K>, grid, block, 0, s, o, x, y, C, S,       \
              (S + 31) / 32)
    PICK_K(cp.k, LAUNCH_COLUMNS);
#undef LAUNCH_COLUMNS
    return true;
}

template <typename T>
static bool backward(const T *y, const T *dy, T *dx, struct softmax_dims d, bool early,
                     cudaStream_t s)
{
    const int C = (int)d.c, S = (int)(d.h * d.w);
    if (S == 1) {
        struct row_plan rp;
        const bool vec =
            C * sizeof(T) % 16 == 0 && aligned16(y) && aligned16(dy) && aligned16(dx);
        if (!plan_rows(C, sizeof(T), BWD_VALUES, &rp) || d.n * rp.blocks_per_row > 0x7fffffff)
            return false;
        const struct kl_launch_opts o = {(unsigned)rp.blocks_per_row, early};
        const dim3 grid((unsigned)(d.n * rp.blocks_per_row)), block(rp.threads);
#define LAUNCH_ROWS(P)                                                                         \
    kl_launch(softmax_backward_rows_cluster<T, P>, grid, block, 0, s, o, y, dy, dx, C,        \
              rp.slice, vec)
        constexpr int max_packs = BWD_VALUES / pack16<T>::width;
        if (rp.packs_per_thread == max_packs)
            LAUNCH_ROWS(max_packs);
        else if (rp.packs_per_thread == 2)
            LAUNCH_ROWS(2);
        else
            LAUNCH_ROWS(1);
#undef LAUNCH_ROWS
        return true;
    }
    struct column_plan cp;
    const int64_t tiles = d.n * ((S + 31) / 32);
    if (C <= 32 || !plan_columns(C, &cp) || tiles * cp.blocks > 0x7fffffff)
        return false;
    const struct kl_launch_opts o = {(unsigned)cp.blocks, early};
    const dim3 grid((unsigned)(tiles * cp.blocks)), block(32, cp.warps);
#define LAUNCH_COLUMNS(K)                                                                      \
    kl_launch(softmax_backward_columns_cluster<T, K>, grid, block, 0, s, o, y, dy, dx, C, S,  \
              (S + 31) / 32)
    PICK_K(cp.k, LAUNCH_COLUMNS);
#undef LAUNCH_COLUMNS
    return true;
}

/* v6 calls these with early = true. */
extern "C" void softmax_forward_v5_launch(const void *x, void *y, struct softmax_dims d,
                                          enum dtype t, bool early, cudaStream_t s)
{
    const bool done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, early, s)
                                   : forward((const __half *)x, (__half *)y, d, early, s);
    if (!done)
        softmax_forward_v4(x, y, d, t, s);
}

extern "C" void softmax_backward_v5_launch(const void *y, const void *dy, void *dx,
                                           struct softmax_dims d, enum dtype t, bool early,
                                           cudaStream_t s)
{
    const bool done =
        t == DT_FP32
            ? backward((const float *)y, (const float *)dy, (float *)dx, d, early, s)
            : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, early, s);
    if (!done)
        softmax_backward_v4(y, dy, dx, d, t, s);
}

extern "C" void softmax_forward_v5(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v5_cluster");
    softmax_forward_v5_launch(x, y, d, t, false, s);
}

extern "C" void softmax_backward_v5(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v5_cluster");
    softmax_backward_v5_launch(y, dy, dx, d, t, false, s);
}
