#include "server/api_server.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/log.h"
#include "recipe/conversion_error.h"
#include "recipe/json_text.h"
#include "recipe/request_reader.h"
#include "server/api_errors.h"
#include "server/choice_merge.h"
#include "server/choice_sse.h"
#include "server/protocol_streams.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

using Json = recipe::Json;
using Clock = std::chrono::steady_clock;

namespace {

enum Route {
  kHealth, kMetrics, kModels, kChat, kResponses, kMessages, kCountTokens, kCompletions, kStoredResponse, kOther
};
const char* const kRouteNames[] = {"/health",      "/metrics",      "/v1/models",
                                   "/v1/chat/completions",          "/v1/responses",
                                   "/v1/messages", "/v1/messages/count_tokens",
                                   "/v1/completions", "/v1/responses/{id}", "other"};
constexpr std::string_view kStoredResponsePrefix = "/v1/responses/";

Route route_of(std::string_view path) {
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (path == "/health") return kHealth;
  if (path == "/metrics") return kMetrics;
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return kModels;
  if (path == "/v1/chat/completions") return kChat;
  if (path == "/v1/responses") return kResponses;
  if (path.size() > kStoredResponsePrefix.size() && path.rfind(kStoredResponsePrefix, 0) == 0) return kStoredResponse;
  if (path == "/v1/messages") return kMessages;
  if (path == "/v1/messages/count_tokens") return kCountTokens;
  if (path == "/v1/completions") return kCompletions;
  return kOther;
}


ErrorFlavor flavor_of(int route) {
  return route == kMessages || route == kCountTokens ? ErrorFlavor::kAnthropic : ErrorFlavor::kOpenAI;
}

// The OpenAI generation routes answer in OpenAI's shape whoever asks; the shared ones (models, unknown
// paths, a refused key) in the shape of the client that asks: the Anthropic SDK sends anthropic-version.
ErrorFlavor flavor_of(int route, const HttpRequest& req) {
  if (route == kMessages || route == kCountTokens) return ErrorFlavor::kAnthropic;
  if (route == kChat || route == kResponses || route == kCompletions || route == kStoredResponse)
    return ErrorFlavor::kOpenAI;
  return flavor_for_request(req);
}

// The body as JSON (recipe::parse_json: linear in the text, however wide its objects).
Json parse_request_body(std::string text) {
  Json body;
  try {
    body = recipe::parse_json(text);
  } catch (const std::exception& e) {
    throw_api_error(400, core::str_cat("the request body is not valid JSON: ", e.what()), "invalid_json");
  }
  if (!body.is_object()) throw_api_error(400, "the request body must be a JSON object", "invalid_type");
  return body;
}

std::string random_hex(size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out(n, '0');
  for (size_t i = 0; i < n; ++i) out[i] = digits[rng() & 15];
  return out;
}

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// RFC 3986 percent-decoding of one path segment; nullopt when an escape is malformed.
std::optional<std::string> percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::string metric_name(const std::string& raw) {
  std::string out;
  for (char c : raw) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return out;
}

// Optional sampling extensions read from the raw body (vLLM-style names); a wrong type is a 400.
template <typename T>
std::optional<T> optional_number(const Json& body, const char* key, T lo, T hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw_api_error(400, core::str_cat("'", key, "' must be a number"), "invalid_type", key);
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() && !it->is_number_unsigned())
      throw_api_error(400, core::str_cat("'", key, "' must be an integer"), "invalid_type", key);
  }
  double v = it->get<double>();
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)))
    throw_api_error(400, core::str_cat("'", key, "' is out of range [", lo, ", ", hi, "]"), "invalid_value", key);
  if constexpr (std::is_same_v<T, uint64_t>) {
    if (it->is_number_unsigned()) return it->get<uint64_t>();
    int64_t s = it->get<int64_t>();
    if (s < 0) throw_api_error(400, core::str_cat("'", key, "' must not be negative"), "invalid_value", key);
    return static_cast<uint64_t>(s);
  } else {
    return static_cast<T>(v);
  }
}

// OpenAI's logit_bias ({"token id": bias}), presence_penalty and frequency_penalty, and the
// repetition_penalty extension (vLLM's): applied by the engine's sampler, on every route.
void read_logit_adjustments(const Json& body, engine::SamplingParams& p) {
  if (auto v = optional_number<float>(body, "presence_penalty", -2.f, 2.f)) p.presence_penalty = *v;
  if (auto v = optional_number<float>(body, "frequency_penalty", -2.f, 2.f)) p.frequency_penalty = *v;
  if (auto v = optional_number<float>(body, "repetition_penalty", 0.f, 10.f)) {
    if (*v <= 0) throw_api_error(400, "'repetition_penalty' must be greater than 0", "invalid_value", "repetition_penalty");
    p.repetition_penalty = *v;
  }
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_object()) throw_api_error(400, "'logit_bias' must be an object of token ids to biases", "invalid_type", "logit_bias");
  for (const auto& [key, value] : it->items()) {
    int64_t token = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (ec != std::errc() || end != key.data() + key.size() || token < 0 || token > std::numeric_limits<int32_t>::max())
      throw_api_error(400, core::str_cat("logit_bias: '", key.substr(0, 32), "' is not a token id"), "invalid_value",
                      "logit_bias");
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
      throw_api_error(400, core::str_cat("logit_bias of token ", token, " must be a number in [-100, 100]"),
                      "invalid_value", "logit_bias");
    p.logit_bias.emplace_back(static_cast<int32_t>(token), value.get<float>());
  }
}

// The answer to an exception thrown while reading a request; call from a catch block.
struct RequestError {
  int status = 500;
  std::string body;
  bool internal = false;
};
RequestError request_error(ErrorFlavor flavor, int route) {
  try {
    throw;
  } catch (const ApiException& e) {
    return {e.error().status, error_body(flavor, e.error()), false};
  } catch (const recipe::ConversionError& e) {
    return {e.http_status(), reshape_openai_error(flavor, e.http_status(), recipe::to_compact_json(e.http_body())),
            false};
  } catch (const std::exception& e) {
    // Invalid input from below (tokenizer, renderer) is told as it is; anything else only by an incident id.
    const std::string incident = new_incident_id();
    const ApiError err = api_error_for_exception(e, incident);
    if (is_internal_exception(e)) DSINFER_LOG_ERROR("server: ", kRouteNames[route], " ", incident, ": ", e.what());
    return {err.status, error_body(flavor, err), err.status >= 500};
  } catch (...) {
    const std::string incident = new_incident_id();
    DSINFER_LOG_ERROR("server: ", kRouteNames[route], " ", incident, ": unknown exception");
    return {500, error_body(flavor, api_error_for_exception(std::runtime_error(""), incident)), true};
  }
}

// Parameters the server cannot honour are refused, never accepted and ignored (the recipe's conversion
// reads the rest).
void refuse_unsupported(int route, const Json& body) {
  auto given = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()) &&
           !(it->is_number() && it->get<double>() == 0);
  };
  auto refuse_logprobs = [](const char* key) {
    throw_api_error(400, core::str_cat("'", key, "' is not supported: this server computes no logprobs"),
                    "unsupported_parameter", key);
  };
  if (route == kResponses) {
    if (given("top_logprobs")) refuse_logprobs("top_logprobs");
    // Other include values (reasoning.encrypted_content, which stateless clients send) change nothing here.
    if (auto inc = body.find("include"); inc != body.end() && inc->is_array())
      for (const auto& v : *inc)
        if (v.is_string() && v.get<std::string>() == "message.output_text.logprobs") refuse_logprobs("include");
  }
  if (route == kChat) {
    // best_of ranks candidates on Completions only (OpenAI's Chat Completions has none); 1 changes nothing.
    auto it = body.find("best_of");
    if (it != body.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 1))
      throw_api_error(400, "'best_of' is not supported on Chat Completions: use n (best_of is a Completions parameter)",
                      "unsupported_parameter", "best_of");
  }
}

