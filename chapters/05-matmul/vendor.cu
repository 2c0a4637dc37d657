/* vendor: cuBLAS, the yardstick of every rung.
 *  - fp32: cublasSgemm in CUBLAS_PEDANTIC_MATH, which forbids TF32 tensor cores (the default
 *    mode also avoids them unless NVIDIA_TF32_OVERRIDE or CUBLAS_TF32_TENSOR_OP_MATH asks for
 *    them; pedantic makes it explicit). The mode is read back after it is set and the rung
 *    stops with an error if cuBLAS reports anything else, so a TF32 result never passes for an
 *    fp32 one.
 *  - fp16: cublasGemmEx with fp16 A, B and C, fp32 compute (CUBLAS_COMPUTE_32F), in the
 *    default math mode, on a handle of its own: tensor cores, fp32 accumulation.
 *  - vendor_mma_sync, fp16: cuBLASLt held to its sm_80 (mma.sync) kernels, v9's yardstick
 *    (below).
 * cuBLAS is column-major; a row-major C = A B is the column-major C^T = B^T A^T, so B goes
 * first and no transposition is needed. The passes atb and abt (A^T B with A stored k x m, A B^T
 * with B stored n x k) are the same calls, in the same math modes, with the matching operand
 * transposed (matmul_vendor_form). */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h> /* the driver's types for vendor_mma_sync; its functions: kl_driver_function */
#include <string.h>

#include "launch.cuh"
#include "matmul.cuh"

/* One handle per math mode: pedantic for fp32 (checked), the default for fp16. */
static cublasHandle_t handle_for(enum dtype t, cudaStream_t s)
{
    static cublasHandle_t h[2];
    cublasHandle_t *mine = &h[t == DT_FP32 ? 0 : 1];
    if (!*mine) {
        CUBLAS_CHECK(cublasCreate(mine));
        if (t == DT_FP32) {
            CUBLAS_CHECK(cublasSetMathMode(*mine, CUBLAS_PEDANTIC_MATH));
            cublasMath_t mode;
            CUBLAS_CHECK(cublasGetMathMode(*mine, &mode));
            if (mode != CUBLAS_PEDANTIC_MATH) {
                fprintf(stderr, "cuBLAS refused pedantic math (mode %d): fp32 would not be fp32\n",
                        (int)mode);
                exit(KL_EXIT_CUDA);
            }
        }
    }
    CUBLAS_CHECK(cublasSetStream(*mine, s));
    return *mine;
}

/* The three forms in cuBLAS's column-major terms, C^T = op(B)^T op(A)^T. A row-major matrix
 * stored r x c is, to cuBLAS, its c x r transpose with leading dimension c. So B comes first:
 * untransposed where it is stored k x n (ld n), transposed where it is stored n x k (A B^T, ld
 * k); then A: untransposed where it is stored m x k (ld k), transposed where it is stored k x m
 * (A^T B, ld m). */
extern "C" void matmul_vendor_form(enum matmul_form form, const void *a, const void *b, void *c,
                                   struct matmul_dims d, enum dtype t, cudaStream_t s)
{
    cublasHandle_t h = handle_for(t, s);
    const int m = (int)d.m, n = (int)d.n, k = (int)d.k;
    const cublasOperation_t op_b = form == MATMUL_ABT ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = form == MATMUL_ATB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ld_b = form == MATMUL_ABT ? k : n, ld_a = form == MATMUL_ATB ? m : k;
    const float one = 1.f, zero = 0.f;
    if (t == DT_FP32)
        CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, n, m, k, &one, (const float *)b, ld_b,
                                 (const float *)a, ld_a, &zero, (float *)c, n));
    else
        CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, n, m, k, &one, b, CUDA_R_16F, ld_b, a,
                                  CUDA_R_16F, ld_a, &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

extern "C" void matmul_vendor(const void *a, const void *b, void *c, struct matmul_dims d,
                              enum dtype t, cudaStream_t s)
{
    matmul_vendor_form(MATMUL_AB, a, b, c, d, t, s);
}

