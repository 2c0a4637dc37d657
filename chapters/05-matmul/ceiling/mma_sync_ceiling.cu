/* The ceiling of v9's instruction: how many TFLOP/s mma.sync m16n8k16 (fp16 in, fp32
 * accumulate) can deliver on this GPU when nothing else runs. Every warp issues independent
 * mma.syncs on operands that never leave its registers: no loads, no shared memory, no
 * barriers, so the only limit is how often the tensor cores take the instruction.
 *
 * A GEMM made of mma.sync can only come near this figure, never above it: ldmatrix, cp.async,
 * address arithmetic and barriers share its issue slots. v9, cuBLAS's own sm_80 kernels
 * (vendor_mma_sync) and cuBLAS's wgmma kernels are measured against it in chapter 05's README.
 *
 * The operands are 1 (A) and 1/16 (B), so every mma.sync adds exactly 16 * 1/16 = 1 to each
 * accumulator, and after n iterations every accumulator must hold n: the program checks it.
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
#define BLOCKS_PER_SM 2
#define RUNS 7
#define TARGET_MS 20.f      /* per run */
#define MAX_ITERATIONS (1 << 22) /* below 2^24, where fp32 stops counting in ones */
#define FLOP_PER_MMA (2.0 * 16 * 8 * 16)

/* Each warp runs `iterations` rounds of ACCUMULATORS mma.syncs and stores its accumulators;
 * thread 0 of block 0 also records the SM cycles and nanoseconds its loop took. */
__global__ void mma_sync_loop(float *sums, int iterations, long long *cycles_and_ns)
{
#if __CUDA_ARCH__ >= 800
    const uint32_t one = 0x3c003c00u;     /* two fp16 1.0 */
    const uint32_t sixteenth = 0x2c002c00u; /* two fp16 0.0625 */
    float c[ACCUMULATORS][4] = {};
    long long t0 = clock64();
    uint64_t ns0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0));
    for (int i = 0; i < iterations; i++) {
#pragma unroll
        for (int j = 0; j < ACCUMULATORS; j++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                         "{%4,%4,%4,%4}, {%5,%5}, {%0,%1,%2,%3};"
                         : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                         : "r"(one), "r"(sixteenth));
    }
    long long t1 = clock64();
    uint64_t ns1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns1));
    float *mine = sums + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * ACCUMULATORS * 4;
    for (int j = 0; j < ACCUMULATORS; j++)
        for (int e = 0; e < 4; e++)
            mine[j * 4 + e] = c[j][e];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cycles_and_ns[0] = t1 - t0;
        cycles_and_ns[1] = (long long)(ns1 - ns0);
    }
#else
    (void)sums;
    (void)iterations;
    (void)cycles_and_ns;
#endif
}

/* Milliseconds one launch of `iterations` took. */
static float time_launch(int blocks, float *sums, int iterations, long long *cycles_and_ns)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
    mma_sync_loop<<<blocks, WARPS_PER_BLOCK * 32>>>(sums, iterations, cycles_and_ns);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
}

/* Whether every accumulator of the last launch holds `iterations`; names the first that does
 * not. */
static int accumulators_hold(const float *sums, size_t count, int iterations)
{
    float *host = (float *)malloc(count * sizeof *host);
    if (!host) {
        fprintf(stderr, "out of host memory for %zu accumulators\n", count);
        exit(KL_EXIT_CUDA);
    }
    CUDA_CHECK(cudaMemcpy(host, sums, count * sizeof *host, cudaMemcpyDeviceToHost));
    size_t bad = count;
    for (size_t i = 0; i < count && bad == count; i++)
        if (host[i] != (float)iterations)
            bad = i;
    if (bad < count)
        fprintf(stderr, "WRONG: accumulator %zu holds %g, expected %d\n", bad, host[bad],
                iterations);
    free(host);
    return bad == count;
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
    const int blocks = prop.multiProcessorCount * BLOCKS_PER_SM;
    const size_t count = (size_t)blocks * WARPS_PER_BLOCK * 32 * ACCUMULATORS * 4;
    float *sums;
    long long *cycles_and_ns;
    CUDA_CHECK(cudaMalloc(&sums, count * sizeof *sums));
    CUDA_CHECK(cudaMalloc(&cycles_and_ns, 2 * sizeof *cycles_and_ns));

    /* Size the runs: a short launch first, then one of about TARGET_MS as a warm-up. At most
     * MAX_ITERATIONS, so that every accumulator stays an exact integer in fp32. */
    int iterations = 1000;
    for (int pass = 0; pass < 2; pass++) {
        const double scaled =
            iterations * TARGET_MS / time_launch(blocks, sums, iterations, cycles_and_ns);
        iterations = scaled < 1 ? 1 : scaled > MAX_ITERATIONS ? MAX_ITERATIONS : (int)scaled;
    }
    double tflops[RUNS];
    for (int r = 0; r < RUNS; r++) {
        const float ms = time_launch(blocks, sums, iterations, cycles_and_ns);
        const double mmas = (double)iterations * ACCUMULATORS * WARPS_PER_BLOCK * blocks;
        tflops[r] = mmas * FLOP_PER_MMA / (ms * 1e-3) / 1e12;
    }
    long long clock[2];
    CUDA_CHECK(cudaMemcpy(clock, cycles_and_ns, sizeof clock, cudaMemcpyDeviceToHost));
    const int ok = accumulators_hold(sums, count, iterations);
    CUDA_CHECK(cudaFree(sums));
    CUDA_CHECK(cudaFree(cycles_and_ns));

    const struct summary rate = summarize(tflops, RUNS);
    const double ghz = (double)clock[0] / (double)clock[1];
    const double flop_per_sm_cycle = rate.median * 1e12 / (prop.multiProcessorCount * ghz * 1e9);
    printf("mma.sync m16n8k16, fp16 in, fp32 accumulate, registers only, on %s (%d SMs)\n",
           prop.name, prop.multiProcessorCount);
    printf("  %.1f TFLOP/s: the median of %d runs of %.0f ms (min %.1f, max %.1f)\n",
           rate.median, RUNS, TARGET_MS, rate.min, rate.max);
    printf("  SM clock in the last run %.2f GHz: %.0f FLOP a cycle an SM, one mma.sync every "
           "%.1f cycles on each of its 4 schedulers\n",
           ghz, flop_per_sm_cycle, 4 * FLOP_PER_MMA / flop_per_sm_cycle);
    printf("  %s\n", ok ? "every accumulator verified" : "FAILED: an accumulator is wrong");
    return ok ? KL_EXIT_OK : KL_EXIT_WRONG;
}
