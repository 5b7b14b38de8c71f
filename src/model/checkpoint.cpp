#include "model/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace dsinfer::model {
namespace {

using core::DType;

bool file_exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string layout(DType dtype, const std::vector<int64_t>& shape) {
  return core::str_cat(dtype_name(dtype), " ", shape_string(shape));
}

// Scales may be stored as F32 instead of E8M0 (V4-Flash-Base, §4.3); V4.1 norm weights may be F32
// (model-v41.md §4.3, §10 item 2: the release's norm dtype was not seen, BF16 assumed).
bool dtype_acceptable(const ModelConfig& c, const TensorSpec& spec, DType actual) {
  if (actual == spec.dtype) return true;
  if (spec.kind == TensorKind::kLinearScale && actual == DType::kF32) return true;
  return c.arch == Architecture::kDeepseekV41 && spec.kind == TensorKind::kNorm && actual == DType::kF32;
}

void append_list(std::ostringstream& o, const char* title, const std::vector<std::string>& items, size_t limit) {
  if (items.empty()) return;
  o << "\n  " << title << " (" << items.size() << "):";
  for (size_t i = 0; i < items.size() && i < limit; ++i) o << "\n    " << items[i];
  if (items.size() > limit) o << "\n    ... and " << items.size() - limit << " more";
}

// The vision tower of a V4.1 release (vision_config.num_hidden_layers > 0): vision.*, aligner.* and
// the image span delimiters. A text-only engine skips them by name (model-v41.md §4.1, §8 item 16).
bool is_vision_tensor(const ModelConfig& c, std::string_view name) {
  if (c.arch != Architecture::kDeepseekV41) return false;
  return name.substr(0, 7) == "vision." || name.substr(0, 8) == "aligner." || name == "image_start" ||
         name == "image_end" || name == "image_newline";
}

// "<prefix><n>." at the start of name: n, else -1.
int64_t index_after(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return -1;
  int64_t n = 0;
  size_t i = prefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < prefix.size() + 9; ++i) n = n * 10 + (name[i] - '0');
  return i > prefix.size() && i < name.size() && name[i] == '.' ? n : -1;
}

// The config fields that size the tensor inventory (how many layers, stages and experts it lists),
// against the tensors the files hold: a config that claims more than the files have is named at once,
// before an inventory of that size is built from it. (Fewer is left to the inventory report: the
// files then hold extra tensors.)
void check_counts_against_files(const std::string& dir, const ModelConfig& c,
                                const std::map<std::string, const TensorView*, std::less<>>& tensors) {
  int64_t layers = 0, stages = 0, experts = 0;
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    layers = std::max(layers, index_after(name, "layers.") + 1);
    stages = std::max(stages, index_after(name, "mtp.") + 1);
    const size_t ffn = name.find(".ffn.experts.");
    if (ffn != std::string::npos) experts = std::max(experts, index_after(std::string_view(name).substr(ffn), ".ffn.experts.") + 1);
  }
  auto check = [&](int64_t config_value, int64_t found, const char* field, const char* what, const char* prefix) {
    if (found == 0 || config_value <= found) return;
    const std::string missing = config_value - found == 1
                                    ? core::str_cat(prefix, found, " is missing")
                                    : core::str_cat(prefix, found, " .. ", prefix, config_value - 1, " are missing");
    core::fail("checkpoint ", dir, ": config.json field '", field, "' (", config_value,
               ") disagrees with the checkpoint, whose tensors have ", found, " ", what, " (", missing, ")");
  };
  check(c.num_hidden_layers, layers, "num_hidden_layers", "layers", "layers.");
  check(c.n_mtp_layers, stages, "n_mtp_layers", "MTP stages", "mtp.");
  check(c.n_routed_experts, experts, "n_routed_experts", "routed experts per layer", "ffn.experts.");
}

}  // namespace

