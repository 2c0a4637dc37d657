/* Chapter 05: the CPU reference against known products, the sampled reference against the full
 * one, every rung against the reference on GPU at odd and tiny shapes in both dtypes, the C
 * API's three forms, the exercise checker, the program's refusals, and the mma.sync ceiling
 * program's own check. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "gpu.h"
#include "matmul.h"

/* ---- the CPU reference ---- */

Test(matmul_reference, known_products)
{
    const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
    double c[4];
    matmul_reference(a, b, DT_FP32, (struct matmul_dims){2, 2, 2}, c);
    cr_expect(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);

    /* 2x3 times 3x1, and K = 1 (an outer product). */
    const float a2[] = {1, 0, -1, 2, 3, 4}, b2[] = {7, 5, 3};
    double c2[2];
    matmul_reference(a2, b2, DT_FP32, (struct matmul_dims){2, 1, 3}, c2);
    cr_expect(c2[0] == 4 && c2[1] == 41, "got %g %g", c2[0], c2[1]);
    const float u[] = {1, 2, 3}, v[] = {4, 5};
    double outer[6];
    matmul_reference(u, v, DT_FP32, (struct matmul_dims){3, 2, 1}, outer);
    cr_expect(outer[0] == 4 && outer[1] == 5 && outer[4] == 12 && outer[5] == 15);
}

Test(matmul_reference, sampled_agrees_with_full_where_it_computes)
{
    const struct matmul_dims d = {37, 29, 43};
    float *a = malloc(sizeof *a * 37 * 43), *b = malloc(sizeof *b * 43 * 29);
    double *full = malloc(sizeof *full * 37 * 29), *part = malloc(sizeof *part * 37 * 29);
    cr_assert(a && b && full && part);
    struct rng r = rng_seeded(5);
    fill_uniform(a, DT_FP32, 37 * 43, &r, -1, 1);
    fill_uniform(b, DT_FP32, 43 * 29, &r, -1, 1);
    matmul_reference(a, b, DT_FP32, d, full);
    matmul_reference_sampled(a, b, DT_FP32, d, 4, 3, part);
    size_t computed = 0;
    for (size_t i = 0; i < 37 * 29; i++) {
        if (verify_is_unchecked(part[i]))
            continue;
        computed++;
        cr_expect_eq(part[i], full[i], "element %zu", i);
    }
    /* 4 whole rows and 3 whole columns, 12 elements counted twice. */
    cr_expect_eq(computed, 4 * 29 + 3 * 37 - 12);
    cr_expect(!verify_is_unchecked(part[0]) && !verify_is_unchecked(part[37 * 29 - 1]),
              "the first and last elements are always sampled");
    free(a);
    free(b);
    free(full);
    free(part);
}

/* ---- every rung on the GPU ---- */

/* Odd and tiny shapes: 1 in each place, primes, no multiple of any tile (16, 64, 128, 8 along
 * K), one just past a tile, and the 1023x77x513. Then shapes for the copy engine's
 * path of v10 (K and N multiples of 8): one row, tiles hanging over every edge, a band of
 * several tiles with an odd one out, and K of a single partial step (8). Last, a shape where
 * v7 takes its wide tiles on the H200 (128 blocks of 128 x 256, against 256 narrow ones), with
 * N no multiple of 4 and K no multiple of 16. */
static const char *const shapes[] = {"1",           "1x1x7",       "7x1x1",       "1x7x1",
                                     "3x5x1",       "17x33x65",    "64x64x64",    "65x63x9",
                                     "127x129x131", "128x128x8",   "129x257x17",  "1000",
                                     "1023x77x513", "5x300x2",     "1x8x8",       "37x40x48",
                                     "129x264x72",  "300x2056x264", "2000x1999x37"};

static void free_params(struct criterion_test_params *crp)
{
    cr_free(crp->params);
}

ParameterizedTestParameters(matmul_gpu, rung_matches_reference)
{
    int n = matmul_chapter.n_rungs;
    int *params = cr_malloc(sizeof *params * (size_t)n);
    for (int i = 0; i < n; i++)
        params[i] = i;
    return cr_make_param_array(int, params, (size_t)n, free_params);
}

/* vendor_mma_sync runs cuBLAS's mma.sync kernels, which need aligned rows: it may decline a
 * shape whose N or K is no multiple of 8, saying so, never one whose N and K both are. Every
 * other rung takes every shape. */
