/* vendor: ours.cu's training step on cuDNN and cuBLASLt, as a program built on the vendor
 * libraries would run it, with step.h's glue for what neither has (gather, count, SGD update)
 * and one kernel of ours for the cross-entropy.
 * Made once, in cnn_vendor_create, for the full batch and the tail: the descriptors; each
 * convolution pass's fastest algorithm by cudnnFind*AlgorithmEx on the state's own buffers
 * (fp32 only in CUDNN_FMA_MATH: no TF32; fp16 tensors, fp32 compute, tensor cores allowed);
 * each GEMM's fastest of cuBLASLt's heuristic candidates, timed on the same buffers
 * (CUBLAS_COMPUTE_32F: TF32 would need _FAST_TF32); then one uncaptured run of every library
 * call, so that train.cu's graph capture meets none for the first time.
 * A step: gather; conv1 + bias + ReLU, pool, conv2 the same, pool; fc1 + bias + ReLU, fc2 +
 * bias (cuBLASLt's RELU_BIAS, BIAS epilogues); log-softmax (cuDNN), loss and d_logits (ours);
 * count; fc2 dW + db (the BGRADB epilogue), d_fc1, ReLU', fc1 dW + db, d_pool2; pool2', ReLU',
 * conv2 dW, db, dx; pool1', ReLU', conv1 dW, db; SGD: 21-25 library calls, 4 glue kernels. Each
 * conv forward is the faster, timed in create, of cudnnConvolutionBiasActivationForward (one
 * call; only IMPLICIT_PRECOMP_GEMM takes its ReLU) and Find's best + cudnnAddTensor +
 * cudnnActivationForward (two more passes over y). An epilogue cuBLASLt refuses is done by
 * cuDNN on an N x C x 1 x 1 view instead, and said on stderr.
 * Expected: at batch 128 the arithmetic (~7 MFLOP an image) and the traffic (tens of MB,
 * mostly L2-resident) take microseconds; the step is bound by its ~30 kernels' gaps and small
 * grids, as ours is, plus what cuDNN spends more: its pool backward reads x, y and dy (10 bytes
 * an input element in fp32, 5 through ours' argmax), and cudnnConvolutionBackwardBias, a second
 * pass over dy, measured 59 and 36 us for conv1 and conv2 at batch 128 fp32 on the H200 (its
 * weight gradients 42 and 26). Max-pool ties go where cuDNN sends them, not always to the
 * first maximum (ours' rule); the ReLU' after it zeroes the common tie, an all-zero window. */
#include <cublasLt.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels.cuh"
#include "vendor.h"

#define SEARCH_CAP ((size_t)1 << 30)    /* workspace Find may use: any algorithm's, up to 1 GiB */
#define LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's, passed to every cublasLtMatmul */
#define LT_CANDIDATES 8                 /* heuristic candidates timed per GEMM */
#define MAX_PERF 64                     /* Find results read */
#define TIMED_CALLS 10
#define LOSS_THREADS 512

/* ---- the context ---- */

/* One convolution pass: its descriptor (carrying the math type its algorithm runs in), the
 * algorithm (a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, -1: none) and its workspace. */
struct conv_call {
    cudnnConvolutionDescriptor_t desc;
    int algo;
    size_t bytes;
};

struct conv_layer {
    cudnnTensorDescriptor_t x, y, pooled, bias; /* N C H W, N K H W, N K H/2 W/2, 1 K 1 1 */
    cudnnFilterDescriptor_t w;                  /* K C 3 3 */
    struct conv_call fwd, fused, dgrad, wgrad;  /* fused: cudnnConvolutionBiasActivationForward's */
    int use_fused;
};

/* One cuBLASLt product, its operands in cuBLAS's column-major terms (the mapping: below). */
struct gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t first, second, c; /* cuBLAS's A (ours' B), B (ours' A), C = D */
    cublasLtMatmulAlgo_t algo;
    int fused; /* the epilogue asked for runs in the GEMM (0: refused, cuDNN does it after) */
};

struct fc_layer {
    cudnnTensorDescriptor_t y, bias; /* the output as N x OUT x 1 x 1, the bias 1 x OUT x 1 x 1 */
    struct gemm fwd, dw, dx;
};

/* Everything that depends on the batch size. */
struct plan {
    int n;
    struct conv_layer conv[2];
    struct fc_layer fc[2];
};

struct cnn_vendor {
    enum dtype t;
    cudnnHandle_t dnn;
    cublasLtHandle_t lt;
    cudnnPoolingDescriptor_t pool;    /* max, 2x2, stride 2 */
    cudnnActivationDescriptor_t relu;
    struct plan plan[2];
    int plans;
    void *workspace; /* cuDNN's: the largest any chosen algorithm needs */
    void *lt_workspace;
    void *logp;      /* the log-softmax, max_batch x 10 of type t */
    /* fp16 convolution bias gradients: cudnnReduceTensor, which sums in fp32, where
     * cudnnConvolutionBackwardBias sums fp16 in fp16 (35% off at a batch of 8) */
    cudnnReduceTensorDescriptor_t sum;
    void *sum_workspace;
    size_t sum_bytes;
    cudaEvent_t start, stop; /* for the searches in create */
};

/* The layers' shapes, and which of the state's buffers each reads and writes. */
struct conv_shape {
    int c, side, k;
};
static const struct conv_shape conv_shapes[2] = {{1, CNN_SIDE, CNN_C1},
                                                 {CNN_C1, CNN_SIDE / 2, CNN_C2}};
static const int fc_in[2] = {CNN_FLAT, CNN_HIDDEN}, fc_out[2] = {CNN_HIDDEN, CNN_CLASSES};

