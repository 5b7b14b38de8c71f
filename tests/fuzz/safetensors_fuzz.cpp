// libFuzzer target for the safetensors header parser (parse_safetensors, what SafetensorsFile runs on a
// mapped file): arbitrary bytes must give a layout or a core::Error, never a crash, and an accepted
// layout must describe tensors that lie inside the bytes, cover the data exactly and have
// nbytes = numel x dtype size without wrap-around.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "core/error.h"
#include "model/safetensors.h"

using namespace dsinfer;

#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "safetensors_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                     \
    }                                                                       \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  model::SafetensorsLayout layout;
  try {
    layout = model::parse_safetensors(std::span<const uint8_t>(data, size), "fuzz");
  } catch (const core::Error& e) {
    FUZZ_CHECK(e.kind() == core::ErrorKind::kInvalidInput);
    return 0;
  }
  FUZZ_CHECK(layout.data_start >= 8 && layout.data_start <= size);
  uint64_t cursor = layout.data_start;
  for (const auto& t : layout.tensors) {
    FUZZ_CHECK(t.file_offset == cursor);
    FUZZ_CHECK(t.nbytes <= size - t.file_offset);
    unsigned __int128 n = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0);
      n *= static_cast<uint64_t>(d);
    }
    FUZZ_CHECK(n * model::dtype_size(t.dtype) == t.nbytes);
    FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * model::dtype_size(t.dtype) == t.nbytes);
    cursor += t.nbytes;
  }
  FUZZ_CHECK(cursor == size);
  return 0;
}
