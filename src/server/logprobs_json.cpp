#include "server/logprobs_json.h"

#include <cstdio>

namespace dsinfer::server {
namespace {

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::string logprob_token_string(std::string_view bytes) {
  if (valid_utf8(bytes)) return std::string(bytes);
  std::string out = "bytes:";
  for (char c : bytes) {
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
    out += buf;
  }
  return out;
}

recipe::Json empty_completion_logprobs() {
  return recipe::Json{{"tokens", recipe::Json::array()},
                      {"token_logprobs", recipe::Json::array()},
                      {"top_logprobs", recipe::Json::array()},
                      {"text_offset", recipe::Json::array()}};
}

void append_completion_logprob(recipe::Json& lp, const tokenizer::Tokenizer& tokenizer, int32_t token,
                               const engine::TokenLogprobs& logprobs, int64_t offset) {
  lp["tokens"].push_back(logprob_token_string(tokenizer.token_bytes(token)));
  lp["token_logprobs"].push_back(logprobs.logprob);
  recipe::Json top = recipe::Json::object();
  for (const engine::TokenLogprob& t : logprobs.top) top[logprob_token_string(tokenizer.token_bytes(t.token))] = t.logprob;
  lp["top_logprobs"].push_back(std::move(top));
  lp["text_offset"].push_back(offset);
}

recipe::Json chat_logprob_entry(const tokenizer::Tokenizer& tokenizer, int32_t token,
                                const engine::TokenLogprobs& logprobs) {
  auto one = [&](int32_t id, float logprob) {
    const std::string_view bytes = tokenizer.token_bytes(id);
    recipe::Json b = recipe::Json::array();
    for (char c : bytes) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return recipe::Json{{"token", logprob_token_string(bytes)}, {"logprob", logprob}, {"bytes", std::move(b)}};
  };
  recipe::Json entry = one(token, logprobs.logprob);
  recipe::Json top = recipe::Json::array();
  for (const engine::TokenLogprob& t : logprobs.top) top.push_back(one(t.token, t.logprob));
  entry["top_logprobs"] = std::move(top);
  return entry;
}

}  // namespace dsinfer::server
