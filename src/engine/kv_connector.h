// The KV connector: the engine's seam to KV state outside process memory (docs/ARCHITECTURE.md, Seams).
// The engine saves the full blocks it publishes to its prefix cache and the window snapshots it takes,
// and on admission asks for the blocks of a prompt that its memory does not hold. Every call returns at
// once: saves are write-behind (and may be dropped), loads answer through a callback on another thread,
// which the engine drains at the start of each step. Blocks travel as the model's export bytes
// (ModelRunner::export_block / import_block), so a connector never looks inside them.
// engine/kvstore/ implements it over the persistent block store and the SWA pool of src/kvstore.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"

namespace dsinfer::engine {

// One full block as the prefix cache names it.
struct KvBlockName {
  uint64_t key = 0;     // chain hash of the block (its prefix-cache node)
  uint64_t parent = 0;  // chain hash of the block before it, or the cache's root seed for block 0
  int64_t index = 0;    // block number in the sequence (positions index * block_tokens ..)
  std::vector<int32_t> tokens;
};

// The answer for blocks[i] of a load: `payload` is valid only during the call and empty on a miss.
using KvLoadCallback = std::function<void(size_t i, bool hit, std::span<const uint8_t> payload)>;

class KvConnector {
 public:
  virtual ~KvConnector() = default;

  // Queues the export bytes of a block the engine computed; never blocks (a full queue drops it).
  // `traffic_class` is RequestSpec::traffic_class ("agent", "chat", ...): it decides how long it is kept.
  virtual void save_block(const KvBlockName& name, std::vector<uint8_t> bytes, const std::string& traffic_class) = 0;
  // Starts reading `blocks`; `done` runs exactly once per block, on any thread, possibly before load()
  // returns. It must stay quick.
  virtual void load(std::vector<KvBlockName> blocks, KvLoadCallback done) = 0;

  // Window snapshots at block-aligned positions, by the key of the block that ends there (not persisted).
  virtual void save_snapshot(uint64_t key, std::shared_ptr<const WindowSnapshot> snapshot) = 0;
  virtual std::shared_ptr<const WindowSnapshot> find_snapshot(uint64_t key) = 0;

  // Counters and gauges for Engine::metrics().extra (names ending in _total are counters).
  virtual void add_metrics(std::map<std::string, double>& extra) const {
    (void)extra;
  }
};

}  // namespace dsinfer::engine
