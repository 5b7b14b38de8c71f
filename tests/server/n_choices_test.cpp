// n > 1 behind the real API server and engine (tests/engine's toy model), with the engine seen through
// a wrapper that records the order of submissions and events and can refuse one submission: choices
// 1..n-1 are submitted only after choice 0's first event (they then share its prompt's KV through the
// prefix cache), and a later choice that the engine refuses fails the whole call with the refusal's
// status, choice 0 cancelled. The prompt computed once is checked on the real model in tests/e2e
// (n_samples.test.mjs).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http_test_client.h"
#include "recipe/json_text.h"
#include "server/api_server.h"
#include "toy_model.h"
#include "v4_tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;

// The real engine, with each submission logged against the events seen so far; submission number
// `refuse_nth` (1-based; 0: none) is answered kQueueFull instead.
class RecordingEngine final : public engine::Engine {
 public:
  RecordingEngine(std::unique_ptr<engine::Engine> inner, int refuse_nth)
      : inner_(std::move(inner)), refuse_nth_(refuse_nth) {}

  engine::SubmitResult submit(engine::RequestSpec spec, engine::TokenCallback on_event) override {
    {
      std::lock_guard lock(mu_);
      events_before_submit_.push_back(events_);
    }
    if (++submits_ == refuse_nth_) return {engine::SubmitStatus::kQueueFull, 0, "refused by the test"};
    return inner_->submit(std::move(spec), [this, on_event = std::move(on_event)](const engine::TokenEvent& ev) {
      {
        std::lock_guard lock(mu_);
        ++events_;
      }
      on_event(ev);
    });
  }
  void cancel(engine::RequestId id) override { inner_->cancel(id); }
  engine::EngineMetrics metrics() const override { return inner_->metrics(); }
  int64_t max_context() const override { return inner_->max_context(); }
  int32_t eos_token_id() const override { return inner_->eos_token_id(); }
  void shutdown(bool drain) override { inner_->shutdown(drain); }

  // For each submission, how many events (of any request) had been delivered before it.
  std::vector<int> events_before_submit() const {
    std::lock_guard lock(mu_);
    return events_before_submit_;
  }

 private:
  std::unique_ptr<engine::Engine> inner_;
  int refuse_nth_;
  std::atomic<int> submits_{0};
  mutable std::mutex mu_;
  int events_ = 0;
  std::vector<int> events_before_submit_;
};

struct ChoicesServer {
  std::unique_ptr<RecordingEngine> engine;
  std::unique_ptr<ApiServer> api;
  ~ChoicesServer() {
    if (api) api->shutdown(std::chrono::milliseconds(0));
  }
};

std::unique_ptr<ChoicesServer> serve_choices(int refuse_nth, bool share_prompt_kv) {
  auto s = std::make_unique<ChoicesServer>();
  engine::EngineOptions eo;
  eo.prefix_cache = share_prompt_kv;
  s->engine = std::make_unique<RecordingEngine>(
      engine::make_engine(std::make_shared<engine::testing::ToyModel>(engine::testing::ToyConfig{}), eo), refuse_nth);
  ApiServerOptions o;
  o.port = 0;
  o.share_prompt_kv = share_prompt_kv;
  s->api = std::make_unique<ApiServer>(o, *s->engine, v4());
  s->api->start();
  return s;
}

// A Completions call with n choices on a token-id prompt of 40 tokens (two full toy blocks and a tail).
boost::beast::http::response<boost::beast::http::string_body> post_n(uint16_t port, int n) {
  Json prompt = Json::array();
  for (int k = 0; k < 40; ++k) prompt.push_back(2 + (k * 7) % 60);
  const std::string body = recipe::to_compact_json(Json{{"model", "dsinfer"}, {"prompt", prompt}, {"max_tokens", 5},
                                                        {"temperature", 1}, {"seed", 5}, {"n", n}, {"ignore_eos", true}});
  testing::TestClient client(port);
  client.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  return client.read_response();
}

TEST(ApiChoices, LaterChoicesAreSubmittedAfterChoiceZerosFirstEvent) {
  auto s = serve_choices(0, true);
  const auto r = post_n(s->api->port(), 3);
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const Json j = Json::parse(r.body());
  ASSERT_EQ(j["choices"].size(), 3u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 15);
  const std::vector<int> before = s->engine->events_before_submit();
  ASSERT_EQ(before.size(), 3u);
  EXPECT_EQ(before[0], 0);
  EXPECT_GE(before[1], 1) << "choice 1 waited for choice 0's first event";
  EXPECT_GE(before[2], 1) << "choice 2 waited for choice 0's first event";
}

TEST(ApiChoices, ARefusedLaterChoiceFailsTheCallWithItsStatus) {
  auto s = serve_choices(2, true);  // choice 1's submission is refused
  const auto r = post_n(s->api->port(), 3);
  EXPECT_EQ(r.result_int(), 429) << r.body();
  const Json j = Json::parse(r.body());
  EXPECT_NE(j["error"]["message"].get<std::string>().find("queue"), std::string::npos) << r.body();
  // Choice 2 was never submitted; choice 0 was cancelled and the server serves on.
  const auto again = post_n(s->api->port(), 2);
  EXPECT_EQ(again.result_int(), 200) << again.body();
  EXPECT_EQ(s->engine->events_before_submit().size(), 4u);
}

TEST(ApiChoices, WithoutSharingEveryChoiceIsSubmittedAtOnce) {
  auto s = serve_choices(0, false);
  const auto r = post_n(s->api->port(), 3);
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(Json::parse(r.body())["choices"].size(), 3u);
  EXPECT_EQ(s->engine->events_before_submit().size(), 3u);
}

}  // namespace
}  // namespace dsinfer::server
