/* Chapter 10's program: one epoch (or --epochs) of net.h's CNN on Fashion-MNIST, trained by
 * ours (the library of chapters 01-09), by the vendor (cuDNN and cuBLAS, the same loop) and by
 * the CPU reference (a few steps, timed per step), a row each per dtype and batch size.
 *
 * Every row starts from the same initial weights (--seed, or --load-init). Ours and the vendor
 * are checked first: one step at a batch of 8 against the CPU reference (check_step.h). A row
 * reports the epoch's time on the GPU's clock, images a second, the mean loss of the epoch, the
 * training accuracy (each prediction made before its step's update) and the accuracy on the
 * 10,000 test images after the epoch. The CSV is the book's schema plus four columns. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "check_step.h"
#include "device.h"
#include "idx.h"
#include "reference.h"
#include "stats.h"
#include "train.h"
#include "vendor.h"

/* The tests link this file without main(), and call none of it: they run the program. */
#ifndef KL_NO_MAIN

#define PROGRAM "10-train-cnn"
#define MAX_BATCHES 16
#define CHECK_BATCH 8
#define TEST_BATCH 1000

/* The step's rungs: v1_library, one library call an operation; v2_pool_relu, each pool's
 * backward fused with its ReLU's; ours, every fusion of fused.cu (the last layer's too). */
enum variant { V_LIBRARY, V_POOL_RELU, V_OURS, V_VENDOR, V_CPU, VARIANTS };
static const char *const variant_name[VARIANTS] = {"v1_library", "v2_pool_relu", "ours",
                                                   "vendor", "cpu"};
static const unsigned variant_fusions[VARIANTS] = {0, CNN_FUSE_POOL_RELU, CNN_ALL_FUSIONS, 0, 0};

struct preset {
    const char *name, *batches, *about;
};
static const struct preset presets[] = {
    {"default", "128", "one epoch at batch 128"},
    {"seed", "32,64,128,256,512,1024", "the reference report's batch sizes"},
    {"large", "1024", "the largest batch of the report"},
    {"small", "32", "the smallest batch: launch-bound"},
    {"check", "8,5", "batches of 8 and 5, for the step check"},
    {"sanitize", "7", "an odd batch, for make sanitize (with --steps 2)"},
};
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

struct options {
    int run[VARIANTS];
    unsigned dtypes;
    int batch[MAX_BATCHES], n_batches;
    int epochs, steps, cpu_steps, no_graph, no_verify, list, help, exercise, breakdown;
    double lr;
    uint64_t seed;
    const char *data, *csv, *loss_csv, *save_init, *load_init;
};

/* ---- flags ---- */

static int usage(char *err, size_t len, const char *fmt, const char *a, const char *b)
{
    snprintf(err, len, fmt, a, b);
    return KL_EXIT_USAGE;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out, char *err,
                      size_t len)
{
    char *end;
    errno = 0;
    const long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        char range[64];
        snprintf(range, sizeof range, "an integer from %ld to %ld", lo, hi);
        return usage(err, len, "%s: wants %s", flag, range);
    }
    *out = x;
    return 0;
}

static int parse_batches(const char *v, struct options *o, char *err, size_t len)
{
    char copy[256];
    if (!v || strlen(v) >= sizeof copy)
        return usage(err, len, "--batch: wants a list of sizes from 1 to 65536, like %s%s",
                     "32,128", "");
    strcpy(copy, v);
    o->n_batches = 0;
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        long b;
        if (o->n_batches == MAX_BATCHES)
            return usage(err, len, "--batch: at most 16 sizes in '%s'%s", v, "");
        if (parse_long("--batch", tok, 1, 65536, &b, err, len))
            return KL_EXIT_USAGE;
        o->batch[o->n_batches++] = (int)b;
    }
    if (!o->n_batches)
        return usage(err, len, "--batch: '%s' names no size%s", v, "");
    return 0;
}

