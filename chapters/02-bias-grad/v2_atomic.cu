/* v2, one thread per element, atomicAdd into the channel's sum.
 *
 * Idea: the opposite extreme of v1. Every element gets a thread (a grid-stride loop over the
 * whole tensor), and each thread adds its value into a float sum for its channel with
 * atomicAdd. The loads are now perfectly coalesced and the whole GPU is busy.
 * What changed from v1: parallelism moves from C threads to all of them, and the reduction
 * moves into the L2's atomic units.
 * Cost: n x c x hw atomics onto only c addresses. Atomics to one address are serialised in the
 * L2, so at the seed shape each of 128 addresses takes 131072 additions one after another.
 * Expected: far better than v1, still far from the roof, and the order of the additions (so the
 * last bits of the result) changes from run to run. The sums are kept in fp32 in the caller's
 * workspace and then stored in db's type by a second, tiny kernel. */
#include "bias_grad.cuh"

#define THREADS 256

template <typename T>
__global__ void bias_grad_atomic(const T *__restrict__ dy, float *__restrict__ sums,
                                 struct bias_grad_size z)
{
    int64_t total = z.n * z.c * z.hw;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t c = (i / z.hw) % z.c;
        atomicAdd(&sums[c], to_float(dy[i]));
    }
}

template <typename T> static void launch(const T *dy, T *db, struct bias_grad_size z,
                                         float *sums, cudaStream_t s)
{
    CUDA_CHECK(cudaMemsetAsync(sums, 0, (size_t)z.c * sizeof(float), s));
    size_t total = (size_t)(z.n * z.c * z.hw);
    int blocks = grid_to_fill_gpu((const void *)bias_grad_atomic<T>, THREADS,
                                  (total + THREADS - 1) / THREADS);
    bias_grad_atomic<<<blocks, THREADS, 0, s>>>(dy, sums, z);
    LAUNCH_CHECK();
    bias_grad_store<<<(unsigned)((z.c + 255) / 256), 256, 0, s>>>(sums, db, z.c);
    LAUNCH_CHECK();
}

extern "C" void bias_grad_v2(const void *dy, void *db, struct bias_grad_size z, enum dtype t,
                             void *workspace, cudaStream_t s)
{
    kl_note_rung("v2_atomic");
    if (t == DT_FP32)
        launch((const float *)dy, (float *)db, z, (float *)workspace, s);
    else
        launch((const __half *)dy, (__half *)db, z, (float *)workspace, s);
}
