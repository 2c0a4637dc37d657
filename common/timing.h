/* Kernel time (README.md, Timing). One sample is a CUDA graph that replays a rung K times, K
 * chosen so that a replay lasts at least about 100 us, timed by events around the replay and
 * divided by K. Launch k of a replay works on set k of the pool; when the pool has fewer sets
 * than K, the sets between two uses of one set hold more than twice the L2, and the L2 is
 * flushed before every sample, so every launch reads its inputs from device memory. */
#ifndef KL_TIMING_H
#define KL_TIMING_H

#include "device.h"
#include "pool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_REPLAY_TARGET_US 100.0
#define KL_MAX_LAUNCHES_PER_REPLAY 1000
/* A rung whose samples add up to more than this stops sampling early, after at least
 * KL_MIN_SAMPLES: a naive 8192^3 matmul takes seconds a launch, and twenty of them per dtype
 * would make a sweep of minutes out of one row. Every kernel under 100 ms keeps every sample. */
#define KL_SAMPLING_BUDGET_MS 2000.0
#define KL_MIN_SAMPLES 3

struct timing_opts {
    int iters, warmup, hot_l2, no_graph;
};

struct timer {
    cudaStream_t stream;
    cudaEvent_t start, stop;
    void *flush;          /* written before each cold sample to push everything out of the L2 */
    size_t flush_bytes;
};

void timer_init(struct timer *t, const struct device_info *d);
void timer_destroy(struct timer *t);

/* How many sets a problem's pool needs so that launches cycling through them never find their
 * inputs in the L2. */
int cold_sets_needed(const struct device_info *d, size_t set_bytes);

/* Times launch on p; writes up to o->iters samples, microseconds per launch, into us, and
 * their count into *taken (fewer only past KL_SAMPLING_BUDGET_MS). Returns K, the launches per
 * sample. */
int time_launches(struct timer *t, const struct pool *pl, const struct problem *p,
                  launch_fn launch, const struct timing_opts *o, double *us, int *taken);

#ifdef __cplusplus
}
#endif
#endif
