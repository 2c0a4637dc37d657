/* v10, warpgroup MMA fed by the Tensor Memory Accelerator (Hopper, sm_90a).
 *
 * Idea: three Hopper features, each removing work that v9 still does by hand. wgmma: a
 * warpgroup (4 warps) issues one asynchronous 64 x N x 16 product (N up to 256) whose A and B
 * the tensor cores read straight from shared memory through 64-bit matrix descriptors: no
 * ldmatrix, no operand registers; commit_group and wait_group keep one batch in flight. TMA: one
 * thread asks the copy engine for a whole 2D box of a matrix, described by a tensor map built on
 * the host; it fills zeros outside the matrix, writes the 128-byte swizzle wgmma reads, reports
 * its bytes to an mbarrier, and stores C from shared memory, dropping what falls outside C. Warp
 * specialisation: one producer warpgroup (one thread) keeps a ring of 4 stages filled, two
 * consumer warpgroups multiply, a "full" and an "empty" mbarrier a stage hand it over, and
 * setmaxnreg moves registers from the producer to the consumers' accumulators.
 * Tiles and schedule: 128 x 256 of C a block (64 x 256 a consumer, m64n256k16), 64 deep a stage,
 * 4 x 48 KB + 32 KB to stage C; a persistent grid, one block an SM, walking bands of 16 tile
 * rows; clusters of two vertically adjacent tiles each load half of B and multicast it to both.
 * What changed from v9: one copy instruction a box instead of one per 16 bytes a thread; copying
 * and multiplying warps apart, synchronised by mbarriers instead of __syncthreads; one
 * instruction for 64 x 256 x 16 instead of 16 x 8 x 16; C stored while the next tile starts.
 * Bottleneck removed: v9's copies and ldmatrix in the issue stream of the warps that multiply.
 * Expected: a k16 step's 20 KB of shared reads (160 clocks) hide under its 256 clocks of tensor
 * work, so the tensor cores set the pace: 90% of cuBLAS fp16 or better at 4096 and 8192.
 * Limits: fp16; compute capability 9.0 only. TMA needs K % 8 == 0, N % 8 == 0 and 16-byte aligned
 * A, B and C; anything else runs v9 (the CSV's ran column says so). Knobs: the block below.
 * Measured (H200): 759 TFLOP/s at 4096 (1.00x cuBLAS) and 750 at 8192 (1.03x), the target met;
 * 4097^3 runs v9: 65.0 TFLOP/s, 0.49x. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <cudaTypedefs.h> /* CUtensorMap and PFN_cuTensorMapEncodeTiled, no libcuda needed */

#include "launch.cuh"
#include "matmul.cuh"

/* Knobs, for -D on the GPU. V10_BN: 256 (m64n256k16) or 128 (m64n128k16, 6 stages fit).
 * V10_STAGES: the ring's depth. V10_GROUP_M: tile rows per band of the tile order.
 * V10_PERSISTENT: 1 = one block per SM looping over tiles, 0 = one block per tile.
 * V10_IN_FLIGHT: 1 = keep one wgmma batch in flight (wait_group 1), 0 = wait for each.
 * V10_CLUSTER: 2 = pairs of blocks sharing B through TMA multicast, 1 = none. */
#ifndef V10_BN
#define V10_BN 256
#endif
#ifndef V10_STAGES
#if V10_BN == 256
#define V10_STAGES 4
#else
#define V10_STAGES 6
#endif
#endif
#ifndef V10_GROUP_M
#define V10_GROUP_M 16
#endif
#ifndef V10_PERSISTENT
#define V10_PERSISTENT 1
#endif
#ifndef V10_IN_FLIGHT
#define V10_IN_FLIGHT 1
#endif
#ifndef V10_CLUSTER
#define V10_CLUSTER 2
#endif
#ifndef V10_PRODUCER_REGS
#define V10_PRODUCER_REGS 40
#endif
#ifndef V10_CONSUMER_REGS
#define V10_CONSUMER_REGS 232
#endif

