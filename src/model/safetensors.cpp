#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsinfer::model {
namespace {

using core::DType;

// The official library refuses headers above 100 MB; real V4 shard headers are a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBF16, "BF16", 2},   {DType::kF16, "F16", 2},   {DType::kF32, "F32", 4},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E8M0, "F8_E8M0", 1}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},       {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},
    {DType::kBool, "BOOL", 1},
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string errno_text() { return std::strerror(errno); }

// a * b into *out; true when the product wraps or exceeds limit.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t limit, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out) || *out > limit;
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return dtype == DType::kFP4E2M1 ? "FP4_E2M1(packed)" : "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  core::fail("dtype ", dtype_name(dtype), " has no whole-byte element size in safetensors");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- reader ----------------------------------------------------------------------------------

SafetensorsLayout parse_safetensors(std::span<const uint8_t> bytes, const std::string& f) {
  const uint64_t file_size = bytes.size();
  DSINFER_CHECK(file_size >= 8, "safetensors ", f, ": file is ", file_size,
                " bytes, shorter than the 8-byte header length (truncated or not a safetensors file)");
  SafetensorsLayout out;
  const uint64_t header_len = read_le64(bytes.data());
  DSINFER_CHECK(header_len <= file_size - 8, "safetensors ", f, ": header length ", header_len,
                " goes beyond the end of the file (", file_size, " bytes; truncated or not a safetensors file)");
  DSINFER_CHECK(header_len <= kMaxHeaderBytes, "safetensors ", f, ": header length ", header_len,
                " exceeds the 100 MB limit of the format");
  DSINFER_CHECK(header_len >= 2, "safetensors ", f, ": header length ", header_len, " is too short for JSON");
  out.data_start = 8 + header_len;
  const uint64_t data_size = file_size - out.data_start;

  const char* hb = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hb, hb + header_len);
  } catch (const nlohmann::json::exception& e) {
    core::fail("safetensors ", f, ": corrupt JSON header: ", e.what());
  }
  DSINFER_CHECK(header.is_object(), "safetensors ", f, ": JSON header is not an object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      DSINFER_CHECK(v.is_object(), "safetensors ", f, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        DSINFER_CHECK(m.value().is_string(), "safetensors ", f, ": __metadata__ value of '", m.key(),
                      "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = core::str_cat("safetensors ", f, ": tensor '", name, "'");
    DSINFER_CHECK(v.is_object(), where, ": entry is not an object");
    DSINFER_CHECK(v.contains("dtype") && v["dtype"].is_string(), where, ": missing or non-string \"dtype\"");
    DSINFER_CHECK(v.contains("shape") && v["shape"].is_array(), where, ": missing or non-array \"shape\"");
    DSINFER_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
                  where, ": \"data_offsets\" must be an array [begin, end]");
    TensorView t;
    t.name = name;
    const std::string dname = v["dtype"].get<std::string>();
    const auto dtype = dtype_from_name(dname);
    DSINFER_CHECK(dtype.has_value(), where, ": unknown dtype \"", dname, "\"");
    t.dtype = *dtype;
    // The element count and byte size are bounded by the data buffer, so neither can wrap. The product is
    // also bounded over the non-zero dims: shape_numel() and every later product of a prefix of the dims
    // (in int64) then cannot overflow either, even when a 0 makes the tensor empty.
    uint64_t numel = 1, nonzero_numel = 1;
    for (const auto& d : v["shape"]) {
      DSINFER_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
                    ": shape entries must be non-negative integers, got ", d.dump());
      const uint64_t dim = d.get<uint64_t>();
      DSINFER_CHECK(!mul_overflows(nonzero_numel, std::max<uint64_t>(dim, 1), data_size, &nonzero_numel), where,
                    ": shape ", v["shape"].dump(), " has more elements than the ", data_size,
                    " data bytes of the file can hold");
      numel *= dim;  // <= nonzero_numel
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const auto& o : v["data_offsets"]) {
      DSINFER_CHECK(o.is_number_unsigned() || (o.is_number_integer() && o.get<int64_t>() >= 0), where,
                    ": data_offsets must be non-negative integers, got ", v["data_offsets"].dump());
    }
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>();
    const uint64_t end = v["data_offsets"][1].get<uint64_t>();
    DSINFER_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] are reversed");
    DSINFER_CHECK(end <= data_size, where, ": data_offsets [", begin, ", ", end, "] go beyond the ", data_size,
                  " data bytes of the file (truncated file?)");
    uint64_t expected = 0;
    DSINFER_CHECK(!mul_overflows(numel, dtype_size(t.dtype), data_size, &expected), where, ": shape ",
                  shape_string(t.shape), " x ", dtype_size(t.dtype), " bytes of ", dname, " exceeds the ", data_size,
                  " data bytes of the file");
    DSINFER_CHECK(end - begin == expected, where, ": byte size ", end - begin, " != ", expected, " = shape ",
                  shape_string(t.shape), " x ", dtype_size(t.dtype), " bytes of ", dname);
    t.nbytes = end - begin;
    t.file_offset = out.data_start + begin;
    out.tensors.push_back(std::move(t));
  }

  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorView& a, const TensorView& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
  });
  uint64_t cursor = out.data_start;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    const TensorView& t = out.tensors[i];
    if (t.file_offset < cursor) {
      core::fail("safetensors ", f, ": tensors '", out.tensors[i - 1].name, "' and '", t.name,
                 "' overlap (data_offsets ", out.tensors[i - 1].file_offset - out.data_start, "..",
                 cursor - out.data_start, " and ", t.file_offset - out.data_start, "..",
                 t.file_offset - out.data_start + t.nbytes, ")");
    }
    DSINFER_CHECK(t.file_offset == cursor, "safetensors ", f, ": hole of ", t.file_offset - cursor,
                  " bytes in the data buffer before tensor '", t.name, "'");
    cursor = t.file_offset + t.nbytes;
  }
  DSINFER_CHECK(cursor == file_size, "safetensors ", f, ": ", file_size - cursor,
                " bytes after the last tensor are not covered by any tensor");
  return out;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const std::string& f = path_;
  fd_ = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  DSINFER_CHECK(fd_ >= 0, "safetensors ", f, ": cannot open: ", errno_text());
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd_);
    core::fail("safetensors ", f, ": cannot stat: ", why);
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  try {
    DSINFER_CHECK(S_ISREG(st.st_mode), "safetensors ", f, ": not a regular file");
    DSINFER_CHECK(file_size_ >= 8, "safetensors ", f, ": file is ", file_size_,
                  " bytes, shorter than the 8-byte header length (truncated or not a safetensors file)");
    void* m = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    DSINFER_CHECK(m != MAP_FAILED, "safetensors ", f, ": mmap failed: ", errno_text());
    map_ = static_cast<const uint8_t*>(m);

    SafetensorsLayout layout = parse_safetensors(std::span<const uint8_t>(map_, file_size_), f);
    data_start_ = layout.data_start;
    metadata_ = std::move(layout.metadata);
    tensors_ = std::move(layout.tensors);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].file = &path_;
      tensors_[i].data = map_ + tensors_[i].file_offset;
      index_.emplace(tensors_[i].name, i);
    }
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), file_size_);
    ::close(fd_);
    throw;
  }
  ::close(fd_);  // the mapping stays valid
  fd_ = -1;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), file_size_);
}

