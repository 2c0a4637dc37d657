/* v3, split-K: an implicit GEMM whose long reduction is cut into slices, to fill the GPU.
 *
 * Idea: give the reduction the threads. dw is small (K x C R S: 64 x 288 at the seed) and its
 * sums long (N P Q = 131072), so tiles of dw alone make 5 blocks at the seed and 9 at resnet.
 * Cutting N P Q into slices makes tiles x slices blocks, chosen to give every SM eight
 * (wgrad_slices_to_fill); each block sums its slice of a tile and stores those sums in the
 * workspace, and a second pass adds the slices of each element in slice order, so the result
 * is the same bits every time, with no float atomics. Where a tile's slices are few, the
 * tile's last block to finish does that pass (an integer counter says which is last); where
 * they are many, a kernel of its own spreads it over the GPU (split_fma.cuh, split.cu).
 * What changed from v2: no column matrix (x is gathered under each column's tap as the tiles
 * are staged, as in chapter 07's v4), and the N P Q side is split across blocks instead of
 * walked by each. Each thread holds an 8 x 8 block of sums, so a step's 16 loads from shared
 * memory feed 64 FMAs, a quarter of a load per FMA: what shared memory can serve at full FMA
 * rate.
 * Costs: the slices' sums, slices x K C R S floats written and read once (at the seed, 16
 * slices of 18432 floats: 1.2 MB, in L2).
 * Expected: chapter 07's v4 ran its implicit GEMM at 33 TFLOP/s; the same here gives about
 * 150 us at the seed and 225 at resnet, 2x and 1.3x cuDNN; in fp16 the same speed (the sums
 * are fp32 FMAs either way).
 * Measured (H200): seed 233 us fp32 (20.7 TFLOP/s, 1.32x cuDNN), 358 fp16; resnet 313 (1.21x). */
#include "split_fma.cuh"

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db;
    launch_split_fma<T, false>(x, dy, dw, (T *)NULL, d, workspace, s);
}

WGRAD_LAUNCHER(v3, 0)