#if V10_BN != 256 && V10_BN != 128
#error "V10_BN must be 256 or 128"
#endif
#if V10_CLUSTER != 1 && V10_CLUSTER != 2
#error "V10_CLUSTER must be 1 or 2"
#endif

#define BM 128                 /* two consumer warpgroups of 64 rows */
#define BN V10_BN
#define BK 64                  /* halves: one 128-byte row of the swizzle pattern */
#define WG_THREADS 128         /* a warpgroup */
#define THREADS (3 * WG_THREADS) /* producer, consumer 0, consumer 1 */
#define CONSUMER_WARPS 8       /* each arrives on "empty" once per stage */
#define CLUSTER V10_CLUSTER    /* blocks sharing B's tile through multicast */
#define ACC (BN / 2)           /* fp32 accumulators a consumer thread: 64 x BN / 128 */
#define B_BOX 64               /* B's boxes are 64 columns (128 bytes) wide: BN / 64 a stage */
#define A_BYTES (BM * BK * 2)
#define B_BOX_BYTES (B_BOX * BK * 2)
#define STAGE_BYTES (A_BYTES + (BN / B_BOX) * B_BOX_BYTES)
#define C_BOX 64               /* C leaves through 64 x 64 boxes (128-byte rows, swizzled) */
#define C_BOX_BYTES (C_BOX * C_BOX * 2)
#define STAGING_BYTES (2 * 2 * C_BOX_BYTES) /* two boxes in flight per consumer warpgroup */
/* + slack to align the base to 1024 */
#define SMEM_BYTES (V10_STAGES * STAGE_BYTES + STAGING_BYTES + 1024)

static_assert(SMEM_BYTES + 2 * V10_STAGES * 8 <= 227 * 1024, "the ring does not fit in 227 KB");
static_assert(V10_PRODUCER_REGS * WG_THREADS + 2 * V10_CONSUMER_REGS * WG_THREADS <= 65536,
              "setmaxnreg asks for more than the register file");

/* The Hopper-only code below is compiled for sm_90a alone (the Makefile builds this file's
 * compute capability 9.0 code as sm_90a, which defines this macro); every other architecture
 * gets an empty kernel that matmul_v10_unsupported() keeps from ever being launched. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define V10_SM90A 1
#endif

#ifdef V10_SM90A

__device__ __forceinline__ uint32_t smem_address(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarriers: a 64-bit word in shared memory counting arrivals and expected bytes ---- */

__device__ __forceinline__ void mbarrier_init(uint64_t *bar, uint32_t arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)),
                 "r"(arrivals)
                 : "memory");
}

/* Makes the initialised barriers visible to the other threads and to the copy engine. */
__device__ __forceinline__ void mbarrier_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* One arrival that also announces `bytes` more to come from the copy engine: the phase
 * completes when every arrival is in and every announced byte has landed. */
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     smem_address(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar))
                 : "memory");
}

/* Arrival on the barrier at the same place in the other block `rank` of the cluster: mapa
 * turns a shared address into that block's. */
__device__ __forceinline__ void mbarrier_arrive_remote(uint64_t *bar, uint32_t rank)
{
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_address(bar)),
                 "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* Every thread of every block of the cluster: the cluster-wide __syncthreads. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\n\t"
                 "barrier.cluster.wait.acquire;" ::: "memory");
}

/* Waits until the phase of parity `parity` has completed. A barrier starts in phase 0; the
 * phase "before" it (parity 1) counts as completed, which is why the producer's first pass
 * over the ring, waiting on "empty" with parity 1, does not block. */
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t *bar, uint32_t parity)
{
    const uint32_t addr = smem_address(bar);
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(addr), "r"(parity)
                     : "memory");
    } while (!done);
}

/* ---- TMA ---- */

