#include <algorithm>
#include <optional>

#include "recipe/prompt.h"

namespace dsinfer::recipe {
namespace {

using namespace tokens;

// V4 reasoning-effort paragraphs (spec §2.6, literal).
constexpr const char* kV4EffortHigh =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
constexpr const char* kV4EffortMax =
    "Reasoning Effort: Beyond maximum \xE2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

constexpr const char* kResponseFormatPrefix =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

struct Tags {
  const char* block;
  const char* invoke;
  const char* parameter;
};

Tags tags_for(PromptVersion version) {
  if (version == PromptVersion::kV4) return {"tool_calls", "invoke", "parameter"};
  return {" calls", " invoke", " parameter"};
}

// Appends text and records the control tokens the template writes.
class PromptWriter {
 public:
  PromptWriter(PromptVersion version, std::string_view image_placeholder)
      : version_(version), image_placeholder_(image_placeholder) {}

  // Template text: every control-token spelling in it is a control token.
  void templ(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t best = std::string_view::npos;
      size_t best_len = 0;
      for (const char* spelling : control_spellings()) {
        const std::string_view s(spelling);
        const size_t at = text.find(s, pos);
        if (at != std::string_view::npos && (at < best || (at == best && s.size() > best_len))) {
          best = at;
          best_len = s.size();
        }
      }
      if (best == std::string_view::npos) {
        out_.prompt.append(text.substr(pos));
        return;
      }
      out_.prompt.append(text.substr(pos, best - pos));
      special(text.substr(best, best_len));
      pos = best + best_len;
    }
  }

  // Client-controlled text: never a control token.
  void content(std::string_view text) { out_.prompt.append(text); }

  // User/tool content whose first `images` placeholders stand for image sources. The conversion always
  // writes the recipe's <｜image｜> (client text never holds it: the conversion refuses it); the prompt
  // gets the model's spelling of the image token.
  void content_with_images(std::string_view text, size_t images) {
    const std::string_view placeholder(kImagePlaceholder);
    size_t pos = 0;
    while (images > 0) {
      const size_t at = text.find(placeholder, pos);
      if (at == std::string_view::npos) break;
      content(text.substr(pos, at - pos));
      special(image_placeholder_);
      pos = at + placeholder.size();
      --images;
    }
    content(text.substr(pos));
  }

  void special(std::string_view spelling) {
    const size_t begin = out_.prompt.size();
    out_.prompt.append(spelling);
    out_.special_ranges.push_back({begin, out_.prompt.size()});
  }

  RenderedPrompt& result() { return out_; }

 private:
  std::vector<const char*> control_spellings() const {
    std::vector<const char*> s = {kBos, kEos, kUser, kAssistant, kLatestReminder, kThinkBegin, kThinkEnd, kDsml};
    if (version_ == PromptVersion::kV41) s.push_back(kSystem);
    return s;
  }

