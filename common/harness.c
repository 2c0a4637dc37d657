/* The program every chapter runs: flags, header, verification of every rung before any is
 * timed, the table and the CSV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "ladder.h"
#include "pool.h"
#include "report.h"
#include "rung_note.h"
#include "timing.h"

struct run {
    const struct chapter *ch;
    struct options o;
    struct device_info dev;
    double copy_gbps;
    struct timer timer;
    FILE *csv;
    int on_gpu;
    char no_gpu_why[256];
    int header_printed, table_header_printed;
    int failed;
};

int ladder_is_vendor(const struct rung *r)
{
    return !strcmp(r->name, "vendor");
}

const struct rung *ladder_vendor(const struct chapter *ch)
{
    for (int i = 0; i < ch->n_rungs; i++)
        if (ladder_is_vendor(&ch->rungs[i]))
            return &ch->rungs[i];
    return NULL;
}

static size_t workspace_bytes(const struct chapter *ch, const struct problem *p)
{
    return ch->workspace_bytes ? ch->workspace_bytes(p) : 0;
}

const char *ladder_unsupported(const struct rung *r, const struct problem *p, int cc)
{
    static char why[96];
    if (r->min_cc && cc < r->min_cc) {
        snprintf(why, sizeof why, "unsupported: needs compute capability %d.%d", r->min_cc / 10,
                 r->min_cc % 10);
        return why;
    }
    const char *reason = r->unsupported ? r->unsupported(p) : NULL;
    if (reason) {
        snprintf(why, sizeof why, "unsupported: %s", reason);
        return why;
    }
    return NULL;
}

static void print_failure(const struct run *run, const struct problem *p, const struct rung *r,
                          const struct verify_result *v, int tensor)
{
    fprintf(stderr,
            "FAIL %s %s %s %s %s: %s[%zu] is %.9g, the reference %.9g (%zu wrong; --seed %llu)\n",
            run->ch->id, run->ch->passes[p->pass], dtype_name(p->dtype), p->shape.text, r->name,
            p->out[tensor].name, v->first_bad, v->bad_out, v->bad_ref, v->n_bad,
            (unsigned long long)run->o.seed);
}

/* Builds p (host side, reference included) or says why it cannot. */
static int build_problem(const struct run *run, struct problem *p, int pass, enum dtype t)
{
    char why[256];
    if (problem_init(p, run->ch, pass, t, &run->o.shape, why, sizeof why) ||
        (run->on_gpu &&
         pool_sets_that_fit(p, workspace_bytes(run->ch, p), why, sizeof why) == 0) ||
        problem_alloc_host(p, why, sizeof why)) {
        fprintf(stderr, "%s: %s\n", run->ch->id, why);
        return KL_EXIT_CUDA;
    }
    struct rng rng = rng_seeded(run->o.seed ^ ((uint64_t)pass << 32) ^ (uint64_t)t);
    run->ch->fill(p, &rng);
    run->ch->reference(p);
    return 0;
}

/* GB/s or TFLOP/s of a timed row: FLOPs for passes that count them, else bytes. */
static void set_rate(struct result_row *row, const struct problem *p, double copy_gbps)
{
    if (p->flops > 0) {
        row->tflops = p->flops / (row->us.median * 1e6);
    } else {
        row->gbps = p->bytes / (row->us.median * 1e3);
        row->pct_roof = copy_gbps > 0 ? 100.0 * row->gbps / copy_gbps : 0;
    }
}

static void print_header(struct run *run);

/* The header and the table's column names come with the first row, so that a run that stops
 * before any row (out of memory, say) prints its one line of error and nothing else. */
static void emit(struct run *run, const struct result_row *row)
{
    print_header(run);
    if (!run->table_header_printed) {
        report_table_header(stdout);
        run->table_header_printed = 1;
    }
    report_table_row(stdout, row);
    if (run->csv && row->timed)
        report_csv_row(run->csv, row, &run->dev);
}

/* The chapter's rung that a note names: its full name, or its number ("v3") alone. */
static const struct rung *rung_noted(const struct chapter *ch, const char *noted)
{
    const size_t len = strlen(noted);
    for (int i = 0; i < ch->n_rungs; i++) {
        const char *name = ch->rungs[i].name;
        if (!strcmp(name, noted) || (!strncmp(name, noted, len) && name[len] == '_'))
            return &ch->rungs[i];
    }
    return NULL;
}

/* The rung whose kernels ran in r's place, as its launchers noted, or NULL for r's own. A
 * note that names no rung names what a vendor call ran (cuDNN's algorithm): it is kept as is. */
static const char *ran_instead(const struct chapter *ch, const struct rung *r,
                               const char *noted)
{
    if (!noted)
        return NULL;
    const struct rung *ran = rung_noted(ch, noted);
    if (!ran)
        return noted;
    return strcmp(ran->name, r->name) ? ran->name : NULL;
}

