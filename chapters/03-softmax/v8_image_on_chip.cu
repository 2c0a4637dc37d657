/* v8, the image on chip: a cluster holds whole images in shared memory, read and written in
 * contiguous slabs by the copy engine.
 *
 * Idea: at 64x1000x14x14 a row's 1000 values lie 196 apart, and every earlier rung reads them
 * in runs of a few dozen bytes (v3's strips: 64 bytes every 784 in fp32); a copy with that
 * access pattern is itself as slow as v3 (NOTES.md), so the pattern, not the arithmetic, holds
 * the strided shapes back. But the C rows of one image are one contiguous block of C H W
 * elements (392 KB in fp16 here), and a few SMs can hold it. So the B blocks of a cluster take
 * one image: block b copies a contiguous slab of channels into its shared memory with up to 16
 * bulk copies (`cp.async.bulk`, each piece on its own mbarrier) and summarises every position
 * over its channels as the pieces land; the B blocks merge their per-position summaries through
 * distributed shared memory (in rank order: every block gets the same bits), write their
 * outputs in place and send the slab back piece by piece with bulk stores. DRAM sees long
 * contiguous runs, each byte once. The backward holds y and dy as two slabs, dx over dy.
 * What changed from v7: the unit of work is an image over a cluster, not rows over a block;
 * loads and stores are bulk copies of whole slab pieces, not per-thread accesses. The plan:
 * of the block sizes (one or two an SM) and clusters (up to 8) whose slabs fit, the fewest waves.
 * Expected: at 64x1000x14x14 in fp16 all 64 images fit on chip at once (two blocks of 196 KB an
 * image): one wave, each phase moving contiguous bytes as a copy does, 70-85% of the roof
 * against v3's 38%. fp32 and the backward need several waves.
 * Limits: strided rows 2 to 255 positions apart (from 256 on v3's strips read long enough runs),
 * more than 32 channels, at most 8 slabs an image, C H W times the element size a multiple of
 * 16 and aligned pointers; the rest runs as in v7. Needs sm_90 (clusters and bulk copies).
 * Measured (H200): 64x1000x14x14 fp16 forward 22.3 us, 53.1% of the roof against v3's 38.4%,
 * well short of 70-85%; in fp32 it loses, 52.2% against v3's 57.4%. */
#include <cooperative_groups.h>

#include "image_slabs.cuh"
#include "launch.cuh"
#include "softmax.h"

namespace cg = cooperative_groups;

#define MAX_CLUSTER 8 /* the most blocks a cluster has on every sm_90 GPU */

/* op over the groups of each position (each thread's `mine` for its positions), then over the
 * cluster's blocks in rank order through distributed shared memory: every block of the image
 * ends with the same bits in combined[p]. Leaves the block arrived at the cluster barrier that
 * says it has finished reading; finish_image() waits on it. */
