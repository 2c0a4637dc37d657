/* vendor: cuDNN's convolution forward plus the bias, the yardstick of every rung.
 *
 * cudnnConvolutionForward in CUDNN_CROSS_CORRELATION mode (api.h's formula does not flip the
 * filter), with the fastest algorithm cudnnFindConvolutionForwardAlgorithmEx times on the
 * call's own x, w and y among those that succeed within VENDOR_WORKSPACE_CAP of workspace,
 * which the vendor keeps. Find runs once per shape, dtype and layout, on the first call (the
 * harness makes it outside any capture); later calls only launch.
 *  - fp32: CUDNN_DATA_FLOAT in CUDNN_FMA_MATH, which forbids TF32. Only Find's results whose
 *    math type is CUDNN_FMA_MATH are kept, the type is read back from the descriptor before
 *    use, and anything else stops the program.
 *  - fp16: CUDNN_DATA_HALF tensors, fp32 compute, CUDNN_TENSOR_OP_MATH (tensor cores).
 * The bias: the convolution writes y (beta = 0, the case Find times), then cudnnAddTensor adds
 * b (1 x K x 1 x 1) to it, as a framework calls cuDNN for a convolution with a bias. That is
 * one more read and write of y, part of cuDNN's cost, and in fp16 a second rounding: where b
 * cancels a short sum (C = 1, 3x3) the result can miss the one-rounding tolerance every rung
 * meets, and the row then says so instead of failing (main.cu). Laying b down first and
 * accumulating onto it (beta = 1) rounds once, but cuDNN's kernels are then no longer the ones
 * Find timed, and measured several times slower at the large presets. Both calls are timed.
 * vendor_nhwc: the same on NHWC x and y and KRSC w, cuDNN's layout for
 * tensor cores. The launchers note the algorithm (IMPLICIT_PRECOMP_GEMM, FFT_TILING, ...),
 * which the table prints as what ran. Limits: int dimensions (conv2d_vendor_unsupported); one
 * workspace for every call, so unlike the rungs no two calls may run at once. */
#include <cudnn.h>
#include <limits.h>

#include "conv.cuh"

/* Device memory the vendor may hold, against the algorithms (FFT, GEMM) that want more. */
#define VENDOR_WORKSPACE_CAP ((size_t)1 << 30)
/* Shapes whose Find is remembered; past that, slots are reused in turn (and Find runs again). */
#define VENDOR_SHAPES 64

/* cudnnConvolutionFwdAlgo_t's names, for the table. */
static const char *const algo_names[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",     "DIRECT",
    "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED",
};

/* One problem's descriptors and the algorithm Find chose for it. */
struct vendor_shape {
    struct conv2d_dims d;
    enum dtype t;
    bool nhwc;
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t algo;
    size_t workspace_bytes; /* what algo needs */
};

static cudnnHandle_t handle;
static struct vendor_shape shapes[VENDOR_SHAPES];
static int n_shapes, next_reused;
static void *workspace;
static size_t workspace_have;

static bool same_dims(const conv2d_dims &a, const conv2d_dims &b)
{
    return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r &&
           a.s == b.s && a.stride == b.stride && a.pad == b.pad;
}

static struct vendor_shape *shape_seen(struct conv2d_dims d, enum dtype t, bool nhwc)
{
    for (int i = 0; i < n_shapes; i++)
        if (same_dims(shapes[i].d, d) && shapes[i].t == t && shapes[i].nhwc == nhwc)
            return &shapes[i];
    return NULL;
}

static void fail(const char *what, struct conv2d_dims d, enum dtype t)
{
    fprintf(stderr, "vendor: %s at %lldx%lldx%lldx%lld-%lldk%llds%lldp%lld %s\n", what,
            (long long)d.n, (long long)d.c, (long long)d.h, (long long)d.w, (long long)d.k,
            (long long)d.r, (long long)d.stride, (long long)d.pad, dtype_name(t));
    exit(KL_EXIT_CUDA);
}

/* The descriptors of x, w, y, b and the convolution, in d's shape and t's types. */
static void set_descriptors(struct vendor_shape *v)
{
    if (!v->x) {
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->x));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->y));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->b));
        CUDNN_CHECK(cudnnCreateFilterDescriptor(&v->w));
        CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&v->conv));
    }
    const struct conv2d_dims d = v->d;
    const cudnnDataType_t type = v->t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnTensorFormat_t layout = v->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->x, layout, type, (int)d.n, (int)d.c, (int)d.h,
                                           (int)d.w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(v->w, type, layout, (int)d.k, (int)d.c, (int)d.r,
                                           (int)d.s));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->y, layout, type, (int)d.n, (int)d.k, (int)d.p,
                                           (int)d.q));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->b, layout, type, 1, (int)d.k, 1, 1));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(v->conv, (int)d.pad, (int)d.pad, (int)d.stride,
                                                (int)d.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(v->conv, v->t == DT_FP16 ? CUDNN_TENSOR_OP_MATH
                                                                     : CUDNN_FMA_MATH));
    int n, k, p, q; /* cuDNN's output size must be api.h's */
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(v->conv, v->x, v->w, &n, &k, &p, &q));
    if (n != d.n || k != d.k || p != d.p || q != d.q)
        fail("cuDNN's output size differs from the chapter's", d, v->t);
}

/* The largest workspace any algorithm asks for at this shape, within the cap: Find is given
 * that much, so every algorithm that fits the cap can compete. */
