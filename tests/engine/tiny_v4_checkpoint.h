// A tiny DeepSeek-V4 checkpoint (tests/engine/tiny_vocab4096.json, seed 1) written by mkmodel into a
// temporary folder for one test suite, and removed with it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "model/mkmodel.h"

namespace dsinfer::engine::testing {

class TinyV4Checkpoint {
 public:
  explicit TinyV4Checkpoint(const std::string& name)
      : dir_((std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string()) {
    model::MkModelOptions o;
    o.config_path = std::string(DSINFER_SOURCE_DIR) + "/tests/engine/tiny_vocab4096.json";
    o.seed = 1;
    o.out_dir = dir_;
    model::make_model(o);
  }
  ~TinyV4Checkpoint() { std::filesystem::remove_all(dir_); }
  TinyV4Checkpoint(const TinyV4Checkpoint&) = delete;
  TinyV4Checkpoint& operator=(const TinyV4Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace dsinfer::engine::testing
