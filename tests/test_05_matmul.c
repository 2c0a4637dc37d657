/* Chapter 05: the CPU reference against known products, its transposed forms against A B on
 * explicitly transposed inputs, the sampled reference against the full one; every rung against
 * the reference on GPU at odd and tiny shapes in both dtypes and every pass it has; v11 in all
 * three forms at odd shapes, split over clusters, and bitwise the same run after run; the C
 * API's three forms; the exercise checker, the program's refusals, and the mma.sync ceiling
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

#include <cuda_runtime_api.h>

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

/* The transposed forms by hand: A^T B with A stored 2 x 3 (k x m), A B^T with B stored 2 x 3
 * (n x k). */
Test(matmul_reference, known_transposed_products)
{
    /* A stored k x m = [[1, 2, 3], [4, 5, 6]], so A^T = [[1, 4], [2, 5], [3, 6]]; B (k x n) =
     * [[1, 0], [0, 2]]: C = A^T B = [[1, 8], [2, 10], [3, 12]]. */
    const float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, 0, 2};
    double c[6];
    matmul_reference_form(MATMUL_ATB, a, b, DT_FP32, (struct matmul_dims){3, 2, 2}, c);
    const double want[] = {1, 8, 2, 10, 3, 12};
    for (int i = 0; i < 6; i++)
        cr_expect(c[i] == want[i], "A^T B element %d is %g, want %g", i, c[i], want[i]);
    /* A (m x k) = [[1, 2, 3]], B stored n x k = [[1, 1, 1], [0, 1, -1]]: C = A B^T = [[6, -1]]. */
    const float a2[] = {1, 2, 3}, b2[] = {1, 1, 1, 0, 1, -1};
    double c2[2];
    matmul_reference_form(MATMUL_ABT, a2, b2, DT_FP32, (struct matmul_dims){1, 2, 3}, c2);
    cr_expect(c2[0] == 6 && c2[1] == -1, "A B^T is %g %g, want 6 -1", c2[0], c2[1]);
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

/* What A B gives on inputs transposed here, element by element, into its layout: the answer
 * the form's reference must match exactly (the same products summed in the same order). */
static void reference_via_transposes(enum matmul_form form, const void *a, const void *b,
                                     enum dtype t, struct matmul_dims d, bool sampled, double *c)
{
    void *at = NULL, *bt = NULL;
    if (form == MATMUL_ATB) /* A stored k x m */
        a = at = transposed(a, t, (size_t)d.k, (size_t)d.m);
    if (form == MATMUL_ABT) /* B stored n x k */
        b = bt = transposed(b, t, (size_t)d.n, (size_t)d.k);
    if (sampled)
        matmul_reference_sampled(a, b, t, d, 5, 4, c);
    else
        matmul_reference(a, b, t, d, c);
    free(at);
    free(bt);
}

/* Each transposed form, full and sampled, in both dtypes, against A B on transposed copies;
 * the shape is neither square nor symmetric in any two dimensions, so a swapped m, n or k or a
 * transpose left out fails. */
Test(matmul_reference, transposed_forms_match_a_b_on_transposed_inputs)
{
    const struct matmul_dims d = {13, 7, 29};
    const size_t a_count = 13 * 29, b_count = 29 * 7, c_count = 13 * 7;
    const enum matmul_form forms[] = {MATMUL_ATB, MATMUL_ABT};
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        void *a = malloc(a_count * 4), *b = malloc(b_count * 4);
        double *want = malloc(c_count * sizeof *want), *got = malloc(c_count * sizeof *got);
        double *plain = malloc(c_count * sizeof *plain);
        cr_assert(a && b && want && got && plain);
        struct rng r = rng_seeded(11 + (uint64_t)t);
        fill_uniform(a, (enum dtype)t, a_count, &r, -1, 1);
        fill_uniform(b, (enum dtype)t, b_count, &r, -1, 1);
        matmul_reference(a, b, (enum dtype)t, d, plain);
        for (int f = 0; f < 2; f++) {
            for (int sampled = 0; sampled <= 1; sampled++) {
                reference_via_transposes(forms[f], a, b, (enum dtype)t, d, sampled, want);
                if (sampled)
                    matmul_reference_form_sampled(forms[f], a, b, (enum dtype)t, d, 5, 4, got);
                else
                    matmul_reference_form(forms[f], a, b, (enum dtype)t, d, got);
                size_t differ_from_ab = 0;
                for (size_t i = 0; i < c_count; i++) {
                    cr_expect(verify_is_unchecked(want[i]) == verify_is_unchecked(got[i]) &&
                                  (verify_is_unchecked(got[i]) || got[i] == want[i]),
                              "form %d %s%s element %zu: %g, via transposes %g", forms[f],
                              dtype_name((enum dtype)t), sampled ? " sampled" : "", i, got[i],
                              want[i]);
                    differ_from_ab += !verify_is_unchecked(got[i]) && got[i] != plain[i];
                }
                /* Not A B read as it lies: the form must have transposed something. */
                cr_expect_gt(differ_from_ab, 0, "form %d gave A B's answer", forms[f]);
            }
        }
        free(a);
        free(b);
        free(want);
        free(got);
        free(plain);
    }
}