// OpenAI's n (Chat Completions, Completions): that many choices, each its own engine request. Bounded
// so that one call cannot flood the engine's queue.
constexpr int64_t kMaxChoices = 16;
int64_t read_n(const Json& body) { return optional_number<int64_t>(body, "n", 1, kMaxChoices).value_or(1); }

std::optional<bool> optional_bool(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw_api_error(400, core::str_cat("'", key, "' must be a boolean"), "invalid_type", key);
  return it->get<bool>();
}

// A Responses request's input as a list of items (a string is one user message); the conversion
// checks the items themselves.
Json input_items(const Json& body) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) return Json::array();
  if (it->is_string()) return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", *it}}});
  if (!it->is_array()) throw_api_error(400, "'input' must be a string or an array of items", "invalid_type", "input");
  return *it;
}

}  // namespace

std::string api_key_problem(std::string_view key) {
  if (key.empty()) return "is empty: leave it out to serve without authentication";
  if (key.front() == ' ' || key.front() == '\t' || key.back() == ' ' || key.back() == '\t')
    return "has leading or trailing whitespace, which HTTP strips from header values: no client could match it";
  for (char c : key)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "contains a control character, which cannot be sent in a header";
  return "";
}

// ---------------------------------------------------------------------------------------------------
// One generation request from submission to its last byte. Lives on the connection's strand.
struct ApiServer::Call : std::enable_shared_from_this<ApiServer::Call> {
  ApiServer* server = nullptr;
  std::shared_ptr<Exchange> ex;
  int route = kOther;
  bool stream = false;
  std::string response_id;
  std::unique_ptr<ResponseStream> out;
  engine::RequestId id = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  bool begun = false;
  bool done = false;
  bool client_gone = false;
  bool shutdown_cancel = false;
  bool have_first_token = false;
  Clock::time_point first_token_at;
  bool store = false;  // Responses: keep the finished response (its input items in stored_input)
  Json stored_input;
  // n > 1: the choices of one HTTP call, each a Call with its own engine request. They share the
  // connection's strand, so the group needs no lock; the last choice to end answers for all.
  struct Group {
    std::vector<std::weak_ptr<Call>> members;
    // Choices 1..n-1 not submitted yet, with their requests: they wait for choice 0's first event
    // (share_prompt_kv). Held here: until submitted, no engine callback owns them.
    std::vector<std::pair<std::shared_ptr<Call>, engine::RequestSpec>> waiting;
    int64_t cached_tokens = 0;  // choice 0's: the prompt is counted once, as choice 0 computed it
    std::vector<std::string> bodies;
    size_t remaining = 0;
    size_t keep = 0;             // best_of: the n candidates with the highest logprob sums are answered
    std::vector<double> scores;  // each candidate's sum of its tokens' logprobs
    ChoiceSseMerger sse;         // streamed
    int status = 200;  // the first failure's
    std::string why;
  };
  std::shared_ptr<Group> group;
  size_t choice = 0;
  double logprob_sum = 0;  // of the tokens drawn (best_of ranks candidates by it)

  void on_event(const engine::TokenEvent& ev) {
    handle_event(ev);
    if (group && choice == 0 && !group->waiting.empty()) start_waiting_choices();
  }

  void handle_event(const engine::TokenEvent& ev) {
    if (done) return;
    std::string bytes;
    try {
      if (!begun) {
        begun = true;
        if (ev.prompt_tokens > 0) prompt_tokens = ev.prompt_tokens;
        // The siblings' hits on choice 0's blocks are this call's own sharing, not a cache hit to report.
        const bool shared = group && choice > 0 && server->options_.share_prompt_kv;
        cached_tokens = shared ? group->cached_tokens : ev.cached_tokens;
        if (group && choice == 0) group->cached_tokens = cached_tokens;
        bytes += out->begin(prompt_tokens, cached_tokens);
      }
      if (!ev.tokens.empty()) {
        if (!have_first_token) {
          have_first_token = true;
          first_token_at = Clock::now();
          server->ttft_->observe({{"route", kRouteNames[route]}},
                                 std::chrono::duration<double>(first_token_at - ex->request().received).count());
        }
        if (!ev.logprobs.empty()) {
          for (const auto& t : ev.logprobs) logprob_sum += t.logprob;
          out->logprobs(ev.logprobs);
        }
        bytes += out->tokens(ev.tokens);
      }
      if (out->finished()) {  // the output ended the response (stop sequence): the engine can stop now
        if (ev.finish == engine::FinishReason::kNone) server->engine_.cancel(id);
        complete(std::move(bytes), StreamEnd::kStop);
        return;
      }
      if (ev.finish != engine::FinishReason::kNone) {
        StreamEnd end = StreamEnd::kStop;
        std::string why;
        switch (ev.finish) {
          case engine::FinishReason::kLength: end = StreamEnd::kLength; break;
          case engine::FinishReason::kCancelled:
            end = StreamEnd::kCancelled;
            why = shutdown_cancel ? "the server is shutting down" : "the request was cancelled";
            break;
          case engine::FinishReason::kError: {
            // The engine's text can quote an exception from deep inside: it goes to the log only.
            end = StreamEnd::kError;
            const std::string incident = new_incident_id();
            DSINFER_LOG_ERROR("server: ", kRouteNames[route], " ", response_id, " ", incident, ": engine error: ",
                              ev.error.empty() ? "(no message)" : ev.error);
            why = core::str_cat("the engine failed (incident ", incident, "; the details are in the server log)");
            break;
          }
          default: break;
        }
        bytes += out->end(end, why);
        complete(std::move(bytes), end, why);
        return;
      }
    } catch (const std::exception& e) {
      const std::string incident = new_incident_id();
      DSINFER_LOG_ERROR("server: ", kRouteNames[route], " ", response_id, " ", incident, ": ", e.what());
      server->engine_.cancel(id);
      complete(std::move(bytes), StreamEnd::kError, api_error_for_exception(e, incident).message);
      return;
    }
    if (stream && !bytes.empty()) ex->write(group ? group->sse.rewrite(bytes, choice) : std::move(bytes));
  }

  void on_client_gone() {
    if (done) return;
    client_gone = true;
    server->cancelled_->add({{"route", kRouteNames[route]}, {"why", "client_disconnect"}});
    // The engine answers with kCancelled; its KV is freed at once. A choice still waiting for choice 0
    // (no id yet) ends when choice 0 does.
    if (id != 0) server->engine_.cancel(id);
  }

  void cancel_for_shutdown() {
    if (done || client_gone) return;
    shutdown_cancel = true;
    server->cancelled_->add({{"route", kRouteNames[route]}, {"why", "shutdown"}});
    if (id != 0) server->engine_.cancel(id);
  }