static int parse_variants(const char *v, struct options *o, char *err, size_t len)
{
    char copy[256];
    if (!v || strlen(v) >= sizeof copy)
        return usage(err, len, "--variant: wants v1_library, v2_pool_relu, ours, vendor, cpu or "
                     "all%s%s", "", "");
    strcpy(copy, v);
    memset(o->run, 0, sizeof o->run);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; i < VARIANTS; i++)
            if (!strcmp(tok, variant_name[i]) || !strcmp(tok, "all"))
                o->run[i] = found = 1;
        if (!found)
            return usage(err, len, "--variant: '%s' is none of v1_library, v2_pool_relu, ours, "
                         "vendor, cpu, all%s", tok, "");
    }
    return 0;
}

static int parse_preset(const char *v, struct options *o, char *err, size_t len)
{
    for (int i = 0; v && i < N_PRESETS; i++)
        if (!strcmp(v, presets[i].name))
            return parse_batches(presets[i].batches, o, err, len);
    return usage(err, len,
                 "--preset: '%s' is none of default, seed, large, small, check, sanitize%s",
                 v ? v : "", "");
}

static int parse_dtype(const char *v, struct options *o, char *err, size_t len)
{
    if (v && !strcmp(v, "fp32"))
        o->dtypes = 1u << DT_FP32;
    else if (v && !strcmp(v, "fp16"))
        o->dtypes = 1u << DT_FP16;
    else if (v && !strcmp(v, "all"))
        o->dtypes = DT_FLOATS;
    else
        return usage(err, len, "--dtype: '%s' is none of fp32, fp16, all%s", v ? v : "", "");
    return 0;
}

static int parse_lr(const char *v, struct options *o, char *err, size_t len)
{
    char *end;
    const double lr = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !(lr > 0 && lr <= 10))
        return usage(err, len, "--lr: '%s' is not a learning rate in (0, 10]%s", v ? v : "", "");
    o->lr = lr;
    return 0;
}

static int parse_one(int *i, int argc, char **argv, struct options *o, char *err, size_t len)
{
    const char *f = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long x;
    if (!strcmp(f, "--help") || !strcmp(f, "-h"))
        return o->help = 1, 0;
    if (!strcmp(f, "--list"))
        return o->list = 1, 0;
    if (!strcmp(f, "--exercise"))
        return o->exercise = 1, 0;
    if (!strcmp(f, "--no-graph"))
        return o->no_graph = 1, 0;
    if (!strcmp(f, "--no-verify"))
        return o->no_verify = 1, 0;
    if (!strcmp(f, "--breakdown"))
        return o->breakdown = 1, 0;
    if (!strcmp(f, "--iters") || !strcmp(f, "--warmup") || !strcmp(f, "--hot-l2"))
        return usage(err, len, "%s: chapter 10 times whole epochs (see --epochs)%s", f, "");
    ++*i;
    if (!strcmp(f, "--variant"))
        return parse_variants(v, o, err, len);
    if (!strcmp(f, "--dtype"))
        return parse_dtype(v, o, err, len);
    if (!strcmp(f, "--batch") || !strcmp(f, "--shape"))
        return parse_batches(v, o, err, len);
    if (!strcmp(f, "--preset"))
        return parse_preset(v, o, err, len);
    if (!strcmp(f, "--lr"))
        return parse_lr(v, o, err, len);
    if (!strcmp(f, "--epochs"))
        return parse_long(f, v, 1, 100, &x, err, len) ? KL_EXIT_USAGE : (o->epochs = (int)x, 0);
    if (!strcmp(f, "--steps"))
        return parse_long(f, v, 1, 1000000, &x, err, len) ? KL_EXIT_USAGE : (o->steps = (int)x, 0);
    if (!strcmp(f, "--cpu-steps"))
        return parse_long(f, v, 1, 1000, &x, err, len) ? KL_EXIT_USAGE
                                                        : (o->cpu_steps = (int)x, 0);
    if (!strcmp(f, "--seed")) {
        if (parse_long(f, v, 0, 2147483647L, &x, err, len))
            return KL_EXIT_USAGE;
        return o->seed = (uint64_t)x, 0;
    }
    const char **path = !strcmp(f, "--data")        ? &o->data
                        : !strcmp(f, "--csv")       ? &o->csv
                        : !strcmp(f, "--loss-csv")  ? &o->loss_csv
                        : !strcmp(f, "--save-init") ? &o->save_init
                        : !strcmp(f, "--load-init") ? &o->load_init
                                                    : NULL;
    if (!path)
        return usage(err, len, "%s: unknown flag (try --help)%s", f, "");
    if (!v || !*v)
        return usage(err, len, "%s: wants a path%s", f, "");
    *path = v;
    return 0;
}

