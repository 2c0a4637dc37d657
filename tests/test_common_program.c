/* What a new user meets first: the messages and rows a chapter's program prints with and
 * without a GPU. Tests that need the GPU to be absent skip where one is present. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bias_grad.h"
#include "check.h"
#include "cli.h"
#include "cross_entropy.h"
#include "device.h"
#include "gpu.h"
#include "matmul.h"
#include "maxpool.h"
#include "relu.h"
#include "report.h"
#include "softmax.h"

#define SKIP_WITH_GPU()                                                                        \
    do {                                                                                       \
        char why_[256];                                                                        \
        if (ladder_gpu_present(why_, sizeof why_))                                             \
            cr_skip_test("a test of the machine without a GPU; this one has one");           \
    } while (0)

/* The run printed nothing on stdout and exactly one line on stderr, which says `must_say`. */
static void expect_one_line_saying(const char *must_say)
{
    char out[4096], err[4096];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    read_redirected(cr_get_redirected_stderr(), err, sizeof err);
    cr_expect_str_eq(out, "", "nothing but the one line: stdout had %s", out);
    cr_expect_eq(count_lines(err), 1, "one line: %s", err);
    cr_expect(strstr(err, must_say) != NULL, "the line was: %s", err);
}

/* The runtime blames an old driver where there is no driver at all: the message must not. */
Test(program_without_gpu, says_no_gpu_or_driver_plainly)
{
    SKIP_WITH_GPU();
    struct device_info d;
    char why[256] = "";
    cr_assert_neq(device_open(&d, why, sizeof why), 0);
    cr_expect(strstr(why, "no NVIDIA GPU") != NULL, "the message was: %s", why);
    cr_expect(strstr(why, "insufficient") == NULL, "the message was: %s", why);
}

Test(program_without_gpu, exercise_exits_3_in_one_line, .init = redirect_output)
{
    SKIP_WITH_GPU();
    const char *argv[] = {"01-relu", "--exercise"};
    cr_expect_eq(ladder_main(&relu_chapter, 2, (char **)argv), KL_EXIT_CUDA);
    expect_one_line_saying("needs a GPU");
}

/* 2048^3 is past the full reference's limit, so the reference computes 16 rows and 16
 * columns of C: its rate must count those multiply-adds, not all 2048^3 of them. */
Test(program_without_gpu, sampled_reference_counts_the_work_it_did, .init = redirect_output)
{
    SKIP_WITH_GPU();
    const char *argv[] = {"05-matmul", "--shape", "2048", "--dtype", "fp32", "--iters", "1"};
    cr_assert_eq(ladder_main(&matmul_chapter, 7, (char **)argv), KL_EXIT_OK);
    char out[8192];
    read_redirected(cr_get_redirected_stdout(), out, sizeof out);
    const char *row = strstr(out, "\nfwd ");
    cr_assert(row, "no row in: %s", out);
    cr_expect(strstr(row, "reference, sampled") != NULL, "the row was: %s", row);
    const char *rate = strstr(row, "GFLOP/s");
    cr_assert(rate, "the CPU's rate should be in GFLOP/s: %s", row);
    while (rate > row && rate[-1] == ' ')
        rate--;
    while (rate > row && rate[-1] != ' ')
        rate--;
    const double gflops = atof(rate);
    cr_expect(gflops > 0 && gflops < 200, "two cores in double: %g GFLOP/s is not plausible",
              gflops);
}

/* An out-of-memory run says so in one line and prints no header first. */
Test(program_without_gpu, too_large_for_memory_is_one_line, .init = redirect_output)
{
    SKIP_WITH_GPU();
    const char *argv[] = {"01-relu", "--shape", "100000x100000x1000", "--iters", "1"};
    cr_expect_eq(ladder_main(&relu_chapter, 5, (char **)argv), KL_EXIT_CUDA);
    expect_one_line_saying("memory");
}

/* Rates under 1 TFLOP/s print in GFLOP/s with three figures, so that a CPU's or a tiny
 * product's rate is not "0.00". */
