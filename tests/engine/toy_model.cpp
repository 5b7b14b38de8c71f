#include "toy_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace dsinfer::engine::testing {

struct ToyModel::Block final : KvBlock {
  Block(int64_t i, const Vec& s, std::shared_ptr<std::atomic<int64_t>> c) : index(i), summary(s), counter(std::move(c)) {
    if (counter) ++*counter;
  }
  ~Block() override {
    if (counter) --*counter;
  }
  int64_t index;
  Vec summary;
  std::shared_ptr<std::atomic<int64_t>> counter;
};

struct ToyModel::Snapshot final : WindowSnapshot {
  Snapshot(int64_t p, std::shared_ptr<std::atomic<int64_t>> c) : pos(p), counter(std::move(c)) { ++*counter; }
  ~Snapshot() override { --*counter; }
  int64_t position() const override { return pos; }
  int64_t bytes() const override { return bytes_charged; }
  int64_t pos;
  int64_t bytes_charged = 0;
  int64_t floor = 0;
  std::map<int64_t, Vec> window;
  std::shared_ptr<std::atomic<int64_t>> counter;
};

struct ToyModel::Seq final : SequenceState {
  explicit Seq(ToyModel* m, bool registered = true) : model(m), counted(registered) {
    if (counted) model->seqs_.insert(this);
  }
  Seq(const Seq& o) = default;  // scratch copies for drafting (not registered)
  ~Seq() override {
    if (counted) model->seqs_.erase(this);
  }
  int64_t length() const override { return len; }
  ToyModel* model;
  bool counted = true;
  int64_t len = 0;
  int64_t floor = 0;
  int64_t attached = 0;
  std::map<int64_t, Vec> h;
  std::vector<std::shared_ptr<const Block>> blocks;
};

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float uniform_pm1(uint64_t& s) { return static_cast<float>(static_cast<double>(splitmix(s) >> 11) * 0x1.0p-52 - 1.0); }

}  // namespace

ToyModel::ToyModel(const ToyConfig& config)
    : config_(config),
      live_blocks_(std::make_shared<std::atomic<int64_t>>(0)),
      live_snapshots_(std::make_shared<std::atomic<int64_t>>(0)) {
  info_.identity = "toy-model seed " + std::to_string(config.seed);
  info_.cache_layout = "toy block " + std::to_string(config.block_tokens) + " window " + std::to_string(config.window);
  info_.vocab_size = config.vocab;
  info_.eos_token_id = config.eos;
  info_.max_context = config.max_context;
  info_.window = config.window;
  info_.block_tokens = config.block_tokens;
  info_.block_bytes = config.block_bytes;
  info_.sequence_bytes = config.sequence_bytes;
  info_.snapshot_bytes = config.snapshot_bytes;
  info_.max_draft_tokens = config.max_draft;
  info_.supports_replay = config.replay;
  uint64_t s = config.seed;
  const int D = kDim;
  emb_.resize(static_cast<size_t>(config.vocab) * D);
  head_.resize(emb_.size());
  for (float& x : emb_) x = uniform_pm1(s);
  for (float& x : head_) x = uniform_pm1(s);
  emb_draft_ = emb_;
  for (float& x : emb_draft_) x += config.drafter_noise * uniform_pm1(s);
  mix_window_.resize(D * D);
  mix_blocks_.resize(D * D);
  for (float& x : mix_window_) x = config.window_gain * uniform_pm1(s) / std::sqrt(static_cast<float>(D));
  for (float& x : mix_blocks_) x = 0.5f * uniform_pm1(s) / std::sqrt(static_cast<float>(D));
}

ToyModel::~ToyModel() = default;

std::unique_ptr<SequenceState> ToyModel::new_sequence() {
  auto s = std::make_unique<Seq>(this);
  note_bytes();
  return s;
}

int64_t ToyModel::live_bytes() const {
  int64_t partial = 0;
  for (const Seq* s : seqs_) partial += s->len % config_.block_tokens != 0;
  return static_cast<int64_t>(seqs_.size()) * config_.sequence_bytes +
         (live_blocks_->load() + partial) * config_.block_bytes + live_snapshots_->load() * config_.snapshot_bytes;
}

void ToyModel::note_bytes() {
  const int64_t now = live_bytes();
  int64_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
}

