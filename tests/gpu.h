/* GPU tests carry NEEDS_GPU among their options. Where no GPU can be used, the test program's
 * main (tests/main.c) disables them before the run, so each skips at no cost instead of
 * starting a worker to find out; the program says once why they skip. The runner never
 * initialises CUDA itself (ladder_gpu_present asks in a child), so the forked test workers
 * still can. Also here: the two checks every chapter makes of its exercise checker, and the
 * lookups several suites share (a rung by name, the GPU's compute capability). */
#ifndef TESTS_GPU_H
#define TESTS_GPU_H

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "ladder.h"

#define KL_NEEDS_GPU "needs a GPU"
#define NEEDS_GPU .description = KL_NEEDS_GPU

/* ladder_check's "does not apply" (-1) where the GPU present cannot run the rung at all: too old
 * a GPU for it, or, for code built for one generation (v10's sm_90a), another generation. The
 * program lists such a rung as unsupported there, not failed, so its test skips, saying why.
 * Only those reasons name a compute capability; any other -1 still fails. */
#define SKIP_IF_GPU_LACKS_RUNG(rc, why)                                                        \
    do {                                                                                       \
        if ((rc) == -1 && strstr((why), "compute capability"))                                 \
            cr_skip_test("GPU test skipped: %s", (why));                                       \
    } while (0)

/* Chapter ch's rung called `name` (the test fails if there is none). */
static inline const struct rung *rung_named(const struct chapter *ch, const char *name)
{
    for (int i = 0; i < ch->n_rungs; i++)
        if (!strcmp(ch->rungs[i].name, name))
            return &ch->rungs[i];
    cr_assert_fail("%s has no rung named %s", ch->id, name);
    return NULL;
}

/* The compute capability of GPU 0, as 10 major + minor. */
static inline int gpu_cc(void)
{
    int major, minor;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    return 10 * major + minor;
}

/* The untouched exercise stub writes nothing, so the checker must fail it in fp32 and name
 * element 0, the first element it left as poison. */
static inline void expect_checker_fails_the_stub(const struct chapter *ch)
{
    FILE *log = tmpfile();
    cr_assert(log);
    cr_expect_eq(ladder_exercise_verify(ch, ch->exercise, 1u << DT_FP32, 1, log), 1);
    char text[4096] = "";
    rewind(log);
    size_t got = fread(text, 1, sizeof text - 1, log);
    text[got] = '\0';
    cr_expect(strstr(text, "WRONG at element 0") != NULL, "the checker said: %s", text);
    fclose(log);
}

/* The checker must pass a correct kernel, `solution`, run in the exercise's place for `pass`. */
static inline void expect_checker_passes(const struct chapter *ch, int pass, launch_fn solution)
{
    struct rung correct = *ch->exercise;
    correct.launch[pass] = solution;
    FILE *log = tmpfile();
    cr_assert(log);
    cr_expect_eq(ladder_exercise_verify(ch, &correct, 1u << DT_FP32, 1, log), 0);
    fclose(log);
}

/* For tests that run a chapter's program in the test process: its table and messages go to
 * Criterion's pipes, which the test may read, never into the test log. */
static inline void redirect_output(void)
{
    cr_redirect_stdout();
    cr_redirect_stderr();
}

/* What a redirected stream (cr_get_redirected_stdout(), say) holds, cut to size - 1 bytes. */
static inline void read_redirected(FILE *f, char *text, size_t size)
{
    fflush(NULL);
    size_t got = f ? fread(text, 1, size - 1, f) : 0;
    text[got] = '\0';
}

static inline int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

/* Runs one of the build's programs, `$KL_BIN/NAME ARGS` (`make test` sets KL_BIN to its
 * $(BUILD)/bin; build/bin without it), stderr with stdout: its exit status (-1 if it did not
 * exit), and what it printed, cut to `size` - 1 bytes. */
static inline int run_program(const char *name, const char *args, char *said, size_t size)
{
    const char *bin = getenv("KL_BIN");
    char command[1024];
    snprintf(command, sizeof command, "%s/%s %s 2>&1", bin && *bin ? bin : "build/bin", name,
             args ? args : "");
    FILE *out = popen(command, "r");
    cr_assert(out, "cannot start %s", command);
    const size_t len = fread(said, 1, size - 1, out);
    said[len] = '\0';
    const int status = pclose(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
