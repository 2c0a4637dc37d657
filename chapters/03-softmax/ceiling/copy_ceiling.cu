/* The ceiling of chapter 03's bytes: how fast plain copies move exactly the bytes of a softmax
 * pass, at one shape, beside the chapter's own rungs, in one run.
 *
 * The chapter's target is a share of the roof, and the roof is a 1 GiB device-to-device copy
 * measured at program start. A pass at 64x1000x14x14 moves 25 to 150 MB, and a copy of so few
 * bytes does not reach the roof either: each launch pays its start and its last wave. This
 * program asks how much of the roof is left at the shape itself. For each pass and dtype it
 * times, as the chapter's table does (graph replays over buffers from a pool larger than twice
 * the L2, the median of 20 samples):
 *   - cudaMemcpyAsync from x to y (forward only: the backward reads two tensors);
 *   - copy kernels that read every input once and write the output once, 16 bytes a thread at
 *     a time (the backward's writes the bitwise XOR of y and dy into dx, so that both are read);
 *   - every rung of the chapter, verified against the reference, and names the fastest.
 * A softmax moves at least these bytes, and before any output of an image it needs all of that
 * image's inputs; a copy needs only its own. So the fastest copy is an upper bound a softmax can
 * approach but not pass, and the last line of each pass says what share of it the 88% bar asks.
 *
 * Run: build/bin/03-copy-ceiling [--shape NxCxHxW] (64x1000x14x14 unless given). Exit status 0
 * measured, 1 a copy or a rung wrong, 2 bad usage, 3 a CUDA error or no GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../softmax.h"
#include "check.h"
#include "device.h"
#include "pool.h"
#include "stats.h"
#include "timing.h"

#define DEFAULT_SHAPE "64x1000x14x14"
#define BAR_PCT 88.0 /* the chapter's target, a share of the roof */
#define SAMPLES 20
#define WARMUP 3
#define GRID_STRIDE_THREADS 512
#define GRID_STRIDE_BLOCKS_PER_SM 4
#define ONE_PASS_THREADS 256

typedef uint4 vec16; /* 16 bytes: one load or store instruction a thread */

static int sm_count; /* the GPU's, for the grid-stride launch */

/* out[i] = a[i] (b NULL) or a[i] ^ b[i], for vector i. */
__device__ __forceinline__ void copy_vector(const vec16 *a, const vec16 *b, vec16 *out, size_t i)
{
    vec16 v = a[i];
    if (b) {
        const vec16 w = b[i];
        v.x ^= w.x, v.y ^= w.y, v.z ^= w.z, v.w ^= w.w;
    }
    out[i] = v;
}

/* The same for the last bytes past the whole vectors (fewer than 16), by one thread. */
__device__ __forceinline__ void copy_tail(const vec16 *a, const vec16 *b, vec16 *out, size_t bytes)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (size_t j = bytes / sizeof(vec16) * sizeof(vec16); j < bytes; j++)
        ((unsigned char *)out)[j] = x[j] ^ (y ? y[j] : 0);
}

/* Over `bytes` bytes: whole vectors in a grid-stride loop, the tail by thread 0. The tensors
 * are 256-byte aligned (pool.h). */
__global__ void copy_grid_stride(const vec16 *a, const vec16 *b, vec16 *out, size_t bytes)
{
    const size_t vectors = bytes / sizeof(vec16);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride)
        copy_vector(a, b, out, i);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        copy_tail(a, b, out, bytes);
}

/* The same with one vector a thread and as many threads as vectors: no loop, every load of
 * the launch issued by its own thread. */
__global__ void copy_one_pass(const vec16 *a, const vec16 *b, vec16 *out, size_t bytes)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < bytes / sizeof(vec16))
        copy_vector(a, b, out, i);
    if (i == 0)
        copy_tail(a, b, out, bytes);
}

/* The bytes of one tensor of a's problem (all of a softmax pass's tensors are the same size). */
static size_t tensor_bytes(const struct launch_args *a)
{
    return a->p->out[0].count * dtype_size(a->p->dtype);
}

static const vec16 *second_input(const struct launch_args *a)
{
    return a->p->n_in > 1 ? (const vec16 *)a->in[1] : NULL;
}

static void launch_memcpy(const struct launch_args *a, cudaStream_t s)
{
    CUDA_CHECK(cudaMemcpyAsync(a->out[0], a->in[0], tensor_bytes(a), cudaMemcpyDeviceToDevice, s));
}

static void launch_grid_stride(const struct launch_args *a, cudaStream_t s)
{
    copy_grid_stride<<<sm_count * GRID_STRIDE_BLOCKS_PER_SM, GRID_STRIDE_THREADS, 0, s>>>(
        (const vec16 *)a->in[0], second_input(a), (vec16 *)a->out[0], tensor_bytes(a));
    LAUNCH_CHECK();
}