ToyModel::Vec ToyModel::step(Seq& s, int32_t token, int64_t pos, const std::vector<float>* emb) const {
  const int D = kDim;
  const int64_t B = config_.block_tokens;
  DSINFER_CHECK(token >= 0 && token < config_.vocab, "toy: token ", token, " out of range");
  Vec ctx{};
  int n = 0;
  for (int64_t q = std::max<int64_t>(s.floor, pos - config_.window + 1); q < pos; ++q) {
    auto it = s.h.find(q);
    DSINFER_CHECK(it != s.h.end(), "toy: window position ", q, " of position ", pos, " is unknown");
    for (int d = 0; d < D; ++d) ctx[d] += it->second[d];
    ++n;
  }
  if (n > 0) {
    for (float& x : ctx) x /= static_cast<float>(n);
  }
  Vec comp{};
  const int64_t nb = pos / B;
  DSINFER_CHECK(static_cast<int64_t>(s.blocks.size()) >= nb, "toy: block ", s.blocks.size(), " missing at position ",
                pos);
  for (int64_t b = 0; b < nb; ++b) {
    for (int d = 0; d < D; ++d) comp[d] += s.blocks[b]->summary[d];
  }
  if (nb > 0) {
    for (float& x : comp) x /= static_cast<float>(nb);
  }
  const std::vector<float>& e = emb ? *emb : emb_;
  Vec h{};
  for (int i = 0; i < D; ++i) {
    float acc = e[static_cast<size_t>(token) * D + i];
    for (int j = 0; j < D; ++j) acc += mix_window_[i * D + j] * ctx[j] + mix_blocks_[i * D + j] * comp[j];
    h[i] = std::tanh(acc);
  }
  s.h[pos] = h;
  s.len = pos + 1;
  if ((pos + 1) % B == 0) {
    const int64_t b = pos / B;
    if (b >= s.attached) {
      DSINFER_CHECK(static_cast<int64_t>(s.blocks.size()) == b, "toy: block ", b, " completed out of order");
      Vec sum{};
      for (int64_t q = b * B; q <= pos; ++q) {
        auto it = s.h.find(q);
        DSINFER_CHECK(it != s.h.end(), "toy: block ", b, " position ", q, " unknown");
        for (int d = 0; d < D; ++d) sum[d] += it->second[d];
      }
      for (float& x : sum) x /= static_cast<float>(B);
      s.blocks.push_back(std::make_shared<const Block>(b, sum, s.counted ? live_blocks_ : nullptr));
    }
  }
  return h;
}

void ToyModel::logits_of(const Vec& h, float* out) const {
  for (int32_t v = 0; v < config_.vocab; ++v) {
    float acc = 0;
    for (int d = 0; d < kDim; ++d) acc += head_[static_cast<size_t>(v) * kDim + d] * h[d];
    out[v] = config_.logit_scale * acc;
  }
}

namespace {
// Keeps what later positions can still need: the window plus the rollback depth, and the current block.
void prune(ToyModel::Seq& s, int64_t window, int64_t max_draft, int64_t block) {
  // A rollback may reopen the block that just completed: keep all of it.
  const int64_t keep_from = std::min(s.len - window - max_draft - 1, (s.len - max_draft - 1) / block * block);
  s.h.erase(s.h.begin(), s.h.lower_bound(keep_from));
}
}  // namespace

void ToyModel::forward(std::span<const ForwardItem> items, std::vector<float>& logits) {
  if (before_forward) before_forward();
  ++forward_calls_;
  logits_buffers_.push_back({logits.data(), logits.size(), logits.capacity(), 0});
  int64_t step_tokens = 0;
  for (const ForwardItem& it : items) {
    auto& s = dynamic_cast<Seq&>(*it.seq);
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    DSINFER_CHECK(n > 0 && it.logit_rows >= 0 && it.logit_rows <= n, "toy: bad forward item");
    for (int64_t i = 0; i < n; ++i) {
      Vec h = step(s, it.tokens[i], s.len, nullptr);
      if (i >= n - it.logit_rows) {
        logits.resize(logits.size() + config_.vocab);
        logits_of(h, logits.data() + logits.size() - config_.vocab);
      }
    }
    prune(s, config_.window, config_.max_draft, config_.block_tokens);
    step_tokens += n;
  }
  logits_buffers_.back().size_out = logits.size();
  tokens_fed_ += step_tokens;
  max_step_tokens_ = std::max(max_step_tokens_, step_tokens);
  note_bytes();
}

void ToyModel::truncate(SequenceState& seq, int64_t length) {
  auto& s = dynamic_cast<Seq&>(seq);
  DSINFER_CHECK(length <= s.len && length >= s.len - config_.max_draft - 1, "toy: truncate from ", s.len, " to ",
                length, " is deeper than the rollback depth");
  s.h.erase(s.h.lower_bound(length), s.h.end());
  const int64_t keep = length / config_.block_tokens;
  DSINFER_CHECK(keep >= s.attached, "toy: truncate into attached blocks");
  if (static_cast<int64_t>(s.blocks.size()) > keep) s.blocks.resize(keep);
  s.len = length;
}

std::shared_ptr<const KvBlock> ToyModel::block(const SequenceState& seq, int64_t index) {
  const auto& s = dynamic_cast<const Seq&>(seq);
  DSINFER_CHECK(index >= 0 && index < static_cast<int64_t>(s.blocks.size()), "toy: block ", index,
                " is not complete");
  return s.blocks[index];
}

