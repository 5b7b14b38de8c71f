// safetensors files: a memory-mapped reader with strict validation, and a writer.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
// then the data buffer; offsets are relative to the buffer, which must be covered exactly (no holes, no
// overlaps), as the official library requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtypes.h"

namespace dsinfer::model {

// safetensors dtype names ("BF16", "F8_E4M3", ...). Only the dtypes a V4 checkpoint can hold are known:
// BF16 F16 F32 F8_E4M3 F8_E8M0 I8 U8 I32 I64 BOOL (FP4 has no safetensors dtype: it is stored as I8).
std::string_view dtype_name(core::DType dtype);
std::optional<core::DType> dtype_from_name(std::string_view name);
size_t dtype_size(core::DType dtype);  // bytes per element; fails for kFP4E2M1

std::string shape_string(const std::vector<int64_t>& shape);  // "[2048, 4096]"
int64_t shape_numel(const std::vector<int64_t>& shape);

// One tensor of an open file. Data stays valid while its SafetensorsFile lives.
struct TensorView {
  std::string name;
  core::DType dtype = core::DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  uint64_t file_offset = 0;  // absolute position of the first byte in the file
  const std::string* file = nullptr;

  int64_t numel() const { return shape_numel(shape); }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }
};

// What the header of a safetensors file says, validated against the file's size: tensors in data order,
// with file_offset and nbytes set (data and file left null). Throws core::Error (invalid input) naming
// `source` (and the tensor) on any problem; every size and offset is checked without wrap-around.
struct SafetensorsLayout {
  uint64_t data_start = 0;
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> metadata;
};
SafetensorsLayout parse_safetensors(std::span<const uint8_t> file_bytes, const std::string& source);

class SafetensorsFile {
 public:
  // Maps and validates the file; throws core::Error naming the file (and tensor) on any problem.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return data_start_; }  // 8 + header length
  // In data order (ascending offsets).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;  // fails naming file and tensor

  // Drops the whole pages of file bytes [begin, end) (absolute offsets, clamped to the file) from this
  // process's resident memory. The mapping is private and never written, so a later read faults the
  // bytes in again from the file: only the resident size changes. For bytes the caller has copied
  // (repacked weights), so that a weight is not resident twice.
  void release(uint64_t begin, uint64_t end) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file. The layout is fixed at construction: data ordered by element size (8, 4, 2,
// 1 bytes) and then in the given order, so every tensor is aligned to its element size; the JSON header is
// padded with spaces to a multiple of 8 bytes. Tensors may then be written in any order and from several
// threads (positioned writes); finish() checks that every tensor was written.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    core::DType dtype;
    std::vector<int64_t> shape;
  };

  SafetensorsWriter(std::string path, std::vector<Entry> entries, std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // closes; a file that was not finish()ed is removed
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  size_t size() const { return entries_.size(); }
  const Entry& entry(size_t i) const { return entries_[i]; }
  size_t nbytes(size_t i) const { return nbytes_[i]; }
  uint64_t total_bytes() const { return data_start_ + data_bytes_; }

  // Writes tensor i (exactly nbytes(i) bytes). Thread-safe for distinct i.
  void write(size_t i, const void* data, size_t nbytes);
  void finish();

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<Entry> entries_;
  std::vector<size_t> nbytes_;
  std::vector<uint64_t> offsets_;  // absolute file offsets
  std::vector<uint8_t> written_;
  uint64_t data_start_ = 0;
  uint64_t data_bytes_ = 0;
  bool finished_ = false;
};

// Convenience for small files (tests): tensors held in memory.
struct TensorData {
  std::string name;
  core::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace dsinfer::model