  // Choice 0 had its first event: its prompt's blocks are published and the window snapshot at the
  // prompt's last block boundary is in the prefix cache (engine_core.cpp, take_snapshot), so choices
  // 1..n-1 submitted now resume there exactly and compute only the prompt's tail. Each still has its own
  // seed and constraint matcher. If the call failed or its client left meanwhile, they end unsubmitted.
  void start_waiting_choices() {
    Group& g = *group;
    auto waiting = std::move(g.waiting);
    g.waiting.clear();
    const auto strand = ex->executor();
    for (auto& [c, spec] : waiting) {
      if (c->done) continue;
      if (g.status != 200 || c->client_gone || c->shutdown_cancel || ex->disconnected()) {
        c->complete("", StreamEnd::kCancelled, g.why.empty() ? "the request was cancelled" : g.why);
        continue;
      }
      engine::SubmitResult r = server->engine_.submit(std::move(spec), [c = c, strand](const engine::TokenEvent& ev) {
        boost::asio::post(strand, [c, ev] { c->on_event(ev); });
      });
      if (r.status == engine::SubmitStatus::kAccepted) {
        c->id = r.id;
        continue;
      }
      // Refused (queue full, shutting down): the call fails as when a running choice fails, with
      // the refusal's status, and the choices already running are cancelled.
      for (auto& w : g.members)
        if (auto o = w.lock(); o && o != c && !o->done && o->id != 0) server->engine_.cancel(o->id);
      g.status = r.status == engine::SubmitStatus::kQueueFull      ? 429
                 : r.status == engine::SubmitStatus::kShuttingDown ? 503
                 : r.status == engine::SubmitStatus::kTooLong      ? 400
                                                                   : 500;
      g.why = r.status == engine::SubmitStatus::kShuttingDown ? std::string("the server is shutting down")
              : r.status == engine::SubmitStatus::kQueueFull  ? "the engine's queue is full: " + r.message
                                                              : r.message;
      std::string bytes;
      if (c->stream) bytes = c->out->begin(c->prompt_tokens, g.cached_tokens) + c->out->end(StreamEnd::kError, g.why);
      c->complete(std::move(bytes), StreamEnd::kError, g.why);
    }
  }

  void complete(std::string bytes, StreamEnd end, const std::string& why = "") {
    done = true;
    // Stored before the client can see the end: its next request may continue this response at once.
    if (store && !client_gone && (end == StreamEnd::kStop || end == StreamEnd::kLength)) keep_response();
    int status = 200;
    bool answered = true;
    if (group && stream) {
      answered = finish_streamed_choice(bytes, end, why);
    } else if (group) {
      answered = finish_choice(end, why);
      status = group->status;
    } else if (stream) {
      if (!bytes.empty()) ex->write(std::move(bytes));
      ex->end_stream();
    } else if (end == StreamEnd::kError || end == StreamEnd::kCancelled) {
      status = end == StreamEnd::kError ? 500 : 503;
      ex->respond(status, "application/json", error_body(flavor_of(route), ApiError{status, why, "", "", {}}),
                  {{"X-Request-Id", response_id}});
    } else {
      ex->respond(200, "application/json", out->body(), {{"X-Request-Id", response_id}});
    }
    const auto now = Clock::now();
    const Labels rl = {{"route", kRouteNames[route]}};
    const double e2e = std::chrono::duration<double>(now - ex->request().received).count();
    std::string reason = client_gone                     ? "cancelled"
                         : end == StreamEnd::kCancelled ? "cancelled"
                         : end == StreamEnd::kError     ? "error"
                                                        : out->finish_reason();
    int64_t completion = out->completion_tokens();
    server->finished_->add({{"route", kRouteNames[route]}, {"reason", reason}});
    server->e2e_->observe(rl, e2e);
    if (have_first_token && completion > 1)
      server->tpot_->observe(rl, std::chrono::duration<double>(now - first_token_at).count() /
                                     static_cast<double>(completion - 1));
    if (choice == 0) {  // the choices of one call share its prompt
      server->prompt_tokens_->add(rl, static_cast<double>(prompt_tokens));
      server->cached_tokens_->add(rl, static_cast<double>(cached_tokens));
    }
    server->generated_tokens_->add(rl, static_cast<double>(completion));
    if (!client_gone && answered) server->count_response(route, status);
    server->http_duration_->observe(rl, e2e);
    server->finish_call(*this);
  }

  // Streamed: this choice's last frames go out re-indexed; the last choice ends the stream. A failed
  // choice (its error frame sent) cancels the others.
  bool finish_streamed_choice(const std::string& bytes, StreamEnd end, const std::string& why) {
    Group& g = *group;
    if (!bytes.empty()) ex->write(g.sse.rewrite(bytes, choice));
    if ((end == StreamEnd::kError || end == StreamEnd::kCancelled) && g.status == 200) {
      g.status = end == StreamEnd::kError ? 500 : 503;
      g.why = why;
      for (auto& w : g.members)
        if (auto c = w.lock(); c && c.get() != this && !c->done && c->id != 0) server->engine_.cancel(c->id);
    }
    if (--g.remaining > 0) return false;
    ex->write(g.sse.finish());
    ex->end_stream();
    return true;
  }

  // This choice's body goes to the group; a failed choice fails the call and cancels its siblings.
  // Returns whether this was the last choice, which answered.
  bool finish_choice(StreamEnd end, const std::string& why) {
    Group& g = *group;
    if (end == StreamEnd::kError || end == StreamEnd::kCancelled) {
      if (g.status == 200) {
        g.status = end == StreamEnd::kError ? 500 : 503;
        g.why = why;
      }
      for (auto& w : g.members)
        if (auto c = w.lock(); c && c.get() != this && !c->done && c->id != 0) server->engine_.cancel(c->id);
    } else {
      g.bodies[choice] = out->body();
      g.scores[choice] = logprob_sum;
    }
    if (--g.remaining > 0) return false;
    if (g.status != 200) {
      ex->respond(g.status, "application/json", error_body(flavor_of(route), ApiError{g.status, g.why, "", "", {}}),
                  {{"X-Request-Id", response_id}});
      return true;
    }
    std::vector<size_t> kept(g.bodies.size());
    for (size_t i = 0; i < kept.size(); ++i) kept[i] = i;
    if (g.keep < kept.size()) {  // best_of: highest sum first, the earlier candidate on a tie
      std::stable_sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return g.scores[a] > g.scores[b]; });
      kept.resize(g.keep);
    }
    ex->respond(200, "application/json", merge_choice_bodies(g.bodies, kept), {{"X-Request-Id", response_id}});
    return true;
  }

  // OpenAI's stored conversation: a continuation sees this response's input items, then its output items.
  void keep_response() {
    try {
      std::string body = out->body();
      const Json response = recipe::parse_json(body);
      Json conversation = std::move(stored_input);
      if (auto it = response.find("output"); it != response.end() && it->is_array())
        for (const auto& item : *it) conversation.push_back(item);
      if (!server->responses_.put(response_id, {recipe::to_compact_json(conversation), std::move(body)}))
        DSINFER_LOG_WARN("server: ", response_id, " is larger than --responses-store-bytes; not stored");
    } catch (const std::exception& e) {
      DSINFER_LOG_ERROR("server: ", response_id, ": storing the response failed: ", e.what());
    }
  }
};

