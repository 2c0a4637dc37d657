/* v8, the image on chip: a cluster holds whole images in shared memory, read and written in
 * contiguous slabs by the copy engine.
 *
 * Idea: at 64x1000x14x14 a row's 1000 values lie 196 apart, and every earlier rung reads them
 * in runs of a few dozen bytes (v3's strips: 64 bytes every 784 in fp32). A copy with that
 * access pattern is itself as slow as v3, so the pattern, not the arithmetic, holds the
 * strided shapes back. But the C rows of one image together are one contiguous block of
 * C H W elements (392 KB in fp16 here), and a few SMs can hold it. So the B blocks of a
 * cluster take one image: block b copies channels [b k, b k + k), a contiguous slab, into its
 * shared memory with up to 16 bulk copies (`cp.async.bulk`, the tensor-memory accelerator,
 * each piece's bytes counted on its own mbarrier) and summarises every position over its k
 * channels as the pieces land. The B blocks merge their per-position summaries through
 * distributed shared memory (one value per position and block, in rank order, so every block
 * gets the same bits). Each block then writes its outputs in place and sends the slab back
 * piece by piece with bulk stores. DRAM sees long contiguous runs, each byte once. A thread
 * owns V = 4 neighbouring positions (one 8- or 16-byte shared-memory access a channel) and
 * every G-th channel of the slab, four channels at a time; the backward holds y and dy as two
 * slabs and writes dx over dy.
 * What changed from v7: the unit of work is an image over a cluster, not rows over a block;
 * loads and stores are bulk copies of whole slab pieces, not per-thread accesses.
 * The plan: of the block sizes (one or two blocks an SM) and cluster sizes (up to 8) whose
 * slabs fit, the one that needs the fewest waves of clusters for the N images, as the driver
 * counts resident clusters.
 * Expected: at 64x1000x14x14 in fp16 the 64 images fit the GPU's shared memory at once (two
 * blocks of 196 KB an image), so the forward is one wave: read everything, exchange, write
 * everything, each phase moving contiguous bytes as a copy does. We predicted it near a plain
 * copy of the same bytes, 70-85% of the roof, against v3's 38%. fp32 and the backward need
 * several waves.
 * Limits: strided rows (1 < H W < 256; from 256 positions on v3's strips read long enough runs)
 * of more than 32 channels, whose image splits into at most 8 slabs that fit shared memory,
 * with 16-byte aligned pieces (C H W times the element size a multiple of 16, aligned
 * pointers). The rest runs as in v7. Needs sm_90 (clusters and bulk copies). */
#include <cooperative_groups.h>

#include "bulk_copy.cuh"
#include "launch.cuh"
#include "softmax.cuh"
#include "softmax.h"

namespace cg = cooperative_groups;

#define MAX_CLUSTER 8
#define MAX_PIECES 16 /* bulk copies a slab arrives in, each with its mbarrier */
#define STEP 4        /* channels a thread loads at once, per position */
/* From H W = 256 on, v3's strips read long enough runs: measured, v3 won at 28x28 positions
 * and lost at 14x14 and 7x7 at most shapes (the README's table). */
#define MAX_POSITIONS 256

/* How an image is cut: `cluster` blocks of `channels` channels (the last may have fewer), each
 * slab arriving in pieces of `piece` channels (a multiple of STEP groups). A thread owns V
 * neighbouring positions (one vector access a channel) and one of `groups` channel groups. */
struct image_args {
    int C, S, channels, piece, cluster, groups;
};
struct image_plan {
    struct image_args a;
    int vector, threads, waves;
    size_t shared;
};

/* ---- one block's share of an image ---- */

/* Block b of a cluster owns channels [b channels, b channels + count) of its image, held in
 * shared memory exactly as they lie in the tensor; piece j is its channels
 * [j piece, min(count, (j + 1) piece)). Thread t owns positions [V q, V q + V), q = t % (S / V),
 * and channel group g = t / (S / V) (threads past the last group only help with the exchange):
 * in each piece it takes the channels g, g + G, g + 2 G, ... of that piece. A warp's lanes thus
 * read neighbouring positions, one vector each. */
