#include "engine/kvstore/kv_connector_store.h"

#include <chrono>
#include <unordered_map>

#include "core/log.h"

namespace dsinfer::engine {

kvstore::TrafficClass traffic_class_of(const std::string& name) {
  return kvstore::parse_traffic_class(name).value_or(kvstore::TrafficClass::kChat);
}

StoreConnector::StoreConnector(StoreConnectorOptions options) : options_(std::move(options)) {
  store_ = std::make_unique<kvstore::BlockStore>(options_.store);
  if (options_.pool.capacity_bytes > 0) pool_ = std::make_unique<kvstore::SwaPool<WindowSnapshot>>(options_.pool);
  if (options_.gc_interval_ns > 0) gc_thread_ = std::thread([this] { gc_loop(); });
}

StoreConnector::~StoreConnector() {
  {
    std::lock_guard<std::mutex> lock(gc_mu_);
    stopping_ = true;
  }
  gc_cv_.notify_all();
  if (gc_thread_.joinable()) gc_thread_.join();
  store_.reset();  // finishes queued writes and submitted reads (their callbacks run now)
}

void StoreConnector::gc_loop() {
  std::unique_lock<std::mutex> lock(gc_mu_);
  while (!gc_cv_.wait_for(lock, std::chrono::nanoseconds(options_.gc_interval_ns), [&] { return stopping_; })) {
    lock.unlock();
    try {
      const kvstore::GcReport r = store_->collect_garbage(options_.gc_capacity_bytes);
      DSINFER_LOG_INFO("kvstore: gc of ", store_->dir(), ": ", r.expired, " expired, ", r.evicted, " evicted, ",
                       r.records_left, " records (", r.bytes_left, " bytes) left");
    } catch (...) {
      DSINFER_LOG_WARN("kvstore: gc of ", store_->dir(), " failed");
    }
    if (pool_) pool_->expire();
    lock.lock();
  }
}

void StoreConnector::save_block(const KvBlockName& name, std::vector<uint8_t> bytes, const std::string& traffic_class) {
  store_->put(name.key, name.tokens, std::move(bytes), traffic_class_of(traffic_class), name.parent);
}

void StoreConnector::load(std::vector<KvBlockName> blocks, KvLoadCallback done) {
  // One batch per prompt; the answers come back by key, in any order.
  auto index = std::make_shared<std::unordered_map<uint64_t, size_t>>();
  std::vector<kvstore::LoadRequest> requests;
  requests.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    index->emplace(blocks[i].key, i);
    requests.push_back({blocks[i].key, std::move(blocks[i].tokens), blocks[i].parent});
  }
  store_->load_batch(std::move(requests), [index, done = std::move(done)](kvstore::LoadResult result) {
    auto it = index->find(result.key);
    if (it == index->end()) return;
    if (result.hit()) {
      done(it->second, true, result.payload());
    } else {
      done(it->second, false, {});
    }
  });
}

void StoreConnector::save_snapshot(uint64_t key, std::shared_ptr<const WindowSnapshot> snapshot) {
  if (!pool_ || !snapshot) return;
  const int64_t bytes = snapshot->bytes();
  pool_->put(key, std::move(snapshot), bytes);
}

std::shared_ptr<const WindowSnapshot> StoreConnector::find_snapshot(uint64_t key) {
  return pool_ ? pool_->get(key) : nullptr;
}

void StoreConnector::add_metrics(std::map<std::string, double>& extra) const {
  const kvstore::StoreStats& s = store_->stats();
  auto put = [&](const char* name, const std::atomic<int64_t>& v) {
    extra[name] = static_cast<double>(v.load(std::memory_order_relaxed));
  };
  put("kv_store_loads_total", s.loads);
  put("kv_store_hits_total", s.hits);
  put("kv_store_misses_total", s.misses);
  put("kv_store_rejected_total", s.rejected);
  put("kv_store_read_errors_total", s.read_errors);
  put("kv_store_read_bytes_total", s.bytes_read);
  put("kv_store_written_bytes_total", s.bytes_written);
  put("kv_store_records_written_total", s.records_written);
  put("kv_store_writes_existing_total", s.writes_existing);
  put("kv_store_dropped_writes_total", s.dropped_writes);
  put("kv_store_dropped_disabled_total", s.dropped_disabled);
  put("kv_store_write_errors_total", s.write_errors);
  put("kv_store_gc_expired_total", s.gc_expired);
  put("kv_store_gc_evicted_total", s.gc_evicted);
  put("kv_store_gc_scratch_removed_total", s.gc_scratch_removed);
  extra["kv_store_load_latency_seconds_total"] =
      static_cast<double>(s.load_latency_ns.load(std::memory_order_relaxed)) / 1e9;
  extra["kv_store_writes_enabled"] = store_->writes_enabled() ? 1.0 : 0.0;
  if (pool_) {
    const kvstore::SwaPoolStats& p = pool_->stats();
    put("swa_pool_entries", p.entries);
    put("swa_pool_bytes", p.bytes);
    put("swa_pool_hits_total", p.hits);
    put("swa_pool_misses_total", p.misses);
    put("swa_pool_expiries_total", p.expiries);
    put("swa_pool_evictions_total", p.evictions);
  }
}

}  // namespace dsinfer::engine
