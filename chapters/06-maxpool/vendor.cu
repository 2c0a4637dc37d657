/* vendor: cuDNN's max pooling, forward and backward, the baseline every rung is compared with.
 *
 * cudnnPoolingForward / cudnnPoolingBackward with CUDNN_POOLING_MAX_DETERMINISTIC and
 * CUDNN_PROPAGATE_NAN (a NaN in a window makes y NaN, as in every rung), a 2D pooling
 * descriptor of the window, the padding and the stride (the same along both axes), and packed
 * NCHW descriptors of x (N x C x H x W) and y (N x C x OH x OW) in fp32 or fp16; cuDNN's output
 * size formula is the chapter's, 1 + (H + 2 P - KH) / S. The scaling factors are fp32 for both
 * types. cuDNN takes int dimensions: main.cu lists the rung as unsupported where they do not
 * fit.
 * cuDNN keeps no argmax: its forward writes y alone, and its backward reads x, y and dy and finds
 * each window's maximum again by comparing x with y. The rung table (main.cu) therefore marks
 * the argmax as an output this rung does not write: the harness verifies y alone, and the
 * forward row times cuDNN's kernel as a framework would call it. Its bytes are the chapter's
 * all the same (x, y and the argmax), which overstates its GB/s by the argmax's share: at 2x2
 * in fp32, 1 byte in 81.
 * Expected: backward reads x, y and dy and writes dx: at 2x2 stride 2 in fp32, 4 + 4 / 4 +
 * 4 / 4 + 4 = 10 bytes per input element, against 5.06 for a gather through the packed argmax
 * (v2, v3). Ties (two equal maxima in a window, rare in fp32 random data, less so in fp16) go
 * where cuDNN's comparison sends them, which need not be the first. */
#include <cudnn.h>

#include "launch.cuh"
#include "maxpool.cuh"

struct cudnn_maxpool {
    cudnnHandle_t handle;
    cudnnPoolingDescriptor_t pooling;
    cudnnTensorDescriptor_t x, y; /* dx is described by x, dy by y */
    struct maxpool_dims dims;
    enum dtype dtype;
    int ready;
};

static bool same_problem(const maxpool_dims &a, const maxpool_dims &b)
{
    return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.kh == b.kh &&
           a.kw == b.kw && a.s == b.s && a.p == b.p && a.oh == b.oh && a.ow == b.ow;
}

/* One handle and set of descriptors, reshaped only when the problem changes. The handle is
 * created in relaxed capture mode: under --no-verify the first call may come inside a graph
 * capture (launch.cuh). */
static struct cudnn_maxpool *cudnn_for(struct maxpool_dims d, enum dtype t, cudaStream_t s)
{
    static struct cudnn_maxpool c;
    if (!c.handle) {
        const cudaStreamCaptureMode mode = kl_capture_relax();
        CUDNN_CHECK(cudnnCreate(&c.handle));
        CUDNN_CHECK(cudnnCreatePoolingDescriptor(&c.pooling));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.x));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&c.y));
        kl_capture_restore(mode);
    }
    if (!c.ready || !same_problem(c.dims, d) || c.dtype != t) {
        const cudnnDataType_t type = t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
        CUDNN_CHECK(cudnnSetPooling2dDescriptor(c.pooling, CUDNN_POOLING_MAX_DETERMINISTIC,
                                                CUDNN_PROPAGATE_NAN, (int)d.kh, (int)d.kw,
                                                (int)d.p, (int)d.p, (int)d.s, (int)d.s));
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.x, CUDNN_TENSOR_NCHW, type, (int)d.n, (int)d.c,
                                               (int)d.h, (int)d.w));
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.y, CUDNN_TENSOR_NCHW, type, (int)d.n, (int)d.c,
                                               (int)d.oh, (int)d.ow));
        c.dims = d;
        c.dtype = t;
        c.ready = 1;
    }
    CUDNN_CHECK(cudnnSetStream(c.handle, s));
    return &c;
}

extern "C" void maxpool_forward_vendor(const void *x, void *y, struct maxpool_dims d,
                                       enum dtype t, cudaStream_t s)
{
    struct cudnn_maxpool *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingForward(c->handle, c->pooling, &one, c->x, x, &zero, c->y, y));
}

extern "C" void maxpool_backward_vendor(const void *x, const void *y, const void *dy, void *dx,
                                        struct maxpool_dims d, enum dtype t, cudaStream_t s)
{
    struct cudnn_maxpool *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingBackward(c->handle, c->pooling, &one, c->y, y, c->y, dy, c->x, x,
                                     &zero, c->x, dx));
}