struct conv_buffers {
    void *x, *y, *pooled, *dx, *dy, *dpooled, *w, *b, *dw, *db; /* dx: NULL for conv1 */
};

static struct conv_buffers conv_buffers_of(const struct cnn_state *st, int i)
{
    void *p = st->params, *g = st->grads;
    const int w = i ? CNN_CONV2_W : CNN_CONV1_W, b = i ? CNN_CONV2_B : CNN_CONV1_B;
    if (i == 0)
        return {st->x, st->conv1, st->pool1, NULL, st->d_conv1, st->d_pool1,
                cnn_param(st, p, w), cnn_param(st, p, b), cnn_param(st, g, w), cnn_param(st, g, b)};
    return {st->pool1, st->conv2, st->pool2, st->d_pool1, st->d_conv2, st->d_pool2,
            cnn_param(st, p, w), cnn_param(st, p, b), cnn_param(st, g, w), cnn_param(st, g, b)};
}

struct fc_buffers {
    void *x, *y, *dx, *dy, *w, *b, *dw, *db;
};

static struct fc_buffers fc_buffers_of(const struct cnn_state *st, int i)
{
    void *p = st->params, *g = st->grads;
    const int w = i ? CNN_FC2_W : CNN_FC1_W, b = i ? CNN_FC2_B : CNN_FC1_B;
    if (i == 0)
        return {st->pool2, st->fc1, st->d_pool2, st->d_fc1,
                cnn_param(st, p, w), cnn_param(st, p, b), cnn_param(st, g, w), cnn_param(st, g, b)};
    return {st->fc1, st->logits, st->d_fc1, st->d_logits,
            cnn_param(st, p, w), cnn_param(st, p, b), cnn_param(st, g, w), cnn_param(st, g, b)};
}

static void fail(const char *what, const char *layer, int n, enum dtype t)
{
    fprintf(stderr, "10-train-cnn vendor: %s for %s at batch %d %s\n", what, layer, n,
            dtype_name(t));
    exit(KL_EXIT_CUDA);
}

/* ---- descriptors ---- */

static cudnnDataType_t dnn_type(enum dtype t)
{
    return t == DT_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static cudnnTensorDescriptor_t tensor(enum dtype t, int n, int c, int h, int w)
{
    cudnnTensorDescriptor_t d;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, dnn_type(t), n, c, h, w));
    return d;
}

/* net.h's convolution: 3x3, padding 1, stride 1, not flipped (cross-correlation), fp32
 * compute; the math type Find starts from (FMA in fp32, tensor cores allowed in fp16). */
static void describe_call(struct conv_call *c, enum dtype t)
{
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c->desc));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c->desc, 1, 1, 1, 1, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(c->desc, t == DT_FP16 ? CUDNN_TENSOR_OP_MATH
                                                                  : CUDNN_FMA_MATH));
    c->algo = -1;
}

static void describe_conv(struct conv_layer *l, enum dtype t, int n, struct conv_shape s)
{
    l->x = tensor(t, n, s.c, s.side, s.side);
    l->y = tensor(t, n, s.k, s.side, s.side);
    l->pooled = tensor(t, n, s.k, s.side / 2, s.side / 2);
    l->bias = tensor(t, 1, s.k, 1, 1);
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&l->w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(l->w, dnn_type(t), CUDNN_TENSOR_NCHW, s.k, s.c, 3, 3));
    describe_call(&l->fwd, t);
    describe_call(&l->fused, t);
    describe_call(&l->dgrad, t);
    describe_call(&l->wgrad, t);
    int on, ok, oh, ow; /* cuDNN's output size must be net.h's */
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(l->fwd.desc, l->x, l->w, &on, &ok, &oh, &ow));
    if (on != n || ok != s.k || oh != s.side || ow != s.side)
        fail("cuDNN's output size differs from net.h's", s.c == 1 ? "conv1" : "conv2", n, t);
}

static void describe_plan(struct plan *p, enum dtype t, int n)
{
    p->n = n;
    for (int i = 0; i < 2; i++) {
        describe_conv(&p->conv[i], t, n, conv_shapes[i]);
        p->fc[i].y = tensor(t, n, fc_out[i], 1, 1);
        p->fc[i].bias = tensor(t, 1, fc_out[i], 1, 1);
    }
}

/* ---- the convolutions' algorithms: Find on the state's buffers ---- */

static const char *const fwd_names[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const dgrad_names[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const wgrad_names[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};

static const char *algo_name(const char *const *names, int count, int algo)
{
    return algo >= 0 && algo < count ? names[algo] : "?";
}

static size_t larger(size_t most, cudnnStatus_t status, size_t bytes)
{
    return status == CUDNN_STATUS_SUCCESS && bytes <= SEARCH_CAP && bytes > most ? bytes : most;
}

/* The most workspace any algorithm of the layer's passes asks for, within the cap: Find is given
 * that much, so that every algorithm within the cap can compete. */
static size_t search_room(const struct cnn_vendor *v, const struct conv_layer *l, int dgrad)
{
    size_t most = 0, b = 0;
    cudnnStatus_t st;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++) {
        st = cudnnGetConvolutionForwardWorkspaceSize(v->dnn, l->x, l->w, l->fwd.desc, l->y,
                                                     (cudnnConvolutionFwdAlgo_t)a, &b);
        most = larger(most, st, b);
    }
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++) {
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            v->dnn, l->x, l->y, l->wgrad.desc, l->w, (cudnnConvolutionBwdFilterAlgo_t)a, &b);
        most = larger(most, st, b);
    }
    for (int a = 0; dgrad && a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++) {
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(v->dnn, l->w, l->y, l->dgrad.desc, l->x,
                                                          (cudnnConvolutionBwdDataAlgo_t)a, &b);
        most = larger(most, st, b);
    }
    return most;
}