/* The chapter's passes are the forms: atb's reference is A^T B of its A stored K x M, abt's is
 * A B^T of its B stored N x K (main.cu maps the pass to the form). */
Test(matmul_reference, chapter_passes_are_the_forms)
{
    const char *const names[] = {"fwd", "atb", "abt"};
    const enum matmul_form forms[] = {MATMUL_AB, MATMUL_ATB, MATMUL_ABT};
    cr_assert_eq(matmul_chapter.n_passes, 3);
    for (int pass = 0; pass < 3; pass++) {
        cr_expect_str_eq(matmul_chapter.passes[pass], names[pass]);
        struct shape sh;
        char why[256];
        cr_assert_eq(shape_parse("11x6x9", &sh, why, sizeof why), 0);
        struct problem p;
        cr_assert_eq(problem_init(&p, &matmul_chapter, pass, DT_FP32, &sh, why, sizeof why), 0,
                     "%s", why);
        cr_assert_eq(problem_alloc_host(&p, why, sizeof why), 0, "%s", why);
        cr_expect_eq(p.in[0].count, 11 * 9);
        cr_expect_eq(p.in[1].count, 9 * 6);
        cr_expect_eq(p.out[0].count, 11 * 6);
        struct rng r = rng_seeded(3);
        matmul_chapter.fill(&p, &r);
        matmul_chapter.reference(&p);
        double want[66];
        reference_via_transposes(forms[pass], p.host_in[0], p.host_in[1], DT_FP32,
                                 (struct matmul_dims){11, 6, 9}, false, want);
        for (int i = 0; i < 66; i++)
            cr_expect(p.ref_out[0][i] == want[i], "%s element %d: %g, want %g", names[pass], i,
                      p.ref_out[0][i], want[i]);
        problem_free(&p);
    }
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

/* Rung r at every shape of the list, in each dtype it takes and each pass it has; returns how
 * many checks ran, so that a caller can tell a rung that was checked from one that was not. */
static int expect_verified(const struct chapter *ch, const struct rung *r,
                           const char *const *list, size_t count)
{
    int checked = 0;
    for (int pass = 0; pass < ch->n_passes; pass++) {
        if (!r->launch[pass])
            continue;
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            if (!(r->dtypes & (1u << t)))
                continue;
            for (size_t s = 0; s < count; s++) {
                struct verify_result v;
                char why[256] = "";
                int rc = ladder_check(ch, r, pass, (enum dtype)t, list[s], 500 + s, &v, why,
                                      sizeof why);
                SKIP_IF_GPU_LACKS_RUNG(rc, why);
                if (rc == -1 && may_decline(r, list[s], why))
                    continue;
                cr_expect_eq(rc, 0, "%s %s %s at %s: %s element %zu is %g, reference %g",
                             r->name, ch->passes[pass], dtype_name(t), list[s],
                             rc == 1 ? "wrong:" : why, v.first_bad, v.bad_out, v.bad_ref);
                checked++;
            }
        }
    }
    return checked;
}

ParameterizedTest(int *rung, matmul_gpu, rung_matches_reference, NEEDS_GPU)
{
    expect_verified(&matmul_chapter, &matmul_chapter.rungs[*rung], shapes,
                    sizeof shapes / sizeof shapes[0]);
}

/* The rungs with three passes have them all; the others fwd alone, as the table says. */
Test(matmul_program, every_form_where_the_table_says)
{
    for (int i = 0; i < matmul_chapter.n_rungs; i++) {
        const struct rung *r = &matmul_chapter.rungs[i];
        const bool all = !strcmp(r->name, "v11_split_k_cluster") || !strcmp(r->name, "api") ||
                         !strcmp(r->name, "vendor");
        cr_expect(r->launch[0] != NULL, "%s has no fwd", r->name);
        for (int pass = 1; pass < 3; pass++)
            cr_expect((r->launch[pass] != NULL) == all, "%s %s %s", r->name,
                      all ? "lacks" : "has", matmul_chapter.passes[pass]);
    }
}

/* ---- v11: every form at odd shapes, K split over clusters, the same bits every run ---- */

/* 1 in every place, small primes, K past many slices (33x17x1569: two tiles, eight slices of
 * 224 on an H200), fc2's N of 10 with a long K, vector rows (every dimension a multiple of 4)
 * and scalar ones, the CNN's fc1 products at batch 32, and 64-row tiles: with K split in two and
 * every edge ragged (601x999x101: 160 tiles for 132 SMs), and unsplit, K one partial step
 * (1200x1000x8). */
static const char *const v11_shapes[] = {
    "1x1x1",       "3x5x7",       "33x17x1569",  "129x10x1025", "1x64x300",
    "70x1x300",    "65x70x1",     "1x1x5000",    "64x64x64",    "31x67x129",
    "32x128x1568", "128x1568x32", "10x128x1024", "32x1568x128", "601x999x101",
    "1200x1000x8"};

