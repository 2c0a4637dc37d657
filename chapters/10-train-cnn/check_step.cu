/* The step against the reference (check_step.h). The reference sees exactly the values the GPU
 * read: in fp16 the weights and pixels rounded to half first, as the device holds them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_step.h"
#include "rng.h"
#include "reference.h"
#include "verify.h"

extern "C" double step_tolerance(enum dtype t) { return t == DT_FP32 ? 1e-4 : 3e-2; }

static double as_seen(double v, enum dtype t)
{
    return t == DT_FP32 ? (double)(float)v : (double)half_to_float(half_from_float((float)v));
}

/* Records tensor `what` in res when its error is the worst so far (the first failure stays on
 * record); fails the step past the bound. */
static void judge(struct step_check *res, const char *what, const float *out, const double *ref,
                  size_t n, enum dtype t)
{
    struct tolerance loose = {INFINITY, 0};
    const struct verify_result v = verify(out, DT_FP32, ref, n, loose);
    const int bad = !(v.norm_rel_err <= step_tolerance(t));
    if (res->ok && (bad || v.norm_rel_err > res->worst_rel_err)) {
        res->worst_rel_err = v.norm_rel_err;
        res->worst_abs_err = v.max_abs_err;
        snprintf(res->worst, sizeof res->worst, "%s", what);
    }
    if (bad)
        res->ok = 0;
}

/* An update may be off by the fp32 rounding of the new weight as well as by its gradient's
 * error, so its bound adds one unit in the last place of each weight. */
static void judge_update(struct step_check *res, const char *what, const float *params,
                         const float *updated, const double *ref_grads, size_t n, float lr,
                         enum dtype t)
{
    double err = 0, step = 0, weights = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double want = params[i] - (double)lr * ref_grads[i], e = updated[i] - want;
        err += e * e;
        step += (double)lr * lr * ref_grads[i] * ref_grads[i];
        weights += (double)params[i] * params[i];
        worst = fabs(e) > worst ? fabs(e) : worst;
    }
    err = sqrt(err), step = sqrt(step), weights = sqrt(weights);
    if (err <= step_tolerance(t) * step + 0x1p-23 * weights)
        return;
    if (res->ok) {
        res->worst_rel_err = step > 0 ? err / step : INFINITY;
        res->worst_abs_err = worst;
        snprintf(res->worst, sizeof res->worst, "%s", what);
    }
    res->ok = 0;
}

static void compare(struct step_check *res, enum dtype t, float lr, const float *params,
                    const float *grads, const float *updated, const double *ref_grads)
{
    for (int i = 0; i < CNN_PARAMS; i++) {
        const int64_t at = cnn_param_offset(i), n = cnn_param_elems[i];
        char what[64];
        snprintf(what, sizeof what, "%s gradient", cnn_param_name[i]);
        judge(res, what, grads + at, ref_grads + at, (size_t)n, t);
        snprintf(what, sizeof what, "%s update", cnn_param_name[i]);
        judge_update(res, what, params + at, updated + at, ref_grads + at, (size_t)n, lr, t);
    }
}

