// Internal to Linear: the repacked weight layout shared by linear.cpp (packing, threading) and
// linear_simd.cpp (the per-target kernels). Not for use outside src/kernels/cpu/linear*.
//
// Rows are grouped in panels of kPanelRows = 16 output rows. Inside a panel the data is k-major, so a
// kernel reads the 16 rows' weights of one k (or of two consecutive k) with one contiguous load and
// keeps one accumulator lane per output row: each output is summed over k in ascending order with
// one fused multiply-add per k, whatever M, the thread count or the vector width.
// The element bytes keep the checkpoint's compressed size (only padding rows/one padding k are added).
//
// Per-panel layouts (K2 = ceil(cols / 2) k-pairs; padding rows and the padding k hold zeros):
//   F32   [2*K2][16] float, row r of the panel at lane r.
//   BF16  [2*K2][8] u32 lanes, lane j = bf16(row j) | bf16(row j + 8) << 16, so one u32 load gives rows
//         0..7 by a shift and rows 8..15 by a mask.
//   FP8   [K2][8] u32 lanes, lane j = bytes {code(j, 2kp), code(j+8, 2kp), code(j, 2kp+1), code(j+8, 2kp+1)}.
//         Byte b of every lane becomes an f32 by two shifts and a mask: sign to bit 31, the 7 magnitude
//         bits to bits 26..20, which is exactly fp8 · 2^-120 (subnormal codes become fp32 subnormals,
//         so no special case); the scale factor below carries the 2^120.
//   FP4   [K2/2][8] u32 lanes per k-quad (k = 4q..4q+3): lane j = u16(row j) | u16(row j+8) << 16, with
//         u16(row r) the checkpoint's bytes 2q, 2q+1 of row r (nibbles of k0..k3 from the low bits up).
//         16-bit shifts and a mask put a nibble's sign at bit 15 and magnitude at bits 8..6 of a u16 half,
//         the top half of an f32 equal to e2m1 · 2^-126 (the 0.5 code becomes an fp32 subnormal).
//         Scales [cols / 32][16] per panel, E8M0 codes or f32.
//   FP8 likewise decodes each u16 half of a lane (two codes) with 16-bit shifts into top halves of f32s.
// Scale factors: FP8 keeps f32 [ceil(rows/B)][ceil(cols/B)] = scale · 2^120 (B = fp8_block). When a factor would
// overflow fp32 (scales of 2^8 and more), `two_step_scale` is set, the factor is the plain scale and
// the kernel multiplies by 2^120 first. Either way the decoded weight is the exact product fp8 · scale,
// as the oracle computes it. FP4 keeps the plain scales: they multiply partial sums over each 32-column
// group, against x scaled by a power of two per row (linear_simd.cpp, "FP4: grouped order").
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/linear.h"

namespace dsinfer::kernels::detail {

inline constexpr int64_t kPanelRows = 16;
inline constexpr int64_t kFp8Block = 128;  // V4's FP8 scale block, the default of WeightView::fp8_block
inline constexpr int64_t kFp4Group = 32;
inline constexpr int kFp8Bias = 120;  // decoded FP8 bits are fp8 · 2^-120
inline constexpr int kFp4Bias = 126;  // decoded FP4 bits are e2m1 · 2^-126

struct ArenaChunk;
struct FreeBytes {
  void* map = nullptr;  // mmap'd region (large allocations)
  size_t map_length = 0;  // of the mapping; for an arena slice, the slice's bytes
  ArenaChunk* chunk = nullptr;  // shared arena chunk (mid-sized allocations); neither: from malloc
  void operator()(uint8_t* p) const;
};
// Zeroed, 64-byte aligned, in memory advised for transparent huge pages (fewer page faults while
// packing, fewer TLB misses while streaming the weights): from 2 MiB up a fresh 2 MiB aligned mapping;
// from kArenaMinBytes up a slice of a shared 2 MiB aligned arena chunk, since a MoE layer's many
// experts are each smaller than a huge page; below that, malloc.
using Bytes = std::unique_ptr<uint8_t[], FreeBytes>;
Bytes allocate_bytes(int64_t bytes);
inline constexpr int64_t kArenaMinBytes = int64_t{16} << 10;
inline constexpr int64_t kArenaChunkBytes = int64_t{32} << 20;
// Arena chunks mapped now (the one being filled included); a chunk is unmapped once it is no longer
// being filled and its last slice is freed.
int64_t arena_chunks_mapped();

// Stream groups (the bf16-dot products of --numerics fast): panels of 16 rows in groups of
// kStreamGroupPanels whose 64-byte lines of one k-step lie side by side, so a one-row product reads a
// group (and a thread's run of groups) as one linear stream. Four panels each read whole before the
// next were four short streams, which the hardware prefetchers follow late: 41-48 GB/s against 49-54
// as one stream, where the read probe gave 51-55 (two threads, alternated runs).
inline constexpr int64_t kStreamGroupPanels = 4;
// Panels in panel p's group (the last group of `panels` may be narrower).
inline int64_t stream_group_width(int64_t p, int64_t panels) {
  return std::min(kStreamGroupPanels, panels - p / kStreamGroupPanels * kStreamGroupPanels);
}
// Byte offset of panel p's first line when each panel holds panel_bytes; its next line is
// 64 · stream_group_width(p, panels) further.
inline int64_t stream_group_offset(int64_t p, int64_t panel_bytes) {
  return p / kStreamGroupPanels * kStreamGroupPanels * panel_bytes + p % kStreamGroupPanels * 64;
}

struct PackedWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t panels = 0;       // ceil(rows / 16)
  int64_t k_pairs = 0;      // ceil(cols / 2)
  int64_t panel_bytes = 0;  // bytes of one panel's element data
  Bytes data;
  // FP8: f32 [ceil(rows/B)][ceil(cols/B)] factors. FP4: per panel [cols/32][16] codes (u8) or f32
  // factors when fp4_scales_f32.
  Bytes scales;
  bool fp4_scales_f32 = false;
  bool two_step_scale = false;
  // FP8: every factor is a power of two >= 1 (E8M0 scales of 2^-120 and more), and the largest.
  bool fp8_pow2_factors = false;
  float fp8_max_factor = 0.0f;
  int64_t fp8_block = kFp8Block;  // B, the edge of the scale blocks (a multiple of kPanelRows)
  int64_t fp8_scale_cols = 0;      // ceil(cols / B)

  const uint8_t* panel(int64_t p) const { return data.get() + p * panel_bytes; }
  int64_t bytes() const;  // element data + scales, as held in memory
};

// Computes y rows [row_lo, row_hi) (absolute indices; panels covering them are computed, only rows in
// the range are stored) for M rows of x, on the calling thread, with the best target of this CPU.
void packed_forward(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                    int64_t row_lo, int64_t row_hi);

// Rows of x from which packed_forward switches from decoding the weights in registers for each k
// (streaming, memory-bound decode) to decoding panels into a cache-resident f32 buffer that all rows
// of x reuse (prefill GEMM). Both give bitwise the same results.
int64_t packed_stream_max_rows();

// Output rows the stream schedule decodes together for one row of x (64 on AVX2, 128 on AVX-512):
// the unit in which a product is split over threads.
int64_t packed_stream_group_rows();

}  // namespace dsinfer::kernels::detail