  PromptVersion version_;
  std::string_view image_placeholder_;
  RenderedPrompt out_;
};

// A piece of the injected system content: template text or client text.
struct Piece {
  std::string text;
  bool is_template = false;
};

struct Normalized {
  InputMessage message;
  std::vector<Piece> extra;  // appended to message 0's content (tool prompt, response format)
};

std::vector<Normalized> normalize(const std::vector<InputMessage>& messages, PromptVersion version) {
  std::vector<Normalized> out;
  bool seen_non_system = false;
  for (const InputMessage& message : messages) {
    if (message.role == Role::kSystem && version == PromptVersion::kV4) {
      // V4 has no mid-conversation system turn: leading ones merge, later ones become user text.
      if (!seen_non_system) {
        if (!out.empty() && out.back().message.role == Role::kSystem) {
          std::string& head = out.back().message.content;
          if (!head.empty() && !message.content.empty()) head += "\n\n";
          head += message.content;
        } else {
          out.push_back({InputMessage::system(message.content), {}});
        }
      } else if (!message.content.empty()) {
        // Falls through to the user merge below.
        InputMessage as_user = InputMessage::user(message.content);
        if (!out.empty() && out.back().message.role == Role::kUser) {
          out.back().message.content += "\n\n" + as_user.content;
        } else {
          out.push_back({std::move(as_user), {}});
        }
      }
      continue;
    }
    if (message.role != Role::kSystem) seen_non_system = true;
    if (message.role == Role::kUser && !out.empty() && out.back().message.role == Role::kUser) {
      InputMessage& prev = out.back().message;
      prev.content += "\n\n" + message.content;
      prev.images.insert(prev.images.end(), message.images.begin(), message.images.end());
      continue;
    }
    out.push_back({message, {}});
  }
  // Tool results in each run of user/tool messages follow the call order of the last assistant with calls.
  std::vector<std::string> order;
  for (size_t i = 0; i < out.size();) {
    const Role role = out[i].message.role;
    if (role == Role::kAssistant && !out[i].message.tool_calls.empty()) {
      order.clear();
      for (const auto& call : out[i].message.tool_calls) order.push_back(call.id);
      ++i;
    } else if (role == Role::kUser || role == Role::kTool) {
      const size_t start = i;
      while (i < out.size() && (out[i].message.role == Role::kUser || out[i].message.role == Role::kTool)) ++i;
      std::vector<size_t> slots;
      for (size_t k = start; k < i; ++k)
        if (out[k].message.role == Role::kTool) slots.push_back(k);
      if (slots.size() > 1 && !order.empty()) {
        auto rank = [&](const Normalized& n) -> size_t {
          for (size_t r = 0; r < order.size(); ++r)
            if (order[r] == n.message.tool_call_id) return r;
          return 0;
        };
        std::vector<Normalized> tools;
        for (size_t k : slots) tools.push_back(std::move(out[k]));
        std::stable_sort(tools.begin(), tools.end(),
                         [&](const Normalized& a, const Normalized& b) { return rank(a) < rank(b); });
        for (size_t k = 0; k < slots.size(); ++k) out[slots[k]] = std::move(tools[k]);
      }
    } else {
      ++i;
    }
  }
  return out;
}

std::string effort_prefix(PromptVersion version, std::optional<ReasoningEffort> effort) {
  const ReasoningEffort e = effort.value_or(ReasoningEffort::kHigh);
  if (version == PromptVersion::kV41) {
    const int level = e == ReasoningEffort::kLow ? 50 : e == ReasoningEffort::kMax ? 100 : 75;
    return "Reasoning Effort: " + std::to_string(level) +
           " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  }
  if (e == ReasoningEffort::kLow) return "";
  return e == ReasoningEffort::kMax ? kV4EffortMax : kV4EffortHigh;
}

// "## Tools" ... with the schema lines as client text between template text.
std::vector<Piece> tool_prompt(const std::vector<ToolDefinition>& tools, const Tags& t) {
  const std::string b = t.block, i = t.invoke, p = t.parameter;
  const std::string dsml = kDsml;
  std::string head =
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
      "writing a \"<" + dsml + b + ">\" block like the following:\n\n"
      "<" + dsml + b + ">\n"
      "<" + dsml + i + " name=\"$TOOL_NAME\">\n"
      "<" + dsml + p + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + dsml + p + ">\n"
      "...\n"
      "</" + dsml + i + ">\n"
      "<" + dsml + i + " name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</" + dsml + i + ">\n"
      "</" + dsml + b + ">\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
      "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
      "<think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n";
  std::vector<Piece> pieces;
  pieces.push_back({std::move(head), true});
  for (size_t k = 0; k < tools.size(); ++k) {
    if (k > 0) pieces.push_back({"\n", true});
    Json schema = Json::object();
    schema["name"] = tools[k].name;
    schema["description"] = tools[k].description.value_or("");
    schema["parameters"] = tools[k].parameters;
    pieces.push_back({to_python_json(schema), false});
  }
  pieces.push_back(
      {"\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n", true});
  return pieces;
}

void write_tool_calls(PromptWriter& w, const std::vector<ToolCall>& calls, const Tags& t) {
  const std::string dsml = kDsml;
  w.templ("<" + dsml + t.block + ">\n");
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& call = calls[k];
    if (k > 0) w.templ("\n");
    w.templ("<" + dsml + t.invoke + " name=\"");
    w.content(call.name);
    w.templ("\">\n");
    // A JSON object's members become parameters in key order; anything else is one string "arguments".
    Json arguments = Json::object();
    bool is_object = false;
    try {
      Json parsed = parse_json(call.arguments);
      if (parsed.is_object()) {
        arguments = std::move(parsed);
        is_object = true;
      }
    } catch (const std::exception&) {  // not JSON (or nested too deeply): one string parameter
    }
    if (!is_object) arguments["arguments"] = call.arguments;
    bool first = true;
    for (auto it = arguments.begin(); it != arguments.end(); ++it) {
      if (!first) w.templ("\n");
      first = false;
      const bool is_string = it.value().is_string();
      w.templ("<" + dsml + t.parameter + " name=\"");
      w.content(it.key());
      w.templ(std::string("\" string=\"") + (is_string ? "true" : "false") + "\">");
      w.content(is_string ? it.value().get_ref<const std::string&>() : to_python_json(it.value()));
      w.templ("</" + dsml + t.parameter + ">");
    }
    w.templ("\n</" + dsml + t.invoke + ">");
  }
  w.templ("\n</" + dsml + t.block + ">");
}

}  // namespace

