/* v3, a block per channel and a shared-memory tree.
 *
 * Idea: give each channel a block of 256 threads. Thread t sums elements t, t + 256, ... of
 * every one of the channel's n rows (coalesced: a warp reads 32 neighbours), then the block
 * adds its 256 partial sums in shared memory as a tree: in step s, threads 0..s-1 add the value
 * s places above them (sequential addressing: the active threads stay packed in the first
 * warps, so no warp diverges until fewer than 32 remain, and no two threads of a warp hit one
 * bank).
 * What changed from v2: no atomics at all; each channel's sum is built in one block, in a fixed
 * order, so the result is the same bits every run.
 * Expected: coalesced loads at the bandwidth one block per SM can draw. But there are only C
 * blocks: 128 at the seed shape on 132 SMs, 256 threads each, an eighth of what an SM can keep
 * in flight. Far better than v2, still well short of the roof; v4 splits the work further. */
#include "bias_grad.cuh"

#define THREADS 256

template <typename T>
__global__ void __launch_bounds__(THREADS)
    bias_grad_shared_tree(const T *__restrict__ dy, T *__restrict__ db, struct bias_grad_size z)
{
    __shared__ float partial[THREADS];
    int64_t c = blockIdx.x;
    float sum = 0.f;
    for (int64_t n = 0; n < z.n; n++) {
        const T *row = dy + (n * z.c + c) * z.hw;
        for (int64_t i = threadIdx.x; i < z.hw; i += THREADS)
            sum += to_float(row[i]);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        db[c] = from_float<T>(partial[0]);
}

template <typename T> static void launch(const T *dy, T *db, struct bias_grad_size z,
                                         cudaStream_t s)
{
    bias_grad_shared_tree<<<(unsigned)z.c, THREADS, 0, s>>>(dy, db, z);
    LAUNCH_CHECK();
}

extern "C" void bias_grad_v3(const void *dy, void *db, struct bias_grad_size z, enum dtype t,
                             cudaStream_t s)
{
    kl_note_rung("v3_shared_tree");
    if (t == DT_FP32)
        launch((const float *)dy, (float *)db, z, s);
    else
        launch((const __half *)dy, (__half *)db, z, s);
}
