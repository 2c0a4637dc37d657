/* vendor: cuDNN's softmax forward and backward, the baseline every rung is compared with.
 *
 * cudnnSoftmaxForward / cudnnSoftmaxBackward with CUDNN_SOFTMAX_ACCURATE (the max is subtracted,
 * as in every rung here) and CUDNN_SOFTMAX_MODE_CHANNEL (over C at each (n, h, w)), on a packed
 * NCHW descriptor in fp32 or fp16; the scaling factors are fp32 for both. The backward takes y
 * and dy, as ours do. */
#include <cudnn.h>

#include "check.h"

#include "softmax.h"

struct cudnn_softmax {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t tensor;
    struct softmax_dims dims;
    enum dtype dtype;
};

/* One handle and descriptor, reshaped only when the problem changes. main.cu lists the rung as
 * unsupported when a dimension or a stride would not fit cuDNN's int. */
static struct cudnn_softmax *cudnn_for(struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    static struct cudnn_softmax c;
    if (!c.handle) {
        CUDNN_CHECK(cudnnCreate(&c.handle));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.tensor));
    }
    if (c.dims.n != d.n || c.dims.c != d.c || c.dims.h != d.h || c.dims.w != d.w ||
        c.dtype != t) {
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.tensor, CUDNN_TENSOR_NCHW,
                                               t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT,
                                               (int)d.n, (int)d.c, (int)d.h, (int)d.w));
        c.dims = d;
        c.dtype = t;
    }
    CUDNN_CHECK(cudnnSetStream(c.handle, s));
    return &c;
}

extern "C" void softmax_forward_vendor(const void *x, void *y, struct softmax_dims d,
                                       enum dtype t, cudaStream_t s)
{
    struct cudnn_softmax *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSoftmaxForward(c->handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL,
                                    &one, c->tensor, x, &zero, c->tensor, y));
}

extern "C" void softmax_backward_vendor(const void *y, const void *dy, void *dx,
                                        struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    struct cudnn_softmax *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSoftmaxBackward(c->handle, CUDNN_SOFTMAX_ACCURATE,
                                     CUDNN_SOFTMAX_MODE_CHANNEL, &one, c->tensor, y, c->tensor,
                                     dy, &zero, c->tensor, dx));
}
