// The router <-> worker protocol (src/disagg/README.md "Roles and protocol"): every message survives an
// encode/parse round trip field by field, the failover re-submission carries prompt + generated as
// output_in_prompt, and a message that is wrong is refused naming the field. Plus the HTTP client's URLs
// and deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "router/http_client.h"
#include "router/worker_protocol.h"

namespace dsinfer::router {
namespace {

using engine::FinishReason;
using Json = nlohmann::json;

HandoffRequest sample_request() {
  HandoffRequest r;
  r.transfer = kMaxTransferId - 1;
  r.prompt_ids = {5, 6, 7};
  r.sampling.temperature = 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.min_p = 0.05f;
  r.sampling.seed = 0xFFFFFFFFFFFFFFFFull;  // beyond 2^63: must stay an exact integer
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
  r.constraint = R"({"kind":"regex","source":"a+","thinking":false})";
  r.decode_ucx_address = "ucx:00ff";
  r.first_token = 42;
  return r;
}

TEST(WorkerProtocol, HandoffRequestRoundTripsEveryField) {
  const HandoffRequest r = sample_request();
  for (bool decode : {false, true}) {
    SCOPED_TRACE(decode);
    const HandoffRequest b = parse_handoff_request(handoff_request_json(r, decode), decode);
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
    EXPECT_EQ(b.constraint, r.constraint);
    EXPECT_EQ(b.decode_ucx_address, decode ? "" : "ucx:00ff");
    EXPECT_EQ(b.first_token, decode ? 42 : -1);
  }
  const engine::RequestSpec spec = to_spec(r);
  EXPECT_EQ(spec.prompt_ids, r.prompt_ids);
  EXPECT_EQ(spec.max_tokens, 12);
  EXPECT_EQ(spec.stop_token_ids, r.stop_token_ids);
  EXPECT_EQ(spec.traffic_class, "agent");
  EXPECT_EQ(spec.output_in_prompt, 2);
  EXPECT_EQ(spec.sampling.frequency_penalty, -0.5f);
}

// The router's half: what it sends for a client's request, first and after a failover. The worker must
// read the generated tokens as output (the engine's output_in_prompt), or penalties would treat them as
// prompt and a resumed stream would differ from an uninterrupted one.
TEST(WorkerProtocol, FailoverResubmitsPromptPlusGeneratedAsOutput) {
  engine::RequestSpec s;
  s.prompt_ids = {5, 6, 7};
  s.max_tokens = 10;
  s.sampling.seed = 3;
  s.sampling.frequency_penalty = 0.5f;
  s.stop_token_ids = {9};
  s.traffic_class = "agent";
  const HandoffRequest first = handoff_request(s, RequestProgress{}, 77);
  EXPECT_EQ(first.transfer, 77u);
  EXPECT_EQ(first.prompt_ids, s.prompt_ids);
  EXPECT_EQ(first.output_in_prompt, 0);
  EXPECT_EQ(first.max_tokens, 10);
  EXPECT_EQ(first.traffic_class, "agent");
  EXPECT_EQ(first.stop_token_ids, s.stop_token_ids);
  RequestProgress p;
  p.generated = {11, 12, 13, 14};
  const HandoffRequest again = handoff_request(s, p, 8);
  EXPECT_EQ(again.prompt_ids, (std::vector<int32_t>{5, 6, 7, 11, 12, 13, 14}));
  EXPECT_EQ(again.output_in_prompt, 4);
  EXPECT_EQ(again.max_tokens, 10);  // the worker counts the 4 toward it
  EXPECT_EQ(again.sampling.frequency_penalty, 0.5f);
  // ...and the worker reads it so.
  const engine::RequestSpec worker = to_spec(parse_handoff_request(handoff_request_json(again, true), true));
  EXPECT_EQ(worker.output_in_prompt, 4);
  EXPECT_EQ(worker.prompt_ids, again.prompt_ids);
}

// A constraint that can cross processes travels as its source(), first and after a failover (the
// worker replays the output_in_prompt tokens into the rebuilt matcher); none travels as no field.
class SourcedConstraint final : public engine::TokenConstraint {
 public:
  void fill_mask(std::span<uint32_t> words) override { std::fill(words.begin(), words.end(), ~0u); }
  bool accept(int32_t) override { return true; }
  void rollback(int32_t) override {}
  std::string source() const override { return R"({"kind":"json_object","source":"","thinking":true})"; }
};

TEST(WorkerProtocol, TheConstraintTravelsAsItsSource) {
  engine::RequestSpec s;
  s.prompt_ids = {5, 6, 7};
  s.max_tokens = 10;
  const HandoffRequest plain = handoff_request(s, RequestProgress{}, 1);
  EXPECT_EQ(handoff_request_json(plain, false).find("constraint"), std::string::npos);
  EXPECT_EQ(parse_handoff_request(handoff_request_json(plain, true), true).constraint, "");
  s.constraint = std::make_shared<SourcedConstraint>();
  RequestProgress p;
  p.generated = {11, 12};
  const HandoffRequest again = handoff_request(s, p, 2);
  EXPECT_EQ(again.constraint, s.constraint->source());
  const HandoffRequest read = parse_handoff_request(handoff_request_json(again, true), true);
  EXPECT_EQ(read.constraint, s.constraint->source());
  EXPECT_EQ(read.output_in_prompt, 2);
}

TEST(WorkerProtocol, MissingSamplingFieldsKeepTheEngineDefaults) {
  const HandoffRequest r =
      parse_handoff_request(R"({"transfer": 1, "prompt_ids": [1], "max_tokens": 2, "sampling": {"temperature": 0}})",
                            false);
  const engine::SamplingParams d;
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, d.top_p);
  EXPECT_EQ(r.sampling.repetition_penalty, d.repetition_penalty);
  EXPECT_EQ(r.sampling.top_logprobs, d.top_logprobs);
  EXPECT_TRUE(r.sampling.logit_bias.empty());
  EXPECT_EQ(r.output_in_prompt, 0);
  EXPECT_EQ(r.traffic_class, "default");
}

TEST(WorkerProtocol, BadHandoffRequestsAreRefusedNamingTheField) {
  auto error = [](const char* text, bool decode) -> std::string {
    try {
      parse_handoff_request(text, decode);
    } catch (const core::Error& e) {
      EXPECT_EQ(e.kind(), core::ErrorKind::kInvalidInput);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error("not json", false).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"prompt_ids": [1], "max_tokens": 2})", false).find("transfer"), std::string::npos);
  EXPECT_NE(error(R"({"transfer": 72057594037927936, "prompt_ids": [1], "max_tokens": 2})", false).find("2^56"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [], "max_tokens": 2})", false).find("prompt_ids"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [1], "max_tokens": 2})", true).find("first_token"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": ["a"], "max_tokens": 2})", false).find("prompt_ids"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [1, 2], "max_tokens": 2, "output_in_prompt": 2})", false)
                .find("output_in_prompt"),
            std::string::npos);
  EXPECT_NE(error(R"({"transfer": 1, "prompt_ids": [1], "max_tokens": 2, "sampling": {"logit_bias": [[1]]}})",
                  false)
                .find("logit_bias"),
            std::string::npos);
}