/* Find's fastest result (it lists them fastest first) that succeeded within the workspace, in
 * fp32 only an FMA-math one; `only` >= 0: that algorithm's. NULL where there is none. */
template <typename Perf>
static const Perf *fastest(const Perf *perf, int n, size_t room, enum dtype t, int only)
{
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= room &&
            (t != DT_FP32 || perf[i].mathType == CUDNN_FMA_MATH) &&
            (only < 0 || (int)perf[i].algo == only))
            return &perf[i];
    return NULL;
}

/* Keeps Find's choice in c, its math type set on c's descriptor and read back: fp32 that is not
 * FMA math stops the program, as in chapters 07-09. */
template <typename Perf>
static void choose(struct conv_call *c, const Perf *p, enum dtype t, const char *what, int n)
{
    if (!p)
        fail(t == DT_FP32 ? "Find returned no FMA-math algorithm within the workspace cap"
                          : "Find returned no algorithm within the workspace cap",
             what, n, t);
    CUDNN_CHECK(cudnnSetConvolutionMathType(c->desc, p->mathType));
    cudnnMathType_t math;
    CUDNN_CHECK(cudnnGetConvolutionMathType(c->desc, &math));
    if (t == DT_FP32 && math != CUDNN_FMA_MATH)
        fail("the math type is not CUDNN_FMA_MATH: fp32 would not be fp32", what, n, t);
    c->algo = (int)p->algo;
    c->bytes = p->memory;
}

static int perf_count(int max_count) { return max_count < MAX_PERF ? max_count : MAX_PERF; }

/* The forward's fastest algorithm, and IMPLICIT_PRECOMP_GEMM's entry for the fused call. */
static void find_forward(struct cnn_vendor *v, struct conv_layer *l, const struct conv_buffers *b,
                         size_t room, const char *layer, int n)
{
    cudnnConvolutionFwdAlgoPerf_t perf[MAX_PERF];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(v->dnn, &count));
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(v->dnn, l->x, b->x, l->w, b->w, l->fwd.desc,
                                                       l->y, b->y, perf_count(count), &count,
                                                       perf, v->workspace, room));
    choose(&l->fwd, fastest(perf, count, room, v->t, -1), v->t, layer, n);
    const cudnnConvolutionFwdAlgoPerf_t *precomp =
        fastest(perf, count, room, v->t, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
    if (precomp)
        choose(&l->fused, precomp, v->t, layer, n);
}

static void find_weight_gradient(struct cnn_vendor *v, struct conv_layer *l,
                                 const struct conv_buffers *b, size_t room, const char *layer,
                                 int n)
{
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_PERF];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(v->dnn, &count));
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        v->dnn, l->x, b->x, l->y, b->dy, l->wgrad.desc, l->w, b->dw, perf_count(count), &count,
        perf, v->workspace, room));
    choose(&l->wgrad, fastest(perf, count, room, v->t, -1), v->t, layer, n);
}

static void find_input_gradient(struct cnn_vendor *v, struct conv_layer *l,
                                const struct conv_buffers *b, size_t room, const char *layer,
                                int n)
{
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_PERF];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(v->dnn, &count));
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        v->dnn, l->w, b->w, l->y, b->dy, l->dgrad.desc, l->x, b->dx, perf_count(count), &count,
        perf, v->workspace, room));
    choose(&l->dgrad, fastest(perf, count, room, v->t, -1), v->t, layer, n);
}

/* ---- the convolutions' calls ---- */

/* y = ReLU(conv(x, w) + b): one fused call, or Find's best algorithm then the bias and the ReLU
 * (in place). Returns the first failing status, so that create can try both. */
static cudnnStatus_t conv_forward(const struct cnn_vendor *v, const struct conv_layer *l, int fused,
                                  const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    if (fused) /* alpha2 = 0: z (given as y) is not read */
        return cudnnConvolutionBiasActivationForward(
            v->dnn, &one, l->x, b->x, l->w, b->w, l->fused.desc,
            (cudnnConvolutionFwdAlgo_t)l->fused.algo, v->workspace, l->fused.bytes, &zero, l->y,
            b->y, l->bias, b->b, v->relu, l->y, b->y);
    cudnnStatus_t st = cudnnConvolutionForward(v->dnn, &one, l->x, b->x, l->w, b->w, l->fwd.desc,
                                               (cudnnConvolutionFwdAlgo_t)l->fwd.algo,
                                               v->workspace, l->fwd.bytes, &zero, l->y, b->y);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnAddTensor(v->dnn, &one, l->bias, b->b, &one, l->y, b->y);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnActivationForward(v->dnn, v->relu, &one, l->y, b->y, &zero, l->y, b->y);
    return st;
}

static void pool_forward(const struct cnn_vendor *v, const struct conv_layer *l,
                         const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnPoolingForward(v->dnn, v->pool, &one, l->y, b->y, &zero, l->pooled,
                                    b->pooled));
}

/* cuDNN keeps no argmax: its backward finds each window's maximum again from x (the conv
 * output) and y (the pooled), which the state holds anyway. */
static void pool_backward(const struct cnn_vendor *v, const struct conv_layer *l,
                          const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnPoolingBackward(v->dnn, v->pool, &one, l->pooled, b->pooled, l->pooled,
                                     b->dpooled, l->y, b->y, &zero, l->y, b->dy));
}

/* dy *= (y > 0), in place (cuDNN allows dx == dy with one descriptor). y stands for the
 * forward's x too: ReLU(x) > 0 exactly where x > 0. */