static bool may_decline(const struct rung *r, const char *shape, const char *why)
{
    long m = 0, n = 0, k = 0;
    if (sscanf(shape, "%ldx%ldx%ld", &m, &n, &k) == 1)
        n = k = m;
    return !strcmp(r->name, "vendor_mma_sync") && (n % 8 || k % 8) &&
           strstr(why, "no cuBLAS mma.sync kernel takes this shape");
}

static void expect_verified(const struct chapter *ch, const struct rung *r,
                            const char *const *list, size_t count)
{
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        if (!(r->dtypes & (1u << t)))
            continue;
        for (size_t s = 0; s < count; s++) {
            struct verify_result v;
            char why[256] = "";
            int rc = ladder_check(ch, r, 0, (enum dtype)t, list[s], 500 + s, &v, why,
                                  sizeof why);
            SKIP_IF_GPU_LACKS_RUNG(rc, why);
            if (rc == -1 && may_decline(r, list[s], why))
                continue;
            cr_expect_eq(rc, 0, "%s %s at %s: %s element %zu is %g, reference %g", r->name,
                         dtype_name(t), list[s], rc == 1 ? "wrong:" : why, v.first_bad,
                         v.bad_out, v.bad_ref);
        }
    }
}

ParameterizedTest(int *rung, matmul_gpu, rung_matches_reference, NEEDS_GPU)
{
    expect_verified(&matmul_chapter, &matmul_chapter.rungs[*rung], shapes,
                    sizeof shapes / sizeof shapes[0]);
}

/* ---- the C API: each form through a copy of the chapter whose A or B is stored transposed,
 * with a reference that transposes it back. ---- */

static enum matmul_form api_form;

static struct matmul_dims api_dims(const struct problem *p)
{
    const int64_t *d = p->shape.dim;
    return (struct matmul_dims){d[0], d[1], d[2]};
}

static void api_launch(const struct launch_args *a, cudaStream_t s)
{
    matmul(api_form, a->in[0], a->in[1], a->out[0], api_dims(a->p), a->p->dtype, s);
}

/* The stored matrix `stored` (rows x cols) transposed into a new cols x rows copy. */
static void *transposed(const void *stored, enum dtype t, size_t rows, size_t cols)
{
    size_t es = dtype_size(t);
    char *out = malloc(rows * cols * es);
    cr_assert(out);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            memcpy(out + (c * rows + r) * es, (const char *)stored + (r * cols + c) * es, es);
    return out;
}

static void api_reference(struct problem *p)
{
    const struct matmul_dims d = api_dims(p);
    const void *a = p->host_in[0], *b = p->host_in[1];
    void *at = NULL, *bt = NULL;
    if (api_form == MATMUL_ATB) /* A stored k x m */
        a = at = transposed(a, p->dtype, (size_t)d.k, (size_t)d.m);
    if (api_form == MATMUL_ABT) /* B stored n x k */
        b = bt = transposed(b, p->dtype, (size_t)d.n, (size_t)d.k);
    matmul_reference(a, b, p->dtype, d, p->ref_out[0]);
    free(at);
    free(bt);
}

Test(matmul_gpu, api_forms_match_reference, NEEDS_GPU)
{
    struct chapter ch = matmul_chapter;
    ch.reference = api_reference;
    struct rung api = matmul_chapter.rungs[0];
    api.name = "matmul()";
    api.launch[0] = api_launch;
    /* 136x264x72: C = A B through v10's copy engine on an H200 */
    static const char *const api_shapes[] = {"1x1x1", "7x5x3", "17x33x65", "64x1x300",
                                             "129x65x33", "136x264x72"};
    const enum matmul_form forms[] = {MATMUL_AB, MATMUL_ATB, MATMUL_ABT};
    for (int f = 0; f < 3; f++) {
        api_form = forms[f];
        expect_verified(&ch, &api, api_shapes, sizeof api_shapes / sizeof api_shapes[0]);
    }
}

/* ---- the exercise ---- */

static void fwd_v3(const struct launch_args *a, cudaStream_t s)
{
    const int64_t *d = a->p->shape.dim; /* MxNxK: the chapter's describe() wrote it so */
    matmul_v3(a->in[0], a->in[1], a->out[0], (struct matmul_dims){d[0], d[1], d[2]},
              a->p->dtype, s);
}

Test(matmul_exercise, checker_fails_the_stub, NEEDS_GPU)
{
    expect_checker_fails_the_stub(&matmul_chapter);
}

Test(matmul_exercise, checker_passes_a_correct_kernel, NEEDS_GPU)
{
    expect_checker_passes(&matmul_chapter, 0, fwd_v3);
}

/* vendor_mma_sync searches and times its candidates on the first call for a shape, which no
 * capture may hold: called first inside one, it must stop with its one-line message and exit
 * 3, not fail somewhere inside cuBLAS. In a child process, since it exits. */