const char* to_string(PromptVersion version) { return version == PromptVersion::kV4 ? "v4" : "v41"; }

RenderedPrompt render_conversation(const Conversation& conversation, PromptVersion version,
                                   std::string_view image_placeholder) {
  const Tags tags = tags_for(version);
  std::vector<Normalized> messages = normalize(conversation.messages, version);
  const bool has_tools = conversation.tool_choice != ToolChoice::kNone && !conversation.tools.empty();
  const bool json_mode = conversation.response_format == ResponseFormat::kJsonObject;
  if (has_tools || json_mode) {
    if (messages.empty() || messages[0].message.role != Role::kSystem)
      messages.insert(messages.begin(), Normalized{InputMessage::system(""), {}});
    auto& extra = messages[0].extra;
    if (has_tools) {
      extra.push_back({"\n\n", true});
      for (auto& piece : tool_prompt(conversation.tools, tags)) extra.push_back(std::move(piece));
    }
    if (json_mode) {
      Json schema = Json::object();
      schema["type"] = "json_object";
      extra.push_back({std::string(kResponseFormatPrefix) + to_python_json(schema), true});
    }
  }

  PromptWriter w(version, image_placeholder);
  const char* system_token = version == PromptVersion::kV41 ? kSystem : "";
  w.templ(kBos);
  bool continued = false;  // the last message is a prefix the model continues
  for (size_t i = 0; i < messages.size(); ++i) {
    const InputMessage& m = messages[i].message;
    const InputMessage* prev = i > 0 ? &messages[i - 1].message : nullptr;
    const std::string effort = i == 0 && conversation.thinking_mode
                                   ? effort_prefix(version, conversation.reasoning_effort)
                                   : std::string();
    if (i == 0 && (!effort.empty() || m.role == Role::kSystem)) w.templ(system_token);
    w.templ(effort);
    const bool after_user_turn = prev && (prev->role == Role::kUser || prev->role == Role::kTool);
    switch (m.role) {
      case Role::kSystem:
        if (i > 0) w.templ(system_token);
        w.content(m.content);
        for (const auto& piece : messages[i].extra) {
          if (piece.is_template) w.templ(piece.text);
          else w.content(piece.text);
        }
        break;
      case Role::kUser:
        w.templ(after_user_turn ? "\n\n" : kUser);
        w.content_with_images(m.content, m.images.size());
        break;
      case Role::kTool:
        w.templ(after_user_turn ? "\n\n" : kUser);
        w.templ("<tool_result>");
        w.content_with_images(m.content, m.images.size());
        w.templ("</tool_result>");
        break;
      case Role::kLatestReminder:
        w.templ(kLatestReminder);
        w.content(m.content);
        break;
      case Role::kAssistant:
        w.templ(kAssistant);
        if (m.prefix && i + 1 == messages.size()) {
          // 0.2.0 prefix continuation: open the turn where the client's text stops.
          if (conversation.thinking_mode) {
            w.templ(kThinkBegin);
            w.content(m.reasoning_content);
            if (!m.content.empty()) {
              w.templ(kThinkEnd);
              w.content(m.content);
            }
          } else {
            w.templ(kThinkEnd);
            w.content(m.content);
          }
          continued = true;
          break;
        }
        if (conversation.thinking_mode && i > 0) {
          w.templ(kThinkBegin);
          w.content(m.reasoning_content);
          w.templ(kThinkEnd);
        } else {
          w.templ(kThinkEnd);
        }
        w.content(m.content);
        if (!m.tool_calls.empty()) {
          w.templ("\n\n");
          write_tool_calls(w, m.tool_calls, tags);
        }
        w.templ(kEos);
        break;
    }
  }
  if (!continued) {
    w.templ(kAssistant);
    w.templ(conversation.thinking_mode ? kThinkBegin : kThinkEnd);
    if (conversation.tool_choice == ToolChoice::kRequired && !conversation.tools.empty())
      w.templ(std::string("\n\n<") + kDsml + tags.block + ">\n");
  }
  RenderedPrompt& out = w.result();
  for (const auto& n : messages) {
    if (n.message.role == Role::kUser || n.message.role == Role::kTool)
      out.image_sources.insert(out.image_sources.end(), n.message.images.begin(), n.message.images.end());
  }
  return std::move(out);
}

}  // namespace dsinfer::recipe