static void relu_backward(const struct cnn_vendor *v, cudnnTensorDescriptor_t d, const void *y,
                          void *dy)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnActivationBackward(v->dnn, v->relu, &one, d, y, d, dy, d, y, &zero, d, dy));
}

static void conv_weight_gradient(const struct cnn_vendor *v, const struct conv_layer *l,
                                 const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(v->dnn, &one, l->x, b->x, l->y, b->dy,
                                               l->wgrad.desc,
                                               (cudnnConvolutionBwdFilterAlgo_t)l->wgrad.algo,
                                               v->workspace, l->wgrad.bytes, &zero, l->w, b->dw));
}

/* db = dy summed over N, H and W: a second pass over dy (ours fuses it into the weight's). */
static void conv_bias_gradient(const struct cnn_vendor *v, const struct conv_layer *l,
                               const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    if (v->t == DT_FP16)
        CUDNN_CHECK(cudnnReduceTensor(v->dnn, v->sum, NULL, 0, v->sum_workspace, v->sum_bytes,
                                      &one, l->y, b->dy, &zero, l->bias, b->db));
    else
        CUDNN_CHECK(cudnnConvolutionBackwardBias(v->dnn, &one, l->y, b->dy, &zero, l->bias,
                                                 b->db));
}

static void conv_input_gradient(const struct cnn_vendor *v, const struct conv_layer *l,
                                const struct conv_buffers *b)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(v->dnn, &one, l->w, b->w, l->y, b->dy, l->dgrad.desc,
                                             (cudnnConvolutionBwdDataAlgo_t)l->dgrad.algo,
                                             v->workspace, l->dgrad.bytes, &zero, l->x, b->dx));
}

/* ---- timing, for the choices create makes ---- */

static float ms_since_start(const struct cnn_vendor *v)
{
    float ms;
    CUDA_CHECK(cudaEventRecord(v->stop, 0));
    CUDA_CHECK(cudaEventSynchronize(v->stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, v->start, v->stop));
    return ms / TIMED_CALLS;
}

/* Milliseconds a forward takes, fused or not, after one warm-up; negative where refused. */
static float forward_ms(const struct cnn_vendor *v, const struct conv_layer *l, int fused,
                        const struct conv_buffers *b)
{
    if (conv_forward(v, l, fused, b) != CUDNN_STATUS_SUCCESS)
        return -1.f;
    CUDA_CHECK(cudaEventRecord(v->start, 0));
    for (int i = 0; i < TIMED_CALLS; i++)
        CUDNN_CHECK(conv_forward(v, l, fused, b));
    return ms_since_start(v);
}

/* Fused or three calls, whichever runs faster here; both compute ReLU(conv + b), the fused one
 * rounding once. On the H200 at batch 128 fp32, conv1 came out fused (IMPLICIT_PRECOMP_GEMM)
 * and conv2 as IMPLICIT_GEMM + AddTensor + Activation; the choice moves with batch and dtype. */
static void choose_forward(const struct cnn_vendor *v, struct conv_layer *l,
                           const struct conv_buffers *b)
{
    const float apart = forward_ms(v, l, 0, b);
    const float fused = l->fused.algo >= 0 ? forward_ms(v, l, 1, b) : -1.f;
    l->use_fused = fused >= 0.f && (apart < 0.f || fused < apart);
    if (!l->use_fused && apart < 0.f)
        CUDNN_CHECK(conv_forward(v, l, 0, b)); /* reports why the three calls failed */
}

/* ---- the linear layers on cuBLASLt ----
 * ours.cu's matrices are row-major; cuBLAS's are column-major, and a row-major X[R][C] is the
 * column-major X^T (C x R, leading dimension C). So a row-major C[M][N] = op(A) op(B) is the
 * column-major C^T = op(B)^T op(A)^T: cuBLAS's first operand is ours' B, its second ours' A,
 * m = N, n = M, k = K, ldc = N, and ours' transposes carry over:
 *   ABT  C = A B^T   B [N][K] stored K x N (ld K), op T;  A [M][K] stored K x M (ld K), op N
 *   AB   C = A B     B [K][N] stored N x K (ld N), op N;  A [M][K] stored K x M (ld K), op N
 *   ATB  C = A^T B   B [K][N] stored N x K (ld N), op N;  A [K][M] stored M x K (ld M), op T
 * The layers, with X [n][in], W [out][in], Y and dY [n][out]:
 *   forward  Y = X W^T  ABT  M n, N out, K in: cuBLAS m out, n batch; the BIAS (RELU_BIAS)
 *            epilogue adds a vector of D's rows = out, the bias per output feature.
 *   dW = dY^T X         ATB  M out, N in, K n: cuBLAS m in, n out, k batch; BGRADB sums
 *            op(cuBLAS B) = dY over k, the batch: D's columns = out, the bias gradient.
 *   dX = dY W           AB   M n, N in, K out. */

enum form { AB, ABT, ATB };

static cudaDataType_t lt_type(enum dtype t) { return t == DT_FP16 ? CUDA_R_16F : CUDA_R_32F; }

/* The largest power of two, up to 256, that divides the address: cuBLASLt's heuristic assumes
 * 256 bytes unless told, and parameters start on 128-byte boundaries in fp16. */
static uint32_t alignment(const void *p)
{
    uint32_t a = 256;
    while ((uintptr_t)p % a)
        a /= 2;
    return a;
}

