/* The CPU reference for the bias gradient, in double, reading the very values the GPU reads.
 * A double holds every partial sum of these inputs to far better than fp32 precision, so the
 * order of the additions does not matter here. */
#include "bias_grad.h"

void bias_grad_reference(const void *dy, enum dtype t, struct bias_grad_size z, double *db)
{
    for (int64_t c = 0; c < z.c; c++)
        db[c] = 0;
    for (int64_t n = 0; n < z.n; n++)
        for (int64_t c = 0; c < z.c; c++) {
            size_t row = (size_t)(n * z.c + c) * (size_t)z.hw;
            double sum = 0;
            for (int64_t i = 0; i < z.hw; i++)
                sum += load_as_double(dy, t, row + (size_t)i);
            db[c] += sum;
        }
}
