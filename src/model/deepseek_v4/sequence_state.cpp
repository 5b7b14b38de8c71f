#include "model/deepseek_v4/sequence_state.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

constexpr uint64_t kSnapshotMagic = 0x31504e5334565344ull;  // "DSV4SNP1"

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void pod(const T& v) {
    raw(reinterpret_cast<const uint8_t*>(&v), sizeof(T));
  }
  void raw(const uint8_t* p, size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    if (n > 0) std::memcpy(out_.data() + at, p, n);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    raw(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n) {
    DSINFER_CHECK(pos_ + n <= in_.size(), "window snapshot is truncated (needs ", pos_ + n, " bytes, has ", in_.size(),
                  ")");
    const uint8_t* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::string str() {
    const auto n = pod<uint64_t>();
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

void write_rows(Writer& w, const PositionRing& ring, int64_t from, int64_t to) {
  from = std::max(from, ring.begin());
  w.pod<int64_t>(from);
  w.pod<int64_t>(to);
  w.pod<uint64_t>(ring.row_bytes());
  for (int64_t p = from; p < to; ++p) w.raw(ring.row(p), ring.row_bytes());
}

void read_rows(Reader& r, PositionRing& ring, int64_t expect_end) {
  const auto from = r.pod<int64_t>();
  const auto to = r.pod<int64_t>();
  const auto row_bytes = r.pod<uint64_t>();
  DSINFER_CHECK(row_bytes == ring.row_bytes() && to == expect_end && from <= to && from >= 0,
                "window snapshot does not match this model's state layout");
  ring.reset(from);
  ring.extend(to);
  for (int64_t p = from; p < to; ++p) std::memcpy(ring.row(p), r.take(row_bytes), row_bytes);
}

}  // namespace

WindowSnapshot WindowSnapshot::from_bytes(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  DSINFER_CHECK(bytes.size() >= 24 && r.pod<uint64_t>() == kSnapshotMagic, "not a DeepSeek-V4 window snapshot");
  WindowSnapshot s;
  s.length_ = r.pod<int64_t>();
  s.mtp_length_ = r.pod<int64_t>();
  s.data_.assign(bytes.begin(), bytes.end());
  return s;
}

SequenceState::SequenceState(std::shared_ptr<const ModelShape> shape) : shape_(std::move(shape)) {
  const ModelShape& s = *shape_;
  layers_.resize(s.layers.size());
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerShape& ls = s.layers[l];
    LayerState& st = layers_[l];
    st.window = PositionRing(s.kv.bytes(), s.window + s.max_draft);
    if (ls.compressed()) {
      const int64_t c = ls.csa() ? 2 : 1;
      st.tail = PositionRing(2 * c * s.head_dim * sizeof(float), ls.ratio * c + s.max_draft + 1);
      if (ls.csa()) st.index_tail = PositionRing(2 * 2 * s.index_dim * sizeof(float), 2 * ls.ratio + s.max_draft + 1);
    }
  }
}

size_t SequenceState::tail_keep_from(const LayerShape& ls, int64_t len) const {
  const int64_t group_start = (len / ls.ratio) * ls.ratio;
  return static_cast<size_t>(std::max<int64_t>(0, group_start - (ls.csa() ? ls.ratio : 0)));
}

void SequenceState::reset_rings(int64_t pos) {
  for (auto& st : layers_) {
    st.window.reset(pos);
    st.tail.reset(pos);
    st.index_tail.reset(pos);
  }
}

void SequenceState::begin_step(int64_t n) {
  DSINFER_CHECK(!needs_window_, "sequence was attached to cached blocks but has no window state yet: call restore() "
                                "or begin_bounded_replay() before forward");
  const ModelShape& s = *shape_;
  rollback_floor_ = length_;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerShape& ls = s.layers[l];
    LayerState& st = layers_[l];
    st.window.drop_before(std::max(window_floor_, length_ - s.window + 1));
    st.window.shrink_for(n);
    st.window.extend(length_ + n);
    if (ls.compressed()) {
      const int64_t keep = static_cast<int64_t>(tail_keep_from(ls, length_));
      st.tail.drop_before(keep);
      st.tail.shrink_for(n);
      st.tail.extend(length_ + n);
      if (ls.csa()) {
        st.index_tail.drop_before(keep);
        st.index_tail.shrink_for(n);
        st.index_tail.extend(length_ + n);
      }
    }
  }
  // Create every block this step can write to now, so the forward may fill entries from many threads.
  if (n > 0 && !s.blocks->parts().empty() && length_ + n > replay_end_) {
    const int64_t last_block = (length_ + n - 1) / s.block_tokens;
    while (static_cast<int64_t>(full_.size() + pending_.size()) <= last_block)
      pending_.push_back(
          std::make_shared<CompressedBlock>(s.blocks, static_cast<int64_t>(full_.size() + pending_.size())));
  }
}

