/* v5, v3 with fp16 accumulators: shown for its error, not its speed.
 *
 * Idea: the same block-per-channel kernel as v3, for fp16 tensors, with one change: every sum,
 * the per-thread one and the shared-memory tree, is kept in __half instead of float. Diff this
 * file against v3_shared_tree.cu: nothing else differs.
 * What it should show: fp16 has 11 significant bits. Once a thread's running sum reaches 16,
 * the spacing of fp16 values there is 2^-6, and every addition of a value below that spacing
 * rounds away most of it; at the seed shape each thread adds 512 values into a sum of order
 * 10, the block then adds 256 such sums. The error against the double reference should be
 * orders of magnitude above v3's (same order of additions, fp32 sums): this is why every other
 * rung, and cuDNN, accumulate fp16 data in fp32. Its table row says "fp16 sums: inexact" when
 * the error passes the tolerance, without failing the run. Speed: as v3. */
#include "bias_grad.cuh"

#define THREADS 256

__global__ void __launch_bounds__(THREADS)
    bias_grad_shared_tree_half_sums(const __half *__restrict__ dy, __half *__restrict__ db,
                                    struct bias_grad_size z)
{
    __shared__ __half partial[THREADS];
    int64_t c = blockIdx.x;
    __half sum = __float2half(0.f);
    for (int64_t n = 0; n < z.n; n++) {
        const __half *row = dy + (n * z.c + c) * z.hw;
        for (int64_t i = threadIdx.x; i < z.hw; i += THREADS)
            sum = __hadd(sum, row[i]);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            partial[threadIdx.x] = __hadd(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        db[c] = partial[0];
}

extern "C" void bias_grad_v5(const void *dy, void *db, struct bias_grad_size z, enum dtype t,
                             cudaStream_t s)
{
    kl_note_rung("v5_fp16_accumulate");
    (void)t; /* fp16 only: the rung table says so */
    bias_grad_shared_tree_half_sums<<<(unsigned)z.c, THREADS, 0, s>>>((const __half *)dy,
                                                                      (__half *)db, z);
    LAUNCH_CHECK();
}