static void describe_gemm(struct gemm *g, enum dtype t, enum form f, int M, int N, int K)
{
    const cublasOperation_t ta = f == ABT ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = f == ATB ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cudaDataType_t e = lt_type(t);
    if (f == ABT)
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->first, e, K, N, K));
    else
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->first, e, N, K, N));
    if (f == ATB)
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->second, e, M, K, M));
    else
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->second, e, K, M, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->c, e, N, M, N));
}

static void set_epilogue(struct gemm *g, cublasLtEpilogue_t epilogue, const void *bias)
{
    const uint32_t e = (uint32_t)epilogue;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
}

/* cuBLASLt's candidates for ours' C = op(A) op(B) on these pointers; how many (0: refused). */
static int candidates(const struct cnn_vendor *v, const struct gemm *g, const void *a,
                      const void *b, const void *c, cublasLtMatmulHeuristicResult_t *out)
{
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t room = LT_WORKSPACE;
    const uint32_t first = alignment(b), second = alignment(a), cd = alignment(c);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &room, sizeof room));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &first, sizeof first));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &second, sizeof second));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &cd, sizeof cd));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &cd, sizeof cd));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        v->lt, g->desc, g->first, g->second, g->c, g->c, pref, LT_CANDIDATES, out, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    return st == CUBLAS_STATUS_SUCCESS ? found : 0;
}

/* Ours' row-major C = op(A) op(B) (alpha 1, beta 0), as the mapping above says. */
static cublasStatus_t gemm_run(const struct cnn_vendor *v, const struct gemm *g,
                               const cublasLtMatmulAlgo_t *algo, const void *a, const void *b,
                               void *c, cudaStream_t s)
{
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(v->lt, g->desc, &one, b, g->first, a, g->second, &zero, c, g->c, c,
                          g->c, algo, v->lt_workspace, LT_WORKSPACE, s);
}

static float gemm_ms(const struct cnn_vendor *v, const struct gemm *g,
                     const cublasLtMatmulAlgo_t *algo, const void *a, const void *b, void *c)
{
    if (gemm_run(v, g, algo, a, b, c, 0) != CUBLAS_STATUS_SUCCESS)
        return -1.f;
    CUDA_CHECK(cudaEventRecord(v->start, 0));
    for (int i = 0; i < TIMED_CALLS; i++)
        CUBLAS_CHECK(gemm_run(v, g, algo, a, b, c, 0));
    return ms_since_start(v);
}

/* Plans ours' C[M][N] = op(A) op(B) with `epilogue` on `bias`, or without it where cuBLASLt
 * refuses it: the fastest heuristic candidate, timed on these buffers. */
static void plan_gemm(const struct cnn_vendor *v, struct gemm *g, enum form f, int M, int N,
                      int K, cublasLtEpilogue_t epilogue, const void *bias, const void *a,
                      const void *b, void *c, const char *what, int n)
{
    cublasLtMatmulHeuristicResult_t cand[LT_CANDIDATES];
    describe_gemm(g, v->t, f, M, N, K);
    set_epilogue(g, epilogue, bias);
    int found = candidates(v, g, a, b, c, cand);
    g->fused = found > 0;
    if (!found && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        fprintf(stderr, "10-train-cnn vendor: cuBLASLt refuses the epilogue of %s at batch %d "
                        "%s; cuDNN does it after the GEMM\n", what, n, dtype_name(v->t));
        set_epilogue(g, CUBLASLT_EPILOGUE_DEFAULT, NULL);
        found = candidates(v, g, a, b, c, cand);
    }
    float best = -1.f;
    for (int i = 0; i < found; i++) {
        const float ms = cand[i].state == CUBLAS_STATUS_SUCCESS
                             ? gemm_ms(v, g, &cand[i].algo, a, b, c) : -1.f;
        if (ms >= 0.f && (best < 0.f || ms < best)) {
            best = ms;
            g->algo = cand[i].algo;
        }
    }
    if (best < 0.f)
        fail("cuBLASLt has no algorithm that runs", what, n, v->t);
}

static void plan_fc(const struct cnn_vendor *v, struct fc_layer *l, const struct fc_buffers *b,
                    int in, int out, int relu, const char *const what[3], int n)
{
    const cublasLtEpilogue_t bias = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    plan_gemm(v, &l->fwd, ABT, n, out, in, bias, b->b, b->x, b->w, b->y, what[0], n);
    plan_gemm(v, &l->dw, ATB, out, in, n, CUBLASLT_EPILOGUE_BGRADB, b->db, b->dy, b->x, b->dw,
              what[1], n);
    plan_gemm(v, &l->dx, AB, n, in, out, CUBLASLT_EPILOGUE_DEFAULT, NULL, b->dy, b->w, b->dx,
              what[2], n);
}

/* Y = X W^T + b, then ReLU where asked: in the GEMM's epilogue, or by cuDNN after it. */
static void fc_forward(const struct cnn_vendor *v, const struct fc_layer *l,
                       const struct fc_buffers *b, int relu, cudaStream_t s)
{
    CUBLAS_CHECK(gemm_run(v, &l->fwd, &l->fwd.algo, b->x, b->w, b->y, s));
    if (l->fwd.fused)
        return;
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnAddTensor(v->dnn, &one, l->bias, b->b, &one, l->y, b->y));
    if (relu)
        CUDNN_CHECK(cudnnActivationForward(v->dnn, v->relu, &one, l->y, b->y, &zero, l->y, b->y));
}

/* dW = dY^T X and db = the column sums of dY: in the GEMM's epilogue, or by cuDNN after it. */
static void fc_weight_gradient(const struct cnn_vendor *v, const struct fc_layer *l,
                               const struct fc_buffers *b, cudaStream_t s)
{
    CUBLAS_CHECK(gemm_run(v, &l->dw, &l->dw.algo, b->dy, b->x, b->dw, s));
    if (l->dw.fused)
        return;
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionBackwardBias(v->dnn, &one, l->y, b->dy, &zero, l->bias, b->db));
}

