// Helpers of the grammar tests: does a whole text match, from a fresh matcher; the V4 tokenizer.
#pragma once

#include <memory>
#include <string>

#include "grammar/earley_matcher.h"
#include "grammar/ebnf.h"
#include "grammar/grammar.h"
#include "grammar/token_matcher.h"
#include "tokenizer/tokenizer_files.h"

namespace dsinfer::grammar::testing {

inline bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  EarleyMatcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

// A prefix of some sentence (the matcher accepted every byte).
inline bool is_prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  EarleyMatcher m(g);
  return m.accept_bytes(text);
}

inline std::shared_ptr<const Grammar> ebnf(const std::string& text) {
  return std::make_shared<const Grammar>(compile_ebnf(text));
}

// The real V4 tokenizer (~129K tokens), built once per process.
inline const tokenizer::Tokenizer& v4() { return tokenizer::testing::deepseek(tokenizer::DeepseekVersion::kV4); }

// Its vocabulary for token masks, end of text = 1 (<｜end▁of▁sentence｜>), built once per process.
inline std::shared_ptr<const Vocabulary> v4_vocab() {
  static auto vocab = Vocabulary::from_tokenizer(v4(), {1});
  return vocab;
}

}  // namespace dsinfer::grammar::testing
