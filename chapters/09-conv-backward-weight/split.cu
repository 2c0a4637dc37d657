/* The second pass of the split rungs, as a kernel of its own: a thread per element of dw and
 * db sums that element's slices in slice order. The split rungs use it when a tile's slices
 * are too many floats for the last block to add alone (wgrad_finish_in_last_block): at resnet
 * v4's two tiles of 18432 sums each, over some 130 slices, would leave two blocks reading 9.7 MB
 * each while the rest of the GPU idles; spread over every SM the whole 19.5 MB, most of it
 * still in L2, takes a few microseconds. */
#include "wgrad.cuh"

#define THREADS 256

template <typename T>
__global__ void wgrad_add_slices(const float *__restrict__ partials, int slices, int64_t floats,
                                 int weights, T *__restrict__ dw, T *__restrict__ db)
{
    const int total = db ? (int)floats : weights;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const T sum = from_float<T>(wgrad_sum_slices(partials, slices, floats, e));
        if (e < weights)
            dw[e] = sum;
        else
            db[e - weights] = sum;
    }
}

extern "C" void wgrad_finish_slices(const float *partials, int slices, struct conv2d_dims d,
                                    void *dw, void *db, enum dtype t, cudaStream_t s)
{
    const int64_t floats = wgrad_slice_floats(d);
    const int weights = (int)(d.k * wgrad_columns(d));
    const unsigned blocks = (unsigned)((floats + THREADS - 1) / THREADS);
    if (t == DT_FP32)
        wgrad_add_slices<float><<<blocks, THREADS, 0, s>>>(partials, slices, floats, weights,
                                                           (float *)dw, (float *)db);
    else
        wgrad_add_slices<__half><<<blocks, THREADS, 0, s>>>(partials, slices, floats, weights,
                                                            (__half *)dw, (__half *)db);
    LAUNCH_CHECK();
}
