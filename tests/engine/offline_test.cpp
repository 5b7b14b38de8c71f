// Offline generation (what `dsinfer generate` runs) over the synthetic model, and its JSONL lines.
#include "engine/offline.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"

#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

TEST(Offline, ResultsComeInInputOrderWithCachedTokens) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::vector<int32_t> long_prompt(40);
  for (int i = 0; i < 40; ++i) long_prompt[i] = 2 + (i * 7) % 60;
  std::vector<RequestSpec> specs = {fixed_length_greedy(long_prompt, 30), fixed_length_greedy({5, 6}, 2),
                                    fixed_length_greedy(long_prompt, 5), fixed_length_greedy({3}, 0) /* refused */,
                                    fixed_length_greedy({9, 9, 9}, 12)};
  for (int64_t concurrency : {1, 3}) {
    EngineOptions o;
    o.swa_replay = false;
    auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
    std::vector<size_t> order;
    std::vector<OfflineResult> results;
    size_t streamed = 0;
    OfflineCallbacks cb;
    cb.on_result = [&](size_t i, const OfflineResult& r) {
      order.push_back(i);
      results.push_back(r);
    };
    cb.on_tokens = [&](size_t, std::span<const int32_t> ids) { streamed += ids.size(); };
    generate_offline(*engine, specs, concurrency, cb);
    ASSERT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
    size_t total = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i == 3) continue;
      EXPECT_EQ(results[i].output_ids, expected_outcome(reference, specs[i], cfg.eos).tokens) << i;
      EXPECT_EQ(results[i].finish, FinishReason::kLength);
      total += results[i].output_ids.size();
    }
    EXPECT_EQ(streamed, total);
    EXPECT_EQ(results[3].finish, FinishReason::kError);
    EXPECT_NE(results[3].error.find("max_tokens"), std::string::npos);
    EXPECT_EQ(results[0].cached_tokens, 0);
    // One after another, the repeated prompt resumes from the first one's snapshot.
    if (concurrency == 1) {
      EXPECT_EQ(results[2].cached_tokens, 32);
    }
  }
}

TEST(Offline, StopTokenEndsTheOutput) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  RequestSpec s = fixed_length_greedy({4, 5, 6, 7}, 10);
  const auto free_run = expected_outcome(reference, s, cfg.eos).tokens;
  s.stop_token_ids = {free_run[2]};
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), EngineOptions{});
  OfflineResult got;
  OfflineCallbacks cb;
  cb.on_result = [&](size_t, const OfflineResult& r) { got = r; };
  generate_offline(*engine, std::span<const RequestSpec>(&s, 1), 1, cb);
  const size_t at = std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin();
  std::vector<int32_t> want(free_run.begin(), free_run.begin() + at + 1);
  EXPECT_EQ(got.output_ids, want);
  EXPECT_EQ(got.finish, FinishReason::kStop);
}

TEST(Offline, ParsesRequestLines) {
  RequestSpec d;
  d.max_tokens = 7;
  d.sampling.temperature = 0.5f;
  auto no_text = [](const std::string&) -> std::vector<int32_t> { throw dsinfer::core::Error("no tokenizer here"); };
  OfflineRequest r = parse_offline_request(R"({"prompt_ids": [1, 2, 3], "max_tokens": 4, "top_p": 0.9, "seed": 11})",
                                           "f:1", d, no_text);
  EXPECT_EQ(r.spec.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.spec.max_tokens, 4);
  EXPECT_FLOAT_EQ(r.spec.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r.spec.sampling.temperature, 0.5f);  // from the defaults
  EXPECT_EQ(r.spec.sampling.seed, 11u);
  EXPECT_FALSE(r.text);
  r = parse_offline_request(R"({"prompt": "ab", "stop_token_ids": [9], "ignore_eos": true, "top_k": 3, "min_p": 0.1})",
                            "f:2", d, [](const std::string& t) { return std::vector<int32_t>(t.size(), 5); });
  EXPECT_EQ(r.spec.prompt_ids, (std::vector<int32_t>{5, 5}));
  EXPECT_TRUE(r.text);
  EXPECT_EQ(r.spec.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(r.spec.ignore_eos);
  EXPECT_EQ(r.spec.sampling.top_k, 3);
  auto message = [&](const std::string& line) {
    try {
      parse_offline_request(line, "prompts.jsonl:3", d, no_text);
    } catch (const dsinfer::core::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("{nope").find("prompts.jsonl:3: not valid JSON"), std::string::npos);
  EXPECT_NE(message("[1]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(message(R"({"max_tokens": 3})").find("needs \"prompt_ids\" or \"prompt\""), std::string::npos);
  EXPECT_NE(message(R"({"prompt_ids": "x"})").find("field \"prompt_ids\""), std::string::npos);
  EXPECT_NE(message(R"({"prompt_ids": [1], "seed": "s"})").find("field \"seed\""), std::string::npos);
  EXPECT_NE(message(R"({"prompt": "hi"})").find("prompts.jsonl:3: no tokenizer here"), std::string::npos);
}

TEST(Offline, FormatsResultLines) {
  OfflineResult r;
  r.output_ids = {4, 5};
  r.finish = FinishReason::kStop;
  r.cached_tokens = 128;
  EXPECT_EQ(format_offline_result(r), R"({"output_ids":[4,5],"finish_reason":"stop","cached_tokens":128})");
  const std::string text = "hi";
  r.error = "x";
  EXPECT_EQ(format_offline_result(r, &text),
            R"({"output_ids":[4,5],"finish_reason":"stop","cached_tokens":128,"text":"hi","error":"x"})");
}

}  // namespace
}  // namespace dsinfer::engine::testing
