/* A problem's host side: its tensors, random inputs and the reference answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ladder.h"

int problem_init(struct problem *p, const struct chapter *ch, int pass, enum dtype t,
                 const struct shape *s, char *why, size_t why_len)
{
    memset(p, 0, sizeof *p);
    p->pass = pass;
    p->dtype = t;
    p->shape = *s;
    p->reduction_len = 1;
    ch->describe(p);
    for (int i = 0; i < p->n_in + p->n_out; i++) {
        const struct tensor *x = i < p->n_in ? &p->in[i] : &p->out[i - p->n_in];
        if (x->count == 0 || x->count > ((size_t)1 << 48)) {
            snprintf(why, why_len, "tensor %s of %s has %zu elements", x->name, s->text, x->count);
            return -1;
        }
    }
    return 0;
}

static double physical_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
}

void *host_alloc(size_t bytes)
{
    /* Large buffers in 2 MiB pages where the kernel allows: a 2^28-element problem touches
     * gigabytes, and faulting them in 4 KiB at a time took longer than the GPU work. */
    enum { HUGE_PAGE = 2 << 20 };
    if (bytes < 8 * (size_t)HUGE_PAGE)
        return malloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, bytes))
        return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

int problem_alloc_host(struct problem *p, char *why, size_t why_len)
{
    /* Inputs, the reference in double, and room to copy the outputs back. */
    double need = 0;
    for (int i = 0; i < p->n_in; i++)
        need += (double)p->in[i].count * (double)dtype_size(p->in[i].type);
    for (int i = 0; i < p->n_out; i++)
        need += (double)p->out[i].count * (8.0 + (double)dtype_size(p->out[i].type));
    if (need > 0.8 * physical_memory_bytes()) {
        snprintf(why, why_len, "out of host memory: %s needs %.1f GB, this machine has %.1f GB",
                 p->shape.text, need / 1e9, physical_memory_bytes() / 1e9);
        return -1;
    }
    for (int i = 0; i < p->n_in; i++)
        p->host_in[i] = host_alloc(p->in[i].count * dtype_size(p->in[i].type));
    for (int i = 0; i < p->n_out; i++)
        p->ref_out[i] = host_alloc(p->out[i].count * sizeof(double));
    for (int i = 0; i < p->n_in; i++)
        if (!p->host_in[i])
            goto oom;
    for (int i = 0; i < p->n_out; i++)
        if (!p->ref_out[i])
            goto oom;
    return 0;
oom:
    problem_free(p);
    snprintf(why, why_len, "out of host memory: %s needs %.1f GB", p->shape.text, need / 1e9);
    return -1;
}

void problem_free(struct problem *p)
{
    for (int i = 0; i < KL_MAX_TENSORS; i++) {
        free(p->host_in[i]);
        free(p->ref_out[i]);
        p->host_in[i] = NULL;
        p->ref_out[i] = NULL;
    }
}

void fill_uniform(void *buf, enum dtype t, size_t n, struct rng *r, double lo, double hi)
{
    switch (t) {
    case DT_FP32:
        for (size_t i = 0; i < n; i++)
            ((float *)buf)[i] = (float)rng_uniform(r, lo, hi);
        break;
    case DT_FP16:
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)buf)[i] = half_from_float((float)rng_uniform(r, lo, hi));
        break;
    case DT_I32:
        for (size_t i = 0; i < n; i++)
            ((int32_t *)buf)[i] = (int32_t)(lo + (double)rng_below(r, (uint64_t)(hi - lo)));
        break;
    case DT_U8:
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)buf)[i] = (uint8_t)(lo + (double)rng_below(r, (uint64_t)(hi - lo)));
        break;
    }
}
