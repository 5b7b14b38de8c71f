// Compressed KV in blocks of `block_tokens` positions (model-v4.md §3.3): for every compressed layer,
// the block_tokens / ratio main entries whose groups lie in the block, and for CSA layers the indexer
// keys of the same entries. A block is written while its positions are processed and is immutable once
// full; full blocks are handed out as std::shared_ptr<const CompressedBlock> so sequences and the prefix
// cache can share them. Entry g of a layer with ratio r lives in block g·r / block_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/deepseek_v4/kv_codec.h"

namespace dsinfer::model::deepseek_v4 {

class BlockLayout {
 public:
  struct Part {
    int64_t layer = 0;       // backbone layer id
    int64_t ratio = 0;
    int64_t entries = 0;     // block_tokens / ratio
    bool has_keys = false;   // CSA: indexer keys
    size_t kv_offset = 0;    // byte offset of entry 0
    size_t key_offset = 0;
  };

  // ratios: compress ratio of every backbone layer (0 = no compressed state).
  BlockLayout(int64_t block_tokens, const std::vector<int64_t>& ratios, KvCodec kv, IndexKeyCodec key);

  int64_t block_tokens() const { return block_tokens_; }
  size_t bytes() const { return bytes_; }
  const std::vector<Part>& parts() const { return parts_; }
  int part_of_layer(int64_t layer) const { return layer_part_[layer]; }  // -1: no compressed state
  const KvCodec& kv() const { return kv_; }
  const IndexKeyCodec& key() const { return key_; }
  // Block size, ratios and storage formats in words; equal strings mean interchangeable blocks.
  const std::string& describe() const { return description_; }

 private:
  int64_t block_tokens_ = 0;
  size_t bytes_ = 0;
  std::vector<Part> parts_;
  std::vector<int> layer_part_;
  KvCodec kv_;
  IndexKeyCodec key_;
  std::string description_;
};

class CompressedBlock {
 public:
  CompressedBlock(std::shared_ptr<const BlockLayout> layout, int64_t index);
  CompressedBlock(const CompressedBlock& other);
  CompressedBlock& operator=(const CompressedBlock&) = delete;

  // The stored form (e.g. for a KV store): a checksummed frame (framed_bytes.h) holding the block index,
  // the layout's describe() string and the entries.
  std::vector<uint8_t> serialize() const;
  // Rebuilds block `index` from serialize() bytes of a block with the same layout. Checks the frame
  // (magic, version, checksum), the index, the layout and the size before copying anything; a mismatch
  // or corrupt bytes are a core::Error (invalid input).
  static std::shared_ptr<const CompressedBlock> from_bytes(std::shared_ptr<const BlockLayout> layout, int64_t index,
                                                           std::span<const uint8_t> bytes);

  int64_t index() const { return index_; }  // covers positions [index·block_tokens, (index+1)·block_tokens)
  const BlockLayout& layout() const { return *layout_; }
  const std::shared_ptr<const BlockLayout>& layout_ptr() const { return layout_; }
  // The entries in memory (layout().bytes() of them); serialize() is the form to store.
  std::span<const uint8_t> bytes() const { return {data_.get(), layout_->bytes()}; }
  std::span<uint8_t> mutable_bytes() { return {data_.get(), layout_->bytes()}; }

  const uint8_t* kv(int part, int64_t local) const { return data_.get() + kv_offset(part, local); }
  uint8_t* kv(int part, int64_t local) { return data_.get() + kv_offset(part, local); }
  const uint8_t* key(int part, int64_t local) const { return data_.get() + key_offset(part, local); }
  uint8_t* key(int part, int64_t local) { return data_.get() + key_offset(part, local); }

 private:
  size_t kv_offset(int part, int64_t local) const {
    return layout_->parts()[part].kv_offset + static_cast<size_t>(local) * layout_->kv().bytes();
  }
  size_t key_offset(int part, int64_t local) const {
    return layout_->parts()[part].key_offset + static_cast<size_t>(local) * layout_->key().bytes();
  }
  std::shared_ptr<const BlockLayout> layout_;
  int64_t index_ = 0;
  std::unique_ptr<uint8_t[]> data_;
};

using BlockRef = std::shared_ptr<const CompressedBlock>;

}  // namespace dsinfer::model::deepseek_v4
