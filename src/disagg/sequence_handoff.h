// What a decode worker needs to continue a DeepSeek-V4 sequence that a prefill worker computed: the full
// compressed blocks below its length and a window snapshot at its length (window rings, compressor
// tails, the unfinished block's entries, the MTP ring), at any position, block-aligned or not. One
// payload, moved by the transport (ucx_transport.h); README.md "Sequence state" has the layout.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/sequence_state.h"

namespace dsinfer::disagg {

// The state of `state` at its length(). Blocks and snapshot keep their own checksummed frames.
// `last_hidden` ([hc][d], optional) is the main model's final streams at position length() − 1: the MTP
// block's input for its next row, which no state holds (the decode worker drafts from it).
std::vector<uint8_t> export_sequence(const model::deepseek_v4::SequenceState& state,
                                     std::span<const float> last_hidden = {});

struct ImportedSequence {
  std::unique_ptr<model::deepseek_v4::SequenceState> state;
  std::vector<float> last_hidden;  // empty when none was exported
};

// A new sequence of `model` that continues exactly where the exported one stopped: its next forward
// (and MTP row) gives bitwise the logits the exporter's would. Every part is checked against the
// model's layout before use; bad bytes are a core::Error (invalid input).
ImportedSequence import_sequence(const model::deepseek_v4::Model& model, std::span<const uint8_t> bytes);

}  // namespace dsinfer::disagg
