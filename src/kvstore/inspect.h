// Read-only views of a store directory for `dsinfer kvstore stat|verify`.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvstore/config.h"
#include "kvstore/record.h"

namespace dsinfer::kvstore {

struct StoreSummary {
  struct PerClass {
    int64_t records = 0;
    int64_t bytes = 0;
  };
  int64_t records = 0;
  int64_t bytes = 0;
  std::array<PerClass, kTrafficClasses> per_class{};
  int64_t bad_headers = 0;  // records whose header does not parse (not in per_class)
  int64_t oldest_mtime_ns = 0, newest_mtime_ns = 0;  // last use; 0 without records
  int64_t scratch_files = 0, scratch_bytes = 0;
};
// Reads every record's header (64 bytes each), not the payloads.
StoreSummary summarize_store(const std::string& dir);

struct BadRecord {
  std::string path;
  RecordStatus status;
};
// Reads and checks every record in full (checksums, and the key against the file name). `on_bad`, when
// given, is called for each bad record as it is found. Records removed during the walk are skipped.
std::vector<BadRecord> verify_store(const std::string& dir, int64_t* records_checked,
                                    const std::function<void(const BadRecord&)>& on_bad = {});

}  // namespace dsinfer::kvstore
