/* v6, early launch: v5's kernels, launched so that each overlaps the start of the next.
 *
 * Idea: chapter 03's v6, here. At the seed presets a pass is one DRAM round trip plus the
 * mean's trips to L2, and the gap between two kernels of a stream (the first drains, the
 * second is launched and its blocks start) is as long as any of them. Programmatic dependent
 * launch (sm_90) lets the next kernel be launched while this one runs: v5's blocks call
 * griddepcontrol.launch_dependents as they start, and the next kernel's blocks wait in
 * griddepcontrol.wait, before they read a label or a logit, until this kernel has finished and
 * its writes (dx, the loss, the mean's partials and counter) are visible.
 * What changed from v5: one launch attribute (launch.cuh).
 * Expected: a few tenths of a microsecond off every launch that follows another launched the
 * same way, as the benchmark's replays and a training step's kernels do: worth a tenth of the
 * seed presets' time, nothing at the large one.
 * Limits: v5's; the shapes v5 leaves to v4 run as v4 does, without the attribute. */
#include "rung_note.h"
#include "cross_entropy.h"

extern "C" void ce_v6(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v6_early_launch");
    ce_v5_launch(x, labels, loss, dx, n_rows, n_classes, t, true, workspace, s);
}
