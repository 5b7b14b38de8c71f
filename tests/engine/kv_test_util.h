// Helpers for the engine's KV connector tests: a store directory removed afterwards, and the record
// files in it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace dsinfer::engine::testing {

class KvTempDir {
 public:
  KvTempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "engine_kv_test.XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~KvTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<std::filesystem::path> kv_records(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".kv") out.push_back(e.path());
  }
  return out;
}

}  // namespace dsinfer::engine::testing
