// V4 / V4.1 prompt rendering (spec §2): normalisation, injected system content (tool prompt, JSON mode),
// reasoning-effort prefixes, historical tool calls and results, latest reminder, generation suffix and
// 0.2.0 prefix continuation. The output is byte-exact with deepseek-recipe and also records which byte
// ranges are control tokens emitted by the template, so encoding can treat everything else as plain text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace dsinfer::recipe {

enum class PromptVersion { kV4, kV41 };

// [begin, end) byte range of one control token spelling in RenderedPrompt::prompt.
struct SpecialRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const SpecialRange&) const = default;
};

struct RenderedPrompt {
  std::string prompt;
  std::vector<ImageSource> image_sources;  // prompt order, one per image placeholder
  // Ascending, non-overlapping: the template's control tokens (BOS, role tokens, <think>, </think>, EOS,
  // ｜DSML｜, the latest-reminder token) and one placeholder per image source. Client text is never here.
  std::vector<SpecialRange> special_ranges;
};

// `image_placeholder` spells the image token (id 129264) in the prompt: the recipe's <｜image｜> (its
// goldens, V4 and V4.1) unless the model's tokenizer spells it otherwise (the released V4.1 tokenizer.json
// has <｜deepseek_image｜>; image_placeholder(tokenizer) in tokenizer_loader.h picks it).
RenderedPrompt render_conversation(const Conversation& conversation, PromptVersion version,
                                   std::string_view image_placeholder = kImagePlaceholder);

const char* to_string(PromptVersion version);

// Token spellings (the ｜ is U+FF5C, the ▁ U+2581).
namespace tokens {
inline constexpr const char* kBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr const char* kEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr const char* kSystem = "<\xEF\xBD\x9CSystem\xEF\xBD\x9C>";
inline constexpr const char* kUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
inline constexpr const char* kAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
inline constexpr const char* kLatestReminder = "<\xEF\xBD\x9Clatest_reminder\xEF\xBD\x9C>";
inline constexpr const char* kThinkBegin = "<think>";
inline constexpr const char* kThinkEnd = "</think>";
inline constexpr const char* kDsml = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
}  // namespace tokens

}  // namespace dsinfer::recipe