void SequenceState::end_step(int64_t n) {
  length_ += n;
  freeze_full_blocks();
}

void SequenceState::release_rollback() {
  const ModelShape& s = *shape_;
  rollback_floor_ = length_;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerShape& ls = s.layers[l];
    LayerState& st = layers_[l];
    st.window.drop_before(std::max(window_floor_, length_ - s.window + 1));
    st.window.shrink_for(s.max_draft + 1);
    if (ls.compressed()) {
      const int64_t keep = static_cast<int64_t>(tail_keep_from(ls, length_));
      st.tail.drop_before(keep);
      st.tail.shrink_for(s.max_draft + 1);
      if (ls.csa()) {
        st.index_tail.drop_before(keep);
        st.index_tail.shrink_for(s.max_draft + 1);
      }
    }
  }
}

void SequenceState::begin_mtp_step(int64_t n) {
  DSINFER_CHECK(!needs_window_, "sequence has no window state yet (attached prefix without restore/replay)");
  DSINFER_CHECK(shape_->has_mtp, "this model has no MTP block");
  // MTP row p used the token at p + 1: rows whose token may still be rolled back (p + 1 >= the main
  // model's rollback floor), and every row since (chained drafts), stay revocable.
  mtp_rollback_floor_ = std::max(mtp_rollback_floor_, std::min(mtp_length_, rollback_floor_ - 1));
  PositionRing& w = layers_.back().window;
  w.drop_before(std::max(mtp_floor_, mtp_rollback_floor_ - shape_->window + 1));
  w.shrink_for(n);
  w.extend(mtp_length_ + n);
}

void SequenceState::end_mtp_step(int64_t n) { mtp_length_ += n; }

void SequenceState::freeze_full_blocks() {
  const int64_t B = shape_->block_tokens;
  const int64_t ce = compressed_end();
  while (!pending_.empty() && (static_cast<int64_t>(full_.size()) + 1) * B <= ce) {
    full_.push_back(std::move(pending_.front()));
    pending_.erase(pending_.begin());
  }
}

void SequenceState::unfreeze_above(int64_t end) {
  const int64_t B = shape_->block_tokens;
  const int64_t keep_full = end / B;
  // Blocks without any surviving entry go away; a full block that becomes partial is copied back
  // into the writable set (it may be shared, so it is never modified in place).
  while (!pending_.empty() && pending_.back()->index() * B >= end) pending_.pop_back();
  while (static_cast<int64_t>(full_.size()) > keep_full) {
    const BlockRef& last = full_.back();
    if (last->index() * B < end) pending_.insert(pending_.begin(), std::make_shared<CompressedBlock>(*last));
    full_.pop_back();
  }
}

void SequenceState::truncate(int64_t new_length) {
  DSINFER_CHECK(new_length >= rollback_floor_ && new_length <= length_, "truncate(", new_length,
                "): a sequence of length ", length_, " can only be rolled back to [", rollback_floor_, ", ", length_,
                "] (the length before its last forward call)");
  length_ = new_length;
  unfreeze_above(compressed_end());
  for (int64_t l = 0; l < shape_->n_layers; ++l) {
    LayerState& st = layers_[l];
    st.window.truncate(new_length);
    st.tail.truncate(new_length);
    st.index_tail.truncate(new_length);
  }
  // MTP row p was built with token p+1; rows whose token position was dropped are stale.
  const int64_t mtp_keep = std::max<int64_t>(0, new_length - 1);
  if (shape_->has_mtp && mtp_length_ > mtp_keep) truncate_mtp(std::max(mtp_keep, mtp_rollback_floor_));
}

