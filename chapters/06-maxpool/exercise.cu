/* Exercise: write the fp32 max-pooling forward, one thread per output.
 *
 * The kernel below runs whole warps over the outputs o = ((n C + c) OH + i) OW + j,
 * o < N C OH OW: lane L of a warp owns output first + L, and the lanes past the last output
 * still take part, because the packed argmax is stored by the whole warp together (four 2-bit
 * fields share a byte at 2x2: maxpool_store_argmax_by_warp in maxpool.cuh). Complete it:
 *   1. split o into the plane n C + c, the output row i and the column j;
 *   2. scan the window's rows i S - P .. i S - P + KH - 1 and columns j S - P .. j S - P + KW - 1
 *      in row-major order, skipping the positions outside x (padding never wins);
 *   3. keep the first maximum, starting from the first position inside x, and let a NaN beat
 *      any number (the first NaN wins): maxpool_wins() in maxpool.cuh is the comparison;
 *   4. write y[o], and set position to the winner's place in its window, r KW + q
 *      (maxpool_window_position);
 *   5. stay correct for every shape: `./run --exercise` checks a 1x1 window, odd sizes,
 *      padding and overlapping windows, and says which element is wrong first.
 * Then compare your time with v1_naive and v2_coalesced at the seed shape (the table printed
 * after PASS) and explain the difference: what does v2 do with the 2x2 stride-2 window that a
 * thread per output cannot, and what do 64-bit divisions cost a kernel that is memory-bound? */
#include "maxpool.cuh"

#define THREADS 256

__global__ void maxpool_forward_exercise_kernel(const float *__restrict__ x,
                                                float *__restrict__ y,
                                                uint8_t *__restrict__ argmax, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t first = maxpool_warp_first_output();
    const int64_t o = first + threadIdx.x % 32;
    const bool valid = o < outputs;
    int position = 0;
    if (valid) {
        /* TODO: steps 1 to 4. */
        (void)x;
        (void)y;
    }
    maxpool_store_argmax_by_warp(argmax, d, o, valid, position);
}

extern "C" void maxpool_forward_exercise(const float *x, float *y, uint8_t *argmax,
                                         struct maxpool_dims d, cudaStream_t s)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    /* 2^31 - 1 blocks of THREADS would be 2^39 outputs: more than a GPU holds. */
    const unsigned blocks = (unsigned)((outputs + THREADS - 1) / THREADS);
    maxpool_forward_exercise_kernel<<<blocks, THREADS, 0, s>>>(x, y, argmax, d);
    LAUNCH_CHECK();
}
