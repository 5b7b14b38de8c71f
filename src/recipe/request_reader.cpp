#include "recipe/request_reader.h"

#include <cmath>
#include <limits>
#include <vector>

#include "recipe/conversion_error.h"

namespace dsinfer::recipe::detail {
namespace {
std::string prefixed(const std::string& path, const std::string& message) {
  return path.empty() ? message : path + ": " + message;
}
}  // namespace

std::string at_index(const std::string& path, size_t index) { return core::str_cat(path, "[", index, "]"); }

std::string at_key(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : core::str_cat(path, ".", key);
}

std::string describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return core::str_cat("boolean `", value.get<bool>() ? "true" : "false", "`");
    case Json::value_t::number_integer: return core::str_cat("integer `", value.get<int64_t>(), "`");
    case Json::value_t::number_unsigned: return core::str_cat("integer `", value.get<uint64_t>(), "`");
    case Json::value_t::number_float:
      return core::str_cat("floating point `", format_double_compact(value.get<double>()), "`");
    case Json::value_t::string: return core::str_cat("string ", json_quote(value.get_ref<const std::string&>()));
    case Json::value_t::array: return "a sequence";
    case Json::value_t::object: return "a map";
    default: return "a value";
  }
}

void invalid_type(const std::string& path, const Json& value, std::string_view expected) {
  bad_request(prefixed(path, core::str_cat("invalid type: ", describe(value), ", expected ", expected)));
}

const Json* field(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& require_field(const Json& object, std::string_view key, const std::string& path) {
  const Json* value = field(object, key);
  if (value == nullptr) bad_request(prefixed(path, core::str_cat("missing field `", key, "`")));
  return *value;
}

const Json& expect_object(const Json& value, const std::string& path, std::string_view what) {
  if (!value.is_object()) invalid_type(path, value, what);
  return value;
}

const Json& expect_array(const Json& value, const std::string& path) {
  if (!value.is_array()) invalid_type(path, value, "a sequence");
  return value;
}

std::string expect_string(const Json& value, const std::string& path) {
  if (!value.is_string()) invalid_type(path, value, "a string");
  return value.get<std::string>();
}

std::string require_string(const Json& object, std::string_view key, const std::string& path) {
  return expect_string(require_field(object, key, path), at_key(path, key));
}

std::optional<std::string> opt_string(const Json& object, std::string_view key, const std::string& path) {
  const Json* value = field(object, key);
  if (value == nullptr) return std::nullopt;
  return expect_string(*value, at_key(path, key));
}

std::optional<bool> opt_bool(const Json& object, std::string_view key, const std::string& path) {
  const Json* value = field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) invalid_type(at_key(path, key), *value, "a boolean");
  return value->get<bool>();
}

namespace {
std::optional<uint64_t> opt_unsigned(const Json& object, std::string_view key, const std::string& path,
                                     uint64_t max, const char* type_name) {
  const Json* value = field(object, key);
  if (value == nullptr) return std::nullopt;
  const std::string where = at_key(path, key);
  if (value->is_number_unsigned() || (value->is_number_integer() && value->get<int64_t>() >= 0)) {
    const uint64_t v = value->get<uint64_t>();
    if (v > max) bad_request(prefixed(where, core::str_cat("invalid value: integer `", v, "`, expected ", type_name)));
    return v;
  }
  if (value->is_number_integer())
    bad_request(prefixed(where, core::str_cat("invalid value: integer `", value->get<int64_t>(), "`, expected ",
                                              type_name)));
  invalid_type(where, *value, type_name);
}
}  // namespace

std::optional<uint64_t> opt_u64(const Json& object, std::string_view key, const std::string& path) {
  return opt_unsigned(object, key, path, std::numeric_limits<uint64_t>::max(), "u64");
}

std::optional<uint32_t> opt_u32(const Json& object, std::string_view key, const std::string& path) {
  auto v = opt_unsigned(object, key, path, std::numeric_limits<uint32_t>::max(), "u32");
  if (!v) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

std::optional<uint8_t> opt_u8(const Json& object, std::string_view key, const std::string& path) {
  auto v = opt_unsigned(object, key, path, 255, "u8");
  if (!v) return std::nullopt;
  return static_cast<uint8_t>(*v);
}

std::optional<float> opt_f32(const Json& object, std::string_view key, const std::string& path) {
  const Json* value = field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) invalid_type(at_key(path, key), *value, "f32");
  return static_cast<float>(value->get<double>());
}

std::string expect_variant(const std::string& value, std::initializer_list<const char*> variants,
                           const std::string& path) {
  for (const char* v : variants)
    if (value == v) return value;
  std::string expected;
  size_t i = 0;
  for (const char* v : variants) {
    if (i > 0) expected += ", ";
    expected += core::str_cat("`", v, "`");
    ++i;
  }
  if (variants.size() == 2) {
    auto it = variants.begin();
    expected = core::str_cat("`", *it, "` or `", *(it + 1), "`");
    bad_request(prefixed(path, core::str_cat("unknown variant `", value, "`, expected ", expected)));
  }
  bad_request(prefixed(path, core::str_cat("unknown variant `", value, "`, expected one of ", expected)));
}

}  // namespace dsinfer::recipe::detail