static void launch_one_pass(const struct launch_args *a, cudaStream_t s)
{
    const size_t vectors = tensor_bytes(a) / sizeof(vec16);
    const size_t blocks = vectors / ONE_PASS_THREADS + 1;
    copy_one_pass<<<(unsigned)blocks, ONE_PASS_THREADS, 0, s>>>(
        (const vec16 *)a->in[0], second_input(a), (vec16 *)a->out[0], tensor_bytes(a));
    LAUNCH_CHECK();
}

struct copy {
    const char *name;
    launch_fn launch;
    int one_input_only; /* cudaMemcpyAsync copies one tensor into another */
};

static const struct copy copies[] = {
    {"cudaMemcpyAsync", launch_memcpy, 1},
    {"copy kernel, grid-stride (4 x 512 threads an SM)", launch_grid_stride, 0},
    {"copy kernel, one 16-byte vector a thread", launch_one_pass, 0},
};

/* Whether set 0's output holds the input's bytes (or the XOR of the two inputs'). */
static int copy_is_right(const struct pool *pl, const struct problem *p)
{
    const size_t bytes = p->out[0].count * dtype_size(p->dtype);
    unsigned char *got = (unsigned char *)host_alloc(bytes);
    if (!got) {
        fprintf(stderr, "out of host memory for %zu bytes\n", bytes);
        exit(KL_EXIT_CUDA);
    }
    const struct launch_args a = pool_args(pl, p, 0);
    CUDA_CHECK(cudaMemcpy(got, a.out[0], bytes, cudaMemcpyDeviceToHost));
    const unsigned char *x = (const unsigned char *)p->host_in[0];
    const unsigned char *y = p->n_in > 1 ? (const unsigned char *)p->host_in[1] : NULL;
    size_t bad = bytes;
    for (size_t i = 0; i < bytes && bad == bytes; i++)
        if (got[i] != (unsigned char)(x[i] ^ (y ? y[i] : 0)))
            bad = i;
    if (bad < bytes)
        fprintf(stderr, "WRONG: byte %zu of the copy is %u, expected %u\n", bad, got[bad],
                (unsigned)(x[bad] ^ (y ? y[bad] : 0)));
    free(got);
    return bad == bytes;
}

/* Median microseconds a launch, timed as the chapter's table times its rungs. */
static double median_us(struct timer *t, const struct pool *pl, const struct problem *p,
                        launch_fn launch)
{
    double us[SAMPLES];
    const struct timing_opts o = {SAMPLES, WARMUP, 0, 0};
    int taken;
    time_launches(t, pl, p, launch, &o, us, &taken);
    return summarize(us, (size_t)taken).median;
}

static void print_line(const char *what, double us, const struct problem *p, double roof_gbps)
{
    const double gbps = p->bytes / (us * 1e3);
    printf("  %-52s %8.2f us %6.0f GB/s %6.1f%%\n", what, us, gbps, 100.0 * gbps / roof_gbps);
}

/* Whether rung r, the vendor set aside, can run p here, as the chapter's table decides it. */
static int rung_runs(const struct rung *r, const struct problem *p, const struct device_info *d)
{
    return !ladder_is_vendor(r) && r->launch[p->pass] && (r->dtypes & (1u << p->dtype)) &&
           !ladder_unsupported(r, p, d->cc);
}

/* One pass and dtype: the copies, then the chapter's rungs. Returns 0, or 1 if anything was
 * wrong. */
