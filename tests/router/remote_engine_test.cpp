// RemoteEngine against fake workers in this process (server::HttpServer speaking the worker protocol with
// a deterministic toy "model"): the request flow, a decode worker that dies mid-stream (the same event
// stream continues with exactly the tokens of an uninterrupted run), a prefill worker that cannot be
// reached (retried on another), the cluster-full answer and the lease.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <condition_variable>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/remote_engine.h"
#include "server/http_server.h"

namespace dsinfer::router {
namespace {

using Json = nlohmann::json;
using engine::FinishReason;

DecodeLine finish_line(FinishReason f) {
  DecodeLine d;
  d.last = true;
  d.finish = f;
  return d;
}

// The toy model: the next token depends on the whole sequence so far, so a re-submission that got the
// prompt or the generated tokens wrong shows.
int32_t next_token(const std::vector<int32_t>& seq) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : seq) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(10 + h % 90);
}

std::vector<int32_t> uninterrupted(std::vector<int32_t> prompt, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(next_token(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

class FakeWorker {
 public:
  FakeWorker(std::string id, bool prefill) : id_(std::move(id)), prefill_(prefill) {
    server_ = std::make_unique<server::HttpServer>(server::HttpLimits{},
                                                   [this](std::shared_ptr<server::Exchange> ex) { handle(ex); });
    server_->listen("127.0.0.1", 0);
    server_->start(2);
  }
  ~FakeWorker() {
    server_->stop();
    hung_.clear();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  std::string heartbeat() const {
    return Json{{"id", id_},
                {"role", prefill_ ? "prefill" : "decode"},
                {"url", url()},
                {"ucx_address", "ucx-" + id_},
                {"capacity", {{"max_running", 4}, {"kv_tokens", 100000}}},
                {"load", {{"running", 0}, {"waiting", 0}, {"kv_tokens_used", 0}}}}
        .dump();
  }
  // The decode stream ends without its finish line (a crash) after this many lines.
  void die_after_lines(int n) { die_after_ = n; }
  // The decode stream stops after this many lines and stays open (a worker that hangs).
  void hang_after_lines(int n) { hang_after_ = n; }
  // The decode stream ends with a "cancelled" finish line (a worker shutting down) after this many lines.
  void cancel_after_lines(int n) { cancel_after_ = n; }
  // Prefill requests are never answered (an engine that hangs while the process heartbeats).
  void hang_prefills() { hang_prefill_ = true; }
  std::vector<Json> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void handle(const std::shared_ptr<server::Exchange>& ex) {
    const Json req = Json::parse(ex->request().body);
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
    }
    // Read and answered as a real worker does (the one protocol), with the engine's budget rule: the
    // output_in_prompt tokens count toward max_tokens.
    const bool decode = ex->request().path == "/internal/v1/decode";
    const HandoffRequest hr = parse_handoff_request(ex->request().body, decode);
    std::vector<int32_t> seq = hr.prompt_ids;
    const int max_tokens = hr.max_tokens - hr.output_in_prompt;
    if (!decode && hang_prefill_) {
      std::lock_guard<std::mutex> lock(mu_);
      hung_.push_back(ex);
      return;
    }
    if (!decode) {
      PrefillReply reply;
      reply.first_token = next_token(seq);
      const bool done = max_tokens == 1;
      reply.finish = done ? FinishReason::kLength : FinishReason::kNone;
      reply.prompt_tokens = static_cast<int64_t>(seq.size());
      reply.state_bytes = done ? 0 : 1000;
      ex->respond(200, "application/json", prefill_reply_json(reply));
      return;
    }
    seq.push_back(hr.first_token);
    ex->start_stream(200, "application/x-ndjson");
    int lines = 0;
    for (int produced = 1; produced < max_tokens; ++produced) {
      if (die_after_ >= 0 && lines == die_after_) {
        ex->end_stream();  // cut: no finish line
        return;
      }
      if (hang_after_ >= 0 && lines == hang_after_) {
        std::lock_guard<std::mutex> lock(mu_);
        hung_.push_back(ex);  // kept open until the server stops
        return;
      }
      if (cancel_after_ >= 0 && lines == cancel_after_) {
        ex->write(decode_line_json(finish_line(FinishReason::kCancelled)));
        ex->end_stream();
        return;
      }
      DecodeLine d;
      d.tokens = {next_token(seq)};
      seq.push_back(d.tokens[0]);
      ex->write(decode_line_json(d));
      ++lines;
    }
    ex->write(decode_line_json(finish_line(FinishReason::kLength)));
    ex->end_stream();
  }

  std::string id_;
  bool prefill_;
  int die_after_ = -1;
  int cancel_after_ = -1;
  int hang_after_ = -1;
  bool hang_prefill_ = false;
  std::vector<std::shared_ptr<server::Exchange>> hung_;
  std::mutex mu_;
  std::vector<Json> requests_;
  std::unique_ptr<server::HttpServer> server_;
};

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  bool done = false;

  engine::TokenCallback callback() {
    return [this](const engine::TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finish != FinishReason::kNone) {
        finish = ev.finish;
        error = ev.error;
        done = true;
        cv.notify_all();
      }
    };
  }
  size_t received() {
    std::lock_guard<std::mutex> lock(mu);
    return tokens.size();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; });
  }
};

