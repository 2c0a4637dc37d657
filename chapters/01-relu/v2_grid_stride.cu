/* v2, grid-stride loop: a grid sized to the GPU, each thread walking the tensor.
 *
 * Idea: launch just enough blocks to fill every SM at full occupancy (SMs x blocks per SM, from
 * the occupancy calculator), and let each thread loop i, i + grid, i + 2 grid, ... The loop
 * keeps coalescing (each step the whole grid touches one contiguous stretch).
 * What changed from v1: the grid no longer grows with n; blocks are never retired and
 * rescheduled, and per-thread index set-up is paid once per thread instead of once per element.
 * Expected: a few percent at large n, where v1 launched a million short blocks; nothing at
 * small n, where both launch fewer blocks than the GPU holds. Still one narrow load per element
 * per thread: the bytes in flight per thread are what v3 raises. */
#include "relu.cuh"
#include "relu.h"

#define THREADS 256

template <typename T>
__global__ void relu_forward_grid_stride(const T *__restrict__ x, T *__restrict__ y, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = from_float<T>(relu_value(to_float(x[i])));
}

template <typename T>
__global__ void relu_backward_grid_stride(const T *__restrict__ x, const T *__restrict__ dy,
                                          T *__restrict__ dx, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = from_float<T>(relu_gradient(to_float(x[i]), to_float(dy[i])));
}

template <typename T> static void forward(const T *x, T *y, size_t n, cudaStream_t s)
{
    int blocks = grid_to_fill_gpu((const void *)relu_forward_grid_stride<T>, THREADS,
                                  (n + THREADS - 1) / THREADS);
    relu_forward_grid_stride<<<blocks, THREADS, 0, s>>>(x, y, n);
    LAUNCH_CHECK();
}

template <typename T> static void backward(const T *x, const T *dy, T *dx, size_t n,
                                           cudaStream_t s)
{
    int blocks = grid_to_fill_gpu((const void *)relu_backward_grid_stride<T>, THREADS,
                                  (n + THREADS - 1) / THREADS);
    relu_backward_grid_stride<<<blocks, THREADS, 0, s>>>(x, dy, dx, n);
    LAUNCH_CHECK();
}

extern "C" void relu_forward_v2(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v2_grid_stride");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, n, s);
    else
        forward((const __half *)x, (__half *)y, n, s);
}

extern "C" void relu_backward_v2(const void *x, const void *dy, void *dx, size_t n, enum dtype t,
                                 cudaStream_t s)
{
    kl_note_rung("v2_grid_stride");
    if (t == DT_FP32)
        backward((const float *)x, (const float *)dy, (float *)dx, n, s);
    else
        backward((const __half *)x, (const __half *)dy, (__half *)dx, n, s);
}