static int measure(struct timer *t, const struct device_info *d, double roof_gbps,
                   const struct shape *s, int pass, enum dtype dt)
{
    const struct chapter *ch = &softmax_chapter;
    struct problem p;
    char why[256];
    if (problem_init(&p, ch, pass, dt, s, why, sizeof why)) {
        fprintf(stderr, "03-copy-ceiling: %s\n", why);
        exit(KL_EXIT_CUDA);
    }
    const size_t scratch = ch->workspace_bytes ? ch->workspace_bytes(&p) : 0;
    if (pool_sets_that_fit(&p, scratch, why, sizeof why) == 0 ||
        problem_alloc_host(&p, why, sizeof why)) {
        fprintf(stderr, "03-copy-ceiling: %s\n", why);
        exit(KL_EXIT_CUDA);
    }
    struct rng rng = rng_seeded(1 ^ ((uint64_t)pass << 32) ^ (uint64_t)dt);
    ch->fill(&p, &rng);
    ch->reference(&p);
    struct pool pl;
    if (pool_create(&pl, &p, scratch, cold_sets_needed(d, pool_set_bytes(&p)), why,
                    sizeof why)) {
        fprintf(stderr, "03-copy-ceiling: %s\n", why);
        exit(KL_EXIT_CUDA);
    }

    const double bar_us = p.bytes / (BAR_PCT / 100.0 * roof_gbps * 1e3);
    printf("\n%s %s: %.4g MB (each input read once, the output written once); the bar, "
           "%.0f%% of the roof, is %.2f us\n",
           ch->passes[pass], dtype_name(dt), p.bytes / 1e6, BAR_PCT, bar_us);
    int wrong = 0;
    double best_copy_us = 0;
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        if (copies[i].one_input_only && p.n_in > 1)
            continue;
        const double us = median_us(t, &pl, &p, copies[i].launch);
        const int right = copy_is_right(&pl, &p);
        wrong |= !right;
        print_line(copies[i].name, us, &p, roof_gbps);
        if (right && (best_copy_us == 0 || us < best_copy_us))
            best_copy_us = us;
    }
    double best_us = 0;
    const char *best = NULL;
    for (int r = 0; r < ch->n_rungs; r++) {
        const struct rung *rung = &ch->rungs[r];
        if (!rung_runs(rung, &p, d))
            continue;
        int bad_tensor;
        const struct verify_result v =
            pool_verify(&pl, &p, rung->launch[pass], 0, t->stream, &bad_tensor);
        if (!v.ok) {
            fprintf(stderr, "FAIL %s %s %s: %s[%zu] is %.9g, the reference %.9g\n", rung->name,
                    ch->passes[pass], dtype_name(dt), p.out[bad_tensor].name, v.first_bad,
                    v.bad_out, v.bad_ref);
            wrong = 1;
            continue;
        }
        const double us = median_us(t, &pl, &p, rung->launch[pass]);
        if (!best || us < best_us)
            best_us = us, best = rung->name;
    }
    if (best) {
        char what[96];
        snprintf(what, sizeof what, "softmax, the fastest rung (%s, verified)", best);
        print_line(what, best_us, &p, roof_gbps);
    }
    if (best_copy_us > 0)
        printf("  the bar asks a softmax for %.1f%% of the fastest copy's rate%s\n",
               100.0 * best_copy_us / bar_us,
               best ? "" : " (no rung of the chapter runs this pass here)");
    pool_destroy(&pl);
    problem_free(&p);
    return wrong;
}

/* The shape from the flags, or exits 2 saying what was wrong. */
static struct shape shape_from_flags(int argc, char **argv)
{
    const char *text = DEFAULT_SHAPE;
    if (argc == 3 && !strcmp(argv[1], "--shape")) {
        text = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "%s takes only --shape NxCxHxW (got '%s')\n", argv[0],
                argc == 2 && !strcmp(argv[1], "--shape") ? "--shape without a shape" : argv[1]);
        exit(KL_EXIT_USAGE);
    }
    struct shape s;
    char why[256];
    if (shape_parse(text, &s, why, sizeof why) ||
        softmax_chapter.check_shape(&s, why, sizeof why)) {
        fprintf(stderr, "bad --shape '%s': %s\n", text, why);
        exit(KL_EXIT_USAGE);
    }
    return s;
}

int main(int argc, char **argv)
{
    const struct shape s = shape_from_flags(argc, argv);
    struct device_info d;
    char why[256];
    if (device_open(&d, why, sizeof why)) {
        fprintf(stderr, "%s: the ceiling is a GPU measurement\n", why);
        return KL_EXIT_CUDA;
    }
    sm_count = d.sms;
    const double roof_gbps = measure_copy_gbps(&d);
    char cc[16];
    format_cc(d.cc, cc, sizeof cc);
    printf("Softmax's bytes at %s against copies of the same bytes, on %s (%d SMs, cc %s)\n",
           s.text, d.name, d.sms, cc);
    printf("roof %.0f GB/s: a 1 GiB device-to-device copy, bytes read plus written; times are "
           "kernel times,\nthe median of %d graph replays over buffers from a pool larger than "
           "twice the L2, as in the chapter's table\n",
           roof_gbps, SAMPLES);
    struct timer t;
    timer_init(&t, &d);
    int wrong = 0;
    for (int dt = DT_FP32; dt <= DT_FP16; dt++)
        for (int pass = 0; pass < softmax_chapter.n_passes; pass++)
            wrong |= measure(&t, &d, roof_gbps, &s, pass, (enum dtype)dt);
    timer_destroy(&t);
    printf("\n%s\n", wrong ? "FAILED: a copy or a rung is wrong (above)"
                           : "every copy and every rung timed verified");
    return wrong ? KL_EXIT_WRONG : KL_EXIT_OK;
}
