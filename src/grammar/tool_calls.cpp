#include "grammar/tool_calls.h"

#include <array>
#include <functional>
#include <set>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/utf8_ranges.h"
#include "tokenizer/utf8.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The code points of valid UTF-8 (the markers below).
std::u32string utf32(std::string_view text) {
  std::u32string out;
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    out += tokenizer::utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + i, len);
  }
  return out;
}

// After '<': a '<'-free continuation that spells none of `forbidden` (all sharing the first `depth`
// code points) from its start.
Expr continuation(const std::vector<std::u32string>& forbidden, size_t depth) {
  std::vector<Expr> alts{empty()};
  std::set<char32_t> next;
  for (const auto& f : forbidden) next.insert(f[depth]);
  std::vector<CodeRange> stop{{'<', '<'}};
  for (char32_t c : next) stop.push_back({c, c});
  alts.push_back(seq({char_class(stop, true), star(char_class({{'<', '<'}}, true))}));
  for (char32_t c : next) {
    std::vector<std::u32string> rest;
    bool complete = false;
    for (const auto& f : forbidden) {
      if (f[depth] != c) continue;
      if (f.size() == depth + 1) complete = true;
      rest.push_back(f);
    }
    if (complete) continue;  // the whole marker: never
    alts.push_back(seq({literal(utf8_encode(c)), continuation(rest, depth + 1)}));
  }
  return alt(std::move(alts));
}

// A name the DSML attribute and the assembled JSON both carry verbatim: the parser copies it into
// the arguments' JSON text unescaped and ends it at '"'.
bool verbatim_name(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c == '"' || c == '\\' || c == '<' || c == 0x7F) return false;
  }
  return true;
}

class ToolGrammar {
 public:
  explicit ToolGrammar(const ToolCallGrammarOptions& o) : o_(o), dsml_(kDsmlMarker) {
    // JSON values in parameters accept the template's Python-style ", " and ": " spacing.
    json_.any_whitespace = true;
    json_.escape_lt = true;
    b_.define("raw", text_without({utf32(std::string("/") + kDsmlMarker)}));
  }

  Grammar build(const std::vector<ToolSpec>& tools) {
    if (tools.empty()) core::fail("strict tools: no tools");
    std::vector<Expr> calls;
    for (size_t i = 0; i < tools.size(); ++i) calls.push_back(ref(call_rule(tools[i], i)));
    b_.define("call", alt(std::move(calls)));
    Expr more = o_.single_call ? empty() : star(seq({literal("\n"), ref("call")}));
    Expr close = literal("\n</" + dsml_ + o_.tags.block + ">");
    b_.define("calls", seq({ref("call"), std::move(more), std::move(close)}));
    Expr answer;
    if (o_.inside_block) {
      answer = ref("calls");
    } else if (o_.require_call) {
      // The template separates content from the block by "\n\n": with no content, what the model saw.
      answer = seq({opt(literal("\n\n")), literal("<" + dsml_ + o_.tags.block + ">\n"), ref("calls")});
    } else {
      // Plain text, or text then the block (the parser starts the block at its marker, newlines before
      // it skipped).
      answer = seq({text_without({utf32(kDsmlMarker)}),
                    opt(seq({literal("<" + dsml_ + o_.tags.block + ">\n"), ref("calls")}))});
    }
    if (o_.thinking) {
      answer = seq({text_without({utf32(kDsmlMarker), utf32(std::string(kThinkEndText).substr(1))}),
                    literal(kThinkEndText), std::move(answer)});
    }
    b_.define("root", std::move(answer));
    return b_.build("root");
  }

 private:
  // <｜DSML｜ parameter name="key" string="...">value</｜DSML｜ parameter>
  // raw_rule: the rule of the value as raw text (string="true"), empty for none.
  Expr param(Expr name, const std::string& value_rule, const std::string& raw_rule) {
    const std::string open = "<" + dsml_ + o_.tags.parameter + " name=\"";
    const std::string close = "</" + dsml_ + o_.tags.parameter + ">";
    std::vector<Expr> values{seq({literal("false\">"), ref(value_rule)})};
    if (!raw_rule.empty()) values.push_back(seq({literal("true\">"), ref(raw_rule)}));
    return seq({literal(open), std::move(name), literal("\" string=\""), alt(std::move(values)), literal(close)});
  }

