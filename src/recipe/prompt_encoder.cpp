#include "recipe/prompt_encoder.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe {

PromptEncoder::PromptEncoder(const tokenizer::Tokenizer& tokenizer, core::ThreadPool* pool)
    : tokenizer_(tokenizer), pool_(pool) {}

int32_t PromptEncoder::special_id(std::string_view spelling) const {
  const auto id = tokenizer_.added_token_id(spelling);
  DSINFER_CHECK(id.has_value(), "prompt encoding: the template token '", spelling,
                "' is not an added token of this tokenizer (wrong tokenizer for the prompt version?)");
  return *id;
}

std::vector<int32_t> PromptEncoder::encode(const RenderedPrompt& rendered) const {
  const std::string_view text = rendered.prompt;
  // Plain regions: the maximal runs between control tokens (seams inside plain text stay merged).
  std::vector<std::string_view> regions;
  std::vector<int32_t> specials;
  size_t pos = 0;
  for (const auto& range : rendered.special_ranges) {
    DSINFER_CHECK(range.begin >= pos && range.end > range.begin && range.end <= text.size(),
                  "prompt encoding: bad special range [", range.begin, ", ", range.end, ")");
    regions.push_back(text.substr(pos, range.begin - pos));
    specials.push_back(special_id(text.substr(range.begin, range.end - range.begin)));
    pos = range.end;
  }
  regions.push_back(text.substr(pos));
  tokenizer::EncodeOptions options;
  options.pool = pool_;
  const auto encoded = tokenizer_.encode_batch(regions, /*added_tokens=*/false, options);
  std::vector<int32_t> ids;
  size_t total = specials.size();
  for (const auto& e : encoded) total += e.size();
  ids.reserve(total);
  for (size_t i = 0; i < encoded.size(); ++i) {
    ids.insert(ids.end(), encoded[i].begin(), encoded[i].end());
    if (i < specials.size()) ids.push_back(specials[i]);
  }
  return ids;
}

std::vector<int32_t> PromptEncoder::encode_single_pass(std::string_view prompt) const {
  tokenizer::EncodeOptions options;
  options.pool = pool_;
  return tokenizer_.encode(prompt, options);
}

}  // namespace dsinfer::recipe
