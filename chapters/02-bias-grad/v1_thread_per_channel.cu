/* v1, one thread per channel: the loop of the CPU reference, moved to the GPU as it stands.
 *
 * Idea: thread c walks all n x hw elements of channel c and writes db[c]. Nothing to
 * synchronise, nothing shared, and the sum is accumulated in fp32 in a fixed order.
 * Cost model: the bytes are the minimum (dy read once, db written once), but only C threads
 * work: 128 at the seed shape, four warps on a GPU that holds 132 x 64. Each thread issues one
 * load after another; a warp's 32 loads land on 32 different rows hw elements apart, so every
 * load instruction fetches 32 separate sectors.
 * Expected: latency-bound, one or two orders of magnitude from the roof; slower than the
 * vendor. The next rungs put more threads on every channel. */
#include "bias_grad.cuh"

#define THREADS 128

template <typename T>
__global__ void bias_grad_thread_per_channel(const T *__restrict__ dy, T *__restrict__ db,
                                             struct bias_grad_size z)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= z.c)
        return;
    float sum = 0.f;
    for (int64_t n = 0; n < z.n; n++) {
        const T *row = dy + (n * z.c + c) * z.hw;
        for (int64_t i = 0; i < z.hw; i++)
            sum += to_float(row[i]);
    }
    db[c] = from_float<T>(sum);
}

template <typename T> static void launch(const T *dy, T *db, struct bias_grad_size z,
                                         cudaStream_t s)
{
    unsigned blocks = (unsigned)((z.c + THREADS - 1) / THREADS);
    bias_grad_thread_per_channel<<<blocks, THREADS, 0, s>>>(dy, db, z);
    LAUNCH_CHECK();
}

extern "C" void bias_grad_v1(const void *dy, void *db, struct bias_grad_size z, enum dtype t,
                             cudaStream_t s)
{
    kl_note_rung("v1_thread_per_channel");
    if (t == DT_FP32)
        launch((const float *)dy, (float *)db, z, s);
    else
        launch((const __half *)dy, (__half *)db, z, s);
}
