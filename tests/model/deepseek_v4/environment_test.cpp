// Removes the synthetic checkpoints of test_models.h when the test program ends.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

namespace {

class RemoveTestModels : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("dsinfer_v4_test_" + std::to_string(::getpid())),
                                ec);
  }
};

[[maybe_unused]] ::testing::Environment* const kEnvironment = ::testing::AddGlobalTestEnvironment(new RemoveTestModels);

}  // namespace
