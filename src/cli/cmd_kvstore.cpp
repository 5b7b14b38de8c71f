// `dsinfer kvstore stat|gc|verify DIR`: inspect and maintain a persistent KV block store directory
// (src/kvstore/README.md) from outside the server, e.g. from a cron job on one machine of the cluster.
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "kvstore/config.h"
#include "kvstore/gc.h"
#include "kvstore/inspect.h"

namespace dsinfer::cli {
namespace {

constexpr const char* kUsage =
    "usage: dsinfer kvstore stat DIR          records, bytes, per traffic class, oldest/newest use\n"
    "       dsinfer kvstore gc DIR [flags]    remove expired records, then evict LRU above the high watermark\n"
    "       dsinfer kvstore verify DIR        check every record in full; exit 1 if any is bad\n"
    "(dsinfer kvstore SUBCOMMAND --help for its flags)\n";

std::string format_time(int64_t ns) {
  if (ns == 0) return "-";
  const time_t t = static_cast<time_t>(ns / kvstore::kNsPerSecond);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Parses "SUB DIR [flags]" (DIR may be left out only for --help); returns false when the command is done.
bool parse(Args& args, int argc, char** argv, std::string* dir, int* exit_code) {
  // argv[0] = "kvstore", argv[1] = SUB, argv[2] = DIR unless it is a flag.
  const bool has_dir = argc >= 3 && std::strncmp(argv[2], "--", 2) != 0;
  if (!args.parse(has_dir ? argc - 2 : argc - 1, has_dir ? argv + 2 : argv + 1)) {
    *exit_code = args.exit_code();
    return false;
  }
  if (!has_dir) {
    std::fprintf(stderr, "dsinfer kvstore %s: missing DIR\n%s", argv[1], args.usage().c_str());
    *exit_code = 2;
    return false;
  }
  *dir = argv[2];
  return true;
}

int run_stat(int argc, char** argv) {
  Args args("kvstore stat DIR", "Summarizes a KV block store: records, bytes, per traffic class, last-use range.");
  std::string dir;
  int code = 0;
  if (!parse(args, argc, argv, &dir, &code)) return code;
  const auto s = kvstore::summarize_store(dir);
  std::printf("records %lld  bytes %lld\n", static_cast<long long>(s.records), static_cast<long long>(s.bytes));
  for (size_t c = 0; c < kvstore::kTrafficClasses; ++c) {
    std::printf("  %-6s records %lld  bytes %lld\n", kvstore::traffic_class_name(static_cast<kvstore::TrafficClass>(c)),
                static_cast<long long>(s.per_class[c].records), static_cast<long long>(s.per_class[c].bytes));
  }
  if (s.bad_headers) std::printf("  unreadable headers %lld (run verify)\n", static_cast<long long>(s.bad_headers));
  std::printf("oldest use %s  newest use %s\n", format_time(s.oldest_mtime_ns).c_str(),
              format_time(s.newest_mtime_ns).c_str());
  std::printf("scratch files %lld  bytes %lld\n", static_cast<long long>(s.scratch_files),
              static_cast<long long>(s.scratch_bytes));
  return 0;
}

int run_gc(int argc, char** argv) {
  Args args("kvstore gc DIR",
            "Removes expired records (TTL per traffic class since the last use), then the least recently used\n"
            "records while the store is above the high watermark, and temp files of writers that died.\n"
            "Safe to run from several processes or machines on one directory at once.");
  args.option("kv-store-bytes", "N", "capacity of the store, e.g. 500G (K/M/G/T = powers of 1024); 0: no cap", "0");
  args.option("kv-ttl", "SPEC", "TTL per traffic class since the last use (units s, m, h, d)", "agent=3d,chat=7d");
  args.option("high-watermark", "F", "evict when the records exceed this share of --kv-store-bytes", "0.95");
  args.option("low-watermark", "F", "evict down to this share of --kv-store-bytes", "0.85");
  args.option("scratch-age", "DURATION", "remove temp files older than this (left by killed writers)", "1h");
  std::string dir;
  int code = 0;
  if (!parse(args, argc, argv, &dir, &code)) return code;
  kvstore::GcOptions options;
  options.capacity_bytes = kvstore::parse_byte_size(args.get("kv-store-bytes"));
  options.ttl = kvstore::parse_ttl_policy(args.get("kv-ttl"));
  options.high_watermark = args.get_double("high-watermark");
  options.low_watermark = args.get_double("low-watermark");
  DSINFER_CHECK(options.low_watermark > 0 && options.low_watermark <= options.high_watermark &&
                    options.high_watermark <= 1,
                "dsinfer kvstore gc: need 0 < --low-watermark <= --high-watermark <= 1");
  options.scratch_max_age_ns = kvstore::parse_duration_ns(args.get("scratch-age"));
  const auto r = kvstore::collect_garbage(dir, options, kvstore::system_clock());
  std::printf("scanned %lld records (%lld bytes): expired %lld, evicted %lld, freed %lld bytes, temp files %lld; "
              "left %lld records (%lld bytes)\n",
              static_cast<long long>(r.records_scanned), static_cast<long long>(r.bytes_scanned),
              static_cast<long long>(r.expired), static_cast<long long>(r.evicted),
              static_cast<long long>(r.bytes_removed), static_cast<long long>(r.scratch_removed),
              static_cast<long long>(r.records_left), static_cast<long long>(r.bytes_left));
  return 0;
}

int run_verify(int argc, char** argv) {
  Args args("kvstore verify DIR",
            "Reads every record in full and checks its sizes, checksums and key; lists the bad ones and exits 1\n"
            "if there are any (it removes nothing: a reader removes a bad record when it meets it, or delete it).");
  std::string dir;
  int code = 0;
  if (!parse(args, argc, argv, &dir, &code)) return code;
  int64_t checked = 0;
  const auto bad = kvstore::verify_store(dir, &checked, [](const kvstore::BadRecord& b) {
    std::printf("BAD %s: %s\n", b.path.c_str(), kvstore::record_status_name(b.status));
  });
  std::printf("checked %lld records: %zu bad\n", static_cast<long long>(checked), bad.size());
  return bad.empty() ? 0 : 1;
}

int run_kvstore(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "stat") return run_stat(argc, argv);
  if (sub == "gc") return run_gc(argc, argv);
  if (sub == "verify") return run_verify(argc, argv);
  std::fprintf(sub == "--help" ? stdout : stderr, "%s", kUsage);
  return sub == "--help" ? 0 : 2;
}

}  // namespace

DSINFER_COMMAND("kvstore", "inspect and maintain a persistent KV block store: stat, gc, verify", run_kvstore);

}  // namespace dsinfer::cli
