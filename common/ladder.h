/* The ladder: what a chapter declares, and the harness that verifies and times its rungs.
 *
 * A chapter is a table. It names its passes (fwd, bwd, ...), its presets and its rungs, and
 * gives three host functions: describe (the tensors a problem of a given shape reads and
 * writes, and the bytes and FLOPs it must move), fill (random inputs) and reference (the CPU
 * answer, in double). Everything else, from flags to the CSV, is the harness's, the same for
 * every chapter. A rung is a launcher per pass; it must write every output element itself,
 * except for outputs it declares it does not write (a vendor library's, never a rung's). */
#ifndef KL_LADDER_H
#define KL_LADDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "dtype.h"
#include "rng.h"
#include "verify.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_MAX_TENSORS 4
#define KL_MAX_DIMS 8
#define KL_MAX_PARAMS 8
#define KL_MAX_PASSES 4

/* A problem size: dims joined by 'x', then optionally '-', a number of the chapter's (`lead`:
 * the convolutions' filter count) and chapter-defined window parameters, each a lower-case
 * letter and a number (8x64x128x128-k2s2p0, 2x4x64x64-8k3s1p1). `text` is the canonical
 * spelling, written to the table and the CSV, and read back by --shape. */
struct shape {
    int ndims;
    int64_t dim[KL_MAX_DIMS];
    int has_lead;
    int64_t lead;
    int nparams;
    char param_name[KL_MAX_PARAMS];
    int64_t param[KL_MAX_PARAMS];
    char text[128];
};

struct tensor {
    const char *name;
    enum dtype type;
    size_t count;
};

static inline struct tensor tensor_of(const char *name, enum dtype type, size_t count)
{
    struct tensor t;
    t.name = name;
    t.type = type;
    t.count = count;
    return t;
}

struct problem {
    int pass;                     /* index into chapter->passes */
    enum dtype dtype;             /* of the floating-point tensors */
    struct shape shape;
    int n_in, n_out;
    struct tensor in[KL_MAX_TENSORS], out[KL_MAX_TENSORS];
    void *host_in[KL_MAX_TENSORS];  /* inputs as the device holds them */
    double *ref_out[KL_MAX_TENSORS];
    double bytes;                 /* the fewest bytes the pass must move */
    double flops;                 /* 0 for memory-bound passes: the table then shows GB/s */
    size_t reduction_len;         /* terms summed into one output, for the tolerance */
};

/* Device pointers of one set of a problem's tensors, and the workspace (NULL where the chapter
 * needs none): chapter->workspace_bytes(p) bytes, zeroed before a rung's first launch on it,
 * and shared by the sets, whose launches run in order on one stream. */
struct launch_args {
    const struct problem *p;
    const void *in[KL_MAX_TENSORS];
    void *out[KL_MAX_TENSORS];
    void *workspace;
};

typedef void (*launch_fn)(const struct launch_args *a, cudaStream_t stream);

struct rung {
    const char *name;                  /* v3_vector, vendor */
    const char *idea;                  /* one line, for --list */
    launch_fn launch[KL_MAX_PASSES];   /* NULL where the rung lacks that pass */
    unsigned dtypes;                   /* mask of 1u << DT_FP32, 1u << DT_FP16 */
    int min_cc;                        /* e.g. 90 for Hopper-only code; 0 for any */
    /* Optional: NULL when the rung can run p, else why not (the row says "unsupported"). */
    const char *(*unsupported)(const struct problem *p);
    /* Optional: a rung shown for its error (fp16 accumulation, say). Its rows say this text
     * instead of FAIL when it misses the tolerance, and do not fail the run; verified is 0. */
    const char *shown_for_error;
    /* Optional, per pass: a mask (1u << i) of outputs the rung does not write, such as the
     * argmax cuDNN's pooling does not keep. They are not verified; the row says "ok, partial".
     * Zero unless given (C++ rung tables may leave it out: the same layout, a default). */
#ifdef __cplusplus
    unsigned outputs_not_written[KL_MAX_PASSES] = {};
#else
    unsigned outputs_not_written[KL_MAX_PASSES];
#endif
};

struct preset {
    const char *name;
    const char *shape;
    const char *about;
};

