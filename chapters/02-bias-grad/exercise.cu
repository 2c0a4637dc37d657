/* Exercise: the block reduction with warp shuffles.
 *
 * The kernel below runs one block of 256 threads per channel (as v3 does). The loop that gives
 * each thread its partial sum is written; what is missing is the reduction of the block's 256
 * partial sums into db[c]. Write it without a shared-memory tree:
 *   1. add across each warp with __shfl_down_sync(0xffffffff, v, offset), offsets 16, 8, 4, 2, 1
 *      (after it, lane 0 of every warp holds its warp's sum);
 *   2. lane 0 of each warp writes its sum to a __shared__ float[8]; __syncthreads();
 *   3. warp 0 adds the 8 values the same way, and thread 0 writes db[c].
 * `./run --exercise` checks it at shapes from 1x1x1x1 to 3x7x33x17 and says which channel is
 * wrong first. Then compare its time with v3_shared_tree: how many __syncthreads did you remove,
 * and did it matter? (Count the bytes: what limits both kernels?) */
#include "bias_grad.cuh"

#define THREADS 256

__global__ void bias_grad_exercise_kernel(const float *__restrict__ dy, float *__restrict__ db,
                                          struct bias_grad_size z)
{
    int64_t c = blockIdx.x;
    float sum = 0.f;
    for (int64_t n = 0; n < z.n; n++) {
        const float *row = dy + (n * z.c + c) * z.hw;
        for (int64_t i = threadIdx.x; i < z.hw; i += THREADS)
            sum += row[i];
    }
    /* TODO: reduce `sum` over the block and write db[c]. */
    (void)db;
    (void)sum;
}

extern "C" void bias_grad_exercise(const void *dy, void *db, struct bias_grad_size z,
                                   enum dtype t, cudaStream_t s)
{
    (void)t; /* fp32 only: the rung table says so */
    bias_grad_exercise_kernel<<<(unsigned)z.c, THREADS, 0, s>>>((const float *)dy, (float *)db,
                                                                 z);
    LAUNCH_CHECK();
}