static int parse_flags(int argc, char **argv, struct options *o, char *err, size_t len)
{
    memset(o, 0, sizeof *o);
    for (int v = 0; v < VARIANTS; v++)
        o->run[v] = 1;
    o->dtypes = DT_FLOATS;
    o->epochs = 1;
    o->cpu_steps = 3;
    o->lr = 0.01;
    o->seed = 1;
    o->data = IDX_DEFAULT_DIR;
    parse_batches(presets[0].batches, o, err, len);
    for (int i = 1; i < argc; i++)
        if (parse_one(&i, argc, argv, o, err, len))
            return KL_EXIT_USAGE;
    return 0;
}

static void print_help(void)
{
    printf("usage: ./run [flags]   (" PROGRAM ": one epoch of a small CNN on Fashion-MNIST)\n"
           "  --variant LIST|all   v1_library, v2_pool_relu, ours, vendor (cuDNN + cuBLAS), cpu\n"
           "                       (default all)\n"
           "  --dtype fp32|fp16|all\n"
           "  --batch LIST         batch sizes, e.g. 32,128,1024 (--shape is the same flag)\n"
           "  --preset NAME        default (128), seed (32 to 1024), large (1024), small (32),\n"
           "                       check (8,5), sanitize (7)\n"
           "  --epochs N           epochs a row trains (default 1); --lr X (default 0.01)\n"
           "  --seed N             initial weights and the shuffle (default 1)\n"
           "  --data DIR           MNIST-format IDX files (default " IDX_DEFAULT_DIR ")\n"
           "  --save-init FILE     write the initial weights (for bench/pytorch/train_cnn.py)\n"
           "  --load-init FILE     start from these weights instead of --seed's\n"
           "  --steps N            train only the first N steps of each epoch (a quick check)\n"
           "  --cpu-steps N        steps the cpu row times (default 3); its epoch is extrapolated\n"
           "  --csv FILE           append the rows; --loss-csv FILE: every step's loss\n"
           "  --no-graph           launch each kernel from the host instead of replaying a graph\n"
           "  --no-verify          skip the step check against the CPU reference\n"
           "  --breakdown          the time of each operation of a step, before the rows\n"
           "  --list  --exercise  --help\n"
           "exit: 0 all right, 1 a step check failed, 2 bad usage or data, 3 CUDA error or no "
           "GPU\n");
}

static void print_list(void)
{
    printf("variants of " PROGRAM ":\n"
           "  v1_library   the step as one call of chapters 01-09's api.h an operation\n"
           "  v2_pool_relu v1 with each pool's backward fused with its ReLU's (fused.cu)\n"
           "  ours         v2 with fc2's product, bias and input gradient fused too\n"
           "  vendor       the same step on cuDNN and cuBLAS, graphed the same way\n"
           "  cpu          the CPU reference (reference.c), a few steps, in double\n"
           "every GPU row replays one CUDA graph a step (--no-graph: launches)\n"
           "presets:\n");
    for (int i = 0; i < N_PRESETS; i++)
        printf("  %-12s batch %s: %s\n", presets[i].name, presets[i].batches, presets[i].about);
}

/* ---- rows ---- */

struct row {
    enum variant v;
    enum dtype t;
    int batch;
    double seconds[100];
    int epochs;
    double loss, train_acc, test_acc;
    int64_t images;             /* trained an epoch: the data set, or fewer with --steps */
    int verified;               /* 1 checked and right, 0 wrong, -1 not checked */
    double err_abs, err_rel;
    double vs_vendor;
};

/* Multiply-adds of one image's forward pass; the backward does twice as many, except that
 * conv1's input gradient is never computed. */
static double flops_per_image(void)
{
    const double conv1 = 16.0 * 9 * 784, conv2 = 32.0 * 144 * 196, fc = 1568.0 * 128 + 128 * 10;
    return 2 * ((conv1 + conv2 + fc) * 3 - conv1);
}

/* The row's epoch times: median, fastest and slowest. */
static struct summary epoch_seconds(const struct row *r)
{
    return summarize(r->seconds, (size_t)r->epochs);
}

