#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace dsinfer::model {
namespace {

using core::DType;
using testing::error_of;
using testing::TempDir;

std::vector<uint8_t> pattern(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * 7);
  return v;
}

// A file made by hand: 8-byte little-endian length + header text + data.
std::string raw_file(const std::string& header, const std::string& data, int64_t claimed_len = -1) {
  const uint64_t n = claimed_len < 0 ? header.size() : static_cast<uint64_t>(claimed_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

TEST(Safetensors, DtypeNamesAndSizes) {
  const std::pair<const char*, size_t> expected[] = {{"BF16", 2}, {"F16", 2}, {"F32", 4},  {"F8_E4M3", 1},
                                                     {"F8_E8M0", 1}, {"I8", 1}, {"U8", 1}, {"I32", 4},
                                                     {"I64", 8},  {"BOOL", 1}};
  for (auto [name, size] : expected) {
    auto d = dtype_from_name(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(dtype_name(*d), name);
    EXPECT_EQ(dtype_size(*d), size) << name;
  }
  EXPECT_FALSE(dtype_from_name("F64").has_value());
  EXPECT_FALSE(dtype_from_name("bf16").has_value());  // names are case sensitive
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  std::vector<TensorData> tensors = {
      {"one.byte", DType::kU8, {3}, pattern(3, 1)},            // odd sizes first in the list
      {"w.bf16", DType::kBF16, {2, 3}, pattern(12, 2)},
      {"w.f16", DType::kF16, {5}, pattern(10, 3)},
      {"w.f32", DType::kF32, {1, 3}, pattern(12, 4)},
      {"w.fp8", DType::kF8E4M3, {4, 2}, pattern(8, 5)},
      {"w.scale", DType::kF8E8M0, {1, 1}, pattern(1, 6)},
      {"w.i8", DType::kI8, {7}, pattern(7, 7)},
      {"w.i32", DType::kI32, {2}, pattern(8, 8)},
      {"tid2eid", DType::kI64, {3, 2}, pattern(48, 9)},
      {"flags", DType::kBool, {2}, {0, 1}},
      {"empty", DType::kF32, {0, 4}, {}},
      {"scalar", DType::kF32, {}, pattern(4, 10)},
  };
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x"}});

  // Header layout, checked on the raw bytes: length multiple of 8, space padding, valid JSON.
  const std::string raw = testing::read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = raw.substr(8, n);
  EXPECT_NE(header.back(), '\0');
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["w.fp8"]["dtype"], "F8_E4M3");

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), raw.size());
  EXPECT_EQ(f.metadata().at("note"), "x");
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const auto& t : tensors) {
    const TensorView& v = f.get(t.name);
    EXPECT_EQ(v.name, t.name);
    EXPECT_EQ(v.dtype, t.dtype) << t.name;
    EXPECT_EQ(v.shape, t.shape) << t.name;
    EXPECT_EQ(v.nbytes, t.bytes.size()) << t.name;
    EXPECT_EQ(*v.file, path);
    EXPECT_EQ(0, t.bytes.empty() ? 0 : std::memcmp(v.data, t.bytes.data(), t.bytes.size())) << t.name;
    // The writer orders data by element size, so every tensor is aligned to its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype), 0u) << t.name;
    EXPECT_EQ(raw.substr(v.file_offset, v.nbytes), std::string(t.bytes.begin(), t.bytes.end())) << t.name;
  }
  EXPECT_EQ(f.find("nope"), nullptr);
  const std::string msg = error_of([&] { f.get("layers.0.nope"); });
  EXPECT_NE(msg.find("layers.0.nope"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Safetensors, ReadsHeaderWithoutPaddingOrMetadata) {
  TempDir dir;
  const std::string path = dir.file("b.safetensors");
  testing::write_bytes(path, raw_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\1')));
  SafetensorsFile f(path);
  EXPECT_EQ(f.get("x").numel(), 2);
  EXPECT_TRUE(f.metadata().empty());
}

struct BadFile {
  const char* test;
  std::string bytes;
  std::vector<std::string> expect;  // substrings of the message
};

TEST(Safetensors, BadFilesGiveClearErrors) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<BadFile> cases = {
      {"shorter than 8 bytes", "abc", {"shorter than the 8-byte header length"}},
      {"header length beyond file", raw_file("{}", "", 4096), {"header length 4096", "beyond the end of the file"}},
      {"corrupt JSON", raw_file(R"({"a":{"dtype":"F32",)", ""), {"corrupt JSON header"}},
      {"JSON not an object", raw_file("[1, 2]  ", ""), {"not an object"}},
      {"unknown dtype", raw_file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
       {"tensor 'w'", "unknown dtype \"F64\""}},
      {"missing dtype", raw_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"tensor 'w'", "\"dtype\""}},
      {"negative shape", raw_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", std::string(1, '\0')),
       {"tensor 'w'", "non-negative"}},
      {"offsets beyond data (truncated)",
       raw_file("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", std::string(12, '\0')),
       {"tensor 'b'", "beyond the 12 data bytes", "truncated"}},
      {"reversed offsets", raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", std::string(4, '\0')),
       {"tensor 'w'", "reversed"}},
      {"byte size vs shape", raw_file(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       {"tensor 'w'", "byte size 8 != 6"}},
      {"overlapping tensors",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                std::string(12, '\0')),
       {"'a'", "'b'", "overlap"}},
      {"hole in the data",
       raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                std::string(12, '\0')),
       {"hole of 4 bytes", "'b'"}},
      {"trailing bytes", raw_file("{" + ok_entry + "}", std::string(10, '\0')), {"2 bytes after the last tensor"}},
      {"metadata not strings", raw_file(R"({"__metadata__":{"format":1}})", ""), {"__metadata__", "'format'"}},
      {"data_offsets malformed", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", std::string(1, '\0')),
       {"tensor 'w'", "data_offsets"}},
  };
  TempDir dir;
  for (const auto& c : cases) {
    const std::string path = dir.file("bad.safetensors");
    testing::write_bytes(path, c.bytes);
    const std::string msg = error_of([&] { SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << c.test << ": message does not name the file: " << msg;
    for (const auto& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.test << ": '" << e << "' not in: " << msg;
  }
}

// Sizes a hostile header could make wrap around: every product and offset is checked, so each of these is
// refused with a message naming the tensor instead of being accepted with a wrong (wrapped) size.
TEST(Safetensors, HostileSizesDoNotWrap) {
  const std::vector<BadFile> cases = {
      // 2^31 x 2^31 F32 = 2^64 bytes, which wraps to 0 and so matched the empty data_offsets.
      {"shape product x dtype size wraps to 0",
       raw_file(R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", ""),
       {"tensor 'w'", "more elements than the 0 data bytes"}},
      {"elements fit, bytes do not", raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"tensor 'w'", "x 4 bytes of F32 exceeds the 4 data bytes"}},
      {"shape product wraps", raw_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""),
       {"tensor 'w'", "more elements than the 0 data bytes"}},
      {"dim beyond int64", raw_file(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}})",
                                    std::string(1, '\0')),
       {"tensor 'w'", "more elements"}},
      {"empty tensor with an absurd dim", raw_file(R"({"w":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", ""),
       {"tensor 'w'", "more elements"}},
      {"huge end offset", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})",
                                   std::string(1, '\0')),
       {"tensor 'w'", "beyond the 1 data bytes"}},
      {"offsets as floats", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0.0,1.5]}})", std::string(1, '\0')),
       {"tensor 'w'", "non-negative integers"}},
      {"header length near 2^63", raw_file("{}", "", std::numeric_limits<int64_t>::max()),
       {"header length 9223372036854775807", "beyond the end"}},
  };
  TempDir dir;
  for (const auto& c : cases) {
    const std::string path = dir.file("hostile.safetensors");
    testing::write_bytes(path, c.bytes);
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << c.test << ": accepted";
    } catch (const core::Error& e) {
      EXPECT_EQ(e.kind(), core::ErrorKind::kInvalidInput) << c.test;
      const std::string msg = e.what();
      for (const auto& x : c.expect) EXPECT_NE(msg.find(x), std::string::npos) << c.test << ": '" << x << "' not in: " << msg;
    }
  }
}