struct slab {
    int64_t first; /* tensor offset of the slab's first element */
    int count, pieces, position, group;
    bool active;
};

template <int V> __device__ __forceinline__ slab slab_of(const image_args &a)
{
    const int image = (int)blockIdx.x / a.cluster, vectors = a.S / V;
    const int c0 = ((int)blockIdx.x % a.cluster) * a.channels;
    slab b;
    b.first = ((int64_t)image * a.C + c0) * a.S;
    b.count = min(a.channels, a.C - c0);
    b.pieces = (b.count + a.piece - 1) / a.piece;
    b.position = (int)threadIdx.x % vectors * V;
    b.group = (int)threadIdx.x / vectors;
    b.active = b.group < a.groups;
    return b;
}

__device__ __forceinline__ int piece_end(const image_args &a, const slab &b, int j)
{
    return min(b.count, (j + 1) * a.piece);
}

template <typename T>
__device__ __forceinline__ unsigned piece_bytes(const image_args &a, const slab &b, int j)
{
    return (unsigned)((piece_end(a, b, j) - j * a.piece) * a.S * sizeof(T));
}

/* V neighbouring elements, moved as one access. */
template <typename T, int V> struct alignas(sizeof(T) * V) lane_vector {
    T e[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_vector(const T *at, bool live, float (&v)[V])
{
    if (live) {
        const lane_vector<T, V> w = *reinterpret_cast<const lane_vector<T, V> *>(at);
#pragma unroll
        for (int e = 0; e < V; e++)
            v[e] = to_float(w.e[e]);
    } else {
#pragma unroll
        for (int e = 0; e < V; e++)
            v[e] = SOFTMAX_NO_VALUE;
    }
}

template <typename T, int V>
__device__ __forceinline__ void store_vector(T *at, const float (&v)[V])
{
    lane_vector<T, V> w;
#pragma unroll
    for (int e = 0; e < V; e++)
        w.e[e] = from_float<T>(v[e]);
    *reinterpret_cast<lane_vector<T, V> *>(at) = w;
}

/* Thread 0 sets up one barrier a piece and asks the copy engine for every piece of each array
 * at once (the backward's y and dy share a barrier a piece); the block may use the barriers
 * after the barrier at the end. */
template <typename T, int A>
__device__ __forceinline__ void load_slabs(const image_args &a, const slab &b,
                                           T *const (&held)[A], const T *const (&from)[A],
                                           uint64_t *landed)
{
    if (threadIdx.x == 0) {
        for (int j = 0; j < b.pieces; j++)
            kl_mbarrier_init(landed + j);
        kl_mbarrier_init_fence();
        for (int j = 0; j < b.pieces; j++) {
            const int64_t at = (int64_t)j * a.piece * a.S;
            const unsigned bytes = piece_bytes<T>(a, b, j);
            kl_mbarrier_expect_bytes(landed + j, A * bytes);
#pragma unroll
            for (int k = 0; k < A; k++)
                kl_bulk_load(held[k] + at, from[k] + b.first + at, bytes, landed + j);
        }
    }
    __syncthreads();
}

/* After each piece's outputs are in place: every thread's writes ordered before the copy
 * engine's reads, then thread 0 sends the piece back. */
template <typename T>
__device__ __forceinline__ void store_piece(const image_args &a, const slab &b, int j,
                                            const T *held, T *to)
{
    kl_fence_before_bulk_store();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t at = (int64_t)j * a.piece * a.S;
        kl_bulk_store(to + b.first + at, held + at, piece_bytes<T>(a, b, j));
    }
}

/* op over the groups of each position (part[g S + p]), then over the cluster's blocks in rank
 * order through distributed shared memory: every block of the image ends with the same bits in
 * combined[p]. Leaves the block arrived at the cluster barrier that says it has finished
 * reading; finish_image() waits on it. */
template <typename V, typename Op>
__device__ __forceinline__ void combine_positions(const image_args &a, V *part, V *published,
                                                  Op op, V *combined)
{
    __syncthreads();
    for (int p = threadIdx.x; p < a.S; p += blockDim.x) {
        V acc = part[p];
        for (int g = 1; g < a.groups; g++)
            acc = op(acc, part[g * a.S + p]);
        published[p] = acc;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    for (int p = threadIdx.x; p < a.S; p += blockDim.x) {
        V acc = *cluster.map_shared_rank(published + p, 0);
        for (unsigned r = 1; r < cluster.num_blocks(); r++)
            acc = op(acc, *cluster.map_shared_rank(published + p, (int)r));
        combined[p] = acc;
    }
    __syncthreads();
    cluster.barrier_arrive();
#else
    for (int p = threadIdx.x; p < a.S; p += blockDim.x)
        combined[p] = published[p];
    __syncthreads();
#endif
}

/* The block may exit once its stores have read its shared memory and no other block of the
 * cluster still reads its published values. */
__device__ __forceinline__ void finish_image()
{
    if (threadIdx.x == 0)
        kl_bulk_stores_wait_read();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().barrier_wait();
#endif
}

/* Where the parts of the shared memory start: the slabs (16-byte aligned), the barriers, then
 * the groups' partial results, the block's and the combined ones, one per position each. */
template <typename V> struct image_shared {
    uint64_t *landed;
    V *part, *published, *combined;
};

/* A slab's bytes, rounded up to 16 so that what follows it stays aligned. */
__host__ __device__ inline size_t slab_bytes(int64_t channels, int64_t S, size_t size)
{
    return ((size_t)(channels * S) * size + 15) / 16 * 16;
}

template <typename T, typename V>
__device__ __forceinline__ image_shared<V> shared_parts(unsigned char *base, const image_args &a,
                                                       int arrays)
{
    image_shared<V> sh;
    const size_t slabs = arrays * slab_bytes(a.channels, a.S, sizeof(T));
    sh.landed = reinterpret_cast<uint64_t *>(base + slabs);
    sh.part = reinterpret_cast<V *>(sh.landed + MAX_PIECES);
    sh.published = sh.part + a.groups * a.S;
    sh.combined = sh.published + a.S;
    return sh;
}

/* ---- forward ---- */

/* Both kernels run 256 to 1024 threads a block, one or two blocks an SM: (1024, 1) lets ptxas
 * use 64 registers a thread. With (1024) alone it aimed at two 1024-thread blocks an SM, 32
 * registers, and the fp32 backward spilled. */
template <typename T, int V>
__global__ void __launch_bounds__(1024, 1)
    softmax_forward_image(const T *__restrict__ x, T *__restrict__ y, image_args a)
{
    extern __shared__ __align__(128) unsigned char shared[];
    const slab b = slab_of<V>(a);
    T *held = reinterpret_cast<T *>(shared);
    const image_shared<softmax_stats> sh = shared_parts<T, softmax_stats>(shared, a, 1);
    T *const held_arrays[1] = {held};
    const T *const from[1] = {x};
    load_slabs(a, b, held_arrays, from, sh.landed);

    /* Each piece as it lands: STEP channels at a time, their max first, then their exps
     * against the running max (one exp a value, one a step to rescale the sum). */
    softmax_stats mine[V];
#pragma unroll
    for (int e = 0; e < V; e++)
        mine[e] = {SOFTMAX_NO_VALUE, 0.f};
    for (int j = 0; j < b.pieces; j++) {
        kl_mbarrier_wait_first_phase(sh.landed + j);
        const int end = piece_end(a, b, j);
        for (int c = j * a.piece + b.group; b.active && c < end; c += STEP * a.groups) {
            float v[STEP][V];
#pragma unroll
            for (int i = 0; i < STEP; i++)
                load_vector<T, V>(held + (c + i * a.groups) * a.S + b.position,
                                  c + i * a.groups < end, v[i]);
#pragma unroll
            for (int e = 0; e < V; e++) {
                float m = mine[e].max;
#pragma unroll
                for (int i = 0; i < STEP; i++)
                    m = fmaxf(m, v[i][e]);
                float sum = mine[e].sum * softmax_exp(mine[e].max - m);
#pragma unroll
                for (int i = 0; i < STEP; i++)
                    sum += softmax_exp(v[i][e] - m);
                mine[e] = {m, sum};
            }
        }
    }
    if (b.active)
#pragma unroll
        for (int e = 0; e < V; e++)
            sh.part[b.group * a.S + b.position + e] = mine[e];
    combine_positions(a, sh.part, sh.published, softmax_merge_op(), sh.combined);

    /* y = exp(x - max) / sum in place, piece by piece, each piece sent back at once. */
    float max[V], scale[V];
#pragma unroll
    for (int e = 0; e < V; e++) {
        const softmax_stats r = sh.combined[b.position + e];
        max[e] = r.max;
        scale[e] = 1.f / r.sum;
    }
    for (int j = 0; j < b.pieces; j++) {
        const int end = piece_end(a, b, j);
        for (int c = j * a.piece + b.group; b.active && c < end; c += a.groups) {
            T *at = held + c * a.S + b.position;
            float v[V];
            load_vector<T, V>(at, true, v);
#pragma unroll
            for (int e = 0; e < V; e++)
                v[e] = softmax_exp(v[e] - max[e]) * scale[e];
            store_vector<T, V>(at, v);
        }
        store_piece(a, b, j, held, y);
    }
    finish_image();
}

/* ---- backward ---- */

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1)
    softmax_backward_image(const T *__restrict__ y, const T *__restrict__ dy, T *__restrict__ dx,
                           image_args a)
{
    extern __shared__ __align__(128) unsigned char shared[];
    const slab b = slab_of<V>(a);
    T *held_y = reinterpret_cast<T *>(shared);
    T *held_dy = reinterpret_cast<T *>(shared + slab_bytes(a.channels, a.S, sizeof(T)));
    const image_shared<float> sh = shared_parts<T, float>(shared, a, 2);
    T *const held_arrays[2] = {held_y, held_dy};
    const T *const from[2] = {y, dy};
    load_slabs(a, b, held_arrays, from, sh.landed);

    float mine[V] = {};
    for (int j = 0; j < b.pieces; j++) {
        kl_mbarrier_wait_first_phase(sh.landed + j);
        const int end = piece_end(a, b, j);
        for (int c = j * a.piece + b.group; b.active && c < end; c += STEP * a.groups) {
            float vy[STEP][V], vdy[STEP][V];
#pragma unroll
            for (int i = 0; i < STEP; i++) {
                const int at = (c + i * a.groups) * a.S + b.position;
                const bool live = c + i * a.groups < end;
                load_vector<T, V>(held_y + at, live, vy[i]);
                load_vector<T, V>(held_dy + at, live, vdy[i]);
            }
#pragma unroll
            for (int i = 0; i < STEP; i++)
#pragma unroll
                for (int e = 0; e < V; e++)
                    if (c + i * a.groups < end)
                        mine[e] += vy[i][e] * vdy[i][e];
        }
    }
    if (b.active)
#pragma unroll
        for (int e = 0; e < V; e++)
            sh.part[b.group * a.S + b.position + e] = mine[e];
    combine_positions(a, sh.part, sh.published, softmax_sum_op(), sh.combined);

    float dot[V];
#pragma unroll
    for (int e = 0; e < V; e++)
        dot[e] = sh.combined[b.position + e];
    for (int j = 0; j < b.pieces; j++) {
        const int end = piece_end(a, b, j);
        for (int c = j * a.piece + b.group; b.active && c < end; c += a.groups) {
            const int at = c * a.S + b.position;
            float vy[V], vdy[V];
            load_vector<T, V>(held_y + at, true, vy);
            load_vector<T, V>(held_dy + at, true, vdy);
#pragma unroll
            for (int e = 0; e < V; e++)
                vdy[e] = vy[e] * (vdy[e] - dot[e]);
            store_vector<T, V>(held_dy + at, vdy);
        }
        store_piece(a, b, j, held_dy, dx);
    }
    finish_image();
}

/* ---- the plan ---- */

static int gcd(int a, int b)
{
    return b ? gcd(b, a % b) : a;
}

/* Clusters of the plan's shape that fit the GPU at once, from the driver. */
static int resident_clusters(const void *kernel, const struct image_plan *pl)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = (unsigned)pl->a.cluster;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)pl->a.cluster);
    cfg.blockDim = dim3((unsigned)pl->threads);
    cfg.dynamicSmemBytes = pl->shared;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int fit = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg));
    return fit;
}

