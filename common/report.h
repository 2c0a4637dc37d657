/* The table every chapter prints and the CSV rows README.md describes. */
#ifndef KL_REPORT_H
#define KL_REPORT_H

#include <stdio.h>

#include "device.h"
#include "dtype.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

struct result_row {
    const char *chapter, *pass, *variant, *shape;
    enum dtype dtype;
    int timed;              /* 0: no times (unsupported, or not run) */
    struct summary us;      /* per launch */
    double gbps, tflops;    /* exactly one is > 0 when timed */
    double pct_roof;
    double vs_vendor;       /* vendor median / this median; 0 when no vendor row */
    int checked;            /* compared with the reference */
    double max_abs_err, rel_err;
    int verified;
    const char *verdict;    /* ok, FAIL, unverified, unsupported: ... */
    const char *ran;        /* the rung whose kernels ran in this one's place, or NULL */
};

void report_table_header(FILE *f);
void report_table_row(FILE *f, const struct result_row *r);

/* Appends rows to path, writing the header first when the file is new or empty. Returns the
 * file, or NULL with errno set. */
FILE *report_csv_open(const char *path);
void report_csv_row(FILE *f, const struct result_row *r, const struct device_info *d);

#ifdef __cplusplus
}
#endif
#endif
