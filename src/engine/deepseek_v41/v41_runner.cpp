#include "engine/deepseek_v41/v41_runner.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "engine/deepseek_v4/v4_runner.h"
#include "engine/deepseek_v41/v41_state_codec.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/targets.h"
#include "model/checkpoint.h"
#include "model/numerics_revision.h"

namespace dsinfer::engine {
namespace {

namespace v41 = model::deepseek_v41;

struct V41Seq final : SequenceState {
  std::unique_ptr<v41::Sequence> seq;
  int64_t length() const override { return seq->length(); }
};

struct V41Block final : KvBlock {
  explicit V41Block(v41::StateRange r) : range(std::move(r)) {}
  v41::StateRange range;
};

// Nothing but the position: the blocks before it are the whole state (v41_runner.h).
struct V41Snapshot final : WindowSnapshot {
  explicit V41Snapshot(int64_t p) : pos(p) {}
  int64_t pos;
  int64_t position() const override { return pos; }
  int64_t bytes() const override { return static_cast<int64_t>(sizeof(V41Snapshot)); }
};

std::string describe_layout(const model::ModelConfig& c, bool qdq) {
  std::string ratios;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const model::LayerRoles& r = c.layer_roles(L);
    ratios += core::str_cat(L ? "," : "", r.ratio, r.owns_compressor ? "s" : "");
  }
  // The SIMD target is part of the numerics (summation order, FMA): a cache must not mix targets, nor
  // builds of other numerics (the revision) or CPUs with and without AVX-512 BF16 (the fast head).
  return core::str_cat("v41 state ranges v1; block 128; window ", c.sliding_window, "; ratios ", ratios,
                       "; fp32 window/compressed KV, qdq ", qdq ? "on" : "off", "; engram ", c.engram ? 1 : 0,
                       "; simd ", kernels::current_target_name(), "; bf16 dots ",
                       kernels::bf16dot_hardware() ? "on" : "off", "; numerics revision ", model::kNumericsRevision);
}

// One runner may serve several engines at once (bench-serve): the prepared weights are shared by all
// sequences and prepared lazily, so every call that computes holds mu_.
class V41Runner final : public ModelRunner {
 public:
  V41Runner(std::unique_ptr<model::Checkpoint> ck, std::optional<v41::EngramTokenMap> map, v41::PrefillOptions opt,
            std::unique_ptr<core::ThreadPool> own_pool, std::string identity)
      : ck_(std::move(ck)), map_(std::move(map)), own_pool_(std::move(own_pool)), opt_(opt) {
    const model::ModelConfig& c = ck_->config();
    for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
      const model::LayerRoles& r = c.layer_roles(L);
      DSINFER_CHECK(!r.owns_compressor || (r.ratio > 0 && kBlock % r.ratio == 0), "V4.1 runner: layer ", L,
                    " compresses by ", r.ratio, ", which does not divide the ", kBlock, "-position block");
    }
    weights_ = v41::prepare_weights(*ck_, opt_);
    info_.identity = std::move(identity);
    info_.cache_layout = describe_layout(c, opt_.qdq);
    info_.vocab_size = static_cast<int32_t>(c.vocab_size);
    info_.eos_token_id = static_cast<int32_t>(c.eos_token_id);
    info_.max_context = c.max_position_embeddings;
    info_.window = static_cast<int32_t>(c.sliding_window);
    info_.block_tokens = static_cast<int32_t>(kBlock);
    info_.block_bytes = v41::state_range_bytes(c, kBlock) + static_cast<int64_t>(sizeof(V41Block));
    // The fixed part of a sequence; its growing arrays are charged as blocks (the partial one too).
    info_.sequence_bytes = static_cast<int64_t>(sizeof(V41Seq) + 4096);
    info_.snapshot_bytes = static_cast<int64_t>(sizeof(V41Snapshot));
    // One DSpark round drafts up to its block size (the greedy Markov chain of §2.12).
    info_.max_draft_tokens = c.dspark && c.n_mtp_layers > 0 ? static_cast<int32_t>(c.dspark->block_size) : 0;
    info_.supports_replay = true;  // and exact (attach)
    try {
      (void)v41::decoder_first_layer(c);
      info_.supports_decoder_replay = true;
    } catch (const core::Error&) {
      info_.supports_decoder_replay = false;  // no CED encoder/decoder split in this config
    }
  }

