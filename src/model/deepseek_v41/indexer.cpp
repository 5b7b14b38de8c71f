#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/index_score.h"
#include "kernels/cpu/qdq.h"

namespace dsinfer::model::deepseek_v41::detail {

// §2.7.2 scores [T][G] (-inf where not visible) of an index source.
// qi [T, ixh * ixd], wts [T, ixh]: this sequence's rows of indexer.wq_b and weights_proj.
std::vector<std::vector<double>> Prefill::index_scores(Vec& qi, const Vec& wts, const KvSource& src,
                                                       const std::vector<float>& f) {
  const int64_t ixh = c_.index_n_heads, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
  const double wscale = 1.0 / std::sqrt(static_cast<double>(ixd)) / std::sqrt(static_cast<double>(ixh));
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t h = 0; h < ixh; ++h) {
      float* q = qi.data() + (t * ixh + h) * ixd;
      rope(q, ixd, rd, f, pos0_ + t);
      if (opt_.qdq) kernels::fp4_block_qdq(q, ixd, kKvQdqBlock);
    }
  }
  std::vector<std::vector<double>> score(static_cast<size_t>(T_), std::vector<double>(src.G, -INFINITY));
  pool_.parallel_for(T_, 4, [&](int64_t tb, int64_t te) {
    std::vector<float> w(static_cast<size_t>(ixh)), out(static_cast<size_t>(src.G));
    for (int64_t t = tb; t < te; ++t) {
      const int64_t n = std::min(src.G, (pos0_ + t + 1) / src.ratio);
      if (opt_.double_accumulation) {
        for (int64_t g = 0; g < n; ++g) {
          double s = 0;
          for (int64_t h = 0; h < ixh; ++h) {
            const double dq = dot(qi.data() + (t * ixh + h) * ixd, src.ik.data() + g * ixd, ixd);
            s += std::max(dq, 0.0) * (wts[t * ixh + h] * wscale);
          }
          score[t][g] = s;
        }
        continue;
      }
      for (int64_t h = 0; h < ixh; ++h) w[h] = static_cast<float>(wts[t * ixh + h] * wscale);
      kernels::index_scores(qi.data() + t * ixh * ixd, w.data(), ixh, ixd, src.ik.data(), n, out.data());
      std::copy_n(out.begin(), n, score[t].begin());
    }
  });
  return score;
}

// §2.8: candidate mask [T][G] of the candidate source.
std::vector<std::vector<bool>> Prefill::candidates(const std::vector<std::vector<double>>& score, int64_t G,
                                                   int64_t ratio) {
  const int64_t B = c_.candidate_block_size, K = c_.candidate_topk_blocks;
  std::vector<std::vector<bool>> mask(static_cast<size_t>(T_), std::vector<bool>(G, false));
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t n = std::min(G, (pos0_ + t + 1) / ratio);
    if (n == 0) continue;
    const int64_t nb = (n + B - 1) / B;
    std::vector<double> bs(static_cast<size_t>(nb), -INFINITY);
    for (int64_t g = 0; g < n; ++g) bs[g / B] = std::max(bs[g / B], score[t][g]);
    bs[(n - 1) / B] = INFINITY;  // the block of the newest visible entry is always kept
    for (int64_t b : topk(bs, K)) {
      for (int64_t g = b * B; g < std::min(n, b * B + B); ++g) mask[t][g] = true;
    }
  }
  return mask;
}

}  // namespace dsinfer::model::deepseek_v41::detail