static void fc_input_gradient(const struct cnn_vendor *v, const struct fc_layer *l,
                              const struct fc_buffers *b, cudaStream_t s)
{
    CUBLAS_CHECK(gemm_run(v, &l->dx, &l->dx.algo, b->dy, b->w, b->dx, s));
}

/* ---- the loss: cuDNN's log-softmax, then ours (neither library has a cross-entropy) ---- */

/* loss = -mean(logp[row][label]) and d_logits = (exp(logp) - onehot) / n, a thread a row in one
 * block (the loss summed in a fixed order, no atomics; at batch 65536, 128 rows a thread). A
 * label outside 0..9 makes its row and the loss NaN. */
template <typename T>
__global__ void __launch_bounds__(LOSS_THREADS)
    loss_and_gradient(const T *__restrict__ logp, const int32_t *__restrict__ labels, int n,
                      float *__restrict__ loss, T *__restrict__ d_logits)
{
    __shared__ float warp_sums[LOSS_THREADS / 32];
    const float nan = __int_as_float(0x7fc00000), rows = (float)n;
    float sum = 0.f;
    for (int row = threadIdx.x; row < n; row += LOSS_THREADS) {
        const int32_t label = labels[row];
        const bool ok = label >= 0 && label < CNN_CLASSES;
        const T *lp = logp + (int64_t)row * CNN_CLASSES;
        T *d = d_logits + (int64_t)row * CNN_CLASSES;
        for (int j = 0; j < CNN_CLASSES; j++)
            d[j] = from_float<T>(ok ? (expf(to_float(lp[j])) - (j == label ? 1.f : 0.f)) / rows
                                    : nan);
        sum += ok ? -to_float(lp[label]) : nan;
    }
    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int w = 0; w < LOSS_THREADS / 32; w++)
            total += warp_sums[w];
        *loss = total / rows;
    }
}

static void loss(const struct cnn_vendor *v, const struct plan *p, struct cnn_state *st,
                 cudaStream_t s)
{
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnSoftmaxForward(v->dnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &one,
                                    p->fc[1].y, st->logits, &zero, p->fc[1].y, v->logp));
    cnn_mark(st, "log-softmax", s);
    if (v->t == DT_FP32)
        loss_and_gradient<<<1, LOSS_THREADS, 0, s>>>((const float *)v->logp, st->y, p->n,
                                                     st->loss, (float *)st->d_logits);
    else
        loss_and_gradient<<<1, LOSS_THREADS, 0, s>>>((const __half *)v->logp, st->y, p->n,
                                                     st->loss, (__half *)st->d_logits);
    LAUNCH_CHECK();
    cnn_mark(st, "cross-entropy + its gradient", s);
}

/* ---- the step ---- */

static void forward(const struct cnn_vendor *v, const struct plan *p, struct cnn_state *st,
                    cudaStream_t s)
{
    const struct conv_buffers c1 = conv_buffers_of(st, 0), c2 = conv_buffers_of(st, 1);
    const struct fc_buffers f1 = fc_buffers_of(st, 0), f2 = fc_buffers_of(st, 1);
    CUDNN_CHECK(conv_forward(v, &p->conv[0], p->conv[0].use_fused, &c1));
    cnn_mark(st, "conv1 forward + bias + ReLU", s);
    pool_forward(v, &p->conv[0], &c1);
    cnn_mark(st, "pool1 forward", s);
    CUDNN_CHECK(conv_forward(v, &p->conv[1], p->conv[1].use_fused, &c2));
    cnn_mark(st, "conv2 forward + bias + ReLU", s);
    pool_forward(v, &p->conv[1], &c2);
    cnn_mark(st, "pool2 forward", s);
    fc_forward(v, &p->fc[0], &f1, 1, s);
    cnn_mark(st, "fc1 forward + bias + ReLU", s);
    fc_forward(v, &p->fc[1], &f2, 0, s);
    cnn_mark(st, "fc2 forward + bias", s);
}

static void backward(const struct cnn_vendor *v, const struct plan *p, struct cnn_state *st,
                     cudaStream_t s)
{
    const struct conv_buffers c1 = conv_buffers_of(st, 0), c2 = conv_buffers_of(st, 1);
    const struct fc_buffers f1 = fc_buffers_of(st, 0), f2 = fc_buffers_of(st, 1);
    fc_weight_gradient(v, &p->fc[1], &f2, s);
    cnn_mark(st, "fc2 weight + bias gradient", s);
    fc_input_gradient(v, &p->fc[1], &f2, s);
    cnn_mark(st, "fc1 output gradient", s);
    relu_backward(v, p->fc[0].y, st->fc1, st->d_fc1);
    cnn_mark(st, "fc1 ReLU backward", s);
    fc_weight_gradient(v, &p->fc[0], &f1, s);
    cnn_mark(st, "fc1 weight + bias gradient", s);
    fc_input_gradient(v, &p->fc[0], &f1, s);
    cnn_mark(st, "pool2 output gradient", s);

    pool_backward(v, &p->conv[1], &c2);
    cnn_mark(st, "pool2 backward", s);
    relu_backward(v, p->conv[1].y, st->conv2, st->d_conv2);
    cnn_mark(st, "conv2 ReLU backward", s);
    conv_weight_gradient(v, &p->conv[1], &c2);
    cnn_mark(st, "conv2 weight gradient", s);
    conv_bias_gradient(v, &p->conv[1], &c2);
    cnn_mark(st, "conv2 bias gradient", s);
    conv_input_gradient(v, &p->conv[1], &c2);
    cnn_mark(st, "conv2 input gradient", s);

    pool_backward(v, &p->conv[0], &c1);
    cnn_mark(st, "pool1 backward", s);
    relu_backward(v, p->conv[0].y, st->conv1, st->d_conv1);
    cnn_mark(st, "conv1 ReLU backward", s);
    conv_weight_gradient(v, &p->conv[0], &c1);
    cnn_mark(st, "conv1 weight gradient", s);
    conv_bias_gradient(v, &p->conv[0], &c1);
    cnn_mark(st, "conv1 bias gradient", s);
}