Test(report, small_rates_keep_their_figures)
{
    struct result_row row = {.chapter = "05-matmul", .pass = "fwd", .variant = "cpu",
                             .shape = "256x256x256", .dtype = DT_FP32, .timed = 1,
                             .verdict = "reference"};
    row.us.median = row.us.min = row.us.max = 1000;
    const double rates[] = {2.0, 0.49, 0.0123, 0.0000456};
    const char *const want[] = {"2.00 TFLOP/s", "490 GFLOP/s", "12.3 GFLOP/s", "0.0456 GFLOP/s"};
    for (int i = 0; i < 4; i++) {
        row.tflops = rates[i];
        char line[512];
        FILE *f = fmemopen(line, sizeof line, "w");
        cr_assert(f);
        report_table_row(f, &row);
        fclose(f);
        cr_expect(strstr(line, want[i]) != NULL, "%g TFLOP/s printed as: %s", rates[i], line);
    }
}

/* --list in every chapter: the rung table, then one preset a line, no line past 100 columns. */
static const struct chapter *const chapters[] = {&relu_chapter, &bias_grad_chapter,
                                                 &softmax_chapter, &ce_chapter,
                                                 &matmul_chapter, &maxpool_chapter};

static int is_entry_line(const char *line, const char *name)
{
    return !strncmp(line, "  ", 2) && !strncmp(line + 2, name, strlen(name)) &&
           line[2 + strlen(name)] == ' ';
}

Test(program, list_prints_every_rung_and_one_preset_a_line, .init = redirect_output)
{
    for (size_t c = 0; c < sizeof chapters / sizeof chapters[0]; c++) {
        const struct chapter *ch = chapters[c];
        char out[8192];
        FILE *f = fmemopen(out, sizeof out, "w");
        cr_assert(f);
        FILE *saved = stdout;
        stdout = f;
        cli_print_list(ch);
        stdout = saved;
        fclose(f);
        int longest = 0, rungs = 0, presets = 0;
        for (const char *line = out; *line;) {
            const char *end = strchr(line, '\n');
            int len = end ? (int)(end - line) : (int)strlen(line);
            longest = len > longest ? len : longest;
            for (int i = 0; i < ch->n_rungs; i++)
                rungs += is_entry_line(line, ch->rungs[i].name);
            for (int i = 0; i < ch->n_presets; i++)
                presets += is_entry_line(line, ch->presets[i].name);
            line = end ? end + 1 : line + len;
        }
        cr_expect_eq(rungs, ch->n_rungs, "%s: a line a rung: %s", ch->id, out);
        cr_expect_eq(presets, ch->n_presets, "%s: a line a preset: %s", ch->id, out);
        cr_expect(longest <= 100, "%s: a line of %d columns in: %s", ch->id, longest, out);
    }
}

/* `make profile`'s script refuses bad requests in one line, before it looks for ncu or a GPU.
 * Returns the exit status of `bench/profile args`, its stderr in err (stdout must be empty). */
static int profile_refusal(const char *args, char *err, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "bench/profile %s 2>&1 >/dev/null", args);
    FILE *f = popen(cmd, "r");
    cr_assert(f != NULL, "could not run %s", cmd);
    const size_t n = fread(err, 1, len - 1, f);
    err[n] = '\0';
    const int status = pclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(profile, refuses_bad_requests_in_one_line)
{
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"", "needs CH and VARIANT"},
        {"'' v1", "needs CH and VARIANT"},
        {"99 v1", "names no built chapter"},
        {"01 v1 seed fp64", "DTYPE 'fp64'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[1024];
        cr_expect_eq(profile_refusal(bad[i].args, err, sizeof err), 2, "bench/profile %s: %s",
                     bad[i].args, err);
        cr_expect_eq(count_lines(err), 1, "bench/profile %s: one line, not: %s", bad[i].args,
                     err);
        cr_expect(strstr(err, bad[i].says) != NULL, "bench/profile %s said: %s", bad[i].args,
                  err);
    }
}
