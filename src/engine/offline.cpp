#include "engine/offline.h"

#include <condition_variable>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsinfer::engine {

const char* finish_reason_name(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

void generate_offline(Engine& engine, std::span<const RequestSpec> specs, int64_t max_concurrency,
                      const OfflineCallbacks& callbacks) {
  DSINFER_CHECK(max_concurrency >= 1, "max_concurrency must be >= 1, got ", max_concurrency);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<OfflineResult> results(specs.size());
  std::vector<bool> done(specs.size(), false);
  size_t next_submit = 0, next_report = 0, in_flight = 0;

  std::unique_lock<std::mutex> lock(mu);
  while (next_report < specs.size()) {
    while (next_submit < specs.size() && in_flight < static_cast<size_t>(max_concurrency)) {
      const size_t i = next_submit++;
      ++in_flight;
      lock.unlock();
      SubmitResult r = engine.submit(specs[i], [&, i](const TokenEvent& e) {
        if (callbacks.on_tokens) {
          if (!e.tokens.empty()) callbacks.on_tokens(i, e.tokens);
          if (e.matched_stop_token >= 0) callbacks.on_tokens(i, std::span<const int32_t>(&e.matched_stop_token, 1));
        }
        std::lock_guard<std::mutex> l(mu);
        OfflineResult& res = results[i];
        res.output_ids.insert(res.output_ids.end(), e.tokens.begin(), e.tokens.end());
        if (e.finish == FinishReason::kNone) return;
        if (e.matched_stop_token >= 0) res.output_ids.push_back(e.matched_stop_token);
        res.finish = e.finish;
        res.cached_tokens = e.cached_tokens;
        res.error = e.error;
        done[i] = true;
        --in_flight;
        cv.notify_all();
      });
      lock.lock();
      if (r.status != SubmitStatus::kAccepted) {
        results[i].finish = FinishReason::kError;
        results[i].error = r.message;
        done[i] = true;
        --in_flight;
      }
    }
    while (next_report < specs.size() && done[next_report]) {
      const size_t i = next_report++;
      if (callbacks.on_result) {
        lock.unlock();
        callbacks.on_result(i, results[i]);
        lock.lock();
      }
    }
    if (next_report < specs.size()) {
      cv.wait(lock, [&] {
        return done[next_report] || (next_submit < specs.size() && in_flight < static_cast<size_t>(max_concurrency));
      });
    }
  }
}

namespace {

template <typename T>
T field(const nlohmann::json& j, const char* name, T fallback, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const std::exception& e) {
    core::fail(where, ": field \"", name, "\" has the wrong type (", e.what(), ")");
  }
}

}  // namespace

OfflineRequest parse_offline_request(const std::string& line, const std::string& where, const RequestSpec& defaults,
                                     const std::function<std::vector<int32_t>(const std::string&)>& tokenize) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception& e) {
    core::fail(where, ": not valid JSON (", e.what(), ")");
  }
  DSINFER_CHECK(j.is_object(), where, ": expected a JSON object");
  OfflineRequest r;
  r.spec = defaults;
  if (j.contains("prompt_ids")) {
    r.spec.prompt_ids = field<std::vector<int32_t>>(j, "prompt_ids", {}, where);
  } else if (j.contains("prompt")) {
    const std::string text = field<std::string>(j, "prompt", "", where);
    try {
      r.spec.prompt_ids = tokenize(text);
    } catch (const std::exception& e) {
      core::fail(where, ": ", e.what());
    }
    r.text = true;
  } else {
    core::fail(where, ": needs \"prompt_ids\" or \"prompt\"");
  }
  r.spec.max_tokens = field<int32_t>(j, "max_tokens", defaults.max_tokens, where);
  r.spec.sampling.temperature = field<float>(j, "temperature", defaults.sampling.temperature, where);
  r.spec.sampling.top_p = field<float>(j, "top_p", defaults.sampling.top_p, where);
  r.spec.sampling.top_k = field<int32_t>(j, "top_k", defaults.sampling.top_k, where);
  r.spec.sampling.min_p = field<float>(j, "min_p", defaults.sampling.min_p, where);
  r.spec.sampling.seed = field<uint64_t>(j, "seed", defaults.sampling.seed, where);
  r.spec.stop_token_ids = field<std::vector<int32_t>>(j, "stop_token_ids", defaults.stop_token_ids, where);
  r.spec.ignore_eos = field<bool>(j, "ignore_eos", defaults.ignore_eos, where);
  return r;
}

std::string format_offline_result(const OfflineResult& r, const std::string* text) {
  nlohmann::ordered_json j;
  j["output_ids"] = r.output_ids;
  j["finish_reason"] = finish_reason_name(r.finish);
  j["cached_tokens"] = r.cached_tokens;
  if (text) j["text"] = *text;
  if (!r.error.empty()) j["error"] = r.error;
  return j.dump();
}

}  // namespace dsinfer::engine
