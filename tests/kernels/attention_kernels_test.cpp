// Sink attention, indexer scores and compressor pooling: every SIMD target against the scalar oracle
// and against a float64 evaluation of the defining formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"

#include "kernels/cpu/index_score.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_bf16dot_scalar.h"
#include "kernels/cpu/sink_attention.h"
#include "kernels/cpu/targets.h"
#include "random_data.h"

namespace dsinfer::kernels {
namespace {

using testing::random_vec;

// float64 definition of §2.9
std::vector<double> attention_f64(const std::vector<float>& q, int64_t H, int64_t D, const std::vector<const float*>& rows,
                                  const std::vector<float>& sink, double scale) {
  std::vector<double> out(H * D, 0.0);
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> l(n);
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < D; ++i) acc += static_cast<double>(q[h * D + i]) * rows[j][i];
      l[j] = acc * scale;
      m = std::max(m, l[j]);
    }
    double den = std::exp(sink[h] - m);
    for (int64_t j = 0; j < n; ++j) den += std::exp(l[j] - m);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < D; ++i) out[h * D + i] += std::exp(l[j] - m) / den * rows[j][i];
  }
  return out;
}

TEST(SinkAttention, EveryTargetMatchesScalarAndDefinition) {
  struct Shape { int64_t heads, dim, n; };
  for (const Shape s : {Shape{1, 8, 1}, Shape{4, 128, 3}, Shape{4, 128, 40}, Shape{16, 512, 129}, Shape{3, 20, 17}}) {
    const auto q = random_vec(s.heads * s.dim, 1 + s.n, 0.3f);
    const auto kv = random_vec(s.n * s.dim, 2 + s.n);
    auto sink = random_vec(s.heads, 3 + s.n, 2.0f);
    std::vector<const float*> rows;
    // Rows in a scrambled order of the storage, as a caller gathering window + compressed rows would pass.
    for (int64_t j = 0; j < s.n; ++j) rows.push_back(kv.data() + ((j * 7) % s.n) * s.dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
    const auto exact = attention_f64(q, s.heads, s.dim, rows, sink, scale);
    std::vector<float> scratch(s.heads * (s.n + 1)), ref(s.heads * s.dim);
    SinkAttention a;
    a.q = q.data(); a.heads = s.heads; a.dim = s.dim; a.rows = rows.data(); a.n = s.n; a.sink = sink.data();
    a.scale = scale; a.scratch = scratch.data(); a.out = ref.data();
    sink_attention_scalar(a);
    for (int64_t i = 0; i < s.heads * s.dim; ++i) ASSERT_NEAR(ref[i], exact[i], 1e-5) << "scalar i=" << i;
    for (const auto& target : available_targets()) {
      ScopedTarget scope(target);
      std::vector<float> out(s.heads * s.dim, 123.0f);
      a.out = out.data();
      sink_attention(a);
      for (int64_t i = 0; i < s.heads * s.dim; ++i) ASSERT_NEAR(out[i], ref[i], 2e-6 + 1e-5 * std::fabs(ref[i])) << target.name;
    }
  }
}

TEST(SinkAttention, HeadResultDoesNotDependOnTheOtherHeads) {
  // Callers split heads across threads differently depending on batch size and thread count.
  const int64_t H = 5, D = 128, n = 23;
  const auto q = random_vec(H * D, 31);
  const auto kv = random_vec(n * D, 32);
  const auto sink = random_vec(H, 33);
  std::vector<const float*> rows;
  for (int64_t j = 0; j < n; ++j) rows.push_back(kv.data() + j * D);
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    std::vector<float> all(H * D), scratch(H * (n + 1));
    SinkAttention a;
    a.q = q.data(); a.heads = H; a.dim = D; a.rows = rows.data(); a.n = n; a.sink = sink.data(); a.scale = 0.1f;
    a.out = all.data(); a.scratch = scratch.data();
    sink_attention(a);
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float> one(D);
      SinkAttention b = a;
      b.q = q.data() + h * D; b.heads = 1; b.sink = sink.data() + h; b.out = one.data();
      sink_attention(b);
      for (int64_t i = 0; i < D; ++i) ASSERT_EQ(one[i], all[h * D + i]) << target.name << " head " << h;
    }
  }
}