void SequenceState::truncate_mtp(int64_t new_length) {
  DSINFER_CHECK(new_length >= mtp_rollback_floor_ && new_length <= mtp_length_, "truncate_mtp(", new_length,
                "): MTP rows can only be rolled back to [", mtp_rollback_floor_, ", ", mtp_length_, "]");
  mtp_length_ = new_length;
  if (shape_->has_mtp) layers_.back().window.truncate(new_length);
}

void SequenceState::attach_prefix(std::span<const BlockRef> blocks) {
  DSINFER_CHECK(length_ == 0 && mtp_length_ == 0 && full_.empty() && pending_.empty(),
                "attach_prefix needs a fresh sequence (this one has length ", length_, ")");
  for (size_t i = 0; i < blocks.size(); ++i) {
    DSINFER_CHECK(blocks[i] != nullptr, "attach_prefix: block ", i, " is null");
    DSINFER_CHECK(blocks[i]->index() == static_cast<int64_t>(i), "attach_prefix: block ", i, " covers block index ",
                  blocks[i]->index(), " (blocks must be given in order from position 0)");
    DSINFER_CHECK(blocks[i]->layout_ptr() == shape_->blocks ||
                      blocks[i]->layout().describe() == shape_->blocks->describe(),
                  "attach_prefix: block ", i, " was made with a different layout (", blocks[i]->layout().describe(),
                  ") than this model's (", shape_->blocks->describe(), ")");
  }
  if (blocks.empty()) return;
  full_.assign(blocks.begin(), blocks.end());
  const int64_t h = static_cast<int64_t>(blocks.size()) * shape_->block_tokens;
  length_ = mtp_length_ = h;
  replay_end_ = h;
  rollback_floor_ = mtp_rollback_floor_ = h;
  reset_rings(h);
  needs_window_ = true;
}

int64_t SequenceState::begin_bounded_replay() {
  DSINFER_CHECK(needs_window_, "begin_bounded_replay needs a sequence just attached to cached blocks");
  const int64_t h = replay_end_;
  const int64_t s = h - std::min(shape_->window, h);
  length_ = mtp_length_ = s;
  window_floor_ = mtp_floor_ = s;
  rollback_floor_ = mtp_rollback_floor_ = s;
  reset_rings(s);
  needs_window_ = false;
  return s;
}

WindowSnapshot SequenceState::snapshot() const {
  DSINFER_CHECK(!needs_window_, "snapshot of a sequence without window state");
  const ModelShape& s = *shape_;
  WindowSnapshot snap;
  snap.length_ = length_;
  snap.mtp_length_ = mtp_length_;
  Writer w(snap.data_);
  w.pod(kSnapshotMagic);
  w.pod(length_);
  w.pod(mtp_length_);
  w.str(s.blocks->describe());
  w.pod<int64_t>(static_cast<int64_t>(layers_.size()));
  w.pod(window_floor_);
  w.pod(mtp_floor_);
  w.pod(replay_end_);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerShape& ls = s.layers[l];
    const LayerState& st = layers_[l];
    write_rows(w, st.window, length_ - s.window + 1, length_);
    if (ls.compressed()) {
      const int64_t keep = static_cast<int64_t>(tail_keep_from(ls, length_));
      write_rows(w, st.tail, keep, length_);
      if (ls.csa()) write_rows(w, st.index_tail, keep, length_);
    }
  }
  if (s.has_mtp) write_rows(w, layers_.back().window, mtp_length_ - s.window + 1, mtp_length_);
  const int64_t ce = compressed_end();
  const bool partial = ce % s.block_tokens != 0 && !pending_.empty();
  w.pod<uint8_t>(partial ? 1 : 0);
  if (partial) {
    const auto bytes = pending_.front()->bytes();
    w.raw(bytes.data(), bytes.size());
  }
  return snap;
}

