#include "tokenizer/incremental_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

void IncrementalDecoder::append_id(int32_t id) {
  if (!tokenizer_.is_known(id) || (skip_special_tokens_ && tokenizer_.is_special(id))) return;
  pending_.append(tokenizer_.token_bytes(id));
}

std::string IncrementalDecoder::drain(bool final) {
  std::string out;
  const size_t used = utf8::append_lossy(pending_, out, final);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDecoder::step(int32_t id) {
  append_id(id);
  return drain(false);
}

std::string IncrementalDecoder::step(std::span<const int32_t> ids) {
  for (const int32_t id : ids) append_id(id);
  return drain(false);
}

std::string IncrementalDecoder::flush() { return drain(true); }

}  // namespace dsinfer::tokenizer
