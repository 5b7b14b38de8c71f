// The byte-level output parser of deepseek-recipe (spec §5.2): each stage has ordered branches (KMP
// substring matchers) and an action for unmatched bytes. feed() returns action segments over input byte
// lengths; partial matches (a split "</thi", a stop-sequence prefix) are held back until they resolve, so
// markers split across chunks are handled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace dsinfer::recipe::stream {

enum class ActionKind : uint8_t {
  kRaw,            // answer text
  kToSpace,        // text around JSON in JSON mode: one space per output piece
  kSkipInvalid,    // dropped and counted as invalid (an extra </think>, text after the end)
  kSkip,           // dropped markup
  kStopSequence,   // the matched stop sequence (not emitted)
  kToolCallBegin,  // `invoke name="`
  kToolName,       // bytes of the tool name
  kToolNameEnd,    // the closing quote: the call is announced
  kLabelArgs,      // fixed arguments text ({" , ", " ...)
  kRawArgs,        // parameter name or value bytes; `string` values are JSON-escaped
  kArgsEnd,        // end of one call's parameters: `{}` or `}`
  kReasoning,      // reasoning text
  kLabel,          // fixed answer text (the `{` or `[` that opens raw JSON)
};

enum class InvalidKind : uint8_t { kNone, kExtraEndOfThinking, kContentAfterFinished };

struct Action {
  ActionKind kind = ActionKind::kSkip;
  InvalidKind invalid = InvalidKind::kNone;
  bool string = false;    // kRawArgs: the value is a JSON string
  uint8_t label_id = 0;   // distinguishes labels with equal text at different places
  std::string_view text;  // kLabel / kLabelArgs / kArgsEnd; points at static storage

  bool operator==(const Action& o) const {
    return kind == o.kind && invalid == o.invalid && string == o.string && label_id == o.label_id;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

struct ActionSegment {
  Action action;
  size_t len = 0;
};

// How parameter names are framed in argument deltas. Both give the same final arguments string.
//   kQuotedNames (upstream state_machine.rs at ac74541): `{"`, name, `": ` — names may contain spaces.
//   kLegacy (the scheme the Rust goldens were generated with): `{`, `"name"`, `: `.
enum class LabelScheme { kQuotedNames, kLegacy };

class StateMachine {
 public:
  StateMachine(const ParsingOptions& options, LabelScheme scheme = LabelScheme::kQuotedNames);
  // Branches point into stop_sequences_, so the machine is not copyable (moving keeps the strings).
  StateMachine(const StateMachine&) = delete;
  StateMachine& operator=(const StateMachine&) = delete;
  StateMachine(StateMachine&&) = default;
  StateMachine& operator=(StateMachine&&) = default;

  std::vector<ActionSegment> feed(std::string_view bytes);
  // The source ended: whatever is held back goes out with the current stage's unmatched action.
  std::vector<ActionSegment> finish();

 private:
  enum class StageKind : uint8_t {
    kCommon, kJson, kMatchedJson, kToolCalls, kToolName, kToolArguments, kParamName, kParamType, kParamValue,
    kReasoning, kFinished,
  };
  struct Stage {
    StageKind kind = StageKind::kCommon;
    bool flag = false;  // leading for Common/Reasoning/ToolArguments, string for ParamValue
  };
  enum class PatternKind : uint8_t { kString, kNewlinesAndString, kLeadingNewline };
  struct Branch {
    PatternKind pattern = PatternKind::kString;
    std::string_view value;
    const std::vector<size_t>* table = nullptr;  // KMP failure table (shared, computed once per pattern)
    size_t length = 0;          // matched prefix length
    size_t newlines = 0;        // kNewlinesAndString: newlines swallowed before the match
    bool leading = true;        // kLeadingNewline: no byte seen yet
    bool matched = false;
    Stage next;
    Action action;

    bool feed(unsigned char byte);
    size_t matching_len() const;
  };

  void enter(Stage stage);
  void add(PatternKind pattern, std::string_view value, const std::vector<size_t>* table, Stage next, Action action);

  std::vector<std::string> stop_sequences_;
  std::vector<std::vector<size_t>> stop_tables_;
  bool parse_tool_calls_;
  bool parse_json_;
  LabelScheme scheme_;
  Stage stage_;
  std::vector<Branch> branches_;
  Action unmatched_;
  size_t stashed_ = 0;  // bytes fed since the last emitted segment
};

}  // namespace dsinfer::recipe::stream