// The weighted sum of the rows is, per output element, one chain of multiply-adds from zero with the
// rows in the given order (the order the model's batch and chunk invariance rests on), whatever the
// blocking of heads, rows and dims. With q = 0 every probability is exactly 1 and a sink of -inf adds
// nothing to the denominator, so o = (k_0 + k_1 + ... in fp32, left to right) / n bitwise; dims with a
// scalar tail and head counts with a single head left over included.
TEST(SinkAttention, WeightedSumIsOneChainInRowOrderBitwise) {
  struct Shape { int64_t heads, dim, n; };
  for (const Shape s : {Shape{3, 512, 37}, Shape{7, 512, 20}, Shape{5, 20, 9}, Shape{2, 72, 130}, Shape{1, 8, 1}}) {
    const std::vector<float> q(s.heads * s.dim, 0.0f);
    const auto kv = random_vec(s.n * s.dim, 40 + s.n);
    const std::vector<float> sink(s.heads, -INFINITY);
    std::vector<const float*> rows;
    for (int64_t j = 0; j < s.n; ++j) rows.push_back(kv.data() + ((j * 5) % s.n) * s.dim);
    std::vector<float> want(s.dim);
    for (int64_t i = 0; i < s.dim; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < s.n; ++j) acc += rows[j][i];
      want[i] = acc / static_cast<float>(s.n);
    }
    for (const auto& target : available_targets()) {
      ScopedTarget scope(target);
      std::vector<float> out(s.heads * s.dim, 123.0f), scratch(s.heads * (s.n + 1));
      SinkAttention a;
      a.q = q.data(); a.heads = s.heads; a.dim = s.dim; a.rows = rows.data(); a.n = s.n; a.sink = sink.data();
      a.scale = 0.5f; a.out = out.data(); a.scratch = scratch.data();
      sink_attention(a);
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t i = 0; i < s.dim; ++i)
          ASSERT_EQ(out[h * s.dim + i], want[i]) << target.name << " dim " << s.dim << " head " << h << " i " << i;
    }
  }
}

// n rows of dim floats as packed rows (SinkAttention::packed) of bf16_dims bf16 values, then floats; kv's
// bf16 dims are rounded to what the packed rows hold.
std::vector<uint8_t> pack_rows(std::vector<float>& kv, int64_t n, int64_t dim, int64_t bf16_dims) {
  const int64_t row_bytes = bf16_dims * 2 + (dim - bf16_dims) * 4;
  std::vector<uint8_t> packed(n * row_bytes);
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* dst = packed.data() + j * row_bytes;
    for (int64_t i = 0; i < dim; ++i) {
      float& v = kv[j * dim + i];
      if (i < bf16_dims) {
        v = core::round_to_bf16(v);
        const uint16_t b = core::float_to_bf16(v);
        std::memcpy(dst + 2 * i, &b, 2);
      } else {
        std::memcpy(dst + 2 * bf16_dims + 4 * (i - bf16_dims), &v, 4);
      }
    }
  }
  return packed;
}

// Packed rows (bf16 dims, then fp32) hold values that fp32 rows hold too; the result is bitwise that of
// those fp32 rows, on every target and in the scalar oracle: heads beyond one block, rows beyond one
// logit block, dims with a scalar tail, the split at 0, inside and at the end of the dims.
TEST(SinkAttention, PackedRowsGiveTheFp32RowsResultBitwise) {
  struct Shape { int64_t heads, dim, n, bf16_dims; };
  for (const Shape s : {Shape{16, 512, 37, 448}, Shape{4, 128, 9, 64}, Shape{5, 72, 13, 64}, Shape{3, 40, 6, 32},
                        Shape{2, 64, 5, 0}, Shape{6, 48, 21, 48}, Shape{1, 16, 1, 16}}) {
    const auto q = random_vec(s.heads * s.dim, 50 + s.n, 0.3f);
    auto kv = random_vec(s.n * s.dim, 60 + s.n);
    const auto sink = random_vec(s.heads, 70 + s.n, 2.0f);
    const int64_t row_bytes = s.bf16_dims * 2 + (s.dim - s.bf16_dims) * 4;
    const std::vector<uint8_t> packed = pack_rows(kv, s.n, s.dim, s.bf16_dims);
    std::vector<const float*> rows;
    std::vector<const uint8_t*> packed_rows;
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t r = (j * 7) % s.n;
      rows.push_back(kv.data() + r * s.dim);
      packed_rows.push_back(packed.data() + r * row_bytes);
    }
    std::vector<float> scratch(s.heads * (s.n + 1));
    SinkAttention a;
    a.q = q.data(); a.heads = s.heads; a.dim = s.dim; a.rows = rows.data(); a.n = s.n; a.sink = sink.data();
    a.scale = 0.1f; a.scratch = scratch.data();
    SinkAttention b = a;
    b.rows = nullptr; b.packed = packed_rows.data(); b.packed_bf16 = s.bf16_dims;
    for (bool bf16_probs : {false, true}) {
      a.bf16_probs = b.bf16_probs = bf16_probs;
      std::vector<float> want(s.heads * s.dim), got(s.heads * s.dim, 123.0f);
      a.out = want.data(); b.out = got.data();
      sink_attention_scalar(a);
      sink_attention_scalar(b);
      for (int64_t i = 0; i < s.heads * s.dim; ++i) ASSERT_EQ(core::float_bits(got[i]), core::float_bits(want[i])) << "scalar " << i;
      for (const auto& target : available_targets()) {
        ScopedTarget scope(target);
        std::fill(got.begin(), got.end(), 123.0f);
        a.out = want.data();
        sink_attention(a);
        b.out = got.data();
        sink_attention(b);
        for (int64_t i = 0; i < s.heads * s.dim; ++i)
          ASSERT_EQ(core::float_bits(got[i]), core::float_bits(want[i]))
              << target.name << " dim " << s.dim << " bf16 dims " << s.bf16_dims << " i " << i;
      }
    }
  }
  SinkAttention bad;
  std::vector<float> scratch(4), out(24);
  const uint8_t* row = nullptr;
  const float sink = 0.0f;
  bad.q = out.data(); bad.heads = 1; bad.dim = 24; bad.packed = &row; bad.packed_bf16 = 8; bad.n = 1;
  bad.sink = &sink; bad.out = out.data(); bad.scratch = scratch.data();
  EXPECT_THROW(sink_attention(bad), core::Error);  // 8 bf16 dims: a vector would straddle the parts
}

