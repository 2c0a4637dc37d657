/* GPU tests skip, saying why, where no GPU can be used. The runner process never initialises
 * CUDA itself (ladder_gpu_present asks in a child), so the forked test workers still can.
 * Also here: the two checks every chapter makes of its exercise checker. */
#ifndef TESTS_GPU_H
#define TESTS_GPU_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "ladder.h"

#define SKIP_WITHOUT_GPU()                                                                     \
    do {                                                                                       \
        char why_[256];                                                                        \
        if (!ladder_gpu_present(why_, sizeof why_))                                            \
            cr_skip_test("GPU test skipped: %s", why_);                                        \
    } while (0)

/* ladder_check's "does not apply" (-1) where the GPU present cannot run the rung at all: too old
 * a GPU for it, or, for code built for one generation (v10's sm_90a), another generation. The
 * program lists such a rung as unsupported there, not failed, so its test skips, saying why.
 * Only those reasons name a compute capability; any other -1 still fails. */
#define SKIP_IF_GPU_LACKS_RUNG(rc, why)                                                        \
    do {                                                                                       \
        if ((rc) == -1 && strstr((why), "compute capability"))                                 \
            cr_skip_test("GPU test skipped: %s", (why));                                       \
    } while (0)

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

/* Runs one of the build's programs, `build/bin/NAME ARGS`, stderr with stdout: its exit status
 * (-1 if it did not exit), and what it printed, cut to `size` - 1 bytes. */
static inline int run_program(const char *name, const char *args, char *said, size_t size)
{
    char command[512];
    snprintf(command, sizeof command, "build/bin/%s %s 2>&1", name, args ? args : "");
    FILE *out = popen(command, "r");
    cr_assert(out, "cannot start %s", command);
    const size_t len = fread(said, 1, size - 1, out);
    said[len] = '\0';
    const int status = pclose(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
