// Linear at the MEDIUM config's shapes (configs/medium.json): decode (M = 1..8) reported as GB/s of
// weight bytes and the fraction of the measured read bandwidth; batched decode (M = 16, 32) and
// prefill (M = 128..512) as GFLOP/s and the fraction of the measured FMA peak. Up to M = 32 the weights
// of one benchmark are spread over enough copies (≥ 256 MiB) that every call streams them from memory,
// as in a decode step.
//
//   bench_linear                                  all
//   bench_linear --benchmark_filter='M:1/'        decode only
//   DSINFER_THREADS=1 bench_linear ...            one thread
//   bench_linear --benchmark_filter=int8          the FP4 experts' int8 product (--numerics fast, M up to 128), on
//                                                 activations already quantized (the model quantizes
//                                                 an expert's rows once for w1 and w3)
//   bench_linear --benchmark_filter=bf16dot       the FP8 and BF16 (head) products of --numerics fast (bf16
//                                                 dot products, linear_fp8bf16.h / linear_bf16dot.h), next
//                                                 to the exact rows
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/machine_limits.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

struct Shape {
  const char* name;
  WeightFormat format;
  int64_t rows, cols;
  bool prefill;  // also benchmark M = 128..512
};

// MEDIUM: d 1024, 16 heads × 512, q_lora 512, o_groups 4 × o_lora 512, experts 64 × (512 ← 1024),
// vocab 129280. Embedding-sized head first: it is half the bytes of a decoded token.
const Shape kShapes[] = {
    {"head", WeightFormat::kBF16, 129280, 1024, false},
    {"compressor.wkv", WeightFormat::kBF16, 1024, 1024, true},
    {"wq_a", WeightFormat::kFP8, 512, 1024, true},
    {"wq_b", WeightFormat::kFP8, 8192, 512, true},
    {"wo_a.group", WeightFormat::kFP8, 512, 2048, true},
    {"wo_b", WeightFormat::kFP8, 1024, 2048, true},
    {"expert.w1", WeightFormat::kFP4, 512, 1024, true},
    {"expert.w2", WeightFormat::kFP4, 1024, 512, true},
    {"hc_attn_fn", WeightFormat::kF32, 24, 4096, false},
};

// The timed loop: one forward per iteration, cycling through `lins` (copies of one weight, so decode-sized
// products stream from memory instead of the cache).
template <typename L>
void time_round_robin(benchmark::State& state, std::vector<L>& lins, const Shape& s, int64_t M,
                      core::ThreadPool* pool) {
  std::vector<float> x(M * s.cols, 0.01f), y(M * s.rows);
  size_t i = 0;
  for (auto _ : state) {
    lins[i].forward(x.data(), M, s.cols, y.data(), s.rows, pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++i == lins.size()) i = 0;
  }
}

// Cheap deterministic codes (xorshift): the values do not matter for speed, NaN codes are avoided.
struct Source {
  std::vector<uint8_t> data, scales;
  WeightView view;
};

std::unique_ptr<Source> make_source(const Shape& s) {
  auto src = std::make_unique<Source>();
  WeightView& v = src->view;
  v.format = s.format;
  v.rows = s.rows;
  v.cols = s.cols;
  v.name = s.name;
  int64_t bytes = 0, scale_count = 0;
  switch (s.format) {
    case WeightFormat::kF32: bytes = s.rows * s.cols * 4; break;
    case WeightFormat::kBF16: bytes = s.rows * s.cols * 2; break;
    case WeightFormat::kFP8:
      bytes = s.rows * s.cols;
      scale_count = ((s.rows + 127) / 128) * ((s.cols + 127) / 128);
      break;
    case WeightFormat::kFP4:
      bytes = s.rows * s.cols / 2;
      scale_count = s.rows * s.cols / 32;
      break;
  }
  src->data.resize(bytes);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < bytes; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    src->data[i] = static_cast<uint8_t>(state >> 24);
  }
  if (s.format == WeightFormat::kF32) {
    for (int64_t i = 0; i < bytes; i += 4) src->data[i + 3] = 0x3C;  // small normal floats
  } else if (s.format == WeightFormat::kBF16) {
    for (int64_t i = 0; i < bytes; i += 2) src->data[i + 1] = 0x3C;
  } else if (s.format == WeightFormat::kFP8) {
    for (auto& c : src->data)
      if ((c & 0x7F) == 0x7F) c = 0x3F;
  }
  src->scales.assign(scale_count, 120);
  v.data = src->data.data();
  v.scales = src->scales.empty() ? nullptr : src->scales.data();
  return src;
}

