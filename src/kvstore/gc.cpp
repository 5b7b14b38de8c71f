#include "kvstore/gc.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "kvstore/file_ops.h"
#include "kvstore/record.h"

namespace dsinfer::kvstore {

namespace {

// The traffic class from a record's header; nullopt when the header is unreadable or invalid (ENOENT:
// removed meanwhile, which the caller treats like any other vanished file).
std::optional<TrafficClass> read_class(const std::string& path, bool* vanished) {
  *vanished = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *vanished = errno == ENOENT;
    return std::nullopt;
  }
  uint8_t header[kRecordHeaderBytes];
  const ssize_t n = ::pread(fd, header, sizeof(header), 0);
  ::close(fd);
  RecordHeader h;
  if (n != static_cast<ssize_t>(sizeof(header)) || parse_header({header, sizeof(header)}, &h) != RecordStatus::kOk) {
    return std::nullopt;
  }
  return h.traffic_class;
}

}  // namespace

GcReport collect_garbage(const std::string& dir, const GcOptions& options, const Clock& clock, StoreStats* stats) {
  GcReport report;
  const int64_t now = clock();
  // What eviction needs of each surviving record: 24 bytes, so a store of 10^8 records costs 2.4 GB
  // of collector memory at most (the path is rebuilt from the key).
  struct Live {
    int64_t mtime_ns;
    uint64_t key;
    int64_t size;
  };
  std::vector<Live> live;
  for_each_store_file(dir, [&](const StoreFile& f) {
    if (f.scratch) {
      // By ctime too: a record another collector has just renamed to .gc.* keeps its old mtime, and
      // removing it under that collector would only make it count the removal wrong.
      const int64_t touched = std::max(f.mtime_ns, f.ctime_ns);
      if (now - touched > options.scratch_max_age_ns && ::unlink(f.path.c_str()) == 0) ++report.scratch_removed;
      return;
    }
    ++report.records_scanned;
    report.bytes_scanned += f.size;
    const int64_t age = now - f.mtime_ns;
    // Only records older than the shortest TTL can be expired, and only those younger than the longest
    // need their class: most of a busy store is never opened by the collector.
    int64_t ttl = options.ttl.max_ttl();
    if (age > options.ttl.min_ttl() && age <= options.ttl.max_ttl()) {
      bool vanished = false;
      const auto cls = read_class(f.path, &vanished);
      if (vanished) return;
      ttl = cls ? options.ttl.ttl(*cls) : 0;  // an unreadable header: a reader would reject it anyway
    }
    if (age > ttl) {
      if (remove_if_still(f.path, [&](int64_t mtime) { return now - mtime > ttl; })) {
        ++report.expired;
        report.bytes_removed += f.size;
        return;
      }
      // Refreshed (kept) or already removed by another collector: counted below only if still there.
      if (::access(f.path.c_str(), F_OK) != 0) return;
    }
    live.push_back(Live{f.mtime_ns, f.key, f.size});
  });

  int64_t bytes = 0;
  for (const auto& f : live) bytes += f.size;
  if (options.capacity_bytes > 0 &&
      static_cast<double>(bytes) > options.high_watermark * static_cast<double>(options.capacity_bytes)) {
    const auto target = static_cast<int64_t>(options.low_watermark * static_cast<double>(options.capacity_bytes));
    // Least recently used first; the key breaks ties so concurrent collectors pick the same victims.
    std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) {
      return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.key < b.key;
    });
    for (auto& f : live) {
      if (bytes <= target) break;
      // Evict only if nobody used it since the scan; a used record stays and a later pass picks others.
      const int64_t seen = f.mtime_ns;
      const std::string path = record_path(dir, f.key);
      if (remove_if_still(path, [&](int64_t mtime) { return mtime <= seen; })) {
        ++report.evicted;
        report.bytes_removed += f.size;
        bytes -= f.size;
        f.size = -1;
      } else if (::access(path.c_str(), F_OK) != 0) {
        bytes -= f.size;  // another collector evicted it
        f.size = -1;
      }
    }
  }
  for (const auto& f : live) {
    if (f.size < 0) continue;
    ++report.records_left;
    report.bytes_left += f.size;
  }
  if (stats) {
    stats->gc_expired.fetch_add(report.expired, std::memory_order_relaxed);
    stats->gc_evicted.fetch_add(report.evicted, std::memory_order_relaxed);
    stats->gc_scratch_removed.fetch_add(report.scratch_removed, std::memory_order_relaxed);
  }
  return report;
}

}  // namespace dsinfer::kvstore
