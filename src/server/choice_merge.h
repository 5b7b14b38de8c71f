// One OpenAI response for a request with n > 1: each choice ran as its own engine request and made its
// own body; the client gets them as one body with choices 0..n-1 and one usage.
#pragma once

#include <string>
#include <vector>

namespace dsinfer::server {

// The bodies of choices 0..n-1 (Chat Completions or Completions shape, each with one choice) merged:
// the first body's envelope, every body's choice with its index, usage.prompt_tokens counted once and
// completion tokens summed (OpenAI's usage for n > 1). Throws on a body without choices.
std::string merge_choice_bodies(const std::vector<std::string>& bodies);

// best_of: bodies[kept[i]] becomes choice i; usage still sums the completion tokens of every body (all
// were generated, as OpenAI bills best_of).
std::string merge_choice_bodies(const std::vector<std::string>& bodies, const std::vector<size_t>& kept);

}  // namespace dsinfer::server
