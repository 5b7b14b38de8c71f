// Validation and content helpers shared by the three protocol conversions (spec §3.1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "recipe/conversation.h"
#include "recipe/conversion_error.h"

namespace dsinfer::recipe::detail {

inline constexpr const char* kUnsupportedDocument = "[Unsupported Document]";
inline constexpr size_t kMaxImageUrlBytes = 8192;
inline constexpr size_t kMaxStopSequences = 16;

[[noreturn]] void image_placeholder_not_allowed();
[[noreturn]] void image_not_allowed(const char* role);
[[noreturn]] void file_id_unsupported(const std::string& path);

bool contains_image_placeholder(const std::string& text);
void validate_tool_name(const std::string& name, const std::string& path);
// Must be an object with "type":"object" whose schema keywords are well formed (no remote $ref fetch).
void validate_tool_parameters(const Json& schema, const std::string& path);
void validate_sampling(const std::optional<float>& temperature, const std::optional<float>& top_p);
void validate_max_tokens(const std::optional<uint32_t>& value, const char* field_name);
// Tool names, descriptions, schemas and historical call names/arguments must not spell <｜image｜>.
void validate_tool_text(const std::vector<ToolDefinition>& tools, const std::vector<InputMessage>& messages);
// Some message content contains "json", ASCII case-insensitively.
bool contains_json_instruction(const std::vector<InputMessage>& messages);

std::optional<ImageDetail> parse_image_detail(const std::string& text, const std::string& path);
// An image_url string: http(s) URLs become Url sources, anything with "base64," a DataUrl source.
ImageSource image_url_source(const std::string& url, std::optional<ImageDetail> detail, const std::string& path);
ImageSource external_image_source(const std::string& url, std::optional<ImageDetail> detail, const std::string& path);
// Anthropic base64 image: media type checked, padding normalised, payload validated.
ImageSource base64_image_source(const std::string& media_type, const std::string& data, const std::string& path);

std::string join(const std::vector<std::string>& parts, const std::string& separator);

}  // namespace dsinfer::recipe::detail