const MachineLimits& limits() {
  static const MachineLimits m = [] {
    MachineLimits r;
    const int threads = core::ThreadPool::global().size();
    r.bandwidth = measure_read_bandwidth(threads, int64_t{512} << 20, 3);
    r.fma = measure_fma_peak(threads);
    return r;
  }();
  return m;
}

void run_linear(benchmark::State& state, const Shape& s, int64_t M, Fp8Products fp8 = Fp8Products::kExact) {
  const auto src = make_source(s);
  // Enough copies that one pass over all of them is >= 256 MiB (decode), else one.
  const int64_t one = weight_bytes(src->view);
  const int64_t copies = M <= 32 ? std::max<int64_t>(1, ((int64_t{256} << 20) + one - 1) / one) : 1;
  std::vector<Linear> lins;
  lins.reserve(copies);
  for (int64_t c = 0; c < copies; ++c) lins.emplace_back(src->view, fp8);
  core::ThreadPool* pool = &core::ThreadPool::global();
  time_round_robin(state, lins, s, M, pool);
  const double iters = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(lins[0].bytes());
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(s.rows) * static_cast<double>(s.cols);
  state.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * iters / 1e9, benchmark::Counter::kIsRate);
  // Fractions of the measured limits (rates too, so the division by time is the framework's).
  state.counters["of_bw"] = benchmark::Counter(bytes * iters / 1e9 / limits().bandwidth.gb_per_s,
                                               benchmark::Counter::kIsRate);
  state.counters["of_peak"] = benchmark::Counter(flops * iters / 1e9 / limits().fma.gflops,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(std::string(weight_format_name(s.format)) + (lins[0].bf16_dot() ? " x bf16 " : " ") +
                 current_target_name() + " threads=" +
                 std::to_string(pool->size()));
}

// The --numerics fast product of a BF16 weight (the head): bf16 dot products (Bf16DotLinear).
void run_bf16dot(benchmark::State& state, const Shape& s, int64_t M) {
  const auto src = make_source(s);
  const int64_t one = s.rows * s.cols * 2;
  const int64_t copies = std::max<int64_t>(1, ((int64_t{256} << 20) + one - 1) / one);
  std::vector<Bf16DotLinear> lins;
  lins.reserve(copies);
  for (int64_t c = 0; c < copies; ++c) lins.emplace_back(src->view);
  core::ThreadPool* pool = &core::ThreadPool::global();
  time_round_robin(state, lins, s, M, pool);
  const double iters = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(one);
  state.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["of_bw"] = benchmark::Counter(bytes * iters / 1e9 / limits().bandwidth.gb_per_s,
                                               benchmark::Counter::kIsRate);
  state.SetLabel(std::string("BF16 x bf16 ") + (bf16dot_hardware() ? "vdpbf16ps" : "scalar") +
                 " threads=" + std::to_string(pool->size()));
}

