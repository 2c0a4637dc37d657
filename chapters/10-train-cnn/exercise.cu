/* Exercise: fuse a pool's backward with the ReLU's before it (fp32), as fused.cu does.
 *
 * The forward ran a = ReLU(conv), then a 2x2 stride-2 max pool that kept, for each window, the
 * winner's position r * 2 + q in 2 bits (chapter 06's packed argmax: window o's field at bits
 * 2 (o % 4) of byte o / 4). The backward must write, for every element of a,
 *     dz = d_pooled[o]  at the winner of window o, where a there is positive,
 *     dz = 0            everywhere else,
 * which chapter 06's backward and chapter 01's ReLU backward do in two passes (writing dz, then
 * reading it and a back). Write it as one: a thread per window o < planes * OH * OW
 * (row = o / OW is plane * OH + i, j = o % OW; the window's top left is element (2 i, 2 j) of
 * its plane, of W = 2 OW columns):
 *   1. read the window's 2-bit winner, and from it the winner's index in a;
 *   2. write all four elements of the window's dz: the gradient at the winner where a > 0,
 *      zero at the other three;
 *   3. stay in bounds for every shape `./run --exercise` tries (one plane, odd OW, many planes).
 * Then time both ways: `./run --variant v1_library,ours --breakdown` shows the two kernels
 * unfused and the one fused at batch 32 and 1024. Which bytes did the fusion save, and why does
 * it save more than bytes at batch 32? */
#include "check.h"
#include "kernels.cuh"
#include "step.h"

#define THREADS 256

__global__ void pool_relu_backward_exercise(const float *__restrict__ d_pooled,
                                            const uint8_t *__restrict__ argmax,
                                            const float *__restrict__ activation,
                                            float *__restrict__ dz, int64_t windows, int ow)
{
    const int64_t o = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (o >= windows)
        return;
    /* TODO: steps 1 and 2. */
    (void)d_pooled;
    (void)argmax;
    (void)activation;
    (void)dz;
    (void)ow;
}

extern "C" void cnn_pool_relu_backward_exercise(const float *d_pooled, const uint8_t *argmax,
                                                const float *activation, float *dz,
                                                int64_t planes, int oh, int ow, cudaStream_t s)
{
    const int64_t windows = planes * oh * ow;
    const unsigned blocks = (unsigned)((windows + THREADS - 1) / THREADS);
    pool_relu_backward_exercise<<<blocks, THREADS, 0, s>>>(d_pooled, argmax, activation, dz,
                                                           windows, ow);
    LAUNCH_CHECK();
}
