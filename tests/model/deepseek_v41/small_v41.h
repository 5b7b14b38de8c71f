// The small V4.1 checkpoint (test_util.h's small_v41_config, made by mkmodel in a temporary folder) and
// the deterministic prompt the deepseek_v41 tests feed it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "../test_util.h"
#include "model/checkpoint.h"
#include "model/mkmodel.h"

namespace dsinfer::model::testing {

inline std::unique_ptr<Checkpoint> small_v41_checkpoint(const TempDir& dir, uint64_t seed) {
  ::setenv("DSINFER_HOME", dir.file("no_home").c_str(), 1);  // no installed tokenizer is picked up
  MkModelOptions o;
  o.config_path = write_config(dir, small_v41_config(), "src.json");
  o.out_dir = dir.file("m");
  o.seed = seed;
  make_model(o);
  return Checkpoint::open(o.out_dir);
}

inline std::vector<int32_t> v41_prompt(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 13) % 512));
  return ids;
}

}  // namespace dsinfer::model::testing