static size_t workspace_wanted(const struct vendor_shape *v)
{
    size_t most = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++) {
        size_t bytes;
        if (cudnnGetConvolutionForwardWorkspaceSize(handle, v->x, v->w, v->conv, v->y,
                                                    (cudnnConvolutionFwdAlgo_t)a, &bytes) ==
                CUDNN_STATUS_SUCCESS &&
            bytes <= VENDOR_WORKSPACE_CAP && bytes > most)
            most = bytes;
    }
    return most;
}

/* Find on the call's buffers (it writes y, which the call then writes again); the fastest
 * result that succeeded within the workspace, in fp32 only an FMA-math one. Find lists its
 * results fastest first. */
static void choose_algorithm(struct vendor_shape *v, const void *x, const void *w, void *y,
                             cudaStream_t s)
{
    kl_grow_buffer(&workspace, &workspace_have, workspace_wanted(v), s);
    int count = 0, returned = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count));
    cudnnConvolutionFwdAlgoPerf_t *perf =
        (cudnnConvolutionFwdAlgoPerf_t *)malloc((size_t)count * sizeof *perf);
    if (!perf)
        fail("out of host memory for Find's results", v->d, v->t);
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(handle, v->x, x, v->w, w, v->conv, v->y,
                                                       y, count, &returned, perf, workspace,
                                                       workspace_have));
    const cudnnConvolutionFwdAlgoPerf_t *best = NULL;
    for (int i = 0; i < returned && !best; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= workspace_have &&
            (v->t != DT_FP32 || perf[i].mathType == CUDNN_FMA_MATH))
            best = &perf[i];
    if (!best)
        fail(v->t == DT_FP32 ? "Find returned no FMA-math algorithm that fits the workspace cap"
                             : "Find returned no algorithm that fits the workspace cap",
             v->d, v->t);
    CUDNN_CHECK(cudnnSetConvolutionMathType(v->conv, best->mathType));
    cudnnMathType_t math;
    CUDNN_CHECK(cudnnGetConvolutionMathType(v->conv, &math));
    if (v->t == DT_FP32 && math != CUDNN_FMA_MATH)
        fail("the convolution's math type is not CUDNN_FMA_MATH: fp32 would not be fp32", v->d,
             v->t);
    v->algo = best->algo;
    v->workspace_bytes = best->memory;
    free(perf);
}

/* The shape's entry: on first sight its descriptors, and Find, which cannot be captured. */
static struct vendor_shape *shape_of(const void *x, const void *w, void *y,
                                     struct conv2d_dims d, enum dtype t, bool nhwc,
                                     cudaStream_t s)
{
    if (!handle) {
        const cudaStreamCaptureMode mode = kl_capture_relax();
        CUDNN_CHECK(cudnnCreate(&handle));
        kl_capture_restore(mode);
    }
    CUDNN_CHECK(cudnnSetStream(handle, s));
    struct vendor_shape *v = shape_seen(d, t, nhwc);
    if (v)
        return v;
    cudaStreamCaptureStatus capturing;
    CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
    if (capturing != cudaStreamCaptureStatusNone)
        fail("the first call for a shape runs cudnnFind, which cannot be captured", d, t);
    const cudaStreamCaptureMode mode = kl_capture_relax();
    v = &shapes[n_shapes < VENDOR_SHAPES ? n_shapes++ : next_reused++ % VENDOR_SHAPES];
    v->d = d;
    v->t = t;
    v->nhwc = nhwc;
    set_descriptors(v);
    choose_algorithm(v, x, w, y, s);
    kl_capture_restore(mode);
    return v;
}

/* y = conv(x, w), then y = y + b broadcast (where there is a b). */
static void forward(const void *x, const void *w, const void *bias, void *y,
                    struct conv2d_dims d, enum dtype t, bool nhwc, cudaStream_t s)
{
    const struct vendor_shape *v = shape_of(x, w, y, d, t, nhwc, s);
    kl_note_rung((unsigned)v->algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? algo_names[v->algo]
                                                                      : "cuDNN");
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionForward(handle, &one, v->x, x, v->w, w, v->conv, v->algo,
                                        workspace, v->workspace_bytes, &zero, v->y, y));
    if (bias)
        CUDNN_CHECK(cudnnAddTensor(handle, &one, v->b, bias, &one, v->y, y));
}

extern "C" void conv2d_forward_vendor(const void *x, const void *w, const void *bias, void *y,
                                      struct conv2d_dims d, enum dtype t, cudaStream_t s)
{
    forward(x, w, bias, y, d, t, false, s);
}

extern "C" void conv2d_forward_vendor_nhwc(const void *x_nhwc, const void *w_krsc,
                                           const void *bias, void *y_nhwc, struct conv2d_dims d,
                                           enum dtype t, cudaStream_t s)
{
    forward(x_nhwc, w_krsc, bias, y_nhwc, d, t, true, s);
}

extern "C" const char *conv2d_vendor_unsupported(struct conv2d_dims d)
{
    const int64_t sizes[] = {d.n, d.c, d.h + 2 * d.pad, d.w + 2 * d.pad, d.k, d.r, d.s,
                             d.stride, d.p, d.q};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > INT_MAX)
            return "a size, stride or padding does not fit cuDNN's int";
    if (d.n * d.c * d.h * d.w > INT_MAX || d.k * d.c * d.r * d.s > INT_MAX ||
        d.n * d.k * d.p * d.q > INT_MAX)
        return "a tensor holds 2^31 elements or more, past cuDNN's int strides";
    return NULL;
}
