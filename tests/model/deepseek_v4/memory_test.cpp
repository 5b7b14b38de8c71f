// Resident memory of a loaded model: the weights are repacked from the mapped checkpoint, and the
// mapped pages must leave memory once copied, so that no weight is resident twice (issue 14: peak RSS
// at most 1.1x the checkpoint's bytes plus the KV). Measured in a fresh process as the growth of the
// peak resident size (VmHWM, reset first through /proc/self/clear_refs) over the resident size before
// the load: a ratio of two sizes, not a timing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "test_models.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DSINFER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DSINFER_SANITIZED 1
#endif
#endif

namespace dsinfer::model::deepseek_v4 {
namespace {

namespace fs = std::filesystem;

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1.
int64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream v(line.substr(field.size() + 1));
    int64_t kib = -1;
    v >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

// Sets VmHWM to the current VmRSS (Linux 4.0 and later); false where the file cannot be written.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

int64_t directory_bytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

constexpr const char* kChildEnv = "DSINFER_V4_MEMORY_CHILD";

// The measurement runs in a fresh process (this executable again, this test only): in a process that
// ran other tests first, malloc would hand the repacked weights memory those tests freed, which is
// resident already, and the growth would no longer show a second copy.
TEST(V4Memory, PeakResidentSizeIsAboutOneCopyOfTheCheckpoint) {
#ifdef DSINFER_SANITIZED
  GTEST_SKIP() << "sanitizer shadow memory and quarantine are not the process's own memory";
#endif
  if (std::getenv(kChildEnv) == nullptr) {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    ASSERT_FALSE(ec) << "cannot read /proc/self/exe: " << ec.message();
    const std::string cmd = std::string(kChildEnv) + "=1 '" + self.string() +
                            "' --gtest_filter=V4Memory.PeakResidentSizeIsAboutOneCopyOfTheCheckpoint";
    const int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << cmd;
    EXPECT_EQ(WEXITSTATUS(rc), 0) << "the measuring process failed (its output is above): " << cmd;
    return;
  }
  // The TINY layout with wide experts, so that FP4 expert weights are most of the bytes, as in the real
  // checkpoints (and the fixed costs of a process, a few MiB, stay small next to its 10 % margin), and a
  // small vocabulary, so that the embedding table (read in place, never copied) is not what is measured.
  nlohmann::json cfg = testing::tiny_config(512);
  cfg["moe_intermediate_size"] = 2048;
  const std::string dir = testing::make_test_model("wide_experts", cfg);
  const int64_t ckpt_bytes = directory_bytes(dir);
  ASSERT_GT(ckpt_bytes, int64_t{64} << 20);

  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
  const int64_t before = status_bytes("VmRSS");
  ASSERT_GT(before, 0);
  ASSERT_LE(status_bytes("VmHWM"), before + (int64_t{1} << 20)) << "the peak was not reset";

  ModelOptions opt;
  opt.threads = 2;
  auto model = Model::load(dir, opt);
  // A short prefill and decode, so the peak includes a step's workspaces and the embedding rows read.
  auto st = model->new_sequence();
  const std::vector<int32_t> tokens = testing::random_tokens(40, 512, 3);
  testing::run_chunks(*model, *st, tokens, 0, 32, {32});
  testing::run_chunks(*model, *st, tokens, 32, 40, {1});
  const int64_t kv_bytes = static_cast<int64_t>(st->memory().total());

  const int64_t peak = status_bytes("VmHWM") - before;
  const int64_t bound = ckpt_bytes + ckpt_bytes / 10 + kv_bytes;
  RecordProperty("checkpoint_bytes", std::to_string(ckpt_bytes));
  RecordProperty("peak_growth_bytes", std::to_string(peak));
  std::printf("checkpoint %.1f MiB, KV %.2f MiB, peak RSS growth %.1f MiB (bound %.1f MiB)\n",
              ckpt_bytes / 1048576.0, kv_bytes / 1048576.0, peak / 1048576.0, bound / 1048576.0);
  // Two resident copies of the weights would be about 2x the checkpoint.
  EXPECT_LE(peak, bound);

  // After the load, the mapped checkpoint holds nothing resident but embedding rows in use: the
  // resident size is within the same bound now, too.
  EXPECT_LE(status_bytes("VmRSS") - before, bound);
  st.reset();
  model.reset();
  fs::remove_all(dir);  // 120 MB; made again by the next run
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
