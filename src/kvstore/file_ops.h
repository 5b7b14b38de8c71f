// The file-system layer of the store: where a record lives, the two-phase write, the TTL refresh, the
// race-safe removal, and a directory scan. Every call that touches the disk goes through an IoFaults
// hook first, so tests can inject ENOSPC/EIO (or block a writer) without a broken disk.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/clock.h"

namespace dsinfer::kvstore {

enum class IoOp { kMkdir, kCreateTemp, kWrite, kRename, kOpenRead, kRead, kRefresh };

// Returns 0 to let the operation run, or an errno value that the operation then fails with.
using IoFaults = std::function<int(IoOp op, const std::string& path)>;

// <dir>/<k0>/<k1>/<16 hex digits of key>.kv where k0, k1 are the key's two top bytes in hex: two levels
// of 256 fan-out keep directories small (a million records: about 16 per leaf directory) on any file system.
std::string record_dir(const std::string& dir, uint64_t key);
std::string record_path(const std::string& dir, uint64_t key);
// Parses "<16 hex>.kv"; false for anything else (temp files, foreign files).
bool parse_record_name(const std::string& name, uint64_t* key);
// Temp and GC-private names start with these prefixes; they live next to the final name.
constexpr const char* kTempPrefix = ".tmp.";
constexpr const char* kGcPrefix = ".gc.";
bool is_scratch_name(const std::string& name);

// A name no other thread, process or machine uses at the same time: prefix, host, pid, thread, counter.
std::string unique_scratch_name(const std::string& directory, const char* prefix);

// mkdir -p; returns 0 or errno.
int make_dirs(const std::string& path, const IoFaults& faults);

enum class FsyncPolicy {
  kNone,  // default: a crash may leave a partial file under the final name; readers reject it (size, checksums)
  kData,  // fdatasync the temp file before the rename
  kDataAndDir,  // also fsync the directory after the rename (the record survives power loss)
};

// Writes `bytes` to a fresh temp file in the final directory, stamps its mtime with `mtime_ns`, then
// renames it over the final name. Returns 0 or errno; on failure no temp file is left behind.
int write_record_file(const std::string& final_path, std::span<const uint8_t> bytes, int64_t mtime_ns,
                      FsyncPolicy fsync, const IoFaults& faults);

// Sets a file's mtime (its "last used" time) explicitly; 0 or errno.
int set_mtime(const std::string& path, int64_t mtime_ns);
int set_mtime_fd(int fd, int64_t mtime_ns);

// Removes `path` only if `still_wanted(mtime_ns)` holds AFTER the file was taken out of every other
// process's reach: it is renamed to a private name first (only one of several racing collectors wins
// the rename), its mtime is read again (a reader may have refreshed it just before), and it is put back
// when no longer wanted. Returns true when this call removed it.
bool remove_if_still(const std::string& path, const std::function<bool(int64_t mtime_ns)>& still_wanted);

// Removes `path` if it still is the file with this inode (a writer may have replaced it since).
void remove_if_same_file(const std::string& path, dev_t dev, ino_t ino);

struct StoreFile {
  std::string path;
  std::string name;
  bool scratch = false;  // a temp or GC-private file (not a record)
  uint64_t key = 0;      // records only
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // set by the kernel on create, write, rename, utimens: a scratch file's real age
};
// Visits the records and scratch files of a store one leaf directory at a time (files that vanish
// during the walk are skipped), so a walk over a billion records holds one directory listing at a time.
void for_each_store_file(const std::string& dir, const std::function<void(const StoreFile&)>& visit);
// The same as a list (tests, small stores).
std::vector<StoreFile> scan_store(const std::string& dir);

int64_t mtime_ns_of(const struct stat& st);

}  // namespace dsinfer::kvstore
