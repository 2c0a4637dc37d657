/* Exercise: write ReLU forward for fp32 with 128-bit loads and stores.
 *
 * The kernel below is launched with a grid that fills the GPU (a grid-stride loop is needed).
 * Make it:
 *   1. read x as float4 (four elements per load) and write y as float4, for every whole group
 *      of four elements;
 *   2. handle the 0-3 elements left over at the end one at a time;
 *   3. stay correct for any n (try n = 1 and n = 31: `./run --exercise` checks 1, 2, 31, 1023
 *      and 2^20 + 3, and says which element is wrong first).
 * cudaMalloc returns 256-byte aligned pointers, so x and y may be read as float4 here.
 * Use relu_value() from relu.cuh for the arithmetic. Then compare your time with v3_vector and
 * with cuDNN (the table printed after PASS), and explain the difference you see at the seed
 * size against 2^28 elements (`./run --exercise --preset large`). */
#include "relu.cuh"
#include "relu.h"

#define THREADS 256

__global__ void relu_forward_exercise_kernel(const float *__restrict__ x, float *__restrict__ y,
                                             size_t n)
{
    /* TODO: your kernel here. */
    (void)x;
    (void)y;
    (void)n;
}

extern "C" void relu_forward_exercise(const void *x, void *y, size_t n, enum dtype t,
                                      cudaStream_t s)
{
    (void)t; /* the exercise is fp32 only; its rung says so */
    int blocks = grid_to_fill_gpu((const void *)relu_forward_exercise_kernel, THREADS,
                                  (n / 4 + THREADS) / THREADS);
    relu_forward_exercise_kernel<<<blocks, THREADS, 0, s>>>((const float *)x, (float *)y, n);
    LAUNCH_CHECK();
}
