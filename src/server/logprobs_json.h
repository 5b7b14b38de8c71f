// Token logprobs in OpenAI's shapes. Token strings are the token's bytes when they are valid UTF-8,
// else "bytes:\xNN..." (OpenAI's spelling for a token that splits a character); Chat also sends `bytes`.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "recipe/json_text.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

std::string logprob_token_string(std::string_view bytes);

// Legacy Completions: appends one token to {tokens, token_logprobs, top_logprobs, text_offset}.
// `offset` is the byte offset of the token in the choice's text.
void append_completion_logprob(recipe::Json& lp, const tokenizer::Tokenizer& tokenizer, int32_t token,
                               const engine::TokenLogprobs& logprobs, int64_t offset);
recipe::Json empty_completion_logprobs();

// Chat Completions: one entry of `logprobs.content` ({token, logprob, bytes, top_logprobs}).
recipe::Json chat_logprob_entry(const tokenizer::Tokenizer& tokenizer, int32_t token,
                                const engine::TokenLogprobs& logprobs);

}  // namespace dsinfer::server
