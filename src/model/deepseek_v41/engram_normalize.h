// The normalisation that folds tokens into Engram's compressed vocabulary (model-v41.md §5): the
// Hugging Face `tokenizers` normalizer sequence NFKC -> NFD -> StripAccents -> Lowercase ->
// "[ \t\r\n]+" to " " -> "^ $" to U+E000 -> Strip -> U+E000 to " ", on ICU. Matches HF's
// implementation where it differs from the spec's wording: StripAccents drops every combining mark
// (General_Category M: Mn, Mc and Me, not only Mn) and Lowercase maps each code point on its own (full
// case mapping, no context, so a final capital sigma becomes σ, not ς).
#pragma once

#include <string>
#include <string_view>

namespace dsinfer::model::deepseek_v41 {

// `text` must be valid UTF-8 (a lossy-decoded token always is); the result is UTF-8.
std::string engram_normalize(std::string_view text);

}  // namespace dsinfer::model::deepseek_v41
