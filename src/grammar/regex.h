// Regular expressions (the subset JSON Schema `pattern` and the `regex` request field need) to the
// grammar IR. The whole output must match: anchors are implicit, and a leading ^ / trailing $ is accepted
// and ignored. Supported: literals, . (any character but \n), classes [a-z] [^...], \d \w \s \D \W \S,
// escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...}, groups ( ) (?: ) (?<name> ), alternation |, and the
// quantifiers * + ? {m} {m,} {m,n} (a lazy ? after them changes nothing for a full match). Everything else
// (backreferences, lookaround, \b, possessive quantifiers) is an error naming it.
#pragma once

#include <functional>
#include <string_view>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

// How one character class becomes bytes: char_class() by default; JSON strings escape some characters.
using ClassEmitter = std::function<Expr(std::vector<CodeRange> ranges, bool negated)>;

// Throws core::Error "regex line 1 column C: ..." (the pattern's own columns).
Expr compile_regex(std::string_view pattern, const ClassEmitter& emit = {});

// A grammar whose start rule "root" is the regex.
Grammar regex_grammar(std::string_view pattern);

}  // namespace dsinfer::grammar
