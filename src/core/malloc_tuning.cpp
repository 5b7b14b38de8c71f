#include "core/malloc_tuning.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dsinfer::core {

namespace {
// Whether the user set glibc's tunable, as MALLOC_<NAME>_ or inside GLIBC_TUNABLES.
bool user_set(const char* env, const char* tunable) {
  const char* all = std::getenv("GLIBC_TUNABLES");
  return std::getenv(env) != nullptr || (all != nullptr && std::strstr(all, tunable) != nullptr);
}
}  // namespace

bool tune_malloc_for_steps() {
#if defined(__GLIBC__)
  bool changed = false;
  // mallopt also turns off glibc's dynamic threshold adjustment, which is the point.
  if (!user_set("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold")) {
    changed |= mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  }
  if (!user_set("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold")) {
    changed |= mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  }
  return changed;
#else
  return false;
#endif
}

}  // namespace dsinfer::core
