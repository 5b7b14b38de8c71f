#include "kvstore/file_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <thread>

namespace dsinfer::kvstore {

namespace {

int injected(const IoFaults& faults, IoOp op, const std::string& path) { return faults ? faults(op, path) : 0; }

std::string hex(uint64_t v, int digits) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(digits, '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

bool is_hex_dir_name(const char* name) {
  auto hexc = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return name[0] && name[1] && !name[2] && hexc(name[0]) && hexc(name[1]);
}

struct timespec to_timespec(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / kNsPerSecond);
  ts.tv_nsec = static_cast<long>(ns % kNsPerSecond);
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += kNsPerSecond;
    ts.tv_sec -= 1;
  }
  return ts;
}

int write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * kNsPerSecond + st.st_mtim.tv_nsec;
}

std::string record_dir(const std::string& dir, uint64_t key) {
  return dir + "/" + hex(key >> 56, 2) + "/" + hex((key >> 48) & 0xff, 2);
}

std::string record_path(const std::string& dir, uint64_t key) {
  return record_dir(dir, key) + "/" + hex(key, 16) + ".kv";
}

bool parse_record_name(const std::string& name, uint64_t* key) {
  if (name.size() != 19 || name.compare(16, 3, ".kv") != 0) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *key = v;
  return true;
}

bool is_scratch_name(const std::string& name) {
  return name.rfind(kTempPrefix, 0) == 0 || name.rfind(kGcPrefix, 0) == 0;
}

// The host name joins pid, thread and counter: machines sharing a directory may reuse each other's pids.
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    std::string t;
    for (const char* c = name; *c && t.size() < 32; ++c) {
      const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-';
      t.push_back(ok ? *c : '_');
    }
    return t.empty() ? std::string("host") : t;
  }();
  return tag;
}

std::string unique_scratch_name(const std::string& directory, const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  const size_t tid = std::hash<std::thread::id>()(std::this_thread::get_id());
  return directory + "/" + prefix + host_tag() + "." + std::to_string(::getpid()) + "." + hex(tid, 16) + "." +
         std::to_string(counter.fetch_add(1));
}

namespace {
// Leaf first, parents only on ENOENT: one metadata operation in the common case (on a shared file
// system every operation is a round trip).
int make_dirs_from_leaf(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return 0;
  const int err = errno;
  if (err == EEXIST) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  }
  const size_t slash = path.rfind('/');
  if (err != ENOENT || slash == std::string::npos || slash == 0) return err;
  if (int e = make_dirs_from_leaf(path.substr(0, slash))) return e;
  return ::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST ? 0 : errno;
}
}  // namespace

int make_dirs(const std::string& path, const IoFaults& faults) {
  if (int e = injected(faults, IoOp::kMkdir, path)) return e;
  return make_dirs_from_leaf(path);
}

int write_record_file(const std::string& final_path, std::span<const uint8_t> bytes, int64_t mtime_ns,
                      FsyncPolicy fsync, const IoFaults& faults) {
  const std::string directory = final_path.substr(0, final_path.rfind('/'));
  const std::string temp = unique_scratch_name(directory, kTempPrefix);
  if (int e = injected(faults, IoOp::kCreateTemp, temp)) return e;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = injected(faults, IoOp::kWrite, temp);
  if (!err) err = write_all(fd, bytes.data(), bytes.size());
  if (!err && fsync != FsyncPolicy::kNone && ::fdatasync(fd) != 0) err = errno;
  if (!err) {
    const struct timespec times[2] = {to_timespec(mtime_ns), to_timespec(mtime_ns)};
    if (::futimens(fd, times) != 0) err = errno;
  }
  if (::close(fd) != 0 && !err) err = errno;
  if (!err) err = injected(faults, IoOp::kRename, final_path);
  if (!err && ::rename(temp.c_str(), final_path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(temp.c_str());
    return err;
  }
  if (fsync == FsyncPolicy::kDataAndDir) {
    const int dfd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return 0;
}

int set_mtime(const std::string& path, int64_t mtime_ns) {
  // atime is left alone (UTIME_OMIT): only mtime carries meaning here.
  struct timespec times[2] = {{0, UTIME_OMIT}, to_timespec(mtime_ns)};
  return ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0 ? 0 : errno;
}

int set_mtime_fd(int fd, int64_t mtime_ns) {
  struct timespec times[2] = {{0, UTIME_OMIT}, to_timespec(mtime_ns)};
  return ::futimens(fd, times) == 0 ? 0 : errno;
}

bool remove_if_still(const std::string& path, const std::function<bool(int64_t)>& still_wanted) {
  const std::string directory = path.substr(0, path.rfind('/'));
  const std::string taken = unique_scratch_name(directory, kGcPrefix);
  if (::rename(path.c_str(), taken.c_str()) != 0) return false;  // ENOENT: another collector took it
  struct stat st;
  if (::stat(taken.c_str(), &st) == 0 && !still_wanted(mtime_ns_of(st))) {
    // Refreshed since the scan: put it back unless a writer has stored a new copy meanwhile.
    if (::renameat2(AT_FDCWD, taken.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return false;
    if (errno == EINVAL || errno == ENOSYS) {  // file systems without RENAME_NOREPLACE
      if (::link(taken.c_str(), path.c_str()) != 0 && errno != EEXIST) return false;  // leave it for a later GC
    }
    ::unlink(taken.c_str());
    return false;
  }
  return ::unlink(taken.c_str()) == 0;
}

void remove_if_same_file(const std::string& path, dev_t dev, ino_t ino) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino) ::unlink(path.c_str());
}

void for_each_store_file(const std::string& dir, const std::function<void(const StoreFile&)>& visit) {
  auto list_dirs = [](const std::string& path) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(path.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (is_hex_dir_name(e->d_name)) names.emplace_back(e->d_name);
      }
      ::closedir(d);
    }
    return names;
  };
  for (const auto& a : list_dirs(dir)) {
    for (const auto& b : list_dirs(dir + "/" + a)) {
      const std::string leaf = dir + "/" + a + "/" + b;
      std::vector<std::string> names;
      if (DIR* d = ::opendir(leaf.c_str())) {
        while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
        ::closedir(d);
      }
      // The listing is read completely before any file is visited: visitors remove and rename files.
      for (auto& name : names) {
        StoreFile f;
        f.name = std::move(name);
        f.scratch = is_scratch_name(f.name);
        if (!f.scratch && !parse_record_name(f.name, &f.key)) continue;
        f.path = leaf + "/" + f.name;
        struct stat st;
        if (::stat(f.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        f.size = st.st_size;
        f.mtime_ns = mtime_ns_of(st);
        f.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * kNsPerSecond + st.st_ctim.tv_nsec;
        visit(f);
      }
    }
  }
}

std::vector<StoreFile> scan_store(const std::string& dir) {
  std::vector<StoreFile> out;
  for_each_store_file(dir, [&](const StoreFile& f) { out.push_back(f); });
  return out;
}

}  // namespace dsinfer::kvstore
