#include "core/malloc_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers replace malloc: mallinfo2 says nothing about it
#else
constexpr bool kSanitized = false;
#endif

// Whether glibc served a fresh 30 MiB block with a mapping of its own.
bool new_block_is_mapped() {
  const size_t before = mallinfo2().hblkhd;
  void* volatile p = std::malloc(30u << 20);  // volatile: the compiler may not drop the pair
  std::memset(p, 1, 4096);
  const bool mapped = mallinfo2().hblkhd >= before + (30u << 20);
  std::free(p);
  return mapped;
}

// Runs f in a forked child (its own copy of the allocator, so the steps below cannot leak into the
// test process) and returns the child's exit code.
int in_child(const std::function<int()>& f) {
  const pid_t pid = fork();
  if (pid == 0) _exit(f());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

TEST(MallocTuning, StepSizedBlocksStayOnTheHeapOnlyWhenTuned) {
  if (kSanitized) GTEST_SKIP() << "sanitizer allocators: the release run checks glibc";
  // Untouched glibc maps the block (threshold 128 KiB until something large is freed): the
  // comparison below can fail.
  EXPECT_EQ(in_child([] { return new_block_is_mapped() ? 0 : 1; }), 0);
  EXPECT_EQ(in_child([] {
              if (!dsinfer::core::tune_malloc_for_steps()) return 2;
              return new_block_is_mapped() ? 1 : 0;
            }),
            0);
}

TEST(MallocTuning, TheUsersGlibcTunablesWin) {
  if (kSanitized) GTEST_SKIP() << "sanitizer allocators: the release run checks glibc";
  EXPECT_EQ(in_child([] {
              setenv("MALLOC_MMAP_THRESHOLD_", "131072", 1);
              setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
              if (dsinfer::core::tune_malloc_for_steps()) return 2;  // nothing changed
              return new_block_is_mapped() ? 0 : 1;
            }),
            0);
  EXPECT_EQ(in_child([] {
              setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072", 1);
              if (dsinfer::core::tune_malloc_for_steps()) return 2;
              return new_block_is_mapped() ? 0 : 1;
            }),
            0);
}

}  // namespace