RemoteEngineOptions options() {
  RemoteEngineOptions o;
  o.max_context = 4096;
  o.eos_token_id = 1;
  return o;
}

engine::RequestSpec spec(int max_tokens) {
  engine::RequestSpec s;
  s.prompt_ids = {3, 4, 5, 6};
  s.max_tokens = max_tokens;
  s.sampling.temperature = 0;
  s.ignore_eos = true;
  return s;
}

// Registers each worker by its own heartbeat, in this order (ties between empty workers go to the first).
void join(RemoteEngine& eng, std::initializer_list<const FakeWorker*> workers) {
  for (const FakeWorker* w : workers) eng.heartbeat(w->heartbeat());
}

// Waits for the end of the stream `c` collects: finished by length with exactly the toy model's tokens
// for spec(max_tokens), whatever failed over on the way. Wrap calls in ASSERT_NO_FATAL_FAILURE.
void expect_uninterrupted(Collected& c, int max_tokens) {
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
  EXPECT_EQ(c.tokens, uninterrupted({3, 4, 5, 6}, max_tokens));
}

// Submits spec(max_tokens) and expects it served uninterrupted. Wrap calls in ASSERT_NO_FATAL_FAILURE.
void expect_served(RemoteEngine& eng, Collected& c, int max_tokens) {
  ASSERT_EQ(eng.submit(spec(max_tokens), c.callback()).status, engine::SubmitStatus::kAccepted);
  expect_uninterrupted(c, max_tokens);
}

// Polls `pending` until it turns false or 30 s pass: for states reached on the engine's own threads
// that no callback reports.
void wait_while(const std::function<bool()>& pending, std::chrono::milliseconds every = std::chrono::milliseconds(5)) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pending() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(every);
}

TEST(RemoteEngine, ServesThroughAPrefillAndADecodeWorker) {
  FakeWorker p("prefill-a", true), d("decode-a", false);
  RemoteEngine eng(options());
  join(eng, {&p, &d});
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 8));
  const auto pre = p.requests();
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0]["decode_ucx_address"], "ucx-decode-a");
  const auto dec = d.requests();
  ASSERT_EQ(dec.size(), 1u);
  EXPECT_EQ(dec[0]["transfer"], pre[0]["transfer"]);
  EXPECT_EQ(dec[0]["first_token"], c.tokens[0]);
  EXPECT_EQ(eng.stats().failovers_total, 0);
  EXPECT_EQ(eng.stats().handoff_bytes_total, 1000);
}

class TextConstraint final : public engine::TokenConstraint {
 public:
  explicit TextConstraint(std::string source) : source_(std::move(source)) {}
  void fill_mask(std::span<uint32_t> words) override { std::fill(words.begin(), words.end(), ~0u); }
  bool accept(int32_t) override { return true; }
  void rollback(int32_t) override {}
  std::string source() const override { return source_; }

 private:
  std::string source_;
};

// Structured output crosses to both workers as the constraint's source, also after a failover; a
// constraint without one cannot and is refused.
TEST(RemoteEngine, TheConstraintGoesToBothWorkersAsItsSource) {
  FakeWorker p("prefill-a", true), d1("decode-a", false), d2("decode-b", false);
  d1.die_after_lines(2);
  RemoteEngine eng(options());
  join(eng, {&p, &d1, &d2});
  Collected c;
  engine::RequestSpec s = spec(8);
  s.constraint = std::make_shared<TextConstraint>(R"({"kind":"regex","source":"a+","thinking":false})");
  ASSERT_EQ(eng.submit(s, c.callback()).status, engine::SubmitStatus::kAccepted);
  ASSERT_NO_FATAL_FAILURE(expect_uninterrupted(c, 8));
  const auto pre = p.requests();
  ASSERT_EQ(pre.size(), 2u);
  std::vector<Json> all = pre;
  for (const Json& j : d1.requests()) all.push_back(j);
  for (const Json& j : d2.requests()) all.push_back(j);
  ASSERT_EQ(all.size(), 4u);
  for (const Json& j : all) EXPECT_EQ(j.value("constraint", ""), s.constraint->source()) << j.dump();
  EXPECT_EQ(pre[1]["output_in_prompt"], 3);  // the worker replays them into its matcher

  s.constraint = std::make_shared<TextConstraint>("");
  EXPECT_EQ(eng.submit(s, c.callback()).status, engine::SubmitStatus::kInvalid);
}

