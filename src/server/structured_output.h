// Structured output for the server: compiles what a request asks for (recipe::OutputConstraintRequest)
// through grammar/ (compiled grammars cached by kind and source) into the engine's per-request
// TokenConstraint over the tokenizer's vocabulary. In thinking mode the constraint starts after the
// model's </think>: the reasoning is free, the answer follows the grammar. Strict tools are the
// exception: their grammar covers the reasoning too (it must not open a DSML block the parser would
// read as a call), over a vocabulary that keeps the ｜DSML｜ and </think> tokens.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "grammar/token_matcher.h"
#include "recipe/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

class StructuredOutput {
 public:
  StructuredOutput(const tokenizer::Tokenizer& tokenizer, int32_t eos_token_id);

  // Null for Kind::kNone. A grammar that does not compile throws core::Error naming what is wrong (400).
  // The constraint's source() is compact JSON {"kind", "source", "thinking"} that constraint_from_source
  // turns back into an equal, fresh constraint (in another process: a disaggregated router's workers).
  std::shared_ptr<engine::TokenConstraint> constraint_for(const recipe::OutputConstraintRequest& request,
                                                          bool thinking);
  // Fails with core::Error (invalid input) naming what is wrong with the text.
  std::shared_ptr<engine::TokenConstraint> constraint_from_source(const std::string& text);
  const grammar::GrammarCache& cache() const { return cache_; }

 private:
  std::shared_ptr<const grammar::Vocabulary> vocabulary();
  std::shared_ptr<const grammar::Vocabulary> tool_vocabulary();

  const tokenizer::Tokenizer& tokenizer_;
  int32_t eos_;
  int32_t think_end_ = -1;
  grammar::GrammarCache cache_;
  std::once_flag vocab_once_;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  std::once_flag tool_vocab_once_;
  std::shared_ptr<const grammar::Vocabulary> tool_vocab_;
};

// The engine's constraint over a grammar::TokenMatcher; with a gate token, every token is allowed until
// the gate has been produced (a rollback past it closes the gate again).
class GrammarConstraint final : public engine::TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::Grammar> grammar, std::shared_ptr<const grammar::Vocabulary> vocab,
                    int32_t gate_token = -1, std::string source = {});
  void fill_mask(std::span<uint32_t> words) override;
  bool accept(int32_t token) override;
  void rollback(int32_t n) override;
  std::string source() const override { return source_; }
  const grammar::TokenMatcher& matcher() const { return matcher_; }

 private:
  grammar::TokenMatcher matcher_;
  int32_t gate_;
  int32_t before_gate_ = 0;  // tokens accepted while the gate was closed (the gate included)
  bool open_;
  std::string source_;
};

}  // namespace dsinfer::server
