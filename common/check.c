#include "check.h"

#include <stdio.h>
#include <stdlib.h>

void kl_fail(const char *lib, const char *error, const char *call, const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr, "%s error %s at %s:%d in %s\n", lib, error, file, line, call);
    exit(KL_EXIT_CUDA);
}