TEST(WorkerProtocol, PrefillReplyRoundTripsBitwise) {
  PrefillReply r;
  r.first_token = 42;
  r.finish = FinishReason::kNone;
  r.matched_stop_token = -1;
  engine::TokenLogprobs lp;
  lp.logprob = -2.805021047592163f;
  lp.top = {{42, -0.1234567f}, {7, -1.25f}};
  r.logprobs = lp;
  r.prompt_tokens = 3;
  r.cached_tokens = 2;
  r.state_bytes = 4096;
  const PrefillReply b = parse_prefill_reply(prefill_reply_json(r));
  EXPECT_EQ(b.first_token, 42);
  EXPECT_EQ(b.finish, FinishReason::kNone);
  EXPECT_EQ(b.matched_stop_token, -1);
  ASSERT_TRUE(b.logprobs.has_value());
  EXPECT_EQ(b.logprobs->logprob, lp.logprob);
  ASSERT_EQ(b.logprobs->top.size(), 2u);
  EXPECT_EQ(b.logprobs->top[0].token, 42);
  EXPECT_EQ(b.logprobs->top[0].logprob, lp.top[0].logprob);
  EXPECT_EQ(b.logprobs->top[1].token, 7);
  EXPECT_EQ(b.logprobs->top[1].logprob, -1.25f);
  EXPECT_EQ(b.prompt_tokens, 3);
  EXPECT_EQ(b.cached_tokens, 2);
  EXPECT_EQ(b.state_bytes, 4096);
  PrefillReply stop;
  stop.first_token = 1;
  stop.finish = FinishReason::kStop;
  stop.matched_stop_token = 1;
  const PrefillReply s = parse_prefill_reply(prefill_reply_json(stop));
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.matched_stop_token, 1);
  EXPECT_FALSE(s.logprobs.has_value());
  EXPECT_THROW(parse_prefill_reply("not json"), core::Error);
  EXPECT_THROW(parse_prefill_reply(R"({"finish":"none"})"), core::Error);
  EXPECT_THROW(parse_prefill_reply(R"({"first_token":1,"finish":"maybe"})"), core::Error);
}

