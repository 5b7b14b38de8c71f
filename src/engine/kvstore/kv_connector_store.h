// The KV connector over src/kvstore: full blocks go to (and come from) the persistent BlockStore, a
// directory that any number of processes and machines may share; window snapshots go to the in-RAM
// SwaPool (never to disk). One connector may serve several engines over the same model. With a GC
// interval it also runs the store's collector on a timer thread (TTLs, capacity watermarks); several
// processes collecting one directory at once is safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/kv_connector.h"
#include "kvstore/block_store.h"
#include "kvstore/swa_pool.h"

namespace dsinfer::engine {

struct StoreConnectorOptions {
  kvstore::StoreOptions store;  // store.dir: the store directory (created when missing, with a warning)
  kvstore::SwaPoolOptions pool;  // pool.capacity_bytes 0: no pool
  int64_t gc_interval_ns = 0;    // 0: no collector thread
  int64_t gc_capacity_bytes = 0; // the collector's cap (0: TTLs only)
};

// RequestSpec::traffic_class to the store's class: "agent" is agent, everything else chat (the longer TTL).
kvstore::TrafficClass traffic_class_of(const std::string& name);

class StoreConnector final : public KvConnector {
 public:
  explicit StoreConnector(StoreConnectorOptions options);
  ~StoreConnector() override;

  void save_block(const KvBlockName& name, std::vector<uint8_t> bytes, const std::string& traffic_class) override;
  void load(std::vector<KvBlockName> blocks, KvLoadCallback done) override;
  void save_snapshot(uint64_t key, std::shared_ptr<const WindowSnapshot> snapshot) override;
  std::shared_ptr<const WindowSnapshot> find_snapshot(uint64_t key) override;
  void add_metrics(std::map<std::string, double>& extra) const override;

  kvstore::BlockStore& store() { return *store_; }
  kvstore::SwaPool<WindowSnapshot>* pool() { return pool_.get(); }

 private:
  void gc_loop();

  StoreConnectorOptions options_;
  std::unique_ptr<kvstore::BlockStore> store_;
  std::unique_ptr<kvstore::SwaPool<WindowSnapshot>> pool_;
  std::mutex gc_mu_;
  std::condition_variable gc_cv_;
  bool stopping_ = false;
  std::thread gc_thread_;
};

}  // namespace dsinfer::engine
