/* v1, naive: one thread per row, three passes over the row in global memory.
 *
 * Idea: the direct translation of the math. Thread r owns row r = (n, h, w) and walks its C
 * elements three times: the max, then the sum of exp(x - max), then the outputs. The backward
 * walks twice: the dot product sum_c dy y, then the outputs.
 * Cost model: every pass reads the row again. The second and third reads hit the L1 or L2 when
 * the row is short, so DRAM still sees about the minimum (2 N C H W s bytes forward, 3 backward)
 * on the seed shapes; the question is what the threads of a warp read at the same time.
 * When H W is large (the seed, 8x10x28x28: rows 784 elements apart), neighbouring threads own
 * neighbouring (h, w), so for each channel a warp reads 32 neighbouring elements: coalesced,
 * and this layout is the natural one for short rows. When H W = 1 (rows contiguous, `large`:
 * 4096 rows of 32768) each thread walks its own 128 KiB alone: a warp's 32 loads touch 32
 * different lines, and only 4096 threads exist for the whole GPU.
 * Expected: near the launch floor at the seed shapes, a few percent of the roof on long rows.
 * Limits: parallelism is N H W threads, whatever C; rows are walked serially. */
#include "softmax.cuh"
#include "softmax.h"

#define THREADS 256

template <typename T>
__global__ void softmax_forward_naive(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                                      int C, int64_t S)
{
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const int64_t start = softmax_row_start(r, C, S);
    const T *xr = x + start;
    T *yr = y + start;
    float m = SOFTMAX_NO_VALUE;
    for (int c = 0; c < C; c++)
        m = fmaxf(m, to_float(xr[c * S]));
    float sum = 0.f;
    for (int c = 0; c < C; c++)
        sum += softmax_exp(to_float(xr[c * S]) - m);
    const float inv = 1.f / sum;
    for (int c = 0; c < C; c++)
        yr[c * S] = from_float<T>(softmax_exp(to_float(xr[c * S]) - m) * inv);
}

template <typename T>
__global__ void softmax_backward_naive(const T *__restrict__ y, const T *__restrict__ dy,
                                       T *__restrict__ dx, int64_t rows, int C, int64_t S)
{
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const int64_t start = softmax_row_start(r, C, S);
    const T *yr = y + start, *dyr = dy + start;
    T *dxr = dx + start;
    float dot = 0.f;
    for (int c = 0; c < C; c++)
        dot += to_float(yr[c * S]) * to_float(dyr[c * S]);
    for (int c = 0; c < C; c++)
        dxr[c * S] = from_float<T>(to_float(yr[c * S]) * (to_float(dyr[c * S]) - dot));
}

/* main.cu keeps N H W below 2^31, so the grid fits its 2^31 - 1 blocks. */
static unsigned blocks_for(int64_t rows)
{
    return (unsigned)((rows + THREADS - 1) / THREADS);
}

template <typename T> static void forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w;
    softmax_forward_naive<<<blocks_for(rows), THREADS, 0, s>>>(x, y, rows, (int)d.c, d.h * d.w);
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *y, const T *dy, T *dx, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w;
    softmax_backward_naive<<<blocks_for(rows), THREADS, 0, s>>>(y, dy, dx, rows, (int)d.c,
                                                                 d.h * d.w);
    LAUNCH_CHECK();
}

extern "C" void softmax_forward_v1(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v1_naive");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, d, s);
    else
        forward((const __half *)x, (__half *)y, d, s);
}

extern "C" void softmax_backward_v1(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v1_naive");
    if (t == DT_FP32)
        backward((const float *)y, (const float *)dy, (float *)dx, d, s);
    else
        backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
}