/* What an image of C x S elements needs to be cut for one block size: the smallest cluster
 * whose slabs (`arrays` of them a block, elements of `size` bytes) fit `budget` bytes of
 * shared memory besides the barriers and the partial results. Pieces start and end on 16-byte
 * boundaries: a slab's channel count and a piece's are multiples of `align` channels. Returns
 * false if none fits. */
static bool cut_image(int64_t C, int64_t S, size_t size, int arrays, int vector, int threads,
                      size_t budget, struct image_plan *pl)
{
    const int align = 16 / gcd((int)(S * (int64_t)size % 16), 16); /* channels per 16 bytes */
    const int64_t vectors = S / vector, group_unit = align / gcd(align, STEP);
    const int64_t groups = vectors > threads ? 0 : threads / vectors / group_unit * group_unit;
    /* the barriers, then per position a part per group, the block's and the combined result,
     * at most 8 bytes each (a softmax_stats) */
    const size_t extras = MAX_PIECES * sizeof(uint64_t) + (size_t)(groups + 2) * S * 8;
    if (!groups || budget <= extras)
        return false;
    for (int64_t cluster = 1; cluster <= MAX_CLUSTER; cluster++) {
        int64_t channels = (C + cluster - 1) / cluster;
        channels = (channels + align - 1) / align * align;
        const size_t slab = slab_bytes(channels, S, size);
        if (arrays * slab > budget - extras)
            continue;
        const int64_t round = STEP * groups; /* channels a piece takes in one step */
        const int64_t steps = ((channels + round - 1) / round + MAX_PIECES - 1) / MAX_PIECES;
        pl->a = (struct image_args){(int)C, (int)S, (int)channels, (int)(steps * round),
                                    (int)((C + channels - 1) / channels), (int)groups};
        pl->vector = vector;
        pl->threads = threads;
        pl->shared = arrays * slab + extras;
        return true;
    }
    return false;
}

