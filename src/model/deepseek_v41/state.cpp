#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>

namespace dsinfer::model::deepseek_v41::detail {

Prefill::Prefill(const Checkpoint& ck, const EngramTokenMap* map, const PrefillOptions& o,
                 std::shared_ptr<Weights> weights)
    : c_(ck.config()),
      weights_(weights ? std::move(weights)
                       : std::make_shared<Weights>(ck, o.double_accumulation, o.fast, o.official_at_fast_sites)),
      w_(*weights_),
      map_(map),
      opt_(o),
      pool_(o.pool ? *o.pool : core::ThreadPool::global()),
      hc_(c_.hc_mult),
      d_(c_.hidden_size) {
  DSINFER_CHECK(c_.arch == Architecture::kDeepseekV41, "V4.1 prefill: the checkpoint is ", c_.architecture);
  if (c_.engram) {
    DSINFER_CHECK(map != nullptr, "V4.1 prefill: the model has Engram layers but no token map was given");
    hash_ = std::make_unique<EngramHash>(*c_.engram, map->compressed(c_.engram->pad_token_id));
  }
  DSINFER_CHECK(o.decoder_replay_tokens >= 0, "V4.1 prefill: decoder replay of ", o.decoder_replay_tokens, " tokens");
  if (o.decoder_replay_tokens > 0) decoder_ = decoder_first_layer(c_);
}

// Sequence::set_decoder_replay_tokens: the engine decides per chunk.
void Prefill::set_replay_tokens(int64_t k) {
  DSINFER_CHECK(k >= 0, "V4.1 prefill: decoder replay of ", k, " tokens");
  if (k > 0 && decoder_ < 0) decoder_ = decoder_first_layer(c_);
  opt_.decoder_replay_tokens = k;
}

KvRows& Prefill::window(int64_t L) {
  DSINFER_CHECK(c_.sliding_window >= 1, "V4.1 prefill: sliding window of ", c_.sliding_window);
  const RowCodec codec = opt_.qdq ? RowCodec::kFp8E8m0 : RowCodec::kFp32;
  return windows_.try_emplace(L, c_.head_dim, codec, c_.sliding_window - 1).first->second;
}

Prefill::KvSource& Prefill::source(int64_t L, int64_t ratio) {
  auto [it, made] = sources_.try_emplace(L);
  if (made) {
    it->second.ratio = ratio;
    it->second.ckv = KvRows(c_.head_dim, opt_.qdq ? RowCodec::kFp4E4m3 : RowCodec::kFp32);
  }
  return it->second;
}

StoredKv Prefill::stored() const {
  StoredKv out;
  for (const auto& [L, w] : windows_) out.window[L] = w.decode(0, w.size());
  for (const auto& [L, src] : sources_) {
    out.compressed[L] = src.ckv.decode(0, src.G);
    out.index_keys[L] = src.ik;
  }
  return out;
}

int64_t Prefill::state_bytes() const {
  auto bytes = [](const auto& v) { return static_cast<int64_t>(v.size() * sizeof(v[0])); };
  int64_t b = bytes(ids_) + bytes(cid_);
  for (const auto& [L, w] : windows_) b += w.bytes();
  for (const auto& [L, src] : sources_) b += bytes(src.u) + bytes(src.g) + src.ckv.bytes() + bytes(src.ik);
  for (const Vec& tap : taps_) b += bytes(tap);
  return b;
}

// §3.4 rollback: the state of the first len positions (every cache here keeps its whole history).
void Prefill::truncate(int64_t len) {
  DSINFER_CHECK(len >= 0 && len <= length(), "V4.1 sequence: truncate to ", len, " of ", length(), " positions");
  // At or below the replay start the last position has no decoder state: nothing to roll back to.
  DSINFER_CHECK(!replayed_ || len == 0 || len > decoder_from_, "V4.1 sequence: rollback to ", len,
                " does not pass the decoder replay start ", decoder_from_);
  if (len == 0) {
    replayed_ = false;
    decoder_from_ = 0;
  }
  const int64_t hd = c_.head_dim, ixd = c_.index_head_dim;
  ids_.resize(static_cast<size_t>(len));
  cid_.resize(std::min(cid_.size(), static_cast<size_t>(len)));
  for (auto& [L, w] : windows_) {
    w.pad_to(len);  // as the forward does: zero rows where a decoder replay skipped positions
    w.truncate(len);
  }
  for (auto& [L, src] : sources_) {
    const int64_t kept = src.ratio == 2 ? (len + 1) / 2 : 0;  // the even positions' inputs
    src.u.resize(static_cast<size_t>(kept * hd));
    src.g.resize(static_cast<size_t>(kept * hd));
    src.G = len / src.ratio;
    src.ckv.truncate(src.G);
    src.ik.resize(static_cast<size_t>(src.G * ixd));
  }
  for (Vec& tap : taps_) tap.resize(static_cast<size_t>(len * d_));
}

// State ranges (state_range.h): the engine adapter's blocks. Only copies of the arrays the
// forward appends to, so exporting and re-appending them changes no bit of what follows.

StateRange Prefill::export_range(int64_t begin, int64_t end) const {
  DSINFER_CHECK(begin >= 0 && begin <= end && end <= length(), "V4.1 sequence: range [", begin, ", ", end, ") of ",
                length(), " positions");
  DSINFER_CHECK(!drafted_, "V4.1 sequence: no state export after the DSpark draft head");
  DSINFER_CHECK(!replayed_, "V4.1 sequence: no state export after a decoder-side bounded replay (from position ",
                decoder_from_, "): the decoder windows are approximate or missing");
  const int64_t hd = c_.head_dim, ixd = c_.index_head_dim;
  StateRange r;
  r.begin = begin;
  r.end = end;
  r.ids.assign(ids_.begin() + begin, ids_.begin() + end);
  if (c_.engram) r.cid.assign(cid_.begin() + begin, cid_.begin() + end);
  auto slice = [](const Vec& v, int64_t from, int64_t to, int64_t width) {
    return Vec(v.begin() + from * width, v.begin() + to * width);
  };
  if (length() == 0) {  // nothing fed yet: the arrays exist once the first forward made them
    r.windows.assign(static_cast<size_t>(c_.num_hidden_layers), Vec());
    for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
      const LayerRoles& roles = c_.layer_roles(L);
      if (roles.dspark_target) r.taps.emplace_back();
      if (roles.owns_compressor) r.sources.push_back({L, roles.ratio, {}, {}, {}, {}});
    }
    return r;
  }
  for (const auto& [L, w] : windows_) r.windows.push_back(w.decode(begin, end));
  for (const auto& [L, src] : sources_) {
    // An open group (inputs only) may end the range only where the sequence ends.
    DSINFER_CHECK(begin % src.ratio == 0 && (end % src.ratio == 0 || end == length()), "V4.1 sequence: range [", begin,
                  ", ", end, ") splits a ratio-", src.ratio, " group of layer ", L);
    StateRange::Source s;
    s.layer = L;
    s.ratio = src.ratio;
    if (src.ratio == 2) {  // begin is even: the even positions' rows begin / 2 ..
      s.u = slice(src.u, begin / 2, (end + 1) / 2, hd);
      s.g = slice(src.g, begin / 2, (end + 1) / 2, hd);
    }
    s.ckv = src.ckv.decode(begin / src.ratio, end / src.ratio);
    s.ik = slice(src.ik, begin / src.ratio, end / src.ratio, ixd);
    r.sources.push_back(std::move(s));
  }
  for (const Vec& tap : taps_) r.taps.push_back(slice(tap, begin, end, d_));
  return r;
}