TEST(RemoteEngine, DecodeWorkerDyingMidStreamContinuesTheSameStream) {
  FakeWorker p("prefill-a", true), d1("decode-a", false), d2("decode-b", false);
  d1.die_after_lines(3);
  RemoteEngine eng(options());
  join(eng, {&p, &d1, &d2});  // both decode workers empty: the tie goes to d1
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 10));  // nothing lost, nothing repeated
  EXPECT_EQ(eng.stats().failovers_total, 1);
  // The re-submission: prompt + the 4 tokens delivered (first + 3 streamed) as output.
  const auto pre = p.requests();
  ASSERT_EQ(pre.size(), 2u);
  std::vector<int32_t> want = {3, 4, 5, 6};
  const auto gen = uninterrupted({3, 4, 5, 6}, 4);
  want.insert(want.end(), gen.begin(), gen.end());
  EXPECT_EQ(pre[1]["prompt_ids"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(pre[1]["output_in_prompt"], 4);
  EXPECT_EQ(pre[1]["max_tokens"], 10);  // the whole budget: the worker counts the 4 toward it
  EXPECT_EQ(pre[1]["decode_ucx_address"], "ucx-decode-b");  // the failed worker left the pool
  EXPECT_EQ(d2.requests().size(), 1u);
}

TEST(RemoteEngine, AWorkerCancellingARequestTheClientKeepsIsResubmitted) {
  FakeWorker p("prefill-a", true), d("decode-a", false);
  d.cancel_after_lines(2);  // every attempt delivers the first token + 2 more, then is cut
  RemoteEngine eng(options());
  join(eng, {&p, &d});
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 10));
  EXPECT_EQ(eng.stats().failovers_total, 3);  // 3 + 3 + 3 tokens, then a prefill with 1 token left
  EXPECT_EQ(Json::parse(eng.workers_json())["decode"], 1);  // an answering worker stays in the pool
}

TEST(RemoteEngine, ClientCancelCutsTheStreamWithoutFailover) {
  FakeWorker p("prefill-a", true), d("decode-a", false);
  d.hang_after_lines(1);
  RemoteEngine eng(options());
  join(eng, {&p, &d});
  Collected c;
  const auto res = eng.submit(spec(10), c.callback());
  ASSERT_EQ(res.status, engine::SubmitStatus::kAccepted);
  wait_while([&] { return c.received() < 2; });
  ASSERT_EQ(c.received(), 2u);  // the first token and one streamed line; the stream now hangs
  eng.cancel(res.id);
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
  EXPECT_EQ(eng.stats().failovers_total, 0);
  EXPECT_EQ(Json::parse(eng.workers_json())["decode"], 1);
  EXPECT_EQ(eng.metrics().running, 0);
}

// A worker that answers heartbeats while its engine hangs: the call's progress deadline cuts it, the
// request fails over to a healthy pair, the stream stays exact, and the worker leaves the pool.
TEST(RemoteEngine, ADecodeStreamWithoutProgressFailsOverAtTheDeadline) {
  FakeWorker p("prefill-a", true), d1("decode-a", false), d2("decode-b", false);
  d1.hang_after_lines(2);
  RemoteEngineOptions o = options();
  o.progress_timeout = std::chrono::milliseconds(300);
  RemoteEngine eng(o);
  join(eng, {&p, &d1, &d2});  // both decode workers empty: the tie goes to d1
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 10));
  EXPECT_EQ(eng.stats().failovers_total, 1);
  EXPECT_EQ(eng.stats().stalls_total, 1);
  EXPECT_EQ(d1.requests().size(), 1u);
  EXPECT_EQ(d2.requests().size(), 1u);
  EXPECT_EQ(p.requests().back()["output_in_prompt"], 3);  // the first token + the 2 lines before the hang
}

TEST(RemoteEngine, APrefillWithoutAnAnswerFailsOverAtTheDeadline) {
  FakeWorker p1("prefill-a", true), p2("prefill-b", true), d("decode-a", false);
  p1.hang_prefills();
  RemoteEngineOptions o = options();
  o.progress_timeout = std::chrono::milliseconds(300);
  RemoteEngine eng(o);
  join(eng, {&p1, &p2, &d});  // equal quota: the first by id pulls first
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 6));
  EXPECT_EQ(eng.stats().stalls_total, 1);
  EXPECT_EQ(p1.requests().size(), 1u);
  EXPECT_EQ(p2.requests().size(), 1u);
}

