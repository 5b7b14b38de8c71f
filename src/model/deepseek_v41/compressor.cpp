#include "model/deepseek_v41/prefill_impl.h"

#include "kernels/cpu/qdq.h"
#include "model/layers/pool.h"

namespace dsinfer::model::deepseek_v41::detail {

// The compressor's input rows of the chunk (all rows of a batch): wkv, and wgate for ratio 2.
void Prefill::compressor_inputs(const std::string& p, const Vec& a, int64_t ratio, Vec& u, Vec& g) {
  u = matmul(pool_, a, T_, w_.linear(p + "compressor.wkv"));
  if (ratio == 2) g = matmul(pool_, a, T_, w_.linear(p + "compressor.wgate"));
}

// §2.6: feeds the chunk to a kv source; appends the entries its tokens complete (entry e is made by
// token e * ratio + ratio - 1, a ratio-2 group may start in the previous chunk).
// u, g: this sequence's rows of compressor_inputs.
void Prefill::compress(KvSource& s, const std::string& p, const Vec& u, const Vec& g, int64_t ratio) {
  const int64_t hd = c_.head_dim, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
  const int64_t G0 = s.G, G1 = (pos0_ + T_) / ratio, n = G1 - G0;
  // Position q's row: the chunk's, or (the open group's first, q even) the one kept.
  auto row = [&](const Vec& chunk, const Vec& kept, int64_t q) {
    return q >= pos0_ ? chunk.data() + (q - pos0_) * hd : kept.data() + (q / 2) * hd;
  };
  Vec z(static_cast<size_t>(n * hd));
  std::vector<double> scratch(ratio == 2 ? layers::softmax_pool_scratch(2, hd) : 0);
  for (int64_t e = G0; e < G1; ++e) {
    float* ze = z.data() + (e - G0) * hd;
    if (ratio == 2) {
      const float* values[2] = {row(u, s.u, 2 * e), row(u, s.u, 2 * e + 1)};
      const float* scores[2] = {row(g, s.g, 2 * e), row(g, s.g, 2 * e + 1)};
      layers::softmax_pool(values, scores, 2, hd, layers::PoolOrder::kDivideLast, ze, scratch.data());
    } else {
      std::copy_n(row(u, s.u, e), hd, ze);
    }
  }
  if (ratio == 2) {
    for (int64_t q = pos0_ + pos0_ % 2; q < pos0_ + T_; q += 2) {
      s.u.insert(s.u.end(), u.begin() + (q - pos0_) * hd, u.begin() + (q - pos0_ + 1) * hd);
      s.g.insert(s.g.end(), g.begin() + (q - pos0_) * hd, g.begin() + (q - pos0_ + 1) * hd);
    }
  }
  if (n == 0) return;
  Vec ckv = rms_norm(z, hd, w_.vec(p + "compressor.norm.weight"), c_.rms_norm_eps);
  const std::vector<float> f = inv_freqs(c_, ratio);
  Vec ik = rms_norm(matmul(pool_, ckv, n, w_.linear(p + "indexer.wk")), ixd, w_.vec(p + "indexer.k_norm.weight"),
                    c_.rms_norm_eps);
  for (int64_t i = 0; i < n; ++i) {
    rope(ik.data() + i * ixd, ixd, rd, f, (G0 + i) * ratio);
    rope(ckv.data() + i * hd, hd, rd, f, (G0 + i) * ratio);
    if (opt_.qdq) kernels::fp4_block_qdq(ik.data() + i * ixd, ixd, kKvQdqBlock);
  }
  s.ckv.append(ckv.data(), n);  // with its FP4 QDQ (QDQ on)
  s.ik.insert(s.ik.end(), ik.begin(), ik.end());
  s.G = G1;
}

}  // namespace dsinfer::model::deepseek_v41::detail