/* The box of the tensor map whose first element is (x = inner coordinate, y = row) lands at
 * `dst` in shared memory; its bytes are counted on `bar`. Parts of the box outside the matrix
 * are filled with zeros and still counted. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int x, int y,
                                            uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_address(bar))
                 : "memory");
}

/* The same box, written at `dst` and counted on the barrier at `bar` in every block of the
 * cluster named in the bit mask `blocks` (the same offsets in each). */
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap *map, int x,
                                                      int y, uint64_t *bar, uint16_t blocks)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_address(bar)), "h"(blocks)
                 : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)map) : "memory");
}

/* ---- registers: the producer gives some back, the consumers take them ---- */

__device__ __forceinline__ void producer_release_registers()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(V10_PRODUCER_REGS));
}

__device__ __forceinline__ void consumer_claim_registers()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(V10_CONSUMER_REGS));
}

/* ---- wgmma ---- */

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" for wgmma):
 * bits 0-13 the start address, 16-29 the leading-dimension byte offset (LBO), 32-45 the
 * stride-dimension byte offset (SBO), each in units of 16 bytes; 49-51 a base offset, 0 here
 * because every swizzle atom starts 1024-byte aligned; 62-63 the swizzle mode, 1 = 128 bytes.
 * With the 128-byte swizzle the data is a sequence of 1024-byte atoms, 8 rows of 128 bytes,
 * inside which the 16-byte chunk c of row r is stored at chunk c ^ r: TMA writes that order and
 * wgmma reads it, both computing it from the address bits, hence the 1024-byte alignment. */
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t addr, uint32_t leading_bytes,
                                                     uint32_t stride_bytes)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((leading_bytes & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((stride_bytes & 0x3FFFF) >> 4) << 32 | (uint64_t)1 << 62;
}

/* A, K-major: the 64 rows of the consumer's slice are 128-byte rows (64 halves of K), 8-row
 * atoms 1024 bytes apart. SBO is that distance from one group of 8 rows (of M) to the next.
 * A k16 step is 32 bytes of a row, inside one atom, so K needs no offset field (LBO is unused
 * for swizzled K-major layouts; 16 bytes, encoded 1, by convention). Stepping to the next k16
 * slice moves the start address by 32 bytes; the swizzle is applied to the address afterwards,
 * which is what TMA did on the way in. */
__device__ __forceinline__ uint64_t wgmma_descriptor_a(uint32_t addr)
{
    return wgmma_descriptor(addr, 16, 1024);
}

/* B, MN-major: a box is 64 rows of K, each 128 bytes = 64 columns of N, in 1024-byte atoms of
 * 8 rows. For MN-major layouts the roles are: LBO = distance between atoms along N, here from
 * one 64-column box to the next (64 rows x 128 bytes = 8 KB); SBO = distance between groups of
 * 8 rows along K (1024 bytes). A k16 step is two 8-row groups; the next k16 slice starts
 * 16 rows x 128 bytes = 2048 bytes further. */
__device__ __forceinline__ uint64_t wgmma_descriptor_b(uint32_t addr)
{
    return wgmma_descriptor(addr, B_BOX_BYTES, 1024);
}

/* wgmma.fence: orders this thread's earlier register accesses to the accumulators before the
 * wgmma that follow. Needed before each batch. */
__device__ __forceinline__ void warpgroup_arrive()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits until at most `N` committed batches are still running (an immediate in PTX, hence the
 * template). */
template <int N> __device__ __forceinline__ void wgmma_wait_group()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* The compiler does not know that wgmma writes the accumulators later than the asm statement
 * that issues it: this empty asm "touches" each one after a wait so that no read of them can be
 * moved above the wait. */
__device__ __forceinline__ void accumulators_fence(float *d)
{
#pragma unroll
    for (int i = 0; i < ACC; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

#define ACC4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define ACC16(i) ACC4(i), ACC4((i) + 4), ACC4((i) + 8), ACC4((i) + 12)

/* D (64 x BN, fp32) = A (64 x 16, K-major) B (16 x BN, MN-major) + (scale_d ? D : 0).
 * The immediates after the scale-d predicate: scale A by 1, scale B by 1, A not transposed
 * (K-major), B transposed (MN-major). The accumulator d[i] of thread t of the warpgroup is
 * D[16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2)][8 (i / 4) + 2 (t % 4) + i % 2]: warp w owns
 * rows 16w..16w+15, and each n8 slice is laid out as in mma.sync's m16n8 accumulator. */
#if BN == 256
__device__ __forceinline__ void wgmma_m64n256k16(float *d, uint64_t desc_a, uint64_t desc_b,
                                                 int scale_d)
{
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %130, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"
        "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"
        "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73,"
        "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91,"
        "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107,"
        "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122,"
        "%123, %124, %125, %126, %127},"
        " %128, %129, p, 1, 1, 0, 1;\n\t}"
        : ACC16(0), ACC16(16), ACC16(32), ACC16(48), ACC16(64), ACC16(80), ACC16(96), ACC16(112)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#define WGMMA wgmma_m64n256k16
#else
__device__ __forceinline__ void wgmma_m64n128k16(float *d, uint64_t desc_a, uint64_t desc_b,
                                                 int scale_d)
{
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %66, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"
        "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"
        "%56, %57, %58, %59, %60, %61, %62, %63},"
        " %64, %65, p, 1, 1, 0, 1;\n\t}"
        : ACC16(0), ACC16(16), ACC16(32), ACC16(48)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#define WGMMA wgmma_m64n128k16
#endif

/* ---- the schedule ---- */

/* The work of a cluster is a "pair" of tiles (CLUSTER tiles one above the other, sharing
 * B's columns; one tile when CLUSTER is 1). Pair `p` of the pair order: bands of
 * V10_GROUP_M tile rows, each band walked column by column, so consecutive pairs (the ones
 * running at the same time) reuse A's rows and B's columns from L2. */
__device__ __forceinline__ void pair_position(int p, int pair_rows, int tiles_n, int *pr, int *tn)
{
    const int band = V10_GROUP_M / CLUSTER; /* pair rows per band */
    const int per_band = band * tiles_n;
    const int first = (p / per_band) * band;
    const int rows = min(band, pair_rows - first);
    const int within = p % per_band;
    *pr = first + within % rows;
    *tn = within / rows;
}

/* The ring position: stage s and the parity of the current pass over the ring. Producer and
 * consumers walk the same sequence of (tile, k step), so they agree on it. */
__device__ __forceinline__ void ring_advance(int *stage, uint32_t *phase)
{
    if (++*stage == V10_STAGES) {
        *stage = 0;
        *phase ^= 1;
    }
}

/* What every role needs to know about the problem and this block's place in the grid. */
struct v10_work {
    int m, n, k_steps, tiles_m, tiles_n;
    int pair_rows, pairs;   /* pairs of tiles (clusters' work units) */
    int cluster, clusters;  /* this block's cluster, and how many there are */
    uint32_t rank;          /* this block's rank in its cluster */
};

/* One thread: fills the ring, one stage per k step of every tile of this block. With clusters
 * of 2 the two blocks have the same columns of B: each loads half of B's boxes and the copy
 * engine writes them into both blocks (multicast), halving B's traffic from L2. */
__device__ __forceinline__ void producer(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                         uint32_t ring, uint64_t *full, uint64_t *empty,
                                         const v10_work &w)
{
    tma_prefetch_map(map_a);
    tma_prefetch_map(map_b);
    int stage = 0;
    uint32_t phase = 0;
    for (int p = w.cluster; p < w.pairs; p += w.clusters) {
        int pr, tn;
        pair_position(p, w.pair_rows, w.tiles_n, &pr, &tn);
        /* A block whose tile lies below M (the last pair of an odd count) still takes part in
         * the cluster's protocol: it reloads the last tile's rows and stores nothing. */
        const int tm = min(pr * CLUSTER + (int)w.rank, w.tiles_m - 1);
        /* B boxes entirely right of N are not loaded: they would only feed columns of C that
         * are never stored (column j of C depends on column j of B alone). */
        const int boxes = min(BN / B_BOX, (w.n - tn * BN + B_BOX - 1) / B_BOX);
        const uint32_t bytes = A_BYTES + boxes * B_BOX_BYTES; /* B's from both blocks */
        for (int ks = 0; ks < w.k_steps; ks++) {
            mbarrier_wait_parity(&empty[stage], phase ^ 1); /* every consumer done with it */
            mbarrier_arrive_expect_tx(&full[stage], bytes);
            const uint32_t a_tile = ring + stage * STAGE_BYTES, b_tile = a_tile + A_BYTES;
            tma_load_2d(a_tile, map_a, ks * BK, tm * BM, &full[stage]);
            for (int j = (int)w.rank; j < boxes; j += CLUSTER) {
#if CLUSTER == 1
                tma_load_2d(b_tile + j * B_BOX_BYTES, map_b, tn * BN + j * B_BOX, ks * BK,
                            &full[stage]);
#else
                tma_load_2d_multicast(b_tile + j * B_BOX_BYTES, map_b, tn * BN + j * B_BOX,
                                      ks * BK, &full[stage], (1u << CLUSTER) - 1);
#endif
            }
            ring_advance(&stage, &phase);
        }
    }
}

/* Lane 0 of each consumer warp, once the warp's products no longer read the stage, tells the
 * producer of its block and, with clusters, the other block's producer, whose multicast copies
 * write into this block too. */
__device__ __forceinline__ void release_stage(uint64_t *empty_bar, uint32_t rank)
{
    if (threadIdx.x % 32 == 0) {
        mbarrier_arrive(empty_bar);
        if (CLUSTER > 1)
            mbarrier_arrive_remote(empty_bar, rank ^ 1);
    }
}

/* ---- the epilogue: registers -> shared memory -> TMA store ---- */

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* The 128 threads of consumer warpgroup wg (named barriers 1 and 2; 0 is __syncthreads). */
__device__ __forceinline__ void warpgroup_sync(int wg)
{
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
}

/* Shared-memory writes by ordinary stores, made visible to the copy engine (the "async
 * proxy"), which reads shared memory by another path. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* The box at `src` to the matrix at (x = column, y = row); the parts outside it are dropped. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, uint32_t src, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::
                     "l"((uint64_t)map), "r"(src), "r"(x), "r"(y)
                 : "memory");
}

__device__ __forceinline__ void tma_store_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Until at most N committed stores still read shared memory (their global writes may still be
 * on the way). */
template <int N> __device__ __forceinline__ void tma_store_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void tma_store_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* The warpgroup's 64 x BN tile of C, as BN / 64 boxes of 64 x 64: each written by the 128
 * threads into one of two staging buffers (64 rows of 128 bytes, the 16-byte chunk c of row r
 * stored at chunk c ^ (r % 8), the same 128-byte swizzle as the loads, so that the 8 rows a
 * warp writes at once fall in 8 different chunks: no bank conflicts), then sent to global
 * memory by one TMA store, which skips the rows and columns outside C. The threads go on
 * while the copy engine writes; a buffer is reused once its previous store has read it. */
__device__ __forceinline__ void store_tile(const float *d, const CUtensorMap *map_c,
                                           uint32_t staging, int wg, int m, int n, int row0,
                                           int col0)
{
    const int t = threadIdx.x % WG_THREADS;
    const int r = 16 * (t / 32) + (t % 32) / 4; /* this thread's rows: r and r + 8 */
    const bool issuer = t == 0;
#pragma unroll
    for (int q = 0; q < BN / C_BOX; q++) {
        const uint32_t buf = staging + (q % 2) * C_BOX_BYTES;
        if (issuer)
            tma_store_wait_read<1>(); /* the store before last, which read `buf`, is done */
        warpgroup_sync(wg);
#pragma unroll
        for (int c = 0; c < C_BOX / 8; c++) { /* chunk c = n8 slice 8q + c of the accumulator */
            const int j = 8 * q + c;
            const uint32_t at = buf + ((c ^ (r % 8)) * 16) + (t % 4) * 4;
            st_shared_u32(at + r * 128, pack_half2(d[4 * j], d[4 * j + 1]));
            st_shared_u32(at + (r + 8) * 128, pack_half2(d[4 * j + 2], d[4 * j + 3]));
        }
        fence_proxy_async();
        warpgroup_sync(wg);
        if (issuer) {
            if (row0 < m && col0 + q * C_BOX < n)
                tma_store_2d(map_c, buf, col0 + q * C_BOX, row0);
            tma_store_commit();
        }
    }
}

/* A consumer warpgroup (wg = 0 or 1): rows 64 wg .. 64 wg + 63 of each block tile. */
__device__ __forceinline__ void consumer(uint32_t ring, uint64_t *full, uint64_t *empty,
                                         const CUtensorMap *map_c, const v10_work &w, int wg)
{
    const uint32_t staging = ring + V10_STAGES * STAGE_BYTES + wg * 2 * C_BOX_BYTES;
    float d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++)
        d[i] = 0.f;
    int stage = 0;
    uint32_t phase = 0;
    for (int p = w.cluster; p < w.pairs; p += w.clusters) {
        int pr, tn;
        pair_position(p, w.pair_rows, w.tiles_n, &pr, &tn);
        const int tm = pr * CLUSTER + (int)w.rank;
#if V10_IN_FLIGHT
        int previous = 0;
#endif
        for (int ks = 0; ks < w.k_steps; ks++) {
            mbarrier_wait_parity(&full[stage], phase); /* the stage's bytes have landed */
            const uint32_t a_tile = ring + stage * STAGE_BYTES + wg * (64 * BK * 2);
            const uint32_t b_tile = ring + stage * STAGE_BYTES + A_BYTES;
            warpgroup_arrive();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) /* the first product of a tile zeroes D */
                WGMMA(d, wgmma_descriptor_a(a_tile + kk * 32),
                      wgmma_descriptor_b(b_tile + kk * 16 * 128), ks > 0 || kk > 0);
            wgmma_commit_group();
#if V10_IN_FLIGHT
            /* This batch keeps running; the previous one, now finished, frees its stage. */
            wgmma_wait_group<1>();
            if (ks > 0)
                release_stage(&empty[previous], w.rank);
            previous = stage;
#else
            wgmma_wait_group<0>();
            release_stage(&empty[stage], w.rank);
#endif
            ring_advance(&stage, &phase);
        }
#if V10_IN_FLIGHT
        wgmma_wait_group<0>();
        release_stage(&empty[previous], w.rank);
#endif
        accumulators_fence(d);
        /* Meanwhile the producer is already filling the ring for this block's next tile. */
        if (tm < w.tiles_m)
            store_tile(d, map_c, staging, wg, w.m, w.n, tm * BM + wg * 64, tn * BN);
    }
    if (threadIdx.x % WG_THREADS == 0)
        tma_store_wait_all(); /* the staging buffers must outlive the stores that read them */
}

#endif /* V10_SM90A */

/* One block: warpgroup 0 produces, warpgroups 1 and 2 consume. k_steps = ceil(K / 64); the
 * grid is a whole number of clusters. */
__global__ void __launch_bounds__(THREADS, 1)
    matmul_wgmma(const __grid_constant__ CUtensorMap map_a,
                 const __grid_constant__ CUtensorMap map_b,
                 const __grid_constant__ CUtensorMap map_c, int m, int n, int k_steps,
                 int tiles_m, int tiles_n)
{
#ifdef V10_SM90A
    __shared__ uint64_t full[V10_STAGES], empty[V10_STAGES];
    extern __shared__ unsigned char smem[];
    const uint32_t ring = (smem_address(smem) + 1023) & ~1023u; /* 128-byte swizzle atoms */
    v10_work w;
    w.m = m, w.n = n, w.k_steps = k_steps, w.tiles_m = tiles_m, w.tiles_n = tiles_n;
    w.pair_rows = (tiles_m + CLUSTER - 1) / CLUSTER;
    w.pairs = w.pair_rows * tiles_n;
    w.cluster = blockIdx.x / CLUSTER, w.clusters = gridDim.x / CLUSTER;
    w.rank = CLUSTER > 1 ? cluster_rank() : 0;

    if (threadIdx.x == 0) {
        for (int s = 0; s < V10_STAGES; s++) {
            mbarrier_init(&full[s], 1); /* the producer's arrive.expect_tx */
            /* one arrival per consumer warp of each block of the cluster */
            mbarrier_init(&empty[s], CLUSTER * CONSUMER_WARPS);
        }
        mbarrier_init_fence();
    }
    /* The barriers must be initialised in both blocks before either block's copies or
     * arrivals can reach them. */
    if (CLUSTER > 1)
        cluster_sync();
    else
        __syncthreads();

    const int wg = threadIdx.x / WG_THREADS;
    if (wg == 0) {
        producer_release_registers();
        if (threadIdx.x == 0)
            producer(&map_a, &map_b, ring, full, empty, w);
    } else {
        consumer_claim_registers();
        consumer(ring, full, empty, &map_c, w, wg - 1);
    }
    /* No block may leave while the other's consumers can still arrive on its barriers. */
    if (CLUSTER > 1)
        cluster_sync();
#else
    (void)map_a, (void)map_b, (void)map_c, (void)m, (void)n, (void)k_steps, (void)tiles_m,
        (void)tiles_n;
#endif
}

/* ---- host ---- */

/* cuTensorMapEncodeTiled lives in the driver library (kl_driver_function). */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        encode = (PFN_cuTensorMapEncodeTiled_v12000)kl_driver_function("cuTensorMapEncodeTiled",
                                                                        12000);
        if (!encode) {
            fprintf(stderr, "v10: the driver has no cuTensorMapEncodeTiled\n");
            exit(KL_EXIT_CUDA);
        }
    }
    return encode;
}

/* A row-major rows x cols fp16 matrix, copied in boxes of box_rows x box_cols (box_cols * 2
 * bytes = 128, one swizzle row), 128-byte swizzled in shared memory; loads read zeros outside
 * the matrix, stores drop what falls outside it. */
static CUtensorMap tensor_map_2d(const void *base, int64_t rows, int64_t cols,
                                 uint32_t box_rows, uint32_t box_cols)
{
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}; /* innermost first */
    const cuuint64_t row_stride[1] = {(cuuint64_t)cols * sizeof(__half)};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult r = tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dims, row_stride, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "v10: cuTensorMapEncodeTiled failed (CUresult %d) for %lld x %lld\n",
                (int)r, (long long)rows, (long long)cols);
        exit(KL_EXIT_CUDA);
    }
    return map;
}