// The prefill quota counts the heartbeat's load from other routers: a worker whose engine reports all
// its slots taken (3 running + 1 waiting of max_running 4, none of them this router's) gets nothing until
// a heartbeat shows room.
TEST(RemoteEngine, APrefillWorkerFullOfOtherRoutersRequestsIsNotSentMore) {
  FakeWorker p("prefill-a", true), d("decode-a", false);
  RemoteEngine eng(options());
  Json busy = Json::parse(p.heartbeat());
  busy["load"]["running"] = 3;
  busy["load"]["waiting"] = 1;
  eng.heartbeat(busy.dump());
  eng.heartbeat(d.heartbeat());
  Collected c;
  ASSERT_EQ(eng.submit(spec(4), c.callback()).status, engine::SubmitStatus::kAccepted);
  wait_while([&] { return eng.stats().bucket_queued.at(0) == 0; });
  ASSERT_EQ(eng.stats().bucket_queued.at(0), 1);  // queued, and no pull can take it while the worker is full
  EXPECT_EQ(p.requests().size(), 0u);
  busy["load"]["waiting"] = 0;  // one slot frees
  eng.heartbeat(busy.dump());
  ASSERT_NO_FATAL_FAILURE(expect_uninterrupted(c, 4));
  EXPECT_EQ(p.requests().size(), 1u);
}

TEST(RemoteEngine, UnreachablePrefillWorkerIsRetriedOnAnother) {
  uint16_t dead_port;
  {
    FakeWorker gone("x", true);
    dead_port = static_cast<uint16_t>(std::stoi(gone.url().substr(gone.url().rfind(':') + 1)));
  }  // stopped: its port refuses connections
  FakeWorker p("prefill-b", true), d("decode-a", false);
  RemoteEngine eng(options());
  Json dead = Json::parse(p.heartbeat());
  dead["id"] = "prefill-a";  // sorts first: pulls first
  dead["url"] = "http://127.0.0.1:" + std::to_string(dead_port);
  eng.heartbeat(dead.dump());
  join(eng, {&p, &d});
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 5));
  EXPECT_EQ(eng.stats().failovers_total, 1);
  EXPECT_EQ(p.requests().size(), 1u);
  EXPECT_EQ(Json::parse(eng.workers_json())["prefill"], 1);  // the dead one left the pool
}

TEST(RemoteEngine, ClusterFullOrEmptyIsQueueFull) {
  RemoteEngine eng(options());
  Collected c;
  EXPECT_EQ(eng.submit(spec(5), c.callback()).status, engine::SubmitStatus::kQueueFull);
  FakeWorker d("decode-a", false);
  Json small = Json::parse(d.heartbeat());
  small["capacity"]["kv_tokens"] = 10;  // prompt 4 + max_tokens 5 fits once, not twice
  eng.heartbeat(small.dump());
  EXPECT_EQ(eng.submit(spec(50), c.callback()).status, engine::SubmitStatus::kQueueFull);
  EXPECT_EQ(eng.submit(spec(5000), c.callback()).status, engine::SubmitStatus::kTooLong);
  EXPECT_EQ(eng.stats().rejected_full_total, 2);
}

TEST(RemoteEngine, ReservationCapAdmitsLongRequestsAndCountsKvWithinIt) {
  RemoteEngineOptions o = options();
  o.reserve_output_tokens = 5;
  RemoteEngine eng(o);
  FakeWorker p("prefill-a", true), d("decode-a", false);
  Json small = Json::parse(d.heartbeat());
  small["capacity"]["kv_tokens"] = 10;  // prompt 4 + 5 reserved fits; prompt 4 + max_tokens 20 would not
  eng.heartbeat(p.heartbeat());
  eng.heartbeat(small.dump());
  Collected c;
  ASSERT_NO_FATAL_FAILURE(expect_served(eng, c, 20));
  EXPECT_EQ(eng.stats().failovers_total, 0);  // KV counted past the reservation would have failed it
}

TEST(RemoteEngine, SilentWorkerLeavesThePoolAndRejoins) {
  RemoteEngineOptions o = options();
  o.lease = std::chrono::milliseconds(200);
  RemoteEngine eng(o);
  FakeWorker d("decode-a", false);
  eng.heartbeat(d.heartbeat());
  EXPECT_EQ(Json::parse(eng.workers_json())["decode"], 1);
  // The watchdog expires the lease; no heartbeat comes.
  wait_while([&] { return Json::parse(eng.workers_json())["decode"] == 1; }, std::chrono::milliseconds(20));
  EXPECT_EQ(Json::parse(eng.workers_json())["decode"], 0);
  Collected c;
  EXPECT_EQ(eng.submit(spec(5), c.callback()).status, engine::SubmitStatus::kQueueFull);
  eng.heartbeat(d.heartbeat());
  EXPECT_EQ(Json::parse(eng.workers_json())["decode"], 1);
}

}  // namespace
}  // namespace dsinfer::router
