/* vendor: cuDNN's max pooling, forward and backward, the baseline every rung is compared with.
 *
 * cudnnPoolingForward / cudnnPoolingBackward with CUDNN_POOLING_MAX_DETERMINISTIC and
 * CUDNN_PROPAGATE_NAN (a NaN in a window makes y NaN, as in every rung), a 2D pooling
 * descriptor of the window, the padding and the stride (the same along both axes), and packed
 * NCHW descriptors of x (N x C x H x W) and y (N x C x OH x OW) in fp32 or fp16; cuDNN's output
 * size formula is the chapter's, 1 + (H + 2 P - KH) / S. The scaling factors are fp32 for both
 * types. cuDNN takes int dimensions: main.cu lists the rung as unsupported where they do not
 * fit.
 * cuDNN keeps no argmax: its backward reads x, y and dy, and finds each window's maximum again
 * by comparing x with y. The chapter's forward must still output both index forms (the harness
 * verifies every output), so maxpool_forward_vendor runs cudnnPoolingForward for y and then
 * maxpool_argmax_indices, a kernel of our own that scans each window again and writes the plane
 * and window indices. The vendor's forward row therefore times both: cuDNN's y alone costs a
 * read of x and a write of y; the index kernel adds a second read of x (L2 hits at small sizes)
 * and 5 bytes per output.
 * Expected: backward reads x, y and dy and writes dx: at 2x2 stride 2 in fp32, 4 + 4 / 4 +
 * 4 / 4 + 4 = 10 bytes per input element, against 5.25 for a gather through the 1-byte window
 * index (v2, v3). Ties (two equal maxima in a window, rare in fp32 random data, less so in
 * fp16) go where cuDNN's comparison sends them, which need not be the first. */
#include <cudnn.h>

#include "launch.cuh"
#include "maxpool.cuh"

#define THREADS 256

/* The argmax cuDNN does not output: each window scanned again, indices written, y not. */
template <typename T>
__global__ void maxpool_argmax_indices(const T *__restrict__ x, int32_t *__restrict__ plane_idx,
                                       uint8_t *__restrict__ window_idx, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        int64_t out_row, j, plane, i;
        maxpool_divmod(o, d.ow, out_row, j);
        maxpool_divmod(out_row, d.oh, plane, i);
        const maxpool_pick<T> m = maxpool_window_argmax(x + plane * d.h * d.w, d, i, j);
        plane_idx[o] = maxpool_plane_index(d, i, j, m.r, m.q);
        window_idx[o] = maxpool_window_index(d, m.r, m.q);
    }
}

template <typename T>
static void write_indices(const T *x, int32_t *plane_idx, uint8_t *window_idx, maxpool_dims d,
                          cudaStream_t s)
{
    const int blocks = grid_to_fill_gpu((const void *)maxpool_argmax_indices<T>, THREADS,
                                        maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS));
    maxpool_argmax_indices<<<blocks, THREADS, 0, s>>>(x, plane_idx, window_idx, d);
    LAUNCH_CHECK();
}

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

extern "C" void maxpool_forward_vendor(const void *x, void *y, int32_t *plane_idx,
                                       uint8_t *window_idx, struct maxpool_dims d, enum dtype t,
                                       cudaStream_t s)
{
    struct cudnn_maxpool *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingForward(c->handle, c->pooling, &one, c->x, x, &zero, c->y, y));
    if (t == DT_FP32)
        write_indices((const float *)x, plane_idx, window_idx, d, s);
    else
        write_indices((const __half *)x, plane_idx, window_idx, d, s);
}

extern "C" void maxpool_backward_vendor(const void *x, const void *y, const void *dy, void *dx,
                                        struct maxpool_dims d, enum dtype t, cudaStream_t s)
{
    struct cudnn_maxpool *c = cudnn_for(d, t, s);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingBackward(c->handle, c->pooling, &one, c->y, y, c->y, dy, c->x, x,
                                     &zero, c->x, dx));
}
