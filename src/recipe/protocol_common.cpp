#include "recipe/protocol_common.h"

#include <cctype>

#include "recipe/request_reader.h"

namespace dsinfer::recipe::detail {

void image_placeholder_not_allowed() {
  bad_request("The sub-string \"", kImagePlaceholder, "\" in your input is not allowed for this API. Please remove \"",
              kImagePlaceholder, "\" from your input and try again.");
}

void image_not_allowed(const char* role) { bad_request("Image in ", role, " message is unsupported"); }

void file_id_unsupported(const std::string& path) {
  bad_request(path, ": file_id is not supported. Pass the image as a base64 data url instead.");
}

bool contains_image_placeholder(const std::string& text) { return text.find(kImagePlaceholder) != std::string::npos; }

void validate_tool_name(const std::string& name, const std::string& path) {
  bool valid = !name.empty() && name.size() <= 128;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) valid = false;
  }
  if (!valid) bad_request(path, ": expected 1-128 ASCII letters, digits, underscores or hyphens");
}

namespace {
// The structural checks a JSON Schema compiler would fail on for the keywords tools commonly use.
void check_schema_keywords(const Json& schema, const std::string& path, int depth) {
  if (schema.is_boolean()) return;
  if (!schema.is_object()) bad_request(path, ": a schema must be an object or a boolean");
  if (depth > 64) bad_request(path, ": schema nested too deeply");
  if (const Json* type = field(schema, "type")) {
    static const char* kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    auto known = [&](const Json& t) {
      if (!t.is_string()) return false;
      for (const char* k : kTypes)
        if (t.get_ref<const std::string&>() == k) return true;
      return false;
    };
    bool ok = known(*type);
    if (type->is_array()) {
      ok = true;
      for (const auto& t : *type) ok = ok && known(t);
    }
    if (!ok) bad_request(path, ": invalid \"type\" ", to_compact_json(*type));
  }
  if (const Json* properties = field(schema, "properties")) {
    if (!properties->is_object()) bad_request(path, ": \"properties\" must be an object");
    for (auto it = properties->begin(); it != properties->end(); ++it)
      check_schema_keywords(it.value(), core::str_cat(path, "/properties/", it.key()), depth + 1);
  }
  if (const Json* required = field(schema, "required")) {
    bool ok = required->is_array();
    if (ok)
      for (const auto& r : *required) ok = ok && r.is_string();
    if (!ok) bad_request(path, ": \"required\" must be an array of strings");
  }
  if (const Json* items = field(schema, "items")) {
    if (items->is_array()) {
      for (size_t i = 0; i < items->size(); ++i)
        check_schema_keywords((*items)[i], core::str_cat(path, "/items/", i), depth + 1);
    } else {
      check_schema_keywords(*items, path + "/items", depth + 1);
    }
  }
  for (const char* key : {"anyOf", "allOf", "oneOf"}) {
    if (const Json* list = field(schema, key)) {
      if (!list->is_array() || list->empty()) bad_request(path, ": \"", key, "\" must be a non-empty array");
      for (size_t i = 0; i < list->size(); ++i)
        check_schema_keywords((*list)[i], core::str_cat(path, "/", key, "/", i), depth + 1);
    }
  }
  if (const Json* ref = field(schema, "$ref")) {
    if (!ref->is_string()) bad_request(path, ": \"$ref\" must be a string");
  }
}
}  // namespace

void validate_tool_parameters(const Json& schema, const std::string& path) {
  const Json* type = schema.is_object() ? field(schema, "type") : nullptr;
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "object")
    bad_request(path, " must be a JSON Schema of type object");
  check_schema_keywords(schema, path, 0);
}

void validate_sampling(const std::optional<float>& temperature, const std::optional<float>& top_p) {
  if (temperature && !(*temperature >= 0.0f && *temperature <= 2.0f)) bad_request("temperature must be in [0, 2]");
  if (top_p && !(*top_p > 0.0f && *top_p <= 1.0f)) bad_request("top_p must be in (0, 1]");
}

void validate_max_tokens(const std::optional<uint32_t>& value, const char* field_name) {
  if (value && *value == 0) bad_request(field_name, " must be greater than zero");
}