// ---------------------------------------------------------------------------------------------------
ApiServer::ApiServer(ApiServerOptions options, engine::Engine& engine, const tokenizer::Tokenizer& tokenizer)
    : options_(std::move(options)),
      engine_(engine),
      tokenizer_(tokenizer),
      encoder_(tokenizer),
      structured_(tokenizer, engine.eos_token_id()),
      responses_(options_.responses_store_ttl, options_.responses_store_bytes) {
  DSINFER_CHECK(!options_.model_names.empty(), "server: at least one model name is needed");
  created_unix_ = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  register_metrics();
  prep_pool_ = std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(std::max(1, options_.prep_threads)));
  http_ = std::make_unique<HttpServer>(
      options_.http, [this](std::shared_ptr<Exchange> ex) { handle(std::move(ex)); },
      [](int status, std::string_view path, std::string_view message) {
        return HttpServer::ErrorBody{"application/json",
                                     error_body(flavor_for_path(path), ApiError{status, std::string(message), "", "", {}})};
      });
}

ApiServer::~ApiServer() {
  if (!shutting_down_.load()) shutdown(std::chrono::milliseconds(0));
}

void ApiServer::register_metrics() {
  http_requests_ = &metrics_.counter("dsinfer_http_requests_total", "HTTP responses by route and status code.");
  http_duration_ = &metrics_.histogram("dsinfer_http_request_duration_seconds",
                                       "Time from a complete request to its last response byte queued.",
                                       latency_buckets());
  ttft_ = &metrics_.histogram("dsinfer_time_to_first_token_seconds",
                              "Time from a complete request to its first generated token.", latency_buckets());
  tpot_ = &metrics_.histogram("dsinfer_time_per_output_token_seconds",
                              "Mean time between generated tokens after the first, per request.",
                              latency_buckets());
  e2e_ = &metrics_.histogram("dsinfer_request_latency_seconds", "End-to-end latency of generation requests.",
                             latency_buckets());
  prompt_tokens_ = &metrics_.counter("dsinfer_prompt_tokens_total", "Prompt tokens of finished requests.");
  cached_tokens_ = &metrics_.counter("dsinfer_prompt_cache_hit_tokens_total",
                                     "Prompt tokens served from the prefix cache (prompt_cache_hit_tokens).");
  generated_tokens_ = &metrics_.counter("dsinfer_generation_tokens_total", "Completion tokens of finished requests.");
  finished_ = &metrics_.counter("dsinfer_requests_finished_total",
                                "Generation requests by route and finish reason (stop, length, tool_calls, "
                                "stop_sequence, cancelled, error, ...).");
  cancelled_ = &metrics_.counter("dsinfer_requests_cancelled_total",
                                 "Generation requests cancelled, by why (client_disconnect, shutdown).");
  rejected_ = &metrics_.counter("dsinfer_requests_rejected_total",
                                "Generation requests refused before running, by reason.");
  if (options_.extra_metrics) metrics_.add_collector(options_.extra_metrics);
  metrics_.add_collector([this](PromWriter& w) {
    w.gauge("dsinfer_requests_in_flight", "Generation requests submitted and not finished.", active_calls_.load());
    const auto& st = http_->stats();
    w.gauge("dsinfer_http_open_connections", "Open client connections.", st.open_connections.load());
    w.counter("dsinfer_http_connections_total", "Connections accepted.", st.accepted_total.load());
    w.counter("dsinfer_http_rejected_connections_total", "Connections refused at the connection cap.",
              st.rejected_connections_total.load());
    w.counter("dsinfer_http_timeouts_total", "Requests cut for arriving too slowly, idle or stalled connections.",
              st.timeouts_total.load());
    w.counter("dsinfer_http_bad_requests_total", "Unparsable, oversized or otherwise refused HTTP requests.",
              st.bad_requests_total.load());
    w.gauge("dsinfer_responses_stored", "Responses kept for previous_response_id and GET /v1/responses/{id}.",
            static_cast<double>(responses_.size()));
    w.gauge("dsinfer_responses_stored_bytes", "Bytes of the stored Responses (--responses-store-bytes caps it).",
            static_cast<double>(responses_.bytes()));
    w.gauge("process_resident_memory_bytes", "Resident memory of the server process.",
            static_cast<double>(resident_bytes()));
    const engine::EngineMetrics m = engine_.metrics();
    w.gauge("dsinfer_engine_waiting_requests", "Requests waiting for admission.", m.waiting);
    w.gauge("dsinfer_engine_running_requests", "Requests in the running batch.", m.running);
    w.counter("dsinfer_engine_preempted_total", "Preemptions.", m.preempted_total);
    w.gauge("dsinfer_engine_kv_used_bytes", "KV memory in use (sequences and prefix cache).", m.kv_bytes_used);
    w.gauge("dsinfer_engine_kv_budget_bytes", "KV memory budget.", m.kv_bytes_budget);
    w.counter("dsinfer_engine_prompt_tokens_total", "Prompt tokens admitted by the engine.", m.prompt_tokens_total);
    w.counter("dsinfer_engine_cached_tokens_total", "Prompt tokens served from the prefix cache.",
              m.cached_tokens_total);
    w.counter("dsinfer_engine_generated_tokens_total", "Tokens generated by the engine.", m.generated_tokens_total);
    w.counter("dsinfer_engine_steps_total", "Forward steps.", m.steps_total);
    w.counter("dsinfer_engine_step_seconds_total", "Time spent in forward steps.", m.step_seconds_total);
    w.counter("dsinfer_engine_draft_tokens_total", "Speculative draft tokens proposed.", m.draft_tokens_total);
    w.counter("dsinfer_engine_accepted_draft_tokens_total", "Speculative draft tokens accepted.",
              m.accepted_draft_tokens_total);
    static const std::set<std::string> kFixed = {
        "dsinfer_engine_waiting_requests", "dsinfer_engine_running_requests", "dsinfer_engine_preempted_total",
        "dsinfer_engine_kv_used_bytes", "dsinfer_engine_kv_budget_bytes", "dsinfer_engine_prompt_tokens_total",
        "dsinfer_engine_cached_tokens_total", "dsinfer_engine_generated_tokens_total", "dsinfer_engine_steps_total",
        "dsinfer_engine_step_seconds_total", "dsinfer_engine_draft_tokens_total",
        "dsinfer_engine_accepted_draft_tokens_total"};
    for (const auto& [name, value] : m.extra) {
      std::string n = "dsinfer_engine_" + metric_name(name);
      if (kFixed.count(n)) continue;  // a family may appear once
      if (n.size() > 6 && n.compare(n.size() - 6, 6, "_total") == 0)
        w.counter(n, "Engine counter " + name + ".", value);
      else
        w.gauge(n, "Engine gauge " + name + ".", value);
    }
  });
}

void ApiServer::start() {
  http_->listen(options_.host, options_.port);
  http_->start(options_.io_threads);
}

bool ApiServer::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  // RFC 9110 §11.1: the scheme is case-insensitive, followed by one or more spaces.
  std::string_view auth = req.header("authorization");
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() > kScheme.size() && auth[kScheme.size()] == ' ' &&
      std::equal(kScheme.begin(), kScheme.end(), auth.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    std::string_view token = auth.substr(kScheme.size());
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (constant_time_equal(token, options_.api_key)) return true;
  }
  std::string_view key = req.header("x-api-key");
  return !key.empty() && constant_time_equal(key, options_.api_key);
}

void ApiServer::count_response(int route, int status) {
  http_requests_->add({{"route", kRouteNames[route]}, {"code", std::to_string(status)}});
}