static const struct plan *plan_for(const struct cnn_vendor *v, int batch)
{
    for (int i = 0; i < v->plans; i++)
        if (v->plan[i].n == batch)
            return &v->plan[i];
    fprintf(stderr, "10-train-cnn vendor: a step at batch %d, which cnn_vendor_create did not "
                    "plan for\n", batch);
    exit(KL_EXIT_CUDA);
}

extern "C" void cnn_vendor_step(struct cnn_state *st, int batch, void *ctx, cudaStream_t s)
{
    const struct cnn_vendor *v = (const struct cnn_vendor *)ctx;
    const struct plan *p = plan_for(v, batch);
    CUDNN_CHECK(cudnnSetStream(v->dnn, s)); /* cuBLASLt takes s in every call */
    cnn_gather_batch(st, batch, s);
    cnn_mark(st, "gather the batch", s);
    forward(v, p, st, s);
    loss(v, p, st, s);
    cnn_count_and_log(st, batch, 1, s);
    cnn_mark(st, "count and log", s);
    backward(v, p, st, s);
    cnn_sgd_update(st, s);
    cnn_mark(st, "SGD update", s);
}

/* ---- making and unmaking the context ---- */

/* Find for every convolution pass, then the forward's fused-or-not choice (the timing needs
 * Find's algorithms), then the linear layers' GEMMs. */
static void search(struct cnn_vendor *v, struct plan *p, const struct cnn_state *st, size_t room)
{
    static const char *const conv_name[2] = {"conv1", "conv2"};
    static const char *const fc_name[2][3] = {
        {"fc1 forward", "fc1 weight gradient", "pool2 output gradient"},
        {"fc2 forward", "fc2 weight gradient", "fc1 output gradient"}};
    for (int i = 0; i < 2; i++) {
        const struct conv_buffers b = conv_buffers_of(st, i);
        find_forward(v, &p->conv[i], &b, room, conv_name[i], p->n);
        find_weight_gradient(v, &p->conv[i], &b, room, conv_name[i], p->n);
        if (i == 1)
            find_input_gradient(v, &p->conv[i], &b, room, conv_name[i], p->n);
        choose_forward(v, &p->conv[i], &b);
    }
    for (int i = 0; i < 2; i++) {
        const struct fc_buffers b = fc_buffers_of(st, i);
        plan_fc(v, &p->fc[i], &b, fc_in[i], fc_out[i], i == 0, fc_name[i], p->n);
    }
}

static size_t workspace_needed(const struct plan *p)
{
    size_t most = 0;
    for (int i = 0; i < 2; i++) {
        const struct conv_layer *l = &p->conv[i];
        const size_t sizes[3] = {l->use_fused ? l->fused.bytes : l->fwd.bytes, l->wgrad.bytes,
                                 l->dgrad.algo >= 0 ? l->dgrad.bytes : 0};
        for (int j = 0; j < 3; j++)
            most = sizes[j] > most ? sizes[j] : most;
    }
    return most;
}

/* One line on stderr: what the vendor's step runs at this batch. */
static void say_choice(const struct cnn_vendor *v, const struct plan *p)
{
    const struct conv_layer *c1 = &p->conv[0], *c2 = &p->conv[1];
    const int count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    fprintf(stderr,
            "10-train-cnn vendor %s batch %d: conv1 %s%s, dW %s; conv2 %s%s, dW %s, dx %s; "
            "fc epilogues in cuBLASLt: %s\n",
            dtype_name(v->t), p->n,
            algo_name(fwd_names, count, c1->use_fused ? c1->fused.algo : c1->fwd.algo),
            c1->use_fused ? " fused" : " + AddTensor + Activation",
            algo_name(wgrad_names, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, c1->wgrad.algo),
            algo_name(fwd_names, count, c2->use_fused ? c2->fused.algo : c2->fwd.algo),
            c2->use_fused ? " fused" : " + AddTensor + Activation",
            algo_name(wgrad_names, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, c2->wgrad.algo),
            algo_name(dgrad_names, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, c2->dgrad.algo),
            p->fc[0].fwd.fused && p->fc[1].fwd.fused && p->fc[0].dw.fused && p->fc[1].dw.fused
                ? "all"
                : "not all (see above)");
}

/* The fp32 sum of the fp16 bias gradients, and the workspace the largest of them needs. */
static int prepare_bias_sums(struct cnn_vendor *v, char *why, size_t why_len)
{
    CUDNN_CHECK(cudnnCreateReduceTensorDescriptor(&v->sum));
    CUDNN_CHECK(cudnnSetReduceTensorDescriptor(v->sum, CUDNN_REDUCE_TENSOR_ADD, CUDNN_DATA_FLOAT,
                                               CUDNN_PROPAGATE_NAN,
                                               CUDNN_REDUCE_TENSOR_NO_INDICES,
                                               CUDNN_32BIT_INDICES));
    for (int i = 0; i < v->plans; i++)
        for (int j = 0; j < 2; j++) {
            const struct conv_layer *l = &v->plan[i].conv[j];
            size_t bytes;
            CUDNN_CHECK(cudnnGetReductionWorkspaceSize(v->dnn, v->sum, l->y, l->bias, &bytes));
            v->sum_bytes = bytes > v->sum_bytes ? bytes : v->sum_bytes;
        }
    return v->sum_bytes ? cnn_device_alloc(&v->sum_workspace, v->sum_bytes, "vendor's bias sums",
                                           why, why_len)
                        : 0;
}