// The --numerics fast product of an FP4 weight (Fp4Int8Linear::forward_quantized, block 128).
void run_int8(benchmark::State& state, const Shape& s, int64_t M) {
  constexpr int64_t kBlock = 128;
  const auto src = make_source(s);
  const int64_t one = weight_bytes(src->view);
  const int64_t copies = std::max<int64_t>(1, ((int64_t{256} << 20) + one - 1) / one);
  std::vector<Fp4Int8Linear> lins;
  lins.reserve(copies);
  for (int64_t c = 0; c < copies; ++c) lins.emplace_back(src->view);
  const int64_t blocks = int8_block_count(s.cols, kBlock);
  std::vector<float> x(M * s.cols), y(M * s.rows), xs(M * blocks);
  for (int64_t i = 0; i < M * s.cols; ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
  std::vector<int8_t> q(M * s.cols);
  quantize_int8_blocks(x.data(), M, s.cols, s.cols, kBlock, q.data(), s.cols, xs.data(), blocks);
  core::ThreadPool* pool = &core::ThreadPool::global();
  int64_t i = 0;
  for (auto _ : state) {
    lins[i].forward_quantized(q.data(), s.cols, xs.data(), blocks, M, kBlock, y.data(), s.rows, pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++i == copies) i = 0;
  }
  const double iters = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(lins[0].bytes());
  state.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["of_bw"] = benchmark::Counter(bytes * iters / 1e9 / limits().bandwidth.gb_per_s,
                                               benchmark::Counter::kIsRate);
  state.SetLabel(std::string("FP4 x int8 ") + current_target_name() + " threads=" + std::to_string(pool->size()));
}

}  // namespace
}  // namespace dsinfer::kernels

int main(int argc, char** argv) {
  using namespace dsinfer::kernels;
  benchmark::Initialize(&argc, argv);
  const MachineLimits& m = limits();
  std::printf("machine: read bandwidth %.1f GB/s (%d threads), fp32 FMA peak %.1f GFLOP/s (%s)\n",
              m.bandwidth.gb_per_s, m.bandwidth.threads, m.fma.gflops, m.fma.target.c_str());
  for (const Shape& s : kShapes) {
    // 16 and 32: the batched decode of that many streams (the products outside the routed experts).
    std::vector<int64_t> ms = {1, 2, 4, 8, 16};
    if (s.prefill) ms.insert(ms.end(), {32, 128, 256, 512});
    for (int64_t M : ms) {
      const std::string name = std::string(s.name) + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                               "/M:" + std::to_string(M) + "/";
      benchmark::RegisterBenchmark(name.c_str(), [s, M](benchmark::State& st) { run_linear(st, s, M); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->MinTime(0.3);
    }
    if (s.format == WeightFormat::kFP8) {
      for (int64_t M : ms) {
        const std::string name = std::string(s.name) + ".bf16dot/" + std::to_string(s.rows) + "x" +
                                 std::to_string(s.cols) + "/M:" + std::to_string(M) + "/";
        benchmark::RegisterBenchmark(name.c_str(),
                                     [s, M](benchmark::State& st) { run_linear(st, s, M, Fp8Products::kBf16Dot); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->MinTime(0.3);
      }
    }
    if (s.format == WeightFormat::kBF16) {
      for (int64_t M : {1, 2, 4, 16}) {
        const std::string name = std::string(s.name) + ".bf16dot/" + std::to_string(s.rows) + "x" +
                                 std::to_string(s.cols) + "/M:" + std::to_string(M) + "/";
        benchmark::RegisterBenchmark(name.c_str(), [s, M](benchmark::State& st) { run_bf16dot(st, s, M); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->MinTime(0.3);
      }
    }
    if (s.format != WeightFormat::kFP4) continue;
    // 48: the rows one expert gets in a 512-token prefill (512 · 6 / 64 on MEDIUM).
    for (int64_t M : {1, 2, 3, 4, 8, 16, 48, 128}) {
      const std::string name = std::string(s.name) + ".int8/" + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols) + "/M:" + std::to_string(M) + "/";
      benchmark::RegisterBenchmark(name.c_str(), [s, M](benchmark::State& st) { run_int8(st, s, M); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->MinTime(0.3);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