void ApiServer::reply_json(const std::shared_ptr<Exchange>& ex, int route, int status, const std::string& body,
                           HeaderList headers) {
  ex->respond(status, "application/json", body, std::move(headers));
  count_response(route, status);
  http_duration_->observe({{"route", kRouteNames[route]}},
                          std::chrono::duration<double>(Clock::now() - ex->request().received).count());
}

void ApiServer::reply_error(const std::shared_ptr<Exchange>& ex, int route, int status, const std::string& message,
                            const std::string& code, HeaderList headers) {
  reply_json(ex, route, status, error_body(flavor_of(route, ex->request()), ApiError{status, message, code, "", {}}),
             std::move(headers));
}

void ApiServer::handle(std::shared_ptr<Exchange> ex) {
  const HttpRequest& req = ex->request();
  const int route = route_of(req.path);
  const bool get = req.method == "GET" || req.method == "HEAD";  // the HTTP layer drops HEAD bodies
  const bool post = req.method == "POST";
  switch (route) {
    case kHealth:
      if (!get) return reply_error(ex, route, 405, "use GET", "method_not_allowed", {{"Allow", "GET"}});
      if (shutting_down_.load() || http_->draining())
        return reply_json(ex, route, 503, R"({"status":"draining"})");
      return reply_json(ex, route, 200, R"({"status":"ok"})");
    case kMetrics:
      if (!get) return reply_error(ex, route, 405, "use GET", "method_not_allowed", {{"Allow", "GET"}});
      ex->respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render());
      count_response(route, 200);
      return;
    case kOther:
      if (options_.internal_routes && req.path.rfind("/internal/", 0) == 0) {
        if (!authorized(req)) {
          rejected_->add({{"reason", "unauthorized"}});
          return reply_error(ex, route, 401, "invalid or missing API key", "invalid_api_key",
                             {{"WWW-Authenticate", "Bearer"}});
        }
        return options_.internal_routes(std::move(ex));
      }
      // Under /v1/ an unknown path is only told apart from a known one after authentication: no route
      // enumeration without the key.
      if (req.path.rfind("/v1/", 0) != 0 && req.path != "/v1")
        return reply_error(ex, route, 404, core::str_cat("no route for ", req.method, " ", req.path), "not_found");
      break;
    default: break;
  }
  if (!authorized(req)) {
    rejected_->add({{"reason", "unauthorized"}});
    return reply_error(ex, route, 401, "invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')",
                       "invalid_api_key", {{"WWW-Authenticate", "Bearer"}});
  }
  if (route == kOther)
    return reply_error(ex, route, 404, core::str_cat("no route for ", req.method, " ", req.path), "not_found");
  if (route == kStoredResponse) return stored_response(ex);
  if (route == kModels) {
    if (!get) return reply_error(ex, route, 405, "use GET", "method_not_allowed", {{"Allow", "GET"}});
    const bool anthropic = req.has_header("anthropic-version");
    auto entry = [&](const std::string& name) {
      if (anthropic)
        return Json{{"type", "model"}, {"id", name}, {"display_name", name}, {"created_at", "1970-01-01T00:00:00Z"}};
      return Json{{"id", name}, {"object", "model"}, {"created", created_unix_}, {"owned_by", "dsinfer"},
                  {"max_model_len", engine_.max_context()}};
    };
    std::string_view path = req.path;
    if (path.size() > 11 && path.rfind("/v1/models/", 0) == 0) {
      // Served names may hold '/' or spaces ("org/model"): clients send them percent-encoded.
      const std::optional<std::string> decoded = percent_decode(path.substr(11));
      if (!decoded) return reply_error(ex, route, 400, "malformed percent-encoding in the model id", "invalid_request");
      const std::string& name = *decoded;
      if (std::find(options_.model_names.begin(), options_.model_names.end(), name) == options_.model_names.end())
        return reply_error(ex, route, 404, core::str_cat("The model '", name, "' does not exist"), "model_not_found");
      return reply_json(ex, route, 200, recipe::to_compact_json(entry(name)));
    }
    Json data = Json::array();
    for (const auto& n : options_.model_names) data.push_back(entry(n));
    Json list = anthropic ? Json{{"data", data}, {"has_more", false}, {"first_id", options_.model_names.front()},
                                 {"last_id", options_.model_names.back()}}
                          : Json{{"object", "list"}, {"data", data}};
    return reply_json(ex, route, 200, recipe::to_compact_json(list));
  }
  if (!post) return reply_error(ex, route, 405, "use POST", "method_not_allowed", {{"Allow", "POST"}});
  if (shutting_down_.load() || http_->draining()) {
    rejected_->add({{"reason", "shutting_down"}});
    return reply_error(ex, route, 503, "the server is shutting down", "service_unavailable");
  }
  if (route == kCountTokens) {
    boost::asio::post(*prep_pool_, [this, ex] { count_tokens(ex); });
    return;
  }
  handle_generation(ex, route);
}

void ApiServer::handle_generation(const std::shared_ptr<Exchange>& ex, int route) {
  // The slot is taken first, so that a flood of requests is refused before any parsing work.
  if (active_calls_.fetch_add(1) >= options_.max_concurrent_requests) {
    active_calls_.fetch_sub(1);
    rejected_->add({{"reason", "concurrency_limit"}});
    return reply_error(ex, route, 429,
                       core::str_cat("too many concurrent requests (limit ", options_.max_concurrent_requests, ")"),
                       "rate_limit_exceeded", {{"Retry-After", std::to_string(options_.retry_after_seconds)}});
  }
  // Conversion, rendering and encoding of a large prompt can take a while: done off the io threads so
  // that other connections keep streaming.
  boost::asio::post(*prep_pool_, [this, ex, route] { prepare(ex, route); });
}

// A stored response by id: GET returns it as it was sent, DELETE removes it (OpenAI's answers and 404s).
void ApiServer::stored_response(const std::shared_ptr<Exchange>& ex) {
  const int route = kStoredResponse;
  const HttpRequest& req = ex->request();
  std::string_view path = req.path;
  if (path.back() == '/') path.remove_suffix(1);
  const std::optional<std::string> id = percent_decode(path.substr(kStoredResponsePrefix.size()));
  if (!id || id->empty() || id->find('/') != std::string::npos)
    return reply_error(ex, route, 404, core::str_cat("no route for ", req.method, " ", req.path), "not_found");
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (!get && req.method != "DELETE")
    return reply_error(ex, route, 405, "use GET or DELETE", "method_not_allowed", {{"Allow", "GET, DELETE"}});
  const std::string not_found = core::str_cat("Response with id '", id->substr(0, 64), "' not found.");
  if (get) {
    auto stored = responses_.get(*id);
    if (!stored) return reply_error(ex, route, 404, not_found, "not_found");
    return reply_json(ex, route, 200, stored->response);
  }
  if (!responses_.erase(*id)) return reply_error(ex, route, 404, not_found, "not_found");
  reply_json(ex, route, 200,
             recipe::to_compact_json(Json{{"id", *id}, {"object", "response.deleted"}, {"deleted", true}}));
}

void ApiServer::check_model(const Json& body) const {
  if (auto m = body.find("model"); m != body.end() && m->is_string()) {
    const std::string name = m->get<std::string>();
    if (std::find(options_.model_names.begin(), options_.model_names.end(), name) == options_.model_names.end())
      throw_api_error(404, core::str_cat("The model '", name, "' does not exist (this server serves '",
                                         options_.model_names.front(), "')"),
                      "model_not_found", "model");
  }
}