/* One pass and dtype: verify every listed rung, then time them, then print the rows. */
static int run_group(struct run *run, int pass, enum dtype t, const struct rung *const *list,
                     int n)
{
    struct problem p;
    int rc = build_problem(run, &p, pass, t);
    if (rc)
        return rc;
    struct pool pl;
    char why[256];
    const size_t scratch = workspace_bytes(run->ch, &p);
    int want = run->o.hot_l2 || run->o.no_graph
                   ? 1 : cold_sets_needed(&run->dev, pool_set_bytes(&p));
    if (pool_create(&pl, &p, scratch, want, why, sizeof why)) {
        fprintf(stderr, "%s: %s\n", run->ch->id, why);
        problem_free(&p);
        return KL_EXIT_CUDA;
    }

    struct result_row rows[KL_MAX_RUNGS];
    /* ladder_unsupported's text is overwritten by its next call: each row keeps its own copy. */
    char skip_text[KL_MAX_RUNGS][96];
    const char *pass_name = run->ch->passes[pass];
    double vendor_us = 0;
    for (int i = 0; i < n; i++) {
        struct result_row *row = &rows[i];
        memset(row, 0, sizeof *row);
        row->chapter = run->ch->id;
        row->pass = pass_name;
        row->variant = list[i]->name;
        row->shape = p.shape.text;
        row->dtype = t;
        const char *skip = ladder_unsupported(list[i], &p, run->dev.cc);
        if (skip)
            skip = strncpy(skip_text[i], skip, sizeof skip_text[i]);
        row->verdict = skip ? skip : run->o.no_verify ? "unverified" : "ok";
        if (skip || run->o.no_verify)
            continue;
        int bad_tensor;
        const unsigned not_written = list[i]->outputs_not_written[pass];
        kl_take_rung_note();
        struct verify_result v = pool_verify(&pl, &p, list[i]->launch[pass], not_written,
                                             run->timer.stream, &bad_tensor);
        row->ran = ran_instead(run->ch, list[i], kl_take_rung_note());
        row->checked = 1;
        row->verified = v.ok;
        row->max_abs_err = v.max_abs_err;
        row->rel_err = v.norm_rel_err;
        if (v.ok && v.n_checked < v.n_total)
            row->verdict = "ok, sampled"; /* the reference computed only part of the output */
        if (v.ok && not_written)
            row->verdict = "ok, partial"; /* outputs the rung does not write, unchecked */
        if (!v.ok && list[i]->shown_for_error) {
            row->verdict = list[i]->shown_for_error;
        } else if (!v.ok) {
            row->verdict = "FAIL";
            run->failed = 1;
            print_failure(run, &p, list[i], &v, bad_tensor);
        }
    }

    struct timing_opts topts = {run->o.iters, run->o.warmup, run->o.hot_l2, run->o.no_graph};
    double *samples = malloc((size_t)run->o.iters * sizeof *samples);
    for (int i = 0; i < n; i++) {
        struct result_row *row = &rows[i];
        if (!strncmp(row->verdict, "unsupported", 11))
            continue;
        int taken;
        time_launches(&run->timer, &pl, &p, list[i]->launch[pass], &topts, samples, &taken);
        row->timed = 1;
        row->us = summarize(samples, (size_t)taken);
        set_rate(row, &p, run->copy_gbps);
        if (ladder_is_vendor(list[i]))
            vendor_us = row->us.median;
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].timed && vendor_us > 0)
            rows[i].vs_vendor = vendor_us / rows[i].us.median;
        emit(run, &rows[i]);
    }
    free(samples);
    pool_destroy(&pl);
    problem_free(&p);
    return 0;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The fraction of the outputs the reference computed: below 1 where it samples a large
 * output (the rest are marked unchecked), so that its row's rate counts the work it did. */
static double reference_fraction_computed(const struct problem *p)
{
    size_t total = 0, computed = 0;
    for (int i = 0; i < p->n_out; i++)
        for (size_t j = 0; j < p->out[i].count; j++) {
            total++;
            computed += !verify_is_unchecked(p->ref_out[i][j]);
        }
    return total ? (double)computed / (double)total : 1.0;
}

/* No GPU: time the CPU reference, so the program still teaches something and exits 0. */
static int run_cpu_group(struct run *run, int pass, enum dtype t)
{
    struct problem p;
    int rc = build_problem(run, &p, pass, t);
    if (rc)
        return rc;
    int samples = run->o.iters < 5 ? run->o.iters : 5; /* the CPU is slow; 5 will do */
    double us[5];
    for (int i = 0; i < samples; i++) {
        double t0 = seconds_now();
        run->ch->reference(&p);
        us[i] = 1e6 * (seconds_now() - t0);
    }
    const double computed = reference_fraction_computed(&p);
    p.flops *= computed;
    struct result_row row = {0};
    row.chapter = run->ch->id;
    row.pass = run->ch->passes[pass];
    row.variant = "cpu";
    row.shape = p.shape.text;
    row.dtype = t;
    row.timed = 1;
    row.us = summarize(us, (size_t)samples);
    set_rate(&row, &p, 0);
    row.verified = 1;
    row.verdict = computed < 1.0 ? "reference, sampled" : "reference";
    emit(run, &row);
    problem_free(&p);
    return 0;
}