extern "C" int cnn_vendor_create(struct cnn_vendor **out, struct cnn_state *st, int tail,
                                 char *why, size_t why_len)
{
    *out = NULL;
    struct cnn_vendor *v = (struct cnn_vendor *)calloc(1, sizeof *v);
    if (!v) {
        snprintf(why, why_len, "out of host memory for the vendor's context");
        return 3;
    }
    v->t = st->t;
    CUDNN_CHECK(cudnnCreate(&v->dnn));
    CUDNN_CHECK(cudnnSetStream(v->dnn, 0));
    CUBLAS_CHECK(cublasLtCreate(&v->lt));
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&v->pool));
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(v->pool, CUDNN_POOLING_MAX_DETERMINISTIC,
                                            CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    CUDNN_CHECK(cudnnCreateActivationDescriptor(&v->relu));
    CUDNN_CHECK(cudnnSetActivationDescriptor(v->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN,
                                             0.0));
    CUDA_CHECK(cudaEventCreate(&v->start));
    CUDA_CHECK(cudaEventCreate(&v->stop));
    describe_plan(&v->plan[v->plans++], v->t, st->max_batch);
    if (tail > 0 && tail != st->max_batch)
        describe_plan(&v->plan[v->plans++], v->t, tail);

    size_t room = 0;
    for (int i = 0; i < v->plans; i++)
        for (int j = 0; j < 2; j++) {
            const size_t r = search_room(v, &v->plan[i].conv[j], j == 1);
            room = r > room ? r : room;
        }
    if (cnn_device_alloc(&v->workspace, room, "vendor's algorithm search", why, why_len) ||
        cnn_device_alloc(&v->lt_workspace, LT_WORKSPACE, "vendor's cuBLASLt workspace", why,
                         why_len) ||
        cnn_device_alloc(&v->logp, (size_t)st->max_batch * CNN_CLASSES * dtype_size(v->t),
                     "log-softmax", why, why_len)) {
        cnn_vendor_destroy(v);
        return 3;
    }
    size_t need = 0;
    for (int i = 0; i < v->plans; i++) {
        search(v, &v->plan[i], st, room);
        const size_t w = workspace_needed(&v->plan[i]);
        need = w > need ? w : need;
        say_choice(v, &v->plan[i]);
    }
    CUDA_CHECK(cudaFree(v->workspace)); /* from what Find could use to what the choices need */
    if (cnn_device_alloc(&v->workspace, need, "vendor's cuDNN workspace", why, why_len) ||
        prepare_bias_sums(v, why, why_len)) {
        cnn_vendor_destroy(v);
        return 3;
    }
    /* Every library call once, outside any capture; the step's glue (gather, count, update)
     * is left out, so the state's counters and weights are untouched. */
    for (int i = 0; i < v->plans; i++) {
        forward(v, &v->plan[i], st, 0);
        loss(v, &v->plan[i], st, 0);
        backward(v, &v->plan[i], st, 0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    *out = v;
    return 0;
}

static void destroy_call(struct conv_call *c)
{
    if (c->desc)
        CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(c->desc));
}

static void destroy_tensor(cudnnTensorDescriptor_t d)
{
    if (d)
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(d));
}

static void destroy_gemm(struct gemm *g)
{
    cublasLtMatrixLayout_t layouts[3] = {g->first, g->second, g->c};
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(layouts[i]));
    if (g->desc)
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(g->desc));
}

static void destroy_plan(struct plan *p)
{
    for (int i = 0; i < 2; i++) {
        struct conv_layer *l = &p->conv[i];
        destroy_tensor(l->x), destroy_tensor(l->y), destroy_tensor(l->pooled);
        destroy_tensor(l->bias);
        if (l->w)
            CUDNN_CHECK(cudnnDestroyFilterDescriptor(l->w));
        destroy_call(&l->fwd), destroy_call(&l->fused), destroy_call(&l->dgrad);
        destroy_call(&l->wgrad);
        struct fc_layer *f = &p->fc[i];
        destroy_tensor(f->y), destroy_tensor(f->bias);
        destroy_gemm(&f->fwd), destroy_gemm(&f->dw), destroy_gemm(&f->dx);
    }
}

extern "C" void cnn_vendor_destroy(struct cnn_vendor *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->plans; i++)
        destroy_plan(&v->plan[i]);
    CUDA_CHECK(cudaFree(v->workspace));
    CUDA_CHECK(cudaFree(v->lt_workspace));
    CUDA_CHECK(cudaFree(v->logp));
    CUDA_CHECK(cudaFree(v->sum_workspace));
    if (v->sum)
        CUDNN_CHECK(cudnnDestroyReduceTensorDescriptor(v->sum));
    CUDA_CHECK(cudaEventDestroy(v->start));
    CUDA_CHECK(cudaEventDestroy(v->stop));
    CUDNN_CHECK(cudnnDestroyActivationDescriptor(v->relu));
    CUDNN_CHECK(cudnnDestroyPoolingDescriptor(v->pool));
    CUBLAS_CHECK(cublasLtDestroy(v->lt));
    CUDNN_CHECK(cudnnDestroy(v->dnn));
    free(v);
}
