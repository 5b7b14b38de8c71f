#include "model/deepseek_v4/sequence_state.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "model/deepseek_v4/framed_bytes.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

constexpr uint64_t kSnapshotMagic = 0x31504e5334565344ull;  // "DSV4SNP1"
constexpr uint32_t kSnapshotVersion = 1;
constexpr size_t kMaxDescriptionBytes = 1 << 16;  // see compressed_block.cpp

void write_rows(FrameWriter& w, const PositionRing& ring, int64_t from, int64_t to) {
  from = std::max(from, ring.begin());
  w.pod<int64_t>(from);
  w.pod<int64_t>(to);
  w.pod<uint64_t>(ring.row_bytes());
  for (int64_t p = from; p < to; ++p) w.raw(ring.row(p), ring.row_bytes());
}

// Rows of one ring in a snapshot, checked against the layout but not yet copied anywhere.
struct RowsView {
  PositionRing* ring = nullptr;
  int64_t from = 0, to = 0;
  const uint8_t* data = nullptr;
};

// The rows must end at `end`, start in [lowest, highest] (the range the snapshot writer can produce:
// no more rows than the layout keeps, and every row attention will read) and have the ring's row size.
RowsView read_rows(FrameReader& r, PositionRing& ring, int64_t end, int64_t lowest, int64_t highest,
                   const char* which, int64_t layer) {
  RowsView v;
  v.ring = &ring;
  v.from = r.pod<int64_t>();
  v.to = r.pod<int64_t>();
  const auto row_bytes = r.pod<uint64_t>();
  DSINFER_CHECK(row_bytes == ring.row_bytes(), "window snapshot: ", which, " rows of layer ", layer, " are ", row_bytes,
                " bytes, this model's are ", ring.row_bytes(), " (made for another model)");
  DSINFER_CHECK(v.to == end && v.from >= lowest && v.from <= highest && v.from <= v.to, "window snapshot: ", which,
                " rows of layer ", layer, " cover [", v.from, ", ", v.to, "), expected to end at ", end,
                " and to start in [", lowest, ", ", highest, "]");
  const auto n = static_cast<uint64_t>(v.to - v.from);
  DSINFER_CHECK(row_bytes == 0 || n <= r.remaining() / row_bytes, "window snapshot: ", n, " ", which,
                " rows of layer ", layer, " run past the end of the snapshot");
  v.data = r.take(static_cast<size_t>(n * row_bytes));
  return v;
}

void copy_rows(const RowsView& v) {
  v.ring->reset(v.from);
  v.ring->extend(v.to);
  const size_t rb = v.ring->row_bytes();
  for (int64_t p = v.from; p < v.to; ++p) std::memcpy(v.ring->row(p), v.data + static_cast<size_t>(p - v.from) * rb, rb);
}

}  // namespace

