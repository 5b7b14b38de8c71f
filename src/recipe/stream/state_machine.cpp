#include "recipe/stream/state_machine.h"

#include <algorithm>

#include "core/error.h"


namespace dsinfer::recipe::stream {
namespace {

constexpr std::string_view kJsonFence = "```json\n";
constexpr std::string_view kPlainFence = "```\n";
constexpr std::string_view kJsonEnd = "\n```";
constexpr std::string_view kThinkEnd = "</think>";
// "<｜DSML｜" and "</｜DSML｜"; the tag names after them differ between V4 and V4.1.
constexpr std::string_view kDsmlBegin = "<\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
constexpr std::string_view kDsmlEnd = "</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
constexpr std::string_view kToolCallsEndV4 = "</\xEF\xBD\x9C" "DSML\xEF\xBD\x9Ctool_calls>";
constexpr std::string_view kToolCallsEndV41 = "</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C calls>";

Action act(ActionKind kind) { return Action{kind, InvalidKind::kNone, false, 0, {}}; }
Action label(ActionKind kind, uint8_t id, std::string_view text) { return Action{kind, InvalidKind::kNone, false, id, text}; }
Action invalid(InvalidKind why) { return Action{ActionKind::kSkipInvalid, why, false, 0, {}}; }
Action raw_args(bool string) { return Action{ActionKind::kRawArgs, InvalidKind::kNone, string, 0, {}}; }

std::vector<size_t> kmp_table(std::string_view pattern) {
  std::vector<size_t> table(pattern.size(), 0);
  size_t length = 0;
  for (size_t i = 1; i < pattern.size();) {
    if (pattern[i] == pattern[length]) {
      table[i++] = ++length;
    } else if (length != 0) {
      length = table[length - 1];
    } else {
      table[i++] = 0;
    }
  }
  return table;
}

// Tables of the fixed markers, built once.
const std::vector<size_t>* fixed_table(std::string_view pattern) {
  static const auto* tables = [] {
    auto* m = new std::vector<std::pair<std::string_view, std::vector<size_t>>>();
    for (std::string_view p : {kJsonFence, kPlainFence, kJsonEnd, kThinkEnd, kDsmlBegin, kDsmlEnd, kToolCallsEndV4,
                               kToolCallsEndV41, std::string_view("{"), std::string_view("["),
                               std::string_view("invoke name=\""), std::string_view("\""), std::string_view("parameter name=\""),
                               std::string_view("parameter name="), std::string_view(" "), std::string_view("true\">"),
                               std::string_view("false\">")})
      m->push_back({p, kmp_table(p)});
    return m;
  }();
  for (const auto& [p, t] : *tables)
    if (p == pattern) return &t;
  return nullptr;
}

size_t kmp_next(std::string_view pattern, const std::vector<size_t>& table, size_t length, unsigned char byte) {
  while (length > 0 && (length >= pattern.size() || static_cast<unsigned char>(pattern[length]) != byte))
    length = table[length - 1];
  if (length < pattern.size() && static_cast<unsigned char>(pattern[length]) == byte) ++length;
  return length;
}

}  // namespace

bool StateMachine::Branch::feed(unsigned char byte) {
  switch (pattern) {
    case PatternKind::kString:
      length = kmp_next(value, *table, length, byte);
      return length == value.size();
    case PatternKind::kNewlinesAndString:
      if (length == 0 && byte == '\n') {
        ++newlines;
      } else {
        const size_t next_length = kmp_next(value, *table, length, byte);
        if (next_length <= length) newlines = 0;  // the run of newlines no longer directly precedes a match
        length = next_length;
      }
      return length == value.size();
    case PatternKind::kLeadingNewline:
      if (leading) matched = byte == '\n';
      leading = false;
      return matched;
  }
  return false;
}

size_t StateMachine::Branch::matching_len() const {
  switch (pattern) {
    case PatternKind::kString: return length;
    case PatternKind::kNewlinesAndString: return length + newlines;
    case PatternKind::kLeadingNewline: return matched ? 1 : 0;
  }
  return 0;
}

StateMachine::StateMachine(const ParsingOptions& options, LabelScheme scheme)
    : parse_tool_calls_(options.parse_tool_calls), parse_json_(options.parse_json_output), scheme_(scheme) {
  for (const auto& s : options.stop_sequences)
    if (!s.empty()) stop_sequences_.push_back(s);
  for (const auto& s : stop_sequences_) stop_tables_.push_back(kmp_table(s));
  Stage first{StageKind::kCommon, true};
  if (options.tool_call_initial_stage) {
    first = {StageKind::kToolCalls, false};
  } else if (options.reasoning_initial_stage) {
    switch (*options.reasoning_initial_stage) {
      case ReasoningStage::kStart: first = {StageKind::kReasoning, true}; break;
      case ReasoningStage::kReasoning: first = {StageKind::kReasoning, false}; break;
      case ReasoningStage::kContent: first = {StageKind::kCommon, false}; break;
    }
  }
  enter(first);
}

void StateMachine::add(PatternKind pattern, std::string_view value, const std::vector<size_t>* table, Stage next,
                       Action action) {
  DSINFER_CHECK(pattern == PatternKind::kLeadingNewline || table != nullptr, "no KMP table for marker '", value, "'");
  Branch b;
  b.pattern = pattern;
  b.value = value;
  b.table = table;
  b.next = next;
  b.action = action;
  branches_.push_back(std::move(b));
}

void StateMachine::enter(Stage stage) {
  stage_ = stage;
  branches_.clear();
  stashed_ = 0;
  const bool legacy = scheme_ == LabelScheme::kLegacy;
  auto add_stops = [&] {
    for (size_t i = 0; i < stop_sequences_.size(); ++i)
      add(PatternKind::kString, stop_sequences_[i], &stop_tables_[i], {StageKind::kFinished, false},
          act(ActionKind::kStopSequence));
  };
  auto add_tool_begin = [&] {
    add(PatternKind::kNewlinesAndString, kDsmlBegin, fixed_table(kDsmlBegin), {StageKind::kToolCalls, false}, act(ActionKind::kSkip));
  };
  switch (stage.kind) {
    case StageKind::kCommon:
      if (parse_json_) {
        add(PatternKind::kString, kJsonFence, fixed_table(kJsonFence), {StageKind::kJson, false}, act(ActionKind::kSkip));
        add(PatternKind::kString, kPlainFence, fixed_table(kPlainFence), {StageKind::kJson, false}, act(ActionKind::kSkip));
        add(PatternKind::kString, "{", fixed_table("{"), {StageKind::kJson, false}, label(ActionKind::kLabel, 1, "{"));
        add(PatternKind::kString, "[", fixed_table("["), {StageKind::kJson, false}, label(ActionKind::kLabel, 2, "["));
      } else {
        add_stops();
      }
      if (parse_tool_calls_) add_tool_begin();
      if (stage.flag)
        add(PatternKind::kLeadingNewline, {}, nullptr, {StageKind::kCommon, true}, act(ActionKind::kSkip));
      add(PatternKind::kString, kThinkEnd, fixed_table(kThinkEnd), {StageKind::kCommon, false}, invalid(InvalidKind::kExtraEndOfThinking));
      unmatched_ = act(parse_json_ ? ActionKind::kToSpace : ActionKind::kRaw);
      break;
    case StageKind::kJson:
      add_stops();
      add(PatternKind::kString, kJsonEnd, fixed_table(kJsonEnd), {StageKind::kMatchedJson, false}, act(ActionKind::kSkip));
      unmatched_ = act(ActionKind::kRaw);
      break;
    case StageKind::kMatchedJson:
      if (parse_tool_calls_) add_tool_begin();
      unmatched_ = act(ActionKind::kToSpace);
      break;
    case StageKind::kToolCalls:
      add(PatternKind::kString, "invoke name=\"", fixed_table("invoke name=\""), {StageKind::kToolName, false}, act(ActionKind::kToolCallBegin));
      add(PatternKind::kString, kToolCallsEndV4, fixed_table(kToolCallsEndV4), {StageKind::kFinished, false}, act(ActionKind::kSkip));
      add(PatternKind::kString, kToolCallsEndV41, fixed_table(kToolCallsEndV41), {StageKind::kFinished, false}, act(ActionKind::kSkip));
      unmatched_ = act(ActionKind::kSkip);
      break;
    case StageKind::kToolName:
      add(PatternKind::kString, "\"", fixed_table("\""), {StageKind::kToolArguments, true}, act(ActionKind::kToolNameEnd));
      unmatched_ = act(ActionKind::kToolName);
      break;
    case StageKind::kToolArguments:
      if (stage.flag) {
        add(PatternKind::kString, legacy ? "parameter name=" : "parameter name=\"", fixed_table(legacy ? "parameter name=" : "parameter name=\""), {StageKind::kParamName, false},
            label(ActionKind::kLabelArgs, 1, legacy ? "{" : "{\""));
        add(PatternKind::kString, kDsmlEnd, fixed_table(kDsmlEnd), {StageKind::kToolCalls, false}, label(ActionKind::kArgsEnd, 2, "{}"));
      } else {
        add(PatternKind::kString, legacy ? "parameter name=" : "parameter name=\"", fixed_table(legacy ? "parameter name=" : "parameter name=\""), {StageKind::kParamName, false},
            label(ActionKind::kLabelArgs, 3, legacy ? ", " : ", \""));
        add(PatternKind::kString, kDsmlEnd, fixed_table(kDsmlEnd), {StageKind::kToolCalls, false}, label(ActionKind::kArgsEnd, 4, "}"));
      }
      unmatched_ = act(ActionKind::kSkip);
      break;
    case StageKind::kParamName:
      add(PatternKind::kString, legacy ? " " : "\"", fixed_table(legacy ? " " : "\""), {StageKind::kParamType, false},
          label(ActionKind::kLabelArgs, 5, legacy ? ": " : "\": "));
      unmatched_ = raw_args(false);
      break;
    case StageKind::kParamType:
      add(PatternKind::kString, "true\">", fixed_table("true\">"), {StageKind::kParamValue, true}, label(ActionKind::kLabelArgs, 6, "\""));
      add(PatternKind::kString, "false\">", fixed_table("false\">"), {StageKind::kParamValue, false}, act(ActionKind::kSkip));
      unmatched_ = act(ActionKind::kSkip);
      break;
    case StageKind::kParamValue:
      add(PatternKind::kString, kDsmlEnd, fixed_table(kDsmlEnd), {StageKind::kToolArguments, false},
          stage.flag ? label(ActionKind::kLabelArgs, 7, "\"") : act(ActionKind::kSkip));
      unmatched_ = raw_args(stage.flag);
      break;
    case StageKind::kReasoning:
      if (parse_tool_calls_) add_tool_begin();
      if (stage.flag)
        add(PatternKind::kLeadingNewline, {}, nullptr, {StageKind::kReasoning, true}, act(ActionKind::kSkip));
      add(PatternKind::kNewlinesAndString, kThinkEnd, fixed_table(kThinkEnd), {StageKind::kCommon, true}, act(ActionKind::kSkip));
      unmatched_ = act(ActionKind::kReasoning);
      break;
    case StageKind::kFinished:
      unmatched_ = invalid(InvalidKind::kContentAfterFinished);
      break;
  }
}

std::vector<ActionSegment> StateMachine::feed(std::string_view bytes) {
  std::vector<ActionSegment> out;
  for (const char c : bytes) {
    ++stashed_;
    for (size_t i = 0; i < branches_.size(); ++i) {
      Branch& branch = branches_[i];
      if (!branch.feed(static_cast<unsigned char>(c))) continue;
      const size_t match = branch.matching_len();
      if (match < stashed_) out.push_back({unmatched_, stashed_ - match});
      if (match > 0) out.push_back({branch.action, match});
      const Stage next = branch.next;
      enter(next);
      break;
    }
  }
  size_t held = 0;
  for (const auto& b : branches_) held = std::max(held, b.matching_len());
  if (held < stashed_) {
    out.push_back({unmatched_, stashed_ - held});
    stashed_ = held;
  }
  return out;
}

std::vector<ActionSegment> StateMachine::finish() {
  std::vector<ActionSegment> out;
  if (stashed_ > 0) out.push_back({unmatched_, stashed_});
  stashed_ = 0;
  return out;
}

}  // namespace dsinfer::recipe::stream
