/* v1, naive: one thread per element.
 *
 * Idea: the direct translation of the loop, thread i handles element i. Neighbouring threads
 * touch neighbouring elements, so each warp's loads are already coalesced: 32 threads x 4 bytes
 * (fp32) make one 128-byte request.
 * Cost model: 2 arrays forward (read x, write y), 3 backward (read x and dy, write dx). No
 * arithmetic to speak of: time = bytes / bandwidth, if enough loads are in flight.
 * Limits: one block per 256 elements, so 2^28 elements launch a million blocks, and each thread
 * issues one 4-byte (fp32) or 2-byte (fp16) load, retiring after a single element: block
 * scheduling and narrow accesses are what the next rungs remove. Fine for small tensors. */
#include "relu.cuh"
#include "relu.h"

#define THREADS 256

template <typename T>
__global__ void relu_forward_naive(const T *__restrict__ x, T *__restrict__ y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = from_float<T>(relu_value(to_float(x[i])));
}

template <typename T>
__global__ void relu_backward_naive(const T *__restrict__ x, const T *__restrict__ dy,
                                    T *__restrict__ dx, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dx[i] = from_float<T>(relu_gradient(to_float(x[i]), to_float(dy[i])));
}

static unsigned blocks_for(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS); /* the chapter caps n far below 2^39 */
}

extern "C" void relu_forward_v1(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v1_naive");
    if (t == DT_FP32)
        relu_forward_naive<<<blocks_for(n), THREADS, 0, s>>>((const float *)x, (float *)y, n);
    else
        relu_forward_naive<<<blocks_for(n), THREADS, 0, s>>>((const __half *)x, (__half *)y, n);
    LAUNCH_CHECK();
}

extern "C" void relu_backward_v1(const void *x, const void *dy, void *dx, size_t n, enum dtype t,
                                 cudaStream_t s)
{
    kl_note_rung("v1_naive");
    if (t == DT_FP32)
        relu_backward_naive<<<blocks_for(n), THREADS, 0, s>>>((const float *)x, (const float *)dy,
                                                              (float *)dx, n);
    else
        relu_backward_naive<<<blocks_for(n), THREADS, 0, s>>>(
            (const __half *)x, (const __half *)dy, (__half *)dx, n);
    LAUNCH_CHECK();
}