/* Cuts the images of d for one of `kernels` (by vector width), or returns false (then v7 runs).
 * Of the block sizes (one or two blocks an SM) whose cut fits, the one with the fewest waves of
 * clusters over the N images; among those, the largest blocks. */
static bool plan_image(const void *const kernels[3], struct softmax_dims d, size_t size,
                       int arrays, size_t room, struct image_plan *best)
{
    const int64_t S = d.h * d.w, C = d.c;
    if (S <= 1 || S >= MAX_POSITIONS || C <= 32 || (C * S * (int64_t)size) % 16)
        return false;
    const int vector = S % 4 == 0 ? 4 : S % 2 == 0 ? 2 : 1;
    const void *kernel = kernels[vector == 4 ? 2 : vector - 1];
    const size_t per_sm = (size_t)kl_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                 reserved = (size_t)kl_device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
    best->waves = 0;
    for (int per = 1; per <= 2; per++) {
        const size_t budget = per_sm / per - reserved < room ? per_sm / per - reserved : room;
        for (int threads = 1024 / per; threads >= 512 / per; threads -= 256 / per) {
            struct image_plan pl;
            if (!cut_image(C, S, size, arrays, vector, threads, budget, &pl) ||
                d.n * pl.a.cluster > 0x7fffffff)
                continue;
            const int fit = resident_clusters(kernel, &pl);
            if (fit <= 0)
                continue;
            pl.waves = (int)((d.n + fit - 1) / fit);
            if (!best->waves || pl.waves < best->waves)
                *best = pl;
        }
    }
    return best->waves > 0;
}

