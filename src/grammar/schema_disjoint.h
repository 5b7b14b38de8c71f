// oneOf as far as a grammar can: a grammar cannot exclude an instance that matches two branches, so
// oneOf is compiled (as anyOf) only when its branches are provably disjoint, which makes anyOf and oneOf
// the same set. The proof is conservative: branches whose possible JSON types do not meet, const/enum
// literals that differ, or objects that require one same property with different const/enum values
// (a discriminated union). Anything else counts as possibly overlapping.
#pragma once

#include <nlohmann/json.hpp>

namespace dsinfer::grammar {

// `root` resolves local $refs ("#/$defs/x"); an unresolvable one makes the answer true.
bool schemas_may_overlap(const nlohmann::ordered_json& root, const nlohmann::ordered_json& a,
                         const nlohmann::ordered_json& b);

}  // namespace dsinfer::grammar