  std::string call_rule(const ToolSpec& tool, size_t index) {
    if (!verbatim_name(tool.name)) core::fail("strict tools: tool name '", tool.name, "' cannot be written in DSML");
    const std::string prefix = "t" + std::to_string(index);
    const std::string head = "<" + dsml_ + o_.tags.invoke + " name=\"" + tool.name + "\">\n";
    const std::string tail = "\n</" + dsml_ + o_.tags.invoke + ">";
    Expr params;
    if (!tool.strict) {
      params = free_params(base_value(), "raw");
    } else {
      JsonObjectMembers m;
      try {
        m = json_object_members(tool.parameters, b_, prefix, json_);
      } catch (const core::Error& e) {
        core::fail("strict tool '", tool.name, "': ", e.what());
      }
      if (!m.members.empty()) {
        params = members(m, prefix, tool.name);
      } else if (!m.extra.empty()) {
        params = free_params(m.extra, tool.parameters.contains("additionalProperties") ? "" : "raw");
      }
    }
    const std::string name = prefix + "call";
    b_.define(name, seq({literal(head), std::move(params), literal(tail)}));
    return name;
  }

  std::string base_value() {
    if (value_.empty()) value_ = add_json_schema_rules(Json::object(), b_, "any", json_);
    return value_;
  }

  // Any number of parameters with names of [A-Za-z0-9_-] and values of `value_rule`.
  Expr free_params(const std::string& value_rule, const std::string& raw_rule) {
    ByteSet name_bytes;
    name_bytes.add_range('a', 'z'), name_bytes.add_range('A', 'Z'), name_bytes.add_range('0', '9');
    name_bytes.add('_'), name_bytes.add('-');
    Expr one = param(plus(bytes(name_bytes)), value_rule, raw_rule);
    return opt(seq({one, star(seq({literal("\n"), one}))}));
  }

  // The listed members in schema order, "\n" between them; optional ones may be left out.
  Expr members(const JsonObjectMembers& m, const std::string& prefix, const std::string& tool) {
    for (const auto& member : m.members) {
      if (!verbatim_name(member.key)) {
        core::fail("strict tool '", tool, "': parameter name '", member.key, "' cannot be written in DSML");
      }
    }
    // from(i, first): members i.. (first: nothing written yet, so no separator).
    std::vector<std::array<std::string, 2>> names(m.members.size());
    std::function<Expr(size_t, bool)> from = [&](size_t i, bool first) -> Expr {
      if (i == m.members.size()) return empty();
      std::string& name = names[i][first];
      if (!name.empty()) return ref(name);
      name = prefix + "@" + std::to_string(i) + (first ? "f" : "n");
      const auto& member = m.members[i];
      Expr take = seq({first ? empty() : literal("\n"), param(literal(member.key), member.rule, member.plain_string ? "raw" : member.raw_rule),
                       from(i + 1, false)});
      Expr e = member.required ? std::move(take) : alt({std::move(take), from(i + 1, first)});
      b_.define(name, std::move(e));
      return ref(name);
    };
    return from(0, true);
  }

  ToolCallGrammarOptions o_;
  std::string dsml_;
  JsonSchemaOptions json_;
  GrammarBuilder b_;
  std::string value_;
};

}  // namespace

Expr text_without(const std::vector<std::u32string>& forbidden) {
  for (const auto& f : forbidden) {
    DSINFER_CHECK_INTERNAL(!f.empty() && f.find(U'<') == std::u32string::npos, "text_without: bad marker");
  }
  Expr plain = star(char_class({{'<', '<'}}, true));
  return seq({plain, star(seq({literal("<"), continuation(forbidden, 0)}))});
}

Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, const ToolCallGrammarOptions& options) {
  std::vector<ToolSpec> settled = tools;
  for (ToolSpec& t : settled) {
    if (!t.strict || !t.strict_if_possible) continue;
    try {
      ToolGrammar(options).build({t});
    } catch (const core::Error&) {
      t.strict = false;  // its parameters cannot be enforced: the call's frame only
    }
  }
  return ToolGrammar(options).build(settled);
}

}  // namespace dsinfer::grammar