void SafetensorsFile::release(uint64_t begin, uint64_t end) const {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  end = std::min(end, file_size_);
  // Whole pages only: a partial page at either end may hold bytes of a neighbour still in use.
  begin = (begin + page - 1) / page * page;
  end = end / page * page;
  if (map_ == nullptr || begin >= end) return;
  // Advice only: a failure leaves the pages resident, which costs memory but not correctness.
  ::madvise(const_cast<uint8_t*>(map_) + begin, end - begin, MADV_DONTNEED);
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::get(std::string_view name) const {
  const TensorView* t = find(name);
  DSINFER_CHECK(t != nullptr, "safetensors ", path_, ": no tensor '", name, "'");
  return *t;
}

// ---- writer --------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Entry> entries,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), entries_(std::move(entries)) {
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(entries_[a].dtype) > dtype_size(entries_[b].dtype);
  });
  nbytes_.resize(entries_.size());
  offsets_.resize(entries_.size());
  written_.assign(entries_.size(), 0);

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::vector<uint64_t> rel(entries_.size());
  uint64_t cursor = 0;
  for (size_t i : order) {
    const Entry& e = entries_[i];
    DSINFER_CHECK(!e.name.empty() && e.name != "__metadata__", "safetensors writer ", path_, ": bad tensor name '",
                  e.name, "'");
    DSINFER_CHECK(!header.contains(e.name), "safetensors writer ", path_, ": duplicate tensor '", e.name, "'");
    for (int64_t d : e.shape) {
      DSINFER_CHECK(d >= 0, "safetensors writer ", path_, ": tensor '", e.name, "' has negative dim");
    }
    nbytes_[i] = static_cast<size_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
    rel[i] = cursor;
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {cursor, cursor + nbytes_[i]}}};
    cursor += nbytes_[i];
  }
  data_bytes_ = cursor;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  data_start_ = 8 + text.size();
  for (size_t i = 0; i < entries_.size(); ++i) offsets_[i] = data_start_ + rel[i];

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DSINFER_CHECK(fd_ >= 0, "safetensors writer ", path_, ": cannot create: ", errno_text());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::string head(reinterpret_cast<const char*>(len), 8);
  head += text;
  for (size_t done = 0; done < head.size();) {
    const ssize_t n = ::pwrite(fd_, head.data() + done, head.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    DSINFER_CHECK(n > 0, "safetensors writer ", path_, ": write failed: ", errno_text());
    done += static_cast<size_t>(n);
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(path_.c_str());
}

void SafetensorsWriter::write(size_t i, const void* data, size_t nbytes) {
  DSINFER_CHECK(i < entries_.size(), "safetensors writer ", path_, ": tensor index ", i, " out of range");
  DSINFER_CHECK(nbytes == nbytes_[i], "safetensors writer ", path_, ": tensor '", entries_[i].name, "' needs ",
                nbytes_[i], " bytes, got ", nbytes);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < nbytes;) {
    const ssize_t n = ::pwrite(fd_, p + done, nbytes - done, static_cast<off_t>(offsets_[i] + done));
    if (n < 0 && errno == EINTR) continue;
    DSINFER_CHECK(n > 0, "safetensors writer ", path_, ": writing tensor '", entries_[i].name,
                  "' failed: ", errno_text());
    done += static_cast<size_t>(n);
  }
  written_[i] = 1;
}

void SafetensorsWriter::finish() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    DSINFER_CHECK(written_[i] || nbytes_[i] == 0, "safetensors writer ", path_, ": tensor '", entries_[i].name,
                  "' was never written");
  }
  // Sizes the file even when the last tensors are empty.
  DSINFER_CHECK(::ftruncate(fd_, static_cast<off_t>(total_bytes())) == 0, "safetensors writer ", path_,
                ": ftruncate failed: ", errno_text());
  DSINFER_CHECK(::close(fd_) == 0, "safetensors writer ", path_, ": close failed: ", errno_text());
  fd_ = -1;
  finished_ = true;
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w(path, std::move(entries), metadata);
  for (size_t i = 0; i < tensors.size(); ++i) w.write(i, tensors[i].bytes.data(), tensors[i].bytes.size());
  w.finish();
}

}  // namespace dsinfer::model