/* ---- vendor_mma_sync: cuBLAS's own kernels of v9's instruction ----
 * cuBLAS on Hopper runs wgmma kernels (v10's instruction); it also ships the kernels it built
 * for sm_80, which multiply with mma.sync as v9 does. cuBLASLt lists its algorithms, their tile
 * shapes and pipeline depths; this rung keeps the configurations whose kernels are sm_80
 * tensor-core kernels by their names (read from a CUDA graph that captures one call:
 * "sm80_xmma_gemm_..._tensor16x8x16", "cutlass_80_tensorop_..."), times them on the first call
 * for a shape, runs the fastest from then on, and names it on stderr. It answers the question
 * v9's target raises: how far does the vendor itself get with mma.sync on this GPU? fp16 in
 * and out, fp32 compute, as the vendor rung. Where none of those kernels takes the shape (an
 * odd N or K: they need 4-byte aligned rows), the rung says so and is not run. */
#define LT_MAX_CANDIDATES 4096
#define LT_MAX_ALGOS 256   /* algorithm ids asked of cuBLASLt */
#define LT_MAX_CAP_IDS 128 /* tile shapes, or pipeline depths, of one algorithm */
#define LT_MAX_CUSTOM 16   /* custom options timed for each tile shape and depth: the first 16 */
#define LT_WORKSPACE (32u << 20)
#define LT_SHAPES 32

/* One shape's search: its layouts, the sm_80 configurations that take it, and the fastest. */
struct lt_shape {
    struct matmul_dims d;
    cublasLtMatrixLayout_t a, b, c; /* cuBLAS's column-major view: B (n x k), A (k x m), C */
    int n_candidates, chosen;       /* chosen < 0: not timed yet */
    bool table_full;                /* more were offered than LT_MAX_CANDIDATES */
    cublasLtMatmulAlgo_t *candidates;
};

static cublasLtHandle_t lt_handle;
static cublasLtMatmulDesc_t lt_desc;
static void *lt_workspace;
static struct lt_shape lt_shapes[LT_SHAPES];
static int lt_n_shapes;

typedef CUresult (*node_params_fn)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*func_name_fn)(const char **, CUfunction);
typedef CUresult (*kernel_name_fn)(const char **, CUkernel);

/* Whether a kernel's name says it was built for sm_80 and multiplies on the tensor cores
 * ("tensor16x8x16", "tensorop_f16_s16816gemm", "wmma_tensorop"). cuBLAS's sm_80 kernels also
 * include FFMA ones ("..._ffma_aligna2..."), the only ones that take an odd N or K; those are
 * not mma.sync, and the rung declines such shapes rather than time them under its name. */
static bool named_for_sm80_mma(const char *name)
{
    return (strstr(name, "sm80_") || strstr(name, "cutlass_80_")) && strstr(name, "tensor") &&
           !strstr(name, "ffma");
}

static bool lt_run(const struct lt_shape *sh, const cublasLtMatmulAlgo_t *algo, const void *a,
                   const void *b, void *c, cudaStream_t s)
{
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(lt_handle, lt_desc, &one, b, sh->a, a, sh->b, &zero, c, sh->c, c, sh->c,
                          algo, lt_workspace, LT_WORKSPACE, s) == CUBLAS_STATUS_SUCCESS;
}

/* The names of the kernels one call of `algo` launches (at most `max`), how many, or -1 where
 * the call cannot be captured or a name cannot be read. The call is captured, not run, so the
 * pointers only have to be valid device addresses. */
