// Injection-safe prompt encoding (spec §6): control tokens come only from the template (the rendered
// prompt's special ranges map straight to their ids); every region between them — client text, tool
// schemas, template prose — is plain byte-level BPE that never matches added tokens, so a user typing
// "<｜User｜>" gets five ordinary tokens, not a role switch. Plain regions are encoded as one batch on the
// thread pool. For prompts without added-token spellings in client text the ids equal single-pass
// encoding of the whole prompt (0.1.x behaviour, what the goldens show).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "recipe/prompt.h"

namespace dsinfer::core {
class ThreadPool;
}
namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::recipe {

class PromptEncoder {
 public:
  // `tokenizer` (and `pool`, when given) must outlive the encoder.
  explicit PromptEncoder(const tokenizer::Tokenizer& tokenizer, core::ThreadPool* pool = nullptr);

  // Throws core::Error if a special range does not spell an added token of this tokenizer (e.g. a V4.1
  // prompt with <｜System｜> encoded with the V4 tokenizer).
  std::vector<int32_t> encode(const RenderedPrompt& prompt) const;

  // 0.1.x single pass: added-token spellings anywhere in the text become tokens. Unsafe for client
  // text; kept to compare with and for tools that want the old ids.
  std::vector<int32_t> encode_single_pass(std::string_view prompt) const;

  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  int32_t special_id(std::string_view spelling) const;

  const tokenizer::Tokenizer& tokenizer_;
  core::ThreadPool* pool_;
};

}  // namespace dsinfer::recipe
