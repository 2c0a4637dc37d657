/* The test program's entry: Criterion's own, except that where no GPU can be used the tests
 * marked NEEDS_GPU (tests/gpu.h) are disabled first. A disabled test is reported as skipped
 * without a worker process, and a worker costs a third of a second here: the program loads
 * cuBLAS and cuDNN each time. */
#include <criterion/criterion.h>
#include <criterion/internal/ordered-set.h>
#include <stdio.h>
#include <string.h>

#include "gpu.h"

static int needs_gpu(const struct criterion_test *t)
{
    return t->data->description && !strcmp(t->data->description, KL_NEEDS_GPU);
}

/* Returns how many tests it disabled. */
static size_t disable_gpu_tests(struct criterion_test_set *set)
{
    size_t n = 0;
    for (struct criterion_ordered_set_node *s = set->suites->first; s; s = s->next) {
        struct criterion_suite_set *suite = (void *)(s + 1);
        if (!suite->tests)
            continue;
        for (struct criterion_ordered_set_node *t = suite->tests->first; t; t = t->next) {
            struct criterion_test *test = (void *)(t + 1);
            if (needs_gpu(test) && !test->data->disabled) {
                test->data->disabled = true;
                n++;
            }
        }
    }
    return n;
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    if (!criterion_handle_args(argc, argv, true))
        return 0;
    char why[256];
    if (ladder_gpu_present(why, sizeof why)) {
        printf("GPU tests run on the GPU present\n");
    } else {
        size_t n = disable_gpu_tests(tests);
        printf("GPU tests skip: %s (%zu GPU tests, each with all its cases)\n", why, n);
    }
    fflush(stdout);
    int result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