static int kernel_names(const struct lt_shape *sh, const cublasLtMatmulAlgo_t *algo,
                        const char **names, int max)
{
    static bool looked_up;
    static node_params_fn node_params;
    static func_name_fn func_name;
    static kernel_name_fn kernel_name;
    if (!looked_up) {
        node_params = (node_params_fn)kl_driver_function("cuGraphKernelNodeGetParams",
                                                         CUDART_VERSION);
        func_name = (func_name_fn)kl_driver_function("cuFuncGetName", CUDART_VERSION);
        kernel_name = (kernel_name_fn)kl_driver_function("cuKernelGetName", CUDART_VERSION);
        looked_up = true;
    }
    if (!node_params || !func_name || !kernel_name)
        return -1;
    cudaStream_t s;
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const bool called = lt_run(sh, algo, lt_workspace, lt_workspace, lt_workspace, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaStreamDestroy(s));
    size_t n = 0;
    CUDA_CHECK(cudaGraphGetNodes(g, NULL, &n));
    cudaGraphNode_t nodes[8];
    int named = called && n > 0 && n <= 8 ? 0 : -1;
    if (named == 0)
        CUDA_CHECK(cudaGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; named >= 0 && i < n; i++) {
        cudaGraphNodeType type;
        CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type));
        if (type != cudaGraphNodeTypeKernel)
            continue;
        CUDA_KERNEL_NODE_PARAMS p;
        const char *name = NULL;
        if (named < max && node_params((CUgraphNode)nodes[i], &p) == CUDA_SUCCESS &&
            (p.func ? func_name(&name, p.func) : kernel_name(&name, p.kern)) == CUDA_SUCCESS &&
            name)
            names[named++] = name;
        else
            named = -1;
    }
    CUDA_CHECK(cudaGraphDestroy(g));
    return named;
}

/* Whether every kernel one call of `algo` launches is an sm_80 tensor-core kernel. */
static bool launches_sm80_mma_kernels(const struct lt_shape *sh,
                                      const cublasLtMatmulAlgo_t *algo)
{
    const char *names[8];
    const int n = kernel_names(sh, algo, names, 8);
    bool sm80 = n > 0;
    for (int i = 0; i < n; i++)
        sm80 = sm80 && named_for_sm80_mma(names[i]);
    return sm80;
}

/* The tile shapes or pipeline depths an algorithm offers; one, "undefined" (0), where it lists
 * none. */
static int algo_ids(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t what,
                    int *ids, int max)
{
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, what, ids, max * sizeof(int), &bytes) ||
        bytes == 0) {
        ids[0] = 0;
        return 1;
    }
    return (int)(bytes / sizeof(int)) < max ? (int)(bytes / sizeof(int)) : max;
}

/* One configuration of an algorithm: what cuBLASLt lets a caller choose besides split-K. */
struct lt_config {
    int tile, stages;
    uint32_t swizzle, custom;
};

/* Adds `algo` in configuration `cf` (split-K off) to the shape's candidates if cuBLASLt takes
 * it for the shape and it launches sm_80 tensor-core kernels. */
static void add_candidate(struct lt_shape *sh, cublasLtMatmulAlgo_t algo, struct lt_config cf)
{
    const int split_k = 1;
    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &cf.tile,
                                         sizeof cf.tile);
    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &cf.stages,
                                         sizeof cf.stages);
    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                         sizeof split_k);
    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &cf.swizzle,
                                         sizeof cf.swizzle);
    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cf.custom,
                                         sizeof cf.custom);
    cublasLtMatmulHeuristicResult_t check;
    if (cublasLtMatmulAlgoCheck(lt_handle, lt_desc, sh->a, sh->b, sh->c, sh->c, &algo, &check) ||
        check.workspaceSize > LT_WORKSPACE || !launches_sm80_mma_kernels(sh, &algo))
        return;
    if (sh->n_candidates < LT_MAX_CANDIDATES)
        sh->candidates[sh->n_candidates++] = algo;
    else if (!sh->table_full) {
        fprintf(stderr, "vendor_mma_sync: more than %d configurations; the rest are not timed\n",
                LT_MAX_CANDIDATES);
        sh->table_full = true;
    }
}

/* Every configuration of every algorithm that takes the shape and launches sm_80 tensor-core
 * kernels: each tile shape, pipeline depth and custom option the algorithm offers, with and
 * without CTA swizzling where it offers that. Swizzling orders the tiles so that those running
 * at once share rows of A and columns of B in the L2; the custom options are the algorithm's
 * own (what each means, cuBLASLt does not say), so all are timed. */
