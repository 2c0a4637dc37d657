/* v6, early launch: v5's kernels, launched so that each overlaps the start of the next.
 *
 * Idea: at the seed shapes a kernel's own work (one load, two reductions, one store) takes
 * less time than getting it onto the GPU: between two kernels of a stream the GPU drains the
 * first, then launches the second and starts its blocks. Programmatic dependent launch
 * (sm_90) lets the second kernel be launched while the first still runs: every block of the
 * first calls griddepcontrol.launch_dependents as it starts (kl_let_next_grid_start), after
 * which the next kernel's blocks may be placed, and they wait in griddepcontrol.wait
 * (kl_wait_for_previous_grid) until the first kernel has finished and its writes are visible.
 * Nothing is read early, so results are the same whatever the previous kernel wrote.
 * What changed from v5: one launch attribute (launch.cuh); the kernels are v5's, which already
 * make both calls (no-ops under a plain launch).
 * Expected: the benchmark replays back-to-back launches, as a training step does, so each
 * launch hides part of the gap between kernels: an exploratory run on the H200 measured
 * 1.37 us a launch for a plain 8 x 10 softmax kernel and 1.07 us launched early (cold L2).
 * The gain is the same absolute amount at every size, so it shows only at the seed shapes.
 * It depends on the neighbours: a kernel launched early after one that never calls
 * launch_dependents (cuDNN's, here) starts only when that kernel ends, as without it.
 * Limits: v5's, and the shapes v5 leaves to v4 run as v4 does, without the attribute. */
#include "rung_note.h"
#include "softmax.h"

extern "C" void softmax_forward_v6(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v6_early_launch");
    softmax_forward_v5_launch(x, y, d, t, true, s);
}

extern "C" void softmax_backward_v6(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v6_early_launch");
    softmax_backward_v5_launch(y, dy, dx, d, t, true, s);
}
