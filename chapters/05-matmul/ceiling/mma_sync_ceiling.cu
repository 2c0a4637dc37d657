/* The ceiling of v9's instruction: how many TFLOP/s mma.sync m16n8k16 (fp16 in, fp32
 * accumulate) can deliver on this GPU when nothing else runs. It is measured twice.
 *   1. Registers only: every warp issues independent mma.syncs on operands that never leave
 *      its registers: no loads, no shared memory, no barriers, so the only limit is how often
 *      the tensor cores take the instruction.
 *   2. Fed from shared memory in v9's shape: one block of 8 warps an SM, each multiplying a
 *      64 x 64 tile as 4 x 8 mma tiles (32 accumulators of 4), its operands read by ldmatrix
 *      from a 128 x 64 tile of A and a 64 x 256 tile of B in swizzled shared memory, one k16
 *      step ahead, as v9 reads them. Only the global memory is missing: no copies, no waits for
 *      them, no barrier, no C to store.
 *
 * A GEMM made of mma.sync can only come near these figures, never above them: its copies,
 * address arithmetic, barriers and stores share the issue slots and shared memory. v9, cuBLAS's
 * own sm_80 kernels (vendor_mma_sync) and cuBLAS's wgmma kernels are measured against them in
 * chapter 05's README. The SM clock is reported too: these loops draw the GPU's full power.
 *
 * The operands are 1 (A) and 1/16 (B), so every mma.sync adds exactly 16 * 1/16 = 1 to each
 * accumulator, and every accumulator must end holding the number of mma.syncs it took: the
 * program checks it.
 * Run: build/bin/05-mma-sync-ceiling (no flags). Exit status 0 measured (or unsupported), 1 a
 * wrong accumulator, 2 bad usage, 3 a CUDA error or no GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "check.h"
#include "stats.h"

#define ACCUMULATORS 8      /* independent mma.syncs in flight per warp: enough to hide latency */
#define WARPS_PER_BLOCK 8
#define RUNS 7
#define TARGET_MS 20.f      /* per run */
#define MAX_MMAS (1 << 22)  /* per accumulator: below 2^24, where fp32 stops counting in ones */
#define FLOP_PER_MMA (2.0 * 16 * 8 * 16)

/* v9's shape, for the loop fed from shared memory. */
#define MMA_M 4             /* a warp's 64 x 64 tile: 4 x 8 mma tiles */
#define MMA_N 8
#define K_STEPS 4           /* k16 steps in a 64-deep tile */
#define A_ROWS 128          /* the block's tile of A: 128 x 64, rows of 128 bytes */
#define B_COLS 256          /* of B: 64 x 256, rows of 512 bytes */

#define FP16X2_ONE 0x3c003c00u       /* two fp16 1.0 */
#define FP16X2_SIXTEENTH 0x2c002c00u /* two fp16 0.0625 */

__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Thread 0 of block 0 records the SM cycles and nanoseconds of its loop. */
__device__ __forceinline__ void record_clock(long long t0, uint64_t ns0, long long *cycles_and_ns)
{
    uint64_t ns1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns1));
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cycles_and_ns[0] = clock64() - t0;
        cycles_and_ns[1] = (long long)(ns1 - ns0);
    }
}

/* Each warp runs `iterations` rounds of ACCUMULATORS mma.syncs on registers and stores its
 * accumulators. */
__global__ void mma_sync_loop(float *sums, int iterations, long long *cycles_and_ns)
{
#if __CUDA_ARCH__ >= 800
    const uint32_t a[4] = {FP16X2_ONE, FP16X2_ONE, FP16X2_ONE, FP16X2_ONE};
    const uint32_t b[2] = {FP16X2_SIXTEENTH, FP16X2_SIXTEENTH};
    float c[ACCUMULATORS][4] = {};
    const long long t0 = clock64();
    uint64_t ns0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0));
    for (int i = 0; i < iterations; i++) {
#pragma unroll
        for (int j = 0; j < ACCUMULATORS; j++)
            mma_16816(c[j], a, b);
    }
    record_clock(t0, ns0, cycles_and_ns);
    float *mine = sums + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * ACCUMULATORS * 4;
    for (int j = 0; j < ACCUMULATORS; j++)
        for (int e = 0; e < 4; e++)
            mine[j * 4 + e] = c[j][e];
#else
    (void)sums;
    (void)iterations;
    (void)cycles_and_ns;
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr, bool trans)
{
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
}

/* v9's swizzle for rows of at least 8 chunks: chunk c of row r at c XOR (r mod 8). */
__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int chunks)
{
    return (uint32_t)(row * chunks + (chunk ^ (row & 7))) * 16;
}