static void find_candidates(struct lt_shape *sh)
{
    int ids[LT_MAX_ALGOS], n_ids = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(lt_handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                                          CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, LT_MAX_ALGOS, ids,
                                          &n_ids));
    sh->candidates = (cublasLtMatmulAlgo_t *)malloc(LT_MAX_CANDIDATES * sizeof *sh->candidates);
    if (!sh->candidates) {
        fprintf(stderr, "out of host memory for cuBLASLt's configurations\n");
        exit(KL_EXIT_CUDA);
    }
    for (int i = 0; i < n_ids; i++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt_handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                                   CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, ids[i], &algo))
            continue;
        int tiles[LT_MAX_CAP_IDS], stages[LT_MAX_CAP_IDS];
        const int n_tiles = algo_ids(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, LT_MAX_CAP_IDS);
        const int n_stages =
            algo_ids(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, LT_MAX_CAP_IDS);
        uint32_t swizzles = 0;
        int32_t custom_max = 0;
        size_t bytes = 0;
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT,
                                          &swizzles, sizeof swizzles, &bytes);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX,
                                          &custom_max, sizeof custom_max, &bytes);
        for (int t = 0; t < n_tiles; t++)
            for (int st = 0; st < n_stages; st++)
                for (uint32_t sw = 0; sw <= (swizzles == 1); sw++)
                    for (int32_t cu = 0; cu <= custom_max && cu < LT_MAX_CUSTOM; cu++)
                        add_candidate(sh, algo,
                                      (struct lt_config){tiles[t], stages[st], sw, (uint32_t)cu});
    }
}

static struct lt_shape *lt_shape_seen(struct matmul_dims d)
{
    for (int i = 0; i < lt_n_shapes; i++)
        if (lt_shapes[i].d.m == d.m && lt_shapes[i].d.n == d.n && lt_shapes[i].d.k == d.k)
            return &lt_shapes[i];
    return NULL;
}

/* The shape's entry, searched for candidates on first sight. */
static struct lt_shape *lt_shape_of(struct matmul_dims d)
{
    if (!lt_handle) {
        CUBLAS_CHECK(cublasLtCreate(&lt_handle));
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CUDA_CHECK(cudaMalloc(&lt_workspace, LT_WORKSPACE));
    }
    struct lt_shape *seen = lt_shape_seen(d);
    if (seen)
        return seen;
    /* Past LT_SHAPES shapes, the last entry is given to each new one. */
    struct lt_shape *sh = &lt_shapes[lt_n_shapes < LT_SHAPES ? lt_n_shapes++ : LT_SHAPES - 1];
    if (sh->candidates) {
        free(sh->candidates);
        cublasLtMatrixLayoutDestroy(sh->a);
        cublasLtMatrixLayoutDestroy(sh->b);
        cublasLtMatrixLayoutDestroy(sh->c);
    }
    memset(sh, 0, sizeof *sh);
    sh->d = d;
    sh->chosen = -1;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh->a, CUDA_R_16F, d.n, d.k, d.n));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh->b, CUDA_R_16F, d.k, d.m, d.k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&sh->c, CUDA_R_16F, d.n, d.m, d.n));
    find_candidates(sh);
    return sh;
}

/* Milliseconds a call of `algo` takes on these matrices, `calls` timed after one warm-up, or a
 * negative number where cuBLASLt refuses it. */
static float time_candidate(const struct lt_shape *sh, const cublasLtMatmulAlgo_t *algo,
                            const void *a, const void *b, void *c, cudaStream_t s, int calls)
{
    if (!lt_run(sh, algo, a, b, c, s))
        return -1.f;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, s));
    for (int r = 0; r < calls; r++)
        lt_run(sh, algo, a, b, c, s);
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / calls;
}

/* A candidate's time over a yardstick's (candidate 0) timed just before it. The GPU's clock
 * drifts as it warms over a search of a hundred or more candidates; timed alone, the first ones
 * would look faster than they are. Negative where cuBLASLt refuses the candidate. */
static float relative_time(const struct lt_shape *sh, int i, const void *a, const void *b,
                           void *c, cudaStream_t s, int calls)
{
    const float yardstick = time_candidate(sh, &sh->candidates[0], a, b, c, s, calls);
    const float mine = time_candidate(sh, &sh->candidates[i], a, b, c, s, calls);
    return yardstick > 0.f && mine > 0.f ? mine / yardstick : -1.f;
}

