#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static size_t tensor_bytes(const struct tensor *t)
{
    return t->count * dtype_size(t->type);
}

size_t pool_set_bytes(const struct problem *p)
{
    size_t bytes = 0;
    for (int i = 0; i < p->n_in; i++)
        bytes += align256(tensor_bytes(&p->in[i]));
    for (int i = 0; i < p->n_out; i++)
        bytes += align256(tensor_bytes(&p->out[i]));
    return bytes;
}

size_t pool_sets_that_fit(const struct problem *p, size_t workspace_bytes, char *why,
                          size_t why_len)
{
    size_t free_bytes, total, set = pool_set_bytes(p);
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    /* for the libraries' workspaces, the L2 flush and the chapter's workspace */
    size_t margin = ((size_t)256 << 20) + align256(workspace_bytes);
    size_t fits = free_bytes > margin ? (free_bytes - margin) / set : 0;
    if (fits == 0)
        snprintf(why, why_len, "out of GPU memory: %s needs %.2f GB, %.2f GB of %.2f GB is free",
                 p->shape.text, (double)set / 1e9, (double)free_bytes / 1e9, (double)total / 1e9);
    return fits;
}

int pool_create(struct pool *pl, const struct problem *p, size_t workspace_bytes, int want,
                char *why, size_t why_len)
{
    memset(pl, 0, sizeof *pl);
    pl->stride = pool_set_bytes(p);
    size_t off = 0;
    for (int i = 0; i < p->n_in; i++, off = align256(off))
        pl->in_off[i] = off, off += tensor_bytes(&p->in[i]);
    for (int i = 0; i < p->n_out; i++, off = align256(off))
        pl->out_off[i] = off, off += tensor_bytes(&p->out[i]);
    pl->workspace_bytes = workspace_bytes;

    size_t fits = pool_sets_that_fit(p, workspace_bytes, why, why_len);
    if (fits == 0)
        return -1;
    pl->nsets = want < 1 ? 1 : want;
    if ((size_t)pl->nsets > fits)
        pl->nsets = (int)fits;
    if (cudaMalloc((void **)&pl->base, pl->stride * (size_t)pl->nsets) != cudaSuccess ||
        (workspace_bytes && cudaMalloc(&pl->workspace, workspace_bytes) != cudaSuccess)) {
        cudaGetLastError();
        pool_destroy(pl);
        snprintf(why, why_len, "out of GPU memory: %s needs %.2f GB", p->shape.text,
                 (double)(pl->stride * (size_t)pl->nsets) / 1e9);
        return -1;
    }
    for (int i = 0; i < p->n_in; i++)
        CUDA_CHECK(cudaMemcpy(pl->base + pl->in_off[i], p->host_in[i], tensor_bytes(&p->in[i]),
                              cudaMemcpyHostToDevice));
    for (int k = 1; k < pl->nsets; k++)
        for (int i = 0; i < p->n_in; i++)
            CUDA_CHECK(cudaMemcpy(pl->base + (size_t)k * pl->stride + pl->in_off[i],
                                  pl->base + pl->in_off[i], tensor_bytes(&p->in[i]),
                                  cudaMemcpyDeviceToDevice));
    return 0;
}

void pool_destroy(struct pool *pl)
{
    if (pl->base)
        CUDA_CHECK(cudaFree(pl->base));
    if (pl->workspace)
        CUDA_CHECK(cudaFree(pl->workspace));
    pl->base = NULL;
    pl->workspace = NULL;
}

struct launch_args pool_args(const struct pool *pl, const struct problem *p, int set)
{
    struct launch_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    char *base = pl->base + (size_t)(set % pl->nsets) * pl->stride;
    for (int i = 0; i < p->n_in; i++)
        a.in[i] = base + pl->in_off[i];
    for (int i = 0; i < p->n_out; i++)
        a.out[i] = base + pl->out_off[i];
    a.workspace = pl->workspace;
    return a;
}

void pool_zero_workspace(const struct pool *pl, cudaStream_t s)
{
    if (pl->workspace)
        CUDA_CHECK(cudaMemsetAsync(pl->workspace, 0, pl->workspace_bytes, s));
}

void pool_poison_outputs(const struct pool *pl, const struct problem *p, int set, cudaStream_t s)
{
    struct launch_args a = pool_args(pl, p, set);
    for (int i = 0; i < p->n_out; i++)
        CUDA_CHECK(cudaMemsetAsync(a.out[i], 0xff, tensor_bytes(&p->out[i]), s));
}

struct verify_result pool_verify(const struct pool *pl, const struct problem *p, launch_fn launch,
                                 unsigned not_written, cudaStream_t s, int *bad_tensor)
{
    struct launch_args a = pool_args(pl, p, 0);
    pool_poison_outputs(pl, p, 0, s);
    pool_zero_workspace(pl, s);
    launch(&a, s);
    CUDA_CHECK(cudaStreamSynchronize(s));

    struct verify_result all = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    *bad_tensor = -1;
    for (int i = 0; i < p->n_out; i++) {
        if (not_written & (1u << i))
            continue;
        size_t bytes = tensor_bytes(&p->out[i]);
        void *host = host_alloc(bytes);
        if (!host) {
            fprintf(stderr, "out of host memory copying %s back (%zu bytes)\n", p->out[i].name,
                    bytes);
            exit(KL_EXIT_CUDA);
        }
        CUDA_CHECK(cudaMemcpy(host, a.out[i], bytes, cudaMemcpyDeviceToHost));
        struct verify_result r = verify(host, p->out[i].type, p->ref_out[i], p->out[i].count,
                                        tolerance_for(p->out[i].type, p->reduction_len));
        free(host);
        if (!r.ok && all.ok) {
            all.ok = 0;
            all.first_bad = r.first_bad;
            all.bad_out = r.bad_out;
            all.bad_ref = r.bad_ref;
            *bad_tensor = i;
        }
        all.n_bad += r.n_bad;
        all.n_checked += r.n_checked;
        all.n_total += r.n_total;
        if (r.max_abs_err > all.max_abs_err) all.max_abs_err = r.max_abs_err;
        if (r.max_rel_err > all.max_rel_err) all.max_rel_err = r.max_rel_err;
        if (r.norm_rel_err > all.norm_rel_err) all.norm_rel_err = r.norm_rel_err;
    }
    return all;
}
