// KV block store throughput: write-behind puts (until flushed), loads through each read back end, and a
// plain sequential read of the same files for comparison (what the checks and the async machinery cost).
// The page cache is not dropped: on a warm cache this measures the store's own overhead, not the disk.
// Usage: bench_kvstore DIR [records] [payload KiB]   (DIR should be empty or absent; it is filled)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <vector>

#include "kvstore/block_store.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsinfer::kvstore;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_kvstore DIR [records] [payload KiB]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int records = argc > 2 ? std::atoi(argv[2]) : 1000;
  const size_t payload_bytes = (argc > 3 ? std::atoll(argv[3]) : 100) << 10;
  auto key_of = [](int i) { return (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull; };
  std::vector<int32_t> tokens(128, 7);
  std::vector<uint8_t> payload(payload_bytes, 0x5a);
  const double mb = static_cast<double>(records) * static_cast<double>(payload_bytes) / 1e6;

  {
    StoreOptions o;
    o.dir = dir;
    o.max_queued_writes = static_cast<size_t>(records);
    o.max_queued_bytes = int64_t{records} * static_cast<int64_t>(payload_bytes + 1024);
    BlockStore store(o);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < records; ++i) store.put(key_of(i), tokens, payload, TrafficClass::kChat);
    const double queued = seconds_since(t0);
    store.flush();
    const double total = seconds_since(t0);
    std::printf("write: %d records x %zu KiB: %.1f MB/s (puts returned after %.3f s; %lld written, %lld dropped)\n",
                records, payload_bytes >> 10, mb / total, queued,
                static_cast<long long>(store.stats().records_written.load()),
                static_cast<long long>(store.stats().dropped_writes.load()));
  }
  for (ReadBackend backend : {ReadBackend::kUring, ReadBackend::kPread}) {
    StoreOptions o;
    o.dir = dir;
    o.read_backend = backend;
    BlockStore store(o);
    std::latch done(records);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<LoadRequest> batch;
    for (int i = 0; i < records; ++i) batch.push_back(LoadRequest{key_of(i), tokens});
    store.load_batch(std::move(batch), [&](LoadResult) { done.count_down(); });
    done.wait();
    const double s = seconds_since(t0);
    std::printf("read (%s): %.1f MB/s, %lld hits, mean latency %.2f ms\n", store.read_backend_name(), mb / s,
                static_cast<long long>(store.stats().hits.load()),
                static_cast<double>(store.stats().load_latency_ns.load()) / 1e6 / records);
  }
  {
    std::vector<uint8_t> buf(payload_bytes + 4096);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < records; ++i) {
      const int fd = ::open(record_path(dir, key_of(i)).c_str(), O_RDONLY);
      if (fd < 0) continue;
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
      ::close(fd);
    }
    std::printf("raw sequential read of the same files: %.1f MB/s\n", mb / seconds_since(t0));
  }
  return 0;
}