static void print_header(void)
{
    printf("%-12s %-5s %6s %10s %11s %8s %9s %8s %9s  %s\n", "variant", "dtype", "batch",
           "epoch (s)", "images/s", "loss", "train %", "test %", "x vendor", "check");
}

static void print_row(const struct row *r, int images)
{
    const double s = epoch_seconds(r).median;
    char vendor[16] = "", check[64];
    if (r->vs_vendor > 0)
        snprintf(vendor, sizeof vendor, "%.2f", r->vs_vendor);
    if (r->verified < 0)
        snprintf(check, sizeof check, "%s", r->v == V_CPU ? "reference" : "not checked");
    else
        snprintf(check, sizeof check, "%s (%.1e)", r->verified ? "ok" : "FAIL", r->err_rel);
    char test[16] = "-";
    if (r->test_acc >= 0)
        snprintf(test, sizeof test, "%.2f", 100 * r->test_acc);
    printf("%-12s %-5s %6d %10.4f %11.0f %8.4f %9.2f %8s %9s  %s%s\n", variant_name[r->v],
           dtype_name(r->t), r->batch, s, images / s, r->loss, 100 * r->train_acc, test, vendor,
           check, r->v == V_CPU ? ", epoch extrapolated" : "");
    fflush(stdout);
}

static void csv_row(FILE *f, const struct row *r, const struct device_info *d, int images)
{
    char cc[16], cuda[16], date[16], vendor[32] = "", abs_err[32] = "", rel_err[32] = "";
    char test[32] = "";
    format_cc(d->cc, cc, sizeof cc);
    format_cuda_version(d->runtime_version, cuda, sizeof cuda);
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    const struct summary e = epoch_seconds(r);
    const double s = e.median;
    if (r->vs_vendor > 0)
        snprintf(vendor, sizeof vendor, "%.4f", r->vs_vendor);
    if (r->verified >= 0) {
        snprintf(abs_err, sizeof abs_err, "%.3e", r->err_abs);
        snprintf(rel_err, sizeof rel_err, "%.3e", r->err_rel);
    }
    if (r->test_acc >= 0)
        snprintf(test, sizeof test, "%.2f", 100 * r->test_acc);
    fprintf(f, "%s,epoch,%s,%s,%d,%.3f,%.3f,%.3f,,%.4f,0.00,%s,%s,%s,%d,%s,%s,%s,%s,,%.0f,%.5f,"
            "%.2f,%s\n",
            PROGRAM, variant_name[r->v], dtype_name(r->t), r->batch, s * 1e6, e.min * 1e6,
            e.max * 1e6,
            flops_per_image() * images / s * 1e-12, vendor, abs_err, rel_err, r->verified == 1,
            d->name, cc, cuda, date, images / s, r->loss, 100 * r->train_acc, test);
    fflush(f);
}

static FILE *open_append(const char *path, const char *header)
{
    FILE *f = fopen(path, "a+");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0)
        fprintf(f, "%s\n", header);
    return f;
}

#define CSV_HEADER                                                                             \
    "chapter,pass,variant,dtype,shape,median_us,min_us,max_us,gbps,tflops,pct_roof,vs_vendor,"  \
    "max_abs_err,rel_err,verified,gpu,cc,cuda,date,ran,images_per_s,loss,train_acc,test_acc"

/* ---- the runs ---- */

struct run {
    const struct options *o;
    const struct idx_set *train, *test;
    const float *init;
    struct device_info dev;
    FILE *csv, *loss_csv;
    int any_wrong;
};

static int vendor_ctx(void **ctx, struct cnn_state *st, char *why, size_t why_len)
{
    return cnn_vendor_create((struct cnn_vendor **)ctx, st, 0, why, why_len);
}

static void vendor_free(void *ctx) { cnn_vendor_destroy((struct cnn_vendor *)ctx); }