struct fragments {
    uint32_t a[MMA_M][4];
    uint32_t b[MMA_N][2];
};

/* Step ks of the warp's operands, as v9's load_fragments reads them: lane l addresses row
 * l % 16 of a 16-row block at chunk 2 ks + l / 16 of A, and B's rows (k) likewise, transposed. */
__device__ __forceinline__ void load_fragments(struct fragments *f, uint32_t a_tile,
                                               uint32_t b_tile, int warp_row, int warp_col,
                                               int ks)
{
    const int lane = threadIdx.x % 32, lrow = lane % 16, lchunk = lane / 16;
#pragma unroll
    for (int i = 0; i < MMA_M; i++)
        ldmatrix_x4(f->a[i], a_tile + swizzled(warp_row + 16 * i + lrow, 2 * ks + lchunk, 8),
                    false);
#pragma unroll
    for (int j = 0; j < MMA_N; j += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, b_tile + swizzled(16 * ks + lrow, warp_col / 8 + j + lchunk, B_COLS / 8),
                    true);
        f->b[j][0] = r[0];
        f->b[j][1] = r[1];
        f->b[j + 1][0] = r[2];
        f->b[j + 1][1] = r[3];
    }
}

/* v9's inner loop without global memory: the block's tiles of A (all 1) and B (all 1/16) are
 * written to shared memory once; then every warp walks their K_STEPS k16 steps `iterations`
 * times, loading each step's fragments while the previous step is multiplied. */
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32, 1)
    mma_sync_from_shared(float *sums, int iterations, long long *cycles_and_ns)
{
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(128) uint32_t tile_a[A_ROWS * 64 / 2], tile_b[64 * B_COLS / 2];
    for (int i = threadIdx.x; i < A_ROWS * 64 / 2; i += blockDim.x)
        tile_a[i] = FP16X2_ONE;
    for (int i = threadIdx.x; i < 64 * B_COLS / 2; i += blockDim.x)
        tile_b[i] = FP16X2_SIXTEENTH;
    __syncthreads();
    const uint32_t a_tile = (uint32_t)__cvta_generic_to_shared(tile_a);
    const uint32_t b_tile = (uint32_t)__cvta_generic_to_shared(tile_b);
    const int warp = threadIdx.x / 32;
    const int warp_row = warp / 4 * 64, warp_col = warp % 4 * 64; /* v9's 2 x 4 warps */
    float c[MMA_M][MMA_N][4] = {};
    struct fragments f[2];
    const long long t0 = clock64();
    uint64_t ns0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0));
    load_fragments(&f[0], a_tile, b_tile, warp_row, warp_col, 0);
    for (int i = 0; i < iterations; i++) {
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ks++) {
            load_fragments(&f[(ks + 1) % 2], a_tile, b_tile, warp_row, warp_col,
                           (ks + 1) % K_STEPS);
#pragma unroll
            for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
                for (int ni = 0; ni < MMA_N; ni++)
                    mma_16816(c[mi][ni], f[ks % 2].a[mi], f[ks % 2].b[ni]);
        }
    }
    record_clock(t0, ns0, cycles_and_ns);
    float *mine = sums + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * MMA_M * MMA_N * 4;
#pragma unroll
    for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
        for (int ni = 0; ni < MMA_N; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                mine[(mi * MMA_N + ni) * 4 + e] = c[mi][ni][e];
#else
    (void)sums;
    (void)iterations;
    (void)cycles_and_ns;
#endif
}

/* One measurement: a kernel, how many blocks an SM it runs, and what one iteration does. */
struct loop {
    const char *what;
    void (*kernel)(float *, int, long long *);
    int blocks_per_sm;
    int mmas_per_iteration;   /* per warp */
    int gain_per_iteration;   /* mma.syncs into each accumulator, each adding 1 */
    int floats_per_thread;    /* accumulators it stores */
};

static const struct loop loops[] = {
    {"registers only", mma_sync_loop, 2, ACCUMULATORS, 1, ACCUMULATORS * 4},
    {"fed by ldmatrix from shared memory as in v9 (8 warps an SM, 64 x 64 each; no global "
     "memory)",
     mma_sync_from_shared, 1, K_STEPS * MMA_M * MMA_N, K_STEPS, MMA_M * MMA_N * 4},
};

/* Milliseconds one launch of `iterations` took. */
static float time_launch(const struct loop *l, int blocks, float *sums, int iterations,
                         long long *cycles_and_ns)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
    l->kernel<<<blocks, WARPS_PER_BLOCK * 32>>>(sums, iterations, cycles_and_ns);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
}