bool ToyModel::adopt_block(SequenceState& seq, int64_t index, const std::shared_ptr<const KvBlock>& shared) {
  if (!config_.adopt) return false;
  auto& s = dynamic_cast<Seq&>(seq);
  auto b = std::dynamic_pointer_cast<const Block>(shared);
  DSINFER_CHECK(b && b->index == index && index < static_cast<int64_t>(s.blocks.size()), "toy: bad adopt of block ",
                index);
  // Identical inputs give identical summaries: the twin is exactly this block.
  DSINFER_CHECK(b->summary == s.blocks[index]->summary, "toy: adopted block ", index, " differs");
  s.blocks[index] = b;
  return true;
}

namespace {
// Toy export format: magic, version, block index, the summary.
constexpr uint32_t kToyBlockMagic = 0x4B4C4254;  // "TBLK"
constexpr uint32_t kToyBlockVersion = 1;
constexpr size_t kToyBlockBytes = 4 + 4 + 8 + sizeof(ToyModel::Vec);
}  // namespace

std::vector<uint8_t> ToyModel::export_block(const KvBlock& block) {
  const auto* b = dynamic_cast<const Block*>(&block);
  DSINFER_CHECK(b != nullptr, "toy: export of a foreign block");
  std::vector<uint8_t> out(kToyBlockBytes);
  std::memcpy(out.data(), &kToyBlockMagic, 4);
  std::memcpy(out.data() + 4, &kToyBlockVersion, 4);
  std::memcpy(out.data() + 8, &b->index, 8);
  std::memcpy(out.data() + 16, b->summary.data(), sizeof(Vec));
  return out;
}

std::shared_ptr<const KvBlock> ToyModel::import_block(int64_t index, std::span<const uint8_t> bytes) {
  DSINFER_CHECK(bytes.size() == kToyBlockBytes, "toy: block bytes of size ", bytes.size());
  uint32_t magic = 0, version = 0;
  int64_t stored_index = -1;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&stored_index, bytes.data() + 8, 8);
  DSINFER_CHECK(magic == kToyBlockMagic && version == kToyBlockVersion && stored_index == index,
                "toy: foreign block bytes");
  Vec summary;
  std::memcpy(summary.data(), bytes.data() + 16, sizeof(Vec));
  ++imported_blocks_;
  return std::make_shared<const Block>(index, summary, live_blocks_);
}

std::shared_ptr<const WindowSnapshot> ToyModel::snapshot(const SequenceState& seq) {
  const auto& s = dynamic_cast<const Seq&>(seq);
  DSINFER_CHECK(s.len % config_.block_tokens == 0, "toy: snapshot at unaligned position ", s.len);
  auto snap = std::make_shared<Snapshot>(s.len, live_snapshots_);
  snap->bytes_charged = config_.snapshot_bytes;
  snap->floor = s.floor;
  for (auto it = s.h.lower_bound(s.len - config_.window); it != s.h.end(); ++it) snap->window.insert(*it);
  note_bytes();
  return snap;
}

void ToyModel::attach(SequenceState& seq, std::span<const std::shared_ptr<const KvBlock>> blocks,
                      const WindowSnapshot* snapshot) {
  auto& s = dynamic_cast<Seq&>(seq);
  DSINFER_CHECK(s.len == 0 && s.blocks.empty(), "toy: attach to a used sequence");
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto b = std::dynamic_pointer_cast<const Block>(blocks[i]);
    DSINFER_CHECK(b && b->index == static_cast<int64_t>(i), "toy: attached block ", i, " is not block ", i);
    s.blocks.push_back(b);
  }
  const int64_t h = static_cast<int64_t>(blocks.size()) * config_.block_tokens;
  s.attached = static_cast<int64_t>(blocks.size());
  if (snapshot) {
    const auto* snap = dynamic_cast<const Snapshot*>(snapshot);
    DSINFER_CHECK(snap && snap->pos == h, "toy: snapshot at ", snapshot->position(), " does not end the blocks at ", h);
    s.h = snap->window;
    s.floor = snap->floor;
    s.len = h;
  } else {
    DSINFER_CHECK(config_.replay, "toy: attach without a snapshot needs replay support");
    s.len = h - std::min<int64_t>(config_.window, h);
    s.floor = s.len;
  }
}

std::vector<int32_t> ToyModel::draft(std::span<const DraftItem> items) {
  std::vector<int32_t> out;
  std::vector<float> row(config_.vocab);
  for (const DraftItem& it : items) {
    Seq scratch = dynamic_cast<const Seq&>(*it.seq);
    scratch.counted = false;
    int32_t tok = it.last_token;
    for (int32_t i = 0; i < it.count; ++i) {
      Vec h = step(scratch, tok, scratch.len, &emb_draft_);
      logits_of(h, row.data());
      tok = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      out.push_back(tok);
    }
  }
  return out;
}

std::vector<float> ToyModel::reference_logits(const std::vector<int32_t>& tokens) {
  Seq s(this, false);
  Vec h{};
  for (size_t i = 0; i < tokens.size(); ++i) h = step(s, tokens[i], static_cast<int64_t>(i), nullptr);
  std::vector<float> out(config_.vocab);
  logits_of(h, out.data());
  return out;
}

}  // namespace dsinfer::engine::testing