static int check_row(struct run *run, struct row *r)
{
    struct step_check c;
    char why[256];
    const int vendor = r->v == V_VENDOR;
    const int failed = cnn_check_step(vendor ? cnn_vendor_step : cnn_ours_step,
                                      vendor ? vendor_ctx : NULL, vendor ? vendor_free : NULL,
                                      variant_fusions[r->v], r->t, CHECK_BATCH,
                                      run->train->images, run->train->labels, run->init,
                                      (float)run->o->lr, &c, why, sizeof why);
    if (failed) {
        fprintf(stderr, PROGRAM ": %s\n", why);
        exit(failed);
    }
    r->verified = c.ok;
    r->err_abs = c.worst_abs_err;
    r->err_rel = c.worst_rel_err;
    if (!c.ok) {
        fprintf(stderr, PROGRAM ": %s %s step check FAILED at %s: relative error %.3e (bound "
                "%.1e); loss %.6f, reference %.6f\n", variant_name[r->v], dtype_name(r->t),
                c.worst, c.worst_rel_err, step_tolerance(r->t), c.loss, c.loss_ref);
        run->any_wrong = 1;
    }
    return 0;
}

static void write_losses(struct run *run, const struct row *r, const struct cnn_state *st,
                         int steps)
{
    float *losses = (float *)malloc((size_t)steps * sizeof(float));
    if (!losses) {
        fprintf(stderr, PROGRAM ": out of host memory for %d losses\n", steps);
        exit(KL_EXIT_CUDA);
    }
    CUDA_CHECK(cudaMemcpy(losses, st->loss_log, (size_t)steps * sizeof(float),
                          cudaMemcpyDeviceToHost));
    for (int i = 0; i < steps; i++)
        fprintf(run->loss_csv, "%s,%s,%d,%d,%.6f\n", variant_name[r->v], dtype_name(r->t),
                r->batch, i, losses[i]);
    fflush(run->loss_csv);
    free(losses);
}

static void train_gpu_row(struct run *run, struct row *r, struct cnn_state *test)
{
    const struct options *o = run->o;
    struct cnn_state st;
    char why[256];
    int rc = cnn_state_create(&st, r->t, r->batch, (float)o->lr, run->train->images,
                              run->train->labels, run->train->count, why, sizeof why);
    void *ctx = NULL;
    if (!rc && r->v == V_VENDOR)
        rc = cnn_vendor_create((struct cnn_vendor **)&ctx, &st, (int)(st.count % r->batch), why,
                               sizeof why);
    if (rc) {
        fprintf(stderr, PROGRAM ": %s\n", why);
        exit(rc);
    }
    st.fusions = variant_fusions[r->v];
    cnn_state_set_params(&st, run->init);
    struct trainer tr;
    trainer_init(&tr, &st, r->v == V_VENDOR ? cnn_vendor_step : cnn_ours_step, ctx, !o->no_graph);
    tr.step_limit = o->steps;
    int32_t *order = (int32_t *)malloc((size_t)st.count * 4);
    if (!order) {
        fprintf(stderr, PROGRAM ": out of host memory for the order\n");
        exit(KL_EXIT_CUDA);
    }
    if (o->breakdown) {
        trainer_breakdown(&tr, 20, stdout);
        cnn_state_set_params(&st, run->init);
    }
    struct epoch_result e;
    for (int epoch = 0; epoch < o->epochs; epoch++) {
        cnn_epoch_order(o->seed, epoch, st.count, order);
        trainer_epoch(&tr, order, isatty(2), &e);
        r->seconds[epoch] = e.seconds;
    }
    r->epochs = o->epochs;
    r->images = e.images;
    r->loss = e.mean_loss;
    r->train_acc = (double)e.correct / (double)e.images;
    r->test_acc = cnn_test_accuracy(test, &st);
    if (run->loss_csv)
        write_losses(run, r, &st, e.steps);
    free(order);
    trainer_destroy(&tr);
    if (ctx)
        cnn_vendor_destroy((struct cnn_vendor *)ctx);
    cnn_state_destroy(&st);
}

/* The CPU reference: cpu_steps steps of the first epoch's order, timed, the epoch extrapolated
 * from their mean; its loss and accuracy are those of the steps it ran. */
