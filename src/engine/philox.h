// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A draw is a pure function of
// (key, counter): no generator state travels with a request, so a token's random number depends only on
// what identifies it (seed, stream, position), never on batch composition or scheduling order.
#pragma once

#include <array>
#include <cstdint>

namespace dsinfer::engine {

class Philox {
 public:
  using Counter = std::array<uint32_t, 4>;

  explicit Philox(uint64_t key) : k0_(static_cast<uint32_t>(key)), k1_(static_cast<uint32_t>(key >> 32)) {}

  Counter block(Counter c) const {
    uint32_t k0 = k0_, k1 = k1_;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    return c;
  }

  // A uniform double in [0, 1) with 53 random bits, from counter (a, b, c, d).
  double uniform(uint64_t a, uint32_t c, uint32_t d) const {
    const Counter out = block({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), c, d});
    const uint64_t bits = (static_cast<uint64_t>(out[0]) << 32 | out[1]) >> 11;
    return static_cast<double>(bits) * 0x1.0p-53;
  }

 private:
  static constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0_, k1_;
};

}  // namespace dsinfer::engine
