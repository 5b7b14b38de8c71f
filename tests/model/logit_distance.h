// How far one run's logits are from another's, row by row: what the fast-numerics fidelity tests of
// every model compare (fast and official numerics, each against the plain exact run).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dsinfer::model::testing {

struct LogitDistance {
  double median_rel = 0;  // median over rows of ||a - b|| / ||b||
  double mean_kl = 0;     // mean over rows of KL(softmax(b) || softmax(a)), nats
  double top1 = 0;        // share of rows with the same argmax
};

// a and b: [rows][vocab] logits, b the baseline.
inline LogitDistance logit_distance(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(b.size()) / vocab;
  std::vector<double> rel;
  LogitDistance out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * vocab;
    const float* y = b.data() + r * vocab;
    double num = 0, den = 0, mx = -1e300, my = -1e300;
    for (int64_t v = 0; v < vocab; ++v) {
      num += std::pow(double(x[v]) - y[v], 2);
      den += double(y[v]) * y[v];
      mx = std::max(mx, double(x[v]));
      my = std::max(my, double(y[v]));
    }
    rel.push_back(std::sqrt(num / den));
    double zx = 0, zy = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      zx += std::exp(x[v] - mx);
      zy += std::exp(y[v] - my);
    }
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double py = std::exp(y[v] - my) / zy, lx = x[v] - mx - std::log(zx), ly = y[v] - my - std::log(zy);
      kl += py * (ly - lx);
    }
    out.mean_kl += kl / static_cast<double>(rows);
    out.top1 += (std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y) ? 1.0 / rows : 0.0;
  }
  std::nth_element(rel.begin(), rel.begin() + rel.size() / 2, rel.end());
  out.median_rel = rel[rel.size() / 2];
  return out;
}

}  // namespace dsinfer::model::testing
