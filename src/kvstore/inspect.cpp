#include "kvstore/inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "kvstore/file_ops.h"

namespace dsinfer::kvstore {

namespace {

// Reads up to `limit` bytes of a file; false when it cannot be opened (vanished).
bool read_prefix(const std::string& path, size_t limit, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->assign(limit, 0);
  size_t done = 0;
  while (done < limit) {
    const ssize_t n = ::pread(fd, out->data() + done, limit - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(done);
  return true;
}

}  // namespace

StoreSummary summarize_store(const std::string& dir) {
  StoreSummary s;
  std::vector<uint8_t> header;
  for_each_store_file(dir, [&](const StoreFile& f) {
    if (f.scratch) {
      ++s.scratch_files;
      s.scratch_bytes += f.size;
      return;
    }
    if (!read_prefix(f.path, kRecordHeaderBytes, &header)) return;
    ++s.records;
    s.bytes += f.size;
    s.oldest_mtime_ns = s.records == 1 ? f.mtime_ns : std::min(s.oldest_mtime_ns, f.mtime_ns);
    s.newest_mtime_ns = s.records == 1 ? f.mtime_ns : std::max(s.newest_mtime_ns, f.mtime_ns);
    RecordHeader h;
    if (parse_header(header, &h) != RecordStatus::kOk) {
      ++s.bad_headers;
      return;
    }
    auto& c = s.per_class[static_cast<size_t>(h.traffic_class)];
    ++c.records;
    c.bytes += f.size;
  });
  return s;
}

std::vector<BadRecord> verify_store(const std::string& dir, int64_t* records_checked,
                                    const std::function<void(const BadRecord&)>& on_bad) {
  std::vector<BadRecord> bad;
  int64_t checked = 0;
  std::vector<uint8_t> bytes;
  // One byte past the largest valid record, so an oversized file is reported rather than read whole.
  const auto limit = static_cast<size_t>(kRecordHeaderBytes + uint64_t{kMaxRecordTokens} * 4 + kMaxRecordPayloadBytes + 1);
  for_each_store_file(dir, [&](const StoreFile& f) {
    if (f.scratch) return;
    if (!read_prefix(f.path, std::min(static_cast<size_t>(f.size) + 1, limit), &bytes)) return;
    ++checked;
    RecordView view;
    RecordStatus status = parse_record(bytes, &view);
    if (status == RecordStatus::kOk && view.header.key != f.key) status = RecordStatus::kWrongKey;
    if (status != RecordStatus::kOk) {
      bad.push_back({f.path, status});
      if (on_bad) on_bad(bad.back());
    }
  });
  if (records_checked) *records_checked = checked;
  return bad;
}

}  // namespace dsinfer::kvstore
