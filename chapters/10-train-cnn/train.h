/* Training an epoch with a step of step.h: the epoch's order, one CUDA graph a batch size
 * (the full batch, and the last, shorter one), replayed with no host synchronisation between
 * steps; and the test set's accuracy. */
#ifndef CNN_TRAIN_H
#define CNN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A step: ours, or the vendor's with its context. */
typedef void (*cnn_step_fn)(struct cnn_state *st, int batch, void *ctx, cudaStream_t s);

struct trainer {
    struct cnn_state *st;
    cnn_step_fn step;
    void *ctx;
    int use_graph;         /* 0: every kernel launched on the stream, step by step */
    int full_steps, tail;  /* steps of max_batch images, and the last batch's size (0: none) */
    int step_limit;        /* train only this many steps of an epoch (0: all) */
    cudaStream_t stream;
    cudaGraphExec_t full_graph, tail_graph;
    int *progress;         /* host-mapped copy of the step counter, for the progress bar */
};

struct epoch_result {
    double seconds;        /* first step's start to last step's end, on the GPU's clock */
    double mean_loss;      /* over the epoch's steps */
    int64_t correct;       /* predictions right, each made before its step's update */
    int64_t images;        /* trained */
    int steps;
};

/* The order of epoch e (0-based): a Fisher-Yates shuffle of 0..count-1 driven by
 * rng_seeded(seed + 1 + e), the same one bench/pytorch/train_cnn.py computes. */
void cnn_epoch_order(uint64_t seed, int epoch, int64_t count, int32_t *order);

/* Captures the graphs (unless use_graph is 0). */
void trainer_init(struct trainer *tr, struct cnn_state *st, cnn_step_fn step, void *ctx,
                  int use_graph);
void trainer_destroy(struct trainer *tr);

/* One epoch in the given order; draws a progress bar on stderr when show_progress. */
void trainer_epoch(struct trainer *tr, const int32_t *order, int show_progress,
                   struct epoch_result *res);

/* Prints where a step's time goes: the median time of each operation of the step (those that
 * call cnn_mark) over `reps` graph replays, the events recorded inside the graph. The replays
 * train: call it on weights that are thrown away afterwards. */
void trainer_breakdown(struct trainer *tr, int reps, FILE *out);

/* The share of the test set (a state made on it) that the weights of `from` classify right,
 * through our forward. */
double cnn_test_accuracy(struct cnn_state *test, const struct cnn_state *from);

#ifdef __cplusplus
}
#endif
#endif
