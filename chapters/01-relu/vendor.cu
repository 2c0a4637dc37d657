/* vendor: cuDNN's activation forward and backward (CUDNN_ACTIVATION_RELU), the baseline every
 * rung is compared with.
 *
 * The tensor is described to cuDNN as a packed 1 x 1 x rows x cols tensor, in fp32 or fp16; cuDNN's scaling factors are fp32 for both. Backward takes y, dy and
 * x: the chapter's backward problem holds x and dy only, and since relu(x) > 0 exactly where
 * x > 0, x is passed for y too, which leaves the result unchanged. */
#include <cudnn.h>

#include "check.h"

#include "relu.h"

struct cudnn_relu {
    cudnnHandle_t handle;
    cudnnActivationDescriptor_t activation;
    cudnnTensorDescriptor_t tensor;
    size_t rows, cols;
    enum dtype dtype;
};

/* One handle and descriptor, reshaped only when the problem changes (host work is kept out of
 * --no-graph timings as far as it can be). */
static struct cudnn_relu *cudnn_for(size_t rows, size_t cols, enum dtype t, cudaStream_t s)
{
    static struct cudnn_relu c;
    if (!c.handle) {
        CUDNN_CHECK(cudnnCreate(&c.handle));
        CUDNN_CHECK(cudnnCreateActivationDescriptor(&c.activation));
        CUDNN_CHECK(cudnnSetActivationDescriptor(c.activation, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_PROPAGATE_NAN, 0.0));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.tensor));
    }
    if (c.rows != rows || c.cols != cols || c.dtype != t) {
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.tensor, CUDNN_TENSOR_NCHW,
                                               t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT,
                                               1, 1, (int)rows, (int)cols));
        c.rows = rows;
        c.cols = cols;
        c.dtype = t;
    }
    CUDNN_CHECK(cudnnSetStream(c.handle, s));
    return &c;
}

/* cuDNN describes tensors with int dimensions: rows of 1024 when n allows, else one row.
 * main.cu lists the rung as unsupported where neither fits. */
static void as_rows(size_t n, size_t *rows, size_t *cols)
{
    *cols = n % 1024 == 0 ? 1024 : n;
    *rows = n / *cols;
}

extern "C" void relu_forward_vendor(const void *x, void *y, size_t n, enum dtype t,
                                    cudaStream_t s)
{
    size_t rows, cols;
    as_rows(n, &rows, &cols);
    struct cudnn_relu *c = cudnn_for(rows, cols, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnActivationForward(c->handle, c->activation, &one, c->tensor, x, &zero,
                                       c->tensor, y));
}

extern "C" void relu_backward_vendor(const void *x, const void *dy, void *dx, size_t n,
                                     enum dtype t, cudaStream_t s)
{
    size_t rows, cols;
    as_rows(n, &rows, &cols);
    struct cudnn_relu *c = cudnn_for(rows, cols, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnActivationBackward(c->handle, c->activation, &one, c->tensor, x, c->tensor,
                                        dy, c->tensor, x, &zero, c->tensor, dx));
}
