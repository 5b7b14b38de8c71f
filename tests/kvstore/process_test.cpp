// Races between threads and between processes on one store directory: writers of the same keys, a
// writer killed with SIGKILL in the middle of writing, and two collectors at once.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "kvstore/block_store.h"
#include "kvstore/gc.h"
#include "kvstore/inspect.h"
#include "kvstore/record.h"
#include "kvstore_test_util.h"

namespace dsinfer::kvstore {
namespace {

using testing::block_payload;
using testing::block_tokens;
using testing::FakeClock;
using testing::kDay;
using testing::kHour;
using testing::TempDir;
using testing::test_key;

constexpr size_t kPayload = 16 << 10;

void write_keys(const std::string& dir, uint64_t first, uint64_t count, size_t payload = kPayload) {
  for (uint64_t i = first; i < first + count; ++i) {
    const uint64_t key = test_key(i);
    ASSERT_EQ(make_dirs(record_dir(dir, key), {}), 0);
    const auto bytes = encode_record(key, block_tokens(key), block_payload(key, payload), TrafficClass::kChat, 1);
    ASSERT_EQ(write_record_file(record_path(dir, key), bytes, 1, FsyncPolicy::kNone, {}), 0);
  }
}

void expect_all_good(const std::string& dir, uint64_t count) {
  int64_t checked = 0;
  const auto bad = verify_store(dir, &checked);
  EXPECT_TRUE(bad.empty()) << bad.front().path << ": " << record_status_name(bad.front().status);
  EXPECT_EQ(checked, static_cast<int64_t>(count));
  StoreOptions o;
  o.dir = dir;
  BlockStore store(o);
  for (uint64_t i = 0; i < count; ++i) {
    const auto r = store.load(LoadRequest{test_key(i), block_tokens(test_key(i))}).get();
    EXPECT_TRUE(r.hit()) << i;
  }
  for (const auto& f : scan_store(dir)) EXPECT_FALSE(f.scratch) << "left behind: " << f.path;
}

int wait_child(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(KvProcesses, ConcurrentWritersOfTheSameKeysInThreads) {
  TempDir dir;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) threads.emplace_back([&] { write_keys(dir.path(), 0, 40); });
  for (auto& t : threads) t.join();
  expect_all_good(dir.path(), 40);
}

TEST(KvProcesses, ConcurrentStoresOfTheSameKeysInThreads) {
  TempDir dir;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      StoreOptions o;
      o.dir = dir.path();
      BlockStore store(o);
      for (uint64_t i = 0; i < 40; ++i) {
        store.put(test_key(i), block_tokens(test_key(i)), block_payload(test_key(i), kPayload), TrafficClass::kChat);
      }
      store.flush();
      EXPECT_EQ(store.stats().write_errors.load(), 0);
    });
  }
  for (auto& t : threads) t.join();
  expect_all_good(dir.path(), 40);
}

TEST(KvProcesses, ConcurrentWritersOfTheSameKeysInTwoProcesses) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_keys(dir.path(), 0, 60);
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  write_keys(dir.path(), 0, 60);
  const int status = wait_child(child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  expect_all_good(dir.path(), 60);
}

