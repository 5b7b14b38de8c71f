// The pre-tokenizer of a byte-level BPE tokenizer.json: a `Sequence` of `Split` steps (PCRE2 regexes
// or literal strings, with Hugging Face's split behaviours) and a `ByteLevel` step. ByteLevel only
// maps bytes to its alphabet (the BPE model works on raw bytes, so that costs nothing here); with
// use_regex it also splits with the GPT-2 regex first.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/function_ref.h"
#include "tokenizer/regex.h"

namespace dsinfer::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // `spec` is the "pre_tokenizer" value; `where` names the file for error messages. Fails for
  // pre-tokenizer kinds other than Sequence / Split / ByteLevel, and if there is no ByteLevel step.
  static PreTokenizer from_json(const nlohmann::json& spec, std::string_view where);

  // Calls emit(word) for every non-empty word of `text` (valid UTF-8), in order.
  void split(std::string_view text, FunctionRef<void(std::string_view)> emit) const;

  // Whether cut points for parallel encoding are known for this pre-tokenizer (it is exactly the
  // DeepSeek V3/V4 one); without them, long plain text is encoded by one thread.
  bool has_cut_points() const { return deepseek_v3_; }

  // The first position p in [from, limit) at which pre-tokenizing text[0, p) and text[p, size)
  // separately gives the same words as pre-tokenizing the whole text, or npos. `from` > 0.
  size_t find_cut(std::string_view text, size_t from, size_t limit) const;

 private:
  struct Step {
    std::unique_ptr<Regex> regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };

  void add_step(const nlohmann::json& spec, std::string_view where, bool& byte_level_seen);
  void apply(size_t step, std::string_view piece, FunctionRef<void(std::string_view)> emit) const;

  std::vector<Step> steps_;
  bool deepseek_v3_ = false;
};

}  // namespace dsinfer::tokenizer
