/* v4, split every row into chunks; warp shuffles; 16-byte loads; a second pass.
 *
 * Idea: make the work units small and numerous whatever C is. dy is n x c rows of hw
 * contiguous elements; every row is cut into chunks of CHUNK elements (THREADS threads x
 * UNROLL packs of 16 bytes), one block per chunk, one-shot as in chapter 01's v5. A block
 * loads its chunk with 16-byte loads (a scalar path takes rows that are not 16-byte aligned
 * and the ragged end of a row), adds in fp32 registers, reduces across the warp with
 * __shfl_down_sync (no shared memory, no __syncthreads inside a warp) and across the block's
 * 8 warps through 8 shared floats, and writes one partial sum. A second kernel adds each
 * channel's n x chunks partials in a fixed order and stores db.
 * What changed from v3: the grid is n x c x chunks blocks instead of c (4096 at the seed
 * shape, 65536 at the large one, and still thousands when C = 1), the loads are 4x (fp32) or
 * 8x (fp16) wider, and the tree is shuffles.
 * Expected: the bytes are dy once plus a few partials; a read-only stream should run close to
 * the copy roof, and at the seed shape well ahead of cuDNN (about 104 us there, for 64 MB).
 * The result is deterministic: no atomics, a fixed order of additions. */
#include "bias_grad.cuh"

#define THREADS 256
#define UNROLL 4

/* A block's chunk: THREADS threads x UNROLL packs of 16 bytes, summed in fp32 registers. */
template <typename T> struct v4_chunk {
    static constexpr int threads = THREADS;
    static constexpr int64_t elements = (int64_t)THREADS * UNROLL * pack16<T>::width;

    /* This thread's share of the sum of row[begin, end): 16-byte loads where the chunk is
     * aligned (the same for the whole block), scalar loads for the rest. */
    static __device__ float sum(const T *__restrict__ row, int64_t begin, int64_t end)
    {
        using pack = pack16<T>;
        float sum = 0.f;
        int64_t vector_end = begin;
        if (aligned16(row + begin)) {
            int64_t n_packs = (end - begin) / pack::width;
            const uint4 *packs = reinterpret_cast<const uint4 *>(row + begin);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                int64_t i = (int64_t)u * THREADS + threadIdx.x;
                if (i < n_packs) {
                    pack v;
                    v.raw = packs[i];
#pragma unroll
                    for (int j = 0; j < pack::width; j++)
                        sum += to_float(v.e[j]);
                }
            }
            vector_end = begin + n_packs * pack::width;
        }
        for (int64_t i = vector_end + threadIdx.x; i < end; i += THREADS)
            sum += to_float(row[i]);
        return sum;
    }
};

extern "C" void bias_grad_v4(const void *dy, void *db, struct bias_grad_size z, enum dtype t,
                             void *workspace, cudaStream_t s)
{
    kl_note_rung("v4_split_shuffle");
    if (t == DT_FP32)
        bias_grad_launch_chunked<v4_chunk<float>>((const float *)dy, (float *)db, z,
                                                  (float *)workspace, s);
    else
        bias_grad_launch_chunked<v4_chunk<__half>>((const __half *)dy, (__half *)db, z,
                                                   (float *)workspace, s);
}
