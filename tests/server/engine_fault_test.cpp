// A model fault behind the real API server: the requests of the step that failed are answered 500 with
// an incident id (the model's text stays in the log), every other request is served in full, and the
// server keeps serving. The engine is the real one over tests/engine's toy model; the requests are
// Completions with token-id prompts over HTTP, 12 at once. (Which requests share a step is up to the
// engine; tests/engine/engine_fault_test.cpp checks every phase with batched steps.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "recipe/json_text.h"
#include "server/api_server.h"
#include "tokenizer/tokenizer.h"
#include "toy_model.h"
#include "v4_tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;

// The toy model whose nth forward call throws after computing (the sequences advanced: the engine
// must not trust them). nth = 0: never.
class ForwardFault final : public engine::ModelRunner {
 public:
  explicit ForwardFault(int64_t nth) : nth_(nth) {}
  const engine::ModelInfo& info() const override { return inner_.info(); }
  core::ThreadPool& pool() override { return inner_.pool(); }
  void prepare(bool speculation, bool batch_invariant) override { inner_.prepare(speculation, batch_invariant); }
  std::unique_ptr<engine::SequenceState> new_sequence() override { return inner_.new_sequence(); }
  void forward(std::span<const engine::ForwardItem> items, std::vector<float>& logits) override {
    inner_.forward(items, logits);
    if (++calls_ == nth_) {
      failed_items_ = static_cast<int64_t>(items.size());
      throw std::runtime_error("injected model fault");
    }
  }
  void truncate(engine::SequenceState& seq, int64_t length) override { inner_.truncate(seq, length); }
  std::shared_ptr<const engine::KvBlock> block(const engine::SequenceState& seq, int64_t index) override {
    return inner_.block(seq, index);
  }
  std::shared_ptr<const engine::WindowSnapshot> snapshot(const engine::SequenceState& seq) override {
    return inner_.snapshot(seq);
  }
  void attach(engine::SequenceState& seq, std::span<const std::shared_ptr<const engine::KvBlock>> blocks,
              const engine::WindowSnapshot* snapshot) override {
    inner_.attach(seq, blocks, snapshot);
  }
  int64_t failed_items() const { return failed_items_; }

 private:
  engine::testing::ToyModel inner_{engine::testing::ToyConfig{}};
  int64_t nth_;
  int64_t calls_ = 0, failed_items_ = 0;  // called from the engine's one model thread
};

struct Reply {
  int status = 0;
  Json body;
};

// One request on its own connection (Connection: close), read to the end.
Reply post(uint16_t port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("connect failed");
  }
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  Reply r;
  if (raw.size() > 12) r.status = std::stoi(raw.substr(9, 3));
  const size_t start = raw.find("\r\n\r\n");
  if (start != std::string::npos) r.body = Json::parse(raw.substr(start + 4), nullptr, false);
  return r;
}

std::string completion(int i) {
  Json prompt = Json::array();
  for (int k = 0; k < 5 + i % 7; ++k) prompt.push_back(2 + (i * 13 + k * 7) % 60);
  return recipe::to_compact_json(Json{{"model", "dsinfer"}, {"prompt", prompt}, {"max_tokens", 6 + i % 5},
                                      {"temperature", 0}, {"ignore_eos", true}});
}

struct Served {
  std::shared_ptr<ForwardFault> model;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<ApiServer> api;
};

Served serve(int64_t fault_at, bool overlap) {
  Served s;
  s.model = std::make_shared<ForwardFault>(fault_at);
  engine::EngineOptions eo;
  eo.prefix_cache = false;  // every request computes its own prompt: the reference run is exact
  eo.overlap_scheduling = overlap;
  // One sequence per step: the failed step holds exactly one request whatever the arrival order, and the
  // requests waiting behind it must all be served.
  eo.max_running = 1;
  s.engine = engine::make_engine(s.model, eo);
  ApiServerOptions o;
  o.port = 0;
  s.api = std::make_unique<ApiServer>(o, *s.engine, v4());
  s.api->start();
  return s;
}

std::vector<Reply> send_all(uint16_t port, int n) {
  std::vector<std::future<Reply>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [port, i] { return post(port, "/v1/completions", completion(i)); }));
  std::vector<Reply> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

TEST(ApiEngineFaults, AModelFaultFailsOnlyItsStepAndTheServerKeepsServing) {
  constexpr int kRequests = 12;
  std::vector<std::string> expected;
  {
    Served ref = serve(0, true);
    for (int i = 0; i < kRequests; ++i) {
      const Reply r = post(ref.api->port(), "/v1/completions", completion(i));
      ASSERT_EQ(r.status, 200) << r.body.dump();
      expected.push_back(r.body["choices"][0]["text"].get<std::string>());
    }
    ref.api->shutdown(std::chrono::milliseconds(0));
  }
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    Served s = serve(3, overlap);
    const std::vector<Reply> replies = send_all(s.api->port(), kRequests);
    ASSERT_GT(s.model->failed_items(), 0) << "the fault fired";
    int failed = 0;
    for (int i = 0; i < kRequests; ++i) {
      const Reply& r = replies[i];
      if (r.status == 500) {
        ++failed;
        const std::string message = r.body["error"]["message"].get<std::string>();
        EXPECT_NE(message.find("incident err_"), std::string::npos) << message;
        EXPECT_EQ(message.find("injected"), std::string::npos) << "the model's text stays in the log";
        continue;
      }
      ASSERT_EQ(r.status, 200) << r.body.dump();
      EXPECT_EQ(r.body["choices"][0]["text"].get<std::string>(), expected[i]) << "request " << i;
      EXPECT_EQ(r.body["usage"]["completion_tokens"].get<int>(), 6 + i % 5);
    }
    EXPECT_EQ(s.model->failed_items(), 1);
    EXPECT_EQ(failed, 1) << "exactly the request of the failed step";
    // Served after the fault, in full.
    const Reply after = post(s.api->port(), "/v1/completions", completion(1));
    ASSERT_EQ(after.status, 200) << after.body.dump();
    EXPECT_EQ(after.body["choices"][0]["text"].get<std::string>(), expected[1]);
    s.api->shutdown(std::chrono::milliseconds(0));
  }
}

}  // namespace
}  // namespace dsinfer::server