struct chapter {
    const char *id;                /* 01-relu: the program, CSV and plot name */
    const char *title;
    const char *shape_help;        /* what --shape means here */
    const char *passes[KL_MAX_PASSES];
    int n_passes;
    const struct preset *presets;  /* the first is the default */
    int n_presets;
    const struct rung *rungs;      /* v1, v2, ..., api, then the vendor rung(s) */
    int n_rungs;
    /* Checks a parsed shape; on failure writes a reason and returns non-zero. */
    int (*check_shape)(const struct shape *s, char *why, size_t why_len);
    /* Sets p->n_in, in[], n_out, out[], bytes, flops, reduction_len from p->shape, pass, dtype. */
    void (*describe)(struct problem *p);
    /* Writes random inputs into p->host_in (already allocated). */
    void (*fill)(struct problem *p, struct rng *r);
    /* Writes p->ref_out (already allocated) from p->host_in. */
    void (*reference)(struct problem *p);
    const struct rung *exercise;   /* the classroom kernel, checked by --exercise */
    const char *const *exercise_shapes; /* NULL-terminated; verified before the timing */
    /* Optional: the bytes of scratch device memory the chapter's rungs share for problem p
     * (counters, partial sums), laid out alike by every rung; NULL where none need any (C++
     * tables may leave it out). */
#ifdef __cplusplus
    size_t (*workspace_bytes)(const struct problem *p) = nullptr;
#else
    size_t (*workspace_bytes)(const struct problem *p);
#endif
};

/* The whole program: flags, header, table, CSV. Returns the exit status. */
int ladder_main(const struct chapter *ch, int argc, char **argv);

/* Whether a CUDA GPU can be used, without leaving CUDA initialised in this process (it asks in
 * a child process, so that a caller may still fork). On 0, why says why not. */
int ladder_gpu_present(char *why, size_t why_len);

/* Builds the problem of one shape, runs rung r once on the GPU and verifies it against the
 * reference. Returns 0 verified, 1 wrong (res says where), -1 the rung does not apply (why says
 * why), 2 bad shape. For tests and --exercise. */
int ladder_check(const struct chapter *ch, const struct rung *r, int pass, enum dtype t,
                 const char *shape_text, uint64_t seed, struct verify_result *res,
                 char *why, size_t why_len);

/* Verifies the exercise rung ex at every exercise shape, in the dtypes of mask dtypes, printing
 * a line per check to out. Returns 0 all right, 1 something wrong, -1 no GPU. */
int ladder_exercise_verify(const struct chapter *ch, const struct rung *ex, unsigned dtypes,
                           uint64_t seed, FILE *out);

/* Why rung r cannot run problem p on a GPU of compute capability cc ("unsupported: ..."), or
 * NULL. The string is static, overwritten by the next call. */
const char *ladder_unsupported(const struct rung *r, const struct problem *p, int cc);

/* Whether r is the chapter's vendor rung, the yardstick of vs_vendor. */
int ladder_is_vendor(const struct rung *r);

/* The chapter's vendor rung (named "vendor"); NULL if it has none. */
const struct rung *ladder_vendor(const struct chapter *ch);

/* Shapes: parse "8x64x128x128-k2s2p0" (0 on success, else a reason) and spell one back. */
int shape_parse(const char *text, struct shape *s, char *why, size_t why_len);
void shape_format(struct shape *s);
int64_t shape_elements(const struct shape *s); /* product of dims */
/* The value of window parameter `name`, or fallback when the shape does not give it. */
int64_t shape_param(const struct shape *s, char name, int64_t fallback);

/* Host helpers for chapters' fill functions. */
void fill_uniform(void *buf, enum dtype t, size_t n, struct rng *r, double lo, double hi);

/* malloc for buffers of any size, in huge pages where it pays; release with free. */
void *host_alloc(size_t bytes);

/* Problem lifetime, for tests that build one by hand. */
int problem_init(struct problem *p, const struct chapter *ch, int pass, enum dtype t,
                 const struct shape *s, char *why, size_t why_len);
int problem_alloc_host(struct problem *p, char *why, size_t why_len);
void problem_free(struct problem *p);

#ifdef __cplusplus
}
#endif
#endif
