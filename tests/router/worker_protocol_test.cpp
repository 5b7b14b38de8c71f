// The router's side of the worker protocol: request bodies (including the failover re-submission of
// prompt + generated tokens), the prefill reply, the decode NDJSON stream and heartbeats.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "router/http_client.h"
#include "router/worker_protocol.h"

namespace dsinfer::router {
namespace {

using engine::FinishReason;
using Json = nlohmann::json;

engine::RequestSpec sample_spec() {
  engine::RequestSpec s;
  s.prompt_ids = {5, 6, 7};
  s.max_tokens = 10;
  s.sampling.temperature = 0.8f;
  s.sampling.seed = 18446744073709551557ull;  // a u64 above 2^63 survives JSON
  s.sampling.logit_bias = {{3, -1.5f}};
  s.sampling.frequency_penalty = 0.5f;
  s.sampling.top_logprobs = 2;
  s.stop_token_ids = {9};
  s.traffic_class = "agent";
  return s;
}

TEST(WorkerProtocol, PrefillBodyCarriesEverySamplingField) {
  const Json j = Json::parse(prefill_request_json(sample_spec(), RequestProgress{}, 77, "ucx-addr"));
  EXPECT_EQ(j["transfer"], 77);
  EXPECT_EQ(j["prompt_ids"], Json::array({5, 6, 7}));
  EXPECT_EQ(j["generated_before"], 0);
  EXPECT_EQ(j["max_tokens"], 10);
  EXPECT_EQ(j["decode_ucx_address"], "ucx-addr");
  EXPECT_EQ(j["sampling"]["seed"].get<uint64_t>(), 18446744073709551557ull);
  EXPECT_FLOAT_EQ(j["sampling"]["temperature"].get<float>(), 0.8f);
  EXPECT_EQ(j["sampling"]["logit_bias"], Json::parse("[[3,-1.5]]"));
  EXPECT_FLOAT_EQ(j["sampling"]["frequency_penalty"].get<float>(), 0.5f);
  EXPECT_EQ(j["sampling"]["top_logprobs"], 2);
  EXPECT_EQ(j["stop_token_ids"], Json::array({9}));
  EXPECT_EQ(j["traffic_class"], "agent");
  EXPECT_FALSE(j.contains("first_token"));
}

TEST(WorkerProtocol, FailoverResubmitsPromptPlusGeneratedWithTheBudgetLeft) {
  RequestProgress p;
  p.generated = {11, 12, 13, 14};
  const Json pre = Json::parse(prefill_request_json(sample_spec(), p, 8, "u"));
  EXPECT_EQ(pre["prompt_ids"], Json::array({5, 6, 7, 11, 12, 13, 14}));
  EXPECT_EQ(pre["generated_before"], 4);
  EXPECT_EQ(pre["max_tokens"], 6);
  const Json dec = Json::parse(decode_request_json(sample_spec(), p, 8, 15));
  EXPECT_EQ(dec["prompt_ids"], pre["prompt_ids"]);  // the prompt the prefill computed; the first token apart
  EXPECT_EQ(dec["first_token"], 15);
  EXPECT_EQ(dec["generated_before"], 4);
  EXPECT_EQ(dec["max_tokens"], 6);
  EXPECT_EQ(dec["transfer"], 8);
  EXPECT_EQ(p.remaining(4), 0);
}

TEST(WorkerProtocol, PrefillReply) {
  const PrefillReply r = parse_prefill_reply(
      R"({"first_token":42,"finish":"none","matched_stop_token":-1,"logprobs":{"logprob":-0.5,"top":[{"token":42,"logprob":-0.5},[7,-1.25]]},"prompt_tokens":3,"cached_tokens":2,"state_bytes":4096})");
  EXPECT_EQ(r.first_token, 42);
  EXPECT_EQ(r.finish, FinishReason::kNone);
  ASSERT_TRUE(r.logprobs.has_value());
  EXPECT_FLOAT_EQ(r.logprobs->logprob, -0.5f);
  ASSERT_EQ(r.logprobs->top.size(), 2u);
  EXPECT_EQ(r.logprobs->top[1].token, 7);
  EXPECT_FLOAT_EQ(r.logprobs->top[1].logprob, -1.25f);
  EXPECT_EQ(r.cached_tokens, 2);
  EXPECT_EQ(r.state_bytes, 4096);
  const PrefillReply stop = parse_prefill_reply(R"({"first_token":1,"finish":"stop","matched_stop_token":1,"logprobs":null,"prompt_tokens":3,"cached_tokens":0,"state_bytes":0})");
  EXPECT_EQ(stop.finish, FinishReason::kStop);
  EXPECT_EQ(stop.matched_stop_token, 1);
  EXPECT_FALSE(stop.logprobs.has_value());
  EXPECT_THROW(parse_prefill_reply("not json"), core::Error);
  EXPECT_THROW(parse_prefill_reply(R"({"finish":"none"})"), core::Error);
  EXPECT_THROW(parse_prefill_reply(R"({"first_token":1,"finish":"maybe"})"), core::Error);
}

TEST(WorkerProtocol, DecodeStreamLinesSplitAnywhere) {
  const std::string stream =
      "{\"tokens\":[1,2],\"logprobs\":null}\n{\"tokens\":[3],\"logprobs\":[{\"logprob\":-2,\"top\":[]}]}\r\n\n"
      "{\"finish\":\"length\",\"matched_stop_token\":-1}\n";
  // Every split point gives the same lines.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    LineSplitter s;
    std::vector<DecodeLine> lines;
    const auto on_line = [&](std::string_view l) { lines.push_back(parse_decode_line(l)); };
    s.feed(std::string_view(stream).substr(0, cut), on_line);
    s.feed(std::string_view(stream).substr(cut), on_line);
    ASSERT_EQ(lines.size(), 3u) << cut;
    EXPECT_EQ(lines[0].tokens, (std::vector<int32_t>{1, 2}));
    EXPECT_TRUE(lines[0].logprobs.empty());
    EXPECT_FALSE(lines[0].last);
    EXPECT_EQ(lines[1].tokens, (std::vector<int32_t>{3}));
    ASSERT_EQ(lines[1].logprobs.size(), 1u);
    EXPECT_FLOAT_EQ(lines[1].logprobs[0].logprob, -2.0f);
    EXPECT_TRUE(lines[2].last);
    EXPECT_EQ(lines[2].finish, FinishReason::kLength);
    EXPECT_FALSE(s.has_partial());
  }
  const DecodeLine err = parse_decode_line(R"({"finish":"error","matched_stop_token":-1,"error":"import failed"})");
  EXPECT_EQ(err.finish, FinishReason::kError);
  EXPECT_EQ(err.error, "import failed");
  EXPECT_THROW(parse_decode_line("{}"), core::Error);
  EXPECT_THROW(parse_decode_line(R"({"tokens":[1],"logprobs":[]})"), core::Error);  // counts differ
  EXPECT_THROW(parse_decode_line(R"({"finish":"none"})"), core::Error);
}

TEST(WorkerProtocol, Heartbeat) {
  const Heartbeat h = parse_heartbeat(
      R"({"id":"decode-127.0.0.1:9000-42","role":"decode","url":"http://127.0.0.1:9000","ucx_address":"abc",)"
      R"("capacity":{"max_running":8,"kv_tokens":65536},"load":{"running":2,"waiting":1,"kv_tokens_used":300}})");
  EXPECT_EQ(h.id, "decode-127.0.0.1:9000-42");
  EXPECT_FALSE(h.prefill);
  EXPECT_EQ(h.url, "http://127.0.0.1:9000");
  EXPECT_EQ(h.ucx_address, "abc");
  EXPECT_EQ(h.max_running, 8);
  EXPECT_EQ(h.kv_tokens, 65536);
  EXPECT_EQ(h.running, 2);
  EXPECT_EQ(h.waiting, 1);
  EXPECT_EQ(h.kv_tokens_used, 300);
  EXPECT_THROW(parse_heartbeat(R"({"id":"x","role":"both","url":"http://a:1"})"), core::Error);
  EXPECT_THROW(parse_heartbeat(R"({"id":"x","role":"prefill","url":"ftp://a"})"), core::Error);
  EXPECT_THROW(parse_heartbeat(R"({"role":"prefill","url":"http://a:1"})"), core::Error);
}

TEST(HttpUrl, Parses) {
  const HttpUrl u = parse_http_url("http://127.0.0.1:8080/base/");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.base_path, "/base");
  const HttpUrl v6 = parse_http_url("http://[::1]:9");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, "9");
  EXPECT_EQ(parse_http_url("http://host").port, "80");
  EXPECT_THROW(parse_http_url("https://host:1"), core::Error);
  EXPECT_THROW(parse_http_url("http://host:x1"), core::Error);
}

}  // namespace
}  // namespace dsinfer::router