  const ModelInfo& info() const override { return info_; }
  core::ThreadPool& pool() override { return *opt_.pool; }

  std::unique_ptr<SequenceState> new_sequence() override {
    auto s = std::make_unique<V41Seq>();
    s->seq = std::make_unique<v41::Sequence>(*ck_, map_ ? &*map_ : nullptr, opt_, weights_);
    return s;
  }

  void forward(std::span<const ForwardItem> items, std::vector<float>& logits) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v41::Sequence*> seqs;
    std::vector<std::vector<int32_t>> ids;
    std::vector<int64_t> rows;
    std::vector<size_t> batched, replayed;  // indices into seqs: one pass together, or alone
    for (size_t i = 0; i < items.size(); ++i) {
      const ForwardItem& it = items[i];
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      DSINFER_CHECK(it.logit_rows >= 0 && it.logit_rows <= n, "forward: item ", i, " asks for ", it.logit_rows,
                    " logit rows of ", n, " tokens");
      const int64_t K = it.decoder_replay_tokens;
      DSINFER_CHECK(K >= 0 && (K == 0 || info_.supports_decoder_replay), "forward: item ", i,
                    " asks for a decoder replay of ", K, " tokens, which this model ",
                    info_.supports_decoder_replay ? "cannot take" : "has no encoder/decoder split for");
      if (n == 0) continue;
      // A chunk the replay shortens runs alone (its rows leave the batch at the first decoder layer).
      const bool replays = K > 0 && n > K;
      seq(*it.seq).set_decoder_replay_tokens(replays ? K : 0);
      (replays ? replayed : batched).push_back(seqs.size());
      seqs.push_back(&seq(*it.seq));
      ids.emplace_back(it.tokens.begin(), it.tokens.end());
      rows.push_back(it.logit_rows);
    }
    if (seqs.empty()) return;
    const size_t from = logits.size();
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    // The usual step (no item replays): the head writes every item's rows straight into the engine's
    // buffer, in item order. No per-step logits of the model's, no per-item copies: each such buffer
    // (16 x vocab floats at 16 streams) sits above glibc's mmap threshold and faulted in afresh every step.
    if (replayed.empty()) {
      v41::Sequence::forward_batch_into(seqs, ids, rows, logits);
      DSINFER_CHECK(static_cast<int64_t>(logits.size() - from) == total * info_.vocab_size,
                    "forward: the model returned ", logits.size() - from, " logits, ", total, " rows wanted");
      return;
    }
    logits.reserve(from + static_cast<size_t>(total * info_.vocab_size));  // one allocation, not one per item
    std::vector<std::vector<float>> out(seqs.size());
    auto run = [&](const std::vector<size_t>& which) {
      if (which.empty()) return;
      std::vector<v41::Sequence*> s;
      std::vector<std::vector<int32_t>> x;
      std::vector<int64_t> r;
      for (size_t k : which) {
        s.push_back(seqs[k]);
        x.push_back(std::move(ids[k]));
        r.push_back(rows[k]);
      }
      std::vector<std::vector<float>> o = v41::Sequence::forward_batch(s, x, r);
      for (size_t j = 0; j < which.size(); ++j) out[which[j]] = std::move(o[j]);
    };
    // One pass through the layers for all other items (each weight read once per step).
    run(batched);
    for (size_t k : replayed) run({k});
    for (size_t i = 0; i < out.size(); ++i) {
      DSINFER_CHECK(static_cast<int64_t>(out[i].size()) == rows[i] * info_.vocab_size, "forward: the model returned ",
                    out[i].size(), " logits");
      logits.insert(logits.end(), out[i].begin(), out[i].end());
    }
  }

  void truncate(SequenceState& s, int64_t length) override { seq(s).truncate(length); }

  std::shared_ptr<const KvBlock> block(const SequenceState& s, int64_t index) override {
    const v41::Sequence& q = seq(s);
    DSINFER_CHECK(index >= 0 && (index + 1) * kBlock <= q.length(), "block ", index,
                  " of the sequence is not complete (", q.length(), " positions)");
    return std::make_shared<V41Block>(q.export_range(index * kBlock, (index + 1) * kBlock));
  }

  std::vector<uint8_t> export_block(const KvBlock& b) override {
    const auto* vb = dynamic_cast<const V41Block*>(&b);
    DSINFER_CHECK(vb != nullptr, "export_block: a block that this model did not make");
    return encode_v41_state(vb->range, V41StateKind::kBlock, info_.cache_layout, vb->range.begin / kBlock);
  }

  // Touches only the immutable config and layout (runs beside the other calls).
  std::shared_ptr<const KvBlock> import_block(int64_t index, std::span<const uint8_t> bytes) override {
    v41::StateRange r = decode_v41_state(bytes, V41StateKind::kBlock, info_.cache_layout, index, ck_->config());
    DSINFER_CHECK(r.begin == index * kBlock && r.end == r.begin + kBlock, "import_block: positions [", r.begin, ", ",
                  r.end, ") are not block ", index);
    return std::make_shared<V41Block>(std::move(r));
  }

  // The whole state [0, length()) as one range: enough to continue exactly at any length.
  std::vector<uint8_t> export_sequence(const SequenceState& s) override {
    const v41::Sequence& q = seq(s);
    return encode_v41_state(q.export_range(0, q.length()), V41StateKind::kSequence, info_.cache_layout, -1);
  }

  std::unique_ptr<SequenceState> import_sequence(std::span<const uint8_t> bytes) override {
    const v41::StateRange r = decode_v41_state(bytes, V41StateKind::kSequence, info_.cache_layout, -1, ck_->config());
    DSINFER_CHECK(r.begin == 0, "import_sequence: the state starts at ", r.begin, ", not 0");
    auto s = new_sequence();
    if (r.end > 0) seq(*s).append_range(r);
    return s;
  }

  // The DSpark round after each sequence's last position, anchored on its pending token; the taps it
  // reads are kept for every position (blocks included), so nothing is fed to the drafter separately
  // and nothing needs undoing.
  std::vector<int32_t> draft(std::span<const DraftItem> items) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> out;
    for (const DraftItem& it : items) {
      DSINFER_CHECK(it.count >= 1 && it.count <= info_.max_draft_tokens, "draft: ", it.count,
                    " drafts asked, the model allows 1 to ", info_.max_draft_tokens);
      const std::vector<int32_t> d = seq(*it.seq).dspark_round(it.last_token, it.count);
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }

  std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& s) override {
    const int64_t p = s.length();
    DSINFER_CHECK(p % kBlock == 0, "snapshot at ", p, ", not a block boundary");
    return std::make_shared<V41Snapshot>(p);
  }

  void attach(SequenceState& s, std::span<const std::shared_ptr<const KvBlock>> blocks,
              const WindowSnapshot* snapshot) override {
    v41::Sequence& q = seq(s);
    DSINFER_CHECK(q.length() == 0, "attach: the sequence already has ", q.length(), " positions");
    const int64_t h = static_cast<int64_t>(blocks.size()) * kBlock;
    if (snapshot) {
      DSINFER_CHECK(dynamic_cast<const V41Snapshot*>(snapshot) != nullptr,
                    "attach: a snapshot that this model did not make");
      DSINFER_CHECK(snapshot->position() == h, "attach: a snapshot at ", snapshot->position(), " for ", blocks.size(),
                    " blocks");
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto* vb = dynamic_cast<const V41Block*>(blocks[i].get());
      DSINFER_CHECK(vb != nullptr, "attach: a block that this model did not make");
      DSINFER_CHECK(vb->range.begin == static_cast<int64_t>(i) * kBlock, "attach: block ", i, " holds positions from ",
                    vb->range.begin);
      q.append_range(vb->range);
    }
    // Replay: start the last window over. The blocks hold every position's state, so this is a plain
    // rollback and feeding the window again recomputes it bit for bit (exact, unlike V4's replay).
    if (!snapshot) q.truncate(h - std::min<int64_t>(info_.window, h));
  }

  // The block the cache holds was computed from the same tokens by the same numerics; it is adopted
  // when it is bitwise this sequence's own (the sequence keeps its copy: its arrays are contiguous).
  bool adopt_block(SequenceState& s, int64_t index, const std::shared_ptr<const KvBlock>& shared) override {
    const auto* vb = dynamic_cast<const V41Block*>(shared.get());
    if (vb == nullptr) return false;
    const v41::StateRange own = seq(s).export_range(index * kBlock, (index + 1) * kBlock);
    const v41::StateRange& o = vb->range;
    if (own.begin != o.begin || own.end != o.end || own.ids != o.ids || own.cid != o.cid ||
        own.sources.size() != o.sources.size() || !same_bits(own.windows, o.windows) || !same_bits(own.taps, o.taps)) {
      return false;
    }
    for (size_t i = 0; i < own.sources.size(); ++i) {
      const auto &a = own.sources[i], &b = o.sources[i];
      if (a.layer != b.layer || a.ratio != b.ratio || !same_bits(a.u, b.u) || !same_bits(a.g, b.g) ||
          !same_bits(a.ckv, b.ckv) || !same_bits(a.ik, b.ik)) {
        return false;
      }
    }
    return true;
  }

 private:
  static constexpr int64_t kBlock = 128;
  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  static bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_bits(a[i], b[i])) return false;
    }
    return true;
  }
  static v41::Sequence& seq(SequenceState& s) { return *static_cast<V41Seq&>(s).seq; }
  static const v41::Sequence& seq(const SequenceState& s) { return *static_cast<const V41Seq&>(s).seq; }

  std::unique_ptr<model::Checkpoint> ck_;
  std::optional<v41::EngramTokenMap> map_;
  std::unique_ptr<core::ThreadPool> own_pool_;
  v41::PrefillOptions opt_;
  std::shared_ptr<v41::PreparedWeights> weights_;
  ModelInfo info_;
  std::mutex mu_;  // guards the shared prepared weights (forward)
};

}  // namespace

