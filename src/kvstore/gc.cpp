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
  std::vector<StoreFile> live;
  for (auto& f : scan_store(dir)) {
    if (f.scratch) {
      if (now - f.mtime_ns > options.scratch_max_age_ns && ::unlink(f.path.c_str()) == 0) ++report.scratch_removed;
      continue;
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
      if (vanished) continue;
      ttl = cls ? options.ttl.ttl(*cls) : 0;  // an unreadable header: a reader would reject it anyway
    }
    if (age > ttl) {
      const bool removed = remove_if_still(f.path, [&](int64_t mtime) { return now - mtime > ttl; });
      if (removed) {
        ++report.expired;
        report.bytes_removed += f.size;
        continue;
      }
      // Refreshed (kept) or already removed by another collector: counted below only if still there.
      if (::access(f.path.c_str(), F_OK) != 0) continue;
    }
    live.push_back(std::move(f));
  }

  int64_t bytes = 0;
  for (const auto& f : live) bytes += f.size;
  if (options.capacity_bytes > 0 &&
      static_cast<double>(bytes) > options.high_watermark * static_cast<double>(options.capacity_bytes)) {
    const auto target = static_cast<int64_t>(options.low_watermark * static_cast<double>(options.capacity_bytes));
    // Least recently used first; the key breaks ties so concurrent collectors pick the same victims.
    std::sort(live.begin(), live.end(), [](const StoreFile& a, const StoreFile& b) {
      return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.key < b.key;
    });
    for (auto& f : live) {
      if (bytes <= target) break;
      // Evict only if nobody used it since the scan; a used record stays and a later pass picks others.
      const int64_t seen = f.mtime_ns;
      if (remove_if_still(f.path, [&](int64_t mtime) { return mtime <= seen; })) {
        ++report.evicted;
        report.bytes_removed += f.size;
        bytes -= f.size;
        f.size = -1;
      } else if (::access(f.path.c_str(), F_OK) != 0) {
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
