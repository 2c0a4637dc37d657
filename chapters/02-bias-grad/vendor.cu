/* vendor: cuDNN's cudnnConvolutionBackwardBias, the call a framework makes for a convolution's
 * bias gradient. dy is described as an n x c x 1 x hw NCHW tensor (only the product H x W
 * matters to the sum, and it keeps every dimension an int), db as 1 x c x 1 x 1, both in the
 * problem's type; cuDNN's scaling factors are floats for fp32 and fp16 data alike. */
#include <cudnn.h>

#include "bias_grad.h"
#include "check.h"

struct cudnn_bias_grad {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t dy, db;
    struct bias_grad_size z;
    enum dtype dtype;
    int ready;
};

static struct cudnn_bias_grad *cudnn_for(struct bias_grad_size z, enum dtype t, cudaStream_t s)
{
    static struct cudnn_bias_grad c;
    if (!c.handle) {
        CUDNN_CHECK(cudnnCreate(&c.handle));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.dy));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.db));
    }
    if (!c.ready || c.z.n != z.n || c.z.c != z.c || c.z.hw != z.hw || c.dtype != t) {
        cudnnDataType_t type = t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.dy, CUDNN_TENSOR_NCHW, type, (int)z.n, (int)z.c,
                                               1, (int)z.hw));
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.db, CUDNN_TENSOR_NCHW, type, 1, (int)z.c, 1, 1));
        c.z = z;
        c.dtype = t;
        c.ready = 1;
    }
    CUDNN_CHECK(cudnnSetStream(c.handle, s));
    return &c;
}

extern "C" void bias_grad_vendor(const void *dy, void *db, struct bias_grad_size z,
                                 enum dtype t, cudaStream_t s)
{
    struct cudnn_bias_grad *c = cudnn_for(z, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(c->handle, &one, c->dy, dy, &zero, c->db, db));
}
