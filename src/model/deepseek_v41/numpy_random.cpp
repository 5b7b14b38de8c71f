#include "model/deepseek_v41/numpy_random.h"

#include "core/error.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using u128 = unsigned __int128;

constexpr uint32_t kInitA = 0x43B0D7E5u;
constexpr uint32_t kMultA = 0x931E8875u;
constexpr uint32_t kInitB = 0x8B51F9DDu;
constexpr uint32_t kMultB = 0x58F38DEDu;
constexpr uint32_t kMixMultL = 0xCA01F9DDu;
constexpr uint32_t kMixMultR = 0x4973F715u;
constexpr int kPoolSize = 4;

// SeedSequence's hashmix: the multiplier state carries from call to call (A.3 step 2).
struct HashMix {
  uint32_t hc = kInitA;
  uint32_t operator()(uint32_t v) {
    v ^= hc;
    hc *= kMultA;
    v *= hc;
    return v ^ (v >> 16);
  }
};

uint32_t mix(uint32_t x, uint32_t y) {
  const uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> 16);
}

u128 pcg_multiplier() { return (u128{0x2360ED051FC65DA4ull} << 64) | 0x4385DF649FCCF645ull; }

}  // namespace

std::array<uint32_t, 4> seed_sequence_pool(uint64_t seed) {
  // Entropy: the seed as little-endian 32-bit words, [0] for seed 0.
  std::vector<uint32_t> words;
  for (uint64_t s = seed; s != 0; s >>= 32) words.push_back(static_cast<uint32_t>(s));
  if (words.empty()) words.push_back(0);
  HashMix hash;
  std::array<uint32_t, 4> pool{};
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hash(i < static_cast<int>(words.size()) ? words[i] : 0u);
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = mix(pool[dst], hash(pool[src]));
    }
  }
  for (size_t i = kPoolSize; i < words.size(); ++i) {
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hash(words[i]));
  }
  return pool;
}

std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  const std::array<uint32_t, 4> pool = seed_sequence_pool(seed);
  uint32_t hb = kInitB;
  uint32_t w[8];
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize] ^ hb;
    hb *= kMultB;
    v *= hb;
    w[i] = v ^ (v >> 16);
  }
  std::array<uint64_t, 4> s{};
  for (int k = 0; k < 4; ++k) s[k] = uint64_t{w[2 * k]} | (uint64_t{w[2 * k + 1]} << 32);
  return s;
}

Pcg64::Pcg64(uint64_t seed) {
  const std::array<uint64_t, 4> s = seed_sequence_state(seed);
  const u128 initstate = (u128{s[0]} << 64) | s[1];
  const u128 initseq = (u128{s[2]} << 64) | s[3];
  inc_ = (initseq << 1) | 1;
  state_ = 0;
  step();
  state_ += initstate;
  step();
}

void Pcg64::step() { state_ = state_ * pcg_multiplier() + inc_; }

uint64_t Pcg64::next64() {
  step();
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return rot == 0 ? x : (x >> rot) | (x << (64 - rot));
}

uint64_t Pcg64::below(uint64_t bound) {
  DSINFER_CHECK(bound > (uint64_t{1} << 32), "Pcg64::below: bound ", bound,
                " takes numpy's 32-bit path, which is not reproduced here");
  u128 m = u128{next64()} * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t t = (0 - bound) % bound;  // (2^64 - bound) mod bound
    while (low < t) {
      m = u128{next64()} * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> numpy_integers(uint64_t seed, uint64_t bound, int64_t n) {
  Pcg64 rng(seed);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(rng.below(bound)));
  return out;
}

}  // namespace dsinfer::model::deepseek_v41