template <typename V, int W, typename Op>
__device__ __forceinline__ void combine_positions(const image_args &a, const slab &b,
                                                  const V (&mine)[W], const image_shared<V> &sh,
                                                  Op op)
{
    V *published = sh.published, *combined = sh.combined;
    combine_groups(a, b, mine, sh.part, op, published);
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

/* ---- forward ---- */

/* Both kernels run 256 to 1024 threads a block, one or two blocks an SM: (1024, 1) lets ptxas
 * use 64 registers a thread. With (1024) alone it aimed at two 1024-thread blocks an SM, 32
 * registers, and the fp32 backward spilled. */
template <typename T, int V>
__global__ void __launch_bounds__(1024, 1)
    softmax_forward_image(const T *__restrict__ x, T *__restrict__ y, image_args a)
{
    extern __shared__ __align__(128) unsigned char shared[];
    const slab b = slab_of<V>(a, (int)blockIdx.x / a.cluster, (int)blockIdx.x % a.cluster);
    T *held = reinterpret_cast<T *>(shared);
    const image_shared<softmax_stats> sh = shared_parts<T, softmax_stats>(shared, a, 1);
    T *const held_arrays[1] = {held};
    const T *const from[1] = {x};
    load_slabs(a, b, held_arrays, from, sh.landed);

    /* Each piece as it lands. */
    softmax_stats mine[V];
#pragma unroll
    for (int e = 0; e < V; e++)
        mine[e] = {SOFTMAX_NO_VALUE, 0.f};
    for (int j = 0; j < b.pieces; j++) {
        kl_mbarrier_wait_parity(sh.landed + j, 0);
        summarise_piece<T, V>(a, b, held, j, mine);
    }
    combine_positions(a, b, mine, sh, softmax_merge_op());

    /* y in place, piece by piece, each piece sent back at once. */
    float max[V], scale[V];
#pragma unroll
    for (int e = 0; e < V; e++) {
        const softmax_stats r = sh.combined[b.position + e];
        max[e] = r.max;
        scale[e] = 1.f / r.sum;
    }
    for (int j = 0; j < b.pieces; j++) {
        write_piece<T, V>(a, b, held, j, max, scale);
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
    const slab b = slab_of<V>(a, (int)blockIdx.x / a.cluster, (int)blockIdx.x % a.cluster);
    T *held_y = reinterpret_cast<T *>(shared);
    T *held_dy = reinterpret_cast<T *>(shared + slab_bytes(a.channels, a.S, sizeof(T)));
    const image_shared<float> sh = shared_parts<T, float>(shared, a, 2);
    T *const held_arrays[2] = {held_y, held_dy};
    const T *const from[2] = {y, dy};
    load_slabs(a, b, held_arrays, from, sh.landed);

    float mine[V] = {};
    for (int j = 0; j < b.pieces; j++) {
        kl_mbarrier_wait_parity(sh.landed + j, 0);
        dot_piece<T, V>(a, b, held_y, held_dy, j, mine);
    }
    combine_positions(a, b, mine, sh, softmax_sum_op());

    float dot[V];
#pragma unroll
    for (int e = 0; e < V; e++)
        dot[e] = sh.combined[b.position + e];
    for (int j = 0; j < b.pieces; j++) {
        write_gradient_piece<T, V>(a, b, held_y, held_dy, j, dot);
        store_piece(a, b, j, held_dy, dx);
    }
    finish_image();
}

/* ---- the plan ---- */

/* Images at once: the clusters of the plan's shape that fit the GPU at once, from the driver
 * (none if the grid, a cluster an image, would pass 2^31 - 1 blocks). */
static int64_t resident_clusters(const void *kernel, const struct image_plan *pl,
                                 struct softmax_dims d)
{
    if (d.n * pl->a.cluster > 0x7fffffff)
        return 0;
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

template <typename T> static struct image_pass *forward_pass()
{
    static struct image_pass p = {{(const void *)softmax_forward_image<T, 1>,
                                   (const void *)softmax_forward_image<T, 2>,
                                   (const void *)softmax_forward_image<T, 4>},
                                  0};
    return &p;
}

template <typename T> static struct image_pass *backward_pass()
{
    static struct image_pass p = {{(const void *)softmax_backward_image<T, 1>,
                                   (const void *)softmax_backward_image<T, 2>,
                                   (const void *)softmax_backward_image<T, 4>},
                                  0};
    return &p;
}

template <typename T> static bool forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    struct image_plan pl;
    if (kl_device_cc() < 90 || !aligned16(x) || !aligned16(y) ||
        !plan_images(forward_pass<T>(), d, sizeof(T), 1, MAX_CLUSTER, resident_clusters, &pl))
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
        !plan_images(backward_pass<T>(), d, sizeof(T), 2, MAX_CLUSTER, resident_clusters, &pl))
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
    kl_note_rung("v8_image_on_chip");
    const bool done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, s)
                                   : forward((const __half *)x, (__half *)y, d, s);
    if (!done)
        softmax_forward_v7(x, y, d, t, s);
}

extern "C" void softmax_backward_v8(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v8_image_on_chip");
    const bool done = t == DT_FP32
                          ? backward((const float *)y, (const float *)dy, (float *)dx, d, s)
                          : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
    if (!done)
        softmax_backward_v7(y, dy, dx, d, t, s);
}
