// Streaming detokenization: feed ids one at a time, get text as soon as it is complete UTF-8. Bytes
// of a character split across tokens are held back until the character is complete; bytes that can
// never become valid are replaced by U+FFFD exactly as decode() would replace them, so the
// concatenation of every step() and the final flush() equals decode() of all the ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace dsinfer::tokenizer {

class Tokenizer;

class IncrementalDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // The text completed by this id (often empty while a character is incomplete).
  std::string step(int32_t id);
  std::string step(std::span<const int32_t> ids);
  // Everything still held back (an incomplete character becomes U+FFFD); the decoder is then empty.
  std::string flush();
  void reset() { pending_.clear(); }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  void append_id(int32_t id);
  std::string drain(bool final);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace dsinfer::tokenizer