// Fast numerics' logits: vdpbf16ps chains over the bf16 dims against bf16-rounded q. On the AVX-512
// target the hardware path and sink_logit_bf16_model give the same attention output bitwise (only the
// logits differ between the two paths); every target matches the scalar oracle and a float64
// evaluation of the definition with q's bf16 dims rounded; and the flag changes the result.
TEST(SinkAttention, Bf16LogitsAreTheModelsOnEveryTarget) {
  struct Shape { int64_t heads, dim, n, bf16_dims; };
  for (const Shape s : {Shape{16, 512, 37, 448}, Shape{4, 128, 9, 64}, Shape{5, 80, 13, 64}, Shape{3, 72, 6, 32},
                        Shape{1, 32, 1, 32}, Shape{6, 96, 130, 64}}) {
    auto q = random_vec(s.heads * s.dim, 80 + s.n, 0.3f);
    auto kv = random_vec(s.n * s.dim, 90 + s.n);
    const auto sink = random_vec(s.heads, 100 + s.n, 2.0f);
    kv[1] = core::bf16_to_float(0x0001);  // a bf16 subnormal, which the instruction reads as zero
    q[1] = core::bf16_to_float(0x8003);
    const int64_t row_bytes = s.bf16_dims * 2 + (s.dim - s.bf16_dims) * 4;
    const std::vector<uint8_t> packed = pack_rows(kv, s.n, s.dim, s.bf16_dims);
    std::vector<const uint8_t*> rows;
    for (int64_t j = 0; j < s.n; ++j) rows.push_back(packed.data() + ((j * 7) % s.n) * row_bytes);
    SinkAttention a;
    a.q = q.data(); a.heads = s.heads; a.dim = s.dim; a.packed = rows.data(); a.packed_bf16 = s.bf16_dims;
    a.n = s.n; a.sink = sink.data(); a.scale = 0.1f; a.bf16_logits = true;
    std::vector<float> scratch(sink_attention_scratch(a)), ref(s.heads * s.dim);
    a.scratch = scratch.data();
    a.out = ref.data();
    sink_attention_scalar(a);
    // The definition in float64, q's bf16 dims rounded, subnormal bf16 products dropped.
    std::vector<float> qr = q;
    std::vector<const float*> frows;
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.bf16_dims; ++i) {
        float& v = qr[h * s.dim + i];
        v = detail::bf16_daz(core::float_to_bf16(v));
      }
    std::vector<float> kd = kv;
    for (int64_t j = 0; j < s.n; ++j)
      for (int64_t i = 0; i < s.bf16_dims; ++i) kd[j * s.dim + i] = detail::bf16_daz(core::float_to_bf16(kd[j * s.dim + i]));
    for (int64_t j = 0; j < s.n; ++j) frows.push_back(kd.data() + ((j * 7) % s.n) * s.dim);
    const auto exact = attention_f64(qr, s.heads, s.dim, frows, sink, 0.1);
    for (int64_t i = 0; i < s.heads * s.dim; ++i) ASSERT_NEAR(ref[i], exact[i], 1e-5) << "scalar i=" << i;
    std::vector<float> plain(s.heads * s.dim);
    SinkAttention e = a;
    e.bf16_logits = false;
    e.out = plain.data();
    sink_attention_scalar(e);
    if (s.dim >= 128) {
      EXPECT_NE(ref, plain) << "bf16 logits gave the fp32 logits' result";
    }
    for (const auto& target : available_targets()) {
      ScopedTarget scope(target);
      std::vector<float> hw(s.heads * s.dim, 123.0f), model(s.heads * s.dim, 321.0f);
      a.out = hw.data();
      sink_attention(a);
      detail::set_bf16dot_hw_allowed(false);
      a.out = model.data();
      sink_attention(a);
      detail::set_bf16dot_hw_allowed(true);
      for (int64_t i = 0; i < s.heads * s.dim; ++i) {
        ASSERT_EQ(core::float_bits(hw[i]), core::float_bits(model[i])) << target.name << " dim " << s.dim << " i " << i;
        ASSERT_NEAR(hw[i], ref[i], 2e-6 + 1e-5 * std::fabs(ref[i])) << target.name;
      }
    }
  }
}