// The header parser works on bytes in memory too (what the fuzz target feeds it).
TEST(Safetensors, ParsesBytesInMemory) {
  const std::string bytes = raw_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\1'));
  const auto layout = parse_safetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "mem");
  ASSERT_EQ(layout.tensors.size(), 1u);
  EXPECT_EQ(layout.tensors[0].nbytes, 8u);
  EXPECT_EQ(layout.tensors[0].file_offset, bytes.size() - 8);
  EXPECT_EQ(layout.data_start, bytes.size() - 8);
}

TEST(Safetensors, TruncatedRealFileNamesTheTensor) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  write_safetensors(path, {{"first", DType::kF32, {4}, pattern(16, 1)}, {"last", DType::kF32, {4}, pattern(16, 2)}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("'last'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Safetensors, MissingFile) {
  const std::string msg = error_of([] { SafetensorsFile f("/nonexistent/dir/x.safetensors"); });
  EXPECT_NE(msg.find("/nonexistent/dir/x.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(SafetensorsWriter, RejectsMistakes) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  EXPECT_NE(error_of([&] {
              SafetensorsWriter w(path, {{"a", DType::kF32, {1}}, {"a", DType::kF32, {1}}});
            }).find("duplicate tensor 'a'"),
            std::string::npos);
  {
    SafetensorsWriter w(path, {{"a", DType::kF32, {2}}, {"b", DType::kU8, {1}}});
    const std::string wrong = error_of([&] { w.write(0, "1234", 4); });
    EXPECT_NE(wrong.find("'a' needs 8 bytes, got 4"), std::string::npos) << wrong;
    w.write(0, "12345678", 8);
    const std::string unwritten = error_of([&] { w.finish(); });
    EXPECT_NE(unwritten.find("'b' was never written"), std::string::npos) << unwritten;
  }
  // A writer that never finished removes its partial file.
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsWriter, OutOfOrderWritesGiveTheSameFile) {
  TempDir dir;
  const std::vector<SafetensorsWriter::Entry> entries = {{"a", DType::kBF16, {3}}, {"b", DType::kI64, {1}}, {"c", DType::kU8, {5}}};
  const auto a = pattern(6, 1), b = pattern(8, 2), c = pattern(5, 3);
  {
    SafetensorsWriter w(dir.file("1.safetensors"), entries);
    w.write(0, a.data(), a.size());
    w.write(1, b.data(), b.size());
    w.write(2, c.data(), c.size());
    w.finish();
  }
  {
    SafetensorsWriter w(dir.file("2.safetensors"), entries);
    w.write(2, c.data(), c.size());
    w.write(0, a.data(), a.size());
    w.write(1, b.data(), b.size());
    w.finish();
  }
  EXPECT_EQ(testing::read_bytes(dir.file("1.safetensors")), testing::read_bytes(dir.file("2.safetensors")));
}

TEST(Safetensors, ReleasedBytesReadTheSameAgain) {
  // release() drops resident pages of the private mapping; a later read must fault in the file's bytes
  // (not zero pages, which MADV_DONTNEED gives on anonymous memory).
  TempDir dir;
  const std::string path = dir.file("r.safetensors");
  const auto a = pattern(5 * 4096 + 123, 9), b = pattern(3 * 4096, 4);
  write_safetensors(path, {{"a", DType::kU8, {static_cast<int64_t>(a.size())}, a},
                           {"b", DType::kU8, {static_cast<int64_t>(b.size())}, b}});
  SafetensorsFile f(path);
  const TensorView& ta = f.get("a");
  const TensorView& tb = f.get("b");
  ASSERT_EQ(std::memcmp(ta.data, a.data(), a.size()), 0);
  f.release(ta.file_offset, ta.file_offset + ta.nbytes);
  f.release(f.file_size() - 10, f.file_size() + 100000);  // clamped; less than a page: nothing
  EXPECT_EQ(std::memcmp(ta.data, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(tb.data, b.data(), b.size()), 0);
  f.release(0, f.file_size());
  EXPECT_EQ(std::memcmp(ta.data, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(tb.data, b.data(), b.size()), 0);
  EXPECT_EQ(f.get("a").shape, std::vector<int64_t>{static_cast<int64_t>(a.size())});
}

}  // namespace
}  // namespace dsinfer::model