extern "C" int cnn_check_step(cnn_step_fn step, cnn_ctx_fn make_ctx, void (*free_ctx)(void *),
                              unsigned fusions, enum dtype t, int n, const uint8_t *images,
                              const uint8_t *labels,
                              const float *params, float lr, struct step_check *res, char *why,
                              size_t why_len)
{
    memset(res, 0, sizeof *res);
    res->ok = 1;
    struct cnn_state st;
    if (cnn_state_create(&st, t, n, lr, images, labels, n, why, why_len))
        return 3;
    st.fusions = fusions;
    void *ctx = NULL;
    if (make_ctx && make_ctx(&ctx, &st, why, why_len)) {
        cnn_state_destroy(&st);
        return 3;
    }
    cnn_state_set_params(&st, params);
    int32_t *order = (int32_t *)malloc((size_t)n * 4);
    const size_t total = CNN_PARAM_TOTAL;
    float *grads = (float *)malloc(total * sizeof(float)), *updated = (float *)malloc(total * 4);
    double *seen = (double *)malloc(total * sizeof(double)), *ref = (double *)malloc(total * 8);
    float *pixels = (float *)malloc((size_t)n * CNN_PIXELS * sizeof(float));
    int32_t *wide = (int32_t *)malloc((size_t)n * 4);
    if (!order || !grads || !updated || !seen || !ref || !pixels || !wide) {
        fprintf(stderr, "10-train-cnn: out of host memory for the step check\n");
        exit(KL_EXIT_CUDA);
    }
    for (int i = 0; i < n; i++)
        order[i] = i, wide[i] = labels[i];
    CUDA_CHECK(cudaMemcpy(st.order, order, (size_t)n * 4, cudaMemcpyHostToDevice));
    step(&st, n, ctx, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    float loss;
    CUDA_CHECK(cudaMemcpy(&loss, st.loss, sizeof loss, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&res->correct, st.correct, sizeof(int), cudaMemcpyDeviceToHost));
    cnn_state_get_grads(&st, grads);
    cnn_state_get_params(&st, updated);
    if (free_ctx)
        free_ctx(ctx);
    cnn_state_destroy(&st);

    for (size_t i = 0; i < total; i++)
        seen[i] = as_seen(params[i], t);
    for (size_t i = 0; i < (size_t)n * CNN_PIXELS; i++)
        pixels[i] = (float)as_seen(images[i] / 255.0f, t);
    res->loss = loss;
    res->loss_ref = cnn_cpu_gradient(seen, pixels, wide, n, ref, &res->correct_ref);
    const double loss_err = fabs(res->loss - res->loss_ref) / fabs(res->loss_ref);
    res->worst_rel_err = loss_err;
    res->worst_abs_err = fabs(res->loss - res->loss_ref);
    snprintf(res->worst, sizeof res->worst, "loss");
    if (!(loss_err <= step_tolerance(t)))
        res->ok = 0;
    compare(res, t, lr, params, grads, updated, ref);
    free(order), free(grads), free(updated), free(seen), free(ref), free(pixels), free(wide);
    return 0;
}

/* ---- the exercise's checker ---- */

extern "C" void cnn_pool_relu_backward_fp32(const float *d_pooled, const uint8_t *argmax,
                                            const float *activation, float *dz, int64_t planes,
                                            int oh, int ow, cudaStream_t s)
{
    cnn_pool_relu_backward(d_pooled, argmax, activation, dz, planes, oh, ow, DT_FP32, s);
}

/* Random windows: activations half negative, winners anywhere in their window. */
static void exercise_inputs(struct rng *r, int64_t windows, int64_t elems, float *d_pooled,
                            uint8_t *argmax, float *activation)
{
    for (int64_t i = 0; i < windows; i++)
        d_pooled[i] = (float)rng_uniform(r, -1, 1);
    for (int64_t i = 0; i < (windows + 3) / 4; i++)
        argmax[i] = (uint8_t)rng_below(r, 256);
    for (int64_t i = 0; i < elems; i++)
        activation[i] = (float)rng_uniform(r, -1, 1);
}

static void exercise_expected(int64_t windows, int ow, const float *d_pooled,
                              const uint8_t *argmax, const float *activation, float *dz)
{
    const int w = 2 * ow;
    for (int64_t o = 0; o < windows; o++) {
        const int64_t row = o / ow, j = o % ow, top = 2 * row * w + 2 * j;
        const int win = (argmax[o / 4] >> (o % 4 * 2)) & 3;
        for (int e = 0; e < 4; e++)
            dz[top + (e / 2) * w + e % 2] = 0.f;
        const int64_t at = top + (win / 2) * w + win % 2;
        dz[at] = activation[at] > 0.f ? d_pooled[o] : 0.f;
    }
}

/* One shape: planes of OH x OW windows. Returns 0 right, 1 wrong. */
static int exercise_shape(pool_relu_backward_fn kernel, int64_t planes, int oh, int ow,
                          struct rng *r, FILE *out)
{
    const int64_t windows = planes * oh * ow, elems = windows * 4;
    const int64_t bytes = (windows + 3) / 4;
    float *d_pooled = (float *)malloc((size_t)windows * 4);
    float *act = (float *)malloc((size_t)elems * 4);
    float *want = (float *)malloc((size_t)elems * 4), *got = (float *)malloc((size_t)elems * 4);
    uint8_t *argmax = (uint8_t *)malloc((size_t)bytes);
    if (!d_pooled || !act || !want || !got || !argmax) {
        fprintf(stderr, "10-train-cnn: out of host memory for the exercise\n");
        exit(KL_EXIT_CUDA);
    }
    exercise_inputs(r, windows, elems, d_pooled, argmax, act);
    exercise_expected(windows, ow, d_pooled, argmax, act, want);
    float *dev_pooled, *dev_act, *dev_dz;
    uint8_t *dev_argmax;
    CUDA_CHECK(cudaMalloc(&dev_pooled, (size_t)windows * 4));
    CUDA_CHECK(cudaMalloc(&dev_act, (size_t)elems * 4));
    CUDA_CHECK(cudaMalloc(&dev_dz, (size_t)elems * 4));
    CUDA_CHECK(cudaMalloc(&dev_argmax, (size_t)bytes));
    CUDA_CHECK(cudaMemcpy(dev_pooled, d_pooled, (size_t)windows * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dev_act, act, (size_t)elems * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dev_argmax, argmax, (size_t)bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dev_dz, 0xff, (size_t)elems * 4)); /* NaN: an unwritten dz fails */
    kernel(dev_pooled, dev_argmax, dev_act, dev_dz, planes, oh, ow, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(got, dev_dz, (size_t)elems * 4, cudaMemcpyDeviceToHost));
    int64_t bad = -1;
    for (int64_t i = 0; i < elems && bad < 0; i++)
        if (!(got[i] == want[i]))
            bad = i;
    if (bad < 0)
        fprintf(out, "  %lld planes of %dx%d windows: right\n", (long long)planes, oh, ow);
    else
        fprintf(out, "  %lld planes of %dx%d windows: WRONG at element %lld: %g, not %g\n",
                (long long)planes, oh, ow, (long long)bad, got[bad], want[bad]);
    cudaFree(dev_pooled), cudaFree(dev_act), cudaFree(dev_dz), cudaFree(dev_argmax);
    free(d_pooled), free(act), free(want), free(got), free(argmax);
    return bad >= 0;
}

extern "C" int cnn_exercise_verify(pool_relu_backward_fn kernel, uint64_t seed, FILE *out)
{
    struct rng r = rng_seeded(seed);
    const int shapes[][3] = {{1, 1, 1}, {1, 3, 5}, {7, 14, 14}, {32 * 16, 14, 14}, {5 * 32, 7, 7}};
    int wrong = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        wrong |= exercise_shape(kernel, shapes[i][0], shapes[i][1], shapes[i][2], &r, out);
    return wrong;
}