Test(matmul_gpu, vendor_mma_sync_first_call_refuses_a_capture, NEEDS_GPU)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        void *buf = NULL;
        cudaStream_t s;
        if (cudaMalloc(&buf, 1 << 16) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
            cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
            _exit(10);
        matmul_vendor_mma_sync(buf, buf, buf, (struct matmul_dims){48, 40, 56}, DT_FP16, s);
        _exit(0); /* it must not come back */
    }
    close(fds[1]);
    char said[512];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof said - 1 && (got = read(fds[0], said + len, sizeof said - 1 - len)) > 0)
        len += (size_t)got;
    said[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == KL_EXIT_CUDA,
              "exit status %d, said: %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, said);
    cr_expect(strstr(said, "cannot be captured") != NULL, "it said: %s", said);
}

/* ---- the program ---- */

Test(matmul_program, runs_and_exits_0, .init = redirect_output)
{
    const char *argv[] = {"05-matmul", "--shape", "37x29x43", "--iters", "3"};
    cr_expect_eq(ladder_main(&matmul_chapter, 5, (char **)argv), KL_EXIT_OK);
}

/* Bad shapes: a one-line message and exit 2, GPU or not. */
Test(matmul_program, bad_shapes_exit_2, .init = redirect_output)
{
    const char *const bad[] = {"0x4x4",   "4x0x4",        "4x4x0",        "4x4",
                               "4x4x4x4", "64-k2",        "3000000x4x4",  "4x4x2147483648",
                               "1999999x1999999x1999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"05-matmul", "--shape", bad[i]};
        cr_expect_eq(ladder_main(&matmul_chapter, 3, (char **)argv), KL_EXIT_USAGE,
                     "--shape %s must be refused", bad[i]);
    }
    fflush(stderr);
    cr_expect_stderr_neq_str("", "each refusal must say why");
}

Test(matmul_program, check_shape_names_the_problem)
{
    struct shape s;
    char why[256];
    cr_assert_eq(shape_parse("4x4", &s, why, sizeof why), 0);
    cr_expect_neq(matmul_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "MxNxK") != NULL, "the reason was: %s", why);
    cr_assert_eq(shape_parse("1023x77x513", &s, why, sizeof why), 0);
    cr_expect_eq(matmul_chapter.check_shape(&s, why, sizeof why), 0);
}

/* 16-row tiles along the grid's y dimension (at most 65535 blocks): M and N of 1,048,560 are
 * taken, one more is refused before anything is allocated. */
Test(matmul_program, refuses_just_past_the_grid_limit)
{
    struct shape s;
    char why[256] = "";
    cr_assert_eq(shape_parse("1048560x1x1", &s, why, sizeof why), 0);
    cr_expect_eq(matmul_chapter.check_shape(&s, why, sizeof why), 0, "refused: %s", why);
    cr_assert_eq(shape_parse("1048561x1x1", &s, why, sizeof why), 0);
    cr_expect_neq(matmul_chapter.check_shape(&s, why, sizeof why), 0);
    cr_expect(strstr(why, "at most 1048560") != NULL, "the reason was: %s", why);
    cr_assert_eq(shape_parse("1x1048561x1", &s, why, sizeof why), 0);
    cr_expect_neq(matmul_chapter.check_shape(&s, why, sizeof why), 0);
}

/* ---- the ceiling program, build/bin/05-mma-sync-ceiling (`make test` builds it) ---- */

/* Runs the ceiling program with `arg` (or none): its exit status, and what it printed. */
static int run_ceiling(const char *arg, char *said, size_t size)
{
    return run_program("05-mma-sync-ceiling", arg, said, size);
}

Test(matmul_ceiling, refuses_a_flag)
{
    char said[512];
    cr_expect_eq(run_ceiling("--iters 3", said, sizeof said), 2, "it said: %s", said);
    cr_expect(strstr(said, "takes no flags (got '--iters')") != NULL, "it said: %s", said);
}

/* Every mma.sync adds exactly 1 to each accumulator; the program checks that every one holds
 * its iteration count, so a wrong operand, layout or launch fails here. */
Test(matmul_ceiling, verifies_its_accumulators, NEEDS_GPU)
{
    char said[1024];
    cr_expect_eq(run_ceiling(NULL, said, sizeof said), 0, "it said: %s", said);
    cr_expect(strstr(said, "every accumulator verified") != NULL ||
                  strstr(said, "unsupported: mma.sync m16n8k16 needs") != NULL,
              "it said: %s", said);
}
