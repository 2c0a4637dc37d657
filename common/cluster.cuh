/* Thread-block clusters (sm_90): the blocks of a cluster run at the same time and may read one
 * another's shared memory ("distributed shared memory"). These helpers combine one value per
 * block (or per slot of a block) over the cluster; launch.cuh launches a kernel in clusters.
 * Below sm_90 they compile to a cluster of one block, so that a kernel using them still builds
 * for every architecture; the rungs that need clusters are listed as unsupported there. */
#ifndef KL_CLUSTER_CUH
#define KL_CLUSTER_CUH

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

/* op over the cluster of `slots` values per block (slots <= 32): each block has written its
 * values to published[0 .. slots) in its own shared memory. After a cluster barrier, lane l of
 * warp 0 reads published[l] of the B blocks and combines them in rank order, so every block
 * gets the very same bits; the block reads the results from combined[0 .. slots) after one
 * block barrier. One warp reads the other blocks' shared memory, not every thread: those reads
 * cross the SM-to-SM network, which is far narrower than a block's own shared memory.
 * Every thread then arrives at a second cluster barrier, saying its block has finished
 * reading; the caller waits on it (cluster_wait_readers) before the block exits or writes
 * published again, so that no block's shared memory goes away while another still reads it,
 * and meanwhile does useful work (its stores). */
template <typename V, typename Op>
__device__ __forceinline__ void cluster_combine(const V *published, int slots, Op op,
                                                V *combined)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    if (lane < slots) {
        V *mine = const_cast<V *>(published) + lane;
        V acc = *cluster.map_shared_rank(mine, 0);
        for (unsigned r = 1; r < cluster.num_blocks(); r++)
            acc = op(acc, *cluster.map_shared_rank(mine, (int)r));
        combined[lane] = acc;
    }
    __syncthreads();
    cluster.barrier_arrive();
#else
    const int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    if (lane < slots)
        combined[lane] = published[lane];
    __syncthreads();
#endif
}

__device__ __forceinline__ void cluster_wait_readers()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().barrier_wait();
#endif
}

__device__ __forceinline__ unsigned cluster_blocks()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cg::this_cluster().num_blocks();
#else
    return 1;
#endif
}

__device__ __forceinline__ unsigned cluster_rank()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cg::this_cluster().block_rank();
#else
    return 0;
#endif
}

#endif