std::shared_ptr<ModelRunner> open_v41_model(const std::string& dir, const V41RunnerOptions& options) {
  auto ck = model::Checkpoint::open(dir);
  DSINFER_CHECK(ck->config().arch == model::Architecture::kDeepseekV41, dir, " is a ", ck->config().architecture,
                " checkpoint, not DeepseekV41ForCausalLM");
  std::optional<v41::EngramTokenMap> map;
  if (ck->config().engram) map = v41::load_engram_token_map(dir, ck->config());
  std::unique_ptr<core::ThreadPool> own_pool;
  v41::PrefillOptions opt;
  opt.qdq = options.qdq;
  opt.fast = options.fast;
  opt.pool = options.pool;
  if (opt.pool == nullptr && options.threads > 0) {
    own_pool = std::make_unique<core::ThreadPool>(options.threads);
    opt.pool = own_pool.get();
  }
  if (opt.pool == nullptr) opt.pool = &core::ThreadPool::global();
  std::string identity = checkpoint_identity(dir);
  identity = "deepseek_v41:" + identity.substr(identity.find(':') + 1) + "; numerics " +
             (options.fast ? "fast" : "exact") + ", qdq " +
             (options.qdq ? "on" : "off");
  return std::make_shared<V41Runner>(std::move(ck), std::move(map), opt, std::move(own_pool), std::move(identity));
}

}  // namespace dsinfer::engine
