// A Hugging Face model directory: config.json plus one model.safetensors or the shards listed by
// model.safetensors.index.json (weight_map). Tensors are looked up by their official names (§4.2).
// Opening validates the whole inventory against the config (missing, extra, wrong dtype or shape), so
// the forward pass can trust what it gets.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/linear.h"
#include "model/config.h"
#include "model/inventory.h"
#include "model/safetensors.h"

namespace dsinfer::model {

// Called with (bytes done, bytes total); at least once at the start and once at the end.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct InventoryReport {
  std::vector<std::string> missing;     // names the config needs and no file has
  std::vector<std::string> extra;       // names no config tensor has
  std::vector<std::string> mismatched;  // "name: expected F8_E4M3 [..], found BF16 [..] in <file>"
  size_t expected_count = 0;
  size_t found_count = 0;
  size_t ignored_vision = 0;            // V4.1 vision tower tensors a text-only engine skips by name

  bool ok() const { return missing.empty() && extra.empty() && mismatched.empty(); }
  // Every problem, each list cut after `limit` entries with a count of the rest.
  std::string describe(size_t limit = 20) const;
};

struct CheckpointOptions {
  bool check_inventory = true;  // fail on missing / mismatched tensors
  bool allow_extra = false;     // with check_inventory: extra tensors only logged as a warning
  ProgressFn progress;          // when set, open() touches every page once and reports (see touch())
};

class Checkpoint {
 public:
  // Reads DIR/config.json and maps the safetensors files; fails with a message naming the directory,
  // file and tensor of the first problem (the inventory check lists all problems).
  static std::unique_ptr<Checkpoint> open(const std::string& dir, const CheckpointOptions& options = {});

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;  // data bytes over all files
  size_t size() const { return tensors_.size(); }

  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;
  // Fails unless the tensor has exactly this dtype and shape (message names file, tensor, both layouts).
  const TensorView& get(std::string_view name, core::DType dtype, const std::vector<int64_t>& shape) const;
  // The tensor as its inventory spec says (dtype + shape from the config).
  const TensorView& get_expected(std::string_view name) const;

  // A linear weight by prefix ("layers.0.attn.wq_a"): FP8 E4M3 + E8M0/F32 [ceil(out/B), ceil(in/B)]
  // scale (B = config().weight_block, 128 in V4, 32 in V4.1; the view carries it as fp8_block), FP4
  // (I8 [out, in/2]) + E8M0/F32 [out, in/32], BF16 or F32 [out, in]. rows/cols are the
  // logical [out, in]; the storage is what the file holds, checked against these dims.
  kernels::WeightView linear(const std::string& prefix, int64_t rows, int64_t cols) const;
  // Same, with rows/cols taken from the inventory (the prefix must be a linear of this config).
  kernels::WeightView linear(const std::string& prefix) const;

  InventoryReport check_inventory() const;

  // Reads every page once (so later accesses do not fault), reporting progress. Returns bytes read.
  uint64_t touch(const ProgressFn& progress = nullptr) const;
  // Reads every page of one tensor once. Returns its bytes.
  uint64_t touch(const TensorView& t) const;

  // Drops the mapped pages of a tensor (whole pages inside it) from resident memory once its bytes
  // have been copied; reading it later faults it in again from the file (SafetensorsFile::release).
  void release(const TensorView& t) const;
  // Drops every mapped page of every file except those holding bytes of `keep` (may be null): for the
  // end of a load, when only tensors read in place stay in use.
  void release_all_except(const TensorView* keep) const;

 private:
  Checkpoint() = default;
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
  std::vector<TensorSpec> inventory_;
  std::map<std::string, size_t, std::less<>> inventory_index_;
};

}  // namespace dsinfer::model