/* The launch: `grid` blocks in clusters of CLUSTER. */
static cudaLaunchConfig_t v10_launch_config(int grid, cudaStream_t s, cudaLaunchAttribute *cluster)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES;
    cfg.stream = s;
    cluster->id = cudaLaunchAttributeClusterDimension;
    cluster->val.clusterDim.x = CLUSTER;
    cluster->val.clusterDim.y = 1;
    cluster->val.clusterDim.z = 1;
    cfg.attrs = cluster;
    cfg.numAttrs = 1;
    return cfg;
}

/* What the launcher needs to know about the current device, worked out once per device. */
struct v10_device {
    int id;          /* -1: not yet */
    const char *why; /* NULL if the kernel runs here */
    int clusters;    /* clusters resident at once: the persistent grid */
};

static const struct v10_device *v10_device_state(void)
{
    static struct v10_device dev = {-1, NULL, 0};
    int id;
    CUDA_CHECK(cudaGetDevice(&id));
    if (id == dev.id)
        return &dev;
    dev.id = id;
    dev.why = NULL;
    if (kl_device_cc() != 90) {
        dev.why = "built for sm_90a (compute capability 9.0) only";
        return &dev;
    }
    /* Fails if the binary holds no sm_90a image (a build without 90 in CUDA_ARCHS); a kernel
     * JIT-compiled from older PTX would be the empty one, so that counts as missing too. */
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, matmul_wgmma) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next check */
        dev.why = "no sm_90a kernel image in this build (add 90 to CUDA_ARCHS)";
        return &dev;
    }
    if (attr.ptxVersion != 0 && attr.ptxVersion < 90) {
        dev.why = "no sm_90a kernel image in this build (add 90 to CUDA_ARCHS)";
        return &dev;
    }
    if (kl_grant_shared_memory((const void *)matmul_wgmma) < SMEM_BYTES) {
        dev.why = "the kernel's shared memory does not fit a block on this GPU";
        return &dev;
    }
    /* One block an SM; with clusters, how many pairs of SMs the GPCs can hold at once. */
    const int sms = kl_sm_count();
    dev.clusters = sms / CLUSTER;
    if (CLUSTER > 1) {
        cudaLaunchAttribute cluster;
        const cudaLaunchConfig_t cfg = v10_launch_config(sms, 0, &cluster);
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&dev.clusters, matmul_wgmma, &cfg));
    }
    if (dev.clusters < 1)
        dev.why = "the kernel's shared memory does not fit a cluster on this GPU";
    return &dev;
}

