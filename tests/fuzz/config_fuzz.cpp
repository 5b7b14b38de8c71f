// libFuzzer target for config.json validation: arbitrary text must give a ModelConfig or a core::Error
// naming the config, never a crash, a hang or a huge allocation (run with -rss_limit_mb). An accepted
// config must then size what is built from it within small bounds: the tensor inventory and the V4
// model shape (rope tables, block layout). Seed it with the configs in configs/.
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "model/deepseek_v4/shape.h"
#include "model/inventory.h"

using namespace dsinfer;

#define FUZZ_CHECK(cond)                                               \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "config_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                \
    }                                                                  \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  model::ModelConfig c;
  try {
    c = model::ModelConfig::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const core::Error& e) {
    FUZZ_CHECK(e.kind() == core::ErrorKind::kInvalidInput);
    FUZZ_CHECK(std::string(e.what()).find("fuzz.json") != std::string::npos);
    return 0;
  }
  FUZZ_CHECK(c.num_hidden_layers >= 1 && c.num_hidden_layers <= 512);
  FUZZ_CHECK(static_cast<int64_t>(c.compress_ratios.size()) == c.num_layers_total());
  // The inventory is what `inspect` builds before looking at the files: bounded by the config limits.
  const auto inventory = model::expected_tensors(c);
  FUZZ_CHECK(inventory.size() <= (size_t{1} << 20));
  try {
    model::deepseek_v4::Numerics numerics;
    const auto shape = model::deepseek_v4::ModelShape::build(c, numerics, 7);
    FUZZ_CHECK(shape.block_tokens <= 4096);
  } catch (const core::Error&) {
    // Accepted configs this engine does not implement (several MTP stages, ...): refused with a message.
  }
  return 0;
}