/* Whether every accumulator of the last launch holds `expected`; names the first that does
 * not. */
static int accumulators_hold(const float *sums, size_t count, double expected)
{
    float *host = (float *)malloc(count * sizeof *host);
    if (!host) {
        fprintf(stderr, "out of host memory for %zu accumulators\n", count);
        exit(KL_EXIT_CUDA);
    }
    CUDA_CHECK(cudaMemcpy(host, sums, count * sizeof *host, cudaMemcpyDeviceToHost));
    size_t bad = count;
    for (size_t i = 0; i < count && bad == count; i++)
        if (host[i] != (float)expected)
            bad = i;
    if (bad < count)
        fprintf(stderr, "WRONG: accumulator %zu holds %g, expected %g\n", bad, host[bad],
                expected);
    free(host);
    return bad == count;
}

/* Measures one loop and prints its lines. Returns whether its accumulators were right. */
static int measure(const struct loop *l, const cudaDeviceProp *prop)
{
    const int blocks = prop->multiProcessorCount * l->blocks_per_sm;
    const size_t count = (size_t)blocks * WARPS_PER_BLOCK * 32 * l->floats_per_thread;
    float *sums;
    long long *cycles_and_ns;
    CUDA_CHECK(cudaMalloc(&sums, count * sizeof *sums));
    CUDA_CHECK(cudaMalloc(&cycles_and_ns, 2 * sizeof *cycles_and_ns));

    /* Size the runs: a short launch first, then one of about TARGET_MS as a warm-up. Each
     * accumulator must stay an exact integer. */
    const int max_iterations = MAX_MMAS / l->gain_per_iteration;
    int iterations = 1000 < max_iterations ? 1000 : max_iterations;
    for (int pass = 0; pass < 2; pass++) {
        const double scaled =
            iterations * TARGET_MS / time_launch(l, blocks, sums, iterations, cycles_and_ns);
        iterations = scaled < 1 ? 1 : scaled > max_iterations ? max_iterations : (int)scaled;
    }
    double tflops[RUNS];
    for (int r = 0; r < RUNS; r++) {
        const float ms = time_launch(l, blocks, sums, iterations, cycles_and_ns);
        const double mmas = (double)iterations * l->mmas_per_iteration * WARPS_PER_BLOCK * blocks;
        tflops[r] = mmas * FLOP_PER_MMA / (ms * 1e-3) / 1e12;
    }
    long long clock[2];
    CUDA_CHECK(cudaMemcpy(clock, cycles_and_ns, sizeof clock, cudaMemcpyDeviceToHost));
    const int ok = accumulators_hold(sums, count, (double)iterations * l->gain_per_iteration);
    CUDA_CHECK(cudaFree(sums));
    CUDA_CHECK(cudaFree(cycles_and_ns));

    const struct summary rate = summarize(tflops, RUNS);
    const double ghz = (double)clock[0] / (double)clock[1];
    const double flop_per_sm_cycle = rate.median * 1e12 / (prop->multiProcessorCount * ghz * 1e9);
    printf("mma.sync m16n8k16, fp16 in, fp32 accumulate, %s, on %s (%d SMs)\n", l->what,
           prop->name, prop->multiProcessorCount);
    printf("  %.1f TFLOP/s: the median of %d runs of %.0f ms (min %.1f, max %.1f)\n",
           rate.median, RUNS, TARGET_MS, rate.min, rate.max);
    printf("  SM clock in the last run %.2f GHz: %.0f FLOP a cycle an SM, one mma.sync every "
           "%.1f cycles on each of its 4 schedulers\n",
           ghz, flop_per_sm_cycle, 4 * FLOP_PER_MMA / flop_per_sm_cycle);
    printf("  %s\n", ok ? "every accumulator verified" : "FAILED: an accumulator is wrong");
    return ok;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "%s takes no flags (got '%s'): it measures mma.sync's ceiling\n",
                argv[0], argv[1]);
        return KL_EXIT_USAGE;
    }
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        fprintf(stderr, "no CUDA GPU found: the ceiling is a GPU measurement\n");
        return KL_EXIT_CUDA;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("unsupported: mma.sync m16n8k16 needs compute capability 8.0 (%s has %d.%d)\n",
               prop.name, prop.major, prop.minor);
        return KL_EXIT_OK;
    }
    int ok = 1;
    for (size_t i = 0; i < sizeof loops / sizeof loops[0]; i++) {
        if (i > 0)
            printf("\n");
        ok &= measure(&loops[i], &prop);
    }
    return ok ? KL_EXIT_OK : KL_EXIT_WRONG;
}
