/* The CPU reference for cross-entropy, in double, reading the very values the GPU reads.
 *
 * Row n has logits x_n[0..C) and label y_n. With m_n the row's maximum (subtracted so that no
 * exp overflows, whatever the logits' magnitude) and s_n = sum_c exp(x_n[c] - m_n):
 *   loss       = (1/N) sum_n ((m_n - x_n[y_n]) + log s_n)      (= logsumexp(x_n) - x_n[y_n])
 *   dx_n[c]    = (exp((x_n[c] - m_n) - log s_n) - [c == y_n]) / N
 * A label outside [0, C) has no logit to pick: its row's loss term and gradient row are NaN, so
 * the mean loss is NaN too. The GPU rungs do the same, and verify() accepts NaN only where the
 * reference has NaN. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cross_entropy.h"

static int label_ok(int32_t label, size_t n_classes)
{
    return label >= 0 && (size_t)label < n_classes;
}

int64_t ce_check_labels(const int32_t *labels, size_t n_rows, size_t n_classes, char *why,
                        size_t why_len)
{
    for (size_t n = 0; n < n_rows; n++) {
        if (!label_ok(labels[n], n_classes)) {
            snprintf(why, why_len, "label %zu is %" PRId32 "; labels must lie in [0, %zu)", n,
                     labels[n], n_classes);
            return (int64_t)n;
        }
    }
    return -1;
}

/* The row's maximum m and log_sum = log(sum_c exp(x[c] - m)): logsumexp = m + log_sum. Kept
 * apart, so that (m - x[label]) + log_sum does not round a large m + log_sum first. */
static void row_max_and_log_sum(const void *x, enum dtype t, size_t row, size_t n_classes,
                                double *m, double *log_sum)
{
    size_t base = row * n_classes;
    double top = load_as_double(x, t, base);
    for (size_t c = 1; c < n_classes; c++) {
        double v = load_as_double(x, t, base + c);
        if (v > top)
            top = v;
    }
    double s = 0;
    for (size_t c = 0; c < n_classes; c++)
        s += exp(load_as_double(x, t, base + c) - top);
    *m = top;
    *log_sum = log(s);
}

double ce_row_logsumexp(const void *x, enum dtype t, size_t row, size_t n_classes)
{
    double m, log_sum;
    row_max_and_log_sum(x, t, row, n_classes, &m, &log_sum);
    return m + log_sum;
}

void ce_forward_reference(const void *x, enum dtype t, const int32_t *labels, size_t n_rows,
                          size_t n_classes, double *loss)
{
    double sum = 0;
    for (size_t n = 0; n < n_rows; n++) {
        if (!label_ok(labels[n], n_classes)) {
            sum = NAN;
            continue;
        }
        double m, log_sum;
        row_max_and_log_sum(x, t, n, n_classes, &m, &log_sum);
        sum += (m - load_as_double(x, t, n * n_classes + (size_t)labels[n])) + log_sum;
    }
    *loss = sum / (double)n_rows;
}

void ce_backward_reference(const void *x, enum dtype t, const int32_t *labels, size_t n_rows,
                           size_t n_classes, double *dx)
{
    for (size_t n = 0; n < n_rows; n++) {
        double *row = dx + n * n_classes;
        if (!label_ok(labels[n], n_classes)) {
            for (size_t c = 0; c < n_classes; c++)
                row[c] = NAN;
            continue;
        }
        double m, log_sum;
        row_max_and_log_sum(x, t, n, n_classes, &m, &log_sum);
        for (size_t c = 0; c < n_classes; c++) {
            double p = exp((load_as_double(x, t, n * n_classes + c) - m) - log_sum);
            row[c] = (p - (c == (size_t)labels[n] ? 1.0 : 0.0)) / (double)n_rows;
        }
    }
}