WindowSnapshot WindowSnapshot::from_bytes(std::span<const uint8_t> bytes) {
  FrameReader r(bytes, kSnapshotMagic, kSnapshotVersion, "window snapshot");
  WindowSnapshot s;
  s.length_ = r.pod<int64_t>();
  s.mtp_length_ = r.pod<int64_t>();
  DSINFER_CHECK(s.length_ >= 0 && s.mtp_length_ >= 0 && s.mtp_length_ <= s.length_,
                "window snapshot: lengths ", s.length_, " (main) and ", s.mtp_length_,
                " (MTP) must satisfy 0 <= MTP <= main");
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
  DSINFER_CHECK_INTERNAL(!needs_window_, "sequence was attached to cached blocks but has no window state yet: call "
                                         "restore() or begin_bounded_replay() before forward");
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
  DSINFER_CHECK_INTERNAL(!needs_window_, "sequence has no window state yet (attached prefix without restore/replay)");
  DSINFER_CHECK_INTERNAL(shape_->has_mtp, "this model has no MTP block");
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
  DSINFER_CHECK_INTERNAL(new_length >= rollback_floor_ && new_length <= length_, "truncate(", new_length,
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
  DSINFER_CHECK_INTERNAL(new_length >= mtp_rollback_floor_ && new_length <= mtp_length_, "truncate_mtp(", new_length,
                "): MTP rows can only be rolled back to [", mtp_rollback_floor_, ", ", mtp_length_, "]");
  mtp_length_ = new_length;
  if (shape_->has_mtp) layers_.back().window.truncate(new_length);
}

void SequenceState::attach_prefix(std::span<const BlockRef> blocks) {
  DSINFER_CHECK_INTERNAL(length_ == 0 && mtp_length_ == 0 && full_.empty() && pending_.empty(),
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
  DSINFER_CHECK_INTERNAL(needs_window_, "begin_bounded_replay needs a sequence just attached to cached blocks");
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
  DSINFER_CHECK_INTERNAL(!needs_window_, "snapshot of a sequence without window state");
  const ModelShape& s = *shape_;
  WindowSnapshot snap;
  snap.length_ = length_;
  snap.mtp_length_ = mtp_length_;
  FrameWriter w(kSnapshotMagic, kSnapshotVersion);
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
  snap.data_ = w.finish();
  return snap;
}

void SequenceState::restore(const WindowSnapshot& snap) {
  const ModelShape& s = *shape_;
  // Every field is checked against this model's layout before the state changes: a rejected snapshot
  // leaves the sequence as it was.
  FrameReader r(snap.bytes(), kSnapshotMagic, kSnapshotVersion, "window snapshot");
  const auto length = r.pod<int64_t>();
  const auto mtp_length = r.pod<int64_t>();
  const std::string layout = r.str(kMaxDescriptionBytes);
  DSINFER_CHECK(layout == s.blocks->describe(), "restore: snapshot made for another layout (", layout, ")");
  DSINFER_CHECK(r.pod<int64_t>() == static_cast<int64_t>(layers_.size()), "restore: layer count differs");
  const auto window_floor = r.pod<int64_t>();
  const auto mtp_floor = r.pod<int64_t>();
  const auto replay_end = r.pod<int64_t>();
  DSINFER_CHECK(length >= 0 && mtp_length >= 0 && mtp_length <= length, "restore: lengths ", length, " (main) and ",
                mtp_length, " (MTP) must satisfy 0 <= MTP <= main");
  DSINFER_CHECK(window_floor >= 0 && window_floor <= length && mtp_floor >= 0 && mtp_floor <= length &&
                    replay_end >= 0,
                "restore: window floors ", window_floor, " / ", mtp_floor, " or replay end ", replay_end,
                " out of range for length ", length);
  const int64_t ce = std::max(length, replay_end);
  const int64_t nfull = ce / s.block_tokens;
  DSINFER_CHECK(static_cast<int64_t>(full_.size()) >= nfull, "restore: the snapshot at position ", length, " needs ",
                nfull, " full compressed blocks, the sequence holds ", full_.size());
  // Window rows: at most W - 1 below the length, and at least every row from the window floor on.
  auto window_lowest = [&](int64_t len) { return std::max<int64_t>(0, len - s.window + 1); };
  auto window_highest = [&](int64_t len, int64_t floor) { return std::max(window_lowest(len), floor); };
  std::vector<RowsView> rows;
  rows.reserve(3 * layers_.size());
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerShape& ls = s.layers[l];
    LayerState& st = layers_[l];
    rows.push_back(read_rows(r, st.window, length, window_lowest(length), window_highest(length, window_floor),
                             "window", l));
    if (ls.compressed()) {
      const auto keep = static_cast<int64_t>(tail_keep_from(ls, length));
      rows.push_back(read_rows(r, st.tail, length, keep, length, "compressor tail", l));
      if (ls.csa()) rows.push_back(read_rows(r, st.index_tail, length, keep, length, "indexer tail", l));
    }
  }
  if (s.has_mtp) {
    rows.push_back(read_rows(r, layers_.back().window, mtp_length, window_lowest(mtp_length),
                             window_highest(mtp_length, mtp_floor), "MTP window", s.n_layers));
  }
  const auto partial = r.pod<uint8_t>();
  DSINFER_CHECK(partial == 0 || (partial == 1 && ce % s.block_tokens != 0), "restore: unfinished-block flag ",
                int{partial}, " is invalid at compressed end ", ce);
  const uint8_t* partial_bytes = partial ? r.take(s.blocks->bytes()) : nullptr;
  r.expect_done();

  full_.resize(nfull);
  pending_.clear();
  length_ = length;
  mtp_length_ = mtp_length;
  window_floor_ = window_floor;
  mtp_floor_ = mtp_floor;
  replay_end_ = replay_end;
  rollback_floor_ = length;
  mtp_rollback_floor_ = mtp_length;
  for (const RowsView& v : rows) copy_rows(v);
  if (partial_bytes != nullptr) {
    auto block = std::make_shared<CompressedBlock>(s.blocks, nfull);
    std::memcpy(block->mutable_bytes().data(), partial_bytes, s.blocks->bytes());
    pending_.push_back(std::move(block));
  }
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
  DSINFER_CHECK_INTERNAL(b - nfull < static_cast<int64_t>(pending_.size()), "compressed entry ", g, " of layer ", p.layer,
                " does not exist");
  return *pending_[b - nfull];
}

CompressedBlock& SequenceState::writable_block_for(int part, int64_t g, int64_t* local) {
  const auto& p = shape_->blocks->parts()[part];
  const int64_t b = g / p.entries;
  *local = g - b * p.entries;
  const int64_t nfull = static_cast<int64_t>(full_.size());
  DSINFER_CHECK_INTERNAL(b >= nfull, "compressed entry ", g, " of layer ", p.layer, " lies in a full (immutable) block");
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
