/* Exercise: write the fp32 max-pooling forward, one thread per output.
 *
 * The launcher below runs one thread per output o = ((n C + c) OH + i) OW + j, o < N C OH OW.
 * Make the kernel:
 *   1. split o into the plane n C + c, the output row i and the column j;
 *   2. scan the window's rows i S - P .. i S - P + KH - 1 and columns j S - P .. j S - P + KW - 1
 *      in row-major order, skipping the positions outside x (padding never wins);
 *   3. keep the first maximum, starting from the first position inside x, and let a NaN beat
 *      any number (the first NaN wins): maxpool_wins() in maxpool.cuh is the comparison;
 *   4. write y[o] and plane_idx[o] = h W + w, the winner's position in its plane (main.cu
 *      derives the window index from it);
 *   5. stay correct for every shape: `./run --exercise` checks a 1x1 window, odd sizes,
 *      padding and overlapping windows, and says which element is wrong first.
 * Then compare your time with v1_naive and v2_coalesced at the seed shape (the table printed
 * after PASS) and explain the difference: what does v2 do with the 2x2 stride-2 window that a
 * thread per output cannot, and what do 64-bit divisions cost a kernel that is memory-bound? */
#include "maxpool.cuh"

#define THREADS 256

__global__ void maxpool_forward_exercise_kernel(const float *__restrict__ x,
                                                float *__restrict__ y,
                                                int32_t *__restrict__ plane_idx, maxpool_dims d)
{
    /* TODO: your kernel here. */
    (void)x;
    (void)y;
    (void)plane_idx;
    (void)d;
}

extern "C" void maxpool_forward_exercise(const float *x, float *y, int32_t *plane_idx,
                                         struct maxpool_dims d, cudaStream_t s)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    /* 2^31 - 1 blocks of THREADS would be 2^39 outputs: more than a GPU holds. */
    const unsigned blocks = (unsigned)((outputs + THREADS - 1) / THREADS);
    maxpool_forward_exercise_kernel<<<blocks, THREADS, 0, s>>>(x, y, plane_idx, d);
    LAUNCH_CHECK();
}
