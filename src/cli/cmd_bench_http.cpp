// dsinfer bench-http: a load client for `dsinfer serve` (or any OpenAI/Anthropic-compatible server).
// For each concurrency level it keeps N connections busy with streaming requests for a fixed time and
// reports requests/s, output tokens/s, time to first token and latency percentiles, errors, and the
// server's peak resident memory (from its /metrics). A benchmark, not a test: it reports, never judges.
#include <utility>  // Boost.Asio 1.74's awaitable.hpp uses std::exchange without including it

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "core/error.h"

namespace dsinfer::cli {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Config {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string api = "chat";
  std::string model;
  std::string api_key;
  std::string prompt;
  int max_tokens = 32;
  bool stream = true;
  bool ignore_eos = true;
  double duration_s = 20;
  double grace_s = 120;
};

struct Sample {
  bool ok = false;
  double ttft = -1;     // seconds to the first generated text
  double latency = 0;   // seconds to the last byte
  int64_t tokens = 0;   // completion tokens (usage, else text deltas)
  std::string error;
};

struct Level {
  int concurrency = 0;
  std::vector<Sample> samples;
  double wall_s = 0;
  int64_t peak_rss = 0;
  int unfinished = 0;
};

std::string request_body(const Config& c) {
  Json b;
  const Json messages = Json::array({Json{{"role", "user"}, {"content", c.prompt}}});
  if (c.api == "chat") {
    b = {{"model", c.model}, {"messages", messages}, {"max_tokens", c.max_tokens}, {"stream", c.stream},
         {"thinking", {{"type", "disabled"}}}};
    if (c.stream) b["stream_options"] = {{"include_usage", true}};
  } else if (c.api == "completions") {
    b = {{"model", c.model}, {"prompt", c.prompt}, {"max_tokens", c.max_tokens}, {"stream", c.stream}};
    if (c.stream) b["stream_options"] = {{"include_usage", true}};
  } else if (c.api == "messages") {
    b = {{"model", c.model}, {"messages", messages}, {"max_tokens", c.max_tokens}, {"stream", c.stream},
         {"thinking", {{"type", "disabled"}}}};
  } else {
    b = {{"model", c.model}, {"input", c.prompt}, {"max_output_tokens", c.max_tokens}, {"stream", c.stream},
         {"reasoning", {{"effort", "none"}}}};
  }
  if (c.ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

std::string request_path(const Config& c) {
  if (c.api == "chat") return "/v1/chat/completions";
  if (c.api == "completions") return "/v1/completions";
  if (c.api == "messages") return "/v1/messages";
  return "/v1/responses";
}

// Looks at one SSE event (or the whole body when not streaming): text seen, usage, errors.
struct FrameInfo {
  bool text = false;
  std::optional<int64_t> tokens;
  std::string error;
  bool done = false;
};

FrameInfo inspect(const std::string& api, const std::string& event, const std::string& data) {
  FrameInfo f;
  if (data == "[DONE]") {
    f.done = true;
    return f;
  }
  Json j = Json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    f.error = "unparsable event";
    return f;
  }
  if (j.contains("error") || event == "error" || j.value("type", "") == "error") {
    f.error = j.dump().substr(0, 200);
    return f;
  }
  auto nonempty = [](const Json& v) { return v.is_string() && !v.get<std::string>().empty(); };
  if (api == "chat" || api == "completions") {
    if (j.contains("choices") && !j["choices"].empty()) {
      const Json& c = j["choices"][0];
      if (c.contains("delta")) f.text = nonempty(c["delta"].value("content", Json())) ||
                                        nonempty(c["delta"].value("reasoning_content", Json()));
      if (c.contains("text")) f.text = nonempty(c["text"]);
      if (c.contains("message")) f.text = true;
    }
    if (j.contains("usage") && j["usage"].is_object()) f.tokens = j["usage"].value("completion_tokens", 0);
  } else if (api == "messages") {
    const std::string t = j.value("type", "");
    if (t == "content_block_delta") f.text = true;
    if (t == "message_delta" && j.contains("usage")) f.tokens = j["usage"].value("output_tokens", 0);
    if (t == "message") {
      f.text = true;
      f.tokens = j["usage"].value("output_tokens", 0);
    }
    if (t == "message_stop") f.done = true;
  } else {
    const std::string t = j.value("type", "");
    if (t == "response.output_text.delta" || t == "response.reasoning_text.delta") f.text = true;
    if (t == "response.completed" || t == "response.incomplete") {
      f.tokens = j["response"]["usage"].value("output_tokens", 0);
      f.done = true;
    }
    if (j.value("object", "") == "response") {
      f.text = true;
      f.tokens = j["usage"].value("output_tokens", 0);
    }
  }
  return f;
}

class Runner {
 public:
  Runner(Config config, net::io_context& io) : cfg_(std::move(config)), io_(io) {
    tcp::resolver resolver(io_);
    endpoints_ = resolver.resolve(cfg_.host, cfg_.port);
    body_ = request_body(cfg_);
    std::ostringstream r;
    r << "POST " << request_path(cfg_) << " HTTP/1.1\r\nHost: " << cfg_.host << ":" << cfg_.port
      << "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n";
    if (!cfg_.api_key.empty()) r << "Authorization: Bearer " << cfg_.api_key << "\r\nx-api-key: " << cfg_.api_key << "\r\n";
    if (cfg_.api == "messages") r << "anthropic-version: 2023-06-01\r\n";
    r << "Content-Length: " << body_.size() << "\r\n\r\n" << body_;
    request_ = r.str();
  }

  Level run_level(int concurrency) {
    Level level;
    level.concurrency = concurrency;
    const auto start = Clock::now();
    deadline_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.duration_s));
    hard_stop_ = deadline_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.grace_s));
    active_ = concurrency;
    samples_ = &level.samples;
    unfinished_ = 0;
    peak_rss_ = 0;
    for (int i = 0; i < concurrency; ++i) net::co_spawn(io_, worker(), net::detached);
    net::co_spawn(io_, sample_memory(), net::detached);
    io_.restart();
    io_.run();
    level.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    level.peak_rss = peak_rss_;
    level.unfinished = unfinished_;
    return level;
  }

  int64_t server_rss() {
    try {
      net::io_context io;
      tcp::socket s(io);
      net::connect(s, tcp::resolver(io).resolve(cfg_.host, cfg_.port));
      std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
      net::write(s, net::buffer(req));
      boost::beast::flat_buffer buf;
      http::response<http::string_body> res;
      http::read(s, buf, res);
      return parse_rss(res.body());
    } catch (const std::exception&) {
      return 0;
    }
  }

 private:
  static int64_t parse_rss(const std::string& text) {
    const std::string key = "\nprocess_resident_memory_bytes ";
    auto p = text.find(key);
    return p == std::string::npos ? 0 : std::atoll(text.c_str() + p + key.size());
  }

  net::awaitable<void> sample_memory() {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer timer(ex);
    while (active_ > 0) {
      try {
        tcp::socket s(ex);
        co_await net::async_connect(s, endpoints_, net::use_awaitable);
        std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        co_await net::async_write(s, net::buffer(req), net::use_awaitable);
        boost::beast::flat_buffer buf;
        http::response<http::string_body> res;
        co_await http::async_read(s, buf, res, net::use_awaitable);
        peak_rss_ = std::max(peak_rss_, parse_rss(res.body()));
      } catch (const std::exception&) {
      }
      timer.expires_after(std::chrono::milliseconds(500));
      co_await timer.async_wait(net::use_awaitable);
    }
  }

  net::awaitable<void> worker() {
    auto ex = co_await net::this_coro::executor;
    std::unique_ptr<tcp::socket> socket;
    boost::beast::flat_buffer buf;
    net::steady_timer guard(ex);
    while (Clock::now() < deadline_) {
      Sample s;
      const auto t0 = Clock::now();
      bool reusable = false;
      try {
        if (!socket) {
          socket = std::make_unique<tcp::socket>(ex);
          co_await net::async_connect(*socket, endpoints_, net::use_awaitable);
          socket->set_option(tcp::no_delay(true));
          buf.consume(buf.size());
        }
        // Past the grace period the socket is closed, which fails the pending read.
        guard.expires_at(hard_stop_);
        guard.async_wait([sock = socket.get()](boost::system::error_code ec) {
          if (!ec) {
            boost::system::error_code ignored;
            sock->close(ignored);
          }
        });
        co_await net::async_write(*socket, net::buffer(request_), net::use_awaitable);
        http::response_parser<http::string_body> parser;
        parser.body_limit(boost::none);
        co_await http::async_read_header(*socket, buf, parser, net::use_awaitable);
        const int status = parser.get().result_int();
        size_t scanned = 0;
        std::string event;
        int64_t text_frames = 0;
        auto scan = [&](bool final) {
          std::string& body = parser.get().body();
          if (!cfg_.stream || status != 200) {
            if (!final) return;
            FrameInfo f = inspect(cfg_.api, "", body);
            if (status != 200) s.error = "HTTP " + std::to_string(status) + ": " + body.substr(0, 160);
            else if (!f.error.empty()) s.error = f.error;
            if (f.tokens) s.tokens = *f.tokens;
            return;
          }
          size_t end;
          while ((end = body.find("\n\n", scanned)) != std::string::npos) {
            std::string frame = body.substr(scanned, end - scanned);
            scanned = end + 2;
            std::string data;
            event.clear();
            std::istringstream lines(frame);
            for (std::string line; std::getline(lines, line);) {
              if (line.rfind("event: ", 0) == 0) event = line.substr(7);
              else if (line.rfind("data: ", 0) == 0) data += line.substr(6);
            }
            if (data.empty()) continue;
            FrameInfo f = inspect(cfg_.api, event, data);
            if (!f.error.empty() && s.error.empty()) s.error = f.error;
            if (f.text) {
              ++text_frames;
              if (s.ttft < 0) s.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
            }
            if (f.tokens) s.tokens = *f.tokens;
          }
        };
        while (!parser.is_done()) {
          co_await http::async_read_some(*socket, buf, parser, net::use_awaitable);
          scan(false);
        }
        scan(true);
        if (s.tokens == 0) s.tokens = text_frames;
        if (!cfg_.stream && status == 200) s.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
        s.ok = status == 200 && s.error.empty();
        reusable = parser.get().keep_alive();
      } catch (const std::exception& e) {
        s.error = std::string("connection: ") + e.what();
        if (Clock::now() >= hard_stop_) ++unfinished_;
      }
      guard.cancel();
      s.latency = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!reusable) socket.reset();
      samples_->push_back(std::move(s));
      if (Clock::now() >= hard_stop_) break;
    }
    --active_;
  }

  Config cfg_;
  net::io_context& io_;
  tcp::resolver::results_type endpoints_;
  std::string body_;
  std::string request_;
  Clock::time_point deadline_, hard_stop_;
  int active_ = 0;
  int unfinished_ = 0;
  int64_t peak_rss_ = 0;
  std::vector<Sample>* samples_ = nullptr;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

