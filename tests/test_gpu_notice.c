/* Says once, before any test runs, whether the GPU tests will run or skip, and why. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

#include "ladder.h"

ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
    (void)tests;
    char why[256];
    if (ladder_gpu_present(why, sizeof why))
        printf("GPU tests run on the GPU present\n");
    else
        printf("GPU tests skip: %s\n", why);
    fflush(stdout);
}
