#include "model/deepseek_v41/state_range.h"

#include "core/error.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

template <class T>
int64_t vec_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.size() * sizeof(T));
}

void check_size(size_t got, int64_t want, const char* what, int64_t layer) {
  DSINFER_CHECK(static_cast<int64_t>(got) == want, "V4.1 state range: ", what, " of layer ", layer, " has ", got,
                " values, ", want, " expected");
}

}  // namespace

int64_t StateRange::bytes() const {
  int64_t b = vec_bytes(ids) + vec_bytes(cid);
  for (const auto& w : windows) b += vec_bytes(w);
  for (const auto& s : sources) b += vec_bytes(s.u) + vec_bytes(s.g) + vec_bytes(s.ckv) + vec_bytes(s.ik);
  for (const auto& t : taps) b += vec_bytes(t);
  return b;
}

void check_state_range(const ModelConfig& c, const StateRange& r) {
  const int64_t n = r.size(), hd = c.head_dim, ixd = c.index_head_dim;
  DSINFER_CHECK(r.begin >= 0 && n >= 0, "V4.1 state range: bad range [", r.begin, ", ", r.end, ")");
  check_size(r.ids.size(), n, "token ids", -1);
  for (int32_t id : r.ids) DSINFER_CHECK(id >= 0 && id < c.vocab_size, "V4.1 state range: token id ", id);
  check_size(r.cid.size(), c.engram ? n : 0, "Engram compressed ids", -1);
  DSINFER_CHECK(static_cast<int64_t>(r.windows.size()) == c.num_hidden_layers, "V4.1 state range: ",
                r.windows.size(), " window layers, the model has ", c.num_hidden_layers);
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) check_size(r.windows[L].size(), n * hd, "window KV", L);
  size_t s = 0, taps = 0;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const LayerRoles& roles = c.layer_roles(L);
    if (roles.dspark_target) {
      DSINFER_CHECK(taps < r.taps.size(), "V4.1 state range: too few DSpark taps");
      check_size(r.taps[taps++].size(), n * c.hidden_size, "DSpark tap", L);
    }
    if (!roles.owns_compressor) continue;
    DSINFER_CHECK(s < r.sources.size(), "V4.1 state range: too few kv sources");
    const StateRange::Source& src = r.sources[s++];
    DSINFER_CHECK(src.layer == L && src.ratio == roles.ratio, "V4.1 state range: kv source ", s - 1, " is layer ",
                  src.layer, " ratio ", src.ratio, ", the model's is layer ", L, " ratio ", roles.ratio);
    DSINFER_CHECK(r.begin % src.ratio == 0, "V4.1 state range: [", r.begin, ", ", r.end, ") splits a ratio-",
                  src.ratio, " group at its start");
    const int64_t groups = r.end / src.ratio - r.begin / src.ratio;
    const int64_t inputs = src.ratio == 2 ? (n + 1) / 2 : 0;  // begin even: its even positions
    check_size(src.u.size(), inputs * hd, "compressor inputs", L);
    check_size(src.g.size(), inputs * hd, "compressor gates", L);
    check_size(src.ckv.size(), groups * hd, "compressed KV", L);
    check_size(src.ik.size(), groups * ixd, "index keys", L);
  }
  DSINFER_CHECK(s == r.sources.size() && taps == r.taps.size(), "V4.1 state range: ", r.sources.size(),
                " kv sources and ", r.taps.size(), " taps, the model has ", s, " and ", taps);
}

int64_t state_range_bytes(const ModelConfig& c, int64_t n) {
  const int64_t hd = c.head_dim, ixd = c.index_head_dim, f = sizeof(float);
  int64_t b = n * static_cast<int64_t>(sizeof(int32_t)) + (c.engram ? n * static_cast<int64_t>(sizeof(int64_t)) : 0);
  b += c.num_hidden_layers * n * hd * f;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const LayerRoles& roles = c.layer_roles(L);
    if (roles.dspark_target) b += n * c.hidden_size * f;
    if (!roles.owns_compressor) continue;
    if (roles.ratio == 2) b += (n + 1) / 2 * hd * f * 2;
    b += n / roles.ratio * (hd + ixd) * f;
  }
  return b;
}

}  // namespace dsinfer::model::deepseek_v41