void SequenceState::restore(const WindowSnapshot& snap) {
  const ModelShape& s = *shape_;
  Reader r(snap.bytes());
  DSINFER_CHECK(r.pod<uint64_t>() == kSnapshotMagic, "restore: not a DeepSeek-V4 window snapshot");
  const auto length = r.pod<int64_t>();
  const auto mtp_length = r.pod<int64_t>();
  const std::string layout = r.str();
  DSINFER_CHECK(layout == s.blocks->describe(), "restore: snapshot made for another layout (", layout, ")");
  DSINFER_CHECK(r.pod<int64_t>() == static_cast<int64_t>(layers_.size()), "restore: layer count differs");
  const auto window_floor = r.pod<int64_t>();
  const auto mtp_floor = r.pod<int64_t>();
  const auto replay_end = r.pod<int64_t>();
  const int64_t ce = std::max(length, replay_end);
  const int64_t nfull = ce / s.block_tokens;
  DSINFER_CHECK(static_cast<int64_t>(full_.size()) >= nfull, "restore: the snapshot at position ", length, " needs ",
                nfull, " full compressed blocks, the sequence holds ", full_.size());
  full_.resize(nfull);
  pending_.clear();
  length_ = length;
  mtp_length_ = mtp_length;
  window_floor_ = window_floor;
  mtp_floor_ = mtp_floor;
  replay_end_ = replay_end;
  rollback_floor_ = length;
  mtp_rollback_floor_ = mtp_length;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerShape& ls = s.layers[l];
    LayerState& st = layers_[l];
    read_rows(r, st.window, length);
    if (ls.compressed()) {
      read_rows(r, st.tail, length);
      if (ls.csa()) read_rows(r, st.index_tail, length);
    }
  }
  if (s.has_mtp) read_rows(r, layers_.back().window, mtp_length);
  if (r.pod<uint8_t>() != 0) {
    auto block = std::make_shared<CompressedBlock>(s.blocks, nfull);
    const auto bytes = r.take(s.blocks->bytes());
    std::memcpy(block->mutable_bytes().data(), bytes, s.blocks->bytes());
    pending_.push_back(std::move(block));
  }
  DSINFER_CHECK(r.done(), "restore: trailing bytes in window snapshot");
  needs_window_ = false;
}

StateMemory SequenceState::memory() const {
  StateMemory m;
  for (const auto& b : full_) m.full_blocks += b->bytes().size();
  for (const auto& b : pending_) m.pending_blocks += b->bytes().size();
  for (const auto& st : layers_) {
    m.windows += st.window.capacity_bytes();
    m.tails += st.tail.capacity_bytes() + st.index_tail.capacity_bytes();
  }
  return m;
}

const CompressedBlock& SequenceState::block_for(int part, int64_t g, int64_t* local) const {
  const auto& p = shape_->blocks->parts()[part];
  const int64_t b = g / p.entries;
  *local = g - b * p.entries;
  const int64_t nfull = static_cast<int64_t>(full_.size());
  if (b < nfull) return *full_[b];
  DSINFER_CHECK(b - nfull < static_cast<int64_t>(pending_.size()), "compressed entry ", g, " of layer ", p.layer,
                " does not exist");
  return *pending_[b - nfull];
}

CompressedBlock& SequenceState::writable_block_for(int part, int64_t g, int64_t* local) {
  const auto& p = shape_->blocks->parts()[part];
  const int64_t b = g / p.entries;
  *local = g - b * p.entries;
  const int64_t nfull = static_cast<int64_t>(full_.size());
  DSINFER_CHECK(b >= nfull, "compressed entry ", g, " of layer ", p.layer, " lies in a full (immutable) block");
  while (static_cast<int64_t>(pending_.size()) <= b - nfull)
    pending_.push_back(std::make_shared<CompressedBlock>(shape_->blocks, nfull + static_cast<int64_t>(pending_.size())));
  return *pending_[b - nfull];
}

const uint8_t* SequenceState::entry_kv(int part, int64_t g) const {
  int64_t local;
  return block_for(part, g, &local).kv(part, local);
}
const uint8_t* SequenceState::entry_key(int part, int64_t g) const {
  int64_t local;
  return block_for(part, g, &local).key(part, local);
}
uint8_t* SequenceState::writable_entry_kv(int part, int64_t g) {
  int64_t local;
  return writable_block_for(part, g, &local).kv(part, local);
}
uint8_t* SequenceState::writable_entry_key(int part, int64_t g) {
  int64_t local;
  return writable_block_for(part, g, &local).key(part, local);
}

}  // namespace dsinfer::model::deepseek_v4
