// The worker protocol's JSON (README.md "Roles and protocol"): every sampling field and the request
// fields survive the wire by name, and a body that is wrong is refused naming the field.
#include "disagg/worker_protocol.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "disagg/http_client.h"

namespace dsinfer::disagg {
namespace {

TEST(WorkerProtocol, HandoffRequestsRoundTripEveryField) {
  HandoffRequest r;
  r.transfer = (uint64_t{1} << 56) - 1;
  r.prompt_ids = {5, 6, 7};
  r.sampling.temperature = 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.min_p = 0.05f;
  r.sampling.seed = 0xFFFFFFFFFFFFFFFFull;  // beyond 2^53: must stay an exact integer
  r.sampling.stream_key = 77;
  r.sampling.logit_bias = {{3, -1.5f}, {9, 2.0f}};
  r.sampling.presence_penalty = 0.25f;
  r.sampling.frequency_penalty = -0.5f;
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.top_logprobs = 3;
  r.stop_token_ids = {1, 2};
  r.ignore_eos = true;
  r.max_tokens = 12;
  r.traffic_class = "agent";
  r.output_in_prompt = 2;
  r.decode_ucx_address = "ucx:00ff";
  r.first_token = 42;
  for (bool decode : {false, true}) {
    SCOPED_TRACE(decode);
    const HandoffRequest b = handoff_request_from_json(WireJson::parse(to_json(r, decode).dump()), decode);
    EXPECT_EQ(b.transfer, r.transfer);
    EXPECT_EQ(b.prompt_ids, r.prompt_ids);
    EXPECT_EQ(b.sampling.temperature, 0.8f);
    EXPECT_EQ(b.sampling.top_p, 0.9f);
    EXPECT_EQ(b.sampling.top_k, 40);
    EXPECT_EQ(b.sampling.min_p, 0.05f);
    EXPECT_EQ(b.sampling.seed, 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(b.sampling.stream_key, 77u);
    EXPECT_EQ(b.sampling.logit_bias, r.sampling.logit_bias);
    EXPECT_EQ(b.sampling.presence_penalty, 0.25f);
    EXPECT_EQ(b.sampling.frequency_penalty, -0.5f);
    EXPECT_EQ(b.sampling.repetition_penalty, 1.1f);
    EXPECT_EQ(b.sampling.top_logprobs, 3);
    EXPECT_EQ(b.stop_token_ids, r.stop_token_ids);
    EXPECT_TRUE(b.ignore_eos);
    EXPECT_EQ(b.max_tokens, 12);
    EXPECT_EQ(b.traffic_class, "agent");
    EXPECT_EQ(b.output_in_prompt, 2);
    EXPECT_EQ(b.decode_ucx_address, decode ? "" : "ucx:00ff");
    EXPECT_EQ(b.first_token, decode ? 42 : -1);
  }
  const engine::RequestSpec spec = to_spec(r);
  EXPECT_EQ(spec.prompt_ids, r.prompt_ids);
  EXPECT_EQ(spec.max_tokens, 12);
  EXPECT_EQ(spec.stop_token_ids, r.stop_token_ids);
  EXPECT_EQ(spec.traffic_class, "agent");
  EXPECT_EQ(spec.output_in_prompt, 2);
}

TEST(WorkerProtocol, MissingSamplingFieldsKeepTheEngineDefaults) {
  const engine::SamplingParams s = sampling_from_json(WireJson::parse(R"({"temperature": 0})"));
  const engine::SamplingParams d;
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, d.top_p);
  EXPECT_EQ(s.repetition_penalty, d.repetition_penalty);
  EXPECT_EQ(s.top_logprobs, d.top_logprobs);
  EXPECT_TRUE(s.logit_bias.empty());
}

TEST(WorkerProtocol, BadBodiesAreRefusedNamingTheField) {
  auto error = [](const char* text, bool decode) -> std::string {
    try {
      handoff_request_from_json(WireJson::parse(text), decode);
    } catch (const core::Error& e) {
      EXPECT_EQ(e.kind(), core::ErrorKind::kInvalidInput);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(R"({"prompt_ids": [1], "max_tokens": 2})", false).find("transfer"), std::string::npos);
  EXPECT_NE(error(R"({"transfer": 72057594037927936, "prompt_ids": [1], "max_tokens": 2})", false).find("2^56"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [], "max_tokens": 2})", false).find("prompt_ids"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [1], "max_tokens": 2})", true).find("first_token"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": ["a"], "max_tokens": 2})", false).find("prompt_ids"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [1], "max_tokens": 2, "sampling": {"logit_bias": [[1]]}})",
                  false)
                .find("logit_bias"),
            std::string::npos);
}

TEST(WorkerProtocol, LogprobsRoundTripBitwise) {
  engine::TokenLogprobs lp;
  lp.logprob = -2.805021047592163f;
  lp.top = {{7, -0.1234567f}, {9, -3.5f}};
  const engine::TokenLogprobs b = logprobs_from_json(WireJson::parse(logprobs_to_json(lp).dump()));
  EXPECT_EQ(b.logprob, lp.logprob);
  ASSERT_EQ(b.top.size(), 2u);
  EXPECT_EQ(b.top[0].token, 7);
  EXPECT_EQ(b.top[0].logprob, lp.top[0].logprob);
  EXPECT_EQ(b.top[1].logprob, -3.5f);
}

TEST(WorkerProtocol, RouterUrlsParse) {
  HttpUrl u = parse_http_url("http://127.0.0.1:9000");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "9000");
  EXPECT_EQ(u.base, "");
  u = parse_http_url("http://[::1]:81/cluster/");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, "81");
  EXPECT_EQ(u.base, "/cluster");
  EXPECT_EQ(parse_http_url("http://router").port, "80");
  EXPECT_THROW(parse_http_url("https://x:1"), core::Error);
  EXPECT_THROW(parse_http_url("http://:1"), core::Error);
}

}  // namespace
}  // namespace dsinfer::disagg