TEST(SinkAttention, SinkOnlyInflatesDenominator) {
  // One row: o = k · e^0 / (e^0 + e^(sink - l)) with l the only logit; a very negative sink gives o = k.
  const int64_t D = 16;
  const auto q = random_vec(D, 5);
  const auto k = random_vec(D, 6);
  const float* rows[1] = {k.data()};
  for (float sink : {-100.0f, 0.0f, 3.0f}) {
    float l = 0;
    for (int i = 0; i < D; ++i) l += q[i] * k[i];
    const double frac = 1.0 / (1.0 + std::exp(static_cast<double>(sink) - l));
    for (const auto& target : available_targets()) {
      ScopedTarget scope(target);
      std::vector<float> out(D), scratch(2);
      SinkAttention a;
      a.q = q.data(); a.heads = 1; a.dim = D; a.rows = rows; a.n = 1; a.sink = &sink; a.scale = 1.0f;
      a.out = out.data(); a.scratch = scratch.data();
      sink_attention(a);
      for (int i = 0; i < D; ++i) ASSERT_NEAR(out[i], k[i] * frac, 1e-5) << target.name << " sink " << sink;
    }
  }
}

TEST(SinkAttention, Bf16ProbabilitiesAreRounded) {
  const int64_t H = 2, D = 32, n = 19;
  const auto q = random_vec(H * D, 8);
  const auto kv = random_vec(n * D, 9);
  const auto sink = random_vec(H, 10);
  std::vector<const float*> rows;
  for (int64_t j = 0; j < n; ++j) rows.push_back(kv.data() + j * D);
  std::vector<float> ref(H * D), scratch(H * (n + 1));
  SinkAttention a;
  a.q = q.data(); a.heads = H; a.dim = D; a.rows = rows.data(); a.n = n; a.sink = sink.data(); a.scale = 0.2f;
  a.scratch = scratch.data(); a.bf16_probs = true; a.out = ref.data();
  sink_attention_scalar(a);
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    std::vector<float> out(H * D);
    a.out = out.data();
    sink_attention(a);
    for (int64_t i = 0; i < H * D; ++i) ASSERT_NEAR(out[i], ref[i], 2e-3 * (1 + std::fabs(ref[i]))) << target.name;
  }
}

TEST(IndexScores, EveryTargetMatchesScalarAndDefinition) {
  for (int64_t heads : {1, 4, 16}) {
    for (int64_t dim : {32, 64, 128, 40}) {
      const int64_t n = 37;
      const auto q = random_vec(heads * dim, heads + dim);
      const auto w = random_vec(heads, 7 + heads);
      const auto keys = random_vec(n * dim, 11 + dim);
      std::vector<float> ref(n);
      index_scores_scalar(q.data(), w.data(), heads, dim, keys.data(), n, ref.data());
      for (int64_t t = 0; t < n; ++t) {
        double exact = 0, mag = 0;
        for (int64_t h = 0; h < heads; ++h) {
          double dt = 0;
          for (int64_t i = 0; i < dim; ++i) dt += static_cast<double>(q[h * dim + i]) * keys[t * dim + i];
          exact += std::max(dt, 0.0) * w[h];
          mag += std::fabs(dt * w[h]);
        }
        ASSERT_NEAR(ref[t], exact, 1e-5 * (mag + 1));
      }
      for (const auto& target : available_targets()) {
        ScopedTarget scope(target);
        std::vector<float> out(n);
        index_scores(q.data(), w.data(), heads, dim, keys.data(), n, out.data());
        for (int64_t t = 0; t < n; ++t) ASSERT_NEAR(out[t], ref[t], 1e-4 * (1 + std::fabs(ref[t]))) << target.name;
        // A key's score does not depend on the other keys in the call.
        std::vector<float> one(1);
        index_scores(q.data(), w.data(), heads, dim, keys.data() + 5 * dim, 1, one.data());
        ASSERT_EQ(one[0], out[5]) << target.name;
      }
    }
  }
}

}  // namespace
}  // namespace dsinfer::kernels