template <typename T> static const void *const *forward_kernels()
{
    static const void *const k[3] = {(const void *)softmax_forward_image<T, 1>,
                                     (const void *)softmax_forward_image<T, 2>,
                                     (const void *)softmax_forward_image<T, 4>};
    return k;
}

template <typename T> static const void *const *backward_kernels()
{
    static const void *const k[3] = {(const void *)softmax_backward_image<T, 1>,
                                     (const void *)softmax_backward_image<T, 2>,
                                     (const void *)softmax_backward_image<T, 4>};
    return k;
}

/* Shared memory the kernels may take, granted once each (the same room for all six). */
template <typename T> static size_t room_for(const void *const *kernels)
{
    static size_t room[2];
    const int i = kernels == backward_kernels<T>();
    if (!room[i])
        for (int k = 0; k < 3; k++)
            room[i] = kl_grant_shared_memory(kernels[k]);
    return room[i];
}

template <typename T> static bool forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    struct image_plan pl;
    if (kl_device_cc() < 90 || !aligned16(x) || !aligned16(y) ||
        !plan_image(forward_kernels<T>(), d, sizeof(T), 1, room_for<T>(forward_kernels<T>()), &pl))
        return false;
    const dim3 grid((unsigned)(pl.a.cluster * d.n)), block((unsigned)pl.threads);
    const struct kl_launch_opts o = {(unsigned)pl.a.cluster, false};
    switch (pl.vector) {
    case 1: kl_launch(softmax_forward_image<T, 1>, grid, block, pl.shared, s, o, x, y, pl.a); break;
    case 2: kl_launch(softmax_forward_image<T, 2>, grid, block, pl.shared, s, o, x, y, pl.a); break;
    default: kl_launch(softmax_forward_image<T, 4>, grid, block, pl.shared, s, o, x, y, pl.a);
    }
    return true;
}

