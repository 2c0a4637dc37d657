/* Median, minimum and maximum of a set of timing samples. */
#ifndef KL_STATS_H
#define KL_STATS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct summary {
    double median, min, max;
};

/* Summarises n >= 1 samples; x is left unchanged. The median of an even count is the mean of
 * the two middle samples. */
struct summary summarize(const double *x, size_t n);

#ifdef __cplusplus
}
#endif
#endif
