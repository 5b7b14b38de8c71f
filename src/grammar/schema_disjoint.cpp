#include "grammar/schema_disjoint.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

// JSON kinds as bits; integers are numbers (1 is both), so "integer" maps to kIsNumber.
enum JsonKind : unsigned {
  kIsNull = 1, kIsBoolean = 2, kIsNumber = 4, kIsString = 8, kIsArray = 16, kIsObject = 32, kIsAny = 63
};

unsigned kind_of_value(const Json& v) {
  if (v.is_null()) return kIsNull;
  if (v.is_boolean()) return kIsBoolean;
  if (v.is_number()) return kIsNumber;
  if (v.is_string()) return kIsString;
  if (v.is_array()) return kIsArray;
  return kIsObject;
}

unsigned kind_of_type(const std::string& t) {
  if (t == "null") return kIsNull;
  if (t == "boolean") return kIsBoolean;
  if (t == "integer" || t == "number") return kIsNumber;
  if (t == "string") return kIsString;
  if (t == "array") return kIsArray;
  if (t == "object") return kIsObject;
  return kIsAny;
}

// What an instance of a schema can be, as far as the proof needs it.
struct Shape {
  unsigned kinds = kIsAny;
  std::optional<std::vector<Json>> literals;    // const/enum: exactly these values
  std::map<std::string, std::vector<Json>> tags;  // objects: required properties limited to these values
};

class Shaper {
 public:
  explicit Shaper(const Json& root) : root_(root) {}

  Shape of(const Json& node, int depth = 0) {
    Shape s;
    if (depth > 32 || !node.is_object()) return s;  // true, or too deep to look: anything
    if (node.contains("$ref")) {
      const Json* target = resolve(node["$ref"]);
      return target != nullptr ? of(*target, depth + 1) : s;
    }
    if (node.contains("const")) {
      s.literals = std::vector<Json>{node["const"]};
    } else if (node.contains("enum") && node["enum"].is_array()) {
      s.literals = std::vector<Json>(node["enum"].begin(), node["enum"].end());
    }
    if (s.literals) {
      s.kinds = 0;
      for (const Json& v : *s.literals) s.kinds |= kind_of_value(v);
      return s;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!node.contains(k) || !node[k].is_array()) continue;
      s.kinds = 0;
      for (const Json& branch : node[k]) s.kinds |= of(branch, depth + 1).kinds;
      return s;
    }
    if (node.contains("allOf") && node["allOf"].is_array()) {
      for (const Json& branch : node["allOf"]) {
        Shape b = of(branch, depth + 1);
        s.kinds &= b.kinds;
        for (auto& [name, values] : b.tags) s.tags.emplace(name, std::move(values));
      }
    }
    s.kinds &= declared_kinds(node);
    if (node.contains("nullable") && node["nullable"] == true) s.kinds |= kIsNull;
    if (node.contains("properties") && node["properties"].is_object() && node.contains("required") &&
        node["required"].is_array()) {
      for (const Json& name : node["required"]) {
        if (!name.is_string() || !node["properties"].contains(name.get<std::string>())) continue;
        Shape p = of(node["properties"][name.get<std::string>()], depth + 1);
        if (p.literals) s.tags[name.get<std::string>()] = *p.literals;
      }
    }
    return s;
  }

 private:
  const Json* resolve(const Json& ref) const {
    if (!ref.is_string()) return nullptr;
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') return nullptr;
    try {
      return &root_.at(Json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  // The kinds `type` allows, or without it the kinds its keywords imply (what the compiler generates).
  static unsigned declared_kinds(const Json& node) {
    if (node.contains("type")) {
      const Json& t = node["type"];
      if (t.is_string()) return kind_of_type(t.get<std::string>());
      unsigned k = 0;
      if (t.is_array()) {
        for (const Json& x : t) k |= x.is_string() ? kind_of_type(x.get<std::string>()) : kIsAny;
      }
      return k == 0 ? kIsAny : k;
    }
    unsigned k = 0;
    auto has = [&](std::initializer_list<const char*> keys) {
      for (const char* key : keys) {
        if (node.contains(key)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties"})) k |= kIsObject;
    if (has({"items", "prefixItems", "minItems", "maxItems"})) k |= kIsArray;
    if (has({"pattern", "format", "minLength", "maxLength"})) k |= kIsString;
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) k |= kIsNumber;
    return k == 0 ? kIsAny : k;
  }

  const Json& root_;
};

bool lists_meet(const std::vector<Json>& a, const std::vector<Json>& b) {
  for (const Json& x : a) {
    for (const Json& y : b) {
      if (x == y) return true;  // nlohmann compares numbers by value: 1 == 1.0, as JSON Schema does
    }
  }
  return false;
}

}  // namespace

bool schemas_may_overlap(const Json& root, const Json& a, const Json& b) {
  Shaper shaper(root);
  const Shape x = shaper.of(a), y = shaper.of(b);
  if ((x.kinds & y.kinds) == 0) return false;
  if (x.literals && y.literals) return lists_meet(*x.literals, *y.literals);
  if (x.literals || y.literals) return true;  // a literal of a shared kind may match the other side
  if ((x.kinds & y.kinds) == kIsObject) {
    for (const auto& [name, values] : x.tags) {
      auto it = y.tags.find(name);
      if (it != y.tags.end() && !lists_meet(values, it->second)) return false;
    }
  }
  return true;
}

}  // namespace dsinfer::grammar
