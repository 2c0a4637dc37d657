/* v9 placeholder: being written. */
#include "matmul.cuh"

extern "C" void matmul_v9(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    matmul_v8(a, b, c, d, t, s);
}
