#include "cli/bench_decoder_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/prefill.h"
#include "model/deepseek_v41/token_map.h"

namespace dsinfer::cli {
namespace {

namespace v41 = model::deepseek_v41;
using Clock = std::chrono::steady_clock;

int32_t top1(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int run_decoder_replay_bench(const DecoderReplayBench& b) {
  auto ck = model::Checkpoint::open(b.dir);
  const model::ModelConfig& c = ck->config();
  DSINFER_CHECK(c.arch == model::Architecture::kDeepseekV41,
                "dsinfer bench: --decoder-replay needs a DeepseekV41ForCausalLM checkpoint (", c.architecture, ")");
  const int64_t D = v41::decoder_first_layer(c);
  std::optional<v41::EngramTokenMap> map;
  if (c.engram) map = v41::load_engram_token_map(b.dir, c);
  const v41::EngramTokenMap* m = map ? &*map : nullptr;
  v41::PrefillOptions exact;
  exact.qdq = b.kv_qdq;
  v41::PrefillOptions replay = exact;
  replay.decoder_replay_tokens = b.replay_tokens;
  const auto weights = v41::prepare_weights(*ck, exact);
  std::mt19937 rng(b.seed);
  std::uniform_int_distribution<int32_t> random_token(2, static_cast<int32_t>(c.vocab_size - 1));
  {  // Untimed: prepare the weights (lazily, as a forward touches them: 64 tokens reach every expert).
    std::vector<int32_t> ids(64);
    for (auto& id : ids) id = random_token(rng);
    v41::Sequence warm(*ck, m, exact, weights);
    warm.forward(ids, 1);
  }
  std::printf("decoder-side bounded replay: K = %lld, decoder layers %lld..%lld of %lld (first = the last kv source), "
              "window %lld, KV QDQ %s\n",
              static_cast<long long>(b.replay_tokens), static_cast<long long>(D),
              static_cast<long long>(c.num_hidden_layers - 1), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.sliding_window), b.kv_qdq ? "on" : "off");
  for (const int64_t T : b.prompt_lens) {
    std::vector<int32_t> prompt(static_cast<size_t>(T));
    for (auto& id : prompt) id = random_token(rng);
    std::vector<double> t_exact, t_replay;
    std::optional<v41::Sequence> e, a;
    std::vector<float> e_row, a_row;
    for (int64_t r = 0; r < b.rounds; ++r) {  // interleaved: drift of the machine hits both modes alike
      for (const bool on : {false, true}) {
        v41::Sequence s(*ck, m, on ? replay : exact, weights);
        const auto t0 = Clock::now();
        std::vector<float> row = s.forward(prompt, 1);
        (on ? t_replay : t_exact).push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        (on ? a_row : e_row) = std::move(row);
        (on ? a : e).emplace(std::move(s));
      }
    }
    const double me = median(t_exact), mr = median(t_replay);
    std::printf("prompt %lld: prefill exact %.3f s, replay %.3f s (medians of %lld interleaved rounds): "
                "ratio %.3f, saving %.1f%%\n",
                static_cast<long long>(T), me, mr, static_cast<long long>(b.rounds), mr / me, 100.0 * (1 - mr / me));
    // Both fed the exact run's greedy tokens: the rows compare like for like, and the replay's own greedy
    // continuation equals the exact one up to the first row whose top-1 differs.
    std::vector<double> errs;
    int64_t agree = 0, shared = -1;
    for (int64_t i = 0; i <= b.decode_tokens; ++i) {
      const int32_t next = top1(e_row);
      const bool same = top1(a_row) == next;
      if (i == 0) {
        std::printf("  next-token row: rel error %.3g, top-1 %s\n", rel_error(a_row, e_row), same ? "same" : "differs");
      } else {
        errs.push_back(rel_error(a_row, e_row));
        agree += same;
      }
      if (!same && shared < 0) shared = i;
      if (i == b.decode_tokens) break;
      e_row = e->forward({next}, 1);
      a_row = a->forward({next}, 1);
    }
    if (b.decode_tokens > 0) {
      std::printf("  %lld decode rows (teacher-forced on the exact greedy tokens): rel error median %.3g, max %.3g; "
                  "top-1 agreement %lld/%lld\n",
                  static_cast<long long>(b.decode_tokens), median(errs), *std::max_element(errs.begin(), errs.end()),
                  static_cast<long long>(agree), static_cast<long long>(b.decode_tokens));
    }
    std::printf("  greedy continuation: the first %lld of %lld tokens identical\n",
                static_cast<long long>(shared < 0 ? b.decode_tokens + 1 : shared),
                static_cast<long long>(b.decode_tokens + 1));
  }
  return 0;
}

}  // namespace dsinfer::cli
