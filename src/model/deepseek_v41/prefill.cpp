#include "model/deepseek_v41/prefill.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "model/deepseek_v41/prefill_impl.h"

namespace dsinfer::model::deepseek_v41 {

using detail::Prefill;
using detail::Weights;

struct SequenceState {
  Prefill p;
};

Sequence::Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options)
    : state_(std::make_unique<SequenceState>(SequenceState{Prefill(ck, token_map, options)})) {}

struct PreparedWeights {
  std::shared_ptr<Weights> weights;
  bool double_accumulation = false;
  bool fast = false;
};

std::shared_ptr<PreparedWeights> prepare_weights(const Checkpoint& ck, const PrefillOptions& options) {
  return std::make_shared<PreparedWeights>(
      PreparedWeights{std::make_shared<Weights>(ck, options.double_accumulation, options.fast),
                      options.double_accumulation, options.fast});
}

Sequence::Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options,
                   const std::shared_ptr<PreparedWeights>& weights)
    : state_(std::make_unique<SequenceState>(SequenceState{Prefill(ck, token_map, options, weights->weights)})) {
  DSINFER_CHECK(weights->double_accumulation == options.double_accumulation && weights->fast == options.fast,
                "V4.1 sequence: weights prepared for another accumulation mode or numerics");
}
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;

std::vector<float> Sequence::forward(const std::vector<int32_t>& ids) { return state_->p.run(ids); }
std::vector<float> Sequence::forward(const std::vector<int32_t>& ids, int64_t logit_rows) {
  DSINFER_CHECK(logit_rows >= 0, "V4.1 sequence: ", logit_rows, " logit rows");
  return state_->p.run(ids, logit_rows);
}
int64_t Sequence::length() const { return state_->p.length(); }
void Sequence::truncate(int64_t len) { state_->p.truncate(len); }
std::vector<float> Sequence::dspark_draft0(std::vector<float>* confidence) {
  return state_->p.dspark_draft0(confidence);
}
DsparkKv Sequence::dspark_stored_kv() const { return state_->p.dspark_stored_kv(); }
StoredKv Sequence::stored_kv() const { return state_->p.stored(); }
int64_t Sequence::state_bytes() const { return state_->p.state_bytes(); }
int64_t Sequence::decoder_replay_start() const { return state_->p.replay_start(); }
void Sequence::set_decoder_replay_tokens(int64_t k) { state_->p.set_replay_tokens(k); }
std::vector<int32_t> Sequence::dspark_round(int32_t anchor, int64_t count, std::vector<float>* confidence) {
  return state_->p.dspark_round(anchor, count, confidence);
}
std::vector<std::vector<float>> Sequence::batch_forward(const std::vector<Sequence*>& seqs,
                                                        const std::vector<std::vector<int32_t>>& ids,
                                                        const std::vector<int64_t>& logit_rows,
                                                        std::vector<float>* dest) {
  DSINFER_CHECK(!seqs.empty() && ids.size() == seqs.size() && logit_rows.size() == seqs.size(),
                "V4.1 forward_batch: ", seqs.size(), " sequences, ", ids.size(), " chunks, ", logit_rows.size(),
                " logit row counts");
  std::vector<Prefill*> ps;
  std::vector<const std::vector<int32_t>*> chunks;
  for (size_t i = 0; i < seqs.size(); ++i) {
    DSINFER_CHECK(logit_rows[i] >= 0, "V4.1 sequence: ", logit_rows[i], " logit rows");
    Prefill* p = &seqs[i]->state_->p;
    DSINFER_CHECK(std::find(ps.begin(), ps.end(), p) == ps.end(), "V4.1 forward_batch: sequence ", i, " appears twice");
    // The batch's products run on the first sequence's prepared weights.
    DSINFER_CHECK(p->shares_weights_with(*(ps.empty() ? p : ps[0])), "V4.1 forward_batch: sequence ", i,
                  " does not share the first one's prepared weights (prepare_weights)");
    ps.push_back(p);
    chunks.push_back(&ids[i]);
  }
  if (ps.size() == 1) return ps[0]->forward_rows(ps, chunks, logit_rows, dest);
  Prefill batch(Prefill::BatchOf{*ps[0]});
  return batch.forward_rows(ps, chunks, logit_rows, dest);
}
std::vector<std::vector<float>> Sequence::forward_batch(const std::vector<Sequence*>& seqs,
                                                        const std::vector<std::vector<int32_t>>& ids,
                                                        const std::vector<int64_t>& logit_rows) {
  return batch_forward(seqs, ids, logit_rows, nullptr);
}
void Sequence::forward_batch_into(const std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& ids,
                                  const std::vector<int64_t>& logit_rows, std::vector<float>& logits) {
  batch_forward(seqs, ids, logit_rows, &logits);
}
StateRange Sequence::export_range(int64_t begin, int64_t end) const { return state_->p.export_range(begin, end); }
void Sequence::append_range(const StateRange& range) { state_->p.append_range(range); }

std::vector<float> prefill_logits(const Checkpoint& ck, const EngramTokenMap* token_map,
                                  const std::vector<int32_t>& ids, const PrefillOptions& options,
                                  std::vector<float>* dspark_draft0) {
  DSINFER_CHECK(!ids.empty(), "V4.1 prefill: empty prompt");
  Sequence seq(ck, token_map, options);
  std::vector<float> logits = seq.forward(ids);
  if (dspark_draft0) *dspark_draft0 = seq.dspark_draft0();
  return logits;
}

}  // namespace dsinfer::model::deepseek_v41
