#include "report.h"

#include <string.h>
#include <time.h>

#define CSV_HEADER                                                                             \
    "chapter,pass,variant,dtype,shape,median_us,min_us,max_us,gbps,tflops,pct_roof,vs_vendor,"  \
    "max_abs_err,rel_err,verified,gpu,cc,cuda,date,ran"

void report_table_header(FILE *f)
{
    fprintf(f, "%-10s %-22s %-5s %-22s %10s %19s %14s %6s %9s %9s %9s  %s\n", "pass", "rung",
            "dtype", "shape", "median us", "min-max us", "rate", "%roof", "vs vendor",
            "max abs", "rel err", "verdict");
}

/* Three significant figures for times that span 1 us to 1 s. */
static void format_us(char *buf, size_t len, double us)
{
    if (us >= 100)
        snprintf(buf, len, "%.0f", us);
    else if (us >= 10)
        snprintf(buf, len, "%.1f", us);
    else
        snprintf(buf, len, "%.2f", us);
}

void report_table_row(FILE *f, const struct result_row *r)
{
    char median[32] = "-", range[64] = "-", rate[32] = "-", roof[16] = "-", vendor[16] = "-";
    char abs_err[16] = "-", rel_err[16] = "-";
    if (r->timed) {
        char lo[24], hi[24];
        format_us(median, sizeof median, r->us.median);
        format_us(lo, sizeof lo, r->us.min);
        format_us(hi, sizeof hi, r->us.max);
        snprintf(range, sizeof range, "%s-%s", lo, hi);
        if (r->tflops >= 1)
            snprintf(rate, sizeof rate, "%.2f TFLOP/s", r->tflops);
        else if (r->tflops > 0) /* a CPU or a tiny product: GFLOP/s keeps three figures */
            snprintf(rate, sizeof rate, "%.3g GFLOP/s", 1e3 * r->tflops);
        else
            snprintf(rate, sizeof rate, r->gbps < 10 ? "%.2f GB/s" : "%.0f GB/s", r->gbps);
        if (r->pct_roof > 0)
            snprintf(roof, sizeof roof, "%.1f", r->pct_roof);
        if (r->vs_vendor > 0)
            snprintf(vendor, sizeof vendor, "%.2fx", r->vs_vendor);
    }
    if (r->checked) {
        snprintf(abs_err, sizeof abs_err, "%.2e", r->max_abs_err);
        snprintf(rel_err, sizeof rel_err, "%.2e", r->rel_err);
    }
    fprintf(f, "%-10s %-22s %-5s %-22s %10s %19s %14s %6s %9s %9s %9s  %s%s%s\n", r->pass,
            r->variant, dtype_name(r->dtype), r->shape, median, range, rate, roof, vendor, abs_err,
            rel_err, r->verdict, r->ran ? ", ran " : "", r->ran ? r->ran : "");
}

FILE *report_csv_open(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return NULL;
    if (ftell(f) == 0)
        fprintf(f, "%s\n", CSV_HEADER);
    return f;
}

void report_csv_row(FILE *f, const struct result_row *r, const struct device_info *d)
{
    char cc[16], cuda[16], date[16], gbps[32] = "", tflops[32] = "", vendor[32] = "";
    char abs_err[32] = "", rel_err[32] = "";
    format_cc(d->cc, cc, sizeof cc);
    format_cuda_version(d->runtime_version, cuda, sizeof cuda);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    if (r->tflops > 0)
        snprintf(tflops, sizeof tflops, r->tflops >= 0.01 ? "%.4f" : "%.3e", r->tflops);
    else
        snprintf(gbps, sizeof gbps, "%.2f", r->gbps);
    if (r->vs_vendor > 0)
        snprintf(vendor, sizeof vendor, "%.4f", r->vs_vendor);
    if (r->checked) {
        snprintf(abs_err, sizeof abs_err, "%.3e", r->max_abs_err);
        snprintf(rel_err, sizeof rel_err, "%.3e", r->rel_err);
    }
    fprintf(f, "%s,%s,%s,%s,%s,%.3f,%.3f,%.3f,%s,%s,%.2f,%s,%s,%s,%d,%s,%s,%s,%s,%s\n",
            r->chapter, r->pass, r->variant, dtype_name(r->dtype), r->shape, r->us.median,
            r->us.min, r->us.max, gbps, tflops, r->pct_roof, vendor, abs_err, rel_err,
            r->verified, d->name, cc, cuda, date, r->ran ? r->ran : "");
    fflush(f);
}
