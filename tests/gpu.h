/* GPU tests skip, saying why, where no GPU can be used. The runner process never initialises
 * CUDA itself (ladder_gpu_present asks in a child), so the forked test workers still can. */
#ifndef TESTS_GPU_H
#define TESTS_GPU_H

#include <criterion/criterion.h>

#include "ladder.h"

#define SKIP_WITHOUT_GPU()                                                                     \
    do {                                                                                       \
        char why_[256];                                                                        \
        if (!ladder_gpu_present(why_, sizeof why_))                                            \
            cr_skip_test("GPU test skipped: %s", why_);                                        \
    } while (0)

#endif
