// The ResponseStreams of the generation routes: the three chat protocols through the recipe's stream
// processor and chunk generators, and the legacy Completions API (raw text, no chat template).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "recipe/convert.h"
#include "server/response_stream.h"

namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::server {

// skip_special_tokens: special ids (BOS, EOS, padding, placeholders) add no text, as vLLM's default. The
// recipe's own control tokens (</think>, ｜DSML｜) are not special, so its output parsing still sees them.
std::unique_ptr<ResponseStream> make_recipe_stream(const recipe::ConvertedRequest& request, const std::string& id,
                                                   const std::string& model, bool stream, bool separate_usage_chunk,
                                                   const tokenizer::Tokenizer& tokenizer,
                                                   bool skip_special_tokens = true);

struct CompletionOptions {
  std::string id;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // streaming: a final chunk with usage (stream_options.include_usage)
  std::vector<std::string> stop;
  bool echo = false;
  std::string prompt_text;  // echoed when echo is set
  int32_t logprobs = -1;    // -1: none; k >= 0: per-token logprobs with k alternatives
  bool skip_special_tokens = true;  // special ids add no text (vLLM's default)
};

std::unique_ptr<ResponseStream> make_completion_stream(const CompletionOptions& options,
                                                       const tokenizer::Tokenizer& tokenizer);

}  // namespace dsinfer::server
