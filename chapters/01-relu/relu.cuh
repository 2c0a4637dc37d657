/* The ReLU arithmetic every rung shares, in fp32 whatever the storage type: the rungs differ
 * only in how they move bytes, which is the whole cost of this operation. */
#ifndef RELU_CUH
#define RELU_CUH

#include "kernels.cuh"

/* NaN fails `v < 0`, so it propagates, as in the reference. */
__device__ __forceinline__ float relu_value(float v)
{
    return v < 0.f ? 0.f : v;
}

__device__ __forceinline__ float relu_gradient(float x, float dy)
{
    return x > 0.f ? dy : 0.f;
}

#endif
