#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "grammar/regex.h"
#include "grammar/schema_disjoint.h"
#include "grammar/utf8_ranges.h"

namespace dsinfer::grammar {

namespace {

using Json = nlohmann::ordered_json;

// Keywords that only describe (ignored), and the ones compiled below; anything else is refused.
const std::set<std::string> kAnnotations = {"title",   "description", "default",  "examples", "$schema",
                                            "$id",     "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "$defs",   "definitions"};
const std::set<std::string> kKeywords = {
    "type",      "properties", "required",  "additionalProperties", "items",   "prefixItems",
    "minItems",  "maxItems",   "enum",      "const",                "anyOf",   "oneOf",
    "allOf",     "$ref",       "pattern",   "format",               "minLength", "maxLength",
    "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum", "nullable"};

constexpr int64_t kMaxBound = int64_t{1} << 53;  // integers a double holds exactly
constexpr int64_t kMaxCount = 4096;              // minLength/maxLength/minItems/maxItems
constexpr int kMaxDepth = 200;

// Formats as regexes of our dialect, each a subset of what ajv-formats accepts (full mode): every
// string generated validates.
const char* format_regex(const std::string& f) {
  static const std::string kDate =
      "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))";
  static const std::string kTime = "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
  static const std::string kDateTime = kDate + "T" + kTime;
  static const std::string kOctet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  static const std::string kIpv4 = "(?:" + kOctet + "\\.){3}" + kOctet;
  if (f == "date") return kDate.c_str();
  if (f == "time") return kTime.c_str();
  if (f == "date-time") return kDateTime.c_str();
  if (f == "ipv4") return kIpv4.c_str();
  if (f == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (f == "email") {
    return "[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+"
           "[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
  }
  if (f == "uri") return "[a-z][a-z0-9+.-]*://[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?:/[A-Za-z0-9._~-]*)*";
  return nullptr;
}

std::string json_escape_char(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: {
      static const char* kHex = "0123456789abcdef";
      return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
    }
  }
}

// Characters of a JSON string body from a class: the ones JSON must escape become their escapes (and
// '<' too with escape_lt).
Expr json_string_class(std::vector<CodeRange> ranges, bool negated, bool escape_lt) {
  std::vector<CodeRange> set = normalize_code_ranges(std::move(ranges), negated);
  std::vector<CodeRange> escaped{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  if (escape_lt) escaped.push_back({'<', '<'});
  const std::vector<CodeRange> plain_all = normalize_code_ranges(escaped, true);
  std::vector<CodeRange> plain;
  std::vector<Expr> alts;
  for (const CodeRange& r : set) {
    for (const CodeRange& p : plain_all) {
      uint32_t lo = std::max(r.lo, p.lo), hi = std::min(r.hi, p.hi);
      if (lo <= hi) plain.push_back({lo, hi});
    }
    for (uint32_t c : {0x22u, 0x5Cu}) {
      if (r.lo <= c && c <= r.hi) alts.push_back(literal(json_escape_char(c)));
    }
    if (escape_lt && r.lo <= '<' && '<' <= r.hi) alts.push_back(literal("\\u003c"));
    for (uint32_t c = r.lo; c <= std::min<uint32_t>(r.hi, 0x1F); ++c) alts.push_back(literal(json_escape_char(c)));
  }
  if (!plain.empty()) alts.insert(alts.begin(), char_class(std::move(plain)));
  DSINFER_CHECK(!alts.empty(), "empty character class");
  return alt(std::move(alts));
}

std::string digits(int64_t v) { return std::to_string(v); }

// Decimal strings of equal length in [a, b], no sign.
Expr same_length_range(const std::string& a, const std::string& b) {
  if (a.empty()) return empty();
  if (a.find_first_not_of('0') == std::string::npos && b.find_first_not_of('9') == std::string::npos) {
    ByteSet d;
    d.add_range('0', '9');
    int32_t n = static_cast<int32_t>(a.size());
    return repeat(bytes(d), n, n);
  }
  if (a[0] == b[0]) return seq({byte(static_cast<uint8_t>(a[0])), same_length_range(a.substr(1), b.substr(1))});
  size_t n = a.size() - 1;
  std::vector<Expr> alts;
  alts.push_back(seq({byte(static_cast<uint8_t>(a[0])), same_length_range(a.substr(1), std::string(n, '9'))}));
  if (a[0] + 1 <= b[0] - 1) {
    ByteSet mid, d;
    mid.add_range(static_cast<uint8_t>(a[0] + 1), static_cast<uint8_t>(b[0] - 1));
    d.add_range('0', '9');
    alts.push_back(seq({bytes(mid), repeat(bytes(d), static_cast<int32_t>(n), static_cast<int32_t>(n))}));
  }
  alts.push_back(seq({byte(static_cast<uint8_t>(b[0])), same_length_range(std::string(n, '0'), b.substr(1))}));
  return alt(std::move(alts));
}

// Canonical decimal integers (no sign, no leading zero) in [lo, hi]; hi < 0 = unbounded.
Expr natural_range(int64_t lo, int64_t hi) {
  std::string a = digits(lo);
  std::vector<Expr> alts;
  size_t top = hi < 0 ? a.size() : digits(hi).size();
  for (size_t len = a.size(); len <= top; ++len) {
    std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
    std::string to = hi >= 0 && len == top ? digits(hi) : std::string(len, '9');
    alts.push_back(same_length_range(from, to));
  }
  if (hi < 0) {
    ByteSet nz, d;
    nz.add_range('1', '9');
    d.add_range('0', '9');
    alts.push_back(seq({bytes(nz), repeat(bytes(d), static_cast<int32_t>(a.size()), kUnbounded)}));
  }
  return alt(std::move(alts));
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, GrammarBuilder& b, std::string prefix, JsonSchemaOptions o)
      : root_(root), b_(b), prefix_(std::move(prefix)), o_(o) {}

  std::string run() { return rule_for(root_, ""); }

  // The root object's members one by one (json_object_members).
  JsonObjectMembers members() {
    if (!root_.is_object()) fail("", "tool parameters must be a JSON object schema");
    for (const auto& [key, value] : root_.items()) {
      if (kAnnotations.count(key) || key == "properties" || key == "required" || key == "additionalProperties") continue;
      if (key == "type" && value == "object") continue;
      if (key == "type") fail("", "tool parameters must be of type object");
      fail("", "'" + key + "' at the top level of tool parameters is not supported (only properties, required, "
               "additionalProperties, $defs)");
    }
    const Json empty_props = Json::object();
    const Json& props = root_.contains("properties") ? root_["properties"] : empty_props;
    if (!props.is_object()) fail("", "'properties' must be an object");
    std::set<std::string> required;
    if (root_.contains("required")) {
      const Json& r = root_["required"];
      if (!r.is_array()) fail("", "'required' must be an array");
      for (const Json& x : r) {
        if (!x.is_string()) fail("", "'required' must list strings");
        required.insert(x.get<std::string>());
      }
    }
    JsonObjectMembers out;
    // The same policy as compile_object: required keys that are not listed take the extra values' rule,
    // and listed properties leave no room for other keys.
    std::string extra;
    if (root_.contains("additionalProperties")) {
      const Json& a = root_["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) extra = rule_for(a, "/additionalProperties");
    } else if (props.empty()) {
      extra = base("value");
    }
    for (const auto& [key, value] : props.items()) {
      const std::string ptr = "/properties/" + escape_pointer_token(key);
      out.members.push_back({key, rule_for(value, ptr), required.count(key) != 0, is_plain_string(value),
                             raw_rule(value, ptr)});
    }
    for (const std::string& key : required) {
      if (props.contains(key)) continue;
      if (extra.empty()) fail("", "required property '" + key + "' is not allowed by the schema's properties");
      const Json& a = root_.contains("additionalProperties") ? root_["additionalProperties"] : Json(true);
      out.members.push_back({key, extra, true, is_plain_string(a), raw_rule(a, "/additionalProperties")});
    }
    if (out.members.empty()) out.extra = extra;
    return out;
  }

  // The shared rules of unconstrained JSON.
  std::string base(const std::string& what) {
    std::string name = prefix_ + what;
    if (!named_.insert(name).second) return name;
    ByteSet d, nz, hex;
    d.add_range('0', '9');
    nz.add_range('1', '9');
    hex.add_range('0', '9'), hex.add_range('a', 'f'), hex.add_range('A', 'F');
    Expr e;
    if (what == "value") {
      e = alt({ref(base("object")), ref(base("array")), ref(base("string")), ref(base("number")), literal("true"),
               literal("false"), literal("null")});
    } else if (what == "object") {
      e = object_map(ref(base("value")));
    } else if (what == "array") {
      e = seq({literal("["), ws(), opt(seq({ref(base("value")), star(seq({ws(), literal(","), ws(), ref(base("value"))}))})),
               ws(), literal("]")});
    } else if (what == "string") {
      e = seq({literal("\""), star(ref(base("char"))), literal("\"")});
    } else if (what == "char") {
      // Escapes \uXXXX name no surrogate, so each char is one code point (as minLength/maxLength count).
      ByteSet simple;
      for (char c : std::string("\"\\/bfnrt")) simple.add(static_cast<uint8_t>(c));
      ByteSet not_d, low8;
      for (int c : {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'e', 'f', 'A', 'B', 'C', 'E', 'F'}) {
        not_d.add(static_cast<uint8_t>(c));
      }
      low8.add_range('0', '7');
      ByteSet dd;
      dd.add('d'), dd.add('D');
      Expr u = seq({literal("u"), alt({seq({bytes(not_d), repeat(bytes(hex), 3, 3)}),
                                       seq({bytes(dd), bytes(low8), repeat(bytes(hex), 2, 2)})})});
      e = alt({json_string_class({}, true, o_.escape_lt), seq({literal("\\"), alt({bytes(simple), u})})});
    } else if (what == "integer") {
      e = seq({opt(literal("-")), alt({literal("0"), seq({bytes(nz), star(bytes(d))})})});
    } else if (what == "number") {
      e = seq({ref(base("integer")), opt(seq({literal("."), plus(bytes(d))})), ref(base("exponent"))});
    } else if (what == "exponent") {
      ByteSet ee, sign;
      ee.add('e'), ee.add('E'), sign.add('+'), sign.add('-');
      e = opt(seq({bytes(ee), opt(bytes(sign)), plus(bytes(d))}));
    } else {
      core::fail_internal("no base rule ", what);
    }
    b_.define(name, std::move(e));
    return name;
  }

 private:
  [[noreturn]] void fail(const std::string& ptr, const std::string& what) const {
    core::fail("json schema at #", ptr, ": ", what);
  }

  Expr ws() const {
    if (!o_.any_whitespace) return empty();
    ByteSet s;
    for (char c : std::string(" \t\n\r")) s.add(static_cast<uint8_t>(c));
    return repeat(bytes(s), 0, kMaxWhitespace);
  }

  // The strings `node` accepts, as raw text (unquoted, unescaped: a DSML string="true" value), as a rule
  // name; empty when it accepts no string or only ones a raw rule cannot say (then the value is JSON).
  // Plain {"type": "string"} is the caller's (is_plain_string). Raw text never holds '<' here.
  std::string raw_rule(const Json& node, const std::string& ptr, int depth = 0) {
    if (depth > 16 || !node.is_object() || is_plain_string(node)) return {};
    std::string name = prefix_ + "raw#" + ptr;
    if (raw_named_.count(name)) return raw_named_[name];
    raw_named_[name] = "";  // a $ref cycle finds no raw form
    std::vector<Expr> alts;
    const CodeRange lt{'<', '<'};
    auto raw_literal = [&](const Json& v) {
      if (v.is_string() && v.get<std::string>().find('<') == std::string::npos) alts.push_back(literal(v.get<std::string>()));
    };
    auto only = [&](std::initializer_list<const char*> keys) {
      for (const auto& [key, value] : node.items()) {
        if (kAnnotations.count(key)) continue;
        bool listed = false;
        for (const char* k : keys) listed = listed || key == k;
        if (!listed) return false;
      }
      return true;
    };
    if (node.contains("$ref") && node["$ref"].is_string() && only({"$ref"})) {
      const std::string target = node["$ref"].get<std::string>();
      if (!target.empty() && target[0] == '#') {
        try {
          const std::string r = raw_rule(root_.at(Json::json_pointer(target.substr(1))), target.substr(1), depth + 1);
          if (!r.empty()) alts.push_back(ref(r));
        } catch (const std::exception&) {  // the JSON rule reports the bad $ref
        }
      }
    } else if (node.contains("const") && only({"const", "type"})) {
      raw_literal(node["const"]);
    } else if (node.contains("enum") && node["enum"].is_array() && only({"enum", "type"})) {
      for (const Json& v : node["enum"]) raw_literal(v);
    } else if ((node.contains("anyOf") && only({"anyOf"})) || (node.contains("oneOf") && only({"oneOf"}))) {
      const char* k = node.contains("anyOf") ? "anyOf" : "oneOf";
      if (node[k].is_array()) {
        for (size_t i = 0; i < node[k].size(); ++i) {
          const Json& branch = node[k][i];
          const std::string bptr = ptr + "/" + k + "/" + std::to_string(i);
          if (is_plain_string(branch)) {
            alts.push_back(star(char_class({lt}, true)));
          } else if (std::string r = raw_rule(branch, bptr, depth + 1); !r.empty()) {
            alts.push_back(ref(r));
          }
        }
      }
    } else if (accepts_string_type(node) &&
               only({"type", "pattern", "format", "minLength", "maxLength", "nullable"})) {
      if (node.contains("pattern") || node.contains("format")) {
        std::string source;
        if (node.contains("pattern") && node["pattern"].is_string()) source = node["pattern"].get<std::string>();
        if (node.contains("format") && node["format"].is_string()) {
          const char* re = format_regex(node["format"].get<std::string>());
          source = re != nullptr && !node.contains("pattern") ? re : "";
        }
        if (!source.empty() && !(node.contains("minLength") || node.contains("maxLength"))) {
          try {
            alts.push_back(compile_regex(source, [](std::vector<CodeRange> ranges, bool negated) {
              // The class without '<'.
              std::vector<CodeRange> set = normalize_code_ranges(std::move(ranges), negated), cut;
              for (const CodeRange& r : set) {
                if (r.lo <= '<' && '<' <= r.hi) {
                  if (r.lo < '<') cut.push_back({r.lo, '<' - 1});
                  if ('<' < r.hi) cut.push_back({'<' + 1, r.hi});
                } else {
                  cut.push_back(r);
                }
              }
              if (cut.empty()) core::fail("no raw form");  // only '<': this pattern stays JSON
              return char_class(std::move(cut));
            }));
          } catch (const core::Error&) {  // the JSON rule reports it
          }
        }
      } else {
        const int64_t min = node.contains("minLength") && node["minLength"].is_number_unsigned() ? node["minLength"].get<int64_t>() : 0;
        const int64_t max = node.contains("maxLength") && node["maxLength"].is_number_unsigned() ? node["maxLength"].get<int64_t>() : -1;
        if (min <= kMaxCount && max <= kMaxCount && (max < 0 || min <= max)) {
          alts.push_back(repeat(char_class({lt}, true), static_cast<int32_t>(min),
                                max < 0 ? kUnbounded : static_cast<int32_t>(max)));
        }
      }
    }
    if (alts.empty()) return {};
    b_.define(name, alt(std::move(alts)));
    named_.insert(name);
    return raw_named_[name] = name;
  }

  static bool accepts_string_type(const Json& node) {
    if (!node.contains("type")) return false;
    const Json& t = node["type"];
    if (t == "string") return true;
    if (!t.is_array()) return false;
    for (const Json& x : t) {
      if (x == "string") return true;
    }
    return false;
  }

  // {"type": "string"} with nothing that constrains the text: any string, so also any raw text.
  static bool is_plain_string(const Json& node) {
    if (!node.is_object() || !node.contains("type") || node["type"] != "string") return false;
    for (const auto& [key, value] : node.items()) {
      if (key != "type" && !kAnnotations.count(key)) return false;
    }
    return true;
  }

  static std::string escape_pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
    return out;
  }

  std::string rule_for(const Json& node, const std::string& ptr) {
    std::string name = prefix_ + "#" + ptr;
    if (named_.insert(name).second) b_.define(name, compile(node, ptr));
    return name;
  }

  std::string ref_rule(const std::string& target, const std::string& ptr) {
    if (target.empty() || target[0] != '#') fail(ptr, "unsupported $ref '" + target + "' (only local '#/...' references)");
    std::string frag = target.substr(1);
    const Json* node = nullptr;
    try {
      node = &root_.at(Json::json_pointer(frag));
    } catch (const std::exception&) {
      fail(ptr, "unknown $ref '" + target + "'");
    }
    return rule_for(*node, frag);
  }

  int64_t count(const Json& node, const char* key, const std::string& ptr, int64_t dflt) {
    if (!node.contains(key)) return dflt;
    const Json& v = node[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      fail(ptr, std::string("'") + key + "' must be a non-negative integer");
    }
    double x = v.get<double>();
    if (x < 0) fail(ptr, std::string("'") + key + "' must be a non-negative integer");
    if (x > kMaxCount) fail(ptr, std::string("'") + key + "' above " + std::to_string(kMaxCount) + " is not supported");
    return static_cast<int64_t>(x);
  }

  Expr compile(const Json& node, const std::string& ptr) {
    if (++depth_ > kMaxDepth) fail(ptr, "schema nested too deeply");
    Expr e = compile_inner(node, ptr);
    --depth_;
    return e;
  }

  Expr compile_inner(const Json& node, const std::string& ptr) {
    if (node.is_boolean()) {
      if (node.get<bool>()) return ref(base("value"));
      fail(ptr, "the schema false accepts nothing");
    }
    if (!node.is_object()) fail(ptr, "a schema must be an object or a boolean");
    bool validation = false;
    for (const auto& [key, value] : node.items()) {
      if (kAnnotations.count(key)) continue;
      if (!kKeywords.count(key)) fail(ptr, "unsupported keyword '" + key + "'");
      validation = true;
    }
    if (!validation) return ref(base("value"));
    auto only = [&](const char* keyword) {
      for (const auto& [key, value] : node.items()) {
        if (key != keyword && !kAnnotations.count(key)) {
          fail(ptr, std::string("'") + keyword + "' beside '" + key + "' is not supported");
        }
      }
    };
    if (node.contains("allOf")) return compile_all_of(node, ptr);
    if (node.contains("$ref")) {
      only("$ref");
      if (!node["$ref"].is_string()) fail(ptr, "'$ref' must be a string");
      return ref(ref_rule(node["$ref"].get<std::string>(), ptr));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!node.contains(k)) continue;
      only(k);
      const Json& list = node[k];
      if (!list.is_array() || list.empty()) fail(ptr, std::string("'") + k + "' must be a non-empty array");
      std::vector<Expr> alts;
      // oneOf compiles as anyOf, which is the same set only when no instance can match two branches
      // (a grammar cannot exclude one that does): branches that may overlap are refused.
      if (std::string(k) == "oneOf") {
        for (size_t i = 0; i < list.size(); ++i) {
          for (size_t j = i + 1; j < list.size(); ++j) {
            if (schemas_may_overlap(root_, list[i], list[j])) {
              fail(ptr, "'oneOf' branches " + std::to_string(i) + " and " + std::to_string(j) +
                            " may both match one instance, which a grammar cannot exclude: give them distinct "
                            "types, distinct const/enum values, or a required property with distinct const/enum "
                            "values (or use anyOf)");
            }
          }
        }
      }
      for (size_t i = 0; i < list.size(); ++i) {
        alts.push_back(ref(rule_for(list[i], ptr + "/" + k + "/" + std::to_string(i))));
      }
      return alt(std::move(alts));
    }
    Expr core = compile_values(node, ptr);
    if (node.contains("nullable")) {
      if (!node["nullable"].is_boolean()) fail(ptr, "'nullable' must be a boolean");
      if (node["nullable"].get<bool>()) core = alt({std::move(core), literal("null")});
    }
    return core;
  }

  Expr compile_values(const Json& node, const std::string& ptr) {
    if (node.contains("const")) return literal(node["const"].dump());
    if (node.contains("enum")) {
      const Json& list = node["enum"];
      if (!list.is_array() || list.empty()) fail(ptr, "'enum' must be a non-empty array");
      std::vector<Expr> alts;
      for (const Json& v : list) alts.push_back(literal(v.dump()));
      return alt(std::move(alts));
    }
    std::vector<std::string> types;
    if (node.contains("type")) {
      const Json& t = node["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) fail(ptr, "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(ptr, "'type' must be a string or an array of strings");
      }
    } else {
      // No type: the keywords present say which types they constrain; generating only those is sound
      // (instances of other types would pass too, but are never produced).
      auto has_any = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (node.contains(k)) return true;
        }
        return false;
      };
      if (has_any({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has_any({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has_any({"pattern", "format", "minLength", "maxLength"})) types.push_back("string");
      if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
      if (types.empty()) return ref(base("value"));
    }
    std::vector<Expr> alts;
    for (const std::string& t : types) {
      if (t == "null") {
        alts.push_back(literal("null"));
      } else if (t == "boolean") {
        alts.push_back(alt({literal("true"), literal("false")}));
      } else if (t == "integer") {
        alts.push_back(compile_integer(node, ptr));
      } else if (t == "number") {
        alts.push_back(compile_number(node, ptr));
      } else if (t == "string") {
        alts.push_back(compile_string(node, ptr));
      } else if (t == "array") {
        alts.push_back(compile_array(node, ptr));
      } else if (t == "object") {
        alts.push_back(compile_object(node, ptr));
      } else {
        fail(ptr, "unknown type '" + t + "'");
      }
    }
    return alt(std::move(alts));
  }

  // Integer bounds [lo, hi] from minimum/maximum and their exclusive forms.
  void integer_bounds(const Json& node, const std::string& ptr, bool& has_lo, int64_t& lo, bool& has_hi, int64_t& hi) {
    auto num = [&](const char* key) {
      const Json& v = node[key];
      if (!v.is_number()) fail(ptr, std::string("'") + key + "' must be a number");
      double x = v.get<double>();
      if (std::fabs(x) > static_cast<double>(kMaxBound)) fail(ptr, std::string("'") + key + "' out of range");
      return x;
    };
    has_lo = has_hi = false;
    auto raise = [&](int64_t v) {
      lo = has_lo ? std::max(lo, v) : v;
      has_lo = true;
    };
    auto lower = [&](int64_t v) {
      hi = has_hi ? std::min(hi, v) : v;
      has_hi = true;
    };
    if (node.contains("minimum")) raise(static_cast<int64_t>(std::ceil(num("minimum"))));
    if (node.contains("exclusiveMinimum")) raise(static_cast<int64_t>(std::floor(num("exclusiveMinimum"))) + 1);
    if (node.contains("maximum")) lower(static_cast<int64_t>(std::floor(num("maximum"))));
    if (node.contains("exclusiveMaximum")) lower(static_cast<int64_t>(std::ceil(num("exclusiveMaximum"))) - 1);
    if (has_lo && has_hi && lo > hi) fail(ptr, "the integer bounds leave no value");
  }

  Expr compile_integer(const Json& node, const std::string& ptr) {
    bool has_lo, has_hi;
    int64_t lo = 0, hi = 0;
    integer_bounds(node, ptr, has_lo, lo, has_hi, hi);
    if (!has_lo && !has_hi) return ref(base("integer"));
    std::vector<Expr> alts;
    // Negative values: "-" and a magnitude in [max(1, -hi), -lo].
    if (!has_lo || lo < 0) {
      int64_t mag_lo = has_hi && hi < 0 ? -hi : 1;
      int64_t mag_hi = has_lo ? -lo : -1;
      alts.push_back(seq({literal("-"), natural_range(mag_lo, mag_hi)}));
    }
    if (!has_hi || hi >= 0) alts.push_back(natural_range(has_lo ? std::max<int64_t>(lo, 0) : 0, has_hi ? hi : -1));
    return alt(std::move(alts));
  }

  Expr compile_number(const Json& node, const std::string& ptr) {
    bool any = node.contains("minimum") || node.contains("maximum") || node.contains("exclusiveMinimum") ||
               node.contains("exclusiveMaximum");
    if (!any) return ref(base("number"));
    // Integer-valued inclusive bounds with lo >= 0 only: an integer part in [lo, hi-1] and any fraction,
    // or exactly hi (with zero fraction digits). No exponent, so the value is what the digits say.
    if (node.contains("exclusiveMinimum") || node.contains("exclusiveMaximum")) {
      fail(ptr, "exclusiveMinimum/exclusiveMaximum on numbers are not supported (use an integer type)");
    }
    auto bound = [&](const char* key, bool& has, int64_t& v) {
      has = node.contains(key);
      if (!has) return;
      const Json& x = node[key];
      if (!x.is_number() || std::floor(x.get<double>()) != x.get<double>() || x.get<double>() < 0 ||
          x.get<double>() > static_cast<double>(kMaxBound)) {
        fail(ptr, std::string("'") + key + "' on numbers is supported only as a non-negative integer");
      }
      v = static_cast<int64_t>(x.get<double>());
    };
    bool has_lo, has_hi;
    int64_t lo = 0, hi = 0;
    bound("minimum", has_lo, lo);
    bound("maximum", has_hi, hi);
    if (!has_lo) fail(ptr, "'maximum' on numbers is supported only with a non-negative 'minimum'");
    if (has_hi && hi < lo) fail(ptr, "the number bounds leave no value");
    ByteSet d;
    d.add_range('0', '9');
    Expr fraction = opt(seq({literal("."), plus(bytes(d))}));
    std::vector<Expr> alts;
    if (!has_hi || hi > lo) alts.push_back(seq({natural_range(lo, has_hi ? hi - 1 : -1), fraction}));
    if (has_hi) alts.push_back(seq({literal(digits(hi)), opt(seq({literal("."), plus(literal("0"))}))}));
    return alt(std::move(alts));
  }

  Expr compile_string(const Json& node, const std::string& ptr) {
    bool lengths = node.contains("minLength") || node.contains("maxLength");
    auto quoted = [](Expr body) { return seq({literal("\""), std::move(body), literal("\"")}); };
    if (node.contains("pattern") || node.contains("format")) {
      if (node.contains("pattern") && node.contains("format")) fail(ptr, "'pattern' beside 'format' is not supported");
      if (lengths) fail(ptr, "'minLength'/'maxLength' beside 'pattern' or 'format' are not supported");
      std::string source;
      if (node.contains("pattern")) {
        if (!node["pattern"].is_string()) fail(ptr, "'pattern' must be a string");
        source = node["pattern"].get<std::string>();
      } else {
        if (!node["format"].is_string()) fail(ptr, "'format' must be a string");
        std::string f = node["format"].get<std::string>();
        const char* re = format_regex(f);
        if (re == nullptr) fail(ptr, "unsupported format '" + f + "'");
        source = re;
      }
      try {
        const bool escape_lt = o_.escape_lt;
        return quoted(compile_regex(source, [escape_lt](std::vector<CodeRange> ranges, bool negated) {
          return json_string_class(std::move(ranges), negated, escape_lt);
        }));
      } catch (const core::Error& e) {
        fail(ptr, std::string("pattern: ") + e.what());
      }
    }
    int64_t min = count(node, "minLength", ptr, 0);
    int64_t max = count(node, "maxLength", ptr, -1);
    if (max >= 0 && max < min) fail(ptr, "'maxLength' below 'minLength'");
    if (min == 0 && max < 0) return ref(base("string"));
    return quoted(repeat(ref(base("char")), static_cast<int32_t>(min), max < 0 ? kUnbounded : static_cast<int32_t>(max)));
  }

  Expr compile_array(const Json& node, const std::string& ptr) {
    int64_t min = count(node, "minItems", ptr, 0);
    int64_t max = count(node, "maxItems", ptr, -1);
    if (max >= 0 && max < min) fail(ptr, "'maxItems' below 'minItems'");
    std::vector<std::string> prefix;
    if (node.contains("prefixItems")) {
      const Json& p = node["prefixItems"];
      if (!p.is_array()) fail(ptr, "'prefixItems' must be an array");
      for (size_t i = 0; i < p.size(); ++i) prefix.push_back(rule_for(p[i], ptr + "/prefixItems/" + std::to_string(i)));
    }
    bool more = true;
    std::string rest;
    if (node.contains("items")) {
      const Json& it = node["items"];
      if (it.is_array()) fail(ptr, "'items' as an array is not supported (use 'prefixItems')");
      if (it.is_boolean() && !it.get<bool>()) {
        more = false;
      } else {
        rest = rule_for(it, ptr + "/items");
      }
    } else {
      rest = base("value");
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!more) {
      if (min > k) fail(ptr, "'minItems' above the number of 'prefixItems' with 'items' false");
      max = max < 0 ? k : std::min(max, k);
    }
    Expr comma = seq({ws(), literal(","), ws()});
    // elems(i): the elements from position i on, i already written.
    std::function<Expr(int64_t)> elems = [&](int64_t i) -> Expr {
      if (max >= 0 && i >= max) return empty();
      Expr sep = i == 0 ? empty() : comma;
      if (i < k) {
        Expr body = seq({sep, ref(prefix[i]), elems(i + 1)});
        return i >= min ? opt(std::move(body)) : body;
      }
      int64_t lo = std::max<int64_t>(0, min - i);
      int32_t hi = max < 0 ? kUnbounded : static_cast<int32_t>(max - i);
      if (i > 0) return repeat(seq({comma, ref(rest)}), static_cast<int32_t>(lo), hi);
      Expr tail = repeat(seq({comma, ref(rest)}), static_cast<int32_t>(std::max<int64_t>(0, lo - 1)),
                         hi == kUnbounded ? kUnbounded : hi - 1);
      Expr body = seq({ref(rest), std::move(tail)});
      return lo == 0 ? opt(std::move(body)) : body;
    };
    return seq({literal("["), ws(), elems(0), ws(), literal("]")});
  }

  Expr object_map(Expr value) {
    Expr kv = seq({ref(base("string")), ws(), literal(":"), ws(), value});
    return seq({literal("{"), ws(), opt(seq({kv, star(seq({ws(), literal(","), ws(), kv}))})), ws(), literal("}")});
  }

  Expr compile_object(const Json& node, const std::string& ptr) {
    const Json empty_props = Json::object();
    const Json& props = node.contains("properties") ? node["properties"] : empty_props;
    if (!props.is_object()) fail(ptr, "'properties' must be an object");
    std::set<std::string> required;
    if (node.contains("required")) {
      const Json& r = node["required"];
      if (!r.is_array()) fail(ptr, "'required' must be an array");
      for (const Json& x : r) {
        if (!x.is_string()) fail(ptr, "'required' must list strings");
        required.insert(x.get<std::string>());
      }
    }
    // Extra keys: absent additionalProperties means none when properties are listed (the subset a strict
    // client expects), any when nothing is listed. With listed properties no extra key is ever written:
    // a grammar cannot keep an extra key from repeating a listed one (README).
    std::string extra;  // rule of extra values, empty = none
    if (node.contains("additionalProperties")) {
      const Json& a = node["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) extra = rule_for(a, ptr + "/additionalProperties");
    } else if (props.empty()) {
      extra = base("value");
    }
    struct Prop {
      std::string key;
      std::string rule;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [key, value] : props.items()) {
      list.push_back({key, rule_for(value, ptr + "/properties/" + escape_pointer_token(key)), required.count(key) != 0});
    }
    for (const std::string& key : required) {
      if (props.contains(key)) continue;
      if (extra.empty()) fail(ptr, "required property '" + key + "' is not allowed by the schema's properties");
      list.push_back({key, extra, true});
    }
    if (list.empty()) {
      if (extra.empty()) return seq({literal("{"), ws(), literal("}")});
      return object_map(ref(extra));
    }
    Expr comma = seq({ws(), literal(","), ws()});
    // props_from(i, first): the listed properties from i on, in schema order; optional ones may be left out.
    std::vector<std::array<std::string, 2>> names(list.size() + 1);
    std::function<Expr(size_t, bool)> props_from = [&](size_t i, bool first) -> Expr {
      if (i == list.size()) return empty();
      std::string& name = names[i][first];
      if (!name.empty()) return ref(name);
      name = prefix_ + "#" + ptr + "/properties@" + std::to_string(i) + (first ? "f" : "n");
      Expr kv = seq({literal(Json(list[i].key).dump()), ws(), literal(":"), ws(), ref(list[i].rule)});
      Expr take = seq({first ? empty() : comma, std::move(kv), props_from(i + 1, false)});
      Expr e = list[i].required ? std::move(take) : alt({std::move(take), props_from(i + 1, first)});
      named_.insert(name);
      b_.define(name, std::move(e));
      return ref(name);
    };
    return seq({literal("{"), ws(), props_from(0, true), ws(), literal("}")});
  }

  // allOf: the branches' keywords merged into one schema when they do not collide (properties and
  // required are unioned); anything else is refused.
  Expr compile_all_of(const Json& node, const std::string& ptr) {
    const Json& list = node["allOf"];
    if (!list.is_array() || list.empty()) fail(ptr, "'allOf' must be a non-empty array");
    Json merged = node;
    merged.erase("allOf");
    for (size_t i = 0; i < list.size(); ++i) {
      const Json* part = &list[i];
      if (part->is_object() && part->contains("$ref") && part->size() == 1) {
        std::string target = (*part)["$ref"].is_string() ? (*part)["$ref"].get<std::string>() : "";
        if (target.empty() || target[0] != '#') fail(ptr, "unsupported $ref '" + target + "' in allOf");
        try {
          part = &root_.at(Json::json_pointer(target.substr(1)));
        } catch (const std::exception&) {
          fail(ptr, "unknown $ref '" + target + "'");
        }
      }
      if (!part->is_object()) fail(ptr, "allOf/" + std::to_string(i) + ": only object schemas can be merged");
      for (const auto& [key, value] : part->items()) {
        if (key == "allOf" || key == "$ref") fail(ptr, "allOf/" + std::to_string(i) + ": '" + key + "' inside allOf is not supported");
        if (kAnnotations.count(key)) continue;
        if (!merged.contains(key)) {
          merged[key] = value;
        } else if (key == "properties") {
          for (const auto& [p, s] : value.items()) {
            if (merged[key].contains(p) && merged[key][p] != s) fail(ptr, "allOf: property '" + p + "' defined twice differently");
            merged[key][p] = s;
          }
        } else if (key == "required") {
          for (const Json& r : value) {
            if (std::find(merged[key].begin(), merged[key].end(), r) == merged[key].end()) merged[key].push_back(r);
          }
        } else if (merged[key] != value) {
          fail(ptr, "allOf: cannot merge differing '" + key + "'");
        }
      }
    }
    return compile(merged, ptr);
  }

  const Json& root_;
  GrammarBuilder& b_;
  std::string prefix_;
  JsonSchemaOptions o_;
  std::set<std::string> named_;
  std::map<std::string, std::string> raw_named_;
  int depth_ = 0;
};

}  // namespace

std::string add_json_schema_rules(const Json& schema, GrammarBuilder& builder, const std::string& prefix,
                                  const JsonSchemaOptions& options) {
  return SchemaCompiler(schema, builder, prefix, options).run();
}

JsonObjectMembers json_object_members(const Json& schema, GrammarBuilder& builder, const std::string& prefix,
                                      const JsonSchemaOptions& options) {
  return SchemaCompiler(schema, builder, prefix, options).members();
}

Grammar json_schema_grammar(const Json& schema, const JsonSchemaOptions& options) {
  GrammarBuilder b;
  std::string top = add_json_schema_rules(schema, b, "", options);
  b.define("root", ref(top));
  try {
    return b.build("root");
  } catch (const core::Error& e) {
    core::fail("json schema: ", e.what());
  }
}

Grammar json_object_grammar(const JsonSchemaOptions& options) {
  return json_schema_grammar(Json{{"type", "object"}}, options);
}

Grammar json_value_grammar(const JsonSchemaOptions& options) { return json_schema_grammar(Json::object(), options); }

}  // namespace dsinfer::grammar
