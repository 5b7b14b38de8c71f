#include "model/engram_constants.h"

namespace dsinfer::model {
namespace {

// Trial division: the config check bounds the start (below 2^31) and the count, so this stays cheap.
bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (int64_t d = 5; d * d <= n; d += 6) {
    if (n % d == 0 || n % (d + 2) == 0) return false;
  }
  return true;
}

}  // namespace

std::vector<std::vector<int64_t>> engram_primes(const EngramConfig& engram) {
  // The reference restarts its search at vocab_size for every (layer, n-gram) but skips primes already
  // used, so the result is simply the consecutive primes from vocab_size on (A.1).
  std::vector<std::vector<int64_t>> out(engram.layer_ids.size());
  int64_t next = engram.vocab_size;
  for (auto& layer : out) {
    for (int64_t c = 0; c < engram.columns(); ++c) {
      while (!is_prime(next)) ++next;
      layer.push_back(next++);
    }
  }
  return out;
}

std::vector<std::vector<int64_t>> engram_offsets(const std::vector<std::vector<int64_t>>& primes) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& layer : primes) {
    std::vector<int64_t> offsets;
    int64_t sum = 0;
    for (int64_t p : layer) {
      offsets.push_back(sum);
      sum += p;
    }
    out.push_back(std::move(offsets));
  }
  return out;
}

}  // namespace dsinfer::model