static void train_cpu_row(struct run *run, struct row *r)
{
    const struct options *o = run->o;
    const int64_t count = run->train->count;
    int32_t *order = (int32_t *)malloc((size_t)count * 4);
    double *params = (double *)malloc(CNN_PARAM_TOTAL * sizeof(double));
    double *grads = (double *)malloc(CNN_PARAM_TOTAL * sizeof(double));
    float *pixels = (float *)malloc((size_t)r->batch * CNN_PIXELS * sizeof(float));
    int32_t *labels = (int32_t *)malloc((size_t)r->batch * 4);
    if (!order || !params || !grads || !pixels || !labels) {
        fprintf(stderr, PROGRAM ": out of host memory for the cpu row\n");
        exit(KL_EXIT_CUDA);
    }
    cnn_epoch_order(o->seed, 0, count, order);
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        params[i] = run->init[i];
    double loss = 0, seconds = 0;
    int64_t correct = 0, seen = 0;
    const int steps = (int)(count / r->batch) < o->cpu_steps ? (int)(count / r->batch)
                                                              : o->cpu_steps;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < r->batch; i++) {
            const int64_t image = order[(int64_t)step * r->batch + i];
            for (int p = 0; p < CNN_PIXELS; p++)
                pixels[(int64_t)i * CNN_PIXELS + p] =
                    run->train->images[image * CNN_PIXELS + p] / 255.0f;
            labels[i] = run->train->labels[image];
        }
        struct timespec t0, t1;
        int right;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        loss += cnn_cpu_gradient(params, pixels, labels, r->batch, grads, &right);
        cnn_cpu_sgd(params, grads, o->lr);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        correct += right;
        seen += r->batch;
    }
    r->epochs = 1;
    r->images = count;
    r->seconds[0] = steps ? seconds / steps * ((double)count / r->batch) : 0;
    r->loss = steps ? loss / steps : 0;
    r->train_acc = seen ? (double)correct / (double)seen : 0;
    r->test_acc = -1;
    r->verified = -1;
    free(order), free(params), free(grads), free(pixels), free(labels);
}

static void run_batch(struct run *run, enum dtype t, int batch, struct cnn_state *test)
{
    struct row rows[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) {
        if (!run->o->run[v] || (v == V_CPU && t != DT_FP32))
            continue; /* the CPU reference computes in double, whatever the dtype */
        struct row *r = &rows[v];
        memset(r, 0, sizeof *r);
        r->v = (enum variant)v, r->t = t, r->batch = batch, r->verified = -1;
        if (v != V_CPU && !run->o->no_verify)
            check_row(run, r);
        if (v == V_CPU)
            train_cpu_row(run, r);
        else
            train_gpu_row(run, r, test);
    }
    for (int v = 0; v < VARIANTS; v++) {
        if (!run->o->run[v] || (v == V_CPU && t != DT_FP32))
            continue;
        if (run->o->run[V_VENDOR])
            rows[v].vs_vendor = epoch_seconds(&rows[V_VENDOR]).median /
                                epoch_seconds(&rows[v]).median;
        print_row(&rows[v], (int)rows[v].images);
        if (run->csv)
            csv_row(run->csv, &rows[v], &run->dev, (int)rows[v].images);
    }
}

/* The data, and a training set that holds a batch of every size asked for and the step check's
 * (CHECK_BATCH images): a smaller one would have a step read past its images. */
