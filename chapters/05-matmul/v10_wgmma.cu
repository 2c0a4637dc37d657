/* v10 placeholder: being written. */
#include "matmul.cuh"

extern "C" const char *matmul_v10_unsupported(void)
{
    return NULL;
}

extern "C" void matmul_v10(const void *a, const void *b, void *c, struct matmul_dims d,
                           enum dtype t, cudaStream_t s)
{
    matmul_v8(a, b, c, d, t, s);
}
