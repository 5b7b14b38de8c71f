#include "server/choice_merge.h"

#include "core/error.h"
#include "recipe/json_text.h"

namespace dsinfer::server {

using Json = recipe::Json;

std::string merge_choice_bodies(const std::vector<std::string>& bodies) {
  std::vector<size_t> all(bodies.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return merge_choice_bodies(bodies, all);
}

std::string merge_choice_bodies(const std::vector<std::string>& bodies, const std::vector<size_t>& kept) {
  DSINFER_CHECK_INTERNAL(!bodies.empty() && !kept.empty(), "merge_choice_bodies: no bodies");
  Json merged = recipe::parse_json(bodies[kept.front()]);
  std::vector<Json> parsed;
  for (const auto& b : bodies) parsed.push_back(recipe::parse_json(b));
  Json choices = Json::array();
  for (size_t i = 0; i < kept.size(); ++i) {
    DSINFER_CHECK_INTERNAL(kept[i] < parsed.size(), "merge_choice_bodies: no such body");
    const Json& one = parsed[kept[i]];
    auto c = one.find("choices");
    DSINFER_CHECK_INTERNAL(c != one.end() && c->is_array() && !c->empty(), "merge_choice_bodies: a body has no choice");
    for (Json choice : *c) {
      choice["index"] = static_cast<int64_t>(i);
      choices.push_back(std::move(choice));
    }
  }
  int64_t completion = 0, reasoning = 0;
  bool have_reasoning = false;
  for (const Json& one : parsed) {
    if (auto u = one.find("usage"); u != one.end() && u->is_object()) {
      completion += u->value("completion_tokens", int64_t{0});
      if (auto d = u->find("completion_tokens_details"); d != u->end() && d->is_object() && d->contains("reasoning_tokens")) {
        reasoning += d->value("reasoning_tokens", int64_t{0});
        have_reasoning = true;
      }
    }
  }
  merged["choices"] = std::move(choices);
  if (auto u = merged.find("usage"); u != merged.end() && u->is_object()) {
    (*u)["completion_tokens"] = completion;
    (*u)["total_tokens"] = u->value("prompt_tokens", int64_t{0}) + completion;
    if (have_reasoning) (*u)["completion_tokens_details"]["reasoning_tokens"] = reasoning;
  }
  return recipe::to_compact_json(merged);
}

}  // namespace dsinfer::server