static int load_data(const struct options *o, struct idx_set *train, struct idx_set *test)
{
    char err[512];
    if (idx_load_dir(o->data, 1, train, err, sizeof err) ||
        idx_load_dir(o->data, 0, test, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return KL_EXIT_USAGE;
    }
    int largest = CHECK_BATCH;
    for (int i = 0; i < o->n_batches; i++)
        largest = o->batch[i] > largest ? o->batch[i] : largest;
    if (train->count < largest) {
        fprintf(stderr, PROGRAM ": %s: %lld training images, fewer than a batch of %d\n", o->data,
                (long long)train->count, largest);
        idx_free(train);
        idx_free(test);
        return KL_EXIT_USAGE;
    }
    return 0;
}

static int initial_weights(const struct options *o, float *init)
{
    char err[512];
    if (o->load_init) {
        if (cnn_load_params(o->load_init, init, err, sizeof err)) {
            fprintf(stderr, PROGRAM ": %s\n", err);
            return KL_EXIT_USAGE;
        }
    } else {
        cnn_init_params(init, o->seed);
    }
    if (o->save_init && cnn_save_params(o->save_init, init, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return KL_EXIT_USAGE;
    }
    return 0;
}

static int open_outputs(struct run *run)
{
    const struct options *o = run->o;
    if (o->csv && !(run->csv = open_append(o->csv, CSV_HEADER))) {
        fprintf(stderr, PROGRAM ": --csv %s: %s\n", o->csv, strerror(errno));
        return KL_EXIT_USAGE;
    }
    if (o->loss_csv &&
        !(run->loss_csv = open_append(o->loss_csv, "variant,dtype,batch,step,loss"))) {
        fprintf(stderr, PROGRAM ": --loss-csv %s: %s\n", o->loss_csv, strerror(errno));
        return KL_EXIT_USAGE;
    }
    return 0;
}

static int train_all(struct run *run)
{
    const struct options *o = run->o;
    printf("%s, compute capability %d.%d; %lld training and %lld test images from %s; lr %g, "
           "seed %llu, %d epoch(s)", run->dev.name, run->dev.cc / 10, run->dev.cc % 10,
           (long long)run->train->count, (long long)run->test->count, o->data, o->lr,
           (unsigned long long)o->seed, o->epochs);
    if (o->steps)
        printf(" of at most %d steps (times and images/s are those steps')", o->steps);
    printf("\n");
    print_header();
    for (int t = DT_FP32; t <= DT_FP16; t++) {
        if (!(o->dtypes & (1u << t)))
            continue;
        struct cnn_state test;
        char why[256];
        const int rc = cnn_state_create(&test, (enum dtype)t, TEST_BATCH, (float)o->lr,
                                        run->test->images, run->test->labels, run->test->count,
                                        why, sizeof why);
        if (rc) {
            fprintf(stderr, PROGRAM ": %s\n", why);
            return rc;
        }
        for (int b = 0; b < o->n_batches; b++)
            run_batch(run, (enum dtype)t, o->batch[b], &test);
        cnn_state_destroy(&test);
    }
    return run->any_wrong ? KL_EXIT_WRONG : KL_EXIT_OK;
}

/* Without a GPU: the CPU row alone, at the first batch size and dtype fp32. */
static int cpu_only(struct run *run, const char *why)
{
    printf(PROGRAM ": no GPU (%s); the CPU reference alone\n", why);
    print_header();
    struct row r;
    memset(&r, 0, sizeof r);
    r.v = V_CPU, r.t = DT_FP32, r.batch = run->o->batch[0];
    train_cpu_row(run, &r);
    print_row(&r, (int)r.images);
    return KL_EXIT_OK;
}

static int run_exercise(const struct options *o)
{
    struct device_info dev;
    char why[256];
    if (device_open(&dev, why, sizeof why)) {
        printf(PROGRAM ": no GPU (%s); the exercise needs one\n", why);
        return KL_EXIT_OK;
    }
    printf("exercise.cu, the fused pool + ReLU backward (fp32), seed %llu:\n",
           (unsigned long long)o->seed);
    const int wrong = cnn_exercise_verify(cnn_pool_relu_backward_exercise, o->seed, stdout);
    printf(wrong ? "FAIL: see the first wrong element above\n" : "PASS\n");
    return wrong ? KL_EXIT_WRONG : KL_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct options o;
    char err[512];
    if (parse_flags(argc, argv, &o, err, sizeof err)) {
        fprintf(stderr, PROGRAM ": %s\n", err);
        return KL_EXIT_USAGE;
    }
    if (o.help)
        return print_help(), KL_EXIT_OK;
    if (o.list)
        return print_list(), KL_EXIT_OK;
    if (o.exercise)
        return run_exercise(&o);
    static float init[CNN_PARAM_TOTAL];
    struct idx_set train, test;
    int rc = initial_weights(&o, init);
    if (rc || (rc = load_data(&o, &train, &test)))
        return rc;
    struct run run;
    memset(&run, 0, sizeof run);
    run.o = &o, run.train = &train, run.test = &test, run.init = init;
    if ((rc = open_outputs(&run)))
        return rc;
    char why[256];
    if (device_open(&run.dev, why, sizeof why))
        rc = cpu_only(&run, why);
    else
        rc = train_all(&run);
    idx_free(&train);
    idx_free(&test);
    if (run.csv)
        fclose(run.csv);
    if (run.loss_csv)
        fclose(run.loss_csv);
    return rc;
}
#endif