Test(matmul_gpu, v11_every_form_matches_reference, NEEDS_GPU)
{
    const struct rung *v11 = rung_named(&matmul_chapter, "v11_split_k_cluster");
    const int checked = expect_verified(&matmul_chapter, v11, v11_shapes,
                                        sizeof v11_shapes / sizeof v11_shapes[0]);
    cr_expect_eq(checked, 3 * 2 * (int)(sizeof v11_shapes / sizeof v11_shapes[0]));
}

/* Where the tests count on it, K is split: on compute capability 9.0 (clusters) the long-K
 * shapes above run in clusters of several blocks, so the distributed-shared-memory sum is what
 * they verify; below it, never. */
Test(matmul_gpu, v11_splits_long_k_over_clusters, NEEDS_GPU)
{
    const struct matmul_dims long_k[] = {{33, 17, 1569}, {129, 10, 1025}, {1, 1, 5000},
                                         {32, 128, 1568}, {10, 128, 1024}};
    const bool clusters = gpu_cc() >= 90;
    for (size_t i = 0; i < sizeof long_k / sizeof long_k[0]; i++) {
        const int s = matmul_v11_splits(long_k[i]);
        cr_expect(clusters ? s > 1 && s <= 8 : s == 1, "%lldx%lldx%lld splits %d ways",
                  (long long)long_k[i].m, (long long)long_k[i].n, (long long)long_k[i].k, s);
    }
    /* One step of K is never split; a product whose tiles fill the GPU twice is not either. */
    cr_expect_eq(matmul_v11_splits((struct matmul_dims){1000, 1000, 32}), 1);
    cr_expect_eq(matmul_v11_splits((struct matmul_dims){2048, 2048, 4096}), 1);
}

/* Two runs of each form on the same inputs give the same bits. C is filled with all ones
 * before the first run and all zeros before the second, so an element left unwritten differs
 * too. Shapes split into clusters on sm_90, in both dtypes. */
Test(matmul_gpu, v11_is_bitwise_deterministic, NEEDS_GPU)
{
    const struct matmul_dims dims[] = {{33, 17, 1569}, {129, 10, 1025}, {32, 128, 1568}};
    const enum matmul_form forms[] = {MATMUL_AB, MATMUL_ATB, MATMUL_ABT};
    struct rng r = rng_seeded(21);
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const struct matmul_dims d = dims[i];
        const size_t a_count = (size_t)(d.m * d.k), b_count = (size_t)(d.k * d.n);
        const size_t c_count = (size_t)(d.m * d.n);
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            const size_t es = dtype_size((enum dtype)t);
            void *ha = malloc(a_count * es), *hb = malloc(b_count * es);
            char *first = malloc(c_count * es), *second = malloc(c_count * es);
            cr_assert(ha && hb && first && second);
            fill_uniform(ha, (enum dtype)t, a_count, &r, -1, 1);
            fill_uniform(hb, (enum dtype)t, b_count, &r, -1, 1);
            void *a, *b, *c;
            CUDA_CHECK(cudaMalloc(&a, a_count * es));
            CUDA_CHECK(cudaMalloc(&b, b_count * es));
            CUDA_CHECK(cudaMalloc(&c, c_count * es));
            CUDA_CHECK(cudaMemcpy(a, ha, a_count * es, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(b, hb, b_count * es, cudaMemcpyHostToDevice));
            for (int f = 0; f < 3; f++) {
                char *runs[2] = {first, second};
                for (int run = 0; run < 2; run++) {
                    CUDA_CHECK(cudaMemset(c, run == 0 ? 0xff : 0x00, c_count * es));
                    matmul_v11(forms[f], a, b, c, d, (enum dtype)t, 0);
                    CUDA_CHECK(cudaDeviceSynchronize());
                    CUDA_CHECK(cudaMemcpy(runs[run], c, c_count * es, cudaMemcpyDeviceToHost));
                }
                cr_expect(memcmp(first, second, c_count * es) == 0,
                          "v11 form %d %s %lldx%lldx%lld: two runs differ", forms[f],
                          dtype_name((enum dtype)t), (long long)d.m, (long long)d.n,
                          (long long)d.k);
            }
            CUDA_CHECK(cudaFree(a));
            CUDA_CHECK(cudaFree(b));
            CUDA_CHECK(cudaFree(c));
            free(ha);
            free(hb);
            free(first);
            free(second);
        }
    }
}

/* ---- the C API: each form, through the chapter's api rung on each pass ---- */

Test(matmul_gpu, api_forms_match_reference, NEEDS_GPU)
{
    /* 136x264x72: C = A B through v10's copy engine on an H200; the odd ones through v11 (A B
     * too, where its rule picks it) */
    static const char *const api_shapes[] = {"1x1x1",      "7x5x3",      "17x33x65",
                                             "64x1x300",   "129x65x33",  "136x264x72",
                                             "3x5x7",      "33x17x1569", "129x10x1025",
                                             "1x300x1",    "300x1x70"};
    const struct rung *api = rung_named(&matmul_chapter, "api");
    const int checked = expect_verified(&matmul_chapter, api, api_shapes,
                                        sizeof api_shapes / sizeof api_shapes[0]);
    cr_expect_eq(checked, 3 * 2 * (int)(sizeof api_shapes / sizeof api_shapes[0]));
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