std::string InventoryReport::describe(size_t limit) const {
  std::ostringstream o;
  o << "expected " << expected_count << " tensors, found " << found_count;
  if (ignored_vision > 0) o << " (" << ignored_vision << " vision tensors ignored: text-only engine)";
  if (ok()) return o.str() + ": all present with the expected dtype and shape";
  append_list(o, "missing", missing, limit);
  append_list(o, "wrong dtype or shape", mismatched, limit);
  append_list(o, "unexpected extra tensors", extra, limit);
  return o.str();
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir, const CheckpointOptions& options) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  DSINFER_CHECK(file_exists(config_path), "checkpoint ", dir, ": no config.json");
  ck->config_ = ModelConfig::load(config_path);

  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  std::map<std::string, std::string> weight_map;  // tensor -> file name (sharded only)
  if (file_exists(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
      core::fail("checkpoint index ", index_path, ": invalid JSON: ", e.what());
    }
    DSINFER_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "checkpoint index ",
                  index_path, ": missing \"weight_map\" object");
    std::set<std::string> shard_names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      DSINFER_CHECK(it.value().is_string(), "checkpoint index ", index_path, ": weight_map entry '", it.key(),
                    "' is not a file name");
      const std::string shard = it.value().get<std::string>();
      DSINFER_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
                    "checkpoint index ", index_path, ": weight_map entry '", it.key(), "' names a bad file '", shard,
                    "'");
      weight_map[it.key()] = shard;
      shard_names.insert(shard);
    }
    for (const auto& shard : shard_names) {
      const std::string path = dir + "/" + shard;
      DSINFER_CHECK(file_exists(path), "checkpoint ", dir, ": shard '", shard, "' listed in ",
                    "model.safetensors.index.json does not exist");
      ck->files_.push_back(std::make_unique<SafetensorsFile>(path));
    }
  } else {
    DSINFER_CHECK(file_exists(single_path), "checkpoint ", dir,
                  ": neither model.safetensors nor model.safetensors.index.json exists");
    ck->files_.push_back(std::make_unique<SafetensorsFile>(single_path));
  }

  for (const auto& f : ck->files_) {
    const std::string base = f->path().substr(f->path().rfind('/') + 1);
    for (const TensorView& t : f->tensors()) {
      auto [it, inserted] = ck->tensors_.emplace(t.name, &t);
      DSINFER_CHECK(inserted, "checkpoint ", dir, ": tensor '", t.name, "' appears in both ", *it->second->file,
                    " and ", f->path());
      if (!weight_map.empty()) {
        auto w = weight_map.find(t.name);
        DSINFER_CHECK(w != weight_map.end(), "checkpoint ", dir, ": tensor '", t.name, "' of ", f->path(),
                      " is not listed in model.safetensors.index.json");
        DSINFER_CHECK(w->second == base, "checkpoint ", dir, ": model.safetensors.index.json puts '", t.name,
                      "' in ", w->second, " but it is in ", base);
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    DSINFER_CHECK(ck->tensors_.count(name), "checkpoint ", dir, ": model.safetensors.index.json lists '", name,
                  "' in ", shard, " but that file does not contain it");
  }

  check_counts_against_files(dir, ck->config_, ck->tensors_);
  ck->inventory_ = expected_tensors(ck->config_);
  for (size_t i = 0; i < ck->inventory_.size(); ++i) ck->inventory_index_.emplace(ck->inventory_[i].name, i);

  if (options.check_inventory) {
    InventoryReport report = ck->check_inventory();
    const bool fatal = !report.missing.empty() || !report.mismatched.empty() ||
                       (!report.extra.empty() && !options.allow_extra);
    DSINFER_CHECK(!fatal, "checkpoint ", dir, " does not match its config.json: ", report.describe());
    if (!report.extra.empty()) {
      DSINFER_LOG_WARN("checkpoint ", dir, ": ignoring ", report.extra.size(), " unexpected tensors, e.g. '",
                       report.extra.front(), "'");
    }
  }
  if (options.progress) ck->touch(options.progress);
  return ck;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->file_size() - f->data_start();
  return n;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(std::string_view name) const {
  const TensorView* t = find(name);
  DSINFER_CHECK(t != nullptr, "checkpoint ", dir_, ": missing tensor '", name, "'");
  return *t;
}

const TensorView& Checkpoint::get(std::string_view name, DType dtype, const std::vector<int64_t>& shape) const {
  const TensorView& t = get(name);
  DSINFER_CHECK(t.dtype == dtype && t.shape == shape, "checkpoint ", dir_, ": tensor '", name, "' in ", *t.file,
                ": expected ", layout(dtype, shape), ", found ", layout(t.dtype, t.shape));
  return t;
}

const TensorView& Checkpoint::get_expected(std::string_view name) const {
  auto it = inventory_index_.find(name);
  DSINFER_CHECK(it != inventory_index_.end(), "checkpoint ", dir_, ": '", name,
                "' is not a tensor of this config's layout");
  const TensorSpec& spec = inventory_[it->second];
  const TensorView& t = get(name);
  DSINFER_CHECK(dtype_acceptable(config_, spec, t.dtype) && t.shape == spec.shape, "checkpoint ", dir_, ": tensor '", name,
                "' in ", *t.file, ": expected ", layout(spec.dtype, spec.shape), ", found ", layout(t.dtype, t.shape));
  return t;
}

kernels::WeightView Checkpoint::linear(const std::string& prefix, int64_t rows, int64_t cols) const {
  const TensorView& w = get(prefix + ".weight");
  const TensorView* s = find(prefix + ".scale");
  const std::string where = core::str_cat("checkpoint ", dir_, ": linear '", prefix, "' in ", *w.file);
  kernels::WeightView v;
  v.rows = rows;
  v.cols = cols;
  v.data = w.data;
  auto check_shape = [&](const TensorView& t, const std::vector<int64_t>& shape, const char* what) {
    DSINFER_CHECK(t.shape == shape, where, ": ", what, " '", t.name, "' expected shape ", shape_string(shape),
                  " for a [", rows, ", ", cols, "] weight, found ", shape_string(t.shape));
  };
  auto check_scale = [&](const std::vector<int64_t>& shape) {
    DSINFER_CHECK(s != nullptr, where, ": ", dtype_name(w.dtype), " weight without its scale tensor '", prefix,
                  ".scale'");
    DSINFER_CHECK(s->dtype == DType::kF8E8M0 || s->dtype == DType::kF32, where, ": scale '", s->name,
                  "' must be F8_E8M0 or F32, found ", dtype_name(s->dtype));
    check_shape(*s, shape, "scale");
    v.scales = s->data;
    v.scales_f32 = s->dtype == DType::kF32;
  };
  switch (w.dtype) {
    case DType::kF8E4M3:
    {
      v.format = kernels::WeightFormat::kFP8;
      check_shape(w, {rows, cols}, "weight");
      const int64_t b = config_.weight_block;
      check_scale({(rows + b - 1) / b, (cols + b - 1) / b});
      v.fp8_block = b;
      break;
    }
    case DType::kI8:
    case DType::kU8:
      DSINFER_CHECK(cols % 32 == 0, where, ": FP4 weights need in-features divisible by 32, got ", cols);
      v.format = kernels::WeightFormat::kFP4;
      check_shape(w, {rows, cols / 2}, "packed FP4 weight");
      check_scale({rows, cols / 32});
      break;
    case DType::kBF16:
      v.format = kernels::WeightFormat::kBF16;
      check_shape(w, {rows, cols}, "weight");
      DSINFER_CHECK(s == nullptr, where, ": BF16 weight has an unexpected scale tensor '", s ? s->name : "", "'");
      break;
    case DType::kF32:
      v.format = kernels::WeightFormat::kF32;
      check_shape(w, {rows, cols}, "weight");
      DSINFER_CHECK(s == nullptr, where, ": F32 weight has an unexpected scale tensor '", s ? s->name : "", "'");
      break;
    default:
      core::fail(where, ": weight dtype ", dtype_name(w.dtype),
                 " is not a linear format (F8_E4M3 + scale, I8 packed FP4 + scale, BF16, F32)");
  }
  return v;
}

kernels::WeightView Checkpoint::linear(const std::string& prefix) const {
  auto it = inventory_index_.find(prefix + ".weight");
  DSINFER_CHECK(it != inventory_index_.end() && inventory_[it->second].kind == TensorKind::kLinearWeight,
                "checkpoint ", dir_, ": '", prefix, "' is not a linear of this config's layout");
  const TensorSpec& spec = inventory_[it->second];
  return linear(prefix, spec.rows, spec.cols);
}

InventoryReport Checkpoint::check_inventory() const {
  InventoryReport r;
  r.expected_count = inventory_.size();
  r.found_count = tensors_.size();
  for (const TensorSpec& spec : inventory_) {
    const TensorView* t = find(spec.name);
    if (t == nullptr) {
      r.missing.push_back(spec.name);
    } else if (!dtype_acceptable(config_, spec, t->dtype) || t->shape != spec.shape) {
      r.mismatched.push_back(core::str_cat(spec.name, ": expected ", layout(spec.dtype, spec.shape), ", found ",
                                           layout(t->dtype, t->shape), " in ", *t->file));
    }
  }
  for (const auto& [name, t] : tensors_) {
    if (inventory_index_.count(name)) continue;
    if (is_vision_tensor(config_, name)) {
      ++r.ignored_vision;
    } else {
      r.extra.push_back(core::str_cat(name, " (", *t->file, ")"));
    }
  }
  return r;
}

uint64_t Checkpoint::touch(const TensorView& t) const {
  volatile uint8_t sink = 0;
  uint8_t acc = 0;
  for (size_t off = 0; off < t.nbytes; off += 4096) acc ^= t.data[off];
  sink = sink ^ acc;
  return t.nbytes;
}

void Checkpoint::release(const TensorView& t) const {
  for (const auto& f : files_) {
    if (&f->path() == t.file) f->release(t.file_offset, t.file_offset + t.nbytes);
  }
}

void Checkpoint::release_all_except(const TensorView* keep) const {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& f : files_) {
    if (keep == nullptr || keep->file != &f->path()) {
      f->release(0, f->file_size());
      continue;
    }
    // The pages of `keep`, rounded outwards, stay.
    f->release(0, keep->file_offset / page * page);
    f->release((keep->file_offset + keep->nbytes + page - 1) / page * page, f->file_size());
  }
}

uint64_t Checkpoint::touch(const ProgressFn& progress) const {
  const uint64_t total = total_bytes();
  uint64_t done = 0, next_report = 0;
  constexpr uint64_t kReportEvery = 64ull << 20;
  volatile uint8_t sink = 0;
  if (progress) progress(0, total);
  for (const auto& f : files_) {
    for (const TensorView& t : f->tensors()) {
      uint8_t acc = 0;
      for (size_t off = 0; off < t.nbytes; off += 4096) acc ^= t.data[off];
      sink = sink ^ acc;
      done += t.nbytes;
      if (progress && done >= next_report) {
        progress(done, total);
        next_report = done + kReportEvery;
      }
    }
  }
  if (progress) progress(total, total);
  return done;
}

}  // namespace dsinfer::model
