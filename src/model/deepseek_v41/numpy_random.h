// numpy's default_rng(seed).integers(0, bound, dtype=int64), reproduced without numpy (model-v41.md
// Appendix A.3): SeedSequence entropy mixing, PCG64 (XSL-RR 128/64) and Lemire's bounded draw. The
// Engram hash multipliers are drawn this way by the official code, so they must match bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace dsinfer::model::deepseek_v41 {

// SeedSequence(seed).pool (4 x uint32) and generate_state(4, uint64).
std::array<uint32_t, 4> seed_sequence_pool(uint64_t seed);
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed);

class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed);  // as numpy's default_rng(seed)
  uint64_t next64();
  // integers(0, bound) for one value; bound > 2^32 - 1 + 1 (numpy's 64-bit path), as A.3 step 6.
  uint64_t below(uint64_t bound);
  unsigned __int128 state() const { return state_; }
  unsigned __int128 inc() const { return inc_; }

 private:
  void step();
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
};

// default_rng(seed).integers(0, bound, size=n, dtype=int64).
std::vector<int64_t> numpy_integers(uint64_t seed, uint64_t bound, int64_t n);

}  // namespace dsinfer::model::deepseek_v41
