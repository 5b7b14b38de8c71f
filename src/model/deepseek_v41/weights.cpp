#include "model/deepseek_v41/weights.h"

#include <algorithm>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/qdq.h"

namespace dsinfer::model::deepseek_v41::detail {

using core::DType;

kernels::WeightView Weights::view(const std::string& prefix) const {
  const TensorView& t = ck_.get(prefix + ".weight");
  const int64_t rows = t.shape.at(0);
  switch (t.dtype) {
    case DType::kBF16:
    case DType::kF32:
    case DType::kF8E4M3:
      return ck_.linear(prefix, rows, t.shape.at(1));
    case DType::kI8:
    case DType::kU8:
      return ck_.linear(prefix, rows, t.shape.at(1) * 2);
    default:
      core::fail("V4.1 prefill: weight '", t.name, "' has an unsupported dtype");
  }
}

Vec Weights::rows(const std::string& name, const std::vector<int64_t>& ids) const {
  const TensorView& t = ck_.get(name);
  DSINFER_CHECK(t.dtype == DType::kBF16, "V4.1 prefill: '", name, "' must be BF16");
  const int64_t cols = t.shape.at(1);
  Vec out(static_cast<size_t>(ids.size()) * cols);
  for (size_t i = 0; i < ids.size(); ++i) {
    DSINFER_CHECK(ids[i] >= 0 && ids[i] < t.shape[0], "V4.1 prefill: row ", ids[i], " of '", name, "' out of range");
    for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = core::bf16_to_float(t.as<uint16_t>()[ids[i] * cols + c]);
  }
  return out;
}

void Weights::engram_row(const std::string& prefix, int64_t row, float* out) const {
  const TensorView& t = ck_.get(prefix + "embed.weight");
  const TensorView& s = ck_.get(prefix + "embed.scale");
  const int64_t cols = t.shape.at(1);
  DSINFER_CHECK(row >= 0 && row < t.shape[0], "V4.1 prefill: Engram row ", row, " out of range");
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = core::fp8_e4m3_to_float(t.data[row * cols + c]) * scale(s, row * (cols / 32) + c / 32);
  }
}

float Weights::scale(const TensorView& s, int64_t i) {
  return s.dtype == DType::kF32 ? s.as<float>()[i] : core::e8m0_to_float(s.data[i]);
}

Vec Weights::plain(const TensorView& t) {
  Vec out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kBF16) {
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = core::bf16_to_float(t.as<uint16_t>()[i]);
  } else {
    DSINFER_CHECK(t.dtype == DType::kF32, "V4.1 prefill: '", t.name, "' must be BF16 or F32");
    std::copy(t.as<float>(), t.as<float>() + t.numel(), out.begin());
  }
  return out;
}

const Lin& Weights::prepared(const std::string& prefix, int64_t begin, int64_t end) const {
  const std::string key = core::str_cat(prefix, "#", begin, ":", end);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  kernels::WeightView v = view(prefix);
  if (end >= 0) v = kernels::slice_rows(v, begin, end);
  Lin l;
  l.rows = v.rows;
  l.cols = v.cols;
  if (fast_ && end < 0 && routed_expert(prefix) && v.format == kernels::WeightFormat::kFP4) {
    l.int8 = kernels::Fp4Int8Linear(v);
    l.act_block = ck_.config().activation_block;
  } else if (fast_ && end < 0 && prefix == "head" && v.format == kernels::WeightFormat::kBF16 &&
             kernels::bf16dot_hardware()) {
    l.bf16 = kernels::Bf16DotLinear(v);
  } else if (double_) {
    l.dense.resize(static_cast<size_t>(l.rows * l.cols));
    for (int64_t r = 0; r < l.rows; ++r) {
      for (int64_t c = 0; c < l.cols; ++c) l.dense[r * l.cols + c] = kernels::weight_at(v, r, c);
    }
  } else {
    l.fast = kernels::Linear(v);
    if (official_ && end < 0 && routed_expert(prefix) && v.format == kernels::WeightFormat::kFP4) {
      l.qdq_block = ck_.config().activation_block;
    }
    l.bf16_input = official_ && end < 0 && prefix == "head";
  }
  return cache_.emplace(key, std::move(l)).first->second;
}

void matmul_into(core::ThreadPool& pool, const float* x, int64_t T, int64_t ldx, const Lin& w, float* y, int64_t ldy) {
  Vec rounded;
  if (w.qdq_block > 0 || w.bf16_input) {
    rounded.resize(static_cast<size_t>(T * w.cols));
    for (int64_t t = 0; t < T; ++t) {
      float* r = rounded.data() + t * w.cols;
      std::copy_n(x + t * ldx, w.cols, r);
      if (w.qdq_block > 0) kernels::fp8_block_qdq(r, w.cols, w.qdq_block);
      if (w.bf16_input) {
        for (int64_t c = 0; c < w.cols; ++c) r[c] = core::round_to_bf16(r[c]);
      }
    }
    x = rounded.data();
    ldx = w.cols;
  }
  if (!w.fast.empty()) {
    w.fast.forward(x, T, ldx, y, ldy, &pool);
    return;
  }
  if (!w.int8.empty()) {
    w.int8.forward(x, T, ldx, w.act_block, y, ldy, &pool);
    return;
  }
  if (!w.bf16.empty()) {
    w.bf16.forward(x, T, ldx, y, ldy, &pool);
    return;
  }
  pool.parallel_for(w.rows, 64, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      for (int64_t t = 0; t < T; ++t) y[t * ldy + r] = static_cast<float>(dot(x + t * ldx, w.row(r), w.cols));
    }
  });
}

Vec matmul(core::ThreadPool& pool, const Vec& x, int64_t T, const Lin& w) {
  DSINFER_CHECK(static_cast<int64_t>(x.size()) == T * w.cols, "V4.1 prefill: matmul shape mismatch");
  Vec y(static_cast<size_t>(T * w.rows));
  matmul_into(pool, x.data(), T, w.cols, w, y.data(), w.rows);
  return y;
}

}  // namespace dsinfer::model::deepseek_v41::detail
