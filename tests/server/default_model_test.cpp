#include "server/default_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dsinfer::server {
namespace {

TEST(DefaultModel, EmbeddedConfigIsTheSharedTinyConfig) {
  std::ifstream in(std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json");
  ASSERT_TRUE(in.good()) << "configs/tiny.json is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(tiny_config_json()), nlohmann::json::parse(text.str()));
}

TEST(DefaultModel, CacheDirFollowsDsinferHome) {
  const char* old = std::getenv("DSINFER_HOME");
  std::string saved = old ? old : "";
  setenv("DSINFER_HOME", "/tmp/dsinfer-home-test", 1);
  EXPECT_EQ(dsinfer_home(), "/tmp/dsinfer-home-test");
  const std::string dir = default_model_dir();
  EXPECT_EQ(dir.rfind("/tmp/dsinfer-home-test/models/tiny-v4-", 0), 0u) << dir;
  EXPECT_EQ(dir, default_model_dir()) << "stable for a config";
  if (old) setenv("DSINFER_HOME", saved.c_str(), 1);
  else unsetenv("DSINFER_HOME");
}

}  // namespace
}  // namespace dsinfer::server