int run_bench_http(int argc, char** argv) {
  Args args("bench-http",
            "Load-test an OpenAI/Anthropic-compatible server (dsinfer serve): for each concurrency level, keep\n"
            "that many connections sending streaming requests for --duration seconds, then report requests/s,\n"
            "output tokens/s, TTFT and latency percentiles, errors and the server's peak memory.");
  args.option("url", "URL", "server base URL", "http://127.0.0.1:8000");
  args.option("api", "chat|completions|messages|responses", "which route to drive", "chat");
  args.option("model", "NAME", "model name sent in requests", "dsinfer-tiny");
  args.option("api-key", "KEY", "API key (sent as Bearer and x-api-key)");
  args.option("concurrency", "LIST", "comma-separated concurrency levels", "1,16,256,1000");
  args.option("duration", "SECONDS", "how long each level keeps sending", "20");
  args.option("grace", "SECONDS", "how long requests still open at the end may take before they are cut", "120");
  args.option("max-tokens", "N", "max_tokens of every request", "32");
  args.option("prompt", "TEXT", "the user message", "Write a short story about a robot learning to paint.");
  args.flag("no-stream", "non-streaming requests (TTFT = latency)");
  args.flag("allow-eos", "do not send ignore_eos (outputs may end early)");
  args.option("json", "FILE", "also write the results as JSON");
  if (!args.parse(argc, argv)) return args.exit_code();

  Config cfg;
  std::string url = args.get("url");
  DSINFER_CHECK(url.rfind("http://", 0) == 0, "bench-http: --url must start with http://, got '", url, "'");
  url = url.substr(7);
  if (auto slash = url.find('/'); slash != std::string::npos) url = url.substr(0, slash);
  auto colon = url.rfind(':');
  cfg.host = colon == std::string::npos ? url : url.substr(0, colon);
  cfg.port = colon == std::string::npos ? "80" : url.substr(colon + 1);
  cfg.api = args.get("api");
  DSINFER_CHECK(cfg.api == "chat" || cfg.api == "completions" || cfg.api == "messages" || cfg.api == "responses",
                "bench-http: --api must be chat, completions, messages or responses, got '", cfg.api, "'");
  cfg.model = args.get("model");
  if (auto k = args.get_optional("api-key")) cfg.api_key = *k;
  cfg.duration_s = args.get_double("duration");
  cfg.grace_s = args.get_double("grace");
  cfg.max_tokens = static_cast<int>(args.get_int("max-tokens"));
  cfg.prompt = args.get("prompt");
  cfg.stream = !args.has("no-stream");
  cfg.ignore_eos = !args.has("allow-eos");
  std::vector<int32_t> levels = parse_id_list(args.get("concurrency"));
  for (int32_t c : levels) DSINFER_CHECK(c > 0, "bench-http: concurrency levels must be > 0");

  net::io_context io;
  Runner runner(cfg, io);
  const int64_t rss_idle = runner.server_rss();
  std::printf("bench-http: %s %s:%s%s, model %s, max_tokens %d%s, %g s per level; server RSS at start %s\n",
              cfg.api.c_str(), cfg.host.c_str(), cfg.port.c_str(), cfg.stream ? " (streaming)" : "",
              cfg.model.c_str(), cfg.max_tokens, cfg.ignore_eos ? " (ignore_eos)" : "", cfg.duration_s,
              format_bytes(static_cast<uint64_t>(rss_idle)).c_str());
  std::printf("%6s %7s %8s %10s %9s %9s %9s %9s %9s %9s %7s %11s\n", "conc", "reqs", "req/s", "out tok/s",
              "ttft p50", "ttft p90", "ttft p99", "lat p50", "lat p90", "lat p99", "errors", "server RSS");
  std::fflush(stdout);
  Json out = Json::array();
  for (int32_t c : levels) {
    Level level = runner.run_level(c);
    std::vector<double> ttft, lat;
    int64_t tokens = 0;
    int errors = 0;
    std::string first_error;
    for (const auto& s : level.samples) {
      if (!s.ok) {
        ++errors;
        if (first_error.empty()) first_error = s.error;
        continue;
      }
      if (s.ttft >= 0) ttft.push_back(s.ttft);
      lat.push_back(s.latency);
      tokens += s.tokens;
    }
    const double ok = static_cast<double>(lat.size());
    std::printf("%6d %7zu %8.2f %10.1f %8.3fs %8.3fs %8.3fs %8.3fs %8.3fs %8.3fs %7d %11s\n", c, lat.size(),
                ok / level.wall_s, static_cast<double>(tokens) / level.wall_s, percentile(ttft, 50),
                percentile(ttft, 90), percentile(ttft, 99), percentile(lat, 50), percentile(lat, 90),
                percentile(lat, 99), errors, format_bytes(static_cast<uint64_t>(level.peak_rss)).c_str());
    if (!first_error.empty()) std::printf("       first error: %s\n", first_error.c_str());
    std::fflush(stdout);
    out.push_back({{"concurrency", c}, {"requests", lat.size()}, {"errors", errors}, {"wall_s", level.wall_s},
                   {"requests_per_s", ok / level.wall_s}, {"output_tokens_per_s", static_cast<double>(tokens) / level.wall_s},
                   {"ttft_s", {{"p50", percentile(ttft, 50)}, {"p90", percentile(ttft, 90)}, {"p99", percentile(ttft, 99)}}},
                   {"latency_s", {{"p50", percentile(lat, 50)}, {"p90", percentile(lat, 90)}, {"p99", percentile(lat, 99)}}},
                   {"server_peak_rss_bytes", level.peak_rss}, {"unfinished", level.unfinished},
                   {"first_error", first_error}});
  }
  if (auto path = args.get_optional("json")) {
    std::ofstream f(*path);
    f << Json{{"api", cfg.api}, {"max_tokens", cfg.max_tokens}, {"stream", cfg.stream}, {"duration_s", cfg.duration_s},
              {"server_idle_rss_bytes", rss_idle}, {"levels", out}}.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
DSINFER_COMMAND("bench-http", "load-test an OpenAI/Anthropic-compatible server", run_bench_http);
}  // namespace dsinfer::cli
