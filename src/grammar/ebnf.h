// GBNF (llama.cpp's EBNF dialect) to the grammar IR:
//   rule    ::= name "::=" alternatives         (rules may span lines; a new "name ::=" starts the next)
//   item    ::= "literal" | [class] | [^class] | . | name | ( alternatives )
//   postfix ::= * | + | ? | {m} | {m,} | {m,n}
// Literals and classes take \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH; `.` is any character; # starts
// a comment. Characters are code points, matched as their UTF-8 bytes. The start rule is "root".
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

// Parses the rules into `builder`. Throws core::Error "ebnf line L column C: ..." on a syntax error.
void parse_ebnf(std::string_view text, GrammarBuilder& builder);

// parse_ebnf + build("root").
Grammar compile_ebnf(std::string_view text, const std::string& start = "root");

}  // namespace dsinfer::grammar