extern "C" const char *matmul_v10_unsupported(void)
{
    return v10_device_state()->why;
}

extern "C" void matmul_v10(const void *a, const void *b, void *c, struct matmul_dims d,
                           enum dtype t, cudaStream_t s)
{
    kl_note_rung("v10_wgmma");
    const struct v10_device *dev = v10_device_state();
    /* TMA reads and writes rows whose byte stride is a multiple of 16 from a 16-byte aligned
     * base. Everything else, and any other GPU, goes to v9. */
    const bool tma_path = t == DT_FP16 && !dev->why && d.m > 0 && d.n > 0 && d.k > 0 &&
                          d.m <= INT_MAX && d.n <= INT_MAX && d.k <= INT_MAX && d.k % 8 == 0 &&
                          d.n % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
    const int64_t tiles_m = matmul_blocks(d.m, BM), tiles_n = matmul_blocks(d.n, BN);
    const int64_t pairs = (tiles_m + CLUSTER - 1) / CLUSTER * tiles_n;
    if (!tma_path || pairs * CLUSTER > INT_MAX) { /* the second: no matrix a GPU holds */
        matmul_v9(a, b, c, d, t, s);
        return;
    }
    /* Built on every call: the pointers change from call to call (and between the launches a
     * CUDA graph captures); encoding one is a few hundred nanoseconds on the host. */
    const CUtensorMap map_a = tensor_map_2d(a, d.m, d.k, BM, BK);
    const CUtensorMap map_b = tensor_map_2d(b, d.k, d.n, BK, B_BOX);
    const CUtensorMap map_c = tensor_map_2d(c, d.m, d.n, C_BOX, C_BOX);
    const int64_t clusters = V10_PERSISTENT && pairs > dev->clusters ? dev->clusters : pairs;
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t cfg = v10_launch_config((int)(clusters * CLUSTER), s, &cluster);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, matmul_wgmma, map_a, map_b, map_c, (int)d.m,
                                  (int)d.n, (int)matmul_blocks(d.k, BK), (int)tiles_m,
                                  (int)tiles_n));
    LAUNCH_CHECK();
}