// Anthropic's token counting: the Messages request (without max_tokens) rendered and encoded exactly as
// /v1/messages would; the answer is the prompt's length, usage.input_tokens + cache_read_input_tokens there.
void ApiServer::count_tokens(const std::shared_ptr<Exchange>& ex) {
  const int route = kCountTokens;
  try {
    Json body = parse_request_body(ex->take_body());
    check_model(body);
    if (!body.contains("max_tokens")) body["max_tokens"] = 1;  // required by the Messages schema, unused here
    const recipe::ConvertedRequest conv = recipe::convert_request(recipe::Protocol::kMessages, body, options_.conversion);
    const recipe::RenderedPrompt rendered = recipe::render_conversation(conv.request.conversation, options_.prompt_version);
    if (!rendered.image_sources.empty())
      throw_api_error(400, "this model does not accept images", "unsupported_content");
    const size_t n = encoder_.encode(rendered).size();
    reply_json(ex, route, 200, recipe::to_compact_json(Json{{"input_tokens", n}}));
  } catch (...) {
    const RequestError err = request_error(ErrorFlavor::kAnthropic, route);
    rejected_->add({{"reason", err.internal ? "internal" : "invalid"}});
    reply_json(ex, route, err.status, err.body);
  }
}

void ApiServer::prepare(const std::shared_ptr<Exchange>& ex, int route) {
  auto fail = [&](int status, const std::string& body, const char* reason, HeaderList headers = {}) {
    active_calls_.fetch_sub(1);
    rejected_->add({{"reason", reason}});
    reply_json(ex, route, status, body, std::move(headers));
  };
  const ErrorFlavor flavor = flavor_of(route);

  auto call = std::make_shared<Call>();
  call->server = this;
  call->ex = ex;
  call->route = route;
  engine::RequestSpec spec;
  recipe::OutputConstraintRequest constraint;
  bool thinking = false;
  int64_t n_choices = 1;
  int64_t n_answered = 1;  // best_of: fewer than n_choices
  bool body_seeded = false;
  std::vector<std::unique_ptr<ResponseStream>> more_outs;  // choices 1..n-1
  try {
    // Parsed, the body is not needed any more: its storage goes now, not when the response ends.
    Json body = parse_request_body(ex->take_body());
    check_model(body);
    const std::string model =
        body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : options_.model_names.front();
    const int64_t context = engine_.max_context();
    const int64_t max_prompt = options_.max_prompt_tokens > 0 ? std::min(options_.max_prompt_tokens, context - 1) : context - 1;
    auto check_prompt = [&](int64_t n) {
      if (n == 0) throw_api_error(400, "the prompt is empty", "invalid_prompt", "prompt");
      if (n > max_prompt)
        throw_api_error(400,
                        core::str_cat("This model's maximum prompt length is ", max_prompt, " tokens; the request has ",
                                      n, " prompt tokens"),
                        "context_length_exceeded");
    };
    auto cap_max_tokens = [&](int64_t requested, bool explicit_limit) -> int32_t {
      if (options_.max_output_tokens > 0 && requested > options_.max_output_tokens) {
        if (explicit_limit)
          throw_api_error(400,
                          core::str_cat("max_tokens is ", requested, ", more than this server's limit of ",
                                        options_.max_output_tokens),
                          "max_tokens_too_large", "max_tokens");
        requested = options_.max_output_tokens;
      }
      return static_cast<int32_t>(std::min<int64_t>(requested, std::numeric_limits<int32_t>::max()));
    };

    if (route == kCompletions) {
      call->response_id = "cmpl-" + random_hex(24);
      CompletionOptions co;
      co.id = call->response_id;
      co.model = model;
      co.stream = optional_bool(body, "stream").value_or(false);
      if (!body.contains("prompt")) throw_api_error(400, "missing field `prompt`", "missing_field", "prompt");
      const Json& prompt = body["prompt"];
      auto is_id_list = [](const Json& a) {
        return a.is_array() && std::all_of(a.begin(), a.end(), [](const Json& x) { return x.is_number_integer(); });
      };
      if (prompt.is_string()) {
        co.prompt_text = prompt.get<std::string>();
        // A raw prompt is the client's own template: added-token spellings in it are meant as tokens.
        spec.prompt_ids = tokenizer_.encode(co.prompt_text);
      } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
        co.prompt_text = prompt[0].get<std::string>();
        spec.prompt_ids = tokenizer_.encode(co.prompt_text);
      } else if (is_id_list(prompt) && !prompt.empty()) {
        for (const auto& x : prompt) {
          if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tokenizer_.vocab_size())
            throw_api_error(400, core::str_cat("prompt token id ", x.dump(), " is outside the vocabulary [0, ",
                                               tokenizer_.vocab_size(), ")"),
                            "invalid_prompt", "prompt");
          spec.prompt_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
        }
        co.prompt_text = tokenizer_.decode(spec.prompt_ids);
      } else if (prompt.is_array() && prompt.size() == 1 && is_id_list(prompt[0])) {
        for (const auto& x : prompt[0]) {
          int64_t v = x.get<int64_t>();
          if (v < 0 || v >= tokenizer_.vocab_size())
            throw_api_error(400, core::str_cat("prompt token id ", v, " is outside the vocabulary"), "invalid_prompt", "prompt");
          spec.prompt_ids.push_back(static_cast<int32_t>(v));
        }
        co.prompt_text = tokenizer_.decode(spec.prompt_ids);
      } else if (prompt.is_array() && prompt.size() > 1) {
        throw_api_error(400, "only one prompt per request is supported", "invalid_prompt", "prompt");
      } else {
        throw_api_error(400, "'prompt' must be a string, an array of token ids, or an array with one of these",
                        "invalid_type", "prompt");
      }
      check_prompt(static_cast<int64_t>(spec.prompt_ids.size()));
      n_choices = n_answered = read_n(body);
      // best_of: that many candidates, the n with the highest sum of token logprobs answered (OpenAI's).
      if (auto best = optional_number<int64_t>(body, "best_of", 1, kMaxChoices)) {
        if (*best < n_answered)
          throw_api_error(400, core::str_cat("best_of (", *best, ") must be at least n (", n_answered, ")"),
                          "invalid_value", "best_of");
        if (*best > 1 && co.stream)
          throw_api_error(400, "best_of > 1 cannot be streamed", "invalid_value", "best_of");
        n_choices = *best;
      }
      if (auto lp = optional_number<int64_t>(body, "logprobs", 0, 5)) {
        co.logprobs = static_cast<int32_t>(*lp);
        spec.sampling.top_logprobs = co.logprobs;
      }
      // Ranking needs each drawn token's logprob; the body shows them only when asked (co.logprobs).
      if (n_choices > n_answered) spec.sampling.top_logprobs = std::max(spec.sampling.top_logprobs, 0);
      if (auto s = body.find("suffix"); s != body.end() && !s->is_null())
        throw_api_error(400, "suffix is not supported", "unsupported_parameter", "suffix");
      co.echo = optional_bool(body, "echo").value_or(false);
      co.skip_special_tokens = optional_bool(body, "skip_special_tokens").value_or(true);
      if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
        co.include_usage = so->value("include_usage", false);
      if (auto st = body.find("stop"); st != body.end() && !st->is_null()) {
        if (st->is_string()) {
          co.stop.push_back(st->get<std::string>());
        } else if (st->is_array() && st->size() <= 16 &&
                   std::all_of(st->begin(), st->end(), [](const Json& x) { return x.is_string(); })) {
          for (const auto& x : *st) co.stop.push_back(x.get<std::string>());
        } else {
          throw_api_error(400, "'stop' must be a string or an array of at most 16 strings", "invalid_type", "stop");
        }
      }
      const int64_t room = context - static_cast<int64_t>(spec.prompt_ids.size());
      auto mt = optional_number<int64_t>(body, "max_tokens", 1, std::numeric_limits<int32_t>::max());
      if (mt && *mt > room)
        throw_api_error(400,
                        core::str_cat("max_tokens is ", *mt, " but the context leaves ", room, " tokens after the ",
                                      spec.prompt_ids.size(), "-token prompt (context length ", context, ")"),
                        "context_length_exceeded", "max_tokens");
      spec.max_tokens = cap_max_tokens(mt.value_or(std::min<int64_t>(16, room)), mt.has_value());
      spec.sampling.temperature = optional_number<float>(body, "temperature", 0.f, 2.f).value_or(1.f);
      spec.sampling.top_p = optional_number<float>(body, "top_p", 0.f, 1.f).value_or(1.f);
      if (spec.sampling.top_p <= 0.f) throw_api_error(400, "top_p must be in (0, 1]", "invalid_value", "top_p");
      call->stream = co.stream;
      call->out = make_completion_stream(co, tokenizer_);
      for (int64_t i = 1; i < n_choices; ++i) more_outs.push_back(make_completion_stream(co, tokenizer_));
    } else {
      refuse_unsupported(route, body);
      const recipe::Protocol protocol = route == kChat        ? recipe::Protocol::kChatCompletions
                                        : route == kResponses ? recipe::Protocol::kResponses
                                                              : recipe::Protocol::kMessages;
      call->response_id = (route == kChat ? "chatcmpl-" : route == kResponses ? "resp_" : "msg_") + random_hex(24);
      if (route == kResponses) {
        // OpenAI's continuation: the stored conversation (its input and output items, not its
        // instructions) comes before this request's input.
        call->store = optional_bool(body, "store").value_or(true) && options_.responses_store_bytes > 0;
        auto prev = body.find("previous_response_id");
        const bool continues = prev != body.end() && !prev->is_null();
        if (continues || call->store) {
          Json items = input_items(body);
          if (continues) {
            if (!prev->is_string())
              throw_api_error(400, "'previous_response_id' must be a string", "invalid_type", "previous_response_id");
            const std::string prev_id = prev->get<std::string>();
            auto stored = responses_.get(prev_id);
            if (!stored)
              throw_api_error(404, core::str_cat("Previous response with id '", prev_id.substr(0, 64), "' not found."),
                              "previous_response_not_found", "previous_response_id");
            Json conversation = recipe::parse_json(stored->conversation);
            for (auto& item : items) conversation.push_back(std::move(item));
            body["input"] = std::move(conversation);
            body.erase("previous_response_id");
          }
          if (call->store) call->stored_input = continues ? body["input"] : std::move(items);
        }
      }
      if (route == kChat) {
        // The recipe's conversion knows only n = 1: the server runs the choices.
        n_choices = n_answered = read_n(body);
        body.erase("n");
      }
      recipe::ConvertedRequest conv = recipe::convert_request(protocol, body, options_.conversion);
      recipe::RenderedPrompt rendered = recipe::render_conversation(conv.request.conversation, options_.prompt_version);
      if (!rendered.image_sources.empty())
        throw_api_error(400, "this model does not accept images", "unsupported_content");
      spec.prompt_ids = encoder_.encode(rendered);
      thinking = conv.request.conversation.thinking_mode;
      constraint = recipe::read_output_constraint(protocol, body);
      recipe::read_strict_tools(constraint, protocol, body, conv.request, options_.prompt_version);
      check_prompt(static_cast<int64_t>(spec.prompt_ids.size()));
      const bool explicit_limit = conv.request.inference_options.max_tokens.has_value();
      const uint32_t resolved =
          conv.request.resolve_max_tokens(static_cast<int64_t>(spec.prompt_ids.size()), context);
      spec.max_tokens = cap_max_tokens(resolved, explicit_limit);
      spec.sampling.temperature = conv.request.inference_options.temperature.value_or(1.f);
      spec.sampling.top_p = conv.request.inference_options.top_p.value_or(1.f);
      call->stream = conv.request.stream;
      call->out = make_recipe_stream(conv, call->response_id, model, call->stream, options_.separate_usage_chunk,
                                     tokenizer_, optional_bool(body, "skip_special_tokens").value_or(true));
      for (int64_t i = 1; i < n_choices; ++i)
        more_outs.push_back(make_recipe_stream(conv, call->response_id, model, call->stream,
                                               options_.separate_usage_chunk, tokenizer_,
                                               optional_bool(body, "skip_special_tokens").value_or(true)));
      if (route == kChat) {
        const bool logprobs = optional_bool(body, "logprobs").value_or(false);
        const auto top = optional_number<int64_t>(body, "top_logprobs", 0, engine::kMaxTopLogprobs);
        if (top && !logprobs)
          throw_api_error(400, "'top_logprobs' requires 'logprobs': true", "invalid_value", "top_logprobs");
        if (logprobs) spec.sampling.top_logprobs = static_cast<int32_t>(top.value_or(0));
      }
    }
    // Extensions shared by every route.
    if (auto k = optional_number<int64_t>(body, "top_k", -1, 1 << 20)) spec.sampling.top_k = static_cast<int32_t>(std::max<int64_t>(*k, 0));
    if (auto mp = optional_number<float>(body, "min_p", 0.f, 1.f)) spec.sampling.min_p = *mp;
    if (auto ig = optional_bool(body, "ignore_eos")) spec.ignore_eos = *ig;
    read_logit_adjustments(body, spec.sampling);
    if (auto seed = optional_number<uint64_t>(body, "seed", 0, std::numeric_limits<uint64_t>::max())) {
      body_seeded = true;
      spec.sampling.seed = *seed;
    } else {
      spec.sampling.seed = random_u64();
      spec.sampling.stream_key = random_u64();
    }
    spec.stop_token_ids.clear();
    // The KV store keeps a request's blocks for its traffic class's TTL (README.md, "KV store"): the
    // header names it; without one, a request that declares tools is agent traffic, any other chat.
    const std::string_view traffic = ex->request().header("x-dsinfer-traffic-class");
    if (traffic == "agent" || traffic == "chat") {
      spec.traffic_class = std::string(traffic);
    } else if (!traffic.empty()) {
      throw_api_error(400, "X-DSInfer-Traffic-Class must be agent or chat", "invalid_value");
    } else {
      const auto tools = body.find("tools");
      spec.traffic_class = tools != body.end() && tools->is_array() && !tools->empty() ? "agent" : "chat";
    }
    if (route != kChat && route != kResponses && route != kMessages) {
      constraint = recipe::read_output_constraint(recipe::Protocol::kMessages, body);  // regex / ebnf only
    }
    try {
      spec.constraint = structured_.constraint_for(constraint, thinking);
    } catch (const core::Error& e) {
      throw_api_error(400, core::str_cat("structured output: ", e.what()), "invalid_grammar");
    } catch (const nlohmann::json::exception& e) {
      throw_api_error(400, core::str_cat("structured output: ", recipe::json_error_message(e)), "invalid_grammar");
    }
  } catch (...) {
    const RequestError err = request_error(flavor, route);
    return fail(err.status, err.body, err.internal ? "internal" : "invalid");
  }

  call->prompt_tokens = static_cast<int64_t>(spec.prompt_ids.size());
  std::vector<std::shared_ptr<Call>> calls{call};
  std::vector<engine::RequestSpec> specs;
  if (n_choices > 1) {
    // Choice i samples with seed + i (mod 2^64), so choice i of a seeded call is the n = 1 request with
    // that seed; unseeded, every choice draws its own random seed and stream.
    const bool seeded = body_seeded;
    auto group = std::make_shared<Call::Group>();
    group->bodies.resize(static_cast<size_t>(n_choices));
    group->remaining = static_cast<size_t>(n_choices);
    group->scores.resize(static_cast<size_t>(n_choices));
    group->keep = static_cast<size_t>(n_answered);
    call->group = group;
    for (int64_t i = 1; i < n_choices; ++i) {
      auto c = std::make_shared<Call>();
      c->server = this;
      c->ex = ex;
      c->route = route;
      c->stream = call->stream;
      c->response_id = call->response_id;
      c->prompt_tokens = call->prompt_tokens;
      c->out = std::move(more_outs[static_cast<size_t>(i - 1)]);
      c->group = group;
      c->choice = static_cast<size_t>(i);
      calls.push_back(std::move(c));
    }
    for (const auto& c : calls) group->members.push_back(c);
    for (int64_t i = 1; i < n_choices; ++i) {
      engine::RequestSpec s = spec;
      if (seeded) {
        s.sampling.seed = spec.sampling.seed + static_cast<uint64_t>(i);
      } else {
        s.sampling.seed = random_u64();
        s.sampling.stream_key = random_u64();
      }
      if (spec.constraint) {  // a constraint holds its request's matching state: one each
        try {
          s.constraint = structured_.constraint_for(constraint, thinking);
        } catch (...) {
          const RequestError err = request_error(flavor, route);
          return fail(err.status, err.body, err.internal ? "internal" : "invalid");
        }
      }
      specs.push_back(std::move(s));
    }
  }
  specs.insert(specs.begin(), std::move(spec));
  boost::asio::post(ex->executor(), [this, calls = std::move(calls), specs = std::move(specs)]() mutable {
    submit(std::move(calls), std::move(specs));
  });
}