void validate_tool_text(const std::vector<ToolDefinition>& tools, const std::vector<InputMessage>& messages) {
  for (const auto& tool : tools) {
    if (contains_image_placeholder(tool.name) || (tool.description && contains_image_placeholder(*tool.description)) ||
        contains_image_placeholder(to_python_json(tool.parameters)))
      image_placeholder_not_allowed();
  }
  for (const auto& message : messages) {
    if (message.role != Role::kAssistant) continue;
    for (const auto& call : message.tool_calls)
      if (contains_image_placeholder(call.name) || contains_image_placeholder(call.arguments))
        image_placeholder_not_allowed();
  }
}

bool contains_json_instruction(const std::vector<InputMessage>& messages) {
  for (const auto& message : messages) {
    const std::string& c = message.content;
    for (size_t i = 0; i + 4 <= c.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(c[i])) == 'j' &&
          std::tolower(static_cast<unsigned char>(c[i + 1])) == 's' &&
          std::tolower(static_cast<unsigned char>(c[i + 2])) == 'o' &&
          std::tolower(static_cast<unsigned char>(c[i + 3])) == 'n')
        return true;
    }
  }
  return false;
}

std::optional<ImageDetail> parse_image_detail(const std::string& text, const std::string& path) {
  expect_variant(text, {"low", "high", "original", "auto"}, path);
  if (text == "low") return ImageDetail::kLow;
  if (text == "high") return ImageDetail::kHigh;
  if (text == "original") return ImageDetail::kOriginal;
  return ImageDetail::kAuto;
}

namespace {
bool is_http_url(const std::string& url) {
  if (url.size() < 4) return false;
  for (size_t i = 0; i < 4; ++i)
    if (std::tolower(static_cast<unsigned char>(url[i])) != "http"[i]) return false;
  return true;
}
}  // namespace

ImageSource external_image_source(const std::string& url, std::optional<ImageDetail> detail, const std::string& path) {
  if (!is_http_url(url)) bad_request(path, ": invalid url: ", json_quote(url));
  if (url.size() > kMaxImageUrlBytes)
    bad_request(path, ": image URL is ", url.size(), " bytes long, more than the ", kMaxImageUrlBytes,
                " allowed; pass the image as a base64 data url instead.");
  return ImageSource::url(url, detail.value_or(ImageDetail::kHigh));
}

ImageSource image_url_source(const std::string& url, std::optional<ImageDetail> detail, const std::string& path) {
  if (is_http_url(url)) return external_image_source(url, detail, path);
  if (url.find("base64,") != std::string::npos) return ImageSource::data_url(url, detail.value_or(ImageDetail::kHigh));
  bad_request(path, ": Unsupported image_url format");
}

namespace {
bool is_base64_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/';
}

// Callers often get the number of trailing '=' wrong; a payload that has some padding gets the canonical
// amount. One without padding is left alone (it may be truncated, which validation then reports).
std::string normalise_padding(const std::string& data) {
  if (data.empty() || data.back() != '=') return data;
  std::string unpadded = data.substr(0, data.find_last_not_of('=') + 1);
  const size_t remainder = unpadded.size() % 4;
  if (remainder == 1) return data;
  return unpadded + std::string((4 - remainder) % 4, '=');
}

bool valid_base64(const std::string& data) {
  if (data.size() % 4 != 0) return false;
  size_t padding = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = data[i];
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding > 0 || !is_base64_char(c)) return false;
  }
  return padding <= 2;
}
}  // namespace

ImageSource base64_image_source(const std::string& media_type, const std::string& data, const std::string& path) {
  std::string lower;
  for (char c : media_type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string mime;
  if (lower == "image/jpeg" || lower == "image/jpg") mime = "image/jpeg";
  else if (lower == "image/png") mime = "image/png";
  else if (lower == "image/gif") mime = "image/gif";
  else if (lower == "image/webp") mime = "image/webp";
  else
    bad_request(path, ": unsupported image media type ", json_quote(media_type),
                "; supported are image/jpeg, image/png, image/gif and image/webp");
  const std::string normalised = normalise_padding(data);
  if (!valid_base64(normalised)) bad_request(path, ": base64 decode error");
  return ImageSource::data_url("data:" + mime + ";base64," + normalised, ImageDetail::kHigh);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

}  // namespace dsinfer::recipe::detail