/* Every selected pass and dtype: on the GPU for the rungs in list that have that pass and
 * dtype, else the CPU reference alone. */
static int run_ladder(struct run *run, const struct rung *const *all, int n_all)
{
    for (int pass = 0; pass < run->ch->n_passes; pass++) {
        if (!(run->o.passes & (1u << pass)))
            continue;
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            if (!(run->o.dtypes & (1u << t)))
                continue;
            const struct rung *list[KL_MAX_RUNGS];
            int n = 0;
            for (int i = 0; i < n_all; i++)
                if (all[i]->launch[pass] && (all[i]->dtypes & (1u << t)))
                    list[n++] = all[i];
            int rc = !run->on_gpu ? run_cpu_group(run, pass, (enum dtype)t)
                     : n > 0      ? run_group(run, pass, (enum dtype)t, list, n)
                                  : 0;
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* The GPU, its software and the roof, or the one line that says why the CPU runs instead:
 * printed once, before the first row. */
static void print_header(struct run *run)
{
    if (run->header_printed)
        return;
    run->header_printed = 1;
    if (!run->on_gpu) {
        printf("%s: %s; running and timing the CPU reference only\n", run->ch->id,
               run->no_gpu_why);
        return;
    }
    const struct device_info *d = &run->dev;
    char cc[16], rt[16], drv[16];
    format_cc(d->cc, cc, sizeof cc);
    format_cuda_version(d->runtime_version, rt, sizeof rt);
    format_cuda_version(d->driver_version, drv, sizeof drv);
    printf("%s: %s\n", run->ch->id, run->ch->title);
    printf("GPU: %s, cc %s, %d SMs, %.0f MiB L2, %.1f GiB | CUDA runtime %s, driver %s, cuDNN "
           "%zu.%zu.%zu\n",
           d->name, cc, d->sms, (double)d->l2_bytes / 1048576.0,
           (double)d->total_mem / 1073741824.0, rt, drv,
           d->cudnn_version / 10000, d->cudnn_version / 100 % 100, d->cudnn_version % 100);
    printf("roof: device-to-device copy %.0f GB/s (bytes read + written) | seed %llu | %s, %s, "
           "median of %d samples after %d warm-up\n\n",
           run->copy_gbps, (unsigned long long)run->o.seed,
           run->o.no_graph ? "single launches between events (launch overhead included)"
                           : "CUDA graph replay, time per launch",
           run->o.hot_l2 ? "hot L2 (one input set)" : "cold L2 (input pool > 2x L2, flushed)",
           run->o.iters, run->o.warmup);
    fflush(stdout);
}

int ladder_exercise_verify(const struct chapter *ch, const struct rung *ex, unsigned dtypes,
                           uint64_t seed, FILE *out)
{
    char no_gpu[256];
    struct device_info dev;
    if (device_open(&dev, no_gpu, sizeof no_gpu)) {
        fprintf(out, "%s: the exercise needs a GPU: %s\n", ch->id, no_gpu);
        return -1;
    }
    int failed = 0;
    for (int pass = 0; pass < ch->n_passes; pass++) {
        for (int t = DT_FP32; t <= DT_FP16; t++) {
            if (!ex->launch[pass] || !(ex->dtypes & dtypes & (1u << t)))
                continue;
            for (int s = 0; ch->exercise_shapes[s]; s++) {
                struct verify_result v;
                char why[256];
                const char *shape = ch->exercise_shapes[s];
                int rc = ladder_check(ch, ex, pass, (enum dtype)t, shape, seed, &v, why,
                                      sizeof why);
                fprintf(out, "exercise %s %s %s: ", ch->passes[pass], dtype_name(t), shape);
                if (rc == 0)
                    fprintf(out, "ok\n");
                else if (rc == 1)
                    fprintf(out, "WRONG at element %zu: %.9g, the reference %.9g (%zu of the "
                            "elements wrong)\n", v.first_bad, v.bad_out, v.bad_ref, v.n_bad);
                else
                    fprintf(out, "%s\n", why);
                failed |= rc != 0;
            }
        }
    }
    return failed;
}

static int run_exercise(struct run *run)
{
    const struct rung *ex = run->ch->exercise;
    if (!ex) {
        fprintf(stderr, "%s has no exercise\n", run->ch->id);
        return KL_EXIT_USAGE;
    }
    print_header(run);
    if (ladder_exercise_verify(run->ch, ex, run->o.dtypes, run->o.seed, stdout)) {
        printf("exercise: FAIL (the first wrong element is above; the kernel is in "
               "chapters/%s/exercise.cu)\n", run->ch->id);
        return KL_EXIT_WRONG;
    }
    printf("exercise: PASS. Timed beside the vendor at %s:\n\n", run->o.shape.text);
    const struct rung *vendor = ladder_vendor(run->ch);
    const struct rung *list[2] = {ex, vendor};
    int rc = run_ladder(run, list, vendor ? 2 : 1);
    return rc ? rc : run->failed ? KL_EXIT_WRONG : KL_EXIT_OK;
}

int ladder_main(const struct chapter *ch, int argc, char **argv)
{
    struct run run;
    memset(&run, 0, sizeof run);
    run.ch = ch;
    char err[768];
    if (cli_parse(ch, argc, argv, &run.o, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", ch->id, err);
        return KL_EXIT_USAGE;
    }
    if (run.o.help) {
        cli_print_help(ch);
        return KL_EXIT_OK;
    }
    if (run.o.list) {
        cli_print_list(ch);
        return KL_EXIT_OK;
    }
    if (run.o.csv && !(run.csv = report_csv_open(run.o.csv))) {
        fprintf(stderr, "%s: --csv '%s': cannot open it for appending\n", ch->id, run.o.csv);
        return KL_EXIT_USAGE;
    }
    int rc;
    if (device_open(&run.dev, run.no_gpu_why, sizeof run.no_gpu_why)) {
        snprintf(run.dev.name, sizeof run.dev.name, "none");
        if (run.o.exercise) {
            fprintf(stderr, "%s: --exercise needs a GPU: %s\n", ch->id, run.no_gpu_why);
            rc = KL_EXIT_CUDA;
        } else {
            rc = run_ladder(&run, NULL, 0);
        }
    } else {
        run.on_gpu = 1;
        run.copy_gbps = measure_copy_gbps(&run.dev);
        timer_init(&run.timer, &run.dev);
        if (run.o.exercise) {
            rc = run_exercise(&run);
        } else {
            const struct rung *all[KL_MAX_RUNGS];
            int n = 0;
            for (int i = 0; i < ch->n_rungs && i < KL_MAX_RUNGS; i++)
                if (run.o.run_rung[i])
                    all[n++] = &ch->rungs[i];
            rc = run_ladder(&run, all, n);
        }
        timer_destroy(&run.timer);
    }
    if (run.csv)
        fclose(run.csv);
    if (rc)
        return rc;
    return run.failed ? KL_EXIT_WRONG : KL_EXIT_OK;
}

int ladder_gpu_present(char *why, size_t why_len)
{
    int fds[2];
    if (pipe(fds))
        return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct device_info d;
        char msg[256] = "";
        int ok = device_open(&d, msg, sizeof msg) == 0;
        if (!ok && write(fds[1], msg, strlen(msg)) < 0)
            _exit(2);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = pid > 0 ? read(fds[0], why, why_len - 1) : -1;
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int ladder_check(const struct chapter *ch, const struct rung *r, int pass, enum dtype t,
                 const char *shape_text, uint64_t seed, struct verify_result *res, char *why,
                 size_t why_len)
{
    struct shape s;
    if (shape_parse(shape_text, &s, why, why_len) ||
        (ch->check_shape && ch->check_shape(&s, why, why_len)))
        return 2;
    if (!r->launch[pass] || !(r->dtypes & (1u << t))) {
        snprintf(why, why_len, "%s has no %s %s", r->name, ch->passes[pass], dtype_name(t));
        return -1;
    }
    struct problem p;
    if (problem_init(&p, ch, pass, t, &s, why, why_len) ||
        problem_alloc_host(&p, why, why_len))
        return 2;
    struct rng rng = rng_seeded(seed);
    ch->fill(&p, &rng);
    ch->reference(&p);
    struct device_info dev;
    if (device_open(&dev, why, why_len) == 0) {
        const char *skip = ladder_unsupported(r, &p, dev.cc);
        if (skip) {
            snprintf(why, why_len, "%s", skip);
            problem_free(&p);
            return -1;
        }
    } else {
        problem_free(&p);
        return -1;
    }
    struct pool pl;
    if (pool_create(&pl, &p, workspace_bytes(ch, &p), 1, why, why_len)) {
        problem_free(&p);
        return 2;
    }
    int bad_tensor;
    *res = pool_verify(&pl, &p, r->launch[pass], r->outputs_not_written[pass], 0, &bad_tensor);
    pool_destroy(&pl);
    problem_free(&p);
    return res->ok ? 0 : 1;
}