// The child writes records in a loop; the parent kills it with SIGKILL once it has written some, at
// whatever point it is. Then a second child is stopped for certain between the two phases (temp file
// created, not renamed) and killed there. No record a reader accepts is ever wrong, and the collector
// removes the temp files once they are old.
TEST(KvProcesses, WriterKilledMidWriteLeavesNothingAReaderAccepts) {
  TempDir dir;
  for (int round = 0; round < 2; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      for (uint64_t i = 1000 * (round + 1);; ++i) {
        const uint64_t key = test_key(i);
        make_dirs(record_dir(dir.path(), key), {});
        const auto bytes = encode_record(key, block_tokens(key), block_payload(key, 256 << 10), TrafficClass::kChat, 1);
        IoFaults faults;
        if (round == 1 && i == 2005) {
          faults = [&](IoOp op, const std::string&) {
            if (op == IoOp::kWrite) {
              (void)!::write(ready[1], "x", 1);
              ::pause();  // killed here: the temp file exists and is empty
            }
            return 0;
          };
        }
        write_record_file(record_path(dir.path(), key), bytes, system_clock()(), FsyncPolicy::kNone, faults);
        if (round == 0 && i == 1005) (void)!::write(ready[1], "x", 1);
      }
    }
    ::close(ready[1]);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    const int status = wait_child(child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  int64_t checked = 0;
  const auto bad = verify_store(dir.path(), &checked);
  EXPECT_TRUE(bad.empty()) << bad.front().path;
  EXPECT_GE(checked, 6 + 5);
  int64_t scratch = 0;
  for (const auto& f : scan_store(dir.path())) scratch += f.scratch;
  EXPECT_GE(scratch, 1) << "the second child was stopped with its temp file open";
  StoreOptions o;
  o.dir = dir.path();
  BlockStore store(o);
  EXPECT_FALSE(store.load(LoadRequest{test_key(2005), block_tokens(test_key(2005))}).get().hit());
  EXPECT_TRUE(store.load(LoadRequest{test_key(2004), block_tokens(test_key(2004))}).get().hit());
  // Two hours later the temp files are garbage (older than the 1 h limit); the records are not.
  GcOptions gc;
  gc.scratch_max_age_ns = kHour;
  const int64_t later = system_clock()() + 2 * kHour;
  const auto r = collect_garbage(dir.path(), gc, [later] { return later; });
  EXPECT_EQ(r.scratch_removed, scratch);
  EXPECT_EQ(r.expired, 0);
  EXPECT_EQ(r.records_left, checked);
}

// Two processes collect the same directory at once: every expired record is removed exactly once (the
// removals they report add up), every live one stays.
TEST(KvProcesses, TwoCollectorsAtOnce) {
  TempDir dir;
  constexpr uint64_t kRecords = 200;
  FakeClock clock;
  write_keys(dir.path(), 0, kRecords, 1024);
  for (uint64_t i = 0; i < kRecords; ++i) {
    // Even records used 8 days ago (expired for both classes), odd ones an hour ago.
    ASSERT_EQ(set_mtime(record_path(dir.path(), test_key(i)), clock.now() - (i % 2 ? kHour : 8 * kDay)), 0);
  }
  int go[2], results[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(results), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      char x;
      if (::read(go[0], &x, 1) != 1) ::_exit(2);
      const auto r = collect_garbage(dir.path(), GcOptions{}, [&] { return clock.now(); });
      const int64_t removed = r.expired;
      ::_exit(::write(results[1], &removed, sizeof(removed)) == sizeof(removed) ? 0 : 3);
    }
    children.push_back(pid);
  }
  ASSERT_EQ(::write(go[1], "xx", 2), 2);  // both start together
  int64_t total = 0;
  for (int c = 0; c < 2; ++c) {
    int64_t removed = 0;
    ASSERT_EQ(::read(results[0], &removed, sizeof(removed)), static_cast<ssize_t>(sizeof(removed)));
    total += removed;
  }
  for (pid_t pid : children) {
    const int status = wait_child(pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (int fd : {go[0], go[1], results[0], results[1]}) ::close(fd);
  EXPECT_EQ(total, static_cast<int64_t>(kRecords / 2));
  for (uint64_t i = 0; i < kRecords; ++i) {
    EXPECT_EQ(std::filesystem::exists(record_path(dir.path(), test_key(i))), i % 2 == 1) << i;
  }
  for (const auto& f : scan_store(dir.path())) EXPECT_FALSE(f.scratch) << f.path;
}

// A container whose seccomp profile forbids io_uring (Docker's default does): made here with a filter
// that fails io_uring_setup with EPERM, in a child process. The store must fall back to pread threads
// and still read.
TEST(KvProcesses, FallsBackToPreadWhenIoUringIsForbidden) {
#if defined(__NR_io_uring_setup) && defined(__x86_64__)
  TempDir dir;
  write_keys(dir.path(), 0, 3, 1024);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      ::_exit(3);
    }
    StoreOptions o;
    o.dir = dir.path();  // read_backend kAuto
    BlockStore store(o);
    if (std::string(store.read_backend_name()) != "pread threads") ::_exit(4);
    for (uint64_t i = 0; i < 3; ++i) {
      if (!store.load(LoadRequest{test_key(i), block_tokens(test_key(i))}).get().hit()) ::_exit(5);
    }
    ::_exit(0);
  }
  const int status = wait_child(child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "seccomp filters not permitted here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "4: did not fall back to pread, 5: a load missed";
#else
  GTEST_SKIP() << "the seccomp filter here is written for x86-64";
#endif
}

}  // namespace
}  // namespace dsinfer::kvstore