// On the connection's strand, so that the disconnect notification cannot interleave with it. calls[i]
// runs specs[i]; more than one are the choices of one call (n > 1), submitted all or none.
void ApiServer::submit(std::vector<std::shared_ptr<Call>> calls, std::vector<engine::RequestSpec> specs) {
  const auto& call = calls.front();
  const auto& ex = call->ex;
  const int route = call->route;
  const ErrorFlavor flavor = flavor_of(route);
  auto fail = [&](int status, const std::string& body, const char* reason, HeaderList headers = {}) {
    active_calls_.fetch_sub(1);
    rejected_->add({{"reason", reason}});
    reply_json(ex, route, status, body, std::move(headers));
  };
  if (ex->disconnected()) {  // the client left while the request was prepared
    active_calls_.fetch_sub(1);
    cancelled_->add({{"route", kRouteNames[route]}, {"why", "client_disconnect"}});
    return;
  }
  auto strand = ex->executor();
  // n > 1 sharing the prompt: only choice 0 now, the others when its first event comes (on this strand,
  // so not before this function has returned).
  const size_t submit_now = calls.size() > 1 && options_.share_prompt_kv ? 1 : calls.size();
  for (size_t i = 0; i < submit_now; ++i) {
    const auto& c = calls[i];
    engine::SubmitResult r = engine_.submit(std::move(specs[i]), [c, strand](const engine::TokenEvent& ev) {
      boost::asio::post(strand, [c, ev] { c->on_event(ev); });
    });
    if (r.status != engine::SubmitStatus::kAccepted) {
      for (size_t j = 0; j < i; ++j) {  // the choices already in: their events are ignored from now
        calls[j]->done = true;
        engine_.cancel(calls[j]->id);
      }
      switch (r.status) {
        case engine::SubmitStatus::kQueueFull:
          return fail(429, error_body(flavor, ApiError{429, "the engine's queue is full: " + r.message, "rate_limit_exceeded", "", {}}),
                      "queue_full", {{"Retry-After", std::to_string(options_.retry_after_seconds)}});
        case engine::SubmitStatus::kTooLong:
          return fail(400, error_body(flavor, ApiError{400, r.message, "context_length_exceeded", "", {}}), "too_long");
        case engine::SubmitStatus::kShuttingDown:
          return fail(503, error_body(flavor, ApiError{503, "the server is shutting down", "", "", {}}), "shutting_down");
        default:
          return fail(400, error_body(flavor, ApiError{400, r.message, "", "", {}}), "invalid");
      }
    }
    c->id = r.id;  // the call owns the slot now
  }
  for (size_t i = submit_now; i < calls.size(); ++i) call->group->waiting.emplace_back(calls[i], std::move(specs[i]));
  {
    std::lock_guard lock(calls_mu_);
    for (const auto& c : calls) calls_[c.get()] = c;
  }
  std::vector<std::weak_ptr<Call>> weak(calls.begin(), calls.end());
  ex->on_disconnect([weak = std::move(weak)] {
    for (const auto& w : weak)
      if (auto c = w.lock()) c->on_client_gone();
  });
  if (call->stream)
    ex->start_stream(200, "text/event-stream",
                     {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}, {"X-Request-Id", call->response_id}});
}

