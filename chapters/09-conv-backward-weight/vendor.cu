/* vendor: cuDNN's convolution weight gradient, the yardstick of every rung.
 *
 * cudnnConvolutionBackwardFilter in CUDNN_CROSS_CORRELATION mode (chapter 07's forward, whose
 * filter is not flipped), with the fastest algorithm cudnnFindConvolutionBackwardFilterAlgorithmEx
 * times on the call's own x, dy and dw among those that succeed within VENDOR_WORKSPACE_CAP of
 * workspace, which the vendor keeps; then, where db is not NULL, cudnnConvolutionBackwardBias,
 * the call a framework makes for the bias (chapter 02's vendor), a second pass over dy. Find
 * runs once per shape, dtype and layout, on the first call (the harness makes it outside any
 * capture); later calls only launch, with alpha 1 and beta 0: dw and db are overwritten, the
 * case Find times.
 *  - fp32: CUDNN_DATA_FLOAT in CUDNN_FMA_MATH, which forbids TF32 (CUDNN_DEFAULT_MATH allows
 *    it from compute capability 8.0 on). Only Find's results whose math type is
 *    CUDNN_FMA_MATH are kept, the type is read back from the descriptor before use, and
 *    anything else stops the program.
 *  - fp16: CUDNN_DATA_HALF tensors, fp32 compute, CUDNN_TENSOR_OP_MATH (tensor cores).
 * The descriptors are the forward's: x of N x C x H x W, dw of K x C x R x S, dy of
 * N x K x P x Q, db of 1 x K x 1 x 1, and cuDNN's forward output size for them must be the
 * chapter's P x Q. The 2D kernel (C = K = 1) is the same call. vendor_nhwc: the same on NHWC
 * x and dy and a KRSC dw, cuDNN's layout for tensor cores, without the bias. The launchers
 * note the algorithm (ALGO_1, FFT_TILING, ...), which the table prints as what ran; ALGO_0 and
 * ALGO_3 add with atomics, so their order of summation, and the last bits of their result,
 * may change from run to run. Limits: int dimensions (wgrad_vendor_unsupported); one
 * workspace for every call, so unlike the rungs no two calls may run at once. */
#include <cudnn.h>
#include <limits.h>

#include "wgrad.cuh"

/* Device memory the vendor may hold, against the algorithms (FFT, GEMM) that want more. */
#define VENDOR_WORKSPACE_CAP ((size_t)1 << 30)
/* Shapes whose Find is remembered; past that, slots are reused in turn (and Find runs again). */
#define VENDOR_SHAPES 64

/* cudnnConvolutionBwdFilterAlgo_t's names, for the table. */
static const char *const algo_names[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING",
};

/* One problem's descriptors and the algorithm Find chose for it. */
struct vendor_shape {
    struct conv2d_dims d;
    enum dtype t;
    bool nhwc;
    cudnnTensorDescriptor_t x, dy, db;
    cudnnFilterDescriptor_t dw;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionBwdFilterAlgo_t algo;
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

/* The descriptors of x, dy, dw, db and the convolution, in d's shape and t's types. */
static void set_descriptors(struct vendor_shape *v)
{
    if (!v->x) {
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->x));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->dy));
        CUDNN_CHECK(cudnnCreateTensorDescriptor(&v->db));
        CUDNN_CHECK(cudnnCreateFilterDescriptor(&v->dw));
        CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&v->conv));
    }
    const struct conv2d_dims d = v->d;
    const cudnnDataType_t type = v->t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnTensorFormat_t layout = v->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->x, layout, type, (int)d.n, (int)d.c, (int)d.h,
                                           (int)d.w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(v->dw, type, layout, (int)d.k, (int)d.c, (int)d.r,
                                           (int)d.s));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->dy, layout, type, (int)d.n, (int)d.k, (int)d.p,
                                           (int)d.q));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(v->db, CUDNN_TENSOR_NCHW, type, 1, (int)d.k, 1, 1));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(v->conv, (int)d.pad, (int)d.pad, (int)d.stride,
                                                (int)d.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(v->conv, v->t == DT_FP16 ? CUDNN_TENSOR_OP_MATH
                                                                     : CUDNN_FMA_MATH));
    int n, k, p, q; /* cuDNN's forward output size must be api.h's: dy's */
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(v->conv, v->x, v->dw, &n, &k, &p, &q));
    if (n != d.n || k != d.k || p != d.p || q != d.q)
        fail("cuDNN's output size differs from the chapter's", d, v->t);
}

/* The largest workspace any algorithm asks for at this shape, within the cap: Find is given
 * that much, so every algorithm that fits the cap can compete. */
static size_t workspace_wanted(const struct vendor_shape *v)
{
    size_t most = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++) {
        size_t bytes;
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, v->x, v->dy, v->conv, v->dw,
                                                           (cudnnConvolutionBwdFilterAlgo_t)a,
                                                           &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= VENDOR_WORKSPACE_CAP && bytes > most)
            most = bytes;
    }
    return most;
}

/* Find on the call's buffers (it writes dw, which the call then writes again); the fastest
 * result that succeeded within the workspace, in fp32 only an FMA-math one. Find lists its
 * results fastest first. */
static void choose_algorithm(struct vendor_shape *v, const void *x, const void *dy, void *dw,
                             cudaStream_t s)
{
    kl_grow_buffer(&workspace, &workspace_have, workspace_wanted(v), s);
    int count = 0, returned = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &count));
    cudnnConvolutionBwdFilterAlgoPerf_t *perf =
        (cudnnConvolutionBwdFilterAlgoPerf_t *)malloc((size_t)count * sizeof *perf);
    if (!perf)
        fail("out of host memory for Find's results", v->d, v->t);
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, v->x, x, v->dy, dy,
                                                              v->conv, v->dw, dw, count,
                                                              &returned, perf, workspace,
                                                              workspace_have));
    const cudnnConvolutionBwdFilterAlgoPerf_t *best = NULL;
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
static struct vendor_shape *shape_of(const void *x, const void *dy, void *dw,
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
    choose_algorithm(v, x, dy, dw, s);
    kl_capture_restore(mode);
    return v;
}

/* dw = x (x) dy, then db = sum dy where db is not NULL. */
static void backward(const void *x, const void *dy, void *dw, void *db, struct conv2d_dims d,
                     enum dtype t, bool nhwc, cudaStream_t s)
{
    const struct vendor_shape *v = shape_of(x, dy, dw, d, t, nhwc, s);
    kl_note_rung((unsigned)v->algo < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
                     ? algo_names[v->algo]
                     : "cuDNN");
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, v->x, x, v->dy, dy, v->conv,
                                               v->algo, workspace, v->workspace_bytes, &zero,
                                               v->dw, dw));
    if (db)
        CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, v->dy, dy, &zero, v->db, db));
}

extern "C" void wgrad_vendor(const void *x, const void *dy, void *dw, void *db,
                             struct conv2d_dims d, enum dtype t, cudaStream_t s)
{
    backward(x, dy, dw, db, d, t, false, s);
}

extern "C" void wgrad_vendor_nhwc(const void *x_nhwc, const void *dy_nhwc, void *dw_krsc,
                                  struct conv2d_dims d, enum dtype t, cudaStream_t s)
{
    backward(x_nhwc, dy_nhwc, dw_krsc, NULL, d, t, true, s);
}

extern "C" const char *wgrad_vendor_unsupported(struct conv2d_dims d)
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