/* The fastest candidate on these matrices: every candidate is timed once against the
 * yardstick, then the LT_SHORTLIST fastest three more times in turn, each keeping its best. */
#define LT_SHORTLIST 8

static void choose_fastest(struct lt_shape *sh, const void *a, const void *b, void *c,
                           cudaStream_t s)
{
    int list[LT_SHORTLIST];
    float best[LT_SHORTLIST];
    int listed = 0;
    for (int i = 0; i < sh->n_candidates; i++) {
        const float t = relative_time(sh, i, a, b, c, s, 2);
        if (t < 0.f || (listed == LT_SHORTLIST && t >= best[LT_SHORTLIST - 1]))
            continue;
        int at = listed < LT_SHORTLIST ? listed++ : LT_SHORTLIST - 1; /* the slowest drops out */
        for (; at > 0 && best[at - 1] > t; at--) {
            best[at] = best[at - 1];
            list[at] = list[at - 1];
        }
        best[at] = t;
        list[at] = i;
    }
    for (int round = 0; round < 3; round++)
        for (int j = 0; j < listed; j++) {
            const float t = relative_time(sh, list[j], a, b, c, s, 3);
            if (t >= 0.f && t < best[j])
                best[j] = t;
        }
    float fastest = 0.f;
    for (int j = 0; j < listed; j++)
        if (sh->chosen < 0 || best[j] < fastest) {
            sh->chosen = list[j];
            fastest = best[j];
        }
}

/* One line on stderr: which kernel the row stands for at this shape. */
static void say_choice(const struct lt_shape *sh)
{
    const char *names[8];
    const int n = kernel_names(sh, &sh->candidates[sh->chosen], names, 8);
    uint32_t swizzle = 0, custom = 0;
    size_t bytes = 0;
    const cublasLtMatmulAlgo_t *algo = &sh->candidates[sh->chosen];
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle,
                                         sizeof swizzle, &bytes);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                         sizeof custom, &bytes);
    fprintf(stderr, "vendor_mma_sync: %lldx%lldx%lld runs", (long long)sh->d.m,
            (long long)sh->d.n, (long long)sh->d.k);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", names[i]);
    fprintf(stderr, " (CTA swizzling %s, custom option %u), the fastest of %d configurations\n",
            swizzle ? "on" : "off", custom, sh->n_candidates);
}

extern "C" const char *matmul_vendor_mma_sync_unsupported(struct matmul_dims d)
{
    return lt_shape_of(d)->n_candidates ? NULL
                                        : "no cuBLAS mma.sync kernel takes this shape";
}

extern "C" void matmul_vendor_mma_sync(const void *a, const void *b, void *c,
                                       struct matmul_dims d, enum dtype t, cudaStream_t s)
{
    (void)t; /* fp16 only: the rung's dtypes say so */
    const struct lt_shape *seen = lt_shape_seen(d);
    if (!seen || seen->chosen < 0) {
        cudaStreamCaptureStatus capturing;
        CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
        if (capturing != cudaStreamCaptureStatusNone) {
            fprintf(stderr, "vendor_mma_sync: the first call for a shape searches and times the "
                            "candidates, and cannot be captured\n");
            exit(KL_EXIT_CUDA);
        }
    }
    struct lt_shape *sh = lt_shape_of(d);
    if (!sh->n_candidates) {
        fprintf(stderr, "vendor_mma_sync: %s\n", matmul_vendor_mma_sync_unsupported(d));
        exit(KL_EXIT_CUDA);
    }
    if (sh->chosen < 0) {
        choose_fastest(sh, a, b, c, s);
        if (sh->chosen < 0) {
            fprintf(stderr, "vendor_mma_sync: cublasLtMatmul refused every candidate\n");
            exit(KL_EXIT_CUDA);
        }
        say_choice(sh);
    }
    if (!lt_run(sh, &sh->candidates[sh->chosen], a, b, c, s)) {
        fprintf(stderr, "vendor_mma_sync: cublasLtMatmul refused its chosen configuration\n");
        exit(KL_EXIT_CUDA);
    }
}