TEST(WorkerProtocol, DecodeLinesRoundTripSplitAnywhere) {
  DecodeLine plain;
  plain.tokens = {1, 2};
  DecodeLine with_logprobs;
  with_logprobs.tokens = {3};
  with_logprobs.logprobs = {engine::TokenLogprobs{-2.0f, {{3, -2.0f}}}};
  DecodeLine last;
  last.last = true;
  last.finish = FinishReason::kLength;
  const std::string stream = decode_line_json(plain) + decode_line_json(with_logprobs) + "\r\n\n" +
                             decode_line_json(last);
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
    ASSERT_EQ(lines[1].logprobs[0].top.size(), 1u);
    EXPECT_EQ(lines[1].logprobs[0].top[0].token, 3);
    EXPECT_TRUE(lines[2].last);
    EXPECT_TRUE(lines[2].tokens.empty());
    EXPECT_EQ(lines[2].finish, FinishReason::kLength);
    EXPECT_FALSE(s.has_partial());
  }
  DecodeLine failed;
  failed.last = true;
  failed.finish = FinishReason::kError;
  failed.error = "import failed";
  const DecodeLine err = parse_decode_line(decode_line_json(failed));
  EXPECT_EQ(err.finish, FinishReason::kError);
  EXPECT_EQ(err.error, "import failed");
  EXPECT_THROW(parse_decode_line("{}"), core::Error);
  EXPECT_THROW(parse_decode_line(R"({"tokens":[1],"logprobs":[]})"), core::Error);  // counts differ
  EXPECT_THROW(parse_decode_line(R"({"finish":"none"})"), core::Error);
}

TEST(WorkerProtocol, HeartbeatRoundTrips) {
  Heartbeat h;
  h.id = "decode-127.0.0.1:9000-42";
  h.prefill = false;
  h.url = "http://127.0.0.1:9000";
  h.ucx_address = "abc";
  h.max_running = 8;
  h.kv_tokens = 65536;
  h.running = 2;
  h.waiting = 1;
  h.kv_tokens_used = 300;
  h.prefill_tokens = 4000;
  const Heartbeat b = parse_heartbeat(heartbeat_json(h));
  EXPECT_EQ(b.prefill_tokens, 4000);
  EXPECT_EQ(b.id, h.id);
  EXPECT_FALSE(b.prefill);
  EXPECT_EQ(b.url, h.url);
  EXPECT_EQ(b.ucx_address, "abc");
  EXPECT_EQ(b.max_running, 8);
  EXPECT_EQ(b.kv_tokens, 65536);
  EXPECT_EQ(b.running, 2);
  EXPECT_EQ(b.waiting, 1);
  EXPECT_EQ(b.kv_tokens_used, 300);
  h.prefill = true;
  EXPECT_TRUE(parse_heartbeat(heartbeat_json(h)).prefill);
  EXPECT_THROW(parse_heartbeat(R"({"id":"x","role":"both","url":"http://a:1"})"), core::Error);
  EXPECT_THROW(parse_heartbeat(R"({"id":"x","role":"prefill","url":"ftp://a"})"), core::Error);
  EXPECT_THROW(parse_heartbeat(R"({"role":"prefill","url":"http://a:1"})"), core::Error);
}

TEST(HttpUrl, Parses) {
  const HttpUrl u = parse_http_url("http://127.0.0.1:8080/base/");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.base_path, "/base");
  EXPECT_EQ(parse_http_url("http://127.0.0.1:9000").base_path, "");
  const HttpUrl v6 = parse_http_url("http://[::1]:81/cluster");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, "81");
  EXPECT_EQ(v6.base_path, "/cluster");
  EXPECT_EQ(parse_http_url("http://host").port, "80");
  EXPECT_THROW(parse_http_url("https://host:1"), core::Error);
  EXPECT_THROW(parse_http_url("http://host:x1"), core::Error);
  EXPECT_THROW(parse_http_url("http://:1"), core::Error);
}

// A server that accepts the connection (the kernel's backlog) but never answers: the exchange ends at
// its deadline instead of blocking forever (a heartbeat to a hung router must not stall the worker).
TEST(HttpExchange, GivesUpAtItsDeadline) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const HttpUrl url = parse_http_url("http://127.0.0.1:" + std::to_string(silent.local_endpoint().port()));
  EXPECT_THROW(http_exchange(url, "POST", "/internal/v1/workers/heartbeat", "{}", "", std::chrono::milliseconds(50)),
               TransportError);
}

}  // namespace
}  // namespace dsinfer::router
