#include "model/deepseek_v4/compressed_block.h"

#include <cstring>

#include "core/error.h"
#include "model/deepseek_v4/framed_bytes.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

constexpr uint64_t kBlockMagic = 0x314b4c4234565344ull;  // "DSV4BLK1"
constexpr uint32_t kBlockVersion = 1;
// describe() is a few hundred bytes for V4 (one ratio per layer); anything near this is not a layout.
constexpr size_t kMaxDescriptionBytes = 1 << 16;

}  // namespace

BlockLayout::BlockLayout(int64_t block_tokens, const std::vector<int64_t>& ratios, KvCodec kv, IndexKeyCodec key)
    : block_tokens_(block_tokens), layer_part_(ratios.size(), -1), kv_(kv), key_(key) {
  description_ = core::str_cat("block ", block_tokens, " positions; kv ", kv.dim(), " dims ",
                               kv.fp8_nope() ? "fp8+e8m0" : "f32", " nope / ", kv.bf16_rope() ? "bf16" : "f32",
                               " rope; index keys ", key.dim(), " dims ", key.fp4() ? "fp4+e8m0" : "f32", "; ratios");
  size_t offset = 0;
  for (size_t l = 0; l < ratios.size(); ++l) {
    const int64_t r = ratios[l];
    description_ += core::str_cat(" ", r);
    if (r == 0) continue;
    DSINFER_CHECK(block_tokens % r == 0, "compress ratio ", r, " of layer ", l, " does not divide the block size ",
                  block_tokens);
    Part p;
    p.layer = static_cast<int64_t>(l);
    p.ratio = r;
    p.entries = block_tokens / r;
    p.has_keys = r == 4;
    p.kv_offset = offset;
    offset += static_cast<size_t>(p.entries) * kv.bytes();
    if (p.has_keys) {
      p.key_offset = offset;
      offset += static_cast<size_t>(p.entries) * key.bytes();
    }
    layer_part_[l] = static_cast<int>(parts_.size());
    parts_.push_back(p);
  }
  bytes_ = offset;
}

CompressedBlock::CompressedBlock(std::shared_ptr<const BlockLayout> layout, int64_t index)
    : layout_(std::move(layout)), index_(index), data_(new uint8_t[layout_->bytes() > 0 ? layout_->bytes() : 1]()) {}

CompressedBlock::CompressedBlock(const CompressedBlock& other)
    : layout_(other.layout_), index_(other.index_), data_(new uint8_t[layout_->bytes() > 0 ? layout_->bytes() : 1]) {
  std::memcpy(data_.get(), other.data_.get(), layout_->bytes());
}

std::vector<uint8_t> CompressedBlock::serialize() const {
  FrameWriter w(kBlockMagic, kBlockVersion);
  w.pod<int64_t>(index_);
  w.str(layout_->describe());
  w.pod<uint64_t>(layout_->bytes());
  w.raw(data_.get(), layout_->bytes());
  return w.finish();
}

std::shared_ptr<const CompressedBlock> CompressedBlock::from_bytes(std::shared_ptr<const BlockLayout> layout,
                                                                   int64_t index, std::span<const uint8_t> bytes) {
  FrameReader r(bytes, kBlockMagic, kBlockVersion, "compressed block");
  const auto stored_index = r.pod<int64_t>();
  DSINFER_CHECK(stored_index == index, "compressed block: the bytes hold block ", stored_index, ", block ", index,
                " was asked for");
  const std::string described = r.str(kMaxDescriptionBytes);
  DSINFER_CHECK(described == layout->describe(), "compressed block ", index, ": made for another layout (",
                described, "), this model's is (", layout->describe(), ")");
  const auto n = r.pod<uint64_t>();
  DSINFER_CHECK(n == layout->bytes(), "compressed block ", index, ": ", n, " entry bytes, the layout needs ",
                layout->bytes());
  const uint8_t* entries = r.take(layout->bytes());
  r.expect_done();
  auto block = std::make_shared<CompressedBlock>(std::move(layout), index);
  std::memcpy(block->data_.get(), entries, block->layout().bytes());
  return block;
}

}  // namespace dsinfer::model::deepseek_v4
