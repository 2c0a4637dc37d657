/* The second pass of the split rungs, as a kernel of its own: each element of dw and db is the
 * sum of its slices, added in slice order. The split rungs use it when a tile's slices are too
 * many floats for the last block to add alone (wgrad_finish_in_last_block): at resnet v4's two
 * tiles of 18432 sums each, over some 130 slices, would leave two blocks reading 9.7 MB each
 * while the rest of the GPU idles; spread over every SM the whole 19.5 MB, most of it still in
 * L2, takes a few microseconds. A block takes 32 consecutive elements (a warp's loads are one
 * 128-byte line of a slice) and cuts the slices into RUNS runs of consecutive slices, a warp a
 * run: a thread's loads are slices / RUNS long, not slices, and the runs are added in order, so
 * the bits depend on the slice count alone. */
#include "wgrad.cuh"

#define RUNS 8
#define THREADS (32 * RUNS)

template <typename T>
__global__ void __launch_bounds__(THREADS)
    wgrad_add_slices(const float *__restrict__ partials, int slices, int64_t floats, int weights,
                     T *__restrict__ dw, T *__restrict__ db)
{
    __shared__ float run_sums[RUNS][32];
    const int total = db ? (int)floats : weights;
    const int lane = threadIdx.x % 32, run = threadIdx.x / 32;
    const int e = blockIdx.x * 32 + lane, length = (slices + RUNS - 1) / RUNS;
    const int first = run * length, last = first + length < slices ? first + length : slices;
    float sum = 0.f;
    if (e < total) {
#pragma unroll 4
        for (int s = first; s < last; s++)
            sum += __ldcg(partials + (int64_t)s * floats + e);
    }
    run_sums[run][lane] = sum;
    __syncthreads();
    if (run == 0 && e < total) {
        float all = 0.f;
#pragma unroll
        for (int r = 0; r < RUNS; r++)
            all += run_sums[r][lane];
        if (e < weights)
            dw[e] = from_float<T>(all);
        else
            db[e - weights] = from_float<T>(all);
    }
}

extern "C" void wgrad_finish_slices(const float *partials, int slices, struct conv2d_dims d,
                                    void *dw, void *db, enum dtype t, cudaStream_t s)
{
    const int64_t floats = wgrad_slice_floats(d);
    const int weights = (int)(d.k * wgrad_columns(d));
    const unsigned blocks = (unsigned)(((db ? floats : weights) + 31) / 32);
    if (t == DT_FP32)
        wgrad_add_slices<float><<<blocks, THREADS, 0, s>>>(partials, slices, floats, weights,
                                                           (float *)dw, (float *)db);
    else
        wgrad_add_slices<__half><<<blocks, THREADS, 0, s>>>(partials, slices, floats, weights,
                                                            (__half *)dw, (__half *)db);
    LAUNCH_CHECK();
}