void ApiServer::finish_call(Call& call) {
  {
    std::lock_guard lock(calls_mu_);
    calls_.erase(&call);
  }
  if (!call.group || call.group->remaining == 0) active_calls_.fetch_sub(1);  // one slot per HTTP call
}

void ApiServer::cancel_in_flight() {
  abort_drain_.store(true);
  std::vector<std::shared_ptr<Call>> live;
  {
    std::lock_guard lock(calls_mu_);
    for (auto& [ptr, weak] : calls_)
      if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  if (!live.empty()) DSINFER_LOG_INFO("server: cancelling ", live.size(), " request(s) in flight");
  for (auto& c : live) boost::asio::post(c->ex->executor(), [c] { c->cancel_for_shutdown(); });
}

void ApiServer::shutdown(std::chrono::milliseconds drain) {
  if (shutting_down_.exchange(true)) return;
  http_->begin_drain();
  const auto deadline = Clock::now() + drain;
  bool idle = http_->wait_no_exchanges(std::chrono::milliseconds(0));
  while (!idle && !abort_drain_.load() && Clock::now() < deadline)
    idle = http_->wait_no_exchanges(std::chrono::milliseconds(50));
  if (!idle) {
    cancel_in_flight();
    if (!http_->wait_no_exchanges(std::chrono::seconds(10)))
      DSINFER_LOG_WARN("server: requests still open 10 s after cancelling them; closing their connections");
  }
  prep_pool_->join();  // nothing is posted to it any more: the HTTP layer stopped taking requests
  engine_.shutdown(false);
  http_->stop();
}

}  // namespace dsinfer::server