// Appends the state of positions length() .. r.end, as if they had been fed.
void Prefill::append_range(const StateRange& r) {
  check_state_range(c_, r);
  DSINFER_CHECK(r.begin == length(), "V4.1 sequence: a range from ", r.begin, " appended at ", length());
  DSINFER_CHECK(!drafted_, "V4.1 sequence: no state import after the DSpark draft head");
  DSINFER_CHECK(!replayed_, "V4.1 sequence: no state import after a decoder-side bounded replay");
  ids_.insert(ids_.end(), r.ids.begin(), r.ids.end());
  if (c_.engram) cid_.insert(cid_.end(), r.cid.begin(), r.cid.end());
  for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
    window(L).append_stored(r.windows[L].data(), r.size());
  }
  for (const StateRange::Source& s : r.sources) {
    KvSource& src = source(s.layer, s.ratio);
    src.u.insert(src.u.end(), s.u.begin(), s.u.end());
    src.g.insert(src.g.end(), s.g.begin(), s.g.end());
    src.ckv.append_stored(s.ckv.data(), static_cast<int64_t>(s.ckv.size()) / c_.head_dim);
    src.ik.insert(src.ik.end(), s.ik.begin(), s.ik.end());
    src.G = r.end / s.ratio;
  }
  if (taps_.size() < r.taps.size()) taps_.resize(r.taps.size());
  for (size_t i = 0; i < r.taps.size(); ++i) taps_[i].insert(taps_[i].end(), r.taps[i].begin(), r.taps[i].end());
}

}  // namespace dsinfer::model::deepseek_v41::detail
