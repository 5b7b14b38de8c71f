// Typed reads from a request body with the reference's deserialisation errors ("missing field `x`",
// "unknown variant `y`, expected one of ..."), prefixed with where in the body the problem is. A JSON
// null counts as absent, as it does for the reference's optional fields.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "recipe/json_text.h"

namespace dsinfer::recipe::detail {

// Path helpers: "messages[2]", "tools.0" style is chosen by the caller.
std::string at_index(const std::string& path, size_t index);
std::string at_key(const std::string& path, std::string_view key);

// serde's wording for what a value is: "a string", "integer `5`", "a map", ...
std::string describe(const Json& value);
[[noreturn]] void invalid_type(const std::string& path, const Json& value, std::string_view expected);

// The field's value, or nullptr when it is missing or null.
const Json* field(const Json& object, std::string_view key);
const Json& require_field(const Json& object, std::string_view key, const std::string& path);

const Json& expect_object(const Json& value, const std::string& path, std::string_view what = "a map");
const Json& expect_array(const Json& value, const std::string& path);
std::string expect_string(const Json& value, const std::string& path);

std::string require_string(const Json& object, std::string_view key, const std::string& path);
std::optional<std::string> opt_string(const Json& object, std::string_view key, const std::string& path);
std::optional<bool> opt_bool(const Json& object, std::string_view key, const std::string& path);
std::optional<uint64_t> opt_u64(const Json& object, std::string_view key, const std::string& path);
std::optional<uint32_t> opt_u32(const Json& object, std::string_view key, const std::string& path);
std::optional<uint8_t> opt_u8(const Json& object, std::string_view key, const std::string& path);
std::optional<float> opt_f32(const Json& object, std::string_view key, const std::string& path);

// Checks that `value` is one of `variants`; throws "unknown variant `v`, expected one of `a`, `b`".
std::string expect_variant(const std::string& value, std::initializer_list<const char*> variants,
                           const std::string& path);

}  // namespace dsinfer::recipe::detail
