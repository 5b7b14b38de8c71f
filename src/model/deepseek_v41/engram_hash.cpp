#include "model/deepseek_v41/engram_hash.h"

#include "core/error.h"
#include "model/deepseek_v41/numpy_random.h"
#include "model/engram_constants.h"

namespace dsinfer::model::deepseek_v41 {

std::vector<uint64_t> engram_multipliers(int64_t layer_id, int64_t compressed_vocab_size, int64_t max_ngram) {
  DSINFER_CHECK(compressed_vocab_size > 0 && layer_id >= 0 && max_ngram > 0, "engram multipliers: bad arguments");
  const uint64_t bound = (static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(compressed_vocab_size)) / 2;
  std::vector<uint64_t> out;
  for (int64_t v : numpy_integers(static_cast<uint64_t>(10007 * layer_id), bound, max_ngram)) {
    out.push_back(2 * static_cast<uint64_t>(v) + 1);
  }
  return out;
}

EngramHash::EngramHash(const EngramConfig& engram, int64_t pad_id)
    : n_(engram.max_ngram_size),
      heads_(engram.n_heads),
      columns_(engram.columns()),
      compressed_vocab_(engram.compressed_vocab_size),
      pad_id_(pad_id) {
  DSINFER_CHECK(pad_id >= 0 && pad_id < compressed_vocab_, "Engram: pad id ", pad_id,
                " is not a compressed id below ", compressed_vocab_);
  const auto primes = engram_primes(engram);
  const auto offsets = engram_offsets(primes);
  for (size_t k = 0; k < engram.layer_ids.size(); ++k) {
    EngramLayerHash l;
    l.layer = engram.layer_ids[k];
    l.primes = primes[k];
    l.offsets = offsets[k];
    l.multipliers = engram_multipliers(l.layer, compressed_vocab_, n_);
    layers_.push_back(std::move(l));
  }
}

void EngramHash::rows(int64_t k, const int64_t* history, int64_t* out) const {
  DSINFER_CHECK(k >= 0 && k < static_cast<int64_t>(layers_.size()), "Engram: no layer index ", k);
  const EngramLayerHash& l = layers_[static_cast<size_t>(k)];
  // Products are exact: every multiplier is below (2^63 - 1) / C, so x * m < 2^63 for x < C (A.2).
  uint64_t z = 0;
  for (int64_t j = 0; j < n_; ++j) {
    const int64_t x = history[j];
    DSINFER_CHECK(x >= 0 && x < compressed_vocab_, "Engram: compressed id ", x, " outside [0, ", compressed_vocab_,
                  ")");
    z ^= static_cast<uint64_t>(x) * l.multipliers[static_cast<size_t>(j)];
    if (j == 0) continue;
    for (int64_t h = 0; h < heads_; ++h) {
      const size_t c = static_cast<size_t>((j - 1) * heads_ + h);
      out[c] = static_cast<int64_t>(z % static_cast<uint64_t>(l.primes[c])) + l.offsets[c];
    }
  }
}

}  // namespace dsinfer::model::deepseek_v41