template <typename T>
static bool backward(const T *y, const T *dy, T *dx, struct softmax_dims d, cudaStream_t s)
{
    struct image_plan pl;
    if (kl_device_cc() < 90 || !aligned16(y) || !aligned16(dy) || !aligned16(dx) ||
        !plan_image(backward_kernels<T>(), d, sizeof(T), 2, room_for<T>(backward_kernels<T>()),
                    &pl))
        return false;
    const dim3 grid((unsigned)(pl.a.cluster * d.n)), block((unsigned)pl.threads);
    const struct kl_launch_opts o = {(unsigned)pl.a.cluster, false};
    switch (pl.vector) {
    case 1:
        kl_launch(softmax_backward_image<T, 1>, grid, block, pl.shared, s, o, y, dy, dx, pl.a);
        break;
    case 2:
        kl_launch(softmax_backward_image<T, 2>, grid, block, pl.shared, s, o, y, dy, dx, pl.a);
        break;
    default: kl_launch(softmax_backward_image<T, 4>, grid, block, pl.shared, s, o, y, dy, dx, pl.a);
    }
    return true;
}

extern "C" void softmax_forward_v8(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    const bool done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, s)
                                   : forward((const __half *)x, (__half *)y, d, s);
    if (!done)
        softmax_forward_v7(x, y, d, t, s);
}

extern "C" void softmax_backward_v8(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    const bool done = t == DT_FP32
                          ? backward((const float *)y, (const float *)dy, (float *)dx, d, s)
                          : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
    if (!done)
        softmax_backward_v7(y, dy, dx, d, t, s);
}
